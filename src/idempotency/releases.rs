//! Cluster mode: each tenant's allowance of keyed requests Redis worked for and no budget
//! paid: claims given up without an answer, and requests the store answered itself.
//!
//! A keyed request is claimed in Redis before its body is read, and a request refused after
//! that (a malformed body, a schema violation, an unknown partition, Kafka unavailable) gives
//! its claim up again: two Redis scripts, six commands, for a request that was charged
//! nothing (review 22 of #37: 15,000 commands a second from one client thread of a tenant
//! allowed one record a second, on the Redis every replica's budgets rely on). So each tenant
//! may give claims up at `[idempotency] releases_per_tenant_per_sec` after a burst of
//! `releases_per_tenant_burst`, per replica; past that its keyed requests are refused `429`
//! (reason `idempotency_releases`) before anything is asked of Redis, until the allowance
//! has room again. Claims given up together past it overdraw it (see [`Releases::count`]).
//! A keyed request the store answers itself spends it too (review 31 of #37: a stored
//! answer replayed, a key another request holds, another replica's request pending — each
//! a claim script, and a replay copies its whole answer out of Redis: 5,400 commands and
//! 15 MB a second from four connections of a tenant allowed 100 records a second, 68 MB a
//! second for a 143 KB answer): one unit, and a replay one more per [`REPLAY_UNIT`] bytes.
//! Requests that are admitted never spend it, so a tenant whose requests succeed is never
//! held; nor do ones the gateway could not serve (a 5xx: Kafka, the registry or the store
//! away), nor a claim given up behind a Redis that timed out: those were not the tenant's
//! doing. Every 4xx after a claim is counted, a 429 too (the pipeline decides:
//! `ingest::idempotent`).
//!
//! A token bucket per tenant in [`crate::budget`]'s GCRA arithmetic, not `governor`'s keyed
//! limiter: the allowance is looked at before a claim, whose release is not known yet, and
//! spent only when it comes; governor decides and spends in one call. Its map holds one
//! number per tenant that gave a claim up lately (tenants are bounded by the registry);
//! full buckets are swept once it passes [`SWEEP_AT`] entries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::{Clock, RateSpec};
use crate::identity::TenantId;

/// The bytes of a replayed answer that count as one more unit of the allowance.
pub const REPLAY_UNIT: usize = 32 * 1024;

/// Entries past which the map's full buckets are swept (at most once per new tenant).
pub const SWEEP_AT: usize = 4_096;

/// The most a tenant's releases may overdraw its allowance, in seconds of its rate: ten
/// minutes. At a minute, a wave of 9,600 claims (300 connections × 32 HTTP/2 streams) went
/// through every minute, 153 a second against 20 (review 29 of #37); at ten, the most a
/// tenant may have in progress at once (1,024 connections × 32 streams) comes to ~2.7× its
/// rate, and an overdraft a tenant's own clients made is repaid within ten minutes.
pub const MAX_DEBT_S: u64 = 600;

#[derive(Debug)]
pub struct Releases {
    spec: RateSpec,
    clock: Arc<dyn Clock>,
    /// Each tenant's bucket, as its TAT in ticks of the rate.
    tats: parking_lot::Mutex<HashMap<TenantId, u64>>,
}

impl Releases {
    pub fn new(per_sec: u64, burst: u64, clock: Arc<dyn Clock>) -> Self {
        Self {
            spec: RateSpec {
                per_sec: per_sec.max(1),
                burst: burst.max(1),
            },
            clock,
            tats: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// How long until `tenant` may give a claim up again, if its allowance is spent now.
    /// Spends nothing.
    pub fn spent(&self, tenant: &TenantId) -> Option<Duration> {
        let now = self.clock.now_ns();
        let tat = *self.tats.lock().get(tenant)?;
        match self.spec.try_take(tat, now, 1) {
            Ok(_) => None,
            Err(ns) => Some(Duration::from_nanos(ns)),
        }
    }

    /// `tenant` gave a claim up, or had the store answer for it (`units` of the allowance).
    /// Claims made while the allowance had room may all be given
    /// up together (a tenant's requests in progress are many: review 28 of #37 had 1,000
    /// connections' worth at once, 50× the allowance): each still counts, overdrawing the
    /// allowance, and the tenant is held until it is repaid, up to [`MAX_DEBT_S`] seconds of
    /// its rate. So over any long while a tenant gives up about its rate, however many
    /// requests it has in progress.
    pub fn count(&self, tenant: &TenantId, units: u64) {
        let full = self.spec.full_tat(self.clock.now_ns());
        let mut tats = self.tats.lock();
        if !tats.contains_key(tenant) && tats.len() >= SWEEP_AT {
            tats.retain(|_, tat| *tat > full);
        }
        let tat = tats.entry(tenant.clone()).or_insert(full);
        let most = full
            .saturating_add(self.spec.burst)
            .saturating_add(self.spec.per_sec.saturating_mul(MAX_DEBT_S));
        *tat = (*tat).max(full).saturating_add(units).min(most);
    }

    /// Tenants tracked now.
    pub fn tracked(&self) -> usize {
        self.tats.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ManualClock;

    fn releases(per_sec: u64, burst: u64) -> (Releases, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        (Releases::new(per_sec, burst, clock.clone()), clock)
    }

    #[test]
    fn a_tenant_is_held_once_its_burst_of_releases_is_spent_and_free_an_interval_later() {
        let (releases, clock) = releases(10, 3);
        let (a, b) = (TenantId::new("a"), TenantId::new("b"));
        for _ in 0..3 {
            assert_eq!(releases.spent(&a), None);
            releases.count(&a, 1);
        }
        let wait = releases
            .spent(&a)
            .expect("three releases spend a burst of three");
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        assert_eq!(
            releases.spent(&b),
            None,
            "another tenant's allowance is its own"
        );
        clock.advance_ms(100);
        assert_eq!(
            releases.spent(&a),
            None,
            "one interval later one release is allowed"
        );
        releases.count(&a, 1);
        assert!(releases.spent(&a).is_some());
    }

    /// Review 28 of #37: claims made at once while the allowance had room were all given up
    /// (50× the allowance). They overdraw it, and the tenant is held until it is repaid, at
    /// most ten minutes of its rate.
    #[test]
    fn releases_past_the_allowance_overdraw_it_up_to_ten_minutes() {
        let (releases, clock) = releases(10, 5);
        let a = TenantId::new("a");
        for _ in 0..55 {
            releases.count(&a, 1);
        }
        let wait = releases.spent(&a).expect("overdrawn");
        assert!(wait > Duration::from_millis(4_900), "{wait:?}");
        clock.advance_ms(4_900);
        assert!(releases.spent(&a).is_some(), "not repaid yet");
        clock.advance_ms(200);
        assert_eq!(releases.spent(&a), None, "repaid: 50 at 10 a second");
        for _ in 0..100_000 {
            releases.count(&a, 1);
        }
        let wait = releases.spent(&a).expect("overdrawn");
        assert!(wait <= Duration::from_secs(MAX_DEBT_S + 1), "{wait:?}");
        assert!(wait >= Duration::from_secs(MAX_DEBT_S), "{wait:?}");
    }

    #[test]
    fn full_buckets_are_swept_once_the_map_is_large() {
        let (releases, clock) = releases(10, 5);
        for i in 0..SWEEP_AT {
            releases.count(&TenantId::new(&format!("t{i}")), 1);
        }
        assert_eq!(releases.tracked(), SWEEP_AT);
        clock.advance_ms(1_000);
        releases.count(&TenantId::new("late"), 1);
        assert_eq!(releases.tracked(), 1, "every bucket had refilled");
    }
}
