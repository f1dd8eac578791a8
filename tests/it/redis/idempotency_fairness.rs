//! In cluster mode, a tenant cannot spend the Redis that holds every tenant's
//! `Idempotency-Key` answers: its refused keyed requests store nothing, and it keeps at most
//! `[idempotency] max_keys_per_tenant` answers (its oldest dropped past that). Run against a
//! real redis-server with a small `maxmemory` and `allkeys-lru`, as an operator bounding Redis
//! would: a flood that could fill it would evict the victim's answer, and its retry would be
//! written again.

use std::time::{Duration, Instant};

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
