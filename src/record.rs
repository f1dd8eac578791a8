//! What flows through the gateway: a [`Record`] on its way to Kafka, and the [`Charge`] a
//! request makes against budgets and the buffer.
//!
//! A foundation module: wire-format decoders produce records, the Kafka producer consumes them,
//! and admission charges their cost, without any of them knowing the others.
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use std::borrow::Cow;

use crate::dimension::PerDimension;

/// One record, ready for the producer. Borrowed from the request body where possible.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record<'a> {
    pub key: Option<Cow<'a, [u8]>>,
    /// `None` is a Kafka null value (a tombstone on compacted topics).
    pub value: Option<Cow<'a, [u8]>>,
    pub headers: Vec<(Cow<'a, str>, Cow<'a, [u8]>)>,
    pub partition: Option<i32>,
    pub timestamp_ms: Option<i64>,
}

/// What every record costs in the bytes budgets and the buffer besides its key, value and
/// headers, as Kafka's own record format does: an empty record is 7 bytes there (its length,
/// attributes, timestamp and offset deltas, key and value lengths, header count), rounded up.
/// Without it a record with no key, value or headers would cost nothing, and a bytes-only
/// budget would admit any number of them.
pub const RECORD_OVERHEAD_BYTES: u64 = 8;

impl Record<'_> {
    /// What the record costs in budgets and buffer: key, value, header names and values, and
    /// [`RECORD_OVERHEAD_BYTES`].
    pub fn size(&self) -> u64 {
        let headers: usize = self.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
        let value = self.value.as_ref().map_or(0, |v| v.len());
        (self.key.as_ref().map_or(0, |k| k.len()) + value + headers) as u64 + RECORD_OVERHEAD_BYTES
    }

    /// A record that owns its bytes, for work that outlives the request body.
    pub fn into_owned(self) -> Record<'static> {
        Record {
            key: self.key.map(|k| Cow::Owned(k.into_owned())),
            value: self.value.map(|v| Cow::Owned(v.into_owned())),
            headers: self
                .headers
                .into_iter()
                .map(|(k, v)| (Cow::Owned(k.into_owned()), Cow::Owned(v.into_owned())))
                .collect(),
            partition: self.partition,
            timestamp_ms: self.timestamp_ms,
        }
    }
}

/// The cost of a request in both dimensions every budget and the buffer count. The one type
/// used wherever something is charged, checked or reserved, so the two numbers can never be
/// passed in the wrong order.
pub type Charge = PerDimension<u64>;

impl Charge {
    pub const fn new(records: u64, bytes: u64) -> Self {
        Self { records, bytes }
    }

    /// Both charges together.
    pub fn plus(self, other: Self) -> Self {
        Self::new(
            self.records.saturating_add(other.records),
            self.bytes.saturating_add(other.bytes),
        )
    }

    /// This charge without `other` (none below nothing).
    pub fn minus(self, other: Self) -> Self {
        Self::new(
            self.records.saturating_sub(other.records),
            self.bytes.saturating_sub(other.bytes),
        )
    }

    /// The cost of these records.
    pub fn of(records: &[Record<'_>]) -> Self {
        Self {
            records: records.len() as u64,
            bytes: records.iter().map(Record::size).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_counts_key_value_and_headers() {
        let r = Record {
            key: Some(Cow::Borrowed(b"ab")),
            value: Some(Cow::Borrowed(b"cde")),
            headers: vec![(Cow::Borrowed("h"), Cow::Borrowed(b"12"))],
            ..Record::default()
        };
        assert_eq!(r.size(), 8 + RECORD_OVERHEAD_BYTES);
        assert_eq!(
            Charge::of(&[r.clone(), r]),
            Charge::new(2, 2 * (8 + RECORD_OVERHEAD_BYTES))
        );
        assert_eq!(
            Record::default().size(),
            RECORD_OVERHEAD_BYTES,
            "an empty record still costs"
        );
    }
}

/// The API a produce request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// floodgate's own `/v1`.
    V1,
    /// Confluent REST Proxy v2.
    V2,
    /// Confluent REST Proxy v3 (streams and batches).
    V3,
}

impl Api {
    pub const ALL: [Api; 3] = [Api::V1, Api::V2, Api::V3];

    pub fn as_str(self) -> &'static str {
        match self {
            Api::V1 => "v1",
            Api::V2 => "v2",
            Api::V3 => "v3",
        }
    }
}
