//! What one stream holds of the body budget, and what a queued report costs of it.

use std::sync::Mutex;

use super::reports::Queued;
use super::{FIXED, REFUSAL_DETAIL_MAX};
use crate::inflight_bodies::BodyHold;
use crate::outcome::ApiError;

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
    /// The window reserved, or `None` when the budget cannot cover it.
    pub(super) fn open(mut hold: BodyHold) -> Option<Self> {
        hold.grow(FIXED).then(|| Self {
            state: Mutex::new(Held {
                hold,
                decoding: 0,
                queued: 0,
            }),
        })
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

/// What a queued entry costs: itself, the outcome slot of its record in the batch sent to Kafka
/// (kept until the record is reported), and the refusal it is the first to carry.
pub(super) fn cost<N>(fresh_refusal: Option<&ApiError>) -> u32 {
    let entry = std::mem::size_of::<Queued<N>>()
        + std::mem::size_of::<std::sync::OnceLock<crate::kafka::Outcome>>();
    let refusal = fresh_refusal.map_or(0, |e| {
        // The Arc's counts, the error, and the text it carries.
        2 * std::mem::size_of::<usize>() + std::mem::size_of::<ApiError>() + carried_text(e)
    });
    u32::try_from(entry + refusal).unwrap_or(u32::MAX)
}

/// Bytes of text an error carries on the heap (an upper bound).
fn carried_text(e: &ApiError) -> usize {
    match e {
        ApiError::RateLimited(_) | ApiError::ExceedsBurst(_) => 0,
        ApiError::UnknownPartition(s)
        | ApiError::UnknownTopic(s)
        | ApiError::KafkaUnavailable(s) => s.capacity(),
        other => other.detail().len(),
    }
}

/// The most `records` more queued entries can cost.
pub(super) fn cost_bound<N>(records: usize) -> usize {
    let one = std::mem::size_of::<Queued<N>>()
        + std::mem::size_of::<std::sync::OnceLock<crate::kafka::Outcome>>()
        + 2 * std::mem::size_of::<usize>()
        + std::mem::size_of::<ApiError>()
        + REFUSAL_DETAIL_MAX;
    records.saturating_mul(one)
}
