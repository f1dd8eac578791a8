//! A connection accepted while the listener is full: it waits for a slot, asking
//! [`Unverified::make_room_for`] again while no room was made, beside the other newcomers
//! waiting (at most [`waiting_bound`] of them) rather than in the accept loop.
//!
//! The connection closed for a newcomer hands its slot to that newcomer when it ends
//! ([`Unverified::make_room_for`]), not to whichever has waited longest.
//!
//! Why beside, not in turn: a busy connection chosen to make room gets a second to finish
//! before it is cut, and a newcomer awaited in the accept loop held every one behind it for
//! that second (review 25 of #37: 80 silent addresses' waves against four tenants' busy
//! sessions moved about one newcomer a second, and new clients waited 2–21 s).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};

use super::unverified::{Room, Unverified, ROOM_GRACE};
use crate::descriptors::WAITING_NEWCOMERS;

/// How often a newcomer waiting for a slot of a full listener asks again for room.
const ROOM_ASK: Duration = Duration::from_millis(100);

/// How long a newcomer for which room was made waits for the slot handed to it before it asks
/// again. Twice the grace a busy one gets, so one cut a little late is not followed by another.
const ROOM_MADE_WAIT: Duration = ROOM_GRACE.saturating_mul(2);

/// Newcomers that may wait for a slot at once, each holding its accepted socket (a descriptor
/// the process keeps room for): an eighth of the listener, at least 4 and at most
/// [`WAITING_NEWCOMERS`]. Past it the accept loop waits, and the kernel's backlog holds the
/// rest, as before there was any room to make.
pub fn waiting_bound(listener: usize) -> usize {
    (listener / 8).clamp(4, WAITING_NEWCOMERS)
}

/// Waits for a slot of `permits` for a newcomer from `peer`: `None` when it is refused (its
/// address holds the most unverified connections) or the server stops first. A newcomer
/// waiting is never closed to make room (it holds no slot to give).
pub async fn slot_for(
    permits: Arc<Semaphore>,
    unverified: Option<&Unverified>,
    peer: IpAddr,
    mut stop: watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    let Some(unverified) = unverified else {
        tokio::select! {
            p = permits.acquire_owned() => return p.ok(),
            _ = stop.wait_for(|stop| *stop) => return None,
        }
    };
    let came = tokio::time::Instant::now();
    loop {
        // Room made: one connection is closing for this newcomer and hands its slot to it
        // when it ends, and asking again at once would close another.
        let (heir, handed) = oneshot::channel();
        let again = match unverified.make_room_for(peer, came.elapsed(), Some(heir)) {
            Room::Refused => return None,
            Room::Made => ROOM_MADE_WAIT,
            Room::Wait => ROOM_ASK,
        };
        tokio::select! {
            p = permits.clone().acquire_owned() => return p.ok(),
            // Not handed (it ended before it was told, or no room was made): its slot went
            // back to the semaphore, and the others go on.
            Ok(p) = handed => return Some(p),
            _ = stop.wait_for(|stop| *stop) => return None,
            () = tokio::time::sleep(again) => {}
        }
    }
}
