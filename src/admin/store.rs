//! The tenant registry's declarative form (tenant configurations plus the global budget), the
//! one place that changes it, and its persistence.
//!
//! Every change — admin API, SIGHUP reload — goes through [`TenantStore::change`]: one writer at
//! a time, validate, persist (write, fsync, rename, fsync the directory: a crash leaves the old
//! file or the new one, never half of one), and only then swap the live registry, so what
//! requests see is always what is on disk. Each change is logged as one audit event.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::admission::Admission;
use crate::config::{Config, ConfigProblem, GlobalBudgetConfig, TenantConfig};
use crate::tenant::{validate_tenant, Registry, Tenants};

/// What the state file holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreState {
    pub version: u32,
    pub global: GlobalBudgetConfig,
    pub tenants: BTreeMap<String, TenantConfig>,
}

const VERSION: u32 = 1;

impl StoreState {
    pub fn from_config(config: &Config) -> Self {
        Self {
            version: VERSION,
            global: config.global.clone(),
            tenants: config
                .tenants
                .iter()
                .map(|t| (t.id.clone(), t.clone()))
                .collect(),
        }
    }

    /// Reads a state file; a file that does not parse is an error naming file and position,
    /// never silently replaced.
    pub fn load(path: &Path) -> Result<Option<Self>, StoreError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::Read(path.to_path_buf(), e)),
        };
        let state: StoreState = serde_json::from_str(&text).map_err(|e| {
            StoreError::Corrupt(
                path.to_path_buf(),
                format!("line {} column {}: {e}", e.line(), e.column()),
            )
        })?;
        if let Some(p) = state.problems().into_iter().next() {
            return Err(StoreError::Corrupt(path.to_path_buf(), p.to_string()));
        }
        Ok(Some(state))
    }

    /// Every problem with this state, keys named as in a config file.
    pub fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if let Err(p) = self.global.spec() {
            problems.push(p);
        }
        for (id, t) in &self.tenants {
            problems.extend(validate_tenant(t, &format!("tenants[{id}]")));
        }
        problems
    }

    fn write(&self, path: &Path) -> std::io::Result<()> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "state".into());
        let tmp = dir.join(format!(".{name}.tmp"));
        let mut file = std::fs::File::create(&tmp)?;
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        file.write_all(&text)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot read state file {path}: {source}", path = .0.display(), source = .1)]
    Read(PathBuf, #[source] std::io::Error),
    #[error("state file {path} is invalid: {detail}", path = .0.display(), detail = .1)]
    Corrupt(PathBuf, String),
}

/// Who made a change, for the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor(pub String);

#[derive(Debug)]
pub struct TenantStore {
    state: tokio::sync::Mutex<StoreState>,
    file: Option<PathBuf>,
}

impl TenantStore {
    pub fn new(state: StoreState, file: Option<PathBuf>) -> Self {
        Self {
            state: tokio::sync::Mutex::new(state),
            file,
        }
    }

    /// Applies a re-read configuration file (SIGHUP) the way the admin API would: the file's
    /// tenants are created or updated (keeping keys issued through the API), the global budget
    /// is replaced, tenants created through the API are left alone.
    pub async fn apply_config(
        &self,
        config: &Config,
        tenants: &Tenants,
        admission: &Admission,
    ) -> Result<(), crate::error::ApiError> {
        let actor = Actor("sighup".into());
        self.change(&actor, "config.reload", tenants, admission, |state| {
            state.global = config.global.clone();
            for t in &config.tenants {
                let mut next = t.clone();
                if let Some(existing) = state.tenants.get(&t.id) {
                    for key in &existing.api_key_sha256 {
                        if !next.api_key_sha256.contains(key) {
                            next.api_key_sha256.push(key.clone());
                        }
                    }
                }
                state.tenants.insert(t.id.clone(), next);
            }
            Ok(())
        })
        .await
    }

    pub async fn snapshot(&self) -> StoreState {
        self.state.lock().await.clone()
    }

    /// Applies `edit` to a copy of the state; if the result is valid and saved, it becomes the
    /// live registry and global budget. Returns what `edit` returned.
    pub async fn change<T>(
        &self,
        actor: &Actor,
        action: &str,
        tenants: &Tenants,
        admission: &Admission,
        edit: impl FnOnce(&mut StoreState) -> Result<T, crate::error::ApiError>,
    ) -> Result<T, crate::error::ApiError> {
        use crate::error::ApiError;
        let mut current = self.state.lock().await;
        let mut next = current.clone();
        let out = edit(&mut next)?;
        if let Some(p) = next.problems().into_iter().next() {
            return Err(ApiError::invalid_field(&p));
        }
        let now = admission.now_ns();
        let configs: Vec<TenantConfig> = next.tenants.values().cloned().collect();
        let registry = Registry::rebuild(&configs, &tenants.load(), now)
            .map_err(|p| ApiError::invalid_field(&p))?;
        let global = next
            .global
            .spec()
            .map_err(|p| ApiError::invalid_field(&p))?;
        if let Some(path) = &self.file {
            next.write(path).map_err(|e| {
                tracing::error!(error = %e, file = %path.display(), "admin change not saved");
                ApiError::StateNotSaved
            })?;
        }
        tenants.replace(registry);
        admission.global.set_spec(global, now);
        tracing::info!(
            target: "floodgate::audit",
            actor = %actor.0,
            action,
            before = %audit_json(&current, &next, true),
            after = %audit_json(&current, &next, false),
            "admin change"
        );
        *current = next;
        Ok(out)
    }
}

/// The parts of the state that differ, as JSON (keys appear as digests only).
fn audit_json(before: &StoreState, after: &StoreState, old: bool) -> String {
    let mut out = serde_json::Map::new();
    let side = if old { before } else { after };
    if before.global != after.global {
        out.insert("global".into(), serde_json::json!(side.global));
    }
    let ids: std::collections::BTreeSet<&String> =
        before.tenants.keys().chain(after.tenants.keys()).collect();
    for id in ids {
        if before.tenants.get(id) != after.tenants.get(id) {
            out.insert(
                format!("tenant:{id}"),
                serde_json::json!(side.tenants.get(id)),
            );
        }
    }
    serde_json::Value::Object(out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_files_round_trip_and_corruption_names_the_position() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        assert_eq!(StoreState::load(&path).expect("missing is fine"), None);
        let mut state = StoreState::default();
        state.tenants.insert(
            "a".into(),
            TenantConfig {
                id: "a".into(),
                api_key_sha256: vec![],
                topics: vec!["t.*".into()],
                records_per_sec: Some(5),
                records_burst: None,
                bytes_per_sec: None,
                bytes_burst: None,
                max_buffer_share: None,
            },
        );
        state.write(&path).expect("write");
        assert_eq!(StoreState::load(&path).expect("load"), Some(state));
        std::fs::write(&path, "{\n  \"version\": 1,\n  \"tenants\": [\n").expect("corrupt");
        let err = StoreState::load(&path).expect_err("corrupt");
        let text = err.to_string();
        assert!(
            text.contains("state.json") && text.contains("line 3"),
            "{text}"
        );
    }
}
