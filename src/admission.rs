//! The admission decision: does a request of `n` records and `m` bytes go to Kafka now?
//!
//! Order of checks (and so the reason a client hears): tenant records, tenant bytes, global
//! records, global bytes, the tenant's share of the buffer, the buffer itself. Everything is
//! checked before anything is charged, under the tenant's own lock; then the buffer is
//! reserved (one CAS, exact rollback), then the global budget is charged (one CAS), then the
//! tenant's buckets are committed. A refusal at any step leaves every bucket and the buffer as
//! they were.

use std::sync::Arc;
use std::time::Duration;

use crate::budget::{BucketView, Clock, Dimension, GlobalBudget, Shortfall};
use crate::buffer::{Buffer, BufferLease};
use crate::tenant::Tenant;

/// Why a request was refused with 429; the strings are part of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    TenantRecords,
    TenantBytes,
    GlobalRecords,
    GlobalBytes,
    TenantBuffer,
    BufferFull,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::TenantRecords,
        Reason::TenantBytes,
        Reason::GlobalRecords,
        Reason::GlobalBytes,
        Reason::TenantBuffer,
        Reason::BufferFull,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::TenantRecords => "tenant_records",
            Reason::TenantBytes => "tenant_bytes",
            Reason::GlobalRecords => "global_records",
            Reason::GlobalBytes => "global_bytes",
            Reason::TenantBuffer => "tenant_buffer",
            Reason::BufferFull => "buffer_full",
        }
    }

    fn tenant(s: Shortfall) -> Self {
        match s.dimension {
            Dimension::Records => Reason::TenantRecords,
            Dimension::Bytes => Reason::TenantBytes,
        }
    }

    fn global(s: Shortfall) -> Self {
        match s.dimension {
            Dimension::Records => Reason::GlobalRecords,
            Dimension::Bytes => Reason::GlobalBytes,
        }
    }
}

/// A 429: what ran out and when the same request would be admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub retry_after: Duration,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// Come back later.
    Refused(Refusal),
    /// Never admissible as it is (bigger than a burst or a buffer share): a 413.
    TooLarge(TooLarge),
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

/// Every bucket that applies to a tenant, as it stands: the source of the RateLimit headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitsView {
    pub tenant_records: Option<BucketView>,
    pub tenant_bytes: Option<BucketView>,
    pub global_records: Option<BucketView>,
    pub global_bytes: Option<BucketView>,
}

/// The shared part of admission: the clock, the global budget and the buffer.
#[derive(Debug)]
pub struct Admission {
    clock: Arc<dyn Clock>,
    pub global: GlobalBudget,
    pub buffer: Arc<Buffer>,
}

impl Admission {
    pub fn new(clock: Arc<dyn Clock>, global: GlobalBudget, buffer: Arc<Buffer>) -> Self {
        Self {
            clock,
            global,
            buffer,
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Admits the whole request (charging every budget and reserving buffer space) or
    /// nothing. The view is taken under the same lock as the decision.
    pub fn admit(
        &self,
        tenant: &Tenant,
        records: u64,
        bytes: u64,
    ) -> (Result<BufferLease, Denial>, LimitsView) {
        let now = self.clock.now_ns();
        let mut limits = tenant.limits();
        let decision = (|| {
            let share = limits.buffer_share;
            self.never_fits(limits.buckets.spec(), share, records, bytes)?;
            let charge = limits.buckets.check(now, records, bytes);
            let global = self.global.check(now, records, bytes);
            let charge = match (charge, global) {
                (Err(t), g) => {
                    let wait = t.wait_ns.max(g.err().map_or(0, |g| g.wait_ns));
                    return Err(refused(Reason::tenant(t), wait));
                }
                (Ok(_), Err(g)) => return Err(refused(Reason::global(g), g.wait_ns)),
                (Ok(c), Ok(())) => c,
            };
            let (held_bytes, held_records) = self.tenant_usage(tenant);
            let (share_bytes, share_records) = self.share(share);
            // A share of 1.0 is the whole buffer: then the buffer's own check speaks.
            if share < 1.0
                && (held_bytes.saturating_add(bytes) > share_bytes
                    || held_records.saturating_add(records) > share_records)
            {
                return Err(self.buffer_refusal(Reason::TenantBuffer));
            }
            let lease = self
                .buffer
                .try_reserve(&tenant.usage, bytes, records)
                .ok_or_else(|| self.buffer_refusal(Reason::BufferFull))?;
            // Another tenant may have taken the global tokens since the check above; if so
            // the lease is dropped here, giving its space back exactly.
            self.global
                .take(now, records, bytes)
                .map_err(|g| refused(Reason::global(g), g.wait_ns))?;
            limits.buckets.commit(charge);
            Ok(lease)
        })();
        let view = self.view_locked(&limits.buckets, now);
        (decision, view)
    }

    /// The early check made before the body is read: could this tenant be admitted with at
    /// least one record and `bytes_upper` bytes (the body's declared length, which bounds
    /// the record bytes from above)? Charges nothing.
    pub fn precheck(&self, tenant: &Tenant, bytes_upper: u64) -> Result<(), Refusal> {
        let now = self.clock.now_ns();
        let limits = tenant.limits();
        let spec = limits.buckets.spec();
        let global_spec = self.global.spec();
        // Only ask for as many bytes as a bucket could ever hold: the exact count, made after
        // parsing, decides the rest.
        let cap = |burst: Option<u64>| burst.map_or(bytes_upper, |b| bytes_upper.min(b));
        let tenant_bytes = cap(spec.bytes.map(|s| s.burst));
        let global_bytes = cap(global_spec.bytes.map(|s| s.burst));
        if let Err(t) = limits.buckets.check(now, 1, tenant_bytes) {
            return Err(refused_plain(Reason::tenant(t), t.wait_ns));
        }
        if let Err(g) = self.global.check(now, 1, global_bytes) {
            return Err(refused_plain(Reason::global(g), g.wait_ns));
        }
        let (held_bytes, held_records) = self.tenant_usage(tenant);
        let (share_bytes, share_records) = self.share(limits.buffer_share);
        if limits.buffer_share < 1.0 && (held_records >= share_records || held_bytes >= share_bytes)
        {
            return Err(self.buffer_refusal_plain(Reason::TenantBuffer));
        }
        if !self.buffer.has_room(1, 1) {
            return Err(self.buffer_refusal_plain(Reason::BufferFull));
        }
        Ok(())
    }

    /// The tenant's and the global buckets as they are now.
    pub fn view(&self, tenant: &Tenant) -> LimitsView {
        let now = self.clock.now_ns();
        let limits = tenant.limits();
        self.view_locked(&limits.buckets, now)
    }

    fn view_locked(&self, buckets: &crate::budget::TenantBuckets, now: u64) -> LimitsView {
        let (tenant_records, tenant_bytes) = buckets.view(now);
        let (global_records, global_bytes) = self.global.view(now);
        LimitsView {
            tenant_records,
            tenant_bytes,
            global_records,
            global_bytes,
        }
    }

    fn never_fits(
        &self,
        spec: crate::budget::BudgetSpec,
        share: f64,
        records: u64,
        bytes: u64,
    ) -> Result<(), Denial> {
        let global = self.global.spec();
        let (share_bytes, share_records) = self.share(share);
        let checks = [
            (
                "records",
                records,
                "tenant records_burst",
                spec.records.map(|s| s.burst),
            ),
            (
                "bytes",
                bytes,
                "tenant bytes_burst",
                spec.bytes.map(|s| s.burst),
            ),
            (
                "records",
                records,
                "global records_burst",
                global.records.map(|s| s.burst),
            ),
            (
                "bytes",
                bytes,
                "global bytes_burst",
                global.bytes.map(|s| s.burst),
            ),
            (
                "records",
                records,
                "tenant buffer share",
                Some(share_records),
            ),
            ("bytes", bytes, "tenant buffer share", Some(share_bytes)),
        ];
        for (unit, requested, limit, allowed) in checks {
            if let Some(allowed) = allowed.filter(|a| requested > *a) {
                return Err(Denial::TooLarge(TooLarge {
                    unit,
                    requested,
                    limit,
                    allowed,
                }));
            }
        }
        Ok(())
    }

    /// The most bytes and records a tenant with this share may hold (at least one record).
    fn share(&self, share: f64) -> (u64, u64) {
        let of = |max: u64| ((max as f64 * share) as u64).max(1);
        (of(self.buffer.max_bytes()), of(self.buffer.max_records()))
    }

    fn tenant_usage(&self, tenant: &Tenant) -> (u64, u64) {
        use std::sync::atomic::Ordering::Acquire;
        (
            tenant.usage.bytes.load(Acquire),
            tenant.usage.records.load(Acquire),
        )
    }

    fn buffer_refusal_plain(&self, reason: Reason) -> Refusal {
        Refusal {
            reason,
            retry_after: self.buffer.retry_hint(),
        }
    }

    fn buffer_refusal(&self, reason: Reason) -> Denial {
        Denial::Refused(self.buffer_refusal_plain(reason))
    }
}

fn refused_plain(reason: Reason, wait_ns: u64) -> Refusal {
    Refusal {
        reason,
        retry_after: Duration::from_nanos(wait_ns),
    }
}

fn refused(reason: Reason, wait_ns: u64) -> Denial {
    Denial::Refused(refused_plain(reason, wait_ns))
}

#[cfg(test)]
mod tests;
