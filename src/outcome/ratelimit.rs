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

mod policy;

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::admission::BucketsView;
use crate::budget::{Dimension, Scope};
use crate::quota::Window;

pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// An item's name and the fixed parts around its numbers: `"tenant-records";r=` before the
/// state's `r`, `"tenant-records";q=` before the policy's `q`, `;qu="records"` after its `w`.
/// One `str` each, not a name put together per answer: every write is a call.
struct Name {
    state: &'static str,
    policy: &'static str,
    unit: &'static str,
}

macro_rules! name {
    ($name:literal, $unit:literal) => {
        Name {
            state: concat!("\"", $name, "\";r="),
            policy: concat!("\"", $name, "\";q="),
            unit: concat!(";qu=\"", $unit, "\""),
        }
    };
}

/// Every item's name, by [`bucket_name`] and [`quota_name`]. The draft's quota unit is
/// `content-bytes` for bytes (registered) and `records` for records (ours: one Kafka record).
/// A unit test checks each against the names of its scope, window and dimension.
const NAMES: [Name; 16] = [
    name!("tenant-records", "records"),
    name!("tenant-bytes", "content-bytes"),
    name!("global-records", "records"),
    name!("global-bytes", "content-bytes"),
    name!("tenant-hour-records", "records"),
    name!("tenant-hour-bytes", "content-bytes"),
    name!("tenant-day-records", "records"),
    name!("tenant-day-bytes", "content-bytes"),
    name!("tenant-month-records", "records"),
    name!("tenant-month-bytes", "content-bytes"),
    name!("global-hour-records", "records"),
    name!("global-hour-bytes", "content-bytes"),
    name!("global-day-records", "records"),
    name!("global-day-bytes", "content-bytes"),
    name!("global-month-records", "records"),
    name!("global-month-bytes", "content-bytes"),
];

fn bucket_name(scope: Scope, dimension: Dimension) -> u64 {
    scope as u64 * 2 + dimension as u64
}

fn quota_name(scope: Scope, window: Window, dimension: Dimension) -> u64 {
    4 + scope as u64 * 6 + window as u64 * 2 + dimension as u64
}

fn ceil_secs(ns: u64) -> u64 {
    ns.div_ceil(1_000_000_000)
}

/// Marks, in a key's name word, a bucket whose `w` word is its wait in seconds, not its rate
/// (a share refilling at 0 a second).
const WAIT: u64 = 1 << 8;

/// Each bucket and quota that applies, in a fixed order (buckets, then the tenant's and the
/// global quotas): writes the `RateLimit` field, and gathers in `key` what the
/// `RateLimit-Policy` field is made of (the name, `q`, and what `w` is worked out from).
fn render_state(view: &BucketsView, state: &mut impl Write, key: &mut policy::Key) -> bool {
    let mut any = false;
    let mut item = |name: u64, q: u64, w: u64, r: u64, t: u64| {
        if any {
            let _ = state.write_str(", ");
        }
        any = true;
        let index = usize::try_from(name & !WAIT).unwrap_or(usize::MAX);
        let name_str = NAMES.get(index).map_or("", |n| n.state);
        let _ = state.write_str(name_str);
        num(state, r);
        let _ = state.write_str(";t=");
        num(state, t);
        key.push([name, q, w]);
    };
    for scope in Scope::ALL {
        for (dimension, bucket) in view.of(scope).iter() {
            let Some(b) = bucket else { continue };
            let full_in = ceil_secs(b.full_in_ns);
            // A replica's local share of a small budget may refill at 0 a second while Redis
            // is away (`budget::fallback_of`): never divided by (that panicked every answer of
            // such a tenant into a 500). Such a share's window is the wait until Redis is
            // tried again (`budget::until_reprobe`), not the burst at 1 a second (review 38b
            // of #37: "w=6" for a share that never refills).
            let name = bucket_name(scope, dimension);
            let (name, w) = match b.spec.per_sec {
                0 => (name | WAIT, full_in),
                per_sec => (name, per_sec),
            };
            item(name, b.spec.burst, w, b.available, full_in);
        }
    }
    // Calendar quotas: `q` the window's allowance, `w` its length, `r` what is left of it,
    // `t` the seconds until it turns (a refill of the whole allowance at once).
    for (scope, quotas) in [
        (Scope::Tenant, &view.quotas),
        (Scope::Global, &view.global_quotas),
    ] {
        for (dimension, q) in quotas.iter().flatten() {
            let name = quota_name(scope, q.window, *dimension);
            item(name, q.limit, q.window_s, q.remaining, q.reset_in_s);
        }
    }
    any
}

/// Writes the `RateLimit-Policy` field from what [`render_state`] gathered.
fn render_policy(key: &policy::Key, out: &mut impl Write) {
    for (i, &[name, q, w]) in key.items().iter().enumerate() {
        let index = usize::try_from(name & !WAIT).unwrap_or(usize::MAX);
        let Some(n) = NAMES.get(index) else { continue };
        // A bucket's `w` is the seconds to refill its burst (a share's wait, if it refills at
        // 0 a second); a quota's is its window's length.
        let w = if name & WAIT != 0 {
            w.max(1)
        } else if index < 4 {
            (u128::from(q) * 1_000_000_000 / u128::from(w.max(1)))
                .div_ceil(1_000_000_000)
                .max(1)
                .try_into()
                .unwrap_or(u64::MAX)
        } else {
            w
        };
        if i > 0 {
            let _ = out.write_str(", ");
        }
        let _ = out.write_str(n.policy);
        num(out, q);
        let _ = out.write_str(";w=");
        num(out, w);
        let _ = out.write_str(n.unit);
    }
}

// Items are written piece by piece, numbers by `itoa`: `write!` went through `core::fmt` for
// every number and name, ~1,300 instructions an item and field (callgrind), a sixth of a
// single-record request's path on the workers once a tenant had three quota items.
fn num(out: &mut impl Write, n: u64) {
    let _ = out.write_str(itoa::Buffer::new().format(n));
}

/// A field value formatted on the stack (every answer writes its `RateLimit` field; a
/// `String` per field and its growth were ~4 allocations per request). Four buckets need ~250
/// bytes, each quota item ~75 more: 1 KB holds them and ten quota items; more (at most twelve,
/// six of the tenant's and six global) go on to the heap. The array is zeroed for every answer, so it
/// is no larger than most answers need.
struct FieldBuf {
    bytes: [u8; 1024],
    len: usize,
    /// Where the value goes on once it is longer than the array (the array's part first).
    spill: Option<String>,
}

impl FieldBuf {
    fn new() -> Self {
        Self {
            bytes: [0; 1024],
            len: 0,
            spill: None,
        }
    }

    fn value(&self) -> Option<HeaderValue> {
        match &self.spill {
            Some(long) => HeaderValue::from_str(long).ok(),
            None => HeaderValue::from_bytes(self.bytes.get(..self.len)?).ok(),
        }
    }

    #[cold]
    fn spill(&mut self, s: &str) {
        let long = self.spill.get_or_insert_with(|| {
            // Only whole `str`s were written: the array's part is UTF-8.
            let head = self.bytes.get(..self.len).unwrap_or_default();
            String::from_utf8_lossy(head).into_owned()
        });
        long.push_str(s);
    }
}

impl Write for FieldBuf {
    #[inline]
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        match self.bytes.get_mut(self.len..end) {
            Some(dest) if self.spill.is_none() => {
                dest.copy_from_slice(s.as_bytes());
                self.len = end;
            }
            _ => self.spill(s),
        }
        Ok(())
    }
}

pub fn insert(headers: &mut HeaderMap, view: &BucketsView) {
    let mut state = FieldBuf::new();
    let mut key = policy::Key::default();
    if !render_state(view, &mut state, &mut key) {
        return;
    }
    let policy = policy::cached(&key, || {
        let mut policy = FieldBuf::new();
        render_policy(&key, &mut policy);
        policy.value()
    });
    if let Some((policy, state)) = policy.zip(state.value()) {
        headers.insert(RATELIMIT_POLICY.clone(), policy);
        headers.insert(RATELIMIT.clone(), state);
    }
}

#[cfg(test)]
mod tests;
