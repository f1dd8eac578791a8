//! Confluent's own Node client for REST Proxy (npm `kafka-rest` 0.0.5, installed by
//! scripts/clients.sh) produces through floodgate as its users write it
//! (scripts/kafka-rest-node.js): binary messages — strings, Buffers, keyed records, a null
//! value, a record's own partition, a partition's own path — and JSON documents, every one sent
//! with the `"key": null, "partition": null` the client always writes. Every record is read back
//! from Kafka (Tansu) byte for byte.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::common::*;

/// A record expected in Kafka: key, value, and the partition it was sent to (if it named one).
type Expected = (Option<&'static [u8]>, Option<&'static [u8]>, Option<i32>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluents_node_client_produces_binary_and_json_records() {
    let clients = std::env::var("FLOODGATE_CLIENTS").unwrap_or_else(|_| {
        panic!(
            "FLOODGATE_CLIENTS is not set: run the suite with scripts/test.sh, which makes the \
             clients' folder (or scripts/clients.sh DIR and export it)"
        )
    });
    let (topic, gw) = on_tansu("test.node", 2).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka-rest-node.js");
    let mut command = Command::new("node");
    command
        .arg(script)
        .args([&format!("http://{}", gw.addr), KEY, &topic])
        .env(
            "NODE_PATH",
            PathBuf::from(clients).join("node/node_modules"),
        )
        .stdin(Stdio::null());
    let output = client_output(command, "node scripts/kafka-rest-node.js").await;
    let stdout = String::from_utf8_lossy(&output);
    // Every answer is the v1 shape the client reads: one offset per record, none failed.
    let answers: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("an answer"))
        .collect();
    assert_eq!(answers.len(), 6, "{stdout}");
    for a in &answers {
        for offset in a["answer"]["offsets"].as_array().expect("offsets") {
            assert!(offset["error_code"].is_null(), "{a}");
            assert!(offset["offset"].as_i64().is_some(), "{a}");
        }
    }

    let expected: Vec<Expected> = vec![
        (None, Some(b"binary-1"), None),
        (Some(b"key-2"), Some(b"binary-2"), None),
        (Some(b"key-3"), Some(&[0, 1, 2, 255]), None),
        (Some(b"key-4"), None, None),
        (None, Some(b"binary-5"), Some(0)),
        (None, Some(b"binary-6"), None),
        (Some(b"key-7"), Some(b"binary-7"), Some(0)),
        // JSON: the documents' text as the client serialized it (JSON.stringify), keys too.
        (None, Some(br#"{"order":8,"items":["a","b"]}"#), None),
        (Some(br#""key-9""#), Some(br#"{"order":9,"ok":true}"#), None),
    ];
    let records = read_tansu(&topic, 2, expected.len()).await;
    assert_eq!(records.len(), expected.len(), "{records:?}");
    for (key, value, partition) in &expected {
        let found = records
            .iter()
            .find(|r| r.key.as_deref() == *key && r.value.as_deref() == *value)
            .unwrap_or_else(|| panic!("{key:?} {value:?} not in Kafka: {records:?}"));
        if let Some(p) = partition {
            assert_eq!(found.partition, *p, "{key:?} {value:?}");
        }
    }
    gw.shutdown().await;
}
