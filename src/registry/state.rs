//! The registry's declarative form: every tenant's configuration and the global budget, plus
//! the configuration file's part as it was last applied.
//!
//! **Who owns what.** The configuration file and the admin API both change the registry. A
//! reload (SIGHUP, or a start-up) applies exactly what changed in the file since the last time
//! it was applied: a tenant added to the file is created, a tenant removed from the file is
//! deleted, a changed tenant takes the file's settings, a key removed from the file stops
//! working and a key added to it starts working. What the file did not change is left as the
//! admin API made it: keys issued through the API, tenants created through it, budgets edited
//! through it, and — because a removal of access must never be undone silently — keys revoked
//! and tenants deleted through it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::log::EntryKey;
use crate::config::{
    cross_tenant_problems, Config, ConfigProblem, GlobalBudgetConfig, TenantConfig,
};

/// The state format written today.
pub const VERSION: u32 = 2;

/// The configuration file's tenants and global budget, as last applied.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePart {
    #[serde(default)]
    pub global: GlobalBudgetConfig,
    #[serde(default)]
    pub tenants: BTreeMap<String, Arc<TenantConfig>>,
}

impl FilePart {
    /// The file's part of `config`, its tenants moved out (no copy of 100,000 configs).
    pub fn take(config: &mut Config) -> Self {
        Self {
            global: config.global.clone(),
            tenants: std::mem::take(&mut config.tenants)
                .into_iter()
                .map(|t| (t.id.clone(), Arc::new(t)))
                .collect(),
        }
    }

    pub fn of(config: &Config) -> Self {
        Self {
            global: config.global.clone(),
            tenants: config
                .tenants
                .iter()
                .map(|t| (t.id.clone(), Arc::new(t.clone())))
                .collect(),
        }
    }
}

/// The whole registry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryState {
    pub version: u32,
    pub global: GlobalBudgetConfig,
    /// Every tenant, by id, with every key that works for it. Shared with the file's part
    /// where the two are the same (most tenants, most of the time): at 100,000 tenants a
    /// second copy of each would be most of the registry's memory, and every change copies
    /// the state.
    pub tenants: BTreeMap<String, Arc<TenantConfig>>,
    /// The configuration file's part as last applied (absent in version 1 files).
    #[serde(default)]
    pub file: FilePart,
    /// Each key's version: how many changes made it, as read from the registry topic (a
    /// local registry counts its own from 0 at start). Not part of a state file.
    #[serde(skip)]
    pub versions: BTreeMap<EntryKey, u64>,
}

/// What a reload did, for the log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FileChanges {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub deleted: Vec<String>,
    /// Tenants the file changed that were deleted through the admin API: left deleted.
    pub kept_deleted: Vec<String>,
}

impl RegistryState {
    /// `key`'s version (0: never changed since this registry started).
    pub fn version(&self, key: &EntryKey) -> u64 {
        self.versions.get(key).copied().unwrap_or(0)
    }

    /// A registry holding exactly the configuration file's tenants and budget.
    pub fn from_config(config: &Config) -> Self {
        Self::from_file(FilePart::of(config))
    }

    /// A registry holding exactly the file's tenants and budget.
    pub fn from_file(file: FilePart) -> Self {
        Self {
            version: VERSION,
            global: file.global.clone(),
            tenants: file.tenants.clone(),
            file,
            versions: BTreeMap::new(),
        }
    }

    /// Applies what changed in the file since it was last applied (see the module comment).
    pub fn apply_file(&mut self, file: FilePart) -> FileChanges {
        let mut changes = FileChanges::default();
        if file.global != self.file.global {
            self.global = file.global.clone();
        }
        let ids: BTreeSet<String> = self
            .file
            .tenants
            .keys()
            .chain(file.tenants.keys())
            .cloned()
            .collect();
        for id in ids {
            match (self.file.tenants.get(&id), file.tenants.get(&id)) {
                (Some(_), None) if self.tenants.remove(&id).is_some() => {
                    changes.deleted.push(id);
                }
                (None, Some(new)) => {
                    let mut next = new.clone();
                    if let Some(existing) = self.tenants.get(&id) {
                        // Known through the API already: the file takes over its settings; the
                        // keys issued through the API keep working.
                        add_keys(
                            &mut Arc::make_mut(&mut next).api_key_sha256,
                            &existing.api_key_sha256,
                        );
                        changes.updated.push(id.clone());
                    } else {
                        changes.created.push(id.clone());
                    }
                    self.tenants.insert(id, next);
                }
                (Some(old), Some(new)) if old != new => {
                    let Some(current) = self.tenants.get(&id) else {
                        changes.kept_deleted.push(id);
                        continue;
                    };
                    let mut keys = current.api_key_sha256.clone();
                    keys.retain(|k| {
                        !old.api_key_sha256.contains(k) || new.api_key_sha256.contains(k)
                    });
                    let added: Vec<String> = new
                        .api_key_sha256
                        .iter()
                        .filter(|k| !old.api_key_sha256.contains(k))
                        .cloned()
                        .collect();
                    add_keys(&mut keys, &added);
                    let mut next = new.clone();
                    if next.api_key_sha256 != keys {
                        Arc::make_mut(&mut next).api_key_sha256 = keys;
                    }
                    self.tenants.insert(id.clone(), next);
                    changes.updated.push(id);
                }
                _ => {}
            }
        }
        self.file = file;
        self.share_file_tenants();
        changes
    }

    /// Makes the file's part hold the same configs as the tenants where they are equal (most
    /// of them): a re-read file's 100,000 configs would otherwise be kept beside the
    /// registry's, 45 MB.
    pub fn share_file_tenants(&mut self) {
        for (id, in_file) in self.file.tenants.iter_mut() {
            if let Some(held) = self.tenants.get(id) {
                if !Arc::ptr_eq(held, in_file) && **held == **in_file {
                    *in_file = held.clone();
                }
            }
        }
    }

    /// Every problem with this state, keys named as in a config file (`tenants[acme].topics`).
    pub fn problems(&self) -> Vec<ConfigProblem> {
        self.problems_since(None)
    }

    /// [`RegistryState::problems`] of a state made from `before` (checked already): a tenant
    /// it shares with `before` (the same `Arc`) is not checked again on its own; what spans
    /// tenants (ids, keys) is checked over all of them.
    pub fn problems_since(&self, before: Option<&RegistryState>) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if self.version != VERSION {
            problems.push(ConfigProblem::new(
                "version",
                format!(
                    "is {}; this floodgate reads version {VERSION}",
                    self.version
                ),
            ));
        }
        if let Err(p) = self.global.spec() {
            problems.push(p);
        }
        for (id, t) in &self.tenants {
            let checked = before
                .and_then(|b| b.tenants.get(id))
                .is_some_and(|b| Arc::ptr_eq(b, t));
            if checked {
                continue;
            }
            let at = format!("tenants[{id}]");
            if *id != t.id {
                problems.push(ConfigProblem::new(
                    format!("{at}.id"),
                    format!("is {:?}, but the tenant is stored under {id:?}", t.id),
                ));
            }
            problems.extend(t.problems(&at));
        }
        // The tenants this change touched go last, so that a key, claim or name two tenants
        // hold is reported at the changed one, naming the one that held it before.
        let changed = |id: &String, t: &Arc<TenantConfig>| {
            !before
                .and_then(|b| b.tenants.get(id))
                .is_some_and(|b| Arc::ptr_eq(b, t))
        };
        let (touched, kept): (Vec<_>, Vec<_>) =
            self.tenants.iter().partition(|(id, t)| changed(id, t));
        problems.extend(cross_tenant_problems(
            kept.into_iter()
                .chain(touched)
                .map(|(id, t)| (format!("tenants[{id}]"), &**t)),
        ));
        problems
    }

    /// Every tenant's configuration (shared, not copied).
    pub fn configs(&self) -> Vec<Arc<TenantConfig>> {
        self.tenants.values().cloned().collect()
    }
}

fn add_keys(keys: &mut Vec<String>, more: &[String]) {
    for k in more {
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str, keys: &[&str], rate: u64) -> TenantConfig {
        TenantConfig {
            id: id.into(),
            api_key_sha256: keys.iter().map(|k| k.repeat(64)).collect(),
            topics: vec!["t.*".into()],
            records_per_sec: Some(rate),
            ..TenantConfig::default()
        }
    }

    fn file(tenants: &[TenantConfig]) -> FilePart {
        FilePart {
            global: GlobalBudgetConfig::default(),
            tenants: tenants
                .iter()
                .map(|t| (t.id.clone(), Arc::new(t.clone())))
                .collect(),
        }
    }

    #[test]
    fn a_clash_is_reported_at_the_changed_tenant_naming_the_one_that_held_it() {
        let mut beta = tenant("beta", &["b"], 1);
        beta.cert_names = vec!["spiffe://mesh/orders".into()];
        let current = start(&[tenant("acme", &["a"], 1), beta]);
        let mut next = current.clone();
        let mut acme = (*next.tenants["acme"]).clone();
        acme.cert_names = vec!["spiffe://mesh/orders".into()];
        next.tenants.insert("acme".into(), Arc::new(acme));
        let problems = next.problems_since(Some(&current));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].key, "tenants[acme].cert_names[0]");
        assert!(
            problems[0].message.contains("\"beta\""),
            "{}",
            problems[0].message
        );
    }

    fn start(tenants: &[TenantConfig]) -> RegistryState {
        let mut s = RegistryState {
            version: VERSION,
            ..RegistryState::default()
        };
        s.apply_file(file(tenants));
        s
    }

    #[test]
    fn a_key_removed_from_the_file_stops_working_and_api_keys_stay() {
        let mut s = start(&[tenant("a", &["1", "2"], 5)]);
        if let Some(t) = s.tenants.get_mut("a") {
            Arc::make_mut(t).api_key_sha256.push("3".repeat(64));
        }
        let changes = s.apply_file(file(&[tenant("a", &["1"], 5)]));
        assert_eq!(changes.updated, vec!["a".to_string()]);
        assert_eq!(
            s.tenants["a"].api_key_sha256,
            vec!["1".repeat(64), "3".repeat(64)]
        );
    }

    #[test]
    fn what_the_file_did_not_change_stays_as_the_api_left_it() {
        let mut s = start(&[tenant("a", &["1"], 5), tenant("b", &["2"], 5)]);
        // Through the API: a's budget raised, b deleted, a key of a revoked.
        if let Some(t) = s.tenants.get_mut("a") {
            Arc::make_mut(t).records_per_sec = Some(50);
        }
        s.tenants.remove("b");
        s.global.records_per_sec = Some(777);
        let again = s.apply_file(file(&[tenant("a", &["1"], 5), tenant("b", &["2"], 5)]));
        assert_eq!(again, FileChanges::default());
        assert_eq!(s.tenants["a"].records_per_sec, Some(50));
        assert!(!s.tenants.contains_key("b"));
        assert_eq!(s.global.records_per_sec, Some(777));
        // The file changes b: it was deleted through the API, and stays deleted.
        let changed = s.apply_file(file(&[tenant("a", &["1"], 5), tenant("b", &["2"], 9)]));
        assert_eq!(changed.kept_deleted, vec!["b".to_string()]);
        assert!(!s.tenants.contains_key("b"));
    }

    #[test]
    fn tenants_follow_the_file_when_it_adds_or_removes_them() {
        let mut s = start(&[tenant("a", &["1"], 5)]);
        let c = s.apply_file(file(&[tenant("b", &["2"], 5)]));
        assert_eq!((c.created, c.deleted), (vec!["b".into()], vec!["a".into()]));
        assert_eq!(s.tenants.keys().collect::<Vec<_>>(), vec!["b"]);
    }

    #[test]
    fn problems_cover_version_ids_and_shared_keys() {
        let mut s = start(&[tenant("a", &["1"], 5), tenant("b", &["1"], 5)]);
        s.version = 7;
        if let Some(t) = s.tenants.get_mut("a") {
            Arc::make_mut(t).id = "z".into();
        }
        let keys: Vec<String> = s.problems().into_iter().map(|p| p.key).collect();
        assert!(keys.contains(&"version".to_string()), "{keys:?}");
        assert!(keys.contains(&"tenants[a].id".to_string()), "{keys:?}");
        assert!(
            keys.contains(&"tenants[b].api_key_sha256[0]".to_string()),
            "{keys:?}"
        );
    }

    /// A registry (a state file, the shared log) naming a tenant `..` or `_other` is refused
    /// like one the configuration names.
    #[test]
    fn a_registry_with_a_tenant_of_dots_only_or_the_metrics_sum_has_problems() {
        for id in ["..", "_other"] {
            let s = start(&[tenant(id, &["1"], 5)]);
            let keys: Vec<String> = s.problems().into_iter().map(|p| p.key).collect();
            assert!(
                keys.contains(&format!("tenants[{id}].id")),
                "{id}: {keys:?}"
            );
        }
    }
}
