//! Time as the budgets see it: nanoseconds since an arbitrary start, never going backwards.
//! Production uses the monotonic clock; tests step a [`ManualClock`] instead of sleeping.
//!
//! Credentials with an expiry (a JWT's `exp` and `nbf`, a certificate's notAfter) are judged by
//! the wall clock, [`Clock::unix_ns`]: the system's in production (so a corrected system clock
//! is followed), and the manual clock's start plus its steps in tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
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

    /// Seconds since the Unix epoch when this clock read `now_ns` (a reading just taken): what
    /// the calendar quotas follow, asked up to three times a request.
    fn unix_s_at(&self, now_ns: u64) -> u64 {
        let _ = now_ns;
        self.unix_s()
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
    /// The wall clock less this clock, in nanoseconds, as last read (`unix_s_at`).
    wall_offset_ns: AtomicI64,
    /// This clock's reading when `wall_offset_ns` was last read.
    wall_read_ns: AtomicU64,
}

/// How long `unix_s_at` goes on from one reading of the wall clock: a step of the system's
/// clock is followed within it. Between steps both clocks move at the same rate (NTP slews
/// them alike), so the second it tells is the wall clock's.
const WALL_REREAD_NS: u64 = 1_000_000_000;

impl MonotonicClock {
    pub fn new() -> Self {
        let clock = Self {
            start: Instant::now(),
            wall_offset_ns: AtomicI64::new(0),
            wall_read_ns: AtomicU64::new(0),
        };
        clock.read_wall();
        clock
    }

    /// Reads the wall clock against this one; its Unix nanoseconds.
    fn read_wall(&self) -> u64 {
        let now = self.now_ns();
        let wall = system_unix_ns();
        let offset = i128::from(wall) - i128::from(now);
        self.wall_offset_ns
            .store(i64::try_from(offset).unwrap_or(0), Ordering::Relaxed);
        self.wall_read_ns.store(now, Ordering::Relaxed);
        wall
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

    /// From the last reading of the wall clock, read again once a second: a system call
    /// saved up to three times a request (~110 instructions each). The offset and the time it
    /// was read are two atomics: a reader between their stores at worst reads the wall clock
    /// once more.
    fn unix_s_at(&self, now_ns: u64) -> u64 {
        let read = self.wall_read_ns.load(Ordering::Relaxed);
        let unix_ns = if now_ns.saturating_sub(read) >= WALL_REREAD_NS {
            self.read_wall()
        } else {
            let offset = self.wall_offset_ns.load(Ordering::Relaxed);
            u64::try_from(i128::from(now_ns) + i128::from(offset)).unwrap_or(0)
        };
        unix_ns / 1_000_000_000
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

    fn unix_s_at(&self, now_ns: u64) -> u64 {
        self.unix_start_ns
            .load(Ordering::SeqCst)
            .saturating_add(now_ns)
            / 1_000_000_000
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The wall clock's second, from one reading of it a second: a reading within the second
    /// after it moves with the monotonic clock; a later one reads the wall clock again.
    #[test]
    fn the_monotonic_clock_tells_the_wall_clocks_second() {
        let clock = MonotonicClock::new();
        let close = |told: u64, expected_ns: u64| {
            let expected = expected_ns / 1_000_000_000;
            assert!(told.abs_diff(expected) <= 1, "{told} against {expected}");
        };
        let now = clock.now_ns();
        close(clock.unix_s_at(now), system_unix_ns());
        // Half a second on (the reading given, not the clock): from the last reading.
        close(
            clock.unix_s_at(now + 500_000_000),
            system_unix_ns() + 500_000_000,
        );
        // Ten seconds on, past a second from the last reading: the wall clock as it is (the
        // reading given is not the wall's).
        close(clock.unix_s_at(now + 10_000_000_000), system_unix_ns());
    }

    #[test]
    fn a_manual_clock_tells_its_steps() {
        let clock = ManualClock::at_unix_s(1_000);
        assert_eq!(clock.unix_s_at(clock.now_ns()), 1_000);
        clock.advance_ms(2_500);
        assert_eq!(clock.unix_s_at(clock.now_ns()), 1_002);
        assert_eq!(clock.unix_s(), 1_002);
    }
}
