//! Cluster mode against a real Redis: the lease scripts on their own (with a clock the test
//! steps, passed as an argument, never Redis's TIME), then replicas sharing one tenant budget
//! and the global budget within the stated bound, records and bytes charged together, Redis
//! killed and restarted under load, and a replica that disappears without leaving.
//!
//! Replicas run in this process, on one mock Kafka cluster, all on one manual clock; the test
//! hammers them step by step (advance the clock, send until every replica refuses), so the
//! admitted totals depend on the budgets, not on how fast the machine is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::exposition::metric;
use crate::common::*;
use floodgate::budget::{BudgetSpec, Clock, ManualClock, RateSpec};
use floodgate::cluster::{Ask, RedisStore};
use floodgate::config::Config;
use serde_json::json;

const TOPIC: &str = "test.cluster";

fn store(prefix: &str, clock: &Arc<ManualClock>) -> RedisStore {
    let clock: Arc<dyn Clock> = clock.clone();
    RedisStore::new(
        &redis_url(),
        prefix,
        Duration::from_millis(500),
        Duration::from_millis(200),
        Some(clock),
    )
    .expect("store")
}

fn spec(records: Option<(u64, u64)>, bytes: Option<(u64, u64)>) -> BudgetSpec {
    let rate = |v: Option<(u64, u64)>| v.map(|(per_sec, burst)| RateSpec { per_sec, burst });
    BudgetSpec {
        records: rate(records),
        bytes: rate(bytes),
    }
}

fn ask(want: u64, min: u64) -> Ask {
    Ask { want, min }
}

#[tokio::test]
async fn lease_grants_what_the_bucket_holds_and_refills_with_the_clock() {
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let s = store(&redis_prefix("refill"), &clock);
    s.connect().await.expect("redis");
    let key = s.tenant_key("acme");
    let budget = spec(Some((100, 50)), None);

    let g = s
        .lease(&key, &budget, ask(30, 1), Ask::default())
        .await
        .expect("lease");
    assert_eq!((g.records, g.left_records, g.wait), (30, 20, None));
    // Asking for more than is left grants what is left when the minimum is there.
    let g = s
        .lease(&key, &budget, ask(40, 5), Ask::default())
        .await
        .expect("lease");
    assert_eq!((g.records, g.left_records), (20, 0));
    // 100 ms at 100/s: 10 tokens back.
    clock.advance_ms(100);
    let g = s
        .lease(&key, &budget, ask(40, 1), Ask::default())
        .await
        .expect("lease");
    assert_eq!(g.records, 10);
    // Never above the burst, however long the wait.
    clock.advance_ms(60_000);
    let g = s
        .lease(&key, &budget, ask(1000, 1), Ask::default())
        .await
        .expect("lease");
    assert_eq!(g.records, 50);
}

#[tokio::test]
async fn a_short_lease_grants_nothing_in_either_bucket_and_says_how_long_to_wait() {
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let s = store(&redis_prefix("atomic"), &clock);
    s.connect().await.expect("redis");
    let key = s.tenant_key("acme");
    let budget = spec(Some((100, 100)), Some((1000, 1000)));

    // Empty the bytes bucket but for 100.
    let g = s
        .lease(&key, &budget, ask(1, 1), ask(900, 900))
        .await
        .expect("lease");
    assert_eq!((g.records, g.bytes), (1, 900));
    // Records are there, bytes are not: nothing is granted, records included.
    let g = s
        .lease(&key, &budget, ask(10, 10), ask(300, 300))
        .await
        .expect("lease");
    assert_eq!((g.records, g.bytes), (0, 0));
    assert_eq!((g.left_records, g.left_bytes), (99, 100));
    // 200 bytes missing at 1000/s: 200 ms.
    assert_eq!(g.wait, Some(Duration::from_millis(200)));
    // The refusal charged nothing: all 99 records are still there.
    let g = s
        .lease(&key, &budget, ask(99, 99), Ask::default())
        .await
        .expect("lease");
    assert_eq!(g.records, 99);
    // And at exactly the wait, the bytes are.
    clock.advance_ms(200);
    let g = s
        .lease(&key, &budget, Ask::default(), ask(300, 300))
        .await
        .expect("lease");
    assert_eq!((g.bytes, g.wait), (300, None));
}

#[tokio::test]
async fn given_back_tokens_can_be_leased_again_and_a_budget_change_keeps_the_level() {
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let s = store(&redis_prefix("giveback"), &clock);
    s.connect().await.expect("redis");
    let key = s.tenant_key("acme");
    let budget = spec(Some((10, 100)), None);

    let g = s
        .lease(&key, &budget, ask(100, 100), Ask::default())
        .await
        .expect("lease");
    assert_eq!(g.records, 100);
    s.give_back(&key, &budget, 40, 0).await.expect("give back");
    let g = s
        .lease(&key, &budget, ask(100, 1), Ask::default())
        .await
        .expect("lease");
    assert_eq!(g.records, 40, "exactly what was given back");

    // 60 left after a give-back of 60; then the budget changes to a burst of 30.
    s.give_back(&key, &budget, 60, 0).await.expect("give back");
    let smaller = spec(Some((1000, 30)), None);
    let g = s
        .lease(&key, &smaller, ask(1000, 1), Ask::default())
        .await
        .expect("lease");
    assert_eq!(
        g.records, 30,
        "the level is kept, clamped to the new burst; never refilled"
    );
}

#[tokio::test]
async fn members_are_counted_from_heartbeats_and_lapse() {
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let s = store(&redis_prefix("members"), &clock);
    s.connect().await.expect("redis");
    let ttl = Duration::from_millis(2000);
    let beat = |id: &'static str, leave: bool| {
        let s = &s;
        async move {
            let m = s.heartbeat(id, id, ttl, leave).await.expect("hb");
            assert!(!m.duplicate);
            m.members
        }
    };
    assert_eq!(beat("a", false).await, 1);
    assert_eq!(beat("b", false).await, 2);
    clock.advance_ms(1500);
    assert_eq!(beat("b", false).await, 2);
    clock.advance_ms(600);
    assert_eq!(beat("b", false).await, 1, "a lapsed");
    assert_eq!(beat("b", true).await, 0, "b left");
}

/// Two processes configured with one replica id would be counted as one member, and each
/// take too large a share: the second is told so and changes nothing; once the first has
/// lapsed (or left), the id is free again.
#[tokio::test]
async fn a_replica_id_held_by_another_live_process_is_refused() {
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let s = store(&redis_prefix("duplicate"), &clock);
    s.connect().await.expect("redis");
    let ttl = Duration::from_millis(2000);
    let first = s
        .heartbeat("gw-a", "process-1", ttl, false)
        .await
        .expect("hb");
    assert_eq!((first.members, first.duplicate), (1, false));
    let second = s
        .heartbeat("gw-a", "process-2", ttl, false)
        .await
        .expect("hb");
    assert_eq!(
        (second.members, second.duplicate),
        (2, true),
        "counted apart"
    );
    // The holder and its heartbeats so far: the count moves while it is alive.
    assert_eq!(second.holder, Some(("process-1".to_string(), 1)));
    s.heartbeat("gw-a", "process-1", ttl, false)
        .await
        .expect("hb");
    let third = s
        .heartbeat("gw-a", "process-2", ttl, false)
        .await
        .expect("hb");
    assert_eq!(third.holder, Some(("process-1".to_string(), 2)));
    let left = s
        .heartbeat("gw-a", "process-2", ttl, true)
        .await
        .expect("hb");
    assert_eq!(
        left.members, 1,
        "the impostor cannot take the first one out"
    );
    clock.advance_ms(2500);
    let later = s
        .heartbeat("gw-a", "process-2", ttl, false)
        .await
        .expect("hb");
    assert_eq!(
        (later.members, later.duplicate),
        (1, false),
        "free once lapsed"
    );
}

/// A cluster member's configuration: tenant "acme" on `test.*`, Redis at `url` under `prefix`.
fn member(bootstrap: &str, url: &str, prefix: &str, edit: impl Fn(&mut Config)) -> Config {
    let mut cfg = config(bootstrap);
    cfg.cluster.redis_url = Some(url.to_string());
    cfg.cluster.key_prefix = prefix.to_string();
    cfg.cluster.command_timeout_ms = 200;
    edit(&mut cfg);
    cfg
}

fn one_record() -> serde_json::Value {
    json!({"records": [{"value": "x"}]})
}

/// Sends one-record async requests round-robin until every gateway has refused once;
/// returns what each admitted. Any answer but 202 or 429 fails the test.
async fn hammer(http: &reqwest::Client, urls: &[(String, &str)]) -> Vec<u64> {
    let mut admitted = vec![0u64; urls.len()];
    let mut refused = vec![false; urls.len()];
    while refused.iter().any(|r| !r) {
        for (i, (url, key)) in urls.iter().enumerate() {
            if refused[i] {
                continue;
            }
            let response = http
                .post(format!("{url}?async=true"))
                .bearer_auth(key)
                .json(&one_record())
                .send()
                .await
                .expect("sent");
            match response.status().as_u16() {
                202 => admitted[i] += 1,
                429 => refused[i] = true,
                other => panic!("unexpected {other}: {:?}", response.text().await),
            }
        }
    }
    admitted
}

/// Runs `steps` steps of `step_ms` and returns the admitted total of each step.
async fn run_steps(
    clock: &ManualClock,
    http: &reqwest::Client,
    urls: &[(String, &str)],
    steps: usize,
    step_ms: u64,
) -> Vec<u64> {
    let mut totals = Vec::with_capacity(steps);
    for _ in 0..steps {
        clock.advance_ms(step_ms);
        totals.push(hammer(http, urls).await.iter().sum());
    }
    totals
}

/// The most admitted in any window of `window` consecutive steps.
fn worst_window(totals: &[u64], window: usize) -> u64 {
    totals
        .windows(window.min(totals.len()))
        .map(|w| w.iter().sum())
        .max()
        .unwrap_or(0)
}

async fn wait_for_metric(gw: &Gateway, name: &str, value: f64, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if metric(gw, name).await == Some(value) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{name} did not reach {value} within {within:?} (now {:?})",
            metric(gw, name).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const RATE: u64 = 500;
const BURST: u64 = 100;
const STEP_MS: u64 = 20;

fn limited(cfg: &mut Config) {
    cfg.tenants[0].records_per_sec = Some(RATE);
    cfg.tenants[0].records_burst = Some(BURST);
}

/// The stated bound for a window of `secs`: burst × (1 + ε) + rate × T.
fn bound(secs: f64, epsilon: f64) -> f64 {
    BURST as f64 * (1.0 + epsilon) + RATE as f64 * secs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_admit_one_tenant_budget_within_the_stated_bound() {
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("three");
    let mut gws = Vec::new();
    for _ in 0..3 {
        let cfg = member(&kafka.bootstrap_servers(), &redis_url(), &p, limited);
        gws.push(Gateway::start_clustered(cfg, clock.clone()).await);
    }
    let epsilon = 0.25; // [cluster] slice_fraction's default
    for gw in &gws {
        wait_for_metric(gw, "floodgate_cluster_members", 3.0, Duration::from_secs(5)).await;
    }
    let http = reqwest::Client::new();
    let urls: Vec<_> = gws.iter().map(|g| (g.url(TOPIC), KEY)).collect();
    let steps_per_sec = (1000 / STEP_MS) as usize;
    let totals = run_steps(&clock, &http, &urls, 10 * steps_per_sec, STEP_MS).await;
    for secs in [1usize, 5, 10] {
        let worst = worst_window(&totals, secs * steps_per_sec) as f64;
        let best_case_rate = RATE as f64 * secs as f64;
        assert!(
            worst <= bound(secs as f64, epsilon),
            "{secs} s: {worst} admitted, bound {}",
            bound(secs as f64, epsilon)
        );
        let least = totals
            .windows(secs * steps_per_sec)
            .map(|w| w.iter().sum::<u64>())
            .min()
            .unwrap_or(0) as f64;
        assert!(
            least >= 0.95 * best_case_rate,
            "{secs} s: only {least} admitted (rate × T = {best_case_rate})"
        );
    }
    // Redis was asked far less often than once per admitted request.
    let admitted: u64 = totals.iter().sum();
    let mut calls = 0.0;
    for gw in &gws {
        for outcome in ["granted", "refused"] {
            calls += metric(
                gw,
                &format!(
                    "floodgate_cluster_lease_calls_total{{scope=\"tenant\",outcome=\"{outcome}\"}}"
                ),
            )
            .await
            .unwrap_or(0.0);
        }
    }
    assert!(calls > 0.0, "the replicas leased from Redis");
    eprintln!("three replicas: {admitted} admitted, {calls} lease calls");

    // The same through one replica only: the others' idle slices do not starve it.
    clock.advance_ms(5_000);
    let one = &urls[..1];
    let totals = run_steps(&clock, &http, one, 5 * steps_per_sec, STEP_MS).await;
    let total: u64 = totals.iter().sum();
    assert!(
        total as f64 <= bound(5.0, epsilon) && total as f64 >= 0.95 * RATE as f64 * 5.0,
        "one replica over 5 s: {total}"
    );
    for gw in gws {
        gw.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_fits_records_but_not_bytes_charges_nothing_cluster_wide() {
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("bytes");
    let both = |cfg: &mut Config| {
        cfg.tenants[0].records_per_sec = Some(100);
        cfg.tenants[0].records_burst = Some(100);
        cfg.tenants[0].bytes_per_sec = Some(1000);
        cfg.tenants[0].bytes_burst = Some(1000);
    };
    let a = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &redis_url(), &p, both),
        clock.clone(),
    )
    .await;
    let b = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &redis_url(), &p, both),
        clock.clone(),
    )
    .await;
    // A spends most of the bytes: one record of 800 bytes.
    let big = json!({"records": [{"value": "v".repeat(800)}]});
    let (s, _, body) = post_json(&format!("{}?async=true", a.url(TOPIC)), KEY, &big).await;
    assert_eq!(s, 202, "{body}");
    // A leaves (giving back its unspent slice), so no refill of A's moves the shared state
    // while B is being tested.
    a.shutdown().await;
    let redis = redis::Client::open(redis_url()).expect("client");
    let mut conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let key = format!("{{{p}:tenant:acme}}");
    let before: Option<String> = redis::cmd("HGET")
        .arg(&key)
        .arg("r_tat")
        .query_async(&mut conn)
        .await
        .expect("hget");
    // B (which holds no slice yet) gets one record of 400 bytes: the records are there, the
    // bytes are not.
    let (s, h, body) = post_json(
        &format!("{}?async=true", b.url(TOPIC)),
        KEY,
        &json!({"records": [{"value": "v".repeat(400)}]}),
    )
    .await;
    assert_eq!(
        (s, body["reason"].as_str()),
        (429, Some("tenant_bytes")),
        "{body}"
    );
    let wait = body["retry_after_ms"].as_u64().unwrap_or(0);
    assert!(
        (1..=400).contains(&wait),
        "Retry-After from the shared state: {wait} ms"
    );
    assert!(h.contains_key("ratelimit"));
    let after: Option<String> = redis::cmd("HGET")
        .arg(&key)
        .arg("r_tat")
        .query_async(&mut conn)
        .await
        .expect("hget");
    assert_eq!(
        before, after,
        "the records bucket was not charged for the refused request"
    );
    // After the wait it is admitted (plus the JSON around the value: the early check counts
    // the declared body length, 26 bytes more, before the body is read).
    clock.advance_ms(wait + 26);
    let (s, _, body) = post_json(
        &format!("{}?async=true", b.url(TOPIC)),
        KEY,
        &json!({"records": [{"value": "v".repeat(400)}]}),
    )
    .await;
    assert_eq!(s, 202, "{body}");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_budget_holds_for_tenants_on_different_replicas() {
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("global");
    let two_tenants = |cfg: &mut Config| {
        cfg.tenants
            .push(tenant("other", "test-key-other", &["test.*"]));
        cfg.global.records_per_sec = Some(RATE);
        cfg.global.records_burst = Some(BURST);
    };
    let a = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &redis_url(), &p, two_tenants),
        clock.clone(),
    )
    .await;
    let b = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &redis_url(), &p, two_tenants),
        clock.clone(),
    )
    .await;
    let http = reqwest::Client::new();
    let urls = [(a.url(TOPIC), KEY), (b.url(TOPIC), "test-key-other")];
    let steps_per_sec = (1000 / STEP_MS) as usize;
    let totals = run_steps(&clock, &http, &urls, 5 * steps_per_sec, STEP_MS).await;
    let total: u64 = totals.iter().sum();
    assert!(
        total as f64 <= bound(5.0, 0.25),
        "two tenants on two replicas admitted {total} over 5 s against a global {RATE}/s"
    );
    assert!(total as f64 >= 0.95 * RATE as f64 * 5.0, "{total}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_serve_their_local_share_while_redis_is_down_and_share_again_when_it_is_back() {
    let kafka = mock_cluster(&[TOPIC]);
    let mut redis = OwnRedis::start();
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("outage");
    let fast = |cfg: &mut Config| {
        limited(cfg);
        cfg.cluster.heartbeat_ms = 200;
        // Heartbeats carry the stepped clock, which runs ahead of real time here (a second of
        // steps in a fraction of one): with a 1 s TTL a replica could count itself alone just
        // before Redis dies and take the whole budget as its share (seen 1 run in ~10).
        cfg.cluster.member_ttl_ms = 10_000;
    };
    let a = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &redis.url(), &p, fast),
        clock.clone(),
    )
    .await;
    let b = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &redis.url(), &p, fast),
        clock.clone(),
    )
    .await;
    for gw in [&a, &b] {
        wait_for_metric(gw, "floodgate_cluster_members", 2.0, Duration::from_secs(5)).await;
    }
    let http = reqwest::Client::new();
    let urls = [(a.url(TOPIC), KEY), (b.url(TOPIC), KEY)];
    let steps_per_sec = (1000 / STEP_MS) as usize;
    run_steps(&clock, &http, &urls, steps_per_sec, STEP_MS).await;

    redis.kill();
    let mut noticed = Duration::ZERO;
    for gw in [&a, &b] {
        noticed = noticed.max(
            wait_for_metric(
                gw,
                "floodgate_cluster_degraded",
                1.0,
                Duration::from_secs(5),
            )
            .await,
        );
    }
    // Each replica admits its share: rate / 2 and burst / 2, so the pair at most the budget.
    let totals = run_steps(&clock, &http, &urls, 2 * steps_per_sec, STEP_MS).await;
    let during: u64 = totals.iter().sum();
    assert!(
        during as f64 <= RATE as f64 * 2.0 + BURST as f64,
        "{during} admitted in 2 s with Redis down"
    );
    assert!(
        during as f64 >= 0.95 * RATE as f64 * 2.0,
        "kept serving: {during}"
    );

    redis.restart();
    let mut resumed = Duration::ZERO;
    for gw in [&a, &b] {
        resumed = resumed.max(
            wait_for_metric(
                gw,
                "floodgate_cluster_degraded",
                0.0,
                Duration::from_secs(10),
            )
            .await,
        );
    }
    let totals = run_steps(&clock, &http, &urls, 2 * steps_per_sec, STEP_MS).await;
    let after: u64 = totals.iter().sum();
    assert!(
        after as f64 <= bound(2.0, 0.25),
        "{after} admitted in 2 s after recovery"
    );
    assert!(after as f64 >= 0.95 * RATE as f64 * 2.0, "{after}");
    eprintln!("outage noticed within {noticed:?}, shared mode back within {resumed:?}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_vanishes_leaves_the_others_the_whole_rate() {
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("vanish");
    let fast = |cfg: &mut Config| {
        limited(cfg);
        cfg.cluster.heartbeat_ms = 200;
        cfg.cluster.member_ttl_ms = 1000;
    };
    let mut gws = Vec::new();
    for _ in 0..3 {
        let cfg = member(&kafka.bootstrap_servers(), &redis_url(), &p, fast);
        gws.push(Gateway::start_clustered(cfg, clock.clone()).await);
    }
    for gw in &gws {
        wait_for_metric(gw, "floodgate_cluster_members", 3.0, Duration::from_secs(5)).await;
    }
    let http = reqwest::Client::new();
    let urls: Vec<_> = gws.iter().map(|g| (g.url(TOPIC), KEY)).collect();
    let steps_per_sec = (1000 / STEP_MS) as usize;
    run_steps(&clock, &http, &urls, steps_per_sec, STEP_MS).await;
    // The third replica disappears without leaving (no give-back, no goodbye), holding
    // whatever slice it had.
    let gone = gws.pop().expect("three");
    gone.abort();
    // Members lapse by the shared clock: past their time-to-live, only the two that still
    // send heartbeats count.
    clock.advance_ms(1100);
    let started = Instant::now();
    for gw in &gws {
        wait_for_metric(gw, "floodgate_cluster_members", 2.0, Duration::from_secs(5)).await;
    }
    let recounted = started.elapsed();
    let urls: Vec<_> = gws.iter().map(|g| (g.url(TOPIC), KEY)).collect();
    let totals = run_steps(&clock, &http, &urls, 2 * steps_per_sec, STEP_MS).await;
    let total: u64 = totals.iter().sum();
    assert!(
        total as f64 >= 0.95 * RATE as f64 * 2.0,
        "the two left admitted {total} in 2 s (rate × T = {})",
        RATE * 2
    );
    assert!(total as f64 <= bound(2.0, 0.25), "{total}");
    eprintln!("members recounted {recounted:?} after the replica vanished");
    for gw in gws {
        gw.shutdown().await;
    }
}

/// The sum of every `floodgate_cluster_lease_calls_total` series.
async fn lease_calls(gw: &Gateway) -> f64 {
    let text = reqwest::get(gw.admin_url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .filter(|l| l.starts_with("floodgate_cluster_lease_calls_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A v3 stream far over its tenant's budget: its records are refused against the local
/// estimate, so Redis hears from it at most once per group of records, not once per record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_far_over_its_budget_makes_at_most_one_lease_call_per_chunk() {
    use std::io::Write as _;
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("stream-leases");
    let cfg = member(&kafka.bootstrap_servers(), &redis_url(), &p, |cfg| {
        cfg.tenants[0].records_per_sec = Some(10);
        cfg.tenants[0].records_burst = Some(10);
    });
    let gw = Gateway::start_clustered(cfg, clock.clone()).await;
    let before = lease_calls(&gw).await;
    const CHUNKS: usize = 100;
    let addr = gw.addr;
    let reports = tokio::task::spawn_blocking(move || {
        let (mut stream, mut reader) =
            crate::common::v3::open_stream(addr, &format!("/v3/clusters/c/topics/{TOPIC}/records"));
        let writer = std::thread::spawn(move || {
            let record = json!({"value": {"type": "STRING", "data": "x"}}).to_string();
            for _ in 0..CHUNKS {
                crate::common::v3::write_chunk(&mut stream, record.repeat(100).as_bytes())
                    .expect("write");
            }
            stream.write_all(b"0\r\n\r\n").expect("end");
            stream
        });
        let reports = crate::common::v3::read_reports(&mut reader);
        drop(writer.join());
        reports
    })
    .await
    .expect("client");
    assert_eq!(reports.len(), CHUNKS * 100);
    let written = reports.iter().filter(|r| r["error_code"] == 200).count();
    assert_eq!(
        written, 10,
        "the burst, nothing more (the clock stands still)"
    );
    let calls = lease_calls(&gw).await - before;
    eprintln!("lease calls: {calls}");
    assert!(
        calls <= CHUNKS as f64,
        "{calls} lease calls for {CHUNKS} chunks of 100 records"
    );
    gw.shutdown().await;
}

/// Replicas that cannot reach Redis when they start do not know how many they are: each takes
/// 1/`expected_replicas` of the budget, never the whole of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_started_while_redis_is_down_take_the_expected_share() {
    let kafka = mock_cluster(&[TOPIC]);
    let mut redis = OwnRedis::start();
    let url = redis.url();
    redis.kill();
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("down-at-start");
    let two = |cfg: &mut Config| {
        limited(cfg);
        cfg.cluster.expected_replicas = 2;
    };
    let a = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &url, &p, two),
        clock.clone(),
    )
    .await;
    let b = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &url, &p, two),
        clock.clone(),
    )
    .await;
    let http = reqwest::Client::new();
    let urls = [(a.url(TOPIC), KEY), (b.url(TOPIC), KEY)];
    let totals = run_steps(&clock, &http, &urls, 50, STEP_MS).await;
    let total: u64 = totals.iter().sum();
    let secs = 50.0 * STEP_MS as f64 / 1000.0;
    // Two shares of burst / 2 + rate / 2 × T: the budget once, not twice.
    let bound = BURST as f64 + RATE as f64 * secs;
    assert!(
        total as f64 <= bound,
        "{total} admitted in {secs} s against {bound}"
    );
    assert!(
        total as f64 >= 0.9 * RATE as f64 * secs,
        "kept serving: {total}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// Redis unreachable, a replica on its local share (burst / `expected_replicas`): a request
/// within the tenant's burst but over the share's is refused with a finite wait — until Redis
/// is tried again (one heartbeat) — and admitted once Redis answers. It used to be told
/// `Retry-After: 18446744074` (GCRA's "never", `u64::MAX` ns), records and bytes alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_local_share_is_told_to_come_back_when_redis_is_tried_again() {
    let kafka = mock_cluster(&[TOPIC]);
    let mut redis = OwnRedis::start();
    let url = redis.url();
    redis.kill();
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("over-share");
    let cfg = member(&kafka.bootstrap_servers(), &url, &p, |cfg| {
        limited(cfg); // 500/s, burst 100: a share of 25
        cfg.tenants[0].bytes_per_sec = Some(10_000);
        cfg.tenants[0].bytes_burst = Some(10_000); // a share of 2,500
        cfg.cluster.expected_replicas = 4;
        cfg.cluster.heartbeat_ms = 300;
    });
    let gw = Gateway::start_clustered(cfg, clock.clone()).await;
    let target = format!("{}?async=true", gw.url(TOPIC));
    let many = json!({"records": vec![json!({"value": "x"}); 60]});
    let large = json!({"records": [{"value": "y".repeat(4000)}]});
    for (body, reason) in [(&many, "tenant_records"), (&large, "tenant_bytes")] {
        let (s, h, a) = post_json(&target, KEY, body).await;
        assert_eq!((s, a["reason"].as_str()), (429, Some(reason)), "{a}");
        assert_eq!(a["retry_after_ms"], 300, "one heartbeat: {a}");
        assert_eq!(h["retry-after"], "1");
        for field in ["ratelimit", "ratelimit-policy"] {
            let value = h[field].to_str().expect("ascii");
            let numbers = value
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse::<u64>().ok());
            assert!(numbers.into_iter().all(|n| n <= 10_000), "{field}: {value}");
        }
    }
    redis.restart();
    wait_for_metric(
        &gw,
        "floodgate_cluster_degraded",
        0.0,
        Duration::from_secs(10),
    )
    .await;
    for body in [&many, &large] {
        let (s, _, a) = post_json(&target, KEY, body).await;
        assert_eq!(s, 202, "within the budget once it is shared again: {a}");
    }
    gw.shutdown().await;
}

/// A cluster member run by the test itself, so the test sees how its run ends (the harness's
/// gateways treat an error as a failure).
struct OwnRun {
    produce: std::net::SocketAddr,
    admin: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<floodgate::ShutdownReport, floodgate::app::BuildError>>,
}

impl OwnRun {
    async fn start(cfg: Config, clock: &Arc<ManualClock>) -> Self {
        let listeners = floodgate::Listeners {
            produce: tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
            admin: tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
        };
        let produce = listeners.produce.local_addr().expect("addr");
        let admin = listeners.admin.local_addr().expect("addr");
        let mut options = floodgate::RunOptions::new(clock.clone());
        options.admin_tokens =
            Some(floodgate::access::AdminTokens::parse(ADMIN_TOKENS).expect("tokens"));
        options.cluster_clock = Some(clock.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(floodgate::run(cfg, listeners, options, async {
            let _ = stopped.await;
        }));
        Self {
            produce,
            admin,
            stop: Some(stop),
            task,
        }
    }

    async fn metric(&self, name: &str) -> Option<f64> {
        let text = reqwest::get(format!("http://{}/metrics", self.admin))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// How the run ended, if it has within `limit`.
    async fn ended_within(
        &mut self,
        limit: Duration,
    ) -> Option<Result<floodgate::ShutdownReport, floodgate::app::BuildError>> {
        tokio::time::timeout(limit, &mut self.task)
            .await
            .ok()
            .map(|joined| joined.expect("run task"))
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }
}

fn assert_refused_as_duplicate(
    ended: Option<Result<floodgate::ShutdownReport, floodgate::app::BuildError>>,
    id: &str,
) {
    let error = ended
        .expect("the run ended")
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains(id) && error.contains("another live replica"),
        "{error}"
    );
}

/// A second process started with a replica id a live replica holds is refused at start-up,
/// with a clear error, instead of being counted as the same member: the holder's heartbeats
/// show it is alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_with_a_live_replicas_id_does_not_start() {
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("same-id");
    let same = |cfg: &mut Config| {
        cfg.cluster.replica_id = Some("gw-same".into());
        cfg.cluster.heartbeat_ms = 100;
    };
    let cfg = member(&kafka.bootstrap_servers(), &redis_url(), &p, same);
    let a = Gateway::start_clustered(cfg.clone(), clock.clone()).await;
    wait_for_metric(&a, "floodgate_cluster_members", 1.0, Duration::from_secs(5)).await;
    let mut b = OwnRun::start(cfg, &clock).await;
    assert_refused_as_duplicate(b.ended_within(Duration::from_secs(10)).await, "gw-same");
    assert_eq!(metric(&a, "floodgate_cluster_members").await, Some(1.0));
    a.shutdown().await;
}

/// `kill -9` and a fast restart: the new process finds its id held by its own dead
/// predecessor, whose heartbeat count stands still. It waits for that entry to lapse
/// (`member_ttl`, by the shared clock) and takes the id over, instead of being refused as a
/// duplicate of itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_after_a_kill_takes_its_id_back_once_the_old_entry_lapses() {
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("restart");
    let same = |cfg: &mut Config| {
        cfg.cluster.replica_id = Some("gw-phoenix".into());
        cfg.cluster.heartbeat_ms = 100;
        cfg.cluster.member_ttl_ms = 2_000;
    };
    let cfg = member(&kafka.bootstrap_servers(), &redis_url(), &p, same);
    let old = Gateway::start_clustered(cfg.clone(), clock.clone()).await;
    wait_for_metric(
        &old,
        "floodgate_cluster_members",
        1.0,
        Duration::from_secs(5),
    )
    .await;
    old.abort(); // no goodbye: its entry stays until it lapses
    let mut new = OwnRun::start(cfg, &clock).await;
    // Many of its own heartbeats later it has not given up: the holder does not beat.
    assert!(
        new.ended_within(Duration::from_secs(1)).await.is_none(),
        "not refused as a duplicate of itself"
    );
    clock.advance_ms(2_100);
    let started = Instant::now();
    while new.metric("floodgate_cluster_members").await != Some(1.0) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took the id over once the old entry lapsed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let response = reqwest::Client::new()
        .post(format!(
            "http://{}/v1/topics/{TOPIC}/records?async=true",
            new.produce
        ))
        .bearer_auth(KEY)
        .json(&one_record())
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status().as_u16(), 202);
    new.stop().await;
}

/// Two processes with one replica id, both started while Redis is down, cannot tell at start.
/// When Redis answers, the first to announce itself holds the id; the other sees the holder's
/// heartbeats advance, drains and stops with the start-up error (exit 64 from `main`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_replica_id_found_when_redis_comes_back_stops_one_of_the_two() {
    let kafka = mock_cluster(&[TOPIC]);
    let mut redis = OwnRedis::start();
    let url = redis.url();
    redis.kill();
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("twins");
    let same = |cfg: &mut Config| {
        cfg.cluster.replica_id = Some("gw-twin".into());
        cfg.cluster.heartbeat_ms = 100;
        cfg.cluster.member_ttl_ms = 10_000;
    };
    let cfg = member(&kafka.bootstrap_servers(), &url, &p, same);
    let mut a = OwnRun::start(cfg.clone(), &clock).await;
    let mut b = OwnRun::start(cfg, &clock).await;
    for run in [&a, &b] {
        let started = Instant::now();
        while run.metric("floodgate_cluster_degraded").await != Some(1.0) {
            assert!(started.elapsed() < Duration::from_secs(5), "serving");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    redis.restart();
    let started = Instant::now();
    let (stopped, kept) = loop {
        if let Some(ended) = a.ended_within(Duration::from_millis(50)).await {
            break (ended, b);
        }
        if let Some(ended) = b.ended_within(Duration::from_millis(50)).await {
            break (ended, a);
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "one of the two stops"
        );
    };
    assert_refused_as_duplicate(Some(stopped), "gw-twin");
    eprintln!("stopped {:?} after Redis came back", started.elapsed());
    assert_eq!(kept.metric("floodgate_cluster_members").await, Some(1.0));
    assert_eq!(kept.metric("floodgate_cluster_degraded").await, Some(0.0));
    kept.stop().await;
}

/// Redis paused again and again (`CLIENT PAUSE`, the flapping case): every stall sends the
/// replicas to their local shares, which carry on from one stall to the next instead of
/// starting full, so the whole run stays within the stated bound — burst × (1 + ε) + rate × T
/// plus rate / N for the time each replica spent on its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_redis_stalls_cost_no_more_than_the_time_spent_on_local_shares() {
    const RATE_F: u64 = 100;
    const BURST_F: u64 = 1000;
    let kafka = mock_cluster(&[TOPIC]);
    let redis = OwnRedis::start();
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("flapping");
    let flappy = |cfg: &mut Config| {
        cfg.tenants[0].records_per_sec = Some(RATE_F);
        cfg.tenants[0].records_burst = Some(BURST_F);
        cfg.cluster.heartbeat_ms = 100;
        cfg.cluster.member_ttl_ms = 60_000;
        cfg.cluster.expected_replicas = 2;
    };
    let a = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &redis.url(), &p, flappy),
        clock.clone(),
    )
    .await;
    let b = Gateway::start_clustered(
        member(&kafka.bootstrap_servers(), &redis.url(), &p, flappy),
        clock.clone(),
    )
    .await;
    for gw in [&a, &b] {
        wait_for_metric(gw, "floodgate_cluster_members", 2.0, Duration::from_secs(5)).await;
    }
    let port = redis.port;
    let pauser = tokio::task::spawn_blocking(move || {
        for _ in 0..8 {
            std::thread::sleep(Duration::from_millis(400));
            let paused = std::process::Command::new("redis-cli")
                .args(["-p", &port.to_string(), "CLIENT", "PAUSE", "300", "ALL"])
                .output()
                .expect("redis-cli");
            assert!(paused.status.success());
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let http = reqwest::Client::new();
    let urls = [(a.url(TOPIC), KEY), (b.url(TOPIC), KEY)];
    let (mut total, mut steps) = (0u64, 0u64);
    while !pauser.is_finished() || steps < 300 {
        clock.advance_ms(STEP_MS);
        steps += 1;
        total += hammer(&http, &urls).await.iter().sum::<u64>();
    }
    pauser.await.expect("pauser");
    // What each replica says it spent on its shares, by the same stepped clock.
    let (mut shared, mut stalls) = (0.0, 0.0);
    for gw in [&a, &b] {
        shared += metric(gw, "floodgate_cluster_local_share_seconds_total")
            .await
            .unwrap_or(0.0);
        stalls += metric(gw, "floodgate_cluster_degradations_total")
            .await
            .unwrap_or(0.0);
    }
    let secs = (steps * STEP_MS) as f64 / 1000.0;
    let bound = BURST_F as f64 * 1.25 + RATE_F as f64 * secs + (RATE_F as f64 / 2.0) * shared;
    eprintln!(
        "{total} admitted in {secs} s ({stalls} stalls, {shared:.2} s on shares); bound {bound}"
    );
    assert!(stalls >= 4.0, "the stalls were noticed: {stalls}");
    assert!(total as f64 <= bound, "{total} > {bound}");
    a.shutdown().await;
    b.shutdown().await;
}

/// A stream within its budget is served as a `/v1` request would be: the slices lack tokens
/// for a whole group of records, and one lease call gets them for all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_within_its_budget_is_admitted_whole_in_cluster_mode() {
    use std::io::Write as _;
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let p = redis_prefix("stream-in-budget");
    let cfg = member(&kafka.bootstrap_servers(), &redis_url(), &p, |cfg| {
        cfg.tenants[0].records_per_sec = Some(1000);
        cfg.tenants[0].records_burst = Some(2000);
    });
    let gw = Gateway::start_clustered(cfg, clock.clone()).await;
    let addr = gw.addr;
    let record = json!({"value": {"type": "STRING", "data": "x"}}).to_string();
    let (mut stream, mut reader) =
        crate::common::v3::open_stream(addr, &format!("/v3/clusters/c/topics/{TOPIC}/records"));
    let mut reports = tokio::task::spawn_blocking(move || {
        assert_eq!(crate::common::v3::read_head(&mut reader), 200);
        crate::common::v3::ReportReader::new(reader)
    });
    crate::common::v3::write_chunk(&mut stream, record.repeat(1000).as_bytes()).expect("write");
    let mut codes = Vec::new();
    let mut reader = (&mut reports).await.expect("head");
    let take = |reader: crate::common::v3::ReportReader<_>, n: usize| {
        tokio::task::spawn_blocking(move || {
            let mut reader = reader;
            let got: Vec<serde_json::Value> = (0..n).filter_map(|_| reader.next()).collect();
            (reader, got)
        })
    };
    let (r, got) = take(reader, 1000).await.expect("reports");
    reader = r;
    codes.extend(got.iter().map(|g| g["error_code"].as_i64().unwrap_or(0)));
    for _ in 0..5 {
        clock.advance_ms(200);
        crate::common::v3::write_chunk(&mut stream, record.repeat(200).as_bytes()).expect("write");
        let (r, got) = take(reader, 200).await.expect("reports");
        reader = r;
        codes.extend(got.iter().map(|g| g["error_code"].as_i64().unwrap_or(0)));
    }
    stream.write_all(b"0\r\n\r\n").expect("end");
    assert_eq!(codes.len(), 2000);
    let refused = codes.iter().filter(|c| **c != 200).count();
    assert_eq!(refused, 0, "every record within the budget is written");
    drop(reader);
    gw.shutdown().await;
}
