//! Data contracts at the gate (#31): records that carry a schema (Confluent v2 and v3 shapes)
//! and records under a `[[schemas]]` contract are written in Confluent's wire format, and
//! Confluent's own Python deserializers (scripts/schema-readback.py, in the venv that
//! scripts/test.sh makes) decode them back to what was posted, fetching the writer schemas from
//! the test registry (tests/common/schema_registry.rs). Invalid records are refused with 422
//! naming the record and the field, and nothing of the request is written; the registry's
//! faults give 503 unless the schema is cached, within the registry timeout.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::schema_registry::{Call, SchemaRegistry, SchemaType};
use common::*;
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
    let mut command = Command::new(python());
    command
        .arg(script("schema-readback.py"))
        .args(["--broker", &tansu(), "--topic", topic, "--registry", registry])
        .args(["--format", format, "--field", field])
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
async fn decoded(topic: &str, registry: &str, format: &str, field: &str, count: usize) -> Vec<Value> {
    let r = read_back_decoded(topic, registry, format, field, count).await;
    assert_eq!(
        r.code, 0,
        "Confluent's {format} deserializer did not read {topic} back: {}",
        r.stderr
    );
    assert_eq!(r.records.len(), count, "records of {topic}: {:?}", r.records);
    r.records
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
    let mut command = Command::new(python());
    command
        .arg(script("schema-produce.py"))
        .args(["--broker", &tansu(), "--topic", topic, "--registry", registry])
        .args(["--format", format]);
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

    let topic = unique_topic("test.sr-avro");
    create_topic(&tansu(), &topic, 1).await;
    let posted = [
        json!({"id": 1, "item": "apple", "note": null}),
        json!({"id": 2, "item": "pear", "note": "ripe"}),
    ];
    let records: Vec<Value> = posted.iter().map(|v| json!({"value": v})).collect();
    let id = produce_with_confluent(&topic, &url, "avro", Some(AVRO_ORDER), &records).await;
    assert_eq!(registry.versions(&format!("{topic}-value")), vec![id]);
    assert_eq!(values(&topic, &url, "avro", 2).await, posted);

    let topic = unique_topic("test.sr-json");
    create_topic(&tansu(), &topic, 1).await;
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

    let topic = unique_topic("test.sr-proto");
    create_topic(&tansu(), &topic, 1).await;
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
    let topic = unique_topic("test.sr-raw");
    create_topic(&tansu(), &topic, 1).await;
    let gw = Gateway::start(config(&tansu())).await;
    let (s, _, _) = post_json(&gw.url(&topic), KEY, &json!({"records": [{"value": {"id": 1}}]})).await;
    assert_eq!(s, 200);
    let r = read_back_decoded(&topic, &url, "avro", "value", 1).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("offset 0") && r.stderr.contains("value"), "{}", r.stderr);
    gw.shutdown().await;

    assert_eq!(registry.unknown_calls(), Vec::<String>::new());
    assert!(registry.calls(Call::SchemaById) >= 3);
}
