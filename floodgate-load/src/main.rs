//! `floodgate-load`: rehearse a burst against a floodgate, and the helpers of scripts/bench/run.sh.
//!
//! - `run`: HTTP produce load per tenant (offered rate or open loop, burst profile, sync or
//!   async), a progress line per second, a one-screen summary (`--json` for scripts).
//! - `direct`: the same records straight into Kafka with floodgate's own producer settings
//!   (the limit floodgate is measured against).
//! - `null-server`: a do-nothing axum handler on the produce route (the HTTP limit).
//! - `burst-drain`: an in-process gateway on a slowed mock broker under a 10x burst; writes a
//!   CSV timeline and a PNG plot.
//! - `slow-broker` and `slow-consumer`: a broker that slows down mid-run and a consumer group
//!   that falls behind, each run without and with floodgate's answer (adaptive admission, a
//!   lag guard), plotted side by side.

mod coding;
mod direct;
mod in_process;
mod load;
mod null_server;
mod plot;
mod pressure;
mod report;
mod scenario;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "floodgate-load",
    about = "Load generator and benchmark helpers for floodgate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// HTTP load against a running floodgate.
    Run(LoadArgs),
    /// Produce straight into Kafka with floodgate's producer settings.
    Direct(direct::DirectArgs),
    /// Serve a do-nothing handler on the produce route.
    NullServer {
        #[arg(long, default_value = "127.0.0.1:8090")]
        listen: std::net::SocketAddr,
    },
    /// The burst-and-drain scenario on an in-process gateway and slowed mock broker.
    BurstDrain(scenario::ScenarioArgs),
    /// The broker slows down mid-run: without and with adaptive admission.
    SlowBroker(pressure::SlowBrokerArgs),
    /// A consumer group falls behind: without and with a lag guard.
    SlowConsumer(pressure::SlowConsumerArgs),
}

/// What `run` offers, per tenant.
#[derive(Args, Clone, Debug)]
pub struct LoadArgs {
    /// Base URL of the produce listener.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    #[arg(long, default_value = "events.demo")]
    pub topic: String,
    /// A tenant's API key and offered requests/s: `KEY@RATE`, or `KEY` for open loop
    /// (as fast as `--concurrency` allows). Repeat for several tenants.
    #[arg(long = "tenant", required = true)]
    pub tenants: Vec<String>,
    #[arg(long, default_value_t = 1)]
    pub records_per_request: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 200)]
    pub record_size: usize,
    /// `?async=true`: 202 on hand-off instead of waiting for Kafka (`/v1` only).
    #[arg(long = "async")]
    pub async_mode: bool,
    /// Which API to speak: `v1` (floodgate's own), `v2` (Confluent REST Proxy v2, json embedded
    /// format) or `v3` (Confluent v3: the records as concatenated objects, one report each).
    #[arg(long, default_value = "v1")]
    pub api: String,
    #[arg(long, default_value_t = 10.0)]
    pub duration_secs: f64,
    /// Requests in flight per tenant at most.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// A burst: `FACTORxSECONDS@START`, e.g. `10x5@3` = 10x the rate for 5 s from t=3 s.
    #[arg(long)]
    pub burst: Option<String>,
    /// Wait as long as a 429's retry_after_ms before that tenant sends again.
    #[arg(long)]
    pub respect_retry_after: bool,
    /// Give every request an `Idempotency-Key` of its own (what a client that may retry sends).
    #[arg(long)]
    pub idempotency_keys: bool,
    /// Send every body coded: `identity` (the default: no header), `gzip`, `deflate` (zlib),
    /// `zstd` or `snappy` (the framing format), at each library's usual level. The body is
    /// coded once; the gateway inflates it on every request.
    #[arg(long, default_value = "identity")]
    pub content_encoding: String,
    /// Values like a log shipper's (varied numbers, levels, paths), padded to `--record-size`,
    /// instead of `x` repeated: what compresses as real records do.
    #[arg(long)]
    pub log_values: bool,
    /// Write the summary as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a per-second timeline (offered, admitted, refused per tenant) to this CSV file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => load::run(args).await.map(|summary| {
                println!("{}", summary.table());
            }),
            Command::Direct(args) => direct::run(args).await,
            Command::NullServer { listen } => null_server::run(listen).await,
            Command::BurstDrain(args) => scenario::run(args).await,
            Command::SlowBroker(args) => pressure::slow_broker(args).await,
            Command::SlowConsumer(args) => pressure::slow_consumer(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floodgate-load: {e}");
            ExitCode::FAILURE
        }
    }
}
