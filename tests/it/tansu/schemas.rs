//! Data contracts at the gate (#31): records that carry a schema (Confluent v2 and v3 shapes)
//! and records under a `[[schemas]]` contract are written in Confluent's wire format, and
//! Confluent's own Python deserializers (scripts/schema-readback.py, in the venv that
//! scripts/test.sh makes) decode them back to what was posted, fetching the writer schemas from
//! the test registry (tests/it/common/schema_registry.rs). Invalid records are refused with 422
//! naming the record and the field, and nothing of the request is written; the registry's
//! faults give 503 unless the schema is cached, within the registry timeout.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::schema_registry::{Call, SchemaRegistry, SchemaType};
use crate::common::*;
use serde_json::{json, Value};

// ---- the Python side: Confluent's serializers and deserializers ----

fn python() -> PathBuf {
    let venv = std::env::var("FLOODGATE_SCHEMA_VENV").unwrap_or_else(|_| {
        panic!(
            "FLOODGATE_SCHEMA_VENV is not set: run the suite with scripts/test.sh, which makes the \
             venv with Confluent's Python serdes (or scripts/schema-venv.sh DIR and export it)"
        )
    });
    PathBuf::from(venv).join("bin/python")
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

/// `python scripts/<name>` on Tansu's `topic`, with the test registry at `registry` and the
/// serdes `format`: the arguments both Confluent scripts take.
fn serdes(name: &str, topic: &str, registry: &str, format: &str) -> Command {
    let mut command = Command::new(python());
    command
        .arg(script(name))
        .args([
            "--broker",
            &tansu(),
            "--topic",
            topic,
            "--registry",
            registry,
        ])
        .args(["--format", format]);
    command
}

/// How scripts/schema-readback.py ended: exit code, the records it printed, its stderr.
struct ReadBack {
    code: i32,
    records: Vec<Value>,
    stderr: String,
}

/// Reads `topic` back with Confluent's deserializers for `format`, decoding `field`
/// ("value", "key" or "both"), until `count` records (and half a second more).
async fn read_back_decoded(
    topic: &str,
    registry: &str,
    format: &str,
    field: &str,
    count: usize,
) -> ReadBack {
    let mut command = serdes("schema-readback.py", topic, registry, format);
    command
        .args(["--field", field])
        .args(["--count", &count.to_string(), "--timeout", "20"])
        .stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("reader task")
        .expect("schema-readback.py runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    ReadBack {
        code: output.status.code().unwrap_or(-1),
        records: stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The decoded records, which must all decode: exactly `count` of them.
async fn decoded(
    topic: &str,
    registry: &str,
    format: &str,
    field: &str,
    count: usize,
) -> Vec<Value> {
    let r = read_back_decoded(topic, registry, format, field, count).await;
    assert_eq!(
        r.code, 0,
        "Confluent's {format} deserializer did not read {topic} back: {}",
        r.stderr
    );
    assert_eq!(
        r.records.len(),
        count,
        "records of {topic}: {:?}",
        r.records
    );
    r.records
}

/// The decoded (key, value) pairs, in offset order.
fn key_values(records: &[Value]) -> Vec<(Value, Value)> {
    records
        .iter()
        .map(|r| (r["key"].clone(), r["value"].clone()))
        .collect()
}

/// The decoded values, in offset order (one partition).
async fn values(topic: &str, registry: &str, format: &str, count: usize) -> Vec<Value> {
    decoded(topic, registry, format, "value", count)
        .await
        .into_iter()
        .map(|r| r["value"].clone())
        .collect()
}

/// Produces with Confluent's own serializers (scripts/schema-produce.py); the schema id used.
async fn produce_with_confluent(
    topic: &str,
    registry: &str,
    format: &str,
    schema: Option<&str>,
    records: &[Value],
) -> u32 {
    let mut command = serdes("schema-produce.py", topic, registry, format);
    if let Some(schema) = schema {
        command.args(["--schema", schema]);
    }
    let input: String = records.iter().map(|r| format!("{r}\n")).collect();
    let output = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())?;
        child.wait_with_output()
    })
    .await
    .expect("producer task")
    .expect("schema-produce.py runs");
    assert!(
        output.status.success(),
        "schema-produce.py: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).expect("schema id line");
    answer["schema_id"].as_u64().expect("schema id") as u32
}

// ---- schemas used below ----

const AVRO_ORDER: &str = r#"{"type":"record","name":"Order","namespace":"test.floodgate","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"note","type":["null","string"],"default":null}]}"#;

const JSON_ORDER: &str = r#"{"type":"object","properties":{"id":{"type":"integer"},"item":{"type":"string"},"address":{"type":"object","properties":{"zip":{"type":"string"}},"required":["zip"]}},"required":["id","item"],"additionalProperties":false}"#;

/// AVRO_ORDER with one more field (with a default): a second version of the subject.
const AVRO_ORDER_V2: &str = r#"{"type":"record","name":"Order","namespace":"test.floodgate","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"note","type":["null","string"],"default":null},{"name":"qty","type":"int","default":1}]}"#;

const PROTO_ORDER: &str = r#"syntax = "proto3";
package test.floodgate;

message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
}
"#;

// ---- the harness checked against Confluent's serdes, without the gateway ----

/// Confluent's serializers write through the test registry (registering Avro and JSON Schema
/// themselves, using a .proto registered as text for Protobuf) and the read-back decodes what
/// they wrote: the registry, its Protobuf `format=serialized` answer and the read-back script
/// are right before any gateway test relies on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_serializers_round_trip_through_the_test_registry() {
    let registry = SchemaRegistry::start().await;
    let url = registry.url();

    let topic = tansu_topic("test.sr-avro", 1).await;
    let posted = [
        json!({"id": 1, "item": "apple", "note": null}),
        json!({"id": 2, "item": "pear", "note": "ripe"}),
    ];
    let records: Vec<Value> = posted.iter().map(|v| json!({"value": v})).collect();
    let id = produce_with_confluent(&topic, &url, "avro", Some(AVRO_ORDER), &records).await;
    assert_eq!(registry.versions(&format!("{topic}-value")), vec![id]);
    assert_eq!(values(&topic, &url, "avro", 2).await, posted);

    let topic = tansu_topic("test.sr-json", 1).await;
    let posted = [
        json!({"id": 1, "item": "apple"}),
        json!({"id": 2, "item": "pear", "address": {"zip": "12345"}}),
    ];
    let records: Vec<Value> = posted.iter().map(|v| json!({"value": v})).collect();
    let id = produce_with_confluent(&topic, &url, "json", Some(JSON_ORDER), &records).await;
    assert_eq!(
        registry.schema(id),
        Some((SchemaType::Json, JSON_ORDER.to_string()))
    );
    assert_eq!(values(&topic, &url, "json", 2).await, posted);

    let topic = tansu_topic("test.sr-proto", 1).await;
    let id = registry.register(&format!("{topic}-value"), SchemaType::Protobuf, PROTO_ORDER);
    let records = [
        json!({"value": {"id": "7", "item": "apple", "tags": ["a", "b"]}}),
        json!({"value": {"id": "8", "item": "pear", "tags": []}}),
    ];
    let used = produce_with_confluent(&topic, &url, "protobuf", None, &records).await;
    assert_eq!(used, id, "the latest (the .proto text) is what was used");
    // MessageToDict prints int64 as a string, and fields at their default too.
    assert_eq!(
        values(&topic, &url, "protobuf", 2).await,
        vec![
            json!({"id": "7", "item": "apple", "tags": ["a", "b"]}),
            json!({"id": "8", "item": "pear", "tags": []}),
        ]
    );

    // A record not in the wire format is a decode error, named.
    let (topic, gw) = on_tansu("test.sr-raw", 1).await;
    let (s, _, _) = post_json(
        &gw.url(&topic),
        KEY,
        &json!({"records": [{"value": {"id": 1}}]}),
    )
    .await;
    assert_eq!(s, 200);
    let r = read_back_decoded(&topic, &url, "avro", "value", 1).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("offset 0") && r.stderr.contains("value"),
        "{}",
        r.stderr
    );
    gw.shutdown().await;

    assert_eq!(registry.unknown_calls(), Vec::<String>::new());
    assert!(registry.calls(Call::SchemaById) >= 3);
}

// ---- the gateway side ----

/// A gateway on Tansu (tenant "acme", key [`KEY`], topics `test.*`) whose Schema Registry is
/// `registry`, with `extra` TOML (`[[schemas]]` contracts) after the `[schema_registry]` table.
async fn gateway(registry: &SchemaRegistry, timeout_ms: u64, extra: &str) -> Gateway {
    let text = format!(
        "[schema_registry]\nurl = \"{}\"\ntimeout_ms = {timeout_ms}\n\n{extra}",
        registry.url()
    );
    Gateway::start(config_with_toml(&text)).await
}

/// A test registry, a topic of the test's own on Tansu, and a [`gateway`] using that registry
/// (2 s timeout, no contract): how most tests here start.
async fn with_registry(prefix: &str, partitions: i32) -> (SchemaRegistry, String, Gateway) {
    let registry = SchemaRegistry::start().await;
    let topic = tansu_topic(prefix, partitions).await;
    let gw = gateway(&registry, 2000, "").await;
    (registry, topic, gw)
}

/// A POST of `body` with the test key to `path` on `gw`: status, headers, the answer's text.
async fn post_to(
    gw: &Gateway,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let url = format!("http://{}{path}", gw.addr);
    post_text(
        &url,
        KEY,
        &[("content-type", content_type)],
        body.to_string(),
    )
    .await
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text.trim_end())
        .unwrap_or_else(|e| panic!("answer is not JSON ({e}): {text}"))
}

/// A Confluent v2 produce with a schema format (`avro`, `jsonschema`, `protobuf`).
async fn v2(
    gw: &Gateway,
    topic: &str,
    format: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let content_type = format!("application/vnd.kafka.{format}.v2+json");
    let (s, h, text) = post_to(gw, &format!("/topics/{topic}"), &content_type, body).await;
    (s, h, parse(&text))
}

/// A Confluent v3 produce of one record (not streamed): status, headers, the one report.
async fn v3(gw: &Gateway, topic: &str, record: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let path = format!("/v3/clusters/any-id/topics/{topic}/records");
    let (s, h, text) = post_to(gw, &path, "application/json", record).await;
    (s, h, parse(&text))
}

/// A `[[schemas]]` contract validating the topics matching `pattern` against their JSON Schema.
fn json_contract(pattern: &str) -> String {
    format!("[[schemas]]\ntopics = [\"{pattern}\"]\nformat = \"json\"\nmode = \"validate\"\n")
}

/// A Confluent v3 produce of one record whose report must say it was written; `what` says
/// which.
async fn v3_written(gw: &Gateway, topic: &str, record: &Value, what: &str) {
    let (s, _, report) = v3(gw, topic, record).await;
    assert_eq!(
        (s, &report["error_code"]),
        (200, &json!(200)),
        "{what}: {report}"
    );
}

/// A Confluent v3 records:batch: status, headers, the answer's text.
async fn v3_batch(
    gw: &Gateway,
    topic: &str,
    batch: &Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let path = format!("/v3/clusters/any-id/topics/{topic}/records:batch");
    post_to(gw, &path, "application/json", batch).await
}

/// The raw records of a one-partition topic (waits `expected`, then 1.5 s of quiet).
async fn raw(topic: &str, expected: usize) -> Vec<Consumed> {
    let (b, t) = (tansu(), topic.to_string());
    tokio::task::spawn_blocking(move || read_back(&b, &t, 1, expected))
        .await
        .expect("reader")
}

/// Nothing at all was written to `topic`.
async fn assert_empty(topic: &str, what: &str) {
    let got = raw(topic, 0).await;
    let shown = value_texts(&got);
    assert!(
        got.is_empty(),
        "{what}: nothing may be written to {topic}, found {shown:?}"
    );
}

/// Confluent's wire-format header: magic byte 0 and the 4-byte big-endian schema id.
fn wire_id(bytes: Option<&[u8]>) -> u32 {
    let bytes = bytes.expect("a value");
    assert!(
        bytes.len() >= 5 && bytes[0] == 0,
        "not Confluent's wire format: {bytes:?}"
    );
    u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]])
}

/// The answer's `Retry-After`, if any.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<&str> {
    headers.get("retry-after").map(|v| v.to_str().unwrap_or(""))
}

/// A refusal's text: `detail` (/v1) or `message` (Confluent's routes).
fn detail(answer: &Value) -> String {
    answer["detail"]
        .as_str()
        .or_else(|| answer["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// A 422 from a Confluent route: a 422xx (or 422) error_code and a message naming `parts`.
fn assert_confluent_422(status: u16, answer: &Value, parts: &[&str], what: &str) {
    assert_eq!(status, 422, "{what}: {answer}");
    let code = answer["error_code"].as_u64().unwrap_or(0);
    assert!(
        code == 422 || code / 100 == 422,
        "{what}: error_code {answer}"
    );
    let text = detail(answer);
    for part in parts {
        assert!(
            text.contains(part),
            "{what}: the message names {part:?}: {answer}"
        );
    }
}

/// A 422 `schema_violation` from `/v1` whose detail names every one of `parts`.
fn assert_schema_violation(status: u16, answer: &Value, parts: &[&str], what: &str) {
    assert_eq!(
        (status, answer["error"].as_str()),
        (422, Some("schema_violation")),
        "{what}: {answer}"
    );
    for part in parts {
        assert!(
            detail(answer).contains(part),
            "{what}: the detail names {part:?}: {answer}"
        );
    }
}

/// v2 Avro as kafka-rest takes it: `value_schema` (and `key_schema`) raw, registered under
/// `<topic>-value` / `<topic>-key` and answered with their ids; then the same by
/// `value_schema_id` / `key_schema_id`. Confluent's AvroDeserializer reads every key and value
/// back as posted (a union value in Avro's JSON encoding, `{"string": ..}`, decodes to the bare
/// value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_avro_with_value_schema_then_value_schema_id() {
    let (registry, topic, gw) = with_registry("test.v2-avro", 1).await;

    let key_schema = r#"{"type":"string"}"#;
    let body = json!({
        "key_schema": key_schema,
        "value_schema": AVRO_ORDER,
        "records": [
            {"key": "k1", "value": {"id": 1, "item": "apple", "note": null}},
            {"key": "k2", "value": {"id": 2, "item": "pear", "note": {"string": "ripe"}}},
        ],
    });
    let (s, h, answer) = v2(&gw, &topic, "avro", &body).await;
    assert_eq!(s, 200, "{answer}");
    assert_eq!(h["content-type"], "application/vnd.kafka.v2+json");
    let value_id = registry.versions(&format!("{topic}-value"));
    let key_id = registry.versions(&format!("{topic}-key"));
    assert_eq!(
        value_id.len(),
        1,
        "value schema registered under {topic}-value"
    );
    assert_eq!(key_id.len(), 1, "key schema registered under {topic}-key");
    assert_eq!(answer["value_schema_id"], value_id[0], "{answer}");
    assert_eq!(answer["key_schema_id"], key_id[0], "{answer}");
    assert_eq!(
        answer["offsets"].as_array().map(Vec::len),
        Some(2),
        "{answer}"
    );
    assert_eq!(answer["offsets"][0]["error_code"], Value::Null, "{answer}");

    // Posting the same schema again finds it: the same ids, nothing new registered.
    let (s, _, again) = v2(
        &gw,
        &topic,
        "avro",
        &json!({"key_schema": key_schema, "value_schema": AVRO_ORDER,
                "records": [{"key": "k3", "value": {"id": 3, "item": "fig", "note": null}}]}),
    )
    .await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["value_schema_id"], value_id[0]);
    assert_eq!(registry.versions(&format!("{topic}-value")), value_id);

    // By id: records after the schema field, the ids echoed.
    let body = json!({
        "records": [{"key": "k4", "value": {"id": 4, "item": "plum", "note": {"string": "sour"}}}],
        "value_schema_id": value_id[0],
        "key_schema_id": key_id[0],
    });
    let (s, _, answer) = v2(&gw, &topic, "avro", &body).await;
    assert_eq!(s, 200, "{answer}");
    assert_eq!(answer["value_schema_id"], value_id[0], "{answer}");
    assert_eq!(answer["key_schema_id"], key_id[0], "{answer}");

    let got = raw(&topic, 4).await;
    for c in &got {
        assert_eq!(wire_id(c.value.as_deref()), value_id[0]);
        assert_eq!(wire_id(c.key.as_deref()), key_id[0]);
    }
    let seen = key_values(&decoded(&topic, &registry.url(), "avro", "both", 4).await);
    assert_eq!(
        seen,
        vec![
            (json!("k1"), json!({"id": 1, "item": "apple", "note": null})),
            (
                json!("k2"),
                json!({"id": 2, "item": "pear", "note": "ripe"})
            ),
            (json!("k3"), json!({"id": 3, "item": "fig", "note": null})),
            (
                json!("k4"),
                json!({"id": 4, "item": "plum", "note": "sour"})
            ),
        ]
    );
    gw.shutdown().await;
}

/// v3 with `type` and a raw `schema` in each of the three formats: registered under
/// `<topic>-value`, written in Confluent's wire format (Protobuf with the single 0 byte of
/// message indexes), and decoded by Confluent's deserializers to what was posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_raw_schemas_avro_jsonschema_protobuf() {
    let registry = SchemaRegistry::start().await;
    let gw = gateway(&registry, 2000, "").await;
    let cases = [
        (
            "AVRO",
            "avro",
            AVRO_ORDER,
            vec![
                json!({"id": 1, "item": "apple", "note": null}),
                json!({"id": 2, "item": "pear", "note": {"string": "ripe"}}),
            ],
            vec![
                json!({"id": 1, "item": "apple", "note": null}),
                json!({"id": 2, "item": "pear", "note": "ripe"}),
            ],
        ),
        (
            "JSONSCHEMA",
            "json",
            JSON_ORDER,
            vec![
                json!({"id": 1, "item": "apple"}),
                json!({"id": 2, "item": "pear", "address": {"zip": "12345"}}),
            ],
            vec![
                json!({"id": 1, "item": "apple"}),
                json!({"id": 2, "item": "pear", "address": {"zip": "12345"}}),
            ],
        ),
        (
            "PROTOBUF",
            "protobuf",
            PROTO_ORDER,
            vec![
                json!({"id": 7, "item": "apple", "tags": ["a", "b"]}),
                json!({"id": 8, "item": "pear"}),
            ],
            // MessageToDict: int64 as a string, fields at their defaults printed.
            vec![
                json!({"id": "7", "item": "apple", "tags": ["a", "b"]}),
                json!({"id": "8", "item": "pear", "tags": []}),
            ],
        ),
    ];
    for (kind, format, schema, posted, expected) in cases {
        let topic = tansu_topic(&format!("test.v3-{format}"), 1).await;
        for data in &posted {
            let record = json!({"value": {"type": kind, "schema": schema, "data": data}});
            let (s, _, report) = v3(&gw, &topic, &record).await;
            assert_eq!(s, 200, "{kind}: {report}");
            assert_eq!(report["error_code"], 200, "{kind}: {report}");
            assert_eq!(report["value"]["type"], kind, "{kind}: {report}");
            // kafka-rest also reports the subject and the schema id and version used.
            if let Some(id) = report["value"]["schema_id"].as_u64() {
                let ids = registry.versions(&format!("{topic}-value"));
                assert_eq!(
                    ids.first().map(|i| u64::from(*i)),
                    Some(id),
                    "{kind}: {report}"
                );
            }
        }
        let ids = registry.versions(&format!("{topic}-value"));
        assert_eq!(
            ids.len(),
            1,
            "{kind}: one schema registered under {topic}-value"
        );
        let got = raw(&topic, 2).await;
        assert_eq!(got.len(), 2, "{kind}");
        for c in &got {
            assert_eq!(wire_id(c.value.as_deref()), ids[0], "{kind}");
            if kind == "PROTOBUF" {
                assert_eq!(
                    c.value.as_deref().map(|v| v[5]),
                    Some(0),
                    "first message: one 0 byte"
                );
            }
            if kind == "JSONSCHEMA" {
                let text: Value =
                    serde_json::from_slice(&c.value.as_deref().unwrap_or_default()[5..])
                        .expect("JSON Schema payload is JSON text");
                assert!(posted.contains(&text), "{text}");
            }
        }
        assert_eq!(
            values(&topic, &registry.url(), format, 2).await,
            expected,
            "{kind}"
        );
    }
    gw.shutdown().await;
}

/// v3 by `schema_id`, and by `subject` + `schema_version` (which kafka-rest refuses with a
/// `type`; floodgate takes them), against schemas registered beforehand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_by_schema_id_and_by_subject_version() {
    let registry = SchemaRegistry::start().await;
    let topic = tansu_topic("test.v3-id", 1).await;
    let subject = format!("{topic}-value");
    let v1 = registry.register(&subject, SchemaType::Avro, AVRO_ORDER);
    let v2 = registry.register(&subject, SchemaType::Avro, AVRO_ORDER_V2);
    let gw = gateway(&registry, 2000, "").await;

    let record =
        json!({"value": {"schema_id": v1, "data": {"id": 1, "item": "apple", "note": null}}});
    v3_written(&gw, &topic, &record, "written").await;
    let record = json!({"value": {"subject": subject, "schema_version": 2,
                                  "data": {"id": 2, "item": "pear", "note": null, "qty": 5}}});
    v3_written(&gw, &topic, &record, "written").await;

    // With a type too (kafka-rest refuses that; floodgate takes it when they agree).
    let record = json!({"value": {"type": "AVRO", "schema_id": v1,
                                  "data": {"id": 3, "item": "fig", "note": {"string": "dry"}}}});
    v3_written(&gw, &topic, &record, "written").await;

    let got = raw(&topic, 3).await;
    let ids: Vec<u32> = got.iter().map(|c| wire_id(c.value.as_deref())).collect();
    assert_eq!(ids, vec![v1, v2, v1]);
    assert_eq!(
        values(&topic, &registry.url(), "avro", 3).await,
        vec![
            json!({"id": 1, "item": "apple", "note": null}),
            json!({"id": 2, "item": "pear", "note": null, "qty": 5}),
            json!({"id": 3, "item": "fig", "note": "dry"}),
        ]
    );
    gw.shutdown().await;
}

/// v3 with no `type`: the latest schema of `<topic>-value` (and `<topic>-key`), as kafka-rest
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_without_type_uses_the_latest_schema_of_the_subject() {
    let registry = SchemaRegistry::start().await;
    let topic = tansu_topic("test.v3-latest", 1).await;
    registry.register(&format!("{topic}-value"), SchemaType::Avro, AVRO_ORDER);
    let latest = registry.register(&format!("{topic}-value"), SchemaType::Avro, AVRO_ORDER_V2);
    let key_id = registry.register(
        &format!("{topic}-key"),
        SchemaType::Avro,
        r#"{"type":"string"}"#,
    );
    let gw = gateway(&registry, 2000, "").await;

    let record = json!({"key": {"data": "k1"},
                        "value": {"data": {"id": 1, "item": "apple", "note": null, "qty": 3}}});
    v3_written(&gw, &topic, &record, "written").await;

    let got = raw(&topic, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(
        wire_id(got[0].value.as_deref()),
        latest,
        "the latest version"
    );
    assert_eq!(wire_id(got[0].key.as_deref()), key_id);
    let records = decoded(&topic, &registry.url(), "avro", "both", 1).await;
    assert_eq!(records[0]["key"], "k1");
    assert_eq!(
        records[0]["value"],
        json!({"id": 1, "item": "apple", "note": null, "qty": 3})
    );
    gw.shutdown().await;
}

/// records:batch with schemas: an entry that does not match its schema is reported in
/// `failures` (as Confluent does) and the others are written, and decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_batch_reports_schema_failures_per_entry_and_writes_the_rest() {
    let (registry, topic, gw) = with_registry("test.v3-batch", 1).await;
    let entry = |id: &str, data: Value| json!({"id": id, "value": {"type": "AVRO", "schema": AVRO_ORDER, "data": data}});
    let batch = json!({"entries": [
        entry("a", json!({"id": 1, "item": "apple", "note": null})),
        entry("b", json!({"id": "two", "item": "wrong type", "note": null})),
        entry("c", json!({"id": 3, "item": "fig", "note": null})),
    ]});
    let (s, _, text) = v3_batch(&gw, &topic, &batch).await;
    assert_eq!(s, 207, "{text}");
    let answer = parse(&text);
    let ok = listed_ids(&answer, "successes");
    assert_eq!(ok, vec!["a", "c"], "{answer}");
    let failures = answer["failures"].as_array().expect("failures");
    assert_eq!(failures.len(), 1, "{answer}");
    assert_eq!(failures[0]["id"], "b", "{answer}");
    let code = failures[0]["error_code"].as_u64().unwrap_or(0);
    assert!(code == 400 || code == 422, "{answer}");
    assert!(detail(&failures[0]).contains("/id"), "{answer}");
    let ids: Vec<Value> = values(&topic, &registry.url(), "avro", 2)
        .await
        .iter()
        .map(|v| v["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(1), json!(3)]);
    gw.shutdown().await;
}

/// A v3 stream of schema records: one report per record, in order; a record that does not
/// match its schema gets its own 422 report and the others are written, and decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_stream_reports_each_schema_record() {
    let (registry, topic, gw) = with_registry("test.v3-stream", 1).await;
    let (addr, path) = (
        gw.addr,
        format!("/v3/clusters/any-id/topics/{topic}/records"),
    );
    let reports = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let (mut stream, mut reader) = crate::common::v3::open_stream(addr, &path);
        let writer = std::thread::spawn(move || {
            for (n, id) in [(1, json!(1)), (2, json!("two")), (3, json!(3))] {
                let record = json!({"value": {"type": "PROTOBUF", "schema": PROTO_ORDER,
                                              "data": {"id": id, "item": format!("n{n}")}}});
                crate::common::v3::write_chunk(&mut stream, record.to_string().as_bytes())
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
    let codes: Vec<Value> = reports.iter().map(|r| r["error_code"].clone()).collect();
    assert_eq!(
        codes,
        vec![json!(200), json!(422), json!(200)],
        "{reports:?}"
    );
    assert!(detail(&reports[1]).contains("id"), "{reports:?}");
    assert_eq!(
        values(&topic, &registry.url(), "protobuf", 2).await,
        vec![
            json!({"id": "1", "item": "n1", "tags": []}),
            json!({"id": "3", "item": "n3", "tags": []}),
        ]
    );
    gw.shutdown().await;
}

/// `/v1` under a JSON Schema contract in validate mode: valid records are written unchanged
/// (the JSON as posted, no framing); one invalid record refuses the request (422
/// `schema_violation`, record index and JSON pointer) and nothing of it is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_contract_validate_mode_checks_json_and_writes_it_unchanged() {
    let registry = SchemaRegistry::start().await;
    let topic = tansu_topic("test.ctr-validate", 1).await;
    registry.register(&format!("{topic}-value"), SchemaType::Json, JSON_ORDER);
    let gw = gateway(&registry, 2000, &json_contract("test.ctr-validate.*")).await;
    let url = gw.url(&topic);

    let body = r#"{"records":[{"value":{"id": 1,"item":"apple"}},{"value":{"id":2,"item":"pear","address":{"zip":"12345"}}}]}"#;
    let (s, _, answer) = post_raw(&url, KEY, "application/json", body).await;
    assert_eq!(s, 200, "{answer}");
    let got = raw(&topic, 2).await;
    let written: Vec<&[u8]> = got
        .iter()
        .map(|c| c.value.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(
        written,
        vec![
            &br#"{"id": 1,"item":"apple"}"#[..],
            &br#"{"id":2,"item":"pear","address":{"zip":"12345"}}"#[..]
        ],
        "validate mode writes the JSON as posted"
    );

    let refusals = [
        (
            json!({"records": [{"value": {"id": 3, "item": "ok"}}, {"value": {"id": "three", "item": "wrong type"}}]}),
            vec!["record 1", "/id"],
        ),
        (
            json!({"records": [{"value": {"id": 4}}]}),
            vec!["record 0", "item"],
        ),
        (
            json!({"records": [{"value": {"id": 5, "item": "extra", "colour": "red"}}]}),
            vec!["record 0", "colour"],
        ),
        (
            json!({"records": [{"value": {"id": 6, "item": "nested", "address": {"zip": 12}}}]}),
            vec!["record 0", "/address/zip"],
        ),
    ];
    for (body, parts) in &refusals {
        let (s, _, answer) = post_json(&url, KEY, body).await;
        assert_schema_violation(s, &answer, parts, &body.to_string());
    }
    let after = raw(&topic, 2).await;
    assert_eq!(
        after.len(),
        2,
        "nothing of the refused requests written: {after:?}"
    );

    let metrics = crate::common::exposition::scrape(&gw).await;
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("floodgate_schema_violations_total{") && l.contains(topic.as_str()))
        .unwrap_or_else(|| panic!("floodgate_schema_violations_total for {topic}:\n{metrics}"));
    let n: f64 = counted
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(n >= refusals.len() as f64, "{counted}");
    gw.shutdown().await;
}

/// `/v1` under contracts in serialize mode: JSON converted to Avro (the subject named in the
/// contract) and to Protobuf (TopicNameStrategy), in Confluent's wire format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_contract_serialize_mode_avro_and_protobuf() {
    let registry = SchemaRegistry::start().await;
    let avro_topic = unique_topic("test.ctr-avro");
    let proto_topic = unique_topic("test.ctr-proto");
    create_topic(&tansu(), &avro_topic, 1).await;
    create_topic(&tansu(), &proto_topic, 1).await;
    let avro_subject = unique_topic("orders").replace('.', "-");
    let avro_id = registry.register(&avro_subject, SchemaType::Avro, AVRO_ORDER);
    let proto_id = registry.register(
        &format!("{proto_topic}-value"),
        SchemaType::Protobuf,
        PROTO_ORDER,
    );
    let gw = gateway(
        &registry,
        2000,
        &format!(
            "[[schemas]]\ntopics = [\"test.ctr-avro.*\"]\nformat = \"avro\"\nmode = \"serialize\"\nsubject = \"{avro_subject}\"\n\n\
             [[schemas]]\ntopics = [\"test.ctr-proto.*\"]\nformat = \"protobuf\"\nmode = \"serialize\"\n"
        ),
    )
    .await;

    let body = json!({"records": [
        {"value": {"id": 1, "item": "apple", "note": null}},
        {"value": {"id": 2, "item": "pear", "note": {"string": "ripe"}}},
    ]});
    let (s, _, answer) = post_json(&gw.url(&avro_topic), KEY, &body).await;
    assert_eq!(s, 200, "{answer}");
    let body = json!({"records": [
        {"value": {"id": 7, "item": "apple", "tags": ["a"]}},
        {"value": {"id": 8, "item": "pear", "tags": []}},
    ]});
    let (s, _, answer) = post_json(&gw.url(&proto_topic), KEY, &body).await;
    assert_eq!(s, 200, "{answer}");

    for c in raw(&avro_topic, 2).await {
        assert_eq!(wire_id(c.value.as_deref()), avro_id);
    }
    for c in raw(&proto_topic, 2).await {
        assert_eq!(wire_id(c.value.as_deref()), proto_id);
    }
    // Confluent's deserializer looks the writer schema up by id: the contract's subject is
    // not TopicNameStrategy's, and it still decodes.
    assert_eq!(
        values(&avro_topic, &registry.url(), "avro", 2).await,
        vec![
            json!({"id": 1, "item": "apple", "note": null}),
            json!({"id": 2, "item": "pear", "note": "ripe"}),
        ]
    );
    assert_eq!(
        values(&proto_topic, &registry.url(), "protobuf", 2).await,
        vec![
            json!({"id": "7", "item": "apple", "tags": ["a"]}),
            json!({"id": "8", "item": "pear", "tags": []}),
        ]
    );

    // Not convertible: 422 schema_violation with record and field, nothing written.
    let (s, _, answer) = post_json(
        &gw.url(&proto_topic),
        KEY,
        &json!({"records": [{"value": {"id": 9, "item": "ok"}}, {"value": {"id": 10, "item": ["not", "a", "string"]}}]}),
    )
    .await;
    assert_schema_violation(s, &answer, &["record 1", "item"], "not convertible");
    let (s, _, answer) = post_json(
        &gw.url(&avro_topic),
        KEY,
        &json!({"records": [{"value": {"id": 3, "item": "no note"}}, {"value": {"id": 4}}]}),
    )
    .await;
    assert_schema_violation(s, &answer, &["record 1", "item"], "not convertible");
    assert_eq!(raw(&avro_topic, 2).await.len(), 2, "nothing more written");
    assert_eq!(raw(&proto_topic, 2).await.len(), 2, "nothing more written");
    gw.shutdown().await;
}

/// Records that do not match their schema, and schemas that cannot be had, are refused with
/// 422 naming the record and the field; nothing of the request is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_records_and_schemas_are_refused_and_nothing_is_written() {
    let registry = SchemaRegistry::start().await;
    let gw = gateway(&registry, 2000, "").await;

    // Avro over v2: wrong type, missing required field, a field the record does not have.
    let topic = tansu_topic("test.bad-avro", 1).await;
    let good = json!({"value": {"id": 1, "item": "good", "note": null}});
    let cases = [
        (
            json!({"value": {"id": "one", "item": "wrong type", "note": null}}),
            "/id",
        ),
        (json!({"value": {"id": 2, "note": null}}), "item"),
        (
            json!({"value": {"id": 3, "item": "extra", "note": null, "colour": "red"}}),
            "colour",
        ),
        (
            json!({"value": {"id": 4, "item": "bad union", "note": 5}}),
            "/note",
        ),
    ];
    for (bad, field) in &cases {
        let body = json!({"value_schema": AVRO_ORDER, "records": [good, bad]});
        let (s, _, answer) = v2(&gw, &topic, "avro", &body).await;
        assert_confluent_422(s, &answer, &["record 1", field], &format!("v2 avro {bad}"));
    }
    // Unknown schema id (v2 and v3), malformed raw schema (v3).
    let body = json!({"value_schema_id": 999_999, "records": [good]});
    let (s, _, answer) = v2(&gw, &topic, "avro", &body).await;
    assert_confluent_422(s, &answer, &["value"], "v2 unknown value_schema_id");
    let record = json!({"value": {"schema_id": 999_999, "data": {"id": 1}}});
    let (s, _, answer) = v3(&gw, &topic, &record).await;
    assert_confluent_422(s, &answer, &["record 0", "value"], "v3 unknown schema_id");
    for (kind, schema) in [
        ("AVRO", "{\"type\": \"record\", \"name\": "),
        ("PROTOBUF", "message Order { int64 id = }"),
    ] {
        let record = json!({"value": {"type": kind, "schema": schema, "data": {"id": 1}}});
        let (s, _, answer) = v3(&gw, &topic, &record).await;
        let what = format!("v3 malformed {kind} schema");
        assert_confluent_422(s, &answer, &["record 0", "value"], &what);
    }
    let record = json!({"value": {"type": "AVRO", "schema": AVRO_ORDER, "data": {"id": "x", "item": "v3", "note": null}}});
    let (s, _, answer) = v3(&gw, &topic, &record).await;
    assert_confluent_422(s, &answer, &["/id"], "v3 avro wrong type");
    assert_empty(&topic, "refused avro").await;

    // JSON Schema over v3: additionalProperties false, a required field, a nested type.
    let topic = tansu_topic("test.bad-json", 1).await;
    for (data, field) in [
        (json!({"id": 1, "item": "extra", "colour": "red"}), "colour"),
        (json!({"id": 2}), "item"),
        (
            json!({"id": 3, "item": "zip", "address": {"zip": 12}}),
            "/address/zip",
        ),
    ] {
        let record = json!({"value": {"type": "JSONSCHEMA", "schema": JSON_ORDER, "data": data}});
        let (s, _, answer) = v3(&gw, &topic, &record).await;
        assert_confluent_422(s, &answer, &[field], &format!("v3 jsonschema {data}"));
    }
    // The same through v2's jsonschema format, second record bad.
    let body = json!({"value_schema": JSON_ORDER, "records": [
        {"value": {"id": 1, "item": "good"}},
        {"value": {"id": 1, "item": "bad", "colour": "red"}},
    ]});
    let (s, _, answer) = v2(&gw, &topic, "jsonschema", &body).await;
    assert_confluent_422(
        s,
        &answer,
        &["record 1", "colour"],
        "v2 jsonschema extra field",
    );
    assert_empty(&topic, "refused json schema").await;

    // Protobuf over v2: a field of the wrong type, a field the message does not have.
    let topic = tansu_topic("test.bad-proto", 1).await;
    for (bad, field) in [
        (json!({"id": 1, "item": 5}), "item"),
        (json!({"id": 1, "item": "x", "colour": "red"}), "colour"),
    ] {
        let body = json!({"value_schema": PROTO_ORDER, "records": [{"value": {"id": 1, "item": "good"}}, {"value": bad}]});
        let (s, _, answer) = v2(&gw, &topic, "protobuf", &body).await;
        assert_confluent_422(
            s,
            &answer,
            &["record 1", field],
            &format!("v2 protobuf {bad}"),
        );
    }
    assert_empty(&topic, "refused protobuf").await;
    gw.shutdown().await;
}

/// A schema the gateway has used stays usable while the registry fails (500s, then closed
/// connections): the records are written and decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_down_with_the_schema_cached_still_produces() {
    let registry = SchemaRegistry::start().await;
    let topic = tansu_topic("test.sr-cached", 1).await;
    let gw = gateway(&registry, 1000, "").await;

    let raw_record = |n: i64| json!({"value": {"type": "AVRO", "schema": AVRO_ORDER, "data": {"id": n, "item": "cached", "note": null}}});
    v3_written(&gw, &topic, &raw_record(1), "written").await;
    let id = registry.versions(&format!("{topic}-value"))[0];
    let by_id = |n: i64| json!({"value_schema_id": id, "records": [{"value": {"id": n, "item": "cached", "note": null}}]});
    let (s, _, answer) = v2(&gw, &topic, "avro", &by_id(2)).await;
    assert_eq!(s, 200, "{answer}");

    registry.set_down(true);
    let before = registry.total_calls();
    v3_written(&gw, &topic, &raw_record(3), "registry answering 500").await;
    let (s, _, answer) = v2(&gw, &topic, "avro", &by_id(4)).await;
    assert_eq!(s, 200, "registry answering 500: {answer}");
    registry.set_down(false);
    registry.set_dropping(true);
    v3_written(&gw, &topic, &raw_record(5), "registry dropping connections").await;
    let (s, _, answer) = v2(&gw, &topic, "avro", &by_id(6)).await;
    assert_eq!(s, 200, "registry dropping connections: {answer}");
    registry.set_dropping(false);
    eprintln!(
        "registry calls while failing: {}",
        registry.total_calls() - before
    );

    let got = values(&topic, &registry.url(), "avro", 6).await;
    let ids: Vec<Value> = got.iter().map(|v| v["id"].clone()).collect();
    assert_eq!(ids, (1..=6).map(|n| json!(n)).collect::<Vec<_>>());
    gw.shutdown().await;
}

/// A schema the gateway has not seen, while the registry is failing or gone: 503
/// `schema_registry_unavailable` with Retry-After 1, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_down_and_schema_unknown_is_503_and_nothing_written() {
    let mut registry = SchemaRegistry::start().await;
    let topic = unique_topic("test.sr-down");
    let ctr_topic = unique_topic("test.ctr-down");
    create_topic(&tansu(), &topic, 1).await;
    create_topic(&tansu(), &ctr_topic, 1).await;
    let id = registry.register(&format!("{topic}-value"), SchemaType::Avro, AVRO_ORDER);
    registry.register(&format!("{ctr_topic}-value"), SchemaType::Json, JSON_ORDER);
    let gw = gateway(&registry, 1000, &json_contract("test.ctr-down.*")).await;
    let data = json!({"id": 1, "item": "x", "note": null});

    for fault in ["500s", "dropped connections", "stopped"] {
        match fault {
            "500s" => registry.set_down(true),
            "dropped connections" => {
                registry.set_down(false);
                registry.set_dropping(true);
            }
            _ => registry.stop().await,
        }
        let (s, h, report) = v3(
            &gw,
            &topic,
            &json!({"value": {"schema_id": id, "data": data}}),
        )
        .await;
        assert_eq!(s, 503, "{fault}, v3: {report}");
        let code = report["error_code"].as_u64().unwrap_or(0);
        assert!(code == 503 || code / 100 == 503, "{fault}: {report}");
        assert_eq!(retry_after(&h), Some("1"), "{fault}");
        let (s, _, answer) = v2(
            &gw,
            &topic,
            "avro",
            &json!({"value_schema": AVRO_ORDER, "records": [{"value": data}]}),
        )
        .await;
        assert_eq!(s, 503, "{fault}, v2 raw schema: {answer}");
        let (s, h, answer) = post_json(
            &gw.url(&ctr_topic),
            KEY,
            &json!({"records": [{"value": {"id": 1, "item": "x"}}]}),
        )
        .await;
        assert_eq!(
            (s, answer["error"].as_str()),
            (503, Some("schema_registry_unavailable")),
            "{fault}, /v1 contract: {answer}"
        );
        assert_eq!(retry_after(&h), Some("1"), "{fault}");
    }
    assert_empty(&topic, "registry unavailable").await;
    assert_empty(&ctr_topic, "registry unavailable").await;
    gw.shutdown().await;
}

/// A registry slower than `timeout_ms`: 503 after about the timeout, not after the registry's
/// delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_registry_is_bounded_by_its_timeout() {
    let registry = SchemaRegistry::start().await;
    let topic = tansu_topic("test.sr-slow", 1).await;
    let id = registry.register(&format!("{topic}-value"), SchemaType::Avro, AVRO_ORDER);
    let timeout_ms = 500;
    let gw = gateway(&registry, timeout_ms, "").await;
    registry.set_delay(Duration::from_secs(10));

    let started = Instant::now();
    let record =
        json!({"value": {"schema_id": id, "data": {"id": 1, "item": "slow", "note": null}}});
    let (s, _, report) = v3(&gw, &topic, &record).await;
    let took = started.elapsed();
    assert_eq!(s, 503, "{report}");
    assert!(
        registry.calls(Call::SchemaById) >= 1,
        "the gateway asked the registry"
    );
    // Generous for a loaded 2-core machine; the registry would have taken 10 s.
    assert!(
        took < Duration::from_millis(timeout_ms + 3000),
        "answered after {took:?} with timeout_ms = {timeout_ms}"
    );
    assert_empty(&topic, "registry too slow").await;
    gw.shutdown().await;
}

/// The test registry answers the gateway's four calls in Confluent's shapes and codes, and its
/// faults do what the fault tests rely on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_registry_speaks_confluents_rest_api() {
    let mut registry = SchemaRegistry::start().await;
    let base = registry.url();
    let http = client();
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut r = http.request(method, format!("{base}{path}"));
        if let Some(body) = body {
            r = r
                .header("content-type", crate::common::schema_registry::CONTENT_TYPE)
                .body(body.to_string());
        }
        async move {
            let response = r.send().await.expect("registry call");
            let status = response.status().as_u16();
            assert_eq!(
                response.headers()["content-type"],
                crate::common::schema_registry::CONTENT_TYPE
            );
            (status, response.json::<Value>().await.expect("json"))
        }
    };
    use reqwest::Method;
    // Lookups and registrations post a schema; the rest are reads.
    let post = |path: &str, schema: &Value| call(Method::POST, path, Some(schema.clone()));
    let get = |path: &str| call(Method::GET, path, None);
    let avro = json!({"schema": AVRO_ORDER});
    let proto = json!({"schema": PROTO_ORDER, "schemaType": "PROTOBUF"});

    // Lookup before anything: subject not found; register; lookup finds it.
    let (s, a) = post("/subjects/a-value", &avro).await;
    assert_eq!((s, &a["error_code"]), (404, &json!(40401)), "{a}");
    let (s, a) = post("/subjects/a-value/versions", &avro).await;
    assert_eq!((s, &a), (200, &json!({"id": 1})));
    let (s, a) = post("/subjects/a-value", &avro).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(
        a,
        json!({"subject": "a-value", "id": 1, "version": 1, "schema": AVRO_ORDER})
    );
    // Another schema under that subject is not found by lookup (40403) until registered.
    let (s, a) = post("/subjects/a-value", &proto).await;
    assert_eq!((s, &a["error_code"]), (404, &json!(40403)), "{a}");
    // The same text again: the same id; under another subject: the same id too.
    let (_, a) = post("/subjects/a-value/versions", &avro).await;
    assert_eq!(a, json!({"id": 1}));
    let (_, a) = post("/subjects/b-value/versions", &avro).await;
    assert_eq!(a, json!({"id": 1}));
    let (_, a) = post("/subjects/a-value/versions", &proto).await;
    assert_eq!(a, json!({"id": 2}));
    // Malformed schemas are refused as Confluent does (42201).
    let (s, a) = post(
        "/subjects/a-value/versions",
        &json!({"schema": "message {", "schemaType": "PROTOBUF"}),
    )
    .await;
    assert_eq!((s, &a["error_code"]), (422, &json!(42201)), "{a}");

    // By id: schemaType omitted for Avro; Protobuf as text, or compiled when serialized.
    let (s, a) = get("/schemas/ids/1?subject=a-value").await;
    assert_eq!((s, &a), (200, &json!({"schema": AVRO_ORDER})));
    let (_, a) = get("/schemas/ids/2").await;
    assert_eq!(
        a,
        json!({"schema": PROTO_ORDER.trim(), "schemaType": "PROTOBUF"})
    );
    let (_, a) = get("/schemas/ids/2?format=serialized").await;
    use base64::Engine as _;
    let compiled = base64::engine::general_purpose::STANDARD
        .decode(a["schema"].as_str().expect("base64"))
        .expect("base64");
    assert_eq!(
        compiled,
        crate::common::schema_registry::compile_proto(PROTO_ORDER).expect("compiles")
    );
    let (s, a) = get("/schemas/ids/77").await;
    assert_eq!((s, &a["error_code"]), (404, &json!(40403)), "{a}");
    let (_, a) = get("/schemas/ids/1/versions").await;
    assert_eq!(
        a,
        json!([{"subject": "a-value", "version": 1}, {"subject": "b-value", "version": 1}])
    );

    // Versions: by number and latest; unknown version 40402, unknown subject 40401.
    let (_, a) = get("/subjects/a-value/versions/latest").await;
    assert_eq!(
        a,
        json!({"subject": "a-value", "id": 2, "version": 2, "schema": PROTO_ORDER.trim(), "schemaType": "PROTOBUF"})
    );
    let (_, a) = get("/subjects/a-value/versions/1").await;
    assert_eq!(a["id"], 1);
    let (s, a) = get("/subjects/a-value/versions/3").await;
    assert_eq!((s, &a["error_code"]), (404, &json!(40402)), "{a}");
    let (s, a) = get("/subjects/zzz/versions/latest").await;
    assert_eq!((s, &a["error_code"]), (404, &json!(40401)), "{a}");
    assert!(registry.calls(Call::Lookup) >= 3);
    assert!(registry.calls(Call::Register) >= 5);
    assert!(registry.calls(Call::SchemaById) >= 5);
    assert!(registry.calls(Call::SubjectVersion) >= 4);
    assert!(registry.unknown_calls().is_empty());

    // Faults: 500s; a delay; dropped connections; stopped.
    registry.set_down(true);
    let (s, a) = get("/schemas/ids/1").await;
    assert_eq!((s, &a["error_code"]), (500, &json!(50001)), "{a}");
    registry.set_down(false);
    registry.set_delay(Duration::from_millis(300));
    let started = Instant::now();
    let (s, _) = get("/schemas/ids/1").await;
    assert_eq!(s, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    registry.set_delay(Duration::ZERO);
    registry.set_dropping(true);
    let fresh = reqwest::Client::new();
    assert!(
        fresh
            .get(format!("{base}/schemas/ids/1"))
            .send()
            .await
            .is_err(),
        "a new connection is closed at once"
    );
    registry.set_dropping(false);
    registry.stop().await;
    assert!(
        reqwest::Client::new()
            .get(format!("{base}/schemas/ids/1"))
            .send()
            .await
            .is_err(),
        "stopped: connection refused"
    );
}

/// Confluent's API reference examples for v2 Avro produce, replayed as published: a primitive
/// value schema with records on two partitions, then a key and value schema pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluents_published_v2_avro_examples() {
    let (registry, topic, gw) = with_registry("test.v2-published", 2).await;

    let body = json!({
        "value_schema": "{\"name\":\"int\",\"type\": \"int\"}",
        "records": [{"value": 12}, {"value": 24, "partition": 1}]
    });
    let (s, _, answer) = v2(&gw, &topic, "avro", &body).await;
    assert_eq!(s, 200, "{answer}");
    assert_eq!(answer["key_schema_id"], Value::Null, "{answer}");
    let value_id = registry.versions(&format!("{topic}-value"));
    assert_eq!(answer["value_schema_id"], value_id[0], "{answer}");
    assert_eq!(answer["offsets"][1]["partition"], 1, "{answer}");

    let topic2 = tansu_topic("test.v2-published-kv", 2).await;
    let body = json!({
        "key_schema": "{\"name\":\"user_id\"  ,\"type\": \"int\"   }",
        "value_schema": "{\"type\": \"record\", \"name\": \"User\", \"fields\": [{\"name\": \"name\", \"type\": \"string\"}]}",
        "records": [
            {"key": 1, "value": {"name": "testUser"}},
            {"key": 2, "value": {"name": "testUser2"}, "partition": 1}
        ]
    });
    let (s, _, answer) = v2(&gw, &topic2, "avro", &body).await;
    assert_eq!(s, 200, "{answer}");
    assert!(answer["key_schema_id"].is_u64(), "{answer}");
    assert!(answer["value_schema_id"].is_u64(), "{answer}");

    let mut values: Vec<Value> = decoded(&topic, &registry.url(), "avro", "value", 2)
        .await
        .iter()
        .map(|r| r["value"].clone())
        .collect();
    values.sort_by_key(|v| v.as_i64());
    assert_eq!(values, vec![json!(12), json!(24)]);
    let mut pairs = key_values(&decoded(&topic2, &registry.url(), "avro", "both", 2).await);
    pairs.sort_by_key(|(k, _)| k.as_i64());
    assert_eq!(
        pairs,
        vec![
            (json!(1), json!({"name": "testUser"})),
            (json!(2), json!({"name": "testUser2"}))
        ]
    );
}

/// A tenant registers schemas only under its topic's own subjects: a raw schema for a subject
/// named outright (another team's) is looked up, never registered; under `<topic>-value` it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_schemas_are_registered_only_under_the_topics_own_subjects() {
    let (registry, topic, gw) = with_registry("test.subjects", 1).await;
    let record = |subject: Option<&str>| {
        let mut value = json!({"type": "AVRO", "schema": AVRO_ORDER,
                               "data": {"id": 1, "item": "a", "note": null}});
        if let Some(s) = subject {
            value["subject"] = json!(s);
        }
        json!({ "value": value })
    };
    let (s, _, answer) = v3(&gw, &topic, &record(Some("payments.settled-value"))).await;
    assert_confluent_422(
        s,
        &answer,
        &["payments.settled-value", "own"],
        "foreign subject",
    );
    assert!(
        registry.versions("payments.settled-value").is_empty(),
        "nothing registered there"
    );
    assert_eq!(registry.calls(Call::Register), 0);
    assert_empty(&topic, "a refused foreign subject").await;

    let (s, _, answer) = v3(&gw, &topic, &record(Some(&format!("{topic}-orders")))).await;
    assert_eq!(s, 200, "{answer}");
    let (s, _, answer) = v3(&gw, &topic, &record(None)).await;
    assert_eq!(s, 200, "{answer}");
    assert_eq!(registry.versions(&format!("{topic}-value")).len(), 1);
    gw.shutdown().await;
}

/// One request cannot turn into many registry calls: a batch whose every entry carries a
/// different raw schema gets its first 8 written and the rest refused per entry, and a batch
/// repeating one raw schema costs one lookup and one registration however many entries carry
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_calls_per_request_are_bounded() {
    let (registry, topic, gw) = with_registry("test.lookups", 1).await;
    let schema = |i: usize| {
        format!(r#"{{"type":"record","name":"R{i}","fields":[{{"name":"n","type":"int"}}]}}"#)
    };
    // Confluent's batch limit is 10 entries: 10 new raw schemas would be 20 calls.
    let entries: Vec<Value> = (0..10)
        .map(|i| json!({"id": format!("e{i}"), "value": {"type": "AVRO", "schema": schema(i), "data": {"n": i}}}))
        .collect();
    let (s, _, text) = v3_batch(&gw, &topic, &json!({"entries": entries})).await;
    assert_eq!(s, 207, "{text}");
    let answer = parse(&text);
    let ok = answer["successes"].as_array().map_or(0, Vec::len);
    let failed = answer["failures"].as_array().map_or(0, Vec::len);
    assert_eq!(
        (ok, failed),
        (8, 2),
        "8 new raw schemas in one request, 2 refused: {answer}"
    );
    assert!(
        detail(&answer["failures"][0]).contains("smaller requests"),
        "{answer}"
    );
    assert!(
        registry.total_calls() <= 16,
        "{} registry calls for one request",
        registry.total_calls()
    );

    let before = registry.total_calls();
    let same: Vec<Value> = (0..10)
        .map(|i| json!({"id": format!("s{i}"), "value": {"type": "AVRO", "schema": AVRO_ORDER, "data": {"id": i, "item": "x", "note": null}}}))
        .collect();
    let (s, _, text) = v3_batch(&gw, &topic, &json!({"entries": same})).await;
    assert_eq!(s, 207, "{text}");
    let answer = parse(&text);
    assert_eq!(
        answer["successes"].as_array().map_or(0, Vec::len),
        10,
        "{answer}"
    );
    assert_eq!(
        registry.total_calls() - before,
        2,
        "one lookup, one registration"
    );
    gw.shutdown().await;
}

/// A writer of a topic under a `[[schemas]]` contract cannot replace the contract it is held
/// to: a raw schema for the contract's subject is looked up, never registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contracts_subject_is_never_registered_from_a_record() {
    let registry = SchemaRegistry::start().await;
    let topic = tansu_topic("test.guarded", 1).await;
    let subject = format!("{topic}-value");
    registry.register(&subject, SchemaType::Json, JSON_ORDER);
    let gw = gateway(&registry, 2000, &json_contract(&topic)).await;
    let lax = r#"{"title":"anything"}"#;
    let record = json!({"value": {"type": "JSONSCHEMA", "schema": lax, "data": {"free": true}}});
    let (s, _, answer) = v3(&gw, &topic, &record).await;
    assert_confluent_422(s, &answer, &[&subject, "contract"], "contract subject");
    assert_eq!(
        registry.versions(&subject).len(),
        1,
        "the contract's schema is still the only one"
    );
    assert_empty(&topic, "a record trying to replace its contract").await;

    // Nor can it name a lax schema registered elsewhere by id.
    let lax_id = registry.register("elsewhere-value", SchemaType::Json, lax);
    let record = json!({"value": {"schema_id": lax_id, "data": {"free": true}}});
    let (s, _, answer) = v3(&gw, &topic, &record).await;
    assert_confluent_422(s, &answer, &["data contract"], "another schema id");
    assert_empty(&topic, "a record naming another schema").await;
    // The contract's own id is taken.
    let own_id = registry.versions(&subject)[0];
    let record = json!({"value": {"schema_id": own_id, "data": {"id": 1, "item": "a"}}});
    let (s, _, answer) = v3(&gw, &topic, &record).await;
    assert_eq!(s, 200, "{answer}");
    gw.shutdown().await;
}
