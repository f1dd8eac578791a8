//! The shared registry's entries in Kafka: a compacted topic with the latest state per key, read
//! from the start by every replica and written with acks=all and idempotence
//! ([`crate::kafka::LogTopic`] does the Kafka side; this is what its records mean).
//!
//! **Records.** Key `tenant:ID` (value: the tenant's configuration with key digests; JSON
//! `null` once it is deleted — never a Kafka tombstone, which compaction would eventually
//! remove with the deletion's version), `global` (the global budget), and `file:ID` /
//! `file-global` (the configuration file's part as last applied, one record per tenant: what a
//! reload on any replica compares the file with), followed by `#` and a tag of the signing
//! secret (see [`super::mac`]). Headers carry what every replica needs to
//! apply a record the same way: `fg-base` and `fg-version` (the key's version the change was
//! made from, and the one it makes), `fg-actor`, `fg-action` and `fg-replica` (who made it,
//! for the one audit event per change).
//!
//! **Authenticated.** Every record also carries `fg-mac`, an HMAC-SHA256 of the topic's name,
//! the key, the value and the `fg-*` headers with the replicas' shared secret
//! ([`super::mac`]); a record without a valid one is not an entry, whoever wrote it.
//!
//! **Order decides.** Kafka gives every replica the same order. A record applies only if it
//! carries a newer version of its key than the replica holds and the registry it leads to is
//! valid; otherwise every replica skips it the same way. So of two changes made from the same
//! version on two replicas, the first in the log wins and the other is refused (409 to its
//! client): optimistic concurrency with Kafka as the arbiter, no consensus of ours. Versions
//! carried in the records (not counted from the topic's start) keep the rule true after
//! compaction has dropped older records; and since compaction keeps the last record of each
//! Kafka key, a refused record must not stay last: a replica that reads one whose value is not
//! the key's writes the key's current value again (`registry.reassert`).

use std::time::Duration;

use super::mac::RegistrySecrets;
use crate::kafka::{self, LogReader, LogRecord, LogTopic, OutRecord};

/// What a record is about: the registry's keys (each with its own version), typed so that the
/// format of their names (`tenant:ID`, ...) is known here only.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKey {
    Global,
    Tenant(String),
    /// The configuration file's global budget as last applied (what a reload compares with).
    FileGlobal,
    /// A tenant of the configuration file as last applied.
    FileTenant(String),
}

/// The key's name, as a record's Kafka key starts and as a conflict names it.
impl std::fmt::Display for EntryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EntryKey::Global => f.write_str("global"),
            EntryKey::Tenant(id) => write!(f, "tenant:{id}"),
            EntryKey::FileGlobal => f.write_str("file-global"),
            EntryKey::FileTenant(id) => write!(f, "file:{id}"),
        }
    }
}

impl EntryKey {
    /// The live tenant `id`'s key.
    pub fn tenant(id: &str) -> Self {
        EntryKey::Tenant(id.to_string())
    }

    /// Whether the key is part of what requests are served from (not the file's baseline).
    pub fn is_live(&self) -> bool {
        matches!(self, EntryKey::Global | EntryKey::Tenant(_))
    }

    /// A record's Kafka key (`tenant:acme#<tag>`); the tag is not checked here (the MAC
    /// covers the whole key).
    fn parse(key: &str) -> Option<Self> {
        let (key, _tag) = key.rsplit_once('#')?;
        let id = |prefix: &str| {
            key.strip_prefix(prefix)
                .filter(|id| !id.is_empty())
                .map(str::to_string)
        };
        match key {
            "global" => Some(EntryKey::Global),
            "file-global" => Some(EntryKey::FileGlobal),
            _ => id("tenant:")
                .map(EntryKey::Tenant)
                .or_else(|| id("file:").map(EntryKey::FileTenant)),
        }
    }
}

/// One change of one key, as written to (and read from) the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: EntryKey,
    /// The key's version this change was made from; it makes `base + 1`.
    pub base: u64,
    /// JSON; `None`: the tenant is deleted.
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
const SIGNED_HEADERS: [&str; 5] = [
    "fg-base",
    "fg-version",
    "fg-actor",
    "fg-action",
    "fg-replica",
];
/// A deleted tenant's value.
const DELETED: &[u8] = b"null";
const MAC_HEADER: &str = "fg-mac";

fn text(message: &LogRecord<'_>, name: &str) -> Result<String, Refused> {
    let bytes = message
        .header(name)
        .ok_or_else(|| Refused::Malformed(format!("no {name} header")))?;
    String::from_utf8(bytes.to_vec())
        .map_err(|_| Refused::Malformed(format!("{name} is not UTF-8")))
}

/// The parts an entry's MAC covers: the topic, the Kafka key, the value, the signed headers.
fn signed_parts<'a>(
    topic: &'a str,
    key: &'a [u8],
    value: Option<&'a [u8]>,
    headers: [Option<&'a [u8]>; 5],
) -> [Option<&'a [u8]>; 8] {
    let [a, b, c, d, e] = headers;
    [Some(topic.as_bytes()), Some(key), value, a, b, c, d, e]
}

/// The key of a record that sits under the Kafka key this replica writes `key` under (the
/// signing secret's tag): a record there that is not an entry could become, once compacted,
/// the only record of that key.
pub fn own_key(raw: &[u8], secrets: &RegistrySecrets) -> Option<EntryKey> {
    let raw = std::str::from_utf8(raw).ok()?;
    let (logical, tag) = raw.rsplit_once('#')?;
    let key = EntryKey::parse(raw)?;
    (tag == secrets.key_tag(logical)).then_some(key)
}

/// A record read as an entry, and whether the signing secret signed it (else an older one of
/// the list did: the entry is to be signed again before that secret is dropped).
#[derive(Debug, Clone)]
pub struct Decoded {
    pub entry: Entry,
    pub by_signing_secret: bool,
}

impl Entry {
    /// The version this entry makes.
    pub fn version(&self) -> Option<u64> {
        self.base.checked_add(1)
    }

    /// Reads an entry from a record of the registry topic: its MAC first (nothing of an
    /// unauthenticated record is looked at further), then its fields.
    pub fn decode(
        message: &LogRecord<'_>,
        topic: &str,
        secrets: &RegistrySecrets,
    ) -> Result<Decoded, Refused> {
        let tag = message.header(MAC_HEADER).ok_or(Refused::Unsigned)?;
        let tag = hex::decode(tag).map_err(|_| Refused::BadMac)?;
        let parts = signed_parts(
            topic,
            message.key().unwrap_or_default(),
            message.value(),
            SIGNED_HEADERS.map(|name| message.header(name)),
        );
        let signer = secrets.verify(&parts, &tag).ok_or(Refused::BadMac)?;
        let key = message
            .key()
            .and_then(|k| std::str::from_utf8(k).ok())
            .and_then(EntryKey::parse)
            .ok_or_else(|| Refused::Malformed("the key is not global or tenant:ID#tag".into()))?;
        let number = |name: &str| -> Result<u64, Refused> {
            text(message, name)?
                .parse::<u64>()
                .map_err(|_| Refused::Malformed(format!("{name} is not a version number")))
        };
        let base = number("fg-base")?;
        if base.checked_add(1) != Some(number("fg-version")?) {
            return Err(Refused::Malformed("fg-version is not fg-base + 1".into()));
        }
        let value = match message.value() {
            None => {
                return Err(Refused::Malformed(
                    "a Kafka tombstone is not an entry".into(),
                ))
            }
            Some(DELETED) => None,
            Some(v) => Some(v.to_vec()),
        };
        Ok(Decoded {
            entry: Self {
                key,
                base,
                value,
                actor: text(message, "fg-actor")?,
                action: text(message, "fg-action")?,
                replica: text(message, "fg-replica")?,
            },
            by_signing_secret: signer == 0,
        })
    }
}

/// Why the topic could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{0}")]
    Kafka(kafka::log::LogError),
    #[error("Kafka did not take the change within {0:?}")]
    Timeout(Duration),
    #[error("the key has no version after the last one")]
    NoVersion,
}

impl From<kafka::log::LogError> for LogError {
    fn from(e: kafka::log::LogError) -> Self {
        match e {
            kafka::log::LogError::Timeout(d) => LogError::Timeout(d),
            e => LogError::Kafka(e),
        }
    }
}

/// The registry topic: its Kafka side, and the secrets its entries are signed with.
pub struct RegistryLog {
    log: LogTopic,
    pub write_timeout: Duration,
    /// Signs what this replica writes and checks what it reads.
    pub secrets: RegistrySecrets,
}

impl std::fmt::Debug for RegistryLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryLog")
            .field("topic", &self.log.topic())
            .finish_non_exhaustive()
    }
}

impl RegistryLog {
    /// Clients on `connection` (bootstrap servers and security settings).
    pub fn new(
        connection: kafka::Connection,
        topic: &str,
        write_timeout: Duration,
        replication: Option<u16>,
        secrets: RegistrySecrets,
    ) -> Result<Self, LogError> {
        Ok(Self {
            log: LogTopic::new(connection, topic, write_timeout, replication)?,
            write_timeout,
            secrets,
        })
    }

    pub fn topic(&self) -> &str {
        self.log.topic()
    }

    /// Creates the topic when it is missing: compacted, one partition (one order for every
    /// replica), replicated as the cluster allows.
    pub async fn ensure_topic(&self) -> Result<(), LogError> {
        Ok(self.log.ensure_topic().await?)
    }

    /// A reader of the whole topic from its first record, by assignment (no group).
    pub fn reader(&self, replica: &str) -> Result<LogReader, LogError> {
        Ok(self.log.reader(&format!("floodgate-registry-{replica}"))?)
    }

    /// The offset after the topic's last record (0: empty).
    pub async fn end_offset(&self, reader: &LogReader) -> Result<i64, LogError> {
        Ok(reader.end_offset().await?)
    }

    /// Writes entries in order; returns each one's offset once Kafka has acknowledged it
    /// (queued together: seeding 100,000 tenants is not 100,000 round trips).
    pub async fn write(&self, entries: &[Entry]) -> Result<Vec<i64>, LogError> {
        let mut offsets = Vec::with_capacity(entries.len());
        // Encoded a chunk at a time: only one chunk's records are ever held besides the entries.
        for chunk in entries.chunks(kafka::log::WRITE_CHUNK) {
            let records: Vec<_> = chunk.iter().map(|entry| self.encode(entry)).collect();
            offsets.extend(self.log.write(records).await?);
        }
        Ok(offsets)
    }

    /// An entry as a signed record.
    fn encode(&self, entry: &Entry) -> Result<OutRecord, LogError> {
        let logical = entry.key.to_string();
        let key = format!("{logical}#{}", self.secrets.key_tag(&logical));
        let base = entry.base.to_string();
        let version = entry.version().ok_or(LogError::NoVersion)?.to_string();
        let value = entry.value.as_deref().unwrap_or(DELETED);
        let signed = [
            base.as_bytes(),
            version.as_bytes(),
            entry.actor.as_bytes(),
            entry.action.as_bytes(),
            entry.replica.as_bytes(),
        ];
        let mac = hex::encode(self.secrets.sign(&signed_parts(
            self.log.topic(),
            key.as_bytes(),
            Some(value),
            signed.map(Some),
        )));
        let mut headers: Vec<(&'static str, Vec<u8>)> = SIGNED_HEADERS
            .iter()
            .zip(signed)
            .map(|(name, v)| (*name, v.to_vec()))
            .collect();
        headers.push((MAC_HEADER, mac.into_bytes()));
        Ok(OutRecord {
            key: key.into_bytes(),
            value: value.to_vec(),
            headers,
        })
    }
}
