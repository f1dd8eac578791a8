//! SIGHUP: re-read the configuration file and apply its tenants and global budget live, the
//! same way the admin API does. Listener addresses and Kafka settings need a restart; the log
//! says so when they changed. Which changes in the file apply, and which admin changes they
//! leave alone, is the registry's rule (`registry::state`).
//!
//! Layer: HTTP edges (an edge like the routes: a signal in, a registry change out).

use std::path::PathBuf;
use std::sync::Arc;

use crate::app::AppState;
use crate::config::Config;

/// Applies the file at `path` to the running gateway. `running` is the configuration the
/// process started with, to tell which changes cannot apply live.
pub async fn reload(app: &AppState, running: &Config, path: &std::path::Path) {
    let mut config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            for p in &e.problems {
                tracing::error!(file = %path.display(), problem = %p, "reload refused: invalid configuration");
            }
            return;
        }
    };
    let needs_restart = |section: &str, same: bool| {
        if !same {
            tracing::warn!(
                section,
                "reload: this section changed but only applies after a restart"
            );
        }
    };
    needs_restart("server", same(&config.server, &running.server));
    needs_restart("kafka", same(&config.kafka, &running.kafka));
    needs_restart("buffer", same(&config.buffer, &running.buffer));
    needs_restart("wait", same(&config.wait, &running.wait));
    let tenants = config.tenants.len();
    match app
        .registry
        .apply_file(crate::registry::FilePart::take(&mut config))
        .await
    {
        Ok(_) => tracing::info!(file = %path.display(), tenants, "configuration reloaded"),
        Err(e) => tracing::error!(file = %path.display(), error = %e, "reload refused"),
    }
}

/// Sections compared by their JSON form (they hold floats, so no `Eq`).
fn same<T: serde::Serialize>(a: &T, b: &T) -> bool {
    serde_json::to_string(a).ok() == serde_json::to_string(b).ok()
}

/// Listens for SIGHUP from the moment it is called (a signal sent once the gateway serves is
/// not missed while the task is yet to run) and returns the task that reloads at each one.
/// The caller stops the task with the gateway: the registry it reloads into is no longer
/// followed then, and a reload from that view would write stale changes to a shared registry.
#[cfg(unix)]
pub fn on_sighup(
    app: Arc<AppState>,
    running: Config,
    path: PathBuf,
) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let hangups = signal(SignalKind::hangup());
    async move {
        let Ok(mut hangups) = hangups else {
            tracing::warn!("cannot listen for SIGHUP: configuration reload disabled");
            return;
        };
        while hangups.recv().await.is_some() {
            tracing::info!(file = %path.display(), "SIGHUP: reloading configuration");
            reload(&app, &running, &path).await;
        }
    }
}

#[cfg(not(unix))]
pub fn on_sighup(
    _app: Arc<AppState>,
    _running: Config,
    _path: PathBuf,
) -> impl std::future::Future<Output = ()> {
    std::future::ready(())
}
