use super::*;
use crate::budget::{BudgetSpec, Dimension, ManualClock, RateSpec};
use crate::config::TenantConfig;
use crate::record::Charge;

const MS: Duration = Duration::from_millis(1);

pub(super) struct Rig {
    pub(super) clock: Arc<ManualClock>,
    pub(super) admission: Admission,
}

fn rate(per_sec: u64, burst: u64) -> Option<RateSpec> {
    Some(RateSpec { per_sec, burst })
}

pub(super) fn rig(global: BudgetSpec, max_bytes: u64, max_records: u64) -> Rig {
    let clock = Arc::new(ManualClock::new());
    let admission = Admission::new(
        clock.clone(),
        Arc::new(GlobalBudget::new(global)),
        Arc::new(Buffer::new(max_bytes, max_records)),
    );
    Rig { clock, admission }
}

pub(super) fn tenant(
    id: &str,
    records: Option<(u64, u64)>,
    bytes: Option<(u64, u64)>,
    share: f64,
) -> Tenant {
    Tenant::from_config(&TenantConfig {
        id: id.into(),
        topics: vec!["*".into()],
        records_per_sec: records.map(|r| r.0),
        records_burst: records.map(|r| r.1),
        bytes_per_sec: bytes.map(|b| b.0),
        bytes_burst: bytes.map(|b| b.1),
        max_buffer_share: Some(share),
        ..TenantConfig::default()
    })
    .expect("valid tenant")
}

pub(super) fn refusal(result: Result<BufferLease, Blocked>) -> Refusal {
    match result {
        Err(Blocked::Denied(Denial::Refused(r))) => r,
        other => panic!("expected a 429 refusal, got {other:?}"),
    }
}

#[test]
fn tenant_records_refusal_says_when_enough_records_are_back() {
    let r = rig(BudgetSpec::default(), 1 << 30, 1 << 20);
    let t = tenant("a", Some((10, 10)), None, 1.0);
    let (lease, view) = r.admission.admit(&t, Charge::new(10, 100));
    let _lease = lease.expect("burst is admitted");
    assert_eq!(view.tenant.records.map(|v| v.available), Some(0));
    // 3 records at 10/s: 300 ms.
    let refused = refusal(r.admission.admit(&t, Charge::new(3, 1)).0);
    assert_eq!(
        refused.reason,
        Reason::Budget(Scope::Tenant, Dimension::Records)
    );
    assert_eq!(refused.retry_after, 300 * MS);
    r.clock.advance_ms(299);
    assert_eq!(
        refusal(r.admission.admit(&t, Charge::new(3, 1)).0).retry_after,
        MS
    );
    r.clock.advance_ms(1);
    assert!(r.admission.admit(&t, Charge::new(3, 1)).0.is_ok());
}

#[test]
fn tenant_bytes_refusal_names_bytes_and_waits_for_bytes() {
    let r = rig(BudgetSpec::default(), 1 << 30, 1 << 20);
    let t = tenant("a", Some((1000, 1000)), Some((1000, 1000)), 1.0);
    let _l = r
        .admission
        .admit(&t, Charge::new(1, 1000))
        .0
        .expect("burst");
    let refused = refusal(r.admission.admit(&t, Charge::new(1, 500)).0);
    assert_eq!(
        refused.reason,
        Reason::Budget(Scope::Tenant, Dimension::Bytes)
    );
    assert_eq!(refused.retry_after, 500 * MS);
}

#[test]
fn global_budgets_cap_the_sum_of_tenants() {
    let global = BudgetSpec {
        records: rate(100, 100),
        bytes: rate(10_000, 10_000),
    };
    let r = rig(global, 1 << 30, 1 << 20);
    let a = tenant("a", None, None, 1.0);
    let b = tenant("b", None, None, 1.0);
    let _l = r
        .admission
        .admit(&a, Charge::new(100, 10))
        .0
        .expect("global burst");
    let refused = refusal(r.admission.admit(&b, Charge::new(1, 10)).0);
    assert_eq!(
        refused.reason,
        Reason::Budget(Scope::Global, Dimension::Records)
    );
    assert_eq!(refused.retry_after, 10 * MS);

    r.clock.advance_ms(1000);
    let _l = r
        .admission
        .admit(&a, Charge::new(1, 10_000))
        .0
        .expect("bytes burst");
    let refused = refusal(r.admission.admit(&b, Charge::new(1, 2_500)).0);
    assert_eq!(
        refused.reason,
        Reason::Budget(Scope::Global, Dimension::Bytes)
    );
    assert_eq!(refused.retry_after, 250 * MS);
}

#[test]
fn a_refused_request_charges_nothing_anywhere() {
    let global = BudgetSpec {
        records: rate(1000, 1000),
        bytes: rate(1000, 1000),
    };
    let r = rig(global, 10_000, 1000);
    let t = tenant("a", Some((100, 100)), Some((100_000, 100_000)), 1.0);
    // Refused by the global bytes bucket after the tenant buckets said yes.
    let _hold = r.admission.admit(&t, Charge::new(1, 900)).0.expect("fits");
    let before = (r.admission.view(&t), r.admission.buffer.held());
    let refused = refusal(r.admission.admit(&t, Charge::new(5, 200)).0);
    assert_eq!(
        refused.reason,
        Reason::Budget(Scope::Global, Dimension::Bytes)
    );
    assert_eq!((r.admission.view(&t), r.admission.buffer.held()), before);
}

#[test]
fn a_buffer_refusal_charges_no_bucket() {
    let global = BudgetSpec {
        records: rate(1000, 1000),
        bytes: None,
    };
    let r = rig(global, 1000, 1000);
    let t = tenant("a", Some((100, 100)), None, 1.0);
    let _hold = r.admission.admit(&t, Charge::new(1, 900)).0.expect("fits");
    let before = r.admission.view(&t);
    let refused = refusal(r.admission.admit(&t, Charge::new(1, 200)).0);
    assert_eq!(refused.reason, Reason::BufferFull);
    assert_eq!(r.admission.view(&t), before);
}

#[test]
fn a_tenant_cannot_hold_more_than_its_buffer_share() {
    let r = rig(BudgetSpec::default(), 1000, 1000);
    let greedy = tenant("greedy", None, None, 0.5);
    let other = tenant("other", None, None, 0.5);
    let _a = r
        .admission
        .admit(&greedy, Charge::new(1, 400))
        .0
        .expect("within share");
    let refused = refusal(r.admission.admit(&greedy, Charge::new(1, 101)).0);
    assert_eq!(refused.reason, Reason::TenantBuffer);
    // The other tenant still gets its half.
    let _b = r
        .admission
        .admit(&other, Charge::new(1, 500))
        .0
        .expect("own share");
}

#[test]
fn buffer_space_comes_back_when_the_lease_is_dropped() {
    let r = rig(BudgetSpec::default(), 1000, 1000);
    let t = tenant("a", None, None, 1.0);
    let lease = r.admission.admit(&t, Charge::new(1, 1000)).0.expect("fits");
    assert_eq!(
        refusal(r.admission.admit(&t, Charge::new(1, 1)).0).reason,
        Reason::BufferFull
    );
    drop(lease);
    assert!(r.admission.admit(&t, Charge::new(1, 1)).0.is_ok());
}

#[test]
fn a_request_over_the_burst_is_too_large_not_refused() {
    let r = rig(BudgetSpec::default(), 1 << 30, 1 << 20);
    let t = tenant("a", Some((100, 50)), None, 1.0);
    match r.admission.admit(&t, Charge::new(51, 1)).0 {
        Err(Blocked::Denied(Denial::TooLarge(t))) => {
            assert_eq!((t.unit, t.requested, t.allowed), ("records", 51, 50));
            assert_eq!(t.limit, "tenant records_burst");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(
        r.admission.view(&t).tenant.records.map(|v| v.available),
        Some(50)
    );
}

#[test]
fn tenants_are_isolated_from_each_others_bursts() {
    let r = rig(BudgetSpec::default(), 1 << 30, 1 << 20);
    let noisy = tenant("noisy", Some((10, 10)), None, 0.5);
    let quiet = tenant("quiet", Some((10, 10)), None, 0.5);
    for _ in 0..1000 {
        let _ = r.admission.admit(&noisy, Charge::new(1, 1));
    }
    for _ in 0..10 {
        let _l = r
            .admission
            .admit(&quiet, Charge::new(1, 1))
            .0
            .expect("quiet tenant unaffected");
    }
}

#[test]
fn sustained_overload_admits_exactly_burst_plus_rate_times_time() {
    // 10x overload for 10 s: 100 requests/s offered against 10 records/s, burst 20.
    let r = rig(BudgetSpec::default(), 1 << 30, 1 << 20);
    let t = tenant("a", Some((10, 20)), None, 1.0);
    let mut admitted = 0u64;
    let mut leases = Vec::new();
    for _ in 0..1000 {
        if let Ok(lease) = r.admission.admit(&t, Charge::new(1, 1)).0 {
            admitted += 1;
            leases.push(lease);
        }
        r.clock.advance_ms(10);
    }
    // 1000 steps of 10 ms = 10 s; the last offer is at 9.99 s.
    assert_eq!(admitted, 20 + 99);
}

#[test]
fn precheck_refuses_without_charging_and_caps_at_the_burst() {
    let r = rig(BudgetSpec::default(), 1 << 30, 1 << 20);
    let t = tenant("a", Some((10, 10)), Some((1000, 1000)), 1.0);
    assert!(
        r.admission.precheck(&t, 10_000_000).is_ok(),
        "body larger than the burst is decided after parsing"
    );
    let _l = r.admission.admit(&t, Charge::new(1, 900)).0.expect("fits");
    let refused = r
        .admission
        .precheck(&t, 500)
        .expect_err("bytes bucket holds 100");
    assert_eq!(
        refused.reason,
        Reason::Budget(Scope::Tenant, Dimension::Bytes)
    );
    assert_eq!(refused.retry_after, 400 * MS);
    assert_eq!(
        r.admission.view(&t).tenant.bytes.map(|v| v.available),
        Some(100)
    );
}

#[test]
fn an_adaptive_share_admits_its_rate_across_plan_epochs() {
    use crate::adaptive::{Allotment, Plan, PlanCell};
    use crate::config::Priority;
    let clock = Arc::new(ManualClock::new());
    let cell = Arc::new(PlanCell::default());
    let admission = Admission::new(
        clock.clone(),
        Arc::new(GlobalBudget::new(BudgetSpec::default())),
        Arc::new(Buffer::new(1 << 30, 1 << 24)),
    )
    .adaptive(cell.clone());
    let t = tenant("a", None, None, 1.0);
    let share = BudgetSpec {
        records: rate(1_200, 2_400),
        bytes: None,
    };
    let plan = |epoch| Plan {
        active: true,
        epoch,
        next_ns: 0,
        shares: [(
            "a".to_string(),
            Allotment {
                class: Priority::Standard,
                spec: share,
                claimed: (Some(1_200), None),
            },
        )]
        .into(),
    };
    // Requests of 10 records at 300/s for 10 s; a new plan (same share) every 250 ms.
    let mut admitted = 0;
    for i in 0..3_000u64 {
        if i % 75 == 0 {
            cell.store(plan(i / 75 + 1));
        }
        clock.advance_ns(1_000_000_000 / 300);
        if admission.precheck(&t, 100).is_ok()
            && admission.check(&t, Charge::new(10, 100)).is_ok()
            && admission.admit(&t, Charge::new(10, 100)).0.is_ok()
        {
            admitted += 10;
        }
    }
    // The 2 s burst plus 1,200/s for 10 s.
    assert!(
        (12_000..=14_400 + 10).contains(&admitted),
        "admitted {admitted}"
    );
}

/// The review of #29: a tenant whose demand fell to nothing (it honoured a long Retry-After)
/// had a share of 1 record/s, so a 30-record request was told to wait 30 s — and, waiting,
/// never showed the demand that would give it a share back. Now the wait is the one at what
/// the next plan gives it once it claims (its weight's part of its class), no sooner than
/// that plan and never more than `MAX_ADAPTIVE_WAIT`.
#[test]
fn an_adaptive_refusal_names_the_wait_to_the_next_plan_not_the_starved_share() {
    use crate::adaptive::{Allotment, Plan, PlanCell};
    use crate::config::Priority;
    use crate::refusal::{Denial, Reason};
    let clock = Arc::new(ManualClock::new());
    let cell = Arc::new(PlanCell::default());
    let admission = Admission::new(
        clock.clone(),
        Arc::new(GlobalBudget::new(BudgetSpec::default())),
        Arc::new(Buffer::new(1 << 30, 1 << 24)),
    )
    .adaptive(cell.clone());
    let t = tenant("polite", None, None, 1.0);
    let starved = BudgetSpec {
        records: rate(1, 30),
        bytes: None,
    };
    let plan = |epoch, claimed: Option<u64>, next_ns| Plan {
        active: true,
        epoch,
        next_ns,
        shares: [(
            "polite".to_string(),
            Allotment {
                class: Priority::Standard,
                spec: starved,
                claimed: (claimed, None),
            },
        )]
        .into(),
    };
    let wait = |admission: &Admission| {
        let Err(Denial::Refused(r)) = admission.check(&t, Charge::new(30, 300)) else {
            panic!("refused by its share");
        };
        assert_eq!(r.reason, Reason::Adaptive);
        r.retry_after
    };
    clock.advance_ns(1_000_000_000);
    let now = clock.now_ns();
    cell.store(plan(1, Some(500), now + 500_000_000));
    // Its share's burst goes on one request: the next waits 30 s at 1 record/s.
    assert!(admission.check(&t, Charge::new(30, 300)).is_ok());
    assert!(admission.admit(&t, Charge::new(30, 300)).0.is_ok());
    // The next plan is due in 500 ms and gives it 500/s: 30 records take 60 ms, but the share
    // cannot change before the plan.
    assert_eq!(wait(&admission), Duration::from_millis(500));
    // Due at once: the wait at the claimed rate.
    cell.store(plan(2, Some(500), now));
    assert_eq!(wait(&admission), Duration::from_millis(60));
    // Nothing more to claim (its class has nothing left): the share's own wait, at most 5 s.
    cell.store(plan(3, Some(1), now));
    assert_eq!(wait(&admission), crate::admission::MAX_ADAPTIVE_WAIT);
}

/// With `[wait]`, a refusal a hold could cover is reported only once nothing else refuses: a
/// request short of tokens due in 20 ms that the buffer cannot take either hears the buffer's
/// refusal at once — before its body is read, while it is read, and at admission — instead of
/// being let through (and held) only to be refused for the buffer after all.
#[test]
fn a_holdable_wait_never_hides_a_refusal_a_hold_cannot_change() {
    let plain = rig(BudgetSpec::default(), 1 << 30, 10);
    let mut r = rig(BudgetSpec::default(), 1 << 30, 10);
    r.admission = r.admission.with_waits(WaitRoom::new(100 * MS, 8, 8));
    let reason = |d: Result<(), Denial>| match d {
        Err(Denial::Refused(r)) => (r.reason, r.retry_after),
        other => panic!("expected a refusal, got {other:?}"),
    };
    for (rig, waits) in [(&plain, false), (&r, true)] {
        let t = tenant("a", Some((50, 10)), None, 1.0);
        // The tenant's burst fills the buffer (10 records) and empties its bucket.
        let burst = rig
            .admission
            .admit(&t, Charge::new(10, 10))
            .0
            .expect("burst");
        let one = Charge::new(1, 1);
        let check = reason(rig.admission.check(&t, one));
        let admit = refusal(rig.admission.admit(&t, one).0).reason;
        let early = rig.admission.precheck(&t, 1).expect_err("refused").reason;
        if waits {
            let full = Reason::BufferFull;
            assert_eq!((check.0, admit, early), (full, full, full));
        } else {
            // Without [wait], the budget speaks first, as it always has.
            assert_eq!(
                check,
                (Reason::Budget(Scope::Tenant, Dimension::Records), 20 * MS)
            );
            assert_eq!(
                (admit, early),
                (
                    Reason::Budget(Scope::Tenant, Dimension::Records),
                    Reason::Budget(Scope::Tenant, Dimension::Records)
                )
            );
        }
        // The buffer has room again: only the wait is left, and every check says it, for the
        // pipeline to hold the request on a seat (or refuse it, with no seat free).
        drop(burst);
        assert_eq!(
            reason(rig.admission.check(&t, one)),
            (Reason::Budget(Scope::Tenant, Dimension::Records), 20 * MS)
        );
        let early = rig.admission.precheck(&t, 1).expect_err("refused");
        assert_eq!(
            (early.reason, early.retry_after),
            (Reason::Budget(Scope::Tenant, Dimension::Records), 20 * MS)
        );
        assert_eq!(rig.admission.holdable(&early), waits);
        rig.clock.advance_ms(20);
        assert!(rig.admission.check(&t, one).is_ok());
        assert!(rig.admission.admit(&t, one).0.is_ok());
    }
}
