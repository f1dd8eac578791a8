//! Confluent v3 records: one object per record (concatenated for a stream), or with an `"id"`
//! inside `{"entries": [...]}` for a batch, whose failed entries are noted and reported in
//! their place.

use std::borrow::Cow;
use std::sync::Mutex;

use serde::Deserialize;

use super::v3_wire::{timestamp_ms, v3_data, DataType, WireV3};
use super::{b64, check_sizes, serde_error};
use crate::body::{ParseRecord, RecordError};
use crate::config::RequestBounds;
use crate::record::Record;
use crate::schema;

/// The types a v3 record's key and value were sent with, and their sizes in bytes (its
/// delivery report names them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct V3Types {
    pub key: Option<DataType>,
    pub value: Option<DataType>,
    pub key_size: usize,
    pub value_size: usize,
}

/// One entry of a v3 body as the parser saw it, in body order: its id (batch entries), its
/// types and sizes, and why it is not written, if it is not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V3Entry {
    pub id: Option<String>,
    pub types: V3Types,
    /// Decoded into a record: it has an index among the decoded records (see
    /// [`ParseRecord::fail_record`]).
    pub decoded: bool,
    /// Not written: the status the answer gives the entry (400, 413, 422) and the message.
    pub failed: Option<(u16, String)>,
}

/// v3 records. Remembers, in order, each entry's types and (for a batch) its id, which the
/// answer repeats, and which batch entries failed (at decoding, or later through
/// [`ParseRecord::fail_record`]).
#[derive(Debug, Default)]
pub struct V3Record {
    /// Batch entries carry an `id`; stream records must not.
    pub batch: bool,
    /// Whether the gateway has a Schema Registry: without one, schema types are refused here.
    pub registry: bool,
    seen: Mutex<Vec<V3Entry>>,
    /// What each decoded record's key and value want of the schema step, in record order.
    wanted: Mutex<Vec<schema::Wanted>>,
}

/// Just a batch entry's id, read from an entry that failed to decode.
#[derive(Deserialize)]
struct EntryIdOnly {
    #[serde(default)]
    id: Option<serde_json::Value>,
}

impl V3Record {
    pub fn batch() -> Self {
        Self {
            batch: true,
            ..Self::default()
        }
    }

    /// With (or without) a Schema Registry to resolve schema types.
    pub fn with_registry(mut self, registry: bool) -> Self {
        self.registry = registry;
        self
    }

    /// What the records parsed since the last call want of the schema step, in order.
    pub fn take_wanted(&self) -> Vec<schema::Wanted> {
        std::mem::take(
            &mut *self
                .wanted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// What decoded record `index` (since the last take) wants, left in place.
    pub fn wanted_at(&self, index: usize) -> Option<schema::Wanted> {
        self.wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(index)
            .cloned()
    }

    /// A batch entry's id: 1 to 80 of `0-9 A-Z a-z _ -`, not used before in the batch.
    fn check_id(&self, id: &str) -> Result<(), RecordError> {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
        if id.is_empty() || id.len() > 80 || !id.chars().all(legal) {
            return Err(RecordError::EntryId(format!(
                "entry id {id:?} must be 1 to 80 characters of 0-9 A-Z a-z _ -"
            )));
        }
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.iter().any(|other| other.id.as_deref() == Some(id)) {
            return Err(RecordError::EntryId(format!(
                "entry id {id:?} is used twice"
            )));
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<V3Entry>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entries seen since the last call, in body order (failed ones included).
    pub fn take_seen(&self) -> Vec<V3Entry> {
        std::mem::take(&mut *self.lock())
    }
}

/// A stream's records carry no id: what a report needs is each record's types and sizes.
impl crate::body::RecordNotes for V3Record {
    type Note = V3Types;

    fn take_notes(&self) -> Vec<V3Types> {
        self.take_seen()
            .into_iter()
            .map(|entry| entry.types)
            .collect()
    }
}

impl ParseRecord for V3Record {
    fn parse<'a>(&self, text: &'a [u8], bounds: &RequestBounds) -> Result<Record<'a>, RecordError> {
        let wire: WireV3<'a> = serde_json::from_slice(text).map_err(serde_error)?;
        match (&wire.id, self.batch) {
            (None, true) => {
                return Err(RecordError::EntryId(
                    "entry id is missing; every batch entry has one".into(),
                ))
            }
            (Some(_), false) => {
                return Err(RecordError::Invalid(
                    "unknown field `id` (ids are for records:batch)".into(),
                ))
            }
            (Some(id), true) => self.check_id(id)?,
            (None, false) => {}
        }
        if let Some(p) = wire.partition_id.filter(|p| *p < 0) {
            return Err(RecordError::Invalid(format!(
                "partition_id {p} is negative"
            )));
        }
        let (key_type, key, key_schema) = v3_data("key", wire.key, self.registry)?;
        let (value_type, value, value_schema) = v3_data("value", wire.value, self.registry)?;
        let mut headers = Vec::with_capacity(wire.headers.len());
        for h in wire.headers {
            let value = match h.value {
                Some(text) => b64(&format!("header {:?}", h.name), &text)?,
                // Kafka header values may be null; floodgate writes them empty.
                None => Cow::Borrowed(&b""[..]),
            };
            headers.push((h.name, value));
        }
        let record = Record {
            key,
            value,
            headers,
            partition: wire.partition_id,
            timestamp_ms: wire.timestamp.as_deref().map(timestamp_ms).transpose()?,
        };
        check_sizes(&record, bounds)?;
        self.wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(schema::Wanted {
                key: key_schema,
                value: value_schema,
            });
        self.lock().push(V3Entry {
            id: wire.id,
            types: V3Types {
                key: key_type,
                value: value_type,
                key_size: record.key.as_ref().map_or(0, |k| k.len()),
                value_size: record.value.as_ref().map_or(0, |v| v.len()),
            },
            decoded: true,
            failed: None,
        });
        Ok(record)
    }

    /// A batch entry that is valid JSON but not a valid record (400), or too large (413), is a
    /// failed entry, named by its id; one whose id is missing or breaks the batch's rules fails
    /// the batch (kafka-rest checks ids before producing anything). Not JSON: the whole body.
    fn skip_failed(&self, text: &[u8], error: &RecordError) -> Result<bool, RecordError> {
        let (status, message) = match error {
            _ if !self.batch => return Ok(false),
            RecordError::Invalid(m) => (400, m),
            RecordError::TooLarge(m) => (413, m),
            RecordError::Syntax(_) | RecordError::EntryId(_) => return Ok(false),
        };
        let Ok(entry) = serde_json::from_slice::<EntryIdOnly>(text) else {
            return Ok(false);
        };
        let id = match entry.id {
            None => {
                return Err(RecordError::EntryId(
                    "entry id is missing; every batch entry has one".into(),
                ))
            }
            Some(serde_json::Value::String(id)) => id,
            Some(other) => {
                return Err(RecordError::EntryId(format!(
                    "entry id {other} must be a string"
                )))
            }
        };
        self.check_id(&id)?;
        let mut seen = self.lock();
        let position = seen.len();
        seen.push(V3Entry {
            id: Some(id),
            types: V3Types::default(),
            decoded: false,
            failed: Some((
                status,
                crate::quote::brief(format!("record {position}: {message}")),
            )),
        });
        Ok(true)
    }

    fn reports_each(&self) -> bool {
        self.batch
    }

    fn fail_record(&self, record_index: usize, status: u16, message: String) -> bool {
        if !self.batch {
            return false;
        }
        let mut seen = self.lock();
        let Some((position, entry)) = seen
            .iter_mut()
            .enumerate()
            .filter(|(_, e)| e.decoded)
            .nth(record_index)
        else {
            return false;
        };
        // The pipeline names a record by its index among the decoded ones; the batch's
        // answer names it by its place in the body, as its decoding failures do.
        let message = match message.strip_prefix(&format!("record {record_index}:")) {
            Some(rest) => format!("record {position}:{rest}"),
            None => message,
        };
        if entry.failed.is_none() {
            entry.failed = Some((status, crate::quote::brief(message)));
        }
        true
    }
}
