//! Where decoded records live while a body is still arriving: their bytes copied into one
//! growing buffer, each record kept as ranges into it. The request's body can then be dropped
//! piece by piece as records are decoded (only the unfinished tail is kept), and the records are
//! handed out at the end as borrowed [`Record`]s — one allocation per request for the bytes, not
//! one per field.

use std::borrow::Cow;
use std::ops::Range;

use crate::record::{Charge, Record};

#[derive(Debug, Clone)]
struct Stored {
    key: Option<Range<usize>>,
    value: Option<Range<usize>>,
    /// Range into `RecordArena::headers`.
    headers: Range<usize>,
    partition: Option<i32>,
    timestamp_ms: Option<i64>,
}

/// Decoded records, owning their bytes.
#[derive(Debug, Default)]
pub struct RecordArena {
    bytes: Vec<u8>,
    records: Vec<Stored>,
    /// (name, value) ranges of every record's headers, in order.
    headers: Vec<(Range<usize>, Range<usize>)>,
    charge: Charge,
}

impl RecordArena {
    fn put(&mut self, data: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        start..self.bytes.len()
    }

    /// Copies a record in.
    pub fn push(&mut self, record: &Record<'_>) {
        let key = record.key.as_deref().map(|k| self.put(k));
        let value = record.value.as_deref().map(|v| self.put(v));
        let first = self.headers.len();
        for (name, value) in &record.headers {
            let name = self.put(name.as_bytes());
            let value = self.put(value);
            self.headers.push((name, value));
        }
        self.records.push(Stored {
            key,
            value,
            headers: first..self.headers.len(),
            partition: record.partition,
            timestamp_ms: record.timestamp_ms,
        });
        self.charge.records += 1;
        self.charge.bytes += record.size();
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// What the records cost (count and key + value + header bytes).
    pub fn charge(&self) -> Charge {
        self.charge
    }

    /// Record data held (key, value and header bytes). Decoding moves bytes from the body's
    /// unfinished tail into here, so the two together never hold more than has arrived.
    pub fn held(&self) -> usize {
        self.bytes.len()
    }

    /// The records, borrowing from the arena.
    pub fn records(&self) -> Vec<Record<'_>> {
        let slice = |r: &Range<usize>| self.bytes.get(r.clone()).unwrap_or_default();
        self.records
            .iter()
            .map(|s| Record {
                key: s.key.as_ref().map(|r| Cow::Borrowed(slice(r))),
                value: s.value.as_ref().map(|r| Cow::Borrowed(slice(r))),
                headers: self
                    .headers
                    .get(s.headers.clone())
                    .unwrap_or_default()
                    .iter()
                    .map(|(n, v)| {
                        // Names went in as `str`, so they come out as one.
                        let name = std::str::from_utf8(slice(n)).unwrap_or_default();
                        (Cow::Borrowed(name), Cow::Borrowed(slice(v)))
                    })
                    .collect(),
                partition: s.partition,
                timestamp_ms: s.timestamp_ms,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_back_as_they_went_in() {
        let a = Record {
            key: Some(Cow::Borrowed(b"k")),
            value: Some(Cow::Borrowed(b"{\"v\":1}")),
            headers: vec![
                (Cow::Borrowed("h1"), Cow::Borrowed(b"x")),
                (Cow::Borrowed("h2"), Cow::Borrowed(b"")),
            ],
            partition: Some(2),
            timestamp_ms: Some(7),
        };
        let b = Record {
            value: None,
            ..Record::default()
        };
        let mut arena = RecordArena::default();
        arena.push(&a);
        arena.push(&b);
        assert_eq!(arena.records(), vec![a.clone(), b]);
        assert_eq!(arena.charge(), Charge::new(2, a.size()));
    }
}
