//! Resolving what a record wants to a compiled schema: the cache, the registry calls and
//! who may name which subject. Every miss is bounded (the request's [`Lookups`], the call
//! slots, `timeout_ms`), every compile too (size, nesting, two at once on blocking threads).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::compiled::{compile, format_name, within_bounds, Codec, Compiled};
use super::registry::{CallError, RegistryClient};
use super::{Format, Lookups, SchemaError, Schemas, Side, Source, Strategy, Use};
use crate::identity::Topic;

/// Compiled schemas by id, and what names resolve to which id, within the configured bounds.
/// Eviction is oldest-first (a schema in use is simply compiled again after a miss).
#[derive(Default)]
pub(super) struct Cache {
    by_id: HashMap<u32, Arc<Compiled>>,
    order: VecDeque<u32>,
    bytes: usize,
    /// (what names the subject, SHA-256 of the schema text) → id, for raw schemas.
    raw: HashMap<RawKey, u32>,
    raw_order: VecDeque<RawKey>,
    /// (subject, version or latest) → id and when it was asked.
    versions: HashMap<(String, Option<i32>), (u32, Instant)>,
    versions_order: VecDeque<(String, Option<i32>)>,
    /// Ids the registry said do not exist, and when: asked again after [`MISSING_TTL`].
    missing: HashMap<u32, Instant>,
}

/// Schemas compiled at once (each on a blocking thread: a large one takes tens of
/// milliseconds, which must not stall the request threads).
pub(super) const MAX_COMPILING: usize = 2;
/// Stack of a compiling thread.
const COMPILE_STACK: usize = 256 * 1024 * 1024;

/// A raw schema's cache key: the scope its subject comes from, and its text's digest (the
/// text itself is not kept twice).
type RawKey = (String, [u8; 32]);

fn raw_key(scope: String, text: &str) -> RawKey {
    use sha2::Digest as _;
    (scope, sha2::Sha256::digest(text.as_bytes()).into())
}

/// How long "no such schema id" is remembered: a client repeating unknown ids costs the
/// registry one call per id per this long.
const MISSING_TTL: Duration = Duration::from_secs(5);

impl Schemas {
    /// The schema a key or value wants.
    pub async fn resolve(
        &self,
        topic: &Topic,
        side: Side,
        u: &Use,
        lookups: &mut Lookups,
    ) -> Result<Arc<Compiled>, SchemaError> {
        self.resolve_as(topic, side, u, lookups, false).await
    }

    /// [`Schemas::resolve`]; `operator`: the use comes from the configuration (a contract's
    /// subject), not from a record, so any subject may be read.
    pub(super) async fn resolve_as(
        &self,
        topic: &Topic,
        side: Side,
        u: &Use,
        lookups: &mut Lookups,
        operator: bool,
    ) -> Result<Arc<Compiled>, SchemaError> {
        let Some(client) = &self.client else {
            return Err(SchemaError::NoRegistry);
        };
        let schema = match &u.source {
            Source::Id(id) => self.by_id(client, *id, lookups).await?,
            Source::Raw(format, text) => {
                self.raw(client, topic, side, u, *format, text, lookups)
                    .await?
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
                self.version(client, &subject, *version, lookups).await?
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
        Ok(schema)
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

    async fn call<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let timeout = Duration::from_millis(self.config.timeout_ms);
        // Waiting for a call slot counts against the same timeout as the call.
        let started = tokio::time::Instant::now();
        let permit = tokio::time::timeout(timeout, self.calls.acquire())
            .await
            .map_err(|_| {
                CallError::Unavailable(
                    "the Schema Registry is busy: too many calls in flight".into(),
                )
            })?
            .map_err(|_| CallError::Unavailable("closed".into()))?;
        let left = timeout.saturating_sub(started.elapsed());
        let answer = tokio::time::timeout(left.max(Duration::from_millis(1)), f)
            .await
            .unwrap_or_else(|_| {
                Err(CallError::Unavailable(
                    "the Schema Registry did not answer in time".into(),
                ))
            });
        drop(permit);
        answer
    }

    async fn by_id(
        &self,
        client: &RegistryClient,
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
        lookups.take()?;
        let registered = match self.call(client.by_id(id)).await {
            Ok(r) => r,
            Err(CallError::NotFound(_)) => {
                let mut cache = self.cache.lock();
                if cache.missing.len() >= self.config.cache_entries {
                    cache.missing.retain(|_, at| at.elapsed() < MISSING_TTL);
                }
                if cache.missing.len() < self.config.cache_entries {
                    cache.missing.insert(id, Instant::now());
                }
                return Err(SchemaError::NotFound(format!(
                    "schema id {id} is not in the Schema Registry"
                )));
            }
            Err(e) => return Err(call_error(e)),
        };
        self.compiled(id, registered.format, &registered.schema)
            .await
    }

    /// Compiles a schema's text within the shape bounds, on a blocking thread, at most
    /// [`MAX_COMPILING`] at once.
    async fn compile_bounded(&self, format: Format, text: &str) -> Result<Codec, String> {
        within_bounds(format, text, self.config.max_schema_bytes)?;
        let _permit = self
            .compiling
            .acquire()
            .await
            .map_err(|_| "closed".to_string())?;
        let text = text.to_string();
        // A thread of its own with a large stack: the parsers recurse on the schema's shape,
        // and a shape the bounds above did not foresee must not overflow a worker's 2 MiB.
        let (done, result) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("schema-compile".into())
            .stack_size(COMPILE_STACK)
            .spawn(move || {
                let _ = done.send(compile(format, &text));
            })
            .map_err(|e| format!("the schema could not be compiled: {e}"))?;
        result
            .await
            .map_err(|_| "the schema could not be compiled".to_string())?
    }

    /// Compiles a schema the registry gave (or takes the cached one) and keeps it.
    async fn compiled(
        &self,
        id: u32,
        format: Format,
        text: &str,
    ) -> Result<Arc<Compiled>, SchemaError> {
        if let Some(s) = self.cache.lock().by_id.get(&id) {
            return Ok(s.clone());
        }
        let codec = self.compile_bounded(format, text).await.map_err(|e| {
            SchemaError::Invalid(format!(
                "schema {id} ({}) does not compile: {e}",
                format_name(format)
            ))
        })?;
        let compiled = Arc::new(Compiled {
            id,
            format,
            codec,
            text_len: text.len(),
        });
        self.keep(compiled.clone());
        Ok(compiled)
    }

    fn keep(&self, compiled: Arc<Compiled>) {
        let mut cache = self.cache.lock();
        if cache.by_id.contains_key(&compiled.id) {
            return;
        }
        cache.bytes += compiled.footprint();
        cache.order.push_back(compiled.id);
        cache.by_id.insert(compiled.id, compiled);
        while cache.by_id.len() > self.config.cache_entries || cache.bytes > self.config.cache_bytes
        {
            let Some(old) = cache.order.pop_front() else {
                break;
            };
            if let Some(s) = cache.by_id.remove(&old) {
                cache.bytes -= s.footprint();
            }
        }
    }

    async fn version(
        &self,
        client: &RegistryClient,
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
        lookups.take()?;
        let answer = self.call(client.version(subject, version)).await;
        let registered = match answer {
            Ok(r) => r,
            Err(CallError::NotFound(m)) => {
                return Err(SchemaError::NotFound(format!(
                    "subject {subject:?} has no {}: {m}",
                    version.map_or_else(|| "schema".to_string(), |v| format!("version {v}"))
                )))
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
            .compiled(registered.id, registered.format, &registered.schema)
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

    #[allow(clippy::too_many_arguments)] // the record's schema, its topic and side, the budget
    async fn raw(
        &self,
        client: &RegistryClient,
        topic: &Topic,
        side: Side,
        u: &Use,
        format: Format,
        text: &str,
        lookups: &mut Lookups,
    ) -> Result<Arc<Compiled>, SchemaError> {
        // What names the subject, with the text: a repeated raw schema (every record of a batch
        // carries it) is found without compiling it again.
        let scope = match (&u.subject, u.strategy) {
            (Some(s), _) => format!("s:{s}"),
            (None, Strategy::TopicName) => format!("t:{}-{}", topic.as_str(), side.as_str()),
            (None, Strategy::RecordName) => format!("r:{}", side.as_str()),
            (None, Strategy::TopicRecordName) => format!("tr:{}", topic.as_str()),
        };
        let key = raw_key(scope, text);
        let cached = self.cache.lock().raw.get(&key).copied();
        if let Some(s) = cached.and_then(|id| self.cache.lock().by_id.get(&id).cloned()) {
            return Ok(s);
        }
        // Compiled before anything is asked: a malformed schema never reaches the registry.
        let codec = self.compile_bounded(format, text).await.map_err(|e| {
            SchemaError::Invalid(format!(
                "the {} schema does not compile: {e}",
                format_name(format)
            ))
        })?;
        let subject = match (&u.subject, u.strategy) {
            (Some(s), _) => s.clone(),
            (None, Strategy::TopicName) => format!("{}-{}", topic.as_str(), side.as_str()),
            (None, strategy) => {
                let Some(name) = codec.record_name() else {
                    return Err(SchemaError::Invalid(
                        "the schema has no record name for RECORD_NAME or TOPIC_RECORD_NAME".into(),
                    ));
                };
                if strategy == Strategy::RecordName {
                    name.to_string()
                } else {
                    format!("{}-{name}", topic.as_str())
                }
            }
        };
        self.may_name(topic, &subject)?;
        if let Some(id) = cached {
            let compiled = Arc::new(Compiled {
                id,
                format,
                codec,
                text_len: text.len(),
            });
            self.keep(compiled.clone());
            return Ok(compiled);
        }
        let subject = &subject;
        // A lookup and perhaps a registration: two of the request's calls.
        lookups.take()?;
        lookups.take()?;
        let id = match self.call(client.lookup(subject, format, text)).await.map_err(call_error)? {
            Some(id) => id,
            // A tenant registers only under its topic's own subjects (`<topic>-...`): a subject
            // any topic may use (RECORD_NAME's, or one named outright) is another team's to
            // evolve, so there it is looked up only.
            None if self.config.auto_register && self.may_register(topic, subject) => self
                .call(client.register(subject, format, text))
                .await
                .map_err(|e| match e {
                    CallError::Refused(m) => SchemaError::Invalid(format!(
                        "the Schema Registry refused to register the schema under {subject:?}: {m}"
                    )),
                    e => call_error(e),
                })?,
            None if self.config.auto_register => {
                return Err(SchemaError::NotFound(format!(
                    "the schema is not registered under subject {subject:?}; floodgate registers schemas only under the topic's own subjects ({}-...), never under a [[schemas]] contract's",
                    topic.as_str()
                )))
            }
            None => {
                return Err(SchemaError::NotFound(format!(
                    "the schema is not registered under subject {subject:?}, and [schema_registry] auto_register is off"
                )))
            }
        };
        let compiled = Arc::new(Compiled {
            id,
            format,
            codec,
            text_len: text.len(),
        });
        self.keep(compiled.clone());
        let mut cache = self.cache.lock();
        if cache.raw.insert(key.clone(), id).is_none() {
            cache.raw_order.push_back(key);
        }
        while cache.raw.len() > self.config.cache_entries {
            let Some(old) = cache.raw_order.pop_front() else {
                break;
            };
            cache.raw.remove(&old);
        }
        Ok(compiled)
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

fn call_error(e: CallError) -> SchemaError {
    match e {
        CallError::NotFound(m) => SchemaError::NotFound(m),
        CallError::Refused(m) => SchemaError::Invalid(format!("the Schema Registry refused: {m}")),
        CallError::Unavailable(m) => SchemaError::Unavailable(m),
    }
}
