//! What cluster mode did, for the metrics: lease calls by scope and outcome, their latency,
//! tokens granted and given back, Redis errors by kind, members and the degraded flag.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

pub use crate::budget::Scope;

/// How a lease call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// Tokens granted (on the request path or as a refill).
    Granted,
    /// The shared bucket did not have the minimum: a 429.
    Refused,
    /// Redis did not answer.
    Error,
}

impl LeaseOutcome {
    pub const ALL: [LeaseOutcome; 3] = [
        LeaseOutcome::Granted,
        LeaseOutcome::Refused,
        LeaseOutcome::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LeaseOutcome::Granted => "granted",
            LeaseOutcome::Refused => "refused",
            LeaseOutcome::Error => "error",
        }
    }
}

/// Redis error kinds counted (see `StoreError::kind`).
pub const ERROR_KINDS: [&str; 5] = ["not_connected", "timeout", "io", "script", "other"];

#[derive(Debug)]
pub struct ClusterStats {
    /// Indexed [scope][outcome].
    lease_calls: [[AtomicU64; 3]; 2],
    pub lease_seconds: Histogram,
    /// Tokens granted, (records, bytes).
    pub granted_records: AtomicU64,
    pub granted_bytes: AtomicU64,
    /// Tokens given back unspent, (records, bytes).
    pub returned_records: AtomicU64,
    pub returned_bytes: AtomicU64,
    redis_errors: [AtomicU64; ERROR_KINDS.len()],
    pub members: AtomicU32,
    pub degraded: AtomicBool,
    /// Another live replica holds this replica's id (logged once).
    pub duplicate: AtomicBool,
    /// Times this replica went to its local shares, the clock reading when the current spell
    /// began, and the time spent on them before it (clock nanoseconds).
    pub degradations: AtomicU64,
    degraded_since_ns: AtomicU64,
    degraded_ns: AtomicU64,
}

impl Default for ClusterStats {
    fn default() -> Self {
        Self {
            lease_calls: Default::default(),
            // 50 µs to ~0.8 s.
            lease_seconds: Histogram::new(exponential_buckets(0.00005, 2.0, 15)),
            granted_records: AtomicU64::new(0),
            granted_bytes: AtomicU64::new(0),
            returned_records: AtomicU64::new(0),
            returned_bytes: AtomicU64::new(0),
            redis_errors: Default::default(),
            members: AtomicU32::new(0),
            degraded: AtomicBool::new(false),
            duplicate: AtomicBool::new(false),
            degradations: AtomicU64::new(0),
            degraded_since_ns: AtomicU64::new(0),
            degraded_ns: AtomicU64::new(0),
        }
    }
}

impl ClusterStats {
    /// A spell on the local shares began at `now_ns`.
    pub fn degraded_since(&self, now_ns: u64) {
        self.degradations.fetch_add(1, Relaxed);
        self.degraded_since_ns.store(now_ns, Relaxed);
    }

    /// The spell ended at `now_ns`.
    pub fn recovered(&self, now_ns: u64) {
        let since = self.degraded_since_ns.load(Relaxed);
        self.degraded_ns
            .fetch_add(now_ns.saturating_sub(since), Relaxed);
    }

    /// Time spent on the local shares so far, the current spell included (seconds).
    pub fn degraded_seconds(&self, now_ns: u64) -> f64 {
        let mut ns = self.degraded_ns.load(Relaxed);
        if self.degraded.load(Relaxed) {
            ns += now_ns.saturating_sub(self.degraded_since_ns.load(Relaxed));
        }
        ns as f64 / 1e9
    }

    pub fn count_lease(&self, scope: Scope, outcome: LeaseOutcome) {
        self.lease_calls[scope as usize][outcome as usize].fetch_add(1, Relaxed);
    }

    pub fn lease_calls(&self, scope: Scope, outcome: LeaseOutcome) -> u64 {
        self.lease_calls[scope as usize][outcome as usize].load(Relaxed)
    }

    pub fn count_error(&self, kind: &str) {
        if let Some(i) = ERROR_KINDS.iter().position(|k| *k == kind) {
            self.redis_errors[i].fetch_add(1, Relaxed);
        }
    }

    pub fn redis_errors(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        ERROR_KINDS
            .iter()
            .zip(&self.redis_errors)
            .map(|(k, v)| (*k, v.load(Relaxed)))
    }
}
