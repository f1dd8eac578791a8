//! One tenant's two buckets. The caller holds the tenant's mutex around check-then-commit,
//! which is what makes tenant + global admission atomic without a global lock.
//!
//! In cluster mode the buckets follow [`ModeCell`]: spent from a leased [`Slice`] while Redis
//! answers, or from a local share of the budget while it does not. The switch happens here,
//! under the same lock, at the first admission after the mode changed.

use std::sync::Arc;

use super::slice::{
    fallback_entry, fallback_of, take_fallback, FallbackLevel, Heard, Mode, ModeCell, Slice,
};
use super::{
    retarget, take_both, until_reprobe, view_of, BucketView, BudgetSpec, PerDimension, Short,
    Shortfall, Tats,
};
use crate::record::Charge;

#[derive(Debug, Clone)]
enum Source {
    /// A single instance: the whole budget, counted here.
    Own,
    /// Cluster mode, Redis answering: tokens leased from the shared state.
    Leased { epoch: u32, slice: Arc<Slice> },
    /// Cluster mode, Redis unreachable: a local share of 1/n of the budget.
    Fallback {
        epoch: u32,
        n: u32,
        /// This replica's place among the `n` members: which share of the budget is its own.
        rank: u32,
        /// How often Redis is tried again (a request over the share's burst waits that long).
        reprobe_ns: u64,
    },
}

#[derive(Debug, Clone)]
pub struct TenantBuckets {
    spec: BudgetSpec,
    /// Each bucket's TAT, in its own ticks, under the effective spec.
    tats: Tats,
    source: Source,
    /// The local share as the last outage left it (cluster mode).
    carried: Option<FallbackLevel>,
    /// What the last leased spell heard of the cluster's buckets (cluster mode).
    heard: Heard,
}

/// What a successful check would charge; commit it to charge the request.
#[derive(Debug, Clone, Copy)]
#[must_use = "a checked charge does nothing until committed"]
pub struct PendingCharge(Pending);

#[derive(Debug, Clone, Copy)]
enum Pending {
    Tats(Tats),
    Slice(Charge),
}

impl TenantBuckets {
    pub fn new(spec: BudgetSpec) -> Self {
        Self {
            spec,
            tats: Tats::default(),
            source: Source::Own,
            carried: None,
            heard: Heard::default(),
        }
    }

    pub fn spec(&self) -> BudgetSpec {
        self.spec
    }

    /// The spec the local TATs are counted in.
    fn effective(&self) -> BudgetSpec {
        match self.source {
            Source::Fallback { n, rank, .. } => fallback_of(self.spec, n, rank),
            _ => self.spec,
        }
    }

    /// The slice this tenant spends from, in leased mode.
    pub fn slice(&self) -> Option<&Arc<Slice>> {
        match &self.source {
            Source::Leased { slice, .. } => Some(slice),
            _ => None,
        }
    }

    /// Follows the cluster's mode if it changed since the last admission. Leaving leased mode,
    /// the local share starts from where the last outage left it plus the unspent tokens of
    /// the slice given up (taken out of it, so they are never given back to Redis too); at
    /// start-up, before Redis has ever answered, from a full share.
    pub fn align(&mut self, sharing: &ModeCell, now_ns: u64) {
        let (epoch, mode) = sharing.current();
        let current = match &self.source {
            Source::Own => None,
            Source::Leased { epoch, .. } | Source::Fallback { epoch, .. } => Some(*epoch),
        };
        if current == Some(epoch) {
            return;
        }
        let old_effective = self.effective();
        if let Source::Leased { slice, .. } = &self.source {
            // Carried to the next leased spell (whether an outage came between or not).
            self.heard = slice.heard();
        }
        let previous = std::mem::replace(
            &mut self.source,
            match mode {
                Mode::Leased => Source::Leased {
                    epoch,
                    slice: Arc::new(Slice::hearing(self.heard)),
                },
                Mode::Fallback(n) => Source::Fallback {
                    epoch,
                    n,
                    rank: sharing.rank(),
                    reprobe_ns: sharing.reprobe_ns(),
                },
            },
        );
        let new = self.effective();
        match (previous, mode) {
            (Source::Fallback { .. }, Mode::Fallback(_)) => {
                self.tats = retarget(&old_effective, &new, self.tats, now_ns);
            }
            (Source::Leased { slice, .. }, Mode::Fallback(_)) => {
                self.tats = fallback_entry(&new, self.carried.as_ref(), slice.drain(), now_ns);
            }
            // Start-up: members not counted yet, the share is the conservative one.
            (Source::Own, Mode::Fallback(_)) => self.tats = Tats::default(),
            (Source::Fallback { .. }, Mode::Leased) => {
                let ended = sharing.switched_at_ns().clamp(1, now_ns.max(1));
                self.carried = Some(FallbackLevel::left(self.tats, old_effective, ended));
            }
            (_, Mode::Leased) => {}
        }
    }

    /// The TATs after taking `charge` from the local buckets (a single instance's, or a share).
    fn take_local(&self, now_ns: u64, charge: Charge) -> Result<Tats, Shortfall> {
        self.take_local_from(self.tats, now_ns, charge)
    }

    /// [`TenantBuckets::take_local`] from the buckets at `tats`.
    fn take_local_from(&self, tats: Tats, now_ns: u64, charge: Charge) -> Result<Tats, Shortfall> {
        let spec = self.effective();
        match self.source {
            Source::Fallback { reprobe_ns, .. } => {
                take_fallback(&spec, tats, now_ns, charge, reprobe_ns)
            }
            _ => take_both(&spec, tats, now_ns, charge),
        }
    }

    pub fn check(&self, now_ns: u64, charge: Charge) -> Result<PendingCharge, Short> {
        match &self.source {
            Source::Leased { slice, .. } => match slice.missing(&self.spec, charge) {
                None => Ok(PendingCharge(Pending::Slice(charge))),
                Some(m) => Err(Short::Lease(m)),
            },
            _ => self
                .take_local(now_ns, charge)
                .map(|t| PendingCharge(Pending::Tats(t)))
                .map_err(Short::Wait),
        }
    }

    /// [`TenantBuckets::check`] once `others` (what other requests reserved) is taken: a
    /// refusal's wait is until `charge` is there after them, not until both fit at once (which
    /// a burst smaller than both never allows). What is returned charges `charge` alone.
    pub fn check_after(
        &self,
        now_ns: u64,
        charge: Charge,
        others: Charge,
    ) -> Result<PendingCharge, Short> {
        if others == Charge::default() {
            return self.check(now_ns, charge);
        }
        match &self.source {
            Source::Leased { slice, .. } => match slice.missing(&self.spec, charge.plus(others)) {
                None => Ok(PendingCharge(Pending::Slice(charge))),
                Some(m) => Err(Short::Lease(m)),
            },
            _ => {
                // What is reserved fitted when it was reserved; were the budget lowered
                // since, both are asked for at once.
                let (from, rest) = match self.take_local(now_ns, others) {
                    Ok(after) => (after, charge),
                    Err(_) => (self.tats, charge.plus(others)),
                };
                self.take_local_from(from, now_ns, rest)
                    .map_err(Short::Wait)?;
                self.check(now_ns, charge)
            }
        }
    }

    /// Would the request fit, counting what the cluster is estimated to have? Charges nothing.
    pub fn estimate(&self, now_ns: u64, charge: Charge) -> Result<(), Shortfall> {
        match &self.source {
            Source::Leased { slice, .. } => slice.estimate(&self.spec, charge, now_ns),
            _ => self.take_local(now_ns, charge).map(|_| ()),
        }
    }

    pub fn commit(&mut self, charge: PendingCharge) {
        match (charge.0, &self.source) {
            (Pending::Tats(t), _) => self.tats = t,
            // Only admissions take from a tenant's slice, under the tenant's lock, and the
            // agent only adds: what the check saw is still there.
            (Pending::Slice(c), Source::Leased { slice, .. }) => {
                let _ = slice.take(&self.spec, c);
            }
            (Pending::Slice(_), _) => {}
        }
    }

    /// Replaces the budget, keeping each bucket's current level (clamped to the new burst).
    /// In leased mode the shared state keeps the level (the lease script retargets it).
    pub fn set_spec(&mut self, new: BudgetSpec, now_ns: u64) {
        let old = self.effective();
        self.spec = new;
        let new = self.effective();
        self.tats = retarget(&old, &new, self.tats, now_ns);
    }

    pub fn view(&self, now_ns: u64) -> PerDimension<Option<BucketView>> {
        match &self.source {
            Source::Leased { slice, .. } => slice.view(&self.spec, now_ns),
            Source::Fallback { reprobe_ns, .. } => {
                until_reprobe(view_of(&self.effective(), self.tats, now_ns), *reprobe_ns)
            }
            Source::Own => view_of(&self.spec, self.tats, now_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::RateSpec;

    const S: u64 = 1_000_000_000;

    fn spec() -> BudgetSpec {
        BudgetSpec {
            records: Some(RateSpec {
                per_sec: 100,
                burst: 100,
            }),
            bytes: None,
        }
    }

    fn available(b: &TenantBuckets, now: u64) -> u64 {
        b.view(now).records.map_or(0, |v| v.available)
    }

    /// Takes everything the buckets hold now; how much that was.
    fn spend_all(b: &mut TenantBuckets, now: u64) -> u64 {
        let n = available(b, now);
        if n > 0 {
            let charge = b.check(now, Charge::new(n, 0)).expect("available");
            b.commit(charge);
        }
        n
    }

    #[test]
    fn a_share_starts_from_the_slice_given_up_and_stalls_do_not_refill_it() {
        let sharing = ModeCell::new(2);
        let mut b = TenantBuckets::new(spec());
        sharing.set(Mode::Leased, 0);
        b.align(&sharing, 0);
        let slice = b.slice().expect("leased").clone();
        slice.credit(Charge::new(10, 0), 1);
        // Redis stalls: the share (50/s, burst 50) starts from the slice's 10, not 50.
        let mut now = S;
        sharing.set(Mode::Fallback(2), now);
        b.align(&sharing, now);
        assert_eq!(available(&b, now), 10);
        assert_eq!(
            slice.held(),
            Charge::default(),
            "taken out of the slice: never given back too"
        );
        let mut admitted = spend_all(&mut b, now);
        let mut shared_for = 0;
        // Eight short stalls of 100 ms, two seconds of leased mode between each.
        for _ in 0..8 {
            now += S / 10;
            shared_for += S / 10;
            admitted += spend_all(&mut b, now);
            sharing.set(Mode::Leased, now);
            // The bucket notices a second later: the share's time still ended at the switch.
            now += S;
            b.align(&sharing, now);
            now += S;
            sharing.set(Mode::Fallback(2), now);
            b.align(&sharing, now);
            admitted += spend_all(&mut b, now);
        }
        // What the slice held, plus the share's rate over the time spent on it; a fresh share
        // per stall would have been 8 x 50 more.
        let bound = 10 + 50 * shared_for / S;
        assert!(admitted <= bound, "{admitted} > {bound}");
        assert!(
            admitted >= bound - 1,
            "the share's own rate is served: {admitted}"
        );
    }

    /// Within the budget's burst but over the share's: it fits once Redis answers again, so
    /// the wait is until Redis is tried again, never "forever" (`u64::MAX` reached
    /// `Retry-After` as 18446744074 s).
    #[test]
    fn a_request_over_the_share_but_within_the_budget_waits_for_the_next_probe() {
        let sharing = ModeCell::new(4).reprobing_every(std::time::Duration::from_millis(500));
        let mut b = TenantBuckets::new(spec());
        b.align(&sharing, 0);
        let short = b.check(0, Charge::new(60, 0)).expect_err("over the share");
        assert_eq!(
            short,
            Short::Wait(Shortfall {
                dimension: crate::budget::Dimension::Records,
                wait_ns: 500_000_000
            })
        );
        assert_eq!(
            b.estimate(0, Charge::new(60, 0)).map_err(|s| s.wait_ns),
            Err(500_000_000)
        );
        // Within the share: the share's own wait, as before.
        let all = b.check(0, Charge::new(25, 0)).expect("the share's burst");
        b.commit(all);
        assert_eq!(
            b.check(0, Charge::new(5, 0)).map(|_| ()),
            Err(Short::Wait(Shortfall {
                dimension: crate::budget::Dimension::Records,
                wait_ns: 200_000_000
            })),
            "5 records at 25/s"
        );
    }

    #[test]
    fn at_start_up_before_redis_answers_the_share_is_the_expected_one_and_full() {
        let sharing = ModeCell::new(4);
        let mut b = TenantBuckets::new(spec());
        b.align(&sharing, 0);
        assert_eq!(available(&b, 0), 25, "burst / expected_replicas");
    }
}
