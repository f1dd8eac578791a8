//! Global calendar quotas (`[global] quotas`) shared by replicas through Redis: two tenants on
//! three replicas admit exactly the global day quota between them while Redis answers, each
//! refusal `global_quota` until midnight; and an operator sets one live through
//! `/admin/global`, a raise giving only the difference.
//!
//! Replicas run in this process on one stepped clock whose wall clock reads noon tomorrow
//! (UTC): no window turns during a test.

use std::sync::Arc;
use std::time::Duration;

use super::cluster::{all_read, hammer, Replicas, TOPIC};
use crate::common::exposition::{sample, scrape};
use crate::common::*;
use floodgate::budget::{Clock, ManualClock};
use floodgate::config::{Config, QuotaConfig, WindowName};

const BETA_KEY: &str = "test-key-beta";

fn noon_tomorrow() -> Arc<ManualClock> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    Arc::new(ManualClock::at_unix_s((now / 86_400 + 1) * 86_400 + 43_200))
}

fn day(records: u64) -> Vec<QuotaConfig> {
    vec![QuotaConfig {
        window: WindowName::Day,
        records: Some(records),
        bytes: None,
        mode: Default::default(),
    }]
}

/// Two tenants, acme and beta, neither with a quota or a budget of its own in the way; the
/// global quotas `global`.
fn two_tenants(global: Vec<QuotaConfig>) -> impl Fn(&mut Config) {
    move |cfg: &mut Config| {
        limit_records(cfg, 1_000_000, 1_000_000);
        cfg.tenants.push(tenant("beta", BETA_KEY, &["test.*"]));
        cfg.global.quotas = global.clone();
    }
}

/// Every replica's URL with each tenant's key.
fn both_tenants(gws: &[&Gateway]) -> Vec<(String, &'static str)> {
    gws.iter()
        .flat_map(|g| [(g.url(TOPIC), KEY), (g.url(TOPIC), BETA_KEY)])
        .collect()
}

async fn started(r: &Replicas, n: usize, edit: impl Fn(&mut Config)) -> Vec<Gateway> {
    let gws = r.start(n, &redis_url(), edit).await;
    let refs: Vec<&Gateway> = gws.iter().collect();
    all_read(
        &refs,
        "floodgate_cluster_members",
        n as f64,
        Duration::from_secs(5),
    )
    .await;
    gws
}

/// One record, then the clock past the three heartbeats a new count is unsure for
/// (`quota.lua`): the records admitted, 1.
async fn first(r: &Replicas, gw: &Gateway) -> u64 {
    let one = serde_json::json!({"records": [{"value": "x"}]});
    let (s, h, a) = post_json(&gw.url(TOPIC), KEY, &one).await;
    assert_eq!(s, 200, "{a}");
    // Each tenant is told the global quota too (the global buckets are not hidden).
    let policy = h["ratelimit-policy"].to_str().expect("policy");
    assert!(policy.contains("\"global-day-records\";q="), "{policy}");
    assert!(policy.contains(";w=86400;"), "{policy}");
    r.clock.advance_ms(3 * 500 + 1);
    1
}

/// The records admitted until every replica refuses both tenants, each refusal checked:
/// `global_quota` for the day, told to come back at midnight.
async fn exhaust(r: &Replicas, gws: &[&Gateway]) -> u64 {
    let admitted = hammer(&reqwest::Client::new(), &both_tenants(gws))
        .await
        .iter()
        .sum();
    let midnight = (86_400 - r.clock.unix_s() % 86_400).to_string();
    let one = serde_json::json!({"records": [{"value": "x"}]});
    for (url, key) in both_tenants(gws) {
        let (s, h, a) = post_json(&url, key, &one).await;
        assert_eq!(
            (s, a["reason"].as_str()),
            (429, Some("global_quota")),
            "{a}"
        );
        assert_eq!(h["retry-after"].to_str().unwrap_or_default(), midnight);
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_on_three_replicas_admit_exactly_a_global_day_quota() {
    let r = Replicas::on("global_quota_three", noon_tomorrow());
    let gws = started(&r, 3, two_tenants(day(300))).await;
    let refs: Vec<&Gateway> = gws.iter().collect();
    let admitted = first(&r, refs[0]).await + exhaust(&r, &refs).await;
    assert_eq!(
        admitted, 300,
        "the global quota, exactly, across tenants and replicas"
    );
    // The replica that heard the count spent shows it.
    let m = scrape(refs[0]).await;
    let labels = "{window=\"day\",dimension=\"records\"}";
    assert_eq!(
        sample(&m, &format!("floodgate_global_quota_limit{labels}")),
        300.0
    );
    assert_eq!(
        sample(&m, &format!("floodgate_global_quota_used{labels}")),
        300.0
    );
    for gw in gws {
        gw.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_sets_a_global_quota_every_replica_counts_and_a_raise_keeps_its_use() {
    let r = Replicas::on("global_quota_admin", noon_tomorrow());
    let gws = started(&r, 2, two_tenants(Vec::new())).await;
    let refs: Vec<&Gateway> = gws.iter().collect();
    // The registry is each replica's own here (no shared registry): both are told.
    let set = |records: u64| serde_json::json!({"quotas": [{"window": "day", "records": records}]});
    for gw in &refs {
        let (s, body) = admin_put(gw, "/admin/global", set(40)).await;
        assert_eq!(s, 200, "{body}");
    }
    let admitted = first(&r, refs[0]).await + exhaust(&r, &refs).await;
    assert_eq!(admitted, 40);
    let (s, body) = admin_get(refs[1], "/admin/global").await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["quotas"][0]["records"], 40, "{body}");
    assert_eq!(body["live"]["quotas"][0]["limit"], 40, "{body}");
    // Raised to 60 on both: 20 more, not 60 (the day's use is kept in Redis).
    for gw in &refs {
        let (s, body) = admin_put(gw, "/admin/global", set(60)).await;
        assert_eq!(s, 200, "{body}");
    }
    assert_eq!(exhaust(&r, &refs).await, 20);
    for gw in gws {
        gw.shutdown().await;
    }
}
