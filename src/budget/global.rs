//! The global broker-protection budget: records and bytes summed over every tenant.
//!
//! Both TATs live in one 128-bit word (records in the high half, bytes in the low half), so
//! checking and charging both dimensions is a single compare-and-swap: exact, and lock-free
//! on x86_64 (`cmpxchg16b`; portable-atomic falls back to a lock elsewhere).

use std::sync::atomic::Ordering;

use arc_swap::ArcSwap;
use portable_atomic::AtomicU128;

use super::{retarget_tat, take_both, BucketView, BudgetSpec, Shortfall};

#[derive(Debug)]
pub struct GlobalBudget {
    spec: ArcSwap<BudgetSpec>,
    tats: AtomicU128,
}

fn pack(records: u64, bytes: u64) -> u128 {
    (u128::from(records) << 64) | u128::from(bytes)
}

fn unpack(word: u128) -> (u64, u64) {
    // Truncation is the point: the halves are the two TATs.
    ((word >> 64) as u64, word as u64)
}

impl GlobalBudget {
    pub fn new(spec: BudgetSpec) -> Self {
        Self {
            spec: ArcSwap::from_pointee(spec),
            tats: AtomicU128::new(0),
        }
    }

    pub fn spec(&self) -> BudgetSpec {
        **self.spec.load()
    }

    /// Would `records`/`bytes` be admitted now? Charges nothing.
    pub fn check(&self, now_ns: u64, records: u64, bytes: u64) -> Result<(), Shortfall> {
        let spec = self.spec.load();
        let tats = unpack(self.tats.load(Ordering::Acquire));
        take_both(&spec, tats, now_ns, records, bytes).map(|_| ())
    }

    /// Charges both dimensions, or neither.
    pub fn take(&self, now_ns: u64, records: u64, bytes: u64) -> Result<(), Shortfall> {
        let spec = self.spec.load();
        let mut current = self.tats.load(Ordering::Acquire);
        loop {
            let (r, b) = take_both(&spec, unpack(current), now_ns, records, bytes)?;
            match self.tats.compare_exchange_weak(
                current,
                pack(r, b),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }

    /// Replaces the budget, keeping each bucket's current level (clamped to the new burst).
    pub fn set_spec(&self, new: BudgetSpec, now_ns: u64) {
        let old = self.spec.swap(std::sync::Arc::new(new));
        let _ = self
            .tats
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                let (r, b) = unpack(word);
                Some(pack(
                    retarget_tat(&old.records, &new.records, r, now_ns),
                    retarget_tat(&old.bytes, &new.bytes, b, now_ns),
                ))
            });
    }

    /// Records and bytes buckets as they are now.
    pub fn view(&self, now_ns: u64) -> (Option<BucketView>, Option<BucketView>) {
        let spec = self.spec.load();
        let (r, b) = unpack(self.tats.load(Ordering::Acquire));
        (
            spec.records.map(|s| s.view(r, now_ns)),
            spec.bytes.map(|s| s.view(b, now_ns)),
        )
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
        let err = g.take(0, 1, 101).expect_err("too many bytes");
        assert_eq!(err.dimension, Dimension::Bytes);
        let (records, _) = g.view(0);
        assert_eq!(records.map(|v| v.available), Some(10));
    }

    #[test]
    fn both_dimensions_are_charged_together() {
        let g = budget(10, 100);
        g.take(0, 4, 40).expect("fits");
        let (r, b) = g.view(0);
        assert_eq!(r.map(|v| v.available), Some(6));
        assert_eq!(b.map(|v| v.available), Some(60));
    }

    #[test]
    fn lowering_the_budget_keeps_the_level_instead_of_refilling() {
        let g = budget(10, 100);
        g.take(0, 8, 0).expect("fits"); // 2 records left
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
        let (r, b) = g.view(0);
        assert_eq!(r.map(|v| v.available), Some(2));
        assert!(b.is_none());
    }

    #[test]
    fn concurrent_takers_never_overdraw() {
        let g = std::sync::Arc::new(budget(1000, 1_000_000));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || (0..1000).filter(|_| g.take(0, 1, 1).is_ok()).count())
            })
            .collect();
        let admitted: usize = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
        assert_eq!(admitted, 1000);
    }
}
