//! Delivery reports: one [`Batch`] per admitted request, one slot per record.
//!
//! librdkafka calls back once per record (from the producer's polling thread). The batch
//! records each outcome, gives the request's buffer space back when the last record is
//! answered, and wakes the request if it is waiting (sync mode).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio::sync::Notify;

use crate::buffer::BufferLease;

/// Who counts a request's records as Kafka answers for them, failed or delivered (the sending
/// tenant's counters). Kafka's side does not know what a tenant is; the ingest pipeline hands
/// in the counter.
pub trait OutcomeCounter: Send + Sync + std::fmt::Debug {
    fn records_failed(&self, records: u64);
    /// Acknowledged by Kafka: what it holds.
    fn records_delivered(&self, _records: u64) {}
}

/// Where a record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp as Kafka has it (milliseconds since the epoch), when known.
    pub timestamp_ms: Option<i64>,
}

/// What happened to one record.
pub type Outcome = Result<Delivered, DeliveryFailure>;

/// Is the failure the broker being unreachable (retry later: 503) or a refusal (502)?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    Unavailable,
    Rejected,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryFailure {
    pub kind: FailureKind,
    /// A stable, snake_case name of librdkafka's error code.
    pub code: String,
}

impl DeliveryFailure {
    pub fn from_kafka(error: &KafkaError) -> Self {
        match error.rdkafka_error_code() {
            Some(code) => Self {
                kind: classify(code),
                code: snake_case(&format!("{code:?}")),
            },
            None => Self {
                kind: FailureKind::Rejected,
                code: "client_error".into(),
            },
        }
    }
}

/// The delivery errors whose series exist from start-up at 0 (`rate()` sees the first ones,
/// and a dashboard shows 0 instead of no data): every code [`classify`] calls unavailable, and
/// the refusals a producer meets in practice. Others get their series when they first happen.
pub const KNOWN_FAILURES: [RDKafkaErrorCode; 27] = {
    use RDKafkaErrorCode as C;
    [
        C::MessageTimedOut,
        C::AllBrokersDown,
        C::BrokerTransportFailure,
        C::NetworkException,
        C::LeaderNotAvailable,
        C::NotLeaderForPartition,
        C::RequestTimedOut,
        C::NotEnoughReplicas,
        C::NotEnoughReplicasAfterAppend,
        C::OperationTimedOut,
        C::QueueFull,
        C::Fatal,
        C::PurgeQueue,
        C::PurgeInflight,
        C::UnknownTopic,
        C::UnknownPartition,
        C::UnknownTopicOrPartition,
        C::InvalidMessage,
        C::InvalidMessageSize,
        C::MessageSizeTooLarge,
        C::InvalidRecord,
        C::InvalidTopic,
        C::TopicAuthorizationFailed,
        C::ClusterAuthorizationFailed,
        C::PolicyViolation,
        C::OutOfOrderSequenceNumber,
        C::UnknownProducerId,
    ]
};

/// The label values of [`KNOWN_FAILURES`], and `client_error` (a failure without Kafka's code),
/// as [`DeliveryFailure::code`] spells them.
pub fn known_failure_codes() -> impl Iterator<Item = String> {
    KNOWN_FAILURES
        .iter()
        .map(|code| snake_case(&format!("{code:?}")))
        .chain(std::iter::once("client_error".to_string()))
}

/// The codes that mean "Kafka cannot be reached or has no leader right now", as opposed to a
/// definite refusal of the record (too large, invalid, not authorized, ...).
fn classify(code: RDKafkaErrorCode) -> FailureKind {
    use RDKafkaErrorCode as C;
    match code {
        C::MessageTimedOut
        | C::AllBrokersDown
        | C::BrokerTransportFailure
        | C::NetworkException
        | C::LeaderNotAvailable
        | C::NotLeaderForPartition
        | C::RequestTimedOut
        | C::NotEnoughReplicas
        | C::NotEnoughReplicasAfterAppend
        | C::OperationTimedOut
        | C::QueueFull
        | C::Fatal
        | C::PurgeQueue
        | C::PurgeInflight => FailureKind::Unavailable,
        _ => FailureKind::Rejected,
    }
}

fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// One admitted request's records on their way to Kafka.
#[derive(Debug)]
pub struct Batch {
    outcomes: Vec<OnceLock<Outcome>>,
    remaining: AtomicUsize,
    done: Notify,
    enqueued_at: Instant,
    /// Given back the moment the last record is answered.
    lease: Mutex<Option<BufferLease>>,
    /// Failures are counted when they happen, for async requests too.
    failures: std::sync::Arc<dyn OutcomeCounter>,
}

impl Batch {
    pub fn new(
        records: usize,
        lease: BufferLease,
        failures: std::sync::Arc<dyn OutcomeCounter>,
    ) -> Self {
        Self {
            outcomes: (0..records).map(|_| OnceLock::new()).collect(),
            remaining: AtomicUsize::new(records),
            done: Notify::new(),
            enqueued_at: Instant::now(),
            lease: Mutex::new(Some(lease)),
            failures,
        }
    }

    /// A batch of no records, complete already: a request whose every entry failed before it
    /// could be sent (its answer reports each failure), so nothing was admitted or leased.
    pub fn empty(failures: std::sync::Arc<dyn OutcomeCounter>) -> Self {
        Self {
            outcomes: Vec::new(),
            remaining: AtomicUsize::new(0),
            done: Notify::new(),
            enqueued_at: Instant::now(),
            lease: Mutex::new(None),
            failures,
        }
    }

    pub fn len(&self) -> usize {
        self.outcomes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.outcomes.is_empty()
    }

    /// Records the outcome of record `index`; the first report for a record wins.
    /// Returns the time since enqueue when this was the last record.
    pub fn complete(&self, index: usize, outcome: Outcome) -> Option<std::time::Duration> {
        let slot = self.outcomes.get(index)?;
        let failed = outcome.is_err();
        if slot.set(outcome).is_err() {
            return None;
        }
        if failed {
            self.failures.records_failed(1);
        } else {
            self.failures.records_delivered(1);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let lease = self
                .lease
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            drop(lease);
            self.done.notify_one();
            return Some(self.enqueued_at.elapsed());
        }
        None
    }

    /// Time since the records were handed to librdkafka.
    pub fn age(&self) -> std::time::Duration {
        self.enqueued_at.elapsed()
    }

    pub fn is_complete(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }

    /// Waits until every record has an outcome.
    pub async fn wait(&self) {
        while !self.is_complete() {
            // notify_one stores a permit, so a completion between the check and the await
            // is not lost.
            self.done.notified().await;
        }
    }

    /// The outcome of record `index`, once answered.
    pub fn outcome(&self, index: usize) -> Option<&Outcome> {
        self.outcomes.get(index).and_then(OnceLock::get)
    }

    /// Outcomes in record order; `None` for records not answered yet.
    pub fn outcomes(&self) -> impl Iterator<Item = Option<&Outcome>> {
        self.outcomes.iter().map(OnceLock::get)
    }
}

/// What librdkafka carries for each record and hands back in its delivery report.
#[derive(Debug)]
pub struct Ticket {
    pub batch: std::sync::Arc<Batch>,
    pub index: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{Buffer, TenantUsage};
    use crate::record::Charge;
    use std::sync::Arc;

    #[derive(Debug, Default)]
    struct Count(AtomicUsize);
    impl OutcomeCounter for Count {
        fn records_failed(&self, records: u64) {
            self.0.fetch_add(records as usize, Ordering::Relaxed);
        }
    }

    #[test]
    fn space_is_given_back_when_the_last_record_is_answered() {
        let buffer = Arc::new(Buffer::new(100, 10));
        let tenant = Arc::new(TenantUsage::default());
        let lease = buffer
            .try_reserve(&tenant, Charge::new(2, 30))
            .expect("fits");
        let failures = Arc::new(Count::default());
        let batch = Batch::new(2, lease, failures.clone());
        let ok = Ok(Delivered {
            partition: 0,
            offset: 7,
            timestamp_ms: None,
        });
        assert!(batch.complete(0, ok.clone()).is_none());
        assert_eq!(buffer.held(), (30, 2));
        assert!(batch.complete(1, ok).is_some());
        assert_eq!(buffer.held(), (0, 0));
        assert!(batch.is_complete());
        assert_eq!(failures.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn outages_and_refusals_are_told_apart() {
        let timeout = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        let too_big = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        assert_eq!(
            DeliveryFailure::from_kafka(&timeout),
            DeliveryFailure {
                kind: FailureKind::Unavailable,
                code: "message_timed_out".into()
            }
        );
        assert_eq!(
            DeliveryFailure::from_kafka(&too_big).kind,
            FailureKind::Rejected
        );
    }
}
