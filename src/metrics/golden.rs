//! TEMPORARY (#27): renders the exposition of a rich fixed state to files, so the split of
//! `metrics.rs` can be diffed against what it produced before. Removed after the split.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::access::AdminTokens;
use crate::app::{AppState, BuildOptions};
use crate::budget::ManualClock;
use crate::config::{Config, LagGuardConfig, PerTenant, TenantConfig};
use crate::identity::TenantId;
use crate::lag::guard::PartitionOffsets;
use crate::lag_agent::{OffsetReading, OffsetSource};
use crate::refusal::Reason;
use crate::tenant::Api;

#[derive(Debug)]
struct Offsets(std::sync::Mutex<u64>);

impl OffsetSource for Offsets {
    fn read(
        &self,
        _: &LagGuardConfig,
        _: &crate::identity::TopicPatterns,
    ) -> Result<OffsetReading, String> {
        let mut n = self.0.lock().expect("lock");
        *n += 1;
        Ok(OffsetReading {
            partitions: vec![
                PartitionOffsets::new("orders", 0, Some(1000 * *n), Some(600 * *n)),
                PartitionOffsets::new("orders", 1, Some(500 * *n), Some(500 * *n)),
                PartitionOffsets::new("payments", 0, Some(70 * *n), Some(10)),
            ],
        })
    }
}

fn guard(name: &str, group: &str) -> LagGuardConfig {
    LagGuardConfig {
        name: name.into(),
        topics: vec!["orders".into(), "payments".into()],
        group: group.into(),
        max_recovery_s: 30.0,
        max_lag_records: None,
        headroom: 1.2,
        interval_ms: 1000,
        floor_records_per_sec: 0,
        release_fraction: 0.5,
        caught_up_s: 1.0,
        hold_s: 5.0,
        rate_window_s: 1.0,
        stopped_after_s: 1.0,
    }
}

fn config(clustered: bool) -> Config {
    let mut config = Config::from_toml_with_env("", Vec::new()).expect("defaults");
    config.kafka.bootstrap_servers = "127.0.0.1:1".into();
    config.tenants =
        ["acme", "beta", "gamma", "delta"]
            .iter()
            .map(|id| TenantConfig {
                id: (*id).into(),
                api_key_sha256: vec![
                    crate::identity::ApiKeyHash::of_key(&format!("{id}-key")).to_hex()
                ],
                topics: vec!["test.*".into()],
                records_per_sec: Some(100),
                records_burst: Some(200),
                bytes_per_sec: if *id == "beta" { None } else { Some(10_000) },
                bytes_burst: if *id == "beta" { None } else { Some(20_000) },
                ..TenantConfig::default()
            })
            .collect();
    config.global.records_per_sec = Some(1000);
    config.global.records_burst = Some(3000);
    config.global.bytes_per_sec = Some(100_000);
    config.global.bytes_burst = Some(300_000);
    config.adaptive.enabled = true;
    config.metrics.per_tenant = PerTenant::Top;
    config.metrics.top_tenants = 2;
    if clustered {
        config.cluster.redis_url = Some("redis://127.0.0.1:1".into());
    }
    config.auth.jwt = vec![toml::from_str(
        "issuer = \"https://idp.example\"\naudiences = [\"floodgate\"]\njwks_url = \"http://127.0.0.1:1/jwks.json\"\n",
    )
    .expect("issuer")];
    config
}

async fn render(clustered: bool) -> (String, String) {
    let config = config(clustered);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(5_000);
    let tokens = AdminTokens::parse("ops:golden-test-token-long").expect("tokens");
    let app =
        AppState::build(&config, clock.clone(), tokens, BuildOptions::default()).expect("state");
    let ingest = &app.ingest;
    let tenants = ingest.tenants.clone();
    // Traffic: counters the tenant families read, and a second the status history sampled.
    for (i, id) in ["acme", "beta", "gamma", "delta"].iter().enumerate() {
        let t = tenants.load().get(id).expect("tenant").clone();
        let s = t.stats();
        let n = (i as u64 + 1) * 3;
        s.admitted(n * 10, n * 1000);
        for _ in 0..n {
            s.admitted_requests.fetch_add(1, Relaxed);
        }
        s.failed(i as u64);
        s.rejected(Reason::TenantRecords);
        s.rejected(Reason::ALL[i % Reason::ALL.len()]);
        s.refused_records(2);
        s.count_api(Api::V1, true);
        s.count_api(Api::V2, i % 2 == 0);
        s.count_api(Api::V3, false);
        t.usage.bytes.fetch_add(100 * (i as u64 + 1), Relaxed);
        t.usage.records.fetch_add(i as u64 + 1, Relaxed);
    }
    app.status.sample();
    clock.advance_ms(1000);
    app.status.sample();
    // Spend some tokens so the buckets are not all full.
    let acme = tenants.load().get("acme").expect("tenant").clone();
    let _ = ingest
        .admission
        .admit_to(&acme, None, crate::record::Charge::new(5, 500));
    // Failed authentications on both listeners.
    ingest.failures.failed.fetch_add(3, Relaxed);
    ingest.failures.refused.fetch_add(1, Relaxed);
    app.admin.failures.failed.fetch_add(2, Relaxed);
    // Bodies cut short.
    ingest
        .body_budget
        .count_cut_short(crate::body_budget::Cut::BodyTooLarge);
    ingest
        .body_budget
        .count_cut_short(crate::body_budget::Cut::Malformed);
    let _hold = ingest
        .body_budget
        .hold(Arc::new(std::sync::atomic::AtomicU64::new(0)), 1.0);
    // Kafka: latencies, errors, librdkafka's statistics.
    let kafka = app.metrics.kafka.clone();
    let kafka_counts = kafka.delivery_counts.clone();
    kafka.delivery_seconds.observe(0.004);
    kafka.delivery_seconds.observe(0.2);
    kafka
        .delivery_errors
        .get_or_create(&crate::kafka::ErrorLabels {
            code: "MsgTimedOut".into(),
        })
        .inc_by(4);
    *kafka.stats.lock().expect("lock") = crate::kafka::KafkaStats {
        queue_messages: 12,
        queue_bytes: 3456,
        brokers: vec![
            crate::kafka::BrokerStats {
                name: "b1:9092/1".into(),
                inflight_requests: 2,
                rtt_us: 1500,
                throttle_ms: 0,
            },
            crate::kafka::BrokerStats {
                name: "b2:9092/2".into(),
                inflight_requests: 0,
                rtt_us: 800,
                throttle_ms: 25,
            },
        ],
    };
    app.metrics
        .http_seconds
        .get_or_create(&super::HttpLabels {
            route: "produce",
            status: 200,
        })
        .observe(0.002);
    // Cluster.
    if let Some(c) = &ingest.cluster {
        let s = &c.stats;
        s.count_lease(
            crate::cluster::Scope::ALL[0],
            crate::cluster::LeaseOutcome::ALL[0],
        );
        s.count_lease(
            crate::cluster::Scope::ALL[0],
            crate::cluster::LeaseOutcome::ALL[1],
        );
        s.count_error("timeout");
        s.granted_records.fetch_add(40, Relaxed);
        s.granted_bytes.fetch_add(4000, Relaxed);
        s.returned_records.fetch_add(3, Relaxed);
        s.members.store(3, Relaxed);
        s.degradations.fetch_add(1, Relaxed);
        s.lease_seconds.observe(0.001);
    }
    // Adaptive.
    let a = &app.adaptive.stats;
    a.limit_records.store(800, Relaxed);
    a.limit_bytes.store(80_000, Relaxed);
    a.increases.fetch_add(2, Relaxed);
    a.recoveries.fetch_add(1, Relaxed);
    // Idempotency.
    let idem = ingest.idempotency.clone();
    for o in crate::idempotency::KeyOutcome::ALL {
        idem.stats.count(o);
    }
    idem.stats.store_error(crate::idempotency::StoreOp::ALL[0]);
    // Schemas.
    ingest.schemas.count_violation(
        "acme",
        &crate::identity::Topic::parse("test.a").expect("topic"),
    );
    ingest.schemas.count_violation(
        "beta",
        &crate::identity::Topic::parse("test.b").expect("topic"),
    );
    // Auth: one good key, one bad.
    let caller = crate::credential::Caller {
        ip: Some("10.0.0.1".parse().expect("ip")),
        cert: None,
    };
    for key in ["acme-key", "wrong-key"] {
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            "authorization",
            format!("Bearer {key}").parse().expect("header"),
        );
        let _ = ingest.auth.identify(&tenants, &caller, &h).await;
    }
    // Lag guards with readings, on their own agent (the app's reads Kafka).
    let lag = Arc::new(crate::lag_agent::LagAgent::new(
        vec![guard("orders", "G"), guard("pay", "P")],
        Arc::new(crate::lag::LagPlanCell::default()),
        tenants.clone(),
        crate::lag_agent::Members::one(),
        Arc::new(Offsets(std::sync::Mutex::new(0))),
        clock.clone(),
    ));
    for _ in 0..4 {
        lag.tick();
        clock.advance_ms(1000);
    }
    let metrics = super::Metrics::new(
        tenants.clone(),
        ingest.admission.clone(),
        kafka,
        [ingest.failures.clone(), app.admin.failures.clone()],
        ingest.body_budget.clone(),
        ingest.cluster.clone(),
        super::Agents {
            adaptive: app.adaptive.clone(),
            lag,
            registry: app.registry.clone(),
            idempotency: idem,
            tenant_series: super::tenants::TenantSeries::new(
                tenants.clone(),
                ingest.admission.clone(),
                app.status.clone(),
                &config.metrics,
            ),
        },
    )
    .with_collector(Box::new(super::auth::AuthCollector(ingest.auth.clone())))
    .with_collector(Box::new(super::schemas::SchemaCollector(
        ingest.schemas.clone(),
    )));
    // Two scrapes: the second sees the per-tenant baselines the first left.
    let first = metrics.render();
    let _ = TenantId::new("acme");
    acme.stats().admitted(1, 1);
    let second = metrics.render_classic();
    // The status page's JSON, over a few more sampled seconds.
    let mut status = String::new();
    for step in 0..3u64 {
        for (i, id) in ["acme", "beta", "gamma", "delta"].iter().enumerate() {
            let t = tenants.load().get(id).expect("tenant").clone();
            t.stats().admitted(step + i as u64, 10);
            t.stats()
                .rejected(Reason::ALL[(i + step as usize) % Reason::ALL.len()]);
        }
        kafka_counts.observe(0.001 * (step + 1) as f64);
        clock.advance_ms(1000);
        app.status.sample();
    }
    for query in [
        crate::status::Query::default(),
        crate::status::Query {
            limit: 2,
            sort: crate::status::Sort::Admitted,
            prefix: String::new(),
        },
        crate::status::Query {
            limit: 3,
            sort: crate::status::Sort::Id,
            prefix: "d".into(),
        },
    ] {
        let snap = app.status.snapshot(&query);
        status.push_str(&serde_json::to_string_pretty(&snap).expect("json"));
        status.push('\n');
    }
    (first, format!("{second}\n=== status\n{status}"))
}

#[tokio::test]
async fn golden_exposition() {
    let Ok(dir) = std::env::var("FLOODGATE_GOLDEN_DIR") else {
        return;
    };
    for clustered in [false, true] {
        let (om, classic) = render(clustered).await;
        let name = if clustered { "clustered" } else { "single" };
        std::fs::write(format!("{dir}/{name}.om.txt"), om).expect("write");
        std::fs::write(format!("{dir}/{name}.classic.txt"), classic).expect("write");
    }
}
