//! The tenant registry's source of truth: its declarative state, the one place that changes it,
//! its audit events and its persistence.
//!
//! Every change — admin API, SIGHUP reload — goes through [`RegistryStore::change`]: one writer
//! at a time, edit a copy, validate it, plan the live registry from it (parsing everything,
//! touching nothing), persist it, and only then apply it: the live tenants, their keys and the
//! global budget change together, after the state is saved. A change that is invalid or cannot
//! be saved changes nothing anywhere. Each change is one audit event.
//!
//! Layer: registry. Imports configuration, tenants and the budget; knows nothing of HTTP (the
//! admin API maps [`ChangeError`] to its answers) nor of where the state is kept (the
//! [`Persistence`] seam).

mod audit;
mod persist;
mod state;

pub use audit::Actor;
pub use persist::{InMemory, Persistence, StateFile};
pub use state::{FileChanges, FilePart, RegistryState, VERSION};

use std::path::PathBuf;
use std::sync::Arc;

use crate::budget::{Clock, GlobalBudget};
use crate::config::{Config, ConfigProblem};
use crate::tenant::{Registry, Tenants};

/// Why the registry could not be opened or saved.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot read state file {path}: {source}", path = .0.display(), source = .1)]
    Read(PathBuf, #[source] std::io::Error),
    #[error("cannot write state file {path}: {source}", path = .0.display(), source = .1)]
    Write(PathBuf, #[source] std::io::Error),
    #[error("state file {path} is invalid: {detail}", path = .0.display(), detail = .1)]
    Corrupt(PathBuf, String),
    #[error("the registry is invalid: {0}")]
    Invalid(ConfigProblem),
}

/// Why a change was not made. Nothing was changed in any of these cases.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("{0}")]
    Invalid(ConfigProblem),
    #[error("no tenant {0:?}")]
    TenantNotFound(String),
    #[error("no key {0:?} for this tenant")]
    KeyNotFound(String),
    #[error("the change could not be saved, so it was not applied: {0}")]
    NotSaved(String),
}

#[derive(Debug)]
pub struct RegistryStore {
    state: tokio::sync::Mutex<RegistryState>,
    persistence: Box<dyn Persistence>,
    tenants: Arc<Tenants>,
    global: Arc<GlobalBudget>,
    clock: Arc<dyn Clock>,
}

impl RegistryStore {
    /// Loads the saved state (or starts from the configuration file), applies what changed in
    /// the file since it was last applied, saves the result, and builds the live registry.
    pub fn open(
        config: &Config,
        persistence: Box<dyn Persistence>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, RegistryError> {
        let state = match persistence.load()? {
            Some(mut saved) => {
                let changes = saved.apply_file(FilePart::of(config));
                log_file_changes(&changes, "start-up");
                saved
            }
            None => RegistryState::from_config(config),
        };
        if let Some(p) = state.problems().into_iter().next() {
            return Err(RegistryError::Invalid(p));
        }
        let registry = Registry::from_configs(&state.configs()).map_err(RegistryError::Invalid)?;
        let global = GlobalBudget::new(state.global.spec().map_err(RegistryError::Invalid)?);
        global.set_visible_to_tenants(!state.global.hide_from_tenants);
        persistence.save(&state)?;
        tracing::info!(tenants = state.tenants.len(), "tenant registry loaded");
        Ok(Self {
            state: tokio::sync::Mutex::new(state),
            persistence,
            tenants: Arc::new(Tenants::new(registry)),
            global: Arc::new(global),
            clock,
        })
    }

    /// The live registry requests read.
    pub fn tenants(&self) -> &Arc<Tenants> {
        &self.tenants
    }

    /// The live global budget admission charges.
    pub fn global(&self) -> &Arc<GlobalBudget> {
        &self.global
    }

    pub async fn snapshot(&self) -> RegistryState {
        self.state.lock().await.clone()
    }

    /// Applies a re-read configuration file (SIGHUP): what changed in the file since it was
    /// last applied (see [`state`]'s ownership rules).
    pub async fn apply_file(&self, config: &Config) -> Result<FileChanges, ChangeError> {
        let actor = Actor::new("sighup");
        let file = FilePart::of(config);
        let changes = self
            .change(&actor, "config.reload", |state| {
                Ok::<_, ChangeError>(state.apply_file(file))
            })
            .await?;
        log_file_changes(&changes, "reload");
        Ok(changes)
    }

    /// Applies `edit` to a copy of the state; if the result is valid and saved, it becomes the
    /// live registry and global budget. Returns what `edit` returned.
    pub async fn change<T, E: From<ChangeError>>(
        &self,
        actor: &Actor,
        action: &str,
        edit: impl FnOnce(&mut RegistryState) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut current = self.state.lock().await;
        let mut next = current.clone();
        let out = edit(&mut next)?;
        if let Some(p) = next.problems().into_iter().next() {
            return Err(ChangeError::Invalid(p).into());
        }
        let plan = Registry::plan(&next.configs()).map_err(ChangeError::Invalid)?;
        let global = next.global.spec().map_err(ChangeError::Invalid)?;
        if let Err(e) = self.persistence.save(&next) {
            tracing::error!(error = %e, action, "registry change not saved, not applied");
            return Err(ChangeError::NotSaved(e.to_string()).into());
        }
        let now = self.clock.now_ns();
        self.tenants.replace(plan.build(&self.tenants.load(), now));
        self.global.set_spec(global, now);
        self.global
            .set_visible_to_tenants(!next.global.hide_from_tenants);
        audit::record(actor, action, &current, &next);
        *current = next;
        Ok(out)
    }
}

fn log_file_changes(changes: &FileChanges, when: &str) {
    for id in &changes.kept_deleted {
        tracing::warn!(tenant = %id, when,
            "the configuration file changed a tenant that was deleted through the admin API; it stays deleted (remove it from the file, or re-create it through the API)");
    }
    if changes != &FileChanges::default() {
        tracing::info!(when, created = ?changes.created, updated = ?changes.updated,
            deleted = ?changes.deleted, "configuration file changes applied to the registry");
    }
}
