//! Resolving what a record wants to a compiled schema: the cache, the registry calls and
//! who may name which subject. Every miss is bounded (the request's [`Lookups`], the call
//! slots, `timeout_ms`), every compile too (size, nesting, measured memory, on the step's
//! threads within the tenant's share). What the registry says is missing is remembered for
//! [`MISSING_TTL`]; a raw schema is checked against its subject and the request's lookups
//! before it is compiled, and looked up only after its data was checked
//! ([`super::register`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::compiled::{format_name, Compiled};
use super::raw::{digest, RawKey, RawUse};
use super::registry_client::{CallError, SchemaRegistryClient};
use super::{Format, Lookups, SchemaError, Schemas, Side, Source, Strategy, Use};
use crate::identity::Topic;

/// A schema resolved for a key or value: compiled, and, for a raw schema the gateway has no
/// id for yet, what the registry must still be asked (its id is 0 until then).
pub(super) struct Resolved {
    pub schema: Arc<Compiled>,
    pub raw: Option<RawUse>,
}

/// Compiled schemas by id, and what names resolve to which id, within the configured bounds.
/// Each compiled schema is charged to the tenant whose request brought it in; over a bound,
/// the oldest schema of the tenant holding the largest share goes first (a schema in use is
/// simply compiled again after a miss). Oldest-first over everyone let one tenant naming a
/// dozen costly schemas in refused requests evict every other tenant's.
#[derive(Default)]
pub(super) struct Cache {
    pub(super) by_id: HashMap<u32, Arc<Compiled>>,
    pub(super) order: VecDeque<u32>,
    pub(super) bytes: usize,
    /// Who each compiled schema is charged to, and each tenant's bytes and entries.
    pub(super) owner: HashMap<u32, Arc<str>>,
    pub(super) held: HashMap<Arc<str>, (usize, usize)>,
    /// (what names the subject, SHA-256 of the schema text) → id, for raw schemas.
    pub(super) raw: HashMap<RawKey, u32>,
    pub(super) raw_order: VecDeque<RawKey>,
    /// (subject, version or latest) → id and when it was asked.
    pub(super) versions: HashMap<(String, Option<i32>), (u32, Instant)>,
    pub(super) versions_order: VecDeque<(String, Option<i32>)>,
    /// Ids the registry said do not exist, and when: asked again after [`MISSING_TTL`].
    pub(super) missing: HashMap<u32, Instant>,
    /// Subjects' versions (or latest) the registry said do not exist, and when.
    pub(super) missing_versions: HashMap<(String, Option<i32>), Instant>,
    /// Raw schemas the registry said are not registered under a subject, and when.
    pub(super) unregistered: HashMap<RawKey, Instant>,
    /// Schemas (format and text digest) that did not compile, and why: a compile is
    /// deterministic, so the same text is refused without compiling it again.
    pub(super) failed: HashMap<(Format, [u8; 32]), SchemaError>,
    pub(super) failed_order: VecDeque<(Format, [u8; 32])>,
    /// Raw schemas compiled and not yet known to the registry (id 0), by text digest: a
    /// client repeating one is not compiled again.
    pub(super) drafts: HashMap<(Format, [u8; 32]), Arc<Compiled>>,
    pub(super) drafts_order: VecDeque<(Format, [u8; 32])>,
}

impl Cache {
    /// Evicts the oldest compiled schema of the tenant holding the largest share of the cache
    /// (by bytes or by entries, whichever is the larger share); `false` when nothing is left.
    fn evict_from_largest(&mut self, max_entries: usize, max_bytes: usize) -> bool {
        let share = |(bytes, entries): (usize, usize)| {
            (bytes as f64 / max_bytes as f64).max(entries as f64 / max_entries as f64)
        };
        let Some(largest) = self
            .held
            .iter()
            .max_by(|a, b| share(*a.1).total_cmp(&share(*b.1)))
            .map(|(t, _)| t.clone())
        else {
            return false;
        };
        let at = self
            .order
            .iter()
            .position(|id| self.owner.get(id).is_some_and(|o| *o == largest));
        let Some(id) = at.and_then(|i| self.order.remove(i)) else {
            // Its bookkeeping has no schema left: forget it, and try the next.
            self.held.remove(&largest);
            return !self.held.is_empty();
        };
        let bytes = self.by_id.remove(&id).map_or(0, |s| s.footprint());
        self.bytes = self.bytes.saturating_sub(bytes);
        self.owner.remove(&id);
        if let Some(h) = self.held.get_mut(&largest) {
            h.0 = h.0.saturating_sub(bytes);
            h.1 = h.1.saturating_sub(1);
            if h.1 == 0 {
                self.held.remove(&largest);
            }
        }
        true
    }
}

/// Remembers `key` as missing, within `max` entries (expired ones go first).
pub(super) fn remember_missing<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, Instant>,
    key: K,
    max: usize,
) {
    if map.len() >= max {
        map.retain(|_, at| at.elapsed() < MISSING_TTL);
    }
    if map.len() < max {
        map.insert(key, Instant::now());
    }
}

/// Whether `key` was said missing less than [`MISSING_TTL`] ago.
pub(super) fn still_missing<K: std::hash::Hash + Eq>(map: &HashMap<K, Instant>, key: &K) -> bool {
    map.get(key).is_some_and(|at| at.elapsed() < MISSING_TTL)
}

/// How long "no such schema id / subject / version / registration" is remembered: a client
/// repeating one costs the registry one call per this long (and a schema registered by
/// someone else is seen at most this late).
pub(super) const MISSING_TTL: Duration = Duration::from_secs(5);

impl Schemas {
    /// The schema a key or value wants.
    pub(super) async fn resolve(
        &self,
        tenant: &str,
        topic: &Topic,
        side: Side,
        u: &Use,
        lookups: &mut Lookups,
    ) -> Result<Resolved, SchemaError> {
        self.resolve_as(tenant, topic, side, u, lookups, false)
            .await
    }

    /// [`Schemas::resolve`]; `operator`: the use comes from the configuration (a contract's
    /// subject), not from a record, so any subject may be read.
    pub(super) async fn resolve_as(
        &self,
        tenant: &str,
        topic: &Topic,
        side: Side,
        u: &Use,
        lookups: &mut Lookups,
        operator: bool,
    ) -> Result<Resolved, SchemaError> {
        let Some(client) = &self.client else {
            return Err(SchemaError::NoRegistry);
        };
        let (schema, raw) = match &u.source {
            Source::Id(id) => (self.by_id(tenant, client, *id, lookups).await?, None),
            Source::Raw(format, text) => {
                let r = self
                    .raw(tenant, topic, side, u, (*format, text), lookups)
                    .await?;
                (r.schema, r.raw)
            }
            Source::Version(version) => {
                let subject = match (&u.subject, u.strategy) {
                    (Some(s), _) => s.clone(),
                    (None, Strategy::TopicName) => format!("{}-{}", topic.as_str(), side.as_str()),
                    (None, _) => {
                        return Err(SchemaError::NotFound(
                            "RECORD_NAME and TOPIC_RECORD_NAME need the schema (or a subject) to name the record".into(),
                        ))
                    }
                };
                if !operator {
                    self.may_name(topic, &subject)?;
                }
                let schema = self
                    .version(tenant, client, &subject, *version, lookups)
                    .await?;
                (schema, None)
            }
        };
        if let Some(expected) = u.format.filter(|f| *f != schema.format) {
            return Err(SchemaError::Invalid(format!(
                "schema {} is {}, not {}",
                schema.id,
                format_name(schema.format),
                format_name(expected)
            )));
        }
        Ok(Resolved { schema, raw })
    }

    /// Whether a record of `topic` may name `subject`: the topic's own (`<topic>-...`) or an
    /// open subject (`[schema_registry] open_subjects`). Another team's subject is neither
    /// read (its schema's fields would show in errors) nor evolved from here.
    pub(super) fn may_name(&self, topic: &Topic, subject: &str) -> Result<(), SchemaError> {
        crate::config::check_subject(subject).map_err(SchemaError::Invalid)?;
        if own_subject(topic, subject) || self.open_subjects.iter().any(|p| p.matches(subject)) {
            return Ok(());
        }
        Err(SchemaError::NotFound(format!(
            "subject {subject:?} is not one of topic {:?}'s own ({0}-...) nor an open subject ([schema_registry] open_subjects)",
            topic.as_str()
        )))
    }

    /// Whether a raw schema may be registered under `subject` from a record of `topic`: only
    /// under the topic's own subjects, and never under the subject of a `[[schemas]]` contract
    /// (a writer must not replace the contract it is held to).
    pub(super) fn may_register(&self, topic: &Topic, subject: &str) -> bool {
        // Whichever topic writes: a contract's subject is its explicit one, or `S-value` for
        // every topic S its patterns cover.
        let contracted = self.contracts.iter().any(|(patterns, c)| match &c.subject {
            Some(s) => s == subject,
            None => subject
                .strip_suffix("-value")
                .and_then(|t| Topic::parse(t).ok())
                .is_some_and(|t| patterns.allows(&t)),
        });
        own_subject(topic, subject) && !contracted
    }

    async fn by_id(
        &self,
        tenant: &str,
        client: &SchemaRegistryClient,
        id: u32,
        lookups: &mut Lookups,
    ) -> Result<Arc<Compiled>, SchemaError> {
        {
            let cache = self.cache.lock();
            if let Some(s) = cache.by_id.get(&id) {
                return Ok(s.clone());
            }
            if cache
                .missing
                .get(&id)
                .is_some_and(|at| at.elapsed() < MISSING_TTL)
            {
                return Err(SchemaError::NotFound(format!(
                    "schema id {id} is not in the Schema Registry"
                )));
            }
        }
        self.take_lookup(lookups)?;
        let registered = match self.call(tenant, client.by_id(id)).await {
            Ok(r) => r,
            Err(CallError::NotFound(_)) => {
                let mut cache = self.cache.lock();
                remember_missing(&mut cache.missing, id, self.config.cache_entries);
                return Err(SchemaError::NotFound(format!(
                    "schema id {id} is not in the Schema Registry"
                )));
            }
            Err(e) => return Err(call_error(e)),
        };
        self.compiled(tenant, id, registered.format, &registered.schema)
            .await
    }

    /// Compiles a schema the registry gave (or takes the cached one) and keeps it.
    async fn compiled(
        &self,
        tenant: &str,
        id: u32,
        format: Format,
        text: &str,
    ) -> Result<Arc<Compiled>, SchemaError> {
        if let Some(s) = self.cache.lock().by_id.get(&id) {
            return Ok(s.clone());
        }
        let what = format!("schema {id} ({})", format_name(format));
        let compiled = Arc::new(
            self.compile_for(tenant, format, text, &what)
                .await?
                .with_id(id),
        );
        self.keep(tenant, compiled.clone());
        Ok(compiled)
    }

    pub(super) fn keep(&self, tenant: &str, compiled: Arc<Compiled>) {
        let mut cache = self.cache.lock();
        if cache.by_id.contains_key(&compiled.id) {
            return;
        }
        let (id, bytes) = (compiled.id, compiled.footprint());
        let tenant: Arc<str> = tenant.into();
        cache.bytes += bytes;
        cache.order.push_back(id);
        cache.by_id.insert(id, compiled);
        let held = cache.held.entry(tenant.clone()).or_default();
        held.0 += bytes;
        held.1 += 1;
        cache.owner.insert(id, tenant);
        let (max_entries, max_bytes) = (
            self.config.cache_entries.max(1),
            self.config.cache_bytes.max(1),
        );
        while cache.by_id.len() > max_entries || cache.bytes > max_bytes {
            if !cache.evict_from_largest(max_entries, max_bytes) {
                break;
            }
        }
    }

    async fn version(
        &self,
        tenant: &str,
        client: &SchemaRegistryClient,
        subject: &str,
        version: Option<i32>,
        lookups: &mut Lookups,
    ) -> Result<Arc<Compiled>, SchemaError> {
        let key = (subject.to_string(), version);
        let ttl = Duration::from_millis(self.config.latest_ttl_ms);
        let known = self.cache.lock().versions.get(&key).copied();
        if let Some((id, at)) = known {
            // A numbered version never changes; "latest" is trusted for the TTL.
            if version.is_some() || at.elapsed() < ttl {
                if let Some(s) = self.cache.lock().by_id.get(&id) {
                    return Ok(s.clone());
                }
            }
        }
        let not_found = |m: &str| {
            SchemaError::NotFound(format!(
                "subject {subject:?} has no {}{m}",
                version.map_or_else(|| "schema".to_string(), |v| format!("version {v}"))
            ))
        };
        if still_missing(&self.cache.lock().missing_versions, &key) {
            return Err(not_found(" (the registry said so moments ago)"));
        }
        self.take_lookup(lookups)?;
        let answer = self.call(tenant, client.version(subject, version)).await;
        let registered = match answer {
            Ok(r) => r,
            Err(CallError::NotFound(m)) => {
                let mut cache = self.cache.lock();
                remember_missing(&mut cache.missing_versions, key, self.config.cache_entries);
                return Err(not_found(&format!(": {m}")));
            }
            Err(e) => {
                // The registry is down: the last answer for "latest" is better than none.
                if let Some((id, _)) = known {
                    if let Some(s) = self.cache.lock().by_id.get(&id) {
                        return Ok(s.clone());
                    }
                }
                return Err(call_error(e));
            }
        };
        let compiled = self
            .compiled(tenant, registered.id, registered.format, &registered.schema)
            .await?;
        let mut cache = self.cache.lock();
        if cache
            .versions
            .insert(key.clone(), (registered.id, Instant::now()))
            .is_none()
        {
            cache.versions_order.push_back(key);
            while cache.versions.len() > self.config.cache_entries {
                let Some(old) = cache.versions_order.pop_front() else {
                    break;
                };
                cache.versions.remove(&old);
            }
        }
        Ok(compiled)
    }

    /// A raw schema: from the cache, or compiled — after its subject and the request's
    /// lookups are checked, so a schema this request may not use is never compiled — and
    /// handed back with what the registry must still be asked ([`Resolved::raw`]).
    async fn raw(
        &self,
        tenant: &str,
        topic: &Topic,
        side: Side,
        u: &Use,
        (format, text): (Format, &Arc<str>),
        lookups: &mut Lookups,
    ) -> Result<Resolved, SchemaError> {
        // What names the subject, with the text: a repeated raw schema (every record of a batch
        // carries it) is found without compiling it again.
        let scope = match (&u.subject, u.strategy) {
            (Some(s), _) => format!("s:{s}"),
            (None, Strategy::TopicName) => format!("t:{}-{}", topic.as_str(), side.as_str()),
            (None, Strategy::RecordName) => format!("r:{}", side.as_str()),
            (None, Strategy::TopicRecordName) => format!("tr:{}", topic.as_str()),
        };
        let digest = digest(text);
        let key = (scope, digest);
        let cached = self.cache.lock().raw.get(&key).copied();
        if let Some(s) = cached.and_then(|id| self.cache.lock().by_id.get(&id).cloned()) {
            return Ok(Resolved {
                schema: s,
                raw: None,
            });
        }
        // The subject, when the record names it or the topic does: checked before anything
        // is compiled (RECORD_NAME's comes from the schema itself, so it is checked after).
        let early = match (&u.subject, u.strategy) {
            (Some(s), _) => Some(s.clone()),
            (None, Strategy::TopicName) => Some(format!("{}-{}", topic.as_str(), side.as_str())),
            (None, _) => None,
        };
        if let Some(subject) = &early {
            self.may_name(topic, subject)?;
        }
        // The lookup this schema will cost, and the registration it may need, before the
        // compile they would follow.
        if cached.is_none() {
            lookups.reserve(&key)?;
        }
        let what = format!("the {} schema", format_name(format));
        let draft = self.draft(tenant, format, text, &what).await?;
        let subject = match early {
            Some(s) => s,
            None => {
                let Some(name) = draft.codec.record_name() else {
                    return Err(SchemaError::Invalid(
                        "the schema has no record name for RECORD_NAME or TOPIC_RECORD_NAME".into(),
                    ));
                };
                let subject = if u.strategy == Strategy::RecordName {
                    name.to_string()
                } else {
                    format!("{}-{name}", topic.as_str())
                };
                self.may_name(topic, &subject)?;
                subject
            }
        };
        if let Some(id) = cached {
            let compiled = Arc::new(draft.with_id(id));
            self.keep(tenant, compiled.clone());
            return Ok(Resolved {
                schema: compiled,
                raw: None,
            });
        }
        Ok(Resolved {
            schema: draft,
            raw: Some(RawUse {
                subject,
                format,
                text: text.clone(),
                key,
            }),
        })
    }
}

/// A topic's own subjects: `<topic>-key`, `<topic>-value` and `<topic>-<record name>`, where
/// the rest has no `-` — so topic `orders` never owns `orders-eu-value`, topic `orders-eu`'s.
pub(super) fn own_subject(topic: &Topic, subject: &str) -> bool {
    subject
        .strip_prefix(topic.as_str())
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('-'))
}

pub(super) fn call_error(e: CallError) -> SchemaError {
    match e {
        CallError::NotFound(m) => SchemaError::NotFound(m),
        CallError::Refused(m) => SchemaError::Invalid(format!("the Schema Registry refused: {m}")),
        CallError::Unavailable(m) => SchemaError::Unavailable(m),
        // Its own calls are in flight: one of them ends within a call's timeout.
        CallError::OwnShareTaken(m) => SchemaError::Busy(Duration::from_secs(1), m),
    }
}
