//! The envelope's own structure, between and beside the records: its field names, the
//! records array's brackets and commas, and side fields' values (scanned as they arrive,
//! bounded, and handed whole to the sink). Part of [`Scanner`]'s loop: the bytes here are few
//! (none inside a record), so the loop stays in `scan.rs`.

use super::{Framing, ScanError, Scanner, Sink, State, Stop};

impl Scanner {
    pub(super) fn describe(&self) -> String {
        match self.framing.envelope() {
            Some((key, _)) => format!("{{\"{key}\": [...]}} object"),
            None => "record".into(),
        }
    }

    /// The name of side field `field` (indices come from the side list itself).
    pub(super) fn side_name(&self, field: usize) -> &'static str {
        self.framing
            .envelope()
            .and_then(|(_, side)| side.get(field).copied())
            .unwrap_or_default()
    }

    /// One byte of a side value that started at `start`. `Ok(true)` when the byte was taken
    /// (part of the value, or the string's closing quote); `Ok(false)` when a bare value ended
    /// before it and the byte is still to be read as structure.
    pub(super) fn side_byte<S: Sink>(
        &mut self,
        data: &[u8],
        b: u8,
        i: usize,
        (start, field, string): (usize, usize, bool),
        sink: &mut S,
    ) -> Result<bool, Stop<S::Error>> {
        let name = self.side_name(field);
        if i.saturating_sub(start) >= self.max_side {
            return Err(Stop::Scan(ScanError::Structure(format!(
                "field \"{name}\" is longer than {} bytes",
                self.max_side
            ))));
        }
        let end = if string {
            match (self.escaped, b) {
                (true, _) => {
                    self.escaped = false;
                    None
                }
                (false, b'\\') => {
                    self.escaped = true;
                    None
                }
                (false, b'"') => Some(i + 1),
                _ => None,
            }
        } else if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.') {
            None
        } else {
            Some(i)
        };
        let Some(end) = end else {
            return Ok(true);
        };
        let raw = data.get(start..end).unwrap_or_default();
        let bare_ok = raw == b"null"
            || raw
                .first()
                .is_some_and(|c| *c == b'-' || c.is_ascii_digit());
        if !string && !bare_ok {
            return Err(Stop::Scan(ScanError::Structure(format!(
                "field \"{name}\" must be a string, a number or null"
            ))));
        }
        self.state = State::AfterArray;
        sink.side_field(name, raw).map_err(Stop::Sink)?;
        Ok(string)
    }

    #[inline]
    pub(super) fn key_byte(
        &mut self,
        data: &[u8],
        b: u8,
        i: usize,
        start: usize,
    ) -> Result<(), ScanError> {
        match (self.escaped, b) {
            (true, _) => self.escaped = false,
            (false, b'\\') => self.escaped = true,
            (false, b'"') => {
                let Some((expected, side)) = self.framing.envelope() else {
                    return Err(ScanError::Structure("unexpected field name".into()));
                };
                let name = String::from_utf8_lossy(data.get(start..i).unwrap_or_default());
                if let Some(field) = side.iter().position(|s| *s == name) {
                    let bit = 1u64.checked_shl(field as u32).unwrap_or(0);
                    if self.sides_seen & bit != 0 {
                        return Err(ScanError::Structure(format!(
                            "field {name:?} appears twice"
                        )));
                    }
                    self.sides_seen |= bit;
                    self.state = State::SideColon { field };
                    return Ok(());
                }
                if name != expected {
                    let also = if side.is_empty() {
                        String::new()
                    } else {
                        format!(" (beside it only {})", side.join(", "))
                    };
                    return Err(ScanError::Structure(format!(
                        "unknown field {name:?}; the body is {{\"{expected}\": [...]}}{also}"
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
    #[inline]
    pub(super) fn structural(&mut self, b: u8, i: usize) -> Result<(), ScanError> {
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
                let Some((key, _)) = self.framing.envelope() else {
                    return unexpected("a field");
                };
                return Err(ScanError::Structure(format!("missing field `{key}`")));
            }
            (State::Key, _) => return unexpected("a field name"),
            (State::AfterArray, b'}') if !self.records_seen => {
                let (key, _) = self.framing.envelope().unwrap_or_default();
                return Err(ScanError::Structure(format!("missing field `{key}`")));
            }
            (State::AfterArray, b'}') => self.state = State::Done,
            (State::SideColon { field }, b':') => self.state = State::SideOpen { field },
            (State::SideColon { .. }, _) => return unexpected("':'"),
            (State::SideOpen { field }, b'"') => {
                self.escaped = false;
                self.state = State::SideValue {
                    start: i,
                    field,
                    string: true,
                };
            }
            (State::SideOpen { field }, b'-' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z') => {
                self.state = State::SideValue {
                    start: i,
                    field,
                    string: false,
                };
            }
            (State::SideOpen { field }, _) => {
                return Err(ScanError::Structure(format!(
                    "field \"{}\" must be a string, a number or null",
                    self.side_name(field)
                )));
            }
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
            (State::KeyText { .. } | State::Record { .. } | State::SideValue { .. }, _) => {}
        }
        Ok(())
    }
}
