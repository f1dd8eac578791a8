use std::sync::Arc;

use super::*;
use crate::budget::{BudgetSpec, GlobalBudget, ManualClock};
use crate::buffer::Buffer;
use crate::config::TenantConfig;
use crate::refusal::Reason;
use crate::tenant::Directory;

fn agent(settings: AdaptiveConfig) -> (Arc<AdaptiveAgent>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let plan = Arc::new(PlanCell::default());
    let registry = Directory::from_configs(&[] as &[TenantConfig]).expect("no tenants");
    let admission = Arc::new(
        Admission::new(
            clock.clone(),
            Arc::new(GlobalBudget::new(BudgetSpec::default())),
            Arc::new(Buffer::new(1 << 30, 1 << 24)),
        )
        .adaptive(plan.clone()),
    );
    let agent = Arc::new(AdaptiveAgent::new(
        settings,
        plan,
        Arc::new(Tenants::new(registry)),
        admission,
        KafkaMetrics::default(),
        clock.clone(),
    ));
    (agent, clock)
}

/// The review of #29: `PUT /admin/adaptive` with `interval_ms` 600,000, then back to 250 —
/// before, the loop slept out the ten minutes it had read, and the controller was frozen.
/// Now every change wakes the loop (a watch it selects on beside its sleep) and the wait is
/// re-read from the last tick at the interval in force.
#[test]
fn a_settings_change_wakes_the_loop_and_a_shorter_interval_is_due_at_once() {
    let (agent, clock) = agent(AdaptiveConfig {
        enabled: true,
        interval_ms: 1_000,
        max_records_per_sec: Some(10_000),
        ..AdaptiveConfig::default()
    });
    let mut changed = agent.changed.subscribe();
    clock.advance_ms(1_000);
    let last = clock.now_ns();
    agent.tick();
    assert_eq!(agent.wait_ns(last), 1_000_000_000);
    agent.set_settings(AdaptiveConfig {
        interval_ms: 600_000,
        ..agent.settings()
    });
    assert!(changed.has_changed().expect("open"), "the loop is woken");
    changed.mark_unchanged();
    clock.advance_ms(5_000);
    assert_eq!(agent.wait_ns(last), 595_000_000_000);
    agent.set_settings(AdaptiveConfig {
        interval_ms: 250,
        ..agent.settings()
    });
    assert!(changed.has_changed().expect("open"), "the loop is woken");
    assert_eq!(
        agent.wait_ns(last),
        0,
        "overdue at the new interval: a tick now"
    );
    let last = clock.now_ns();
    agent.tick();
    clock.advance_ms(100);
    assert_eq!(agent.wait_ns(last), 150_000_000);
}

fn standard(id: &str, rate: u64) -> TenantConfig {
    TenantConfig {
        id: id.into(),
        topics: vec!["*".into()],
        records_per_sec: Some(rate),
        records_burst: Some(rate),
        priority: Some(crate::config::Priority::Standard),
        ..TenantConfig::default()
    }
}

/// The review of #29: "polite" honours Retry-After, "greedy" does not; equal configured rates.
/// Before, polite's demand over the interval after a refusal was 0, so its share went to
/// 1 record/s, the refusal named a 30 s wait, and waiting it never showed the demand that
/// would give it a share back. Now a tenant refused lately claims its weight's part of its
/// class, and its demand is remembered between requests.
#[test]
fn a_tenant_that_honours_retry_after_keeps_its_part_of_the_limit() {
    let clock = Arc::new(ManualClock::new());
    let plan = Arc::new(PlanCell::default());
    let registry = Directory::from_configs(&[standard("polite", 1_000), standard("greedy", 1_000)])
        .expect("valid tenants");
    let tenants = Arc::new(Tenants::new(registry));
    let admission = Arc::new(
        Admission::new(
            clock.clone(),
            Arc::new(GlobalBudget::new(BudgetSpec::default())),
            Arc::new(Buffer::new(1 << 30, 1 << 24)),
        )
        .adaptive(plan.clone()),
    );
    let kafka = KafkaMetrics::default();
    let agent = AdaptiveAgent::new(
        AdaptiveConfig {
            enabled: true,
            interval_ms: 1_000,
            target_delivery_ms: Some(100),
            max_records_per_sec: Some(2_000),
            ..AdaptiveConfig::default()
        },
        plan.clone(),
        tenants.clone(),
        admission,
        kafka.clone(),
        clock.clone(),
    );
    let get = |id: &str| tenants.load().get(id).expect("tenant").clone();
    let (polite, greedy) = (get("polite"), get("greedy"));
    let share = |id: &str| {
        plan.load()
            .shares
            .get(id)
            .and_then(|s| s.spec.records)
            .map_or(0, |r| r.per_sec)
    };
    // One second: Kafka slow (p90 400 ms), greedy offers 5,000 and is refused; polite offers
    // `polite_offers` and is refused `polite_refused` times.
    let second = |polite_offers: u64, polite_refused: u64| {
        for _ in 0..100 {
            kafka
                .delivery_latency
                .record(std::time::Duration::from_millis(400));
        }
        greedy.stats().decided(5_000, 0, None, true);
        for _ in 0..10 {
            greedy.stats().rejected(Reason::Adaptive);
        }
        polite.stats().decided(polite_offers, 0, None, true);
        for _ in 0..polite_refused {
            polite.stats().rejected(Reason::Adaptive);
        }
        clock.advance_ms(1_000);
        agent.tick();
    };
    // Both busy: the limit falls, and the class is shared by weight.
    for _ in 0..6 {
        second(1_000, 1);
    }
    let limit = agent.stats.limit_records.load(Relaxed);
    assert!(limit < 1_000, "{limit}");
    assert!(
        share("polite").abs_diff(share("greedy")) <= 1,
        "{} {}",
        share("polite"),
        share("greedy")
    );
    // Polite waits, as told, sending nothing: the 1,000/s it last sent is remembered,
    // halving every 5 s, so its share stays (before: 1 record/s at once).
    for _ in 0..4 {
        second(0, 0);
        let limit = agent.stats.limit_records.load(Relaxed);
        assert!(
            share("polite") as f64 >= 0.45 * limit as f64,
            "polite starved: {} of {limit} (greedy {})",
            share("polite"),
            share("greedy")
        );
    }
    // One 30-record request, refused, then waiting: its share covers those 30/s while it
    // waits (a request of them is admitted when it comes back), not 1 record/s.
    second(30, 1);
    for _ in 0..4 {
        second(0, 0);
        assert!(share("polite") >= 15, "polite starved: {}", share("polite"));
    }
    // Its remembered demand decays: the share goes to whoever asks.
    for _ in 0..30 {
        second(0, 0);
    }
    assert!(share("polite") < share("greedy") / 4, "{}", share("polite"));
    // Refused again on one 30-record request: the refused records count as demand, so its
    // next share covers them (not 1 record/s); it sends 10/s and its share follows what it
    // remembers of its demand.
    second(30, 1);
    assert!(share("polite") >= 30, "{}", share("polite"));
    second(10, 0);
    let polite_share = share("polite");
    assert!((10..=40).contains(&polite_share), "{polite_share}");
    assert!(share("greedy") > 2 * polite_share, "{}", share("greedy"));
}

/// Switched on after a while off: the deliveries of the time it was off are no reading of now
/// (a slow spell an hour ago must not be the first thing the controller judges).
#[test]
fn switched_on_it_reads_only_what_was_delivered_since() {
    let (agent, clock) = agent(AdaptiveConfig {
        enabled: false,
        max_records_per_sec: Some(10_000),
        ..AdaptiveConfig::default()
    });
    for _ in 0..100 {
        agent
            .kafka
            .delivery_latency
            .record(std::time::Duration::from_millis(400));
    }
    agent.set_settings(AdaptiveConfig {
        enabled: true,
        ..agent.settings()
    });
    for _ in 0..100 {
        agent
            .kafka
            .delivery_latency
            .record(std::time::Duration::from_millis(5));
    }
    clock.advance_ms(500);
    agent.tick();
    let (reading, judged) = agent.stats.reading();
    assert_eq!(reading.deliveries, 100);
    let p90 = reading.p90_ms.expect("p90");
    assert!((p90 - 5.0).abs() < 0.1, "{p90}");
    assert!(
        judged.baseline_ms.is_some_and(|b| (b - 5.0).abs() < 0.1),
        "{judged:?}"
    );
}

/// Intervals of too few deliveries are merged into the next until a reading has enough: at 15
/// deliveries a second (the hostile review's 100-record requests), a 300 ms path is read every
/// 1.5 s, not never.
#[test]
fn intervals_of_too_few_deliveries_are_merged_into_one_reading() {
    let (agent, clock) = agent(AdaptiveConfig {
        enabled: true,
        max_records_per_sec: Some(10_000),
        ..AdaptiveConfig::default()
    });
    let interval = |n: u32| {
        for _ in 0..n {
            agent
                .kafka
                .delivery_latency
                .record(std::time::Duration::from_millis(300));
        }
        clock.advance_ms(500);
        agent.tick();
        agent.stats.reading().0
    };
    let first = interval(7);
    assert_eq!((first.deliveries, first.intervals), (7, 1));
    let second = interval(7);
    assert_eq!((second.deliveries, second.intervals), (14, 2));
    let third = interval(7);
    assert_eq!((third.deliveries, third.intervals), (21, 3));
    assert!(
        third.p90_ms.is_some_and(|p| (p - 300.0).abs() < 3.0),
        "{third:?}"
    );
    // A reading was made: the next window starts afresh.
    let fourth = interval(25);
    assert_eq!((fourth.deliveries, fourth.intervals), (25, 1));
    // A quiet path: at most 8 intervals are merged.
    let mut last = fourth;
    for _ in 0..8 {
        last = interval(1);
    }
    assert_eq!((last.deliveries, last.intervals), (8, 8));
    assert_eq!(interval(1).intervals, 1);
    // The re-review: one delivery a second (every other interval) never made a window of 5
    // in 8 intervals, and each was thrown away; under 5 a window grows on, to 32 intervals.
    // (The window holds the one delivery just above.)
    let sparse: Vec<_> = (0..9).map(|i| interval(i % 2)).collect();
    let read = sparse[7];
    assert_eq!((read.deliveries, read.intervals), (5, 9), "{sparse:?}");
    assert!(read.p90_ms.is_some(), "{read:?}");
    assert_eq!(sparse[8].intervals, 1, "read: the next starts afresh");
    for _ in 0..31 {
        last = interval(0);
    }
    assert_eq!(
        last.intervals, 32,
        "nothing: the window grows to its longest"
    );
    assert_eq!(interval(0).intervals, 1, "and is dropped");
}
