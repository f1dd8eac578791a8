use super::*;
use crate::body::ParseRecord;

fn bounds() -> RequestBounds {
    RequestBounds::default()
}

#[test]
fn v2_binary_and_json_records() {
    let bin = V2Record::new(V2Format::Binary, Some(2));
    let r = bin
        .parse(br#"{"key":"a2V5","value":"dmFsdWU="}"#, &bounds())
        .expect("binary");
    assert_eq!(
        (r.key.as_deref(), r.value.as_deref()),
        (Some(&b"key"[..]), Some(&b"value"[..]))
    );
    assert_eq!(r.partition, Some(2), "the URL's partition");
    let json = V2Record::new(V2Format::Json, Some(2));
    let r = json
        .parse(br#"{"value":{"b": 1.50},"partition":0}"#, &bounds())
        .expect("json");
    assert_eq!(r.value.as_deref(), Some(&br#"{"b": 1.50}"#[..]));
    assert_eq!(r.partition, Some(0), "the record's own partition wins");
    assert!(matches!(
        json.parse(br#"{"value":1,"colour":"red"}"#, &bounds()),
        Err(RecordError::Invalid(_))
    ));
    assert!(matches!(
        bin.parse(br#"{"value":{"not":"base64"}}"#, &bounds()),
        Err(RecordError::Invalid(_))
    ));
}

#[test]
fn v3_records_with_every_type() {
    let p = V3Record::default();
    let r = p
        .parse(
            br#"{"partition_id":1,"headers":[{"name":"h","value":"eA=="},{"name":"h","value":null}],
                "key":{"type":"STRING","data":"k\u00e9"},"value":{"type":"JSON","data":{"a":[1, 2]}},
                "timestamp":"2026-11-30T12:00:00.250+01:00"}"#,
            &bounds(),
        )
        .expect("valid");
    assert_eq!(r.key.as_deref(), Some("ké".as_bytes()));
    assert_eq!(r.value.as_deref(), Some(&br#"{"a":[1, 2]}"#[..]));
    assert_eq!(r.headers.len(), 2, "repeated names are allowed");
    assert_eq!(r.timestamp_ms, Some(1_796_036_400_250));
    assert_eq!(
        p.take_seen(),
        vec![V3Entry {
            id: None,
            types: V3Types {
                key: Some(DataType::String),
                value: Some(DataType::Json),
                key_size: 3,
                value_size: 12,
            },
            decoded: true,
            failed: None,
        }]
    );
}

#[test]
fn v3_refuses_what_needs_a_schema_registry() {
    let p = V3Record::default();
    for body in [
        &br#"{"value":{"data":1}}"#[..],
        br#"{"value":{"type":"AVRO","data":1}}"#,
        br#"{"value":{"schema_id":3,"data":1}}"#,
        br#"{"value":{"type":"JSON","schema_id":3,"data":1}}"#,
    ] {
        match p.parse(body, &bounds()) {
            Err(RecordError::Invalid(m)) => assert!(
                m.contains("type") || m.contains("Schema Registry") || m.contains("schema"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        V3Record::batch().parse(br#"{"value":{"type":"JSON","data":1}}"#, &bounds()),
        Err(RecordError::EntryId(_))
    ));
}

/// kafka-rest reads every v2 record field `@Nullable` (`ProduceRecord`'s key, value and
/// `Integer partition`): a null is the field left out. Confluent's Node client (`kafka-rest`
/// 0.0.5) sends `"key": null` and `"partition": null` with every record it produces to a topic,
/// and `"value": null` for a null message.
#[test]
fn v2_nulls_are_absent_as_in_kafka_rest() {
    let bin = V2Record::new(V2Format::Binary, None);
    // The Node client's shape for topic.produce('msg1') and for a keyed record.
    let r = bin
        .parse(
            br#"{"value":"bXNnMQ==","key":null,"partition":null}"#,
            &bounds(),
        )
        .expect("the Node client's record");
    assert_eq!(
        (r.key, r.value.as_deref(), r.partition),
        (None, Some(&b"msg1"[..]), None)
    );
    let r = bin
        .parse(
            br#"{"value":null,"key":"a2V5","partition":null}"#,
            &bounds(),
        )
        .expect("a null value (a tombstone)");
    assert_eq!((r.key.as_deref(), r.value), (Some(&b"key"[..]), None));
    // A null partition leaves the URL's partition in place.
    let on_partition = V2Record::new(V2Format::Binary, Some(3));
    let r = on_partition
        .parse(br#"{"value":"eA==","partition":null}"#, &bounds())
        .expect("null partition");
    assert_eq!(r.partition, Some(3));
    // JSON: a null key or value is a Kafka null, not the four bytes `null` (kafka-rest's
    // NoSchemaRecordSerializer: `data.isNull()` is no bytes).
    let json = V2Record::new(V2Format::Json, None);
    let r = json
        .parse(br#"{"key":null,"value":null,"partition":null}"#, &bounds())
        .expect("json nulls");
    assert_eq!((r.key, r.value, r.partition), (None, None, None));
    // kafka-rest's documented v2 examples: binary and JSON records with and without a key or a
    // partition.
    for (parser, body) in [
        (
            &bin,
            &br#"{"records":[{"key":"a2V5","value":"Y29uZmx1ZW50"},{"value":"a2Fma2E=","partition":1},{"value":"bG9ncw=="}]}"#[..],
        ),
        (
            &json,
            br#"{"records":[{"key":"somekey","value":{"foo":"bar"}},{"value":["foo","bar"],"partition":1},{"value":53.5}]}"#,
        ),
    ] {
        let text = std::str::from_utf8(body).expect("utf-8");
        let records: serde_json::Value = serde_json::from_str(text).expect("json");
        for record in records["records"].as_array().expect("records") {
            let one = serde_json::to_vec(record).expect("record");
            parser.parse(&one, &bounds()).expect("kafka-rest's own example");
        }
    }
    // Not a whole number is still refused, null or not.
    assert!(bin
        .parse(br#"{"value":"eA==","partition":"1"}"#, &bounds())
        .is_err());
}

/// kafka-rest's v3 `ProduceRequest` reads `partition_id`, `headers`, `key`, `value` and
/// `timestamp` `@Nullable`, a null list of headers as none, and a null `data` as a Kafka null.
#[test]
fn v3_nulls_are_absent_as_in_kafka_rest() {
    let p = V3Record::default();
    let r = p
        .parse(
            br#"{"partition_id":null,"headers":null,"key":null,"value":{"type":"BINARY","data":"eA=="},"timestamp":null}"#,
            &bounds(),
        )
        .expect("nulls everywhere");
    assert_eq!(
        (
            r.partition,
            r.headers.len(),
            r.key,
            r.value.as_deref(),
            r.timestamp_ms
        ),
        (None, 0, None, Some(&b"x"[..]), None)
    );
    let r = p
        .parse(
            br#"{"key":{"type":"JSON","data":null},"value":null,"headers":[{"name":"h","value":null}]}"#,
            &bounds(),
        )
        .expect("null data and a null header value");
    assert_eq!((r.key, r.value), (None, None));
    assert_eq!(r.headers[0].1.as_ref(), b"");
    // The schema fields of a key or value are nullable too (kafka-rest's ProduceRequestData).
    let r = p
        .parse(
            br#"{"value":{"type":"STRING","data":"s","subject":null,"schema_id":null,"schema_version":null,"schema":null,"subject_name_strategy":null}}"#,
            &bounds(),
        )
        .expect("null schema fields");
    assert_eq!(r.value.as_deref(), Some(&b"s"[..]));
    // kafka-rest's documented v3 example shape: every field set.
    p.parse(
        br#"{"partition_id":1,"headers":[{"name":"Header-1","value":"SGVhZGVyLTE="}],"key":{"type":"BINARY","data":"Zm9vYmFy"},"value":{"type":"JSON","data":{"foo":"bar"}},"timestamp":"2021-02-05T19:14:42Z"}"#,
        &bounds(),
    )
    .expect("kafka-rest's own example");
    // A header still needs its name.
    assert!(p
        .parse(br#"{"headers":[{"name":null,"value":"eA=="}]}"#, &bounds())
        .is_err());
}

mod bodies;
