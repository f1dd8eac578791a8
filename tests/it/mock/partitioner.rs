//! A keyed record lands on the partition Kafka's Java producer picks for its key (and so
//! Confluent's REST Proxy and every JVM client writing the same topic): murmur2 of the key,
//! `Utils.toPositive(Utils.murmur2(key)) % partitions`, not librdkafka's CRC32 default.

use crate::common::*;
use rdkafka::mocking::MockCluster;
use serde_json::json;

const TOPIC: &str = "test.keyed";
const PARTITIONS: i32 = 3;

/// Kafka's own test vectors for its murmur2 (clients' `UtilsTest.testMurmur2`): the key and
/// `Utils.murmur2(key)`.
const JAVA_MURMUR2: [(&str, i32); 6] = [
    ("21", -973_932_308),
    ("foobar", -790_332_482),
    ("a-little-bit-long-string", -985_981_536),
    ("a-little-bit-longer-string", -1_486_304_829),
    (
        "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
        -58_897_971,
    ),
    ("abc", 479_470_107),
];

/// The partition Java's default partitioner gives a key of this hash.
fn java_partition(murmur2: i32, partitions: i32) -> i32 {
    (murmur2 & 0x7fff_ffff) % partitions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_record_goes_to_the_partition_javas_partitioner_picks() {
    let cluster: Cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, PARTITIONS, 1).expect("topic");
    let gw = Gateway::start(config(&cluster.bootstrap_servers())).await;
    let records: Vec<_> = JAVA_MURMUR2
        .iter()
        .map(|(key, _)| json!({"key": key, "value": 1}))
        .collect();
    let (s, _, a) = post_json(&gw.url(TOPIC), KEY, &json!({ "records": records })).await;
    assert_eq!(s, 200, "{a}");
    let got = offsets(&a, "partition");
    let want: Vec<i64> = JAVA_MURMUR2
        .iter()
        .map(|(_, h)| i64::from(java_partition(*h, PARTITIONS)))
        .collect();
    assert_eq!(got, want, "keys {:?}", JAVA_MURMUR2.map(|(k, _)| k));
    gw.shutdown().await;
}
