use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::{Offset, TopicPartitionList};

use super::*;
use crate::buffer::TenantUsage;
use crate::config::{BufferConfig, KafkaConfig};
use crate::record::{Charge, Record};

#[derive(Debug)]
struct NoCount;
impl OutcomeCounter for NoCount {
    fn records_failed(&self, _: u64) {}
}

fn record(value: &str) -> Record<'static> {
    Record {
        value: Some(std::borrow::Cow::Owned(value.as_bytes().to_vec())),
        ..Record::default()
    }
}

fn values_in(bootstrap: &str, topic: &str, expected: usize) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "fatal-test")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut idle_since = Instant::now();
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
                idle_since = Instant::now();
            }
            Some(Err(e)) => panic!("consumer: {e}"),
            None if out.len() >= expected && idle_since.elapsed() > Duration::from_secs(1) => break,
            None => {}
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_error_replaces_the_producer_and_loses_no_accepted_record() {
    let cluster = MockCluster::new(1).expect("mock");
    cluster.create_topic("fatal", 1, 1).expect("topic");
    let kafka = KafkaConfig {
        bootstrap_servers: cluster.bootstrap_servers(),
        ..KafkaConfig::default()
    };
    let buffer_config = BufferConfig::default();
    let buffer = Arc::new(Buffer::new(
        buffer_config.max_bytes,
        buffer_config.max_records,
    ));
    let producer = KafkaProducer::new(
        &super::super::client_config(&kafka, &buffer_config),
        buffer.clone(),
        KafkaMetrics::default(),
    )
    .expect("producer");
    let usage = Arc::new(TenantUsage::default());
    let send = |tag: &str| {
        let records: Vec<Record<'static>> = (0..5).map(|i| record(&format!("{tag}-{i}"))).collect();
        let lease = buffer
            .try_reserve(&usage, Charge::new(5, 100))
            .expect("room");
        producer.send("fatal", &records, lease, Arc::new(NoCount))
    };
    let warm = send("warm");
    tokio::time::timeout(Duration::from_secs(10), warm.wait())
        .await
        .expect("warm delivered");

    // Records wait in the queue while the broker is away; then the producer dies.
    cluster.broker_down(1).expect("down");
    let held = send("held");
    let first = Arc::as_ptr(&producer.current.load_full());
    producer.inject_fatal_error();
    cluster.broker_up(1).expect("up");
    tokio::time::timeout(Duration::from_secs(30), held.wait())
        .await
        .expect("the held records are delivered by the new producer");
    assert!(
        held.outcomes().all(|o| matches!(o, Some(Ok(_)))),
        "{:?}",
        held.outcomes().collect::<Vec<_>>()
    );
    assert_ne!(
        Arc::as_ptr(&producer.current.load_full()),
        first,
        "the producer was replaced"
    );

    let after = send("after");
    tokio::time::timeout(Duration::from_secs(10), after.wait())
        .await
        .expect("after delivered");
    assert_eq!(buffer.held(), (0, 0));

    let b = cluster.bootstrap_servers();
    let mut values = tokio::task::spawn_blocking(move || values_in(&b, "fatal", 15))
        .await
        .expect("reader");
    values.sort();
    let mut expected: Vec<String> = ["after", "held", "warm"]
        .iter()
        .flat_map(|t| (0..5).map(move |i| format!("{t}-{i}")))
        .collect();
    expected.sort();
    assert_eq!(values, expected);
}
