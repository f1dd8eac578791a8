//! The `/v1` record: `{"value" | "value_b64", "key" | "key_b64", "headers", "partition",
//! "timestamp_ms"}`, as one JSON object. Parsing borrows from the record's text: a `value` is
//! the exact JSON text of the request (key order, number formatting and white space inside the
//! value survive), and keys and header strings without escapes are not copied.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use base64::Engine as _;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::body::{whole, ParseRecord, RecordArena, RecordError};
use crate::config::RequestBounds;
use crate::record::Record;

/// Parses one `/v1` record object.
#[derive(Debug, Clone, Copy, Default)]
pub struct V1Record;

impl ParseRecord for V1Record {
    fn parse<'a>(&self, text: &'a [u8], bounds: &RequestBounds) -> Result<Record<'a>, RecordError> {
        serde_parse(text, bounds)
    }

    /// A whole record (an NDJSON line, or one the scanner completed across chunks): the fast
    /// reader if it accepts the whole text, else serde_json's path, which names every error.
    fn decode(
        &self,
        text: &[u8],
        bounds: &RequestBounds,
        arena: &mut RecordArena,
    ) -> Result<(), RecordError> {
        if super::fast::record_into(text, bounds, arena, true).is_some() {
            return Ok(());
        }
        arena.push(&serde_parse(text, bounds)?);
        Ok(())
    }

    fn decode_prefix(
        &self,
        text: &[u8],
        bounds: &RequestBounds,
        arena: &mut RecordArena,
    ) -> Option<usize> {
        super::fast::record_into(text, bounds, arena, false).or_else(|| {
            let (record, len) = serde_prefix(text, bounds)?;
            arena.push(&record);
            Some(len)
        })
    }
}

/// The whole record `text` through serde_json: every form the fast reader declines, and every
/// error, named.
pub(crate) fn serde_parse<'a>(
    text: &'a [u8],
    bounds: &RequestBounds,
) -> Result<Record<'a>, RecordError> {
    let _limit = HeaderLimit::set(bounds.max_headers_bytes);
    let mut de = serde_json::Deserializer::from_slice(text);
    let wire = WireRecord::deserialize(&mut de)
        .and_then(|w| de.end().map(|()| w))
        .map_err(|e| {
            let message = strip_position(&e.to_string());
            if HeaderLimit::exceeded() {
                RecordError::TooLarge(message)
            } else if e.is_data() {
                RecordError::Invalid(message)
            } else {
                RecordError::Syntax(message)
            }
        })?;
    wire.into_record(bounds).map_err(|p| match p {
        RecordProblem::Invalid(m) => RecordError::Invalid(m),
        RecordProblem::TooLarge(m) => RecordError::TooLarge(m),
    })
}

/// A valid record at the start of `text` through serde_json, and its length.
pub(crate) fn serde_prefix<'a>(
    text: &'a [u8],
    bounds: &RequestBounds,
) -> Option<(Record<'a>, usize)> {
    let _limit = HeaderLimit::set(bounds.max_headers_bytes);
    let (wire, len) = crate::body::json_prefix::<WireRecord<'a>>(text)?;
    if let Some(Some(raw)) = wire.value {
        if !crate::body::shallow(raw.get()) {
            return None;
        }
    }
    Some((wire.into_record(bounds).ok()?, len))
}

/// serde_json's position is within the record, which would mislead: the caller names the
/// record (and line) instead.
fn strip_position(message: &str) -> String {
    message
        .rsplit_once(" at line ")
        .map_or(message, |(m, _)| m)
        .to_string()
}

/// A record as it appears on the wire.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRecord<'a> {
    /// Absent: `None`; `null`: `Some(None)`.
    #[serde(borrow, default, deserialize_with = "present")]
    value: Option<Option<&'a RawValue>>,
    #[serde(borrow, default, deserialize_with = "text")]
    value_b64: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    key: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    key_b64: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "headers")]
    headers: Option<Headers<'a>>,
    #[serde(default, deserialize_with = "whole")]
    partition: Option<i32>,
    #[serde(default, deserialize_with = "whole")]
    timestamp_ms: Option<i64>,
}

// Fields other than `value` are absent or hold a value of their type: `null` is not a key, a
// partition or a timestamp, and is refused rather than read as "absent".

/// A string, borrowed from the body when it has no escapes.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct Text;
    impl<'de> Visitor<'de> for Text {
        type Value = Cow<'de, str>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(v))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Cow::Owned(v))
        }
    }
    d.deserialize_str(Text).map(Some)
}

fn headers<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Headers<'de>>, D::Error> {
    Headers::deserialize(d).map(Some)
}

/// Tells `"field": null` (Some(None)) from an absent field (None, via `default`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<&'de RawValue>>, D::Error> {
    Option::<&'de RawValue>::deserialize(d).map(Some)
}

enum RecordProblem {
    Invalid(String),
    TooLarge(String),
}

impl fmt::Display for RecordProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(m) | Self::TooLarge(m) => f.write_str(m),
        }
    }
}

fn decode_b64<'a>(field: &str, text: &str) -> Result<Cow<'a, [u8]>, RecordProblem> {
    super::fast::LENIENT_B64
        .decode(text)
        .map(Cow::Owned)
        .map_err(|e| RecordProblem::Invalid(format!("{field} is not valid base64: {e}")))
}

impl<'a> WireRecord<'a> {
    fn into_record(self, limits: &RequestBounds) -> Result<Record<'a>, RecordProblem> {
        let value: Option<Cow<'a, [u8]>> = match (self.value, self.value_b64) {
            (Some(_), Some(_)) => {
                return Err(RecordProblem::Invalid(
                    "set value or value_b64, not both".into(),
                ))
            }
            (Some(None), None) => None,
            // Nesting was bounded while the record was scanned.
            (Some(Some(raw)), None) => Some(Cow::Borrowed(raw.get().as_bytes())),
            (None, Some(b64)) => Some(decode_b64("value_b64", &b64)?),
            (None, None) => {
                return Err(RecordProblem::Invalid(
                    "needs value (any JSON) or value_b64 (base64 bytes)".into(),
                ))
            }
        };
        let key: Option<Cow<'a, [u8]>> = match (self.key, self.key_b64) {
            (Some(_), Some(_)) => {
                return Err(RecordProblem::Invalid(
                    "set key or key_b64, not both".into(),
                ))
            }
            (Some(Cow::Borrowed(k)), None) => Some(Cow::Borrowed(k.as_bytes())),
            (Some(Cow::Owned(k)), None) => Some(Cow::Owned(k.into_bytes())),
            (None, Some(b64)) => Some(decode_b64("key_b64", &b64)?),
            (None, None) => None,
        };
        if let Some(p) = self.partition.filter(|p| *p < 0) {
            return Err(RecordProblem::Invalid(format!("partition {p} is negative")));
        }
        if let Some(ts) = self.timestamp_ms.filter(|t| *t < 0) {
            return Err(RecordProblem::Invalid(format!(
                "timestamp_ms {ts} is negative"
            )));
        }
        let headers: Vec<(Cow<'a, str>, Cow<'a, [u8]>)> = self
            .headers
            .map(|h| {
                h.0.into_iter()
                    .map(|(k, v)| {
                        let v = match v {
                            Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
                            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
                        };
                        (k, v)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let key_len = key.as_ref().map_or(0, |k| k.len());
        if key_len > limits.max_key_bytes {
            return Err(RecordProblem::TooLarge(format!(
                "key is {key_len} bytes; the limit is {}",
                limits.max_key_bytes
            )));
        }
        let value_len = value.as_ref().map_or(0, |v| v.len());
        if value_len > limits.max_value_bytes {
            return Err(RecordProblem::TooLarge(format!(
                "value is {value_len} bytes; the limit is {}",
                limits.max_value_bytes
            )));
        }
        let header_len: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
        if header_len > limits.max_headers_bytes {
            return Err(RecordProblem::TooLarge(format!(
                "headers are {header_len} bytes; the limit is {}",
                limits.max_headers_bytes
            )));
        }
        Ok(Record {
            key,
            value,
            headers,
            partition: self.partition,
            timestamp_ms: self.timestamp_ms,
        })
    }
}

thread_local! {
    /// The headers byte limit of the parse running on this thread, and whether a record went
    /// over it. Parsing is synchronous, so the limit is in force exactly for the duration of
    /// one [`parse`] call (see [`HeaderLimit`]); serde's derive offers no other way to hand a
    /// limit to a field's deserializer, nor its error type a way to say "too large".
    static HEADER_LIMIT: Cell<(usize, bool)> = const { Cell::new((usize::MAX, false)) };
}

/// Puts a headers limit in force on this thread until dropped.
struct HeaderLimit;

impl HeaderLimit {
    fn set(limit: usize) -> Self {
        HEADER_LIMIT.with(|l| l.set((limit, false)));
        HeaderLimit
    }

    /// Whether a record went over the limit (and forget it).
    fn exceeded() -> bool {
        HEADER_LIMIT.with(|l| {
            let (limit, exceeded) = l.get();
            l.set((limit, false));
            exceeded
        })
    }
}

impl Drop for HeaderLimit {
    fn drop(&mut self) {
        HEADER_LIMIT.with(|l| l.set((usize::MAX, false)));
    }
}

/// Above this many headers, duplicates are found with a hash set instead of a scan.
const LINEAR_DUPLICATE_SCAN: usize = 16;

/// Header object: string names to string values, a repeated name is an error (JSON objects
/// with duplicate keys are ambiguous, and we refuse to guess which one the client meant).
/// The byte limit is enforced while the object is read, and duplicates are found in linear
/// time, so a record with a huge header object costs no more than its bytes.
struct Headers<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Headers<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HeadersVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for HeadersVisitor<'a> {
            type Value = Headers<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of header names to string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let limit = HEADER_LIMIT.with(|l| l.get().0);
                let mut out: Vec<(Cow<'a, str>, Cow<'a, str>)> = Vec::new();
                let mut seen: std::collections::HashSet<Cow<'a, str>> = Default::default();
                let mut bytes = 0usize;
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    let duplicate = if out.len() < LINEAR_DUPLICATE_SCAN {
                        out.iter().any(|(n, _)| *n == name)
                    } else {
                        if seen.is_empty() {
                            seen.extend(out.iter().map(|(n, _)| n.clone()));
                        }
                        !seen.insert(name.clone())
                    };
                    if duplicate {
                        return Err(de::Error::custom(format_args!(
                            "header {name:?} appears twice"
                        )));
                    }
                    let value: Cow<'de, str> = map.next_value()?;
                    bytes = bytes.saturating_add(name.len() + value.len());
                    if bytes > limit {
                        HEADER_LIMIT.with(|l| l.set((limit, true)));
                        return Err(de::Error::custom(format_args!(
                            "headers are more than {limit} bytes"
                        )));
                    }
                    out.push((name, value));
                }
                Ok(Headers(out))
            }
        }
        deserializer.deserialize_map(HeadersVisitor(std::marker::PhantomData))
    }
}
