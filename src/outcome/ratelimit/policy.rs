//! `RateLimit-Policy` values kept per worker thread: the field says what the limits are, which
//! changes only when an operator changes them (or a month turns), so an answer reuses the
//! value the last answer under the same limits rendered. Rendering and checking it were ~40 %
//! of the fields' cost once a tenant had three quota items (callgrind: ~2,400 of ~6,200
//! instructions per answer in `ratelimit::insert`).
//!
//! Keyed by what the field is made of (each item's name, `q`, and what its `w` comes from),
//! not by tenant: tenants with the same limits share an entry, and a change of a limit is a
//! new key, never a stale value. [`ENTRIES`] per worker: with more distinct policies answered
//! in turn than that, each is rendered again as before (a key's comparison is what is added).

use std::cell::RefCell;

use axum::http::HeaderValue;

/// The most items a view holds: four buckets, six quota items of the tenant's, six global.
const ITEMS: usize = 16;

/// Entries per worker thread (each ~400 bytes: a key and its value's handle).
const ENTRIES: usize = 8;

/// What a policy field is rendered from: per item, its name's index, `q`, and `w`'s source.
#[derive(Clone, Copy)]
pub(super) struct Key {
    items: [[u64; 3]; ITEMS],
    len: usize,
}

impl Default for Key {
    fn default() -> Self {
        Self {
            items: [[0; 3]; ITEMS],
            len: 0,
        }
    }
}

impl Key {
    pub(super) fn push(&mut self, item: [u64; 3]) {
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = item;
            self.len += 1;
        }
    }

    pub(super) fn items(&self) -> &[[u64; 3]] {
        self.items.get(..self.len).unwrap_or_default()
    }

    fn same(&self, other: &Key) -> bool {
        self.items() == other.items()
    }
}

#[derive(Default)]
struct Cache {
    entries: [Option<(Key, HeaderValue)>; ENTRIES],
    /// The entry replaced next (oldest first).
    next: usize,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::default();
}

/// The policy value of `key`: the one rendered for the same key, or `render`'s (kept).
pub(super) fn cached(
    key: &Key,
    render: impl FnOnce() -> Option<HeaderValue>,
) -> Option<HeaderValue> {
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        let found = cache.entries.iter().flatten().find(|(k, _)| k.same(key));
        if let Some((_, value)) = found {
            return Some(value.clone());
        }
        let value = render()?;
        let slot = cache.next;
        cache.next = (slot + 1) % ENTRIES;
        if let Some(entry) = cache.entries.get_mut(slot) {
            *entry = Some((*key, value.clone()));
        }
        Some(value)
    })
}
