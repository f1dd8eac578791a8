//! Per-tenant outcome counters since start. Atomics, so the request path never locks for them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::refusal::Reason;

#[derive(Debug, Default)]
pub struct TenantStats {
    pub admitted_requests: AtomicU64,
    pub admitted_records: AtomicU64,
    pub admitted_bytes: AtomicU64,
    /// Records and bytes of every request that reached admission, admitted or not: the
    /// demand the adaptive limit is shared by.
    pub offered_records: AtomicU64,
    pub offered_bytes: AtomicU64,
    /// Records Kafka definitively refused or that could not be delivered in time.
    pub failed_records: AtomicU64,
    /// Refused requests, indexed like [`Reason::ALL`].
    rejected: [AtomicU64; Reason::ALL.len()],
    /// Requests per API they came through, indexed like [`Api::ALL`]: (answered 2xx, not).
    by_api: [(AtomicU64, AtomicU64); Api::ALL.len()],
}

/// The API a produce request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// floodgate's own `/v1`.
    V1,
    /// Confluent REST Proxy v2.
    V2,
    /// Confluent REST Proxy v3 (streams and batches).
    V3,
}

impl Api {
    pub const ALL: [Api; 3] = [Api::V1, Api::V2, Api::V3];

    pub fn as_str(self) -> &'static str {
        match self {
            Api::V1 => "v1",
            Api::V2 => "v2",
            Api::V3 => "v3",
        }
    }
}

impl TenantStats {
    pub fn admitted(&self, records: u64, bytes: u64) {
        self.admitted_requests.fetch_add(1, Relaxed);
        self.admitted_records.fetch_add(records, Relaxed);
        self.admitted_bytes.fetch_add(bytes, Relaxed);
    }

    /// Counts a request answered through `api`, successful or not.
    pub fn offered(&self, records: u64, bytes: u64) {
        self.offered_records.fetch_add(records, Relaxed);
        self.offered_bytes.fetch_add(bytes, Relaxed);
    }

    pub fn count_api(&self, api: Api, ok: bool) {
        let (good, bad) = &self.by_api[api as usize];
        if ok { good } else { bad }.fetch_add(1, Relaxed);
    }

    /// Requests through `api`: (successful, not).
    pub fn api_counts(&self, api: Api) -> (u64, u64) {
        let (good, bad) = &self.by_api[api as usize];
        (good.load(Relaxed), bad.load(Relaxed))
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
