//! The ledger on a stepped clock set on the calendar: what moved between looks lands in the
//! hour it was looked at in, hours add up to days, pages follow one another, and the bounds
//! drop the oldest hours.

use std::sync::Arc;

use super::*;
use crate::budget::{ManualClock, Scope};
use crate::config::TenantConfig;
use crate::tenant::{Directory, Tenant};

/// 2027-07-01 00:00:00 UTC.
const JULY: u64 = 1_814_400_000;

fn tenants(ids: &[&str]) -> Arc<Tenants> {
    let configs: Vec<TenantConfig> = ids
        .iter()
        .map(|id| TenantConfig {
            id: (*id).into(),
            topics: vec!["events.*".into()],
            ..TenantConfig::default()
        })
        .collect();
    Arc::new(Tenants::new(
        Directory::from_configs(&configs).expect("valid"),
    ))
}

fn tenant(t: &Tenants, id: &str) -> Arc<Tenant> {
    t.load().get(id).expect("tenant").clone()
}

fn ledger(t: &Arc<Tenants>, clock: &Arc<ManualClock>, settings: Settings) -> Ledger {
    Ledger::new(t.clone(), clock.clone(), Calendar::default(), settings)
}

const ROOMY: Settings = Settings {
    tick: std::time::Duration::from_secs(10),
    retention_hours: 48,
    max_rows: 1_000,
};

fn all(from: i64, to: i64, granularity: Granularity) -> Query {
    Query {
        tenant: None,
        from,
        to,
        granularity,
        after: None,
        limit: 100,
    }
}

#[test]
fn what_moved_between_looks_lands_in_the_hour_it_was_looked_at_in() {
    let t = tenants(&["acme", "idle"]);
    let clock = Arc::new(ManualClock::at_unix_s(JULY + 59 * 60));
    let l = ledger(&t, &clock, ROOMY);
    let acme = tenant(&t, "acme");
    acme.stats().admitted(10, 1_000);
    acme.stats().admitted(5, 500);
    acme.stats().failed(2);
    acme.stats().delivered(13);
    let quota = Reason::Quota(Scope::Tenant);
    acme.stats().rejected(quota);
    acme.stats().decided(3, 300, Some(quota), true);
    l.tick();
    clock.advance_ms(120_000); // into the next hour
    acme.stats().admitted(1, 100);
    l.tick();
    let first = l.row("acme", JULY as i64).expect("00:00");
    assert_eq!(
        first.admitted,
        Flow {
            requests: 2,
            records: 15,
            bytes: 1_500
        }
    );
    assert_eq!((first.failed_records, first.delivered_records), (2, 13));
    assert_eq!(
        first.refused,
        vec![(
            quota,
            Flow {
                requests: 1,
                records: 3,
                bytes: 300
            }
        )]
    );
    let second = l.row("acme", JULY as i64 + 3_600).expect("01:00");
    assert_eq!(second.admitted.records, 1);
    assert!(second.refused.is_empty());
    // A tenant that did nothing has no row.
    assert!(l.row("idle", JULY as i64).is_none());
}

#[test]
fn hours_add_up_to_days_and_pages_follow_one_another() {
    let t = tenants(&["a", "b", "c"]);
    let clock = Arc::new(ManualClock::at_unix_s(JULY));
    let l = ledger(&t, &clock, ROOMY);
    // Three hours of the first day and one of the second, for each tenant.
    for hour in [0u64, 5, 23, 24] {
        let at = JULY + hour * 3_600;
        let step = at - clock.unix_s();
        clock.advance_ms(step * 1_000);
        for id in ["a", "b", "c"] {
            tenant(&t, id).stats().admitted(1, 10);
        }
        l.tick();
    }
    let day = JULY as i64;
    let (rows, more) = l.query(&all(day, day + 2 * 86_400, Granularity::Day));
    assert!(!more);
    let firsts: Vec<(i64, &str, u64)> = rows
        .iter()
        .map(|r| (r.start, &*r.tenant, r.row.admitted.records))
        .collect();
    assert_eq!(
        firsts,
        [
            (day, "a", 3),
            (day, "b", 3),
            (day, "c", 3),
            (day + 86_400, "a", 1),
            (day + 86_400, "b", 1),
            (day + 86_400, "c", 1)
        ]
    );
    assert_eq!(rows[0].end, day + 86_400);
    // Hours, two at a time: every row once, in order.
    let mut q = all(day, day + 2 * 86_400, Granularity::Hour);
    q.limit = 2;
    let mut seen = Vec::new();
    loop {
        let (page, more) = l.query(&q);
        let last = page.last().map(|r| (r.start, r.tenant.to_string()));
        seen.extend(page.into_iter().map(|r| (r.start, r.tenant.to_string())));
        if !more {
            break;
        }
        q.after = last;
    }
    assert_eq!(seen.len(), 12);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    // One tenant, one day.
    let mut only_b = all(day, day + 86_400, Granularity::Day);
    only_b.tenant = Some("b".into());
    let (rows, _) = l.query(&only_b);
    assert_eq!(rows.len(), 1);
    assert_eq!((&*rows[0].tenant, rows[0].row.admitted.records), ("b", 3));
}

#[test]
fn the_oldest_hours_go_first_past_the_retention_or_the_row_bound() {
    let t = tenants(&["a", "b"]);
    let clock = Arc::new(ManualClock::at_unix_s(JULY));
    let l = ledger(
        &t,
        &clock,
        Settings {
            retention_hours: 3,
            max_rows: 5,
            ..ROOMY
        },
    );
    for _ in 0..4 {
        for id in ["a", "b"] {
            tenant(&t, id).stats().admitted(1, 1);
        }
        l.tick();
        clock.advance_ms(3_600_000);
    }
    // 8 rows made; 5 kept: the first hour's two and one of the second's went.
    let (rows, _) = l.query(&all(0, i64::MAX, Granularity::Hour));
    assert_eq!(rows.len(), 5);
    assert!(l.row("a", JULY as i64).is_none());
    assert!(l.row("b", JULY as i64 + 3 * 3_600).is_some());
    // Past the retention: what is older than 3 hours goes at the next look.
    clock.advance_ms(2 * 3_600_000);
    l.tick();
    let (rows, _) = l.query(&all(0, i64::MAX, Granularity::Hour));
    assert!(
        rows.iter().all(|r| r.start >= JULY as i64 + 3 * 3_600),
        "{rows:?}"
    );
}
