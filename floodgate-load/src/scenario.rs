//! Burst and drain: a tenant offers its base rate, then 10x for a few seconds, then its base
//! rate again, against an in-process gateway whose broker (librdkafka's mock cluster) answers
//! slowly. The timeline shows offered vs admitted requests, 429s, and buffer occupancy rising
//! with the burst and draining after it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use floodgate::config::{Config, TenantConfig};
use floodgate::identity::ApiKeyHash;
use rdkafka::mocking::MockCluster;

use crate::in_process::{scrape, value, InProcess};
use crate::load::{self, Timelines};
use crate::LoadArgs;

#[derive(Args, Debug)]
pub struct ScenarioArgs {
    /// Broker round-trip time added by the mock cluster.
    #[arg(long, default_value_t = 250)]
    pub rtt_ms: u64,
    #[arg(long, default_value_t = 20.0)]
    pub duration_secs: f64,
    /// Offered requests/s outside the burst.
    #[arg(long, default_value_t = 100.0)]
    pub base_rate: f64,
    #[arg(long, default_value = "10x5@5")]
    pub burst: String,
    #[arg(long, default_value_t = 10)]
    pub records_per_request: usize,
    #[arg(long, default_value_t = 200)]
    pub record_size: usize,
    /// Buffer bound in records (small, so a slow broker fills it).
    #[arg(long, default_value_t = 4000)]
    pub buffer_records: u64,
    /// The tenant's records/s budget (burst: twice that).
    #[arg(long, default_value_t = 3000)]
    pub tenant_records_per_sec: u64,
    #[arg(long, default_value = "scripts/bench/out/burst-drain.csv")]
    pub csv: PathBuf,
    #[arg(long, default_value = "docs/burst-drain.png")]
    pub png: PathBuf,
}

pub async fn run(args: ScenarioArgs) -> Result<(), String> {
    let cluster = MockCluster::new(1).map_err(|e| e.to_string())?;
    cluster
        .create_topic("events.burst", 3, 1)
        .map_err(|e| e.to_string())?;
    let key = "burst-demo-key";
    let mut config = Config::from_toml_with_env("", Vec::new()).map_err(|e| e.to_string())?;
    config.kafka.bootstrap_servers = cluster.bootstrap_servers();
    config.buffer.max_records = args.buffer_records;
    config.tenants = vec![TenantConfig {
        id: "burst".into(),
        api_key_sha256: vec![ApiKeyHash::of_key(key).to_hex()],
        topics: vec!["events.*".into()],
        records_per_sec: Some(args.tenant_records_per_sec),
        records_burst: Some(args.tenant_records_per_sec * 2),
        max_buffer_share: Some(1.0),
        ..TenantConfig::default()
    }];
    let gw = InProcess::start(config).await?;
    let (produce, admin) = (gw.produce, gw.admin);
    cluster
        .broker_round_trip_time(1, Duration::from_millis(args.rtt_ms))
        .map_err(|e| e.to_string())?;

    let samples: Arc<Mutex<Vec<(f64, f64)>>> = Arc::default();
    let start = Instant::now();
    let sampler = tokio::spawn(sample_buffer(admin, start, samples.clone()));
    let load_args = LoadArgs {
        api: "v1".into(),
        url: format!("http://{produce}"),
        topic: "events.burst".into(),
        tenants: vec![format!("{key}@{}", args.base_rate)],
        records_per_request: args.records_per_request,
        record_size: args.record_size,
        async_mode: true,
        duration_secs: args.duration_secs,
        concurrency: 512,
        burst: Some(args.burst.clone()),
        respect_retry_after: false,
        idempotency_keys: false,
        content_encoding: "identity".into(),
        log_values: false,
        json: None,
        csv: None,
    };
    let (summary, timelines) = load::run_with_timeline(load_args).await?;
    sampler.abort();
    gw.stop().await;
    println!("{}", summary.table());
    let samples = samples
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let rows = merge(&timelines, &samples);
    write_csv(&args.csv, &rows)?;
    let title = format!(
        "Burst and drain: {} req/s x{} records, burst {}, broker RTT {} ms",
        args.base_rate, args.records_per_request, args.burst, args.rtt_ms
    );
    crate::plot::burst_drain(&args.png, &rows, &title)?;
    println!("wrote {} and {}", args.csv.display(), args.png.display());
    Ok(())
}

/// One row per second: offered/s, admitted/s, refused/s, peak buffer occupancy (%).
use crate::plot::Row;

fn merge(timelines: &Timelines, samples: &[(f64, f64)]) -> Vec<Row> {
    let Some((_, seconds)) = timelines.first() else {
        return Vec::new();
    };
    seconds
        .iter()
        .enumerate()
        // The last second is cut short by the end of the run; it would read as a drop.
        .take(seconds.len().saturating_sub(1))
        .map(|(s, [o, a, r])| {
            let peak = samples
                .iter()
                .filter(|(t, _)| *t >= s as f64 && *t < s as f64 + 1.0)
                .map(|(_, fill)| *fill)
                .fold(0.0, f64::max);
            (s, *o, *a, *r, peak)
        })
        .collect()
}

fn write_csv(path: &std::path::Path, rows: &[Row]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut out =
        String::from("second,offered_per_sec,admitted_per_sec,refused_per_sec,buffer_fill_pct\n");
    for (s, o, a, r, fill) in rows {
        out.push_str(&format!("{s},{o},{a},{r},{fill:.1}\n"));
    }
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
}

/// Buffer occupancy (records, %) from the gateway's own /metrics, every 100 ms.
async fn sample_buffer(
    admin: std::net::SocketAddr,
    start: Instant,
    out: Arc<Mutex<Vec<(f64, f64)>>>,
) {
    loop {
        if let Some(text) = scrape(admin).await {
            let held = value(&text, "floodgate_buffer_held_records ");
            let cap = value(&text, "floodgate_buffer_capacity_records ").max(1.0);
            out.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((start.elapsed().as_secs_f64(), 100.0 * held / cap));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
