//! The shared registry's follower: reads the registry topic from its start for as long as the
//! process runs and applies every entry, from any replica, the same way; and writes again the
//! keys whose last record is not what the replicas hold (see [`super::log`]).
//!
//! Entries are applied to the state one at a time and checked against it without going over
//! every tenant ([`Applier`]); the live registry is rebuilt once per batch of what has arrived,
//! and not at all until the topic has been read to its end: catching up with 100,000 entries
//! is one rebuild, not 100,000.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::audit::{self, Actor};
use super::log::{self, Decoded, Refused};
use super::shared::{
    self, Applier, AuditEntry, Rejection, SharedRegistry, INVALID, SKIPPED, STALE,
};
use super::state::{RegistryState, VERSION};
use super::{Backend, RegistryStore};
use crate::kafka::{LogReader, LogRecord};

/// Records applied together, at most (then the live registry is rebuilt once).
const BATCH: usize = 8192;
/// Keys written again per round, at most (a replay flood cannot make a write flood).
const REWRITES_PER_ROUND: usize = 1000;
/// How often the keys to write again are looked at.
const REWRITE_EVERY: Duration = Duration::from_secs(1);

/// One record as read: its offset, its key if this replica writes under it (see
/// [`log::own_key`]), and the entry in it or why it is none.
type Read = (i64, Option<log::EntryKey>, Result<Decoded, Refused>);

/// What the follower keeps between batches.
struct Progress {
    applier: Applier,
    /// The state changed since the live registry was last rebuilt.
    dirty: bool,
    /// The offset after the topic's last record, as found at start-up.
    end: i64,
    /// Whether any record so far verified (with any of the secrets).
    authentic: bool,
    /// Whether any record carried a MAC no secret verifies (a wrong secret, most likely).
    bad_mac: bool,
    /// Whether this replica seeded a topic that held only unsigned records.
    seeded: bool,
}

impl RegistryStore {
    /// Shared registry: reads the topic from its start and applies every entry, for as long
    /// as the process runs. Returns at once for a local registry.
    pub async fn follow(self: Arc<Self>) {
        let Backend::Shared(shared) = &self.backend else {
            return;
        };
        let mut pause = Duration::from_millis(100);
        // Until the topic exists and its end is known; Kafka may be away at start-up.
        let (reader, end) = loop {
            match self.open_reader(shared).await {
                Ok(found) => break found,
                Err(e) => {
                    tracing::warn!(error = %e, topic = shared.log.topic(),
                        "registry topic not readable yet; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        };
        tracing::info!(
            topic = shared.log.topic(),
            end,
            "reading the tenant registry"
        );
        if end <= 0 {
            shared.loaded.store(true, Ordering::Release);
            tracing::info!(
                "tenant registry loaded (empty topic; seeded from the configuration file)"
            );
        }
        let rewriter = tokio::spawn(self.clone().rewrite_loop());
        let _stop_rewriting = AbortOnDrop(rewriter);
        let mut progress = Progress {
            applier: Applier::new(&*self.state.lock().await),
            dirty: false,
            end,
            authentic: false,
            bad_mac: false,
            seeded: false,
        };
        loop {
            let first = match reader.recv().await {
                Ok(message) => read(&message, shared),
                Err(e) => {
                    tracing::warn!(error = %e, "registry topic read failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let mut batch = vec![first];
            // What has arrived already is applied with it, and installed once.
            while batch.len() < BATCH {
                // A zero timeout polls once: a record already fetched, or none.
                match tokio::time::timeout(Duration::ZERO, reader.recv()).await {
                    Ok(Ok(message)) => batch.push(read(&message, shared)),
                    _ => break,
                }
            }
            self.apply_batch(shared, &mut progress, batch).await;
        }
    }

    /// Creates the topic if needed, seeds an empty one, and returns a reader with the end
    /// offset to catch up with.
    async fn open_reader(
        &self,
        shared: &SharedRegistry,
    ) -> Result<(LogReader, i64), log::LogError> {
        shared.log.ensure_topic().await?;
        let reader = shared.log.reader(&shared.replica)?;
        let mut end = shared.log.end_offset(&reader).await?;
        if end == 0 {
            // First start of the cluster: the configuration file's part seeds the topic.
            // Replicas starting together may both seed; every entry is made from version 0,
            // so the second of each key is refused by every replica alike.
            if self.seed(shared).await? > 0 {
                end = shared.log.end_offset(&reader).await?.max(1);
            }
        }
        Ok((reader, end))
    }

    /// Applies a batch of records in order; rebuilds the live registry once if anything
    /// applied (and the topic has been read to its end); then tells waiting writers.
    async fn apply_batch(
        &self,
        shared: &SharedRegistry,
        progress: &mut Progress,
        batch: Vec<Read>,
    ) {
        let mut state = self.state.lock().await;
        let mut last = 0;
        let mut outcomes = Vec::with_capacity(batch.len());
        for (offset, own_key, decoded) in batch {
            last = offset;
            match decoded {
                Ok(decoded) => {
                    outcomes.push(applied(shared, progress, &mut state, offset, decoded))
                }
                Err(refused) => outcomes.extend(not_an_entry(
                    shared, progress, &state, offset, own_key, refused,
                )),
            }
        }
        let caught_up = last + 1 >= progress.end;
        let loaded = shared.loaded.load(Ordering::Acquire);
        if caught_up && !loaded {
            state.share_file_tenants();
        }
        if progress.dirty && (loaded || caught_up) {
            self.install_state(&state);
            progress.dirty = false;
        }
        drop(state);
        for (offset, outcome, audit) in outcomes {
            shared.remember(offset, outcome, audit);
        }
        let _ = shared.applied.send(last + 1);
        if caught_up && !loaded {
            self.caught_up(shared, progress).await;
        }
    }

    /// The topic has been read to its end for the first time: the registry is loaded if a
    /// record verified; not ready if records carry MACs none of the secrets verifies; seeded
    /// if it held only unsigned records.
    async fn caught_up(&self, shared: &SharedRegistry, progress: &mut Progress) {
        if progress.authentic {
            shared.unverified.store(false, Ordering::Release);
            shared.loaded.store(true, Ordering::Release);
            tracing::info!(
                tenants = self.tenants.load().len(),
                "tenant registry loaded from the registry topic"
            );
        } else if progress.bad_mac {
            if !shared.unverified.swap(true, Ordering::AcqRel) {
                tracing::error!(
                    topic = shared.log.topic(),
                    "no record of the registry topic verifies with this replica's secrets ([cluster] registry_secret_env), and some carry a MAC: not ready until one verifies"
                );
            }
        } else if !progress.seeded {
            // Only unsigned records (written by no replica): the registry was never
            // written, as with an empty topic. Seed it (or, with nothing to seed, start
            // empty), rather than let one stray record keep the cluster from starting.
            progress.seeded = true;
            tracing::warn!(
                topic = shared.log.topic(),
                "the registry topic holds only unsigned records; seeding it as an empty one"
            );
            match self.seed(shared).await {
                Ok(0) | Err(_) => {
                    shared.loaded.store(true, Ordering::Release);
                }
                Ok(_) => {} // loaded once the seed is read back
            }
        }
    }

    /// Writes the configuration file's part to the topic; returns how many entries.
    async fn seed(&self, shared: &SharedRegistry) -> Result<usize, log::LogError> {
        let Some(seed) = &shared.seed else {
            return Ok(0);
        };
        let mut seeded = RegistryState {
            version: VERSION,
            ..RegistryState::default()
        };
        seeded.apply_file(seed.clone());
        let empty = RegistryState {
            version: VERSION,
            ..RegistryState::default()
        };
        let entries = shared::entries(&empty, &seeded, "seed", "registry.seed", &shared.replica);
        if !entries.is_empty() {
            shared.log.write(&entries).await?;
        }
        Ok(entries.len())
    }

    /// Makes the state the live registry (a rebuild of every tenant: once per batch).
    fn install_state(&self, state: &RegistryState) {
        let plan = match self.tenants.load().plan_next(&state.configs()) {
            Ok(plan) => plan,
            Err(p) => {
                // Cannot happen: every entry was checked as it applied. Keep what is live.
                tracing::error!(problem = %p, "registry state not installed");
                return;
            }
        };
        match state.global.spec() {
            Ok(global) => self.install(state, plan, global),
            Err(p) => tracing::error!(problem = %p, "registry state not installed"),
        }
    }

    /// Writes again, once a second, the keys whose last record is not what the replicas
    /// hold: after a pause of up to a second (so that of several replicas that saw the same
    /// record, usually one writes), and only those still waiting then.
    async fn rewrite_loop(self: Arc<Self>) {
        let Backend::Shared(shared) = &self.backend else {
            return;
        };
        let mut tick = tokio::time::interval(REWRITE_EVERY);
        loop {
            tick.tick().await;
            if !shared.loaded.load(Ordering::Acquire) {
                continue;
            }
            if shared.rewrites().reassert.is_empty() && shared.rewrites().resign.is_empty() {
                continue;
            }
            tokio::time::sleep(jitter(REWRITE_EVERY)).await;
            let _one_writer = shared.writer.lock().await;
            let entries: Vec<log::Entry> = {
                let state = self.state.lock().await;
                let rewrites = shared.rewrites();
                let reassert = rewrites.reassert.iter().map(|k| (k, false));
                let resign = rewrites
                    .resign
                    .iter()
                    .filter(|k| !rewrites.reassert.contains(*k))
                    .map(|k| (k, true));
                reassert
                    .chain(resign)
                    .take(REWRITES_PER_ROUND)
                    .map(|(key, resign)| shared::rewrite(&state, key, resign, &shared.replica))
                    .collect()
            };
            if entries.is_empty() {
                continue;
            }
            match shared.log.write(&entries).await {
                Ok(_) => {
                    shared
                        .rewritten
                        .fetch_add(entries.len() as u64, Ordering::Relaxed);
                }
                Err(e) => tracing::warn!(error = %e, "registry keys not written again; retrying"),
            }
        }
    }
}

fn read(message: &LogRecord<'_>, shared: &SharedRegistry) -> Read {
    (
        message.offset(),
        message
            .key()
            .and_then(|k| log::own_key(k, &shared.log.secrets)),
        log::Entry::decode(message, shared.log.topic(), &shared.log.secrets),
    )
}

/// What a batch keeps of one record: its offset, how it applied, its audit entry.
type Outcome = (i64, Result<(), Rejection>, Option<AuditEntry>);

/// A record that is not an entry: counted, its key written again if it sits under one of
/// ours, and listed only if a holder of the secret wrote it.
fn not_an_entry(
    shared: &SharedRegistry,
    progress: &mut Progress,
    state: &RegistryState,
    offset: i64,
    own_key: Option<log::EntryKey>,
    refused: Refused,
) -> Option<Outcome> {
    skipped(shared, refused.index(), offset, &refused.to_string());
    progress.bad_mac |= refused == Refused::BadMac;
    // Under the Kafka key of one of ours (a forged value or tombstone, say):
    // ours is written again, so compaction keeps it.
    if let Some(key) = own_key.filter(|k| state.versions.contains_key(k)) {
        shared.rewrites().reassert.insert(key);
    }
    if refused.authentic() {
        progress.authentic = true;
        // Signed but not an entry: listed, so the operator sees it.
        let rejection = Rejection::Malformed(refused.to_string());
        return Some((
            offset,
            Err(rejection.clone()),
            Some(skipped_audit(offset, &rejection)),
        ));
    }
    // Not from a replica: nothing of it is kept, so records written by anyone
    // else cannot fill the audit list or push real changes out of it.
    None
}

/// Applies one entry (or rejects it, every replica alike) and notes what to write again.
fn applied(
    shared: &SharedRegistry,
    progress: &mut Progress,
    state: &mut RegistryState,
    offset: i64,
    decoded: Decoded,
) -> Outcome {
    progress.authentic = true;
    let Decoded {
        entry,
        by_signing_secret,
    } = decoded;
    let before = shared::value_of(state, &entry.key);
    let result = progress.applier.apply(state, &entry);
    let mut rewrites = shared.rewrites();
    let audit = match &result {
        Ok(()) => {
            progress.dirty |= entry.key.is_live();
            rewrites.reassert.remove(&entry.key);
            if by_signing_secret {
                rewrites.resign.remove(&entry.key);
            } else {
                rewrites.resign.insert(entry.key.clone());
            }
            if entry.replica == shared.replica {
                audit::record_entry(
                    &Actor::new(&entry.actor),
                    &entry.action,
                    &entry.key.to_string(),
                    &before,
                    &shared::value_of(state, &entry.key),
                );
            }
            Some(entry_audit(offset, &entry, &result, before, state))
        }
        Err(rejection) => {
            let echo = shared::is_echo(state, &entry);
            if echo {
                // The same version and value as held: nothing to write again for it
                // (and, signed with the current secret, the key is re-signed).
                rewrites.reassert.remove(&entry.key);
                if by_signing_secret {
                    rewrites.resign.remove(&entry.key);
                }
            } else if state.versions.contains_key(&entry.key)
                || matches!(rejection, Rejection::Invalid(_))
            {
                rewrites.reassert.insert(entry.key.clone());
            }
            match rejection {
                // A race's loser or a replay: counted, not listed (replayed records
                // must not push real changes out of the audit list).
                Rejection::Stale { .. } => {
                    skipped(shared, STALE, offset, &rejection.describe());
                    None
                }
                Rejection::Invalid(_) => {
                    skipped(shared, INVALID, offset, &rejection.describe());
                    Some(entry_audit(offset, &entry, &result, before, state))
                }
                Rejection::Malformed(_) => {
                    skipped(
                        shared,
                        Refused::Malformed(String::new()).index(),
                        offset,
                        &rejection.describe(),
                    );
                    Some(entry_audit(offset, &entry, &result, before, state))
                }
            }
        }
    };
    drop(rewrites);
    (offset, result, audit)
}

/// Counts a skipped record, logging the first of each reason.
fn skipped(shared: &SharedRegistry, reason: usize, offset: i64, detail: &str) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(count) = shared.skipped.get(reason) else {
        return;
    };
    count.fetch_add(1, Relaxed);
    if reason != STALE && !shared.skip_logged[reason].swap(true, Relaxed) {
        tracing::warn!(offset, reason = SKIPPED[reason], detail,
            "registry topic: a record every replica skips (logged once per reason, counted in floodgate_registry_rejected_entries_total)");
    }
}

fn skipped_audit(offset: i64, rejection: &Rejection) -> AuditEntry {
    AuditEntry {
        offset,
        key: String::new(),
        actor: String::new(),
        action: String::new(),
        replica: String::new(),
        base_version: 0,
        version: None,
        outcome: rejection.describe(),
        before: serde_json::Value::Null,
        after: serde_json::Value::Null,
    }
}

fn entry_audit(
    offset: i64,
    entry: &log::Entry,
    result: &Result<(), Rejection>,
    before: serde_json::Value,
    state: &RegistryState,
) -> AuditEntry {
    AuditEntry {
        offset,
        key: entry.key.to_string(),
        actor: entry.actor.clone(),
        action: entry.action.clone(),
        replica: entry.replica.clone(),
        base_version: entry.base,
        version: result.as_ref().ok().and_then(|()| entry.version()),
        outcome: match result {
            Ok(()) => "applied".into(),
            Err(r) => r.describe(),
        },
        after: match result {
            Ok(()) => shared::value_of(state, &entry.key),
            Err(_) => serde_json::Value::Null,
        },
        before,
    }
}

/// A pause of up to `max`, different on every replica and every call.
fn jitter(max: Duration) -> Duration {
    let mut bytes = [0u8; 8];
    let random = getrandom::fill(&mut bytes).map_or(0, |()| u64::from_le_bytes(bytes));
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(random % max_ms)
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
