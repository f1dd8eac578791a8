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
    s.credit(5, 50, 1);
    assert_eq!(
        s.take(&spec(), Charge::new(1, 60)),
        Err(Charge::new(0, 10)),
        "bytes short: nothing taken"
    );
    assert_eq!(s.held(), (5, 50));
    s.take(&spec(), Charge::new(2, 20)).expect("fits");
    assert_eq!(s.held(), (3, 30));
    assert_eq!(s.spent(), (2, 20));
}

#[test]
fn an_unlimited_dimension_is_never_missing() {
    let s = Slice::new();
    s.credit(2, 0, 1);
    let only_records = BudgetSpec {
        records: spec().records,
        bytes: None,
    };
    s.take(&only_records, Charge::new(2, 1_000_000))
        .expect("bytes are not limited");
    assert_eq!(s.held(), (0, 0));
}

#[test]
fn the_view_is_the_slice_plus_the_cluster_estimate_refilled_since() {
    let s = Slice::new();
    let t0 = 5_000_000_000;
    s.credit(10, 0, t0);
    s.note_cluster(20, 1000, t0);
    let (r, _) = s.view(&spec(), t0);
    assert_eq!(r.map(|v| v.available), Some(30));
    // 100 ms later the cluster bucket gained 10 records.
    let (r, _) = s.view(&spec(), t0 + 100_000_000);
    assert_eq!(r.map(|v| v.available), Some(40));
    assert_eq!(r.map(|v| v.full_in_ns), Some(600_000_000));
    // Never above the burst.
    let (r, _) = s.view(&spec(), t0 + 10_000_000_000);
    assert_eq!(r.map(|v| v.available), Some(100));
}

#[test]
fn the_estimate_waits_for_the_refill_of_what_is_missing() {
    let s = Slice::new();
    let t0 = 5_000_000_000;
    s.note_cluster(0, 1000, t0);
    s.credit(3, 0, t0);
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
    s.credit(4, 40, 7);
    assert_eq!(s.granted_at_ns(), 7);
    assert_eq!(s.drain(), (4, 40));
    assert_eq!(s.held(), (0, 0));
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

#[test]
fn a_share_divides_rate_and_burst_and_keeps_at_least_one() {
    let s = fallback_of(spec(), 3);
    assert_eq!(s.records.map(|r| (r.per_sec, r.burst)), Some((33, 33)));
    let tiny = fallback_of(
        BudgetSpec {
            records: Some(RateSpec {
                per_sec: 1,
                burst: 1,
            }),
            bytes: None,
        },
        5,
    );
    assert_eq!(tiny.records.map(|r| (r.per_sec, r.burst)), Some((1, 1)));
}
