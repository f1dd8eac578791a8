//! The CPU time the current thread has used: what a schema thread's check or compile cost,
//! charged to its tenant.

use std::time::Duration;

/// CPU time this thread has used, from the kernel's per-thread clock (`None` where it cannot
/// be read: the caller then goes by wall time). The clock, not `/proc/thread-self/schedstat`:
/// that file is brought up to date only when the scheduler runs (a tick, a switch), so a check
/// of about a millisecond read as 0 ns most times, and a request's thousands of passed checks
/// were owed almost nothing (review 20 of #37).
#[allow(unsafe_code)]
pub fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration, and the clock id is
    // one the kernel defines.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    ok.then(|| Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review 20 of #37: read from `/proc/thread-self/schedstat`, a check's CPU moved only
    /// when the scheduler had run in between, so most checks of about a millisecond read 0.
    #[test]
    fn a_short_piece_of_work_reads_as_cpu_time() {
        for _ in 0..50 {
            let (before, wall) = (thread_cpu().expect("readable"), std::time::Instant::now());
            let mut n = 0u64;
            while wall.elapsed() < Duration::from_micros(200) {
                n = std::hint::black_box(n.wrapping_add(1));
            }
            let spent = thread_cpu().expect("readable").saturating_sub(before);
            assert!(spent > Duration::ZERO, "{n} turns read as no CPU");
        }
    }
}
