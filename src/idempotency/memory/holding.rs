//! One tenant's stored answers, in the order they were stored: a ring whose front is the
//! oldest (the first to expire and the first to be evicted), with what it holds counted.

use std::collections::VecDeque;

use crate::idempotency::{Fingerprint, KeyDigest, StoredAnswer};
use crate::identity::TenantId;

#[derive(Debug)]
pub(super) struct Answered {
    pub(super) fingerprint: Fingerprint,
    pub(super) answer: StoredAnswer,
}

/// One place in a ring. A replaced key leaves its place empty (`answered` None), still
/// counted until it is popped.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) key: KeyDigest,
    pub(super) stored_ns: u64,
    pub(super) cost: u64,
    pub(super) answered: Option<Answered>,
}

#[derive(Debug)]
pub(super) struct Holding {
    pub(super) tenant: TenantId,
    /// Oldest first; `ring[i]` has sequence number `first + i`.
    ring: VecDeque<Slot>,
    first: u64,
    /// Every slot's cost, empty ones included, and the tenant's own overhead.
    pub(super) bytes: u64,
    /// Slots holding an answer.
    pub(super) answers: u64,
}

impl Holding {
    pub(super) fn new(tenant: TenantId, overhead: u64) -> Self {
        Self {
            tenant,
            ring: VecDeque::new(),
            first: 0,
            bytes: overhead,
            answers: 0,
        }
    }

    pub(super) fn slot(&self, seq: u64) -> Option<&Slot> {
        self.ring
            .get(usize::try_from(seq.checked_sub(self.first)?).ok()?)
    }

    /// Appends a slot; its sequence number.
    pub(super) fn push(&mut self, slot: Slot) -> u64 {
        self.bytes += slot.cost;
        self.answers += u64::from(slot.answered.is_some());
        self.ring.push_back(slot);
        self.first + self.ring.len() as u64 - 1
    }

    /// Empties slot `seq` (its key was stored again): its place stays counted until popped.
    pub(super) fn forget(&mut self, seq: u64) {
        let Some(i) = seq
            .checked_sub(self.first)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        if let Some(slot) = self.ring.get_mut(i) {
            if slot.answered.take().is_some() {
                self.answers -= 1;
            }
        }
    }

    /// The oldest slot, taken out.
    pub(super) fn pop(&mut self) -> Option<Slot> {
        let slot = self.ring.pop_front()?;
        self.first += 1;
        self.bytes -= slot.cost;
        self.answers -= u64::from(slot.answered.is_some());
        Some(slot)
    }

    pub(super) fn oldest_ns(&self) -> Option<u64> {
        self.ring.front().map(|s| s.stored_ns)
    }

    pub(super) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}
