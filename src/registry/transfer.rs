//! `floodgate registry export|import`: moves a registry between a state file (single-instance
//! mode) and the registry topic (shared mode). Neither seeds an empty topic from the
//! configuration file: export of an empty topic is an empty registry.

use std::sync::Arc;
use std::time::Duration;

use super::{Actor, RegistryLog, RegistryState, RegistryStore};
use crate::budget::MonotonicClock;
use crate::config::Config;

/// How long the commands wait to read the topic to its end.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);

async fn open(
    config: &Config,
) -> Result<(Arc<RegistryStore>, tokio::task::JoinHandle<()>), String> {
    let log = RegistryLog::new(
        crate::kafka::connection_config(&config.kafka),
        &config.cluster.registry_topic,
        Duration::from_millis(config.cluster.registry_write_timeout_ms),
        config.cluster.registry_replication,
    )
    .map_err(|e| e.to_string())?;
    let store = Arc::new(RegistryStore::shared(
        config,
        log,
        "registry-cli",
        Arc::new(MonotonicClock::new()),
        false,
    ));
    let follower = tokio::spawn(store.clone().follow());
    if !store.wait_loaded(LOAD_TIMEOUT).await {
        follower.abort();
        return Err(format!(
            "could not read topic {} within {LOAD_TIMEOUT:?}",
            config.cluster.registry_topic
        ));
    }
    Ok((store, follower))
}

/// The registry as the topic holds it, in the state file's format.
pub async fn export(config: &Config) -> Result<RegistryState, String> {
    let (store, follower) = open(config).await?;
    let state = store.snapshot().await;
    follower.abort();
    Ok(state)
}

/// Makes the topic hold `state` (one entry per key that differs, audited as `registry.import`).
pub async fn import(config: &Config, state: RegistryState) -> Result<usize, String> {
    let (store, follower) = open(config).await?;
    let result = store
        .change(&Actor::new("cli"), "registry.import", |current| {
            let differs = current.tenants != state.tenants || current.global != state.global;
            current.global = state.global.clone();
            current.tenants = state.tenants.clone();
            current.file = state.file.clone();
            Ok::<_, super::ChangeError>(if differs { state.tenants.len() } else { 0 })
        })
        .await
        .map_err(|e| e.to_string());
    follower.abort();
    result
}
