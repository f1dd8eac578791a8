//! Stored answers of a single replica, in memory, within named bounds: `ttl_s` from when each
//! was stored, at most `max_entries` answers and `max_bytes` bytes (each answer counted with
//! its bookkeeping, [`ENTRY_OVERHEAD`]). When a new answer would not fit, the oldest are
//! evicted first, and counted; a flood of unique keys therefore costs at most `max_bytes`.
//!
//! Time is the budgets' clock, so tests step it instead of sleeping. The answers live in a
//! ring in the order they were stored: the oldest is the first to expire and the first to be
//! evicted, so both are a pop from the front. A hash index maps each key to its place in the
//! ring; its slots are small (key and place), so the tombstones a churning table collects —
//! every put evicts one — cost little even when they make it grow.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::{Fingerprint, KeyDigest, StoredAnswer};
use crate::budget::Clock;

/// What an entry costs besides its answer's bytes: its ring slot (112 bytes, in a ring at
/// most twice as long as its peak), its index slot (40 bytes, in a table that tombstones can
/// leave at a quarter full) and its answer's allocation header. Measured
/// (tests/idempotency_memory.rs): RSS stays within the bytes counted this way.
pub const ENTRY_OVERHEAD: u64 = 448;

/// The bounds (from `[idempotency]`).
#[derive(Debug, Clone, Copy)]
pub struct MemoryBounds {
    pub ttl_ns: u64,
    pub max_entries: u64,
    pub max_bytes: u64,
}

#[derive(Debug)]
struct Answered {
    fingerprint: Fingerprint,
    answer: StoredAnswer,
}

/// One place in the ring. A replaced key leaves its place empty (`answered` None), still
/// counted until it is popped.
#[derive(Debug)]
struct Slot {
    key: KeyDigest,
    stored_ns: u64,
    cost: u64,
    answered: Option<Answered>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Key → sequence number of its slot.
    index: HashMap<KeyDigest, u64>,
    /// Oldest first; `ring[i]` has sequence number `first + i`.
    ring: VecDeque<Slot>,
    first: u64,
    /// Every slot's cost, empty ones included.
    bytes: u64,
}

impl Inner {
    fn slot(&self, seq: u64) -> Option<&Slot> {
        self.ring
            .get(usize::try_from(seq.checked_sub(self.first)?).ok()?)
    }

    fn slot_mut(&mut self, seq: u64) -> Option<&mut Slot> {
        let i = usize::try_from(seq.checked_sub(self.first)?).ok()?;
        self.ring.get_mut(i)
    }

    /// Pops the oldest slot; true when it held an answer.
    fn pop(&mut self) -> Option<bool> {
        let slot = self.ring.pop_front()?;
        self.first += 1;
        self.bytes -= slot.cost;
        let held = slot.answered.is_some();
        if held {
            self.index.remove(&slot.key);
        }
        Some(held)
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
        let seq = *inner.index.get(key)?;
        let answered = inner.slot(seq)?.answered.as_ref()?;
        Some((answered.fingerprint, answered.answer.clone()))
    }

    /// Keeps `answer` for `key`, evicting the oldest answers until it fits. Returns false
    /// (keeping nothing) for an answer larger than the whole store.
    pub fn put(&self, key: KeyDigest, fingerprint: Fingerprint, answer: StoredAnswer) -> bool {
        let cost = ENTRY_OVERHEAD + answer.encoded().len() as u64;
        if cost > self.bounds.max_bytes {
            self.counts.too_large.fetch_add(1, Relaxed);
            return false;
        }
        let now = self.clock.now_ns();
        let mut inner = self.lock();
        self.expire(&mut inner, now);
        let seq = inner.first + inner.ring.len() as u64;
        if let Some(old) = inner.index.insert(key, seq) {
            // Its slot stays (and stays counted) until popped; its answer goes now.
            if let Some(slot) = inner.slot_mut(old) {
                slot.answered = None;
            }
        }
        inner.ring.push_back(Slot {
            key,
            stored_ns: now,
            cost,
            answered: Some(Answered {
                fingerprint,
                answer,
            }),
        });
        inner.bytes += cost;
        // The new answer is the youngest, so the oldest go first; it is never evicted itself
        // (alone, it fits: its cost is within max_bytes, and max_entries is at least 1).
        while inner.index.len() as u64 > self.bounds.max_entries
            || inner.bytes > self.bounds.max_bytes
        {
            match inner.pop() {
                Some(true) => {
                    self.counts.evictions.fetch_add(1, Relaxed);
                }
                Some(false) => {}
                None => break,
            }
        }
        true
    }

    /// Drops every answer stored `ttl` ago or earlier (they are at the front).
    fn expire(&self, inner: &mut Inner, now: u64) {
        while inner
            .ring
            .front()
            .is_some_and(|s| now.saturating_sub(s.stored_ns) >= self.bounds.ttl_ns)
        {
            if inner.pop() == Some(true) {
                self.counts.expirations.fetch_add(1, Relaxed);
            }
        }
    }

    /// (answers, bytes) held now.
    pub fn held(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.index.len() as u64, inner.bytes)
    }

    pub fn bounds(&self) -> MemoryBounds {
        self.bounds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ManualClock;

    fn key(i: u32) -> KeyDigest {
        let mut k = [0u8; 32];
        k[..4].copy_from_slice(&i.to_be_bytes());
        KeyDigest(k)
    }

    fn answer(body_len: usize) -> StoredAnswer {
        // status 200, no headers, then the body.
        let mut v = vec![0u8, 200, 0];
        v.extend(std::iter::repeat_n(b'x', body_len));
        StoredAnswer::decode(bytes::Bytes::from(v)).expect("answer")
    }

    fn store(ttl_ms: u64, max_entries: u64, max_bytes: u64) -> (Arc<ManualClock>, MemoryStore) {
        let clock = Arc::new(ManualClock::new());
        let bounds = MemoryBounds {
            ttl_ns: ttl_ms * 1_000_000,
            max_entries,
            max_bytes,
        };
        (clock.clone(), MemoryStore::new(bounds, clock))
    }

    const FP: Fingerprint = Fingerprint([7; 32]);

    #[test]
    fn an_answer_expires_ttl_after_it_was_stored() {
        let (clock, s) = store(1_000, 100, 1 << 20);
        assert!(s.put(key(1), FP, answer(10)));
        clock.advance_ms(500);
        assert!(s.put(key(2), FP, answer(10)));
        clock.advance_ms(499);
        assert!(s.get(&key(1)).is_some(), "999 ms after it was stored");
        clock.advance_ms(1);
        assert!(s.get(&key(1)).is_none(), "1 s after");
        assert!(s.get(&key(2)).is_some(), "the younger one stays");
        clock.advance_ms(500);
        assert!(s.get(&key(2)).is_none());
        assert_eq!(s.counts.expirations.load(Relaxed), 2);
        assert_eq!(s.held(), (0, 0));
        assert_eq!(
            s.counts.evictions.load(Relaxed),
            0,
            "expiry is not eviction"
        );
    }

    #[test]
    fn the_oldest_is_evicted_first_when_the_entries_are_full() {
        let (clock, s) = store(60_000, 3, 1 << 20);
        for i in 1..=3 {
            assert!(s.put(key(i), FP, answer(1)));
            clock.advance_ms(1);
        }
        // Reading an entry does not make it younger: eviction follows the order of storing.
        assert!(s.get(&key(1)).is_some());
        assert!(s.put(key(4), FP, answer(1)));
        assert!(s.get(&key(1)).is_none(), "the oldest went");
        assert!(s.put(key(5), FP, answer(1)));
        assert!(s.get(&key(2)).is_none(), "then the next oldest");
        for i in 3..=5 {
            assert!(s.get(&key(i)).is_some(), "{i}");
        }
        assert_eq!(s.counts.evictions.load(Relaxed), 2);
        assert_eq!(s.held().0, 3);
    }

    #[test]
    fn the_bytes_never_exceed_max_bytes() {
        let max = 10 * (ENTRY_OVERHEAD + 100);
        let (_clock, s) = store(60_000, 1_000_000, max);
        // 1,000 unique keys of 100-byte answers into a store that holds 10 of them.
        for i in 0..1_000 {
            assert!(s.put(key(i), FP, answer(97)));
            let (_, bytes) = s.held();
            assert!(bytes <= max, "{bytes} > {max}");
        }
        assert_eq!(s.held(), (10, max));
        assert_eq!(s.counts.evictions.load(Relaxed), 990);
        // The 10 kept are the 10 newest.
        assert!((990..1_000).all(|i| s.get(&key(i)).is_some()));
        assert!(s.get(&key(989)).is_none());
        // A large answer evicts as many old ones as it needs.
        assert!(s.put(
            key(5_000),
            FP,
            answer((3 * (ENTRY_OVERHEAD + 100) - ENTRY_OVERHEAD - 3) as usize)
        ));
        assert_eq!(s.held().0, 8);
        assert!(s.get(&key(992)).is_none() && s.get(&key(993)).is_some());
        // One larger than the whole store is not kept, and evicts nothing.
        assert!(!s.put(key(6_000), FP, answer(max as usize)));
        assert_eq!(s.held().0, 8);
        assert_eq!(s.counts.too_large.load(Relaxed), 1);
    }

    #[test]
    fn storing_a_key_again_replaces_it_and_keeps_the_count_right() {
        let (_clock, s) = store(60_000, 2, 1 << 20);
        assert!(s.put(key(1), FP, answer(1)));
        for _ in 0..500 {
            assert!(s.put(key(2), Fingerprint([9; 32]), answer(1)));
        }
        assert_eq!(s.held().0, 2);
        assert!(s.get(&key(1)).is_some(), "replacing key 2 evicted nothing");
        assert_eq!(s.get(&key(2)).map(|(f, _)| f), Some(Fingerprint([9; 32])));
        // The replaced places are counted until they are popped, so they stay within the
        // byte bound and evict the oldest like any answer would.
        let (_, bytes) = s.held();
        assert!(bytes <= 1 << 20);
    }
}
