//! The `floodgate` command: run the gateway, check a configuration, start the dev setup, or
//! print the configuration reference.

// #27: no function over 100 lines outside tests (clippy.toml sets the threshold).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use floodgate::budget::MonotonicClock;
use floodgate::config::Config;
use floodgate::{dev, telemetry, Listeners, RunOptions};

/// Counts each thread's heap bytes, so a schema compile's real size is known (`heap`).
#[global_allocator]
static ALLOCATOR: floodgate::heap::Counting = floodgate::heap::Counting;

/// Exit code for a configuration that cannot be used (BSD sysexits EX_USAGE, as linkerd).
const EXIT_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(
    name = "floodgate",
    version,
    about = "HTTP ingest gateway in front of Kafka"
)]
struct Cli {
    /// Configuration file.
    #[arg(
        long,
        global = true,
        default_value = "config/floodgate.toml",
        env = "FLOODGATE_CONFIG"
    )]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default).
    Run,
    /// Validate the configuration file and exit: one line per problem, naming the key.
    CheckConfig,
    /// Run on an in-process Kafka-protocol broker with a demo tenant (data in memory only).
    Dev,
    /// Print the configuration reference (Markdown: every table and key with its type, default
    /// and doc comment), generated from the config structs; the book's copy is this output.
    ConfigReference,
    /// Move the tenant registry between a state file and the shared registry topic
    /// (`[kafka]` and `[cluster] registry_topic` of the configuration say where it is).
    Registry {
        #[command(subcommand)]
        action: RegistryAction,
    },
}

#[derive(Subcommand)]
enum RegistryAction {
    /// Export the registry topic's registry: with `--out`, as a state file `import` can read
    /// (key digests included; the file is created readable by its owner only); without, a view
    /// on standard output with key ids instead of digests.
    Export {
        /// Write a state file here (created with mode 0600; an existing file is refused).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write a state file's registry to the topic (only what differs; audited as an import).
    Import {
        /// The state file (as written by `[admin] state_file` or by `export`).
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Run) {
        Command::CheckConfig => match load(&cli.config) {
            Ok(config) => check_config(&cli.config, &config),
            Err(code) => code,
        },
        Command::Run => match load(&cli.config) {
            Ok(config) => serve(config, None, Some(cli.config.clone())),
            Err(code) => code,
        },
        Command::Registry { action } => match load(&cli.config) {
            Ok(config) => registry_command(&config, action),
            Err(code) => code,
        },
        Command::Dev => dev_command(&cli.config),
        Command::ConfigReference => {
            print!("{}", floodgate::config::reference_markdown());
            ExitCode::SUCCESS
        }
    }
}

/// The file read and validated, or its problems printed (one per line, naming the key) and
/// the configuration exit code.
fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        for p in &e.problems {
            eprintln!("{}: {p}", path.display());
        }
        ExitCode::from(EXIT_CONFIG)
    })
}

/// `check-config`: the file, and what the environment must hold for it, checked as start-up
/// would check them.
fn check_config(path: &std::path::Path, config: &Config) -> ExitCode {
    // Valid but probably not meant: said, not refused.
    for w in config.warnings() {
        eprintln!("{}: warning: {w}", path.display());
    }
    // What the environment must hold for this file, checked too (never printed).
    let mut missing = Vec::new();
    if config.cluster.shared_registry {
        if let Err(e) = floodgate::registry::registry_secrets(config) {
            missing.push(format!("cluster.registry_secret_env: {e}"));
        }
    }
    if let Some(var) = &config.metrics.token_env {
        if let Err(e) = floodgate::access::scrape_token_from_env(var) {
            missing.push(format!("metrics.token_env: {e}"));
        }
    }
    // Every [[auth.jwt]] jwks_file read and parsed as start-up would.
    let clock = std::sync::Arc::new(floodgate::budget::MonotonicClock::new());
    if let Err(e) = floodgate::credential::Authenticator::new(&config.auth, clock) {
        missing.push(e.to_string());
    }
    // The TLS files read as start-up reads them (certificate, key, client CA).
    if let Err(e) = floodgate::run::tls_acceptors(&config.server) {
        missing.push(format!("server.tls: {e}"));
    }
    if missing.is_empty() {
        println!("{}: ok", path.display());
        ExitCode::SUCCESS
    } else {
        for e in missing {
            eprintln!("{}: {e}", path.display());
        }
        ExitCode::from(EXIT_CONFIG)
    }
}

/// `dev`: the embedded broker, and the file only if it exists.
fn dev_command(path: &std::path::Path) -> ExitCode {
    let mut config = if path.exists() {
        match load(path) {
            Ok(c) => c,
            Err(code) => return code,
        }
    } else {
        match Config::from_toml_with_env("", std::env::vars()) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        }
    };
    config.tenants.clear();
    match dev::start(&mut config) {
        Ok(broker) => serve(config, Some(broker), None),
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn registry_command(config: &Config, action: RegistryAction) -> ExitCode {
    use floodgate::registry::{transfer, Persistence, StateFile};
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match action {
            RegistryAction::Export { out } => {
                let state = transfer::export(config).await?;
                match out {
                    Some(path) => {
                        transfer::write_private(&path, &state)?;
                        eprintln!(
                            "exported {} tenants to {}",
                            state.tenants.len(),
                            path.display()
                        );
                    }
                    None => {
                        let text = serde_json::to_string_pretty(&transfer::view(&state))
                            .map_err(|e| e.to_string())?;
                        println!("{text}");
                        eprintln!(
                            "(key ids instead of key digests: use --out FILE for a state file \
                             that import reads)"
                        );
                    }
                }
                Ok(())
            }
            RegistryAction::Import { file } => {
                let state = StateFile::open(&file)
                    .and_then(|f| f.load())
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("{}: no registry in this file", file.display()))?;
                let n = transfer::import(config, state).await?;
                eprintln!(
                    "imported into {} ({n} tenants)",
                    config.cluster.registry_topic
                );
                Ok::<(), String>(())
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floodgate registry: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: Config, dev: Option<dev::DevBroker>, path: Option<PathBuf>) -> ExitCode {
    telemetry::init(&config.log);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listeners = match Listeners::bind(&config).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, listen = %config.server.listen,
                    admin_listen = %config.server.admin_listen, "could not bind the listeners");
                return ExitCode::FAILURE;
            }
        };
        let mut options = RunOptions::new(Arc::new(MonotonicClock::new()));
        options.config_path = path;
        if let Some(dev) = &dev {
            // The dev setup makes an admin token when none is set, so the status page and the
            // admin API work at once; a token set in the environment is used as it is.
            let unset = matches!(
                floodgate::env_secret::read(&config.admin.token_env),
                Ok(None)
            );
            let dev_token = if unset {
                match floodgate::identity::random_key("") {
                    Ok(token) => {
                        options.admin_tokens =
                            floodgate::access::AdminTokens::parse(&format!("dev:{token}")).ok();
                        Some(token)
                    }
                    Err(_) => None,
                }
            } else {
                None
            };
            announce_dev(&config, dev, dev_token.as_deref());
        }
        match floodgate::run(config, listeners, options, shutdown_signal()).await {
            Ok(report) if report.unconfirmed_records == 0 => ExitCode::SUCCESS,
            Ok(_) => ExitCode::FAILURE,
            Err(e) => {
                tracing::error!(error = %e, "floodgate could not start or had to stop");
                ExitCode::from(EXIT_CONFIG)
            }
        }
    })
}

fn announce_dev(config: &Config, dev: &dev::DevBroker, admin_token: Option<&str>) {
    tracing::warn!(
        bootstrap = %dev.cluster.bootstrap_servers(),
        "DEV MODE: the Kafka broker is librdkafka's in-process mock cluster; it keeps data in memory only and loses it on exit"
    );
    let topics: Vec<&str> = dev::DEMO_TOPICS.iter().map(|(t, _)| *t).collect();
    println!("\nfloodgate dev is up.");
    println!("  tenant:  demo (topics {topics:?}; 1000 records/s, burst 2000)");
    println!("  API key: {}", dev.api_key);
    println!(
        "  try:     curl -s -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' \\",
        dev.api_key
    );
    println!(
        "             -d '{{\"records\":[{{\"key\":\"k1\",\"value\":{{\"hello\":\"world\"}}}}]}}' http://{}/v1/topics/events.demo/records",
        config.server.listen
    );
    println!("  status:  http://{}/ui", config.server.admin_listen);
    match admin_token {
        Some(token) => println!("  admin token (for the status page and the admin API): {token}\n"),
        None => println!(
            "  admin token: the one in {} (for the status page and the admin API)\n",
            config.admin.token_env
        ),
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
