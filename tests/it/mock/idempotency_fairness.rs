//! A tenant cannot spend the `Idempotency-Key` store another tenant relies on (single replica,
//! answers in memory): its refused keyed requests store nothing, and its admitted ones, past
//! its share, evict its own answers. The victim's retry is replayed — the same offset, nothing
//! written again.

use crate::common::*;
use serde_json::{json, Value};

const TOPIC: &str = "test.fair";

/// [`post_keyed`] to [`TOPIC`] with the idempotency key `key`.
pub async fn keyed(gw: &Gateway, key: &str, api_key: &str, body: &Value) -> (u16, bool, Value) {
    post_keyed(&gw.url(TOPIC), api_key, key, body).await
}

/// The flood: `refused` keyed requests refused whole (400 no records, 404 unknown partition)
/// and `admitted` keyed requests of `records` records each, all from "acme".
pub async fn flood(gw: &Gateway, refused: usize, admitted: usize, records: usize) {
    for i in 0..refused {
        let body = if i % 2 == 0 {
            json!({"records": []})
        } else {
            json!({"records": [{"value": 1, "partition": 7}]})
        };
        let (s, _, a) = keyed(gw, &format!("refused-{i}"), KEY, &body).await;
        assert!(s == 400 || s == 404, "{s} {a}");
    }
    let many: Vec<Value> = (0..records).map(|n| json!({ "value": n })).collect();
    for i in 0..admitted {
        let (s, _, a) = keyed(
            gw,
            &format!("admitted-{i}"),
            KEY,
            &json!({ "records": many }),
        )
        .await;
        assert_eq!(s, 200, "{a}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_flood_does_not_evict_the_victims_answer_in_memory() {
    let (cluster, gw) = gateway_on_mock(TOPIC, Time::Real, |c| {
        c.idempotency.max_entries = 200;
        c.idempotency.max_bytes = 1 << 20;
        c.limits.max_records_per_request = 1_000;
        c.tenants.push(tenant("beta", "beta-key", &["test.*"]));
    })
    .await;
    let order = json!({"records": [{"value": "victim-order"}]});
    let (s, _, first) = keyed(&gw, "order-1", "beta-key", &order).await;
    assert_eq!(s, 200, "{first}");
    flood(&gw, 1_000, 600, 1).await;
    let (s, replayed, again) = keyed(&gw, "order-1", "beta-key", &order).await;
    assert_eq!((s, replayed), (200, true), "{again}");
    assert_eq!(again["offsets"], first["offsets"], "the same offset");
    let (b, t) = (cluster.bootstrap_servers(), TOPIC.to_string());
    let values = tokio::task::spawn_blocking(move || read_back(&b, &t, 1, 601))
        .await
        .expect("reader");
    let victims = values
        .iter()
        .filter(|c| c.value.as_deref() == Some(&b"\"victim-order\""[..]))
        .count();
    assert_eq!(victims, 1, "the victim's record is written once");
    gw.shutdown().await;
}
