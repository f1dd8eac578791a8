//! Why a request is not admitted: a 429 [`Refusal`] (come back later, with the wait) or a
//! [`TooLarge`] request that no bucket or buffer share can ever hold (a 413).
//!
//! A foundation module, so that admission decides refusals, tenant counters count them and the
//! outcome room answers them, without importing one another.
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use std::sync::Arc;
use std::time::Duration;

use crate::budget::{Dimension, Scope};
use crate::quota::Window;

/// Why a request was refused with 429; the strings are part of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A budget's bucket (the tenant's or the global one, in records or in bytes) is short.
    Budget(Scope, Dimension),
    TenantBuffer,
    BufferFull,
    /// The memory budget for request bodies in flight is spent.
    ServerBusy,
    /// Kafka is slow: the adaptive limit (`[adaptive]`) is below demand, and this tenant's
    /// priority class gets no more now.
    Adaptive,
    /// A lag guard (`[[lag_guards]]`): the topic's consumers are behind, producers are capped.
    ConsumerLag,
    /// A calendar quota (the tenant's `quotas`) is used up until its window turns.
    Quota(Scope),
}

impl Reason {
    pub const ALL: [Reason; 11] = [
        Reason::Budget(Scope::Tenant, Dimension::Records),
        Reason::Budget(Scope::Tenant, Dimension::Bytes),
        Reason::Budget(Scope::Global, Dimension::Records),
        Reason::Budget(Scope::Global, Dimension::Bytes),
        Reason::TenantBuffer,
        Reason::BufferFull,
        Reason::ServerBusy,
        Reason::Adaptive,
        Reason::ConsumerLag,
        Reason::Quota(Scope::Tenant),
        Reason::Quota(Scope::Global),
    ];

    /// The tenant's own budgets (records or bytes): what they refuse, no share of a shared
    /// limit could admit.
    pub fn is_own_budget(self) -> bool {
        matches!(self, Reason::Budget(Scope::Tenant, _))
    }

    /// What the tenant's own traffic spent: its budgets and its share of the buffer, not a
    /// limit every tenant shares (the global budgets, the buffer, the body budget, Kafka's
    /// pace or a lag guard), which another tenant's load may have spent.
    pub fn is_tenants_own(self) -> bool {
        matches!(
            self,
            Reason::Budget(Scope::Tenant, _) | Reason::TenantBuffer | Reason::Quota(Scope::Tenant)
        )
    }

    /// A budget's refill (tenant or global, records or bytes): a wait known to the
    /// nanosecond, which holding the request for ([`crate::hold`]) can cover.
    pub fn is_rate(self) -> bool {
        matches!(self, Reason::Budget(..))
    }

    /// Where this reason sits in [`Reason::ALL`]: the index of per-reason counters.
    pub const fn index(self) -> usize {
        match self {
            Reason::Budget(scope, dimension) => 2 * scope as usize + dimension as usize,
            Reason::TenantBuffer => 4,
            Reason::BufferFull => 5,
            Reason::ServerBusy => 6,
            Reason::Adaptive => 7,
            Reason::ConsumerLag => 8,
            Reason::Quota(scope) => 9 + scope as usize,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Budget(Scope::Tenant, Dimension::Records) => "tenant_records",
            Reason::Budget(Scope::Tenant, Dimension::Bytes) => "tenant_bytes",
            Reason::Budget(Scope::Global, Dimension::Records) => "global_records",
            Reason::Budget(Scope::Global, Dimension::Bytes) => "global_bytes",
            Reason::TenantBuffer => "tenant_buffer",
            Reason::BufferFull => "buffer_full",
            Reason::ServerBusy => "server_busy",
            Reason::Adaptive => "adaptive",
            Reason::ConsumerLag => "consumer_lag",
            Reason::Quota(Scope::Tenant) => "tenant_quota",
            Reason::Quota(Scope::Global) => "global_quota",
        }
    }
}

/// A 429: what ran out and when the same request would be admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub retry_after: Duration,
    /// For `adaptive`: the tenant's priority class, named in the detail.
    pub class: Option<&'static str>,
    /// For `consumer_lag`: which guard, topic and consumer group, named in the detail.
    pub lag: Option<Arc<LagNote>>,
    /// For `tenant_quota` / `global_quota`: which window, named in the detail.
    pub quota: Option<Window>,
}

/// The guard behind a `consumer_lag` refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LagNote {
    pub guard: Arc<str>,
    pub topic: String,
    pub group: Arc<str>,
}

impl Refusal {
    pub fn new(reason: Reason, retry_after: Duration) -> Self {
        Self {
            reason,
            retry_after,
            class: None,
            lag: None,
            quota: None,
        }
    }

    /// A tenant's quota of `window` used up: back in `wait` (the window's end: a month's
    /// reset may be weeks away, so told at most a day ahead, `Retry-After`'s bound).
    pub fn quota(window: Window, wait: Duration) -> Self {
        Self::quota_of(Scope::Tenant, window, wait)
    }

    /// [`Refusal::quota`] of a tenant's quota or a global one.
    pub fn quota_of(scope: Scope, window: Window, wait: Duration) -> Self {
        Self {
            quota: Some(window),
            ..Self::new(Reason::Quota(scope), wait.min(MAX_RETRY_AFTER))
        }
    }

    /// Milliseconds to wait, rounded up so a client that waits exactly this long is admitted.
    pub fn retry_after_ms(&self) -> u64 {
        wait_ms(self.retry_after)
    }

    /// `Retry-After` in whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        wait_secs(self.retry_after)
    }
}

/// The longest wait ever told (`Retry-After`, `retry_after_ms`): a day. Only a budget whose
/// burst takes longer than that to refill can need more; its client is told the rest when it
/// comes back. Nothing that means "never" or an overflow can reach a header past this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// A wait in milliseconds, rounded up (waiting exactly this long is enough), at most
/// [`MAX_RETRY_AFTER`].
pub fn wait_ms(wait: Duration) -> u64 {
    let ms = wait.min(MAX_RETRY_AFTER).as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// A wait in whole seconds for `Retry-After`, rounded up, at least 1.
pub fn wait_secs(wait: Duration) -> u64 {
    wait_ms(wait).div_ceil(1000).max(1)
}

/// A request larger than some bucket or buffer can ever hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// What was counted: "records" or "bytes".
    pub unit: &'static str,
    pub requested: u64,
    /// Which limit: "tenant records_burst", "global bytes_burst", "buffer share", ...
    pub limit: &'static str,
    pub allowed: u64,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// Come back later.
    Refused(Refusal),
    /// Never admissible as it is (bigger than a burst or a buffer share): a 413.
    TooLarge(TooLarge),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one_second() {
        let r = |ns| {
            Refusal::new(
                Reason::Budget(Scope::Tenant, Dimension::Records),
                Duration::from_nanos(ns),
            )
        };
        assert_eq!((r(1).retry_after_ms(), r(1).retry_after_secs()), (1, 1));
        let long = r(1_000_000_001);
        assert_eq!((long.retry_after_ms(), long.retry_after_secs()), (1001, 2));
        assert_eq!(r(3_000_000_000).retry_after_secs(), 3);
    }

    #[test]
    fn each_reason_counts_at_its_own_place_with_its_own_name() {
        let mut names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
        names.dedup();
        assert_eq!(names.len(), Reason::ALL.len());
    }

    #[test]
    fn no_wait_told_is_longer_than_a_day() {
        let never = Refusal::new(
            Reason::Budget(Scope::Tenant, Dimension::Records),
            Duration::from_nanos(u64::MAX),
        );
        assert_eq!(never.retry_after_secs(), 86_400);
        assert_eq!(never.retry_after_ms(), 86_400_000);
        assert_eq!(wait_secs(Duration::MAX), 86_400);
    }
}
