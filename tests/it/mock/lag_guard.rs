//! Lag guards against librdkafka's mock cluster (correct watermarks and group offsets): a
//! real consumer in group G reads the guarded topic at a rate the test sets and commits;
//! producers offer more through floodgate. The guard caps them at C / headroom while the
//! lag would take too long to drain, lifts the cap when the consumer catches up, caps at the
//! floor when the consumer stops, and lets go when offsets cannot be read. (The guard's
//! arithmetic is unit-tested with a stepped clock in `src/lag/guard.rs` and
//! `src/lag_agent/tests.rs`.)
//!
//! Offered load and consumption run on the real clock: assertions are on bands, each naming
//! the time it allows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::load::offer;
use crate::common::*;
use floodgate::config::{Config, LagGuardConfig};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use reqwest::Method;
use serde_json::json;

const GUARDED: &str = "test.orders";
const FREE: &str = "test.payments";
const GROUP: &str = "orders-readers";

fn guard() -> LagGuardConfig {
    LagGuardConfig {
        name: "orders".into(),
        topics: vec![GUARDED.into()],
        group: GROUP.into(),
        max_recovery_s: 10.0,
        max_lag_records: None,
        headroom: 1.2,
        interval_ms: 250,
        floor_records_per_sec: 0,
        release_fraction: 0.5,
        caught_up_s: 1.0,
        hold_s: 2.0,
        rate_window_s: 2.0,
        stopped_after_s: 1.0,
    }
}

fn with_guard(cfg: &mut Config) {
    cfg.lag_guards = vec![guard()];
}

/// A gateway guarding [`GUARDED`] (and not [`FREE`]), and a [`Reader`] of the guarded topic
/// at `rate` records/s.
async fn start(rate: u64) -> (Cluster, Gateway, Reader) {
    let cluster = mock_cluster(&[GUARDED, FREE]);
    let mut cfg = config(&cluster.bootstrap_servers());
    with_guard(&mut cfg);
    let gw = Gateway::start(cfg).await;
    let reader = Reader::start(cluster.bootstrap_servers(), rate);
    (cluster, gw, reader)
}

/// A consumer of group [`GROUP`] that reads [`GUARDED`] at `rate` records/s (changeable;
/// 0 stops it) and commits what it read every 100 ms. It never joins the group (assigned
/// partitions, explicit commits), as a standalone consumer does.
struct Reader {
    rate: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reader {
    fn start(bootstrap: String, rate: u64) -> Self {
        let rate = Arc::new(AtomicU64::new(rate));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (rate.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("group.id", GROUP)
                .set("enable.auto.commit", "false")
                .create()
                .expect("consumer");
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(GUARDED, 0, Offset::Beginning)
                .expect("partition");
            consumer.assign(&tpl).expect("assign");
            drop(tpl);
            let mut next_offset: Option<i64> = None;
            let mut allowance = 0.0f64;
            let mut last = Instant::now();
            let mut committed_at = Instant::now();
            while !s.load(Relaxed) {
                let now = Instant::now();
                let per_sec = r.load(Relaxed) as f64;
                // Up to a tenth of a second's worth may be saved up.
                allowance = (allowance + per_sec * (now - last).as_secs_f64()).min(per_sec / 10.0);
                last = now;
                while allowance >= 1.0 {
                    match consumer.poll(Duration::from_millis(5)) {
                        Some(Ok(m)) => {
                            use rdkafka::Message;
                            next_offset = Some(m.offset() + 1);
                            allowance -= 1.0;
                        }
                        _ => break,
                    }
                }
                if committed_at.elapsed() >= Duration::from_millis(100) {
                    if let Some(o) = next_offset {
                        let mut c = TopicPartitionList::new();
                        c.add_partition_offset(GUARDED, 0, Offset::Offset(o))
                            .expect("offset");
                        let _ = consumer.commit(&c, CommitMode::Sync);
                    }
                    committed_at = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Self {
            rate,
            stop,
            thread: Some(thread),
        }
    }

    fn set_rate(&self, rate: u64) {
        self.rate.store(rate, Relaxed);
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Default)]
struct Tally {
    admitted: AtomicU64,
    lag_refusals: AtomicU64,
    /// Retry-After of the last consumer_lag refusal, and whether its detail named topic and
    /// group.
    retry_after: AtomicU64,
    detail_ok: AtomicBool,
    other: AtomicU64,
}

/// The producers of a test, each counting what it hears in a [`Tally`], until stopped.
#[derive(Default)]
struct Offered {
    stop: Arc<AtomicBool>,
    producers: Vec<tokio::task::JoinHandle<()>>,
}

impl Offered {
    /// One more [`producer`], counting in `tally`.
    fn add(&mut self, gw: &Gateway, topic: &str, per_sec: u64, tally: &Arc<Tally>) {
        let p = producer(gw, topic, per_sec, self.stop.clone(), tally.clone());
        self.producers.push(p);
    }

    /// One producer offering 500 records/s to [`GUARDED`]; its tally.
    fn guarded(gw: &Gateway) -> (Self, Arc<Tally>) {
        let (mut offered, tally) = (Self::default(), Arc::new(Tally::default()));
        offered.add(gw, GUARDED, 50, &tally);
        (offered, tally)
    }

    /// Stops every producer and waits for it.
    async fn stop(self) {
        self.stop.store(true, Relaxed);
        for p in self.producers {
            let _ = p.await;
        }
    }
}

/// Sends 10-record async requests to `topic` at `per_sec` requests/s until `stop`.
fn producer(
    gw: &Gateway,
    topic: &str,
    per_sec: u64,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> tokio::task::JoinHandle<()> {
    offer(
        gw.url(topic),
        KEY,
        per_sec,
        stop,
        move |status, headers, body| match (status, body["reason"].as_str()) {
            (202, _) => {
                tally.admitted.fetch_add(10, Relaxed);
            }
            (429, Some("consumer_lag")) => {
                let retry = headers
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                tally.lag_refusals.fetch_add(1, Relaxed);
                tally.retry_after.store(retry.unwrap_or(0), Relaxed);
                let detail = body["detail"].as_str().unwrap_or("");
                tally
                    .detail_ok
                    .store(detail.contains(GROUP) && detail.contains(GUARDED), Relaxed);
            }
            _ => {
                tally.other.fetch_add(1, Relaxed);
            }
        },
    )
}

async fn metrics(gw: &Gateway) -> String {
    crate::common::exposition::scrape(gw).await
}

/// The value of the series `name{labels}` (labels as written in the exposition).
fn series(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(labels))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

async fn lag(gw: &Gateway) -> f64 {
    series(
        &metrics(gw).await,
        "floodgate_consumer_lag_records",
        &format!("topic=\"{GUARDED}\""),
    )
}

/// Waits (polling the metrics) until `check` holds, at most `limit`; returns the time taken.
async fn wait_for(
    gw: &Gateway,
    limit: Duration,
    what: &str,
    check: impl Fn(&str) -> bool,
) -> Duration {
    let t0 = Instant::now();
    loop {
        if check(&metrics(gw).await) {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn capping(text: &str) -> bool {
    series(text, "floodgate_lag_guard_capping", "guard=\"orders\"") == 1.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_caps_producers_at_its_rate_over_headroom_and_the_cap_lifts_when_it_catches_up(
) {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_cluster, gw, reader) = start(500).await;
    let guarded = Arc::new(Tally::default());
    let free = Arc::new(Tally::default());
    // 3,000 records/s offered to the guarded topic, 1,000/s to an unguarded one.
    let mut load = Offered::default();
    load.add(&gw, GUARDED, 150, &guarded);
    load.add(&gw, GUARDED, 150, &guarded);
    load.add(&gw, FREE, 100, &free);

    // The lag grows by ~2,500/s: the recovery time is infinite, the guard caps.
    let took = wait_for(&gw, Duration::from_secs(10), "capping", capping).await;
    eprintln!("capping after {took:?}");
    // Let the cap settle for two rate windows, then measure five seconds.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (admitted0, lag0, free0) = (
        guarded.admitted.load(Relaxed),
        lag(&gw).await,
        free.admitted.load(Relaxed),
    );
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let secs = window.elapsed().as_secs_f64();
    let rate = (guarded.admitted.load(Relaxed) - admitted0) as f64 / secs;
    let free_rate = (free.admitted.load(Relaxed) - free0) as f64 / secs;
    let lag1 = lag(&gw).await;
    let text = metrics(&gw).await;
    let consumer = series(&text, "floodgate_lag_consumer_rate", "guard=\"orders\"");
    eprintln!(
        "capped: admitted {rate:.0}/s (cap {:.0}, consumer {consumer:.0}/s), lag {lag0} -> {lag1}, unguarded {free_rate:.0}/s",
        series(&text, "floodgate_lag_guard_cap", "guard=\"orders\"")
    );
    assert!(capping(&text), "still capping through the window");
    // Why, in the admin API: what set the cap, what keeps it, and the demand it holds back.
    let (_, view) = admin_get(&gw, "/admin/lag-guards/orders").await;
    assert!(
        matches!(view["cap_basis"].as_str(), Some("drain" | "recovery")),
        "{view}"
    );
    assert!(view["release_blocked_by"].is_string(), "{view}");
    let offered = view["offered_rate"].as_f64().unwrap_or(0.0);
    assert!(
        (2_500.0..=3_500.0).contains(&offered),
        "offered 3,000/s: {view}"
    );
    assert!(
        view["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("capped")),
        "{view}"
    );
    let target = 500.0 / 1.2;
    assert!(
        (rate - target).abs() <= 0.15 * target,
        "admitted {rate:.0}/s, expected 500 / 1.2 = {target:.0} ± 15 %"
    );
    assert!(
        lag1 < lag0,
        "the lag shrinks under the cap: {lag0} -> {lag1}"
    );
    assert!(guarded.lag_refusals.load(Relaxed) > 0);
    assert!(
        guarded.detail_ok.load(Relaxed),
        "the detail names topic and group"
    );
    assert!(guarded.retry_after.load(Relaxed) >= 1);
    assert!(
        free_rate >= 0.9 * 1_000.0,
        "the unguarded topic is not capped: {free_rate:.0}/s of 1,000"
    );
    assert_eq!(free.lag_refusals.load(Relaxed), 0);
    assert_eq!(guarded.other.load(Relaxed) + free.other.load(Relaxed), 0);

    // The consumer speeds up beyond what producers offer: the cap lifts.
    reader.set_rate(6_000);
    let lifted = wait_for(&gw, Duration::from_secs(10), "cap lifted", |t| !capping(t)).await;
    eprintln!("cap lifted {lifted:?} after the consumer sped up");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let admitted0 = guarded.admitted.load(Relaxed);
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rate = (guarded.admitted.load(Relaxed) - admitted0) as f64 / window.elapsed().as_secs_f64();
    eprintln!("after recovery: admitted {rate:.0}/s of 3,000 offered");
    assert!(
        rate >= 0.9 * 3_000.0,
        "back to the tenant's budget (unlimited): {rate:.0}/s of 3,000 offered"
    );
    assert!(!capping(&metrics(&gw).await), "and stays lifted");

    load.stop().await;
    drop(reader);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_consumer_caps_producers_at_the_floor_and_they_resume_when_it_does() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_cluster, gw, reader) = start(3_000).await;
    let (offered, tally) = Offered::guarded(&gw);
    // 500/s offered, read at up to 3,000/s: no cap (once the consumer has started reading;
    // until then it counts as stopped).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let refused0 = tally.lag_refusals.load(Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!capping(&metrics(&gw).await));
    assert_eq!(
        tally.lag_refusals.load(Relaxed),
        refused0,
        "no refusals while it keeps up"
    );

    reader.set_rate(0);
    let took = wait_for(&gw, Duration::from_secs(10), "floor", |t| {
        capping(t) && series(t, "floodgate_lag_guard_cap", "guard=\"orders\"") == 0.0
    })
    .await;
    eprintln!("capped at the floor {took:?} after the consumer stopped");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let admitted0 = tally.admitted.load(Relaxed);
    let refused0 = tally.lag_refusals.load(Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        tally.admitted.load(Relaxed),
        admitted0,
        "nothing is admitted while the consumer is stopped (floor 0)"
    );
    assert!(tally.lag_refusals.load(Relaxed) > refused0);
    assert_eq!(
        tally.retry_after.load(Relaxed),
        1,
        "Retry-After: one interval, rounded up"
    );

    reader.set_rate(6_000);
    let took = wait_for(&gw, Duration::from_secs(10), "resumed", |t| !capping(t)).await;
    eprintln!("cap lifted {took:?} after the consumer resumed");
    let admitted0 = tally.admitted.load(Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(tally.admitted.load(Relaxed) > admitted0, "admitted again");

    offered.stop().await;
    drop(reader);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_offsets_release_the_guard_after_hold_s_and_it_says_so() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (cluster, gw, reader) = start(0).await;
    let (offered, tally) = Offered::guarded(&gw);
    // A consumer that has committed once and then stops: capped at the floor.
    reader.set_rate(100);
    wait_for(&gw, Duration::from_secs(10), "a first commit", |t| {
        series(t, "floodgate_consumer_lag_records", GUARDED).is_finite()
    })
    .await;
    reader.set_rate(0);
    wait_for(&gw, Duration::from_secs(10), "capping", capping).await;

    // Offsets become unreadable: OffsetFetch fails with a non-retriable error.
    let errors =
        [rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED; 500];
    cluster.request_errors(rdkafka::types::RDKafkaApiKey::OffsetFetch, &errors);
    let failing = Instant::now();
    wait_for(&gw, Duration::from_secs(5), "holding", |t| {
        series(t, "floodgate_lag_guard_phase", "phase=\"holding\"") == 1.0
    })
    .await;
    assert!(
        capping(&metrics(&gw).await),
        "the last cap holds for hold_s"
    );
    let released = wait_for(&gw, Duration::from_secs(10), "released", |t| {
        series(t, "floodgate_lag_guard_phase", "phase=\"released\"") == 1.0
    })
    .await;
    let after = failing.elapsed();
    eprintln!(
        "released {after:?} after offsets became unreadable (hold_s 2 s; waited {released:?})"
    );
    assert!(after >= Duration::from_secs(2), "not before hold_s");
    let text = metrics(&gw).await;
    assert!(!capping(&text));
    assert_eq!(
        series(
            &text,
            "floodgate_lag_guard_fail_opens_total",
            "guard=\"orders\""
        ),
        1.0
    );
    let (s, view) = admin_get(&gw, "/admin/lag-guards/orders").await;
    assert_eq!(s, 200);
    assert_eq!(view["phase"], "released");
    assert!(
        view["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("uthoriz")),
        "{view}"
    );
    // Fail open: producers follow the static budgets.
    let admitted0 = tally.admitted.load(Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(tally.admitted.load(Relaxed) > admitted0);

    offered.stop().await;
    cluster.clear_request_errors(rdkafka::types::RDKafkaApiKey::OffsetFetch);
    drop(reader);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_are_administered_live() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = mock_cluster(&[GUARDED]);
    let gw = Gateway::start(config(&cluster.bootstrap_servers())).await;
    let (s, list) = admin_get(&gw, "/admin/lag-guards").await;
    assert_eq!((s, list["guards"].as_array().map(Vec::len)), (200, Some(0)));

    let mut body = serde_json::to_value(guard()).expect("json");
    body.as_object_mut().expect("object").remove("name");
    let (s, created) = admin_put(&gw, "/admin/lag-guards/orders", body.clone()).await;
    assert_eq!(s, 201, "{created}");
    assert_eq!(created["guard"]["group"], GROUP);
    body["headroom"] = json!(2.0);
    let (s, replaced) = admin_put(&gw, "/admin/lag-guards/orders", body.clone()).await;
    assert_eq!(
        (s, replaced["guard"]["headroom"].as_f64()),
        (200, Some(2.0))
    );

    body["headroom"] = json!(0.5);
    let (s, bad) = admin_put(&gw, "/admin/lag-guards/orders", body.clone()).await;
    assert_eq!(
        (s, bad["error"].as_str(), bad["field"].as_str()),
        (422, Some("invalid_field"), Some("headroom")),
        "{bad}"
    );
    body["headroom"] = json!(1.2);
    body["name"] = json!("other");
    let (s, _) = admin_put(&gw, "/admin/lag-guards/orders", body).await;
    assert_eq!(s, 422, "a name in the body must match the path");

    let (s, _) = admin_delete(&gw, "/admin/lag-guards/orders").await;
    assert_eq!(s, 204);
    let (s, gone) = admin_get(&gw, "/admin/lag-guards/orders").await;
    assert_eq!(
        (s, gone["error"].as_str()),
        (404, Some("lag_guard_not_found"))
    );
    let (s, _) = admin(&gw, Method::DELETE, "/admin/lag-guards/orders", None, None).await;
    assert_eq!(s, 401, "admin token required");
    gw.shutdown().await;
}
