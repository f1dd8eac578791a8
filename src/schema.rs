//! Data contracts at the gate: record keys and values checked against, and written in, the
//! schemas of a Confluent Schema Registry, before anything reaches Kafka.
//!
//! A wire format says what schema a record's key or value wants ([`Wanted`]: a raw schema, a
//! schema id, a subject's version, or the latest of the subject) and hands the data in as its
//! JSON text; a topic's `[[schemas]]` contract covers values that want nothing of their own.
//! [`Schemas::convert`] resolves each schema (cached, bounded, one registry call per miss) and
//! writes the data in Confluent's wire format (byte 0, the 4-byte schema id, the payload), or
//! says which field of which record does not fit. The pipeline calls it once per request,
//! after the body is decoded and before anything is admitted, so a refused record costs no
//! budget and nothing of its request is written.
//!
//! Codecs: [`avro`] (our walk over apache-avro's parsed schema), [`json`] (jsonschema),
//! [`protobuf`] (protox + prost-reflect); [`registry`] is the REST client.
//!
//! Layer: domain. Imports configuration and the record type; the pipeline imports it.

pub mod avro;
pub mod json;
mod pointer;
pub mod protobuf;
pub mod registry;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::{ContractConfig, ContractMode, SchemaRegistryConfig};
use crate::identity::{Topic, TopicPatterns};
use registry::{CallError, RegistryClient};

pub use crate::config::SchemaFormat as Format;

/// Where and why a value does not fit its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// JSON pointer into the value (`""` for the value itself).
    pub pointer: String,
    pub message: String,
}

/// A record's key or value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Key,
    Value,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Value => "value",
        }
    }
}

/// How the subject of a schema is named when the record does not name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// `<topic>-key` / `<topic>-value`.
    #[default]
    TopicName,
    /// The schema's record name (Avro full name, Protobuf message, JSON Schema title).
    RecordName,
    /// `<topic>-<record name>`.
    TopicRecordName,
}

impl Strategy {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "TOPIC_NAME" => Some(Self::TopicName),
            "RECORD_NAME" => Some(Self::RecordName),
            "TOPIC_RECORD_NAME" => Some(Self::TopicRecordName),
            _ => None,
        }
    }
}

/// Which schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The schema's text, in this format: looked up under its subject, registered if absent
    /// (shared: every record of a v2 request names the same one).
    Raw(Format, Arc<str>),
    /// A registered schema id.
    Id(u32),
    /// A version of the subject; `None` is the latest.
    Version(Option<i32>),
}

/// The schema a key or value wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    pub source: Source,
    /// The subject, when the record names it.
    pub subject: Option<String>,
    pub strategy: Strategy,
    /// The format the record expects the schema to be, when it says (a v3 `type`, a v2
    /// content type).
    pub format: Option<Format>,
}

/// What one record's key and value want; `None`: written as sent (or by the topic's
/// contract, for a value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    pub key: Option<Use>,
    pub value: Option<Use>,
}

/// Why a record could not be written in its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaError {
    /// The data does not fit the schema (422 `schema_violation`).
    Violation(Mismatch),
    /// No such schema, subject or version (422 `schema_not_found`).
    NotFound(String),
    /// The schema itself is not valid, or not of the format the record said (422
    /// `schema_invalid`).
    Invalid(String),
    /// The registry did not answer and the schema is not cached (503).
    Unavailable(String),
    /// No `[schema_registry]` is configured (422 `schema_not_found`, saying so).
    NoRegistry,
}

/// A record's failure: which side, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub side: Side,
    pub error: SchemaError,
}

impl Failure {
    /// The detail a client reads: `value /address/zip: expected a string, found a number`.
    pub fn detail(&self) -> String {
        let side = self.side.as_str();
        match &self.error {
            SchemaError::Violation(m) if m.pointer.is_empty() => format!("{side}: {}", m.message),
            SchemaError::Violation(m) => format!("{side} {}: {}", m.pointer, m.message),
            SchemaError::NotFound(d) | SchemaError::Invalid(d) | SchemaError::Unavailable(d) => {
                format!("{side}: {d}")
            }
            SchemaError::NoRegistry => format!(
                "{side}: schemas need a Schema Registry, and this gateway has none configured ([schema_registry] url)"
            ),
        }
    }
}

enum Codec {
    Avro(Box<avro::AvroSchema>),
    Json(json::JsonSchema),
    Protobuf(protobuf::ProtobufSchema),
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Avro(_) => "Avro",
            Self::Json(_) => "Json",
            Self::Protobuf(_) => "Protobuf",
        })
    }
}

/// A schema ready to use: its id and its codec.
#[derive(Debug)]
pub struct Compiled {
    pub id: u32,
    pub format: Format,
    codec: Codec,
    /// Bytes of schema text it was compiled from (what the cache counts).
    text_len: usize,
}

/// Deepest bracket nesting (`{`, `[`, `(`) a schema's text may have: the parsers and
/// validators recurse on it (a Protobuf option value nested 1,500 deep overflows a worker's
/// stack), and no real schema comes near.
pub const MAX_SCHEMA_NESTING: usize = 64;
/// Most `$ref`s a JSON Schema may hold (a long reference chain is recursion too).
pub const MAX_SCHEMA_REFS: usize = 1_000;

/// Whether a schema's text is within the shape bounds every parser is safe with: its size,
/// its bracket nesting outside string literals, and (JSON Schema) its references.
fn within_bounds(format: Format, text: &str, max_bytes: usize) -> Result<(), String> {
    if text.len() > max_bytes {
        return Err(format!(
            "the schema is {} bytes; at most {max_bytes} ([schema_registry] max_schema_bytes)",
            text.len()
        ));
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    for &b in text.as_bytes() {
        if let Some(q) = quote {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                _ if b == q => quote = None,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => quote = Some(b'"'),
            // Protobuf strings may be single-quoted too; JSON has no such strings.
            b'\'' if format == Format::Protobuf => quote = Some(b'\''),
            b'{' | b'[' | b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_SCHEMA_NESTING {
        return Err(format!(
            "the schema nests {deepest} deep; at most {MAX_SCHEMA_NESTING}"
        ));
    }
    if format == Format::Json && text.matches("\"$ref\"").count() > MAX_SCHEMA_REFS {
        return Err(format!("the schema has more than {MAX_SCHEMA_REFS} $refs"));
    }
    Ok(())
}

fn compile(format: Format, text: &str) -> Result<Codec, String> {
    Ok(match format {
        Format::Avro => Codec::Avro(Box::new(avro::AvroSchema::parse(text)?)),
        Format::Json => Codec::Json(json::JsonSchema::parse(text)?),
        Format::Protobuf => Codec::Protobuf(protobuf::ProtobufSchema::parse(text)?),
    })
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::Avro => "AVRO",
        Format::Json => "JSONSCHEMA",
        Format::Protobuf => "PROTOBUF",
    }
}

impl Codec {
    fn record_name(&self) -> Option<&str> {
        match self {
            Self::Avro(s) => s.record_name.as_deref(),
            Self::Json(s) => s.record_name.as_deref(),
            Self::Protobuf(s) => s.record_name.as_deref(),
        }
    }
}

impl Compiled {
    /// A schema compiled from its text, as if the registry had given it this id (the
    /// benchmarks and tests use it; the gateway compiles what the registry answers).
    pub fn new(id: u32, format: Format, text: &str) -> Result<Self, String> {
        within_bounds(format, text, usize::MAX)?;
        Ok(Self {
            id,
            format,
            codec: compile(format, text)?,
            text_len: text.len(),
        })
    }

    /// `data` (JSON text) in Confluent's wire format under this schema, the payload at most
    /// `limit` bytes (Avro's defaults can make a small value large).
    pub fn encode(&self, data: &[u8], limit: usize) -> Result<Vec<u8>, Mismatch> {
        let payload = match &self.codec {
            Codec::Protobuf(p) => p.encode(data)?,
            // Steps: a few per byte of the value as sent, and room for a schema's defaults.
            Codec::Avro(a) => {
                a.encode(&parse_json(data)?, limit, 16 * data.len() as u64 + 16_384)?
            }
            Codec::Json(j) => {
                j.check(&parse_json(data)?)?;
                data.to_vec()
            }
        };
        let mut out = Vec::with_capacity(5 + payload.len());
        out.push(0);
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// About what the compiled schema takes in memory: parsed schemas and validators are
    /// many times their text, so the cache counts a multiple of the text by format and a
    /// fixed part.
    fn footprint(&self) -> usize {
        // Measured by the review: a Protobuf descriptor pool is ~150x its text, a JSON Schema
        // validator ~25x, an Avro schema ~16x.
        let factor = match self.format {
            Format::Avro => 16,
            Format::Json => 32,
            Format::Protobuf => 160,
        };
        self.text_len.saturating_mul(factor).saturating_add(1024)
    }

    /// Checks `data` (JSON text) against a JSON Schema, keeping it as it is.
    pub fn check(&self, data: &[u8]) -> Result<(), Mismatch> {
        match &self.codec {
            Codec::Json(j) => j.check(&parse_json(data)?),
            // A contract's validate mode is for JSON Schema only (the configuration says so);
            // any other codec encodes to check.
            _ => self.encode(data, usize::MAX).map(drop),
        }
    }
}

fn parse_json(data: &[u8]) -> Result<serde_json::Value, Mismatch> {
    serde_json::from_slice(data).map_err(|e| Mismatch {
        pointer: String::new(),
        message: format!("is not JSON: {e}"),
    })
}

/// Compiled schemas by id, and what names resolve to which id, within the configured bounds.
/// Eviction is oldest-first (a schema in use is simply compiled again after a miss).
#[derive(Default)]
struct Cache {
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
const MAX_COMPILING: usize = 2;

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

/// Schemas from the registry, with their bounds, and the topics' contracts.
pub struct Schemas {
    client: Option<RegistryClient>,
    /// The most bytes a key and a value may take in their schema (`[limits]`).
    limits: (usize, usize),
    /// Schemas compiled at once, off the request threads.
    compiling: tokio::sync::Semaphore,
    /// Subjects any topic may name (beside its own `<topic>-...`).
    open_subjects: Vec<glob::Pattern>,
    config: SchemaRegistryConfig,
    cache: Mutex<Cache>,
    calls: tokio::sync::Semaphore,
    contracts: Vec<(TopicPatterns, ContractConfig)>,
    /// Values refused for not fitting a schema, per tenant and topic.
    violations: Mutex<HashMap<Series, u64>>,
}

impl std::fmt::Debug for Schemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schemas")
            .field("registry", &self.config.url)
            .field("contracts", &self.contracts.len())
            .finish()
    }
}

/// A violation series: tenant and topic.
type Series = (Arc<str>, Arc<str>);

/// Most (tenant, topic) pairs counted one by one; further violations count under topic
/// `_other` for their tenant.
const MAX_VIOLATION_SERIES: usize = 1_000;

/// Registry calls one request may cause: a request naming many schemas the gateway has not
/// seen (a raw schema per record, unknown ids) is refused past this, instead of turning one
/// request into thousands of registry calls.
#[derive(Debug)]
pub struct Lookups(u32);

/// Registry calls a request (or a stream's piece) may cause.
pub const LOOKUPS_PER_REQUEST: u32 = 16;

impl Lookups {
    pub fn per_request() -> Self {
        Self(LOOKUPS_PER_REQUEST)
    }

    /// No calls left.
    pub fn none() -> Self {
        Self(0)
    }

    fn take(&mut self) -> Result<(), SchemaError> {
        match self.0.checked_sub(1) {
            Some(left) => {
                self.0 = left;
                Ok(())
            }
            None => Err(SchemaError::Invalid(format!(
                "the request names more schemas the gateway has not cached than one request may look up ({LOOKUPS_PER_REQUEST}); send them in smaller requests, or by id"
            ))),
        }
    }
}

/// What one record became: its key and value in their schemas' wire format (`None`: as sent),
/// and the ids used.
#[derive(Debug, Default)]
pub struct Converted {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub key_id: Option<u32>,
    pub value_id: Option<u32>,
}

impl Schemas {
    /// `limits`: the most bytes a key and a value may take once in their schema.
    pub fn new(
        config: &SchemaRegistryConfig,
        contracts: &[ContractConfig],
        limits: (usize, usize),
    ) -> Result<Self, String> {
        let client = match &config.url {
            Some(url) => Some(RegistryClient::new(
                url,
                Duration::from_millis(config.timeout_ms),
                config.credentials(),
            )?),
            None => None,
        };
        let contracts = contracts
            .iter()
            .map(|c| {
                TopicPatterns::parse(&c.topics)
                    .map(|p| (p, c.clone()))
                    .map_err(|(i, e)| format!("schemas: topics[{i}]: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let open_subjects = config
            .open_subjects
            .iter()
            .enumerate()
            .map(|(i, p)| glob::Pattern::new(p).map_err(|e| format!("open_subjects[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            client,
            limits,
            compiling: tokio::sync::Semaphore::new(MAX_COMPILING),
            open_subjects,
            config: config.clone(),
            cache: Mutex::default(),
            calls: tokio::sync::Semaphore::new(config.max_concurrent_calls.max(1)),
            contracts,
            violations: Mutex::default(),
        })
    }

    /// Whether a Schema Registry is configured (schema formats are served).
    pub fn has_registry(&self) -> bool {
        self.client.is_some()
    }

    fn contract(&self, topic: &Topic) -> Option<&ContractConfig> {
        self.contracts
            .iter()
            .find(|(p, _)| p.allows(topic))
            .map(|(_, c)| c)
    }

    /// Whether anything of the request needs this step.
    pub fn applies(&self, topic: &Topic, wanted: &[Wanted]) -> bool {
        self.contract(topic).is_some()
            || wanted.iter().any(|w| w.key.is_some() || w.value.is_some())
    }

    /// One record's key and value in their schemas (`key`/`value`: the JSON text as sent;
    /// `None` is a Kafka null, written as null).
    pub async fn convert(
        &self,
        topic: &Topic,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        wanted: Option<&Wanted>,
        lookups: &mut Lookups,
    ) -> Result<Converted, Failure> {
        let mut out = Converted::default();
        if let (Some(data), Some(u)) = (key, wanted.and_then(|w| w.key.as_ref())) {
            let schema = self
                .resolve(topic, Side::Key, u, lookups)
                .await
                .map_err(|error| Failure {
                    side: Side::Key,
                    error,
                })?;
            out.key = Some(encode(&schema, data, Side::Key, self.limits.0)?);
            out.key_id = Some(schema.id);
        }
        let own = wanted.and_then(|w| w.value.as_ref());
        match (value, own) {
            (Some(data), Some(u)) => {
                let schema =
                    self.resolve(topic, Side::Value, u, lookups)
                        .await
                        .map_err(|error| Failure {
                            side: Side::Value,
                            error,
                        })?;
                // A value naming its own schema on a contracted topic is held to the
                // contract too: the schema must be the contract's (any other id, registered
                // anywhere, would be a way around it).
                if let Some(contract) = self.contract(topic) {
                    let required = self
                        .contract_schema(topic, contract, lookups)
                        .await
                        .map_err(|error| Failure {
                            side: Side::Value,
                            error,
                        })?;
                    if required.id != schema.id {
                        return Err(Failure {
                            side: Side::Value,
                            error: SchemaError::Violation(Mismatch {
                                pointer: String::new(),
                                message: format!(
                                    "topic {:?} has a data contract: values are written in schema {} (the latest of its subject), not {}",
                                    topic.as_str(),
                                    required.id,
                                    schema.id
                                ),
                            }),
                        });
                    }
                }
                out.value = Some(encode(&schema, data, Side::Value, self.limits.1)?);
                out.value_id = Some(schema.id);
            }
            (Some(data), None) => {
                if let Some(contract) = self.contract(topic) {
                    let schema = self
                        .contract_schema(topic, contract, lookups)
                        .await
                        .map_err(|error| Failure {
                            side: Side::Value,
                            error,
                        })?;
                    match contract.mode {
                        ContractMode::Validate => schema.check(data).map_err(|m| Failure {
                            side: Side::Value,
                            error: SchemaError::Violation(m),
                        })?,
                        ContractMode::Serialize => {
                            out.value = Some(encode(&schema, data, Side::Value, self.limits.1)?);
                        }
                    }
                    out.value_id = Some(schema.id);
                }
            }
            (None, _) => {}
        }
        Ok(out)
    }

    /// The schema a topic's contract holds its values to: the latest of its subject.
    async fn contract_schema(
        &self,
        topic: &Topic,
        contract: &ContractConfig,
        lookups: &mut Lookups,
    ) -> Result<Arc<Compiled>, SchemaError> {
        let u = Use {
            source: Source::Version(None),
            subject: contract.subject.clone(),
            strategy: Strategy::TopicName,
            format: Some(contract.format),
        };
        self.resolve_as(topic, Side::Value, &u, lookups, true).await
    }

    /// Counts a record refused for its schema.
    pub fn count_violation(&self, tenant: &str, topic: &Topic) {
        let mut counts = self.violations.lock();
        let key: Series = (tenant.into(), topic.as_str().into());
        if let Some(n) = counts.get_mut(&key) {
            *n += 1;
            return;
        }
        let key = if counts.len() < MAX_VIOLATION_SERIES {
            key
        } else {
            (key.0, "_other".into())
        };
        *counts.entry(key).or_default() += 1;
    }

    /// The violation counts, for the metrics.
    pub fn violations(&self) -> Vec<(Arc<str>, Arc<str>, u64)> {
        self.violations
            .lock()
            .iter()
            .map(|((t, p), n)| (t.clone(), p.clone(), *n))
            .collect()
    }

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
    async fn resolve_as(
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
    fn may_name(&self, topic: &Topic, subject: &str) -> Result<(), SchemaError> {
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
    fn may_register(&self, topic: &Topic, subject: &str) -> bool {
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
        tokio::task::spawn_blocking(move || compile(format, &text))
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
fn own_subject(topic: &Topic, subject: &str) -> bool {
    subject
        .strip_prefix(topic.as_str())
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('-'))
}

fn encode(schema: &Compiled, data: &[u8], side: Side, limit: usize) -> Result<Vec<u8>, Failure> {
    schema.encode(data, limit).map_err(|m| Failure {
        side,
        error: SchemaError::Violation(m),
    })
}

fn call_error(e: CallError) -> SchemaError {
    match e {
        CallError::NotFound(m) => SchemaError::NotFound(m),
        CallError::Refused(m) => SchemaError::Invalid(format!("the Schema Registry refused: {m}")),
        CallError::Unavailable(m) => SchemaError::Unavailable(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_shapes_that_would_overflow_a_parser_are_refused_before_it_runs() {
        // A Protobuf option value nested 1,500 deep (9 KB) overflowed a worker's stack.
        let deep = format!(
            "syntax = \"proto2\"; import \"google/protobuf/descriptor.proto\";\n\
             message M {{ optional M a = 1; }}\n\
             extend google.protobuf.FileOptions {{ optional M foo = 50000; }}\n\
             option (foo) = {}{};",
            "{ a ".repeat(1500),
            "}".repeat(1500)
        );
        let e = within_bounds(Format::Protobuf, &deep, 1 << 20).expect_err("too deep");
        assert!(e.contains("nests"), "{e}");
        assert!(Compiled::new(1, Format::Protobuf, &deep).is_err());
        // A 20,000-long $ref chain overflowed the JSON Schema validator.
        let defs: Vec<String> = (0..20_000)
            .map(|i| format!("\"a{i}\":{{\"$ref\":\"#/$defs/a{}\"}}", i + 1))
            .collect();
        let chain = format!(
            "{{\"$ref\":\"#/$defs/a0\",\"$defs\":{{{}}}}}",
            defs.join(",")
        );
        let e = within_bounds(Format::Json, &chain, 1 << 20).expect_err("too many refs");
        assert!(e.contains("$refs"), "{e}");
        let e = within_bounds(Format::Avro, &"x".repeat(2048), 1024).expect_err("too large");
        assert!(e.contains("max_schema_bytes"), "{e}");
        // Brackets inside strings do not count.
        let quoted = format!("{{\"type\":\"string\",\"doc\":\"{}\"}}", "{[(".repeat(100));
        assert!(within_bounds(Format::Avro, &quoted, 1 << 20).is_ok());
        assert!(within_bounds(
            Format::Protobuf,
            "message M { string s = 1 [default = '{{{{']; }",
            1 << 20
        )
        .is_ok());
    }

    #[test]
    fn a_topic_owns_only_its_own_subjects_and_never_a_contracts() {
        let topic = |t: &str| Topic::parse(t).expect("topic");
        assert!(own_subject(&topic("orders"), "orders-value"));
        assert!(own_subject(&topic("orders"), "orders-key"));
        assert!(own_subject(&topic("orders"), "orders-shop.Order"));
        assert!(
            !own_subject(&topic("orders"), "orders-eu-value"),
            "topic orders-eu's"
        );
        assert!(!own_subject(&topic("orders"), "orders-"));
        assert!(!own_subject(&topic("orders"), "ordersx-value"));
        let contract = ContractConfig {
            topics: vec!["orders-eu".into()],
            format: Format::Json,
            mode: ContractMode::Validate,
            subject: None,
        };
        let config = SchemaRegistryConfig {
            url: Some("http://127.0.0.1:9".into()),
            ..SchemaRegistryConfig::default()
        };
        let schemas = Schemas::new(&config, &[contract], (1024, 1024)).expect("schemas");
        assert!(schemas.may_register(&topic("orders"), "orders-value"));
        assert!(
            !schemas.may_register(&topic("orders-eu"), "orders-eu-value"),
            "the contract's"
        );
        assert!(
            !schemas.may_register(&topic("orders"), "orders-eu-value"),
            "not orders' own"
        );
        assert!(schemas
            .may_name(&topic("orders"), "orders-eu-value")
            .is_err());
        assert!(schemas
            .may_name(&topic("orders"), "orders-value/../x")
            .is_err());
    }
}
