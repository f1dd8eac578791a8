//! Which entries a change writes: one per changed key, each made from the key's current
//! version; and the entry that made a key's state, written again.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::registry::log::{Entry, EntryKey};
use crate::registry::state::RegistryState;

/// The entries that turn `current` into `next`, one per changed key, each made from the key's
/// current version.
pub fn entries(
    current: &RegistryState,
    next: &RegistryState,
    actor: &str,
    action: &str,
    replica: &str,
) -> Vec<Entry> {
    let mut out = Vec::new();
    let entry = |key: EntryKey, value: Option<Vec<u8>>| Entry {
        base: current.version(&key),
        key,
        value,
        actor: actor.to_string(),
        action: action.to_string(),
        replica: replica.to_string(),
    };
    if current.global != next.global {
        out.push(entry(
            EntryKey::Global,
            serde_json::to_vec(&next.global).ok(),
        ));
    }
    let ids: BTreeSet<&String> = current.tenants.keys().chain(next.tenants.keys()).collect();
    for id in ids {
        let (before, after) = (current.tenants.get(id), next.tenants.get(id));
        if !same(before, after) {
            let value = after.and_then(|t| serde_json::to_vec(t).ok());
            out.push(entry(EntryKey::Tenant(id.clone()), value));
        }
    }
    if current.file.global != next.file.global {
        out.push(entry(
            EntryKey::FileGlobal,
            serde_json::to_vec(&next.file.global).ok(),
        ));
    }
    let ids: BTreeSet<&String> = current
        .file
        .tenants
        .keys()
        .chain(next.file.tenants.keys())
        .collect();
    for id in ids {
        let (before, after) = (current.file.tenants.get(id), next.file.tenants.get(id));
        if !same(before, after) {
            let value = after.and_then(|t| serde_json::to_vec(t).ok());
            out.push(entry(EntryKey::FileTenant(id.clone()), value));
        }
    }
    out
}

/// Equal, seen first by identity: a change shares every tenant it does not touch, and
/// comparing 100,000 unchanged configurations field by field was a tenth of a change's time.
fn same<T: PartialEq>(a: Option<&Arc<T>>, b: Option<&Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
        (None, None) => true,
        _ => false,
    }
}

/// `key`'s value in `state`, as an entry carries it.
fn value_bytes(state: &RegistryState, key: &EntryKey) -> Option<Vec<u8>> {
    match key {
        EntryKey::Global => serde_json::to_vec(&state.global).ok(),
        EntryKey::Tenant(id) => state
            .tenants
            .get(id)
            .and_then(|t| serde_json::to_vec(t).ok()),
        EntryKey::FileGlobal => serde_json::to_vec(&state.file.global).ok(),
        EntryKey::FileTenant(id) => state
            .file
            .tenants
            .get(id)
            .and_then(|t| serde_json::to_vec(t).ok()),
    }
}

/// The entry that made `key`'s current state, written again (signed with the current
/// secret): the same version and value, so every replica that holds it skips it as an echo —
/// no version moves, nothing is rebuilt or audited — and compaction keeps it as the last
/// record of its key. A key no entry ever made (version 0) gets a first version instead.
pub fn rewrite(state: &RegistryState, key: &EntryKey, resign: bool, replica: &str) -> Entry {
    let version = state.version(key);
    let value = value_bytes(state, key);
    Entry {
        key: key.clone(),
        base: version.saturating_sub(1),
        value,
        actor: "floodgate".into(),
        action: if resign {
            "registry.resign"
        } else {
            "registry.reassert"
        }
        .into(),
        replica: replica.to_string(),
    }
}
