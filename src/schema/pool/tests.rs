//! The pool's order, shares, wait limit and clock.

use super::*;
use crate::budget::{ManualClock, MonotonicClock};
use std::sync::mpsc;

fn real() -> Arc<dyn Clock> {
    Arc::new(MonotonicClock::new())
}

/// A job of `tenant` that runs until told to finish, saying (its tenant) when it started.
fn hold(
    pool: &Arc<Pool>,
    started: &mpsc::Sender<&'static str>,
    tenant: &'static str,
) -> (
    tokio::task::JoinHandle<Result<(), PoolError>>,
    mpsc::Sender<()>,
) {
    hold_as(pool, started, tenant, As::Job)
}

/// What a held job is to the pool.
enum As {
    Job,
    Record(ForRecord),
    Compile,
}

/// [`hold`], as `what` says.
fn hold_as(
    pool: &Arc<Pool>,
    started: &mpsc::Sender<&'static str>,
    tenant: &'static str,
    what: As,
) -> (
    tokio::task::JoinHandle<Result<(), PoolError>>,
    mpsc::Sender<()>,
) {
    let (finish, finished) = mpsc::channel::<()>();
    let (pool, started) = (pool.clone(), started.clone());
    let job = move || {
        let _ = started.send(tenant);
        let _ = finished.recv_timeout(Duration::from_secs(10));
    };
    let run = async move {
        match what {
            As::Record(record) => pool.run_for(tenant, record, move |_| job()).await,
            As::Job => pool.run(tenant, job).await,
            As::Compile => pool.compile(tenant, job).await,
        }
    };
    (tokio::spawn(run), finish)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_holding_its_share_does_not_delay_another() {
    let pool = Arc::new(Pool::new(2, 1, Duration::from_secs(5), real()).expect("pool"));
    // Both seen before (a tenant not seen lately is held back with those running long jobs).
    for tenant in ["a", "b"] {
        assert_eq!(pool.run(tenant, || ()).await, Ok(()));
    }
    while pool.load() != (0, 0) {
        tokio::task::yield_now().await;
    }
    let (started, starts) = mpsc::channel();
    // Tenant a queues three long jobs: it may run one at a time.
    let mut finishes = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (task, finish) = hold(&pool, &started, "a");
        finishes.push(finish);
        tasks.push(task);
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
    // b's answer reaches it just before its thread counts the job done, and a's tasks queue
    // their jobs when they run.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while pool.load() != (2, 1) && std::time::Instant::now() < deadline {
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
    let pool = Arc::new(Pool::new(1, 1, Duration::from_millis(200), real()).expect("pool"));
    let (started, starts) = mpsc::channel();
    let (first, finish) = hold(&pool, &started, "a");
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("a"));
    let ran = Arc::new(AtomicU8::new(0));
    let r = ran.clone();
    let second = pool.run("b", move || r.store(1, Ordering::SeqCst)).await;
    // Nothing of b's own was ahead of it: a's work held the thread.
    assert_eq!(second, Err(PoolError::Crowded(Duration::from_millis(200))));
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

/// R-3 of review 30 of #37: a `schema_busy` its own work caused spends a tenant's allowance
/// of releases, one other tenants' work caused does not; the pool tells them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_waited_behind_its_tenants_own_work_is_busy_and_one_behind_others_crowded() {
    let pool = Arc::new(Pool::new(2, 1, Duration::from_millis(200), real()).expect("pool"));
    let (started, starts) = mpsc::channel();
    let (first, finish) = hold(&pool, &started, "a");
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("a"));
    // a's share (one thread) is taken by its own job: its second waits for it.
    let own = pool.run("a", || ()).await;
    assert_eq!(own, Err(PoolError::Busy(Duration::from_millis(200))));
    let (other, finish_other) = hold(&pool, &started, "c");
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("c"));
    // Both threads are others': b's job waits with nothing of its own ahead.
    let crowded = pool.run("b", || ()).await;
    assert_eq!(crowded, Err(PoolError::Crowded(Duration::from_millis(200))));
    for (task, f) in [(first, finish), (other, finish_other)] {
        let _ = f.send(());
        assert_eq!(task.await.expect("task"), Ok(()));
    }
}

/// A job of `tenant` that takes `ms` of the pool's clock.
async fn took(pool: &Pool, clock: &Arc<ManualClock>, tenant: &str, ms: u64) {
    let clock = clock.clone();
    let ran = pool.run(tenant, move || clock.advance_ms(ms)).await;
    assert_eq!(ran, Ok(()));
    // The answer comes back just before the thread counts the job done (and its time).
    while pool.load() != (0, 0) {
        tokio::task::yield_now().await;
    }
}

/// Review 22 of #37: in turns, a tenant with cheap records waited behind one job per
/// tenant, however dear theirs. Ordered by the thread time their jobs took, the cheap
/// tenant goes first though it queued last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_jobs_took_little_goes_before_one_whose_jobs_took_long() {
    let clock = Arc::new(ManualClock::new());
    let pool = Arc::new(Pool::new(1, 1, Duration::from_secs(5), clock.clone()).expect("pool"));
    took(&pool, &clock, "dear", 900).await;
    took(&pool, &clock, "cheap", 5).await;
    // The thread busy; "dear" queues, then "cheap".
    let (started, starts) = mpsc::channel();
    let (blocking, finish) = hold(&pool, &started, "other");
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("other"));
    let mut tasks = Vec::new();
    for name in ["dear", "cheap"] {
        let (p, s) = (pool.clone(), started.clone());
        tasks.push(tokio::spawn(async move {
            p.run(name, move || {
                let _ = s.send(name);
            })
            .await
        }));
        while pool.load().0 < tasks.len() {
            tokio::task::yield_now().await;
        }
    }
    let _ = finish.send(());
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("cheap"));
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("dear"));
    for t in tasks {
        assert_eq!(t.await.expect("task"), Ok(()));
    }
    assert_eq!(blocking.await.expect("task"), Ok(()));
}

/// Review 22 of #37: tenants whose checks ran a second each kept both threads. Once their
/// jobs are known to run long, they hold one thread of two together, and a short job
/// starts at once on the other; [`LONG_FOR`] later they are not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_running_long_jobs_leave_a_thread_for_short_ones() {
    let clock = Arc::new(ManualClock::new());
    let pool = Arc::new(Pool::new(2, 1, Duration::from_secs(5), clock.clone()).expect("pool"));
    let long = u64::try_from(LONG_JOB.as_millis()).expect("ms");
    took(&pool, &clock, "a", long).await;
    took(&pool, &clock, "b", long - 1).await;
    took(&pool, &clock, "c", 1_000).await;
    let (started, starts) = mpsc::channel();
    let (a, finish_a) = hold(&pool, &started, "a");
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("a"));
    let (c, finish_c) = hold(&pool, &started, "c");
    while pool.load() != (1, 1) {
        tokio::task::yield_now().await;
    }
    // c waits though a thread is free; b's jobs were short: b's starts there.
    assert_eq!(pool.run("b", || "b ran").await, Ok("b ran"));
    assert!(starts.try_recv().is_err(), "c waits for a's thread");
    let _ = finish_a.send(());
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("c"));
    let _ = finish_c.send(());
    assert_eq!(a.await.expect("task"), Ok(()));
    assert_eq!(c.await.expect("task"), Ok(()));
    // LONG_FOR on, a and c may take both threads again once seen running short jobs.
    clock.advance_ms(u64::try_from(LONG_FOR.as_millis()).expect("ms"));
    took(&pool, &clock, "a", 0).await;
    took(&pool, &clock, "c", 0).await;
    let (a, finish_a) = hold(&pool, &started, "a");
    let (c, finish_c) = hold(&pool, &started, "c");
    let mut both = [
        starts.recv_timeout(Duration::from_secs(5)).ok(),
        starts.recv_timeout(Duration::from_secs(5)).ok(),
    ];
    both.sort();
    assert_eq!(both, [Some("a"), Some("c")]);
    let _ = (finish_a.send(()), finish_c.send(()));
    assert_eq!(a.await.expect("task"), Ok(()));
    assert_eq!(c.await.expect("task"), Ok(()));
}

#[tokio::test]
async fn a_panicking_job_is_lost_and_the_thread_lives_on() {
    let pool = Pool::new(1, 1, Duration::from_secs(5), real()).expect("pool");
    let lost = pool.run("a", || -> u8 { panic!("boom") }).await;
    assert_eq!(lost, Err(PoolError::Lost));
    assert_eq!(pool.run("a", || 1).await, Ok(1));
}

/// Review 22 of #37: a request's records are checked one after another, and the thread its
/// record freed took another tenant's job before the request's next record came: one turn's
/// wait per record. The thread waits for the request's next job and runs it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_more_records_keeps_its_thread_for_the_next() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new());
    let pool = Arc::new(
        Pool::lingering(
            1,
            1,
            Duration::from_secs(5),
            clock,
            Duration::from_secs(5),
            false,
        )
        .expect("pool"),
    );
    let (started, starts) = mpsc::channel();
    let (blocking, finish) = hold(&pool, &started, "x");
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("x"));
    // The request's first record queues, then another tenant's job.
    let record = |name: &'static str, more: bool| {
        let (p, s) = (pool.clone(), started.clone());
        async move {
            let record = ForRecord {
                request: 7,
                more,
                paid: Duration::ZERO,
                long: false,
            };
            p.run_for("v", record, move |_| {
                let _ = s.send(name);
            })
            .await
        }
    };
    let first = tokio::spawn(record("v1", true));
    while pool.load().0 < 1 {
        tokio::task::yield_now().await;
    }
    let s = started.clone();
    let other = {
        let p = pool.clone();
        tokio::spawn(async move {
            p.run("a", move || {
                let _ = s.send("a");
            })
            .await
        })
    };
    while pool.load().0 < 2 {
        tokio::task::yield_now().await;
    }
    let _ = finish.send(());
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("v1"));
    assert_eq!(first.await.expect("task"), Ok(()));
    // Its answer came back with a's job waiting: the request's next record goes first.
    assert_eq!(record("v2", false).await, Ok(()));
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("v2"));
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("a"));
    assert_eq!(other.await.expect("task"), Ok(()));
    assert_eq!(blocking.await.expect("task"), Ok(()));
}

/// A tenant's checks and compiles are each known to run long apart: its one long compile (a
/// new schema) does not hold its checks back from the thread left for short jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_compile_holds_back_a_tenants_compiles_not_its_checks() {
    let clock = Arc::new(ManualClock::new());
    let pool = Arc::new(Pool::new(2, 2, Duration::from_secs(5), clock.clone()).expect("pool"));
    took(&pool, &clock, "a", 1_000).await;
    let c = clock.clone();
    assert_eq!(pool.compile("v", move || c.advance_ms(1_000)).await, Ok(()));
    while pool.load() != (0, 0) {
        tokio::task::yield_now().await;
    }
    let (started, starts) = mpsc::channel();
    let (a, finish_a) = hold(&pool, &started, "a");
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("a"));
    // a holds the long jobs' thread: v's check takes the other, its compile waits.
    let (s, pv) = (started.clone(), pool.clone());
    let compile = tokio::spawn(async move {
        pv.compile("v", move || {
            let _ = s.send("v compile");
        })
        .await
    });
    while pool.load() != (1, 1) {
        tokio::task::yield_now().await;
    }
    assert_eq!(pool.run("v", || "v check").await, Ok("v check"));
    assert!(
        starts.try_recv().is_err(),
        "the compile waits for a's thread"
    );
    let _ = finish_a.send(());
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("v compile"));
    assert_eq!(compile.await.expect("task"), Ok(()));
    assert_eq!(a.await.expect("task"), Ok(()));
}

/// Review 23 of #37: twelve fresh tenants, each with one 1.1 s check, took the thread left for
/// short jobs in turn. A tenant not seen lately is held back for its compiles as if it ran
/// long ones (a compile cannot be stopped); its checks are stopped as any short job's are
/// (review 27: its first checks after a restart were refused 429 behind attackers'). Once its
/// jobs were short it is not held back. A check past [`LONG_JOB`] but within what its record
/// pays for (a large valid record) does not make its tenant long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_not_seen_lately_is_held_back_with_the_long_ones() {
    let clock = Arc::new(ManualClock::new());
    let pool = Arc::new(Pool::new(2, 1, Duration::from_secs(5), clock.clone()).expect("pool"));
    took(&pool, &clock, "victim", 1).await;
    // A large record's check: 150 ms, its record pays for 200 ms.
    let c = clock.clone();
    let paid = ForRecord {
        request: 1,
        more: false,
        paid: Duration::from_millis(200),
        long: false,
    };
    assert_eq!(
        pool.run_for("victim", paid, move |_| c.advance_ms(150))
            .await,
        Ok(())
    );
    while pool.load() != (0, 0) {
        tokio::task::yield_now().await;
    }
    let (started, starts) = mpsc::channel();
    let (first, finish) = hold_as(&pool, &started, "fresh1", As::Compile);
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("fresh1"));
    let (second, finish2) = hold_as(&pool, &started, "fresh2", As::Compile);
    while pool.load() != (1, 1) {
        tokio::task::yield_now().await;
    }
    // The second fresh tenant waits; the victim's check takes the free thread.
    assert_eq!(pool.run("victim", || "checked").await, Ok("checked"));
    assert!(
        starts.try_recv().is_err(),
        "fresh2 waits for fresh1's thread"
    );
    let _ = finish.send(());
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("fresh2"));
    let _ = finish2.send(());
    assert_eq!(first.await.expect("task"), Ok(()));
    assert_eq!(second.await.expect("task"), Ok(()));
    // A fresh tenant's check runs as a short job.
    let told = pool.run_for("fresh3", paid, |told| told).await;
    assert_eq!(told, Ok(false), "a fresh tenant's check runs short");
}

/// Review 25 of #37: twelve tenants, each known for short checks, took the last thread in turn
/// with one 1.1 s check each. A check that ran long once (stopped as a short job) is queued
/// again with the long ones, whoever its tenant is: a second one waits for the first, and
/// another tenant's short check takes the free thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_ran_long_once_waits_with_the_long_ones_whoever_sends_it() {
    let pool = Arc::new(Pool::new(2, 1, Duration::from_secs(5), real()).expect("pool"));
    for tenant in ["a", "b", "victim"] {
        assert_eq!(pool.run(tenant, || ()).await, Ok(()));
    }
    while pool.load() != (0, 0) {
        tokio::task::yield_now().await;
    }
    let long = |request| ForRecord {
        request,
        more: false,
        paid: Duration::ZERO,
        long: true,
    };
    let (started, starts) = mpsc::channel();
    let (first, finish_a) = hold_as(&pool, &started, "a", As::Record(long(1)));
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("a"));
    let (second, finish_b) = hold_as(&pool, &started, "b", As::Record(long(2)));
    while pool.load() != (1, 1) {
        tokio::task::yield_now().await;
    }
    assert_eq!(pool.run("victim", || "checked").await, Ok("checked"));
    assert!(starts.try_recv().is_err(), "b's waits for a's thread");
    let _ = finish_a.send(());
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("b"));
    let _ = finish_b.send(());
    assert_eq!(first.await.expect("task"), Ok(()));
    assert_eq!(second.await.expect("task"), Ok(()));
}

/// A record's check is told whether it runs with the long jobs: not for a tenant known for
/// short ones or not seen lately (it then stops at what a short job may take), yes for a
/// check that ran long once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_is_told_whether_it_runs_with_the_long_ones() {
    let pool = Pool::new(2, 1, Duration::from_secs(5), real()).expect("pool");
    let record = |long| ForRecord {
        request: 1,
        more: false,
        paid: Duration::ZERO,
        long,
    };
    let told = |tenant: &'static str, long| pool.run_for(tenant, record(long), |told| told);
    assert_eq!(
        told("fresh", false).await,
        Ok(false),
        "not seen lately: short"
    );
    assert_eq!(told("fresh", true).await, Ok(true), "it ran long once");
}

/// Review 26 of #37: a 3 ms check that spanned a 100 ms pause of the process marked its
/// tenant as running long jobs for five minutes. Timed by its thread's CPU, a job that
/// waited without running is not long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_timed_by_its_threads_cpu_is_not_long_for_a_pause() {
    let clock = real();
    let pool =
        Pool::lingering(2, 1, Duration::from_secs(5), clock.clone(), LINGER, true).expect("pool");
    let pause = LONG_JOB + Duration::from_millis(50);
    for tenant in ["paused", "paused"] {
        assert_eq!(
            pool.run(tenant, move || std::thread::sleep(pause)).await,
            Ok(())
        );
    }
    let long = pool
        .shared
        .state
        .lock()
        .runs_long("paused", Kind::Check, clock.now_ns());
    assert!(!long);
    // On the clock, the same pause is a long job.
    let walled = Pool::new(2, 1, Duration::from_secs(5), clock.clone()).expect("pool");
    for tenant in ["paused", "paused"] {
        assert_eq!(
            walled.run(tenant, move || std::thread::sleep(pause)).await,
            Ok(())
        );
    }
    let long = walled
        .shared
        .state
        .lock()
        .runs_long("paused", Kind::Check, clock.now_ns());
    assert!(long);
}

mod past;
