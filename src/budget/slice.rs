//! Cluster mode's local half: tokens a replica leased from the cluster-wide budget (kept in
//! Redis) and spends here without asking anyone, and the mode every bucket follows.
//!
//! A [`Slice`] holds records and bytes tokens in one 128-bit word, taken with one
//! compare-and-swap, so a request is charged in both dimensions or neither, as locally. It
//! also remembers what the cluster had left at the last lease answer, so the RateLimit fields
//! and Retry-After stay truthful between lease calls.
//!
//! [`ModeCell`] is the mode the cluster agent sets for every bucket: leased slices while Redis
//! answers, or a local share (rate / N, burst / N) while it does not. Buckets read it on each
//! admission (one atomic load) and switch themselves under their own lock, so a tenant created
//! or changed at any time follows the mode from its first request.

use std::sync::atomic::{AtomicU64, Ordering};

use portable_atomic::AtomicU128;

use super::{BucketView, BudgetSpec, Dimension, PerDimension, RateSpec, Shortfall, Tats};
use crate::record::Charge;

const NANOS_PER_SEC: u128 = 1_000_000_000;

fn pack(c: Charge) -> u128 {
    (u128::from(c.records) << 64) | u128::from(c.bytes)
}

fn unpack(word: u128) -> Charge {
    // Truncation is the point: the halves are the two counts.
    Charge::new((word >> 64) as u64, word as u64)
}

fn load(pair: &PerDimension<AtomicU64>) -> Charge {
    Charge::new(
        pair.records.load(Ordering::Relaxed),
        pair.bytes.load(Ordering::Relaxed),
    )
}

/// How long a lease Redis refused answers for the slice's requests without asking Redis again
/// (review 32 of #37: each request the global budget refused made its own lease call, 10,000
/// Redis commands a second from two connections): at most ten calls a second per slice and
/// replica while Redis is empty. A budget in shadow mode counts a would-be refusal as long.
pub const REFUSAL_MEMO: std::time::Duration = std::time::Duration::from_millis(100);

/// Tokens leased from the cluster and not spent yet.
#[derive(Debug, Default)]
pub struct Slice {
    /// The tokens held, packed into one word (records high, bytes low).
    held: AtomicU128,
    /// What the cluster-wide buckets had left at the last lease answer.
    cluster: PerDimension<AtomicU64>,
    /// When that answer came (local clock, ns); 0: no answer yet.
    cluster_at_ns: AtomicU64,
    /// When tokens were last granted (local clock, ns), for expiry.
    granted_at_ns: AtomicU64,
    /// Tokens spent since the slice was made, for the demand estimate.
    spent: PerDimension<AtomicU64>,
    /// How many tokens the agent keeps this slice topped up to (set from observed demand).
    target: PerDimension<AtomicU64>,
    /// The last lease Redis refused: when (local clock, ns; 0: none since the last grant),
    /// the wait it named, and whether for bytes ([`Slice::refused_lately`]).
    refused_at_ns: AtomicU64,
    refused_wait_ns: AtomicU64,
    refused_bytes: std::sync::atomic::AtomicBool,
}

/// What a slice last heard of the cluster's buckets (what they had left, and when: local ns; 0
/// never), carried from one leased spell to the next across an outage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heard {
    left: Charge,
    at_ns: u64,
}

/// The tokens a request needs beyond what a slice holds (0 in a dimension that has enough
/// or is not limited).
pub type Missing = Charge;

impl Slice {
    pub fn new() -> Self {
        Self::default()
    }

    /// A slice that starts knowing what `heard` says the cluster's buckets held: a replica's
    /// next lease after an outage tells Redis where they were, should Redis have forgotten
    /// them meanwhile (restarted empty: review 37b of #37).
    pub fn hearing(heard: Heard) -> Self {
        let slice = Self::default();
        if heard.at_ns > 0 {
            slice.note_cluster(heard.left, heard.at_ns);
        }
        slice
    }

    /// What this slice last heard of the cluster's buckets.
    pub fn heard(&self) -> Heard {
        Heard {
            left: load(&self.cluster),
            at_ns: self.cluster_at_ns.load(Ordering::Acquire),
        }
    }

    /// The tokens held now.
    pub fn held(&self) -> Charge {
        unpack(self.held.load(Ordering::Acquire))
    }

    /// The tokens spent since the slice was made.
    pub fn spent(&self) -> Charge {
        load(&self.spent)
    }

    /// The level the agent keeps this slice topped up to.
    pub fn target(&self) -> Charge {
        load(&self.target)
    }

    pub fn set_target(&self, target: Charge) {
        for (d, n) in target.iter() {
            self.target[d].store(*n, Ordering::Relaxed);
        }
    }

    /// Redis refused a lease at `now`, its tokens due in `wait`.
    pub fn note_refused(&self, now: u64, wait: std::time::Duration, dimension: super::Dimension) {
        let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.refused_wait_ns.store(wait, Ordering::Relaxed);
        self.refused_bytes
            .store(dimension == super::Dimension::Bytes, Ordering::Relaxed);
        self.refused_at_ns.store(now.max(1), Ordering::Release);
    }

    /// A lease refused within `memo` of `now` (and within its wait) and not granted since:
    /// what is left of its wait, and in which dimension. Requests of that while are refused
    /// alike, without asking Redis again.
    pub fn refused_lately(
        &self,
        now: u64,
        memo: std::time::Duration,
    ) -> Option<(std::time::Duration, super::Dimension)> {
        let at = self.refused_at_ns.load(Ordering::Acquire);
        let wait = self.refused_wait_ns.load(Ordering::Relaxed);
        // Never past the refusal's own wait: by then Redis may grant (a held request asks again).
        let memo = u64::try_from(memo.as_nanos()).unwrap_or(u64::MAX).min(wait);
        if at == 0 || now.saturating_sub(at) >= memo {
            return None;
        }
        let end = at.saturating_add(wait);
        let left = std::time::Duration::from_nanos(end.saturating_sub(now).max(1_000_000));
        let dimension = if self.refused_bytes.load(Ordering::Relaxed) {
            super::Dimension::Bytes
        } else {
            super::Dimension::Records
        };
        Some((left, dimension))
    }

    /// What `charge` lacks, if anything.
    pub fn missing(&self, spec: &BudgetSpec, charge: Charge) -> Option<Missing> {
        missing(spec, self.held(), charge)
    }

    /// Spends `charge` in both limited dimensions, or nothing.
    pub fn take(&self, spec: &BudgetSpec, charge: Charge) -> Result<(), Missing> {
        let mut current = self.held.load(Ordering::Acquire);
        loop {
            let held = unpack(current);
            if let Some(m) = missing(spec, held, charge) {
                return Err(m);
            }
            // `missing` said each limited dimension holds enough.
            let left = PerDimension::from_fn(|d| match spec[d] {
                Some(_) => held[d] - charge[d],
                None => held[d],
            });
            match self.held.compare_exchange_weak(
                current,
                pack(left),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    for (d, n) in charge.iter() {
                        self.spent[d].fetch_add(*n, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Adds granted tokens.
    pub fn credit(&self, granted: Charge, now_ns: u64) {
        let any = granted.records > 0 || granted.bytes > 0;
        if any {
            // Redis had tokens again: a refusal it gave before says nothing now.
            self.refused_at_ns.store(0, Ordering::Release);
        }
        let mut current = self.held.load(Ordering::Acquire);
        loop {
            let held = unpack(current);
            let next = pack(PerDimension::from_fn(|d| {
                held[d].saturating_add(granted[d])
            }));
            match self.held.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        if any {
            self.granted_at_ns.store(now_ns, Ordering::Release);
        }
    }

    /// Empties the slice and returns what it held (to give back to the cluster).
    pub fn drain(&self) -> Charge {
        unpack(self.held.swap(0, Ordering::AcqRel))
    }

    /// When tokens were last granted (local ns; 0: never).
    pub fn granted_at_ns(&self) -> u64 {
        self.granted_at_ns.load(Ordering::Acquire)
    }

    /// Remembers what the cluster-wide buckets had left, as a lease call answered.
    pub fn note_cluster(&self, left: Charge, now_ns: u64) {
        for (d, n) in left.iter() {
            self.cluster[d].store(*n, Ordering::Relaxed);
        }
        self.cluster_at_ns.store(now_ns.max(1), Ordering::Release);
    }

    /// The cluster-wide tokens available in one dimension, estimated from the last answer and
    /// the refill since (never above the burst). Before any answer, a full bucket.
    fn cluster_estimate(&self, spec: &RateSpec, dimension: Dimension, now_ns: u64) -> u64 {
        let at = self.cluster_at_ns.load(Ordering::Acquire);
        if at == 0 {
            return spec.burst;
        }
        let last = self.cluster[dimension].load(Ordering::Relaxed);
        let elapsed = u128::from(now_ns.saturating_sub(at));
        let refill = elapsed * u128::from(spec.per_sec) / NANOS_PER_SEC;
        let refill = u64::try_from(refill).unwrap_or(u64::MAX);
        last.saturating_add(refill).min(spec.burst)
    }

    /// What each limited bucket of the cluster is estimated to hold now (the burst before any
    /// answer): the level a bucket Redis has forgotten starts from.
    pub fn cluster_levels(&self, spec: &BudgetSpec, now_ns: u64) -> PerDimension<u64> {
        PerDimension::from_fn(|d| spec[d].map_or(0, |s| self.cluster_estimate(&s, d, now_ns)))
    }

    /// The bucket a tenant is shown: its slice plus the cluster's estimated level.
    fn view_one(
        &self,
        spec: &RateSpec,
        dimension: Dimension,
        held: u64,
        now_ns: u64,
    ) -> BucketView {
        let available = held
            .saturating_add(self.cluster_estimate(spec, dimension, now_ns))
            .min(spec.burst);
        let missing = u128::from(spec.burst - available);
        let full_in = (missing * NANOS_PER_SEC).div_ceil(u128::from(spec.per_sec.max(1)));
        BucketView {
            spec: *spec,
            available,
            full_in_ns: u64::try_from(full_in).unwrap_or(u64::MAX),
        }
    }

    pub fn view(&self, spec: &BudgetSpec, now_ns: u64) -> PerDimension<Option<BucketView>> {
        let held = self.held();
        PerDimension::from_fn(|d| spec[d].map(|s| self.view_one(&s, d, held[d], now_ns)))
    }

    /// Would `charge` fit in the slice plus what the cluster is estimated to have? Used where
    /// nothing is charged (while a body arrives), so an estimate is enough: the admission at
    /// the end asks the cluster.
    pub fn estimate(
        &self,
        spec: &BudgetSpec,
        charge: Charge,
        now_ns: u64,
    ) -> Result<(), Shortfall> {
        let held = self.held();
        for dimension in Dimension::ALL {
            let Some(s) = spec[dimension] else { continue };
            let have = held[dimension].saturating_add(self.cluster_estimate(&s, dimension, now_ns));
            let need = charge[dimension];
            if have < need {
                let wait = u128::from(need - have) * NANOS_PER_SEC / u128::from(s.per_sec.max(1));
                return Err(Shortfall {
                    dimension,
                    wait_ns: u64::try_from(wait).unwrap_or(u64::MAX).max(1),
                });
            }
        }
        Ok(())
    }
}

fn missing(spec: &BudgetSpec, held: Charge, charge: Charge) -> Option<Missing> {
    let m = PerDimension::from_fn(|d| match spec[d] {
        Some(_) => charge[d].saturating_sub(held[d]),
        None => 0,
    });
    (m.records > 0 || m.bytes > 0).then_some(m)
}

/// What a bucket remembers of its local share while it spends leased slices: the share's TATs
/// and spec when the last outage ended, and when it ended. The next outage starts from there —
/// with nothing refilled while slices were spent — so a cluster whose Redis flaps gets one
/// share's burst in all, not one per stall.
#[derive(Debug, Clone, Copy)]
pub struct FallbackLevel {
    tats: Tats,
    spec: BudgetSpec,
    left_at_ns: u64,
}

impl FallbackLevel {
    /// The share as it stood when leased mode came back at `now_ns`.
    pub fn left(tats: Tats, spec: BudgetSpec, now_ns: u64) -> Self {
        Self {
            tats,
            spec,
            left_at_ns: now_ns,
        }
    }
}

/// The TATs a local share (`share`) starts from at `now_ns` on leaving leased mode: the level
/// the last outage ended with (none refilled since), or nothing on a first outage, plus the
/// unspent tokens of the slice given up (`given`: the cluster granted them to this replica),
/// within the share's burst. Never a fresh full burst.
pub fn fallback_entry(
    share: &BudgetSpec,
    carried: Option<&FallbackLevel>,
    given: Charge,
    now_ns: u64,
) -> Tats {
    PerDimension::from_fn(|d| {
        let Some(new) = share[d] else { return 0 };
        let kept = match carried.map(|c| (c.spec[d], c.tats[d])) {
            Some((Some(old), tat)) => {
                let left_at = carried.map_or(now_ns, |c| c.left_at_ns);
                // Time in leased mode does not refill the share: move its TAT on by as much.
                let paused = old.ticks_at(now_ns).saturating_sub(old.ticks_at(left_at));
                old.available(tat.saturating_add(paused), now_ns)
                    .min(new.burst)
            }
            _ => 0,
        };
        let level = kept.saturating_add(given[d]).min(new.burst);
        new.ticks_at(now_ns) + (new.burst - level)
    })
}

/// Takes `charge` from a local share (`share`, TATs `tats`), or says how long to wait.
///
/// A request larger than the share's burst — admission has checked it fits the budget's own —
/// can never fit the share, but fits the shared budget once Redis answers again: it is told to
/// come back when Redis is next tried (`reprobe_ns`, the agent's heartbeat), a finite wait,
/// rather than refused as too large (it is not) or told "never" (`u64::MAX`, which would reach
/// `Retry-After`). It is not admitted either: exceeding the share's burst would break the
/// bound the shares keep while the replicas cannot see each other.
pub fn take_fallback(
    share: &BudgetSpec,
    tats: Tats,
    now_ns: u64,
    charge: Charge,
    reprobe_ns: u64,
) -> Result<Tats, Shortfall> {
    super::take_both(share, tats, now_ns, charge).map_err(|short| {
        // Over the share's burst, or short in a share that never refills (a budget smaller
        // than the members: review 37b of #37 saw such a share tell its clients to retry in
        // 1 ms, ~700 refusals a second each): only Redis's return can admit it.
        let not_here = |d: Dimension| {
            share[d]
                .is_some_and(|s| charge[d] > s.burst || (s.per_sec == 0 && d == short.dimension))
        };
        if Dimension::ALL.into_iter().any(not_here) {
            Shortfall {
                wait_ns: reprobe_ns.max(1),
                ..short
            }
        } else {
            short
        }
    })
}

/// `spec` divided among `n` members, for the one at `rank` (from 0): ⌊(rate + rank) / n⌋ and
/// ⌊(burst + rank) / n⌋, so the members' shares add up to the budget exactly (Hermite's
/// identity) whatever its size. A share may be 0: that member admits none of it while Redis is
/// away, and a request is told to retry when Redis is tried again ([`take_fallback`]). (Each
/// share at least 1 gave a tenant allowed 1 record a second 3 a second from three replicas:
/// review 35b of #37.)
pub fn fallback_of(spec: BudgetSpec, n: u32, rank: u32) -> BudgetSpec {
    let n = u64::from(n.max(1));
    let rank = u64::from(rank).min(n - 1);
    spec.map(|s| {
        s.map(|s| RateSpec {
            per_sec: s.per_sec.saturating_add(rank) / n,
            burst: s.burst.saturating_add(rank) / n,
        })
    })
}

mod mode;
pub use mode::{Mode, ModeCell};

#[cfg(test)]
mod tests;
