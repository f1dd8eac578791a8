//! How an entry applies to the state: the same way on every replica, one at a time, and when
//! a refused one says what the state holds already.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{ConfigProblem, GlobalBudgetConfig, TenantConfig};
use crate::identity::ApiKeyHash;
use crate::registry::log::{Entry, EntryKey};
use crate::registry::state::RegistryState;

/// Why an entry was skipped (by every replica alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Made from an older version of the key: another change came first.
    Stale { key: EntryKey, current: u64 },
    /// The registry it leads to is not valid (a key another tenant has, ...).
    Invalid(String),
    /// Not a registry entry at all.
    Malformed(String),
}

impl Rejection {
    pub fn describe(&self) -> String {
        match self {
            Rejection::Stale { key, current } => {
                format!("{key} was changed meanwhile; its current version is {current}")
            }
            Rejection::Invalid(d) => format!("invalid: {d}"),
            Rejection::Malformed(d) => format!("malformed: {d}"),
        }
    }
}

/// Applies entries to a state the same way on every replica, one at a time, without going
/// over every tenant for each: it knows which tenant holds each key digest.
#[derive(Debug, Default)]
pub struct Applier {
    owners: HashMap<ApiKeyHash, String>,
}

impl Applier {
    pub fn new(state: &RegistryState) -> Self {
        let mut owners = HashMap::new();
        for (id, t) in &state.tenants {
            for digest in t.key_digests() {
                owners.insert(digest, id.clone());
            }
        }
        Self { owners }
    }

    /// Applies `entry` to `state` if it carries a newer version of its key than `state` holds
    /// and leaves a valid registry; otherwise changes nothing and says why.
    pub fn apply(&mut self, state: &mut RegistryState, entry: &Entry) -> Result<(), Rejection> {
        let key = &entry.key;
        let current = state.version(key);
        let version = entry.version().ok_or_else(|| {
            Rejection::Malformed(format!("{key}: no version after {}", entry.base))
        })?;
        if version <= current {
            return Err(Rejection::Stale {
                key: key.clone(),
                current,
            });
        }
        let parse_err = |e: serde_json::Error| Rejection::Malformed(format!("{key}: {e}"));
        let invalid = |p: ConfigProblem| Rejection::Invalid(p.to_string());
        match (&entry.key, &entry.value) {
            (EntryKey::Global, Some(v)) => {
                let global = serde_json::from_slice::<GlobalBudgetConfig>(v).map_err(parse_err)?;
                global.spec().map_err(invalid)?;
                state.global = global;
            }
            (EntryKey::Global, None) => {
                return Err(Rejection::Malformed(format!("{key} cannot be deleted")));
            }
            (EntryKey::Tenant(id), Some(v)) => {
                let tenant = serde_json::from_slice::<TenantConfig>(v).map_err(parse_err)?;
                if tenant.id != *id {
                    return Err(Rejection::Malformed(format!(
                        "{key} holds tenant {:?}",
                        tenant.id
                    )));
                }
                let at = format!("tenants[{id}]");
                if let Some(p) = tenant.problems(&at).into_iter().next() {
                    return Err(invalid(p));
                }
                for (i, digest) in tenant.key_digests().enumerate() {
                    match self.owners.get(&digest) {
                        Some(owner) if owner != id => {
                            return Err(invalid(ConfigProblem::new(
                                format!("{at}.api_key_sha256[{i}]"),
                                format!("this key already belongs to tenant {owner:?}"),
                            )))
                        }
                        _ => {}
                    }
                }
                crate::tenant::Directory::plan(std::slice::from_ref(&tenant)).map_err(invalid)?;
                self.forget_keys(state, id);
                for digest in tenant.key_digests() {
                    self.owners.insert(digest, id.clone());
                }
                state.tenants.insert(id.clone(), Arc::new(tenant));
            }
            (EntryKey::Tenant(id), None) => {
                self.forget_keys(state, id);
                state.tenants.remove(id);
            }
            (EntryKey::FileGlobal, Some(v)) => {
                state.file.global =
                    serde_json::from_slice::<GlobalBudgetConfig>(v).map_err(parse_err)?;
            }
            (EntryKey::FileTenant(id), Some(v)) => {
                let tenant = serde_json::from_slice::<TenantConfig>(v).map_err(parse_err)?;
                if tenant.id != *id {
                    return Err(Rejection::Malformed(format!(
                        "{key} holds tenant {:?}",
                        tenant.id
                    )));
                }
                // The registry's config where the two are equal (most tenants): one copy.
                let tenant = match state.tenants.get(id) {
                    Some(held) if **held == tenant => held.clone(),
                    _ => Arc::new(tenant),
                };
                state.file.tenants.insert(id.clone(), tenant);
            }
            (EntryKey::FileTenant(id), None) => {
                state.file.tenants.remove(id);
            }
            (EntryKey::FileGlobal, None) => {
                return Err(Rejection::Malformed(format!("{key} cannot be deleted")));
            }
        }
        state.versions.insert(key.clone(), version);
        Ok(())
    }

    fn forget_keys(&mut self, state: &RegistryState, id: &str) {
        if let Some(old) = state.tenants.get(id) {
            for digest in old.key_digests() {
                if self.owners.get(&digest).is_some_and(|o| o == id) {
                    self.owners.remove(&digest);
                }
            }
        }
    }
}

/// Whether `entry`, refused as stale, says what `state` holds already (the same version and
/// value): nothing to write again when it is the last record of its key.
pub fn is_echo(state: &RegistryState, entry: &Entry) -> bool {
    if entry.version() != state.versions.get(&entry.key).copied() {
        return false;
    }
    let same_tenant = |held: Option<&Arc<TenantConfig>>, v: &[u8]| {
        serde_json::from_slice::<TenantConfig>(v)
            .is_ok_and(|t| held.is_some_and(|held| **held == t))
    };
    let same_global = |held: &GlobalBudgetConfig, v: &[u8]| {
        serde_json::from_slice::<GlobalBudgetConfig>(v).is_ok_and(|g| g == *held)
    };
    match (&entry.key, &entry.value) {
        (EntryKey::Global, Some(v)) => same_global(&state.global, v),
        (EntryKey::FileGlobal, Some(v)) => same_global(&state.file.global, v),
        (EntryKey::Tenant(id), Some(v)) => same_tenant(state.tenants.get(id), v),
        (EntryKey::FileTenant(id), Some(v)) => same_tenant(state.file.tenants.get(id), v),
        (EntryKey::Tenant(id), None) => !state.tenants.contains_key(id),
        (EntryKey::FileTenant(id), None) => !state.file.tenants.contains_key(id),
        (EntryKey::Global | EntryKey::FileGlobal, None) => false,
    }
}
