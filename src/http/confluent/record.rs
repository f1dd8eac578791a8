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
//!
//! [`v2`] and [`v3`] hold the two shapes; the base64 and size rules they share are here, and
//! v3's typed key and value objects are read in [`v3_wire`].

mod v2;
mod v3;
mod v3_wire;

use std::borrow::Cow;

use base64::Engine as _;

use crate::body::RecordError;
use crate::config::RequestBounds;
use crate::record::Record;
pub use v2::{V2Format, V2Record, V2Side, V2_FRAMING, V2_SIDE_FIELDS};
pub use v3::{V3Entry, V3Record, V3Types};
pub use v3_wire::DataType;

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

/// A whole number in range, or `null` for none (kafka-rest's `@Nullable Integer` fields).
fn whole_or_null<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    struct Whole<T>(Option<T>);
    impl<'de, T: TryFrom<i64>> serde::Deserialize<'de> for Whole<T> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            crate::body::whole(d).map(Whole)
        }
    }
    Ok(<Option<Whole<T>> as serde::Deserialize>::deserialize(d)?.and_then(|w| w.0))
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

#[cfg(test)]
mod tests;
