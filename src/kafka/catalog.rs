//! Which topics exist and how many partitions they have, cached.
//!
//! Kafka does not refuse a record for a missing topic: librdkafka would hold it until
//! `message.timeout.ms`. To answer 404 at once we ask the cluster's metadata, and cache the
//! answer (positive for `ttl`, negative for a shorter time so a new topic is found soon).
//! Lookups run on blocking threads, at most [`MAX_CONCURRENT_LOOKUPS`] at a time, and the cache
//! holds at most [`MAX_ENTRIES`] topics: request data never grows it without bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::producer::KafkaProducer;

const MAX_CONCURRENT_LOOKUPS: usize = 4;
const MAX_ENTRIES: usize = 10_000;
const NEGATIVE_TTL: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicInfo {
    Exists { partitions: u32 },
    Missing,
}

#[derive(Debug)]
pub struct TopicCatalog {
    producer: Arc<KafkaProducer>,
    entries: Mutex<HashMap<String, (TopicInfo, Instant)>>,
    lookups: Semaphore,
    ttl: Duration,
    timeout: Duration,
}

impl TopicCatalog {
    pub fn new(producer: Arc<KafkaProducer>, ttl: Duration, timeout: Duration) -> Self {
        Self {
            producer,
            entries: Mutex::new(HashMap::new()),
            lookups: Semaphore::new(MAX_CONCURRENT_LOOKUPS),
            ttl,
            timeout,
        }
    }

    fn cached(&self, topic: &str) -> Option<TopicInfo> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (info, at) = entries.get(topic)?;
        let ttl = match info {
            TopicInfo::Exists { .. } => self.ttl,
            TopicInfo::Missing => NEGATIVE_TTL.min(self.ttl),
        };
        (at.elapsed() < ttl).then_some(*info)
    }

    fn remember(&self, topic: &str, info: TopicInfo) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (_, at)| at.elapsed() < NEGATIVE_TTL);
            if entries.len() >= MAX_ENTRIES {
                return;
            }
        }
        entries.insert(topic.to_string(), (info, Instant::now()));
    }

    /// The topic's metadata, from the cache or the cluster. `Err` means the cluster could not
    /// be asked within the timeout.
    pub async fn lookup(&self, topic: &str) -> Result<TopicInfo, String> {
        if let Some(info) = self.cached(topic) {
            return Ok(info);
        }
        let _permit = tokio::time::timeout(self.timeout, self.lookups.acquire())
            .await
            .map_err(|_| "metadata lookups are saturated".to_string())?
            .map_err(|_| "metadata lookups are closed".to_string())?;
        // Another request may have fetched it while we waited.
        if let Some(info) = self.cached(topic) {
            return Ok(info);
        }
        let producer = self.producer.clone();
        let (name, timeout) = (topic.to_string(), self.timeout);
        let info = tokio::task::spawn_blocking(move || producer.fetch_topic(&name, timeout))
            .await
            .map_err(|e| format!("metadata lookup failed: {e}"))?
            .map_err(|e| format!("metadata lookup failed: {e}"))?;
        self.remember(topic, info);
        Ok(info)
    }
}
