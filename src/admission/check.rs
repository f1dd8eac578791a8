//! Would a request be admitted now? Everything admission checks, nothing charged: used while a
//! body arrives and before a registration ([`super::reservation`]).

use super::pending::Pending;
use super::{global_reason, refused_plain, tenant_reason, Admission, Blocked};
use crate::identity::Topic;
use crate::record::Charge;
use crate::refusal::{Denial, Reason};
use crate::tenant::Tenant;

impl Admission {
    /// Would `charge` be admitted now? Everything [`Admission::admit`] checks, nothing charged.
    /// Used while a body arrives: once the records read so far cannot be admitted, the whole
    /// request cannot either (budgets only fill up by waiting, and the request only grows).
    /// In cluster mode a slice that is short is topped up by the cluster's estimated level.
    /// A refusal `[wait]` could hold comes only when nothing else refuses (the caller decides
    /// whether the request may wait).
    pub fn check(&self, tenant: &Tenant, charge: Charge) -> Result<(), Denial> {
        self.check_to(tenant, None, charge)
    }

    /// [`Admission::check`] for records to `topic`.
    pub fn check_to(
        &self,
        tenant: &Tenant,
        topic: Option<&Topic>,
        charge: Charge,
    ) -> Result<(), Denial> {
        let mut state = tenant.admission_state();
        self.check_locked(tenant, &mut state, topic, charge)
    }

    /// [`Admission::check_to`] under the tenant's lock, taken by the caller; what other
    /// requests of the tenant reserved counts as taken.
    pub(super) fn check_locked(
        &self,
        tenant: &Tenant,
        state: &mut crate::tenant::AdmissionState,
        topic: Option<&Topic>,
        charge: Charge,
    ) -> Result<(), Denial> {
        let now = self.clock.now_ns();
        self.align(&mut state.buckets, now);
        self.follow_plan(tenant, state, now);
        self.follow_lag(tenant, state, topic, now, 0);
        let mut pending = Pending::default();
        let others = state.reserved;
        match self.plan(tenant, state, topic, now, (charge, others)) {
            Ok(_nothing_charged) => {}
            Err(Blocked::Denied(d)) => {
                if matches!(&d, Denial::Refused(r) if r.reason == Reason::ConsumerLag) {
                    // Refused mid-stream by a lag guard: the records read so far are demand
                    // its cap holds back (its release rule weighs them).
                    self.follow_lag(tenant, state, topic, now, charge.records);
                }
                return Err(d);
            }
            Err(Blocked::Lease(_)) => {
                // A budget in shadow mode refuses nothing (`shadow`), its estimate neither.
                let tenant_estimate = if state.budget_shadow {
                    Ok(())
                } else {
                    state.buckets.estimate(now, charge.plus(others))
                };
                if let Err(t) = tenant_estimate {
                    pending
                        .add(self, refused_plain(tenant_reason(t), t.wait_ns))
                        .map_err(Denial::Refused)?;
                }
                let global_estimate = if self.global.is_shadow() {
                    Ok(())
                } else {
                    self.global.estimate(now, charge)
                };
                if let Err(g) = global_estimate {
                    pending
                        .add(self, refused_plain(global_reason(g), g.wait_ns))
                        .map_err(Denial::Refused)?;
                }
            }
        }
        if !self.buffer.has_room(charge) {
            return Err(self.buffer_refusal(Reason::BufferFull));
        }
        pending.finish().map_err(Denial::Refused)
    }
}
