//! Confluent v2 records: `{"key", "value", "partition"}` inside `{"records": [...]}`, with the
//! envelope's schema fields taken beside `records` and kept as sent.

use std::borrow::Cow;
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{b64, check_sizes, serde_error};
use crate::body::{Framing, ParseRecord, RecordArena, RecordError};
use crate::config::RequestBounds;
use crate::record::Record;
use crate::schema;

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
    /// `null` is no partition, as in kafka-rest (`@Nullable Integer partition`): Confluent's
    /// own Node client sends `"partition": null` with every record.
    #[serde(default, deserialize_with = "super::whole_or_null")]
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
        let (wire, len) = crate::body::json_prefix::<WireV2<'_>>(text)?;
        let deep = |raw: Option<&RawValue>| raw.is_some_and(|r| !crate::body::shallow(r.get()));
        if deep(wire.key) || deep(wire.value) {
            return None;
        }
        arena.push(&self.record(wire, bounds).ok()?);
        Some(len)
    }
}
