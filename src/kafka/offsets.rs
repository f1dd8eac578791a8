//! Consumer-group offsets read from Kafka, for the lag guards: one client per group that never
//! subscribes (so never joins the group), asking for metadata, the group's committed offsets
//! and the log-end offsets — three requests per group per reading. Blocking.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::settings::{self, Connection};
use crate::identity::{Topic, TopicPatterns};
use crate::lag::guard::PartitionOffsets;

/// The offset readers, one client per group (kept between readings).
pub struct KafkaOffsets {
    connection: Connection,
    consumers: Mutex<HashMap<String, Arc<BaseConsumer>>>,
}

impl std::fmt::Debug for KafkaOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaOffsets").finish_non_exhaustive()
    }
}

impl KafkaOffsets {
    pub fn new(connection: Connection) -> Self {
        Self {
            connection,
            consumers: Mutex::new(HashMap::new()),
        }
    }

    fn consumer(&self, group: &str) -> Result<Arc<BaseConsumer>, String> {
        let mut consumers = self
            .consumers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = consumers.get(group) {
            return Ok(c.clone());
        }
        let consumer: BaseConsumer = settings::offsets_reader(&self.connection, group)
            .create()
            .map_err(|e| format!("cannot create a client for group {group:?}: {e}"))?;
        let consumer = Arc::new(consumer);
        consumers.insert(group.to_string(), consumer.clone());
        Ok(consumer)
    }

    /// Only these groups are still read: the clients of the others go.
    pub fn retain(&self, groups: &[&str]) {
        self.consumers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|group, _| groups.contains(&group.as_str()));
    }

    /// The end and committed offsets of every partition of the topics `topics` allows, each
    /// request waiting up to `timeout`.
    pub fn read(
        &self,
        group: &str,
        topics: &TopicPatterns,
        timeout: Duration,
    ) -> Result<Vec<PartitionOffsets>, String> {
        let consumer = self.consumer(group)?;
        // Events the client queued (errors, logs) are dropped: the answers below say it all.
        let _ = consumer.poll(Duration::ZERO);
        let metadata = consumer
            .fetch_metadata(None, timeout)
            .map_err(|e| format!("metadata: {e}"))?;
        let mut partitions = TopicPartitionList::new();
        let mut ends = TopicPartitionList::new();
        for t in metadata.topics() {
            let matches = Topic::parse(t.name()).is_ok_and(|topic| topics.allows(&topic));
            if !matches || t.error().is_some() {
                continue;
            }
            for p in t.partitions() {
                partitions.add_partition(t.name(), p.id());
                // offsets_for_times with "timestamp" END (-1) answers the log-end offsets.
                ends.add_partition_offset(t.name(), p.id(), Offset::End)
                    .map_err(|e| e.to_string())?;
            }
        }
        drop(metadata);
        if partitions.count() == 0 {
            return Err("no topic in Kafka matches the guard's topics".into());
        }
        let committed = consumer
            .committed_offsets(partitions, timeout)
            .map_err(|e| format!("committed offsets of group {group:?}: {e}"))?;
        let ends = consumer
            .offsets_for_times(ends, timeout)
            .map_err(|e| format!("end offsets: {e}"))?;
        // A partition whose end offset came back with an error (or none) is read without one:
        // the guard keeps its earlier readings and takes no rate from this one.
        let end_of: HashMap<(String, i32), u64> = ends
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) if e.error().is_ok() => {
                    Some(((e.topic().to_string(), e.partition()), o.max(0) as u64))
                }
                _ => None,
            })
            .collect();
        let mut out = Vec::new();
        let mut with_commit = 0;
        for e in committed.elements() {
            let committed = match e.offset() {
                Offset::Offset(c) if e.error().is_ok() => Some(c.max(0) as u64),
                // No committed offset for this partition (or an error for it).
                _ => None,
            };
            let end = end_of.get(&(e.topic().to_string(), e.partition())).copied();
            if committed.is_some() && end.is_some() {
                with_commit += 1;
            }
            out.push(PartitionOffsets::new(
                e.topic(),
                e.partition(),
                end,
                committed,
            ));
        }
        // Lists go before their client can (a list outliving its consumer can hang the drop).
        drop(committed);
        drop(ends);
        if with_commit == 0 {
            return Err(format!(
                "group {group:?} has no committed offsets on the guarded topics"
            ));
        }
        Ok(out)
    }
}
