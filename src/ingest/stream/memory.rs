//! What one stream holds of the body budget, and what a queued report costs of it.

use std::sync::Mutex;

use super::FIXED;
use crate::inflight_bodies::{BodyHold, CutSignal};

/// What one stream holds of the body budget: the report window and its last report (fixed),
/// what has arrived and is not decoded yet with what its decoder holds (the pump's part), and
/// its queued reports. One hold, changed under one lock by the pump and the reports side.
#[derive(Debug)]
pub(super) struct Memory {
    state: Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    hold: BodyHold,
    decoding: u64,
    queued: u64,
}

impl Memory {
    /// The window reserved, or `None` when the budget cannot cover it; with the signal that
    /// the stream was cut for a newcomer. A stream is watched from its start, whatever it
    /// holds: many open streams that send nothing would otherwise keep the budget from every
    /// other tenant (review 33 of #37), as small stalled uploads would.
    pub(super) fn open(mut hold: BodyHold) -> Option<(Self, CutSignal)> {
        if !hold.grow(FIXED) {
            return None;
        }
        hold.watch_while_reading();
        hold.watch_now();
        let cut = hold
            .cut_signal()
            .unwrap_or_else(|| Box::pin(std::future::pending()));
        let memory = Self {
            state: Mutex::new(Held {
                hold,
                decoding: 0,
                queued: 0,
            }),
        };
        Some((memory, cut))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the decoder's part (and adds `queued` to the queue's); `false`, and nothing
    /// changed, when the budget cannot cover the new total.
    pub(super) fn set(&self, decoding: usize, queued: u64) -> bool {
        let mut held = self.lock();
        let total = FIXED + decoding as u64 + held.queued + queued;
        if !held.hold.resize(total) {
            return false;
        }
        held.decoding = decoding as u64;
        held.queued += queued;
        true
    }

    /// The decoder's part as last set (the decoded records being admitted included).
    pub(super) fn decoding(&self) -> u64 {
        self.lock().decoding
    }

    /// A queued report was taken off the queue.
    pub(super) fn unqueue(&self, bytes: u64) {
        let mut held = self.lock();
        held.queued = held.queued.saturating_sub(bytes);
        let total = FIXED + held.decoding + held.queued;
        held.hold.resize(total);
    }
}
