//! Where claims and answers live when replicas share them (cluster mode): a retry that lands
//! on another replica, or on a restarted one, finds the claim or the answer. The Redis one is
//! `cluster::RedisIdempotencyStore`; the assembly hands it in
//! ([`super::Idempotency::clustered`]).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{Corrupt, Fingerprint, StoredAnswer, TenantKey, Token};

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Another request holds it and has not read its body yet.
    Claimed(Token),
    /// Another request's records are with Kafka.
    Pending(Token, Fingerprint),
    /// The answer.
    Answered(Fingerprint, StoredAnswer),
    /// Given up with nothing stored (kept for a while so a late renewal cannot take it again):
    /// free for the next request.
    Released,
}

/// Why the store did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ClusterKeyStoreError {
    #[error("not connected to Redis yet")]
    NotConnected,
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Any other failure; `may_have_run`: the command may have reached the store.
    #[error("Redis: {source}")]
    Failed {
        may_have_run: bool,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
}

impl ClusterKeyStoreError {
    /// Whether the command may have reached the store and run there (or may still run: a
    /// paused or slow Redis runs what it was sent once it goes on).
    pub fn may_have_run(&self) -> bool {
        match self {
            Self::Timeout(_) => true,
            Self::Failed { may_have_run, .. } => *may_have_run,
            Self::NotConnected | Self::Corrupt(_) => false,
        }
    }
}

/// A store call's answer, later.
pub type ClusterKeyFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, ClusterKeyStoreError>> + Send + 'a>>;

/// Claims and answers shared by every replica, each call atomic on its key. A claim, a
/// pending claim and a given-up key live `ttl` unless renewed by their holder; an answer
/// lives its own `ttl`.
pub trait ClusterKeyStore: Send + Sync + std::fmt::Debug {
    /// Opens the connection (once; after that it reconnects by itself).
    fn connect(&self) -> ClusterKeyFuture<'_, ()>;

    /// Claims `key` for the request holding `token`: `None` when it now holds it, else what
    /// the key holds.
    fn claim<'a>(
        &'a self,
        key: &'a TenantKey,
        token: &'a Token,
        ttl: Duration,
    ) -> ClusterKeyFuture<'a, Option<Found>>;

    /// What `key` holds now (`None`: nothing, or given up).
    fn read<'a>(&'a self, key: &'a TenantKey) -> ClusterKeyFuture<'a, Option<Found>>;

    /// Renews a claim: still being read (`None`) or pending with this fingerprint; false
    /// when another request holds the key.
    fn renew<'a>(
        &'a self,
        key: &'a TenantKey,
        token: &'a Token,
        pending: Option<Fingerprint>,
        ttl: Duration,
    ) -> ClusterKeyFuture<'a, bool>;

    /// Stores the answer (kept `ttl`); false when another request holds the key. Each tenant's
    /// answers are bounded in number: storing one past the bound drops that tenant's oldest.
    fn answer<'a>(
        &'a self,
        key: &'a TenantKey,
        token: &'a Token,
        fingerprint: Fingerprint,
        answer: &'a StoredAnswer,
        ttl: Duration,
    ) -> ClusterKeyFuture<'a, bool>;

    /// Gives the claim up (nothing was stored for it). What is left in its place for
    /// `late_renewals` tells a renewal of it, sent before and run after, not to take the key
    /// again; a claim takes it as free.
    fn release<'a>(
        &'a self,
        key: &'a TenantKey,
        token: &'a Token,
        late_renewals: Duration,
    ) -> ClusterKeyFuture<'a, bool>;
}
