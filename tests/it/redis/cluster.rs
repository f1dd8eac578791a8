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

use crate::common::exposition::{metric, metric_at, scrape, sum, value, wait_for_metric};
use crate::common::v3::{open_stream, read_head, stream_chunks, write_chunk, ReportReader};
use crate::common::*;
use floodgate::budget::{BudgetSpec, Clock, ManualClock, PerDimension, RateSpec};
use floodgate::cluster::{Ask, Grant, Membership, RedisStore};
use floodgate::config::Config;
use floodgate::record::Charge;
use serde_json::json;

pub(super) const TOPIC: &str = "test.cluster";

/// The clock every test here steps: far from zero, as a running gateway's would be.
pub(super) fn stepped_clock() -> Arc<ManualClock> {
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    clock
}

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

/// A store on the shared Redis under a key prefix of `test`'s own, connected, and the clock
/// its scripts are given: how each test of the scripts on their own starts.
pub(super) async fn connected_store(test: &str) -> (Arc<ManualClock>, RedisStore) {
    let clock = stepped_clock();
    let s = store(&redis_prefix(test), &clock);
    s.connect().await.expect("redis");
    (clock, s)
}

fn spec(records: Option<(u64, u64)>, bytes: Option<(u64, u64)>) -> BudgetSpec {
    let rate = |v: Option<(u64, u64)>| v.map(|(per_sec, burst)| RateSpec { per_sec, burst });
    BudgetSpec {
        records: rate(records),
        bytes: rate(bytes),
    }
}

/// An ask of a caller that never heard of the bucket: a bucket with no state is full to it.
fn ask(want: u64, min: u64) -> Ask {
    Ask {
        want,
        min,
        level: u64::MAX,
    }
}

/// One lease from the pair at `key`, which Redis must answer.
async fn lease(s: &RedisStore, key: &str, budget: &BudgetSpec, records: Ask, bytes: Ask) -> Grant {
    s.lease(key, budget, PerDimension { records, bytes })
        .await
        .expect("lease")
}

/// The heartbeats' time-to-live in the membership tests.
const MEMBER_TTL: Duration = Duration::from_millis(2000);

/// One heartbeat of replica `id` from process `instance` (or its leaving), which Redis must
/// answer.
async fn beat(s: &RedisStore, id: &str, instance: &str, leave: bool) -> Membership {
    s.heartbeat(id, instance, MEMBER_TTL, leave)
        .await
        .expect("hb")
}

#[tokio::test]
async fn lease_grants_what_the_bucket_holds_and_refills_with_the_clock() {
    let (clock, s) = connected_store("refill").await;
    let key = s.tenant_key("acme");
    let budget = spec(Some((100, 50)), None);

    let g = lease(&s, &key, &budget, ask(30, 1), Ask::default()).await;
    assert_eq!((g.granted.records, g.left.records, g.wait), (30, 20, None));
    // Asking for more than is left grants what is left when the minimum is there.
    let g = lease(&s, &key, &budget, ask(40, 5), Ask::default()).await;
    assert_eq!((g.granted.records, g.left.records), (20, 0));
    // 100 ms at 100/s: 10 tokens back.
    clock.advance_ms(100);
    let g = lease(&s, &key, &budget, ask(40, 1), Ask::default()).await;
    assert_eq!(g.granted.records, 10);
    // Never above the burst, however long the wait.
    clock.advance_ms(60_000);
    let g = lease(&s, &key, &budget, ask(1000, 1), Ask::default()).await;
    assert_eq!(g.granted.records, 50);
}

#[tokio::test]
async fn a_short_lease_grants_nothing_in_either_bucket_and_says_how_long_to_wait() {
    let (clock, s) = connected_store("atomic").await;
    let key = s.tenant_key("acme");
    let budget = spec(Some((100, 100)), Some((1000, 1000)));

    // Empty the bytes bucket but for 100.
    let g = lease(&s, &key, &budget, ask(1, 1), ask(900, 900)).await;
    assert_eq!((g.granted.records, g.granted.bytes), (1, 900));
    // Records are there, bytes are not: nothing is granted, records included.
    let g = lease(&s, &key, &budget, ask(10, 10), ask(300, 300)).await;
    assert_eq!((g.granted.records, g.granted.bytes), (0, 0));
    assert_eq!((g.left.records, g.left.bytes), (99, 100));
    // 200 bytes missing at 1000/s: 200 ms.
    assert_eq!(g.wait, Some(Duration::from_millis(200)));
    // The refusal charged nothing: all 99 records are still there.
    let g = lease(&s, &key, &budget, ask(99, 99), Ask::default()).await;
    assert_eq!(g.granted.records, 99);
    // And at exactly the wait, the bytes are.
    clock.advance_ms(200);
    let g = lease(&s, &key, &budget, Ask::default(), ask(300, 300)).await;
    assert_eq!((g.granted.bytes, g.wait), (300, None));
}

#[tokio::test]
async fn given_back_tokens_can_be_leased_again_and_a_budget_change_keeps_the_level() {
    let (_clock, s) = connected_store("giveback").await;
    let key = s.tenant_key("acme");
    let budget = spec(Some((10, 100)), None);

    let g = lease(&s, &key, &budget, ask(100, 100), Ask::default()).await;
    assert_eq!(g.granted.records, 100);
    s.give_back(&key, &budget, Charge::new(40, 0))
        .await
        .expect("give back");
    let g = lease(&s, &key, &budget, ask(100, 1), Ask::default()).await;
    assert_eq!(g.granted.records, 40, "exactly what was given back");

    // 60 left after a give-back of 60; then the budget changes to a burst of 30.
    s.give_back(&key, &budget, Charge::new(60, 0))
        .await
        .expect("give back");
    let smaller = spec(Some((1000, 30)), None);
    let g = lease(&s, &key, &smaller, ask(1000, 1), Ask::default()).await;
    assert_eq!(
        g.granted.records, 30,
        "the level is kept, clamped to the new burst; never refilled"
    );
}

#[tokio::test]
async fn members_are_counted_from_heartbeats_and_lapse() {
    let (clock, s) = connected_store("members").await;
    let members = |id: &'static str, leave: bool| {
        let s = &s;
        async move {
            let m = beat(s, id, id, leave).await;
            assert!(!m.duplicate);
            m.members
        }
    };
    assert_eq!(members("a", false).await, 1);
    assert_eq!(members("b", false).await, 2);
    clock.advance_ms(1500);
    assert_eq!(members("b", false).await, 2);
    clock.advance_ms(600);
    assert_eq!(members("b", false).await, 1, "a lapsed");
    assert_eq!(members("b", true).await, 0, "b left");
}

/// Each heartbeat says the replica's place among the live members' ids (byte order): what
/// divides a budget exactly among them while Redis is away (review 35b of #37: shares of at
/// least 1 gave a tenant allowed 1 record a second 3 a second from three replicas).
#[tokio::test]
async fn each_member_learns_its_place_among_the_members() {
    let (clock, s) = connected_store("ranks").await;
    for id in ["gw-c", "gw-a", "gw-b"] {
        beat(&s, id, id, false).await;
    }
    for (id, rank) in [("gw-a", 0), ("gw-b", 1), ("gw-c", 2)] {
        let m = beat(&s, id, id, false).await;
        assert_eq!((m.members, m.rank), (3, rank), "{id}");
    }
    // gw-a lapses: the others move up.
    clock.advance_ms(1500);
    beat(&s, "gw-b", "gw-b", false).await;
    beat(&s, "gw-c", "gw-c", false).await;
    clock.advance_ms(600);
    let m = beat(&s, "gw-c", "gw-c", false).await;
    assert_eq!((m.members, m.rank), (2, 1));
    let m = beat(&s, "gw-b", "gw-b", false).await;
    assert_eq!((m.members, m.rank), (2, 0));
}

/// Two processes configured with one replica id would be counted as one member, and each
/// take too large a share: the second is told so and changes nothing; once the first has
/// lapsed (or left), the id is free again.
#[tokio::test]
async fn a_replica_id_held_by_another_live_process_is_refused() {
    let (clock, s) = connected_store("duplicate").await;
    let first = beat(&s, "gw-a", "process-1", false).await;
    assert_eq!((first.members, first.duplicate), (1, false));
    let second = beat(&s, "gw-a", "process-2", false).await;
    assert_eq!(
        (second.members, second.duplicate),
        (2, true),
        "counted apart"
    );
    // The holder and its heartbeats so far: the count moves while it is alive.
    assert_eq!(second.holder, Some(("process-1".to_string(), 1)));
    beat(&s, "gw-a", "process-1", false).await;
    let third = beat(&s, "gw-a", "process-2", false).await;
    assert_eq!(third.holder, Some(("process-1".to_string(), 2)));
    let left = beat(&s, "gw-a", "process-2", true).await;
    assert_eq!(
        left.members, 1,
        "the impostor cannot take the first one out"
    );
    clock.advance_ms(2500);
    let later = beat(&s, "gw-a", "process-2", false).await;
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

/// What the replicas of one test share: a mock Kafka cluster with [`TOPIC`], the stepped
/// clock, and a Redis key prefix of the test's own.
pub(super) struct Replicas {
    kafka: Cluster,
    pub(super) clock: Arc<ManualClock>,
    prefix: String,
}

impl Replicas {
    pub(super) fn new(test: &str) -> Self {
        Self::on(test, stepped_clock())
    }

    /// The replicas of `test`, on `clock`.
    pub(super) fn on(test: &str, clock: Arc<ManualClock>) -> Self {
        Self {
            kafka: mock_cluster(&[TOPIC]),
            clock,
            prefix: redis_prefix(test),
        }
    }

    /// A member's configuration, with Redis at `url`, after `edit`.
    pub(super) fn config(&self, url: &str, edit: impl Fn(&mut Config)) -> Config {
        member(&self.kafka.bootstrap_servers(), url, &self.prefix, edit)
    }

    /// Starts `n` members alike, with Redis at `url`.
    pub(super) async fn start(
        &self,
        n: usize,
        url: &str,
        edit: impl Fn(&mut Config),
    ) -> Vec<Gateway> {
        let mut gws = Vec::with_capacity(n);
        for _ in 0..n {
            let cfg = self.config(url, &edit);
            gws.push(Gateway::start_clustered(cfg, self.clock.clone()).await);
        }
        gws
    }

    /// Starts two members alike, with Redis at `url`.
    async fn start_two(&self, url: &str, edit: impl Fn(&mut Config)) -> (Gateway, Gateway) {
        let mut gws = self.start(2, url, edit).await;
        let b = gws.pop().expect("two");
        (gws.pop().expect("two"), b)
    }

    /// [`run_steps`] on this test's clock.
    async fn steps(&self, http: &reqwest::Client, urls: &[(String, &str)], steps: usize) -> u64 {
        run_steps(&self.clock, http, urls, steps, STEP_MS)
            .await
            .iter()
            .sum()
    }
}

/// Where each gateway takes produce requests, with the test key.
pub(super) fn urls(gws: &[&Gateway]) -> Vec<(String, &'static str)> {
    gws.iter().map(|g| (g.url(TOPIC), KEY)).collect()
}

fn one_record() -> serde_json::Value {
    json!({"records": [{"value": "x"}]})
}

/// Sends one-record async requests round-robin until every gateway has refused once;
/// returns what each admitted. Any answer but 202 or 429 fails the test.
pub(super) async fn hammer(http: &reqwest::Client, urls: &[(String, &str)]) -> Vec<u64> {
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

/// Waits until every one of `gws` reads `value` for the series `name`; the longest it took.
pub(super) async fn all_read(
    gws: &[&Gateway],
    name: &str,
    value: f64,
    within: Duration,
) -> Duration {
    let mut longest = Duration::ZERO;
    for gw in gws {
        longest = longest.max(wait_for_metric(gw, name, value, within).await);
    }
    longest
}

const RATE: u64 = 500;
const BURST: u64 = 100;
const STEP_MS: u64 = 20;
const STEPS_PER_SEC: usize = (1000 / STEP_MS) as usize;

fn limited(cfg: &mut Config) {
    limit_records(cfg, RATE, BURST);
}

/// The stated bound for a window of `secs`: burst × (1 + ε) + rate × T.
fn bound(secs: f64, epsilon: f64) -> f64 {
    BURST as f64 * (1.0 + epsilon) + RATE as f64 * secs
}

/// `total` admitted over `secs` (ε the default slice fraction, 0.25) is within the stated
/// bound, and at least 95 % of rate × T: the budget held, and was used. `what` names the run.
fn assert_within_bound(total: u64, secs: f64, what: &str) {
    let (upper, rate_t) = (bound(secs, 0.25), RATE as f64 * secs);
    assert!(
        total as f64 <= upper,
        "{what}: {total} admitted over {secs} s, bound {upper}"
    );
    assert!(
        total as f64 >= 0.95 * rate_t,
        "{what}: only {total} admitted over {secs} s (rate × T = {rate_t})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_admit_one_tenant_budget_within_the_stated_bound() {
    let r = Replicas::new("three");
    let gws = r.start(3, &redis_url(), limited).await;
    let gw_refs: Vec<&Gateway> = gws.iter().collect();
    let epsilon = 0.25; // [cluster] slice_fraction's default
    all_read(
        &gw_refs,
        "floodgate_cluster_members",
        3.0,
        Duration::from_secs(5),
    )
    .await;
    let http = reqwest::Client::new();
    let urls = urls(&gw_refs);
    let totals = run_steps(&r.clock, &http, &urls, 10 * STEPS_PER_SEC, STEP_MS).await;
    for secs in [1usize, 5, 10] {
        let worst = worst_window(&totals, secs * STEPS_PER_SEC) as f64;
        let best_case_rate = RATE as f64 * secs as f64;
        assert!(
            worst <= bound(secs as f64, epsilon),
            "{secs} s: {worst} admitted, bound {}",
            bound(secs as f64, epsilon)
        );
        let least = totals
            .windows(secs * STEPS_PER_SEC)
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
        calls += lease_calls(gw, "{scope=\"tenant\",outcome=\"granted\"}").await
            + lease_calls(gw, "{scope=\"tenant\",outcome=\"refused\"}").await;
    }
    assert!(calls > 0.0, "the replicas leased from Redis");
    eprintln!("three replicas: {admitted} admitted, {calls} lease calls");

    // The same through one replica only: the others' idle slices do not starve it.
    r.clock.advance_ms(5_000);
    let total = r.steps(&http, &urls[..1], 5 * STEPS_PER_SEC).await;
    assert_within_bound(total, 5.0, "one replica over 5 s");
    for gw in gws {
        gw.shutdown().await;
    }
}

/// How many of `n` one-record requests to `url` (async) are admitted.
async fn one_record_posts_admitted(url: &str, n: usize) -> usize {
    let one = json!({"records": [{"value": "v"}]});
    let mut admitted = 0;
    for _ in 0..n {
        if post_json(url, KEY, &one).await.0 == 202 {
            admitted += 1;
        }
    }
    admitted
}

/// Redis forgets acme's shared bucket, as one restarted without persistence does.
async fn forget_bucket(prefix: &str) {
    let redis = redis::Client::open(redis_url()).expect("client");
    let mut conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{{{prefix}:tenant:acme}}"))
        .query_async(&mut conn)
        .await
        .expect("del");
}

/// A bucket Redis has no state for starts at the level its caller last knew, not full, and a
/// refused ask keeps that start for the next caller (review 37b of #37: a Redis restarted
/// empty gave every tenant its burst again, 352 records where the bound was 91).
#[tokio::test]
async fn a_forgotten_bucket_starts_where_its_caller_last_knew_it() {
    let (clock, s) = connected_store("forgotten").await;
    let key = s.tenant_key("acme");
    let budget = spec(Some((1, 20)), None);
    let g = lease(&s, &key, &budget, ask(20, 20), Ask::default()).await;
    assert_eq!((g.granted.records, g.left.records), (20, 0));
    forget_bucket(&redis_prefix("forgotten")).await;
    // The caller knew the bucket empty: nothing for it, though Redis has no state.
    let knew_empty = Ask {
        want: 20,
        min: 1,
        level: 0,
    };
    let g = lease(&s, &key, &budget, knew_empty, Ask::default()).await;
    assert_eq!(g.granted.records, 0);
    assert_eq!(g.wait, Some(Duration::from_secs(1)));
    // A caller that never heard of it finds that start, not a full bucket.
    let g = lease(&s, &key, &budget, ask(20, 1), Ask::default()).await;
    assert_eq!(
        (g.granted.records, g.wait),
        (0, Some(Duration::from_secs(1)))
    );
    clock.advance_ms(3_000);
    let g = lease(&s, &key, &budget, ask(20, 1), Ask::default()).await;
    assert_eq!(g.granted.records, 3, "what refilled since");
}

/// Through a replica: the tenant's burst spent, then Redis forgets the bucket; the replica's
/// next leases start it from the level its last answer said, so the tenant gets what refilled,
/// not a second burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_forgets_the_buckets_gives_no_tenant_a_second_burst() {
    let r = Replicas::new("amnesia");
    let (a, b) = r
        .start_two(&redis_url(), |cfg| limit_records(cfg, 1, 20))
        .await;
    let url = format!("{}?async=true", a.url(TOPIC));
    let admitted = one_record_posts_admitted(&url, 25).await;
    assert_eq!(admitted, 20, "the burst");
    forget_bucket(&r.prefix).await;
    r.clock.advance_ms(2_000);
    let again = one_record_posts_admitted(&url, 25).await;
    assert!(
        again <= 2,
        "{again} admitted after Redis forgot: only the 2 s of refill"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// A Redis killed and started again empty: the replicas' leases after the outage start the
/// buckets where their last answers left them, so the restart hands out no fresh burst (review
/// 37b of #37: 352 records in 50 s of 15 restarts, where the bound was 91).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_gives_no_tenant_a_second_burst() {
    let r = Replicas::new("restarted");
    let mut redis = OwnRedis::start();
    let (a, b) = r
        .start_two(&redis.url(), |cfg| {
            limit_records(cfg, 1, 20);
            cfg.cluster.heartbeat_ms = 100;
        })
        .await;
    let url = format!("{}?async=true", a.url(TOPIC));
    let admitted = one_record_posts_admitted(&url, 25).await;
    assert_eq!(admitted, 20, "the burst");
    redis.kill();
    wait_for_metric(
        &a,
        "floodgate_cluster_degraded",
        1.0,
        Duration::from_secs(5),
    )
    .await;
    redis.restart();
    wait_for_metric(
        &a,
        "floodgate_cluster_degraded",
        0.0,
        Duration::from_secs(5),
    )
    .await;
    r.clock.advance_ms(2_000);
    let again = one_record_posts_admitted(&url, 25).await;
    assert!(
        again <= 2,
        "{again} admitted after the restart: only the 2 s of refill"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// The value of acme's shared bucket's `field` in Redis.
async fn shared_bucket(prefix: &str, field: &str) -> Option<String> {
    let redis = redis::Client::open(redis_url()).expect("client");
    let mut conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    redis::cmd("HGET")
        .arg(format!("{{{prefix}:tenant:acme}}"))
        .arg(field)
        .query_async(&mut conn)
        .await
        .expect("hget")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_fits_records_but_not_bytes_charges_nothing_cluster_wide() {
    let r = Replicas::new("bytes");
    let both = |cfg: &mut Config| {
        limit_records(cfg, 100, 100);
        limit_bytes(cfg, 1000, 1000);
    };
    let (a, b) = r.start_two(&redis_url(), both).await;
    // A spends most of the bytes: one record of 800 bytes.
    let big = json!({"records": [{"value": "v".repeat(800)}]});
    let (s, _, body) = post_json(&format!("{}?async=true", a.url(TOPIC)), KEY, &big).await;
    assert_eq!(s, 202, "{body}");
    // A leaves (giving back its unspent slice), so no refill of A's moves the shared state
    // while B is being tested.
    a.shutdown().await;
    let before = shared_bucket(&r.prefix, "r_tat").await;
    // B (which holds no slice yet) gets one record of 400 bytes: the records are there, the
    // bytes are not.
    let to_b = format!("{}?async=true", b.url(TOPIC));
    let four_hundred = json!({"records": [{"value": "v".repeat(400)}]});
    let (s, h, body) = post_json(&to_b, KEY, &four_hundred).await;
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
    assert_eq!(
        before,
        shared_bucket(&r.prefix, "r_tat").await,
        "the records bucket was not charged for the refused request"
    );
    // After the wait it is admitted (plus the JSON around the value: the early check counts
    // the declared body length, 26 bytes more, before the body is read).
    r.clock.advance_ms(wait + 26);
    let (s, _, body) = post_json(&to_b, KEY, &four_hundred).await;
    assert_eq!(s, 202, "{body}");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_budget_holds_for_tenants_on_different_replicas() {
    let r = Replicas::new("global");
    let two_tenants = |cfg: &mut Config| {
        cfg.tenants
            .push(tenant("other", "test-key-other", &["test.*"]));
        cfg.global.records_per_sec = Some(RATE);
        cfg.global.records_burst = Some(BURST);
    };
    let (a, b) = r.start_two(&redis_url(), two_tenants).await;
    let http = reqwest::Client::new();
    let urls = [(a.url(TOPIC), KEY), (b.url(TOPIC), "test-key-other")];
    let total = r.steps(&http, &urls, 5 * STEPS_PER_SEC).await;
    assert_within_bound(
        total,
        5.0,
        &format!("two tenants on two replicas against a global {RATE}/s"),
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_serve_their_local_share_while_redis_is_down_and_share_again_when_it_is_back() {
    let r = Replicas::new("outage");
    let mut redis = OwnRedis::start();
    let fast = |cfg: &mut Config| {
        limited(cfg);
        cfg.cluster.heartbeat_ms = 200;
        // Heartbeats carry the stepped clock, which runs ahead of real time here (a second of
        // steps in a fraction of one): with a 1 s TTL a replica could count itself alone just
        // before Redis dies and take the whole budget as its share (seen 1 run in ~10).
        cfg.cluster.member_ttl_ms = 10_000;
    };
    let (a, b) = r.start_two(&redis.url(), fast).await;
    let five = Duration::from_secs(5);
    all_read(&[&a, &b], "floodgate_cluster_members", 2.0, five).await;
    let http = reqwest::Client::new();
    let urls = urls(&[&a, &b]);
    r.steps(&http, &urls, STEPS_PER_SEC).await;

    redis.kill();
    let noticed = all_read(&[&a, &b], "floodgate_cluster_degraded", 1.0, five).await;
    // Each replica admits its share: rate / 2 and burst / 2, so the pair at most the budget.
    let during = r.steps(&http, &urls, 2 * STEPS_PER_SEC).await;
    assert!(
        during as f64 <= RATE as f64 * 2.0 + BURST as f64,
        "{during} admitted in 2 s with Redis down"
    );
    assert!(
        during as f64 >= 0.95 * RATE as f64 * 2.0,
        "kept serving: {during}"
    );

    redis.restart();
    let ten = Duration::from_secs(10);
    let resumed = all_read(&[&a, &b], "floodgate_cluster_degraded", 0.0, ten).await;
    let after = r.steps(&http, &urls, 2 * STEPS_PER_SEC).await;
    assert_within_bound(after, 2.0, "after recovery");
    eprintln!("outage noticed within {noticed:?}, shared mode back within {resumed:?}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_vanishes_leaves_the_others_the_whole_rate() {
    let r = Replicas::new("vanish");
    let fast = |cfg: &mut Config| {
        limited(cfg);
        cfg.cluster.heartbeat_ms = 200;
        cfg.cluster.member_ttl_ms = 1000;
    };
    let mut gws = r.start(3, &redis_url(), fast).await;
    let five = Duration::from_secs(5);
    all_read(
        &gws.iter().collect::<Vec<_>>(),
        "floodgate_cluster_members",
        3.0,
        five,
    )
    .await;
    let http = reqwest::Client::new();
    r.steps(&http, &urls(&gws.iter().collect::<Vec<_>>()), STEPS_PER_SEC)
        .await;
    // The third replica disappears without leaving (no give-back, no goodbye), holding
    // whatever slice it had.
    let gone = gws.pop().expect("three");
    gone.abort();
    // Members lapse by the shared clock: past their time-to-live, only the two that still
    // send heartbeats count.
    r.clock.advance_ms(1100);
    let left: Vec<&Gateway> = gws.iter().collect();
    let recounted = all_read(&left, "floodgate_cluster_members", 2.0, five).await;
    let total = r.steps(&http, &urls(&left), 2 * STEPS_PER_SEC).await;
    assert_within_bound(total, 2.0, "the two left");
    eprintln!("members recounted {recounted:?} after the replica vanished");
    for gw in gws {
        gw.shutdown().await;
    }
}

/// The sum of the `floodgate_cluster_lease_calls_total` series whose labels start with
/// `labels` (`{` alone: all of them).
async fn lease_calls(gw: &Gateway, labels: &str) -> f64 {
    sum(
        &scrape(gw).await,
        &format!("floodgate_cluster_lease_calls_total{labels}"),
    )
}

/// A v3 stream far over its tenant's budget: its records are refused against the local
/// estimate, so Redis hears from it at most once per group of records, not once per record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_far_over_its_budget_makes_at_most_one_lease_call_per_chunk() {
    let r = Replicas::new("stream-leases");
    let cfg = r.config(&redis_url(), |cfg| limit_records(cfg, 10, 10));
    let gw = Gateway::start_clustered(cfg, r.clock.clone()).await;
    let before = lease_calls(&gw, "{").await;
    const CHUNKS: usize = 100;
    let addr = gw.addr;
    let record = json!({"value": {"type": "STRING", "data": "x"}}).to_string();
    let chunks = (0..CHUNKS).map(move |_| record.repeat(100).into_bytes());
    let path = format!("/v3/clusters/c/topics/{TOPIC}/records");
    let reports = tokio::task::spawn_blocking(move || stream_chunks(addr, &path, chunks))
        .await
        .expect("client");
    assert_eq!(reports.len(), CHUNKS * 100);
    let written = reports.iter().filter(|r| r["error_code"] == 200).count();
    assert_eq!(
        written, 10,
        "the burst, nothing more (the clock stands still)"
    );
    let calls = lease_calls(&gw, "{").await - before;
    eprintln!("lease calls: {calls}");
    assert!(
        calls <= CHUNKS as f64,
        "{calls} lease calls for {CHUNKS} chunks of 100 records"
    );
    gw.shutdown().await;
}

/// The URL of a Redis that was started and killed: nothing answers there until it restarts.
fn dead_redis() -> (OwnRedis, String) {
    let mut redis = OwnRedis::start();
    let url = redis.url();
    redis.kill();
    (redis, url)
}

/// Replicas that cannot reach Redis when they start do not know how many they are: each takes
/// 1/`expected_replicas` of the budget, never the whole of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_started_while_redis_is_down_take_the_expected_share() {
    let r = Replicas::new("down-at-start");
    let (_redis, url) = dead_redis();
    let two = |cfg: &mut Config| {
        limited(cfg);
        cfg.cluster.expected_replicas = 2;
    };
    let (a, b) = r.start_two(&url, two).await;
    let http = reqwest::Client::new();
    let total = r.steps(&http, &urls(&[&a, &b]), 50).await;
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
    let r = Replicas::new("over-share");
    let (mut redis, url) = dead_redis();
    let cfg = r.config(&url, |cfg| {
        limited(cfg); // 500/s, burst 100: a share of 25
        limit_bytes(cfg, 10_000, 10_000); // a share of 2,500
        cfg.cluster.expected_replicas = 4;
        cfg.cluster.heartbeat_ms = 300;
    });
    let gw = Gateway::start_clustered(cfg, r.clock.clone()).await;
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
    let ten = Duration::from_secs(10);
    wait_for_metric(&gw, "floodgate_cluster_degraded", 0.0, ten).await;
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
        let listeners = loopback_listeners().await;
        let produce = listeners.produce.local_addr().expect("addr");
        let admin = listeners.admin.local_addr().expect("addr");
        let options = clustered_options(clock);
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
        metric_at(self.admin, name).await
    }

    /// Polls (real time) until the series `name` reads `value`; fails saying `what` after
    /// `within`.
    async fn until(&self, name: &str, value: f64, within: Duration, what: &str) {
        let started = Instant::now();
        while self.metric(name).await != Some(value) {
            assert!(started.elapsed() < within, "{what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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

/// The configuration of a replica with the id `id`, heartbeats every 100 ms and a member TTL
/// of `ttl_ms` (the default when `None`).
fn same_id(id: &'static str, ttl_ms: Option<u64>) -> impl Fn(&mut Config) {
    move |cfg: &mut Config| {
        cfg.cluster.replica_id = Some(id.into());
        cfg.cluster.heartbeat_ms = 100;
        if let Some(ttl) = ttl_ms {
            cfg.cluster.member_ttl_ms = ttl;
        }
    }
}

/// A second process started with a replica id a live replica holds is refused at start-up,
/// with a clear error, instead of being counted as the same member: the holder's heartbeats
/// show it is alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_with_a_live_replicas_id_does_not_start() {
    let r = Replicas::new("same-id");
    let cfg = r.config(&redis_url(), same_id("gw-same", None));
    let a = Gateway::start_clustered(cfg.clone(), r.clock.clone()).await;
    wait_for_metric(&a, "floodgate_cluster_members", 1.0, Duration::from_secs(5)).await;
    let mut b = OwnRun::start(cfg, &r.clock).await;
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
    let r = Replicas::new("restart");
    let cfg = r.config(&redis_url(), same_id("gw-phoenix", Some(2_000)));
    let old = Gateway::start_clustered(cfg.clone(), r.clock.clone()).await;
    wait_for_metric(
        &old,
        "floodgate_cluster_members",
        1.0,
        Duration::from_secs(5),
    )
    .await;
    old.abort(); // no goodbye: its entry stays until it lapses
    let mut new = OwnRun::start(cfg, &r.clock).await;
    // Many of its own heartbeats later it has not given up: the holder does not beat.
    assert!(
        new.ended_within(Duration::from_secs(1)).await.is_none(),
        "not refused as a duplicate of itself"
    );
    r.clock.advance_ms(2_100);
    let what = "took the id over once the old entry lapsed";
    new.until(
        "floodgate_cluster_members",
        1.0,
        Duration::from_secs(5),
        what,
    )
    .await;
    let url = format!(
        "http://{}/v1/topics/{TOPIC}/records?async=true",
        new.produce
    );
    let (s, _, a) = post_json(&url, KEY, &one_record()).await;
    assert_eq!(s, 202, "{a}");
    new.stop().await;
}

/// Two processes with one replica id, both started while Redis is down, cannot tell at start.
/// When Redis answers, the first to announce itself holds the id; the other sees the holder's
/// heartbeats advance, drains and stops with the start-up error (exit 64 from `main`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_replica_id_found_when_redis_comes_back_stops_one_of_the_two() {
    let r = Replicas::new("twins");
    let (mut redis, url) = dead_redis();
    let cfg = r.config(&url, same_id("gw-twin", Some(10_000)));
    let mut a = OwnRun::start(cfg.clone(), &r.clock).await;
    let mut b = OwnRun::start(cfg, &r.clock).await;
    for run in [&a, &b] {
        run.until(
            "floodgate_cluster_degraded",
            1.0,
            Duration::from_secs(5),
            "serving",
        )
        .await;
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
    let r = Replicas::new("flapping");
    let redis = OwnRedis::start();
    let flappy = |cfg: &mut Config| {
        limit_records(cfg, RATE_F, BURST_F);
        cfg.cluster.heartbeat_ms = 100;
        cfg.cluster.member_ttl_ms = 60_000;
        cfg.cluster.expected_replicas = 2;
    };
    let (a, b) = r.start_two(&redis.url(), flappy).await;
    all_read(
        &[&a, &b],
        "floodgate_cluster_members",
        2.0,
        Duration::from_secs(5),
    )
    .await;
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
    let urls = urls(&[&a, &b]);
    let (mut total, mut steps) = (0u64, 0u64);
    while !pauser.is_finished() || steps < 300 {
        r.clock.advance_ms(STEP_MS);
        steps += 1;
        total += hammer(&http, &urls).await.iter().sum::<u64>();
    }
    pauser.await.expect("pauser");
    // What each replica says it spent on its shares, by the same stepped clock.
    let (mut shared, mut stalls) = (0.0, 0.0);
    for gw in [&a, &b] {
        let text = scrape(gw).await;
        shared += value(&text, "floodgate_cluster_local_share_seconds_total").unwrap_or(0.0);
        stalls += value(&text, "floodgate_cluster_degradations_total").unwrap_or(0.0);
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
    let r = Replicas::new("stream-in-budget");
    let cfg = r.config(&redis_url(), |cfg| limit_records(cfg, 1000, 2000));
    let gw = Gateway::start_clustered(cfg, r.clock.clone()).await;
    let record = json!({"value": {"type": "STRING", "data": "x"}}).to_string();
    let (mut stream, reader) =
        open_stream(gw.addr, &format!("/v3/clusters/c/topics/{TOPIC}/records"));
    let mut reports = tokio::task::spawn_blocking(move || {
        let mut reader = reader;
        assert_eq!(read_head(&mut reader), 200);
        ReportReader::new(reader)
    });
    write_chunk(&mut stream, record.repeat(1000).as_bytes()).expect("write");
    let mut codes = Vec::new();
    let mut reader = (&mut reports).await.expect("head");
    let take = |reader: ReportReader<_>, n: usize| {
        tokio::task::spawn_blocking(move || {
            let mut reader = reader;
            let got: Vec<serde_json::Value> = (0..n).filter_map(|_| reader.next()).collect();
            (reader, got)
        })
    };
    for (step, n) in [
        (0, 1000),
        (200, 200),
        (200, 200),
        (200, 200),
        (200, 200),
        (200, 200),
    ] {
        if step > 0 {
            r.clock.advance_ms(step);
            write_chunk(&mut stream, record.repeat(n).as_bytes()).expect("write");
        }
        let (rest, got) = take(reader, n).await.expect("reports");
        reader = rest;
        codes.extend(got.iter().map(|g| g["error_code"].as_i64().unwrap_or(0)));
    }
    stream.write_all(b"0\r\n\r\n").expect("end");
    assert_eq!(codes.len(), 2000);
    let refused = codes.iter().filter(|c| **c != 200).count();
    assert_eq!(refused, 0, "every record within the budget is written");
    drop(reader);
    gw.shutdown().await;
}

/// Review 41-r9 of #37, across replicas: a request registering a new raw schema reserves its
/// tenant's tokens first, and in cluster mode leases what its slice lacks before it reserves,
/// so what it reserved are tokens no other replica can spend. Two replicas, a tenant allowed
/// one record (the clock stands still), eight concurrent v2 requests with a new schema each,
/// half to each replica, every registry answer slow: a version is registered only for a
/// record written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_replicas_a_registration_is_only_for_a_record_written() {
    use crate::common::schema_registry::SchemaRegistry;
    let registry = SchemaRegistry::start().await;
    let r = Replicas::new("regrace");
    let url = registry.url();
    let (a, b) = r
        .start_two(&redis_url(), |cfg| {
            limit_records(cfg, 1, 1);
            cfg.schema_registry.url = Some(url.clone());
        })
        .await;
    registry.set_delay(Duration::from_millis(150));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let gw = if i % 2 == 0 { &a } else { &b };
            let url = format!("http://{}/topics/{TOPIC}", gw.addr);
            let schema = json!({"type": "object", "title": format!("across{i}")}).to_string();
            let body = json!({"value_schema": schema, "records": [{"value": {"n": i}}]});
            tokio::spawn(async move {
                let headers = [("content-type", "application/vnd.kafka.jsonschema.v2+json")];
                post_text(&url, KEY, &headers, body.to_string()).await
            })
        })
        .collect();
    let mut written = 0;
    for task in tasks {
        let (status, _, text) = task.await.expect("task");
        match status {
            200 => written += 1,
            429 => {}
            other => panic!("{other}: {text}"),
        }
    }
    assert_eq!(written, 1, "the tenant's one record");
    assert_eq!(
        registry.versions(&format!("{TOPIC}-value")).len(),
        written,
        "a version for the record written, none for the refused"
    );
}

/// Review 41-r10 of #37: the slice agent gave an idle slice's tokens back to Redis once it had
/// not been refilled for `slice_ttl_ms`, even while a request that leased them for its
/// reservation was registering its schema: the tenant's requests on another replica took
/// them, and the registering request was refused after its version was written. A slice
/// whose tenant holds a reservation is kept. Here the registration takes seconds while the
/// clock passes the slice's time to live (and refills no token: 1 record/s, 150 ms); another
/// tenant's idle slice, given back in the same pass, shows the agent looked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_slice_is_not_given_back_while_its_registration_runs() {
    use crate::common::schema_registry::{Call, SchemaRegistry};
    let registry = SchemaRegistry::start().await;
    let r = Replicas::new("reserved-slice");
    let url = registry.url();
    let (a, b) = r
        .start_two(&redis_url(), |cfg| {
            limit_records(cfg, 1, 1);
            cfg.schema_registry.url = Some(url.clone());
            cfg.schema_registry.timeout_ms = 30_000;
            cfg.cluster.slice_ttl_ms = 100;
            let mut idle = tenant("idle", "idle-key", &["test.*"]);
            idle.records_per_sec = Some(100);
            idle.records_burst = Some(100);
            cfg.tenants.push(idle);
        })
        .await;
    let returned = "floodgate_cluster_returned_tokens_total{bucket=\"records\"}";
    let (status, _, body) = post_json(&a.url(TOPIC), "idle-key", &one_record()).await;
    assert_eq!(status, 200, "{body}");
    let before = metric(&a, returned).await.unwrap_or(0.0);
    // acme's request on A: its schema is new, and the registry answers in 2 s a call.
    registry.set_delay(Duration::from_secs(2));
    let url = format!("http://{}/topics/{TOPIC}", a.addr);
    let registering = tokio::spawn(async move {
        let schema = json!({"type": "object", "title": "slow"}).to_string();
        let body = json!({"value_schema": schema, "records": [{"value": {"n": 1}}]});
        let headers = [("content-type", "application/vnd.kafka.jsonschema.v2+json")];
        post_text(&url, KEY, &headers, body.to_string()).await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while registry.calls(Call::Register) == 0 {
        assert!(Instant::now() < deadline, "no registration began");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Past the slices' time to live while it registers: the agent gives idle's slice back.
    r.clock.advance_ms(150);
    while metric(&a, returned).await.unwrap_or(0.0) <= before {
        assert!(Instant::now() < deadline, "the agent gave nothing back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // acme's token is A's, reserved: B finds none.
    let (status, _, body) = post_json(&b.url(TOPIC), KEY, &one_record()).await;
    assert_eq!(status, 429, "{body}");
    let (status, _, text) = registering.await.expect("task");
    assert_eq!(status, 200, "the registering request is written: {text}");
    assert_eq!(registry.versions(&format!("{TOPIC}-value")).len(), 1);
}
