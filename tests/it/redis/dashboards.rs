//! The shipped Grafana dashboard and alert rules only use metrics floodgate really exports:
//! every `floodgate_*` name in them must appear in a scrape of a running gateway.

use std::collections::BTreeSet;

use crate::common::*;
use rdkafka::mocking::MockCluster;

fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("floodgate_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alerts_use_only_exported_metrics() {
    let cluster = MockCluster::new(1).expect("mock");
    cluster.create_topic("test.dash", 1, 1).expect("topic");
    // A cluster member (the Redis started by scripts/test.sh), so the cluster row's metrics
    // are exported too.
    let mut cfg = config(&cluster.bootstrap_servers());
    cfg.cluster.redis_url = Some(redis_url());
    cfg.cluster.key_prefix = format!("fgtest-dash-{}", std::process::id());
    let gw = Gateway::start(cfg).await;
    // One delivered and one refused request, so every family has samples.
    let one = serde_json::json!({"records":[{"value":1}]});
    let (s, _, _) = post_json(&gw.url("test.dash"), KEY, &one).await;
    assert_eq!(s, 200);
    cluster.request_errors(
        rdkafka::types::RDKafkaApiKey::Produce,
        &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD],
    );
    let (s, _, _) = post_json(&gw.url("test.dash"), KEY, &one).await;
    assert_eq!(s, 502);
    let scrape = crate::common::exposition::scrape(&gw).await;
    // Every declared family, with the sample names its type implies (a family with no samples
    // yet, such as delivery errors, is still exported).
    let mut exported = metric_names(&scrape);
    for line in scrape.lines() {
        let mut words = line.strip_prefix("# TYPE ").unwrap_or("").split(' ');
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            // OpenMetrics names the family without `_total`, the classic format with it.
            "counter" => &["", "_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        exported.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    gw.shutdown().await;

    let root = env!("CARGO_MANIFEST_DIR");
    let dashboard = std::fs::read_to_string(format!("{root}/config/grafana-dashboard.json"))
        .expect("dashboard");
    let parsed: serde_json::Value = serde_json::from_str(&dashboard).expect("dashboard is JSON");
    assert!(parsed["panels"].as_array().is_some_and(|p| p.len() >= 4));
    let alerts = std::fs::read_to_string(format!("{root}/config/alerts.yml")).expect("alerts");
    for (file, text) in [
        ("grafana-dashboard.json", &dashboard),
        ("alerts.yml", &alerts),
    ] {
        let used = metric_names(text);
        assert!(!used.is_empty());
        let unknown: Vec<&String> = used.iter().filter(|n| !exported.contains(*n)).collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics floodgate does not export: {unknown:?}"
        );
    }
}
