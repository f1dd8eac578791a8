//! The schema step's own threads: every schema compile, and every check or conversion of a
//! value beyond a few KB, runs here and never on a request worker (a tokio worker stuck in a
//! 10-second validation stalls every tenant on it, and the admin listener's `/healthz`).
//!
//! Why a pool of plain threads and not tokio's blocking pool: the blocking pool grows to 512
//! threads and has no notion of a tenant. Here the threads are few and fixed (`workers`), each
//! with a large stack (the parsers recurse on a schema's shape), and they are shared fairly:
//! - a tenant runs at most `tenant_workers` jobs at once, however many it queues;
//! - waiting tenants are served by the thread time their jobs took (start-time fair queuing:
//!   the least first, a tenant new to the queue starting level with the one served last), so
//!   a tenant with cheap records goes before one whose jobs are dear, whatever their count;
//! - tenants whose jobs run long ([`LONG_JOB`] or more past what their records pay for, in
//!   one job or together within [`LONG_FOR`]; a job whose outcome no budget pays for, a
//!   check that refused its record, counts whole; remembered for [`LONG_FOR`], for checks and
//!   compiles apart: a tenant's one long compile does not hold its checks back), and the
//!   compiles of tenants not seen in that time, hold at most `workers − 1` threads together,
//!   so one thread is always left for short jobs. Counted one job at a time, twelve tenants
//!   each refused a 75 ms check every 0.4 s took both threads in turn and another tenant's
//!   schema records went from 56 to 217 ms (review 28 of #37). Round
//!   robin let four tenants allowed 1 record/s keep both threads in 1-second checks, and
//!   another's 20-record requests wait ~2 s a record (review 22 of #37); and fresh tenants
//!   took the last thread one after another with their first long job (review 23). A tenant
//!   whose jobs were short takes it for at most [`LONG_JOB`] past what a record's check pays
//!   for: there the check stops (where it can: an Avro walk) and is queued again with the
//!   long jobs ([`ForRecord`]). Jobs are timed by their thread's CPU;
//! - a request with more records to check keeps its thread: the thread that ran one of its
//!   jobs waits up to [`LINGER`] for its next and runs it first, for up to [`STINT`] of short
//!   jobs. A request's records are checked one after another, and each was queued behind the
//!   job its thread took meanwhile: the wait of one turn, paid once per record;
//! - a job not started within `wait` is dropped unstarted and its caller refused
//!   ([`PoolError::Busy`]: 429 `schema_busy` with a Retry-After);
//! - a tenant queues at most [`MAX_QUEUED_PER_TENANT`] jobs.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::thread_cpu::thread_cpu;
use crate::budget::Clock;

mod order;
use order::{Lane, State};

/// Jobs one tenant may have waiting: past them it is refused at once.
pub const MAX_QUEUED_PER_TENANT: usize = 256;
/// A job that ran this long marks its tenant as running long jobs: a check of a few hundred KB
/// takes a few milliseconds, a new small schema's compile ~50 ms.
pub const LONG_JOB: Duration = Duration::from_millis(100);
/// How long a tenant counts as running long jobs after one, and as known after any.
pub const LONG_FOR: Duration = Duration::from_secs(300);
/// How long a thread waits for the next job of a request with more records to check: the
/// answer's way back to the request and its next record's way in take tens of microseconds.
pub const LINGER: Duration = Duration::from_millis(2);
/// How much of a thread a request's jobs may take one after another, before the thread goes
/// back to the order.
pub const STINT: Duration = Duration::from_millis(50);
/// Stack of a pool thread: the schema parsers recurse on a schema's shape, and a shape the
/// text bounds did not foresee must not overflow (reserved, not committed, memory).
const STACK: usize = 256 * 1024 * 1024;

const QUEUED: u8 = 0;
const STARTED: u8 = 1;
const CANCELLED: u8 = 2;

/// Why a job gave no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// Not started within the wait limit while the tenant's own work was ahead of it (a job
    /// of its own running or queued, or its jobs held back as long ones), or the tenant's
    /// queue is full.
    Busy(Duration),
    /// Not started within the wait limit with nothing of the tenant's own ahead of it: other
    /// tenants' work held the threads.
    Crowded(Duration),
    /// The job panicked, or the pool is closed.
    Lost,
}

/// What a job does: a tenant's checks and compiles are each known to run long or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Check = 0,
    Compile = 1,
}

/// Whether a job's outcome says no budget pays for any of its run (a check that refused its
/// record, or was stopped): then all of it counts as run past what its record pays for.
pub trait Unpaid {
    fn unpaid(&self) -> bool {
        false
    }
}

struct Job {
    state: Arc<AtomicU8>,
    kind: Kind,
    /// Told whether it runs as one of the long jobs (a record's check then runs whole; else it
    /// stops at what a short job may take, [`ForRecord`]); says whether its run was unpaid
    /// ([`Unpaid`]).
    run: Box<dyn FnOnce(bool) -> bool + Send>,
    /// The request it checks a record of, and whether that request has more to check.
    request: Option<(u64, bool)>,
    /// What its record pays for, in nanoseconds: only a job longer by [`LONG_JOB`] is long.
    paid: u64,
    /// It ran long once already (see [`ForRecord::long`]): held back with the long ones,
    /// whoever its tenant is.
    long: bool,
}

/// A record's check, as the pool sees it: its request (its id, and whether it has more
/// records to check after this one: then the thread that runs it waits a little for the next,
/// [`LINGER`]), the CPU its record pays for, and whether it is a check that ran long once.
///
/// A check run as a short job (its tenant not known for long ones) stops where it can at
/// [`LONG_JOB`] past what its record pays for, and is queued again as `long`, with the long
/// jobs (review 25 of #37: twelve tenants, each known for short checks, took the last thread
/// in turn with one 1.1 s check each; review 26: foreseeing it by the cost model sent large
/// valid records, checked in a millisecond, to wait behind those).
#[derive(Debug, Clone, Copy)]
pub struct ForRecord {
    pub request: u64,
    pub more: bool,
    pub paid: Duration,
    pub long: bool,
}

struct PoolCore {
    state: Mutex<State>,
    ready: Condvar,
    tenant_workers: usize,
    /// Threads the tenants running long jobs may hold together.
    long_threads: usize,
    clock: Arc<dyn Clock>,
    /// How long a thread waits for a request's next job ([`LINGER`]).
    linger: Duration,
    /// Jobs timed by their thread's CPU, not by `clock`.
    by_cpu: bool,
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

impl Pool {
    /// `workers` threads; a tenant runs at most `tenant_workers` jobs at once; a job not
    /// started within `wait` is refused; jobs are timed on `clock`.
    pub fn new(
        workers: usize,
        tenant_workers: usize,
        wait: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        Self::lingering(workers, tenant_workers, wait, clock, LINGER, false)
    }

    /// [`Pool::new`], its threads waiting `linger` for a request's next job, its jobs timed
    /// by their thread's CPU if `by_cpu` (as the gateway's are: a job a pause of the process
    /// caught — a CPU quota's throttling, a busy host — is not long for it; review 26 of #37:
    /// a 3 ms check that spanned a 100 ms pause marked its tenant as running long jobs for
    /// five minutes).
    pub fn lingering(
        workers: usize,
        tenant_workers: usize,
        wait: Duration,
        clock: Arc<dyn Clock>,
        linger: Duration,
        by_cpu: bool,
    ) -> Result<Self, String> {
        let shared = Arc::new(PoolCore {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            tenant_workers: tenant_workers.max(1),
            long_threads: workers.saturating_sub(1).max(1),
            clock,
            linger,
            by_cpu,
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
        self.submit(
            tenant,
            Kind::Check,
            None,
            (0, false),
            move |_| f(),
            |_| false,
        )
        .await
    }

    /// [`Pool::run`] for a compile.
    pub async fn compile<R: Send + 'static>(
        &self,
        tenant: &str,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, PoolError> {
        self.submit(
            tenant,
            Kind::Compile,
            None,
            (0, false),
            move |_| f(),
            |_| true,
        )
        .await
    }

    /// [`Pool::run`] for a record's check, `f` told whether it runs as a long job; its outcome
    /// says whether its run was unpaid.
    pub async fn run_for<R: Unpaid + Send + 'static>(
        &self,
        tenant: &str,
        record: ForRecord,
        f: impl FnOnce(bool) -> R + Send + 'static,
    ) -> Result<R, PoolError> {
        let paid = u64::try_from(record.paid.as_nanos()).unwrap_or(u64::MAX);
        let request = Some((record.request, record.more));
        self.submit(
            tenant,
            Kind::Check,
            request,
            (paid, record.long),
            f,
            R::unpaid,
        )
        .await
    }

    async fn submit<R: Send + 'static>(
        &self,
        tenant: &str,
        kind: Kind,
        request: Option<(u64, bool)>,
        (paid, long): (u64, bool),
        f: impl FnOnce(bool) -> R + Send + 'static,
        unpaid: fn(&R) -> bool,
    ) -> Result<R, PoolError> {
        let (done, result) = tokio::sync::oneshot::channel();
        let state = Arc::new(AtomicU8::new(QUEUED));
        let job = Job {
            state: state.clone(),
            kind,
            run: Box::new(move |long| {
                let outcome = f(long);
                let unpaid = unpaid(&outcome);
                let _ = done.send(outcome);
                unpaid
            }),
            request,
            paid,
            long,
        };
        {
            let mut s = self.shared.state.lock();
            if s.closed {
                return Err(PoolError::Lost);
            }
            s.arrivals += 1;
            let since = s.arrivals;
            let lane = s.lanes.entry(tenant.into()).or_insert_with(|| Lane {
                since,
                ..Lane::default()
            });
            if lane.jobs.len() >= MAX_QUEUED_PER_TENANT {
                return Err(PoolError::Busy(self.wait));
            }
            lane.jobs.push_back(job);
        }
        // All: a thread staying with a request waits on the same condition.
        self.shared.ready.notify_all();
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
                    let own = self.shared.own_work_ahead(&tenant, kind);
                    self.shared.purge(&tenant);
                    Err(if own {
                        PoolError::Busy(self.wait)
                    } else {
                        PoolError::Crowded(self.wait)
                    })
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
    /// Whether `tenant`'s own work stood before its job of `kind` that waited too long (now
    /// cancelled): a job of its own running, another queued, or its jobs of that kind
    /// held back as long ones. If not, other tenants' work held the threads (review 30 of
    /// #37, R-3: such a refusal spent a victim's allowance of releases).
    fn own_work_ahead(&self, tenant: &Arc<str>, kind: Kind) -> bool {
        let state = self.state.lock();
        let now = self.clock.now_ns();
        let Some(lane) = state.lanes.get(tenant) else {
            return false;
        };
        let queued = lane
            .jobs
            .iter()
            .any(|j| j.state.load(Ordering::Acquire) != CANCELLED);
        lane.running > 0 || queued || state.runs_long(tenant, kind, now)
    }

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
    let (mut next, mut stint) = (None, 0);
    loop {
        let mut taken = match next.take() {
            Some(taken) => taken,
            None => {
                stint = 0;
                let mut state = shared.state.lock();
                loop {
                    if state.closed {
                        return;
                    }
                    if let Some(next) = state.next(shared, shared.clock.now_ns()) {
                        break next;
                    }
                    shared.ready.wait(&mut state);
                }
            }
        };
        let (began, cpu) = (shared.clock.now_ns(), thread_cpu());
        let run = std::mem::replace(&mut taken.job.run, Box::new(|_| false));
        let mut unpaid = false;
        if taken
            .job
            .state
            .compare_exchange(QUEUED, STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let long = taken.long;
            // A panic drops the job's sender: its caller gets `Lost`, the thread lives on.
            unpaid = std::panic::catch_unwind(AssertUnwindSafe(move || run(long))).unwrap_or(true);
        }
        let now = shared.clock.now_ns();
        let took = match (shared.by_cpu, cpu, thread_cpu()) {
            (true, Some(then), Some(at)) => {
                u64::try_from(at.saturating_sub(then).as_nanos()).unwrap_or(u64::MAX)
            }
            _ => now.saturating_sub(began),
        };
        let mut state = shared.state.lock();
        state.done(&taken, took, unpaid, now);
        // A share freed may let another tenant's job (or this tenant's next) start.
        shared.ready.notify_all();
        stint += took;
        let short = |ns: u64, d: Duration| u128::from(ns) < d.as_nanos();
        let stays = taken
            .job
            .request
            .filter(|&(_, more)| more && short(took, LONG_JOB))
            .filter(|_| !state.runs_long(&taken.tenant, taken.job.kind, now))
            .filter(|_| short(stint, STINT));
        if let Some((request, _)) = stays {
            let until = std::time::Instant::now() + shared.linger;
            while !state.closed {
                next = state.next_of(shared, &taken.tenant, request);
                if next.is_some() || shared.ready.wait_until(&mut state, until).timed_out() {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
