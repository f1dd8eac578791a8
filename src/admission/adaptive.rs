//! The adaptive limit in admission: each tenant's adaptive bucket follows the plan the agent
//! publishes (keeping its level across plans), is checked with every other bucket, and a
//! refusal by it names a wait the tenant's class would give it.

use std::sync::Arc;
use std::time::Duration;

use super::{Admission, MAX_ADAPTIVE_WAIT};
use crate::adaptive::PlanCell;
use crate::budget::{retarget, BudgetSpec, Dimension, PerDimension, Tats};
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal};
use crate::tenant::Tenant;

impl Admission {
    /// Admission under an adaptive limit: tenants follow the plan in `cell`.
    pub fn adaptive(mut self, cell: Arc<PlanCell>) -> Self {
        self.adaptive = Some(cell);
        self
    }

    /// Brings the tenant's adaptive bucket to the plan in force, keeping its level.
    pub(super) fn follow_plan(
        &self,
        tenant: &Tenant,
        state: &mut crate::tenant::AdmissionState,
        now: u64,
    ) {
        let Some(cell) = &self.adaptive else {
            return;
        };
        let plan = cell.load();
        let bucket = &mut state.adaptive;
        if bucket.epoch == plan.epoch {
            return;
        }
        let share = plan
            .active
            .then(|| plan.shares.get(tenant.id.as_str()).copied())
            .flatten();
        let new = share.map(|s| s.spec);
        bucket.tats = match (bucket.spec, new) {
            (Some(old), Some(new)) => retarget(&old, &new, bucket.tats, now),
            // A limit coming into force starts full.
            _ => Tats::default(),
        };
        bucket.spec = new;
        bucket.class = share.map(|s| s.class).unwrap_or_default();
        bucket.epoch = plan.epoch;
    }

    /// The adaptive bucket's say: the TATs to commit, or the refusal.
    pub(super) fn adaptive_check(
        &self,
        tenant: &Tenant,
        state: &crate::tenant::AdmissionState,
        now: u64,
        charge: Charge,
    ) -> Result<Option<Tats>, Denial> {
        let bucket = &state.adaptive;
        let Some(spec) = bucket.spec else {
            return Ok(None);
        };
        let take = |d: Dimension| match spec[d] {
            None => Ok(bucket.tats[d]),
            // A request larger than the share's burst passes when the bucket is full and pays
            // afterwards (the TAT moves past the burst): a share smaller than a request is
            // slow for that tenant, never a refusal forever.
            Some(s) if charge[d] > s.burst => {
                let full_in = s.view(bucket.tats[d], now).full_in_ns;
                if full_in == 0 {
                    Ok(s.full_tat(now).saturating_add(charge[d]))
                } else {
                    Err(full_in)
                }
            }
            Some(s) => s.try_take(bucket.tats[d], now, charge[d]),
        };
        let taken = PerDimension::from_fn(take);
        let own_wait = match (taken.records, taken.bytes) {
            (Ok(records), Ok(bytes)) => return Ok(Some(Tats { records, bytes })),
            (Err(r), Err(b)) => r.max(b),
            (Err(w), Ok(_)) | (Ok(_), Err(w)) => w,
        };
        let wait_ns = self.adaptive_wait(tenant, &spec, now, charge, own_wait);
        Err(Denial::Refused(Refusal {
            reason: Reason::Adaptive,
            retry_after: Duration::from_nanos(wait_ns),
            class: Some(bucket.class.as_str()),
            lag: None,
            quota: None,
        }))
    }

    /// The wait an adaptive refusal names. The share it was refused by may be far below what
    /// the tenant's class would give it (its weight's part, `Allotment::claimed`) — a share that
    /// follows demand is small for a tenant that just started or waited — so the wait is the
    /// one at that rate (but not before the next plan: the share cannot change sooner), never
    /// more than the share's own wait, and at most [`MAX_ADAPTIVE_WAIT`], so a client that
    /// honours it comes back while its demand is remembered.
    fn adaptive_wait(
        &self,
        tenant: &Tenant,
        spec: &BudgetSpec,
        now: u64,
        charge: Charge,
        own_ns: u64,
    ) -> u64 {
        let at = |rate: Option<u64>, n: u64| {
            rate.filter(|r| *r > 0)
                .map(|r| (u128::from(n) * 1_000_000_000 / u128::from(r)) as f64)
        };
        let claimed = self.adaptive.as_ref().and_then(|cell| {
            let plan = cell.load();
            let share = plan.shares.get(tenant.id.as_str())?;
            let more = |own: Option<crate::budget::RateSpec>, claimed: Option<u64>| {
                claimed.unwrap_or(0) > own.map_or(0, |s| s.per_sec)
            };
            if !(more(spec.records, share.claimed.0) || more(spec.bytes, share.claimed.1)) {
                return None;
            }
            let wait = at(share.claimed.0, charge.records)
                .into_iter()
                .chain(at(share.claimed.1, charge.bytes))
                .fold(0.0, f64::max)
                .min(u64::MAX as f64) as u64;
            Some(wait.max(plan.next_ns.saturating_sub(now)))
        });
        let wait = claimed.map_or(own_ns, |c| c.min(own_ns));
        wait.clamp(1, MAX_ADAPTIVE_WAIT.as_nanos() as u64)
    }
}
