//! Lag guards in admission: a request to a guarded topic counts toward the guard (the agent
//! splits the next cap by what tenants offered) and, while the guard caps, spends the
//! tenant's share of the cap — checked with every other bucket, committed only if the whole
//! request is admitted.

use std::sync::Arc;
use std::time::Duration;

use super::Admission;
use crate::identity::Topic;
use crate::lag::{LagBucket, LagPlanCell};
use crate::refusal::{Denial, LagNote, Reason, Refusal};
use crate::tenant::{AdmissionState, Tenant};

/// The TATs a successful request commits: (index into the tenant's lag buckets, TAT).
pub(super) type LagCharge = Vec<(usize, u64)>;

impl Admission {
    /// Admission with lag guards: requests to guarded topics follow the plan in `cell`.
    pub fn lag_guarded(mut self, cell: Arc<LagPlanCell>) -> Self {
        self.lag = Some(cell);
        self
    }

    /// Brings the tenant's buckets for the guards watching `topic` to the plan in force,
    /// creating them on the first request, and counts `offered` records toward each (the
    /// agent splits the next cap by them; admitted or not).
    pub(super) fn follow_lag(
        &self,
        tenant: &Tenant,
        state: &mut AdmissionState,
        topic: Option<&Topic>,
        now: u64,
        offered: u64,
    ) {
        let (Some(cell), Some(topic)) = (&self.lag, topic) else {
            return;
        };
        let plan = cell.load();
        if plan.guards.is_empty() {
            return;
        }
        for guard in plan.watching(topic) {
            let i = bucket_index(state, &guard.name);
            let rate = guard.capping.then(|| {
                guard
                    .shares
                    .get(tenant.id.as_str())
                    .copied()
                    .unwrap_or(guard.newcomer)
            });
            let bucket = &mut state.lag[i];
            bucket.follow(plan.epoch, rate, now);
            bucket.offered = bucket.offered.saturating_add(offered);
        }
    }

    /// The guards' say on `records` more to `topic`: the TATs to commit, or the refusal.
    pub(super) fn lag_check(
        &self,
        state: &AdmissionState,
        topic: Option<&Topic>,
        now: u64,
        records: u64,
    ) -> Result<LagCharge, Denial> {
        let (Some(cell), Some(topic)) = (&self.lag, topic) else {
            return Ok(Vec::new());
        };
        let plan = cell.load();
        if plan.guards.is_empty() {
            return Ok(Vec::new());
        }
        let mut charge = Vec::new();
        for guard in plan.watching(topic) {
            let Some(i) = state.lag.iter().position(|b| b.guard == guard.name) else {
                continue;
            };
            match state.lag[i].check(now, records, guard.interval_ns) {
                Ok(Some(tat)) => charge.push((i, tat)),
                Ok(None) => {}
                Err(wait_ns) => {
                    return Err(Denial::Refused(Refusal {
                        reason: Reason::ConsumerLag,
                        retry_after: Duration::from_nanos(wait_ns),
                        class: None,
                        lag: Some(Arc::new(LagNote {
                            guard: guard.name.clone(),
                            topic: topic.as_str().to_string(),
                            group: guard.group.clone(),
                        })),
                        quota: None,
                    }))
                }
            }
        }
        Ok(charge)
    }

    pub(super) fn lag_commit(state: &mut AdmissionState, charge: LagCharge) {
        for (i, tat) in charge {
            state.lag[i].commit(tat);
        }
    }
}

/// Records in one of `tenant`'s requests, on average over what it had admitted (at least 1):
/// the stand-in for a request refused before its records are known.
pub(super) fn typical_records(tenant: &Tenant) -> u64 {
    use std::sync::atomic::Ordering::Relaxed;
    let records = tenant.stats().admitted_records.load(Relaxed);
    let requests = tenant.stats().admitted_requests.load(Relaxed);
    records.checked_div(requests).unwrap_or(1).max(1)
}

fn bucket_index(state: &mut AdmissionState, guard: &Arc<str>) -> usize {
    match state.lag.iter().position(|b| &b.guard == guard) {
        Some(i) => i,
        None => {
            state.lag.push(LagBucket::new(guard.clone()));
            state.lag.len() - 1
        }
    }
}
