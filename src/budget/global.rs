//! The global broker-protection budget: records and bytes summed over every tenant.
//!
//! Both TATs live in one 128-bit word (records in the high half, bytes in the low half), so
//! checking and charging both dimensions is a single compare-and-swap: exact, and lock-free
//! on x86_64 (`cmpxchg16b`; portable-atomic falls back to a lock elsewhere).
//!
//! The word and the spec it is counted in form one *generation*, swapped whole when an operator
//! changes the budget. The change first closes the old generation's word (swapping in a
//! sentinel, which also reads its final TATs), so no admission can charge a generation that is
//! being replaced, and no admission ever reads TATs in one spec's ticks against another spec:
//! a change is atomic with respect to every concurrent admission.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use portable_atomic::AtomicU128;

use super::slice::{
    fallback_entry, fallback_of, take_fallback, FallbackLevel, Heard, Mode, ModeCell, Slice,
};
use super::{
    retarget, take_both, until_reprobe, view_of, BucketView, BudgetSpec, PerDimension, Short,
    Shortfall, Tats,
};
use crate::record::Charge;

/// A word no live generation holds: TATs never reach `u64::MAX` in both halves.
const CLOSED: u128 = u128::MAX;

/// Where the global buckets' tokens come from (see `TenantBuckets` for the same three).
#[derive(Debug, Clone)]
enum Source {
    Own,
    Leased {
        epoch: u32,
        slice: Arc<Slice>,
    },
    Fallback {
        epoch: u32,
        n: u32,
        /// This replica's place among the `n` members: which share of the budget is its own.
        rank: u32,
        /// How often Redis is tried again (a request over the share's burst waits that long).
        reprobe_ns: u64,
    },
}

impl Source {
    fn epoch(&self) -> Option<u32> {
        match self {
            Source::Own => None,
            Source::Leased { epoch, .. } | Source::Fallback { epoch, .. } => Some(*epoch),
        }
    }
}

#[derive(Debug)]
struct Generation {
    spec: BudgetSpec,
    source: Source,
    /// TATs under the effective spec (unused while leased).
    tats: AtomicU128,
}

impl Generation {
    fn effective(&self) -> BudgetSpec {
        effective(self.spec, &self.source)
    }

    /// The TATs after taking `charge` from `tats` under the local buckets (a single
    /// instance's, or a share; see `slice::take_fallback`).
    fn take_local(&self, tats: Tats, now_ns: u64, charge: Charge) -> Result<Tats, Shortfall> {
        let spec = self.effective();
        match self.source {
            Source::Fallback { reprobe_ns, .. } => {
                take_fallback(&spec, tats, now_ns, charge, reprobe_ns)
            }
            _ => take_both(&spec, tats, now_ns, charge),
        }
    }
}

fn effective(spec: BudgetSpec, source: &Source) -> BudgetSpec {
    match source {
        Source::Fallback { n, rank, .. } => fallback_of(spec, *n, *rank),
        _ => spec,
    }
}

#[derive(Debug)]
pub struct GlobalBudget {
    current: ArcSwap<Generation>,
    /// Serialises budget changes (never taken by admissions).
    /// One switch or budget change at a time; it also guards the local share as the last
    /// outage left it, and what the last leased spell heard of the cluster (cluster mode).
    changing: Mutex<(Option<FallbackLevel>, Heard)>,
    /// Whether tenants are shown these buckets (their RateLimit fields).
    visible: AtomicBool,
    /// Shadow mode: what the buckets would refuse is counted, not refused, and not charged.
    shadow: AtomicBool,
    /// The calendar quotas on all tenants together (`[global] quotas`), set with the budget.
    pub quotas: crate::quota::global::GlobalQuotas,
}

fn pack(tats: Tats) -> u128 {
    (u128::from(tats.records) << 64) | u128::from(tats.bytes)
}

fn unpack(word: u128) -> Tats {
    // Truncation is the point: the halves are the two TATs.
    Tats {
        records: (word >> 64) as u64,
        bytes: word as u64,
    }
}

impl GlobalBudget {
    pub fn new(spec: BudgetSpec) -> Self {
        Self {
            current: ArcSwap::from_pointee(Generation {
                spec,
                source: Source::Own,
                tats: AtomicU128::new(0),
            }),
            changing: Mutex::new((None, Heard::default())),
            visible: AtomicBool::new(true),
            shadow: AtomicBool::new(false),
            quotas: crate::quota::global::GlobalQuotas::default(),
        }
    }

    /// Whether the global budget only counts what it would refuse (`[global] mode`).
    pub fn is_shadow(&self) -> bool {
        self.shadow.load(Ordering::Relaxed)
    }

    pub fn set_shadow(&self, shadow: bool) {
        self.shadow.store(shadow, Ordering::Relaxed);
    }

    /// Whether tenants are shown the global buckets in their RateLimit fields.
    pub fn visible_to_tenants(&self) -> bool {
        self.visible.load(Ordering::Relaxed)
    }

    pub fn set_visible_to_tenants(&self, visible: bool) {
        self.visible.store(visible, Ordering::Relaxed);
    }

    pub fn spec(&self) -> BudgetSpec {
        self.current.load().spec
    }

    /// The slice the global buckets spend from, in leased mode.
    pub fn slice(&self) -> Option<Arc<Slice>> {
        match &self.current.load().source {
            Source::Leased { slice, .. } => Some(slice.clone()),
            _ => None,
        }
    }

    /// The live generation and its TATs, consistent with each other.
    fn snapshot(&self) -> (arc_swap::Guard<Arc<Generation>>, Tats) {
        loop {
            let generation = self.current.load();
            let word = generation.tats.load(Ordering::Acquire);
            if word != CLOSED {
                return (generation, unpack(word));
            }
            std::hint::spin_loop();
        }
    }

    /// Would `charge` be admitted now? Charges nothing.
    pub fn check(&self, now_ns: u64, charge: Charge) -> Result<(), Short> {
        let (generation, tats) = self.snapshot();
        match &generation.source {
            Source::Leased { slice, .. } => match slice.missing(&generation.spec, charge) {
                None => Ok(()),
                Some(m) => Err(Short::Lease(m)),
            },
            _ => generation
                .take_local(tats, now_ns, charge)
                .map(|_| ())
                .map_err(Short::Wait),
        }
    }

    /// Would `charge` fit, counting what the cluster is estimated to have? Charges nothing.
    pub fn estimate(&self, now_ns: u64, charge: Charge) -> Result<(), Shortfall> {
        let (generation, tats) = self.snapshot();
        match &generation.source {
            Source::Leased { slice, .. } => slice.estimate(&generation.spec, charge, now_ns),
            _ => generation.take_local(tats, now_ns, charge).map(|_| ()),
        }
    }

    /// Charges both dimensions, or neither.
    pub fn take(&self, now_ns: u64, charge: Charge) -> Result<(), Short> {
        'generation: loop {
            let generation = self.current.load();
            if let Source::Leased { slice, .. } = &generation.source {
                return slice.take(&generation.spec, charge).map_err(Short::Lease);
            }
            let mut current = generation.tats.load(Ordering::Acquire);
            loop {
                if current == CLOSED {
                    std::hint::spin_loop();
                    continue 'generation;
                }
                let taken = generation
                    .take_local(unpack(current), now_ns, charge)
                    .map_err(Short::Wait)?;
                match generation.tats.compare_exchange_weak(
                    current,
                    pack(taken),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Ok(()),
                    Err(actual) => current = actual,
                }
            }
        }
    }

    /// Follows the cluster's mode if it changed (one load when it did not).
    pub fn align(&self, sharing: &ModeCell, now_ns: u64) {
        let (epoch, mode) = sharing.current();
        if self.current.load().source.epoch() == Some(epoch) {
            return;
        }
        let mut changing = self
            .changing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (carried, heard) = &mut *changing;
        let old = self.current.load_full();
        if old.source.epoch() == Some(epoch) {
            return; // another admission switched it meanwhile
        }
        if let Source::Leased { slice, .. } = &old.source {
            *heard = slice.heard();
        }
        let left = unpack(old.tats.swap(CLOSED, Ordering::AcqRel));
        let source = match mode {
            Mode::Leased => Source::Leased {
                epoch,
                slice: Arc::new(Slice::hearing(*heard)),
            },
            Mode::Fallback(n) => Source::Fallback {
                epoch,
                n,
                rank: sharing.rank(),
                reprobe_ns: sharing.reprobe_ns(),
            },
        };
        let new = effective(old.spec, &source);
        let from = old.effective();
        // As a tenant's buckets do (`TenantBuckets::align`): a share carries on from the last
        // outage plus the slice given up; only the very first one, at start-up, is full.
        let tats = match (&old.source, mode) {
            (Source::Fallback { .. }, Mode::Fallback(_)) => {
                pack(retarget(&from, &new, left, now_ns))
            }
            (Source::Leased { slice, .. }, Mode::Fallback(_)) => pack(fallback_entry(
                &new,
                carried.as_ref(),
                slice.drain(),
                now_ns,
            )),
            (Source::Fallback { .. }, Mode::Leased) => {
                let ended = sharing.switched_at_ns().clamp(1, now_ns.max(1));
                *carried = Some(FallbackLevel::left(left, from, ended));
                0
            }
            _ => 0, // full
        };
        self.current.store(Arc::new(Generation {
            spec: old.spec,
            source,
            tats: AtomicU128::new(tats),
        }));
    }

    /// Replaces the budget, keeping each bucket's current level (clamped to the new burst).
    pub fn set_spec(&self, new: BudgetSpec, now_ns: u64) {
        let _one_change_at_a_time = self
            .changing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.current.load_full();
        let left = unpack(old.tats.swap(CLOSED, Ordering::AcqRel));
        let from = old.effective();
        let to = effective(new, &old.source);
        self.current.store(Arc::new(Generation {
            spec: new,
            source: old.source.clone(),
            tats: AtomicU128::new(pack(retarget(&from, &to, left, now_ns))),
        }));
    }

    /// Records and bytes buckets as they are now.
    pub fn view(&self, now_ns: u64) -> PerDimension<Option<BucketView>> {
        let (generation, tats) = self.snapshot();
        let own = |spec: &BudgetSpec| view_of(spec, tats, now_ns);
        match &generation.source {
            Source::Leased { slice, .. } => slice.view(&generation.spec, now_ns),
            Source::Fallback { reprobe_ns, .. } => {
                until_reprobe(own(&generation.effective()), *reprobe_ns)
            }
            Source::Own => own(&generation.spec),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Dimension, RateSpec};

    fn budget(records: u64, bytes: u64) -> GlobalBudget {
        GlobalBudget::new(BudgetSpec {
            records: Some(RateSpec {
                per_sec: records,
                burst: records,
            }),
            bytes: Some(RateSpec {
                per_sec: bytes,
                burst: bytes,
            }),
        })
    }

    #[test]
    fn a_refusal_in_one_dimension_charges_the_other_nothing() {
        let g = budget(10, 100);
        let Err(Short::Wait(err)) = g.take(0, Charge::new(1, 101)) else {
            panic!("too many bytes");
        };
        assert_eq!(err.dimension, Dimension::Bytes);
        let records = g.view(0).records;
        assert_eq!(records.map(|v| v.available), Some(10));
    }

    #[test]
    fn both_dimensions_are_charged_together() {
        let g = budget(10, 100);
        g.take(0, Charge::new(4, 40)).expect("fits");
        let PerDimension {
            records: r,
            bytes: b,
        } = g.view(0);
        assert_eq!(r.map(|v| v.available), Some(6));
        assert_eq!(b.map(|v| v.available), Some(60));
    }

    #[test]
    fn lowering_the_budget_keeps_the_level_instead_of_refilling() {
        let g = budget(10, 100);
        g.take(0, Charge::new(8, 0)).expect("fits"); // 2 records left
        g.set_spec(
            BudgetSpec {
                records: Some(RateSpec {
                    per_sec: 5,
                    burst: 5,
                }),
                bytes: None,
            },
            0,
        );
        let PerDimension {
            records: r,
            bytes: b,
        } = g.view(0);
        assert_eq!(r.map(|v| v.available), Some(2));
        assert!(b.is_none());
    }

    #[test]
    fn a_global_share_carries_across_stalls_instead_of_starting_full() {
        use crate::budget::{Mode, ModeCell};
        const S: u64 = 1_000_000_000;
        let g = budget(100, 1_000_000);
        let sharing = ModeCell::new(2);
        sharing.set(Mode::Leased, 0);
        g.align(&sharing, 0);
        g.slice().expect("leased").credit(Charge::new(5, 500), 1);
        let available = |now| g.view(now).records.map_or(0, |v| v.available);
        let mut now = S;
        sharing.set(Mode::Fallback(2), now);
        g.align(&sharing, now);
        assert_eq!(available(now), 5, "what the slice held, not burst / 2");
        g.take(now, Charge::new(5, 0)).expect("fits");
        sharing.set(Mode::Leased, now);
        g.align(&sharing, now);
        now += 10 * S;
        sharing.set(Mode::Fallback(2), now);
        g.align(&sharing, now);
        assert_eq!(
            available(now),
            0,
            "ten seconds of leased mode refilled nothing"
        );
        now += S / 10;
        assert_eq!(available(now), 5, "the share's own rate, 50/s");
    }

    #[test]
    fn concurrent_takers_never_overdraw() {
        let g = std::sync::Arc::new(budget(1000, 1_000_000));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || {
                    (0..1000)
                        .filter(|_| g.take(0, Charge::new(1, 1)).is_ok())
                        .count()
                })
            })
            .collect();
        let admitted: usize = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
        assert_eq!(admitted, 1000);
    }

    /// Budget changes racing admissions: every refusal's wait stays within what the slowest
    /// spec could ask (a refusal computed from one spec's TATs in another spec's ticks would
    /// ask for centuries), and nothing is admitted beyond the larger burst.
    #[test]
    fn a_budget_change_is_atomic_with_respect_to_admissions() {
        let slow = BudgetSpec {
            records: Some(RateSpec {
                per_sec: 1,
                burst: 10,
            }),
            bytes: None,
        };
        let fast = BudgetSpec {
            records: Some(RateSpec {
                per_sec: 1_000_000_000,
                burst: 10,
            }),
            bytes: None,
        };
        let g = std::sync::Arc::new(GlobalBudget::new(slow));
        // An hour in: the fast spec's ticks are 3.6e12, the slow one's 3600.
        let now = 3_600_000_000_000u64;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let changer = {
            let (g, stop) = (g.clone(), stop.clone());
            std::thread::spawn(move || {
                for i in 0..20_000 {
                    g.set_spec(if i % 2 == 0 { fast } else { slow }, now);
                }
                stop.store(true, Ordering::Release);
            })
        };
        let mut worst_wait = 0u64;
        while !stop.load(Ordering::Acquire) {
            if let Err(Short::Wait(s)) = g.take(now, Charge::new(1, 0)) {
                worst_wait = worst_wait.max(s.wait_ns);
            }
        }
        changer.join().expect("changer");
        // The slow spec refills one record per second: no honest wait exceeds 1 s.
        assert!(worst_wait <= 1_000_000_000, "wait of {worst_wait} ns");
    }
}
