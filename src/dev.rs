//! `floodgate dev`: a zero-setup gateway on an in-process Kafka-protocol broker (librdkafka's
//! mock cluster), with a demo tenant whose API key is printed at start-up. For trying the API
//! a minute after the build; the broker keeps everything in memory and forgets it on exit.
//!
//! Layer: HTTP edges. May import everything below.

use crate::config::{Config, TenantConfig};
use crate::identity::ApiKeyHash;
use crate::kafka::MockCluster;

/// The demo topics and their partition counts.
pub const DEMO_TOPICS: &[(&str, i32)] = &[("events.demo", 3), ("events.demo.audit", 1)];

/// A running dev environment: keep it alive as long as the gateway runs.
pub struct DevBroker {
    pub cluster: MockCluster,
    pub api_key: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("could not start the in-process Kafka broker: {0}")]
    Broker(#[from] rdkafka::error::KafkaError),
    #[error("could not generate an API key: {0}")]
    Random(#[from] getrandom::Error),
}

/// Starts the mock cluster and points `config` at it, with a demo tenant.
pub fn start(config: &mut Config) -> Result<DevBroker, DevError> {
    let cluster = MockCluster::new(1)?;
    for (topic, partitions) in DEMO_TOPICS {
        cluster.create_topic(topic, *partitions, 1)?;
    }
    config.kafka.bootstrap_servers = cluster.bootstrap_servers();
    let api_key = crate::identity::random_key("fg_demo_")?;
    config.tenants.retain(|t| t.id != "demo");
    config.tenants.push(TenantConfig {
        id: "demo".into(),
        api_key_sha256: vec![ApiKeyHash::of_key(&api_key).to_hex()],
        topics: vec!["events.demo".into(), "events.demo.*".into()],
        records_per_sec: Some(1000),
        records_burst: Some(2000),
        bytes_per_sec: Some(1024 * 1024),
        bytes_burst: Some(2 * 1024 * 1024),
        ..TenantConfig::default()
    });
    Ok(DevBroker { cluster, api_key })
}
