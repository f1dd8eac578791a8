//! One tenant's two buckets. The caller holds the tenant's mutex around check-then-commit,
//! which is what makes tenant + global admission atomic without a global lock.

use super::{retarget_tat, take_both, BucketView, BudgetSpec, Shortfall};
use crate::record::Charge;

#[derive(Debug, Clone)]
pub struct TenantBuckets {
    spec: BudgetSpec,
    /// (records TAT, bytes TAT), in each bucket's own ticks.
    tats: (u64, u64),
}

/// The TATs a successful check would leave behind; commit them to charge the request.
#[derive(Debug, Clone, Copy)]
#[must_use = "a checked charge does nothing until committed"]
pub struct PendingCharge((u64, u64));

impl TenantBuckets {
    pub fn new(spec: BudgetSpec) -> Self {
        Self { spec, tats: (0, 0) }
    }

    pub fn spec(&self) -> BudgetSpec {
        self.spec
    }

    /// Would the request fit? Charges nothing until [`TenantBuckets::commit`].
    pub fn check(&self, now_ns: u64, charge: Charge) -> Result<PendingCharge, Shortfall> {
        take_both(&self.spec, self.tats, now_ns, charge).map(PendingCharge)
    }

    pub fn commit(&mut self, charge: PendingCharge) {
        self.tats = charge.0;
    }

    /// Replaces the budget, keeping each bucket's current level (clamped to the new burst).
    pub fn set_spec(&mut self, new: BudgetSpec, now_ns: u64) {
        self.tats = (
            retarget_tat(&self.spec.records, &new.records, self.tats.0, now_ns),
            retarget_tat(&self.spec.bytes, &new.bytes, self.tats.1, now_ns),
        );
        self.spec = new;
    }

    pub fn view(&self, now_ns: u64) -> (Option<BucketView>, Option<BucketView>) {
        (
            self.spec.records.map(|s| s.view(self.tats.0, now_ns)),
            self.spec.bytes.map(|s| s.view(self.tats.1, now_ns)),
        )
    }
}
