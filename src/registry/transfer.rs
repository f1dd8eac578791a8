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
        super::registry_secrets(config).map_err(|e| format!("cluster.registry_secret_env: {e}"))?,
    )
    .map_err(|e| e.to_string())?;
    let store = Arc::new(RegistryStore::shared(
        None,
        log,
        "registry-cli",
        Arc::new(MonotonicClock::new()),
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

/// The registry as a person reads it: each tenant's key digests replaced by key ids.
pub fn view(state: &RegistryState) -> serde_json::Value {
    let mut view = serde_json::json!(state);
    let redact = |tenants: Option<&mut serde_json::Value>,
                  configs: &std::collections::BTreeMap<
        String,
        std::sync::Arc<crate::config::TenantConfig>,
    >| {
        if let Some(tenants) = tenants.and_then(|t| t.as_object_mut()) {
            for (id, tenant) in tenants.iter_mut() {
                if let Some(config) = configs.get(id) {
                    *tenant = super::audit::tenant_view(config);
                }
            }
        }
    };
    redact(view.get_mut("tenants"), &state.tenants);
    redact(view.pointer_mut("/file/tenants"), &state.file.tenants);
    view
}

/// Writes `state` to a new file that only its owner can read (key digests are in it).
pub fn write_private(path: &std::path::Path, state: &RegistryState) -> Result<(), String> {
    use std::io::Write as _;
    let text = serde_json::to_vec_pretty(state).map_err(|e| e.to_string())?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))
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
