//! Request bodies: JSON (`{"records":[...]}`) and NDJSON (one record object per line).
//!
//! Parsing borrows from the request's bytes: a `value` is the exact JSON text of the request
//! (key order, number formatting and whitespace inside the value survive), and keys and header
//! strings without escapes are not copied. Every error names the record (and, for NDJSON, the
//! line) it is about. Nothing here panics on any input; the fuzz target holds us to that.
//!
//! Layer: wire decoding. Imports only configuration bounds and the record type; the `/v1`
//! adapter in `http` calls it, and nothing here knows about tenants, budgets or Kafka.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use base64::Engine as _;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::config::RequestBounds;
pub use crate::record::Record;

/// The formats a produce request may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Ndjson,
}

impl Format {
    /// The format for a `Content-Type` value, ignoring parameters such as `charset`.
    pub fn from_content_type(value: &str) -> Option<Self> {
        let essence = value.split(';').next().unwrap_or("").trim();
        if essence.eq_ignore_ascii_case("application/json") {
            Some(Self::Json)
        } else if essence.eq_ignore_ascii_case("application/x-ndjson")
            || essence.eq_ignore_ascii_case("application/ndjson")
        {
            Some(Self::Ndjson)
        } else {
            None
        }
    }
}

/// Deepest nesting accepted inside a `value` (serde_json's own limit for parsed values; raw
/// values are skipped without it, so we check it ourselves: consumers parsing the record with
/// a recursive decoder would otherwise crash on what we accepted).
pub const MAX_VALUE_DEPTH: usize = 128;

/// The deepest nesting of arrays and objects in valid JSON text.
fn nesting_depth(json: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in json {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Why a body was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Malformed: 400 with this detail.
    Malformed(String),
    /// More records than a request may carry: 413.
    TooManyRecords { limit: usize },
    /// A record's key, value or headers are over their limit: 413 with this detail.
    RecordTooLarge(String),
}

/// Parses a whole body into records, all of them or an error.
pub fn parse<'a>(
    format: Format,
    body: &'a [u8],
    limits: &RequestBounds,
) -> Result<Vec<Record<'a>>, BodyError> {
    let _limit = HeaderLimit::set(limits.max_headers_bytes);
    let records = match format {
        Format::Json => parse_json(body, limits)?,
        Format::Ndjson => parse_ndjson(body, limits)?,
    };
    if records.is_empty() {
        return Err(BodyError::Malformed("the request has no records".into()));
    }
    Ok(records)
}

fn parse_json<'a>(body: &'a [u8], limits: &RequestBounds) -> Result<Vec<Record<'a>>, BodyError> {
    let failed = Cell::new(None);
    let too_many = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(body);
    let seed = EnvelopeSeed(ParseContext {
        limits,
        failed: &failed,
        too_many: &too_many,
    });
    let result = seed.deserialize(&mut de).and_then(|records| {
        de.end()?;
        Ok(records)
    });
    result.map_err(|e| {
        if too_many.get() {
            return BodyError::TooManyRecords {
                limit: limits.max_records_per_request,
            };
        }
        match failed.take() {
            Some(RecordFailure::TooLarge(detail)) => BodyError::RecordTooLarge(detail),
            Some(RecordFailure::At(i)) if HeaderLimit::exceeded() => {
                BodyError::RecordTooLarge(format!("record {i}: {e}"))
            }
            Some(RecordFailure::At(i)) => BodyError::Malformed(format!("record {i}: {e}")),
            None => BodyError::Malformed(e.to_string()),
        }
    })
}

fn parse_ndjson<'a>(body: &'a [u8], limits: &RequestBounds) -> Result<Vec<Record<'a>>, BodyError> {
    let mut records = Vec::new();
    for (line_index, line) in body.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let index = records.len();
        if index >= limits.max_records_per_request {
            return Err(BodyError::TooManyRecords {
                limit: limits.max_records_per_request,
            });
        }
        let at = |e: &dyn fmt::Display| {
            BodyError::Malformed(format!("line {} (record {index}): {e}", line_index + 1))
        };
        let mut de = serde_json::Deserializer::from_slice(line);
        let wire = WireRecord::deserialize(&mut de).map_err(|e| {
            if HeaderLimit::exceeded() {
                BodyError::RecordTooLarge(format!("line {} (record {index}): {e}", line_index + 1))
            } else {
                at(&e)
            }
        })?;
        de.end().map_err(|e| at(&e))?;
        records.push(wire.into_record(index, limits).map_err(|f| match f {
            RecordProblem::Invalid(m) => at(&m),
            RecordProblem::TooLarge(m) => {
                BodyError::RecordTooLarge(format!("line {} (record {index}): {m}", line_index + 1))
            }
        })?);
    }
    Ok(records)
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

/// A whole number in the field's range; `7.0` counts as 7 (some JSON writers send it so).
fn whole<'de, D: Deserializer<'de>, T: TryFrom<i64>>(d: D) -> Result<Option<T>, D::Error> {
    let value = serde_json::Number::deserialize(d)?;
    let whole = match (value.as_i64(), value.as_f64()) {
        (Some(i), _) => Some(i),
        // 2^63 itself is out of range (`i64::MAX as f64` rounds up to it).
        (None, Some(x)) if x.fract() == 0.0 && (-(2f64.powi(63))..2f64.powi(63)).contains(&x) => {
            Some(x as i64)
        }
        _ => None,
    };
    whole
        .and_then(|i| T::try_from(i).ok())
        .map(Some)
        .ok_or_else(|| de::Error::custom(format_args!("{value} is not a whole number in range")))
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
    // Standard alphabet with padding; unused bits in the last symbol are ignored (RFC 4648
    // lets decoders accept them, and clients that emit them exist).
    const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
    );
    LENIENT
        .decode(text)
        .map(Cow::Owned)
        .map_err(|e| RecordProblem::Invalid(format!("{field} is not valid base64: {e}")))
}

impl<'a> WireRecord<'a> {
    fn into_record(
        self,
        _index: usize,
        limits: &RequestBounds,
    ) -> Result<Record<'a>, RecordProblem> {
        let value: Option<Cow<'a, [u8]>> = match (self.value, self.value_b64) {
            (Some(_), Some(_)) => {
                return Err(RecordProblem::Invalid(
                    "set value or value_b64, not both".into(),
                ))
            }
            (Some(None), None) => None,
            (Some(Some(raw)), None) => {
                let text = raw.get().as_bytes();
                // Only arrays and objects nest; strings and numbers (most values) skip the scan.
                if matches!(text.first(), Some(b'[' | b'{'))
                    && nesting_depth(text) > MAX_VALUE_DEPTH
                {
                    return Err(RecordProblem::Invalid(format!(
                        "value nests deeper than {MAX_VALUE_DEPTH} levels"
                    )));
                }
                Some(Cow::Borrowed(text))
            }
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

enum RecordFailure {
    At(usize),
    TooLarge(String),
}

/// What the JSON visitors share: the limits, and where they leave why parsing stopped (serde's
/// error type cannot carry it).
#[derive(Clone, Copy)]
struct ParseContext<'l> {
    limits: &'l RequestBounds,
    failed: &'l Cell<Option<RecordFailure>>,
    too_many: &'l Cell<bool>,
}

/// `{"records": [...]}`, nothing else.
struct EnvelopeSeed<'l>(ParseContext<'l>);

impl<'de, 'l> DeserializeSeed<'de> for EnvelopeSeed<'l> {
    type Value = Vec<Record<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, 'l> Visitor<'de> for EnvelopeSeed<'l> {
    type Value = Vec<Record<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"an object {"records": [...]}"#)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut records = None;
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            if name != "records" {
                return Err(de::Error::custom(format_args!(
                    "unknown field {name:?}; the body is {{\"records\": [...]}}"
                )));
            }
            if records.is_some() {
                return Err(de::Error::custom("field \"records\" appears twice"));
            }
            records = Some(map.next_value_seed(RecordsSeed(self.0))?);
        }
        records.ok_or_else(|| de::Error::missing_field("records"))
    }
}

/// The records array, each element parsed and checked as it comes.
struct RecordsSeed<'l>(ParseContext<'l>);

impl<'de, 'l> DeserializeSeed<'de> for RecordsSeed<'l> {
    type Value = Vec<Record<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, 'l> Visitor<'de> for RecordsSeed<'l> {
    type Value = Vec<Record<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of record objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let max = self.0.limits.max_records_per_request;
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(max));
        loop {
            let index = out.len();
            self.0.failed.set(Some(RecordFailure::At(index)));
            let Some(wire) = seq.next_element::<WireRecord<'de>>()? else {
                break;
            };
            if index >= max {
                self.0.too_many.set(true);
                return Err(de::Error::custom("too many records"));
            }
            match wire.into_record(index, self.0.limits) {
                Ok(record) => out.push(record),
                Err(RecordProblem::Invalid(m)) => return Err(de::Error::custom(m)),
                Err(RecordProblem::TooLarge(m)) => {
                    self.0.failed.set(Some(RecordFailure::TooLarge(format!(
                        "record {index}: {m}"
                    ))));
                    return Err(de::Error::custom("record too large"));
                }
            }
        }
        self.0.failed.set(None);
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
