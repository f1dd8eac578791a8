//! #37: the schema step's work before admission is bounded and charged. Each test is one of the
//! review's attacks: a costly check, regexes that compile to gigabytes, compiles for subjects
//! the tenant may not use, registrations by refused requests, unknown versions asked again
//! and again. Against Tansu and the test Schema Registry.

use std::time::{Duration, Instant};

use crate::common::schema_registry::{Call, SchemaRegistry};
use crate::common::*;
use serde_json::{json, Value};

const SLOW_KEY: &str = "test-key-slow";
const PADDED_KEY: &str = "test-key-padded";

/// A gateway with the registry and two tenants: `acme` (unlimited) and `slow` (1 record/s).
async fn gateway(registry: &SchemaRegistry, extra: &str) -> Gateway {
    Gateway::start(gateway_config(registry, extra)).await
}

fn gateway_config(registry: &SchemaRegistry, extra: &str) -> floodgate::config::Config {
    let text = format!("[schema_registry]\nurl = \"{}\"\n{extra}\n", registry.url());
    let mut cfg = config_with_toml(&text);
    let mut slow = tenant("slow", SLOW_KEY, &["test.*"]);
    slow.records_per_sec = Some(1);
    slow.records_burst = Some(1);
    // 1,000 bytes at once: a record its schema's defaults make larger is refused by it.
    let mut padded = tenant("padded", PADDED_KEY, &["test.*"]);
    padded.bytes_per_sec = Some(1_000);
    padded.bytes_burst = Some(1_000);
    cfg.tenants = vec![tenant("acme", KEY, &["test.*"]), slow, padded];
    cfg
}

/// One v3 record: status and answer.
async fn v3(gw: &Gateway, key: &str, topic: &str, record: &Value) -> (u16, Value, Duration) {
    v3_to(gw.addr, key, topic, record).await
}

/// [`v3`] to a gateway's address (from a task of its own).
async fn v3_to(
    addr: std::net::SocketAddr,
    key: &str,
    topic: &str,
    record: &Value,
) -> (u16, Value, Duration) {
    let started = Instant::now();
    let url = format!("http://{addr}/v3/clusters/any-id/topics/{topic}/records");
    let content_type = [("content-type", "application/json")];
    let (status, _, text) = post_text(&url, key, &content_type, record.to_string()).await;
    let answer = serde_json::from_str(text.trim_end()).unwrap_or(Value::String(text));
    (status, answer, started.elapsed())
}

/// A Confluent v2 produce of `body` with `key` in the embedded `format` (`avro`,
/// `jsonschema`): status and answer.
async fn v2(gw: &Gateway, key: &str, topic: &str, format: &str, body: &Value) -> (u16, Value) {
    let url = format!("http://{}/topics/{topic}", gw.addr);
    let content_type = format!("application/vnd.kafka.{format}.v2+json");
    let headers = [("content-type", content_type.as_str())];
    let (status, _, text) = post_text(&url, key, &headers, body.to_string()).await;
    let answer = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, answer)
}

/// A test registry and a topic of the test's own on Tansu: how most tests here start.
async fn registry_and_topic(prefix: &str) -> (SchemaRegistry, String) {
    (SchemaRegistry::start().await, tansu_topic(prefix, 1).await)
}

/// One millisecond of unpaid schema work a second, one at once: any compile or refused
/// check spends it.
const ONE_MS_UNPAID: &str = "tenant_unpaid_work_ms_per_sec = 1\ntenant_unpaid_work_ms_burst = 1";

/// The JSON Schema of an object whose `a` is an integer: the schema of most records here.
fn integer_a() -> String {
    json!({"type": "object", "properties": {"a": {"type": "integer"}}}).to_string()
}

fn message(answer: &Value) -> String {
    answer["message"].as_str().unwrap_or_default().to_string()
}

/// A record of more than one body frame (~16 KB) is answered as a stream: its refusal is a
/// report (`error_code` the HTTP status) under 200. Either way, the status the record got.
fn refused_with(status: u16, answer: &Value) -> u64 {
    if status == 200 {
        answer["error_code"].as_u64().unwrap_or(200)
    } else {
        u64::from(status)
    }
}

/// The review's regex schema: properties each with `\w{2000+j}` (1,000 of them: 47 KB of
/// text, ~500 MB compiled).
fn pattern_schema(count: usize, start: usize) -> String {
    let props: serde_json::Map<String, Value> = (0..count)
        .map(|j| {
            (
                format!("f{j}"),
                json!({"type": "string", "pattern": format!("\\w{{{}}}", start + j)}),
            )
        })
        .collect();
    json!({"type": "object", "properties": props, "required": ["missing"]}).to_string()
}

#[tokio::test]
async fn a_record_whose_check_would_cost_seconds_is_refused_before_it_runs() {
    let (registry, topic) = registry_and_topic("test.costly").await;
    let gw = gateway(&registry, "").await;
    // A float enum is scanned in full for every element (46 s of CPU for this record).
    let floats: Vec<f64> = (0..28_000).map(|i| f64::from(i) + 0.5).collect();
    let schema = json!({"type": "array", "items": {"enum": floats}}).to_string();
    let mut data = vec![27_999.5; 100_000];
    data.push(-1.5);
    let record = json!({"value": {"type": "JSONSCHEMA", "schema": schema, "data": data}});
    let (s, answer, took) = v3(&gw, KEY, &topic, &record).await;
    assert_eq!(refused_with(s, &answer), 422, "{answer}");
    assert!(message(&answer).contains("subschema checks"), "{answer}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(registry.calls(Call::Register), 0, "nothing registered");
    // A plain record of another request goes through meanwhile.
    let (s, answer, _) = v3(
        &gw,
        KEY,
        &topic,
        &json!({"value": {"type": "JSON", "data": 1}}),
    )
    .await;
    assert_eq!(s, 200, "{answer}");
}

#[tokio::test]
async fn regexes_are_bounded_and_a_subject_is_checked_before_anything_compiles() {
    let (registry, topic) = registry_and_topic("test.patterns").await;
    let gw = gateway(&registry, "").await;
    // Three 47 KB schemas took the review's gateway from 18 MiB to 1.5 GiB, each answered 422.
    for i in 0..3 {
        let schema = pattern_schema(1_000, 2_000 + i * 1_000);
        let record =
            json!({"value": {"type": "JSONSCHEMA", "schema": schema, "data": {"f0": "x"}}});
        let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
        assert_eq!(refused_with(s, &answer), 422, "{answer}");
        assert!(message(&answer).contains("max_schema_patterns"), "{answer}");
    }
    // One regex past its compiled size is refused naming the bound.
    let record =
        json!({"value": {"type": "JSONSCHEMA", "schema": pattern_schema(1, 5_000), "data": {}}});
    let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
    assert_eq!(s, 422, "{answer}");
    assert_eq!(answer["error_code"], 42205, "{answer}");
    assert!(message(&answer).contains("max_pattern_bytes"), "{answer}");
    // Another team's subject is refused before the schema is looked at: a subject error, not
    // the schema's (which would be too costly to compile).
    let record = json!({"value": {"type": "JSONSCHEMA", "subject": "someone-else-value",
        "schema": pattern_schema(1_000, 2_000), "data": {"f0": "x"}}});
    for _ in 0..3 {
        let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
        assert_eq!(refused_with(s, &answer), 422, "{answer}");
        assert!(message(&answer).contains("someone-else-value"), "{answer}");
    }
    assert_eq!(registry.total_calls(), 0, "the registry was never asked");
}

#[tokio::test]
async fn refused_requests_never_register_a_schema() {
    let (registry, topic) = registry_and_topic("test.noreg").await;
    let gw = gateway(&registry, "").await;
    let subject = format!("{topic}-value");
    let schema = |i: usize| {
        json!({"type": "object", "title": format!("t{i}"),
               "properties": {"a": {"type": "integer"}}})
        .to_string()
    };
    // Data that does not fit: 422, and the schema is never registered (it was, 300 versions).
    for i in 0..20 {
        let record =
            json!({"value": {"type": "JSONSCHEMA", "schema": schema(i), "data": {"a": "no"}}});
        let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
        assert_eq!(s, 422, "{answer}");
        assert_eq!(answer["error_code"], 42203, "{answer}");
    }
    assert_eq!(registry.versions(&subject), Vec::<u32>::new());
    assert_eq!(registry.calls(Call::Register), 0);
    // Data that fits, in a partition the topic does not have: 404, and nothing registered
    // (review 21 of #37: a v3 record registered its schema before its partition was checked).
    let elsewhere = json!({"partition_id": 99,
        "value": {"type": "JSONSCHEMA", "schema": schema(30), "data": {"a": 1}}});
    let (s, answer, _) = v3(&gw, KEY, &topic, &elsewhere).await;
    assert_eq!(s, 404, "{answer}");
    assert_eq!(registry.calls(Call::Register), 0, "{answer}");
    // A v2 request whose first record fits and whose second does not: the schema waits for
    // every record, so nothing is registered.
    let body = json!({"value_schema": schema(50), "records": [{"value": {"a": 1}}, {"value": {"a": "no"}}]});
    let (status, answer) = v2(&gw, KEY, &topic, "jsonschema", &body).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(
        registry.calls(Call::Register),
        0,
        "the first record's fit is not enough"
    );
    // A request its tenant's budget refuses registers nothing either.
    let fits =
        |i: usize| json!({"value": {"type": "JSONSCHEMA", "schema": schema(i), "data": {"a": 1}}});
    let (s, answer, _) = v3(&gw, SLOW_KEY, &topic, &fits(100)).await;
    assert_eq!(s, 200, "{answer}");
    assert_eq!(registry.versions(&subject).len(), 1, "the admitted one's");
    let (s, answer, _) = v3(&gw, SLOW_KEY, &topic, &fits(101)).await;
    assert_eq!(s, 429, "{answer}");
    assert_eq!(
        registry.versions(&subject).len(),
        1,
        "not the refused one's"
    );
}

/// Review 41-r9 of #37: concurrent requests, each with a new raw schema, from a tenant allowed
/// one record at once all passed a check that took nothing while their registrations were in
/// flight: 4–10 new versions per burst, 1–2 records written, the rest answered 429. Each now
/// reserves its tenant's tokens before registering, so a version is registered only for a
/// record that is written, on v3 (a single record, admitted as a stream's) and v2 (a request)
/// alike; and a single v3 record its budget refuses is answered 429, not 200 with the refusal
/// in its report.
#[tokio::test]
async fn concurrent_requests_register_only_for_what_their_budget_admits() {
    let (registry, topic) = registry_and_topic("test.regrace").await;
    let gw = gateway(&registry, "").await;
    let subject = format!("{topic}-value");
    // Every registry answer is slow: the requests' lookups and registrations overlap.
    registry.set_delay(Duration::from_millis(150));
    let schema = |i: usize| {
        json!({"type": "object", "title": format!("race{i}"),
               "properties": {"a": {"type": "integer"}}})
        .to_string()
    };
    let v3_tasks: Vec<_> = (0..8)
        .map(|i| {
            let (addr, topic) = (gw.addr, topic.clone());
            let record =
                json!({"value": {"type": "JSONSCHEMA", "schema": schema(i), "data": {"a": i}}});
            tokio::spawn(async move { v3_to(addr, SLOW_KEY, &topic, &record).await })
        })
        .collect();
    let mut written = 0;
    for task in v3_tasks {
        let (status, answer, _) = task.await.expect("v3 task");
        match status {
            200 => {
                assert_eq!(
                    answer["error_code"], 200,
                    "written, or refused by status: {answer}"
                );
                written += 1;
            }
            429 => assert_eq!(answer["error_code"], 42901, "{answer}"),
            other => panic!("{other}: {answer}"),
        }
    }
    assert!(written >= 1, "the budget's one record is written");
    assert_eq!(
        registry.versions(&subject).len(),
        written,
        "a version for each record written, none for the refused"
    );
    // The same race on Confluent v2, a request of one record and a new value schema each, on a
    // gateway of its own (a full bucket).
    let gw = gateway(&registry, "").await;
    let before = registry.versions(&subject).len();
    let v2_tasks: Vec<_> = (100..108)
        .map(|i| {
            let url = format!("http://{}/topics/{topic}", gw.addr);
            let body = json!({"value_schema": schema(i), "records": [{"value": {"a": 1}}]});
            tokio::spawn(async move {
                let headers = [("content-type", "application/vnd.kafka.jsonschema.v2+json")];
                post_text(&url, SLOW_KEY, &headers, body.to_string()).await
            })
        })
        .collect();
    let mut written = 0;
    for task in v2_tasks {
        let (status, _, text) = task.await.expect("v2 task");
        match status {
            200 => written += 1,
            429 => {}
            other => panic!("{other}: {text}"),
        }
    }
    assert!(written >= 1, "the budget's one record is written");
    assert_eq!(registry.versions(&subject).len() - before, written);
}

/// Review 41-r10 of #37: a record whose key carried a new raw schema and whose value carried
/// one the registry refuses as incompatible had its key schema registered, then was refused:
/// a version of `<topic>-key` for every refused request. With more than one schema to
/// register, each is first put to the registry's compatibility check, and none is registered
/// unless all would be; on v3 and v2 alike.
#[tokio::test]
async fn a_record_one_of_whose_schemas_the_registry_refuses_registers_neither() {
    use crate::common::schema_registry::SchemaType;
    let (registry, topic) = registry_and_topic("test.kvsplit").await;
    registry.set_compatibility(true);
    let (key_subject, value_subject) = (format!("{topic}-key"), format!("{topic}-value"));
    registry.register(&value_subject, SchemaType::Json, &integer_a());
    let gw = gateway(&registry, "").await;
    let key_schema = |i: usize| json!({"type": "object", "title": format!("k{i}")}).to_string();
    let value_schema = |kind: &str| {
        json!({"type": "object", "title": kind, "properties": {"a": {"type": kind}}}).to_string()
    };
    let record = json!({
        "key": {"type": "JSONSCHEMA", "schema": key_schema(1), "data": {"k": 1}},
        "value": {"type": "JSONSCHEMA", "schema": value_schema("string"), "data": {"a": "x"}}});
    let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
    assert_eq!(s, 422, "{answer}");
    assert!(message(&answer).contains("incompatible"), "{answer}");
    let body = json!({"key_schema": key_schema(2), "value_schema": value_schema("string"),
                      "records": [{"key": {"k": 2}, "value": {"a": "x"}}]});
    let (status, answer) = v2(&gw, KEY, &topic, "jsonschema", &body).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(
        registry.versions(&key_subject),
        Vec::<u32>::new(),
        "no key version"
    );
    assert_eq!(
        registry.calls(Call::Register),
        0,
        "nothing asked to register"
    );
    // A pair the registry takes registers both.
    let record = json!({
        "key": {"type": "JSONSCHEMA", "schema": key_schema(3), "data": {"k": 3}},
        "value": {"type": "JSONSCHEMA", "schema": value_schema("integer"), "data": {"a": 3}}});
    let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
    assert_eq!(s, 200, "{answer}");
    assert_eq!(registry.versions(&key_subject).len(), 1);
    assert_eq!(registry.versions(&value_subject).len(), 2);
}

/// Reviews 41-r11 and r12 of #37, two ways past the compatibility check of the record above:
/// under a `*_TRANSITIVE` level a value compatible with the latest version but not an older
/// one (the check now asks what registering asks: every version the level names), and a key
/// and value under one subject with two schemas, each compatible with the latest but not with
/// each other (refused before either is registered: no serializer writes that).
#[tokio::test]
async fn a_record_whose_registration_would_split_registers_nothing() {
    use crate::common::schema_registry::SchemaType;
    let (registry, topic) = registry_and_topic("test.kvsplit2").await;
    registry.set_compatibility(true);
    registry.set_transitive(true);
    let (key_subject, value_subject) = (format!("{topic}-key"), format!("{topic}-value"));
    let props = |name: &str, kind: &str| {
        json!({"type": "object", "properties": {name: {"type": kind}}}).to_string()
    };
    registry.register(&value_subject, SchemaType::Json, &props("a", "integer"));
    registry.register(&value_subject, SchemaType::Json, &props("b", "string"));
    let gw = gateway(&registry, "").await;
    let key_schema = |i: usize| json!({"type": "object", "title": format!("k{i}")}).to_string();
    // `a` as a string: fine by the latest (`b`), not by version 1.
    let record = json!({
        "key": {"type": "JSONSCHEMA", "schema": key_schema(1), "data": {"k": 1}},
        "value": {"type": "JSONSCHEMA", "schema": props("a", "string"), "data": {"a": "x"}}});
    let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
    assert_eq!(s, 422, "{answer}");
    assert!(message(&answer).contains("incompatible"), "{answer}");
    // Key and value under the value's subject, `c` an integer in one and a string in the
    // other: each fine by the latest.
    let record = json!({
        "key": {"type": "JSONSCHEMA", "subject": value_subject, "schema": props("c", "integer"),
                "data": {"c": 1}},
        "value": {"type": "JSONSCHEMA", "schema": props("c", "string"), "data": {"c": "x"}}});
    let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
    assert_eq!(s, 422, "{answer}");
    assert!(message(&answer).contains("one subject"), "{answer}");
    assert_eq!(registry.versions(&key_subject), Vec::<u32>::new());
    assert_eq!(registry.versions(&value_subject).len(), 2, "nothing added");
    assert_eq!(registry.calls(Call::Register), 0);
}

/// Review 24 of #37: the registry lookup of a new raw schema was not one of its tenant's
/// lookups, so a 1-record/s tenant's records refused after it (a partition the topic does not
/// have) made 1,200 lookups in 13 s against a bucket of 100 + 10/s. Each is the tenant's own.
#[tokio::test]
async fn a_raw_schemas_lookup_is_one_of_its_tenants_lookups() {
    let (registry, topic) = registry_and_topic("test.lookups").await;
    let gw = gateway(
        &registry,
        "tenant_lookups_per_sec = 1\ntenant_lookups_burst = 2",
    )
    .await;
    let started = std::time::Instant::now();
    let mut busy = 0;
    for i in 0..8 {
        let schema = json!({"type": "object", "title": format!("l{i}")}).to_string();
        let record = json!({"partition_id": 99,
            "value": {"type": "JSONSCHEMA", "schema": schema, "data": {}}});
        let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
        assert!(s == 404 || s == 429, "{s} {answer}");
        busy += usize::from(s == 429);
    }
    let elapsed = started.elapsed().as_secs();
    let lookups = registry.calls(Call::Lookup);
    assert!(
        lookups <= 2 + elapsed + 1,
        "{lookups} lookups in {elapsed} s"
    );
    assert!(busy > 0, "the tenant's lookups ran out");
}

#[tokio::test]
async fn a_tenants_registrations_are_charged_to_it() {
    let (registry, topic) = registry_and_topic("test.regs").await;
    let gw = gateway(
        &registry,
        "tenant_registrations_per_sec = 1\ntenant_registrations_burst = 2",
    )
    .await;
    let record = |i: usize| {
        json!({"value": {"type": "JSONSCHEMA",
            "schema": json!({"type": "object", "title": format!("r{i}")}).to_string(), "data": {}}})
    };
    for i in 0..2 {
        let (s, answer, _) = v3(&gw, KEY, &topic, &record(i)).await;
        assert_eq!(s, 200, "{answer}");
    }
    let (s, answer, _) = v3(&gw, KEY, &topic, &record(2)).await;
    assert_eq!(s, 429, "{answer}");
    assert_eq!(answer["error_code"], 42902, "{answer}");
    assert!(
        message(&answer).contains("tenant_registrations_per_sec"),
        "{answer}"
    );
    assert_eq!(registry.versions(&format!("{topic}-value")).len(), 2);
    // A schema already registered costs no registration.
    let (s, answer, _) = v3(&gw, KEY, &topic, &record(0)).await;
    assert_eq!(s, 200, "{answer}");
}

#[tokio::test]
async fn unknown_subject_versions_are_remembered_like_unknown_ids() {
    let (registry, topic) = registry_and_topic("test.unknown").await;
    let gw = gateway(&registry, "").await;
    for version in [json!({"schema_version": 7}), json!({})] {
        let mut value = version.clone();
        value["data"] = json!({"a": 1});
        let before = registry.calls(Call::SubjectVersion);
        for _ in 0..30 {
            let (s, answer, _) = v3(&gw, KEY, &topic, &json!({"value": value})).await;
            assert_eq!(s, 422, "{answer}");
            assert_eq!(answer["error_code"], 42204, "{answer}");
        }
        // 30 calls each before.
        assert_eq!(
            registry.calls(Call::SubjectVersion) - before,
            1,
            "{version}: asked once"
        );
    }
}

/// Review 5 of #37: a v3 stream's records were all converted (checked, compiled, looked up)
/// before its budget refused them: two streams from a tenant allowed 1 record/s had 268k-330k
/// records checked in 15 s, all then refused and charged nothing. Now only the records every
/// budget would take are converted: a stream of ten records naming ten new schemas, from a
/// tenant allowed one, costs one compile and one registry lookup, not ten.
#[tokio::test]
async fn a_stream_over_its_budget_converts_only_what_it_may_send() {
    let (registry, topic) = registry_and_topic("test.streamcost").await;
    let gw = gateway(&registry, "").await;
    let (addr, path) = (
        gw.addr,
        format!("/v3/clusters/any-id/topics/{topic}/records"),
    );
    let reports = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let (mut stream, mut reader) = crate::common::v3::open_stream_with(addr, &path, SLOW_KEY);
        let mut body = Vec::new();
        for i in 0..10 {
            let schema = json!({"type": "object", "title": format!("s{i}"),
                                "properties": {"a": {"type": "integer"}}})
            .to_string();
            let record =
                json!({"value": {"type": "JSONSCHEMA", "schema": schema, "data": {"a": i}}});
            body.extend_from_slice(record.to_string().as_bytes());
            body.push(b'\n');
        }
        // One chunk: the ten records are decoded, and admitted, as one group.
        crate::common::v3::write_chunk(&mut stream, &body).expect("write");
        stream.write_all(b"0\r\n\r\n").expect("end");
        crate::common::v3::read_reports(&mut reader)
    })
    .await
    .expect("client");
    let codes: Vec<Value> = reports.iter().map(|r| r["error_code"].clone()).collect();
    let mut expected = vec![json!(200)];
    expected.extend(std::iter::repeat_n(json!(429), 9));
    assert_eq!(codes, expected, "{reports:?}");
    assert_eq!(
        registry.calls(Call::Lookup),
        1,
        "only the admitted record's schema is looked up"
    );
    gw.shutdown().await;
}

/// Review 9 of #37: the registry's call slots were one queue for everyone. With a slow registry
/// (0.8–1.5 s a call) a tenant allowed 1 record/s kept all of them busy with lookups of unknown
/// ids, and another tenant's first record of a registered schema waited behind them past the
/// call's timeout: 503. Now a tenant holds at most `tenant_concurrent_calls` of the slots; its
/// further calls wait for its own and then get 429 `schema_busy`, and the other tenant's call
/// starts at once.
#[tokio::test]
async fn one_tenants_registry_calls_leave_the_others_their_slots() {
    let (registry, topic) = registry_and_topic("test.slots").await;
    let schema = integer_a();
    let id = registry.register(
        &format!("{topic}-value"),
        crate::common::schema_registry::SchemaType::Json,
        &schema,
    );
    let gw = gateway(
        &registry,
        "timeout_ms = 2000\nmax_concurrent_calls = 4\ntenant_concurrent_calls = 2",
    )
    .await;
    registry.set_delay(Duration::from_millis(1_500));
    let flood: Vec<_> = (0..6)
        .map(|i| {
            let (addr, topic) = (gw.addr, topic.clone());
            tokio::spawn(async move {
                let record = json!({"value": {"schema_id": 900_000 + i, "data": {"a": 1}}});
                let (status, answer, _) = v3_to(addr, SLOW_KEY, &topic, &record).await;
                (status, answer)
            })
        })
        .collect();
    // The flood's calls have reached the registry (and the rest of it the gateway).
    while registry.calls(Call::SchemaById) < 2 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, answer, took) = v3(
        &gw,
        KEY,
        &topic,
        &json!({"value": {"schema_id": id, "data": {"a": 1}}}),
    )
    .await;
    assert_eq!(status, 200, "{answer} after {took:?}");
    let mut answers = Vec::new();
    for request in flood {
        answers.push(request.await.expect("flood"));
    }
    // Each of the flood's calls was answered by the registry (422: no such id), timed out
    // there (503), or waited for its tenant's own slot past the timeout (429 naming the share):
    // which, depends on when it came (the unit tests of `call_slots` pin the share down).
    for (status, answer) in &answers {
        let own_share = *status == 429
            && answer["error_code"] == 42902
            && message(answer).contains("tenant_concurrent_calls");
        let not_found = *status == 422 && answer["error_code"] == 42204;
        assert!(own_share || not_found || *status == 503, "{answers:?}");
    }
    gw.shutdown().await;
}

/// Reviews 10 and 11 of #37: the schema step's work no budget pays for was charged to no one:
/// a check that refused its record (0.37 s of CPU each, without pause, from a tenant allowed
/// 1 record/s), a compile of a new raw schema whose data was then refused (75 ms each). Now
/// both are charged to the tenant's `tenant_unpaid_work_ms_*` bucket, on the gateway's clock
/// (stepped here): once it is spent, the tenant's records are refused before their compile or
/// check (429 `schema_busy`), valid ones too, until it is paid off; another tenant's bucket is
/// its own.
#[tokio::test]
async fn a_tenants_compiles_and_refused_checks_spend_its_own_unpaid_work() {
    let (registry, topic) = registry_and_topic("test.unpaidwork").await;
    // 1 ms a second, 1 at once: any compile or refused check spends it.
    let gw = Gateway::start_manual(gateway_config(&registry, ONE_MS_UNPAID)).await;
    let schema =
        json!({"type": "array", "items": {"type": "string", "pattern": "^(a|b)*$"}}).to_string();
    let record =
        |data: Value| json!({"value": {"type": "JSONSCHEMA", "schema": schema, "data": data}});
    let busy = |s: u16, answer: &Value| {
        s == 429
            && answer["error_code"] == 42902
            && message(answer).contains("tenant_unpaid_work_ms_per_sec")
    };
    // A new schema: its compile spends the tenant's time, and the record is refused before its
    // check.
    let (s, answer, _) = v3(&gw, KEY, &topic, &record(json!(["ab"]))).await;
    assert!(busy(s, &answer), "{s} {answer}");
    // Paid off (a minute at 1 ms/s pays 60 ms): the schema is compiled now, and this invalid
    // record's check runs, is refused, and spends the time again.
    gw.advance_ms(60_000);
    let (s, answer, _) = v3(&gw, KEY, &topic, &record(json!(["ab", 1]))).await;
    assert_eq!(refused_with(s, &answer), 422, "{answer}");
    let (s, answer, _) = v3(&gw, KEY, &topic, &record(json!(["ab"]))).await;
    assert!(busy(s, &answer), "a valid record too: {s} {answer}");
    // Another tenant's invalid record is checked and refused on its own account.
    let (s, answer, _) = v3(&gw, SLOW_KEY, &topic, &record(json!([1]))).await;
    assert_eq!(s, 422, "{answer}");
    assert_eq!(answer["error_code"], 42203, "{answer}");
    // And paid off, the valid record is written.
    gw.advance_ms(60_000);
    let (s, answer, _) = v3(&gw, KEY, &topic, &record(json!(["ab"]))).await;
    assert_eq!(s, 200, "{answer}");
    gw.shutdown().await;
}

/// A record whose checks passed and which was refused after them — its partition does not
/// exist (a v3 record, admitted alone), its request's budgets refuse it (a v2 request of two
/// records) — had its checks paid by no budget: they spend its tenant's unpaid work as a
/// refused check does (review 13 of #37: a key checked for 0.3 s beside a value that failed
/// cost the tenant nothing for the key).
#[tokio::test]
async fn checks_passed_by_records_refused_later_spend_the_tenants_unpaid_work() {
    let (registry, topic) = registry_and_topic("test.owedchecks").await;
    // 1 ms a second, 1 at once: any check owed spends it.
    let gw = Gateway::start_manual(gateway_config(&registry, ONE_MS_UNPAID)).await;
    let schema = integer_a();
    let record = |partition: Option<u32>| {
        let mut r = json!({"value": {"type": "JSONSCHEMA", "schema": schema, "data": {"a": 1}}});
        if let Some(p) = partition {
            r["partition_id"] = json!(p);
        }
        r
    };
    let busy = |s: u16, answer: &Value| {
        s == 429 && message(answer).contains("tenant_unpaid_work_ms_per_sec")
    };
    // The other tenant compiles the schema (and pays for it): the slow tenant's bucket is full.
    let (s, answer, _) = v3(&gw, KEY, &topic, &record(None)).await;
    assert!(busy(s, &answer), "the compile spent acme's: {s} {answer}");
    gw.advance_ms(60_000);
    let (s, answer, _) = v3(&gw, KEY, &topic, &record(None)).await;
    assert_eq!(s, 200, "{answer}");

    // Its check passes, its partition does not exist: the check is owed.
    let (s, answer, _) = v3(&gw, SLOW_KEY, &topic, &record(Some(5))).await;
    assert_eq!(refused_with(s, &answer), 404, "{answer}");
    let (s, answer, _) = v3(&gw, SLOW_KEY, &topic, &record(None)).await;
    assert!(busy(s, &answer), "the 404's check was owed: {s} {answer}");
    gw.advance_ms(60_000);
    let (s, answer, _) = v3(&gw, SLOW_KEY, &topic, &record(None)).await;
    assert_eq!(s, 200, "paid off: {answer}");

    // A request's record that fits its Avro schema and grows by its default past the bytes
    // burst: the budget refuses it (413) after its check, and the check is owed.
    let pad = "x".repeat(3_000);
    let avro = json!({"type": "record", "name": "Padded",
                      "fields": [{"name": "pad", "type": "string", "default": pad}]})
    .to_string();
    let padded = |value: Value| {
        let body = json!({"value_schema": avro, "records": [{"value": value}]});
        let (gw, topic) = (&gw, &topic);
        async move { v2(gw, PADDED_KEY, topic, "avro", &body).await }
    };
    // Compiled, and its compile paid off.
    let _ = padded(json!({"pad": "y"})).await;
    gw.advance_ms(60_000);
    let (s, body) = padded(json!({"pad": "y"})).await;
    assert_eq!(s, 200, "{body}");
    gw.advance_ms(60_000);
    let (s, body) = padded(json!({})).await;
    assert_eq!(
        s, 413,
        "the budget's refusal of what the record became: {body}"
    );
    let (s, body) = padded(json!({"pad": "y"})).await;
    assert!(
        busy(s, &body),
        "the refused record's check was owed: {s} {body}"
    );
    gw.shutdown().await;
}

/// An admitted record's budgets pay for a passing check up to `paid_check_us` (+ per KiB);
/// past it the check is unpaid work (review 14 of #37: a 3.5 KB value whose schema made its
/// passing check cost 0.31 s bought that much of a schema thread for one record of budget,
/// and two tenants allowed 1 record/s held both threads). Here nothing is paid for: the
/// first valid record's check spends the bucket, and the next is refused before its check;
/// with the default allowance the same records are both written.
#[tokio::test]
async fn passing_checks_past_what_a_record_pays_for_spend_unpaid_work() {
    let (registry, topic) = registry_and_topic("test.paidcheck").await;
    let schema = integer_a();
    let record = json!({"value": {"type": "JSONSCHEMA", "schema": schema, "data": {"a": 1}}});
    let busy = |s: u16, answer: &Value| {
        s == 429 && message(answer).contains("tenant_unpaid_work_ms_per_sec")
    };
    for (paid, second_busy) in [
        ("paid_check_us = 0\npaid_check_us_per_kib = 0", true),
        ("", false),
    ] {
        let gw = Gateway::start_manual(gateway_config(
            &registry,
            &format!("{ONE_MS_UNPAID}\n{paid}"),
        ))
        .await;
        // The compile spends the bucket; paid off, the schema is cached.
        let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
        assert!(busy(s, &answer) || s == 200, "{s} {answer}");
        gw.advance_ms(60_000);
        let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
        assert_eq!(s, 200, "{paid:?}: {answer}");
        let (s, answer, _) = v3(&gw, KEY, &topic, &record).await;
        assert_eq!(busy(s, &answer), second_busy, "{paid:?}: {s} {answer}");
        if !second_busy {
            assert_eq!(s, 200, "{answer}");
        }
        gw.shutdown().await;
    }
}

/// A record's key and value schemas are registered together or not at all for want of the
/// tenant's registrations (review 14 of #37: the key's was registered, the value's refused
/// 429, and the refused request had moved the key subject's latest).
#[tokio::test]
async fn a_records_key_and_value_schemas_take_their_registrations_together() {
    let (registry, topic) = registry_and_topic("test.regpair").await;
    // Three registrations at once, none more on the stepped clock.
    let gw = Gateway::start_manual(gateway_config(
        &registry,
        "tenant_registrations_per_sec = 1\ntenant_registrations_burst = 3",
    ))
    .await;
    let schema = |i: usize| {
        json!({"type": "object", "title": format!("t{i}"),
               "properties": {"a": {"type": "integer"}}})
        .to_string()
    };
    // Two of the three spent on value schemas.
    for i in 0..2 {
        let body = json!({"value_schema": schema(i), "records": [{"value": {"a": 1}}]});
        let (status, answer) = v2(&gw, KEY, &topic, "jsonschema", &body).await;
        assert_eq!(status, 200, "{i}: {answer}");
    }
    // A record with a new key schema and a new value schema needs two: refused whole.
    let body = json!({"key_schema": schema(10), "value_schema": schema(11),
                      "records": [{"key": {"a": 1}, "value": {"a": 1}}]});
    let (status, answer) = v2(&gw, KEY, &topic, "jsonschema", &body).await;
    assert_eq!(status, 429, "{answer}");
    assert_eq!(
        registry.versions(&format!("{topic}-key")),
        Vec::<u32>::new(),
        "the refused record's key schema is not registered"
    );
    // Two more registrations: both are registered, and the record written.
    gw.advance_ms(2_000);
    let (status, answer) = v2(&gw, KEY, &topic, "jsonschema", &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(registry.versions(&format!("{topic}-key")).len(), 1);
    assert_eq!(registry.versions(&format!("{topic}-value")).len(), 3);
    gw.shutdown().await;
}

/// Review 35a of #37: a request that can never be admitted for its number of records (more
/// than its tenant's burst) was refused 413 only after its schema step: a `records:batch` of 10
/// entries with new raw schemas against a burst of 1 cost 8 registry lookups and 8 compiles
/// (0.3 s), a v2 request of 10 records with a new `value_schema` one lookup and one compile.
/// Converting records changes their bytes, never their number: the count is checked first,
/// and a batch (whose failed entries are left out) stops converting once it keeps more
/// records than a burst holds.
#[tokio::test]
async fn a_request_that_can_never_be_admitted_is_refused_before_its_schemas() {
    let (registry, topic) = registry_and_topic("test.never").await;
    let gw = gateway(&registry, "").await;
    let schema = |i: usize| {
        json!({"type": "object", "title": format!("n{i}"),
               "properties": {"a": {"type": "integer"}}})
        .to_string()
    };
    let records: Vec<Value> = (0..10).map(|_| json!({"value": {"a": 1}})).collect();
    let body = json!({"value_schema": schema(0), "records": records});
    let (status, answer) = v2(&gw, SLOW_KEY, &topic, "jsonschema", &body).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(
        registry.calls(Call::Lookup),
        0,
        "no lookup for a v2 request"
    );
    let entries: Vec<Value> = (1..=10)
        .map(|i| {
            json!({"id": i.to_string(),
            "value": {"type": "JSONSCHEMA", "schema": schema(i), "data": {"a": 1}}})
        })
        .collect();
    let url = format!(
        "http://{}/v3/clusters/c/topics/{topic}/records:batch",
        gw.addr
    );
    let batch = json!({"entries": entries}).to_string();
    let headers = [("content-type", "application/json")];
    let (status, _, text) = post_text(&url, SLOW_KEY, &headers, batch).await;
    assert_eq!(status, 413, "{text}");
    assert!(
        registry.calls(Call::Lookup) <= 2,
        "the batch stops at its second kept record: {} lookups",
        registry.calls(Call::Lookup)
    );
    assert_eq!(registry.calls(Call::Register), 0);
}
