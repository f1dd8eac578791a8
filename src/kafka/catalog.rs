//! Which topics exist and how many partitions they have, and whether the cluster answers at all.
//!
//! Kafka does not refuse a record for a missing topic: librdkafka would hold it until
//! `message.timeout.ms`. To answer 404 at once we keep a snapshot of the cluster's topic list.
//! A background task refreshes it every `[kafka] metadata_ttl_ms` with one metadata request for
//! all topics; its result is also the readiness latch, so `/readyz` costs nothing and a flood of
//! probes cannot block threads.
//!
//! A topic missing from the snapshot triggers an early refresh, at most one at a time and at
//! most one per [`MISS_REFRESH_INTERVAL`] whoever asks (a lookup waits for the next one it may
//! start, unless one started after it asked): a client inventing topic names costs at most one
//! metadata request per interval for the whole gateway, creates no topic object inside
//! librdkafka (only the all-topics request is ever made), and never delays the lookups of
//! topics already in the snapshot, which are answered from memory. The refresh keeps running
//! to its end even if the request that started it goes away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;

use super::producer::KafkaProducer;

/// The shortest time between two refreshes triggered by unknown topics.
pub const MISS_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicInfo {
    Exists { partitions: u32 },
    Missing,
}

/// The cluster's topics as the last successful refresh saw them.
#[derive(Debug, Default)]
struct Snapshot {
    partitions: HashMap<String, u32>,
    /// Topics whose metadata carried an error other than "unknown topic" (leader election,
    /// authorization...): neither present nor known to be missing.
    unsettled: HashMap<String, String>,
    taken_at: Option<Instant>,
}

/// Whether the last metadata request was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reachability {
    /// No refresh has finished yet.
    Unknown,
    Reachable,
    Unreachable(String),
}

#[derive(Debug)]
pub struct TopicCatalog {
    producer: Arc<KafkaProducer>,
    snapshot: ArcSwap<Snapshot>,
    reachability: Mutex<Reachability>,
    /// The Kafka cluster's id, once a refresh has learnt it.
    cluster_id: Mutex<Option<String>>,
    /// One refresh at a time; holds when the last one started.
    refreshing: tokio::sync::Mutex<Option<Instant>>,
    interval: Duration,
    timeout: Duration,
}

impl TopicCatalog {
    pub fn new(producer: Arc<KafkaProducer>, interval: Duration, timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            producer,
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            reachability: Mutex::new(Reachability::Unknown),
            cluster_id: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(None),
            interval,
            timeout,
        })
    }

    /// Refreshes the snapshot every interval until the catalog is dropped. Call once, inside
    /// the runtime.
    pub fn start_refreshing(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(catalog) = weak.upgrade() else {
                    return;
                };
                catalog.refresh(None).await;
                let interval = catalog.interval;
                drop(catalog);
                tokio::time::sleep(interval).await;
            }
        });
    }

    /// The Kafka cluster's id, if known yet.
    pub fn cluster_id(&self) -> Option<String> {
        self.cluster_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The readiness latch: the outcome of the last refresh.
    pub fn reachability(&self) -> Reachability {
        self.reachability
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn answer(&self, topic: &str) -> Option<Result<TopicInfo, String>> {
        let snapshot = self.snapshot.load();
        if let Some(p) = snapshot.partitions.get(topic) {
            return Some(Ok(TopicInfo::Exists { partitions: *p }));
        }
        if let Some(error) = snapshot.unsettled.get(topic) {
            return Some(Err(format!("topic {topic:?} is not available: {error}")));
        }
        snapshot.taken_at.map(|_| Ok(TopicInfo::Missing))
    }

    /// The topic's metadata. `Err` means the cluster could not say (unreachable, or the topic
    /// is between leaders): a 503, never a cached 404.
    pub async fn lookup(&self, topic: &str) -> Result<TopicInfo, String> {
        match self.answer(topic) {
            Some(Ok(TopicInfo::Exists { partitions })) => {
                return Ok(TopicInfo::Exists { partitions })
            }
            // Missing or unsettled: perhaps created or healed since; look again (rate-limited).
            _ => {
                let asked = Instant::now();
                self.refresh(Some(asked)).await;
            }
        }
        match self.answer(topic) {
            Some(answer) => answer,
            None => Err(match self.reachability() {
                Reachability::Unreachable(e) => format!("metadata lookup failed: {e}"),
                _ => "topic metadata is not available yet".to_string(),
            }),
        }
    }

    /// Fetches all topics' metadata, unless a refresh started at or after `since` already
    /// did; a refresh for a miss (`since` set) starts no sooner than [`MISS_REFRESH_INTERVAL`]
    /// after the previous one. `None` refreshes now (the background task).
    async fn refresh(&self, since: Option<Instant>) {
        let budget = self.timeout + MISS_REFRESH_INTERVAL;
        let mut last = match tokio::time::timeout(budget, self.refreshing.lock()).await {
            Ok(guard) => guard,
            Err(_) => return, // another refresh is slow; its result will do
        };
        if let (Some(since), Some(started)) = (since, *last) {
            if started >= since {
                return;
            }
            let next = started + MISS_REFRESH_INTERVAL;
            if next > Instant::now() {
                tokio::time::sleep_until(next.into()).await;
            }
        }
        *last = Some(Instant::now());
        let (producer, timeout) = (self.producer.clone(), self.timeout);
        let want_cluster_id = self.cluster_id().is_none();
        // The blocking fetch runs to its end even if this future is dropped; the guard is
        // held until it does, so a client that disconnects frees nothing early.
        let fetched = tokio::task::spawn_blocking(move || {
            let snapshot = producer
                .fetch_metadata(None, timeout)
                .map(|m| snapshot_of(&m))?;
            let cluster_id = want_cluster_id
                .then(|| producer.fetch_cluster_id(timeout))
                .flatten();
            Ok::<_, KafkaError>((snapshot, cluster_id))
        })
        .await;
        let outcome = match fetched {
            Ok(Ok((snapshot, cluster_id))) => {
                self.snapshot.store(Arc::new(snapshot));
                if let Some(id) = cluster_id {
                    *self
                        .cluster_id
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(id);
                }
                Reachability::Reachable
            }
            Ok(Err(e)) => Reachability::Unreachable(e.to_string()),
            Err(e) => Reachability::Unreachable(e.to_string()),
        };
        if let Reachability::Unreachable(e) = &outcome {
            tracing::debug!(error = %e, "topic metadata refresh failed");
        }
        *self
            .reachability
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = outcome;
        drop(last);
    }
}

fn snapshot_of(metadata: &rdkafka::metadata::Metadata) -> Snapshot {
    let mut snapshot = Snapshot {
        taken_at: Some(Instant::now()),
        ..Snapshot::default()
    };
    for t in metadata.topics() {
        match t.error() {
            None if !t.partitions().is_empty() => {
                snapshot
                    .partitions
                    .insert(t.name().to_string(), t.partitions().len() as u32);
            }
            None => {
                snapshot
                    .unsettled
                    .insert(t.name().to_string(), "it has no partitions".into());
            }
            Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => {}
            Some(code) => {
                let error = KafkaError::MetadataFetch(code.into());
                snapshot
                    .unsettled
                    .insert(t.name().to_string(), error.to_string());
            }
        }
    }
    snapshot
}
