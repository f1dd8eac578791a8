//! The shared registry's rules, apart from Kafka itself: which entries a change writes, how an
//! entry applies to the state (the same way on every replica), and what is remembered of it
//! for the admin API's audit list and for the replica that wrote it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::log::{Entry, EntryKey, RegistryLog};
use super::state::{FilePart, RegistryState};
use crate::config::{ConfigProblem, GlobalBudgetConfig, TenantConfig};
use crate::identity::ApiKeyHash;

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
    let ids: std::collections::BTreeSet<&String> = current
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
    let version = state.versions.get(&key.as_string()).copied().unwrap_or(0);
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
        let key = entry.key.as_string();
        let current = state.versions.get(&key).copied().unwrap_or(0);
        let version = entry.version().ok_or_else(|| {
            Rejection::Malformed(format!("{key}: no version after {}", entry.base))
        })?;
        if version <= current {
            return Err(Rejection::Stale { key, current });
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
                crate::tenant::Registry::plan(std::slice::from_ref(&tenant)).map_err(invalid)?;
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
        state.versions.insert(key, version);
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
    let key = entry.key.as_string();
    if entry.version() != state.versions.get(&key).copied() {
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

/// The value of `key` in `state`, for the audit list.
pub fn value_of(state: &RegistryState, key: &EntryKey) -> serde_json::Value {
    match key {
        EntryKey::Global => serde_json::json!(state.global),
        EntryKey::Tenant(id) => state
            .tenants
            .get(id)
            .map_or(serde_json::Value::Null, |t| super::audit::tenant_view(t)),
        EntryKey::FileGlobal => serde_json::json!(state.file.global),
        EntryKey::FileTenant(id) => state
            .file
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
    /// The topic holds records and none of them verifies with this replica's secrets: a
    /// wrong `[cluster] registry_secret_env`, most likely. The replica does not become ready.
    pub unverified: AtomicBool,
    /// Records of the topic every replica skipped, by [`SKIPPED`], and whether each reason has
    /// been logged (once, with its first offset).
    pub skipped: [std::sync::atomic::AtomicU64; SKIPPED.len()],
    pub skip_logged: [AtomicBool; SKIPPED.len()],
    /// Keys to write again (see [`Rewrites`]).
    pub rewrites: Mutex<Rewrites>,
    /// Entries this replica wrote again.
    pub rewritten: std::sync::atomic::AtomicU64,
}

/// Why records are skipped: the three of [`super::log::Refused::REASONS`], then the rules'.
pub const SKIPPED: [&str; 5] = ["unsigned", "bad_mac", "malformed", "stale", "invalid"];
pub const STALE: usize = 3;
pub const INVALID: usize = 4;

/// Keys whose last record in the topic is not what the replicas hold, to be written again
/// before compaction makes the record the only one of its key.
#[derive(Debug, Default)]
pub struct Rewrites {
    /// The last record was refused and says something else (a race's loser, a replayed old
    /// record): its current value again, as a new version.
    pub reassert: BTreeSet<EntryKey>,
    /// The last entry that applied was signed with an older secret: the same entry signed
    /// with the current one.
    pub resign: BTreeSet<EntryKey>,
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
            unverified: AtomicBool::new(false),
            skipped: Default::default(),
            skip_logged: Default::default(),
            rewrites: Mutex::new(Rewrites::default()),
            rewritten: Default::default(),
        }
    }

    pub fn rewrites(&self) -> std::sync::MutexGuard<'_, Rewrites> {
        self.rewrites
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Remembers how the entry at `offset` ended (for a writer waiting on it) and, unless
    /// `audit` is `None`, lists it in the audit.
    pub fn remember(&self, offset: i64, outcome: Result<(), Rejection>, audit: Option<AuditEntry>) {
        let mut outcomes = self
            .outcomes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        outcomes.insert(offset, outcome);
        while outcomes.len() > OUTCOMES_KEPT {
            outcomes.pop_first();
        }
        drop(outcomes);
        let Some(audit) = audit else {
            return;
        };
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

    fn apply(state: &mut RegistryState, entry: &Entry) -> Result<(), Rejection> {
        Applier::new(state).apply(state, entry)
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
        assert!(
            !is_echo(&replica, &second[0]),
            "the loser says something else"
        );
        assert!(is_echo(&replica, &first[0]));
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

    #[test]
    fn a_key_another_tenant_holds_is_invalid_and_freed_when_that_tenant_lets_it_go() {
        let mut s = state_with(&[]);
        let mut applier = Applier::new(&s);
        let put = |t: &TenantConfig, base: u64| Entry {
            key: EntryKey::Tenant(t.id.clone()),
            base,
            value: serde_json::to_vec(t).ok(),
            actor: "a".into(),
            action: "b".into(),
            replica: "c".into(),
        };
        let a = tenant("a", 7);
        let mut b = tenant("b", 7); // the same digest as a's
        assert_eq!(applier.apply(&mut s, &put(&a, 0)), Ok(()));
        assert!(matches!(
            applier.apply(&mut s, &put(&b, 0)),
            Err(Rejection::Invalid(d)) if d.contains("already belongs to tenant \"a\"")
        ));
        assert!(!s.tenants.contains_key("b"));
        let mut a2 = a.clone();
        a2.api_key_sha256 = vec![format!("{:064}", 8)];
        assert_eq!(applier.apply(&mut s, &put(&a2, 1)), Ok(()));
        assert_eq!(
            applier.apply(&mut s, &put(&b, 0)),
            Ok(()),
            "a's old key is free"
        );
        b.records_per_sec = Some(1);
        let mut deleted = put(&a2, 2);
        deleted.value = None;
        assert_eq!(applier.apply(&mut s, &deleted), Ok(()));
        assert!(!s.tenants.contains_key("a"));
        assert_eq!(s.versions["tenant:a"], 3, "a deletion keeps its version");
        // A replayed older record of a is refused: it does not bring the tenant back.
        assert!(matches!(
            applier.apply(&mut s, &put(&a, 0)),
            Err(Rejection::Stale { current: 3, .. })
        ));
    }

    /// Compaction keeps the last record of each Kafka key. With versions carried in the
    /// records and every refused record followed by a rewrite of its key, a replica that reads
    /// the compacted topic holds what the replicas that read it whole hold.
    #[test]
    fn a_replica_reading_the_compacted_log_holds_what_the_others_hold() {
        let put = |t: &TenantConfig, base: u64, replica: &str| Entry {
            key: EntryKey::Tenant(t.id.clone()),
            base,
            value: serde_json::to_vec(t).ok(),
            actor: "ops".into(),
            action: "x".into(),
            replica: replica.into(),
        };
        let (a1, a2, b1) = (tenant("a", 1), tenant("a", 2), tenant("b", 3));
        let mut deleted_b = put(&b1, 1, "r1");
        deleted_b.value = None;
        // a: created, then two replicas change it from version 1 (r2 loses); b: created, then
        // deleted; a record of b's creation replayed at the end.
        let mut log = vec![
            put(&a1, 0, "r1"),
            put(&b1, 0, "r1"),
            put(&a2, 1, "r1"),
            put(&tenant("a", 9), 1, "r2"),
            deleted_b,
            put(&b1, 0, "r1"),
        ];
        let mut whole = state_with(&[]);
        let mut applier = Applier::new(&whole);
        let mut to_rewrite = BTreeSet::new();
        for entry in &log {
            match applier.apply(&mut whole, entry) {
                Ok(()) => {
                    to_rewrite.remove(&entry.key);
                }
                Err(_) if is_echo(&whole, entry) => {}
                Err(_) => {
                    to_rewrite.insert(entry.key.clone());
                }
            }
        }
        assert_eq!(
            to_rewrite.len(),
            2,
            "a (the race's loser) and b (the replay)"
        );
        let versions = whole.versions.clone();
        for key in &to_rewrite {
            let again = rewrite(&whole, key, false, "r1");
            assert!(applier.apply(&mut whole, &again).is_err());
            assert!(is_echo(&whole, &again), "an echo: nothing moves");
            log.push(again);
        }
        assert_eq!(whole.versions, versions, "no version moved");
        // The compacted log: the last record of each key, in order.
        let mut last = BTreeMap::new();
        for (i, entry) in log.iter().enumerate() {
            last.insert(entry.key.clone(), i);
        }
        let mut kept: Vec<usize> = last.into_values().collect();
        kept.sort_unstable();
        let mut fresh = state_with(&[]);
        let mut fresh_applier = Applier::new(&fresh);
        for i in kept {
            assert_eq!(fresh_applier.apply(&mut fresh, &log[i]), Ok(()));
        }
        assert_eq!(fresh.tenants, whole.tenants);
        assert_eq!(
            fresh.tenants["a"].records_per_sec,
            Some(2),
            "the race's winner"
        );
        assert!(!fresh.tenants.contains_key("b"), "the deletion holds");
    }

    #[test]
    fn signing_again_writes_the_same_version_and_value() {
        let mut s = state_with(&[]);
        let mut applier = Applier::new(&s);
        let t = tenant("a", 1);
        let entry = Entry {
            key: EntryKey::Tenant("a".into()),
            base: 0,
            value: serde_json::to_vec(&t).ok(),
            actor: "ops".into(),
            action: "x".into(),
            replica: "r".into(),
        };
        assert_eq!(applier.apply(&mut s, &entry), Ok(()));
        let again = rewrite(&s, &entry.key, true, "r");
        assert_eq!((again.base, again.version()), (0, Some(1)));
        let unknown = rewrite(&s, &EntryKey::Tenant("never".into()), false, "r");
        assert_eq!((unknown.version(), unknown.value), (Some(1), None));
        assert!(matches!(
            applier.apply(&mut s, &again),
            Err(Rejection::Stale { .. })
        ));
        assert!(is_echo(&s, &again), "nothing to write again after it");
    }
}
