//! The shared registry: replicas that keep their tenants in one compacted Kafka topic. Against
//! Tansu (three replicas, restarts, concurrent edits, a garbage record) and librdkafka's mock
//! cluster (the broker taken down and brought back).

use std::time::{Duration, Instant};

use crate::common::exposition::{metric, wait_for_metric};
use crate::common::*;
use floodgate::config::Config;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::{json, Value};

fn shared(bootstrap: &str, registry_topic: &str) -> Config {
    let mut cfg = config(bootstrap);
    cfg.cluster.shared_registry = true;
    cfg.cluster.registry_topic = registry_topic.to_string();
    cfg.cluster.registry_secret_env = Some(REGISTRY_SECRET_ENV.into());
    cfg
}

async fn ready(gw: &Gateway, within: Duration) {
    let started = Instant::now();
    loop {
        let status = reqwest::get(gw.admin_url("/readyz"))
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        if status == 200 {
            return;
        }
        assert!(started.elapsed() < within, "not ready within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts a replica and waits until it is ready (20 s at most): how most replicas here start.
async fn replica(cfg: Config) -> Gateway {
    let gw = Gateway::start(cfg).await;
    ready(&gw, Duration::from_secs(20)).await;
    gw
}

/// Starts a replica of each configuration, then waits until all are ready (20 s at most).
async fn start_all(cfgs: Vec<Config>) -> Vec<Gateway> {
    let mut gws = Vec::with_capacity(cfgs.len());
    for cfg in cfgs {
        gws.push(Gateway::start(cfg).await);
    }
    for gw in &gws {
        ready(gw, Duration::from_secs(20)).await;
    }
    gws
}

/// [`start_all`] of `n` replicas on Tansu sharing `registry`.
async fn replicas(n: usize, registry: &str) -> Vec<Gateway> {
    start_all(vec![shared(&tansu(), registry); n]).await
}

/// The first two of `gws`.
fn two(mut gws: Vec<Gateway>) -> (Gateway, Gateway) {
    let b = gws.remove(1);
    (gws.remove(0), b)
}

/// Polls `path` on `gw`'s admin API (every `every`) until `done` holds for its answer, which
/// it returns; fails with the last answer after `within`.
async fn until_view(
    gw: &Gateway,
    path: &str,
    (within, every): (Duration, Duration),
    done: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let (_, view) = admin_get(gw, path).await;
        if done(&view) {
            return view;
        }
        assert!(started.elapsed() < within, "{view}");
        tokio::time::sleep(every).await;
    }
}

/// PATCHes acme's `records_per_sec` on `gw` until it is answered 200 (a writer reconnecting
/// after an outage); fails with the last answer after `within`.
async fn patch_until_written(gw: &Gateway, rate: u64, within: Duration) {
    let started = Instant::now();
    loop {
        let body = json!({"records_per_sec": rate});
        let (s, body) = admin_patch(gw, "/admin/tenants/acme", body).await;
        if s == 200 {
            return;
        }
        assert!(started.elapsed() < within, "{s} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Kafka producer on Tansu, writing to the registry topic as any client allowed to could.
fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", tansu())
        .create()
        .expect("producer")
}

/// A consumer reading `registry` on Tansu from its first record.
fn registry_reader(registry: &str) -> StreamConsumer {
    let reader: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", tansu())
        .set("group.id", unique_topic("reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(registry, 0, rdkafka::Offset::Beginning)
        .expect("partition");
    reader.assign(&tpl).expect("assign");
    reader
}

/// The next record `reader` gets, within 10 s.
async fn next_record(reader: &StreamConsumer) -> BorrowedMessage<'_> {
    tokio::time::timeout(Duration::from_secs(10), reader.recv())
        .await
        .expect("a record in time")
        .expect("a record")
}

/// A replica that reads no verifiable entry stays unready (two seconds after its start) and
/// says why.
async fn assert_unverified(gw: &Gateway) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, body) = readiness(gw).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (503, Some("registry_unverified")),
        "{body}"
    );
}

fn one() -> serde_json::Value {
    json!({"records": [{"value": "x"}]})
}

async fn produce_status(gw: &Gateway, topic: &str, key: &str) -> u16 {
    post_json(&format!("{}?async=true", gw.url(topic)), key, &one())
        .await
        .0
}

/// Polls until `gw` answers `status` to a produce with `key`; returns how long it took.
async fn until_status(
    gw: &Gateway,
    topic: &str,
    key: &str,
    status: u16,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let got = produce_status(gw, topic, key).await;
        if got == status {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "still {got}, not {status}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_on_any_replica_reach_all_within_a_second_and_survive_restarts() {
    let topic = tansu_topic("test.registry", 1).await;
    let registry = unique_topic("_fg_registry");
    let mut gws = replicas(3, &registry).await;
    // Three replicas started on an empty topic and may all have seeded it: acme applied once.
    let (s, audit) = admin_get(&gws[0], "/admin/audit").await;
    assert_eq!(s, 200, "{audit}");
    let applied = audit["entries"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter(|x| x["key"] == "tenant:acme" && x["outcome"] == "applied")
                .count()
        })
        .unwrap_or(0);
    assert_eq!(applied, 1, "{audit}");

    // A tenant and a key made on A work on B and C within a second.
    let (s, a) = admin_put(
        &gws[0],
        "/admin/tenants/beta",
        json!({"topics": ["test.*"]}),
    )
    .await;
    assert_eq!(s, 201, "{a}");
    let (s, key) = admin_post(&gws[0], "/admin/tenants/beta/keys").await;
    assert_eq!(s, 201, "{key}");
    let beta = key["api_key"].as_str().expect("key").to_string();
    let mut slowest = Duration::ZERO;
    for gw in &gws[1..] {
        slowest = slowest.max(until_status(gw, &topic, &beta, 202, Duration::from_secs(1)).await);
    }
    eprintln!("a key issued on A worked on B and C after {slowest:?}");

    // A budget lowered on C: A refuses at once after propagation.
    let (s, a) = admin_patch(
        &gws[2],
        "/admin/tenants/beta",
        json!({"records_per_sec": 1, "records_burst": 1}),
    )
    .await;
    assert_eq!(s, 200, "{a}");
    let quick = (Duration::from_secs(1), Duration::from_millis(10));
    until_view(&gws[0], "/admin/tenants/beta", quick, |v| {
        v["records_per_sec"] == 1
    })
    .await;
    assert_eq!(produce_status(&gws[0], &topic, &beta).await, 202);
    assert_eq!(produce_status(&gws[0], &topic, &beta).await, 429);

    // Deleted on B: 401 everywhere.
    let (s, _) = admin_delete(&gws[1], "/admin/tenants/beta").await;
    assert_eq!(s, 204);
    for gw in [&gws[0], &gws[2]] {
        until_status(gw, &topic, &beta, 401, Duration::from_secs(1)).await;
    }
    // A budget for acme, to find after the restart.
    let (s, a) = admin_patch(
        &gws[1],
        "/admin/tenants/acme",
        json!({"bytes_per_sec": 123456}),
    )
    .await;
    assert_eq!(s, 200, "{a}");

    // Every replica restarts: the registry is the topic's.
    for gw in gws.drain(..) {
        gw.shutdown().await;
    }
    let gws = replicas(3, &registry).await;
    for gw in &gws {
        assert_eq!(
            produce_status(gw, &topic, &beta).await,
            401,
            "beta stays deleted"
        );
        assert_eq!(produce_status(gw, &topic, KEY).await, 202);
        let (_, view) = admin_get(gw, "/admin/tenants/acme").await;
        assert_eq!(view["bytes_per_sec"], 123456, "{view}");
    }
    // A fourth replica joining later gets the same registry.
    let late = replica(shared(&tansu(), &registry)).await;
    let (_, listed) = admin_get(&late, "/admin/tenants").await;
    let (_, listed_a) = admin_get(&gws[0], "/admin/tenants").await;
    let ids = |v: &serde_json::Value| {
        v["tenants"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|x| {
                        (
                            x["id"].clone(),
                            x["version"].clone(),
                            x["bytes_per_sec"].clone(),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert_eq!(ids(&listed), ids(&listed_a));
    late.shutdown().await;
    for gw in gws {
        gw.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edits_from_the_same_version_one_wins_and_the_other_gets_409() {
    let registry = unique_topic("_fg_registry");
    let (a, b) = two(replicas(2, &registry).await);
    let (_, view) = admin_get(&a, "/admin/tenants/acme").await;
    let version = view["version"].as_u64().expect("version");
    // B has read the same version.
    let started = Instant::now();
    while admin_get(&b, "/admin/tenants/acme").await.1["version"] != version {
        assert!(started.elapsed() < Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let patch = |gw: &Gateway, rate: u64| {
        client()
            .patch(gw.admin_url("/admin/tenants/acme"))
            .bearer_auth(ADMIN_TOKEN)
            .header("if-match", format!("\"{version}\""))
            .json(&json!({"records_per_sec": rate}))
            .send()
    };
    let (ra, rb) = tokio::join!(patch(&a, 111), patch(&b, 222));
    let (ra, rb) = (ra.expect("sent"), rb.expect("sent"));
    let mut statuses = [ra.status().as_u16(), rb.status().as_u16()];
    let bodies = [
        ra.json::<serde_json::Value>().await.expect("json"),
        rb.json::<serde_json::Value>().await.expect("json"),
    ];
    let loser = usize::from(statuses[0] == 200);
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{bodies:?}");
    assert_eq!(bodies[loser]["current_version"], version + 1, "{bodies:?}");
    let winner_rate = if loser == 1 { 111 } else { 222 };
    // Both replicas end with the winner's value; nothing else was lost.
    for gw in [&a, &b] {
        let quick = (Duration::from_secs(1), Duration::from_millis(10));
        let view = until_view(gw, "/admin/tenants/acme", quick, |v| {
            v["records_per_sec"] == winner_rate
        })
        .await;
        assert_eq!(view["version"], version + 1);
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// Anyone allowed to write the registry topic — another Kafka client here — writes records
/// that look like entries but carry no valid MAC: a tenant with its own key and every topic,
/// a tombstone for a real tenant, a flood of junk. None applies, none is audited, the real
/// tenants and the audit list are untouched, and every replica reads past them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_written_to_the_registry_topic_without_the_secret_are_skipped_and_counted() {
    let registry = unique_topic("_fg_registry");
    let topic = tansu_topic("test.forged", 1).await;
    let a = replica(shared(&tansu(), &registry)).await;
    assert_eq!(produce_status(&a, &topic, KEY).await, 202);
    let producer = producer();
    let evil = json!({"id": "evil", "topics": ["*"],
        "api_key_sha256": [floodgate::identity::ApiKeyHash::of_key("evil-key").to_hex()]});
    let forge = |key: &'static str,
                 value: Option<String>,
                 base: &'static str,
                 mac: Option<&'static str>| {
        let producer = producer.clone();
        let registry = registry.clone();
        async move {
            let mut headers = rdkafka::message::OwnedHeaders::new();
            for (name, v) in [
                ("fg-base", base),
                ("fg-actor", "ops"),
                ("fg-action", "tenant.put"),
                ("fg-replica", "x"),
            ] {
                headers = headers.insert(rdkafka::message::Header {
                    key: name,
                    value: Some(v),
                });
            }
            if let Some(mac) = mac {
                headers = headers.insert(rdkafka::message::Header {
                    key: "fg-mac",
                    value: Some(mac),
                });
            }
            let mut record = FutureRecord::<str, String>::to(&registry)
                .key(key)
                .partition(0)
                .headers(headers);
            if let Some(v) = &value {
                record = record.payload(v);
            }
            producer
                .send(record, Duration::from_secs(5))
                .await
                .expect("written");
        }
    };
    forge("tenant:evil", Some(evil.to_string()), "0", None).await;
    forge("tenant:acme", None, "1", None).await;
    forge("tenant:evil", Some(evil.to_string()), "0", Some("00ff00ff")).await;
    for i in 0..1100 {
        let _ = i;
        forge("nonsense", Some("{}".into()), "0", None).await;
    }
    // The replica stays up and applies what comes next.
    let (s, a_body) = admin_put(&a, "/admin/tenants/gamma", json!({"topics": ["test.*"]})).await;
    assert_eq!(s, 201, "{a_body}");
    assert_eq!(
        produce_status(&a, &topic, "evil-key").await,
        401,
        "no forged tenant"
    );
    assert_eq!(
        produce_status(&a, &topic, KEY).await,
        202,
        "no forged deletion"
    );
    let (_, audit) = admin_get(&a, "/admin/audit?since=0").await;
    let entries = audit["entries"].as_array().cloned().unwrap_or_default();
    let keys: Vec<&str> = entries.iter().filter_map(|e| e["key"].as_str()).collect();
    assert_eq!(
        keys,
        ["tenant:acme", "file:acme", "tenant:gamma"],
        "{audit}"
    );
    assert!(
        !audit
            .to_string()
            .contains(&floodgate::identity::ApiKeyHash::of_key(KEY).to_hex()),
        "the audit shows key ids, never digests: {audit}"
    );
    assert_eq!(
        metric(
            &a,
            "floodgate_registry_rejected_entries_total{reason=\"unsigned\"}"
        )
        .await,
        Some(1102.0)
    );
    assert_eq!(
        metric(
            &a,
            "floodgate_registry_rejected_entries_total{reason=\"bad_mac\"}"
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        metric(&a, "floodgate_registry_rewritten_entries_total").await,
        Some(0.0),
        "records under keys of no entry of ours are nothing to write again"
    );
    // A new replica reads past them too.
    let b = replica(shared(&tansu(), &registry)).await;
    let (s, _) = admin_get(&b, "/admin/tenants/gamma").await;
    assert_eq!(s, 200);
    let (s, _) = admin_get(&b, "/admin/tenants/evil").await;
    assert_eq!(s, 404);
    a.shutdown().await;
    b.shutdown().await;
}

/// A replica on Tansu sharing `registry` whose secrets are `secrets` (not the tests' one).
async fn start_with_secrets(registry: &str, secrets: &str) -> Gateway {
    use floodgate::registry::RegistrySecrets;
    let mut options = monotonic_options();
    options.registry_secrets = Some(RegistrySecrets::parse(secrets).expect("secrets"));
    Gateway::start_options(shared(&tansu(), registry), options).await
}

/// [`start_with_secrets`], once it is ready (20 s at most).
async fn ready_with_secrets(registry: &str, secrets: &str) -> Gateway {
    let gw = start_with_secrets(registry, secrets).await;
    ready(&gw, Duration::from_secs(20)).await;
    gw
}

async fn readiness(gw: &Gateway) -> (u16, serde_json::Value) {
    let r = reqwest::get(gw.admin_url("/readyz")).await.expect("readyz");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

/// Every tenant id a replica holds, with its rate, as its admin API lists them.
async fn holdings(gw: &Gateway) -> Vec<(String, serde_json::Value)> {
    let (_, body) = admin_get(gw, "/admin/tenants?limit=1000").await;
    let mut out: Vec<(String, serde_json::Value)> = body["tenants"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap_or_default().to_string(),
                t["records_per_sec"].clone(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Two replicas hold the same tenants with the same rates (within `within`).
async fn agree(a: &Gateway, b: &Gateway, within: Duration) -> Vec<(String, serde_json::Value)> {
    let deadline = Instant::now() + within;
    loop {
        let (x, y) = (holdings(a).await, holdings(b).await);
        if x == y {
            return x;
        }
        assert!(Instant::now() < deadline, "replicas differ: {x:?} vs {y:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A change of tenant `id`'s rate on `gw`, answered 200 or 201.
async fn set_rate(gw: &Gateway, id: &str, rate: u64) {
    let (s, body) = admin_put(
        gw,
        &format!("/admin/tenants/{id}"),
        json!({"topics": ["test.*"], "records_per_sec": rate}),
    )
    .await;
    assert!(s == 200 || s == 201, "{s} {body}");
}

/// Rotating the secret the way the book says — every replica first accepts the new secret
/// (`old,new`), then signs with it (`new,old`), then drops the old one — loses no change made
/// on any replica at any step and never leaves two replicas holding different tenants; the
/// entries only `old` verifies are signed again, and once the gauge of them reads 0 a replica
/// that knows only `new` has the whole registry. A replica with a wrong secret is not ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotation_signs_every_entry_again_and_the_old_secret_can_then_go() {
    let registry = unique_topic("_fg_registry");
    const OLD: &str = "old-secret-0123456789";
    const ACCEPT: &str = "old-secret-0123456789,new-secret-0123456789";
    const SIGN: &str = "new-secret-0123456789,old-secret-0123456789";
    const NEW: &str = "new-secret-0123456789";
    let mut a = ready_with_secrets(&registry, OLD).await;
    let mut b = ready_with_secrets(&registry, OLD).await;
    let mut rate = 10;
    // Each step: one replica restarted on the next list, a change on each replica, and the
    // two agree on everything.
    for (i, list) in [ACCEPT, ACCEPT, SIGN, SIGN].iter().enumerate() {
        let restarted = ready_with_secrets(&registry, list).await;
        if i % 2 == 0 {
            std::mem::replace(&mut a, restarted).shutdown().await;
        } else {
            std::mem::replace(&mut b, restarted).shutdown().await;
        }
        rate += 1;
        set_rate(&a, &format!("on-a-{i}"), rate).await;
        set_rate(&b, "shared", rate).await;
        // (A change is made from the version a replica has read: wait until a has read b's.)
        agree(&a, &b, Duration::from_secs(10)).await;
        rate += 1;
        set_rate(&a, "shared", rate).await;
        let held = agree(&a, &b, Duration::from_secs(10)).await;
        assert!(
            held.iter()
                .any(|(id, r)| id == "shared" && *r == json!(rate)),
            "step {i}: the last change holds on both: {held:?}"
        );
    }
    // Both sign with the new secret: what only the old one verifies is signed again.
    for gw in [&a, &b] {
        let gauge = "floodgate_registry_old_secret_entries";
        wait_for_metric(gw, gauge, 0.0, Duration::from_secs(15)).await;
    }
    let rewritten = metric(&a, "floodgate_registry_rewritten_entries_total")
        .await
        .unwrap_or(0.0)
        + metric(&b, "floodgate_registry_rewritten_entries_total")
            .await
            .unwrap_or(0.0);
    assert!(
        rewritten < 100.0,
        "no ping-pong: {rewritten} entries written again"
    );
    let held = holdings(&a).await;
    // The old secret goes: a fresh replica that knows only the new one has every tenant.
    a.shutdown().await;
    let fresh = ready_with_secrets(&registry, NEW).await;
    assert_eq!(holdings(&fresh).await, held);
    let topic = tansu_topic("test.rot", 1).await;
    assert_eq!(produce_status(&fresh, &topic, KEY).await, 202);
    // A replica with a secret no record verifies stays unready, and says why.
    let wrong = start_with_secrets(&registry, "wrong-secret-0123456789").await;
    assert_unverified(&wrong).await;
    b.shutdown().await;
    fresh.shutdown().await;
    wrong.shutdown().await;
}

/// A topic that holds only unsigned records (written by no replica) is a registry never
/// written: the first replica seeds it and serves, rather than stay unready for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_holding_only_unsigned_records_is_seeded_like_an_empty_one() {
    let registry = tansu_topic("_fg_registry", 1).await;
    producer()
        .send(
            FutureRecord::<str, str>::to(&registry)
                .key("x")
                .payload("x")
                .partition(0),
            Duration::from_secs(5),
        )
        .await
        .expect("written");
    let a = replica(shared(&tansu(), &registry)).await;
    let topic = tansu_topic("test.seeded", 1).await;
    assert_eq!(produce_status(&a, &topic, KEY).await, 202);
    a.shutdown().await;
}

/// Records copied, byte for byte and with their headers, into another registry topic are not
/// entries there (the MAC covers the topic's name): a replica on that topic has no tenant and
/// does not become ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_copied_into_another_topic_is_not_a_registry() {
    use rdkafka::message::Message as _;
    let registry = unique_topic("_fg_registry");
    let a = replica(shared(&tansu(), &registry)).await;
    let copy = tansu_topic("_fg_registry_copy", 1).await;
    let reader = registry_reader(&registry);
    let message = next_record(&reader).await;
    let mut record = FutureRecord::<[u8], [u8]>::to(&copy).partition(0);
    if let Some(k) = message.key() {
        record = record.key(k);
    }
    if let Some(p) = message.payload() {
        record = record.payload(p);
    }
    if let Some(h) = message.headers() {
        record = record.headers(h.detach());
    }
    producer()
        .send(record, Duration::from_secs(5))
        .await
        .expect("copied");
    let mut cfg = shared(&tansu(), &copy);
    cfg.tenants.clear();
    let b = Gateway::start(cfg).await;
    assert_unverified(&b).await;
    assert_eq!(
        metric(
            &b,
            "floodgate_registry_rejected_entries_total{reason=\"bad_mac\"}"
        )
        .await,
        Some(1.0)
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// A record written without the secret under the very Kafka key of a real entry (read from
/// the topic) would, once compacted, be the only record of that key: the replicas write the
/// real entry again after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_record_under_a_real_entrys_key_is_followed_by_the_real_one() {
    use rdkafka::message::{Headers as _, Message as _};
    let registry = unique_topic("_fg_registry");
    let a = replica(shared(&tansu(), &registry)).await;
    let reader = registry_reader(&registry);
    let acme_key = loop {
        let m = next_record(&reader).await;
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        if key.starts_with("tenant:acme#") {
            break key;
        }
    };
    // A Kafka tombstone under acme's key: compaction would drop acme's entry with it.
    producer()
        .send(
            FutureRecord::<str, [u8]>::to(&registry)
                .key(&acme_key)
                .partition(0),
            Duration::from_secs(5),
        )
        .await
        .expect("written");
    let rewritten = "floodgate_registry_rewritten_entries_total";
    wait_for_metric(&a, rewritten, 1.0, Duration::from_secs(10)).await;
    // The last record under acme's key is an entry again, and acme still works.
    let last = loop {
        let m = next_record(&reader).await;
        if m.key() == Some(acme_key.as_bytes()) && m.payload().is_some() {
            break m.headers().map(|h| h.iter().any(|h| h.key == "fg-mac"));
        }
    };
    assert_eq!(last, Some(true));
    let pending = "floodgate_registry_reasserts_pending";
    wait_for_metric(&a, pending, 0.0, Duration::from_secs(5)).await;
    let topic = tansu_topic("test.forged", 1).await;
    assert_eq!(produce_status(&a, &topic, KEY).await, 202);
    // Written again as the same entry: no version moved (an If-Match client sees nothing),
    // nothing was listed in the audit.
    let (_, view) = admin_get(&a, "/admin/tenants/acme").await;
    assert_eq!(view["version"], json!(1), "{view}");
    let (_, audit) = admin_get(&a, "/admin/audit?since=0").await;
    assert!(!audit.to_string().contains("registry.reassert"), "{audit}");
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_kafka_down_admin_writes_answer_503_and_produce_keeps_the_last_registry() {
    let registry = "_fg_registry_mock";
    let cluster = mock_cluster(&["test.reg", registry]);
    let bootstrap = cluster.bootstrap_servers();
    let quick = |cfg: &mut Config| {
        cfg.cluster.registry_write_timeout_ms = 1000;
    };
    let mut cfg = shared(&bootstrap, registry);
    quick(&mut cfg);
    let (a, b) = two(start_all(vec![cfg.clone(); 2]).await);

    cluster.broker_down(1).expect("down");
    let started = Instant::now();
    let (s, body) = admin_patch(&a, "/admin/tenants/acme", json!({"records_per_sec": 7})).await;
    let took = started.elapsed();
    assert_eq!(
        (s, body["error"].as_str()),
        (503, Some("kafka_unavailable")),
        "{body}"
    );
    assert!(took < Duration::from_secs(3), "answered in {took:?}");
    // Produce still authenticates against the registry as last read.
    assert_eq!(produce_status(&a, "test.reg", KEY).await, 202);
    // A replica starting now cannot read the registry: not ready, and no 401 for a valid key.
    let c = Gateway::start(cfg.clone()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, readiness) = {
        let r = reqwest::get(c.admin_url("/readyz")).await.expect("readyz");
        (
            r.status().as_u16(),
            r.json::<serde_json::Value>().await.expect("json"),
        )
    };
    assert_eq!(
        (s, readiness["reason"].as_str()),
        (503, Some("registry_loading"))
    );
    assert_eq!(produce_status(&c, "test.reg", KEY).await, 503);

    cluster.broker_up(1).expect("up");
    // Writes work again without restart, and a change made on B reaches A.
    let started = Instant::now();
    patch_until_written(&b, 5, Duration::from_secs(15)).await;
    let recovered = started.elapsed();
    // The others follow once their readers are back: librdkafka's reconnect backoff is kept
    // to a second (kafka::settings), though B's writer may have been back before A's reader
    // was (a CI run saw A still stale 2 s after B's write).
    for gw in [&a, &c] {
        ready(gw, Duration::from_secs(15)).await;
        let started = Instant::now();
        let patience = (Duration::from_secs(5), Duration::from_millis(20));
        until_view(gw, "/admin/tenants/acme", patience, |v| {
            v["records_per_sec"] == 5
        })
        .await;
        eprintln!("B's write followed {:?} after ready", started.elapsed());
    }
    // A's own writer may still be reconnecting (its producer's idempotence state is bumped
    // after the timed-out write): within a few seconds it writes too.
    patch_until_written(&a, 6, Duration::from_secs(8)).await;
    eprintln!(
        "503 after {took:?} with Kafka down; writes worked again {recovered:?} after it came back"
    );
    for gw in [a, b, c] {
        gw.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_moves_to_the_topic_and_back_with_the_registry_commands() {
    use floodgate::registry::{Persistence, RegistryState, StateFile};
    let broker = tansu();
    let registry = unique_topic("_fg_registry");
    let dir = std::env::temp_dir().join(unique_topic("fg-transfer"));
    std::fs::create_dir_all(&dir).expect("dir");
    // A single instance's state file, with a tenant of its own.
    let mut single = config(&broker);
    single
        .tenants
        .push(tenant("delta", "test-key-delta", &["test.*"]));
    let state_path = dir.join("state.json");
    StateFile::open(&state_path)
        .expect("state file")
        .save(&RegistryState::from_config(&single))
        .expect("saved");
    let cfg_path = dir.join("floodgate.toml");
    std::fs::write(
        &cfg_path,
        format!("[kafka]\nbootstrap_servers = \"{broker}\"\n[cluster]\nregistry_topic = \"{registry}\"\nregistry_secret_env = \"{REGISTRY_SECRET_ENV}\"\n"),
    )
    .expect("config");
    let bin = env!("CARGO_BIN_EXE_floodgate");
    let run = |args: &[&str]| {
        tokio::task::block_in_place(|| {
            std::process::Command::new(bin)
                .env(REGISTRY_SECRET_ENV, REGISTRY_SECRET)
                .arg("--config")
                .arg(&cfg_path)
                .args(args)
                .output()
                .expect("floodgate runs")
        })
    };
    // A command that must succeed: its standard output.
    let run_ok = |args: &[&str]| {
        let out = run(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    run_ok(&[
        "registry",
        "import",
        state_path.to_str().expect("utf-8 path"),
    ]);
    // A replica on the topic (its own file names no tenant) serves delta's key.
    let mut cfg = shared(&broker, &registry);
    cfg.tenants.clear();
    let topic = tansu_topic("test.transfer", 1).await;
    let gw = replica(cfg).await;
    assert_eq!(produce_status(&gw, &topic, "test-key-delta").await, 202);
    gw.shutdown().await;
    // And export gives the same tenants back.
    let stdout = run_ok(&["registry", "export"]);
    let exported: serde_json::Value = serde_json::from_slice(&stdout).expect("JSON");
    let mut ids: Vec<_> = exported["tenants"]
        .as_object()
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    ids.sort();
    assert_eq!(ids, ["acme", "delta"]);
    assert!(
        !String::from_utf8_lossy(&stdout).contains("api_key_sha256"),
        "standard output shows key ids only"
    );
    // A state file import can read, only its owner can read; never over an existing file.
    let file = dir.join("exported.json");
    let path = file.to_str().expect("utf-8 path");
    run_ok(&["registry", "export", "--out", path]);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&file)
        .expect("written")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&file).expect("read");
    assert!(text.contains(&floodgate::identity::ApiKeyHash::of_key("test-key-delta").to_hex()));
    let out = run(&["registry", "export", "--out", path]);
    assert!(!out.status.success(), "an existing file is not overwritten");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The JWT claims and certificate names a tenant accepts are registry state like its keys: set
/// on one replica through the admin API, a token mapped by them works on another (issue #32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_jwt_claims_set_on_one_replica_admit_its_token_on_another() {
    let ed = idp::Signer::ed("ed-1");
    let jwks = idp::JwksServer::start(idp::jwks(&[&ed])).await;
    let topic = tansu_topic("test.registry-jwt", 1).await;
    let registry = unique_topic("_fg_registry");
    let issuer = "https://idp.test/shared";
    let with_jwt = |mut cfg: Config| {
        cfg.auth.jwt = vec![floodgate::config::JwtIssuerConfig {
            issuer: issuer.into(),
            audiences: vec!["floodgate".into()],
            jwks_url: Some(jwks.url()),
            jwks_file: None,
            algorithms: vec!["EdDSA".into()],
            leeway_s: 30,
            refresh_s: 300,
            min_refetch_s: 30,
            fetch_timeout_ms: 2_000,
            tenant_claim: "client_id".into(),
            map: Some(Default::default()), // listed claims only
            topics_claim: None,
        }];
        cfg
    };
    let (a, b) = two(start_all(vec![with_jwt(shared(&tansu(), &registry)); 2]).await);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let token = ed.sign(
        &json!({"iss": issuer, "aud": "floodgate", "client_id": "orders-svc",
                                "nbf": now, "exp": now + 600}),
    );
    assert_eq!(
        produce_status(&b, &topic, &token).await,
        403,
        "no tenant lists it yet"
    );
    let (s, body) = admin_put(
        &a,
        "/admin/tenants/orders",
        json!({"topics": ["test.*"],
                    "jwt_claims": [{"issuer": issuer, "value": "orders-svc"}]}),
    )
    .await;
    assert_eq!(s, 201, "{body}");
    until_status(&b, &topic, &token, 202, Duration::from_secs(5)).await;
    let (s, view) = admin_get(&b, "/admin/tenants/orders").await;
    assert_eq!(s, 200, "{view}");
    assert_eq!(view["jwt_claims"][0]["value"], "orders-svc", "{view}");
    // Removed on B: refused on A.
    let (s, body) = admin_patch(&b, "/admin/tenants/orders", json!({"jwt_claims": null})).await;
    assert_eq!(s, 200, "{body}");
    until_status(&a, &topic, &token, 403, Duration::from_secs(5)).await;
    a.shutdown().await;
    b.shutdown().await;
}

/// Polls `/readyz` on `gw` until its status is `status`; fails after 10 s.
async fn until_ready_is(gw: &Gateway, status: u16) -> Value {
    let started = Instant::now();
    loop {
        let (s, body) = readiness(gw).await;
        if s == status {
            return body;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{s} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A replica without Redis in a fleet sharing its registry with replicas that count quotas in
/// Redis would count a quota set there alone (review 41-r4: 100 admitted of a global quota of
/// 50): it says it is not ready while any quota is set, and ready again once none is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_would_count_quotas_alone_takes_no_traffic_while_there_are_any() {
    let registry = unique_topic("_fg_registry");
    let mut counted = shared(&tansu(), &registry);
    counted.cluster.redis_url = Some(redis_url());
    counted.cluster.key_prefix = redis_prefix("apart");
    let (a, b) = two(start_all(vec![counted, shared(&tansu(), &registry)]).await);
    let day = json!({"quotas": [{"window": "day", "records": 50}]});
    let (s, body) = admin_put(&a, "/admin/global", day).await;
    assert_eq!(s, 200, "{body}");
    let body = until_ready_is(&b, 503).await;
    assert_eq!(body["reason"], "quotas_counted_apart", "{body}");
    assert_eq!(
        readiness(&a).await.0,
        200,
        "the replica with Redis counts them"
    );
    // And the admin API of the one without refuses to set them.
    let (s, body) = admin_put(
        &b,
        "/admin/global",
        json!({"quotas": [{"window": "day", "records": 9}]}),
    )
    .await;
    assert_eq!((s, body["field"].as_str()), (422, Some("quotas")), "{body}");
    let (s, body) = admin_put(&a, "/admin/global", json!({})).await;
    assert_eq!(s, 200, "{body}");
    until_ready_is(&b, 200).await;
    a.shutdown().await;
    b.shutdown().await;
}
