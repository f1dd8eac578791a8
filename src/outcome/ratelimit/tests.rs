//! The fields as rendered, and the policy kept per worker.
use super::*;
use crate::budget::{BucketView, PerDimension, RateSpec};
use crate::quota::QuotaView;

/// The two fields' values, or `None` when no bucket applies.
fn render(view: &BucketsView) -> Option<(String, String)> {
    let (mut policy, mut state, mut key) = (String::new(), String::new(), policy::Key::default());
    render_state(view, &mut state, &mut key).then_some(())?;
    render_policy(&key, &mut policy);
    Some((policy, state))
}

/// A local share of 0 (a small budget among more replicas, Redis away) renders.
#[test]
fn a_share_that_never_refills_renders() {
    let mut view = BucketsView::default();
    view.tenant.records = Some(BucketView {
        spec: RateSpec {
            per_sec: 0,
            burst: 0,
        },
        available: 0,
        full_in_ns: 0,
    });
    let (policy, state) = render(&view).expect("one bucket");
    assert_eq!(policy, r#""tenant-records";q=0;w=1;qu="records""#);
    assert_eq!(state, r#""tenant-records";r=0;t=0"#);
}

/// A spent share that refills only when Redis is tried again (in a second): its window
/// and reset are that second, not the burst at 1 a second nor "now".
#[test]
fn a_spent_share_waits_for_redis_in_its_fields() {
    let mut view = BucketsView::default();
    view.tenant.records = Some(BucketView {
        spec: RateSpec {
            per_sec: 0,
            burst: 6,
        },
        available: 0,
        full_in_ns: 1_000_000_000,
    });
    let (policy, state) = render(&view).expect("one bucket");
    assert_eq!(policy, r#""tenant-records";q=6;w=1;qu="records""#);
    assert_eq!(state, r#""tenant-records";r=0;t=1"#);
}

#[test]
fn one_item_per_configured_bucket() {
    let mut view = BucketsView::default();
    view.tenant.records = Some(BucketView {
        spec: RateSpec {
            per_sec: 100,
            burst: 150,
        },
        available: 42,
        full_in_ns: 1_080_000_000,
    });
    view.global.bytes = Some(BucketView {
        spec: RateSpec {
            per_sec: 1000,
            burst: 1000,
        },
        available: 1000,
        full_in_ns: 0,
    });
    let (policy, state) = render(&view).expect("two buckets");
    assert_eq!(
        policy,
        "\"tenant-records\";q=150;w=2;qu=\"records\", \"global-bytes\";q=1000;w=1;qu=\"content-bytes\""
    );
    assert_eq!(
        state,
        "\"tenant-records\";r=42;t=2, \"global-bytes\";r=1000;t=0"
    );
}

#[test]
fn a_quota_is_an_item_of_its_window_and_dimension() {
    let mut view = BucketsView::default();
    view.quotas[0] = Some((
        Dimension::Records,
        QuotaView {
            window: Window::Day,
            limit: 1_000,
            used: 750,
            remaining: 250,
            window_s: 86_400,
            reset_in_s: 3_600,
        },
    ));
    let (policy, state) = render(&view).expect("one quota");
    assert_eq!(
        policy,
        r#""tenant-day-records";q=1000;w=86400;qu="records""#
    );
    assert_eq!(state, r#""tenant-day-records";r=250;t=3600"#);
}

#[test]
fn no_fields_without_buckets() {
    assert_eq!(render(&BucketsView::default()), None);
    let mut headers = HeaderMap::new();
    insert(&mut headers, &BucketsView::default());
    assert!(headers.is_empty());
}

#[test]
fn the_headers_carry_the_rendered_values_for_every_bucket() {
    let bucket = |per_sec: u64| {
        Some(BucketView {
            spec: RateSpec {
                per_sec,
                burst: u64::MAX / 2,
            },
            available: u64::MAX / 4,
            full_in_ns: u64::MAX,
        })
    };
    // All four buckets and twelve quota items (the tenant's six, the global six) with the
    // longest numbers there are: past the stack's buffer, written again on the heap.
    let view = BucketsView {
        tenant: PerDimension {
            records: bucket(1),
            bytes: bucket(3),
        },
        global: PerDimension {
            records: bucket(7),
            bytes: bucket(10_000_000_000),
        },
        quotas: [Some((
            Dimension::Bytes,
            QuotaView {
                window: Window::Month,
                limit: u64::MAX,
                used: 0,
                remaining: u64::MAX,
                window_s: 2_678_400,
                reset_in_s: 2_678_400,
            },
        )); 6],
        global_quotas: [Some((
            Dimension::Records,
            QuotaView {
                window: Window::Month,
                limit: u64::MAX,
                used: 0,
                remaining: u64::MAX,
                window_s: 2_678_400,
                reset_in_s: 2_678_400,
            },
        )); 6],
    };
    let (policy, state) = render(&view).expect("four buckets");
    assert!(policy.contains("\"global-month-records\";q=18446744073709551615"));
    assert!(policy.len() > 1024, "{}", policy.len());
    let mut headers = HeaderMap::new();
    insert(&mut headers, &view);
    assert_eq!(headers[&RATELIMIT_POLICY], policy.as_str());
    assert_eq!(headers[&RATELIMIT], state.as_str());
}

fn day_quota(limit: u64, remaining: u64, reset_in_s: u64) -> Option<(Dimension, QuotaView)> {
    Some((
        Dimension::Records,
        QuotaView {
            window: Window::Day,
            limit,
            used: limit - remaining,
            remaining,
            window_s: 86_400,
            reset_in_s,
        },
    ))
}

/// An answer's policy is the one kept for the same limits, whatever stands now; a change
/// of any limit (a quota's, a bucket's, a share's wait) is rendered anew, never the kept
/// value.
#[test]
fn the_kept_policy_follows_every_limit() {
    let fields = |view: &BucketsView| {
        let mut headers = HeaderMap::new();
        insert(&mut headers, view);
        let (policy, state) = render(view).expect("items");
        assert_eq!(headers[&RATELIMIT_POLICY], policy.as_str());
        assert_eq!(headers[&RATELIMIT], state.as_str());
        policy
    };
    let bucket = |per_sec, available, full_in_ns| {
        Some(BucketView {
            spec: RateSpec {
                per_sec,
                burst: 100,
            },
            available,
            full_in_ns,
        })
    };
    let mut view = BucketsView::default();
    view.tenant.records = bucket(10, 100, 0);
    view.quotas[0] = day_quota(1_000, 1_000, 3_600);
    let first = fields(&view);
    // What stands moves: the same policy.
    view.tenant.records = bucket(10, 7, 9_300_000_000);
    view.quotas[0] = day_quota(1_000, 250, 1_800);
    assert_eq!(fields(&view), first);
    // A quota lowered mid-window.
    view.quotas[0] = day_quota(500, 0, 1_800);
    assert!(fields(&view).contains(";q=500;w=86400"));
    // A bucket's rate changed.
    view.tenant.records = bucket(50, 7, 0);
    assert!(fields(&view).starts_with(r#""tenant-records";q=100;w=2;"#));
    // A share refilling at 0 a second: its window is its wait, which moves.
    view.tenant.records = bucket(0, 0, 1_000_000_000);
    assert!(fields(&view).starts_with(r#""tenant-records";q=100;w=1;"#));
    view.tenant.records = bucket(0, 0, 3_000_000_000);
    assert!(fields(&view).starts_with(r#""tenant-records";q=100;w=3;"#));
    // More distinct policies than a worker keeps, in turn: each still its own.
    for limit in 1..40 {
        view.quotas[0] = day_quota(limit, limit, 60);
        assert!(fields(&view).contains(&format!(";q={limit};w=86400")));
    }
}

/// Each name in the table is its scope's, window's and dimension's, with its unit.
#[test]
fn every_name_is_its_scope_window_and_dimension() {
    let unit = |d: Dimension| match d {
        Dimension::Records => "records",
        Dimension::Bytes => "content-bytes",
    };
    let check = |index: u64, name: String, d: Dimension| {
        let n = &NAMES[usize::try_from(index).expect("index")];
        assert_eq!(n.state, format!("\"{name}\";r="));
        assert_eq!(n.policy, format!("\"{name}\";q="));
        assert_eq!(n.unit, format!(";qu=\"{}\"", unit(d)));
    };
    let mut seen = 0;
    for scope in Scope::ALL {
        for d in Dimension::ALL {
            check(
                bucket_name(scope, d),
                format!("{}-{}", scope.as_str(), d.as_str()),
                d,
            );
            seen += 1;
            for w in Window::ALL {
                let name = format!("{}-{}-{}", scope.as_str(), w.as_str(), d.as_str());
                check(quota_name(scope, w, d), name, d);
                seen += 1;
            }
        }
    }
    assert_eq!(seen, NAMES.len());
}
