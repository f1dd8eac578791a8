//! What unauthenticated connections' heads hold: every byte a connection sends before one of
//! its requests authenticates is counted against the listener's `max_unauthenticated_bytes`.
//! Each connection's own buffers are bounded (`max_header_bytes`), but not all of them at
//! once: 4,096 connections from 32 addresses, each within its address's allowance, each
//! keeping a 64 KiB head unfinished, held 355 MiB as HTTP/1 and 0.8–1.0 GiB as HTTP/2 header
//! blocks never ended (review 35b of #37). Past the budget, a connection that holds more than
//! an equal share of it (among the unauthenticated ones) is closed at once when it sends more;
//! small heads are never closed for it.

use std::sync::atomic::{AtomicU64, Ordering};

use super::ConnectionTrust;

#[derive(Debug)]
pub(super) struct Heads {
    total: AtomicU64,
    max: AtomicU64,
    /// Connections closed for holding more than an equal share of a spent budget.
    pub(super) closed: AtomicU64,
}

impl Heads {
    pub(super) fn new(max: u64) -> Self {
        Self {
            total: AtomicU64::new(0),
            max: AtomicU64::new(max.max(1)),
            closed: AtomicU64::new(0),
        }
    }

    pub(super) fn set_max(&self, max: u64) {
        self.max.store(max.max(1), Ordering::Relaxed);
    }

    /// `n` more bytes from a connection that has heard `own` so far (counted in it), among
    /// `unverified` unauthenticated connections: whether it must close now.
    pub(super) fn heard(&self, own: &AtomicU64, n: u64, unverified: usize) -> bool {
        // The listener's count first: what a connection gives back is never more than it took.
        let total = self.total.fetch_add(n, Ordering::AcqRel) + n;
        let held = own.fetch_add(n, Ordering::AcqRel) + n;
        let max = self.max.load(Ordering::Relaxed);
        total > max && held > max / unverified.max(1) as u64
    }

    /// The connection authenticated or closed: what it heard is given back.
    pub(super) fn release(&self, own: &AtomicU64) {
        let n = own.swap(0, Ordering::AcqRel);
        self.total.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes counted now.
    #[cfg(test)]
    pub(super) fn total(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }
}

impl ConnectionTrust {
    /// `n` bytes read from it: counted while it has not authenticated, and it is closed at
    /// once when it holds more than its share of a spent budget (this module).
    pub(in crate::server) fn heard(&self, n: usize) {
        let slot = &self.0;
        if !slot.counted.load(Ordering::Acquire) {
            return;
        }
        let unverified = slot.owner.unverified_now.load(Ordering::Acquire);
        let close = slot.owner.heads.heard(&slot.heard, n as u64, unverified);
        if close && !slot.evicted.swap(true, Ordering::AcqRel) {
            slot.owner.heads.closed.fetch_add(1, Ordering::Relaxed);
            slot.told.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_budget_only_a_connection_over_an_equal_share_closes() {
        let heads = Heads::new(100);
        let (big, small) = (AtomicU64::new(0), AtomicU64::new(0));
        assert!(!heads.heard(&big, 90, 2));
        assert!(!heads.heard(&small, 5, 2), "within the budget");
        assert!(
            !heads.heard(&small, 10, 2),
            "over it, but within its share of 50"
        );
        assert!(heads.heard(&big, 1, 2), "over it and over its share");
        heads.release(&big);
        assert_eq!(heads.total(), 15);
        heads.release(&small);
        assert_eq!(heads.total(), 0);
    }
}
