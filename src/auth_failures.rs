//! A ceiling on what unauthenticated and failing clients can cost: a per-source-address limit
//! on failed authentications, for both listeners (bad API keys, bad admin tokens).
//!
//! Failures are counted with `governor`'s keyed limiter — its natural use: many independent
//! keys, one dimension, nothing to charge atomically elsewhere. Each failing request is one
//! `check_key`, which decides and counts in one step: within the source's allowance
//! (`[server] auth_failures_per_sec` after a burst of `auth_failures_burst`) the failure is
//! counted and answered `401`; beyond it nothing is counted and the request is answered `429`
//! with the time until the allowance has room again. So a source gets at most
//! burst + rate × T answers to its guesses in any T seconds however many requests it sends at
//! once (a separate "is it refused?" look before the count let concurrent failures through
//! between the two). A request with a valid credential is never refused for its address's
//! failures: behind a NAT or a load balancer one misconfigured client must not lock out
//! everyone else. (The caller checks the credential first — one SHA-256 of a well-formed
//! key — and asks this guard only about failures.) Each listener has its own guard, so bad
//! API keys cannot lock an operator out of the admin API.
//!
//! The map is bounded ([`MAX_SOURCES`]): when it is full its stale entries are swept, at most
//! once a second, and until a sweep makes room the newest sources are not tracked (the limit
//! fails open rather than letting memory grow, and a flood of new addresses costs O(1) per
//! failure, not a scan). IPv6 sources are counted per /64, since one host can use a whole
//! /64.
//!
//! A foundation module: it imports only the budget clock.
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use governor::clock::Clock as _;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};

use crate::budget::Clock;

/// The most source addresses tracked at once.
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
pub struct AuthFailures {
    limiter: RateLimiter<IpAddr, HashMapStateStore<IpAddr>, GovernorClock, NoOpMiddleware<Nanos>>,
    clock: GovernorClock,
    /// Failing requests answered 401 (counted against their source's allowance), and those
    /// answered 429 because the allowance was spent.
    pub failed: AtomicU64,
    pub refused: AtomicU64,
    /// Clock reading before which a full map is not swept again, and sweeps made.
    next_sweep_ns: AtomicU64,
    sweeps: AtomicU64,
    /// Sources refused, and until when their allowance has no room (what [`AuthFailures::fail`]
    /// last answered them): looked up before work that only a valid credential earns (a JWT
    /// signature check), so a source over its allowance is refused without it. Exact until
    /// then — a refusal does not change the limiter, and nothing but failures does — and
    /// bounded like the limiter (at most [`MAX_SOURCES`], lapsed entries swept first).
    held: parking_lot::Mutex<HashMap<IpAddr, u64>>,
    /// Nanoseconds between two units of an allowance (1 / `auth_failures_per_sec`).
    interval_ns: u64,
}

/// How often a full map may be swept for stale entries.
const SWEEP_EVERY_NS: u64 = 1_000_000_000;

/// The address a source is counted under (IPv6 per /64: one host can use a whole /64).
pub fn source(ip: IpAddr) -> IpAddr {
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

impl AuthFailures {
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
            clock,
            failed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            next_sweep_ns: AtomicU64::new(0),
            sweeps: AtomicU64::new(0),
            held: parking_lot::Mutex::new(HashMap::new()),
            interval_ns: 1_000_000_000 / u64::from(per_sec.get()),
        }
    }

    /// How long this source's allowance stays spent, if it is spent now: a failure now would be
    /// refused. Counts nothing and changes nothing (a source is known to be over once one of
    /// its failures has been refused).
    pub fn over(&self, ip: IpAddr) -> Option<Duration> {
        let now = self.clock.now().as_u64();
        // A lapsed entry stays (a failure allowed just after it spends the allowance again,
        // see `trickle`); a full map sweeps lapsed entries first.
        let until = *self.held.lock().get(&source(ip))?;
        (until > now).then(|| Duration::from_nanos(until - now))
    }

    /// A failure of a source that was refused until less than one interval ago was allowed:
    /// it took the one unit its allowance regained since (a spent allowance refills one unit
    /// per interval), so it is spent again, until one interval after that unit came.
    fn trickle(&self, key: IpAddr, now: u64) {
        let mut held = self.held.lock();
        if let Some(until) = held.get_mut(&key) {
            if now >= *until && now < until.saturating_add(self.interval_ns) {
                *until = until.saturating_add(self.interval_ns);
            }
        }
    }

    /// A source's failure was refused until `wait` from `now`.
    fn hold(&self, key: IpAddr, now: u64, wait: Duration) {
        let until = now.saturating_add(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX));
        let mut held = self.held.lock();
        if held.len() >= MAX_SOURCES && !held.contains_key(&key) {
            let lapsed = now.saturating_sub(self.interval_ns);
            held.retain(|_, u| *u > lapsed);
            if held.len() >= MAX_SOURCES {
                return; // full of live entries: not held, so checked (and refused) the long way
            }
        }
        held.insert(key, until);
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

    /// A failed authentication from this source: `None` when it is within the source's
    /// allowance (counted; answer 401), or how long until the allowance has room again (not
    /// counted; answer 429). One atomic decision.
    pub fn fail(&self, ip: IpAddr) -> Option<Duration> {
        let key = source(ip);
        let now = self.clock.now();
        if self.limiter.len() >= MAX_SOURCES {
            let tracked = self.may_sweep(now.as_u64()) && {
                self.limiter.retain_recent();
                self.limiter.len() < MAX_SOURCES
            };
            if !tracked {
                // Full of live entries: fail open (counted, never refused) until a sweep.
                self.failed.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        match self.limiter.check_key(&key) {
            Ok(()) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.trickle(key, now.as_u64());
                None
            }
            Err(not_until) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                let wait = not_until.wait_time_from(now).max(Duration::from_nanos(1));
                self.hold(key, now.as_u64(), wait);
                Some(wait)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ManualClock;

    #[test]
    fn a_source_over_its_allowance_is_refused_until_it_refills() {
        let clock = Arc::new(ManualClock::new());
        let guard = AuthFailures::new(2, 3, clock.clone());
        let bad: IpAddr = "10.0.0.1".parse().expect("ip");
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        for _ in 0..3 {
            assert_eq!(guard.fail(bad), None, "within the burst: 401");
        }
        // The burst of 3 is spent: the 4th failure is refused, and not counted.
        let wait = guard.fail(bad).expect("refused");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        assert_eq!(guard.fail(other), None, "other sources are not affected");
        clock.advance_ns(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX));
        assert_eq!(guard.fail(bad), None, "one more once it refilled");
        assert!(guard.fail(bad).is_some());
        assert_eq!(guard.refused.load(Ordering::Relaxed), 2);
        assert_eq!(guard.failed.load(Ordering::Relaxed), 5);
    }

    /// Deciding and counting are one step: failures arriving together from one source get
    /// exactly its burst of 401s, not one each before any of them is counted.
    #[test]
    fn concurrent_failures_from_one_source_get_exactly_the_burst() {
        let clock = Arc::new(ManualClock::new());
        let guard = Arc::new(AuthFailures::new(1, 20, clock));
        let bad: IpAddr = "10.0.0.1".parse().expect("ip");
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (guard, barrier) = (guard.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..50).filter(|_| guard.fail(bad).is_none()).count()
                })
            })
            .collect();
        let allowed: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
        assert_eq!(allowed, 20);
        assert_eq!(guard.failed.load(Ordering::Relaxed), 20);
        assert_eq!(guard.refused.load(Ordering::Relaxed), 380);
    }

    #[test]
    fn a_full_table_is_swept_at_most_once_a_second_and_fails_open_meanwhile() {
        let clock = Arc::new(ManualClock::new());
        let guard = AuthFailures::new(2, 3, clock.clone());
        for i in 0..MAX_SOURCES as u32 {
            assert_eq!(guard.fail(IpAddr::from(i.to_be_bytes())), None);
        }
        // Full of fresh entries: the first failure from a new source sweeps (nothing is
        // stale), the next thousand do not scan again, and none of them is tracked.
        for i in 0..1000u32 {
            let ip = IpAddr::from((0xC000_0000 + i).to_be_bytes());
            for _ in 0..5 {
                assert_eq!(guard.fail(ip), None, "not tracked while full");
            }
        }
        assert_eq!(guard.sweeps.load(Ordering::Relaxed), 1);
        // Two seconds on, the old entries have refilled: a sweep makes room again.
        clock.advance_ms(2_000);
        let late: IpAddr = "192.0.2.1".parse().expect("ip");
        let refused = (0..5).filter(|_| guard.fail(late).is_some()).count();
        assert_eq!(refused, 2, "tracked again after the sweep");
        assert_eq!(guard.sweeps.load(Ordering::Relaxed), 2);
    }

    /// `over` says what a failure now would get, without counting one: nothing until a
    /// failure of the source was refused, then the same wait until the allowance has room.
    #[test]
    fn over_tells_a_refused_source_apart_without_counting() {
        let clock = Arc::new(ManualClock::new());
        let guard = AuthFailures::new(1, 2, clock.clone());
        let bad: IpAddr = "10.0.0.1".parse().expect("ip");
        assert_eq!(guard.over(bad), None);
        assert_eq!(guard.fail(bad), None);
        assert_eq!(guard.fail(bad), None);
        assert_eq!(
            guard.over(bad),
            None,
            "not known to be over before a refusal"
        );
        let wait = guard.fail(bad).expect("refused");
        for _ in 0..10 {
            assert_eq!(guard.over(bad), Some(wait), "asking counts nothing");
        }
        assert_eq!(guard.over("10.0.0.2".parse().expect("ip")), None);
        clock.advance_ns(u64::try_from(wait.as_nanos()).expect("ns") - 1);
        assert!(guard.over(bad).is_some());
        clock.advance_ns(1);
        assert_eq!(guard.over(bad), None, "room again");
        assert_eq!(guard.fail(bad), None);
        // That took the one unit that came back: over again at once, without a refusal.
        assert_eq!(guard.over(bad), Some(Duration::from_secs(1)));
        assert!(guard.fail(bad).is_some());
        assert_eq!(guard.failed.load(Ordering::Relaxed), 3);
        assert_eq!(guard.refused.load(Ordering::Relaxed), 2);
        // Long after, the allowance has refilled: a failure then is not held after it.
        clock.advance_ms(10_000);
        assert_eq!(guard.fail(bad), None);
        assert_eq!(guard.over(bad), None);
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
