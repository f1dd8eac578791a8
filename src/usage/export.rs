//! The usage export (`[usage] topic`): every `export_ms`, one record per tenant and hour whose
//! counts moved since the last export, to a compacted topic, keyed
//! `TENANT/HOUR/REPLICA/INSTANCE` (the hour's start in RFC 3339, this process's instance id):
//! a record holds the hour's totals so far as this process counted them, so compaction keeps
//! the latest, and a consumer sums the latest record of each key over replicas and processes.
//!
//! **What a crash or an outage does.** Records are written whole and again with each change,
//! so a write Kafka did not take is written again at the next export (the rows stay in the
//! ledger, bounded by its `max_rows`); a write taken twice is the same key and value. A process
//! killed without draining loses what it counted since its last export (at most `export_ms`);
//! one that drains exports at the end. The records are at least once, with a stable key.
//!
//! Layer: decisions and state; writes through `kafka::log`.

use std::sync::Arc;
use std::time::Duration;

use super::Ledger;
use crate::kafka::log::{LogError, LogTopic, OutRecord};

/// The export's writer and what it has still to write.
#[derive(Debug)]
pub struct Export {
    log: LogTopic,
    /// This replica and this process: the key's last parts.
    replica: String,
    instance: String,
    every: Duration,
}

impl Export {
    pub fn new(log: LogTopic, replica: &str, instance: &str, every: Duration) -> Self {
        Self {
            log,
            replica: replica.to_string(),
            instance: instance.to_string(),
            every,
        }
    }

    /// Reads the counters into the ledger and writes every row that moved since the last
    /// export that took; on a failure the rows stay pending for the next one.
    pub async fn export(&self, ledger: &Ledger) -> Result<usize, LogError> {
        let keys = ledger.take_unexported();
        if keys.is_empty() {
            return Ok(0);
        }
        let records = ledger.intervals(&keys).into_iter().map(|i| {
            let mut value = i.to_json();
            value["replica"] = self.replica.clone().into();
            value["instance"] = self.instance.clone().into();
            let key = format!(
                "{}/{}/{}/{}",
                i.tenant,
                value["start"].as_str().unwrap_or_default(),
                self.replica,
                self.instance
            );
            Ok::<_, LogError>(OutRecord {
                key: key.into_bytes(),
                value: value.to_string().into_bytes(),
                headers: Vec::new(),
            })
        });
        match self.log.write(records).await {
            Ok(offsets) => Ok(offsets.len()),
            Err(e) => {
                ledger.unexported_again(keys);
                Err(e)
            }
        }
    }

    /// Creates the topic if it is missing, then exports every `export_ms` until the process
    /// ends (a failure is logged and retried at the next one).
    pub fn start(self: &Arc<Self>, ledger: Arc<Ledger>) -> tokio::task::JoinHandle<()> {
        let export = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(export.every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut topic_ready = false;
            loop {
                tick.tick().await;
                if !topic_ready {
                    match export.log.ensure_topic().await {
                        Ok(()) => topic_ready = true,
                        Err(e) => {
                            tracing::warn!(error = %e, topic = export.log.topic(), "usage: export topic not ready");
                            continue;
                        }
                    }
                }
                if let Err(e) = export.export(&ledger).await {
                    tracing::warn!(error = %e, "usage: export failed; retried at the next");
                }
            }
        })
    }
}
