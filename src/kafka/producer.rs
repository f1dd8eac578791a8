//! The one shared producer: enqueue a request's records, route delivery reports to batches.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext, Message, Statistics};

use super::catalog::TopicInfo;
use super::delivery::{Batch, Delivered, DeliveryFailure, Ticket};
use crate::body::Record;
use crate::buffer::{Buffer, BufferLease};
use crate::metrics::{ErrorLabels, KafkaMetrics, KafkaStats};
use crate::tenant::TenantStats;

#[derive(Debug, thiserror::Error)]
pub enum ProducerError {
    #[error("could not create the Kafka producer: {0}")]
    Create(#[source] KafkaError),
}

/// Receives librdkafka's callbacks on the producer's polling thread.
pub struct DeliveryContext {
    buffer: Arc<Buffer>,
    metrics: KafkaMetrics,
}

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka client error");
    }

    fn stats(&self, statistics: Statistics) {
        let brokers = statistics
            .brokers
            .values()
            .filter(|b| b.nodeid >= 0)
            .map(|b| {
                (
                    b.name.clone(),
                    b.outbuf_cnt + b.waitresp_cnt,
                    b.rtt.as_ref().map_or(0, |w| w.avg),
                    b.throttle.as_ref().map_or(0, |w| w.avg),
                )
            })
            .collect();
        *self
            .metrics
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = KafkaStats {
            queue_messages: statistics.msg_cnt,
            queue_bytes: statistics.msg_size,
            brokers,
        };
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Ticket>;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Box<Ticket>) {
        let outcome = match result {
            Ok(message) => Ok(Delivered {
                partition: message.partition(),
                offset: message.offset(),
            }),
            Err((error, _)) => Err(DeliveryFailure::from_kafka(error)),
        };
        match &outcome {
            Ok(_) => self
                .metrics
                .delivery_seconds
                .observe(ticket.batch.age().as_secs_f64()),
            Err(failure) => {
                self.metrics
                    .delivery_errors
                    .get_or_create(&ErrorLabels {
                        code: failure.code.clone(),
                    })
                    .inc();
            }
        }
        if let Some(latency) = ticket.batch.complete(ticket.index, outcome) {
            self.buffer.observe_ack_latency(latency);
        }
    }
}

pub struct KafkaProducer {
    inner: ThreadedProducer<DeliveryContext>,
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
    ) -> Result<Self, ProducerError> {
        let inner = config
            .create_with_context(DeliveryContext { buffer, metrics })
            .map_err(ProducerError::Create)?;
        Ok(Self { inner })
    }

    /// Hands every record to librdkafka. The batch carries each record's outcome; a record
    /// librdkafka refuses at enqueue gets its failure at once, so a batch always completes.
    pub fn send(
        &self,
        topic: &str,
        records: &[Record<'_>],
        lease: BufferLease,
        stats: Arc<TenantStats>,
    ) -> Arc<Batch> {
        let batch = Arc::new(Batch::new(records.len(), lease, stats));
        for (index, record) in records.iter().enumerate() {
            let ticket = Box::new(Ticket {
                batch: batch.clone(),
                index,
            });
            let mut base: BaseRecord<'_, [u8], [u8], Box<Ticket>> =
                BaseRecord::with_opaque_to(topic, ticket);
            if let Some(value) = &record.value {
                base = base.payload(&value[..]);
            }
            if let Some(key) = &record.key {
                base = base.key(&key[..]);
            }
            if let Some(partition) = record.partition {
                base = base.partition(partition);
            }
            if let Some(ts) = record.timestamp_ms {
                base = base.timestamp(ts);
            }
            if !record.headers.is_empty() {
                let headers = record.headers.iter().fold(
                    OwnedHeaders::new_with_capacity(record.headers.len()),
                    |h, (name, value)| {
                        h.insert(Header {
                            key: name,
                            value: Some(&value[..]),
                        })
                    },
                );
                base = base.headers(headers);
            }
            if let Err((error, base)) = self.inner.send(base) {
                drop(base);
                tracing::warn!(%error, topic, index, "librdkafka refused a record at enqueue");
                batch.complete(index, Err(DeliveryFailure::from_kafka(&error)));
            }
        }
        batch
    }

    /// Waits for every queued record to be answered, up to `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.inner.flush(timeout)
    }

    /// Records queued or in flight inside librdkafka.
    pub fn in_flight(&self) -> i32 {
        self.inner.in_flight_count()
    }

    /// Can the cluster's metadata be fetched within `timeout`? (blocking)
    pub fn cluster_reachable(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.inner
            .client()
            .fetch_metadata(None, timeout)
            .map(|_| ())
    }

    /// Asks the cluster about one topic (blocking; call from a blocking thread).
    pub fn fetch_topic(&self, topic: &str, timeout: Duration) -> Result<TopicInfo, KafkaError> {
        let metadata = self.inner.client().fetch_metadata(Some(topic), timeout)?;
        let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(TopicInfo::Missing);
        };
        if t.error().is_some() || t.partitions().is_empty() {
            return Ok(TopicInfo::Missing);
        }
        Ok(TopicInfo::Exists {
            partitions: t.partitions().len() as u32,
        })
    }
}
