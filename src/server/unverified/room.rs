//! Making room on a full listener: which connection is closed for a newcomer — an address's
//! oldest unauthenticated one, a tenant's oldest idle (else busy) one, or the oldest
//! unauthenticated one of all — and the slots looked at meanwhile.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use std::time::Duration;

use super::{Held, Slot, NOT_SEATED, ROOM_QUIET};

/// The slots looked at while a count's lock is held, dropped only after it is released: the
/// last reference to a slot may be one of them, and a slot's drop takes the counts' locks.
#[derive(Default)]
pub(super) struct Looked(Vec<Arc<Slot>>);

impl Looked {
    pub(super) fn at(&mut self, weak: &Weak<Slot>) -> Option<&Slot> {
        let slot = weak.upgrade()?;
        self.0.push(slot);
        self.0.last().map(|s| &**s)
    }
}

/// Marks the oldest of `held`'s unverified connections in a slot (an address's, or every
/// one's) to close at once, but those of the newcomer's own address (`except`), if it is older
/// than `age`: that one, to be told ([`Slot::tell`]) once its heir is named; `None` if none is.
/// - Newcomers waiting for a slot are passed over: a newcomer that waited a second was the
///   oldest, and closed itself or another waiting one, freeing no slot (review 26 of #37:
///   every new client reset after a second while busy connections filled the listener).
/// - A young one had no while to authenticate: a client's pool of TLS connections,
///   mid-handshake, was closed by a flood's newcomers (review 27). Young counts from its seat
///   (review 28: one that waited seconds for its slot was closed after its handshake).
pub(super) fn close_oldest(
    held: &mut Held,
    age: std::time::Duration,
    looked: &mut Looked,
    except: Option<IpAddr>,
) -> Option<Arc<Slot>> {
    let least = age / ROOM_AGE_SPOKEN_FOR;
    // Verified, closing or gone: out of the order for good.
    let live = |s: &Slot| s.counted.load(Ordering::Acquire) && !s.evicted.load(Ordering::Acquire);
    let slot = take_first(held, looked, live, |slot| {
        // Its own, or a newcomer waiting too: closed, it would free no slot.
        let seated_after = slot.seated_after();
        let Some(waited) = seated_after.filter(|_| Some(slot.address) != except) else {
            return Step::Pass;
        };
        let opened_for = slot.opened.elapsed();
        if opened_for < least {
            // Every one after it opened later still.
            return Step::Stop;
        }
        // It waited for its slot: its while to authenticate counts from its seat.
        let seated_for = opened_for.saturating_sub(waited);
        if seated_for < age && !(seated_for >= least && slot.spoken_for()) {
            Step::Pass
        } else {
            Step::Take
        }
    })?;
    slot.evicted.store(true, Ordering::Release);
    slot.owner.evicted.fetch_add(1, Ordering::Relaxed);
    Some(slot)
}

/// What walking an order ([`take_first`]) does with a live slot.
enum Step {
    /// Leaves it in its place and looks at the next.
    Pass,
    /// Takes it out of the order: the walk's answer.
    Take,
    /// Ends the walk with none.
    Stop,
}

/// Walks `held`'s order from its oldest: a slot gone or not `live` leaves the order for good,
/// and the first `step` takes leaves it too and is returned.
fn take_first(
    held: &mut Held,
    looked: &mut Looked,
    live: impl Fn(&Slot) -> bool,
    mut step: impl FnMut(&Slot) -> Step,
) -> Option<Arc<Slot>> {
    let mut at = 0;
    while let Some(weak) = held.slots.get(at).cloned() {
        let Some(slot) = looked.at(&weak).filter(|s| live(s)) else {
            held.slots.remove(at);
            continue;
        };
        match step(slot) {
            Step::Pass => at += 1,
            Step::Stop => return None,
            Step::Take => {
                held.slots.remove(at);
                return weak.upgrade();
            }
        }
    }
    None
}

/// The part of [`super::ROOM_AGE`] after which a connection that has said nothing, or has had
/// its answers and is idle, had its while to authenticate: its client either never spoke or
/// spoke without a credential. Each slot then turns over four times a second, not once: with
/// twice as many clients as slots reconnecting as soon as closed (review 41-r7 of #37: 620
/// connections from 300 addresses on the admin listener's 256), a newcomer waited about
/// (clients − slots) / slots seconds for its turn, 1.4–1.6 s for a probe.
pub(super) const ROOM_AGE_SPOKEN_FOR: u32 = 4;

/// How many of `held`'s unverified connections hold a slot.
pub(super) fn seated(held: &Held, looked: &mut Looked) -> usize {
    let seated = |s: &Slot| {
        s.counted.load(Ordering::Acquire)
            && !s.evicted.load(Ordering::Acquire)
            && s.seated_after().is_some()
    };
    held.slots
        .iter()
        .filter(|w| looked.at(w).is_some_and(seated))
        .count()
}

/// Which of a tenant's connections may make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
    /// Only an idle one.
    Idle,
    /// An idle one, else the busy one its peer has sent nothing on for the longest, if that
    /// is [`ROOM_QUIET`] or more.
    Quiet,
    /// An idle one, else the busy one its peer has sent nothing on for the longest.
    Any,
}

/// Marks to close gracefully the oldest idle one of a tenant's connections, else (as `take`
/// allows) a busy one, which gets [`ROOM_GRACE`] to finish (review 23 of #37: told to close
/// after its answers, a stream's answer ran a minute while the newcomer waited; review 24: a
/// busy one never taken, four tenants' streams kept new connections out for minutes): that
/// one, to be told ([`Slot::tell`]) once its heir is named; `None` if none may be taken.
pub(super) fn close_bound(held: &mut Held, looked: &mut Looked, take: Take) -> Option<Arc<Slot>> {
    held.slots.retain(|w| {
        looked.at(w).is_some_and(|s| {
            !s.closing.load(Ordering::Acquire) && !s.operator.load(Ordering::Acquire)
        })
    });
    let idle = held
        .slots
        .iter()
        .position(|w| looked.at(w).is_some_and(Slot::idle));
    let busy = || {
        let now = std::time::Instant::now();
        let mut quiet = |w: &Weak<Slot>| looked.at(w).map_or(Duration::ZERO, |s| s.quiet_for(now));
        let (at, for_) = (0..held.slots.len())
            .map(|i| (i, quiet(&held.slots[i])))
            .max_by_key(|&(i, q)| (q, std::cmp::Reverse(i)))?;
        (take == Take::Any || (take == Take::Quiet && for_ >= ROOM_QUIET)).then_some(at)
    };
    let at = idle.or_else(busy)?;
    let slot = held.slots.remove(at)?.upgrade()?;
    slot.close_for_room();
    Some(slot)
}

/// Marks the oldest idle connection of `held` (anonymous clients, in the order they became
/// one) that is neither the operator's nor closing, and had its quarter of `age` since it
/// opened, to close gracefully: that one; `None` if none is. Those gone, closing or the
/// operator's leave the order; busy ones keep their place.
pub(super) fn close_idle_client(
    held: &mut Held,
    age: Duration,
    looked: &mut Looked,
) -> Option<Arc<Slot>> {
    let least = age / ROOM_AGE_SPOKEN_FOR;
    let live = |s: &Slot| !s.closing.load(Ordering::Acquire) && !s.operator.load(Ordering::Acquire);
    let slot = take_first(held, looked, live, |slot| {
        if slot.idle() && slot.opened.elapsed() >= least {
            Step::Take
        } else {
            Step::Pass
        }
    })?;
    slot.close_for_room();
    Some(slot)
}

/// What a connection is doing, as the choice of one to close for a newcomer reads it.
impl Slot {
    /// Marks it to close gracefully for a newcomer: its answers in flight get their grace.
    fn close_for_room(&self) {
        self.made_room.store(true, Ordering::Release);
        self.owner.evicted_bound.fetch_add(1, Ordering::Relaxed);
        self.closing.store(true, Ordering::Release);
    }

    /// How long after it opened it got its slot; `None` while it waits for one.
    fn seated_after(&self) -> Option<std::time::Duration> {
        let ns = self.seated_after_ns.load(Ordering::Acquire);
        (ns != NOT_SEATED).then(|| std::time::Duration::from_nanos(ns))
    }

    /// Whether it has said nothing yet, or had its answers and is idle: either way its
    /// client will not authenticate on it soon ([`ROOM_AGE_SPOKEN_FOR`]).
    fn spoken_for(&self) -> bool {
        let answered_and_idle = self
            .activity
            .get()
            .and_then(Weak::upgrade)
            .is_some_and(|a| {
                a.served.load(Ordering::Acquire) > 0 && a.in_flight.load(Ordering::Acquire) == 0
            });
        self.heard.load(Ordering::Acquire) == 0 || answered_and_idle
    }

    fn idle(&self) -> bool {
        self.activity
            .get()
            .and_then(Weak::upgrade)
            .is_none_or(|a| a.in_flight.load(Ordering::Acquire) == 0)
    }

    /// How long its peer has sent nothing at `now` (since it opened, before it is served).
    fn quiet_for(&self, now: std::time::Instant) -> std::time::Duration {
        self.activity.get().and_then(Weak::upgrade).map_or_else(
            || now.saturating_duration_since(self.opened),
            |a| a.quiet_for(now),
        )
    }
}

/// What a listener whose verified connections are counted by where they come from (the admin
/// listener's, `admin::a_client`) asks of a connection.
impl super::ConnectionTrust {
    /// Where it comes from, as connections are counted by (an IPv6 /64 is one source).
    pub fn source(&self) -> IpAddr {
        self.0.address
    }

    /// Whether a request verified it already ([`super::ConnectionTrust::verified_as`]).
    pub fn is_verified(&self) -> bool {
        !self.0.counted.load(Ordering::Acquire)
    }
}
