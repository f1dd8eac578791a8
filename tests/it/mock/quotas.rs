//! Calendar quotas through HTTP, on a clock the test steps and sets on the calendar: the 429
//! `tenant_quota` with `Retry-After` to the window's turn, the quota as a `RateLimit-Policy`
//! item, a change through the admin API that keeps what the window used, and Kafka holding
//! exactly what was admitted. The broker is librdkafka's in-process mock cluster.

use crate::common::exposition::metric;
use crate::common::*;
use floodgate::config::{QuotaConfig, WindowName};
use serde_json::json;

/// 2027-03-31 23:59:00 UTC: a minute before the day turns.
pub(super) const BEFORE_MIDNIGHT: u64 = 1_806_537_540;

pub(super) fn records(n: usize, tag: &str) -> serde_json::Value {
    let r: Vec<_> = (0..n)
        .map(|i| json!({"value": format!("{tag}-{i}")}))
        .collect();
    json!({ "records": r })
}

/// The test tenant on `cluster` with a day quota of `records`.
pub(super) fn with_day_quota(cluster: &Cluster, records: u64) -> floodgate::config::Config {
    let mut cfg = config(&cluster.bootstrap_servers());
    cfg.tenants[0].quotas = vec![QuotaConfig {
        window: WindowName::Day,
        records: Some(records),
        bytes: None,
        mode: Default::default(),
    }];
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_day_is_refused_until_it_turns_and_a_change_keeps_its_use() {
    let cluster = mock_cluster(&["test.quota"]);
    let cfg = with_day_quota(&cluster, 5);
    let gw = Gateway::start_at_unix(cfg, BEFORE_MIDNIGHT).await;
    let url = gw.url("test.quota");

    let (s, h, a) = post_json(&url, KEY, &records(3, "kept")).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(
        h["ratelimit-policy"],
        "\"tenant-day-records\";q=5;w=86400;qu=\"records\""
    );
    assert_eq!(h["ratelimit"], "\"tenant-day-records\";r=2;t=60");
    let series =
        "floodgate_tenant_quota_used{tenant=\"acme\",window=\"day\",dimension=\"records\"}";
    assert_eq!(metric(&gw, series).await, Some(3.0));
    let series =
        "floodgate_tenant_quota_limit{tenant=\"acme\",window=\"day\",dimension=\"records\"}";
    assert_eq!(metric(&gw, series).await, Some(5.0));

    // Three more than the day has left: refused whole, told to come back at midnight.
    let (s, h, a) = post_json(&url, KEY, &records(3, "refused")).await;
    assert_eq!(s, 429, "{a}");
    assert_eq!(a["reason"], "tenant_quota");
    assert_eq!(a["retry_after_ms"], 60_000);
    assert_eq!(h["retry-after"], "60");
    assert!(
        a["detail"].as_str().unwrap_or("").contains("day quota"),
        "{a}"
    );
    assert_eq!(
        h["ratelimit"], "\"tenant-day-records\";r=2;t=60",
        "nothing charged"
    );

    // Lowered to 4 through the admin API: the 3 used stay used, one more fits.
    let (s, body) = admin_patch(
        &gw,
        "/admin/tenants/acme",
        json!({"quotas": [{"window": "day", "records": 4}]}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let (s, _, a) = post_json(&url, KEY, &records(2, "refused")).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_quota")),
        "{a}"
    );
    let (s, _, a) = post_json(&url, KEY, &records(1, "kept")).await;
    assert_eq!(s, 200, "{a}");
    // Spent: refused before its body is read as well.
    let (s, _, a) = post_json(&url, KEY, &records(1, "refused")).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_quota")),
        "{a}"
    );

    // Midnight: the whole day again.
    gw.advance_ms(60_000);
    let (s, h, a) = post_json(&url, KEY, &records(4, "kept")).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(h["ratelimit"], "\"tenant-day-records\";r=0;t=86400");

    gw.shutdown().await;
    let got = read_all(&cluster.bootstrap_servers(), "test.quota", 1, 8).await;
    assert_eq!(got.len(), 8, "Kafka holds what the quota admitted");
    assert!(got.iter().all(
        |c| !String::from_utf8_lossy(c.value.as_deref().unwrap_or_default()).contains("refused")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_quota_of_one_window_is_refused_by_the_admin_api() {
    let cluster = mock_cluster(&["test.quota"]);
    let gw = Gateway::start_at_unix(config(&cluster.bootstrap_servers()), BEFORE_MIDNIGHT).await;
    let (s, body) = admin_patch(
        &gw,
        "/admin/tenants/acme",
        json!({"quotas": [{"window": "day", "records": 4}, {"window": "day", "bytes": 9}]}),
    )
    .await;
    assert_eq!(s, 422, "{body}");
    assert!(
        body.to_string().contains("at most one per window"),
        "{body}"
    );
    gw.shutdown().await;
}

fn with_counts_kept(cluster: &Cluster, dir: &std::path::Path) -> floodgate::config::Config {
    let mut cfg = config(&cluster.bootstrap_servers());
    cfg.tenants[0].quotas = vec![QuotaConfig {
        window: WindowName::Day,
        records: Some(5),
        bytes: None,
        mode: Default::default(),
    }];
    cfg.quotas.state_file = Some(dir.join("quota-counts.json"));
    cfg.quotas.save_ms = 100;
    cfg
}

/// A restart does not hand out a fresh allowance: a clean one keeps every count, a killed one
/// what the last save held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gateway_keeps_what_its_windows_used() {
    let cluster = mock_cluster(&["test.quota"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = Gateway::start_at_unix(with_counts_kept(&cluster, dir.path()), BEFORE_MIDNIGHT).await;
    let (s, _, a) = post_json(&gw.url("test.quota"), KEY, &records(3, "kept")).await;
    assert_eq!(s, 200, "{a}");
    gw.shutdown().await;

    // Cleanly stopped: the 3 stay used, 2 are left.
    let gw = Gateway::start_at_unix(with_counts_kept(&cluster, dir.path()), BEFORE_MIDNIGHT).await;
    let url = gw.url("test.quota");
    let (s, _, a) = post_json(&url, KEY, &records(3, "refused")).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_quota")),
        "{a}"
    );
    let (s, _, a) = post_json(&url, KEY, &records(1, "kept")).await;
    assert_eq!(s, 200, "{a}");
    // Killed once a save holds the 4: still 4 used after it.
    let file = dir.path().join("quota-counts.json");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !std::fs::read_to_string(&file).is_ok_and(|t| t.contains("\"records\":4")) {
        assert!(
            std::time::Instant::now() < until,
            "the counts were not saved"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    gw.abort();
    let gw = Gateway::start_at_unix(with_counts_kept(&cluster, dir.path()), BEFORE_MIDNIGHT).await;
    let url = gw.url("test.quota");
    let (s, _, a) = post_json(&url, KEY, &records(2, "refused")).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_quota")),
        "{a}"
    );
    let (s, _, a) = post_json(&url, KEY, &records(1, "kept")).await;
    assert_eq!(s, 200, "{a}");
    gw.shutdown().await;
}

/// The global quotas' counts are kept with the tenants': a restart hands out no fresh global
/// allowance either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gateway_keeps_what_its_global_windows_used() {
    let cluster = mock_cluster(&["test.quota"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let global = |cluster: &Cluster| {
        let mut cfg = with_counts_kept(cluster, dir.path());
        cfg.global.quotas = std::mem::take(&mut cfg.tenants[0].quotas);
        cfg
    };
    let gw = Gateway::start_at_unix(global(&cluster), BEFORE_MIDNIGHT).await;
    let (s, _, a) = post_json(&gw.url("test.quota"), KEY, &records(3, "kept")).await;
    assert_eq!(s, 200, "{a}");
    gw.shutdown().await;

    let gw = Gateway::start_at_unix(global(&cluster), BEFORE_MIDNIGHT).await;
    let url = gw.url("test.quota");
    let (s, _, a) = post_json(&url, KEY, &records(3, "refused")).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("global_quota")),
        "{a}"
    );
    let (s, _, a) = post_json(&url, KEY, &records(2, "kept")).await;
    assert_eq!(s, 200, "{a}");
    gw.shutdown().await;
}
