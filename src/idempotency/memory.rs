//! Stored answers of a single replica, in memory, within named bounds: `ttl_s` from when each
//! was stored, at most `max_entries` answers and `max_bytes` bytes (each answer counted with
//! its bookkeeping, [`ENTRY_OVERHEAD`], and each tenant holding answers with
//! [`TENANT_OVERHEAD`]).
//!
//! **Shared fairly.** When a new answer does not fit, the answers evicted are the oldest of
//! the tenant holding the most (bytes when the bytes are over, answers when the count is): a
//! tenant storing many answers evicts its own first, and another tenant's answers only while
//! that tenant holds more than it does. So each of N tenants with answers keeps at least a
//! 1/N share of `max_bytes` and of `max_entries` (what it stores of them), whatever the others
//! send — and what they send is admitted, so charged to their budgets: the pipeline stores
//! no answer of a request that wrote nothing.
//!
//! Time is the budgets' clock, so tests step it instead of sleeping. Each tenant's answers live
//! in a ring in the order they were stored: its oldest is the first to expire and the first to
//! be evicted, so both are a pop from a ring's front. Three ordered sets find, in O(log T) for
//! T tenants, the tenant holding the most bytes, the most answers, and the oldest answer.
//! A hash index maps each key to its tenant and its place in that ring.

mod holding;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::{Fingerprint, KeyDigest, StoredAnswer, TenantKey};
use crate::budget::Clock;
use crate::identity::TenantId;
use holding::{Answered, Holding, Slot};

/// What an entry costs besides its answer's bytes: its ring slot (112 bytes, in a ring at
/// most twice as long as its peak), its index slot (48 bytes, in a table that tombstones can
/// leave at a quarter full) and its answer's allocation header. Measured
/// (tests/idempotency_memory.rs): RSS stays within the bytes counted this way.
pub const ENTRY_OVERHEAD: u64 = 448;

/// What a tenant holding answers costs besides them: its ring, its name's slot and its place
/// in the three orders (counted in its bytes while it holds any).
pub const TENANT_OVERHEAD: u64 = 512;

/// The bounds (from `[idempotency]`).
#[derive(Debug, Clone, Copy)]
pub struct MemoryBounds {
    pub ttl_ns: u64,
    pub max_entries: u64,
    pub max_bytes: u64,
}

/// A tenant's number in the store (reused once it holds nothing).
type Tid = u32;

#[derive(Debug, Default)]
struct Inner {
    /// Key → its tenant and the sequence number of its slot in that tenant's ring.
    index: HashMap<KeyDigest, (Tid, u64)>,
    numbers: HashMap<TenantId, Tid>,
    /// By number; `None` for a free number.
    holdings: Vec<Option<Holding>>,
    free: Vec<Tid>,
    /// (bytes, tenant), (answers, tenant), (oldest slot's time, tenant) of every holding.
    by_bytes: BTreeSet<(u64, Tid)>,
    by_answers: BTreeSet<(u64, Tid)>,
    by_oldest: BTreeSet<(u64, Tid)>,
    /// Every holding's bytes, empty slots and tenant overheads included.
    bytes: u64,
}

impl Inner {
    fn holding(&self, tid: Tid) -> Option<&Holding> {
        self.holdings.get(tid as usize)?.as_ref()
    }

    /// Takes a holding out of the orders (before it changes); put back by [`Inner::place`].
    fn unplace(&mut self, tid: Tid) {
        if let Some(h) = self.holding(tid) {
            let keys = (
                (h.bytes, tid),
                (h.answers, tid),
                h.oldest_ns().map(|t| (t, tid)),
            );
            self.by_bytes.remove(&keys.0);
            self.by_answers.remove(&keys.1);
            if let Some(oldest) = keys.2 {
                self.by_oldest.remove(&oldest);
            }
        }
    }

    fn place(&mut self, tid: Tid) {
        if let Some(h) = self.holding(tid) {
            let keys = (
                (h.bytes, tid),
                (h.answers, tid),
                h.oldest_ns().map(|t| (t, tid)),
            );
            self.by_bytes.insert(keys.0);
            self.by_answers.insert(keys.1);
            if let Some(oldest) = keys.2 {
                self.by_oldest.insert(oldest);
            }
        }
    }

    /// The tenant's number, making it a holding (counted) if it has none.
    fn number(&mut self, tenant: &TenantId) -> Tid {
        if let Some(&tid) = self.numbers.get(tenant) {
            return tid;
        }
        let holding = Holding::new(tenant.clone(), TENANT_OVERHEAD);
        let tid = match self.free.pop() {
            Some(tid) => {
                self.holdings[tid as usize] = Some(holding);
                tid
            }
            None => {
                self.holdings.push(Some(holding));
                Tid::try_from(self.holdings.len() - 1).unwrap_or(Tid::MAX)
            }
        };
        self.numbers.insert(tenant.clone(), tid);
        self.bytes += TENANT_OVERHEAD;
        self.place(tid);
        tid
    }

    /// Pops the oldest slot of tenant `tid`; true when it held an answer. A holding left
    /// empty is given up.
    fn pop(&mut self, tid: Tid) -> Option<bool> {
        self.unplace(tid);
        let holding = self.holdings.get_mut(tid as usize)?.as_mut()?;
        let slot = holding.pop();
        let empty = holding.is_empty();
        let Some(slot) = slot else {
            self.place(tid);
            return None;
        };
        self.bytes -= slot.cost;
        let held = slot.answered.is_some();
        if held {
            self.index.remove(&slot.key);
        }
        if empty {
            if let Some(h) = self.holdings[tid as usize].take() {
                self.numbers.remove(&h.tenant);
                self.bytes -= h.bytes;
            }
            self.free.push(tid);
        } else {
            self.place(tid);
        }
        Some(held)
    }

    /// The tenant to evict from: the one holding the most answers (`by_count`) or bytes,
    /// never the slot just stored (`newest`: its tenant is passed over while that is all it
    /// holds).
    fn victim(&self, by_count: bool, newest: Tid) -> Option<Tid> {
        let order = if by_count {
            &self.by_answers
        } else {
            &self.by_bytes
        };
        order
            .iter()
            .rev()
            .map(|&(_, tid)| tid)
            .find(|&tid| tid != newest || self.holding(tid).is_some_and(|h| h.len() > 1))
    }
}

/// Counts the store keeps (read by the metrics).
#[derive(Debug, Default)]
pub struct MemoryCounts {
    pub evictions: AtomicU64,
    pub expirations: AtomicU64,
    /// Answers larger than the whole store (not kept).
    pub too_large: AtomicU64,
}

#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    bounds: MemoryBounds,
    clock: Arc<dyn Clock>,
    pub counts: MemoryCounts,
}

impl MemoryStore {
    pub fn new(bounds: MemoryBounds, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            bounds,
            clock,
            counts: MemoryCounts::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The answer stored for `key`, unless it expired.
    pub fn get(&self, key: &KeyDigest) -> Option<(Fingerprint, StoredAnswer)> {
        let now = self.clock.now_ns();
        let mut inner = self.lock();
        self.expire(&mut inner, now);
        let &(tid, seq) = inner.index.get(key)?;
        let answered = inner.holding(tid)?.slot(seq)?.answered.as_ref()?;
        Some((answered.fingerprint, answered.answer.clone()))
    }

    /// Keeps `answer` for `key`, evicting until it fits (see the module's comment for whose).
    /// Returns false (keeping nothing) for an answer larger than the whole store.
    pub fn put(&self, key: &TenantKey, fingerprint: Fingerprint, answer: StoredAnswer) -> bool {
        let cost = ENTRY_OVERHEAD + answer.encoded().len() as u64;
        if cost + TENANT_OVERHEAD > self.bounds.max_bytes {
            self.counts.too_large.fetch_add(1, Relaxed);
            return false;
        }
        let now = self.clock.now_ns();
        let mut inner = self.lock();
        self.expire(&mut inner, now);
        let tid = inner.number(&key.tenant);
        if let Some(&(old_tid, old)) = inner.index.get(&key.digest) {
            // Its slot stays (and stays counted) until popped; its answer goes now.
            inner.unplace(old_tid);
            if let Some(h) = inner
                .holdings
                .get_mut(old_tid as usize)
                .and_then(Option::as_mut)
            {
                h.forget(old);
            }
            inner.place(old_tid);
        }
        inner.unplace(tid);
        let seq = inner.holdings[tid as usize].as_mut().map_or(0, |h| {
            h.push(Slot {
                key: key.digest,
                stored_ns: now,
                cost,
                answered: Some(Answered {
                    fingerprint,
                    answer,
                }),
            })
        });
        inner.place(tid);
        inner.index.insert(key.digest, (tid, seq));
        inner.bytes += cost;
        self.evict(&mut inner, tid);
        true
    }

    /// Pops the oldest slots of the largest holders until the bounds hold again. The new
    /// answer (the youngest of tenant `newest`) is never evicted itself: alone it fits.
    fn evict(&self, inner: &mut Inner, newest: Tid) {
        loop {
            let by_count = inner.index.len() as u64 > self.bounds.max_entries;
            if !by_count && inner.bytes <= self.bounds.max_bytes {
                return;
            }
            let Some(victim) = inner.victim(by_count, newest) else {
                return;
            };
            match inner.pop(victim) {
                Some(true) => {
                    self.counts.evictions.fetch_add(1, Relaxed);
                }
                Some(false) => {}
                None => return,
            }
        }
    }

    /// Drops every answer stored `ttl` ago or earlier (each tenant's are at its ring's front).
    fn expire(&self, inner: &mut Inner, now: u64) {
        while let Some(&(oldest, tid)) = inner.by_oldest.first() {
            if now.saturating_sub(oldest) < self.bounds.ttl_ns {
                return;
            }
            if inner.pop(tid) == Some(true) {
                self.counts.expirations.fetch_add(1, Relaxed);
            }
        }
    }

    /// (answers, bytes) held now.
    pub fn held(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.index.len() as u64, inner.bytes)
    }

    /// (answers, bytes) `tenant` holds now.
    pub fn held_by(&self, tenant: &TenantId) -> (u64, u64) {
        let inner = self.lock();
        inner
            .numbers
            .get(tenant)
            .and_then(|&tid| inner.holding(tid))
            .map_or((0, 0), |h| (h.answers, h.bytes))
    }

    pub fn bounds(&self) -> MemoryBounds {
        self.bounds
    }
}
