//! The admission decision: does a request of `n` records and `m` bytes go to Kafka now?
//!
//! Order of checks (and so the reason a client hears): tenant records, tenant bytes, global
//! records, global bytes, the tenant's share of the buffer, the buffer itself. Everything is
//! checked before anything is charged, under the tenant's own lock; then the buffer is
//! reserved (one CAS, exact rollback), then the global budget is charged (one CAS), then the
//! tenant's buckets are committed. A refusal at any step leaves every bucket and the buffer as
//! they were.
//!
//! Layer: decisions and state. Imports tenants and the foundations; knows nothing of Kafka, HTTP or how
//! a request body looks.

use std::sync::Arc;
use std::time::Duration;

use crate::adaptive::PlanCell;
use crate::budget::{
    BudgetSpec, Clock, GlobalBudget, Missing, ModeCell, Scope, Short, Shortfall, TenantBuckets,
};
use crate::buffer::{Buffer, BufferLease};
use crate::hold::WaitRoom;
use crate::identity::Topic;
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal};
use crate::tenant::Tenant;

mod adaptive;
mod bounds;
mod check;
mod lag;
mod pending;
mod precheck;
mod quota;
mod reservation;
mod shadow;
mod view;

pub use reservation::Reservation;
pub use view::BucketsView;

use pending::Pending;

/// The longest wait an adaptive refusal names: the limit is decided again every interval, and
/// a tenant's demand is remembered (halving every 5 s) while it waits.
pub const MAX_ADAPTIVE_WAIT: Duration = Duration::from_secs(5);

fn tenant_reason(s: Shortfall) -> Reason {
    Reason::Budget(Scope::Tenant, s.dimension)
}

fn global_reason(s: Shortfall) -> Reason {
    Reason::Budget(Scope::Global, s.dimension)
}

/// Cluster mode: tokens a request needs from the shared budget before it can be admitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseNeed {
    /// The whole request.
    pub charge: Charge,
    /// What the tenant's slice lacks for it, and the global slice.
    pub tenant: Option<Missing>,
    pub global: Option<Missing>,
    /// The quotas whose allowances lack for it, a bit per window (`1 << window`; cluster
    /// mode's shared quotas): the lease works out what each lacks. `global_quotas` alike.
    pub quotas: u8,
    pub global_quotas: u8,
    /// The tokens may come in part: records admitted one by one (a stream's group) take what
    /// there is, where a request admitted whole needs all of it or nothing.
    pub partial: bool,
}

impl LeaseNeed {
    fn any(&self) -> bool {
        self.tenant.is_some() || self.global.is_some() || self.quotas | self.global_quotas != 0
    }
}

/// Why `admit` did not admit: a denial the client hears, or (cluster mode) a slice to refill
/// first, after which the caller asks again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    Denied(Denial),
    Lease(LeaseNeed),
}

impl From<Denial> for Blocked {
    fn from(d: Denial) -> Self {
        Blocked::Denied(d)
    }
}

/// The shared part of admission: the clock, the global budget and the buffer.
#[derive(Debug)]
pub struct Admission {
    clock: Arc<dyn Clock>,
    pub global: Arc<GlobalBudget>,
    pub buffer: Arc<Buffer>,
    /// Cluster mode: the mode every bucket follows (leased slices or a local share).
    sharing: Option<Arc<ModeCell>>,
    /// Adaptive broker protection: the plan in force (`[adaptive] enabled`).
    adaptive: Option<Arc<PlanCell>>,
    /// Lag guards: the caps in force on guarded topics (`[[lag_guards]]`).
    lag: Option<Arc<crate::lag::LagPlanCell>>,
    /// `[wait]`: requests held for their tokens instead of refused (off by default).
    pub waits: Arc<WaitRoom>,
    /// Where the calendar quotas' windows turn (`[quotas] utc_offset`).
    calendar: crate::quota::Calendar,
    /// Cluster mode: the share of a quota the replicas may admit between them without Redis
    /// (`[cluster] slice_fraction`, see `quota::shared`).
    quota_fraction: f64,
}

/// What a successful check would charge: the tenant's buckets and, under an adaptive limit,
/// its adaptive bucket.
struct Planned {
    /// `None`: the tenant's budgets are not charged (shadow mode: they would refuse).
    tenant: Option<crate::budget::PendingCharge>,
    /// Whether the global budget is charged (not in shadow mode when it would refuse).
    global: bool,
    /// The reason a limit in shadow mode would have refused the request for (the first).
    shadow: Option<Reason>,
    adaptive: Option<crate::budget::Tats>,
    lag: lag::LagCharge,
    quotas: quota::QuotaPlan,
}

impl Admission {
    pub fn new(clock: Arc<dyn Clock>, global: Arc<GlobalBudget>, buffer: Arc<Buffer>) -> Self {
        Self {
            clock,
            global,
            buffer,
            sharing: None,
            adaptive: None,
            lag: None,
            waits: Arc::default(),
            calendar: crate::quota::Calendar::default(),
            quota_fraction: 0.0,
        }
    }

    /// Admission that holds requests whose wait `waits` covers (see [`Admission::holdable`]).
    pub fn with_waits(mut self, waits: WaitRoom) -> Self {
        self.waits = Arc::new(waits);
        self
    }

    /// Whether a refusal is only a budget's refill short enough to hold the request for
    /// (`[wait] max_ms`). Every check reports such a refusal only once nothing else refuses
    /// the request (see [`Pending`]); the pipeline then lets it through the checks made
    /// before and while the body is read only on a seat of the waiting room, and holds it at
    /// admission for its tokens ([`crate::hold`]). Its wait is the bucket's, exact to the
    /// nanosecond; other refusals (the buffer, the adaptive limit, a lag guard) depend on
    /// Kafka and are never held.
    pub fn holdable(&self, refusal: &Refusal) -> bool {
        self.waits.enabled()
            && refusal.reason.is_rate()
            && refusal.retry_after <= self.waits.max_wait
    }

    /// Waits on the admission clock until it reads `until_ns` (a held request, between two
    /// decisions).
    pub async fn hold_until(&self, until_ns: u64) {
        self.clock.sleep_until(until_ns).await;
    }

    /// Admission for a cluster member: buckets follow `sharing`; without Redis, the replicas
    /// admit at most `quota_fraction` of a shared quota between them.
    pub fn clustered(mut self, sharing: Arc<ModeCell>, quota_fraction: f64) -> Self {
        self.sharing = Some(sharing);
        self.quota_fraction = quota_fraction;
        self
    }

    /// Brings the tenant's and the global buckets to the cluster's current mode.
    fn align(&self, buckets: &mut TenantBuckets, now: u64) {
        if let Some(sharing) = &self.sharing {
            buckets.align(sharing, now);
            self.global.align(sharing, now);
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
        charge: Charge,
    ) -> (Result<BufferLease, Blocked>, BucketsView) {
        self.admit_to(tenant, None, charge)
    }

    /// [`Admission::admit`] for records to `topic` (which lag guards may watch).
    pub fn admit_to(
        &self,
        tenant: &Tenant,
        topic: Option<&Topic>,
        charge: Charge,
    ) -> (Result<BufferLease, Blocked>, BucketsView) {
        self.admit_reserved(tenant, topic, charge, None)
    }

    /// [`Admission::admit_to`] for a request that reserved its tenant's tokens before
    /// registering its raw schemas: its own reservation is not counted against it, and is
    /// given up, under the same lock, once it is admitted.
    pub fn admit_reserved(
        &self,
        tenant: &Tenant,
        topic: Option<&Topic>,
        charge: Charge,
        own: Option<&mut Reservation>,
    ) -> (Result<BufferLease, Blocked>, BucketsView) {
        let now = self.clock.now_ns();
        let mut state = tenant.admission_state();
        self.align(&mut state.buckets, now);
        self.follow_plan(tenant, &mut state, now);
        self.follow_lag(tenant, &mut state, topic, now, charge.records);
        let others = state.reserved.minus(
            own.as_deref()
                .map_or_else(Charge::default, Reservation::charge),
        );
        let decision = (|| {
            let pending = self.plan(tenant, &state, topic, now, (charge, others))?;
            let lease = self
                .buffer
                .try_reserve(&tenant.usage, charge)
                .ok_or_else(|| self.buffer_refusal(Reason::BufferFull))?;
            // Another tenant may have taken the global tokens since the check above; if so
            // the lease is dropped here, giving its space back exactly (or, in shadow mode,
            // it is noted as a would-be refusal).
            let mut shadow = pending.shadow;
            let global_quotas = self.global_quota_take(now, charge, &mut shadow)?;
            if pending.global {
                match self.global.take(now, charge) {
                    Ok(()) => {}
                    Err(Short::Wait(g)) if self.global.is_shadow() => {
                        shadow.get_or_insert(global_reason(g));
                    }
                    Err(Short::Wait(g)) => {
                        return Err(Blocked::Denied(refused(global_reason(g), g.wait_ns)))
                    }
                    Err(Short::Lease(m)) => {
                        return Err(Blocked::Lease(LeaseNeed {
                            charge,
                            global: Some(m),
                            ..LeaseNeed::default()
                        }))
                    }
                }
            }
            if let Some(t) = pending.tenant {
                state.buckets.commit(t);
            }
            if let Some(tats) = pending.adaptive {
                state.adaptive.tats = tats;
            }
            Self::lag_commit(&mut state, pending.lag);
            self.quota_commit(&mut state.quotas, pending.quotas, now, charge);
            if let Some(take) = global_quotas {
                take.commit(self, now, charge);
            }
            if let Some(reason) = shadow {
                tenant.stats().shadowed(reason, charge);
            }
            Ok(lease)
        })();
        if decision.is_ok() {
            if let Some(own) = own {
                state.reserved = state.reserved.minus(own.give_up());
            }
        }
        let view = self.view_locked(&state, now);
        (decision, view)
    }

    /// Cluster mode: what the slices lack for `charge` — as much of it as the buckets can ever
    /// hold — so a caller about to admit many records one by one (a stream's group) asks
    /// Redis once for all of them. `None` when they have enough, when nothing would be
    /// admitted anyway (a refusal that no lease changes), or outside cluster mode.
    pub fn lease_need(
        &self,
        tenant: &Tenant,
        topic: Option<&Topic>,
        charge: Charge,
    ) -> Option<LeaseNeed> {
        self.sharing.as_ref()?;
        let now = self.clock.now_ns();
        let mut state = tenant.admission_state();
        self.align(&mut state.buckets, now);
        self.follow_plan(tenant, &mut state, now);
        self.follow_lag(tenant, &mut state, topic, now, 0);
        let cap = |n: u64, burst: Option<u64>| burst.map_or(n, |b| n.min(b));
        let (spec, global) = (state.buckets.spec(), self.global.spec());
        let burst = |s: Option<crate::budget::RateSpec>| s.map(|s| s.burst);
        let charge = Charge::new(
            cap(
                cap(charge.records, burst(spec.records)),
                burst(global.records),
            ),
            cap(cap(charge.bytes, burst(spec.bytes)), burst(global.bytes)),
        );
        // A tenant the cluster's last known level says is empty even for one record would be
        // refused by Redis too: no call (a stream far over its budget costs Redis nothing).
        let one = Charge::new(1, 1);
        if state.buckets.estimate(now, one).is_err() || self.global.estimate(now, one).is_err() {
            return None;
        }
        match self.plan(tenant, &state, topic, now, (charge, state.reserved)) {
            Err(Blocked::Lease(need)) => Some(LeaseNeed {
                partial: true,
                ..need
            }),
            _ => None,
        }
    }

    /// The checks shared by `admit` and `check`, under the tenant's lock: what the tenant's
    /// buckets would become, or why not. Refusals come before lease needs: a request that
    /// would be refused anyway costs no Redis call. `others`: what the tenant's other
    /// requests reserved, taken before this one by its budgets and its buffer share.
    fn plan(
        &self,
        tenant: &Tenant,
        state: &crate::tenant::AdmissionState,
        topic: Option<&Topic>,
        now: u64,
        (charge, others): (Charge, Charge),
    ) -> Result<Planned, Blocked> {
        let share = state.buffer_share;
        let shown = |shadow: bool, spec| if shadow { BudgetSpec::default() } else { spec };
        let spec = shown(state.budget_shadow, state.buckets.spec());
        let global_spec = shown(self.global.is_shadow(), self.global.spec());
        self.never_fits(spec, global_spec, share, charge)?;
        // Shadow mode asks what a limit would refuse only of a limit in shadow mode: the global
        // slice is an `Arc` taken from its `ArcSwap`, not worth taking on every request.
        let mut shadow = None;
        let mut pending = state.buckets.check_after(now, charge, others).map(Some);
        if state.budget_shadow {
            let slice = state.buckets.slice().map(|s| &**s);
            if let Some(r) = shadow::would_refuse(&pending, slice, now, Scope::Tenant) {
                shadow = Some(r);
                pending = Ok(None);
            }
        }
        let mut global = self.global.check(now, charge).map(|()| true);
        if self.global.is_shadow() {
            let slice = self.global.slice();
            if let Some(r) = shadow::would_refuse(&global, slice.as_deref(), now, Scope::Global) {
                shadow.get_or_insert(r);
                global = Ok(false);
            }
        }
        let global_wait = |g: &Result<bool, Short>| match g {
            Err(Short::Wait(g)) => g.wait_ns,
            _ => 0,
        };
        // A budget's refusal comes first, unless [wait] could hold it: then the other checks
        // speak first, so a request is never held (nor let through the checks before
        // admission) only to be refused for something a hold does not change.
        let rate = match (&pending, &global) {
            (Err(Short::Wait(t)), _) => Some(refused_plain(
                tenant_reason(*t),
                t.wait_ns.max(global_wait(&global)),
            )),
            (_, Err(Short::Wait(g))) => Some(refused_plain(global_reason(*g), g.wait_ns)),
            _ => None,
        };
        let mut held = Pending::default();
        if let Some(r) = rate {
            held.add(self, r)
                .map_err(|r| Blocked::Denied(Denial::Refused(r)))?;
        }
        let adaptive = self.adaptive_check(tenant, state, now, charge)?;
        let lag = self.lag_check(state, topic, now, charge.records)?;
        let (quotas, global_quotas) = self.quotas_check(state, now, charge, &mut shadow)?;
        // A request a limit in shadow mode would refuse charges no limit in shadow mode, as
        // its refusal would have charged none: their levels then move as enforced ones would.
        if shadow.is_some() {
            if state.budget_shadow {
                pending = Ok(None);
            }
            if self.global.is_shadow() {
                global = Ok(false);
            }
        }
        let (held_bytes, held_records) = self.tenant_usage(tenant);
        let (held_bytes, held_records) = (
            held_bytes.saturating_add(others.bytes),
            held_records.saturating_add(others.records),
        );
        let (share_bytes, share_records) = self.share(share);
        // A share of 1.0 is the whole buffer: then the buffer's own check speaks.
        if share < 1.0
            && (held_bytes.saturating_add(charge.bytes) > share_bytes
                || held_records.saturating_add(charge.records) > share_records)
        {
            return Err(self.buffer_refusal(Reason::TenantBuffer).into());
        }
        if held.is_some() && !self.buffer.has_room(charge) {
            return Err(self.buffer_refusal(Reason::BufferFull).into());
        }
        held.finish()
            .map_err(|r| Blocked::Denied(Denial::Refused(r)))?;
        let need = quota::with_quotas(
            LeaseNeed {
                charge,
                tenant: pending.as_ref().err().and_then(lease_of),
                global: global.as_ref().err().and_then(lease_of),
                ..LeaseNeed::default()
            },
            &quotas,
            &global_quotas,
        );
        if need.any() {
            if !self.buffer.has_room(charge) {
                return Err(self.buffer_refusal(Reason::BufferFull).into());
            }
            return Err(Blocked::Lease(need));
        }
        let global = global.map_err(|_| Blocked::Lease(need))?;
        pending
            .map(|tenant| Planned {
                tenant,
                global,
                shadow,
                adaptive,
                lag,
                quotas,
            })
            .map_err(|_| Blocked::Lease(need))
    }
}

fn lease_of(short: &Short) -> Option<Missing> {
    match short {
        Short::Lease(m) => Some(*m),
        Short::Wait(_) => None,
    }
}

fn refused_plain(reason: Reason, wait_ns: u64) -> Refusal {
    Refusal::new(reason, Duration::from_nanos(wait_ns))
}

fn refused(reason: Reason, wait_ns: u64) -> Denial {
    Denial::Refused(refused_plain(reason, wait_ns))
}

#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod shadow_tests;
#[cfg(test)]
mod tests;
