//! Request bodies into records, decoded while they arrive.
//!
//! A [`Decoder`] is fed the body chunk by chunk. Its [`scan::Scanner`] finds each complete
//! record; the wire format's [`ParseRecord`] parses it at once (checking the record's own
//! bounds); the record is copied into a [`RecordArena`] and the body bytes it came from are
//! dropped. After every chunk the caller knows exactly how many records and bytes the body has
//! carried so far ([`Decoder::charge`]), so a request that can no longer be admitted — more
//! records than a burst, than the bucket holds now, than a request may carry — is refused
//! before the rest of it is read, chunked uploads included.
//!
//! Every error names the record (and, for NDJSON, the line) it is about. Nothing here panics on
//! any input; the fuzz target holds us to that.
//!
//! Layer: wire decoding. Imports only configuration bounds and the record type; the HTTP
//! adapters pick a framing and a record parser, and nothing here knows about tenants, budgets
//! or Kafka.

pub mod arena;
pub mod confluent;
pub mod scan;
pub mod v1;

pub use crate::record::Record;
pub use arena::RecordArena;
pub use scan::Framing;

use crate::config::RequestBounds;
use crate::record::Charge;
use scan::{ScanError, Scanner};

/// The `/v1` formats a produce request may use.
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

    pub fn framing(self) -> Framing {
        match self {
            Self::Json => Framing::Envelope("records"),
            Self::Ndjson => Framing::Lines,
        }
    }
}

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
    /// A record's key, value or headers are over their limit: 413 with this detail.
    RecordTooLarge(String),
}

/// What is wrong with one record; the decoder says which record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// Not valid JSON.
    Syntax(String),
    /// Valid JSON, not a valid record.
    Invalid(String),
    TooLarge(String),
}

/// A wire format's record shape: parses one complete record object.
pub trait ParseRecord: Send + Sync {
    fn parse<'a>(&self, text: &'a [u8], bounds: &RequestBounds) -> Result<Record<'a>, RecordError>;
}

impl<T: ParseRecord + ?Sized> ParseRecord for &T {
    fn parse<'a>(&self, text: &'a [u8], bounds: &RequestBounds) -> Result<Record<'a>, RecordError> {
        (**self).parse(text, bounds)
    }
}

impl<T: ParseRecord + ?Sized> ParseRecord for std::sync::Arc<T> {
    fn parse<'a>(&self, text: &'a [u8], bounds: &RequestBounds) -> Result<Record<'a>, RecordError> {
        (**self).parse(text, bounds)
    }
}

/// Decodes one body, chunk by chunk, with the record parser `P`.
pub struct Decoder<P> {
    scanner: Scanner,
    parser: P,
    arena: RecordArena,
    bounds: RequestBounds,
    /// Records decoded in all, including any already taken (they name errors by index).
    total: usize,
    /// Whether the request-level record limit applies (not to a stream of records).
    limited: bool,
}

impl<P: ParseRecord> Decoder<P> {
    pub fn new(framing: Framing, parser: P, bounds: &RequestBounds) -> Self {
        Self {
            // The record object is one level; its value may nest MAX_VALUE_DEPTH more.
            scanner: Scanner::new(framing, MAX_VALUE_DEPTH + 1),
            parser,
            arena: RecordArena::default(),
            bounds: bounds.clone(),
            total: 0,
            limited: true,
        }
    }

    /// A decoder for an open-ended stream of records (no per-request record limit); take the
    /// records as they are decoded with [`Decoder::take_decoded`].
    pub fn streaming(framing: Framing, parser: P, bounds: &RequestBounds) -> Self {
        Self {
            limited: false,
            ..Self::new(framing, parser, bounds)
        }
    }

    /// The records decoded since the last call, moved out.
    pub fn take_decoded(&mut self) -> RecordArena {
        std::mem::take(&mut self.arena)
    }

    /// The stream has ended: the records decoded since the last take (possibly none).
    pub fn finish_stream(mut self) -> Result<RecordArena, BodyError> {
        let finished = self.scanner.finish();
        self.drain()?;
        finished.map_err(|e| self.scan_error(e))?;
        Ok(self.arena)
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

    /// Takes the next piece of the body and decodes every record it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Charge, BodyError> {
        let pushed = self.scanner.push(chunk);
        self.drain()?;
        pushed.map_err(|e| self.scan_error(e))?;
        Ok(self.charge())
    }

    /// The body has ended: the decoded records, at least one, or the error.
    pub fn finish(mut self) -> Result<RecordArena, BodyError> {
        let finished = self.scanner.finish();
        self.drain()?;
        finished.map_err(|e| self.scan_error(e))?;
        if self.arena.is_empty() {
            return Err(BodyError::Malformed("the request has no records".into()));
        }
        Ok(self.arena)
    }

    /// Parses every record the scanner has found, then drops the body bytes they came from
    /// (once, not per record: the tail left is moved once per chunk).
    fn drain(&mut self) -> Result<(), BodyError> {
        let mut consumed = 0;
        let outcome = self.drain_found(&mut consumed);
        self.scanner.compact(consumed);
        outcome
    }

    fn drain_found(&mut self, consumed: &mut usize) -> Result<(), BodyError> {
        while let Some(found) = self.scanner.next_record() {
            let index = self.total;
            if self.limited && index >= self.bounds.max_records_per_request {
                return Err(BodyError::TooManyRecords {
                    limit: self.bounds.max_records_per_request,
                });
            }
            let text = self.scanner.buffer().get(found.start..found.end);
            let text = text.unwrap_or_default();
            *consumed = found.end;
            if self.is_lines() && text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match self.parser.parse(text, &self.bounds) {
                Ok(record) => {
                    self.arena.push(&record);
                    self.total += 1;
                }
                Err(e) => {
                    let at = self.at(index, found.line);
                    return Err(match e {
                        RecordError::Syntax(m) => BodyError::Malformed(format!("{at}: {m}")),
                        RecordError::Invalid(m) => BodyError::Invalid(format!("{at}: {m}")),
                        RecordError::TooLarge(m) => BodyError::RecordTooLarge(format!("{at}: {m}")),
                    });
                }
            }
        }
        Ok(())
    }

    fn is_lines(&self) -> bool {
        self.scanner.framing() == Framing::Lines
    }

    /// How errors name a record: `record 3`, or `line 5 (record 3)` for NDJSON.
    fn at(&self, index: usize, line: usize) -> String {
        if self.is_lines() {
            format!("line {line} (record {index})")
        } else {
            format!("record {index}")
        }
    }

    fn scan_error(&self, e: ScanError) -> BodyError {
        match e {
            ScanError::TooDeep { line } => BodyError::Malformed(format!(
                "{}: value nests deeper than {MAX_VALUE_DEPTH} levels",
                self.at(self.total, line)
            )),
            ScanError::Truncated { line } => BodyError::Malformed(format!(
                "{}: the body ends inside this record",
                self.at(self.total, line)
            )),
            ScanError::Structure(m) => BodyError::Malformed(m),
        }
    }
}

/// Decodes a whole body at once (for tests, benches and the fuzz target; the gateway feeds a
/// [`Decoder`] as chunks arrive).
pub fn parse(
    format: Format,
    body: &[u8],
    bounds: &RequestBounds,
) -> Result<RecordArena, BodyError> {
    let mut decoder = Decoder::new(format.framing(), v1::V1Record, bounds);
    decoder.push(body)?;
    decoder.finish()
}

#[cfg(test)]
mod tests;
