//! Window arithmetic: the traffic of the seconds a snapshot covers, summed, as rates, and the
//! delivery quantiles of the window's latency counts.

use crate::kafka::{LatencyCounts, LATENCY_BUCKETS};
use crate::refusal::Reason;

use super::history::{Ring, Second};
use super::snapshot::SecondRates;

pub(super) fn per_sec(n: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        n as f64 / secs
    }
}

/// Sums of seconds: the window's traffic.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Sums {
    pub admitted_requests: u64,
    pub admitted_records: u64,
    pub refused_requests: u64,
    pub refused_records: u64,
    pub refused_by_reason: [u64; Reason::ALL.len()],
}

impl Sums {
    pub fn of<'a>(seconds: impl Iterator<Item = &'a Second>) -> Self {
        let mut sums = Self::default();
        for s in seconds {
            sums.admitted_requests += u64::from(s.admitted_requests);
            sums.admitted_records += u64::from(s.admitted_records);
            sums.refused_requests += u64::from(s.refused_requests);
            sums.refused_records += u64::from(s.refused_records);
            for (sum, n) in sums.refused_by_reason.iter_mut().zip(s.refused_by_reason) {
                *sum += u64::from(n);
            }
        }
        sums
    }

    /// A tenant's seconds from `from` on (nothing while the window is empty).
    pub fn of_ring(ring: &Ring, from: u64, window: u64) -> Self {
        if window == 0 {
            Self::default()
        } else {
            Self::of(ring.since(from))
        }
    }
}

impl From<Sums> for Second {
    fn from(s: Sums) -> Self {
        let c = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Second {
            admitted_requests: c(s.admitted_requests),
            admitted_records: c(s.admitted_records),
            refused_requests: c(s.refused_requests),
            refused_records: c(s.refused_records),
            refused_by_reason: s
                .refused_by_reason
                .map(|n| u16::try_from(n).unwrap_or(u16::MAX)),
        }
    }
}

/// Every second of `(now - span, now]`, quiet ones included (0), oldest first.
pub(super) fn history_rates(ring: Option<&Ring>, now: u64, span: u64) -> Vec<SecondRates> {
    (now + 1 - span..=now)
        .map(|second| {
            let s = ring
                .and_then(|r| r.seconds.iter().find(|(at, _)| *at == second))
                .map(|(_, s)| *s)
                .unwrap_or_default();
            SecondRates {
                admitted_records: f64::from(s.admitted_records),
                refused_requests: f64::from(s.refused_requests),
            }
        })
        .collect()
}

/// The latency below which a `q` share of the observations lie (bucket upper bounds).
pub(super) fn quantile(counts: &[u64; LATENCY_BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in counts.iter().enumerate() {
        seen += n;
        if seen >= rank {
            // The last bucket has no upper bound: report its lower one.
            let i = i.min(LATENCY_BUCKETS - 2);
            return Some(LatencyCounts::bound(i) * 1000.0);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_bucket_bounds() {
        let mut counts = [0u64; LATENCY_BUCKETS];
        assert_eq!(quantile(&counts, 0.5), None);
        counts[1] = 98; // ≤ 1 ms
        counts[5] = 2; // ≤ 16 ms
        assert_eq!(quantile(&counts, 0.5), Some(1.0));
        assert_eq!(quantile(&counts, 0.99), Some(16.0));
    }
}
