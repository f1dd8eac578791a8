//! Two pressure scenarios, each run twice in one invocation — without and with floodgate's
//! answer to it — on an in-process gateway and librdkafka's mock cluster, and drawn side by
//! side (PNG) with the per-second figures in a CSV:
//!
//! - `slow-broker` (adaptive broker protection): steady load; the broker's round-trip time
//!   rises from 1 ms to `--rtt-ms` mid-run and falls back later. Admitted rate, the adaptive
//!   limit, buffer occupancy and delivery p99 against time.
//! - `slow-consumer` (lag guards): producers offer more than a consumer group reads; the
//!   consumer speeds up later. Offered and admitted rate, consumer rate, lag and recovery
//!   time against time — measured by an observer of our own (watermarks and the group's
//!   committed offsets), the same way in both runs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use floodgate::config::{Config, LagGuardConfig, TenantConfig};
use floodgate::identity::ApiKeyHash;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::in_process::{scrape, value, InProcess};
use crate::load;
use crate::plot::{Line, Panel};
use crate::LoadArgs;

const KEY: &str = "pressure-demo-key";
const TOPIC: &str = "events.pressure";
const GROUP: &str = "pressure-readers";

#[derive(Args, Debug)]
pub struct SlowBrokerArgs {
    /// The broker's round-trip time while it is slow.
    #[arg(long, default_value_t = 300)]
    pub rtt_ms: u64,
    /// When the broker slows down and when it recovers, seconds from the start.
    #[arg(long, default_value_t = 8.0)]
    pub slow_at: f64,
    #[arg(long, default_value_t = 28.0)]
    pub fast_at: f64,
    #[arg(long, default_value_t = 40.0)]
    pub duration_secs: f64,
    /// Offered requests/s of 10 records.
    #[arg(long, default_value_t = 300.0)]
    pub rate: f64,
    /// The global budget, records/s (the adaptive limit's ceiling).
    #[arg(long, default_value_t = 4000)]
    pub global_records_per_sec: u64,
    #[arg(long, default_value_t = 20_000)]
    pub buffer_records: u64,
    /// librdkafka's `batch.num.messages`: with 5 requests in flight, at most 5 x this many
    /// records per round trip — so the slowed broker is throughput-bound (about 1,700
    /// records/s at 300 ms), as a broker enforcing a quota or writing to a slow disk is.
    /// 0: librdkafka's default (10,000: the slowed broker is then only latency-bound).
    #[arg(long, default_value_t = 100)]
    pub batch_records: u64,
    #[arg(long, default_value = "scripts/bench/out/slow-broker.csv")]
    pub csv: PathBuf,
    #[arg(long, default_value = "docs/slow-broker.png")]
    pub png: PathBuf,
}

#[derive(Args, Debug)]
pub struct SlowConsumerArgs {
    /// The consumer's rate at first, records/s.
    #[arg(long, default_value_t = 500)]
    pub consumer_rate: u64,
    /// Its rate after `--speed-up-at`.
    #[arg(long, default_value_t = 6000)]
    pub fast_consumer_rate: u64,
    #[arg(long, default_value_t = 30.0)]
    pub speed_up_at: f64,
    #[arg(long, default_value_t = 45.0)]
    pub duration_secs: f64,
    /// Offered requests/s of 10 records.
    #[arg(long, default_value_t = 300.0)]
    pub rate: f64,
    /// The guard's max_recovery_s.
    #[arg(long, default_value_t = 30.0)]
    pub max_recovery_s: f64,
    #[arg(long, default_value = "scripts/bench/out/slow-consumer.csv")]
    pub csv: PathBuf,
    #[arg(long, default_value = "docs/slow-consumer.png")]
    pub png: PathBuf,
}

fn tenant() -> TenantConfig {
    TenantConfig {
        id: "pressure".into(),
        api_key_sha256: vec![ApiKeyHash::of_key(KEY).to_hex()],
        topics: vec!["events.*".into()],
        max_buffer_share: Some(1.0),
        ..TenantConfig::default()
    }
}

fn load_args(produce: std::net::SocketAddr, rate: f64, duration_secs: f64) -> LoadArgs {
    LoadArgs {
        api: "v1".into(),
        url: format!("http://{produce}"),
        topic: TOPIC.into(),
        tenants: vec![format!("{KEY}@{rate}")],
        records_per_request: 10,
        record_size: 200,
        async_mode: true,
        duration_secs,
        concurrency: 512,
        burst: None,
        respect_retry_after: false,
        idempotency_keys: false,
        content_encoding: "identity".into(),
        log_values: false,
        json: None,
        csv: None,
    }
}

/// The delivery histogram's cumulative buckets (upper bound, count).
fn delivery_buckets(text: &str) -> Vec<(f64, f64)> {
    let name = "floodgate_kafka_delivery_duration_seconds_bucket{le=\"";
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (le, tail) = rest.split_once('"')?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, tail.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The p99 (upper bucket bound, seconds) of the observations between two snapshots.
fn p99(now: &[(f64, f64)], then: &[(f64, f64)]) -> f64 {
    let delta: Vec<(f64, f64)> = now
        .iter()
        .map(|(le, n)| {
            let before = then.iter().find(|(l, _)| l == le).map_or(0.0, |(_, n)| *n);
            (*le, n - before)
        })
        .collect();
    let total = delta.last().map_or(0.0, |(_, n)| *n);
    if total <= 0.0 {
        return 0.0;
    }
    delta
        .iter()
        .find(|(_, n)| *n >= 0.99 * total)
        .map_or(0.0, |(le, _)| if le.is_finite() { *le } else { 60.0 })
}

/// One second of the slow-broker run.
#[derive(Debug, Clone, Copy, Default)]
struct BrokerSecond {
    admitted: f64,
    refused: f64,
    limit: f64,
    buffer_pct: f64,
    p99_ms: f64,
    rtt_ms: f64,
}

pub async fn slow_broker(args: SlowBrokerArgs) -> Result<(), String> {
    let mut runs = Vec::new();
    for adaptive in [false, true] {
        eprintln!(
            "slow broker, adaptive {}",
            if adaptive { "on" } else { "off" }
        );
        runs.push(slow_broker_once(&args, adaptive).await?);
    }
    let mut csv = String::from(
        "adaptive,second,broker_rtt_ms,admitted_records_per_sec,refused_requests_per_sec,adaptive_limit_records_per_sec,buffer_fill_pct,delivery_p99_ms\n",
    );
    for (adaptive, rows) in [false, true].iter().zip(&runs) {
        for (s, r) in rows.iter().enumerate() {
            csv.push_str(&format!(
                "{},{s},{},{:.0},{:.0},{:.0},{:.1},{:.0}\n",
                if *adaptive { "on" } else { "off" },
                r.rtt_ms,
                r.admitted,
                r.refused,
                r.limit,
                r.buffer_pct,
                r.p99_ms
            ));
        }
    }
    write(&args.csv, &csv)?;
    let panels: Vec<Panel> = [false, true]
        .iter()
        .zip(&runs)
        .map(|(adaptive, rows)| {
            let at = |f: fn(&BrokerSecond) -> f64| -> Vec<(f64, f64)> {
                rows.iter()
                    .enumerate()
                    .map(|(s, r)| (s as f64 + 0.5, f(r)))
                    .collect()
            };
            let mut left = vec![Line::new("admitted records/s", 1, at(|r| r.admitted))];
            if *adaptive {
                left.push(Line::new("adaptive limit records/s", 2, at(|r| r.limit)));
            }
            Panel {
                title: format!(
                    "adaptive {}: broker RTT 1 -> {} -> 1 ms",
                    if *adaptive { "on" } else { "off" },
                    args.rtt_ms
                ),
                left_label: "records / s".into(),
                right_label: "% of buffer  /  p99 (100 ms)".into(),
                left,
                right: vec![
                    Line::new("buffer occupancy %", 3, at(|r| r.buffer_pct)),
                    Line::new("delivery p99 (100 ms units)", 4, at(|r| r.p99_ms / 100.0)),
                ],
            }
        })
        .collect();
    crate::plot::panels(
        &args.png,
        "Slow broker: without and with adaptive admission",
        &panels,
    )?;
    for (adaptive, rows) in [false, true].iter().zip(&runs) {
        summarize_broker(*adaptive, rows, &args);
    }
    println!("wrote {} and {}", args.csv.display(), args.png.display());
    Ok(())
}

fn summarize_broker(adaptive: bool, rows: &[BrokerSecond], args: &SlowBrokerArgs) {
    let slow = |r: &&BrokerSecond| r.rtt_ms > 1.0;
    let peak_buffer = rows
        .iter()
        .filter(slow)
        .map(|r| r.buffer_pct)
        .fold(0.0, f64::max);
    let peak_p99 = rows
        .iter()
        .filter(slow)
        .map(|r| r.p99_ms)
        .fold(0.0, f64::max);
    let slow_rows: Vec<_> = rows.iter().filter(slow).collect();
    let admitted =
        slow_rows.iter().map(|r| r.admitted).sum::<f64>() / slow_rows.len().max(1) as f64;
    let refused: f64 = rows.iter().map(|r| r.refused).sum();
    // Healthy service: the mean admitted rate from 2 s to the slow-down; back once a whole
    // second admits 90 % of it.
    let before: Vec<f64> = rows
        .iter()
        .take(args.slow_at as usize)
        .skip(2)
        .map(|r| r.admitted)
        .collect();
    let healthy = before.iter().sum::<f64>() / before.len().max(1) as f64;
    let back = rows
        .iter()
        .enumerate()
        .skip(args.fast_at.ceil() as usize)
        .find(|(_, r)| r.admitted >= 0.9 * healthy)
        .map(|(s, _)| s as f64 + 1.0 - args.fast_at);
    println!(
        "adaptive {:>3}: while slow ({} ms): admitted {admitted:.0} records/s on average, peak buffer {peak_buffer:.1} %, peak delivery p99 {peak_p99:.0} ms; refused {refused:.0} requests in all; after the broker recovered, 90 % of the healthy {healthy:.0} records/s back within {}",
        if adaptive { "on" } else { "off" },
        args.rtt_ms,
        back.map_or("the run".to_string(), |b| format!("{b:.0} s (whole seconds)"))
    );
}

async fn slow_broker_once(
    args: &SlowBrokerArgs,
    adaptive: bool,
) -> Result<Vec<BrokerSecond>, String> {
    let cluster = MockCluster::new(1).map_err(|e| e.to_string())?;
    cluster
        .create_topic(TOPIC, 3, 1)
        .map_err(|e| e.to_string())?;
    let mut config = Config::from_toml_with_env("", Vec::new()).map_err(|e| e.to_string())?;
    config.kafka.bootstrap_servers = cluster.bootstrap_servers();
    config.buffer.max_records = args.buffer_records;
    config.global.records_per_sec = Some(args.global_records_per_sec);
    config.global.records_burst = Some(args.global_records_per_sec);
    config.tenants = vec![tenant()];
    if args.batch_records > 0 {
        config.kafka.producer.0.insert(
            "batch.num.messages".into(),
            floodgate::config::PropertyValue::Integer(args.batch_records as i64),
        );
    }
    config.adaptive.enabled = adaptive;
    config.adaptive.interval_ms = 250;
    config.adaptive.target_delivery_ms = Some(200);
    config.adaptive.decrease_cooldown_ms = 500;
    // Growth at its defaults (slow start x2 per interval, then 5 % per second): the recovery
    // the scenario shows is the shipped one.
    let gw = InProcess::start(config).await?;

    let rtt = Arc::new(AtomicU64::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let samples: Arc<Mutex<Vec<(f64, String)>>> = Arc::default();
    let t0 = Instant::now();
    let sampler = {
        let (samples, stop, admin) = (samples.clone(), stop.clone(), gw.admin);
        tokio::spawn(async move {
            while !stop.load(Relaxed) {
                if let Some(text) = scrape(admin).await {
                    samples
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((t0.elapsed().as_secs_f64(), text));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let schedule = {
        let (rtt, slow_at, fast_at, ms) = (rtt.clone(), args.slow_at, args.fast_at, args.rtt_ms);
        let cluster = &cluster;
        async move {
            tokio::time::sleep(Duration::from_secs_f64(slow_at)).await;
            let _ = cluster.broker_round_trip_time(1, Duration::from_millis(ms));
            rtt.store(ms, Relaxed);
            tokio::time::sleep(Duration::from_secs_f64(fast_at - slow_at)).await;
            let _ = cluster.broker_round_trip_time(1, Duration::from_millis(1));
            rtt.store(1, Relaxed);
        }
    };
    let rtt_at = {
        let (slow_at, fast_at, ms) = (args.slow_at, args.fast_at, args.rtt_ms as f64);
        move |s: f64| if s >= slow_at && s < fast_at { ms } else { 1.0 }
    };
    let (loaded, ()) = tokio::join!(
        load::run_with_timeline(load_args(gw.produce, args.rate, args.duration_secs)),
        schedule
    );
    let (_, timelines) = loaded?;
    stop.store(true, Relaxed);
    let _ = sampler.await;
    gw.stop().await;

    let samples = samples
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let seconds = timelines
        .first()
        .map(|(_, s)| s.clone())
        .unwrap_or_default();
    let mut rows = Vec::new();
    let mut previous: Vec<(f64, f64)> = Vec::new();
    for (s, [_, admitted, refused]) in seconds
        .iter()
        .enumerate()
        .take(seconds.len().saturating_sub(1))
    {
        let in_second: Vec<&(f64, String)> = samples
            .iter()
            .filter(|(t, _)| *t >= s as f64 && *t < s as f64 + 1.0)
            .collect();
        let peak =
            |f: &dyn Fn(&str) -> f64| in_second.iter().map(|(_, t)| f(t)).fold(0.0, f64::max);
        let buffer_pct = peak(&|t| {
            100.0 * value(t, "floodgate_buffer_held_records ")
                / value(t, "floodgate_buffer_capacity_records ").max(1.0)
        });
        let limit = in_second.last().map_or(0.0, |(_, t)| {
            value(t, "floodgate_adaptive_limit{bucket=\"records\"} ")
        });
        let buckets = in_second
            .last()
            .map(|(_, t)| delivery_buckets(t))
            .unwrap_or_default();
        let p99_ms = if buckets.is_empty() {
            0.0
        } else {
            1000.0 * p99(&buckets, &previous)
        };
        if !buckets.is_empty() {
            previous = buckets;
        }
        rows.push(BrokerSecond {
            admitted: (*admitted * 10) as f64,
            refused: *refused as f64,
            limit: if adaptive { limit } else { 0.0 },
            buffer_pct,
            p99_ms,
            rtt_ms: rtt_at(s as f64 + 0.5),
        });
    }
    Ok(rows)
}

/// What the observer saw: (seconds since start, log end, committed, guard capping).
type Observation = (f64, i64, i64, bool);

/// One second of the slow-consumer run.
#[derive(Debug, Clone, Copy, Default)]
struct ConsumerSecond {
    offered: f64,
    admitted: f64,
    consumer: f64,
    lag: f64,
    /// Seconds; `None`: not shrinking.
    recovery: Option<f64>,
    capping: bool,
}

pub async fn slow_consumer(args: SlowConsumerArgs) -> Result<(), String> {
    let mut runs = Vec::new();
    for guarded in [false, true] {
        eprintln!(
            "slow consumer, lag guard {}",
            if guarded { "on" } else { "off" }
        );
        runs.push(slow_consumer_once(&args, guarded).await?);
    }
    let mut csv = String::from(
        "guard,second,offered_records_per_sec,admitted_records_per_sec,consumer_records_per_sec,lag_records,recovery_s,capping\n",
    );
    for (guarded, rows) in [false, true].iter().zip(&runs) {
        for (s, r) in rows.iter().enumerate() {
            csv.push_str(&format!(
                "{},{s},{:.0},{:.0},{:.0},{:.0},{},{}\n",
                if *guarded { "on" } else { "off" },
                r.offered,
                r.admitted,
                r.consumer,
                r.lag,
                r.recovery.map_or("inf".to_string(), |v| format!("{v:.1}")),
                u8::from(r.capping)
            ));
        }
    }
    write(&args.csv, &csv)?;
    let panels: Vec<Panel> = [false, true]
        .iter()
        .zip(&runs)
        .map(|(guarded, rows)| {
            let at = |f: fn(&ConsumerSecond) -> f64| -> Vec<(f64, f64)> {
                rows.iter()
                    .enumerate()
                    .map(|(s, r)| (s as f64 + 0.5, f(r)))
                    .collect()
            };
            Panel {
                title: format!(
                    "lag guard {}: consumer {} -> {} records/s at {} s",
                    if *guarded { "on" } else { "off" },
                    args.consumer_rate,
                    args.fast_consumer_rate,
                    args.speed_up_at
                ),
                left_label: "records / s".into(),
                right_label: "lag (100 records)  /  recovery s".into(),
                left: vec![
                    Line::new("offered records/s", 0, at(|r| r.offered)),
                    Line::new("admitted records/s", 1, at(|r| r.admitted)),
                    Line::new("consumer records/s", 2, at(|r| r.consumer)),
                ],
                right: vec![
                    Line::new("lag (100 records)", 3, at(|r| r.lag / 100.0)),
                    // Not shrinking is drawn at the top of the axis.
                    Line::new(
                        "recovery time s",
                        4,
                        at(|r| r.recovery.unwrap_or(f64::INFINITY)),
                    ),
                ],
            }
        })
        .collect();
    crate::plot::panels(
        &args.png,
        "Slow consumer: without and with a lag guard",
        &panels,
    )?;
    for (guarded, rows) in [false, true].iter().zip(&runs) {
        let slow: Vec<_> = rows
            .iter()
            .enumerate()
            .filter(|(s, _)| (*s as f64) >= 10.0 && (*s as f64) < args.speed_up_at)
            .map(|(_, r)| r)
            .collect();
        let admitted = slow.iter().map(|r| r.admitted).sum::<f64>() / slow.len().max(1) as f64;
        let end_lag = rows.iter().map(|r| r.lag).fold(0.0, f64::max);
        let at_speed_up = rows.get(args.speed_up_at as usize).map_or(0.0, |r| r.lag);
        // Activations: seconds that cap after one that did not.
        let activations = rows
            .windows(2)
            .filter(|w| w[1].capping && !w[0].capping)
            .count()
            + usize::from(rows.first().is_some_and(|r| r.capping));
        let full = rows
            .iter()
            .enumerate()
            .skip(args.speed_up_at.ceil() as usize)
            .find(|(_, r)| r.admitted >= 0.99 * r.offered && r.offered > 0.0)
            .map(|(s, _)| s as f64 + 1.0 - args.speed_up_at);
        println!(
            "lag guard {:>3}: from 10 s to {} s admitted {admitted:.0} records/s on average; lag at {} s {at_speed_up:.0} (peak {end_lag:.0}); {activations} cap activations; all offered admitted {} after the speed-up",
            if *guarded { "on" } else { "off" },
            args.speed_up_at,
            args.speed_up_at,
            full.map_or("never".to_string(), |f| format!("{f:.0} s"))
        );
    }
    println!("wrote {} and {}", args.csv.display(), args.png.display());
    Ok(())
}

async fn slow_consumer_once(
    args: &SlowConsumerArgs,
    guarded: bool,
) -> Result<Vec<ConsumerSecond>, String> {
    let cluster = MockCluster::new(1).map_err(|e| e.to_string())?;
    cluster
        .create_topic(TOPIC, 1, 1)
        .map_err(|e| e.to_string())?;
    let bootstrap = cluster.bootstrap_servers();
    let mut config = Config::from_toml_with_env("", Vec::new()).map_err(|e| e.to_string())?;
    config.kafka.bootstrap_servers = bootstrap.clone();
    config.tenants = vec![tenant()];
    if guarded {
        config.lag_guards = vec![LagGuardConfig {
            name: "pressure".into(),
            topics: vec![TOPIC.into()],
            group: GROUP.into(),
            max_recovery_s: args.max_recovery_s,
            max_lag_records: None,
            headroom: 1.2,
            interval_ms: 500,
            floor_records_per_sec: 0,
            release_fraction: 0.5,
            caught_up_s: 2.0,
            hold_s: 30.0,
            rate_window_s: 5.0,
            stopped_after_s: 15.0,
        }];
    }
    let gw = InProcess::start(config).await?;
    let consumer_rate = Arc::new(AtomicU64::new(args.consumer_rate));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = consume(bootstrap.clone(), consumer_rate.clone(), stop.clone());
    let observed: Arc<Mutex<Vec<Observation>>> = Arc::default();
    let t0 = Instant::now();
    let observer = {
        let (observed, stop, admin) = (observed.clone(), stop.clone(), gw.admin);
        let bootstrap = bootstrap.clone();
        tokio::spawn(async move {
            let client: Option<BaseConsumer> = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("group.id", GROUP)
                .create()
                .ok();
            let Some(client) = client else { return };
            let client = Arc::new(client);
            while !stop.load(Relaxed) {
                let c = client.clone();
                let read = tokio::task::spawn_blocking(move || {
                    let (_, high) = c.fetch_watermarks(TOPIC, 0, Duration::from_secs(1)).ok()?;
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition(TOPIC, 0);
                    let committed = c.committed_offsets(tpl, Duration::from_secs(1)).ok()?;
                    let offset = match committed.elements().first().map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o,
                        _ => 0,
                    };
                    Some((high, offset))
                })
                .await
                .ok()
                .flatten();
                let capping = scrape(admin)
                    .await
                    .is_some_and(|t| value(&t, "floodgate_lag_guard_capping{guard=\"pressure\",group=\"pressure-readers\"} ") == 1.0);
                if let Some((high, committed)) = read {
                    observed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((t0.elapsed().as_secs_f64(), high, committed, capping));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let speed_up = {
        let (rate, at, fast) = (
            consumer_rate.clone(),
            args.speed_up_at,
            args.fast_consumer_rate,
        );
        async move {
            tokio::time::sleep(Duration::from_secs_f64(at)).await;
            rate.store(fast, Relaxed);
        }
    };
    let (loaded, ()) = tokio::join!(
        load::run_with_timeline(load_args(gw.produce, args.rate, args.duration_secs)),
        speed_up
    );
    let (_, timelines) = loaded?;
    stop.store(true, Relaxed);
    let _ = observer.await;
    let _ = reader.join();
    gw.stop().await;

    let observed = observed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let seconds = timelines
        .first()
        .map(|(_, s)| s.clone())
        .unwrap_or_default();
    // Rates over 2 s of observations, as the guard takes them over its window.
    let at = |t: f64| observed.iter().rev().find(|o| o.0 <= t).copied();
    let mut rows = Vec::new();
    for (s, [offered, admitted, _]) in seconds
        .iter()
        .enumerate()
        .take(seconds.len().saturating_sub(1))
    {
        let t = s as f64 + 1.0;
        let (Some(now), then) = (at(t), at(t - 2.0)) else {
            rows.push(ConsumerSecond::default());
            continue;
        };
        let lag = (now.1 - now.2).max(0) as f64;
        let (c, p) = match then {
            Some(then) if now.0 > then.0 => {
                let dt = now.0 - then.0;
                ((now.2 - then.2) as f64 / dt, (now.1 - then.1) as f64 / dt)
            }
            _ => (0.0, 0.0),
        };
        let recovery = if lag <= c * 2.0 {
            Some(0.0)
        } else if c - p > 1e-3 {
            Some(lag / (c - p))
        } else {
            None
        };
        rows.push(ConsumerSecond {
            offered: (*offered * 10) as f64,
            admitted: (*admitted * 10) as f64,
            consumer: c,
            lag,
            recovery,
            capping: now.3,
        });
    }
    Ok(rows)
}

/// A consumer of [`GROUP`] that reads [`TOPIC`] at `rate` records/s and commits every 100 ms,
/// without joining the group (assigned partition, explicit commits).
fn consume(
    bootstrap: String,
    rate: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let consumer: BaseConsumer = match ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", GROUP)
            .set("enable.auto.commit", "false")
            .create()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("consumer: {e}");
                return;
            }
        };
        let mut tpl = TopicPartitionList::new();
        if tpl
            .add_partition_offset(TOPIC, 0, Offset::Beginning)
            .is_err()
            || consumer.assign(&tpl).is_err()
        {
            return;
        }
        drop(tpl);
        let (mut next, mut allowance) = (None::<i64>, 0.0f64);
        let (mut last, mut committed_at) = (Instant::now(), Instant::now());
        while !stop.load(Relaxed) {
            let now = Instant::now();
            let per_sec = rate.load(Relaxed) as f64;
            allowance = (allowance + per_sec * (now - last).as_secs_f64()).min(per_sec / 10.0);
            last = now;
            while allowance >= 1.0 {
                match consumer.poll(Duration::from_millis(5)) {
                    Some(Ok(m)) => {
                        use rdkafka::Message;
                        next = Some(m.offset() + 1);
                        allowance -= 1.0;
                    }
                    _ => break,
                }
            }
            if committed_at.elapsed() >= Duration::from_millis(100) {
                if let Some(o) = next {
                    let mut c = TopicPartitionList::new();
                    if c.add_partition_offset(TOPIC, 0, Offset::Offset(o)).is_ok() {
                        let _ = consumer.commit(&c, CommitMode::Sync);
                    }
                }
                committed_at = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    })
}

fn write(path: &std::path::Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
