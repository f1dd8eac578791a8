//! Stored answers of a single replica, in memory, within named bounds: `ttl_s` from when each
//! was stored, at most `max_entries` answers and `max_bytes` bytes (each answer counted with
//! its bookkeeping, [`ENTRY_OVERHEAD`]). When a new answer would not fit, the oldest are
//! evicted first, and counted; a flood of unique keys therefore costs at most `max_bytes`.
//!
//! Time is the budgets' clock, so tests step it instead of sleeping. Entries are kept in the
//! order they were stored: the oldest is the first to expire and the first to be evicted, so
//! both are a pop from the front.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::{Fingerprint, KeyDigest, StoredAnswer};
use crate::budget::Clock;

/// What an entry costs besides its answer's bytes: its B-tree slot (key, fingerprint, answer,
/// sequence and cost: 120 bytes, in nodes at least 5/11 full), its place in the order queue
/// (48 bytes, in a queue at most twice as long as needed) and its answer's allocation header.
/// Measured (tests/idempotency_memory.rs): RSS stays within the bytes counted this way.
pub const ENTRY_OVERHEAD: u64 = 400;

/// The bounds (from `[idempotency]`).
#[derive(Debug, Clone, Copy)]
pub struct MemoryBounds {
    pub ttl_ns: u64,
    pub max_entries: u64,
    pub max_bytes: u64,
}

#[derive(Debug)]
struct Entry {
    fingerprint: Fingerprint,
    answer: StoredAnswer,
    /// Its place in `order` (an older place for the same key is stale).
    seq: u64,
    cost: u64,
}

/// An entry's place in the order of storing.
#[derive(Debug, Clone, Copy)]
struct Place {
    seq: u64,
    stored_ns: u64,
    key: KeyDigest,
}

#[derive(Debug, Default)]
struct Inner {
    /// A B-tree, not a hash map: its memory follows the entries held. A hash table under
    /// this churn (every put evicts one) fills with tombstones and doubles while holding no
    /// more entries — measured: RSS half again above the bound after 700,000 unique keys.
    entries: BTreeMap<KeyDigest, Entry>,
    /// Oldest first; places whose entry was replaced or removed are skipped.
    order: VecDeque<Place>,
    bytes: u64,
    next_seq: u64,
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
        inner
            .entries
            .get(key)
            .map(|e| (e.fingerprint, e.answer.clone()))
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
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let entry = Entry {
            fingerprint,
            answer,
            seq,
            cost,
        };
        if let Some(old) = inner.entries.insert(key, entry) {
            inner.bytes -= old.cost;
        }
        inner.order.push_back(Place {
            seq,
            stored_ns: now,
            key,
        });
        inner.bytes += cost;
        // The new entry is the youngest, so the oldest go first; it is never evicted itself
        // (alone, it fits: its cost is within max_bytes, and max_entries is at least 1).
        while inner.entries.len() as u64 > self.bounds.max_entries
            || inner.bytes > self.bounds.max_bytes
        {
            if !self.pop_oldest(&mut inner) {
                break;
            }
            self.counts.evictions.fetch_add(1, Relaxed);
        }
        // Places left by replaced keys are skipped when reached; if they ever outnumber the
        // live ones, the queue is rebuilt so it stays within twice the entries.
        if inner.order.len() > 2 * inner.entries.len() + 64 {
            let Inner { entries, order, .. } = &mut *inner;
            order.retain(|p| entries.get(&p.key).is_some_and(|e| e.seq == p.seq));
        }
        true
    }

    /// Removes the entry of `place`, unless a later put replaced it (then the place is stale
    /// and the newer entry stays). One lookup on the usual path.
    fn remove_at(inner: &mut Inner, place: &Place) -> bool {
        match inner.entries.remove(&place.key) {
            Some(e) if e.seq == place.seq => {
                inner.bytes -= e.cost;
                true
            }
            Some(newer) => {
                inner.entries.insert(place.key, newer);
                false
            }
            None => false,
        }
    }

    /// Removes the oldest live entry; false when there is none.
    fn pop_oldest(&self, inner: &mut Inner) -> bool {
        while let Some(place) = inner.order.pop_front() {
            if Self::remove_at(inner, &place) {
                return true;
            }
        }
        false
    }

    /// Drops every entry stored `ttl` ago or earlier (they are at the front; the queue knows
    /// when each was stored, so an entry that has not expired costs no lookup).
    fn expire(&self, inner: &mut Inner, now: u64) {
        while let Some(place) = inner.order.front() {
            if now.saturating_sub(place.stored_ns) < self.bounds.ttl_ns {
                return;
            }
            let Some(place) = inner.order.pop_front() else {
                return;
            };
            if Self::remove_at(inner, &place) {
                self.counts.expirations.fetch_add(1, Relaxed);
            }
        }
    }

    /// (entries, bytes) held now.
    pub fn held(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.entries.len() as u64, inner.bytes)
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
        assert!(s.put(key(5_000), FP, answer(3 * 500 - 400 - 3)));
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
        assert_eq!(s.counts.evictions.load(Relaxed), 0);
        let inner = s.lock();
        assert!(inner.order.len() <= 2 * 2 + 64 + 1, "{}", inner.order.len());
    }
}
