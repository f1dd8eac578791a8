//! What this replica remembers of the shared registry: the follower's progress, how recent
//! entries ended (for the writers waiting on them), the audit list, and the keys to write
//! again.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use serde::Serialize;

use super::Rejection;
use crate::registry::log::{EntryKey, RegistryLog};
use crate::registry::state::{FilePart, RegistryState};

/// Entries remembered for the audit list.
const AUDIT_KEPT: usize = 1000;
/// Outcomes remembered for writers waiting on their entries.
const OUTCOMES_KEPT: usize = 4096;

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

/// The value of `key` in `state`, for the audit list.
pub fn value_of(state: &RegistryState, key: &EntryKey) -> serde_json::Value {
    match key {
        EntryKey::Global => serde_json::json!(state.global),
        EntryKey::Tenant(id) => state.tenants.get(id).map_or(serde_json::Value::Null, |t| {
            crate::registry::audit::tenant_view(t)
        }),
        EntryKey::FileGlobal => serde_json::json!(state.file.global),
        EntryKey::FileTenant(id) => state
            .file
            .tenants
            .get(id)
            .map_or(serde_json::Value::Null, |t| {
                crate::registry::audit::tenant_view(t)
            }),
    }
}

/// The shared registry's moving parts on this replica.
#[derive(Debug)]
pub struct SharedRegistry {
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

/// Why records are skipped: the three of [`crate::registry::log::Refused::REASONS`], then the rules'.
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

impl SharedRegistry {
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
