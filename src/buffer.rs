//! The bounded downstream buffer: record bytes and records handed to the producer and not yet
//! acknowledged by Kafka. This is the bound that keeps backlog in Kafka instead of our heap.
//!
//! Space is reserved at admission, before a record reaches librdkafka, and given back when the
//! last delivery report of the request arrives (the [`BufferLease`] is dropped). Bytes and
//! records share one 128-bit word so a reservation checks and takes both in one CAS.
//!
//! A foundation module: it imports only [`crate::record::Charge`].
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use portable_atomic::AtomicU128;

use crate::record::Charge;

/// Shortest and longest retry hint for a full buffer.
const MIN_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Buffer {
    max_bytes: u64,
    max_records: u64,
    /// Held bytes (high half) and records (low half).
    held: AtomicU128,
    /// Moving average of enqueue-to-acknowledgement time: how long space takes to free up,
    /// which is what a client refused for a full buffer should wait.
    ack_latency_ewma_ns: AtomicU64,
}

/// What one tenant holds in the buffer (for its fair share and for metrics).
#[derive(Debug, Default)]
pub struct TenantUsage {
    pub bytes: AtomicU64,
    pub records: AtomicU64,
}

fn pack(bytes: u64, records: u64) -> u128 {
    (u128::from(bytes) << 64) | u128::from(records)
}

fn unpack(word: u128) -> (u64, u64) {
    ((word >> 64) as u64, word as u64)
}

impl Buffer {
    pub fn new(max_bytes: u64, max_records: u64) -> Self {
        Self {
            max_bytes,
            max_records,
            held: AtomicU128::new(0),
            ack_latency_ewma_ns: AtomicU64::new(0),
        }
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    pub fn max_records(&self) -> u64 {
        self.max_records
    }

    /// Bytes and records held now.
    pub fn held(&self) -> (u64, u64) {
        unpack(self.held.load(Ordering::Acquire))
    }

    /// Would `charge` fit now? Reserves nothing.
    pub fn has_room(&self, charge: Charge) -> bool {
        let (b, r) = self.held();
        b.saturating_add(charge.bytes) <= self.max_bytes
            && r.saturating_add(charge.records) <= self.max_records
    }

    /// Reserves space for a request, all of it or none.
    pub fn try_reserve(
        self: &Arc<Self>,
        tenant: &Arc<TenantUsage>,
        charge: Charge,
    ) -> Option<BufferLease> {
        let Charge { records, bytes } = charge;
        let mut current = self.held.load(Ordering::Acquire);
        loop {
            let (b, r) = unpack(current);
            let (nb, nr) = (b.checked_add(bytes)?, r.checked_add(records)?);
            if nb > self.max_bytes || nr > self.max_records {
                return None;
            }
            match self.held.compare_exchange_weak(
                current,
                pack(nb, nr),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        tenant.bytes.fetch_add(bytes, Ordering::AcqRel);
        tenant.records.fetch_add(records, Ordering::AcqRel);
        Some(BufferLease {
            buffer: self.clone(),
            tenant: tenant.clone(),
            bytes,
            records,
        })
    }

    fn release(&self, bytes: u64, records: u64) {
        // Never underflows: only a lease releases, and only what it reserved.
        self.held.fetch_sub(pack(bytes, records), Ordering::AcqRel);
    }

    /// Feeds the retry hint with one request's enqueue-to-acknowledgement time.
    pub fn observe_ack_latency(&self, latency: Duration) {
        let sample = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let _ =
            self.ack_latency_ewma_ns
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                    Some(if old == 0 {
                        sample
                    } else {
                        // alpha = 1/8, integer arithmetic.
                        old - old / 8 + sample / 8
                    })
                });
    }

    /// How long a client refused for lack of buffer space should wait: about one
    /// acknowledgement round, since that is when held space is given back.
    pub fn retry_hint(&self) -> Duration {
        Duration::from_nanos(self.ack_latency_ewma_ns.load(Ordering::Relaxed))
            .clamp(MIN_RETRY, MAX_RETRY)
    }
}

/// Space held for one request until Kafka has answered for every record in it.
#[derive(Debug)]
pub struct BufferLease {
    buffer: Arc<Buffer>,
    tenant: Arc<TenantUsage>,
    bytes: u64,
    records: u64,
}

impl BufferLease {
    /// Takes over another lease's space, so one batch can hold what several admissions
    /// reserved (a v3 stream admits record by record and sends a chunk's records together).
    /// Leases on another buffer or tenant are not merged; they are given back.
    pub fn absorb(&mut self, mut other: BufferLease) -> Result<(), BufferLease> {
        if !Arc::ptr_eq(&self.buffer, &other.buffer) || !Arc::ptr_eq(&self.tenant, &other.tenant) {
            return Err(other);
        }
        self.bytes += std::mem::take(&mut other.bytes);
        self.records += std::mem::take(&mut other.records);
        Ok(())
    }
}

impl Drop for BufferLease {
    fn drop(&mut self) {
        self.buffer.release(self.bytes, self.records);
        self.tenant.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        self.tenant
            .records
            .fetch_sub(self.records, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserves_all_or_nothing_and_releases_on_drop() {
        let buffer = Arc::new(Buffer::new(100, 10));
        let tenant = Arc::new(TenantUsage::default());
        let lease = buffer
            .try_reserve(&tenant, Charge::new(2, 60))
            .expect("fits");
        assert!(buffer.try_reserve(&tenant, Charge::new(1, 41)).is_none());
        assert_eq!(
            buffer.held(),
            (60, 2),
            "a refused reservation takes nothing"
        );
        assert_eq!(tenant.bytes.load(Ordering::Relaxed), 60);
        drop(lease);
        assert_eq!(buffer.held(), (0, 0));
        assert_eq!(tenant.bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn absorbed_lease_is_released_once_with_the_lease_that_took_it() {
        let buffer = Arc::new(Buffer::new(100, 10));
        let tenant = Arc::new(TenantUsage::default());
        let mut a = buffer
            .try_reserve(&tenant, Charge::new(1, 10))
            .expect("fits");
        let b = buffer
            .try_reserve(&tenant, Charge::new(2, 20))
            .expect("fits");
        assert!(a.absorb(b).is_ok());
        assert_eq!(buffer.held(), (30, 3), "merging neither frees nor doubles");
        drop(a);
        assert_eq!(buffer.held(), (0, 0));
        assert_eq!(tenant.records.load(Ordering::Relaxed), 0);

        let other_tenant = Arc::new(TenantUsage::default());
        let mut a = buffer
            .try_reserve(&tenant, Charge::new(1, 10))
            .expect("fits");
        let c = buffer
            .try_reserve(&other_tenant, Charge::new(1, 5))
            .expect("fits");
        let c = a
            .absorb(c)
            .expect_err("another tenant's lease is not merged");
        drop(a);
        assert_eq!(buffer.held(), (5, 1));
        drop(c);
        assert_eq!(buffer.held(), (0, 0));
    }

    #[test]
    fn records_bound_applies_independently_of_bytes() {
        let buffer = Arc::new(Buffer::new(1_000_000, 3));
        let tenant = Arc::new(TenantUsage::default());
        let _a = buffer
            .try_reserve(&tenant, Charge::new(3, 1))
            .expect("fits");
        assert!(buffer.try_reserve(&tenant, Charge::new(1, 1)).is_none());
    }

    #[test]
    fn retry_hint_follows_ack_latency_within_bounds() {
        let buffer = Buffer::new(1, 1);
        assert_eq!(buffer.retry_hint(), MIN_RETRY);
        buffer.observe_ack_latency(Duration::from_millis(800));
        assert_eq!(buffer.retry_hint(), Duration::from_millis(800));
        buffer.observe_ack_latency(Duration::from_secs(3600));
        assert_eq!(buffer.retry_hint(), MAX_RETRY);
    }
}
