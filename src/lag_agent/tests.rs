use std::sync::Arc;

use super::*;
use crate::admission::Admission;
use crate::budget::{BudgetSpec, GlobalBudget, ManualClock};
use crate::buffer::Buffer;
use crate::config::{Priority, TenantConfig};
use crate::record::Charge;
use crate::refusal::{Denial, Reason};
use crate::tenant::Registry;

/// Offsets scripted by the test: the next reading, or an error.
#[derive(Debug)]
struct Scripted(Mutex<Result<OffsetReading, String>>);

impl Default for Scripted {
    fn default() -> Self {
        Self(Mutex::new(Ok(OffsetReading::default())))
    }
}

impl Scripted {
    fn set(&self, end: u64, committed: u64) {
        *self.0.lock().expect("not poisoned") = Ok(OffsetReading {
            end,
            committed,
            lag: end - committed,
            by_topic: vec![("orders".into(), end - committed)],
        });
    }
    fn fail(&self, why: &str) {
        *self.0.lock().expect("not poisoned") = Err(why.into());
    }
}

impl OffsetSource for Scripted {
    fn read(&self, _: &LagGuardConfig, _: &TopicPatterns) -> Result<OffsetReading, String> {
        self.0.lock().expect("not poisoned").clone()
    }
}

fn guard() -> LagGuardConfig {
    LagGuardConfig {
        name: "orders".into(),
        topics: vec!["orders".into()],
        group: "G".into(),
        max_recovery_s: 30.0,
        max_lag_records: None,
        headroom: 1.2,
        interval_ms: 1000,
        floor_records_per_sec: 0,
        release_fraction: 0.5,
        caught_up_s: 1.0,
        hold_s: 5.0,
        rate_window_s: 1.0,
        stopped_after_s: 1.0,
    }
}

fn tenant(id: &str, rate: u64, priority: Priority) -> TenantConfig {
    TenantConfig {
        id: id.into(),
        topics: vec!["*".into()],
        records_per_sec: Some(rate),
        records_burst: Some(rate),
        priority: Some(priority),
        ..TenantConfig::default()
    }
}

struct Rig {
    clock: Arc<ManualClock>,
    source: Arc<Scripted>,
    agent: LagAgent,
    admission: Admission,
    tenants: Arc<Tenants>,
}

fn rig(tenants: &[TenantConfig], members: u32) -> Rig {
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1);
    let source = Arc::new(Scripted::default());
    source.set(0, 0);
    let registry = Registry::from_configs(tenants).expect("valid tenants");
    let tenants = Arc::new(Tenants::new(registry));
    let plan = Arc::new(LagPlanCell::default());
    let agent = LagAgent::new(
        vec![guard()],
        plan.clone(),
        tenants.clone(),
        Members(Arc::new(move || members)),
        source.clone(),
        clock.clone(),
    );
    let admission = Admission::new(
        clock.clone(),
        Arc::new(GlobalBudget::new(BudgetSpec::default())),
        Arc::new(Buffer::new(1 << 30, 1 << 24)),
    )
    .lag_guarded(plan);
    Rig {
        clock,
        source,
        agent,
        admission,
        tenants,
    }
}

impl Rig {
    fn tenant(&self, id: &str) -> Arc<crate::tenant::Tenant> {
        self.tenants.load().get(id).expect("tenant").clone()
    }

    /// Offers `n` single-record requests to `topic` spread over one second; returns how
    /// many were admitted (the leases are dropped at once: the buffer is not the point).
    fn offer(&self, id: &str, topic: &str, n: u64) -> u64 {
        let t = self.tenant(id);
        let topic = Topic::parse(topic).expect("topic");
        let mut admitted = 0;
        let step = 1_000_000_000 / n;
        // Exactly one second in all: the first step takes the remainder.
        self.clock.advance_ns(1_000_000_000 - step * n);
        for _ in 0..n {
            self.clock.advance_ns(step);
            if self
                .admission
                .admit_to(&t, Some(&topic), Charge::new(1, 10))
                .0
                .is_ok()
            {
                admitted += 1;
            }
        }
        admitted
    }

    /// A reading; the consumer never commits past the end.
    fn read(&self, end: u64, committed: u64) {
        self.source.set(end, committed.min(end));
        self.agent.tick();
    }
}

#[test]
fn a_capped_topic_admits_consumer_rate_over_headroom_and_others_are_free() {
    let r = rig(&[tenant("a", 10_000, Priority::Standard)], 1);
    let (mut end, mut committed) = (0, 0);
    r.read(end, committed);
    // Producers at 3,000/s, the consumer at 600/s.
    for _ in 0..3 {
        end += r.offer("a", "orders", 3_000);
        committed += 600;
        r.read(end, committed);
    }
    let status = &r.agent.statuses()[0];
    assert_eq!(status.phase, Phase::Capping, "{status:?}");
    // Next second: 600 / 1.2 = 500 admitted (+ the half-second burst the share starts with).
    let admitted = r.offer("a", "orders", 3_000);
    assert!((500..=760).contains(&admitted), "admitted {admitted}");
    committed += 600;
    end += admitted;
    r.read(end, committed);
    let admitted = r.offer("a", "orders", 3_000);
    assert!((450..=550).contains(&admitted), "admitted {admitted}");
    // An unguarded topic is not touched.
    assert_eq!(r.offer("a", "payments", 3_000), 3_000);
}

#[test]
fn the_refusal_names_topic_group_and_the_wait() {
    let r = rig(&[tenant("a", 10_000, Priority::Standard)], 1);
    r.read(0, 0);
    r.offer("a", "orders", 10);
    r.clock.advance_ms(1000);
    // The consumer stopped: floor 0 → nothing is admitted, the wait is one interval.
    r.read(5_000, 0);
    r.read(10_000, 0);
    r.offer("a", "orders", 10);
    r.clock.advance_ms(1000);
    r.read(15_000, 0);
    let t = r.tenant("a");
    let topic = Topic::parse("orders").expect("topic");
    let (decision, _) = r.admission.admit_to(&t, Some(&topic), Charge::new(1, 10));
    let Err(crate::admission::Blocked::Denied(Denial::Refused(refusal))) = decision else {
        panic!("expected a refusal, got {decision:?}");
    };
    assert_eq!(refusal.reason, Reason::ConsumerLag);
    assert_eq!(refusal.retry_after, Duration::from_secs(1));
    let note = refusal.lag.expect("names the guard");
    assert_eq!((&*note.topic, &*note.group), ("orders", "G"));
    // Nothing was charged: the precheck says the same without counting.
    assert!(r.admission.precheck_to(&t, Some(&topic), 10).is_err());
}

#[test]
fn the_cap_is_split_by_priority_then_configured_rate() {
    let r = rig(
        &[
            tenant("big", 2_000, Priority::Standard),
            tenant("small", 1_000, Priority::Standard),
            tenant("bulk", 5_000, Priority::Batch),
        ],
        1,
    );
    let (mut end, mut committed) = (0, 0);
    r.read(end, committed);
    // One interval of everyone writing at full rate, then the split.
    for _ in 0..1 {
        end += r.offer("big", "orders", 2_000)
            + r.offer("small", "orders", 2_000)
            + r.offer("bulk", "orders", 2_000);
        // Three seconds went by: the consumer read 1,200/s.
        committed += 3_600;
        r.read(end, committed);
    }
    assert_eq!(r.agent.statuses()[0].phase, Phase::Capping);
    let plan = r.agent.plan.load();
    let shares = &plan.guards[0].shares;
    // Cap 1,200 / 1.2 = 1,000, all to the standard class (batch gives way first), split
    // 2:1 by the tenants' configured rates.
    let (big, small) = (shares["big"], shares["small"]);
    assert!(
        (big + small - 1_000.0).abs() < 1.0,
        "{shares:?} {:?}",
        r.agent.statuses()
    );
    assert!((big / small - 2.0).abs() < 0.05, "{shares:?}");
    assert!(
        shares.get("bulk").copied().unwrap_or(0.0) < 1.0,
        "{shares:?}"
    );
}

#[test]
fn in_a_cluster_each_replica_enforces_its_part() {
    let r = rig(&[tenant("a", 10_000, Priority::Standard)], 4);
    let (mut end, mut committed) = (0, 0);
    r.read(end, committed);
    for _ in 0..3 {
        end += r.offer("a", "orders", 3_000);
        committed += 600;
        r.read(end, committed);
    }
    let plan = r.agent.plan.load();
    let share = plan.guards[0]
        .shares
        .get("a")
        .copied()
        .unwrap_or_else(|| panic!("{:?} {plan:?}", r.agent.statuses()));
    assert!((share - 500.0 / 4.0).abs() < 1.0, "share {share}");
}

#[test]
fn unreadable_offsets_hold_then_release_and_say_so() {
    let r = rig(&[tenant("a", 10_000, Priority::Standard)], 1);
    let (mut end, mut committed) = (0, 0);
    r.read(end, committed);
    for _ in 0..3 {
        end += r.offer("a", "orders", 3_000);
        committed += 600;
        r.read(end, committed);
    }
    r.source.fail("group unknown");
    for _ in 0..4 {
        r.offer("a", "orders", 100);
        r.agent.tick();
    }
    let s = &r.agent.statuses()[0];
    assert_eq!(s.phase, Phase::Holding);
    assert!(r.offer("a", "orders", 3_000) < 1_000, "the last cap holds");
    r.agent.tick();
    r.offer("a", "orders", 10);
    r.agent.tick();
    let s = &r.agent.statuses()[0];
    assert_eq!(s.phase, Phase::Released, "{s:?}");
    assert_eq!(
        (s.fail_opens, s.last_error.as_deref()),
        (1, Some("group unknown"))
    );
    assert_eq!(
        r.offer("a", "orders", 3_000),
        3_000,
        "fail open: static budgets only"
    );
}

#[test]
fn guards_change_live_keeping_their_state() {
    let r = rig(&[tenant("a", 10_000, Priority::Standard)], 1);
    let (mut end, mut committed) = (0, 0);
    r.read(end, committed);
    for _ in 0..3 {
        end += r.offer("a", "orders", 3_000);
        committed += 600;
        r.read(end, committed);
    }
    let mut g = guard();
    g.headroom = 2.0;
    r.agent.set_guards(vec![g]).expect("valid");
    assert_eq!(r.agent.statuses()[0].phase, Phase::Capping, "kept");
    end += r.offer("a", "orders", 3_000);
    committed += 600;
    r.read(end, committed);
    let cap = r.agent.statuses()[0].cap.expect("capping");
    assert!((cap - 300.0).abs() < 5.0, "600 / 2.0, got {cap}");
    r.agent.set_guards(Vec::new()).expect("valid");
    assert_eq!(r.offer("a", "orders", 3_000), 3_000, "guard removed");
}
