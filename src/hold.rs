//! Holding a request for its tokens instead of refusing it (`[wait]`, off by default).
//!
//! `Retry-After` is whole seconds. A tenant whose burst is below its per-second rate often has
//! its next tokens in milliseconds, and a client that honours `Retry-After: 1` then waits a
//! second for them: it gets about burst / rate of its budget. With `[wait] max_ms` set, a
//! request whose wait is at most that long is held that long and admitted instead (as Kong's
//! and Tyk's throttling do). Held requests are bounded three ways: in time (`max_ms`, on the
//! admission clock), in number (`max_requests` at once, `max_requests_per_tenant` of one
//! tenant), and by what they already hold — a held request keeps its body counted against the
//! body budget and its connection against `max_connections`, so holding takes no memory or
//! connection that is not already bounded. Who is held, and for how long, is decided by the
//! admission decision itself: this room only counts the seats.
//!
//! Layer: foundations. Imports nothing of floodgate's.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The seats for held requests, and what happened to the requests that took one.
#[derive(Debug, Default)]
pub struct WaitRoom {
    /// Longest a request is held (zero: never).
    pub max_wait: Duration,
    max_requests: usize,
    max_per_tenant: usize,
    /// Requests held now, all tenants.
    held: AtomicUsize,
    /// Requests held and then admitted, held and refused after all (their tokens went to
    /// others, or the wait grew past `max_wait`), and refused at once because every seat was
    /// taken (the tenant's or the room's).
    pub admitted: AtomicU64,
    pub refused: AtomicU64,
    pub full: AtomicU64,
}

/// The outcomes a held request can have, as the metrics label them.
pub const OUTCOMES: [&str; 3] = ["admitted", "refused", "full"];

/// One held request's seat; given back when dropped.
#[derive(Debug)]
pub struct Seat<'a> {
    room: &'a WaitRoom,
    tenant: &'a AtomicUsize,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        self.room.held.fetch_sub(1, Ordering::AcqRel);
        self.tenant.fetch_sub(1, Ordering::AcqRel);
    }
}

impl WaitRoom {
    /// A room holding requests at most `max_wait`, `max_requests` at once and
    /// `max_per_tenant` of one tenant.
    pub fn new(max_wait: Duration, max_requests: usize, max_per_tenant: usize) -> Self {
        Self {
            max_wait,
            max_requests,
            max_per_tenant,
            ..Self::default()
        }
    }

    pub fn enabled(&self) -> bool {
        !self.max_wait.is_zero() && self.max_requests > 0 && self.max_per_tenant > 0
    }

    /// Requests held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// A seat, if the room and the tenant (whose count of held requests is `tenant`) both have
    /// one free; none is counted as `full`.
    pub fn enter<'a>(&'a self, tenant: &'a AtomicUsize) -> Option<Seat<'a>> {
        let taken = |count: &AtomicUsize, max: usize| {
            count
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                })
                .is_ok()
        };
        if !self.enabled() || !taken(tenant, self.max_per_tenant) {
            self.full.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if !taken(&self.held, self.max_requests) {
            tenant.fetch_sub(1, Ordering::AcqRel);
            self.full.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(Seat { room: self, tenant })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seats_are_bounded_per_tenant_and_in_all_and_given_back() {
        let room = WaitRoom::new(Duration::from_millis(250), 3, 2);
        let (a, b) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let a1 = room.enter(&a).expect("a 1");
        let a2 = room.enter(&a).expect("a 2");
        assert!(room.enter(&a).is_none(), "the tenant's two are taken");
        let b1 = room.enter(&b).expect("b 1");
        assert!(room.enter(&b).is_none(), "the room's three are taken");
        assert_eq!(
            (room.held(), b.load(Ordering::Acquire)),
            (3, 1),
            "a refused seat takes nothing"
        );
        assert_eq!(room.full.load(Ordering::Relaxed), 2);
        drop((a1, b1));
        assert_eq!((room.held(), a.load(Ordering::Acquire)), (1, 1));
        let _b2 = room.enter(&b).expect("given back");
        drop(a2);
        assert_eq!(room.held(), 1);
    }

    #[test]
    fn a_room_without_a_wait_holds_nothing() {
        let room = WaitRoom::new(Duration::ZERO, 10, 10);
        assert!(!room.enabled());
        assert!(room.enter(&AtomicUsize::new(0)).is_none());
    }
}
