//! What the key step did, for the metrics: one counter per outcome and per failed store
//! operation. Atomics only: the request path never looks up a label.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What became of a request that carried a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOutcome {
    /// First sight of the key: processed, its answer stored once final.
    Processed,
    /// A stored answer sent again.
    Replayed,
    /// A retry that waited for the original's records (on this replica or another) and
    /// answered with their outcome.
    Attached,
    /// 409: the original was still being read or admitted.
    Conflict,
    /// 422: the key was used for another request.
    Reused,
    /// The store did not answer and `on_store_error = "refuse"`: 503.
    Refused,
    /// The store did not answer and `on_store_error = "accept"`: processed without
    /// de-duplication.
    Unprotected,
    /// Cluster mode: 429 before the key was claimed, its tenant's allowance of releases spent.
    Held,
}

impl KeyOutcome {
    pub const ALL: [KeyOutcome; 8] = [
        KeyOutcome::Processed,
        KeyOutcome::Replayed,
        KeyOutcome::Attached,
        KeyOutcome::Conflict,
        KeyOutcome::Reused,
        KeyOutcome::Refused,
        KeyOutcome::Unprotected,
        KeyOutcome::Held,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            KeyOutcome::Processed => "processed",
            KeyOutcome::Replayed => "replayed",
            KeyOutcome::Attached => "attached",
            KeyOutcome::Conflict => "conflict",
            KeyOutcome::Reused => "reused",
            KeyOutcome::Refused => "refused",
            KeyOutcome::Unprotected => "unprotected",
            KeyOutcome::Held => "held",
        }
    }
}

/// A store operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    /// Claiming a key (or reading it) before the request was processed.
    Claim,
    /// Storing a final answer.
    Store,
    /// Renewing the claims this replica holds (cluster mode).
    Renew,
    /// Giving a claim up (the request stored nothing).
    Release,
    /// Reading another replica's answer while waiting for it.
    Read,
    /// An answer too large to keep (single replica: larger than `max_bytes`).
    TooLarge,
}

impl StoreOp {
    pub const ALL: [StoreOp; 6] = [
        StoreOp::Claim,
        StoreOp::Store,
        StoreOp::Renew,
        StoreOp::Release,
        StoreOp::Read,
        StoreOp::TooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StoreOp::Claim => "claim",
            StoreOp::Store => "store",
            StoreOp::Renew => "renew",
            StoreOp::Release => "release",
            StoreOp::Read => "read",
            StoreOp::TooLarge => "too_large",
        }
    }
}

#[derive(Debug, Default)]
pub struct KeyStats {
    outcomes: [AtomicU64; KeyOutcome::ALL.len()],
    store_errors: [AtomicU64; StoreOp::ALL.len()],
}

impl KeyStats {
    pub fn count(&self, outcome: KeyOutcome) {
        self.outcomes[outcome as usize].fetch_add(1, Relaxed);
    }

    pub fn outcome(&self, outcome: KeyOutcome) -> u64 {
        self.outcomes[outcome as usize].load(Relaxed)
    }

    pub fn store_error(&self, op: StoreOp) {
        self.store_errors[op as usize].fetch_add(1, Relaxed);
    }

    pub fn store_errors(&self, op: StoreOp) -> u64 {
        self.store_errors[op as usize].load(Relaxed)
    }
}
