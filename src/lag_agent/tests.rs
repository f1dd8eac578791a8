use std::sync::Arc;

use super::*;
use crate::admission::Admission;
use crate::budget::{BudgetSpec, GlobalBudget, ManualClock};
use crate::buffer::Buffer;
use crate::config::{Priority, TenantConfig};
use crate::record::Charge;
use crate::refusal::{Denial, Reason};
use crate::tenant::Directory;

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
            partitions: vec![PartitionOffsets::new(
                "orders",
                0,
                Some(end),
                Some(committed),
            )],
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
    rig_with(guard(), tenants, members)
}

fn rig_with(guard: LagGuardConfig, tenants: &[TenantConfig], members: u32) -> Rig {
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1);
    let source = Arc::new(Scripted::default());
    source.set(0, 0);
    let registry = Directory::from_configs(tenants).expect("valid tenants");
    let tenants = Arc::new(Tenants::new(registry));
    let plan = Arc::new(LagPlanCell::default());
    let agent = LagAgent::new(
        vec![guard],
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
    // Cap at least 1,200 / 1.2 = 1,000, all to the standard class (batch gives way first), split
    // 2:1 by the tenants' configured rates.
    let (big, small) = (shares["big"], shares["small"]);
    let cap = r.agent.statuses()[0].cap.expect("capping");
    assert!(
        (1_000.0..1_200.0).contains(&cap) && (big + small - cap).abs() < 1.0,
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
    // Release within 3 s: the lag is far behind that, so the cap is C / headroom.
    g.release_fraction = 0.1;
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

/// A topic whose consumer reads at a scripted rate and producers offer through admission.
#[derive(Default)]
struct Log {
    end: u64,
    committed: u64,
}

impl Log {
    /// One second: tenant `a` offers `offered` single-record requests, the consumer reads up
    /// to `consumer`, the guard reads the offsets. Returns the records admitted.
    fn second(&mut self, r: &Rig, offered: u64, consumer: u64) -> u64 {
        let admitted = r.offer("a", "orders", offered);
        self.end += admitted;
        self.committed = (self.committed + consumer).min(self.end);
        r.read(self.end, self.committed);
        admitted
    }
}

/// The pressure scenario's guard (`floodgate-load slow-consumer`): 30 s acceptable, rates
/// over 5 s.
fn scenario() -> (Rig, Log) {
    let g = LagGuardConfig {
        max_recovery_s: 30.0,
        rate_window_s: 5.0,
        stopped_after_s: 15.0,
        ..guard()
    };
    let r = rig_with(g, &[tenant("a", 100_000, Priority::Standard)], 1);
    r.read(0, 0);
    (r, Log::default())
}

fn activations(r: &Rig) -> u64 {
    r.agent.statuses()[0].activations
}

#[test]
fn a_consumer_that_speeds_up_past_demand_sees_one_activation_and_one_release() {
    let (r, mut topic) = scenario();
    // Producers offer 3,000/s throughout; the consumer reads 500/s for 40 s...
    let slow: Vec<u64> = (0..40).map(|_| topic.second(&r, 3_000, 500)).collect();
    assert_eq!(
        activations(&r),
        1,
        "one cap while the consumer is slow: {slow:?}"
    );
    let capped = &slow[10..];
    assert!(
        capped.iter().all(|a| (400..=650).contains(a)),
        "about what the consumer reads, without surges: {slow:?}"
    );
    // ...then 6,000/s for a minute: the cap rises in steps, lifts once, and stays lifted.
    let fast: Vec<u64> = (0..60).map(|_| topic.second(&r, 3_000, 6_000)).collect();
    let status = &r.agent.statuses()[0];
    assert_eq!(
        (status.activations, status.phase),
        (1, Phase::Idle),
        "{fast:?}"
    );
    let full = fast.iter().position(|a| *a == 3_000).expect("all admitted");
    assert!(
        full <= 10,
        "all 3,000/s admitted {full} s after the speed-up: {fast:?}"
    );
    assert!(fast[full..].iter().all(|a| *a == 3_000), "{fast:?}");
    // No surge: each second admits at most 25 % (one probe step) and the share's half-second
    // burst more than the one before.
    assert!(
        fast[..full]
            .windows(2)
            .all(|w| w[1] as f64 <= w[0] as f64 * 1.25 + 0.5 * w[1] as f64),
        "{fast:?}"
    );
    eprintln!("after the speed-up, admitted per second: {fast:?}");
}

#[test]
fn a_consumer_just_below_demand_is_capped_once_and_gets_what_it_reads() {
    let (r, mut topic) = scenario();
    // The lag builds against a 500/s consumer; then it reads 2,900/s of 3,000/s offered.
    (0..20).for_each(|_| {
        topic.second(&r, 3_000, 500);
    });
    assert_eq!(activations(&r), 1);
    let admitted: Vec<u64> = (0..120).map(|_| topic.second(&r, 3_000, 2_900)).collect();
    // Two minutes at just below demand: still the one activation, never lifted.
    let status = &r.agent.statuses()[0];
    assert_eq!(
        (status.activations, status.phase),
        (1, Phase::Capping),
        "{admitted:?} {}",
        status.reason
    );
    // Producers get what the consumer reads, not C / headroom (2,417/s), and the lag stays
    // within what the consumer reads in caught_up_s (1 s) and a probe step.
    let mean = admitted[20..].iter().sum::<u64>() as f64 / 100.0;
    assert!(mean >= 0.95 * 2_900.0, "mean {mean}: {admitted:?}");
    assert!(status.lag <= 2_900 + 725, "lag {} {admitted:?}", status.lag);
    eprintln!(
        "consumer at 2,900/s: admitted {mean:.0}/s on average, lag {}",
        status.lag
    );
}

#[test]
fn requests_refused_by_the_cap_count_their_records_as_demand() {
    let r = rig(&[tenant("a", 10_000, Priority::Standard)], 1);
    r.read(0, 0);
    r.offer("a", "orders", 10);
    r.clock.advance_ms(1000);
    // The consumer stopped: floor 0, every request refused.
    r.read(5_000, 0);
    r.read(10_000, 0);
    r.offer("a", "orders", 10);
    r.clock.advance_ms(1000);
    r.read(15_000, 0);
    assert_eq!(r.agent.statuses()[0].cap, Some(0.0));
    let t = r.tenant("a");
    let topic = Topic::parse("orders").expect("topic");
    // One second of refusals: 50 refused mid-stream with 10 records read each, 50 refused
    // before their body (counted as the tenant's typical request: one record here).
    for _ in 0..50 {
        r.clock.advance_ms(10);
        assert!(r
            .admission
            .check_to(&t, Some(&topic), Charge::new(10, 100))
            .is_err());
        r.clock.advance_ms(10);
        assert!(r.admission.precheck_to(&t, Some(&topic), 100).is_err());
    }
    r.read(20_000, 0);
    let offered = r.agent.statuses()[0].offered_rate;
    assert!((549.0..=551.0).contains(&offered), "offered {offered}/s");
}
