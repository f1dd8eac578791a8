//! Verified tokens, remembered by the SHA-256 of the token until they expire, so a producer that
//! reuses its token pays one signature verification per token instead of one per request.
//!
//! Bounded: at most `capacity` entries over all shards. A full shard first drops its expired
//! entries (a sweep, at most once a second per shard, so a flood of new tokens costs O(1) per
//! insert and not a scan), then, if it is still full, one entry chosen by the hash map's order
//! (effectively at random): the evicted producer pays one more verification, nothing else.
//! The token itself is never kept, only its digest.
//!
//! Sharded so that requests on different cores rarely meet on one lock; each operation holds a
//! shard's lock for one hash-map operation.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Shards (a power of two; the digest's first byte picks one).
const SHARDS: usize = 16;
/// Seconds between two sweeps of one shard.
const SWEEP_EVERY_S: u64 = 1;

#[derive(Debug)]
struct Entry<V> {
    value: V,
    /// Unix second from which the entry is no longer valid.
    until_s: u64,
}

#[derive(Debug)]
struct Shard<V> {
    map: HashMap<[u8; 32], Entry<V>>,
    next_sweep_s: u64,
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Cached<R> {
    /// A live entry, and what the caller's closure made of it.
    Live(R),
    /// The entry's time has passed (it is dropped).
    Expired,
    Missing,
}

#[derive(Debug)]
pub struct TokenCache<V> {
    shards: Vec<Mutex<Shard<V>>>,
    per_shard: usize,
}

impl<V> TokenCache<V> {
    /// A cache of at most `capacity` entries (at least one per shard).
    pub fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::new(),
                        next_sweep_s: 0,
                    })
                })
                .collect(),
            per_shard,
        }
    }

    fn shard(&self, digest: &[u8; 32]) -> &Mutex<Shard<V>> {
        &self.shards[usize::from(digest[0]) % SHARDS]
    }

    /// Looks `digest` up at `now_s`; a live entry is handed to `f` (under the shard's lock:
    /// keep it short) and its result returned.
    pub fn with<R>(&self, digest: &[u8; 32], now_s: u64, f: impl FnOnce(&mut V) -> R) -> Cached<R> {
        let mut shard = self.shard(digest).lock();
        match shard.map.get_mut(digest) {
            None => Cached::Missing,
            Some(entry) if now_s >= entry.until_s => {
                shard.map.remove(digest);
                Cached::Expired
            }
            Some(entry) => Cached::Live(f(&mut entry.value)),
        }
    }

    /// Remembers `value` for `digest` until `until_s` (a Unix second).
    pub fn insert(&self, digest: [u8; 32], value: V, until_s: u64, now_s: u64) {
        if until_s <= now_s {
            return;
        }
        let mut shard = self.shard(&digest).lock();
        if shard.map.len() >= self.per_shard && !shard.map.contains_key(&digest) {
            if now_s >= shard.next_sweep_s {
                shard.next_sweep_s = now_s + SWEEP_EVERY_S;
                shard.map.retain(|_, e| e.until_s > now_s);
            }
            if shard.map.len() >= self.per_shard {
                if let Some(victim) = shard.map.keys().next().copied() {
                    shard.map.remove(&victim);
                }
            }
        }
        shard.map.insert(digest, Entry { value, until_s });
    }

    /// Entries held now (live or not yet swept).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most entries the cache holds.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u32) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(n.to_be_bytes()).into()
    }

    #[test]
    fn an_entry_lives_until_its_time() {
        let cache = TokenCache::new(16);
        cache.insert(digest(1), 7u32, 100, 10);
        assert_eq!(cache.with(&digest(1), 99, |v| *v), Cached::Live(7));
        assert_eq!(cache.with(&digest(1), 100, |v| *v), Cached::Expired);
        assert_eq!(
            cache.with(&digest(1), 50, |v| *v),
            Cached::Missing,
            "dropped"
        );
        // Already expired: not kept at all.
        cache.insert(digest(2), 1, 10, 10);
        assert!(cache.is_empty());
    }

    #[test]
    fn the_cache_never_holds_more_than_its_capacity() {
        let cache = TokenCache::new(64);
        for n in 0..10_000 {
            cache.insert(digest(n), n, 1_000, 1);
        }
        assert!(cache.len() <= cache.capacity());
        assert_eq!(cache.capacity(), 64);
        // The newest entry is always kept.
        assert_eq!(cache.with(&digest(9_999), 2, |v| *v), Cached::Live(9_999));
    }

    #[test]
    fn a_full_shard_drops_expired_entries_before_live_ones() {
        let cache = TokenCache::new(SHARDS); // one entry per shard
        let same_shard: Vec<[u8; 32]> = (0..100_000)
            .map(digest)
            .filter(|d| d[0] as usize % SHARDS == 0)
            .take(2)
            .collect();
        cache.insert(same_shard[0], 1, 5, 1);
        cache.insert(same_shard[1], 2, 50, 10);
        assert_eq!(cache.with(&same_shard[1], 11, |v| *v), Cached::Live(2));
        assert_eq!(cache.with(&same_shard[0], 11, |v| *v), Cached::Missing);
    }
}
