//! What a piece of work keeps on the heap, measured where it runs: the gateway's global
//! allocator counts each thread's live bytes (allocated minus freed), so
//! [`measure`] can say what a schema compile really built — regexes and validators are
//! thousands of times their text for some schemas, a handful for others, and a multiple of
//! the text is wrong for both.
//!
//! The counter is one thread-local add per allocation and free (no lock, no atomic). A binary
//! that does not install [`Counting`] (a benchmark with its own allocator) gets `None` from
//! [`measure`], and callers fall back to an estimate.
//!
//! [`give_back`] returns what such work freed to the system.
//!
//! Layer: foundations. Imports nothing of floodgate's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting each thread's live bytes.
#[derive(Debug, Clone, Copy)]
pub struct Counting;

thread_local! {
    // Const-initialised, no destructor: reading it never allocates, so the allocator can.
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

// What the unit tests' [`usage`] reads: kept only in their build, so the gateway's allocator
// does one thread-local add per allocation, not three.
#[cfg(test)]
thread_local! {
    // The most `LIVE` has been since [`usage`] last started counting.
    static PEAK: Cell<i64> = const { Cell::new(0) };
    // Bytes ever allocated (reallocations count what they add): a measure of work.
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

#[cfg(not(test))]
#[inline]
fn add(n: i64) {
    // During a thread's teardown the slot may be gone: that thread measures nothing then.
    let _ = LIVE.try_with(|c| c.set(c.get().wrapping_add(n)));
}

#[cfg(test)]
fn add(n: i64) {
    let Ok(now) = LIVE.try_with(|c| {
        let now = c.get().wrapping_add(n);
        c.set(now);
        now
    }) else {
        return;
    };
    if n > 0 {
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
        let _ = ALLOCATED.try_with(|a| a.set(a.get().wrapping_add(n.unsigned_abs())));
    }
}

#[inline]
#[allow(clippy::cast_possible_wrap)] // a Layout's size is at most isize::MAX: exact
fn size(layout: Layout) -> i64 {
    layout.size() as i64
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the only addition is a thread-local counter that never allocates. Inlined into
// the allocator's entry points (in the binary's crate): a call costs the counter's add, not
// a call of its own (~15 instructions per allocation and free, ~1,500 a request).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (the caller upholds `alloc`'s contract).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(size(layout));
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(size(layout));
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        add(-size(layout));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`; `new_size` is the caller's, checked by it.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // `new_size` is at most isize::MAX too (`realloc`'s contract).
            #[allow(clippy::cast_possible_wrap)]
            add(new_size as i64 - size(layout));
        }
        p
    }
}

/// Gives the allocator's free pages back to the system (glibc's `malloc_trim`). Work that
/// builds a large transient heap in many small pieces — a schema compile: 30+ MB for a 255 KB
/// regex alternation that keeps 1.7 MB — otherwise leaves glibc holding it (ten such compiles
/// kept RSS 70 MiB higher), and each thread's arena holds its own. A no-op where the C library
/// is not glibc.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim takes no pointer, touches only the allocator's own free lists, and
    // may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes this thread holds now, as counted (only differences mean anything).
fn live() -> i64 {
    LIVE.try_with(Cell::get).unwrap_or(0)
}

/// Runs `f` and says how many bytes it left allocated on this thread (what its result and
/// anything it leaked hold), or `None` when the binary does not count (no [`Counting`]).
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Option<usize>) {
    let before = live();
    // A probe: a binary without the counting allocator sees no change.
    let probe = std::hint::black_box(Vec::<u8>::with_capacity(64));
    let counting = live() != before;
    drop(probe);
    let before = live();
    let result = f();
    let kept = live().saturating_sub(before).max(0);
    let kept = usize::try_from(kept).unwrap_or(usize::MAX);
    (result, counting.then_some(kept))
}

/// What a piece of work took on this thread on its way, beyond what it kept.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// The most bytes it held at once, above what the thread held before.
    pub peak: u64,
    /// Bytes it allocated in all (a copy of a name is an allocation): its work, counted
    /// without a clock.
    pub allocated: u64,
}

/// Runs `f` and says what it took on the way ([`Usage`]), or `None` when the binary does not
/// count. The schema tests bound what a hostile schema's compile takes, not only what it
/// keeps. Not nested: an inner call restarts the outer one's peak. The unit tests' build only.
#[cfg(test)]
pub fn usage<R>(f: impl FnOnce() -> R) -> (R, Option<Usage>) {
    let ((), counting) = measure(|| ());
    let before = live();
    let _ = PEAK.try_with(|p| p.set(before));
    let allocated = ALLOCATED.try_with(Cell::get).unwrap_or(0);
    let result = f();
    let most = PEAK.try_with(Cell::get).unwrap_or(before);
    let usage = Usage {
        peak: u64::try_from(most.saturating_sub(before)).unwrap_or(0),
        allocated: ALLOCATED
            .try_with(Cell::get)
            .unwrap_or(0)
            .wrapping_sub(allocated),
    };
    (result, counting.map(|_| usage))
}

#[cfg(test)]
mod tests {
    use super::{measure, usage};

    #[test]
    fn usage_counts_what_was_freed_on_the_way() {
        let ((), used) = usage(|| {
            for _ in 0..3 {
                drop(std::hint::black_box(vec![0u8; 1 << 20]));
            }
        });
        let used = used.expect("the test binary counts");
        assert!((1 << 20..2 << 20).contains(&used.peak), "{used:?}");
        assert!((3 << 20..4 << 20).contains(&used.allocated), "{used:?}");
        let ((), kept) = measure(|| drop(std::hint::black_box(vec![0u8; 1 << 20])));
        assert_eq!(kept, Some(0), "what was freed is not kept");
    }

    #[test]
    fn measures_what_the_work_keeps_not_what_it_freed() {
        // The unit tests' binary installs the counting allocator (lib.rs).
        let (kept, bytes) = measure(|| {
            let scratch = vec![0u8; 1 << 20];
            drop(scratch);
            vec![1u8; 100_000]
        });
        let bytes = bytes.expect("the test binary counts");
        assert!((100_000..200_000).contains(&bytes), "{bytes}");
        assert_eq!(kept.len(), 100_000);
        let ((), none) = measure(|| ());
        assert_eq!(none, Some(0));
    }
}
