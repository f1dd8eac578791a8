//! The arithmetic of one token bucket, as GCRA (generic cell rate algorithm).
//!
//! A bucket's whole state is one number, its TAT ("theoretical arrival time"): the instant at
//! which it will be full again. Time is counted in *ticks* of `1 / per_sec` seconds, so one
//! token is exactly one tick and no rounding ever admits more than the rate:
//! `tokens(now) = burst - max(0, tat - now)`, and taking `n` tokens moves `tat` to
//! `max(tat, now) + n`, allowed only while `tat - now <= burst`.
//! The functions are pure, so the mutex-guarded tenant buckets and the CAS-updated global
//! buckets share them.

use serde::{Deserialize, Serialize};

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The largest rate accepted: keeps tick counts far from `u64::MAX` for decades of uptime.
pub const MAX_RATE_PER_SEC: u64 = 10_000_000_000;
/// The largest burst accepted.
pub const MAX_BURST: u64 = 1 << 50;

/// A refill rate and the most a bucket can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateSpec {
    /// Tokens added per second, continuously.
    pub per_sec: u64,
    /// Tokens the bucket holds when full; the largest single request it can ever admit.
    pub burst: u64,
}

/// What a bucket looks like now, for headers, metrics and the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketView {
    pub spec: RateSpec,
    /// Tokens available now.
    pub available: u64,
    /// Nanoseconds until the bucket is full again.
    pub full_in_ns: u64,
}

impl RateSpec {
    /// Ticks elapsed at `now_ns` (floor: a token exists only once its tick has passed).
    pub fn ticks_at(&self, now_ns: u64) -> u64 {
        let ticks = u128::from(now_ns) * u128::from(self.per_sec) / NANOS_PER_SEC;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// The first nanosecond at which `ticks` have elapsed.
    fn ns_at_tick(&self, ticks: u64) -> u64 {
        let per_sec = u128::from(self.per_sec.max(1));
        let ns = (u128::from(ticks) * NANOS_PER_SEC).div_ceil(per_sec);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// A TAT for a bucket that is full at `now_ns`.
    pub fn full_tat(&self, now_ns: u64) -> u64 {
        self.ticks_at(now_ns)
    }

    /// Takes `n` tokens: the new TAT, or how many nanoseconds until `n` tokens are there.
    /// `n` above the burst can never be taken; callers check that first (it is a 413, not
    /// a 429) and get `u64::MAX` here if they do not.
    pub fn try_take(&self, tat: u64, now_ns: u64, n: u64) -> Result<u64, u64> {
        if n > self.burst {
            return Err(u64::MAX);
        }
        let now = self.ticks_at(now_ns);
        let new_tat = tat.max(now).saturating_add(n);
        let deadline = now.saturating_add(self.burst);
        if new_tat <= deadline {
            Ok(new_tat)
        } else {
            // Enough tokens exist once `now' + burst >= new_tat`, i.e. at tick new_tat - burst.
            let ready_tick = new_tat - self.burst;
            Err(self.ns_at_tick(ready_tick).saturating_sub(now_ns).max(1))
        }
    }

    /// Tokens available at `now_ns`.
    pub fn available(&self, tat: u64, now_ns: u64) -> u64 {
        let now = self.ticks_at(now_ns);
        self.burst - tat.saturating_sub(now).min(self.burst)
    }

    /// The bucket as seen at `now_ns`.
    pub fn view(&self, tat: u64, now_ns: u64) -> BucketView {
        let now = self.ticks_at(now_ns);
        BucketView {
            spec: *self,
            available: self.available(tat, now_ns),
            full_in_ns: if tat > now {
                self.ns_at_tick(tat).saturating_sub(now_ns)
            } else {
                0
            },
        }
    }

    /// The TAT under `new` that keeps the tokens available now (clamped to the new burst),
    /// so changing a budget never refills a bucket.
    pub fn retarget(&self, tat: u64, now_ns: u64, new: &RateSpec) -> u64 {
        let level = self.available(tat, now_ns).min(new.burst);
        new.ticks_at(now_ns) + (new.burst - level)
    }

    /// A short description of what is wrong with this spec, if anything.
    pub fn problem(&self) -> Option<&'static str> {
        if self.per_sec == 0 {
            Some("rate must be at least 1 per second")
        } else if self.per_sec > MAX_RATE_PER_SEC {
            Some("rate must be at most 10000000000 per second")
        } else if self.burst == 0 {
            Some("burst must be at least 1")
        } else if self.burst > MAX_BURST {
            Some("burst is too large")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn spec(per_sec: u64, burst: u64) -> RateSpec {
        RateSpec { per_sec, burst }
    }

    #[test]
    fn a_full_bucket_admits_exactly_its_burst_at_once() {
        let s = spec(3, 3);
        let mut tat = s.full_tat(0);
        for _ in 0..3 {
            tat = s.try_take(tat, 0, 1).expect("within burst");
        }
        assert!(s.try_take(tat, 0, 1).is_err());
    }

    #[test]
    fn wait_is_the_time_until_enough_tokens_exist() {
        // 10/s: one token per 100 ms. Empty the bucket, then ask for 3.
        let s = spec(10, 10);
        let tat = s.try_take(s.full_tat(0), 0, 10).expect("burst");
        assert_eq!(s.try_take(tat, 0, 3), Err(300 * MS));
        // 50 ms later, 250 ms remain; at exactly 300 ms it succeeds.
        assert_eq!(s.try_take(tat, 50 * MS, 3), Err(250 * MS));
        assert!(s.try_take(tat, 300 * MS - 1, 3).is_err());
        assert!(s.try_take(tat, 300 * MS, 3).is_ok());
    }

    #[test]
    fn refill_never_exceeds_burst() {
        let s = spec(1000, 5);
        let tat = s.full_tat(0);
        assert_eq!(s.available(tat, 10_000 * MS), 5);
    }

    #[test]
    fn over_burst_is_never_admissible() {
        let s = spec(1000, 5);
        assert_eq!(s.try_take(s.full_tat(0), 0, 6), Err(u64::MAX));
    }

    #[test]
    fn admitted_over_an_interval_is_at_most_burst_plus_rate_times_time() {
        // Take one token whenever possible for 10 s at a 7/s rate with burst 4.
        let s = spec(7, 4);
        let mut tat = s.full_tat(0);
        let mut admitted = 0;
        let mut now = 0;
        while now <= 10_000 * MS {
            if let Ok(t) = s.try_take(tat, now, 1) {
                tat = t;
                admitted += 1;
            } else {
                now += MS;
            }
        }
        assert_eq!(admitted, 4 + 7 * 10);
    }

    #[test]
    fn retarget_keeps_the_level_and_clamps_to_the_new_burst() {
        let old = spec(10, 10);
        let tat = old.try_take(old.full_tat(0), 0, 4).expect("burst"); // 6 left
        let new = spec(100, 50);
        let t2 = old.retarget(tat, 0, &new);
        assert_eq!(new.available(t2, 0), 6);
        let small = spec(1, 2);
        let t3 = old.retarget(tat, 0, &small);
        assert_eq!(small.available(t3, 0), 2);
    }

    #[test]
    fn view_reports_time_until_full() {
        let s = spec(10, 10);
        let tat = s.try_take(s.full_tat(0), 0, 5).expect("burst");
        let v = s.view(tat, 0);
        assert_eq!(v.available, 5);
        assert_eq!(v.full_in_ns, 500 * MS);
    }
}
