//! Calendar quotas in admission: checked with every other limit under the tenant's lock,
//! committed only when the whole request is admitted; a refusal names the window and waits
//! for it to turn. In cluster mode the counts are shared (`quota::shared`): a request spends
//! this replica's allowance, or asks for a lease like a budget's slice does.

use std::time::Duration;

use std::sync::MutexGuard;

use super::{Admission, Blocked, LeaseNeed};
use crate::budget::{Mode, ModeCell, Scope};
use crate::quota::shared::{self, SharedShort, Standing};
use crate::quota::{Calendar, QuotaShort, QuotaUse, Quotas, Window};
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal, TooLarge};
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

    /// The wall clock in Unix seconds when the clock read `now_ns`, as the quotas' windows
    /// follow it.
    pub(super) fn unix_s(&self, now_ns: u64) -> i64 {
        i64::try_from(self.clock.unix_s_at(now_ns)).unwrap_or(i64::MAX)
    }

    /// The quotas' uses after `charge`, the leases they need first, or the refusal; and
    /// whether a quota in shadow mode would have refused it. `quotas` are `scope`'s (a
    /// tenant's, under its lock, or the global ones, under theirs). `waived`: another limit in
    /// shadow mode would refuse it, so quotas in shadow mode are left as they are.
    pub(super) fn quota_check(
        &self,
        quotas: &Quotas,
        scope: Scope,
        now_ns: u64,
        charge: Charge,
        waived: bool,
    ) -> Result<(QuotaPlan, bool), Denial> {
        if quotas.specs.is_empty() {
            return Ok((QuotaPlan::None, false));
        }
        if let Some(too) = too_large(quotas, scope, charge) {
            return Err(Denial::TooLarge(too));
        }
        let unix_s = self.unix_s(now_ns);
        let Some(sharing) = &self.sharing else {
            return match quotas.take(&self.calendar, unix_s, charge, waived) {
                Ok((used, shadow)) => Ok((QuotaPlan::Local(used), shadow.is_some())),
                Err(short) => Err(quota_refusal(scope, short, None)),
            };
        };
        match self.shared_take(quotas, sharing, unix_s, now_ns, charge, waived) {
            Ok((_, _, shadow)) => Ok((QuotaPlan::Shared { waived }, shadow.is_some())),
            Err(SharedShort::Lease(windows)) => Ok((QuotaPlan::Lease(windows), false)),
            // Without Redis the outage part is spent, not the quota: the client is told to
            // come back when Redis is tried again, not at the window's end.
            Err(SharedShort::Short { short, outage }) => Err(quota_refusal(
                scope,
                short,
                outage.then(|| Duration::from_nanos(sharing.reprobe_ns())),
            )),
        }
    }

    /// The tenant's quotas and the global ones: their plans, or the refusal. A quota in
    /// shadow mode that would refuse is noted in `shadow`, and waives every other quota in
    /// shadow mode, as its refusal would have charged none.
    pub(super) fn quotas_check(
        &self,
        state: &AdmissionState,
        now_ns: u64,
        charge: Charge,
        shadow: &mut Option<Reason>,
    ) -> Result<(QuotaPlan, QuotaPlan), Denial> {
        let waived = shadow.is_some();
        let (mut tenant, would) =
            self.quota_check(&state.quotas, Scope::Tenant, now_ns, charge, waived)?;
        if would {
            shadow.get_or_insert(Reason::Quota(Scope::Tenant));
        }
        let global = self.global_quota_check(now_ns, charge, shadow)?;
        if !waived && !would && shadow.is_some() {
            // Only a global quota in shadow mode would refuse it: the tenant's in shadow mode
            // are left as they are.
            tenant = self
                .quota_check(&state.quotas, Scope::Tenant, now_ns, charge, true)?
                .0;
        }
        Ok((tenant, global))
    }

    /// [`Admission::quota_check`] of the global quotas, if any is set; a quota in shadow mode
    /// that would refuse is noted in `shadow`.
    pub(super) fn global_quota_check(
        &self,
        now_ns: u64,
        charge: Charge,
        shadow: &mut Option<Reason>,
    ) -> Result<QuotaPlan, Denial> {
        if !self.global.quotas.any() {
            return Ok(QuotaPlan::None);
        }
        let quotas = self.global.quotas.lock();
        let (plan, would) =
            self.quota_check(&quotas, Scope::Global, now_ns, charge, shadow.is_some())?;
        if would {
            shadow.get_or_insert(Reason::Quota(Scope::Global));
        }
        Ok(plan)
    }

    /// The global quotas as a request is about to be admitted: checked again under their
    /// lock, which is kept until [`GlobalQuotaTake::commit`] (another tenant may have taken
    /// from them since the plan). `None` when no global quota is set.
    /// A quota in shadow mode that would refuse it now is noted in `shadow`.
    pub(super) fn global_quota_take(
        &self,
        now_ns: u64,
        charge: Charge,
        shadow: &mut Option<Reason>,
    ) -> Result<Option<GlobalQuotaTake<'_>>, Blocked> {
        if !self.global.quotas.any() {
            return Ok(None);
        }
        let quotas = self.global.quotas.lock();
        match self.quota_check(&quotas, Scope::Global, now_ns, charge, shadow.is_some()) {
            Ok((QuotaPlan::Lease(windows), _)) => Err(Blocked::Lease(LeaseNeed {
                charge,
                global_quotas: windows,
                ..LeaseNeed::default()
            })),
            Ok((plan, would)) => {
                if would {
                    shadow.get_or_insert(Reason::Quota(Scope::Global));
                }
                Ok(Some(GlobalQuotaTake { quotas, plan }))
            }
            Err(denial) => Err(Blocked::Denied(denial)),
        }
    }

    /// The shared quotas' allowances and uses after `charge`, or why not.
    fn shared_take(
        &self,
        quotas: &Quotas,
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
            &quotas.specs,
            &quotas.shared,
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
        quotas: &mut Quotas,
        plan: QuotaPlan,
        now_ns: u64,
        charge: Charge,
    ) {
        match plan {
            QuotaPlan::Local(used) => quotas.used = used,
            QuotaPlan::Shared { waived } => {
                let Some(sharing) = &self.sharing else { return };
                let unix_s = self.unix_s(now_ns);
                if let Ok((allowances, used, _)) =
                    self.shared_take(quotas, sharing, unix_s, now_ns, charge, waived)
                {
                    quotas.shared = allowances;
                    quotas.used = used;
                }
            }
            QuotaPlan::None | QuotaPlan::Lease(_) => {}
        }
    }
}

/// The global quotas held between their last check and the request's commit.
pub(super) struct GlobalQuotaTake<'a> {
    quotas: MutexGuard<'a, Quotas>,
    plan: QuotaPlan,
}

impl GlobalQuotaTake<'_> {
    /// The request is admitted: the global quotas count it.
    pub(super) fn commit(mut self, admission: &Admission, now_ns: u64, charge: Charge) {
        admission.quota_commit(&mut self.quotas, self.plan, now_ns, charge);
    }
}

/// A request larger than a whole window of an enforced quota: never admitted as it is (a 413,
/// as one larger than a burst), not told to come back when the window turns, where it would be
/// refused again (review 41-r4).
fn too_large(quotas: &Quotas, scope: Scope, charge: Charge) -> Option<TooLarge> {
    quotas.specs.iter().filter(|s| !s.shadow).find_map(|spec| {
        spec.limit.iter().find_map(|(d, limit)| {
            limit.filter(|l| charge[d] > *l).map(|allowed| TooLarge {
                unit: d.as_str(),
                requested: charge[d],
                limit: quota_name(scope, spec.window),
                allowed,
            })
        })
    })
}

/// A quota as a refusal's detail names it.
fn quota_name(scope: Scope, window: Window) -> &'static str {
    match (scope, window) {
        (Scope::Tenant, Window::Hour) => "tenant hour quota",
        (Scope::Tenant, Window::Day) => "tenant day quota",
        (Scope::Tenant, Window::Month) => "tenant month quota",
        (Scope::Global, Window::Hour) => "global hour quota",
        (Scope::Global, Window::Day) => "global day quota",
        (Scope::Global, Window::Month) => "global month quota",
    }
}

/// A quota's refusal: it waits for the window to turn, or for `retry`.
fn quota_refusal(scope: Scope, short: QuotaShort, retry: Option<Duration>) -> Denial {
    let wait = retry.unwrap_or(Duration::from_secs(short.reset_in_s));
    Denial::Refused(Refusal::quota_of(scope, short.window, wait))
}

/// A request's quota leases (its tenant's, the global ones), as admission's lease need
/// carries them.
pub(super) fn with_quotas(need: LeaseNeed, tenant: &QuotaPlan, global: &QuotaPlan) -> LeaseNeed {
    let windows = |plan: &QuotaPlan| match plan {
        QuotaPlan::Lease(windows) => *windows,
        _ => 0,
    };
    LeaseNeed {
        quotas: windows(tenant),
        global_quotas: windows(global),
        ..need
    }
}
