//! The schema step's own threads: every schema compile, and every check or conversion of a
//! value beyond a few KB, runs here and never on a request worker (a tokio worker stuck in a
//! 10-second validation stalls every tenant on it, and the admin listener's `/healthz`).
//!
//! Why a pool of plain threads and not tokio's blocking pool: the blocking pool grows to 512
//! threads and has no notion of a tenant. Here the threads are few and fixed (`workers`), each
//! with a large stack (the parsers recurse on a schema's shape), and they are shared fairly:
//! - a tenant runs at most `tenant_workers` jobs at once, however many it queues;
//! - waiting tenants are served in turn (round robin), so a tenant with expensive records
//!   waits behind its own, and another tenant's job waits for at most one job per tenant;
//! - a job not started within `wait` is dropped unstarted and its caller refused
//!   ([`PoolError::Busy`]: 429 `schema_busy` with a Retry-After);
//! - a tenant queues at most [`MAX_QUEUED_PER_TENANT`] jobs.
//!
//! A job's CPU time is measured on its thread ([`thread_cpu`]) so the caller can refuse a
//! record whose check ran past its deadline; the cost model refuses most such records before
//! they run, the deadline is what is left when a model is wrong.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Jobs one tenant may have waiting: past them it is refused at once.
pub const MAX_QUEUED_PER_TENANT: usize = 256;
/// Stack of a pool thread: the schema parsers recurse on a schema's shape, and a shape the
/// text bounds did not foresee must not overflow (reserved, not committed, memory).
const STACK: usize = 256 * 1024 * 1024;

const QUEUED: u8 = 0;
const STARTED: u8 = 1;
const CANCELLED: u8 = 2;

/// Why a job gave no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// Not started within the wait limit (or the tenant's queue is full).
    Busy(Duration),
    /// The job panicked, or the pool is closed.
    Lost,
}

struct Job {
    state: Arc<AtomicU8>,
    run: Box<dyn FnOnce() + Send>,
}

#[derive(Default)]
struct Lane {
    jobs: VecDeque<Job>,
    running: usize,
}

#[derive(Default)]
struct State {
    lanes: HashMap<Arc<str>, Lane>,
    /// Tenants with jobs waiting, in the order they are served.
    turn: VecDeque<Arc<str>>,
    closed: bool,
}

struct PoolCore {
    state: Mutex<State>,
    ready: Condvar,
    tenant_workers: usize,
}

/// The pool; dropping it stops its threads once their jobs end.
pub struct Pool {
    shared: Arc<PoolCore>,
    wait: Duration,
    workers: usize,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("workers", &self.workers)
            .field("wait", &self.wait)
            .finish()
    }
}

impl State {
    /// The next job to run: the first tenant in turn with a job and a free share.
    fn next(&mut self, tenant_workers: usize) -> Option<(Arc<str>, Job)> {
        for _ in 0..self.turn.len() {
            let tenant = self.turn.pop_front()?;
            let Some(lane) = self.lanes.get_mut(&tenant) else {
                continue;
            };
            while lane
                .jobs
                .front()
                .is_some_and(|j| j.state.load(Ordering::Acquire) == CANCELLED)
            {
                lane.jobs.pop_front();
            }
            if lane.jobs.is_empty() {
                if lane.running == 0 {
                    self.lanes.remove(&tenant);
                }
                continue;
            }
            if lane.running >= tenant_workers {
                self.turn.push_back(tenant);
                continue;
            }
            let job = lane.jobs.pop_front()?;
            lane.running += 1;
            if !lane.jobs.is_empty() {
                self.turn.push_back(tenant.clone());
            }
            return Some((tenant, job));
        }
        None
    }

    fn done(&mut self, tenant: &Arc<str>) {
        if let Some(lane) = self.lanes.get_mut(tenant) {
            lane.running = lane.running.saturating_sub(1);
            if lane.running == 0 && lane.jobs.is_empty() {
                self.lanes.remove(tenant);
            } else if !lane.jobs.is_empty() && !self.turn.contains(tenant) {
                self.turn.push_back(tenant.clone());
            }
        }
    }
}

impl Pool {
    /// `workers` threads; a tenant runs at most `tenant_workers` jobs at once; a job not
    /// started within `wait` is refused.
    pub fn new(workers: usize, tenant_workers: usize, wait: Duration) -> Result<Self, String> {
        let shared = Arc::new(PoolCore {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            tenant_workers: tenant_workers.max(1),
        });
        for i in 0..workers.max(1) {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("schema-{i}"))
                .stack_size(STACK)
                .spawn(move || work(&shared))
                .map_err(|e| format!("the schema threads could not start: {e}"))?;
        }
        Ok(Self {
            shared,
            wait,
            workers: workers.max(1),
        })
    }

    /// The longest a job waits to start.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Jobs waiting and running now, over all tenants.
    pub fn load(&self) -> (usize, usize) {
        let state = self.shared.state.lock();
        state
            .lanes
            .values()
            .fold((0, 0), |(w, r), l| (w + l.jobs.len(), r + l.running))
    }

    /// Runs `f` on a pool thread within `tenant`'s share, once its turn comes and within the
    /// wait limit. Dropping the future before the job starts withdraws it.
    pub async fn run<R: Send + 'static>(
        &self,
        tenant: &str,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, PoolError> {
        let (done, result) = tokio::sync::oneshot::channel();
        let state = Arc::new(AtomicU8::new(QUEUED));
        let job = Job {
            state: state.clone(),
            run: Box::new(move || {
                let _ = done.send(f());
            }),
        };
        {
            let mut s = self.shared.state.lock();
            if s.closed {
                return Err(PoolError::Lost);
            }
            let tenant: Arc<str> = tenant.into();
            let lane = s.lanes.entry(tenant.clone()).or_default();
            if lane.jobs.len() >= MAX_QUEUED_PER_TENANT {
                return Err(PoolError::Busy(self.wait));
            }
            lane.jobs.push_back(job);
            if !s.turn.contains(&tenant) {
                s.turn.push_back(tenant);
            }
        }
        self.shared.ready.notify_one();
        // Withdrawn if this future is dropped before the job starts (the client went away).
        let tenant: Arc<str> = tenant.into();
        let withdraw = Withdraw {
            state: state.clone(),
            shared: self.shared.clone(),
            tenant: tenant.clone(),
        };
        let mut result = result;
        let answer = match tokio::time::timeout(self.wait, &mut result).await {
            Ok(r) => r.map_err(|_| PoolError::Lost),
            Err(_) => {
                if state
                    .compare_exchange(QUEUED, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    self.shared.purge(&tenant);
                    Err(PoolError::Busy(self.wait))
                } else {
                    // Started just now: its result comes (bounded by the job's own bounds).
                    result.await.map_err(|_| PoolError::Lost)
                }
            }
        };
        drop(withdraw);
        answer
    }
}

/// Marks a queued job cancelled when its caller stops waiting, and drops it from its queue.
struct Withdraw {
    state: Arc<AtomicU8>,
    shared: Arc<PoolCore>,
    tenant: Arc<str>,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if self
            .state
            .compare_exchange(QUEUED, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.shared.purge(&self.tenant);
        }
    }
}

impl PoolCore {
    /// Drops `tenant`'s cancelled jobs now, with what they hold (a value's copy: up to a record
    /// each). Left in the queue until a thread came to the tenant, the refused requests of a
    /// review of #37 held 190 MiB there while every thread was busy, and counted against the
    /// tenant's queue.
    fn purge(&self, tenant: &Arc<str>) {
        let mut state = self.state.lock();
        let Some(lane) = state.lanes.get_mut(tenant) else {
            return;
        };
        lane.jobs
            .retain(|j| j.state.load(Ordering::Acquire) != CANCELLED);
        if lane.jobs.is_empty() && lane.running == 0 {
            state.lanes.remove(tenant);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.state.lock().closed = true;
        self.shared.ready.notify_all();
    }
}

fn work(shared: &PoolCore) {
    loop {
        let (tenant, job) = {
            let mut state = shared.state.lock();
            loop {
                if state.closed {
                    return;
                }
                if let Some(next) = state.next(shared.tenant_workers) {
                    break next;
                }
                shared.ready.wait(&mut state);
            }
        };
        if job
            .state
            .compare_exchange(QUEUED, STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // A panic drops the job's sender: its caller gets `Lost`, the thread lives on.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(job.run));
        }
        shared.state.lock().done(&tenant);
        // A share freed may let another tenant's job (or this tenant's next) start.
        shared.ready.notify_all();
    }
}

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
    use std::sync::mpsc;

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

    /// A job that runs until told to finish, saying when it started.
    fn blocker(
        started: mpsc::Sender<&'static str>,
        name: &'static str,
    ) -> (impl FnOnce() + Send, mpsc::Sender<()>) {
        let (finish, finished) = mpsc::channel::<()>();
        let job = move || {
            let _ = started.send(name);
            let _ = finished.recv_timeout(Duration::from_secs(10));
        };
        (job, finish)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tenant_holding_its_share_does_not_delay_another() {
        let pool = Arc::new(Pool::new(2, 1, Duration::from_secs(5)).expect("pool"));
        let (started, starts) = mpsc::channel();
        // Tenant a queues three long jobs: it may run one at a time.
        let mut finishes = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (job, finish) = blocker(started.clone(), "a");
            finishes.push(finish);
            let pool = pool.clone();
            tasks.push(tokio::spawn(async move { pool.run("a", job).await }));
        }
        assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("a"));
        // b's job starts at once on the other thread, though a queued first.
        let pool_b = pool.clone();
        let b = tokio::spawn(async move { pool_b.run("b", || "b ran").await });
        assert_eq!(b.await.expect("task"), Ok("b ran"));
        assert!(
            starts.try_recv().is_err(),
            "a's second job waits for its first"
        );
        // b's answer reaches it just before its thread counts the job done.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while pool.load().1 > 1 && std::time::Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
        assert_eq!(pool.load(), (2, 1));
        for f in finishes {
            let _ = f.send(());
        }
        for t in tasks {
            assert_eq!(t.await.expect("task"), Ok(()));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_not_started_within_the_wait_is_refused_and_never_runs() {
        let pool = Arc::new(Pool::new(1, 1, Duration::from_millis(200)).expect("pool"));
        let (started, starts) = mpsc::channel();
        let (job, finish) = blocker(started.clone(), "first");
        let p = pool.clone();
        let first = tokio::spawn(async move { p.run("a", job).await });
        assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("first"));
        let ran = Arc::new(AtomicU8::new(0));
        let r = ran.clone();
        let second = pool.run("b", move || r.store(1, Ordering::SeqCst)).await;
        assert_eq!(second, Err(PoolError::Busy(Duration::from_millis(200))));
        // Refused, it is gone from the queue at once, with what it held (its closure's `r`),
        // while the thread is still busy.
        assert_eq!(
            Arc::strong_count(&ran),
            1,
            "the refused job's closure was dropped"
        );
        assert_eq!(pool.load(), (0, 1));
        let _ = finish.send(());
        assert_eq!(first.await.expect("task"), Ok(()));
        // The pool is free again, and the refused job did not run late.
        assert_eq!(pool.run("b", || 7).await, Ok(7));
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_panicking_job_is_lost_and_the_thread_lives_on() {
        let pool = Pool::new(1, 1, Duration::from_secs(5)).expect("pool");
        let lost = pool.run("a", || -> u8 { panic!("boom") }).await;
        assert_eq!(lost, Err(PoolError::Lost));
        assert_eq!(pool.run("a", || 1).await, Ok(1));
        assert!(thread_cpu().is_some(), "Linux counts each thread's CPU");
    }
}
