//! Time as the budgets see it: nanoseconds since an arbitrary start, never going backwards.
//! Production uses the monotonic clock; tests step a [`ManualClock`] instead of sleeping.
//!
//! Credentials with an expiry (a JWT's `exp` and `nbf`, a certificate's notAfter) are judged by
//! the wall clock, [`Clock::unix_ns`]: the system's in production (so a corrected system clock
//! is followed), and the manual clock's start plus its steps in tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Nanoseconds since this clock's start.
    fn now_ns(&self) -> u64;

    /// Nanoseconds since the Unix epoch (the wall clock; may go backwards in production).
    fn unix_ns(&self) -> u64 {
        system_unix_ns()
    }

    /// Seconds since the Unix epoch.
    fn unix_s(&self) -> u64 {
        self.unix_ns() / 1_000_000_000
    }

    /// Waits until this clock reads `until_ns`: the runtime's timer for a real clock; a manual
    /// clock waits until a test has stepped it that far, so a wait is tested without sleeping.
    /// A deadline, not a duration: a wait decided at one reading ends at the same instant
    /// however much later it starts.
    fn sleep_until(&self, until_ns: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let d = Duration::from_nanos(until_ns.saturating_sub(self.now_ns()));
        Box::pin(tokio::time::sleep(d))
    }
}

fn system_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The process's monotonic clock.
#[derive(Debug)]
pub struct MonotonicClock {
    start: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told to. Its wall clock starts at the system's time when it
/// is made and moves with its steps.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicU64,
    unix_start_ns: AtomicU64,
    /// Wakes what waits on this clock ([`Clock::sleep_until`]) at every step.
    stepped: tokio::sync::Notify,
}

impl ManualClock {
    pub fn new() -> Self {
        Self {
            now: AtomicU64::new(0),
            unix_start_ns: AtomicU64::new(system_unix_ns()),
            stepped: tokio::sync::Notify::new(),
        }
    }

    /// A manual clock whose wall clock reads `unix_s` now (calendar windows in tests).
    pub fn at_unix_s(unix_s: u64) -> Self {
        let clock = Self::new();
        clock
            .unix_start_ns
            .store(unix_s.saturating_mul(1_000_000_000), Ordering::SeqCst);
        clock
    }

    pub fn advance_ms(&self, ms: u64) {
        self.advance_ns(ms * 1_000_000);
    }

    pub fn advance_ns(&self, ns: u64) {
        self.now.fetch_add(ns, Ordering::SeqCst);
        self.stepped.notify_waiters();
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn unix_ns(&self) -> u64 {
        self.unix_start_ns
            .load(Ordering::SeqCst)
            .saturating_add(self.now_ns())
    }

    fn sleep_until(&self, until: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            loop {
                // Registered before the check: a step between the two still wakes it.
                let stepped = self.stepped.notified();
                if self.now_ns() >= until {
                    return;
                }
                stepped.await;
            }
        })
    }
}
