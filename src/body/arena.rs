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
    #[inline]
    fn put(&mut self, data: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        start..self.bytes.len()
    }

    /// Copies a record in (through the same writer the fast reader uses).
    pub fn push(&mut self, record: &Record<'_>) {
        let mut w = self.writer();
        let key = record.key.as_deref().map(|k| w.put(k));
        let value = record.value.as_deref().map(|v| w.put(v));
        for (name, value) in &record.headers {
            w.header(name.as_bytes(), value);
        }
        w.commit(key, value, record.partition, record.timestamp_ms);
    }

    /// Room for the records of `body_bytes` more body bytes: their key, value and header bytes
    /// never outnumber the body's, so this is reserved once rather than grown record by record.
    pub fn reserve(&mut self, body_bytes: usize) {
        self.bytes.reserve(body_bytes);
    }

    /// Starts a record written straight in, field by field, by a reader that may still decline
    /// it (the `/v1` fast reader): no `Record` is built and no header list allocated per record.
    pub(crate) fn writer(&mut self) -> RecordWriter<'_> {
        RecordWriter {
            bytes_mark: self.bytes.len(),
            headers_mark: self.headers.len(),
            arena: self,
            committed: false,
        }
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

    /// Memory the arena takes: its byte buffer and its index of records and headers, as
    /// allocated (a stream holds this against the body budget while records wait).
    pub fn footprint(&self) -> usize {
        self.bytes.capacity()
            + self.records.capacity() * std::mem::size_of::<Stored>()
            + self.headers.capacity() * std::mem::size_of::<(Range<usize>, Range<usize>)>()
    }

    /// The most memory the index of the records in `text` more body bytes can take: every
    /// record needs at least 2 bytes of text (`{}`), every header at least 6 (`"":""`), and a
    /// growing index may hold up to twice what it uses. What a stream reserves before it
    /// decodes a piece, so that even a body of empty records stays within its hold.
    pub fn index_bound(text: usize) -> usize {
        let records = text / 2 + 1;
        let headers = text / 6;
        let record = std::mem::size_of::<Stored>();
        let header = std::mem::size_of::<(Range<usize>, Range<usize>)>();
        records
            .saturating_mul(2 * record)
            .saturating_add(headers.saturating_mul(2 * header))
    }

    /// Overwrites `data.len()` bytes of record `index`'s key (`key`) or value, from byte `at`:
    /// the schema step writes a schema id the registry gave after the record was kept.
    /// `false` when there is no such record, field or range.
    pub fn overwrite(&mut self, index: usize, key: bool, at: usize, data: &[u8]) -> bool {
        let Some(stored) = self.records.get(index) else {
            return false;
        };
        let field = if key { &stored.key } else { &stored.value };
        let Some(range) = field.as_ref() else {
            return false;
        };
        let start = range.start.saturating_add(at);
        let end = start.saturating_add(data.len());
        if end > range.end {
            return false;
        }
        match self.bytes.get_mut(start..end) {
            Some(target) => {
                target.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    /// The same records without those at the indices in `failed`, in order: what is sent once
    /// a later step has failed some of them (see [`crate::body::ParseRecord::fail_record`]).
    pub fn without(&self, failed: &[usize]) -> RecordArena {
        let mut drop = vec![false; self.records.len()];
        for i in failed {
            if let Some(d) = drop.get_mut(*i) {
                *d = true;
            }
        }
        let mut out = RecordArena::default();
        for (record, dropped) in self.records().iter().zip(drop) {
            if !dropped {
                out.push(record);
            }
        }
        out
    }

    /// The partition each record names, in order (without building the records).
    pub fn partitions(&self) -> impl Iterator<Item = Option<i32>> + '_ {
        self.records.iter().map(|s| s.partition)
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

/// One record being written into a [`RecordArena`]. Dropped without [`RecordWriter::commit`],
/// it takes back everything it wrote, so a declined record leaves the arena as it was.
pub(crate) struct RecordWriter<'r> {
    arena: &'r mut RecordArena,
    bytes_mark: usize,
    headers_mark: usize,
    committed: bool,
}

impl RecordWriter<'_> {
    /// Copies a key or value in.
    #[inline]
    pub(crate) fn put(&mut self, data: &[u8]) -> Range<usize> {
        self.arena.put(data)
    }

    /// Decodes base64 straight into the arena; `None` (and nothing kept) if it is not valid.
    pub(crate) fn put_base64(
        &mut self,
        engine: &impl base64::Engine,
        text: &[u8],
    ) -> Option<Range<usize>> {
        let start = self.arena.bytes.len();
        match engine.decode_vec(text, &mut self.arena.bytes) {
            Ok(()) => Some(start..self.arena.bytes.len()),
            Err(_) => {
                self.arena.bytes.truncate(start);
                None
            }
        }
    }

    /// Adds a header. Its name must be UTF-8 (the reader has checked it; reading the records
    /// back checks again, so a wrong name could only come back empty, never as invalid text).
    #[inline]
    pub(crate) fn header(&mut self, name: &[u8], value: &[u8]) {
        let name = self.arena.put(name);
        let value = self.arena.put(value);
        self.arena.headers.push((name, value));
    }

    /// Headers written so far to this record.
    pub(crate) fn header_count(&self) -> usize {
        self.arena.headers.len() - self.headers_mark
    }

    /// Whether this record already has a header of this name.
    pub(crate) fn has_header(&self, name: &[u8]) -> bool {
        let bytes = &self.arena.bytes;
        let mine = self.arena.headers.get(self.headers_mark..);
        mine.unwrap_or_default()
            .iter()
            .any(|(n, _)| bytes.get(n.clone()) == Some(name))
    }

    /// Keeps the record: these ranges (from [`RecordWriter::put`] and
    /// [`RecordWriter::put_base64`]) as its key and value, and the headers written.
    // Always inlined: called once per record with ranges just computed, which otherwise go
    // through memory and stall on store forwarding (7-8 % of the parse profile).
    #[inline(always)]
    pub(crate) fn commit(
        mut self,
        key: Option<Range<usize>>,
        value: Option<Range<usize>>,
        partition: Option<i32>,
        timestamp_ms: Option<i64>,
    ) {
        let arena = &mut *self.arena;
        arena.records.push(Stored {
            key,
            value,
            headers: self.headers_mark..arena.headers.len(),
            partition,
            timestamp_ms,
        });
        arena.charge.records += 1;
        // Everything written for the record is its key, value and header bytes; every record
        // also costs the overhead `Record::size` counts.
        arena.charge.bytes +=
            (arena.bytes.len() - self.bytes_mark) as u64 + crate::record::RECORD_OVERHEAD_BYTES;
        self.committed = true;
    }
}

impl Drop for RecordWriter<'_> {
    fn drop(&mut self) {
        if !self.committed {
            self.arena.bytes.truncate(self.bytes_mark);
            self.arena.headers.truncate(self.headers_mark);
        }
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
        assert_eq!(arena.records(), vec![a.clone(), b.clone()]);
        assert_eq!(arena.charge(), Charge::new(2, a.size() + b.size()));
    }

    #[test]
    fn a_written_record_is_kept_on_commit_and_taken_back_otherwise() {
        let mut arena = RecordArena::default();
        let mut w = arena.writer();
        w.header(b"h1", b"x");
        let value = w.put(b"[1]");
        let key = w.put_base64(&base64::engine::general_purpose::STANDARD, b"aGk=");
        assert!(w.has_header(b"h1") && !w.has_header(b"h2"));
        assert_eq!(w.header_count(), 1);
        w.commit(key, Some(value), Some(3), None);
        let kept = Record {
            key: Some(Cow::Borrowed(b"hi")),
            value: Some(Cow::Borrowed(b"[1]")),
            headers: vec![(Cow::Borrowed("h1"), Cow::Borrowed(b"x"))],
            partition: Some(3),
            timestamp_ms: None,
        };
        let (held, charge) = (arena.held(), arena.charge());
        assert_eq!(charge, Charge::new(1, kept.size()));

        let mut w = arena.writer();
        w.header(b"h2", b"y");
        w.put(b"declined");
        assert!(!w.has_header(b"h1"), "headers are per record");
        assert!(w
            .put_base64(&base64::engine::general_purpose::STANDARD, b"!!")
            .is_none());
        drop(w);
        assert_eq!((arena.held(), arena.charge()), (held, charge));
        assert_eq!(arena.records(), vec![kept]);
    }
}
