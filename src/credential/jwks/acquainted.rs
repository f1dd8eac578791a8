//! Addresses an issuer's tokens were verified from lately, and the tenant each verified as:
//! what lets a known producer's refetch for an unknown `kid` past the throttle a stranger can
//! spend.
//!
//! The throttle on refetches (`min_refetch_s`) keeps a flood of invented `kid`s from becoming a
//! flood of JWKS fetches; but one forged token a throttle period (public `iss` and `aud`, an
//! invented `kid`) spent it, and every rotated-in key was refused 503 for up to that long
//! (review 41-r9 of #37: 30 s for every tenant of the issuer). So a token from an address that
//! verified one of the issuer's tokens within [`RECENT`] may refetch on its tenant's own
//! allowance — one fetch per `min_refetch_s` per tenant — whoever spent the general one. A
//! tenant can spend only its own (its addresses map to it); the issuer sees at most one fetch
//! per period for strangers plus one per tenant that produced lately. The addresses are
//! bounded and shared fairly: when full, the tenant holding the most gives up its oldest, so
//! one tenant verifying from thousands of addresses pushes out only its own (review 41-r10:
//! filled by one tenant, every other producer was a stranger again).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long an address that verified a token counts as its tenant's: a rotation's new tokens
/// come from producers that had the old ones, and tokens live minutes to an hour.
pub const RECENT: Duration = Duration::from_secs(3600);
/// Most addresses remembered (IPv6 per /64). When full, stale ones are swept (at most once a
/// second), then the tenant holding the most gives up its oldest.
pub const MAX_SOURCES: usize = 4096;
const SWEEP_NS: u64 = 1_000_000_000;

#[derive(Debug, Default)]
pub struct Acquainted {
    inner: parking_lot::Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Source address → the tenant it last verified as, and when (clock ns).
    sources: HashMap<IpAddr, (Arc<str>, u64)>,
    /// Each tenant's addresses, oldest first.
    by_tenant: HashMap<Arc<str>, BTreeSet<(u64, IpAddr)>>,
    /// Tenant → when a refetch was last made on its allowance (clock ns).
    fetched: HashMap<Arc<str>, u64>,
    swept_ns: Option<u64>,
}

fn recent_ns() -> u64 {
    u64::try_from(RECENT.as_nanos()).unwrap_or(u64::MAX)
}

impl Acquainted {
    /// A token was verified from `ip` as `tenant`.
    pub fn note(&self, ip: IpAddr, tenant: &str, now: u64) {
        let source = crate::auth_failures::source(ip);
        let mut inner = self.inner.lock();
        if inner.forget(source).is_none() && inner.sources.len() >= MAX_SOURCES {
            inner.sweep(now);
            if inner.sources.len() >= MAX_SOURCES {
                inner.evict_from_largest();
            }
        }
        let tenant: Arc<str> = match inner.by_tenant.get_key_value(tenant) {
            Some((known, _)) => known.clone(),
            None => Arc::from(tenant),
        };
        inner
            .by_tenant
            .entry(tenant.clone())
            .or_default()
            .insert((now, source));
        inner.sources.insert(source, (tenant, now));
    }

    /// The tenant `ip` verified as within [`RECENT`], if it did.
    pub fn tenant_of(&self, ip: IpAddr, now: u64) -> Option<Arc<str>> {
        let source = crate::auth_failures::source(ip);
        let inner = self.inner.lock();
        let (tenant, at) = inner.sources.get(&source)?;
        (now.saturating_sub(*at) < recent_ns()).then(|| tenant.clone())
    }

    /// How long until `tenant`'s allowance allows a refetch (zero: now).
    pub fn wait(&self, tenant: &str, now: u64, min_refetch: Duration) -> Duration {
        let inner = self.inner.lock();
        let Some(at) = inner.fetched.get(tenant) else {
            return Duration::ZERO;
        };
        min_refetch.saturating_sub(Duration::from_nanos(now.saturating_sub(*at)))
    }

    /// A refetch was made on `tenant`'s allowance.
    pub fn fetched(&self, tenant: &Arc<str>, now: u64) {
        self.inner.lock().fetched.insert(tenant.clone(), now);
    }
}

impl Inner {
    /// Forgets `source`, if it was remembered: what it was.
    fn forget(&mut self, source: IpAddr) -> Option<(Arc<str>, u64)> {
        let (tenant, at) = self.sources.remove(&source)?;
        if let Some(held) = self.by_tenant.get_mut(&tenant) {
            held.remove(&(at, source));
            if held.is_empty() {
                self.by_tenant.remove(&tenant);
            }
        }
        Some((tenant, at))
    }

    /// The oldest address of the tenant holding the most, forgotten.
    fn evict_from_largest(&mut self) {
        let oldest = self
            .by_tenant
            .values()
            .max_by_key(|held| held.len())
            .and_then(|held| held.first().copied());
        if let Some((_, source)) = oldest {
            self.forget(source);
        }
    }

    /// Forgets addresses not heard from within [`RECENT`], and the allowances of tenants no
    /// address is remembered for (so both maps stay within [`MAX_SOURCES`]).
    fn sweep(&mut self, now: u64) {
        if self
            .swept_ns
            .is_some_and(|at| now.saturating_sub(at) < SWEEP_NS)
        {
            return;
        }
        self.swept_ns = Some(now);
        let stale: Vec<IpAddr> = self
            .sources
            .iter()
            .filter(|(_, (_, at))| now.saturating_sub(*at) >= recent_ns())
            .map(|(source, _)| *source)
            .collect();
        for source in stale {
            self.forget(source);
        }
        let by_tenant = &self.by_tenant;
        self.fetched.retain(|t, _| by_tenant.contains_key(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn an_address_is_its_tenants_until_it_goes_quiet() {
        let a = Acquainted::default();
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        assert_eq!(a.tenant_of(ip, S), None, "a stranger");
        a.note(ip, "victim", S);
        assert_eq!(a.tenant_of(ip, 2 * S).as_deref(), Some("victim"));
        let late = S + u64::try_from(RECENT.as_nanos()).expect("ns");
        assert_eq!(a.tenant_of(ip, late), None, "quiet for RECENT");
    }

    #[test]
    fn each_tenant_has_its_own_allowance() {
        let a = Acquainted::default();
        let period = Duration::from_secs(30);
        let victim: Arc<str> = Arc::from("victim");
        assert_eq!(a.wait("victim", S, period), Duration::ZERO);
        a.fetched(&Arc::from("attacker"), S);
        assert_eq!(
            a.wait("victim", S, period),
            Duration::ZERO,
            "not spent by another"
        );
        a.fetched(&victim, S);
        assert_eq!(a.wait("victim", 11 * S, period), Duration::from_secs(20));
        assert_eq!(a.wait("victim", 31 * S, period), Duration::ZERO);
    }

    #[test]
    fn the_map_is_bounded_and_stale_addresses_make_room() {
        let a = Acquainted::default();
        let ip = |i: usize| IpAddr::from([10, 1, (i >> 8) as u8, i as u8]);
        for i in 0..MAX_SOURCES {
            a.note(ip(i), "t", S);
        }
        let later = S + u64::try_from(RECENT.as_nanos()).expect("ns");
        let newcomer = IpAddr::from([10, 9, 9, 9]);
        a.note(newcomer, "u", later);
        assert_eq!(a.tenant_of(newcomer, later).as_deref(), Some("u"));
        let inner = a.inner.lock();
        assert_eq!(inner.sources.len(), 1, "the stale ones swept");
        assert_eq!(inner.by_tenant.len(), 1);
    }

    /// Review 41-r10 of #37: one tenant verifying from 4,100 addresses filled the map, and
    /// every other producer was a stranger again.
    #[test]
    fn a_tenant_filling_the_map_pushes_out_only_its_own() {
        let a = Acquainted::default();
        let victim = IpAddr::from([10, 0, 0, 1]);
        a.note(victim, "victim", S);
        let ip = |i: usize| IpAddr::from([10, 2, (i >> 8) as u8, i as u8]);
        for i in 0..2 * MAX_SOURCES {
            a.note(ip(i), "attacker", S + i as u64);
        }
        let now = 3 * S;
        assert_eq!(a.tenant_of(victim, now).as_deref(), Some("victim"));
        // A producer first seen once the map is full is remembered too (it was a stranger).
        let late = IpAddr::from([10, 0, 0, 2]);
        a.note(late, "other", now);
        assert_eq!(a.tenant_of(late, now).as_deref(), Some("other"));
        assert_eq!(a.inner.lock().sources.len(), MAX_SOURCES);
        let last = ip(2 * MAX_SOURCES - 1);
        assert_eq!(a.tenant_of(last, now).as_deref(), Some("attacker"));
        assert_eq!(a.tenant_of(ip(0), now), None, "its own oldest went");
    }

    #[test]
    fn an_address_moving_to_another_tenant_is_counted_once() {
        let a = Acquainted::default();
        let ip = IpAddr::from([10, 0, 0, 1]);
        a.note(ip, "one", S);
        a.note(ip, "two", 2 * S);
        a.note(ip, "two", 3 * S);
        assert_eq!(a.tenant_of(ip, 3 * S).as_deref(), Some("two"));
        let inner = a.inner.lock();
        assert_eq!(inner.sources.len(), 1);
        assert_eq!(inner.by_tenant.len(), 1, "one's entry gone");
        assert_eq!(inner.by_tenant["two"].len(), 1);
    }
}
