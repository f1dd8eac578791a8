//! The tenant registry's source of truth: its declarative state, the one place that changes it,
//! its audit events and its persistence.
//!
//! Every change — admin API, SIGHUP reload — goes through [`RegistryStore::change`]: one writer
//! at a time, edit a copy, validate it, plan the live registry from it (parsing everything,
//! touching nothing), persist it, and only then apply it: the live tenants, their keys and the
//! global budget change together, after the state is saved. A change that is invalid or cannot
//! be saved changes nothing anywhere. Each change is one audit event.
//!
//! **Shared registry** (`[cluster] shared_registry`): the state lives in a compacted Kafka topic
//! (see [`log`]) instead of a file. A change is written there and answered once this replica
//! has read it back and every replica would apply it the same way ([`shared`]); the follower
//! task applies every entry, from any replica, to the live registry.
//!
//! **Versions.** Each key ([`EntryKey`]: a tenant, the global budget, the file's part) counts
//! the changes that made it. A change can expect its key at a version ([`Expected`], what an
//! `If-Match` asks): [`RegistryStore::change_if`] compares it under the lock the change holds
//! and refuses with [`ChangeError::Conflict`]; callers never compare versions themselves.
//!
//! Layer: decisions and state. Imports configuration, tenants and the budget; knows nothing
//! of HTTP (the admin API maps [`ChangeError`] to its answers) nor of where the state is kept
//! (the [`Persistence`] seam, or the registry topic).

mod audit;
mod follow;
mod log;
pub mod mac;
mod persist;
mod shared;
mod state;
#[cfg(test)]
mod tests;
pub mod transfer;
mod versions;

pub use audit::Actor;
pub use log::{Entry, EntryKey, LogError, Refused, RegistryLog};
pub use mac::RegistrySecrets;

/// The shared registry's secrets, from the variable `[cluster] registry_secret_env` names.
pub fn registry_secrets(config: &Config) -> Result<RegistrySecrets, String> {
    let name = config
        .cluster
        .registry_secret_env
        .as_deref()
        .ok_or("not set, and the shared registry needs it")?;
    RegistrySecrets::from_env(name)
}
pub use persist::{InMemory, Persistence, StateFile};
pub use shared::{AuditEntry, Rejection};
pub use state::{FileChanges, FilePart, RegistryState, VERSION};
pub use versions::{Expected, VersionedTenant};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shared::SharedRegistry;

use crate::budget::{Clock, GlobalBudget};
use crate::config::{Config, ConfigProblem, GlobalBudgetConfig};
use crate::tenant::{Directory, Tenants};

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
    #[error("the shared registry cannot be used: {0}")]
    Shared(String),
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
    /// The key is no longer at the version the change expected ([`Expected`]), or, shared
    /// registry, another replica's change of it came first in the topic.
    #[error("{key} was changed by another change first; its version is now {current}: read it again and retry")]
    Conflict { key: EntryKey, current: u64 },
    /// Shared registry: Kafka did not take the change (or this replica could not read it back)
    /// in time; it may still apply later.
    #[error("the registry topic could not be written: {0}")]
    Unavailable(String),
}

/// A shared registry's counts, for the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRegistryCounts {
    /// Records every replica skipped, by reason.
    pub skipped: Vec<(&'static str, u64)>,
    /// Keys whose entry only an older secret verifies (to be signed again).
    pub old_secret: usize,
    /// Keys whose last record is refused and says something else (to be written again).
    pub to_reassert: usize,
    /// Entries this replica wrote again.
    pub rewritten: u64,
}

/// Where the registry is kept.
#[derive(Debug)]
enum Backend {
    /// This replica's state file (or memory).
    Local(Box<dyn Persistence>),
    /// The registry topic, shared by every replica.
    Shared(Box<SharedRegistry>),
}

#[derive(Debug)]
pub struct RegistryStore {
    state: tokio::sync::Mutex<RegistryState>,
    backend: Backend,
    tenants: Arc<Tenants>,
    global: Arc<GlobalBudget>,
    clock: Arc<dyn Clock>,
    /// Whether any tenant, or the global budget, has a calendar quota (`/readyz` keeps a
    /// replica that would count them alone out of rotation).
    quotas: AtomicBool,
}

/// Whether `state` sets any calendar quota.
fn has_quotas(state: &RegistryState) -> bool {
    !state.global.quotas.is_empty() || state.tenants.values().any(|t| !t.quotas.is_empty())
}

impl RegistryStore {
    /// Loads the saved state (or starts from the configuration file), applies what changed in
    /// the file since it was last applied, saves the result, and builds the live registry.
    pub fn open(
        file: FilePart,
        persistence: Box<dyn Persistence>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, RegistryError> {
        let state = match persistence.load()? {
            Some(mut saved) => {
                let changes = saved.apply_file(file);
                log_file_changes(&changes, "start-up");
                saved
            }
            None => RegistryState::from_file(file),
        };
        if let Some(p) = state.problems().into_iter().next() {
            return Err(RegistryError::Invalid(p));
        }
        let directory =
            Directory::from_configs(&state.configs()).map_err(RegistryError::Invalid)?;
        let global = GlobalBudget::new(state.global.spec().map_err(RegistryError::Invalid)?);
        global.set_visible_to_tenants(!state.global.hide_from_tenants);
        global.set_shadow(state.global.mode.is_shadow());
        global
            .quotas
            .set_specs(state.global.quota_specs().map_err(RegistryError::Invalid)?);
        persistence.save(&state)?;
        tracing::info!(tenants = state.tenants.len(), "tenant registry loaded");
        let quotas = AtomicBool::new(has_quotas(&state));
        Ok(Self {
            state: tokio::sync::Mutex::new(state),
            backend: Backend::Local(persistence),
            tenants: Arc::new(Tenants::new(directory)),
            global: Arc::new(global),
            clock,
            quotas,
        })
    }

    /// A registry kept in the registry topic: empty until [`RegistryStore::follow`] has read
    /// the topic (an empty topic is first seeded with `seed`, the configuration file's part).
    ///
    /// The file's part as last applied is in the topic too, one record per tenant: a reload on
    /// any replica applies what changed in its file since the cluster last applied one.
    pub fn shared(
        seed: Option<FilePart>,
        log: RegistryLog,
        replica: &str,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let state = RegistryState {
            version: VERSION,
            ..RegistryState::default()
        };
        let global = GlobalBudget::new(crate::budget::BudgetSpec::default());
        Self {
            state: tokio::sync::Mutex::new(state),
            backend: Backend::Shared(Box::new(SharedRegistry::new(
                log,
                replica.to_string(),
                seed,
            ))),
            tenants: Arc::new(Tenants::new(Directory::default())),
            global: Arc::new(global),
            clock,
            quotas: AtomicBool::new(false),
        }
    }

    /// False while a shared registry has not yet read the topic up to its end as found at
    /// start-up; a local one is always loaded.
    pub fn is_loaded(&self) -> bool {
        match &self.backend {
            Backend::Local(_) => true,
            Backend::Shared(s) => s.loaded.load(Ordering::Acquire),
        }
    }

    /// The shared registry's recent changes at or after offset `since` (`None` for a local
    /// registry, whose audit events are in the log only).
    pub fn audit_since(&self, since: i64) -> Option<Vec<AuditEntry>> {
        match &self.backend {
            Backend::Local(_) => None,
            Backend::Shared(s) => Some(s.audit_since(since)),
        }
    }

    /// Whether a shared registry found records in its topic of which none verifies with its
    /// secrets (it does not become ready).
    pub fn is_unverified(&self) -> bool {
        match &self.backend {
            Backend::Local(_) => false,
            Backend::Shared(s) => s.unverified.load(Ordering::Acquire),
        }
    }

    /// The shared registry's counts for the metrics; `None` for a local registry.
    pub fn shared_counts(&self) -> Option<SharedRegistryCounts> {
        let Backend::Shared(s) = &self.backend else {
            return None;
        };
        let rewrites = s.rewrites();
        Some(SharedRegistryCounts {
            skipped: shared::SKIPPED
                .iter()
                .zip(&s.skipped)
                .map(|(r, n)| (*r, n.load(Ordering::Relaxed)))
                .collect(),
            old_secret: rewrites.resign.len(),
            to_reassert: rewrites.reassert.len(),
            rewritten: s.rewritten.load(Ordering::Relaxed),
        })
    }

    /// Waits until a shared registry has read the topic to its end (at most `within`).
    pub async fn wait_loaded(&self, within: Duration) -> bool {
        let started = std::time::Instant::now();
        while !self.is_loaded() {
            if started.elapsed() >= within {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Makes `next` the live registry and global budget.
    fn install(
        &self,
        next: &RegistryState,
        plan: crate::tenant::DirectoryPlan,
        global: crate::budget::BudgetSpec,
    ) {
        let now = self.clock.now_ns();
        self.tenants.replace(plan.build(&self.tenants.load(), now));
        self.global.set_spec(global, now);
        self.global
            .set_visible_to_tenants(!next.global.hide_from_tenants);
        self.global.set_shadow(next.global.mode.is_shadow());
        // Checked with the rest of `next` before it was installed.
        self.global
            .quotas
            .set_specs(next.global.quota_specs().unwrap_or_default());
        self.quotas.store(has_quotas(next), Ordering::Release);
    }

    /// Whether any tenant, or the global budget, has a calendar quota now.
    pub fn has_quotas(&self) -> bool {
        self.quotas.load(Ordering::Acquire)
    }

    /// The live registry requests read.
    pub fn tenants(&self) -> &Arc<Tenants> {
        &self.tenants
    }

    /// The live global budget admission charges.
    pub fn global(&self) -> &Arc<GlobalBudget> {
        &self.global
    }

    /// A copy of the whole state (every tenant): for an export, not to answer for one part.
    pub async fn snapshot(&self) -> RegistryState {
        self.state.lock().await.clone()
    }

    /// Reads the state in place (no copy of every tenant, as a snapshot makes).
    pub async fn read<T>(&self, read: impl FnOnce(&RegistryState) -> T) -> T {
        read(&*self.state.lock().await)
    }

    /// Tenant `id`'s configuration and version (`None`: no such tenant).
    pub async fn tenant(&self, id: &str) -> Option<VersionedTenant> {
        self.read(|state| {
            Some(VersionedTenant {
                config: state.tenants.get(id)?.clone(),
                version: state.version(&EntryKey::tenant(id)),
            })
        })
        .await
    }

    /// The global budget's configuration (the live budget is [`RegistryStore::global`]).
    pub async fn global_config(&self) -> GlobalBudgetConfig {
        self.read(|state| state.global.clone()).await
    }

    /// Applies a re-read configuration file (SIGHUP): what changed in the file since it was
    /// last applied (see [`state`]'s ownership rules).
    pub async fn apply_file(&self, file: FilePart) -> Result<FileChanges, ChangeError> {
        let actor = Actor::new("sighup");
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
        self.change_if(actor, action, None, edit).await
    }

    /// [`RegistryStore::change`], made only if `expected` holds when the change starts
    /// (before `edit` runs); otherwise [`ChangeError::Conflict`] and nothing changed.
    pub async fn change_if<T, E: From<ChangeError>>(
        &self,
        actor: &Actor,
        action: &str,
        expected: Option<Expected>,
        edit: impl FnOnce(&mut RegistryState) -> Result<T, E>,
    ) -> Result<T, E> {
        let persistence = match &self.backend {
            Backend::Local(p) => p,
            Backend::Shared(shared) => {
                return self
                    .change_shared(shared, actor, action, expected, edit)
                    .await
            }
        };
        let mut current = self.state.lock().await;
        if let Some(expected) = &expected {
            expected.check(&current)?;
        }
        let mut next = current.clone();
        let out = edit(&mut next)?;
        if let Some(p) = next.problems_since(Some(&current)).into_iter().next() {
            return Err(ChangeError::Invalid(p).into());
        }
        let plan = self
            .tenants
            .load()
            .plan_next(&next.configs())
            .map_err(ChangeError::Invalid)?;
        let global = next.global.spec().map_err(ChangeError::Invalid)?;
        // Versions count changes per key, as the shared registry does (for If-Match); a
        // local registry's versions start again at 0 with the process.
        for entry in shared::entries(&current, &next, "", "", "") {
            next.versions.insert(entry.key, entry.base + 1);
        }
        if let Err(e) = persistence.save(&next) {
            tracing::error!(error = %e, action, "registry change not saved, not applied");
            return Err(ChangeError::NotSaved(e.to_string()).into());
        }
        self.install(&next, plan, global);
        audit::record(actor, action, &current, &next);
        *current = next;
        Ok(out)
    }

    /// A change of the shared registry: validated here, written to the topic, answered when
    /// this replica has read it back (applied, or refused by the rules every replica follows).
    async fn change_shared<T, E: From<ChangeError>>(
        &self,
        shared: &SharedRegistry,
        actor: &Actor,
        action: &str,
        expected: Option<Expected>,
        edit: impl FnOnce(&mut RegistryState) -> Result<T, E>,
    ) -> Result<T, E> {
        if !shared.loaded.load(Ordering::Acquire) {
            return Err(ChangeError::Unavailable(
                "the registry is still being read from Kafka".into(),
            )
            .into());
        }
        let _one_writer = shared.writer.lock().await;
        let current = {
            let state = self.state.lock().await;
            if let Some(expected) = &expected {
                expected.check(&state)?;
            }
            state.clone()
        };
        let mut next = current.clone();
        let out = edit(&mut next)?;
        if let Some(p) = next.problems_since(Some(&current)).into_iter().next() {
            return Err(ChangeError::Invalid(p).into());
        }
        self.tenants
            .load()
            .plan_next(&next.configs())
            .map_err(ChangeError::Invalid)?;
        next.global.spec().map_err(ChangeError::Invalid)?;
        let entries = shared::entries(&current, &next, actor.as_str(), action, &shared.replica);
        if entries.is_empty() {
            return Ok(out);
        }
        let offsets = shared.log.write(&entries).await.map_err(|e| {
            tracing::error!(error = %e, action, "registry change not written, not applied");
            ChangeError::Unavailable(e.to_string())
        })?;
        let last = offsets.iter().copied().max().unwrap_or(0);
        let mut applied = shared.applied.subscribe();
        let read_back = matches!(
            tokio::time::timeout(
                shared.log.write_timeout,
                applied.wait_for(|next_offset| *next_offset > last),
            )
            .await,
            Ok(Ok(_))
        );
        if !read_back {
            return Err(ChangeError::Unavailable(format!(
                "the change was written (offset {last}) but not read back within {:?}; it applies when it is",
                shared.log.write_timeout
            ))
            .into());
        }
        for offset in offsets {
            match shared.outcome(offset) {
                Some(Ok(())) | None => {}
                Some(Err(Rejection::Stale { key, current })) => {
                    return Err(ChangeError::Conflict { key, current }.into())
                }
                Some(Err(Rejection::Invalid(d) | Rejection::Malformed(d))) => {
                    return Err(ChangeError::Invalid(ConfigProblem::new("registry", d)).into())
                }
            }
        }
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
