//! Request bodies into records, decoded while they arrive.
//!
//! A [`Decoder`] is fed the body chunk by chunk. Where a record starts, the wire format's
//! [`ParseRecord`] parses it from there in one pass when the chunk holds all of it (the common
//! case); a record cut off by the end of a chunk is followed by the [`scan::Scanner`] until it is
//! complete and parsed then. Either way the record's own bounds are checked, the record is copied
//! into a [`RecordArena`], and the body bytes it came from are dropped. After every chunk the
//! caller knows exactly how many records and bytes the body has carried so far
//! ([`Decoder::charge`]), so a request that can no longer be admitted — more records than a burst,
//! than the bucket holds now, than a request may carry — is refused before the rest of it is read,
//! chunked uploads included.
//!
//! Every error names the record (and, for NDJSON, the line) it is about. Nothing here panics on any
//! input; the fuzz target holds us to that.
//!
//! A wire format whose answer reports records one by one (Confluent's `records:batch`) may take a
//! record that fails to decode as a failed entry instead of failing the body
//! ([`ParseRecord::skip_failed`]): the parser notes it, the arena never holds it, and the body goes
//! on. A later pipeline step may fail more of the decoded records the same way
//! ([`ParseRecord::fail_record`], and [`RecordArena::without`] to drop them before they are sent).
//! An envelope's side fields ([`Framing::EnvelopeSide`]) go to [`ParseRecord::side_field`].
//!
//! The record shapes themselves live with their wire format, each in its folder under `http`
//! (`http::v1::record`, `http::confluent::record`): they implement [`ParseRecord`] for this
//! decoder, which knows none of them. What their serde shapes share is here, so no format borrows
//! from another: [`json_prefix`], [`shallow`] and [`whole`].
//!
//! Layer: domain (wire decoding). Imports only configuration bounds and the record type; the HTTP
//! adapters pick a framing and a record parser, and nothing here knows about tenants, budgets or
//! Kafka.

pub mod arena;
pub mod scan;

pub use crate::record::Record;
pub use arena::RecordArena;
pub use scan::Framing;

use crate::config::RequestBounds;
use crate::record::Charge;
use scan::{ScanError, Scanner, Sink, Stop};

/// Deepest nesting accepted inside a `value`: consumers parsing the record with a recursive
/// decoder would crash on deeper values than serde_json's own limit, so we never accept them.
pub const MAX_VALUE_DEPTH: usize = 128;

/// Why a body was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not JSON, or not the framing: this detail.
    Malformed(String),
    /// Well-formed JSON that is not a valid record (an unknown or missing field, a wrong
    /// type): this detail. `/v1` answers it 400 like any malformed body; Confluent's shapes 422.
    Invalid(String),
    /// More records than a request may carry: 413.
    TooManyRecords { limit: usize },
    /// A record's key, value or headers are over their limit (or, in a stream, the record's
    /// text is longer than a whole request may be): 413 with this detail.
    RecordTooLarge(String),
    /// The body is well-formed and holds no record.
    NoRecords,
    /// A rule of the wire format's own about a record's id (Confluent's batch entry ids):
    /// this detail.
    EntryId(String),
}

/// What is wrong with one record; the decoder says which record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// Not valid JSON.
    Syntax(String),
    /// Valid JSON, not a valid record.
    Invalid(String),
    TooLarge(String),
    /// Valid JSON and a valid record, but its id breaks the format's id rule.
    EntryId(String),
}

/// A record parser that keeps a note of each record it decoded, which the wire format's
/// answer repeats (Confluent v3: each record's key and value types and sizes).
pub trait RecordNotes: ParseRecord {
    type Note: Send + Sync + 'static;

    /// The notes of the records decoded since the last call, in order.
    fn take_notes(&self) -> Vec<Self::Note>;
}

/// A wire format's record shape: parses one complete record object.
pub trait ParseRecord: Send + Sync {
    fn parse<'a>(&self, text: &'a [u8], bounds: &RequestBounds) -> Result<Record<'a>, RecordError>;

    /// Decodes the complete record object `text` into `arena`, or says what is wrong with it
    /// (and leaves `arena` as it was). By default through [`ParseRecord::parse`].
    fn decode(
        &self,
        text: &[u8],
        bounds: &RequestBounds,
        arena: &mut RecordArena,
    ) -> Result<(), RecordError> {
        arena.push(&self.parse(text, bounds)?);
        Ok(())
    }

    /// Decodes a valid record that starts at the first byte of `text` and may be followed by
    /// more bytes into `arena`, and says how long it was. `None`, with `arena` as it was, when
    /// `text` does not start with a whole valid record (cut off, or an error) or when a JSON
    /// value in it may nest deeper than [`MAX_VALUE_DEPTH`] (check them with [`shallow`]: the
    /// scanner bounds nesting, the JSON parser does not): the decoder then has the scanner find
    /// the record's end (or its nesting error) and calls [`ParseRecord::decode`], which names
    /// any error. A parser with state that a discarded parse would disturb keeps this default.
    fn decode_prefix(
        &self,
        text: &[u8],
        bounds: &RequestBounds,
        arena: &mut RecordArena,
    ) -> Option<usize> {
        let _ = (text, bounds, arena);
        None
    }

    /// The complete record object `text` failed to decode with `error`. A format that reports
    /// records one by one (a batch) notes it as a failed entry and answers `Ok(true)`: the body
    /// goes on without it, and the answer reports it in its place. `Ok(false)` (the default)
    /// fails the whole body with `error`; `Err(other)` fails it with `other` (a failed entry
    /// whose id breaks the batch's rules).
    fn skip_failed(&self, text: &[u8], error: &RecordError) -> Result<bool, RecordError> {
        let _ = (text, error);
        Ok(false)
    }

    /// Fails decoded record `record_index` (its index in the arena: body order, failed entries
    /// left out) after decoding: a later step (such as schema validation) found it invalid.
    /// `status` is the HTTP-style code the answer gives the entry (400, 422) and `message` names
    /// what is wrong. `true` when the format reports the entry as failed and writes the others
    /// (the caller must then not send the record: see [`RecordArena::without`]); `false` (the
    /// default) when it cannot, and the whole request must be refused instead.
    fn fail_record(&self, record_index: usize, status: u16, message: String) -> bool {
        let _ = (record_index, status, message);
        false
    }

    /// Whether `fail_record` may report entries one by one (a batch's number may shrink).
    fn reports_each(&self) -> bool {
        false
    }

    /// A side field of the envelope ([`Framing::EnvelopeSide`]) and its value's JSON text (a
    /// string with its quotes and escapes, a number or `null`, at most `max_value_bytes`). By
    /// default refused, as an unknown field would be.
    fn side_field(&self, name: &str, raw_json: &[u8]) -> Result<(), RecordError> {
        let _ = raw_json;
        Err(RecordError::Invalid(format!("unknown field {name:?}")))
    }
}

impl<T: ParseRecord + ?Sized> ParseRecord for &T {
    fn parse<'a>(&self, text: &'a [u8], bounds: &RequestBounds) -> Result<Record<'a>, RecordError> {
        (**self).parse(text, bounds)
    }
    fn decode(
        &self,
        text: &[u8],
        bounds: &RequestBounds,
        arena: &mut RecordArena,
    ) -> Result<(), RecordError> {
        (**self).decode(text, bounds, arena)
    }
    fn decode_prefix(
        &self,
        text: &[u8],
        bounds: &RequestBounds,
        arena: &mut RecordArena,
    ) -> Option<usize> {
        (**self).decode_prefix(text, bounds, arena)
    }
    fn skip_failed(&self, text: &[u8], error: &RecordError) -> Result<bool, RecordError> {
        (**self).skip_failed(text, error)
    }
    fn fail_record(&self, record_index: usize, status: u16, message: String) -> bool {
        (**self).fail_record(record_index, status, message)
    }
    fn reports_each(&self) -> bool {
        (**self).reports_each()
    }
    fn side_field(&self, name: &str, raw_json: &[u8]) -> Result<(), RecordError> {
        (**self).side_field(name, raw_json)
    }
}

/// Whether a JSON value's text surely nests no deeper than [`MAX_VALUE_DEPTH`]: each level
/// needs an opening bracket, so a value with no more of them than that (every real value) is
/// shallow enough; a value with more is left to the scanner, which counts its actual depth.
pub(crate) fn shallow(json: &str) -> bool {
    memchr::memchr2_iter(b'{', b'[', json.as_bytes())
        .nth(MAX_VALUE_DEPTH)
        .is_none()
}

/// Reads one `T` from the start of `text`, and how many bytes it took; `None` unless `text`
/// starts with a whole valid one. The quick path of [`ParseRecord::decode_prefix`].
pub(crate) fn json_prefix<'a, T: serde::Deserialize<'a>>(text: &'a [u8]) -> Option<(T, usize)> {
    let mut values = serde_json::Deserializer::from_slice(text).into_iter::<T>();
    let value = values.next()?.ok()?;
    Some((value, values.byte_offset()))
}

/// A whole number in the field's range; `7.0` counts as 7 (some JSON writers send it so). Every
/// wire format's serde record shape reads its numbers through it (`deserialize_with`), so they
/// agree on what a number is.
pub(crate) fn whole<'de, D: serde::Deserializer<'de>, T: TryFrom<i64>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    let value = <serde_json::Number as serde::Deserialize>::deserialize(d)?;
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
        .ok_or_else(|| {
            serde::de::Error::custom(format_args!("{value} is not a whole number in range"))
        })
}

/// Decodes one body, chunk by chunk, with the record parser `P`.
pub struct Decoder<P> {
    scanner: Scanner,
    parser: P,
    arena: RecordArena,
    bounds: RequestBounds,
    /// Records decoded in all, including any already taken and any failed entries (they name
    /// errors by index: their position in the body).
    total: usize,
    /// Failed entries the parser took in place of failing the body.
    skipped: usize,
    /// Whether the request-level record limit applies (not to a stream of records).
    limited: bool,
    /// A stream's bound on one record's text, enforced while the record arrives.
    max_record_text: Option<usize>,
}

impl<P: ParseRecord> Decoder<P> {
    pub fn new(framing: Framing, parser: P, bounds: &RequestBounds) -> Self {
        Self {
            // The record object is one level; its value may nest MAX_VALUE_DEPTH more.
            scanner: Scanner::new(framing, MAX_VALUE_DEPTH + 1)
                .with_side_limit(bounds.max_value_bytes),
            parser,
            arena: RecordArena::default(),
            bounds: bounds.clone(),
            total: 0,
            skipped: 0,
            limited: true,
            max_record_text: None,
        }
    }

    /// A decoder for an open-ended stream of records (no per-request record limit, but no
    /// record's text longer than `max_record_text`, checked as it arrives); take the records
    /// as they are decoded with [`Decoder::take_decoded`].
    pub fn streaming(
        framing: Framing,
        parser: P,
        bounds: &RequestBounds,
        max_record_text: usize,
    ) -> Self {
        Self {
            limited: false,
            max_record_text: Some(max_record_text),
            ..Self::new(framing, parser, bounds)
        }
    }

    /// The records decoded since the last call, moved out.
    pub fn take_decoded(&mut self) -> RecordArena {
        std::mem::take(&mut self.arena)
    }

    /// The stream has ended: a record cut short is an error; the records decoded since the
    /// last take are still there to take. The decoder is spent.
    pub fn finish_stream(&mut self) -> Result<(), BodyError> {
        let (scanner, mut take) = self.split();
        scanner.finish(&mut take).map_err(|e| take.stopped(e))
    }

    /// The records decoded and not taken yet, left in place.
    pub fn pending(&self) -> &RecordArena {
        &self.arena
    }

    /// Records decoded and not taken yet.
    pub fn decoded(&self) -> usize {
        self.arena.len()
    }

    /// Whether a record has begun and not ended yet.
    pub fn in_record(&self) -> bool {
        self.scanner.open_record().is_some()
    }

    /// The record parser (a stateful one, such as v3's, is asked what it saw).
    pub fn parser(&self) -> &P {
        &self.parser
    }

    /// Records and bytes decoded so far.
    pub fn charge(&self) -> Charge {
        self.arena.charge()
    }

    /// Bytes held now: decoded records plus the unfinished tail of the body (never more than
    /// the body bytes that arrived).
    pub fn held(&self) -> usize {
        self.arena.held() + self.scanner.held()
    }

    /// Memory held now, as allocated: the decoded records with their index, and the tail.
    pub fn footprint(&self) -> usize {
        self.arena.footprint() + self.scanner.footprint()
    }

    /// Takes the next piece of the body and decodes every record it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Charge, BodyError> {
        self.arena.reserve(chunk.len());
        let (scanner, mut take) = self.split();
        scanner
            .push(chunk, &mut take)
            .map_err(|e| take.stopped(e))?;
        if let (Some(max), Some((open, line))) = (self.max_record_text, self.scanner.open_record())
        {
            if open > max {
                let (_, take) = self.split();
                return Err(BodyError::RecordTooLarge(format!(
                    "{}: the record is longer than {max} bytes",
                    take.at(line)
                )));
            }
        }
        Ok(self.charge())
    }

    /// The body has ended: the decoded records, or the error. A body with no record at all is
    /// [`BodyError::NoRecords`]; one whose every entry failed (and was noted by the parser, see
    /// [`ParseRecord::skip_failed`]) decodes to an empty arena.
    pub fn finish(mut self) -> Result<RecordArena, BodyError> {
        let (scanner, mut take) = self.split();
        scanner.finish(&mut take).map_err(|e| take.stopped(e))?;
        if self.arena.is_empty() && self.skipped == 0 {
            return Err(BodyError::NoRecords);
        }
        Ok(self.arena)
    }

    /// Entries that failed and were noted by the parser instead of failing the body.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    fn split(&mut self) -> (&mut Scanner, Take<'_, P>) {
        let lines = self.scanner.framing() == Framing::Lines;
        let take = Take {
            parser: &self.parser,
            arena: &mut self.arena,
            bounds: &self.bounds,
            total: &mut self.total,
            skipped: &mut self.skipped,
            limit: self.limited.then_some(self.bounds.max_records_per_request),
            lines,
            max_text: self.max_record_text,
        };
        (&mut self.scanner, take)
    }
}

/// The decoder's side of a scan: parses each record the scanner finds (or takes it whole where
/// it starts) and copies it into the arena.
struct Take<'d, P> {
    parser: &'d P,
    arena: &'d mut RecordArena,
    bounds: &'d RequestBounds,
    /// Records decoded in all, including any already taken (they name errors by index).
    total: &'d mut usize,
    /// Failed entries noted by the parser.
    skipped: &'d mut usize,
    /// The request-level record limit, if it applies.
    limit: Option<usize>,
    lines: bool,
    /// A stream's bound on one record's text.
    max_text: Option<usize>,
}

impl<P: ParseRecord> Take<'_, P> {
    /// One more record may come, or the request carries too many.
    fn count(&self) -> Result<(), BodyError> {
        match self.limit {
            Some(limit) if *self.total >= limit => Err(BodyError::TooManyRecords { limit }),
            _ => Ok(()),
        }
    }

    /// How errors name a record: `record 3`, or `line 5 (record 3)` for NDJSON.
    fn at(&self, line: usize) -> String {
        let index = *self.total;
        if self.lines {
            format!("line {line} (record {index})")
        } else {
            format!("record {index}")
        }
    }

    /// A record's error, naming the record.
    fn named(&self, line: usize, e: RecordError) -> BodyError {
        let at = self.at(line);
        match e {
            RecordError::Syntax(m) => BodyError::Malformed(format!("{at}: {m}")),
            RecordError::Invalid(m) => BodyError::Invalid(format!("{at}: {m}")),
            RecordError::TooLarge(m) => BodyError::RecordTooLarge(format!("{at}: {m}")),
            RecordError::EntryId(m) => BodyError::EntryId(format!("{at}: {m}")),
        }
    }

    fn stopped(&self, stop: Stop<BodyError>) -> BodyError {
        match stop {
            Stop::Sink(e) => e,
            Stop::Scan(ScanError::TooDeep { line }) => BodyError::Malformed(format!(
                "{}: value nests deeper than {MAX_VALUE_DEPTH} levels",
                self.at(line)
            )),
            Stop::Scan(ScanError::Truncated { line }) => BodyError::Malformed(format!(
                "{}: the body ends inside this record",
                self.at(line)
            )),
            Stop::Scan(ScanError::Structure(m)) => BodyError::Malformed(m),
        }
    }
}

impl<P: ParseRecord> Sink for Take<'_, P> {
    type Error = BodyError;

    fn record(&mut self, text: &[u8], line: usize) -> Result<(), BodyError> {
        if self.lines && text.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        self.count()?;
        if let Some(max) = self.max_text.filter(|max| text.len() > *max) {
            return Err(BodyError::RecordTooLarge(format!(
                "{}: the record is longer than {max} bytes",
                self.at(line)
            )));
        }
        let e = match self.parser.decode(text, self.bounds, self.arena) {
            Ok(()) => {
                *self.total += 1;
                return Ok(());
            }
            Err(e) => match self.parser.skip_failed(text, &e) {
                Ok(true) => {
                    *self.total += 1;
                    *self.skipped += 1;
                    return Ok(());
                }
                Ok(false) => e,
                Err(other) => other,
            },
        };
        Err(self.named(line, e))
    }

    fn side_field(&mut self, name: &'static str, raw: &[u8]) -> Result<(), BodyError> {
        self.parser.side_field(name, raw).map_err(|e| match e {
            RecordError::Syntax(m) => BodyError::Malformed(format!("field {name:?}: {m}")),
            RecordError::TooLarge(m) => BodyError::RecordTooLarge(format!("field {name:?}: {m}")),
            RecordError::Invalid(m) | RecordError::EntryId(m) => {
                BodyError::Invalid(format!("field {name:?}: {m}"))
            }
        })
    }

    fn record_at(&mut self, rest: &[u8], _line: usize) -> Result<Option<usize>, BodyError> {
        if self.max_text.is_some() {
            // A bounded record's text is measured whole: the scanner finds its end.
            return Ok(None);
        }
        self.count()?;
        let Some(len) = self.parser.decode_prefix(rest, self.bounds, self.arena) else {
            return Ok(None);
        };
        *self.total += 1;
        Ok(Some(len))
    }
}

#[cfg(test)]
mod tests;
