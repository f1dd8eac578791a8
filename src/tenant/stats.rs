//! Per-tenant outcome counters since start. Atomics, so the request path never locks for them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::record::Api;
use crate::refusal::Reason;

#[derive(Debug, Default)]
pub struct TenantStats {
    pub admitted_requests: AtomicU64,
    pub admitted_records: AtomicU64,
    pub admitted_bytes: AtomicU64,
    /// Records and bytes the tenant offered that its own budgets did not refuse (see
    /// [`TenantStats::decided`]): the demand the adaptive limit is shared by.
    pub offered_records: AtomicU64,
    pub offered_bytes: AtomicU64,
    /// Records Kafka definitively refused or that could not be delivered in time.
    pub failed_records: AtomicU64,
    /// Records Kafka acknowledged.
    pub delivered_records: AtomicU64,
    /// Records of refused requests whose body was read (counted where they were refused).
    pub refused_records: AtomicU64,
    /// The counters as the status sampler last read them (see `status::history`).
    sampled: Mutex<TenantCounts>,
    /// Refused requests, indexed like [`Reason::ALL`].
    rejected: [AtomicU64; Reason::ALL.len()],
    /// Records and bytes of refused requests whose body was read, indexed like
    /// [`Reason::ALL`] (usage for chargeback, `usage`).
    refused_by: [(AtomicU64, AtomicU64); Reason::ALL.len()],
    /// Requests a limit in shadow mode would have refused (and their records and bytes),
    /// indexed like [`Reason::ALL`]: admitted all the same.
    shadowed: [[AtomicU64; 3]; Reason::ALL.len()],
    /// Requests per API they came through, indexed like [`Api::ALL`]: (answered 2xx, not).
    by_api: [(AtomicU64, AtomicU64); Api::ALL.len()],
}

/// A tenant's counters as read at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantCounts {
    pub admitted_requests: u64,
    pub admitted_records: u64,
    /// Refused requests, indexed like [`Reason::ALL`].
    pub refused: [u64; Reason::ALL.len()],
    pub refused_records: u64,
}

impl TenantCounts {
    pub fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }
}

/// Requests, and the records and bytes they carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Flow {
    pub requests: u64,
    pub records: u64,
    pub bytes: u64,
}

impl Flow {
    /// `self - before`, per count (never below zero).
    pub fn since(self, before: Flow) -> Flow {
        Flow {
            requests: self.requests.saturating_sub(before.requests),
            records: self.records.saturating_sub(before.records),
            bytes: self.bytes.saturating_sub(before.bytes),
        }
    }

    pub fn add(&mut self, other: Flow) {
        self.requests = self.requests.saturating_add(other.requests);
        self.records = self.records.saturating_add(other.records);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }

    pub fn is_zero(&self) -> bool {
        *self == Flow::default()
    }
}

/// What usage for chargeback counts of a tenant: admitted (requests, records, bytes), records
/// Kafka then failed, and refusals by reason (indexed like [`Reason::ALL`]; records and bytes
/// only of refused requests whose body was read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageCounts {
    pub admitted: Flow,
    pub failed_records: u64,
    pub delivered_records: u64,
    pub refused: [Flow; Reason::ALL.len()],
    /// Would-be refusals of limits in shadow mode (admitted), by reason.
    pub shadowed: [Flow; Reason::ALL.len()],
}

/// How many counters [`TenantStats::totals`] gives.
pub const TOTALS: usize = 5 + 2 * Reason::ALL.len() + 2 * Api::ALL.len();

/// Every monotonic counter of a tenant in one fixed order: admitted requests, refused
/// requests, admitted records, failed records, admitted bytes, then refusals by reason (in
/// [`Reason::ALL`] order), then requests by API, answered 2xx and not (in [`Api::ALL`] order),
/// then would-be refusals of limits in shadow mode by reason.
/// What a sum over tenants (the metrics' `_other`) adds up.
pub type Totals = [u64; TOTALS];

/// `into += from`, per counter.
pub fn add_totals(into: &mut Totals, from: &Totals) {
    for (sum, n) in into.iter_mut().zip(from) {
        *sum = sum.saturating_add(*n);
    }
}

/// `into -= from`, per counter (never below zero).
pub fn sub_totals(into: &mut Totals, from: &Totals) {
    for (sum, n) in into.iter_mut().zip(from) {
        *sum = sum.saturating_sub(*n);
    }
}

impl TenantStats {
    /// Every counter now, in the order [`Totals`] states.
    pub fn totals(&self) -> Totals {
        let mut c = [0u64; TOTALS];
        c[0] = self.admitted_requests.load(Relaxed);
        c[1] = Reason::ALL.iter().map(|r| self.rejected_count(*r)).sum();
        c[2] = self.admitted_records.load(Relaxed);
        c[3] = self.failed_records.load(Relaxed);
        c[4] = self.admitted_bytes.load(Relaxed);
        for (i, r) in Reason::ALL.iter().enumerate() {
            c[5 + i] = self.rejected_count(*r);
        }
        for (i, api) in Api::ALL.iter().enumerate() {
            let (ok, not_ok) = self.api_counts(*api);
            c[5 + Reason::ALL.len() + 2 * i] = ok;
            c[5 + Reason::ALL.len() + 2 * i + 1] = not_ok;
        }
        let shadow = 5 + Reason::ALL.len() + 2 * Api::ALL.len();
        for (i, r) in Reason::ALL.iter().enumerate() {
            c[shadow + i] = self.shadowed_flow(*r).requests;
        }
        c
    }

    /// The counters now.
    pub fn counts(&self) -> TenantCounts {
        TenantCounts {
            admitted_requests: self.admitted_requests.load(Relaxed),
            admitted_records: self.admitted_records.load(Relaxed),
            refused: std::array::from_fn(|i| self.rejected_count(Reason::ALL[i])),
            refused_records: self.refused_records.load(Relaxed),
        }
    }

    /// Records `now` as sampled and returns what was sampled before.
    pub fn swap_sampled(&self, now: TenantCounts) -> TenantCounts {
        let mut sampled = self
            .sampled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *sampled, now)
    }

    /// The one count of what admission decided about records the tenant offered — a whole
    /// request, the part of a body read when a check cut it short, a stream's record, or the
    /// early check's estimate before a body is read (`read` false) — admitted (`refused`
    /// `None`) or refused for `refused`:
    /// - they are demand, what the adaptive limit is shared by, unless the tenant's own budgets
    ///   refused them: no share of a shared limit could admit those, and counted they would
    ///   win the tenant a share it cannot use, taken from the others in its class;
    /// - refused after their body was read, they count as refused records (the status page).
    pub fn decided(&self, records: u64, bytes: u64, refused: Option<Reason>, read: bool) {
        if !refused.is_some_and(Reason::is_own_budget) {
            self.offered_records.fetch_add(records, Relaxed);
            self.offered_bytes.fetch_add(bytes, Relaxed);
        }
        if let (Some(reason), true) = (refused, read) {
            self.refused_records.fetch_add(records, Relaxed);
            let (r, b) = &self.refused_by[reason.index()];
            r.fetch_add(records, Relaxed);
            b.fetch_add(bytes, Relaxed);
        }
    }

    /// What usage for chargeback reads: every count it keeps, now.
    pub fn usage(&self) -> UsageCounts {
        UsageCounts {
            admitted: Flow {
                requests: self.admitted_requests.load(Relaxed),
                records: self.admitted_records.load(Relaxed),
                bytes: self.admitted_bytes.load(Relaxed),
            },
            failed_records: self.failed_records.load(Relaxed),
            delivered_records: self.delivered_records.load(Relaxed),
            refused: std::array::from_fn(|i| {
                let (records, bytes) = &self.refused_by[i];
                Flow {
                    requests: self.rejected[i].load(Relaxed),
                    records: records.load(Relaxed),
                    bytes: bytes.load(Relaxed),
                }
            }),
            shadowed: std::array::from_fn(|i| self.shadowed_flow(Reason::ALL[i])),
        }
    }

    pub fn admitted(&self, records: u64, bytes: u64) {
        self.admitted_requests.fetch_add(1, Relaxed);
        self.admitted_records.fetch_add(records, Relaxed);
        self.admitted_bytes.fetch_add(bytes, Relaxed);
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

    /// A request admitted that a limit in shadow mode would have refused for `reason`.
    pub fn shadowed(&self, reason: Reason, charge: crate::record::Charge) {
        let [requests, records, bytes] = &self.shadowed[reason.index()];
        requests.fetch_add(1, Relaxed);
        records.fetch_add(charge.records, Relaxed);
        bytes.fetch_add(charge.bytes, Relaxed);
    }

    /// Would-be refusals for `reason` (shadow mode): requests, records, bytes.
    pub fn shadowed_flow(&self, reason: Reason) -> Flow {
        let [requests, records, bytes] = &self.shadowed[reason.index()];
        Flow {
            requests: requests.load(Relaxed),
            records: records.load(Relaxed),
            bytes: bytes.load(Relaxed),
        }
    }

    pub fn rejected(&self, reason: Reason) {
        self.rejected[reason.index()].fetch_add(1, Relaxed);
    }

    pub fn rejected_count(&self, reason: Reason) -> u64 {
        self.rejected[reason.index()].load(Relaxed)
    }

    pub fn failed(&self, records: u64) {
        self.failed_records.fetch_add(records, Relaxed);
    }

    pub fn delivered(&self, records: u64) {
        self.delivered_records.fetch_add(records, Relaxed);
    }
}
