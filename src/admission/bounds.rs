//! The bounds a request is measured against besides the budgets' levels: what can never fit
//! (a burst or buffer share smaller than the request), a tenant's share of the buffer, and the
//! refusals the buffer gives.

use super::Admission;
use crate::budget::BudgetSpec;
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal, TooLarge};
use crate::tenant::Tenant;

impl Admission {
    pub(super) fn never_fits(
        &self,
        spec: BudgetSpec,
        global: BudgetSpec,
        share: f64,
        charge: Charge,
    ) -> Result<(), Denial> {
        let (share_bytes, share_records) = self.share(share);
        let burst = |s: Option<crate::budget::RateSpec>| s.map(|s| s.burst);
        let (r, b) = ("records", "bytes");
        let checks = [
            (r, "tenant records_burst", burst(spec.records)),
            (b, "tenant bytes_burst", burst(spec.bytes)),
            (r, "global records_burst", burst(global.records)),
            (b, "global bytes_burst", burst(global.bytes)),
            (r, "tenant buffer share", Some(share_records)),
            (b, "tenant buffer share", Some(share_bytes)),
        ];
        for (unit, limit, allowed) in checks {
            let requested = if unit == r {
                charge.records
            } else {
                charge.bytes
            };
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
    pub(super) fn share(&self, share: f64) -> (u64, u64) {
        let of = |max: u64| ((max as f64 * share) as u64).max(1);
        (of(self.buffer.max_bytes()), of(self.buffer.max_records()))
    }

    pub(super) fn tenant_usage(&self, tenant: &Tenant) -> (u64, u64) {
        use std::sync::atomic::Ordering::Acquire;
        (
            tenant.usage.bytes.load(Acquire),
            tenant.usage.records.load(Acquire),
        )
    }

    pub(super) fn buffer_refusal_plain(&self, reason: Reason) -> Refusal {
        Refusal::new(reason, self.buffer.retry_hint())
    }

    pub(super) fn buffer_refusal(&self, reason: Reason) -> Denial {
        Denial::Refused(self.buffer_refusal_plain(reason))
    }
}
