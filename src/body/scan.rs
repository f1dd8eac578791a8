//! Finding whole records in a body that arrives in pieces.
//!
//! A [`Scanner`] is fed the body chunk by chunk and hands each complete record object to a
//! [`Sink`] (the decoder, which parses it at once), so counts and sizes are known while the
//! body is still arriving, and a request that cannot be admitted is refused before the rest
//! of it is read. Where a record starts, the sink is offered the rest of the chunk and may
//! parse the record from there in one pass; only a record cut off by the end of a chunk (or
//! one the sink declines) is followed by the scanner — strings, escapes and nesting, no
//! parsing — until its end, with its nesting bounded as it arrives.
//!
//! Three framings: the envelope `{"KEY": [record, record, ...]}` (floodgate's `/v1` JSON and
//! Confluent's v3 batch), optionally with named side fields beside the records (Confluent's v2
//! body: `key_schema`, `value_schema_id`, ... before or after `records`), one record per line
//! (NDJSON), and records one after another with only white space between them (Confluent's v3
//! stream).
//!
//! A side field's value is a JSON string, number or `null`, nothing else; it is scanned
//! (escapes included) as it arrives, kept in the tail while unfinished, bounded by
//! [`Scanner::with_side_limit`], and handed whole, as its JSON text, to [`Sink::side_field`].
//!
//! The envelope's own structure (field names, brackets, side values) is read in [`envelope`];
//! the loop and the records are here.

mod envelope;

/// How records are laid out in a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `{"<key>": [ {...}, {...} ]}` and nothing else.
    Envelope(&'static str),
    /// `{"<records>": [ {...} ], "<side>": value, ...}`: the envelope, with any of the `side`
    /// fields beside the records (each at most once, in any order, before or after them). A
    /// side value is a JSON string, number or `null`; other fields are refused.
    EnvelopeSide {
        records: &'static str,
        side: &'static [&'static str],
    },
    /// One record object per line; blank lines are skipped.
    Lines,
    /// Record objects one after another, white space between them.
    Concatenated,
}

impl Framing {
    /// The envelope's records field and its side fields, if the framing is an envelope.
    pub fn envelope(self) -> Option<(&'static str, &'static [&'static str])> {
        match self {
            Self::Envelope(records) => Some((records, &[])),
            Self::EnvelopeSide { records, side } => Some((records, side)),
            Self::Lines | Self::Concatenated => None,
        }
    }
}

/// What a [`Scanner`] hands each record to, in body order, as soon as it is complete.
pub trait Sink {
    type Error;

    /// A side field of the envelope ([`Framing::EnvelopeSide`]) and its whole value as JSON
    /// text: a string (quotes and escapes as sent), a number or `null`. Ignored by default.
    fn side_field(&mut self, name: &'static str, raw: &[u8]) -> Result<(), Self::Error> {
        let _ = (name, raw);
        Ok(())
    }

    /// A complete record: `text` is all of it; `line` is the 1-based body line it starts on
    /// (counted for one-record-per-line bodies, whose errors name it).
    fn record(&mut self, text: &[u8], line: usize) -> Result<(), Self::Error>;

    /// A record object starts at the first byte of `rest` (the body from there on, as far as it
    /// has arrived). A sink that can take the whole record from there — parsing it once instead
    /// of after a scan for its end — does, and says how many bytes it took. `None` leaves the
    /// scanner to find the end and hand the record to [`Sink::record`]: the record is cut off
    /// by the end of what has arrived, or it is not valid (its error is then the one the whole
    /// record gets), or it may nest deeper than the scanner allows.
    fn record_at(&mut self, rest: &[u8], line: usize) -> Result<Option<usize>, Self::Error> {
        let _ = (rest, line);
        Ok(None)
    }
}

/// Why scanning stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop<E> {
    /// The body is not the framing it claims to be.
    Scan(ScanError),
    /// The sink refused a record.
    Sink(E),
}

/// Why a body cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanError {
    /// A record nests deeper than allowed; it starts on this line.
    TooDeep { line: usize },
    /// The body ended inside a record that starts on this line.
    Truncated { line: usize },
    /// The body is not the framing it claims to be.
    Structure(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Envelope: before `{`.
    Open,
    /// Envelope: before a field name.
    Key,
    /// Envelope: after a field's value (the records array or a side value): `}` or `,` and
    /// another field.
    AfterArray,
    /// Envelope: after a side field's name (its index in the side list): `:`.
    SideColon {
        field: usize,
    },
    /// Envelope: after a side field's `:`, before its value.
    SideOpen {
        field: usize,
    },
    /// Envelope: inside a side field's value, from this offset: a string, or a bare number or
    /// `null` (which ends at the first byte that cannot be part of one).
    SideValue {
        start: usize,
        field: usize,
        string: bool,
    },
    /// Envelope: inside a field name, from this offset.
    KeyText {
        start: usize,
    },
    Colon,
    ArrayOpen,
    /// Before an element, or `]` if `may_close`.
    Element {
        may_close: bool,
    },
    /// Inside an element (or a stream record) started at `start`.
    Record {
        start: usize,
        line: usize,
    },
    /// After an element: `,` or `]`.
    CommaOrClose,
    /// Envelope: after `}`; only white space may follow.
    Done,
    /// Lines / Concatenated: between records.
    Between,
}

/// Scans a body for complete records: feed it with [`Scanner::push`], end it with
/// [`Scanner::finish`]; records go to the [`Sink`] given to each.
#[derive(Debug)]
pub struct Scanner {
    framing: Framing,
    /// The unfinished tail of what has arrived: the record (or envelope field name) still open
    /// when the last chunk ended. Chunks are scanned where they are; only this tail is copied.
    tail: Vec<u8>,
    /// Next byte to look at, in the bytes being scanned (the tail, then the tail and the next
    /// chunk together).
    at: usize,
    state: State,
    depth: usize,
    in_string: bool,
    escaped: bool,
    line: usize,
    records_seen: bool,
    /// Whether anything but white space has arrived (an empty body gets its own error).
    started: bool,
    max_depth: usize,
    /// Side fields seen so far (bit per index in the side list; each may appear once).
    sides_seen: u64,
    /// The longest side value accepted, in bytes of JSON text.
    max_side: usize,
    /// White space in a row between records or envelope tokens, against [`MAX_BLANK`].
    blank: usize,
}

/// The most white space a body may hold in a row outside its records. JSON allows any amount,
/// but no writer puts 64 KiB of it between two tokens, and an unbounded run made a 92 KB gzip
/// body inflate to 8 MB of blanks that were read to the end before the request was refused
/// (review 37a of #37: 26 ms per refusal, a tenant allowed 1 record a second held 1.2–2 cores).
pub const MAX_BLANK: usize = 64 * 1024;

/// The longest side value a scanner accepts unless told otherwise.
pub const DEFAULT_SIDE_LIMIT: usize = 64 * 1024;

impl Scanner {
    /// `max_depth` bounds the nesting inside one record (objects and arrays).
    pub fn new(framing: Framing, max_depth: usize) -> Self {
        let state = match framing {
            Framing::Envelope(_) | Framing::EnvelopeSide { .. } => State::Open,
            Framing::Lines | Framing::Concatenated => State::Between,
        };
        Self {
            framing,
            tail: Vec::new(),
            at: 0,
            state,
            depth: 0,
            in_string: false,
            escaped: false,
            line: 1,
            records_seen: false,
            started: false,
            max_depth,
            sides_seen: 0,
            max_side: DEFAULT_SIDE_LIMIT,
            blank: 0,
        }
    }

    /// Bounds a side field's value to `max` bytes of JSON text (it is held in the tail while it
    /// arrives); a longer one is refused as soon as it is.
    pub fn with_side_limit(mut self, max: usize) -> Self {
        self.max_side = max;
        self
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Bytes of the unfinished tail held now.
    pub fn held(&self) -> usize {
        self.tail.len()
    }

    /// Memory the unfinished tail takes (its allocation, not only its bytes).
    pub fn footprint(&self) -> usize {
        self.tail.capacity()
    }

    /// The record still open after the last chunk, if one is: how many of its bytes have
    /// arrived, and the line it starts on.
    pub fn open_record(&self) -> Option<(usize, usize)> {
        match self.state {
            State::Record { start, line } => Some((self.tail.len().saturating_sub(start), line)),
            _ => None,
        }
    }

    /// Scans the next chunk, handing every record it completes to `sink`, and keeps only the
    /// unfinished tail.
    pub fn push<S: Sink>(&mut self, chunk: &[u8], sink: &mut S) -> Result<(), Stop<S::Error>> {
        let mut tail = std::mem::take(&mut self.tail);
        let outcome;
        let keep;
        if tail.is_empty() {
            // Nothing carried over (the usual case between records): scan the chunk in place.
            outcome = self.scan(chunk, sink);
            keep = self.keep_from().min(chunk.len());
            tail.extend_from_slice(chunk.get(keep..).unwrap_or_default());
        } else {
            tail.extend_from_slice(chunk);
            outcome = self.scan(&tail, sink);
            keep = self.keep_from().min(tail.len());
            tail.drain(..keep);
        }
        self.at -= keep.min(self.at);
        if let State::Record { start, .. }
        | State::KeyText { start }
        | State::SideValue { start, .. } = &mut self.state
        {
            *start -= keep.min(*start);
        }
        self.tail = tail;
        outcome
    }

    /// The first byte still needed after a scan.
    fn keep_from(&self) -> usize {
        match self.state {
            State::Record { start, .. }
            | State::KeyText { start }
            | State::SideValue { start, .. } => start,
            _ => self.at,
        }
    }

    /// The body has ended: a record cut short (or an unfinished envelope) is an error. An
    /// NDJSON line without its final newline is a record.
    pub fn finish<S: Sink>(&mut self, sink: &mut S) -> Result<(), Stop<S::Error>> {
        if self.framing == Framing::Lines {
            if let State::Record { start, line } = self.state {
                self.state = State::Between;
                let tail = std::mem::take(&mut self.tail);
                let last = sink.record(tail.get(start..).unwrap_or_default(), line);
                self.tail = tail;
                last.map_err(Stop::Sink)?;
            }
            return Ok(());
        }
        match self.state {
            State::Done | State::Between => Ok(()),
            State::Record { line, .. } => Err(Stop::Scan(ScanError::Truncated { line })),
            _ if !self.started && !self.records_seen => {
                Err(Stop::Scan(ScanError::Structure("the body is empty".into())))
            }
            _ => Err(Stop::Scan(ScanError::Structure(format!(
                "the body ends before the {} is complete",
                self.describe()
            )))),
        }
    }

    fn scan<S: Sink>(&mut self, data: &[u8], sink: &mut S) -> Result<(), Stop<S::Error>> {
        while let Some(&b) = data.get(self.at) {
            if let State::Record { start, line } = self.state {
                self.scan_record(data, start, line, sink)?;
                continue;
            }
            let i = self.at;
            self.at += 1;
            if b == b'\n' {
                self.line += 1;
            }
            if let State::KeyText { start } = self.state {
                self.key_byte(data, b, i, start).map_err(Stop::Scan)?;
                continue;
            }
            if let State::SideValue {
                start,
                field,
                string,
            } = self.state
            {
                if self.side_byte(data, b, i, (start, field, string), sink)? {
                    continue;
                }
            }
            if b.is_ascii_whitespace() {
                self.blank += 1;
                if self.blank > MAX_BLANK {
                    return Err(Stop::Scan(ScanError::Structure(format!(
                        "more than {MAX_BLANK} bytes of white space in a row (line {})",
                        self.line
                    ))));
                }
                continue;
            }
            self.blank = 0;
            self.started = true;
            self.structural(b, i).map_err(Stop::Scan)?;
            if let State::Record { start, line } = self.state {
                // A record object starts: the sink may take it whole from here, so the common
                // case reads each record once. Lines are not offered: their end is one
                // vectorised search away, and what follows a line's object is the parser's to
                // judge.
                if self.framing == Framing::Lines {
                    continue;
                }
                let rest = data.get(start..).unwrap_or_default();
                if let Some(len) = sink.record_at(rest, line).map_err(Stop::Sink)? {
                    self.at = start + len.clamp(1, rest.len());
                    self.depth = 0;
                    self.state = self.after_record();
                }
            }
        }
        Ok(())
    }

    fn after_record(&self) -> State {
        match self.framing {
            Framing::Envelope(_) | Framing::EnvelopeSide { .. } => State::CommaOrClose,
            Framing::Lines | Framing::Concatenated => State::Between,
        }
    }

    /// Scans inside a record as far as the data goes or until the record ends. Most of a
    /// record is string content, which is skipped with a vectorised search for the next quote
    /// or backslash; only the few bytes between strings are looked at one by one.
    fn scan_record<S: Sink>(
        &mut self,
        data: &[u8],
        start: usize,
        line: usize,
        sink: &mut S,
    ) -> Result<(), Stop<S::Error>> {
        let len = data.len();
        if self.framing == Framing::Lines {
            // A line is a record whatever it holds; the parser judges it.
            match memchr::memchr(b'\n', data.get(self.at..).unwrap_or_default()) {
                Some(k) => {
                    let end = self.at + k;
                    self.line += 1;
                    self.at = end + 1;
                    self.state = State::Between;
                    let text = data.get(start..end).unwrap_or_default();
                    sink.record(text, line).map_err(Stop::Sink)?;
                }
                None => self.at = len,
            }
            return Ok(());
        }
        let mut i = self.at;
        while i < len {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                match memchr::memchr2(b'"', b'\\', &data[i..]) {
                    None => i = len,
                    Some(k) if data[i + k] == b'\\' => {
                        self.escaped = true;
                        i += k + 1;
                    }
                    Some(k) => {
                        self.in_string = false;
                        i += k + 1;
                    }
                }
                continue;
            }
            let b = data[i];
            i += 1;
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth > self.max_depth {
                        self.at = i;
                        return Err(Stop::Scan(ScanError::TooDeep { line }));
                    }
                }
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        self.state = self.after_record();
                        self.at = i;
                        let text = data.get(start..i).unwrap_or_default();
                        return sink.record(text, line).map_err(Stop::Sink);
                    }
                }
                _ => {}
            }
        }
        self.at = i;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
