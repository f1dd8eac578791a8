//! Finding whole records in a body that arrives in pieces.
//!
//! A [`Scanner`] is fed the body chunk by chunk and says where each complete record object
//! ends, without parsing it: it follows strings, escapes and nesting only. The decoder parses
//! each record as soon as the scanner has found it, so counts and sizes are known while the
//! body is still arriving, and a request that cannot be admitted is refused before the rest
//! of it is read.
//!
//! Three framings: the envelope `{"KEY": [record, record, ...]}` (floodgate's `/v1` JSON and
//! Confluent's v2 body), one record per line (NDJSON), and records one after another with only
//! white space between them (Confluent's v3 stream).

/// How records are laid out in a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `{"<key>": [ {...}, {...} ]}` and nothing else.
    Envelope(&'static str),
    /// One record object per line; blank lines are skipped.
    Lines,
    /// Record objects one after another, white space between them.
    Concatenated,
}

/// Where a complete record lies in the scanner's buffer, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Byte range in [`Scanner::buffer`].
    pub start: usize,
    pub end: usize,
    /// 1-based line of the body the record starts on (NDJSON errors name it).
    pub line: usize,
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
    /// Envelope: after the records array: `}` or `,` and another field.
    AfterArray,
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

/// Scans a body for complete records. Feed it with [`Scanner::push`]; take the records it found
/// with [`Scanner::next_record`]; drop consumed bytes with [`Scanner::compact`].
#[derive(Debug)]
pub struct Scanner {
    framing: Framing,
    buffer: Vec<u8>,
    /// Next byte to look at.
    at: usize,
    state: State,
    depth: usize,
    in_string: bool,
    escaped: bool,
    line: usize,
    records_seen: bool,
    max_depth: usize,
    found: std::collections::VecDeque<Found>,
}

impl Scanner {
    /// `max_depth` bounds the nesting inside one record (objects and arrays).
    pub fn new(framing: Framing, max_depth: usize) -> Self {
        let state = match framing {
            Framing::Envelope(_) => State::Open,
            Framing::Lines | Framing::Concatenated => State::Between,
        };
        Self {
            framing,
            buffer: Vec::new(),
            at: 0,
            state,
            depth: 0,
            in_string: false,
            escaped: false,
            line: 1,
            records_seen: false,
            max_depth,
            found: Default::default(),
        }
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The bytes not yet compacted away; [`Found`] ranges index into it.
    pub fn buffer(&self) -> &[u8] {
        &self.buffer
    }

    /// Bytes of the unfinished tail held now.
    pub fn held(&self) -> usize {
        self.buffer.len()
    }

    /// Appends a chunk and scans it. Records found are queued for [`Scanner::next_record`].
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), ScanError> {
        self.buffer.extend_from_slice(chunk);
        self.scan()
    }

    /// The next complete record, if any.
    pub fn next_record(&mut self) -> Option<Found> {
        self.found.pop_front()
    }

    /// Drops the bytes before `upto` (everything of the records already taken).
    pub fn compact(&mut self, upto: usize) {
        let upto = upto.min(self.keep_from());
        if upto == 0 {
            return;
        }
        self.buffer.drain(..upto);
        self.at -= upto;
        match &mut self.state {
            State::Record { start, .. } | State::KeyText { start } => *start -= upto,
            _ => {}
        }
        for f in &mut self.found {
            f.start -= upto;
            f.end -= upto;
        }
    }

    /// The first byte still needed.
    fn keep_from(&self) -> usize {
        let pending = self.found.front().map(|f| f.start);
        let open = match self.state {
            State::Record { start, .. } | State::KeyText { start } => Some(start),
            _ => None,
        };
        pending.into_iter().chain(open).min().unwrap_or(self.at)
    }

    /// The body has ended: a record cut short (or an unfinished envelope) is an error. An
    /// NDJSON line without its final newline is a record.
    pub fn finish(&mut self) -> Result<(), ScanError> {
        if self.framing == Framing::Lines {
            if let State::Record { start, line } = self.state {
                self.found.push_back(Found {
                    start,
                    end: self.buffer.len(),
                    line,
                });
                self.state = State::Between;
            }
            return Ok(());
        }
        match self.state {
            State::Done | State::Between => Ok(()),
            State::Record { line, .. } => Err(ScanError::Truncated { line }),
            _ if self.buffer.iter().all(u8::is_ascii_whitespace) && !self.records_seen => {
                Err(ScanError::Structure("the body is empty".into()))
            }
            _ => Err(ScanError::Structure(format!(
                "the body ends before the {} is complete",
                self.describe()
            ))),
        }
    }

    fn describe(&self) -> String {
        match self.framing {
            Framing::Envelope(key) => format!("{{\"{key}\": [...]}} object"),
            Framing::Lines | Framing::Concatenated => "record".into(),
        }
    }

    fn scan(&mut self) -> Result<(), ScanError> {
        while self.at < self.buffer.len() {
            if let State::Record { start, line } = self.state {
                self.scan_record(start, line)?;
                continue;
            }
            let b = self.buffer[self.at];
            let i = self.at;
            self.at += 1;
            if b == b'\n' {
                self.line += 1;
            }
            if let State::KeyText { start } = self.state {
                self.key_byte(b, i, start)?;
                continue;
            }
            if b.is_ascii_whitespace() {
                continue;
            }
            self.structural(b, i)?;
        }
        Ok(())
    }

    /// Scans inside a record as far as the buffer goes or until the record ends. Most of a
    /// record is string content, which is skipped with a vectorised search for the next quote
    /// or backslash; only the few bytes between strings are looked at one by one.
    fn scan_record(&mut self, start: usize, line: usize) -> Result<(), ScanError> {
        let len = self.buffer.len();
        if self.framing == Framing::Lines {
            // A line is a record whatever it holds; the parser judges it.
            match memchr::memchr(b'\n', &self.buffer[self.at..]) {
                Some(k) => {
                    let end = self.at + k;
                    self.found.push_back(Found { start, end, line });
                    self.line += 1;
                    self.at = end + 1;
                    self.state = State::Between;
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
                match memchr::memchr2(b'"', b'\\', &self.buffer[i..]) {
                    None => i = len,
                    Some(k) if self.buffer[i + k] == b'\\' => {
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
            let b = self.buffer[i];
            i += 1;
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth > self.max_depth {
                        self.at = i;
                        return Err(ScanError::TooDeep { line });
                    }
                }
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        self.found.push_back(Found {
                            start,
                            end: i,
                            line,
                        });
                        self.state = match self.framing {
                            Framing::Envelope(_) => State::CommaOrClose,
                            _ => State::Between,
                        };
                        self.at = i;
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
        self.at = i;
        Ok(())
    }

    fn key_byte(&mut self, b: u8, i: usize, start: usize) -> Result<(), ScanError> {
        match (self.escaped, b) {
            (true, _) => self.escaped = false,
            (false, b'\\') => self.escaped = true,
            (false, b'"') => {
                let Framing::Envelope(expected) = self.framing else {
                    return Err(ScanError::Structure("unexpected field name".into()));
                };
                let name = String::from_utf8_lossy(&self.buffer[start..i]).into_owned();
                if name != expected {
                    return Err(ScanError::Structure(format!(
                        "unknown field {name:?}; the body is {{\"{expected}\": [...]}}"
                    )));
                }
                if self.records_seen {
                    return Err(ScanError::Structure(format!(
                        "field \"{expected}\" appears twice"
                    )));
                }
                self.state = State::Colon;
            }
            _ => {}
        }
        Ok(())
    }

    /// A byte between values (not white space).
    fn structural(&mut self, b: u8, i: usize) -> Result<(), ScanError> {
        let unexpected = |what: &str| {
            Err(ScanError::Structure(format!(
                "expected {what}, found {:?}",
                char::from(b)
            )))
        };
        match (self.state, b) {
            (State::Open, b'{') => self.state = State::Key,
            (State::Open, _) => return unexpected(&format!("the {}", self.describe())),
            (State::Key, b'"') => self.state = State::KeyText { start: i + 1 },
            (State::Key, b'}') if !self.records_seen => {
                let Framing::Envelope(key) = self.framing else {
                    return unexpected("a field");
                };
                return Err(ScanError::Structure(format!("missing field `{key}`")));
            }
            (State::Key, _) => return unexpected("a field name"),
            (State::AfterArray, b'}') => self.state = State::Done,
            (State::AfterArray, b',') => self.state = State::Key,
            (State::AfterArray, _) => return unexpected("'}'"),
            (State::Colon, b':') => self.state = State::ArrayOpen,
            (State::Colon, _) => return unexpected("':'"),
            (State::ArrayOpen, b'[') => {
                self.records_seen = true;
                self.state = State::Element { may_close: true };
            }
            (State::ArrayOpen, _) => return unexpected("an array of record objects"),
            (State::Element { may_close: true }, b']') => self.state = State::AfterArray,
            (State::Element { .. }, b'{') | (State::Between, b'{') => {
                self.depth = 1;
                self.state = State::Record {
                    start: i,
                    line: self.line,
                };
            }
            (State::Between, _) if self.framing == Framing::Lines => {
                // A line that does not start with `{`: still a record, for the parser to judge.
                self.state = State::Record {
                    start: i,
                    line: self.line,
                };
            }
            (State::Element { .. }, _) | (State::Between, _) => {
                return unexpected("a record object");
            }
            (State::CommaOrClose, b',') => self.state = State::Element { may_close: false },
            (State::CommaOrClose, b']') => self.state = State::AfterArray,
            (State::CommaOrClose, _) => return unexpected("',' or ']'"),
            (State::Done, _) => {
                return Err(ScanError::Structure(
                    "trailing characters after the body".into(),
                ));
            }
            (State::KeyText { .. } | State::Record { .. }, _) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(framing: Framing, chunks: &[&str]) -> Result<Vec<String>, ScanError> {
        let mut s = Scanner::new(framing, 130);
        let mut out = Vec::new();
        for c in chunks {
            s.push(c.as_bytes())?;
            while let Some(f) = s.next_record() {
                out.push(String::from_utf8_lossy(&s.buffer()[f.start..f.end]).into_owned());
                s.compact(f.end);
            }
        }
        s.finish()?;
        while let Some(f) = s.next_record() {
            out.push(String::from_utf8_lossy(&s.buffer()[f.start..f.end]).into_owned());
        }
        Ok(out)
    }

    #[test]
    fn envelope_records_are_found_across_chunk_boundaries() {
        let body = r#" {"records": [ {"value":"a}\"{"}, {"value":[1,{"x":2}]} ] } "#;
        for split in 0..body.len() {
            let (a, b) = body.split_at(split);
            assert_eq!(
                records(Framing::Envelope("records"), &[a, b]).expect("valid"),
                vec![r#"{"value":"a}\"{"}"#, r#"{"value":[1,{"x":2}]}"#],
                "split at {split}"
            );
        }
    }

    #[test]
    fn envelope_structure_errors_are_named() {
        let e = |body: &str| match records(Framing::Envelope("records"), &[body]) {
            Err(ScanError::Structure(m)) => m,
            Err(ScanError::Truncated { .. }) => "ends inside a record".into(),
            other => panic!("{body}: {other:?}"),
        };
        assert!(e(r#"{"recs":[]}"#).contains("unknown field \"recs\""));
        assert!(e(r#"{"records":[{}],"records":[]}"#).contains("appears twice"));
        assert!(e(r#"{"records":[{},]}"#).contains("expected a record object"));
        assert!(e(r#"{"records":[1]}"#).contains("expected a record object"));
        assert!(e(r#"{"records":[{}]} x"#).contains("trailing"));
        assert!(e(r#"{"records":[{"v":1"#).contains("ends inside a record"));
        assert!(e(r#"{}"#).contains("missing field `records`"));
        assert!(e("").contains("empty"));
    }

    #[test]
    fn lines_and_streams() {
        assert_eq!(
            records(Framing::Lines, &["{\"a\":1}\n\n{\"b\"", ":2}"]).expect("lines"),
            vec!["{\"a\":1}", "{\"b\":2}"]
        );
        assert_eq!(
            records(
                Framing::Concatenated,
                &["{\"a\":\"}\"}{\"b\":", "2}\r\n {}"]
            )
            .expect("stream"),
            vec!["{\"a\":\"}\"}", "{\"b\":2}", "{}"]
        );
    }

    #[test]
    fn nesting_is_bounded_while_scanning() {
        let deep = format!("{{\"records\":[{{\"value\":{}", "[".repeat(200));
        let e = records(Framing::Envelope("records"), &[&deep]).expect_err("deep");
        assert_eq!(e, ScanError::TooDeep { line: 1 });
    }

    #[test]
    fn compaction_keeps_only_the_unfinished_tail() {
        let mut s = Scanner::new(Framing::Lines, 10);
        s.push(b"{\"a\":1}\n{\"b\":").expect("push");
        let f = s.next_record().expect("one");
        s.compact(f.end);
        assert_eq!(s.buffer(), b"\n{\"b\":");
        s.push(b"2}\n").expect("push");
        let f = s.next_record().expect("two");
        assert_eq!(&s.buffer()[f.start..f.end], b"{\"b\":2}");
    }
}
