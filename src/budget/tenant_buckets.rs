//! One tenant's two buckets. The caller holds the tenant's mutex around check-then-commit,
//! which is what makes tenant + global admission atomic without a global lock.
//!
//! In cluster mode the buckets follow [`Sharing`]: spent from a leased [`Slice`] while Redis
//! answers, or from a local share of the budget while it does not. The switch happens here,
//! under the same lock, at the first admission after the mode changed.

use std::sync::Arc;

use super::slice::{share_of, Mode, Sharing, Slice};
use super::{retarget_tat, take_both, BucketView, BudgetSpec, Short, Shortfall};
use crate::record::Charge;

#[derive(Debug, Clone)]
enum Source {
    /// A single instance: the whole budget, counted here.
    Own,
    /// Cluster mode, Redis answering: tokens leased from the shared state.
    Leased { epoch: u32, slice: Arc<Slice> },
    /// Cluster mode, Redis unreachable: a local share of 1/n of the budget.
    Share { epoch: u32, n: u32 },
}

#[derive(Debug, Clone)]
pub struct TenantBuckets {
    spec: BudgetSpec,
    /// (records TAT, bytes TAT), in each bucket's own ticks, under the effective spec.
    tats: (u64, u64),
    source: Source,
}

/// What a successful check would charge; commit it to charge the request.
#[derive(Debug, Clone, Copy)]
#[must_use = "a checked charge does nothing until committed"]
pub struct PendingCharge(Pending);

#[derive(Debug, Clone, Copy)]
enum Pending {
    Tats((u64, u64)),
    Slice(Charge),
}

impl TenantBuckets {
    pub fn new(spec: BudgetSpec) -> Self {
        Self {
            spec,
            tats: (0, 0),
            source: Source::Own,
        }
    }

    pub fn spec(&self) -> BudgetSpec {
        self.spec
    }

    /// The spec the local TATs are counted in.
    fn effective(&self) -> BudgetSpec {
        match self.source {
            Source::Share { n, .. } => share_of(self.spec, n),
            _ => self.spec,
        }
    }

    /// The slice this tenant spends from, in leased mode.
    pub fn slice(&self) -> Option<&Arc<Slice>> {
        match &self.source {
            Source::Leased { slice, .. } => Some(slice),
            _ => None,
        }
    }

    /// Follows the cluster's mode if it changed since the last admission. Returns the slice
    /// given up when leaving leased mode (its tokens are the cluster's).
    pub fn align(&mut self, sharing: &Sharing, now_ns: u64) -> Option<Arc<Slice>> {
        let (epoch, mode) = sharing.current();
        let current = match &self.source {
            Source::Own => None,
            Source::Leased { epoch, .. } | Source::Share { epoch, .. } => Some(*epoch),
        };
        if current == Some(epoch) {
            return None;
        }
        let old_effective = self.effective();
        let was_share = matches!(self.source, Source::Share { .. });
        let previous = std::mem::replace(
            &mut self.source,
            match mode {
                Mode::Leased => Source::Leased {
                    epoch,
                    slice: Arc::new(Slice::new()),
                },
                Mode::Share(n) => Source::Share { epoch, n },
            },
        );
        if let Mode::Share(_) = mode {
            let new = self.effective();
            self.tats = if was_share {
                (
                    retarget_tat(&old_effective.records, &new.records, self.tats.0, now_ns),
                    retarget_tat(&old_effective.bytes, &new.bytes, self.tats.1, now_ns),
                )
            } else {
                // A share starts full: the outage's extra burst is part of the stated bound.
                (0, 0)
            };
        }
        match previous {
            Source::Leased { slice, .. } => Some(slice),
            _ => None,
        }
    }

    /// Would the request fit? Charges nothing until [`TenantBuckets::commit`].
    pub fn check(&self, now_ns: u64, charge: Charge) -> Result<PendingCharge, Short> {
        match &self.source {
            Source::Leased { slice, .. } => match slice.missing(&self.spec, charge) {
                None => Ok(PendingCharge(Pending::Slice(charge))),
                Some(m) => Err(Short::Lease(m)),
            },
            _ => take_both(&self.effective(), self.tats, now_ns, charge)
                .map(|t| PendingCharge(Pending::Tats(t)))
                .map_err(Short::Wait),
        }
    }

    /// Would the request fit, counting what the cluster is estimated to have? Charges nothing.
    pub fn estimate(&self, now_ns: u64, charge: Charge) -> Result<(), Shortfall> {
        match &self.source {
            Source::Leased { slice, .. } => slice.estimate(&self.spec, charge, now_ns),
            _ => take_both(&self.effective(), self.tats, now_ns, charge).map(|_| ()),
        }
    }

    pub fn commit(&mut self, charge: PendingCharge) {
        match (charge.0, &self.source) {
            (Pending::Tats(t), _) => self.tats = t,
            // Only admissions take from a tenant's slice, under the tenant's lock, and the
            // agent only adds: what the check saw is still there.
            (Pending::Slice(c), Source::Leased { slice, .. }) => {
                let _ = slice.take(&self.spec, c);
            }
            (Pending::Slice(_), _) => {}
        }
    }

    /// Replaces the budget, keeping each bucket's current level (clamped to the new burst).
    /// In leased mode the shared state keeps the level (the lease script retargets it).
    pub fn set_spec(&mut self, new: BudgetSpec, now_ns: u64) {
        let old = self.effective();
        self.spec = new;
        let new = self.effective();
        self.tats = (
            retarget_tat(&old.records, &new.records, self.tats.0, now_ns),
            retarget_tat(&old.bytes, &new.bytes, self.tats.1, now_ns),
        );
    }

    pub fn view(&self, now_ns: u64) -> (Option<BucketView>, Option<BucketView>) {
        if let Source::Leased { slice, .. } = &self.source {
            return slice.view(&self.spec, now_ns);
        }
        let spec = self.effective();
        (
            spec.records.map(|s| s.view(self.tats.0, now_ns)),
            spec.bytes.map(|s| s.view(self.tats.1, now_ns)),
        )
    }
}
