//! Tokens spoken for. A request about to register raw schemas with the registry (a write that
//! outlives it) first reserves what its admission will take from its tenant: the records and
//! bytes of its budgets and of its share of the buffer. Until it is admitted or gone, every
//! other admission and check of that tenant counts them as taken, so no other request of the
//! tenant — another registering one above all — can spend them between the check and the
//! admission. Review 41-r9 of #37: with a check that took nothing, ten concurrent
//! single-record requests of new schemas from a tenant allowed one record a second all passed
//! it, registered 4–10 versions, and 1–2 were written.
//!
//! Only the tenant's own limits are reserved: those are what its own requests race for. The
//! global budget, the buffer as a whole and the adaptive and lag shares are still checked, not
//! reserved: another tenant taking them in the moment of a registration is the one way a
//! registration can outlive its request. Nothing is charged by a reservation: given up (the
//! registration failed, the request was refused or dropped), the tokens were never taken.

use std::sync::Arc;

use crate::identity::Topic;
use crate::record::Charge;
use crate::refusal::Denial;
use crate::tenant::Tenant;

use super::Admission;

/// What a request reserved of its tenant's budgets and buffer share until its admission
/// ([`Admission::admit_reserved`]); given back when dropped unadmitted.
#[derive(Debug)]
pub struct Reservation {
    tenant: Arc<Tenant>,
    charge: Charge,
}

impl Reservation {
    /// What is reserved (nothing, once admitted).
    pub fn charge(&self) -> Charge {
        self.charge
    }

    /// Empties the reservation (its admission took the tokens), returning what it held; the
    /// caller holds the tenant's lock and takes it off the tenant's reserved total.
    pub(super) fn give_up(&mut self) -> Charge {
        std::mem::take(&mut self.charge)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.charge != Charge::default() {
            let mut state = self.tenant.admission_state();
            state.reserved = state.reserved.minus(self.charge);
        }
    }
}

impl Admission {
    /// Reserves `charge` of the tenant's budgets and buffer share, if
    /// [`Admission::check_to`] would admit it now (what others reserved counted as taken):
    /// checked and reserved under one lock, so two requests cannot reserve the same tokens.
    pub fn reserve_to(
        &self,
        tenant: &Arc<Tenant>,
        topic: Option<&Topic>,
        charge: Charge,
    ) -> Result<Reservation, Denial> {
        let mut state = tenant.admission_state();
        self.check_locked(tenant, &mut state, topic, charge)?;
        state.reserved = state.reserved.plus(charge);
        Ok(Reservation {
            tenant: tenant.clone(),
            charge,
        })
    }
}

#[cfg(test)]
mod tests;
