//! The shared registry's rules, apart from Kafka itself: which entries a change writes, how an
//! entry applies to the state (the same way on every replica), and what is remembered of it
//! for the admin API's audit list and for the replica that wrote it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use serde::Serialize;

use super::log::{Entry, EntryKey, RegistryLog};
use super::state::{FilePart, RegistryState};
use crate::config::{GlobalBudgetConfig, TenantConfig};

/// Entries remembered for the audit list.
const AUDIT_KEPT: usize = 1000;
/// Outcomes remembered for writers waiting on their entries.
const OUTCOMES_KEPT: usize = 4096;

/// Why an entry was skipped (by every replica alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Made from an older version of the key: another change came first.
    Stale { key: String, current: u64 },
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

/// One audited entry, as `GET /admin/audit` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct AuditEntry {
    /// Its offset in the registry topic (`?since=` takes one).
    pub offset: i64,
    pub key: String,
    pub actor: String,
    pub action: String,
    /// The replica that made the change.
    pub replica: String,
    /// The key's version before, and after if it applied.
    pub base_version: u64,
    pub version: Option<u64>,
    /// `applied`, or why every replica skipped it.
    pub outcome: String,
    /// The key's value before and after (key ids only; never a key, a digest or a token).
    pub before: serde_json::Value,
    pub after: serde_json::Value,
}

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
        base: current.versions.get(&key.as_string()).copied().unwrap_or(0),
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
    let ids: std::collections::BTreeSet<&String> =
        current.tenants.keys().chain(next.tenants.keys()).collect();
    for id in ids {
        let (before, after) = (current.tenants.get(id), next.tenants.get(id));
        if before != after {
            let value = after.and_then(|t| serde_json::to_vec(t).ok());
            out.push(entry(EntryKey::Tenant(id.clone()), value));
        }
    }
    if current.file != next.file {
        out.push(entry(EntryKey::File, serde_json::to_vec(&next.file).ok()));
    }
    out
}

/// Applies one entry to `state` if it was made from the key's current version; the caller
/// then checks that the result is a valid registry.
pub fn apply(state: &mut RegistryState, entry: &Entry) -> Result<(), Rejection> {
    let key = entry.key.as_string();
    let current = state.versions.get(&key).copied().unwrap_or(0);
    if entry.base != current {
        return Err(Rejection::Stale { key, current });
    }
    let parse_err = |e: serde_json::Error| Rejection::Malformed(format!("{key}: {e}"));
    match (&entry.key, &entry.value) {
        (EntryKey::Global, Some(v)) => {
            state.global = serde_json::from_slice::<GlobalBudgetConfig>(v).map_err(parse_err)?;
        }
        (EntryKey::File, Some(v)) => {
            state.file = serde_json::from_slice::<FilePart>(v).map_err(parse_err)?;
        }
        (EntryKey::Tenant(id), Some(v)) => {
            let tenant = serde_json::from_slice::<TenantConfig>(v).map_err(parse_err)?;
            if tenant.id != *id {
                return Err(Rejection::Malformed(format!(
                    "{key} holds tenant {:?}",
                    tenant.id
                )));
            }
            state
                .tenants
                .insert(id.clone(), std::sync::Arc::new(tenant));
        }
        (EntryKey::Tenant(id), None) => {
            state.tenants.remove(id);
        }
        (EntryKey::Global | EntryKey::File, None) => {
            return Err(Rejection::Malformed(format!("{key} cannot be deleted")));
        }
    }
    let next = current
        .checked_add(1)
        .ok_or_else(|| Rejection::Malformed(format!("{key}: no version after {current}")))?;
    state.versions.insert(key, next);
    Ok(())
}

/// The value of `key` in `state`, for the audit list.
pub fn value_of(state: &RegistryState, key: &EntryKey) -> serde_json::Value {
    match key {
        EntryKey::Global => serde_json::json!(state.global),
        EntryKey::File => {
            let tenants: serde_json::Map<String, serde_json::Value> = state
                .file
                .tenants
                .iter()
                .map(|(id, t)| (id.clone(), super::audit::tenant_view(t)))
                .collect();
            serde_json::json!({"global": state.file.global, "tenants": tenants})
        }
        EntryKey::Tenant(id) => state
            .tenants
            .get(id)
            .map_or(serde_json::Value::Null, |t| super::audit::tenant_view(t)),
    }
}

/// The shared registry's moving parts on this replica.
#[derive(Debug)]
pub struct Shared {
    pub log: RegistryLog,
    pub replica: String,
    /// The configuration file's part, written to an empty topic at first start (`None`: never
    /// seed, as the export and import commands do).
    pub seed: Option<FilePart>,
    /// One local writer at a time (each waits for its entries to come back).
    pub writer: tokio::sync::Mutex<()>,
    /// The next offset the follower will apply.
    pub applied: tokio::sync::watch::Sender<i64>,
    /// How recent entries ended, by offset, for writers waiting on them.
    pub outcomes: Mutex<BTreeMap<i64, Result<(), Rejection>>>,
    pub audit: Mutex<VecDeque<AuditEntry>>,
    /// Caught up with the topic's end as read at start-up.
    pub loaded: AtomicBool,
    /// Records of the topic that were not entries, by [`super::log::Refused::REASONS`], and
    /// whether each reason has been logged (once, with its first offset).
    pub refused: [std::sync::atomic::AtomicU64; 3],
    pub refusal_logged: [AtomicBool; 3],
}

impl Shared {
    pub fn new(log: RegistryLog, replica: String, seed: Option<FilePart>) -> Self {
        Self {
            log,
            replica,
            seed,
            writer: tokio::sync::Mutex::new(()),
            applied: tokio::sync::watch::channel(0).0,
            outcomes: Mutex::new(BTreeMap::new()),
            audit: Mutex::new(VecDeque::new()),
            loaded: AtomicBool::new(false),
            refused: Default::default(),
            refusal_logged: Default::default(),
        }
    }

    pub fn remember(&self, offset: i64, outcome: Result<(), Rejection>, audit: AuditEntry) {
        let mut outcomes = self
            .outcomes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        outcomes.insert(offset, outcome);
        while outcomes.len() > OUTCOMES_KEPT {
            outcomes.pop_first();
        }
        drop(outcomes);
        let mut list = self
            .audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        list.push_back(audit);
        while list.len() > AUDIT_KEPT {
            list.pop_front();
        }
    }

    pub fn outcome(&self, offset: i64) -> Option<Result<(), Rejection>> {
        self.outcomes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&offset)
            .cloned()
    }

    /// Audited entries at or after `since`.
    pub fn audit_since(&self, since: i64) -> Vec<AuditEntry> {
        self.audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|a| a.offset >= since)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str, rate: u64) -> TenantConfig {
        TenantConfig {
            id: id.into(),
            api_key_sha256: vec![format!("{:064}", rate)],
            topics: vec!["t.*".into()],
            records_per_sec: Some(rate),
            ..TenantConfig::default()
        }
    }

    fn state_with(tenants: &[TenantConfig]) -> RegistryState {
        let mut s = RegistryState {
            version: super::super::VERSION,
            ..RegistryState::default()
        };
        for t in tenants {
            s.tenants
                .insert(t.id.clone(), std::sync::Arc::new(t.clone()));
        }
        s
    }

    #[test]
    fn a_change_writes_one_entry_per_changed_key_from_its_current_version() {
        let mut current = state_with(&[tenant("a", 1), tenant("b", 2)]);
        current.versions.insert("tenant:a".into(), 4);
        let mut next = current.clone();
        next.tenants
            .insert("a".into(), std::sync::Arc::new(tenant("a", 10)));
        next.tenants.remove("b");
        let written = entries(&current, &next, "ops", "tenant.patch", "r1");
        assert_eq!(written.len(), 2);
        assert_eq!(
            (written[0].key.clone(), written[0].base),
            (EntryKey::Tenant("a".into()), 4)
        );
        assert_eq!(
            (
                written[1].key.clone(),
                written[1].base,
                written[1].value.clone()
            ),
            (EntryKey::Tenant("b".into()), 0, None),
            "a deletion is a tombstone"
        );
    }

    #[test]
    fn of_two_changes_from_the_same_version_only_the_first_applies() {
        let current = state_with(&[tenant("a", 1)]);
        let mut one = current.clone();
        one.tenants
            .insert("a".into(), std::sync::Arc::new(tenant("a", 10)));
        let mut two = current.clone();
        two.tenants
            .insert("a".into(), std::sync::Arc::new(tenant("a", 20)));
        let first = entries(&current, &one, "ops", "x", "r1");
        let second = entries(&current, &two, "ops", "x", "r2");
        let mut replica = current.clone();
        assert_eq!(apply(&mut replica, &first[0]), Ok(()));
        assert_eq!(
            apply(&mut replica, &second[0]),
            Err(Rejection::Stale {
                key: "tenant:a".into(),
                current: 1
            })
        );
        assert_eq!(replica.tenants["a"].records_per_sec, Some(10));
        assert_eq!(replica.versions["tenant:a"], 1);
    }

    #[test]
    fn a_garbage_value_is_malformed_and_changes_nothing() {
        let mut s = state_with(&[]);
        let entry = Entry {
            key: EntryKey::Tenant("x".into()),
            base: 0,
            value: Some(b"not json".to_vec()),
            actor: "a".into(),
            action: "b".into(),
            replica: "c".into(),
        };
        assert!(matches!(
            apply(&mut s, &entry),
            Err(Rejection::Malformed(_))
        ));
        assert!(s.tenants.is_empty() && s.versions.is_empty());
    }
}
