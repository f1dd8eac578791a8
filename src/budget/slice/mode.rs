//! The mode every bucket of a cluster member follows — leased slices, or a local share while
//! Redis is away — and the cell that switches them all at once.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How the buckets of a cluster member are fed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// From slices leased from the shared state.
    Leased,
    /// From a local share of the budget, 1/N of it (Redis is unreachable).
    Fallback(u32),
}

/// The mode every bucket of this replica follows, with an epoch that changes on every switch
/// so a bucket knows it must switch too. One word: epoch in the high half, the mode in the low
/// half (0 = leased, N = a share of 1/N).
#[derive(Debug)]
pub struct ModeCell {
    word: AtomicU64,
    /// When the mode last switched (clock nanoseconds): a share's time ends there, whenever
    /// each bucket notices.
    switched_at_ns: AtomicU64,
    /// How often the agent tries Redis again while on local shares: the wait a request larger
    /// than its share (but within the budget) is told, see [`super::take_fallback`].
    reprobe_ns: u64,
    /// This replica's place among the members at the last heartbeat (0 before any): which
    /// part of a budget's remainder its share takes ([`super::fallback_of`]).
    rank: AtomicU32,
}

/// The re-probe interval assumed when none is set.
const DEFAULT_REPROBE_NS: u64 = 1_000_000_000;

impl ModeCell {
    /// Starts as a share of 1/`members` until the agent has reached Redis.
    pub fn new(members: u32) -> Self {
        Self {
            word: AtomicU64::new(u64::from(members.max(1))),
            switched_at_ns: AtomicU64::new(0),
            reprobe_ns: DEFAULT_REPROBE_NS,
            rank: AtomicU32::new(0),
        }
    }

    /// This replica's place among the members, as the last heartbeat counted it.
    pub fn set_rank(&self, rank: u32) {
        self.rank.store(rank, Ordering::Release);
    }

    pub fn rank(&self) -> u32 {
        self.rank.load(Ordering::Acquire)
    }

    /// The agent tries Redis again every `every` while on local shares (its heartbeat).
    pub fn reprobing_every(mut self, every: std::time::Duration) -> Self {
        self.reprobe_ns = u64::try_from(every.as_nanos())
            .unwrap_or(DEFAULT_REPROBE_NS)
            .max(1);
        self
    }

    /// How often Redis is tried again while on local shares, in nanoseconds.
    pub fn reprobe_ns(&self) -> u64 {
        self.reprobe_ns
    }

    /// (epoch, mode) now.
    pub fn current(&self) -> (u32, Mode) {
        let word = self.word.load(Ordering::Acquire);
        // Truncation is the point: the halves are the epoch and the mode.
        let (epoch, mode) = ((word >> 32) as u32, word as u32);
        (
            epoch,
            if mode == 0 {
                Mode::Leased
            } else {
                Mode::Fallback(mode)
            },
        )
    }

    /// Switches every bucket to `mode` at `now_ns` (they follow at their next admission).
    pub fn set(&self, mode: Mode, now_ns: u64) {
        let code = match mode {
            Mode::Leased => 0,
            Mode::Fallback(n) => n.max(1),
        };
        let switched = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                let (epoch, old) = ((word >> 32) as u32, word as u32);
                (old != code).then(|| (u64::from(epoch.wrapping_add(1)) << 32) | u64::from(code))
            });
        if switched.is_ok() {
            self.switched_at_ns.store(now_ns, Ordering::Release);
        }
    }

    /// When the mode last switched (0: never).
    pub fn switched_at_ns(&self) -> u64 {
        self.switched_at_ns.load(Ordering::Acquire)
    }
}
