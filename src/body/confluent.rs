//! Confluent REST Proxy record shapes, so existing producers can switch by changing a URL.
//!
//! - v2 (`application/vnd.kafka.binary.v2+json` / `.json.v2+json`, and their v1 names):
//!   `{"key", "value", "partition"}` inside `{"records": [...]}`; binary keys and values are
//!   base64, JSON ones are any JSON, written as their text byte for byte (as `/v1` does). The
//!   envelope's schema fields (`key_schema`, `key_schema_id`, `value_schema`,
//!   `value_schema_id`) are taken beside `records` and kept as sent ([`V2Record::take_side`]);
//!   with `.avro.`, `.jsonschema.` or `.protobuf.` keys and values are JSON, kept as their text
//!   for the pipeline's schema step.
//! - v3: `{"partition_id", "headers": [{"name", "value"}], "key": {"type", "data"},
//!   "value": {"type", "data"}, "timestamp"}`, one object per record (concatenated for a
//!   stream), or with an `"id"` inside `{"entries": [...]}` for a batch. Types are `BINARY`
//!   (base64), `JSON` (any JSON, written as its text) and `STRING` (UTF-8); with a Schema
//!   Registry also `AVRO`, `JSONSCHEMA`, `PROTOBUF` and the schema fields (`schema`,
//!   `schema_id`, `schema_version`, `subject`, `subject_name_strategy`), or no type at all (the
//!   subject's latest schema): the data's JSON text is kept and what it wants noted
//!   ([`V3Record::take_wanted`]) for the pipeline's schema step. In a batch, an entry
//!   that does not decode (a wrong type, bad base64, an unknown field, too large) is noted as a
//!   failed entry and the others are decoded (as Confluent answers: 207, that entry in
//!   `failures`); an entry id that breaks the batch's rules (missing, malformed, used twice)
//!   fails the whole batch, as kafka-rest checks ids before it produces any entry.

use std::borrow::Cow;
use std::sync::Mutex;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::v1::whole;
use super::{Framing, ParseRecord, RecordArena, RecordError};
use crate::config::RequestBounds;
use crate::record::Record;
use crate::schema;

/// Standard base64 with padding; unused trailing bits are ignored (as `/v1` does).
const B64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

fn b64<'a>(field: &str, text: &str) -> Result<Cow<'a, [u8]>, RecordError> {
    B64.decode(text)
        .map(Cow::Owned)
        .map_err(|e| RecordError::Invalid(format!("{field} is not valid base64: {e}")))
}

fn serde_error(e: serde_json::Error) -> RecordError {
    let message = e.to_string();
    let message = message
        .rsplit_once(" at line ")
        .map_or(message.as_str(), |(m, _)| m)
        .to_string();
    if e.is_data() {
        RecordError::Invalid(message)
    } else {
        RecordError::Syntax(message)
    }
}

fn check_sizes(record: &Record<'_>, bounds: &RequestBounds) -> Result<(), RecordError> {
    let key = record.key.as_ref().map_or(0, |k| k.len());
    if key > bounds.max_key_bytes {
        return Err(RecordError::TooLarge(format!(
            "key is {key} bytes; the limit is {}",
            bounds.max_key_bytes
        )));
    }
    let value = record.value.as_ref().map_or(0, |v| v.len());
    if value > bounds.max_value_bytes {
        return Err(RecordError::TooLarge(format!(
            "value is {value} bytes; the limit is {}",
            bounds.max_value_bytes
        )));
    }
    let headers: usize = record.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    if headers > bounds.max_headers_bytes {
        return Err(RecordError::TooLarge(format!(
            "headers are {headers} bytes; the limit is {}",
            bounds.max_headers_bytes
        )));
    }
    Ok(())
}

/// The v2 embedded formats floodgate serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V2Format {
    Binary,
    Json,
    /// `avro`, `jsonschema` or `protobuf`: keys and values are JSON, written in the schema
    /// the body's side fields name (the pipeline's schema step).
    Schema(schema::Format),
}

/// The side fields a v2 body may carry beside `records`.
pub const V2_SIDE_FIELDS: [&str; 4] = [
    "key_schema",
    "key_schema_id",
    "value_schema",
    "value_schema_id",
];

/// v2's body: `{"records": [...]}` with its schema fields beside the records.
pub const V2_FRAMING: Framing = Framing::EnvelopeSide {
    records: "records",
    side: &V2_SIDE_FIELDS,
};

/// A v2 body's schema fields, each as its JSON text exactly as sent (`"{\"type\": ...}"` with
/// its quotes and escapes, `42`, or `null`); `None` when the field was not sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V2Side {
    pub key_schema: Option<String>,
    pub key_schema_id: Option<String>,
    pub value_schema: Option<String>,
    pub value_schema_id: Option<String>,
}

/// A v2 record; `default_partition` comes from the URL (`/topics/T/partitions/P`), and a
/// record's own `partition` overrides it, as in Confluent. Keeps the body's side fields
/// ([`V2Record::take_side`]).
#[derive(Debug)]
pub struct V2Record {
    pub format: V2Format,
    pub default_partition: Option<i32>,
    side: Mutex<V2Side>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireV2<'a> {
    #[serde(borrow, default)]
    key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "whole")]
    partition: Option<i32>,
}

impl V2Record {
    pub fn new(format: V2Format, default_partition: Option<i32>) -> Self {
        Self {
            format,
            default_partition,
            side: Mutex::default(),
        }
    }

    /// The body's schema fields seen so far (all of them once the body is decoded), moved out.
    pub fn take_side(&self) -> V2Side {
        std::mem::take(
            &mut *self
                .side
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// A key or value as bytes: base64 text for binary, the JSON text for json; `null` is a
    /// Kafka null either way.
    fn bytes<'a>(
        &self,
        field: &str,
        raw: Option<&'a RawValue>,
    ) -> Result<Option<Cow<'a, [u8]>>, RecordError> {
        let Some(raw) = raw.filter(|r| r.get() != "null") else {
            return Ok(None);
        };
        match self.format {
            V2Format::Json | V2Format::Schema(_) => Ok(Some(Cow::Borrowed(raw.get().as_bytes()))),
            V2Format::Binary => {
                let text: Cow<'a, str> = serde_json::from_str(raw.get()).map_err(|_| {
                    RecordError::Invalid(format!(
                        "{field} must be a base64 string (the binary embedded format)"
                    ))
                })?;
                b64(field, &text).map(Some)
            }
        }
    }

    /// The record a parsed wire record stands for, within bounds.
    fn record<'a>(
        &self,
        wire: WireV2<'a>,
        bounds: &RequestBounds,
    ) -> Result<Record<'a>, RecordError> {
        if let Some(p) = wire.partition.filter(|p| *p < 0) {
            return Err(RecordError::Invalid(format!("partition {p} is negative")));
        }
        let record = Record {
            key: self.bytes("key", wire.key)?,
            value: self.bytes("value", wire.value)?,
            headers: Vec::new(),
            partition: wire.partition.or(self.default_partition),
            timestamp_ms: None,
        };
        check_sizes(&record, bounds)?;
        Ok(record)
    }
}

impl ParseRecord for V2Record {
    fn parse<'a>(&self, text: &'a [u8], bounds: &RequestBounds) -> Result<Record<'a>, RecordError> {
        let wire: WireV2<'a> = serde_json::from_slice(text).map_err(serde_error)?;
        self.record(wire, bounds)
    }

    /// Keeps a schema field's JSON text (checked to be JSON; what it means is for the schema
    /// step to decide).
    fn side_field(&self, name: &str, raw_json: &[u8]) -> Result<(), RecordError> {
        serde_json::from_slice::<serde::de::IgnoredAny>(raw_json).map_err(serde_error)?;
        let text = std::str::from_utf8(raw_json)
            .map_err(|_| RecordError::Invalid("is not UTF-8".into()))?
            .to_string();
        let mut side = self
            .side
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = match name {
            "key_schema" => &mut side.key_schema,
            "key_schema_id" => &mut side.key_schema_id,
            "value_schema" => &mut side.value_schema,
            "value_schema_id" => &mut side.value_schema_id,
            _ => return Err(RecordError::Invalid(format!("unknown field {name:?}"))),
        };
        *slot = Some(text);
        Ok(())
    }

    fn decode_prefix(
        &self,
        text: &[u8],
        bounds: &RequestBounds,
        arena: &mut RecordArena,
    ) -> Option<usize> {
        let (wire, len) = super::json_prefix::<WireV2<'_>>(text)?;
        let deep = |raw: Option<&RawValue>| raw.is_some_and(|r| !super::shallow(r.get()));
        if deep(wire.key) || deep(wire.value) {
            return None;
        }
        arena.push(&self.record(wire, bounds).ok()?);
        Some(len)
    }
}

/// The types a v3 key or value may have: embedded, or written in a schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    Binary,
    Json,
    String,
    Avro,
    JsonSchema,
    Protobuf,
}

impl DataType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Binary => "BINARY",
            Self::Json => "JSON",
            Self::String => "STRING",
            Self::Avro => "AVRO",
            Self::JsonSchema => "JSONSCHEMA",
            Self::Protobuf => "PROTOBUF",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireData<'a> {
    #[serde(default, rename = "type")]
    data_type: Option<String>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    // Schema fields (kafka-rest's, and those kafka-rest refuses beside a type).
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    subject_name_strategy: Option<String>,
    #[serde(default)]
    schema_id: Option<u32>,
    #[serde(default)]
    schema_version: Option<i32>,
    #[serde(default)]
    schema: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireHeader<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    value: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireV3<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default, deserialize_with = "whole")]
    partition_id: Option<i32>,
    #[serde(borrow, default)]
    headers: Vec<WireHeader<'a>>,
    #[serde(borrow, default, deserialize_with = "present_data")]
    key: Option<WireData<'a>>,
    #[serde(borrow, default, deserialize_with = "present_data")]
    value: Option<WireData<'a>>,
    #[serde(default, deserialize_with = "present_string")]
    timestamp: Option<String>,
}

/// A key or value object when present: `null` is not one (leave the field out instead).
fn present_data<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<WireData<'a>>, D::Error> {
    WireData::deserialize(d).map(Some)
}

/// A string when present: `null` is not a timestamp.
fn present_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    String::deserialize(d).map(Some)
}

/// A key or value's type as sent, its bytes, and the schema it wants (its bytes are then the
/// data's JSON text, for the pipeline's schema step to write in the schema).
type TypedBytes<'a> = (Option<DataType>, Option<Cow<'a, [u8]>>, Option<schema::Use>);

/// A key or value of a v3 record, as it was sent and as bytes. `registry`: whether the
/// gateway has a Schema Registry (without one, schema types and fields are refused here).
fn v3_data<'a>(
    field: &str,
    data: Option<WireData<'a>>,
    registry: bool,
) -> Result<TypedBytes<'a>, RecordError> {
    let Some(data) = data else {
        return Ok((None, None, None));
    };
    let schema_fields = data.subject.is_some()
        || data.subject_name_strategy.is_some()
        || data.schema_id.is_some()
        || data.schema_version.is_some()
        || data.schema.is_some();
    let data_type = match data.data_type.as_deref() {
        Some("BINARY") => DataType::Binary,
        Some("JSON") => DataType::Json,
        Some("STRING") => DataType::String,
        Some(t @ ("AVRO" | "JSONSCHEMA" | "PROTOBUF")) if !registry => {
            return Err(RecordError::Invalid(format!(
                "{field}: type {t} needs a Schema Registry, which this gateway has not configured ([schema_registry] url); send BINARY, JSON or STRING"
            )))
        }
        Some(t @ ("AVRO" | "JSONSCHEMA" | "PROTOBUF")) => {
            let format = match t {
                "AVRO" => schema::Format::Avro,
                "JSONSCHEMA" => schema::Format::Json,
                _ => schema::Format::Protobuf,
            };
            return schema_data(field, data, Some(format));
        }
        Some(other) => {
            return Err(RecordError::Invalid(format!(
                "{field}: unknown type {other:?}; send BINARY, JSON, STRING, AVRO, JSONSCHEMA or PROTOBUF"
            )))
        }
        None if !registry && schema_fields => {
            return Err(RecordError::Invalid(format!(
                "{field}: schema fields need a Schema Registry, which this gateway has not configured ([schema_registry] url); send a type of BINARY, JSON or STRING"
            )))
        }
        None if !registry => {
            return Err(RecordError::Invalid(format!(
                "{field}: a type is required (BINARY, JSON or STRING); without a type the latest schema of the subject is meant, and this gateway has no Schema Registry configured"
            )))
        }
        // No type: the schema the fields name, or the subject's latest (as kafka-rest).
        None => return schema_data(field, data, None),
    };
    if schema_fields {
        return Err(RecordError::Invalid(format!(
            "{field}: schema fields cannot be used with type {}",
            data_type.as_str()
        )));
    }
    let Some(raw) = data.data.filter(|r| r.get() != "null") else {
        return Ok((Some(data_type), None, None));
    };
    let bytes = match data_type {
        DataType::Json => Cow::Borrowed(raw.get().as_bytes()),
        _ => {
            let text: Cow<'a, str> = serde_json::from_str(raw.get()).map_err(|_| {
                RecordError::Invalid(format!(
                    "{field}: data must be a string for type {}",
                    data_type.as_str()
                ))
            })?;
            if data_type == DataType::Binary {
                b64(&format!("{field}.data"), &text)?
            } else {
                Cow::Owned(text.into_owned().into_bytes())
            }
        }
    };
    Ok((Some(data_type), Some(bytes), None))
}

/// A key or value written in a schema: which one, from the fields, and the data's JSON text.
fn schema_data<'a>(
    field: &str,
    data: WireData<'a>,
    format: Option<schema::Format>,
) -> Result<TypedBytes<'a>, RecordError> {
    let strategy = match data.subject_name_strategy.as_deref() {
        None => schema::Strategy::TopicName,
        Some(s) => schema::Strategy::parse(s).ok_or_else(|| {
            RecordError::Invalid(format!(
                "{field}: subject_name_strategy {s:?} is not TOPIC_NAME, RECORD_NAME or TOPIC_RECORD_NAME"
            ))
        })?,
    };
    let named = [
        data.schema.is_some(),
        data.schema_id.is_some(),
        data.schema_version.is_some(),
    ];
    if named.iter().filter(|n| **n).count() > 1 {
        return Err(RecordError::Invalid(format!(
            "{field}: name the schema once: schema, schema_id or schema_version"
        )));
    }
    if data.subject.is_some() && data.subject_name_strategy.is_some() {
        return Err(RecordError::Invalid(format!(
            "{field}: subject and subject_name_strategy cannot both be given"
        )));
    }
    let source = match (data.schema, data.schema_id, data.schema_version) {
        (Some(text), _, _) => {
            let Some(format) = format else {
                return Err(RecordError::Invalid(format!(
                    "{field}: a raw schema needs its type (AVRO, JSONSCHEMA or PROTOBUF)"
                )));
            };
            schema::Source::Raw(format, text.into())
        }
        (None, Some(id), _) => schema::Source::Id(id),
        (None, None, Some(v)) if v < 1 => {
            return Err(RecordError::Invalid(format!(
                "{field}: schema_version {v} is not a version (1 or more)"
            )))
        }
        (None, None, version) => schema::Source::Version(version),
    };
    let wanted = schema::Use {
        source,
        subject: data.subject,
        strategy,
        format,
    };
    let bytes = data
        .data
        .filter(|r| r.get() != "null")
        .map(|raw| Cow::Borrowed(raw.get().as_bytes()));
    let data_type = format.map(|f| match f {
        schema::Format::Avro => DataType::Avro,
        schema::Format::Json => DataType::JsonSchema,
        schema::Format::Protobuf => DataType::Protobuf,
    });
    Ok((data_type, bytes, Some(wanted)))
}

/// Milliseconds since the epoch of an RFC 3339 (ISO-8601) timestamp.
fn timestamp_ms(text: &str) -> Result<i64, RecordError> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| RecordError::Invalid(format!("timestamp {text:?} is not ISO-8601: {e}")))?;
    let ms = at.unix_timestamp_nanos() / 1_000_000;
    i64::try_from(ms)
        .ok()
        .filter(|ms| *ms >= 0)
        .ok_or_else(|| RecordError::Invalid(format!("timestamp {text:?} is before 1970")))
}

/// The types a v3 record's key and value were sent with, and their sizes in bytes (its
/// delivery report names them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct V3Types {
    pub key: Option<DataType>,
    pub value: Option<DataType>,
    pub key_size: usize,
    pub value_size: usize,
}

/// One entry of a v3 body as the parser saw it, in body order: its id (batch entries), its
/// types and sizes, and why it is not written, if it is not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V3Entry {
    pub id: Option<String>,
    pub types: V3Types,
    /// Decoded into a record: it has an index among the decoded records (see
    /// [`ParseRecord::fail_record`]).
    pub decoded: bool,
    /// Not written: the status the answer gives the entry (400, 413, 422) and the message.
    pub failed: Option<(u16, String)>,
}

/// v3 records. Remembers, in order, each entry's types and (for a batch) its id, which the
/// answer repeats, and which batch entries failed (at decoding, or later through
/// [`ParseRecord::fail_record`]).
#[derive(Debug, Default)]
pub struct V3Record {
    /// Batch entries carry an `id`; stream records must not.
    pub batch: bool,
    /// Whether the gateway has a Schema Registry: without one, schema types are refused here.
    pub registry: bool,
    seen: Mutex<Vec<V3Entry>>,
    /// What each decoded record's key and value want of the schema step, in record order.
    wanted: Mutex<Vec<schema::Wanted>>,
}

/// Just a batch entry's id, read from an entry that failed to decode.
#[derive(Deserialize)]
struct EntryIdOnly {
    #[serde(default)]
    id: Option<serde_json::Value>,
}

impl V3Record {
    pub fn batch() -> Self {
        Self {
            batch: true,
            ..Self::default()
        }
    }

    /// With (or without) a Schema Registry to resolve schema types.
    pub fn with_registry(mut self, registry: bool) -> Self {
        self.registry = registry;
        self
    }

    /// What the records parsed since the last call want of the schema step, in order.
    pub fn take_wanted(&self) -> Vec<schema::Wanted> {
        std::mem::take(
            &mut *self
                .wanted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// What decoded record `index` (since the last take) wants, left in place.
    pub fn wanted_at(&self, index: usize) -> Option<schema::Wanted> {
        self.wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(index)
            .cloned()
    }

    /// A batch entry's id: 1 to 80 of `0-9 A-Z a-z _ -`, not used before in the batch.
    fn check_id(&self, id: &str) -> Result<(), RecordError> {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
        if id.is_empty() || id.len() > 80 || !id.chars().all(legal) {
            return Err(RecordError::EntryId(format!(
                "entry id {id:?} must be 1 to 80 characters of 0-9 A-Z a-z _ -"
            )));
        }
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.iter().any(|other| other.id.as_deref() == Some(id)) {
            return Err(RecordError::EntryId(format!(
                "entry id {id:?} is used twice"
            )));
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<V3Entry>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entries seen since the last call, in body order (failed ones included).
    pub fn take_seen(&self) -> Vec<V3Entry> {
        std::mem::take(&mut *self.lock())
    }
}

/// A stream's records carry no id: what a report needs is each record's types and sizes.
impl super::RecordNotes for V3Record {
    type Note = V3Types;

    fn take_notes(&self) -> Vec<V3Types> {
        self.take_seen()
            .into_iter()
            .map(|entry| entry.types)
            .collect()
    }
}

impl ParseRecord for V3Record {
    fn parse<'a>(&self, text: &'a [u8], bounds: &RequestBounds) -> Result<Record<'a>, RecordError> {
        let wire: WireV3<'a> = serde_json::from_slice(text).map_err(serde_error)?;
        match (&wire.id, self.batch) {
            (None, true) => {
                return Err(RecordError::EntryId(
                    "entry id is missing; every batch entry has one".into(),
                ))
            }
            (Some(_), false) => {
                return Err(RecordError::Invalid(
                    "unknown field `id` (ids are for records:batch)".into(),
                ))
            }
            (Some(id), true) => self.check_id(id)?,
            (None, false) => {}
        }
        if let Some(p) = wire.partition_id.filter(|p| *p < 0) {
            return Err(RecordError::Invalid(format!(
                "partition_id {p} is negative"
            )));
        }
        let (key_type, key, key_schema) = v3_data("key", wire.key, self.registry)?;
        let (value_type, value, value_schema) = v3_data("value", wire.value, self.registry)?;
        let mut headers = Vec::with_capacity(wire.headers.len());
        for h in wire.headers {
            let value = match h.value {
                Some(text) => b64(&format!("header {:?}", h.name), &text)?,
                // Kafka header values may be null; floodgate writes them empty.
                None => Cow::Borrowed(&b""[..]),
            };
            headers.push((h.name, value));
        }
        let record = Record {
            key,
            value,
            headers,
            partition: wire.partition_id,
            timestamp_ms: wire.timestamp.as_deref().map(timestamp_ms).transpose()?,
        };
        check_sizes(&record, bounds)?;
        self.wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(schema::Wanted {
                key: key_schema,
                value: value_schema,
            });
        self.lock().push(V3Entry {
            id: wire.id,
            types: V3Types {
                key: key_type,
                value: value_type,
                key_size: record.key.as_ref().map_or(0, |k| k.len()),
                value_size: record.value.as_ref().map_or(0, |v| v.len()),
            },
            decoded: true,
            failed: None,
        });
        Ok(record)
    }

    /// A batch entry that is valid JSON but not a valid record (400), or too large (413), is a
    /// failed entry, named by its id; one whose id is missing or breaks the batch's rules fails
    /// the batch (kafka-rest checks ids before producing anything). Not JSON: the whole body.
    fn skip_failed(&self, text: &[u8], error: &RecordError) -> Result<bool, RecordError> {
        let (status, message) = match error {
            _ if !self.batch => return Ok(false),
            RecordError::Invalid(m) => (400, m),
            RecordError::TooLarge(m) => (413, m),
            RecordError::Syntax(_) | RecordError::EntryId(_) => return Ok(false),
        };
        let Ok(entry) = serde_json::from_slice::<EntryIdOnly>(text) else {
            return Ok(false);
        };
        let id = match entry.id {
            None => {
                return Err(RecordError::EntryId(
                    "entry id is missing; every batch entry has one".into(),
                ))
            }
            Some(serde_json::Value::String(id)) => id,
            Some(other) => {
                return Err(RecordError::EntryId(format!(
                    "entry id {other} must be a string"
                )))
            }
        };
        self.check_id(&id)?;
        let mut seen = self.lock();
        let position = seen.len();
        seen.push(V3Entry {
            id: Some(id),
            types: V3Types::default(),
            decoded: false,
            failed: Some((status, format!("record {position}: {message}"))),
        });
        Ok(true)
    }

    fn fail_record(&self, record_index: usize, status: u16, message: String) -> bool {
        if !self.batch {
            return false;
        }
        let mut seen = self.lock();
        let Some((position, entry)) = seen
            .iter_mut()
            .enumerate()
            .filter(|(_, e)| e.decoded)
            .nth(record_index)
        else {
            return false;
        };
        // The pipeline names a record by its index among the decoded ones; the batch's
        // answer names it by its place in the body, as its decoding failures do.
        let message = match message.strip_prefix(&format!("record {record_index}:")) {
            Some(rest) => format!("record {position}:{rest}"),
            None => message,
        };
        if entry.failed.is_none() {
            entry.failed = Some((status, message));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> RequestBounds {
        RequestBounds::default()
    }

    #[test]
    fn v2_binary_and_json_records() {
        let bin = V2Record::new(V2Format::Binary, Some(2));
        let r = bin
            .parse(br#"{"key":"a2V5","value":"dmFsdWU="}"#, &bounds())
            .expect("binary");
        assert_eq!(
            (r.key.as_deref(), r.value.as_deref()),
            (Some(&b"key"[..]), Some(&b"value"[..]))
        );
        assert_eq!(r.partition, Some(2), "the URL's partition");
        let json = V2Record::new(V2Format::Json, Some(2));
        let r = json
            .parse(br#"{"value":{"b": 1.50},"partition":0}"#, &bounds())
            .expect("json");
        assert_eq!(r.value.as_deref(), Some(&br#"{"b": 1.50}"#[..]));
        assert_eq!(r.partition, Some(0), "the record's own partition wins");
        assert!(matches!(
            json.parse(br#"{"value":1,"colour":"red"}"#, &bounds()),
            Err(RecordError::Invalid(_))
        ));
        assert!(matches!(
            bin.parse(br#"{"value":{"not":"base64"}}"#, &bounds()),
            Err(RecordError::Invalid(_))
        ));
    }

    #[test]
    fn v3_records_with_every_type() {
        let p = V3Record::default();
        let r = p
            .parse(
                br#"{"partition_id":1,"headers":[{"name":"h","value":"eA=="},{"name":"h","value":null}],
                    "key":{"type":"STRING","data":"k\u00e9"},"value":{"type":"JSON","data":{"a":[1, 2]}},
                    "timestamp":"2026-11-30T12:00:00.250+01:00"}"#,
                &bounds(),
            )
            .expect("valid");
        assert_eq!(r.key.as_deref(), Some("ké".as_bytes()));
        assert_eq!(r.value.as_deref(), Some(&br#"{"a":[1, 2]}"#[..]));
        assert_eq!(r.headers.len(), 2, "repeated names are allowed");
        assert_eq!(r.timestamp_ms, Some(1_796_036_400_250));
        assert_eq!(
            p.take_seen(),
            vec![V3Entry {
                id: None,
                types: V3Types {
                    key: Some(DataType::String),
                    value: Some(DataType::Json),
                    key_size: 3,
                    value_size: 12,
                },
                decoded: true,
                failed: None,
            }]
        );
    }

    #[test]
    fn v3_refuses_what_needs_a_schema_registry() {
        let p = V3Record::default();
        for body in [
            &br#"{"value":{"data":1}}"#[..],
            br#"{"value":{"type":"AVRO","data":1}}"#,
            br#"{"value":{"schema_id":3,"data":1}}"#,
            br#"{"value":{"type":"JSON","schema_id":3,"data":1}}"#,
        ] {
            match p.parse(body, &bounds()) {
                Err(RecordError::Invalid(m)) => assert!(
                    m.contains("type") || m.contains("Schema Registry") || m.contains("schema"),
                    "{m}"
                ),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            V3Record::batch().parse(br#"{"value":{"type":"JSON","data":1}}"#, &bounds()),
            Err(RecordError::EntryId(_))
        ));
    }
}
