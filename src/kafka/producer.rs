//! The one shared producer: enqueue a request's records, route delivery reports to batches,
//! and replace the librdkafka producer when it hits a fatal error.
//!
//! An idempotent producer can fail fatally (after a broker lost its state, it may answer
//! `UnknownProducerId`) and is then unusable for good. floodgate notices (the error callback,
//! and a check before each send), builds a fresh producer from the same settings, swaps it in,
//! and purges the dead one on a thread of its own: every record the dead producer still held
//! comes back through its delivery report with a fatal or purge error, and is sent again on the
//! new producer with the same ticket — so a record answered 202 is not lost to a fatal error.
//! (It may be written twice if the dead producer had in fact delivered it: the broker lost the
//! producer's idempotence state, so nothing can tell.)

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig, ThreadedProducer,
};
use rdkafka::{ClientConfig, ClientContext, Message, Statistics};

use super::delivery::{Batch, Delivered, DeliveryFailure, OutcomeCounter, Ticket};
use super::stats::{ErrorLabels, KafkaMetrics, KafkaStats};
use crate::buffer::{Buffer, BufferLease};
use crate::record::Record;

#[derive(Debug, thiserror::Error)]
pub enum ProducerError {
    #[error("could not create the Kafka producer: {0}")]
    Create(#[source] KafkaError),
}

type Inner = ThreadedProducer<DeliveryContext>;

/// What every generation of the librdkafka producer shares.
struct ProducerCore {
    buffer: Arc<Buffer>,
    metrics: KafkaMetrics,
    /// The owner, to re-send records a dead producer hands back. Weak: at shutdown the owner
    /// goes first, and records purged then are not re-sent.
    owner: OnceLock<Weak<KafkaProducer>>,
}

/// Receives librdkafka's callbacks on the producer's polling thread.
pub struct DeliveryContext {
    shared: Arc<ProducerCore>,
}

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka client error");
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            if let Some(owner) = self.shared.owner.get().and_then(Weak::upgrade) {
                owner.replace_if_fatal();
            }
        }
    }

    fn stats(&self, statistics: Statistics) {
        self.shared
            .metrics
            .store(KafkaStats::from_statistics(&statistics));
    }
}

/// Errors that say "this producer is dead or was emptied", not "Kafka refused the record".
fn handed_back(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fatal
                | RDKafkaErrorCode::PurgeQueue
                | RDKafkaErrorCode::PurgeInflight
        )
    )
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Ticket>;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Box<Ticket>) {
        let ticket = match result {
            Err((error, message)) if handed_back(error) => {
                match self.shared.owner.get().and_then(Weak::upgrade) {
                    Some(owner) => match owner.resend(message, ticket) {
                        Ok(()) => return,
                        Err(ticket) => ticket,
                    },
                    None => ticket,
                }
            }
            _ => ticket,
        };
        let metrics = &self.shared.metrics;
        let outcome = match result {
            Ok(message) => Ok(Delivered {
                partition: message.partition(),
                offset: message.offset(),
                timestamp_ms: message.timestamp().to_millis(),
            }),
            Err((error, _)) => {
                let failure = DeliveryFailure::from_kafka(error);
                metrics
                    .delivery_errors
                    .get_or_create(&ErrorLabels {
                        code: failure.code.clone(),
                    })
                    .inc();
                Err(failure)
            }
        };
        // Timed once per request, when its last record is answered: reading the clock for
        // every record showed up in profiles at hundreds of thousands of records per second.
        if let Some(latency) = ticket.batch.complete(ticket.index, outcome) {
            self.shared.buffer.observe_ack_latency(latency);
            metrics.delivery_seconds.observe(latency.as_secs_f64());
            metrics.delivery_counts.observe(latency.as_secs_f64());
            metrics.delivery_latency.record(latency);
        }
    }
}

pub struct KafkaProducer {
    config: ClientConfig,
    shared: Arc<ProducerCore>,
    current: ArcSwap<Inner>,
    /// One replacement at a time.
    replacing: Mutex<()>,
}

impl std::fmt::Debug for KafkaProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaProducer").finish_non_exhaustive()
    }
}

impl KafkaProducer {
    pub fn new(
        config: &ClientConfig,
        buffer: Arc<Buffer>,
        metrics: KafkaMetrics,
    ) -> Result<Arc<Self>, ProducerError> {
        let shared = Arc::new(ProducerCore {
            buffer,
            metrics,
            owner: OnceLock::new(),
        });
        let inner = create(config, &shared)?;
        let producer = Arc::new(Self {
            config: config.clone(),
            shared,
            current: ArcSwap::from_pointee(inner),
            replacing: Mutex::new(()),
        });
        let _ = producer.shared.owner.set(Arc::downgrade(&producer));
        Ok(producer)
    }

    /// The live librdkafka producer, replaced first if it has failed fatally.
    fn live(&self) -> Arc<Inner> {
        let current = self.current.load_full();
        if current.client().fatal_error().is_none() {
            return current;
        }
        self.replace_if_fatal();
        self.current.load_full()
    }

    /// Builds a new producer if the current one has failed fatally, and purges the old one on
    /// a thread of its own (a producer's drop joins its polling thread, which may be us).
    fn replace_if_fatal(&self) {
        let _guard = self
            .replacing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.current.load_full();
        let Some((code, reason)) = current.client().fatal_error() else {
            return;
        };
        match create(&self.config, &self.shared) {
            Ok(fresh) => {
                tracing::error!(?code, reason, "kafka producer failed fatally; replaced it");
                let old = self.current.swap(Arc::new(fresh));
                drop(current);
                std::thread::spawn(move || {
                    old.purge(PurgeConfig::default().queue().inflight());
                    let _ = old.flush(Duration::from_secs(5));
                    drop(old);
                });
            }
            Err(e) => {
                tracing::error!(error = %e, "kafka producer failed fatally and could not be rebuilt")
            }
        }
    }

    /// Hands every record to librdkafka. The batch carries each record's outcome; a record
    /// librdkafka refuses at enqueue gets its failure at once, so a batch always completes.
    pub fn send(
        &self,
        topic: &str,
        records: &[Record<'_>],
        lease: BufferLease,
        failures: Arc<dyn OutcomeCounter>,
    ) -> Arc<Batch> {
        let batch = Arc::new(Batch::new(records.len(), lease, failures));
        let producer = self.live();
        for (index, record) in records.iter().enumerate() {
            let ticket = Box::new(Ticket {
                batch: batch.clone(),
                index,
            });
            let headers = (!record.headers.is_empty()).then(|| {
                record.headers.iter().fold(
                    OwnedHeaders::new_with_capacity(record.headers.len()),
                    |h, (name, value)| {
                        h.insert(Header {
                            key: name,
                            value: Some(&value[..]),
                        })
                    },
                )
            });
            let parts = RecordParts {
                key: record.key.as_deref(),
                payload: record.value.as_deref(),
                partition: record.partition,
                timestamp_ms: record.timestamp_ms,
                headers,
            };
            if let Err((error, base)) = producer.send(base_record(topic, parts, ticket)) {
                drop(base);
                tracing::warn!(%error, topic, index, "librdkafka refused a record at enqueue");
                batch.complete(index, Err(DeliveryFailure::from_kafka(&error)));
            }
        }
        batch
    }

    /// Sends a record a dead producer handed back, on the live producer, with its ticket.
    fn resend(
        &self,
        message: &rdkafka::message::BorrowedMessage<'_>,
        ticket: Box<Ticket>,
    ) -> Result<(), Box<Ticket>> {
        let producer = self.live();
        let topic = message.topic().to_string();
        let parts = RecordParts {
            key: message.key(),
            payload: message.payload(),
            partition: (message.partition() >= 0).then_some(message.partition()),
            timestamp_ms: message.timestamp().to_millis(),
            headers: message.headers().map(|h| h.detach()),
        };
        producer
            .send(base_record(&topic, parts, ticket))
            .map_err(|(error, base)| {
                tracing::warn!(%error, "could not re-send a record handed back by a dead producer");
                base.delivery_opaque
            })
    }

    /// Waits for every queued record to be answered, up to `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.current.load().flush(timeout)
    }

    /// Records queued or in flight inside librdkafka.
    pub fn in_flight(&self) -> i32 {
        self.current.load().in_flight_count()
    }

    /// The Kafka cluster's id (blocking; call from a blocking thread).
    pub(super) fn fetch_cluster_id(&self, timeout: Duration) -> Option<String> {
        self.live().client().fetch_cluster_id(timeout)
    }

    /// The cluster's metadata, for one topic or all (blocking; call from a blocking thread).
    /// Interpreting it is the catalog's job.
    pub(super) fn fetch_metadata(
        &self,
        topic: Option<&str>,
        timeout: Duration,
    ) -> Result<Metadata, KafkaError> {
        self.live().client().fetch_metadata(topic, timeout)
    }

    /// Makes the live producer fail fatally, as a broker that lost its state would (tests).
    #[cfg(test)]
    #[allow(unsafe_code)]
    pub(crate) fn inject_fatal_error(&self) {
        let producer = self.current.load_full();
        let reason = c"injected by a floodgate test";
        // SAFETY: the client pointer is valid while `producer` is alive; the reason is a
        // NUL-terminated string that outlives the call (librdkafka copies it).
        unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                producer.client().native_ptr(),
                rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            );
        }
    }
}

/// The fields of one record, wherever they come from (a request, or a dead producer's
/// hand-back).
struct RecordParts<'a> {
    key: Option<&'a [u8]>,
    payload: Option<&'a [u8]>,
    partition: Option<i32>,
    timestamp_ms: Option<i64>,
    headers: Option<OwnedHeaders>,
}

/// The one place a librdkafka record is built, for send and re-send alike.
fn base_record<'a>(
    topic: &'a str,
    parts: RecordParts<'a>,
    ticket: Box<Ticket>,
) -> BaseRecord<'a, [u8], [u8], Box<Ticket>> {
    let mut base = BaseRecord::with_opaque_to(topic, ticket);
    if let Some(payload) = parts.payload {
        base = base.payload(payload);
    }
    if let Some(key) = parts.key {
        base = base.key(key);
    }
    if let Some(partition) = parts.partition {
        base = base.partition(partition);
    }
    if let Some(ts) = parts.timestamp_ms {
        base = base.timestamp(ts);
    }
    if let Some(headers) = parts.headers {
        base = base.headers(headers);
    }
    base
}

fn create(config: &ClientConfig, shared: &Arc<ProducerCore>) -> Result<Inner, ProducerError> {
    config
        .create_with_context(DeliveryContext {
            shared: shared.clone(),
        })
        .map_err(ProducerError::Create)
}

#[cfg(test)]
mod tests;
