//! Token-bucket budgets: per tenant and global, in records and in bytes.
//!
//! Why not `governor`: governor's GCRA admits one dimension per limiter, and a rejected
//! `check_n` on the second limiter cannot undo the first limiter's accepted charge (there is
//! no refund API). Our rule is "a refused request costs nothing, anywhere", across four
//! buckets (tenant records, tenant bytes, global records, global bytes) plus the buffer. So
//! this module keeps governor's idea (GCRA: one "theoretical arrival time" per bucket, no
//! timer, no background refill) and makes admission atomic across dimensions:
//! - a tenant's two buckets live under that tenant's own mutex (no global lock);
//! - the global pair is packed into one 128-bit word and updated with a single
//!   compare-and-swap (lock-free), only after the tenant's buckets have said yes, and
//!   the tenant's buckets are committed only after the global CAS succeeded.
//!
//! A foundation module: it imports only [`crate::record::Charge`], and knows nothing of
//! tenants, configuration files or HTTP.
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

mod clock;
mod gcra;
mod global;
mod slice;
mod tenant_buckets;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use gcra::{BucketView, RateSpec, MAX_BURST, MAX_RATE_PER_SEC};
pub use global::GlobalBudget;
pub use slice::{
    fallback_entry, fallback_of, FallbackLevel, Heard, Missing, Mode, ModeCell, Slice, REFUSAL_MEMO,
};
pub use tenant_buckets::{PendingCharge, TenantBuckets};

pub use crate::dimension::{Dimension, PerDimension};
use crate::record::Charge;

/// A budget in both dimensions; `None` means that dimension is not limited.
pub type BudgetSpec = PerDimension<Option<RateSpec>>;

/// Whose budget: one tenant's, or the global broker-protection budget every tenant shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Tenant,
    Global,
}

impl Scope {
    pub const ALL: [Scope; 2] = [Scope::Tenant, Scope::Global];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Tenant => "tenant",
            Scope::Global => "global",
        }
    }
}

/// A bucket that said no, and how long until it would say yes to the same request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortfall {
    pub dimension: Dimension,
    pub wait_ns: u64,
}

/// Why a bucket cannot take a request now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// Not enough tokens: the request would fit after the wait.
    Wait(Shortfall),
    /// Cluster mode: the leased slice lacks this much; the cluster must be asked for it.
    Lease(Missing),
}

/// A budget's level: each bucket's theoretical arrival time (TAT), in that bucket's own ticks
/// under the spec it is counted in.
pub type Tats = PerDimension<u64>;

/// Takes from both dimensions or from neither.
pub fn take_both(
    spec: &BudgetSpec,
    tats: Tats,
    now_ns: u64,
    charge: Charge,
) -> Result<Tats, Shortfall> {
    let mut taken = tats;
    let mut short: Option<Shortfall> = None;
    for d in Dimension::ALL {
        let Some(s) = spec[d] else { continue };
        match s.try_take(tats[d], now_ns, charge[d]) {
            Ok(tat) => taken[d] = tat,
            // Report the first dimension that refuses, but wait for the slower of the two.
            Err(wait_ns) => {
                let first = short.unwrap_or(Shortfall {
                    dimension: d,
                    wait_ns,
                });
                short = Some(Shortfall {
                    wait_ns: first.wait_ns.max(wait_ns),
                    ..first
                });
            }
        }
    }
    short.map_or(Ok(taken), Err)
}

/// Retargets each dimension's TAT from `old` to `new` (see [`RateSpec::retarget`]).
pub fn retarget(old: &BudgetSpec, new: &BudgetSpec, tats: Tats, now_ns: u64) -> Tats {
    PerDimension::from_fn(|d| match (old[d], new[d]) {
        (Some(o), Some(n)) => o.retarget(tats[d], now_ns, &n),
        // Newly limited: starts full. No longer limited: the value is unused.
        _ => 0,
    })
}

/// What each limited bucket holds at `now_ns`.
pub fn view_of(spec: &BudgetSpec, tats: Tats, now_ns: u64) -> PerDimension<Option<BucketView>> {
    PerDimension::from_fn(|d| spec[d].map(|s| s.view(tats[d], now_ns)))
}

/// A local share that does not refill by itself (a budget smaller than its replicas, Redis
/// away: `fallback_of`) is full again at the earliest when Redis is next tried, `reprobe_ns`
/// on: shown so, not as full now (review 38b of #37: `r=0;t=0` told clients to retry at once
/// while the refusal said a second).
pub fn until_reprobe(
    views: PerDimension<Option<BucketView>>,
    reprobe_ns: u64,
) -> PerDimension<Option<BucketView>> {
    views.map(|view| {
        view.map(|mut v| {
            if v.spec.per_sec == 0 && v.available < v.spec.burst {
                v.full_in_ns = v.full_in_ns.max(reprobe_ns);
            }
            v
        })
    })
}
