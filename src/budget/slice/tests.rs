use super::*;

fn spec() -> BudgetSpec {
    BudgetSpec {
        records: Some(RateSpec {
            per_sec: 100,
            burst: 100,
        }),
        bytes: Some(RateSpec {
            per_sec: 1000,
            burst: 1000,
        }),
    }
}

#[test]
fn a_take_charges_both_dimensions_or_neither() {
    let s = Slice::new();
    s.credit(Charge::new(5, 50), 1);
    assert_eq!(
        s.take(&spec(), Charge::new(1, 60)),
        Err(Charge::new(0, 10)),
        "bytes short: nothing taken"
    );
    assert_eq!(s.held(), Charge::new(5, 50));
    s.take(&spec(), Charge::new(2, 20)).expect("fits");
    assert_eq!(s.held(), Charge::new(3, 30));
    assert_eq!(s.spent(), Charge::new(2, 20));
}

#[test]
fn an_unlimited_dimension_is_never_missing() {
    let s = Slice::new();
    s.credit(Charge::new(2, 0), 1);
    let only_records = BudgetSpec {
        records: spec().records,
        bytes: None,
    };
    s.take(&only_records, Charge::new(2, 1_000_000))
        .expect("bytes are not limited");
    assert_eq!(s.held(), Charge::new(0, 0));
}

#[test]
fn the_view_is_the_slice_plus_the_cluster_estimate_refilled_since() {
    let s = Slice::new();
    let t0 = 5_000_000_000;
    s.credit(Charge::new(10, 0), t0);
    s.note_cluster(Charge::new(20, 1000), t0);
    let r = s.view(&spec(), t0).records;
    assert_eq!(r.map(|v| v.available), Some(30));
    // 100 ms later the cluster bucket gained 10 records.
    let r = s.view(&spec(), t0 + 100_000_000).records;
    assert_eq!(r.map(|v| v.available), Some(40));
    assert_eq!(r.map(|v| v.full_in_ns), Some(600_000_000));
    // Never above the burst.
    let r = s.view(&spec(), t0 + 10_000_000_000).records;
    assert_eq!(r.map(|v| v.available), Some(100));
}

#[test]
fn the_estimate_waits_for_the_refill_of_what_is_missing() {
    let s = Slice::new();
    let t0 = 5_000_000_000;
    s.note_cluster(Charge::new(0, 1000), t0);
    s.credit(Charge::new(3, 0), t0);
    let e = s
        .estimate(&spec(), Charge::new(8, 1), t0)
        .expect_err("5 records short");
    assert_eq!(e.dimension, Dimension::Records);
    assert_eq!(e.wait_ns, 50_000_000, "5 records at 100/s");
    assert!(s
        .estimate(&spec(), Charge::new(8, 1), t0 + 50_000_000)
        .is_ok());
}

#[test]
fn drain_empties_and_returns_what_was_held() {
    let s = Slice::new();
    s.credit(Charge::new(4, 40), 7);
    assert_eq!(s.granted_at_ns(), 7);
    assert_eq!(s.drain(), Charge::new(4, 40));
    assert_eq!(s.held(), Charge::new(0, 0));
}

#[test]
fn every_mode_switch_moves_the_epoch_and_a_repeat_does_not() {
    let sharing = ModeCell::new(3);
    assert_eq!(sharing.current(), (0, Mode::Fallback(3)));
    sharing.set(Mode::Leased, 0);
    assert_eq!(sharing.current(), (1, Mode::Leased));
    sharing.set(Mode::Leased, 0);
    assert_eq!(sharing.current(), (1, Mode::Leased));
    sharing.set(Mode::Fallback(2), 0);
    assert_eq!(sharing.current(), (2, Mode::Fallback(2)));
}

/// Review 35b of #37: each share was at least 1, so three replicas gave a tenant allowed 1
/// record a second 3 a second while Redis was away. The members' shares add up to the budget
/// exactly, whatever its size: some get the remainder, and a share may be 0.
#[test]
fn the_members_shares_add_up_to_the_budget_exactly() {
    let s = fallback_of(spec(), 3, 0);
    assert_eq!(s.records.map(|r| (r.per_sec, r.burst)), Some((33, 33)));
    for (per_sec, burst, n) in [(1, 1, 3), (100, 100, 3), (1, 5, 3), (7, 2, 5), (10, 10, 1)] {
        let budget = BudgetSpec {
            records: Some(RateSpec { per_sec, burst }),
            bytes: None,
        };
        let shares: Vec<RateSpec> = (0..n)
            .filter_map(|rank| fallback_of(budget, n, rank).records)
            .collect();
        assert_eq!(
            shares.iter().map(|s| s.per_sec).sum::<u64>(),
            per_sec,
            "{shares:?}"
        );
        assert_eq!(
            shares.iter().map(|s| s.burst).sum::<u64>(),
            burst,
            "{shares:?}"
        );
    }
    // A rank past the members (counted before one left) takes the last share, not more.
    let one = BudgetSpec {
        records: Some(RateSpec {
            per_sec: 1,
            burst: 1,
        }),
        bytes: None,
    };
    assert_eq!(fallback_of(one, 3, 7).records.map(|r| r.per_sec), Some(1));
    assert_eq!(fallback_of(one, 3, 0).records.map(|r| r.per_sec), Some(0));
}

/// A share that never refills (a budget of 1 a second among three) tells a request it cannot
/// take to come back when Redis is next tried, not in a millisecond.
#[test]
fn a_share_that_never_refills_waits_for_redis() {
    let budget = BudgetSpec {
        records: Some(RateSpec {
            per_sec: 1,
            burst: 3,
        }),
        bytes: None,
    };
    let share = fallback_of(budget, 3, 0);
    assert_eq!(share.records.map(|s| (s.per_sec, s.burst)), Some((0, 1)));
    let reprobe = 500_000_000;
    let tats = Tats::default();
    let now = 1_000_000_000;
    let after_one =
        take_fallback(&share, tats, now, Charge::new(1, 0), reprobe).expect("the burst");
    let short =
        take_fallback(&share, after_one, now, Charge::new(1, 0), reprobe).expect_err("spent");
    assert_eq!(short.wait_ns, reprobe);
    // Its view says so too: full again no sooner than Redis is tried, not "full now".
    let view =
        crate::budget::until_reprobe(crate::budget::view_of(&share, after_one, now), reprobe);
    let records = view.records.expect("limited");
    assert_eq!((records.available, records.full_in_ns), (0, reprobe));
    let full = crate::budget::until_reprobe(crate::budget::view_of(&share, tats, now), reprobe);
    assert_eq!(
        full.records.map(|v| v.full_in_ns),
        Some(0),
        "a full share is full now"
    );
}
