//! In cluster mode, a tenant cannot spend the Redis that holds every tenant's
//! `Idempotency-Key` answers: its refused keyed requests store nothing, and it keeps at most
//! `[idempotency] max_keys_per_tenant` answers (its oldest dropped past that). Run against a
//! real redis-server with a small `maxmemory` and `allkeys-lru`, as an operator bounding Redis
//! would: a flood that could fill it would evict the victim's answer, and its retry would be
//! written again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;
use serde_json::{json, Value};

const TOPIC: &str = "test.fair";

/// [`post_keyed`] to [`TOPIC`] with the idempotency key `key`.
async fn keyed(gw: &Gateway, key: &str, api_key: &str, body: &Value) -> (u16, bool, Value) {
    post_keyed(&gw.url(TOPIC), api_key, key, body).await
}

/// Keys matching `pattern`, and how many of them hold an answer.
fn redis_keys(redis: &OwnRedis, pattern: &str) -> (usize, usize) {
    let client = redis::Client::open(redis.url()).expect("client");
    let mut c = client.get_connection().expect("connection");
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut c).expect("keys");
    let answers = keys
        .iter()
        .filter(|k| {
            let v: Option<Vec<u8>> = redis::cmd("GET").arg(k).query(&mut c).unwrap_or(None);
            v.is_some_and(|v| v.first() == Some(&b'D'))
        })
        .count();
    (keys.len(), answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_flood_does_not_evict_the_victims_answer_in_redis() {
    let kafka = mock_cluster(&[TOPIC]);
    let redis = OwnRedis::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut cfg = config(&kafka.bootstrap_servers());
    cfg.cluster.redis_url = Some(redis.url());
    cfg.cluster.key_prefix = "fair".into();
    cfg.cluster.replica_id = Some("a".into());
    cfg.idempotency.max_keys_per_tenant = 50;
    cfg.idempotency.claim_ttl_ms = 1_000;
    // Its 1,000 refusals each give a claim up; what that costs Redis is another test's.
    cfg.idempotency.releases_per_tenant_burst = 1_000_000;
    cfg.tenants.push(tenant("beta", "beta-key", &["test.*"]));
    let gw = Gateway::start(cfg).await;
    // The producer connected (a first request delivered) before the keyed ones.
    let deadline = Instant::now() + Duration::from_secs(20);
    while post_json(&gw.url(TOPIC), KEY, &json!({"records": [{"value": 0}]}))
        .await
        .0
        != 200
    {
        assert!(Instant::now() < deadline, "never delivered");
    }
    let order = json!({"records": [{"value": "victim-order"}]});
    let (s, _, first) = keyed(&gw, "order-1", "beta-key", &order).await;
    assert_eq!(s, 200, "{first}");
    // 1,000 refusals, then 800 admitted requests whose answers (100 offsets, ~3 KB each)
    // would fill Redis's 4 MB were they all kept.
    for i in 0..1_000 {
        let body = if i % 2 == 0 {
            json!({"records": []})
        } else {
            json!({"records": [{"value": 1, "partition": 7}]})
        };
        let (s, _, a) = keyed(&gw, &format!("refused-{i}"), KEY, &body).await;
        assert!(s == 400 || s == 404, "{s} {a}");
    }
    let many: Vec<Value> = (0..100).map(|n| json!({ "value": n })).collect();
    for i in 0..800 {
        let (s, _, a) = keyed(
            &gw,
            &format!("admitted-{i}"),
            KEY,
            &json!({ "records": many }),
        )
        .await;
        assert_eq!(s, 200, "{a}");
    }
    // acme holds its 50 newest answers; a refusal keeps nothing but its given-up claim, for
    // claim_ttl (against late renewals).
    assert_eq!(redis_keys(&redis, "{fair:idem:acme}:*").1, 50);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(
        redis_keys(&redis, "{fair:idem:acme}*"),
        (51, 50),
        "answers and the index"
    );
    let (s, replayed, again) = keyed(&gw, "order-1", "beta-key", &order).await;
    assert_eq!((s, replayed), (200, true), "{again}");
    assert_eq!(again["offsets"], first["offsets"], "the same offset");
    // The newest of acme's answers is replayed, its oldest was dropped (processed again).
    let (s, replayed, _) = keyed(&gw, "admitted-799", KEY, &json!({ "records": many })).await;
    assert_eq!((s, replayed), (200, true));
    let (s, replayed, _) = keyed(&gw, "admitted-0", KEY, &json!({ "records": many })).await;
    assert_eq!((s, replayed), (200, false));
    gw.shutdown().await;
}

/// Commands this Redis has processed (its own count, the asking `INFO` included).
fn redis_commands(redis: &OwnRedis) -> u64 {
    let client = redis::Client::open(redis.url()).expect("client");
    let mut c = client.get_connection().expect("connection");
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).expect("info");
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_commands_processed")
}

/// A cluster gateway of its own (its own redis-server, keys under `prefix`) on a stepped
/// clock, its configuration `tune`d; the broker and Redis live as long as the tuple.
async fn stepped(
    prefix: &str,
    tune: impl FnOnce(&mut floodgate::config::Config),
) -> (
    Cluster,
    OwnRedis,
    Arc<floodgate::budget::ManualClock>,
    Gateway,
) {
    let kafka = mock_cluster(&[TOPIC]);
    let redis = OwnRedis::start_with(&[]);
    let clock = Arc::new(floodgate::budget::ManualClock::new());
    clock.advance_ms(1_000_000);
    let mut cfg = config(&kafka.bootstrap_servers());
    cfg.cluster.redis_url = Some(redis.url());
    cfg.cluster.key_prefix = prefix.into();
    cfg.cluster.replica_id = Some("a".into());
    tune(&mut cfg);
    let gw = Gateway::start_clustered(cfg, clock.clone()).await;
    (kafka, redis, clock, gw)
}

/// Review 17 of #37: a keyed request its budgets refuse claimed its key in Redis and released
/// it — 6.1 commands per 429, so a tenant allowed 1 record/s drove Redis at six times its
/// request rate; review 30: then one read each, 3,810 commands a second from one client. A
/// request refused before its body is read asks Redis nothing; a stored answer is replayed
/// once the budget admits the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_request_refused_by_its_budgets_costs_redis_nothing() {
    let (_kafka, redis, clock, gw) = stepped("refused", |cfg| {
        limit_records(cfg, 1, 1);
    })
    .await;
    let one = json!({"records": [{"value": 1}]});
    // The producer connected and the burst spent: the clock stands still from here on.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, _, a) = keyed(&gw, "first", KEY, &one).await;
        if s == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never delivered: {s} {a}");
        clock.advance_ms(1_000);
    }
    let before = redis_commands(&redis);
    for i in 0..200 {
        let (s, replayed, a) = keyed(&gw, &format!("refused-{i}"), KEY, &one).await;
        assert_eq!((s, replayed), (429, false), "{a}");
    }
    let (s, replayed, _) = keyed(&gw, "first", KEY, &one).await;
    assert_eq!((s, replayed), (429, false), "the stored answer waits too");
    let commands = redis_commands(&redis) - before;
    // The gateway's own background (leases, heartbeats) only; a read each was over 200, a
    // claim and its release per request over 1,200.
    assert!(commands < 100, "{commands} commands for 201 refusals");
    clock.advance_ms(1_000);
    let (s, replayed, _) = keyed(&gw, "first", KEY, &one).await;
    assert_eq!(
        (s, replayed),
        (200, true),
        "the stored answer, once the budget admits the retry"
    );
    gw.shutdown().await;
}

/// Review 22 of #37 (F5): a keyed request refused after its key was claimed (here a malformed
/// body) claims and gives the key up, six Redis commands for a request charged nothing, as
/// fast as one client sends. A tenant may give claims up at its allowance; past it its keyed
/// requests are refused before anything is asked of Redis, and the allowance refills on the
/// clock. Claims given up together past it (review 28: requests in progress at once) overdraw
/// it, and hold the tenant until repaid. Another tenant's allowance, and the tenant's unkeyed
/// requests, are their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_gives_claims_up_past_its_allowance_is_refused_before_claiming() {
    let (_kafka, redis, clock, gw) = stepped("releases", |cfg| {
        cfg.idempotency.releases_per_tenant_per_sec = 1;
        cfg.idempotency.releases_per_tenant_burst = 5;
        cfg.tenants.push(tenant("beta", "beta-key", &["test.*"]));
    })
    .await;
    let one = json!({"records": [{"value": 1}]});
    let deadline = Instant::now() + Duration::from_secs(20);
    while keyed(&gw, "first", KEY, &one).await.0 != 200 {
        assert!(Instant::now() < deadline, "never delivered");
    }
    let malformed = json!({"records": [{"value": 1, "partition": "seven"}]});
    // Twenty at once while the allowance (5) has room: each is claimed and given up, and the
    // allowance is overdrawn by fifteen.
    // Their heads first, each claiming its key; their bodies once all twenty are claimed.
    let claimed = "floodgate_idempotency_requests_total{outcome=\"processed\"}";
    let before = crate::common::exposition::metric(&gw, claimed)
        .await
        .unwrap_or(0.0);
    let body = malformed.to_string();
    let mut wave = Vec::new();
    for i in 0..20 {
        let mut c = tokio::net::TcpStream::connect(gw.addr)
            .await
            .expect("connect");
        let head = format!(
            "POST /v1/topics/{TOPIC}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
             Content-Type: application/json\r\nIdempotency-Key: bad-{i}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        c.write_all(head.as_bytes()).await.expect("head");
        wave.push(c);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while crate::common::exposition::metric(&gw, claimed).await < Some(before + 20.0) {
        assert!(Instant::now() < deadline, "never all claimed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for c in &mut wave {
        c.write_all(body.as_bytes()).await.expect("body");
    }
    for mut c in wave {
        let mut answer = String::new();
        c.read_to_string(&mut answer).await.expect("answer");
        assert!(
            answer.starts_with("HTTP/1.1 400"),
            "the allowance had room: {answer}"
        );
    }
    let url = gw.url(TOPIC);
    let before = redis_commands(&redis);
    for i in 20..120 {
        let (s, _, a) = keyed(&gw, &format!("bad-{i}"), KEY, &malformed).await;
        assert_eq!(s, 429, "{a}");
        assert_eq!(a["reason"], "idempotency_releases", "{a}");
    }
    let commands = redis_commands(&redis) - before;
    // Nothing asked of Redis but the gateway's own background; claims and releases were 600.
    assert!(commands < 50, "{commands} commands for 100 held requests");
    let (s, _, a) = keyed(&gw, "good", KEY, &one).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("idempotency_releases"))
    );
    let (s, replayed, _) = keyed(&gw, "first", KEY, &one).await;
    assert_eq!((s, replayed), (429, false), "a stored answer waits too");
    assert_eq!(post_json(&url, KEY, &one).await.0, 200, "unkeyed");
    let (s, _, a) = keyed(&gw, "beta-bad", "beta-key", &malformed).await;
    assert_eq!(s, 400, "another tenant's allowance: {a}");
    // Held until the overdraft is repaid (15 at one a second), not one interval.
    clock.advance_ms(2_000);
    assert_eq!(keyed(&gw, "good", KEY, &one).await.0, 429, "still repaying");
    clock.advance_ms(14_000);
    let (s, _, a) = keyed(&gw, "good", KEY, &one).await;
    assert_eq!(s, 200, "repaid: {a}");
    let (s, replayed, _) = keyed(&gw, "first", KEY, &one).await;
    assert_eq!((s, replayed), (200, true), "the stored answer, replayed");
    let m = crate::common::exposition::scrape(&gw).await;
    assert_eq!(
        crate::common::exposition::sample(
            &m,
            "floodgate_idempotency_requests_total{outcome=\"held\"}"
        ),
        103.0
    );
    gw.shutdown().await;
}

/// Review 30 of #37: a keyed request that its tenant's own budget refuses after its claim (the
/// look before the claim asks for one record, the request holds two) was not counted against
/// the tenant's allowance of releases, and a tenant allowed 100 records a second gave 3,600
/// claims a second up from four connections. It is counted, like a malformed body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_request_its_own_budget_refuses_after_its_claim_spends_the_allowance() {
    let (_kafka, _redis, clock, gw) = stepped("releases-own", |cfg| {
        cfg.idempotency.releases_per_tenant_per_sec = 1;
        cfg.idempotency.releases_per_tenant_burst = 1;
        limit_records(cfg, 1, 5);
    })
    .await;
    let records =
        |n: usize| json!({ "records": (0..n).map(|i| json!({"value": i})).collect::<Vec<_>>() });
    let deadline = Instant::now() + Duration::from_secs(20);
    while post_json(&gw.url(TOPIC), KEY, &records(4)).await.0 != 200 {
        assert!(Instant::now() < deadline, "never delivered");
        clock.advance_ms(5_000);
    }
    // One record left: two pass the look before the claim, and are refused by the budget.
    let (s, _, a) = keyed(&gw, "over-0", KEY, &records(2)).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_records")),
        "{a}"
    );
    let (s, _, a) = keyed(&gw, "over-1", KEY, &records(2)).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("idempotency_releases")),
        "the allowance of one spent by the first: {a}"
    );
    gw.shutdown().await;
}

/// Review 31 of #37: a keyed request the store answers itself (a stored answer replayed, a key
/// another request holds) cost a claim script, and a replay its whole answer out of Redis,
/// with no budget paying: 5,400 commands a second from four connections of a tenant allowed
/// 100 records a second. It spends the tenant's allowance as a given-up claim does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_replayed_from_the_store_spend_the_allowance() {
    let (_kafka, _redis, _clock, gw) = stepped("releases-replays", |cfg| {
        cfg.idempotency.releases_per_tenant_per_sec = 1;
        cfg.idempotency.releases_per_tenant_burst = 3;
    })
    .await;
    let one = json!({"records": [{"value": 1}]});
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, replayed, a) = keyed(&gw, "stored", KEY, &one).await;
        if s == 200 {
            assert!(!replayed, "the original: {a}");
            break;
        }
        assert!(Instant::now() < deadline, "never delivered: {s} {a}");
    }
    for i in 0..3 {
        let (s, replayed, a) = keyed(&gw, "stored", KEY, &one).await;
        assert_eq!((s, replayed), (200, true), "replay {i}: {a}");
    }
    let (s, replayed, a) = keyed(&gw, "stored", KEY, &one).await;
    assert_eq!(
        (s, replayed, a["reason"].as_str()),
        (429, false, Some("idempotency_releases")),
        "three replays spent the allowance of three: {a}"
    );
    gw.shutdown().await;
}

/// Review 31 of #37: a 429 of the body budget, spent by another tenant's upload, decided after a
/// keyed request's claim, spent the tenant's allowance, and another tenant's load held it
/// 7.5–14.5 s after it ended; uncounted, a tenant that filled the budget itself had its keyed
/// requests claimed and refused at 38,000 Redis commands a second (review 32). A declared
/// length the budget cannot take is refused before the claim: Redis is asked nothing, and
/// nothing is spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_request_the_body_budget_cannot_take_is_refused_before_its_claim() {
    let (_kafka, redis, _clock, gw) = stepped("releases-shared", |cfg| {
        cfg.idempotency.releases_per_tenant_per_sec = 1;
        cfg.idempotency.releases_per_tenant_burst = 1;
        cfg.server.max_inflight_body_bytes = 10_000;
        cfg.server.max_body_bytes = 10_000;
        cfg.tenants.push(tenant("beta", "beta-key", &["test.*"]));
        for t in &mut cfg.tenants {
            t.max_buffer_share = Some(1.0);
        }
    })
    .await;
    // Another tenant's upload holds 8,000 bytes of the 10,000 and stalls.
    let mut hog = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /v1/topics/{TOPIC}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer beta-key\r\n\
         Content-Type: application/json\r\nContent-Length: 9000\r\n\r\n"
    );
    hog.write_all(head.as_bytes()).await.expect("head");
    let opening = format!("{{\"records\":[{{\"value\":\"{}", "h".repeat(8_000 - 22));
    hog.write_all(opening.as_bytes()).await.expect("body");
    let deadline = Instant::now() + Duration::from_secs(10);
    while crate::common::exposition::metric(&gw, "floodgate_body_inflight_bytes").await
        < Some(8_000.0)
    {
        assert!(Instant::now() < deadline, "the hog never held its bytes");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // More than an equal share of the budget (5,000 of 10,000 between two tenants): no room
    // is made for it by cutting the hog's upload (`inflight_bodies::room`).
    let busy = json!({"records": [{"value": "b".repeat(6_000)}]});
    let before = redis_commands(&redis);
    for i in 0..5 {
        let (s, _, a) = keyed(&gw, &format!("busy-{i}"), KEY, &busy).await;
        assert_eq!((s, a["reason"].as_str()), (429, Some("server_busy")), "{a}");
    }
    let commands = redis_commands(&redis) - before;
    // The gateway's own background only (leases, heartbeats); a claim and its release are six.
    assert!(commands < 20, "{commands} commands for five refusals");
    drop(hog);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _, a) = keyed(&gw, "after", KEY, &busy).await;
        assert_ne!(
            a["reason"].as_str(),
            Some("idempotency_releases"),
            "five server_busy refusals before their claims spent nothing: {a}"
        );
        if s == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never admitted: {a}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.shutdown().await;
}
