//! What cluster mode needs of the shared budget state, whatever keeps it: lease tokens from a
//! shared pair of buckets, give unspent ones back, and count the members. [`RedisStore`]
//! (`redis_store`) is the one in production; another store implements [`BudgetStore`] and
//! changes nothing outside `cluster`.
//!
//! [`RedisStore`]: super::RedisStore

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::budget::{BudgetSpec, PerDimension};
use crate::record::Charge;

/// What a lease call answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub granted: Charge,
    /// What the shared buckets have left after this call.
    pub left: Charge,
    /// Set when the minimum asked for was not there: nothing was granted, and this is how
    /// long until it would be.
    pub wait: Option<Duration>,
}

/// What a heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Live members, this one included.
    pub members: u32,
    /// This replica's place among the live members' ids (from 0), for exact local shares.
    pub rank: u32,
    /// This replica's id is held by another process whose entry has not lapsed: this
    /// heartbeat changed nothing.
    pub duplicate: bool,
    /// With `duplicate`: that process's instance id and the heartbeats it has sent. A holder
    /// whose count moves between two looks is alive; one whose count stands still until its
    /// entry lapses is gone (killed without leaving).
    pub holder: Option<(String, u64)>,
    /// This process was not held as the replica's holder before this beat: its first, or
    /// Redis forgot it (restarted empty, or its entry lapsed).
    pub fresh: bool,
}

/// How many tokens to ask for in each dimension.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask {
    pub want: u64,
    pub min: u64,
    /// What the caller last knew the bucket to hold (its last answer plus the refill since;
    /// the burst if it never heard): where a bucket the store has no state for starts, so a
    /// store that forgot its state (a Redis restarted empty) hands out no fresh burst.
    pub level: u64,
}

/// What to ask of a quota's shared count (see `quota.lua`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QuotaAsk {
    pub limit: PerDimension<Option<u64>>,
    pub want: Charge,
    pub min: Charge,
    /// The count the caller last heard: where a count the store forgot starts.
    pub known: Charge,
    /// Admitted without a lease in the window in all, while the store did not answer: what
    /// the store has not been told of yet is added to the count (a report is never counted
    /// twice).
    pub outage: Charge,
    /// An unspent part given back (a replica leaving).
    pub give: Charge,
    /// What the caller was granted in the window, as it heard the answers: a grant the store
    /// made whose answer was lost is taken off the count again.
    pub received: Charge,
    /// The members counted: a lease beyond `min` takes at most a member's part of the rest.
    pub members: u32,
    /// When the count may be forgotten (Unix seconds).
    pub expire_at_s: i64,
    /// A count made where its tenant has none (its first, or Redis forgot them) is unsure for
    /// this long: it takes the highest count callers heard, and grants each caller at most
    /// `fraction` × limit / members meanwhile (see `quota.lua`).
    pub unsure_ms: u64,
    pub fraction: f64,
}

/// What a quota lease answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaGrant {
    pub granted: Charge,
    /// The shared count after this call, every part leased included.
    pub count: Charge,
    /// `min` was not there: nothing was granted.
    pub refused: bool,
    /// The count is unsure for this long more (`quota.lua`): a refusal lasts no longer.
    pub unsure_for: Option<Duration>,
}

/// Why the store did not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not connected to Redis yet")]
    NotConnected,
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Any other failure; `kind` is its metric label (one of [`super::ERROR_KINDS`]).
    #[error("Redis: {source}")]
    Failed {
        kind: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// A closed label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::NotConnected => "not_connected",
            StoreError::Timeout(_) => "timeout",
            StoreError::Failed { kind, .. } => kind,
        }
    }
}

/// A store call's answer, later.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The shared budget state: one pair of GCRA buckets (records, bytes) per key, and the
/// members. Every call is atomic on its key, so the state is exact under any number of
/// replicas.
pub trait BudgetStore: Send + Sync + std::fmt::Debug {
    /// Opens the connection (once; after that it reconnects by itself).
    fn connect(&self) -> StoreFuture<'_, ()>;

    /// The key of a tenant's pair.
    fn tenant_key(&self, tenant: &str) -> String;

    /// The key of the global pair.
    fn global_key(&self) -> String;

    /// Takes up to `want` tokens (at least `min`) from the pair at `key`, or nothing.
    fn lease<'a>(
        &'a self,
        key: &'a str,
        spec: &'a BudgetSpec,
        asks: PerDimension<Ask>,
    ) -> StoreFuture<'a, Grant>;

    /// Gives unspent tokens back to the pair at `key`.
    fn give_back<'a>(
        &'a self,
        key: &'a str,
        spec: &'a BudgetSpec,
        tokens: Charge,
    ) -> StoreFuture<'a, ()>;

    /// The key of a tenant's shared count for the quota window of `window` starting at
    /// `start` (Unix seconds).
    fn quota_key(&self, tenant: &str, window: crate::quota::Window, start: i64) -> String;

    /// The key of a global quota's shared count, as [`Store::quota_key`] of a tenant's.
    fn global_quota_key(&self, window: crate::quota::Window, start: i64) -> String;

    /// Leases from (or gives back to) the quota count at `key`, for the process `instance`.
    fn quota<'a>(
        &'a self,
        key: &'a str,
        instance: &'a str,
        ask: QuotaAsk,
    ) -> StoreFuture<'a, QuotaGrant>;

    /// Announces replica `id`, held by this process (`instance`), or takes it out (`leave`);
    /// counts the live members by distinct id.
    fn heartbeat<'a>(
        &'a self,
        id: &'a str,
        instance: &'a str,
        ttl: Duration,
        leave: bool,
    ) -> StoreFuture<'a, Membership>;
}
