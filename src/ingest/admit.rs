//! Admission as the pipeline asks for it: every budget charged and buffer space reserved for
//! the whole request, or nothing; in cluster mode with bounded lease calls. Every 429 is
//! counted against the tenant where it is decided.

use std::time::Duration;

use super::Ingest;
use crate::admission::{Blocked, BucketsView};
use crate::buffer::BufferLease;
use crate::identity::Topic;
use crate::outcome::ApiError;
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal};
use crate::tenant::Tenant;

impl Ingest {
    /// Charges every budget and reserves buffer space for the whole request, or nothing.
    /// In cluster mode a request the local slices cannot cover waits for one lease call (the
    /// missing tokens, or the refusal) and is decided again.
    pub async fn admit(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        charge: Charge,
    ) -> Result<BufferLease, ApiError> {
        // Two lease rounds cover a tenant and a global slice both short.
        self.admit_with(tenant, topic, charge, &mut 2).await
    }

    /// [`Ingest::admit`] with at most `leases` lease calls (counted down), so a caller
    /// admitting many records one by one (a stream's chunk) bounds its calls to Redis. A
    /// request still short of leased tokens when they are used up is refused with a short
    /// wait: other requests took the tokens first, or the caller has spent its calls.
    pub async fn admit_with(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        charge: Charge,
        leases: &mut u32,
    ) -> Result<BufferLease, ApiError> {
        tenant.stats().offered(charge.records, charge.bytes);
        let admitted = self.admit_counted(tenant, topic, charge, leases).await;
        if let Err(ApiError::RateLimited(_)) = &admitted {
            // Its body was read: the status page shows the records refused, not just requests.
            tenant.stats().refused_records(charge.records);
        }
        admitted
    }

    async fn admit_counted(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        charge: Charge,
        leases: &mut u32,
    ) -> Result<BufferLease, ApiError> {
        let mut held = Held::default();
        let last_need = loop {
            let (decision, _view) = self.admission.admit_to(tenant, Some(topic), charge);
            match decision {
                Ok(lease) => {
                    held.admitted(&self.admission.waits);
                    tenant.stats().admitted(charge.records, charge.bytes);
                    return Ok(lease);
                }
                Err(Blocked::Denied(Denial::Refused(r))) if self.admission.holdable(&r) => {
                    if let Err(r) = self.hold(tenant, &mut held, r).await {
                        return Err(refused(tenant, r));
                    }
                }
                Err(Blocked::Denied(denial)) => {
                    held.refused(&self.admission.waits);
                    return Err(self.denied(tenant, denial));
                }
                Err(Blocked::Lease(need)) => {
                    let Some(cluster) = self.cluster.as_ref().filter(|_| *leases > 0) else {
                        break need;
                    };
                    *leases -= 1;
                    if let Err(refusal) = cluster.lease_for(tenant, need).await {
                        held.refused(&self.admission.waits);
                        return Err(refused(tenant, refusal));
                    }
                }
            }
        };
        held.refused(&self.admission.waits);
        let reason = match (last_need.tenant, last_need.global) {
            (Some(m), _) if m.records > 0 => Reason::TenantRecords,
            (Some(_), _) => Reason::TenantBytes,
            (None, Some(m)) if m.records > 0 => Reason::GlobalRecords,
            _ => Reason::GlobalBytes,
        };
        Err(refused(
            tenant,
            Refusal {
                reason,
                retry_after: CONTENDED_RETRY,
                class: None,
                lag: None,
            },
        ))
    }

    /// `[wait]`: holds a request refused only for a short wait until its tokens are due, on a
    /// seat of the waiting room (taken on its first hold, kept until it is decided), so the
    /// admission decision can be asked again. Refused when no seat is free, or when the wait
    /// would take its hold past `max_ms` (another request took the tokens meanwhile).
    async fn hold<'a>(
        &'a self,
        tenant: &'a Tenant,
        held: &mut Held<'a>,
        refusal: Refusal,
    ) -> Result<(), Refusal> {
        let room = &self.admission.waits;
        let now = self.admission.now_ns();
        if held.seat.is_none() {
            match room.enter(&tenant.held) {
                Some(seat) => held.seat = Some((seat, now)),
                None => return Err(refusal),
            }
        }
        let since = held.seat.as_ref().map_or(now, |(_, since)| *since);
        let spent = Duration::from_nanos(now.saturating_sub(since));
        if spent + refusal.retry_after > room.max_wait {
            held.refused(room);
            return Err(refusal);
        }
        self.admission.hold_for(refusal.retry_after).await;
        Ok(())
    }

    /// A denial as the client hears it; a 429 is counted against the tenant.
    pub(super) fn denied(&self, tenant: &Tenant, denial: Denial) -> ApiError {
        match denial {
            Denial::Refused(r) => refused(tenant, r),
            Denial::TooLarge(t) => ApiError::ExceedsBurst(t),
        }
    }

    /// The buckets a tenant is shown in its RateLimit fields: its own, and the global ones
    /// unless the operator hides them.
    pub fn view(&self, tenant: &Tenant) -> BucketsView {
        let mut view = self.admission.view(tenant);
        if !self.admission.global.visible_to_tenants() {
            view.global_records = None;
            view.global_bytes = None;
        }
        view
    }
}

/// A 429, counted against the tenant where it is decided.
pub(super) fn refused(tenant: &Tenant, refusal: Refusal) -> ApiError {
    tenant.stats().rejected(refusal.reason);
    tracing::debug!(reason = refusal.reason.as_str(), "refused");
    ApiError::RateLimited(refusal)
}

/// A request's seat in the waiting room while it is held, and when it took it (admission
/// clock); what became of it is counted once it is decided.
#[derive(Default)]
struct Held<'a> {
    seat: Option<(crate::hold::Seat<'a>, u64)>,
}

impl Held<'_> {
    fn admitted(&mut self, room: &crate::hold::WaitRoom) {
        if self.seat.take().is_some() {
            room.admitted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn refused(&mut self, room: &crate::hold::WaitRoom) {
        if self.seat.take().is_some() {
            room.refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Retry hint for a request whose leased tokens were taken by others while it waited.
const CONTENDED_RETRY: Duration = Duration::from_millis(10);
