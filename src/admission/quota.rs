//! Calendar quotas in admission: checked with every other limit under the tenant's lock,
//! committed only when the whole request is admitted; a refusal names the window and waits
//! for it to turn.

use std::time::Duration;

use super::Admission;
use crate::budget::Scope;
use crate::quota::{Calendar, QuotaUse};
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal, MAX_RETRY_AFTER};
use crate::tenant::AdmissionState;

impl Admission {
    /// Admission whose quotas' windows turn by `calendar`.
    pub fn with_calendar(mut self, calendar: Calendar) -> Self {
        self.calendar = calendar;
        self
    }

    /// The wall clock in Unix seconds, as the quotas' windows follow it.
    pub(super) fn unix_s(&self) -> i64 {
        i64::try_from(self.clock.unix_s()).unwrap_or(i64::MAX)
    }

    /// The quotas' uses after `charge`, or the refusal (`None`: the tenant has none).
    pub(super) fn quota_check(
        &self,
        state: &AdmissionState,
        charge: Charge,
    ) -> Result<Option<[QuotaUse; 3]>, Denial> {
        if state.quotas.specs.is_empty() {
            return Ok(None);
        }
        match state.quotas.take(&self.calendar, self.unix_s(), charge) {
            Ok(used) => Ok(Some(used)),
            // A month's reset may be weeks away: told at most a day ahead (`Retry-After`'s
            // bound), and the detail says so.
            Err(short) => Err(Denial::Refused(Refusal {
                reason: Reason::Quota(Scope::Tenant),
                retry_after: Duration::from_secs(short.reset_in_s).min(MAX_RETRY_AFTER),
                class: None,
                lag: None,
                quota: Some(short.window),
            })),
        }
    }
}
