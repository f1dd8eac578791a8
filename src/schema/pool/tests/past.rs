//! What a tenant's jobs ran past what their records pay for, together: review 28 of #37's
//! twelve tenants, each refused a 75 ms check every 0.4 s, were each short one job at a time
//! and took both threads in turn.

use super::*;

impl Unpaid for () {}

/// Here, whether a check refused its record: then no budget pays for any of its run.
impl Unpaid for bool {
    fn unpaid(&self) -> bool {
        *self
    }
}

fn runs_long(pool: &Pool, clock: &ManualClock, tenant: &str) -> bool {
    let now = clock.now_ns();
    pool.shared.state.lock().runs_long(tenant, Kind::Check, now)
}

/// Two jobs each 60 ms past what they pay for mark their tenant as running long, as one of
/// 120 ms would: it holds the one thread of two left to tenants running long jobs, and
/// another's job waits for it while a short tenant's starts on the other. Jobs apart by
/// [`LONG_FOR`] are not summed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_jobs_past_their_price_together_mark_their_tenant_as_running_long() {
    let clock = Arc::new(ManualClock::new());
    let pool = Arc::new(Pool::new(2, 1, Duration::from_secs(5), clock.clone()).expect("pool"));
    took(&pool, &clock, "a", 60).await;
    assert!(!runs_long(&pool, &clock, "a"), "one job of 60 ms is short");
    took(&pool, &clock, "a", 60).await;
    assert!(runs_long(&pool, &clock, "a"), "two of them are not");
    took(&pool, &clock, "b", 60).await;
    took(&pool, &clock, "c", 1_000).await;
    let (started, starts) = mpsc::channel();
    let (a, finish_a) = hold(&pool, &started, "a");
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("a"));
    let (c, finish_c) = hold(&pool, &started, "c");
    while pool.load() != (1, 1) {
        tokio::task::yield_now().await;
    }
    assert_eq!(pool.run("b", || "b ran").await, Ok("b ran"));
    assert!(starts.try_recv().is_err(), "c waits for a's thread");
    let _ = finish_a.send(());
    assert_eq!(starts.recv_timeout(Duration::from_secs(5)), Ok("c"));
    let _ = finish_c.send(());
    assert_eq!(a.await.expect("task"), Ok(()));
    assert_eq!(c.await.expect("task"), Ok(()));
    // b's 60 ms, and another 60 ms once LONG_FOR passed: not summed.
    clock.advance_ms(u64::try_from(LONG_FOR.as_millis()).expect("ms"));
    took(&pool, &clock, "b", 60).await;
    assert!(!runs_long(&pool, &clock, "b"));
}

/// A check its record pays 1 s for runs 150 ms: short if it passed, long if it refused its
/// record (then nothing paid for it).
#[tokio::test]
async fn a_check_that_refused_its_record_counts_whole() {
    let clock = Arc::new(ManualClock::new());
    let pool = Pool::new(1, 1, Duration::from_secs(5), clock.clone()).expect("pool");
    let record = ForRecord {
        request: 1,
        more: false,
        paid: Duration::from_secs(1),
        long: false,
    };
    for (tenant, refused) in [("passed", false), ("refused", true)] {
        let c = clock.clone();
        let ran = pool
            .run_for(tenant, record, move |_| {
                c.advance_ms(150);
                refused
            })
            .await;
        assert_eq!(ran, Ok(refused));
        while pool.load() != (0, 0) {
            tokio::task::yield_now().await;
        }
    }
    assert!(!runs_long(&pool, &clock, "passed"));
    assert!(runs_long(&pool, &clock, "refused"));
}
