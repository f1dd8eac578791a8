//! A compacted topic of one partition, read from its start by every reader (by assignment, no
//! consumer group) and written with acks=all and idempotence — Kafka's own convention for
//! shared configuration (Schema Registry's `_schemas`, Kafka Connect's config topic). Records
//! go in and come out as bytes (key, value, headers); what they mean is the caller's (the
//! shared registry's entries, `registry::log`).

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer as _};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::settings::{self, Connection};

/// Why the topic could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("Kafka did not take the record within {0:?}")]
    Timeout(Duration),
}

/// Records queued at once (the producer's queue holds 100,000 messages by default).
pub const WRITE_CHUNK: usize = 10_000;

/// One record to write: its key, its value, its headers in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutRecord {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub headers: Vec<(&'static str, Vec<u8>)>,
}

/// One record as read (borrowed from the reader until the next one).
pub struct LogRecord<'a>(BorrowedMessage<'a>);

impl LogRecord<'_> {
    pub fn offset(&self) -> i64 {
        self.0.offset()
    }

    pub fn key(&self) -> Option<&[u8]> {
        self.0.key()
    }

    /// `None`: a Kafka tombstone.
    pub fn value(&self) -> Option<&[u8]> {
        self.0.payload()
    }

    /// The value of the first header called `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.0
            .headers()?
            .iter()
            .find(|h| h.key == name)
            .and_then(|h| h.value)
    }
}

/// The topic's writer (and where its readers come from).
pub struct LogTopic {
    topic: String,
    connection: Connection,
    producer: FutureProducer,
    write_timeout: Duration,
    replication: Option<u16>,
}

impl std::fmt::Debug for LogTopic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogTopic")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl LogTopic {
    /// The writer on `connection`; a write that Kafka has not taken within `write_timeout`
    /// fails. `replication`: the topic's replication factor when it is created here (`None`:
    /// as many brokers as there are, at most 3).
    pub fn new(
        connection: Connection,
        topic: &str,
        write_timeout: Duration,
        replication: Option<u16>,
    ) -> Result<Self, LogError> {
        let producer = settings::log_writer(&connection, write_timeout).create()?;
        Ok(Self {
            topic: topic.to_string(),
            connection,
            producer,
            write_timeout,
            replication,
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Creates the topic when it is missing: compacted, one partition (one order for every
    /// reader), replicated as the cluster allows.
    pub async fn ensure_topic(&self) -> Result<(), LogError> {
        let metadata = self
            .producer
            .client()
            .fetch_metadata(Some(&self.topic), Duration::from_secs(5))?;
        let exists = metadata
            .topics()
            .iter()
            .any(|t| t.name() == self.topic && t.error().is_none() && !t.partitions().is_empty());
        if exists {
            return Ok(());
        }
        let brokers = i32::try_from(metadata.brokers().len()).unwrap_or(1).max(1);
        let replication = self.replication.map_or(brokers.min(3), i32::from);
        let admin: AdminClient<DefaultClientContext> =
            settings::admin(&self.connection).create()?;
        let topic = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(replication))
            .set("cleanup.policy", "compact");
        let results = admin
            .create_topics(
                &[topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await?;
        for result in results {
            match result {
                Ok(_) => {
                    tracing::info!(topic = %self.topic, replication, "compacted topic created")
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => return Err(LogError::Kafka(KafkaError::AdminOp(code))),
            }
        }
        Ok(())
    }

    /// A reader of the whole topic from its first record, by assignment (`group` only names
    /// the client; it is never joined).
    pub fn reader(&self, group: &str) -> Result<LogReader, LogError> {
        let consumer: StreamConsumer = settings::log_reader(&self.connection, group).create()?;
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&self.topic, 0, Offset::Beginning)?;
        consumer.assign(&assignment)?;
        Ok(LogReader {
            consumer,
            topic: self.topic.clone(),
        })
    }

    /// Writes records in order; returns each one's offset once Kafka has acknowledged it.
    /// They are queued together (one partition, an idempotent producer: order is kept), so
    /// 100,000 records are not 100,000 round trips; [`WRITE_CHUNK`] at a time. The first error
    /// ends the write (a record that could not be made, or was not taken: the records queued
    /// before it may be written).
    pub async fn write<E: From<LogError>>(
        &self,
        records: impl IntoIterator<Item = Result<OutRecord, E>>,
    ) -> Result<Vec<i64>, E> {
        let mut offsets = Vec::new();
        let mut records = records.into_iter().peekable();
        while records.peek().is_some() {
            let mut pending = Vec::with_capacity(WRITE_CHUNK);
            for record in records.by_ref().take(WRITE_CHUNK) {
                pending.push(self.enqueue(&record?)?);
            }
            for delivery in pending {
                offsets.push(self.delivered(delivery).await?);
            }
        }
        Ok(offsets)
    }

    /// Hands one record to the producer (which copies it).
    fn enqueue(&self, record: &OutRecord) -> Result<DeliveryFuture, LogError> {
        let mut headers = OwnedHeaders::new();
        for (name, value) in &record.headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_slice()),
            });
        }
        let out = FutureRecord::<[u8], [u8]>::to(&self.topic)
            .key(&record.key)
            .partition(0)
            .headers(headers)
            .payload(&record.value);
        self.producer
            .send_result(out)
            .map_err(|(e, _)| LogError::Kafka(e))
    }

    /// The offset of a queued record once Kafka has acknowledged it.
    async fn delivered(&self, delivery: DeliveryFuture) -> Result<i64, LogError> {
        let delivered =
            tokio::time::timeout(self.write_timeout + Duration::from_millis(500), delivery)
                .await
                .map_err(|_| LogError::Timeout(self.write_timeout))?;
        match delivered {
            Ok(Ok(delivery)) => Ok(delivery.offset),
            Ok(Err((e, _))) => Err(LogError::Kafka(e)),
            Err(_) => Err(LogError::Timeout(self.write_timeout)),
        }
    }
}

/// A reader of the topic from its start.
pub struct LogReader {
    consumer: StreamConsumer,
    topic: String,
}

impl LogReader {
    /// The offset after the topic's last record (0: empty).
    pub async fn end_offset(&self) -> Result<i64, LogError> {
        let (_, high) = self
            .consumer
            .fetch_watermarks(&self.topic, 0, Duration::from_secs(5))?;
        Ok(high)
    }

    /// The next record, once there is one.
    pub async fn recv(&self) -> Result<LogRecord<'_>, LogError> {
        Ok(LogRecord(self.consumer.recv().await?))
    }
}
