//! The limit: the same records produced straight into Kafka with librdkafka and floodgate's own
//! producer settings (`floodgate::kafka::client_config`), no HTTP at all.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use floodgate::config::Config;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use crate::report::quantiles;

#[derive(Args, Debug)]
pub struct DirectArgs {
    #[arg(long, default_value = "127.0.0.1:19092")]
    pub bootstrap: String,
    #[arg(long, default_value = "events.demo")]
    pub topic: String,
    #[arg(long, default_value_t = 200_000)]
    pub records: usize,
    #[arg(long, default_value_t = 200)]
    pub record_size: usize,
    /// A floodgate config file whose [kafka] and [buffer] settings to use (defaults otherwise).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Pace sends at this many records/s (0: as fast as possible). A paced run measures
    /// latency below saturation, to compare with floodgate at the same rate.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Write `{"records_per_sec":..,"p50_ms":..,"p99_ms":..}` to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

struct Timing {
    latencies_us: Mutex<Vec<u64>>,
    failures: Mutex<u64>,
}

/// The producer's context: shares the timing with the thread that reports it.
struct Shared(Arc<Timing>);

impl ClientContext for Shared {}

impl ProducerContext for Shared {
    type DeliveryOpaque = Box<Instant>;
    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Instant>) {
        match result {
            Ok(_) => self
                .0
                .latencies_us
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(sent.elapsed().as_micros() as u64),
            Err(_) => {
                *self
                    .0
                    .failures
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) += 1
            }
        }
    }
}

pub async fn run(args: DirectArgs) -> Result<(), String> {
    tokio::task::spawn_blocking(move || produce(args))
        .await
        .map_err(|e| e.to_string())?
}

fn produce(args: DirectArgs) -> Result<(), String> {
    let mut config = match &args.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::from_toml_with_env("", Vec::new()).map_err(|e| e.to_string())?,
    };
    config.kafka.bootstrap_servers = args.bootstrap.clone();
    let timing = Arc::new(Timing {
        latencies_us: Mutex::new(Vec::with_capacity(args.records)),
        failures: Mutex::new(0),
    });
    let producer: ThreadedProducer<Shared> =
        floodgate::kafka::client_config(&config.kafka, &config.buffer)
            .create_with_context(Shared(timing.clone()))
            .map_err(|e| e.to_string())?;
    // The same value bytes the HTTP runs send: a JSON string of `record_size` bytes.
    let value = format!("\"{}\"", "x".repeat(args.record_size.saturating_sub(2)));
    // Warm up (connection, metadata, producer id) outside the measurement, as floodgate's
    // producer is warm by the time the HTTP runs are measured.
    producer
        .send(
            BaseRecord::<[u8], [u8], Box<Instant>>::with_opaque_to(
                &args.topic,
                Box::new(Instant::now()),
            )
            .payload(value.as_bytes()),
        )
        .map_err(|(e, _)| format!("warm-up send failed: {e}"))?;
    producer
        .flush(Duration::from_secs(30))
        .map_err(|e| format!("warm-up flush: {e}"))?;
    timing
        .latencies_us
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clear();
    let started = Instant::now();
    let pace = (args.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.rate));
    for i in 0..args.records {
        if let Some(pace) = pace {
            let due = started + pace * i as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let key = format!("k{}", i % 100);
        let mut record = BaseRecord::with_opaque_to(&args.topic, Box::new(Instant::now()))
            .key(key.as_bytes())
            .payload(value.as_bytes());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err((e, _)) => return Err(format!("send failed: {e}")),
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| format!("flush: {e}"))?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut latencies = std::mem::take(
        &mut *timing
            .latencies_us
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let failures = *timing
        .failures
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let q = quantiles(&mut latencies);
    let rate = args.records as f64 / elapsed;
    println!(
        "direct: {} records of {} B in {elapsed:.2} s = {rate:.0} records/s; ack latency p50 {:.2} ms p99 {:.2} ms; {failures} failed",
        args.records, args.record_size, q.p50, q.p99
    );
    if let Some(path) = &args.json {
        let json = serde_json::json!({"records_per_sec": rate, "p50_ms": q.p50, "p99_ms": q.p99, "failed": failures});
        std::fs::write(path, json.to_string()).map_err(|e| e.to_string())?;
    }
    Ok(())
}
