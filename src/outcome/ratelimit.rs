//! The `RateLimit-Policy` and `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers
//! (Structured Fields lists, one item per bucket):
//!
//! ```text
//! RateLimit-Policy: "tenant-records";q=100;w=1;qu="records", "tenant-bytes";q=1048576;w=2;qu="content-bytes"
//! RateLimit: "tenant-records";r=42;t=1, "tenant-bytes";r=1000000;t=0
//! ```
//!
//! A token bucket maps onto the draft's quota as: `q` = the burst (what can be sent at once),
//! `w` = seconds for an empty bucket to refill (burst / rate, rounded up), `r` = tokens
//! available now, `t` = seconds until the bucket is full again. `qu` is `content-bytes` for byte
//! buckets (a registered unit) and `records` for record buckets (ours: one Kafka record).

use std::fmt::Write;

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::admission::BucketsView;
use crate::budget::{BucketView, Dimension, Scope};

pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The draft's quota unit of a dimension: `content-bytes` is registered, `records` is ours
/// (one Kafka record).
fn unit(d: Dimension) -> &'static str {
    match d {
        Dimension::Records => "records",
        Dimension::Bytes => "content-bytes",
    }
}

/// Each bucket that applies, named `scope-dimension` (`"tenant-records"`), in a fixed order.
fn buckets(view: &BucketsView) -> impl Iterator<Item = (Scope, Dimension, BucketView)> + '_ {
    Scope::ALL.into_iter().flat_map(move |scope| {
        view.of(scope)
            .iter()
            .filter_map(move |(d, b)| b.map(|b| (scope, d, b)))
    })
}

fn ceil_secs(ns: u128) -> u128 {
    ns.div_ceil(1_000_000_000)
}

/// Writes both fields; false when no bucket applies.
fn render_into(view: &BucketsView, policy: &mut impl Write, state: &mut impl Write) -> bool {
    let mut any = false;
    for (scope, dimension, b) in buckets(view) {
        let (scope, unit, dimension) = (scope.as_str(), unit(dimension), dimension.as_str());
        if any {
            put(policy, &[", "]);
            put(state, &[", "]);
        }
        any = true;
        // A replica's local share of a small budget may refill at 0 a second while Redis is
        // away (`budget::fallback_of`): never divided by (that panicked every answer of such
        // a tenant into a 500). Such a share's window is the wait until Redis is tried again
        // (`budget::until_reprobe`), not the burst at 1 a second (review 38b of #37: "w=6"
        // for a share that never refills).
        let full_in = ceil_secs(u128::from(b.full_in_ns));
        let window = match b.spec.per_sec {
            0 => full_in.max(1),
            per_sec => {
                ceil_secs(u128::from(b.spec.burst) * 1_000_000_000 / u128::from(per_sec)).max(1)
            }
        };
        let name = ["\"", scope, "-", dimension, "\""];
        policy_item(policy, &name, b.spec.burst, wide(window), unit);
        state_item(state, &name, b.available, wide(full_in));
    }
    // Calendar quotas: `q` the window's allowance, `w` its length, `r` what is left of it,
    // `t` the seconds until it turns (a refill of the whole allowance at once).
    let quotas = [
        ("\"tenant-", &view.quotas),
        ("\"global-", &view.global_quotas),
    ];
    for (scope, (dimension, q)) in quotas
        .into_iter()
        .flat_map(|(scope, items)| items.iter().flatten().map(move |item| (scope, item)))
    {
        let (window, unit, dimension) = (q.window.as_str(), unit(*dimension), dimension.as_str());
        if any {
            put(policy, &[", "]);
            put(state, &[", "]);
        }
        any = true;
        let name = [scope, window, "-", dimension, "\""];
        policy_item(policy, &name, q.limit, q.window_s, unit);
        state_item(state, &name, q.remaining, q.reset_in_s);
    }
    any
}

// Items are written piece by piece, numbers by `itoa`: `write!` went through `core::fmt` for
// every number and name, ~1,300 instructions an item and field (callgrind), a sixth of a
// single-record request's path on the workers once a tenant had three quota items.

fn put(out: &mut impl Write, parts: &[&str]) {
    for p in parts {
        let _ = out.write_str(p);
    }
}

fn num(out: &mut impl Write, n: u64) {
    let _ = out.write_str(itoa::Buffer::new().format(n));
}

fn wide(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `NAME;q=Q;w=W;qu="UNIT"`
fn policy_item(out: &mut impl Write, name: &[&str], q: u64, w: u64, unit: &str) {
    put(out, name);
    put(out, &[";q="]);
    num(out, q);
    put(out, &[";w="]);
    num(out, w);
    put(out, &[";qu=\"", unit, "\""]);
}

/// `NAME;r=R;t=T`
fn state_item(out: &mut impl Write, name: &[&str], r: u64, t: u64) {
    put(out, name);
    put(out, &[";r="]);
    num(out, r);
    put(out, &[";t="]);
    num(out, t);
}

/// A field value formatted on the stack (every request carries two; a `String` per field
/// and its growth were ~4 allocations per request). Four buckets need ~250 bytes, each quota
/// item ~75 more: 1 KB holds them and ten quota items; more (at most twelve, six of the
/// tenant's and six global) are written again on the heap ([`insert`]). The array is zeroed
/// for every answer, so it is no larger than most answers need.
struct FieldBuf {
    bytes: [u8; 1024],
    len: usize,
    /// A write did not fit: the value is incomplete.
    overflow: bool,
}

impl FieldBuf {
    fn new() -> Self {
        Self {
            bytes: [0; 1024],
            len: 0,
            overflow: false,
        }
    }

    fn value(&self) -> Option<HeaderValue> {
        if self.overflow {
            return None;
        }
        HeaderValue::from_bytes(self.bytes.get(..self.len)?).ok()
    }
}

impl Write for FieldBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let Some(dest) = self.bytes.get_mut(self.len..end) else {
            self.overflow = true;
            return Err(std::fmt::Error);
        };
        dest.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

pub fn insert(headers: &mut HeaderMap, view: &BucketsView) {
    let (mut policy, mut state) = (FieldBuf::new(), FieldBuf::new());
    if !render_into(view, &mut policy, &mut state) {
        return;
    }
    let values = match (policy.value(), state.value()) {
        (Some(p), Some(s)) => Some((p, s)),
        // Longer than the stack's buffer (many quota items): written again on the heap.
        _ => {
            let (mut policy, mut state) = (String::new(), String::new());
            render_into(view, &mut policy, &mut state);
            HeaderValue::from_str(&policy)
                .ok()
                .zip(HeaderValue::from_str(&state).ok())
        }
    };
    if let Some((p, s)) = values {
        headers.insert(RATELIMIT_POLICY.clone(), p);
        headers.insert(RATELIMIT.clone(), s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{PerDimension, RateSpec};
    use crate::quota::{QuotaView, Window};

    /// The two fields' values, or `None` when no bucket applies.
    fn render(view: &BucketsView) -> Option<(String, String)> {
        let (mut policy, mut state) = (String::new(), String::new());
        render_into(view, &mut policy, &mut state).then_some((policy, state))
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
}
