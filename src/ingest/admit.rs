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
        let last_need = loop {
            let (decision, _view) = self.admission.admit_to(tenant, Some(topic), charge);
            match decision {
                Ok(lease) => {
                    tenant.stats().admitted(charge.records, charge.bytes);
                    return Ok(lease);
                }
                Err(Blocked::Denied(denial)) => return Err(self.denied(tenant, denial)),
                Err(Blocked::Lease(need)) => {
                    let Some(cluster) = self.cluster.as_ref().filter(|_| *leases > 0) else {
                        break need;
                    };
                    *leases -= 1;
                    if let Err(refusal) = cluster.lease_for(tenant, need).await {
                        return Err(refused(tenant, refusal));
                    }
                }
            }
        };
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

/// Retry hint for a request whose leased tokens were taken by others while it waited.
const CONTENDED_RETRY: Duration = Duration::from_millis(10);
