//! A ceiling on what unauthenticated and failing clients can cost: a per-source-address limit
//! on failed authentications, for both listeners (bad API keys, bad admin tokens).
//!
//! Failures are counted with `governor`'s keyed limiter — its natural use: many independent
//! keys, one dimension, nothing to charge atomically elsewhere. A source that has used up its
//! allowance (`[server] auth_failures_per_sec`, `auth_failures_burst`) enters a small penalty
//! box until the limiter would allow it again; while there, its *failing* requests are answered
//! `429` instead of `401`. A request with a valid credential is never refused for its
//! address's failures: behind a NAT or a load balancer one misconfigured client must not lock
//! out everyone else. (The caller checks the credential first — one SHA-256 of a well-formed
//! key — and asks this guard only about failures.) Each listener has its own guard, so bad
//! API keys cannot lock an operator out of the admin API.
//!
//! Both maps are bounded ([`MAX_SOURCES`]): when a map is full its stale entries are swept, at
//! most once a second, and until a sweep makes room the newest sources are not tracked (the
//! limit fails open rather than letting memory grow, and a flood of new addresses costs O(1)
//! per failure, not a scan). IPv6 sources are counted per /64, since one host can use a whole
//! /64.
//!
//! A foundation module: it imports only the budget clock.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::Clock as _;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};

use crate::budget::Clock;

/// The most source addresses tracked at once, in each of the two maps.
pub const MAX_SOURCES: usize = 65_536;

/// governor's view of floodgate's clock (steppable in tests).
#[derive(Debug, Clone)]
struct GovernorClock(Arc<dyn Clock>);

impl governor::clock::Clock for GovernorClock {
    type Instant = Nanos;
    fn now(&self) -> Nanos {
        Nanos::from(self.0.now_ns())
    }
}

#[derive(Debug)]
pub struct FailureGuard {
    limiter: RateLimiter<IpAddr, HashMapStateStore<IpAddr>, GovernorClock, NoOpMiddleware<Nanos>>,
    /// Sources over their allowance, and the clock reading until which they are refused.
    penalty: Mutex<HashMap<IpAddr, u64>>,
    clock: GovernorClock,
    /// Failed authentications seen, and requests refused because of earlier ones.
    pub failed: AtomicU64,
    pub refused: AtomicU64,
    /// Clock reading before which a full map is not swept again, and sweeps made.
    next_sweep_ns: AtomicU64,
    sweeps: AtomicU64,
}

/// How often a full map may be swept for stale entries.
const SWEEP_EVERY_NS: u64 = 1_000_000_000;

/// The address a source is counted under.
fn source(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

impl FailureGuard {
    pub fn new(per_sec: u32, burst: u32, clock: Arc<dyn Clock>) -> Self {
        let per_sec = NonZeroU32::new(per_sec).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        let clock = GovernorClock(clock);
        Self {
            limiter: RateLimiter::new(
                Quota::per_second(per_sec).allow_burst(burst),
                HashMapStateStore::default(),
                clock.clone(),
            ),
            penalty: Mutex::new(HashMap::new()),
            clock,
            failed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            next_sweep_ns: AtomicU64::new(0),
            sweeps: AtomicU64::new(0),
        }
    }

    /// Whether a full map may be swept now (at most once per [`SWEEP_EVERY_NS`]).
    fn may_sweep(&self, now: u64) -> bool {
        let next = self.next_sweep_ns.load(Ordering::Acquire);
        let due = now >= next
            && self
                .next_sweep_ns
                .compare_exchange(
                    next,
                    now + SWEEP_EVERY_NS,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok();
        if due {
            self.sweeps.fetch_add(1, Ordering::Relaxed);
        }
        due
    }

    fn penalty(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, u64>> {
        self.penalty
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// If this source's failing requests are refused now, how long until they are not. One
    /// map lookup.
    pub fn refusal(&self, ip: IpAddr) -> Option<Duration> {
        let now = self.clock.now().as_u64();
        let until = *self.penalty().get(&source(ip))?;
        if until <= now {
            return None;
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        Some(Duration::from_nanos(until - now))
    }

    /// Counts a failed authentication from this source.
    pub fn failed(&self, ip: IpAddr) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let key = source(ip);
        let now = self.clock.now().as_u64();
        if self.limiter.len() >= MAX_SOURCES {
            if !self.may_sweep(now) {
                return;
            }
            self.limiter.retain_recent();
            if self.limiter.len() >= MAX_SOURCES {
                return;
            }
        }
        let Err(not_until) = self.limiter.check_key(&key) else {
            return;
        };
        let until = not_until.earliest_possible().as_u64();
        let mut penalty = self.penalty();
        if penalty.len() >= MAX_SOURCES && !penalty.contains_key(&key) {
            if !self.may_sweep(now) {
                return;
            }
            penalty.retain(|_, until| *until > now);
            if penalty.len() >= MAX_SOURCES {
                return;
            }
        }
        penalty.insert(key, until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ManualClock;

    #[test]
    fn a_source_over_its_allowance_is_refused_until_it_refills() {
        let clock = Arc::new(ManualClock::new());
        let guard = FailureGuard::new(2, 3, clock.clone());
        let bad: IpAddr = "10.0.0.1".parse().expect("ip");
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        for _ in 0..3 {
            assert_eq!(guard.refusal(bad), None);
            guard.failed(bad);
        }
        // The burst of 3 is spent; the 4th failure puts it in the penalty box.
        guard.failed(bad);
        let wait = guard.refusal(bad).expect("refused");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        assert_eq!(guard.refusal(other), None, "other sources are not affected");
        clock.advance_ns(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX));
        assert_eq!(guard.refusal(bad), None);
        assert_eq!(guard.refused.load(Ordering::Relaxed), 1);
        assert_eq!(guard.failed.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_full_table_is_swept_at_most_once_a_second_and_fails_open_meanwhile() {
        let clock = Arc::new(ManualClock::new());
        let guard = FailureGuard::new(2, 3, clock.clone());
        for i in 0..MAX_SOURCES as u32 {
            guard.failed(IpAddr::from(i.to_be_bytes()));
        }
        // Full of fresh entries: the first failure from a new source sweeps (nothing is
        // stale), the next thousand do not scan again, and none of them is tracked.
        for i in 0..1000u32 {
            let ip = IpAddr::from((0xC000_0000 + i).to_be_bytes());
            for _ in 0..5 {
                guard.failed(ip);
            }
            assert_eq!(guard.refusal(ip), None, "not tracked while full");
        }
        assert_eq!(guard.sweeps.load(Ordering::Relaxed), 1);
        // Two seconds on, the old entries have refilled: a sweep makes room again.
        clock.advance_ms(2_000);
        let late: IpAddr = "192.0.2.1".parse().expect("ip");
        for _ in 0..5 {
            guard.failed(late);
        }
        assert!(
            guard.refusal(late).is_some(),
            "tracked again after the sweep"
        );
        assert_eq!(guard.sweeps.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn ipv6_sources_are_counted_per_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        assert_eq!(source(a), source(b));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
        assert_eq!(source(mapped), "10.0.0.1".parse::<IpAddr>().expect("ip"));
    }
}
