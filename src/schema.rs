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
//! The work is bounded and charged where it happens: every compile, and every check of a
//! value beyond a few KB, runs on the step's own threads ([`pool`]) within the tenant's share
//! and a CPU deadline per record ([`work`]); a compile is measured and refused past its
//! memory bound; a raw schema's subject and the request's lookups are checked before it is
//! compiled, the data before the registry is asked, and a registration waits for the
//! pipeline to say the request passed everything else ([`Pending`], [`register`]), charged
//! to the tenant. Failed compiles, unknown ids, subjects and versions are remembered.
//!
//! Layer: domain. Imports configuration and the record type; the pipeline imports it.

pub mod avro;
mod call_slots;
mod compiled;
mod convert;
pub mod json;
mod lookups;
pub mod names;
mod parse_memory;
mod pointer;
pub mod pool;
pub mod protobuf;
mod raw;
mod register;
pub mod registry_client;
mod resolve;
mod thread_cpu;
mod unpaid_work;
mod work;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::budget::{Clock, MonotonicClock};
use crate::config::{ContractConfig, ContractMode, SchemaRegistryConfig};
use crate::identity::{Topic, TopicPatterns};
use compiled::CompileBounds;
pub use registry_client::SchemaRegistryClient;
use resolve::{Cache, Resolved};

pub use crate::config::SchemaFormat as Format;
pub use compiled::{Compiled, MAX_SCHEMA_NESTING, MAX_SCHEMA_REFS};
pub use lookups::{Admissible, Lookups, LOOKUPS_PER_REQUEST};
pub use names::{MAX_NAME_BYTES, MAX_NAME_PARTS};
pub use register::{Converted, Pending};
pub use unpaid_work::ChecksOwed;

pub use crate::quote::{clip, MAX_QUOTE};

/// Where and why a value does not fit its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// JSON pointer into the value (`""` for the value itself).
    pub pointer: String,
    pub message: String,
    /// Refused for what checking it would cost (a 422 `schema_too_costly`), not for its data.
    pub too_costly: bool,
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
    /// The registry refused to register the schema (422 `schema_invalid`): registry state,
    /// like `NotFound`, so an answer carrying it is not kept for replay.
    Refused(String),
    /// Checking the value, or compiling the schema, is over a bound the detail names (422
    /// `schema_too_costly`).
    TooCostly(String),
    /// The tenant's share of the schema step is taken for longer than the wait limit, or its
    /// registrations are spent: retry after this long (429 `schema_busy`).
    Busy(Duration, String),
    /// The schema threads were busy with other tenants' work for longer than the wait limit,
    /// nothing of this tenant's own ahead (429 `schema_busy`, which does not spend the
    /// tenant's allowance of `Idempotency-Key` releases).
    Crowded(Duration, String),
    /// The request could no longer be admitted when its check was to start (its budgets were
    /// spent while it queued): the caller answers with admission's own refusal.
    Inadmissible,
}

impl SchemaError {
    /// What a refusal of the schema step's pool means for the client of `what` (the job).
    fn of_pool(e: pool::PoolError, what: &str) -> Self {
        let (wait, own) = match e {
            pool::PoolError::Busy(wait) => (wait, true),
            pool::PoolError::Crowded(wait) => (wait, false),
            pool::PoolError::Lost => {
                return Self::Invalid(format!("{what} failed; it has been logged"))
            }
        };
        let whose = match own {
            true => "this tenant's share of the schema threads",
            false => "the schema threads, busy with other tenants' work",
        };
        let ms = wait.as_millis();
        let detail = format!("{what} waited {ms} ms for {whose} ([schema_registry] wait_ms, workers, tenant_workers): retry shortly");
        match own {
            true => Self::Busy(wait, detail),
            false => Self::Crowded(wait, detail),
        }
    }
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
        let detail = match &self.error {
            SchemaError::Violation(m) if m.pointer.is_empty() => format!("{side}: {}", m.message),
            SchemaError::Violation(m) => {
                format!("{side} {}: {}", clip(&m.pointer, MAX_QUOTE), m.message)
            }
            SchemaError::NotFound(d)
            | SchemaError::Invalid(d)
            | SchemaError::Unavailable(d)
            | SchemaError::Refused(d)
            | SchemaError::TooCostly(d)
            | SchemaError::Busy(_, d)
            | SchemaError::Crowded(_, d) => format!("{side}: {d}"),
            SchemaError::Inadmissible => format!("{side}: the request can no longer be admitted"),
            SchemaError::NoRegistry => format!(
                "{side}: schemas need a Schema Registry, and this gateway has none configured ([schema_registry] url)"
            ),
        };
        crate::quote::brief(detail)
    }
}

/// Schemas from the registry, with their bounds, and the topics' contracts.
pub struct Schemas {
    client: Option<SchemaRegistryClient>,
    /// The most bytes a key and a value may take in their schema (`[limits]`).
    limits: (usize, usize),
    /// The step's own threads: compiles and large checks, shared fairly by tenant.
    pool: pool::Pool,
    /// The bounds of a compile.
    bounds: CompileBounds,
    /// CPU one record's check may take.
    max_check_cpu: Duration,
    /// Each tenant's registrations (GCRA TATs), on `clock`.
    registrations: Mutex<HashMap<Arc<str>, u64>>,
    /// Each tenant's registry lookups (GCRA TATs), on `clock`.
    lookups: Mutex<HashMap<Arc<str>, u64>>,
    /// The CPU each tenant's refused checks took, charged to it.
    unpaid_work: Arc<unpaid_work::UnpaidWork>,
    clock: Arc<dyn Clock>,
    /// Refusals by the bound that refused, for the metrics.
    refusals: Mutex<HashMap<&'static str, u64>>,
    /// Subjects any topic may name (beside its own `<topic>-...`).
    open_subjects: Vec<glob::Pattern>,
    config: SchemaRegistryConfig,
    cache: Mutex<Cache>,
    /// Registry calls in flight, in all and per tenant.
    calls: call_slots::CallSlots,
    contracts: Vec<(TopicPatterns, ContractConfig)>,
    /// Values refused for not fitting a schema, per tenant and topic.
    violations: Mutex<HashMap<Series, u64>>,
}

impl std::fmt::Debug for Schemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schemas")
            .field("registry", &self.client)
            .field("contracts", &self.contracts.len())
            .finish()
    }
}

/// A violation series: tenant and topic.
type Series = (Arc<str>, Arc<str>);

/// Most (tenant, topic) pairs counted one by one; further violations count under topic
/// `_other` for their tenant.
const MAX_VIOLATION_SERIES: usize = 1_000;

impl Schemas {
    /// `limits`: the most bytes a key and a value may take once in their schema.
    pub fn new(
        config: &SchemaRegistryConfig,
        contracts: &[ContractConfig],
        limits: (usize, usize),
    ) -> Result<Self, String> {
        let client = match &config.url {
            Some(url) => Some(SchemaRegistryClient::new(
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
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
        let pool = pool::Pool::lingering(
            config.workers,
            config.tenant_workers,
            Duration::from_millis(config.wait_ms),
            clock.clone(),
            pool::LINGER,
            true,
        )?;
        let bounds = CompileBounds {
            max_text: config.max_schema_bytes,
            max_memory: config.max_schema_memory_bytes,
            json: json::JsonBounds {
                max_patterns: config.max_schema_patterns,
                max_pattern_bytes: config.max_pattern_bytes,
            },
        };
        Ok(Self {
            client,
            limits,
            pool,
            bounds,
            max_check_cpu: Duration::from_millis(config.max_check_cpu_ms),
            registrations: Mutex::default(),
            lookups: Mutex::default(),
            unpaid_work: Arc::new(unpaid_work::UnpaidWork::new(
                config.tenant_unpaid_work_ms_per_sec,
                config.tenant_unpaid_work_ms_burst,
            )),
            clock,
            refusals: Mutex::default(),
            open_subjects,
            config: config.clone(),
            cache: Mutex::default(),
            calls: call_slots::CallSlots::new(
                config.max_concurrent_calls,
                config.tenant_concurrent_calls,
            ),
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
}

/// Why a schema was not compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileError {
    /// Not a valid schema of its format.
    Invalid(String),
    /// Over a bound on what it would cost (memory, patterns): 422 `schema_too_costly`.
    TooCostly(String),
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(m) | Self::TooCostly(m) => f.write_str(m),
        }
    }
}

#[cfg(test)]
mod tests;
