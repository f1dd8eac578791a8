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

use std::fmt::Write as _;

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::admission::BucketsView;
use crate::budget::BucketView;

pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

fn buckets(view: &BucketsView) -> [(&'static str, &'static str, Option<BucketView>); 4] {
    [
        ("tenant-records", "records", view.tenant_records),
        ("tenant-bytes", "content-bytes", view.tenant_bytes),
        ("global-records", "records", view.global_records),
        ("global-bytes", "content-bytes", view.global_bytes),
    ]
}

fn ceil_secs(ns: u128) -> u128 {
    ns.div_ceil(1_000_000_000)
}

/// The two fields' values, or `None` when no bucket applies.
pub fn render(view: &BucketsView) -> Option<(String, String)> {
    let mut policy = String::new();
    let mut state = String::new();
    for (name, unit, bucket) in buckets(view) {
        let Some(b) = bucket else { continue };
        if !policy.is_empty() {
            policy.push_str(", ");
            state.push_str(", ");
        }
        let window =
            ceil_secs(u128::from(b.spec.burst) * 1_000_000_000 / u128::from(b.spec.per_sec)).max(1);
        let _ = write!(
            policy,
            "\"{name}\";q={};w={window};qu=\"{unit}\"",
            b.spec.burst
        );
        let _ = write!(
            state,
            "\"{name}\";r={};t={}",
            b.available,
            ceil_secs(u128::from(b.full_in_ns))
        );
    }
    (!policy.is_empty()).then_some((policy, state))
}

pub fn insert(headers: &mut HeaderMap, view: &BucketsView) {
    if let Some((policy, state)) = render(view) {
        if let (Ok(p), Ok(s)) = (HeaderValue::try_from(policy), HeaderValue::try_from(state)) {
            headers.insert(RATELIMIT_POLICY.clone(), p);
            headers.insert(RATELIMIT.clone(), s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::RateSpec;

    #[test]
    fn one_item_per_configured_bucket() {
        let view = BucketsView {
            tenant_records: Some(BucketView {
                spec: RateSpec {
                    per_sec: 100,
                    burst: 150,
                },
                available: 42,
                full_in_ns: 1_080_000_000,
            }),
            global_bytes: Some(BucketView {
                spec: RateSpec {
                    per_sec: 1000,
                    burst: 1000,
                },
                available: 1000,
                full_in_ns: 0,
            }),
            ..BucketsView::default()
        };
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
    fn no_fields_without_buckets() {
        assert_eq!(render(&BucketsView::default()), None);
    }
}
