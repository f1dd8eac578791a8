//! Calendar quotas in admission: checked with every other limit under the tenant's lock,
//! committed only when the whole request is admitted; a refusal names the window and waits
//! for it to turn. In cluster mode the counts are shared (`quota::shared`): a request spends
//! this replica's allowance, or asks for a lease like a budget's slice does.

use std::time::Duration;

use super::{Admission, LeaseNeed};
use crate::budget::{Mode, ModeCell};
use crate::quota::shared::{self, SharedShort, Standing};
use crate::quota::{Calendar, QuotaShort, QuotaUse};
use crate::record::Charge;
use crate::refusal::{Denial, Refusal};
use crate::tenant::AdmissionState;

/// What the quotas say of a request: what admitting it does to them (their uses; in cluster
/// mode, worked out again on admission under the same lock: the allowances are larger than a
/// request's plan should carry), or the quotas whose allowances to lease first (a bit per
/// window, `1 << window`).
#[derive(Debug, Clone, Copy)]
pub(super) enum QuotaPlan {
    None,
    Local([QuotaUse; 3]),
    Shared { waived: bool },
    Lease(u8),
}

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

    /// The quotas' uses after `charge`, the leases they need first, or the refusal; and
    /// whether a quota in shadow mode would have refused it. `waived`: another limit in shadow
    /// mode would refuse it, so quotas in shadow mode are left as they are.
    pub(super) fn quota_check(
        &self,
        state: &AdmissionState,
        now_ns: u64,
        charge: Charge,
        waived: bool,
    ) -> Result<(QuotaPlan, bool), Denial> {
        if state.quotas.specs.is_empty() {
            return Ok((QuotaPlan::None, false));
        }
        let unix_s = self.unix_s();
        let Some(sharing) = &self.sharing else {
            return match state.quotas.take(&self.calendar, unix_s, charge, waived) {
                Ok((used, shadow)) => Ok((QuotaPlan::Local(used), shadow.is_some())),
                Err(short) => Err(quota_refusal(short, None)),
            };
        };
        match self.shared_take(state, sharing, unix_s, now_ns, charge, waived) {
            Ok((_, _, shadow)) => Ok((QuotaPlan::Shared { waived }, shadow.is_some())),
            Err(SharedShort::Lease(windows)) => Ok((QuotaPlan::Lease(windows), false)),
            // Without Redis the outage part is spent, not the quota: the client is told to
            // come back when Redis is tried again, not at the window's end.
            Err(SharedShort::Short { short, outage }) => Err(quota_refusal(
                short,
                outage.then(|| Duration::from_nanos(sharing.reprobe_ns())),
            )),
        }
    }

    /// The shared quotas' allowances and uses after `charge`, or why not.
    fn shared_take(
        &self,
        state: &AdmissionState,
        sharing: &ModeCell,
        unix_s: i64,
        now_ns: u64,
        charge: Charge,
        waived: bool,
    ) -> Result<shared::Taken, SharedShort> {
        let standing = match sharing.current().1 {
            Mode::Leased => Standing::Leased,
            Mode::Fallback(members) => Standing::Outage {
                members,
                fraction: self.quota_fraction,
            },
        };
        shared::take(
            &state.quotas.specs,
            &state.quotas.shared,
            &self.calendar,
            shared::At { unix_s, now_ns },
            standing,
            charge,
            waived,
        )
    }

    /// The request is admitted: what its plan said the quotas become, they become. Under the
    /// lock the plan was made under, so the shared take is the one the plan saw.
    pub(super) fn quota_commit(
        &self,
        state: &mut AdmissionState,
        plan: QuotaPlan,
        now_ns: u64,
        charge: Charge,
    ) {
        match plan {
            QuotaPlan::Local(used) => state.quotas.used = used,
            QuotaPlan::Shared { waived } => {
                let Some(sharing) = &self.sharing else { return };
                let unix_s = self.unix_s();
                if let Ok((allowances, used, _)) =
                    self.shared_take(state, sharing, unix_s, now_ns, charge, waived)
                {
                    state.quotas.shared = allowances;
                    state.quotas.used = used;
                }
            }
            QuotaPlan::None | QuotaPlan::Lease(_) => {}
        }
    }
}

/// A quota's refusal: it waits for the window to turn, or for `retry`.
fn quota_refusal(short: QuotaShort, retry: Option<Duration>) -> Denial {
    let wait = retry.unwrap_or(Duration::from_secs(short.reset_in_s));
    Denial::Refused(Refusal::quota(short.window, wait))
}

/// A request's quota leases, as admission's lease need carries them.
pub(super) fn with_quotas(need: LeaseNeed, plan: &QuotaPlan) -> LeaseNeed {
    match plan {
        QuotaPlan::Lease(windows) => LeaseNeed {
            quotas: *windows,
            ..need
        },
        _ => need,
    }
}
