//! The `[idempotency]` section: how long `Idempotency-Key` answers are kept, the bounds of the
//! in-memory store, and what a request carrying a key gets when the store cannot be reached.

use serde::{Deserialize, Serialize};

use super::ConfigProblem;

/// What a keyed request gets when the key store (Redis, in cluster mode) does not answer.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreError {
    /// 503 `idempotency_unavailable`: nothing written, nothing charged (the default: a client
    /// that sent a key asked for at most once).
    Refuse,
    /// Processed as if it carried no key (no de-duplication), and counted.
    Accept,
}

/// `Idempotency-Key`: answers kept per tenant and key, replayed to retries.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct IdempotencyConfig {
    /// How long a stored answer is replayed, in seconds from when it was stored.
    pub ttl_s: u64,
    /// Single replica: the most answers kept in memory; the oldest is evicted first.
    pub max_entries: u64,
    /// Single replica: the most bytes the kept answers may take (each counted with its
    /// bookkeeping); the oldest is evicted first.
    pub max_bytes: u64,
    /// `refuse` (503, nothing written) or `accept` (processed without de-duplication) when
    /// the key store does not answer.
    pub on_store_error: OnStoreError,
    /// Cluster mode: how long a claim on a key outlives the replica holding it, in
    /// milliseconds (the holder renews it every quarter of this while it works on the
    /// request; retries elsewhere get 409 until it lapses).
    pub claim_ttl_ms: u64,
    /// Cluster mode: time allowed for one call to Redis, in milliseconds.
    pub command_timeout_ms: u64,
    /// Cluster mode: the most answers one tenant keeps in Redis; storing one more drops that
    /// tenant's oldest (so what Redis holds is at most tenants × this × the largest answer).
    pub max_keys_per_tenant: u64,
    /// Cluster mode: claims a tenant may give up each second (requests refused after their
    /// key was claimed: each costs two Redis scripts), per replica; past this and the burst
    /// its keyed requests are refused `429` (reason `idempotency_releases`) before Redis is
    /// asked anything. Claims given up together overdraw it (up to ten minutes of this
    /// rate), and the tenant is held until that is repaid. Requests refused after their claim
    /// with a 4xx spend it (a 429 of the tenant's own budgets or share, or of the body budget,
    /// too), and so do keyed
    /// requests the store answers itself (a replay, one more per 32 KiB of its answer; a 409;
    /// another replica's request pending); admitted ones, ones the gateway could not serve
    /// (5xx) and 429s of limits every tenant shares never do.
    pub releases_per_tenant_per_sec: u64,
    /// Cluster mode: claims a tenant may give up at once before the rate above applies.
    pub releases_per_tenant_burst: u64,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            ttl_s: 86_400,
            max_entries: 1_000_000,
            max_bytes: 64 * 1024 * 1024,
            on_store_error: OnStoreError::Refuse,
            claim_ttl_ms: 10_000,
            command_timeout_ms: 200,
            max_keys_per_tenant: 100_000,
            releases_per_tenant_per_sec: 20,
            releases_per_tenant_burst: 100,
        }
    }
}

/// A year: TTLs beyond it are typos, and every duration stays far inside `u64` nanoseconds.
const MAX_TTL_S: u64 = 365 * 86_400;

/// Bytes an answer takes per record, at most, for a record Kafka took (the v2 shape with the
/// largest partition and offset: `{"partition":2147483647,"offset":9223372036854775807,
/// "error_code":null,"error":null},` is 86), rounded up; plus room for the rest of the answer.
pub const ANSWER_BYTES_PER_RECORD: u64 = 128;
const ANSWER_ROOM: u64 = 64 * 1024;

/// The largest answer a request of `records` records has, as the store counts it.
pub fn largest_answer(records: usize) -> u64 {
    (records as u64)
        .saturating_mul(ANSWER_BYTES_PER_RECORD)
        .saturating_add(ANSWER_ROOM)
}

impl IdempotencyConfig {
    pub(super) fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, key: &str, message: &str| {
            if !ok {
                problems.push(ConfigProblem::new(format!("idempotency.{key}"), message));
            }
        };
        check(
            (1..=MAX_TTL_S).contains(&self.ttl_s),
            "ttl_s",
            "must be from 1 to 31536000 (a year)",
        );
        check(
            (1..=100_000_000).contains(&self.max_entries),
            "max_entries",
            "must be from 1 to 100000000",
        );
        // An answer larger than the whole store cannot be kept: the store must also hold the
        // largest answer `[limits] max_records_per_request` allows (checked in `Config`).
        check(
            (1 << 20..=1 << 40).contains(&self.max_bytes),
            "max_bytes",
            "must be from 1048576 (1 MiB) to 1099511627776 (1 TiB)",
        );
        check(
            (1_000..=3_600_000).contains(&self.claim_ttl_ms),
            "claim_ttl_ms",
            "must be from 1000 to 3600000",
        );
        check(
            (1..=100_000_000).contains(&self.max_keys_per_tenant),
            "max_keys_per_tenant",
            "must be from 1 to 100000000",
        );
        check(
            (1..=100_000).contains(&self.releases_per_tenant_per_sec),
            "releases_per_tenant_per_sec",
            "must be from 1 to 100000",
        );
        check(
            (1..=1_000_000).contains(&self.releases_per_tenant_burst),
            "releases_per_tenant_burst",
            "must be from 1 to 1000000",
        );
        check(
            (1..=60_000).contains(&self.command_timeout_ms),
            "command_timeout_ms",
            "must be from 1 to 60000",
        );
        problems
    }
}
