//! /metrics counts exactly what happened, and /readyz follows the broker.

use std::time::{Duration, Instant};

use crate::common::exposition::sample;
use crate::common::*;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use reqwest::Method;
use serde_json::json;

async fn scrape(gw: &Gateway) -> String {
    let r = client()
        .get(gw.admin_url("/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(r.status().as_u16(), 200);
    r.text().await.expect("text")
}

fn records(n: usize, size: usize) -> serde_json::Value {
    let r: Vec<_> = (0..n).map(|_| json!({"value": "v".repeat(size)})).collect();
    json!({ "records": r })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_move_by_exactly_the_driven_amounts() {
    let (cluster, gw) = gateway_on_mock("test.metrics", Time::Manual, |cfg| {
        limit_records(cfg, 5, 5);
        limit_bytes(cfg, 1000, 1000);
        let mut b = tenant("b", "key-b", &["test.*"]);
        b.max_buffer_share = Some(1.0);
        cfg.tenants.push(b);
        cfg.global.records_per_sec = Some(1000);
        cfg.global.records_burst = Some(30);
        cfg.global.bytes_per_sec = Some(100_000);
        cfg.global.bytes_burst = Some(5_000);
    })
    .await;
    let url = gw.url("test.metrics");
    let before = scrape(&gw).await;
    assert_eq!(
        sample(
            &before,
            "floodgate_tenant_requests_total{tenant=\"acme\",outcome=\"admitted\"}"
        ),
        0.0
    );

    let status = |s: u16, a: &serde_json::Value| (s, a["reason"].as_str().map(str::to_string));
    let (s, _, a) = post_json(&url, KEY, &records(5, 8)).await; // 5 records of 10 bytes
    assert_eq!(s, 200, "{a}");
    let (s, _, a) = post_json(&url, KEY, &records(1, 8)).await;
    assert_eq!(status(s, &a), (429, Some("tenant_records".into())));
    gw.advance_ms(1000);
    let (s, _, a) = post_json(&url, KEY, &records(1, 600)).await; // 602 bytes
    assert_eq!(s, 200, "{a}");
    let (s, _, a) = post_json(&url, KEY, &records(1, 600)).await;
    assert_eq!(status(s, &a), (429, Some("tenant_bytes".into())));
    let (s, _, a) = post_json(&url, "key-b", &records(20, 8)).await;
    assert_eq!(s, 200, "{a}");
    let (s, _, a) = post_json(&url, "key-b", &records(10, 8)).await;
    assert_eq!(status(s, &a), (429, Some("global_records".into())));
    gw.advance_ms(1000);
    let (s, _, a) = post_json(&url, "key-b", &records(1, 4800)).await;
    assert_eq!(s, 200, "{a}");
    let (s, _, a) = post_json(&url, "key-b", &records(1, 1000)).await;
    assert_eq!(status(s, &a), (429, Some("global_bytes".into())));

    // Kafka refuses the next produce request outright: 3 records fail.
    gw.advance_ms(1000);
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD],
    );
    let (s, _, a) = post_json(&url, "key-b", &records(3, 8)).await;
    assert_eq!(
        (s, a["error"].as_str()),
        (502, Some("delivery_failed")),
        "{a}"
    );

    // A request's delivery is timed just after its answer is released (the producer's
    // callback completes the batch, then observes): the last one may land a moment after
    // the client has its answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut m = scrape(&gw).await;
    while !m.contains("floodgate_kafka_delivery_duration_seconds_count 5")
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        m = scrape(&gw).await;
    }
    let acme = |what: &str| sample(&m, &format!("floodgate_{what}"));
    assert_eq!(
        acme("tenant_requests_total{tenant=\"acme\",outcome=\"admitted\"}"),
        2.0
    );
    assert_eq!(
        acme("tenant_requests_total{tenant=\"acme\",outcome=\"rejected\"}"),
        2.0
    );
    assert_eq!(
        acme("tenant_records_total{tenant=\"acme\",outcome=\"admitted\"}"),
        6.0
    );
    assert_eq!(
        // 5 x 10 + 602 value bytes, and 8 bytes of record overhead for each of the 6.
        acme("tenant_record_bytes_total{tenant=\"acme\",outcome=\"admitted\"}"),
        700.0
    );
    assert_eq!(
        acme("tenant_rejections_total{tenant=\"acme\",reason=\"tenant_records\"}"),
        1.0
    );
    assert_eq!(
        acme("tenant_rejections_total{tenant=\"acme\",reason=\"tenant_bytes\"}"),
        1.0
    );
    assert_eq!(
        acme("tenant_rejections_total{tenant=\"b\",reason=\"global_records\"}"),
        1.0
    );
    assert_eq!(
        acme("tenant_rejections_total{tenant=\"b\",reason=\"global_bytes\"}"),
        1.0
    );
    assert_eq!(
        acme("tenant_requests_total{tenant=\"b\",outcome=\"admitted\"}"),
        3.0
    );
    assert_eq!(
        acme("tenant_records_total{tenant=\"b\",outcome=\"admitted\"}"),
        24.0
    );
    assert_eq!(
        acme("tenant_records_total{tenant=\"b\",outcome=\"failed\"}"),
        3.0
    );
    assert_eq!(
        acme("kafka_delivery_errors_total{code=\"invalid_record\"}"),
        3.0
    );
    assert_eq!(
        acme("tenant_tokens{tenant=\"acme\",bucket=\"records\"}"),
        5.0
    );
    assert_eq!(
        acme("tenant_tokens{tenant=\"acme\",bucket=\"bytes\"}"),
        1000.0
    );
    assert_eq!(acme("buffer_held_bytes"), 0.0);
    assert_eq!(acme("buffer_capacity_records"), 200_000.0);
    assert!(
        m.contains(
            "floodgate_http_request_duration_seconds_count{route=\"produce\",status=\"429\"} 4"
        ),
        "{m}"
    );
    assert!(
        m.contains("floodgate_kafka_delivery_duration_seconds_count 5"),
        "{m}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_reasons_and_readiness_follow_the_broker() {
    let (cluster, gw) = gateway_on_mock("test.ready", Time::Real, |cfg| {
        cfg.buffer.max_records = 20;
        cfg.tenants[0].max_buffer_share = Some(0.5);
        let mut b = tenant("b", "key-b", &["test.*"]);
        b.max_buffer_share = Some(1.0);
        cfg.tenants.push(b);
    })
    .await;
    readyz_becomes(&gw, 200, Duration::from_secs(5)).await;
    let (s, _, _) = post_json(&gw.url("test.ready"), KEY, &records(1, 4)).await;
    assert_eq!(s, 200);

    cluster.broker_down(1).expect("down");
    let url = format!("{}?async=true", gw.url("test.ready"));
    let (s, _, _) = post_json(&url, KEY, &records(10, 4)).await;
    assert_eq!(s, 202);
    let (s, _, a) = post_json(&url, KEY, &records(1, 4)).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_buffer")),
        "{a}"
    );
    let (s, _, _) = post_json(&url, "key-b", &records(10, 4)).await;
    assert_eq!(s, 202);
    let (s, _, a) = post_json(&url, "key-b", &records(1, 4)).await;
    assert_eq!((s, a["reason"].as_str()), (429, Some("buffer_full")), "{a}");
    let m = scrape(&gw).await;
    assert_eq!(
        sample(
            &m,
            "floodgate_tenant_rejections_total{tenant=\"acme\",reason=\"tenant_buffer\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(
            &m,
            "floodgate_tenant_rejections_total{tenant=\"b\",reason=\"buffer_full\"}"
        ),
        1.0
    );
    assert_eq!(sample(&m, "floodgate_buffer_held_records"), 20.0);
    assert_eq!(
        // 10 records of 6 value bytes, each with 8 of record overhead.
        sample(&m, "floodgate_tenant_buffer_bytes{tenant=\"acme\"}"),
        140.0
    );
    let (s, a) = admin(&gw, Method::GET, "/readyz", None, None).await;
    assert_eq!((s, a["ready"].as_bool()), (503, Some(false)), "{a}");

    cluster.broker_up(1).expect("up");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (s, a) = admin(&gw, Method::GET, "/readyz", None, None).await;
        if s == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never ready again: {a}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    gw.shutdown().await;
}

/// Polls `/readyz` until it answers `status`, for at most `within`; returns its last answer.
async fn readyz_becomes(gw: &Gateway, status: u16, within: Duration) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let (s, a) = admin(gw, Method::GET, "/readyz", None, None).await;
        if s == status {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never answered {status}: {a}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Readiness is a latch kept by the catalog's background refresh (every `metadata_ttl_ms`), so
/// it follows the broker within one interval plus the metadata timeout, and a probe costs no
/// Kafka request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_reports_an_unreachable_broker() {
    let (cluster, gw) = gateway_on_mock("test.ready2", Time::Real, |cfg| {
        cfg.kafka.metadata_ttl_ms = 200;
        cfg.kafka.metadata_timeout_ms = 500;
    })
    .await;
    readyz_becomes(&gw, 200, Duration::from_secs(5)).await;
    cluster.broker_down(1).expect("down");
    let a = readyz_becomes(&gw, 503, Duration::from_secs(5)).await;
    assert_eq!(a["reason"].as_str(), Some("kafka_unreachable"), "{a}");
    cluster.broker_up(1).expect("up");
    readyz_becomes(&gw, 200, Duration::from_secs(30)).await;
    gw.shutdown().await;
}

/// Every `floodgate_tenant_*_total` series of a scrape, by its labels other than `tenant`:
/// (family and other labels) → (sum over tenants, the tenants that have one).
fn tenant_counters(text: &str) -> std::collections::BTreeMap<String, (f64, Vec<String>)> {
    let mut out: std::collections::BTreeMap<String, (f64, Vec<String>)> = Default::default();
    for line in text
        .lines()
        .filter(|l| l.starts_with("floodgate_tenant_") && l.contains("_total{"))
    {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let mut tenant = String::new();
        let mut others = Vec::new();
        for label in labels.split(',') {
            match label.strip_prefix("tenant=") {
                Some(t) => tenant = t.trim_matches('"').to_string(),
                None => others.push(label.to_string()),
            }
        }
        let entry = out
            .entry(format!("{name}{{{}}}", others.join(",")))
            .or_default();
        entry.0 += value.trim().parse::<f64>().unwrap_or(0.0);
        entry.1.push(tenant);
    }
    out
}

/// The same scripted load on an `all` gateway and a `top` one (5 tenants of their own out of
/// 30): every total is the same; `top` shows 5 tenants and `_other`; and as other tenants
/// become the busiest, no counter series of the `top` gateway goes down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_mode_shows_the_busiest_and_sums_the_rest_exactly() {
    let make = |mode: floodgate::config::PerTenant| {
        move |cfg: &mut floodgate::config::Config| {
            cfg.metrics.per_tenant = mode;
            cfg.metrics.top_tenants = 5;
            for i in 0..29 {
                let mut t = tenant(&format!("t{i:02}"), &format!("key-{i}"), &["test.*"]);
                t.records_per_sec = Some(20);
                t.records_burst = Some(20);
                cfg.tenants.push(t);
            }
        }
    };
    let (_c1, all) = gateway_on_mock(
        "test.top",
        Time::Manual,
        make(floodgate::config::PerTenant::All),
    )
    .await;
    let (_c2, top) = gateway_on_mock(
        "test.top",
        Time::Manual,
        make(floodgate::config::PerTenant::Top),
    )
    .await;
    // A round: tenants in `busy` send more than their budget (and more than any tenant did
    // in earlier rounds: the busiest are counted over the last minute), every tenant a little.
    let round = |busy: std::ops::Range<usize>, n: usize| {
        let urls = [all.url("test.top"), top.url("test.top")];
        async move {
            for url in &urls {
                for i in 0..29usize {
                    let n = if busy.contains(&i) { n } else { 1 };
                    for _ in 0..n {
                        post_json(url, &format!("key-{i}"), &records(5, 3)).await;
                    }
                }
            }
        }
    };
    let mut before: Option<std::collections::BTreeMap<String, f64>> = None;
    for (busy, n) in [(0..5, 10), (10..15, 30), (20..25, 60)] {
        round(busy.clone(), n).await;
        for gw in [&all, &top] {
            gw.advance_ms(1000);
        }
        tokio::time::sleep(Duration::from_millis(400)).await; // the status sampler's second
        let (a, t) = (scrape(&all).await, scrape(&top).await);
        let (a, t) = (tenant_counters(&a), tenant_counters(&t));
        assert_eq!(a.keys().collect::<Vec<_>>(), t.keys().collect::<Vec<_>>());
        for (series, (sum, tenants)) in &t {
            assert_eq!(*sum, a[series].0, "{series}: top sums to what all shows");
            let own: Vec<&String> = tenants.iter().filter(|t| *t != "_other").collect();
            assert_eq!(own.len(), 5, "{series}: {tenants:?}");
            assert!(tenants.iter().any(|t| t == "_other"), "{series}");
        }
        // The busiest of this round have their own series.
        let requests = &t["floodgate_tenant_requests_total{outcome=\"rejected\"}"].1;
        for i in busy.clone() {
            assert!(
                requests.contains(&format!("t{i:02}")),
                "t{i:02} in {requests:?}"
            );
        }
        // Per series (tenant included), nothing goes down from one scrape to the next.
        let text = scrape(&top).await;
        let now: std::collections::BTreeMap<String, f64> = text
            .lines()
            .filter(|l| {
                l.starts_with("floodgate_tenant_")
                    && l.contains("_total{")
                    && l.contains("tenant=\"_other\"")
            })
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect();
        if let Some(before) = &before {
            for (k, v) in before {
                assert!(now.get(k).copied().unwrap_or(0.0) >= *v, "{k} went down");
            }
        }
        before = Some(now);
    }
    all.shutdown().await;
    top.shutdown().await;
}

/// With `[metrics] token_env`, `/metrics` answers only a scraper with the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_token_protects_metrics() {
    let cluster = mock_cluster(&["test.token"]);
    let mut cfg = config(&cluster.bootstrap_servers());
    cfg.metrics.token_env = Some("UNUSED_IN_TESTS".into());
    let mut options = monotonic_options();
    options.metrics_token = Some("scrape-token-0123456789".into());
    let gw = Gateway::start_options(cfg, options).await;
    let url = gw.admin_url("/metrics");
    let scrape_with = |token: Option<&'static str>| {
        let mut request = client().get(&url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let r = request.send().await.expect("scrape");
            (r.status().as_u16(), r.text().await.expect("text"))
        }
    };
    assert_eq!(scrape_with(None).await.0, 401);
    assert_eq!(scrape_with(Some("wrong-token-0123456789")).await.0, 401);
    let (status, text) = scrape_with(Some("scrape-token-0123456789")).await;
    assert_eq!(status, 200);
    assert!(text.contains("floodgate_buffer_held"));
    gw.shutdown().await;
}

/// `check-config` checks what the environment must hold for `[metrics] token_env`: the
/// variable set, and a token of at least 16 characters once trimmed.
#[test]
fn check_config_checks_the_scrape_token_variable() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("floodgate.toml");
    std::fs::write(
        &path,
        "[kafka]\nbootstrap_servers = \"127.0.0.1:9\"\n[metrics]\ntoken_env = \"FG_TEST_SCRAPE_TOKEN\"\n",
    )
    .expect("write");
    let run = |value: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"));
        cmd.arg("--config").arg(&path).arg("check-config");
        cmd.env_remove("FG_TEST_SCRAPE_TOKEN");
        if let Some(v) = value {
            cmd.env("FG_TEST_SCRAPE_TOKEN", v);
        }
        let out = cmd.output().expect("check-config");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = run(None);
    assert!(!ok, "unset must fail");
    assert!(
        err.contains("metrics.token_env") && err.contains("not set"),
        "{err}"
    );
    let (ok, err) = run(Some("  too-short  "));
    assert!(!ok);
    assert!(
        err.contains("at least 16") && !err.contains("too-short"),
        "{err}"
    );
    let (ok, err) = run(Some(" scrape-token-0123456789\n"));
    assert!(ok, "{err}");
}

/// A deleted tenant's counts stay in `_other` (where they were summed): no `_other` counter
/// goes down when a tenant is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_tenant_never_lowers_other() {
    let (_cluster, gw) = gateway_on_mock("test.gone", Time::Manual, |cfg| {
        cfg.metrics.per_tenant = floodgate::config::PerTenant::None;
        cfg.tenants.push(tenant("gone", "key-gone", &["test.*"]));
    })
    .await;
    for _ in 0..3 {
        post_json(&gw.url("test.gone"), "key-gone", &records(5, 3)).await;
    }
    post_json(&gw.url("test.gone"), KEY, &records(2, 3)).await;
    let other = |text: &str| -> std::collections::BTreeMap<String, f64> {
        text.lines()
            .filter(|l| l.starts_with("floodgate_tenant_") && l.contains("tenant=\"_other\""))
            .filter(|l| l.contains("_total{"))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    };
    let before = other(&scrape(&gw).await);
    let records_key = "floodgate_tenant_records_total{tenant=\"_other\",outcome=\"admitted\"}";
    assert_eq!(before.get(records_key), Some(&17.0), "{before:?}");
    let (s, _) = admin_delete(&gw, "/admin/tenants/gone").await;
    assert_eq!(s, 204);
    let after = other(&scrape(&gw).await);
    for (k, v) in &before {
        assert!(
            after.get(k).copied().unwrap_or(0.0) >= *v,
            "{k} went down: {after:?}"
        );
    }
    assert_eq!(after.get(records_key), Some(&17.0));
    gw.shutdown().await;
}
