//! The shared registry's Kafka side: a compacted topic with the latest state per key, read from
//! the start by every replica (partition assignment, no consumer group), written with acks=all
//! and idempotence — Kafka's own convention for shared configuration (Schema Registry's
//! `_schemas`, Kafka Connect's config topic).
//!
//! **Records.** Key `tenant:ID` (value: the tenant's configuration with key digests; a
//! tombstone when it is deleted), `global` (the global budget) and `file` (the configuration
//! file's part as last applied). Headers carry what every replica needs to apply a record the
//! same way: `fg-base` (the key's version the change was based on), `fg-actor`, `fg-action`
//! and `fg-replica` (who made it, for the one audit event per change).
//!
//! **Authenticated.** Every record also carries `fg-mac`, an HMAC-SHA256 of all of the above
//! with the replicas' shared secret ([`super::mac`]); a record without a valid one is not an
//! entry, whoever wrote it.
//!
//! **Order decides.** Kafka gives every replica the same order. A record applies only if its
//! base is the key's current version (then the version moves up by one) and the registry it
//! leads to is valid; otherwise every replica skips it the same way. So of two changes made
//! from the same version on two replicas, the first in the log wins and the other is refused
//! (409 to its client): optimistic concurrency with Kafka as the arbiter, no consensus of ours.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::mac::RegistrySecrets;

/// What a record is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKey {
    Global,
    File,
    Tenant(String),
}

impl EntryKey {
    pub fn as_string(&self) -> String {
        match self {
            EntryKey::Global => "global".into(),
            EntryKey::File => "file".into(),
            EntryKey::Tenant(id) => format!("tenant:{id}"),
        }
    }

    fn parse(key: &str) -> Option<Self> {
        match key {
            "global" => Some(EntryKey::Global),
            "file" => Some(EntryKey::File),
            _ => key
                .strip_prefix("tenant:")
                .filter(|id| !id.is_empty())
                .map(|id| EntryKey::Tenant(id.to_string())),
        }
    }
}

/// One change of one key, as written to (and read from) the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: EntryKey,
    /// The key's version this change was made from.
    pub base: u64,
    /// JSON; `None` is a tombstone (a deleted tenant).
    pub value: Option<Vec<u8>>,
    pub actor: String,
    pub action: String,
    pub replica: String,
}

/// Why a record of the topic is not an entry (it is skipped by every replica alike).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// No `fg-mac`: not written by a replica holding the secret.
    #[error("the record carries no fg-mac")]
    Unsigned,
    /// A MAC no configured secret verifies: forged or altered.
    #[error("the record's fg-mac does not verify")]
    BadMac,
    /// Authentic, but not an entry (this detail).
    #[error("{0}")]
    Malformed(String),
}

impl Refused {
    pub const REASONS: [&'static str; 3] = ["unsigned", "bad_mac", "malformed"];

    /// The metric label; index into [`Refused::REASONS`].
    pub fn index(&self) -> usize {
        match self {
            Refused::Unsigned => 0,
            Refused::BadMac => 1,
            Refused::Malformed(_) => 2,
        }
    }

    /// Whether the record was written by a holder of the secret.
    pub fn authentic(&self) -> bool {
        matches!(self, Refused::Malformed(_))
    }
}

/// The headers an entry is made of, in the order its MAC covers them.
const SIGNED_HEADERS: [&str; 4] = ["fg-base", "fg-actor", "fg-action", "fg-replica"];
const MAC_HEADER: &str = "fg-mac";

fn header<'a>(message: &'a BorrowedMessage<'_>, name: &str) -> Option<&'a [u8]> {
    message
        .headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

fn text(message: &BorrowedMessage<'_>, name: &str) -> Result<String, Refused> {
    let bytes =
        header(message, name).ok_or_else(|| Refused::Malformed(format!("no {name} header")))?;
    String::from_utf8(bytes.to_vec())
        .map_err(|_| Refused::Malformed(format!("{name} is not UTF-8")))
}

/// The parts an entry's MAC covers: key, value (absent for a tombstone), the signed headers.
fn signed_parts<'a>(
    key: &'a [u8],
    value: Option<&'a [u8]>,
    headers: [Option<&'a [u8]>; 4],
) -> [Option<&'a [u8]>; 6] {
    let [a, b, c, d] = headers;
    [Some(key), value, a, b, c, d]
}

impl Entry {
    /// Reads an entry from a record of the registry topic: its MAC first (nothing of an
    /// unauthenticated record is looked at further), then its fields.
    pub fn decode(
        message: &BorrowedMessage<'_>,
        secrets: &RegistrySecrets,
    ) -> Result<Self, Refused> {
        let tag = header(message, MAC_HEADER).ok_or(Refused::Unsigned)?;
        let tag = hex::decode(tag).map_err(|_| Refused::BadMac)?;
        let parts = signed_parts(
            message.key().unwrap_or_default(),
            message.payload(),
            SIGNED_HEADERS.map(|name| header(message, name)),
        );
        if !secrets.verify(&parts, &tag) {
            return Err(Refused::BadMac);
        }
        let key = message
            .key()
            .and_then(|k| std::str::from_utf8(k).ok())
            .and_then(EntryKey::parse)
            .ok_or_else(|| Refused::Malformed("the key is not global, file or tenant:ID".into()))?;
        let base = text(message, "fg-base")?
            .parse::<u64>()
            .map_err(|_| Refused::Malformed("fg-base is not a version number".into()))?;
        Ok(Self {
            key,
            base,
            value: message.payload().map(<[u8]>::to_vec),
            actor: text(message, "fg-actor")?,
            action: text(message, "fg-action")?,
            replica: text(message, "fg-replica")?,
        })
    }
}

/// Why the topic could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("Kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("Kafka did not take the change within {0:?}")]
    Timeout(Duration),
}

/// The registry topic's clients.
pub struct RegistryLog {
    topic: String,
    connection: ClientConfig,
    producer: FutureProducer,
    pub write_timeout: Duration,
    replication: Option<u16>,
    /// Signs what this replica writes and checks what it reads.
    pub secrets: RegistrySecrets,
}

impl std::fmt::Debug for RegistryLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryLog")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl RegistryLog {
    /// Clients on `connection` (bootstrap servers and security settings).
    pub fn new(
        connection: ClientConfig,
        topic: &str,
        write_timeout: Duration,
        replication: Option<u16>,
        secrets: RegistrySecrets,
    ) -> Result<Self, LogError> {
        let timeout_ms = write_timeout.as_millis().max(1).to_string();
        let producer = connection
            .clone()
            .set("acks", "all")
            .set("enable.idempotence", "true")
            // A change is one small record; waiting to batch it only delays the answer.
            .set("linger.ms", "0")
            // An admin change fails (503) instead of waiting for Kafka forever.
            .set("message.timeout.ms", &timeout_ms)
            // Back within a second of Kafka's return (librdkafka's backoff grows to 10 s):
            // admin writes are rare, a quick reconnect costs nothing.
            .set("reconnect.backoff.max.ms", "1000")
            .set("allow.auto.create.topics", "false")
            .create()?;
        Ok(Self {
            topic: topic.to_string(),
            connection,
            producer,
            write_timeout,
            replication,
            secrets,
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Creates the topic when it is missing: compacted, one partition (one order for every
    /// replica), replicated as the cluster allows.
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
        let admin: AdminClient<DefaultClientContext> = self.connection.create()?;
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
                Ok(_) => tracing::info!(topic = %self.topic, replication, "registry topic created"),
                Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(LogError::Kafka(rdkafka::error::KafkaError::AdminOp(code)))
                }
            }
        }
        Ok(())
    }

    /// A reader of the whole topic from its first record, by assignment (no group).
    pub fn reader(&self, replica: &str) -> Result<StreamConsumer, LogError> {
        let consumer: StreamConsumer = self
            .connection
            .clone()
            .set("group.id", format!("floodgate-registry-{replica}"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("allow.auto.create.topics", "false")
            .create()?;
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&self.topic, 0, Offset::Beginning)?;
        consumer.assign(&assignment)?;
        Ok(consumer)
    }

    /// The offset after the topic's last record (0: empty).
    pub async fn end_offset(&self, reader: &StreamConsumer) -> Result<i64, LogError> {
        let (_, high) = reader.fetch_watermarks(&self.topic, 0, Duration::from_secs(5))?;
        Ok(high)
    }

    /// Writes entries in order; returns each one's offset once Kafka has acknowledged it.
    pub async fn write(&self, entries: &[Entry]) -> Result<Vec<i64>, LogError> {
        let mut offsets = Vec::with_capacity(entries.len());
        for entry in entries {
            let key = entry.key.as_string();
            let base = entry.base.to_string();
            let mac = hex::encode(self.secrets.sign(&signed_parts(
                key.as_bytes(),
                entry.value.as_deref(),
                [
                    Some(base.as_bytes()),
                    Some(entry.actor.as_bytes()),
                    Some(entry.action.as_bytes()),
                    Some(entry.replica.as_bytes()),
                ],
            )));
            let headers = OwnedHeaders::new()
                .insert(Header {
                    key: "fg-base",
                    value: Some(&base),
                })
                .insert(Header {
                    key: "fg-actor",
                    value: Some(&entry.actor),
                })
                .insert(Header {
                    key: "fg-action",
                    value: Some(&entry.action),
                })
                .insert(Header {
                    key: "fg-replica",
                    value: Some(&entry.replica),
                })
                .insert(Header {
                    key: MAC_HEADER,
                    value: Some(&mac),
                });
            let mut record = FutureRecord::<String, Vec<u8>>::to(&self.topic)
                .key(&key)
                .partition(0)
                .headers(headers);
            if let Some(value) = &entry.value {
                record = record.payload(value);
            }
            let delivered = tokio::time::timeout(
                self.write_timeout + Duration::from_millis(500),
                self.producer.send(record, self.write_timeout),
            )
            .await
            .map_err(|_| LogError::Timeout(self.write_timeout))?;
            match delivered {
                Ok(delivery) => offsets.push(delivery.offset),
                Err((e, _)) => return Err(LogError::Kafka(e)),
            }
        }
        Ok(offsets)
    }
}
