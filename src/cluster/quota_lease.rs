//! Quotas counted in Redis (`quota::shared`): the request-path lease of a quota's allowance,
//! one at a time per holder (a tenant, or the global quotas) and window kind, and the
//! allowances given back on leaving.

use std::sync::Arc;
use std::time::Duration;

use super::{Asked, Cluster, QuotaAsk};
use crate::admission::LeaseNeed;
use crate::budget::Scope;
use crate::dimension::PerDimension;
use crate::quota::shared::{self, Leased};
use crate::quota::{QuotaSpec, Quotas, Span, Window};
use crate::record::Charge;
use crate::refusal::Refusal;
use crate::tenant::Tenant;

/// Whose quotas a lease is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Holder<'a> {
    Tenant(&'a Tenant),
    /// `[global] quotas`: counted by all tenants together.
    Global,
}

impl Holder<'_> {
    fn scope(self) -> Scope {
        match self {
            Holder::Tenant(_) => Scope::Tenant,
            Holder::Global => Scope::Global,
        }
    }
}

/// One quota window a replica knows of: its quota, this replica's allowance, the window.
type Known = (QuotaSpec, shared::Allowance, Span);

/// A quota's count may be forgotten a day after its window ends: a replica whose clock runs
/// a little late still finds it.
const KEPT_AFTER_S: i64 = 86_400;

impl Cluster {
    fn unix_s(&self) -> i64 {
        i64::try_from(self.clock.unix_s()).unwrap_or(i64::MAX)
    }

    /// The request-path lease lock of one holder's quota (forgotten once nobody holds it).
    fn quota_lock(&self, holder: Holder<'_>, window: Window) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .quota_in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        let serial = match holder {
            Holder::Tenant(t) => Some(t.serial),
            Holder::Global => None,
        };
        locks.entry((serial, window)).or_default().clone()
    }

    /// Works on a holder's quotas under their lock (never held across an await).
    fn with_quotas<T>(&self, holder: Holder<'_>, work: impl FnOnce(&mut Quotas) -> T) -> T {
        match holder {
            Holder::Tenant(t) => work(&mut t.admission_state().quotas),
            Holder::Global => work(&mut self.global.quotas.lock()),
        }
    }

    /// The key of a holder's shared count of the window of `window` starting at `start`.
    fn holder_key(&self, holder: Holder<'_>, window: Window, start: i64) -> String {
        match holder {
            Holder::Tenant(t) => self.store.quota_key(t.id.as_str(), window, start),
            Holder::Global => self.store.global_quota_key(window, start),
        }
    }

    /// Asks Redis for what the request's quota allowances lack (plus a top-up of a member's
    /// part of `slice_fraction` of the quota). `Ok` means ask admission again; `Err` is the
    /// refusal: the quota has less left than the request needs.
    pub(super) async fn lease_quotas(
        &self,
        holder: Holder<'_>,
        windows: u8,
        need: &LeaseNeed,
    ) -> Result<Asked, Refusal> {
        let mut asked = Asked::Nothing;
        for window in Window::ALL {
            if windows & (1 << window as usize) == 0 {
                continue;
            }
            let lock = self.quota_lock(holder, window);
            let _one_lease_at_a_time = lock.lock().await;
            let unix_s = self.unix_s();
            let known = self.with_quotas(holder, |quotas| {
                let spec = quotas.specs.iter().find(|s| s.window == window).copied()?;
                let (a, span) = shared::current(
                    &quotas.shared[window as usize],
                    &spec,
                    &self.calendar,
                    unix_s,
                );
                Some((spec, a, span))
            });
            let Some((spec, allowance, span)) = known else {
                continue; // the quota was taken away meanwhile
            };
            let missing = lacking(&spec, allowance.held, need.charge);
            if missing == Charge::default() {
                continue; // another request's lease brought it meanwhile
            }
            let members = self.members().max(1);
            let ask = QuotaAsk {
                limit: spec.limit,
                want: PerDimension::from_fn(|d| {
                    missing[d].saturating_add(top_up(
                        &spec,
                        d,
                        self.settings.slice_fraction,
                        members,
                    ))
                }),
                min: if need.partial {
                    missing.map(|m| m.min(1))
                } else {
                    missing
                },
                known: allowance.heard,
                outage: allowance.outage,
                give: Charge::default(),
                received: allowance.received,
                members,
                expire_at_s: span.end.saturating_add(KEPT_AFTER_S),
                unsure_ms: self.unsure_ms(),
                fraction: self.settings.slice_fraction,
            };
            let key = self.holder_key(holder, window, span.start);
            asked = Asked::Redis;
            match self.store.quota(&key, &self.settings.instance, ask).await {
                Ok(grant) => {
                    let leased = Leased {
                        window: (window, span.start),
                        granted: grant.granted,
                        count: grant.count,
                        reported: allowance.unreported,
                    };
                    let (unix_s, now_ns) = (self.unix_s(), self.clock.now_ns());
                    self.with_quotas(holder, |quotas| {
                        quotas.leased(leased, &self.calendar, unix_s, now_ns);
                    });
                    // A quota in shadow mode refuses nothing: admission counts it from the
                    // count just heard (`admission::shadow`).
                    if grant.refused && !spec.shadow {
                        // Refused its part of an unsure count: back once the count is sure
                        // (review 2 of #41: a new tenant's burst was told 12.5 h).
                        let reset = u64::try_from(span.end.saturating_sub(unix_s)).unwrap_or(0);
                        let wait = grant
                            .unsure_for
                            .unwrap_or(Duration::from_secs(reset.max(1)));
                        return Err(Refusal::quota_of(holder.scope(), window, wait));
                    }
                }
                Err(e) => {
                    self.degrade(&e);
                    return Ok(asked);
                }
            }
        }
        Ok(asked)
    }

    /// How long a count made where its tenant has none is unsure (`quota.lua`): long enough
    /// for every live replica to beat, find Redis forgot it, and push what it heard.
    fn unsure_ms(&self) -> u64 {
        u64::try_from(self.settings.heartbeat.as_millis().saturating_mul(3)).unwrap_or(u64::MAX)
    }

    /// Leaving: gives every quota allowance still held back to its count (and reports what was
    /// admitted without Redis), best effort.
    pub(super) async fn give_back_quotas(&self) {
        self.push_quotas(true).await;
    }

    /// Redis forgot this replica (restarted empty): tells it every count this replica heard
    /// in the current windows, and what it admitted without a lease, so a count made again
    /// starts where the replicas knew it (`quota.lua`'s unsure counts). Best effort.
    pub(super) async fn remind_quotas(&self) {
        self.push_quotas(false).await;
    }

    /// One call per quota window this replica knows of (its tenants', the global ones): its
    /// heard count and reports, and (`give`) its unspent allowance given back.
    async fn push_quotas(&self, give: bool) {
        let unix_s = self.unix_s();
        let global = self.with_quotas(Holder::Global, |q| self.known(q, unix_s));
        if !self.push_known(Holder::Global, global, give).await {
            return;
        }
        let registry = self.tenants.load();
        for t in registry.tenants() {
            let known = match t.admission_if_live() {
                Some(state) => self.known(&state.quotas, unix_s),
                None => continue,
            };
            if !self.push_known(Holder::Tenant(t), known, give).await {
                return;
            }
        }
    }

    /// The windows of `quotas` this replica heard a count of or admitted without a lease.
    fn known(&self, quotas: &Quotas, unix_s: i64) -> Vec<Known> {
        quotas
            .specs
            .iter()
            .map(|spec| {
                let slot = &quotas.shared[spec.window as usize];
                let (a, span) = shared::current(slot, spec, &self.calendar, unix_s);
                (*spec, a, span)
            })
            .filter(|(_, a, _)| a.heard_at_ns != 0 || a.unreported != Charge::default())
            .collect()
    }

    /// Tells Redis what this replica knows of a holder's windows; `false` once a call fails
    /// (Redis is away: the rest would fail too).
    async fn push_known(&self, holder: Holder<'_>, known: Vec<Known>, give: bool) -> bool {
        for (spec, a, span) in known {
            let ask = QuotaAsk {
                limit: spec.limit,
                known: a.heard,
                outage: a.outage,
                give: if give { a.held } else { Charge::default() },
                received: a.received,
                members: 1,
                expire_at_s: span.end.saturating_add(KEPT_AFTER_S),
                unsure_ms: self.unsure_ms(),
                fraction: self.settings.slice_fraction,
                ..QuotaAsk::default()
            };
            let key = self.holder_key(holder, spec.window, span.start);
            if let Err(e) = self.store.quota(&key, &self.settings.instance, ask).await {
                self.stats.count_error(e.kind());
                return false;
            }
        }
        true
    }
}

/// What an allowance holding `held` lacks for `charge`, in the quota's limited dimensions.
fn lacking(spec: &QuotaSpec, held: Charge, charge: Charge) -> Charge {
    PerDimension::from_fn(|d| {
        if spec.limit[d].is_some() {
            charge[d].saturating_sub(held[d])
        } else {
            0
        }
    })
}

/// What a lease asks for beyond the request: a member's part of `fraction` of the quota, so
/// the allowances of all replicas hold at most that fraction between them.
fn top_up(spec: &QuotaSpec, d: crate::dimension::Dimension, fraction: f64, members: u32) -> u64 {
    spec.limit[d].map_or(0, |limit| {
        ((fraction * limit as f64 / f64::from(members)) as u64).max(1)
    })
}
