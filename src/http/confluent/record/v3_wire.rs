//! Confluent v3's wire shapes: a record object, its headers, and its typed key and value
//! objects (`{"type", "data"}` or the schema fields), read into bytes and what they want of the
//! schema step.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::b64;
use crate::body::RecordError;
use crate::schema;

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
pub(super) struct WireData<'a> {
    #[serde(default, rename = "type")]
    pub(super) data_type: Option<String>,
    #[serde(borrow, default)]
    pub(super) data: Option<&'a RawValue>,
    // Schema fields (kafka-rest's, and those kafka-rest refuses beside a type).
    #[serde(default)]
    pub(super) subject: Option<String>,
    #[serde(default)]
    pub(super) subject_name_strategy: Option<String>,
    #[serde(default)]
    pub(super) schema_id: Option<u32>,
    #[serde(default)]
    pub(super) schema_version: Option<i32>,
    #[serde(default)]
    pub(super) schema: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WireHeader<'a> {
    #[serde(borrow)]
    pub(super) name: Cow<'a, str>,
    #[serde(default)]
    pub(super) value: Option<String>,
}

/// A v3 record as sent. `null` is absent in every field, as in kafka-rest, whose
/// `ProduceRequest` reads each one `@Nullable` (`partition_id`, `headers`, `key`, `value`,
/// `timestamp`) and keeps a null as an empty `Optional` (headers: an empty list).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WireV3<'a> {
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default, deserialize_with = "super::whole_or_null")]
    pub(super) partition_id: Option<i32>,
    #[serde(borrow, default, deserialize_with = "headers_or_null")]
    pub(super) headers: Vec<WireHeader<'a>>,
    #[serde(borrow, default)]
    pub(super) key: Option<WireData<'a>>,
    #[serde(borrow, default)]
    pub(super) value: Option<WireData<'a>>,
    #[serde(default)]
    pub(super) timestamp: Option<String>,
}

/// `"headers": null` is no headers.
fn headers_or_null<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<WireHeader<'a>>, D::Error> {
    Option::<Vec<WireHeader<'a>>>::deserialize(d).map(Option::unwrap_or_default)
}

/// A key or value's type as sent, its bytes, and the schema it wants (its bytes are then the
/// data's JSON text, for the pipeline's schema step to write in the schema).
pub(super) type TypedBytes<'a> = (Option<DataType>, Option<Cow<'a, [u8]>>, Option<schema::Use>);

/// A key or value of a v3 record, as it was sent and as bytes. `registry`: whether the
/// gateway has a Schema Registry (without one, schema types and fields are refused here).
pub(super) fn v3_data<'a>(
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
pub(super) fn schema_data<'a>(
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
pub(super) fn timestamp_ms(text: &str) -> Result<i64, RecordError> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| RecordError::Invalid(format!("timestamp {text:?} is not ISO-8601: {e}")))?;
    let ms = at.unix_timestamp_nanos() / 1_000_000;
    i64::try_from(ms)
        .ok()
        .filter(|ms| *ms >= 0)
        .ok_or_else(|| RecordError::Invalid(format!("timestamp {text:?} is before 1970")))
}
