//! Per-tenant outcome counters since start. Atomics, so the request path never locks for them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::refusal::Reason;

#[derive(Debug, Default)]
pub struct TenantStats {
    pub admitted_requests: AtomicU64,
    pub admitted_records: AtomicU64,
    pub admitted_bytes: AtomicU64,
    /// Records Kafka definitively refused or that could not be delivered in time.
    pub failed_records: AtomicU64,
    /// Refused requests, indexed like [`Reason::ALL`].
    rejected: [AtomicU64; Reason::ALL.len()],
}

impl TenantStats {
    pub fn admitted(&self, records: u64, bytes: u64) {
        self.admitted_requests.fetch_add(1, Relaxed);
        self.admitted_records.fetch_add(records, Relaxed);
        self.admitted_bytes.fetch_add(bytes, Relaxed);
    }

    pub fn rejected(&self, reason: Reason) {
        self.rejected[reason as usize].fetch_add(1, Relaxed);
    }

    pub fn rejected_count(&self, reason: Reason) -> u64 {
        self.rejected[reason as usize].load(Relaxed)
    }

    pub fn failed(&self, records: u64) {
        self.failed_records.fetch_add(records, Relaxed);
    }
}
