//! Calendar quotas in admission, on a stepped clock: whole or nothing with every other limit,
//! a refusal that charges nothing and names the reset, a change that keeps what was used.

use std::sync::Arc;
use std::time::Duration;

use super::{Admission, Blocked};
use crate::budget::{BudgetSpec, Clock, GlobalBudget, ManualClock, Scope};
use crate::buffer::Buffer;
use crate::config::{QuotaConfig, TenantConfig, WindowName};
use crate::quota::{Calendar, Window};
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal};
use crate::tenant::{Tenant, TenantSettings};

/// 2027-03-31 23:59:00 UTC: a minute before a month, a day and an hour all turn.
const BEFORE_APRIL: u64 = 1_806_537_540;

fn config(quotas: Vec<QuotaConfig>) -> TenantConfig {
    TenantConfig {
        id: "a".into(),
        topics: vec!["*".into()],
        records_per_sec: Some(1_000),
        quotas,
        ..TenantConfig::default()
    }
}

fn day(records: u64) -> QuotaConfig {
    QuotaConfig {
        window: WindowName::Day,
        records: Some(records),
        bytes: None,
        mode: Default::default(),
    }
}

fn rig(unix_s: u64, calendar: Calendar) -> (Arc<ManualClock>, Admission) {
    let clock = Arc::new(ManualClock::at_unix_s(unix_s));
    let admission = Admission::new(
        clock.clone(),
        Arc::new(GlobalBudget::new(BudgetSpec::default())),
        Arc::new(Buffer::new(1 << 30, 1 << 20)),
    )
    .with_calendar(calendar);
    (clock, admission)
}

fn refusal(result: Result<crate::buffer::BufferLease, Blocked>) -> Refusal {
    match result {
        Err(Blocked::Denied(Denial::Refused(r))) => r,
        other => panic!("expected a 429 refusal, got {other:?}"),
    }
}

#[test]
fn a_used_up_day_refuses_until_midnight_and_charges_nothing() {
    let (clock, admission) = rig(BEFORE_APRIL, Calendar::default());
    let t = Tenant::from_config(&config(vec![day(10)])).expect("tenant");
    let (lease, view) = admission.admit(&t, Charge::new(8, 80));
    drop(lease.expect("within the quota"));
    let (_, item) = view.quotas[0].expect("the day quota is shown");
    assert_eq!(
        (item.window, item.limit, item.remaining),
        (Window::Day, 10, 2)
    );
    assert_eq!((item.window_s, item.reset_in_s), (86_400, 60));
    let tokens = |a: &Admission| a.view(&t).tenant.records.map(|b| b.available);
    let before = tokens(&admission);
    // Three more do not fit: refused whole, for the day, until midnight, and not charged.
    let refused = refusal(admission.admit(&t, Charge::new(3, 30)).0);
    assert_eq!(refused.reason, Reason::Quota(Scope::Tenant));
    assert_eq!(refused.reason.as_str(), "tenant_quota");
    assert_eq!(refused.quota, Some(Window::Day));
    assert_eq!(refused.retry_after, Duration::from_secs(60));
    assert_eq!(tokens(&admission), before, "a refusal costs no tokens");
    drop(
        admission
            .admit(&t, Charge::new(2, 20))
            .0
            .expect("the rest of the day"),
    );
    // The early check (before a body is read) refuses a used-up window too.
    assert_eq!(
        admission.precheck(&t, 100).expect_err("spent").reason,
        Reason::Quota(Scope::Tenant)
    );
    clock.advance_ms(60_000);
    drop(
        admission
            .admit(&t, Charge::new(10, 100))
            .0
            .expect("a new day"),
    );
}

#[test]
fn another_limit_refusing_leaves_the_quota_untouched() {
    let (_clock, admission) = rig(BEFORE_APRIL, Calendar::default());
    let mut c = config(vec![day(100)]);
    c.records_per_sec = Some(5);
    c.records_burst = Some(5);
    let t = Tenant::from_config(&c).expect("tenant");
    drop(admission.admit(&t, Charge::new(5, 5)).0.expect("the burst"));
    let r = refusal(admission.admit(&t, Charge::new(1, 1)).0);
    assert!(
        matches!(r.reason, Reason::Budget(Scope::Tenant, _)),
        "{r:?}"
    );
    let view = admission.view(&t);
    assert_eq!(view.quotas[0].expect("shown").1.remaining, 95);
}

#[test]
fn a_change_mid_window_keeps_what_the_window_used() {
    let (clock, admission) = rig(BEFORE_APRIL - 3_600, Calendar::default());
    let t = Tenant::from_config(&config(vec![day(10)])).expect("tenant");
    drop(admission.admit(&t, Charge::new(7, 7)).0.expect("within"));
    // Raised to 12: five more, not twelve.
    let raised = TenantSettings::parse(&config(vec![day(12)])).expect("settings");
    t.apply(&raised, clock.now_ns());
    assert!(admission.admit(&t, Charge::new(6, 6)).0.is_err());
    drop(
        admission
            .admit(&t, Charge::new(5, 5))
            .0
            .expect("the difference"),
    );
    // Lowered below the use: nothing more today.
    let lowered = TenantSettings::parse(&config(vec![day(3)])).expect("settings");
    t.apply(&lowered, clock.now_ns());
    let r = refusal(admission.admit(&t, Charge::new(1, 1)).0);
    assert_eq!(r.retry_after, Duration::from_secs(3_660));
}

#[test]
fn months_and_offsets_turn_where_the_calendar_says() {
    // +02:00: April starts at 22:00 UTC on 31 March, 1 h 59 min after BEFORE_APRIL - 2 h.
    let east = Calendar::with_offset(7_200).expect("offset");
    let (clock, admission) = rig(BEFORE_APRIL - 7_200, east);
    let month = QuotaConfig {
        window: WindowName::Month,
        records: None,
        bytes: Some(1_000),
        mode: Default::default(),
    };
    let t = Tenant::from_config(&config(vec![month])).expect("tenant");
    drop(
        admission
            .admit(&t, Charge::new(1, 1_000))
            .0
            .expect("March's bytes"),
    );
    let r = refusal(admission.admit(&t, Charge::new(1, 1)).0);
    assert_eq!(
        (r.quota, r.retry_after),
        (Some(Window::Month), Duration::from_secs(60))
    );
    clock.advance_ms(60_000);
    drop(
        admission
            .admit(&t, Charge::new(1, 1_000))
            .0
            .expect("April at +02:00"),
    );
}

/// A global day quota of `records` on `admission`'s global budget, in `mode`.
fn global_day(admission: &Admission, records: u64, shadow: bool) {
    let q = crate::quota::QuotaSpec {
        window: Window::Day,
        limit: crate::dimension::PerDimension {
            records: Some(records),
            bytes: None,
        },
        shadow,
    };
    admission.global.quotas.set_specs(Arc::from(vec![q]));
}

fn tenant(id: &str) -> Tenant {
    let mut c = config(Vec::new());
    c.id = id.into();
    Tenant::from_config(&c).expect("tenant")
}

#[test]
fn a_global_quota_counts_every_tenant_and_refuses_all_until_the_reset() {
    let (_clock, admission) = rig(BEFORE_APRIL, Calendar::default());
    global_day(&admission, 10, false);
    let (a, b) = (tenant("a"), tenant("b"));
    drop(admission.admit(&a, Charge::new(6, 6)).0.expect("a's six"));
    drop(admission.admit(&b, Charge::new(4, 4)).0.expect("b's four"));
    for t in [&a, &b] {
        let before = admission.view(t).tenant.records.map(|v| v.available);
        let r = refusal(admission.admit(t, Charge::new(1, 1)).0);
        assert_eq!(r.reason, Reason::Quota(Scope::Global));
        assert_eq!(r.reason.as_str(), "global_quota");
        assert_eq!(r.quota, Some(Window::Day));
        assert_eq!(r.retry_after, Duration::from_secs(60), "to midnight");
        let after = admission.view(t).tenant.records.map(|v| v.available);
        assert_eq!(after, before, "a refusal charges the tenant nothing");
    }
    // Checked before the body is read, too.
    assert_eq!(
        admission.precheck(&a, 1).expect_err("used up").reason,
        Reason::Quota(Scope::Global)
    );
    let used: Vec<_> = admission
        .global_quotas()
        .into_iter()
        .map(|(_, v)| (v.window, v.limit, v.remaining))
        .collect();
    assert_eq!(used, vec![(Window::Day, 10, 0)]);
}

#[test]
fn a_global_quota_in_shadow_mode_admits_and_counts_what_it_would_refuse() {
    let (_clock, admission) = rig(BEFORE_APRIL, Calendar::default());
    global_day(&admission, 10, true);
    let a = tenant("a");
    drop(admission.admit(&a, Charge::new(10, 10)).0.expect("ten"));
    drop(
        admission
            .admit(&a, Charge::new(3, 3))
            .0
            .expect("shadow: admitted"),
    );
    let shadowed = a.stats().shadowed_flow(Reason::Quota(Scope::Global));
    assert_eq!((shadowed.requests, shadowed.records), (1, 3));
    // Not charged: the window still holds the ten it took.
    assert_eq!(admission.global_quotas()[0].1.remaining, 0);
    assert_eq!(
        a.stats()
            .shadowed_flow(Reason::Quota(Scope::Tenant))
            .requests,
        0
    );
}

#[test]
fn a_request_another_limit_refuses_leaves_the_global_quota_untouched() {
    let (_clock, admission) = rig(BEFORE_APRIL, Calendar::default());
    global_day(&admission, 100, false);
    let mut c = config(Vec::new());
    c.records_per_sec = Some(5);
    c.records_burst = Some(5);
    let t = Tenant::from_config(&c).expect("tenant");
    drop(admission.admit(&t, Charge::new(5, 5)).0.expect("the burst"));
    let r = refusal(admission.admit(&t, Charge::new(1, 1)).0);
    assert!(
        matches!(r.reason, Reason::Budget(Scope::Tenant, _)),
        "{r:?}"
    );
    assert_eq!(admission.global_quotas()[0].1.remaining, 95);
}

#[test]
fn a_global_quota_in_shadow_mode_that_would_refuse_waives_the_tenants_shadow_quota() {
    let (_clock, admission) = rig(BEFORE_APRIL, Calendar::default());
    global_day(&admission, 5, true);
    let mut shadow_day = day(100);
    shadow_day.mode = crate::config::LimitMode::Shadow;
    let t = Tenant::from_config(&config(vec![shadow_day])).expect("tenant");
    drop(admission.admit(&t, Charge::new(5, 5)).0.expect("five"));
    // Enforced, the global quota would refuse the next three: so the tenant's quota in shadow
    // mode is not charged for them either.
    drop(
        admission
            .admit(&t, Charge::new(3, 3))
            .0
            .expect("shadow: admitted"),
    );
    assert_eq!(admission.view(&t).quotas[0].expect("shown").1.remaining, 95);
    let shadowed = t.stats().shadowed_flow(Reason::Quota(Scope::Global));
    assert_eq!((shadowed.requests, shadowed.records), (1, 3));
}

#[test]
fn a_quota_lowered_below_its_use_shows_the_use_not_the_limit() {
    let (clock, admission) = rig(BEFORE_APRIL, Calendar::default());
    global_day(&admission, 300, false);
    let t = Tenant::from_config(&config(vec![day(300)])).expect("tenant");
    drop(admission.admit(&t, Charge::new(200, 200)).0.expect("200"));
    global_day(&admission, 100, false);
    let lowered = TenantSettings::parse(&config(vec![day(100)])).expect("settings");
    t.apply(&lowered, clock.now_ns());
    let (_, global) = admission.global_quotas()[0];
    let (_, own) = admission.view(&t).quotas[0].expect("shown");
    for v in [global, own] {
        assert_eq!((v.limit, v.used, v.remaining), (100, 200, 0));
    }
}

#[test]
fn a_request_larger_than_a_whole_window_is_too_large_not_told_to_wait() {
    let (_clock, admission) = rig(BEFORE_APRIL, Calendar::default());
    let t = Tenant::from_config(&config(vec![day(10)])).expect("tenant");
    let too_large = |result: Result<crate::buffer::BufferLease, Blocked>| match result {
        Err(Blocked::Denied(Denial::TooLarge(t))) => (t.limit, t.requested, t.allowed),
        other => panic!("expected a 413, got {other:?}"),
    };
    assert_eq!(
        too_large(admission.admit(&t, Charge::new(11, 11)).0),
        ("tenant day quota", 11, 10)
    );
    global_day(&admission, 8, false);
    assert_eq!(
        too_large(admission.admit(&t, Charge::new(9, 9)).0),
        ("global day quota", 9, 8)
    );
    // Nothing was used: the whole of each window is left.
    assert_eq!(admission.global_quotas()[0].1.remaining, 8);
    // A quota in shadow mode refuses nothing, however large the request, and does not count
    // it as a quota's refusal: enforced, it is a 413, not a `global_quota` (review 41-r5).
    global_day(&admission, 8, true);
    drop(admission.admit(&t, Charge::new(9, 9)).0.expect("shadow"));
    let shadowed = t.stats().shadowed_flow(Reason::Quota(Scope::Global));
    assert_eq!(shadowed.requests, 0);
}
