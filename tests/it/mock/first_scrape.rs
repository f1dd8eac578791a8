//! The first scrape of a gateway that has served nothing: every counter family has its series,
//! one per label value known at start-up, at 0 — so a dashboard shows 0 instead of no data and
//! `rate()` sees the first event — and the exposition passes `promtool check metrics`.

use std::collections::BTreeMap;

use crate::common::exposition::{promtool_check, scrape};
use crate::common::idp::{self, Signer};
use crate::common::*;
use floodgate::config::JwtIssuerConfig;

/// Counter families without a series here: their label values are not known at start-up
/// (their series appear with their first event), or none is configured in this test.
const NO_SERIES_HERE: [(&str, &str); 3] = [
    (
        "floodgate_schema_violations_total",
        "by the topic a refused record was for: not known at start-up",
    ),
    (
        "floodgate_lag_guard_activations_total",
        "one series per [[lag_guards]] entry, from start-up: none configured here",
    ),
    (
        "floodgate_lag_guard_fail_opens_total",
        "one series per [[lag_guards]] entry, from start-up: none configured here",
    ),
];

/// Each counter family of a (classic-format) exposition with its samples.
fn counters(text: &str) -> BTreeMap<String, Vec<(String, f64)>> {
    let mut families: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                families.entry(name.to_string()).or_default();
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if let Some(samples) = families.get_mut(name) {
            samples.push((series.to_string(), value.parse().unwrap_or(f64::NAN)));
        }
    }
    families
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_scrape_has_every_counter_at_zero() {
    let dir = tempfile::tempdir().expect("dir");
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, idp::jwks(&[&Signer::ec("k1")])).expect("jwks");
    let (_cluster, gw) = gateway_on_mock("test.first", Time::Manual, |cfg| {
        cfg.auth.jwt = vec![JwtIssuerConfig {
            issuer: "https://idp.test".into(),
            audiences: vec!["floodgate".into()],
            jwks_url: None,
            jwks_file: Some(jwks.clone()),
            algorithms: vec!["ES256".into()],
            leeway_s: 30,
            refresh_s: 300,
            min_refetch_s: 30,
            fetch_timeout_ms: 1_000,
            tenant_claim: "client_id".into(),
            map: None,
            topics_claim: None,
        }];
    })
    .await;
    let text = scrape(&gw).await;
    let families = counters(&text);
    assert!(families.len() >= 15, "{families:?}");
    for (family, samples) in &families {
        if NO_SERIES_HERE.iter().any(|(f, _)| f == family) {
            continue;
        }
        assert!(!samples.is_empty(), "{family} has no series: {text}");
        for (series, value) in samples {
            assert_eq!(*value, 0.0, "{series}");
        }
    }
    // The label values known at start-up, each its own series.
    let has = |series: &str| {
        families
            .values()
            .flatten()
            .any(|(s, v)| s == series && *v == 0.0)
    };
    for series in [
        r#"floodgate_kafka_delivery_errors_total{code="message_timed_out"}"#,
        r#"floodgate_kafka_delivery_errors_total{code="message_size_too_large"}"#,
        r#"floodgate_kafka_delivery_errors_total{code="topic_authorization_failed"}"#,
        r#"floodgate_kafka_delivery_errors_total{code="all_brokers_down"}"#,
        r#"floodgate_kafka_delivery_errors_total{code="client_error"}"#,
        r#"floodgate_tenant_rejections_total{tenant="acme",reason="tenant_records"}"#,
        r#"floodgate_tenant_rejections_total{tenant="acme",reason="consumer_lag"}"#,
        r#"floodgate_authentications_total{method="api_key",outcome="unauthorized"}"#,
        r#"floodgate_authentications_total{method="jwt",outcome="token_expired"}"#,
        r#"floodgate_authentications_total{method="jwt",outcome="jwks_unavailable"}"#,
        r#"floodgate_authentications_total{method="none",outcome="unauthorized"}"#,
        r#"floodgate_uploads_cut_short_total{reason="rate_limited"}"#,
    ] {
        assert!(has(series), "{series} missing or not 0");
    }
    promtool_check(&text).unwrap_or_else(|e| panic!("promtool: {e}"));

    // The seeded series are the ones events count on: a refusal moves its own series.
    let url = gw.url("test.first");
    let (s, _, _) = post_json(
        &url,
        "not-a-key",
        &serde_json::json!({"records": [{"value": 1}]}),
    )
    .await;
    assert_eq!(s, 401);
    let after = scrape(&gw).await;
    assert_eq!(
        crate::common::exposition::sample(
            &after,
            r#"floodgate_authentications_total{method="api_key",outcome="unauthorized"}"#
        ),
        1.0
    );
    gw.shutdown().await;
}
