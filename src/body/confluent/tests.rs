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
