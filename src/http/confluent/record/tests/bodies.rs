//! Confluent's bodies through the decoder: v2's nesting bound and side fields, v3 batches'
//! failed entries.

use crate::body::{BodyError, Decoder, Framing, ParseRecord, RecordArena, MAX_VALUE_DEPTH};
use crate::config::RequestBounds;
use crate::http::confluent::record as confluent;
use crate::http::v1;
use crate::record::Record;

fn limits() -> RequestBounds {
    RequestBounds::default()
}

/// Decoded records, owned, so tests can hold them past the arena.
fn owned(arena: RecordArena) -> Vec<Record<'static>> {
    arena
        .records()
        .into_iter()
        .map(Record::into_owned)
        .collect()
}

fn malformed(result: Result<Vec<Record<'static>>, BodyError>) -> String {
    match result {
        Err(BodyError::Malformed(detail) | BodyError::Invalid(detail)) => detail,
        other => panic!("expected a malformed-body error, got {other:?}"),
    }
}

/// Confluent v2's JSON keys and values are bounded like `/v1` values, on either path.
#[test]
fn v2_json_keys_and_values_nest_no_deeper_than_the_bound() {
    use confluent::{V2Format, V2Record};
    let nested = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    let parser = V2Record::new(V2Format::Json, None);
    let decode = |body: &str| {
        let mut decoder = Decoder::new(Framing::Envelope("records"), &parser, &limits());
        decoder.push(body.as_bytes())?;
        decoder.finish().map(owned)
    };
    for field in ["key", "value"] {
        let ok = format!(
            r#"{{"records":[{{"{field}":{}}}]}}"#,
            nested(MAX_VALUE_DEPTH)
        );
        assert_eq!(decode(&ok).expect("128 levels").len(), 1, "{field}");
        let deep = format!(
            r#"{{"records":[{{"{field}":{}}}]}}"#,
            nested(MAX_VALUE_DEPTH + 1)
        );
        assert_eq!(
            malformed(decode(&deep)),
            "record 0: value nests deeper than 128 levels",
            "{field}"
        );
    }
}

fn batch_decode(
    parser: &confluent::V3Record,
    body: &str,
    chunk: usize,
) -> Result<Vec<Record<'static>>, BodyError> {
    let mut decoder = Decoder::new(Framing::Envelope("entries"), parser, &limits());
    for piece in body.as_bytes().chunks(chunk.max(1)) {
        decoder.push(piece)?;
    }
    decoder.finish().map(owned)
}

/// A batch entry that does not decode is a failed entry, noted in its place with its id, and
/// the others are decoded (in any chunking); before, the first one failed the whole body.
#[test]
fn a_batch_notes_failed_entries_and_decodes_the_others() {
    use confluent::V3Record;
    let body = r#"{"entries":[
        {"id":"a","value":{"type":"STRING","data":"one"}},
        {"id":"b","value":{"type":"BINARY","data":12}},
        {"id":"c","value":{"type":"BINARY","data":"not base64!"}},
        {"id":"d","value":{"type":"AVROX","data":1}},
        {"id":"e","value":{"type":"JSON","data":{"n":2}},"colour":1},
        {"id":"f","value":{"type":"JSON","data":[3]}}
    ]}"#;
    for chunk in [1, 5, 64, body.len()] {
        let parser = V3Record::batch();
        let records = batch_decode(&parser, body, chunk).expect("decoded");
        let values: Vec<&[u8]> = records
            .iter()
            .map(|r| r.value.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(values, vec![&b"one"[..], b"[3]"], "chunks of {chunk}");
        let seen = parser.take_seen();
        let ids: Vec<&str> = seen.iter().filter_map(|e| e.id.as_deref()).collect();
        assert_eq!(ids, ["a", "b", "c", "d", "e", "f"]);
        let failed: Vec<(usize, u16, &str)> = seen
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.failed.as_ref().map(|(s, m)| (i, *s, m.as_str())))
            .collect();
        assert_eq!(failed.len(), 4, "{failed:?}");
        assert_eq!(
            failed[0],
            (
                1,
                400,
                "record 1: value: data must be a string for type BINARY"
            )
        );
        assert!(failed[1]
            .2
            .starts_with("record 2: value.data is not valid base64"));
        assert!(failed[2].2.contains("unknown type \"AVROX\""));
        assert!(failed[3].2.contains("unknown field `colour`"), "{failed:?}");
        assert!(seen.iter().all(|e| e.decoded == e.failed.is_none()));
    }
}

/// A failed entry's message quotes at most `quote::MAX_DETAIL` bytes of what was sent: an
/// unknown field's 80 KB name made one stored batch answer 721 KB (a review of #37).
#[test]
fn a_failed_entry_quotes_a_bounded_part_of_an_unknown_field_name() {
    use confluent::V3Record;
    let name = "f".repeat(80_000);
    let body =
        format!(r#"{{"entries":[{{"id":"a","value":{{"type":"JSON","data":1}},"{name}":1}}]}}"#);
    let parser = V3Record::batch();
    batch_decode(&parser, &body, body.len()).expect("decoded");
    let seen = parser.take_seen();
    let (status, message) = seen[0].failed.clone().expect("failed");
    assert_eq!(status, 400);
    assert!(message.contains("unknown field"), "{message}");
    assert!(
        message.len() <= crate::quote::MAX_DETAIL + 24,
        "{} bytes",
        message.len()
    );
}

#[test]
fn a_batch_whose_every_entry_failed_decodes_to_no_records_and_ids_still_rule() {
    use confluent::V3Record;
    let parser = V3Record::batch();
    let all_bad = r#"{"entries":[{"id":"x","value":{"type":"BINARY","data":1}}]}"#;
    assert_eq!(
        batch_decode(&parser, all_bad, 1000).expect("noted").len(),
        0
    );
    assert_eq!(parser.take_seen().len(), 1);
    // An empty batch is still no records at all.
    assert_eq!(
        batch_decode(&parser, r#"{"entries":[]}"#, 1000),
        Err(BodyError::NoRecords)
    );
    // A failed entry's id is still checked: missing, malformed or used twice fails the batch.
    for (body, want) in [
        (
            r#"{"entries":[{"value":{"type":"BINARY","data":1}}]}"#,
            "record 0: entry id is missing",
        ),
        (
            r#"{"entries":[{"id":7,"value":{"type":"BINARY","data":1}}]}"#,
            "record 0: entry id 7 must be a string",
        ),
        (
            r#"{"entries":[{"id":"a","value":{"type":"JSON","data":1}},{"id":"a","value":{"type":"BINARY","data":1}}]}"#,
            "record 1: entry id \"a\" is used twice",
        ),
    ] {
        let parser = V3Record::batch();
        match batch_decode(&parser, body, 1000) {
            Err(BodyError::EntryId(m)) => assert!(m.starts_with(want), "{m}"),
            other => panic!("{body}: {other:?}"),
        }
    }
    // Not JSON inside an entry is not an entry's failure: the body is malformed.
    let parser = V3Record::batch();
    assert!(matches!(
        batch_decode(&parser, r#"{"entries":[{"id":"a","value" 1}]}"#, 1000),
        Err(BodyError::Malformed(_))
    ));
    // A stream's record is never skipped.
    let stream = V3Record::default();
    let mut decoder = Decoder::new(Framing::Concatenated, &stream, &limits());
    assert!(matches!(
        decoder.push(br#"{"value":{"type":"BINARY","data":1}}"#),
        Err(BodyError::Invalid(_))
    ));
}

/// A later step fails decoded records by their index among the decoded records; the parser
/// notes them in their entries' places, and `without` drops them from what is sent.
#[test]
fn decoded_records_can_be_failed_by_index_afterwards() {
    use confluent::V3Record;
    let parser = V3Record::batch();
    let body = r#"{"entries":[
        {"id":"a","value":{"type":"STRING","data":"0"}},
        {"id":"b","value":{"type":"BINARY","data":1}},
        {"id":"c","value":{"type":"STRING","data":"1"}},
        {"id":"d","value":{"type":"STRING","data":"2"}}
    ]}"#;
    let mut decoder = Decoder::new(Framing::Envelope("entries"), &parser, &limits());
    decoder.push(body.as_bytes()).expect("push");
    let arena = decoder.finish().expect("decoded");
    assert_eq!(arena.len(), 3);
    let format: &dyn ParseRecord = &parser;
    assert!(format.fail_record(1, 422, "record 2: value: bad".into()));
    assert!(!format.fail_record(3, 422, "no such record".into()));
    let sent = owned(arena.without(&[1]));
    let values: Vec<&[u8]> = sent
        .iter()
        .map(|r| r.value.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(values, vec![&b"0"[..], b"2"]);
    assert_eq!(arena.without(&[1]).charge().records, 2);
    let seen = parser.take_seen();
    let failed: Vec<Option<u16>> = seen
        .iter()
        .map(|e| e.failed.as_ref().map(|f| f.0))
        .collect();
    assert_eq!(failed, vec![None, Some(400), Some(422), None]);
    // A format that does not report entries one by one cannot fail one.
    assert!(!V3Record::default().fail_record(0, 422, String::new()));
    assert!(!v1::V1Record.fail_record(0, 422, String::new()));
}

/// v2's schema fields reach the parser whole, before or after the records; other fields and
/// over-long values are refused naming the field.
#[test]
fn v2_side_fields_reach_the_parser() {
    use confluent::{V2Format, V2Record, V2Side, V2_FRAMING};
    let body = r#"{"value_schema":"{\"type\":\"string\"}","records":[{"value":"s"}],"value_schema_id":null,"key_schema_id":42}"#;
    for chunk in [1, 3, body.len()] {
        let parser = V2Record::new(V2Format::Json, None);
        let mut decoder = Decoder::new(V2_FRAMING, &parser, &limits());
        for piece in body.as_bytes().chunks(chunk) {
            decoder.push(piece).expect("push");
        }
        assert_eq!(decoder.finish().expect("decoded").len(), 1);
        assert_eq!(
            parser.take_side(),
            V2Side {
                key_schema: None,
                key_schema_id: Some("42".into()),
                value_schema: Some(r#""{\"type\":\"string\"}""#.into()),
                value_schema_id: Some("null".into()),
            }
        );
    }
    let decode = |body: &str, bounds: &RequestBounds| {
        let parser = V2Record::new(V2Format::Binary, None);
        let mut decoder = Decoder::new(V2_FRAMING, &parser, bounds);
        decoder.push(body.as_bytes())?;
        decoder.finish().map(owned)
    };
    let e = decode(r#"{"key_schema_id":1.2.3,"records":[{}]}"#, &limits()).expect_err("bad");
    assert!(
        matches!(&e, BodyError::Malformed(m) if m.starts_with("field \"key_schema_id\"")),
        "{e:?}"
    );
    let e = decode(r#"{"value_schema":"\x","records":[{}]}"#, &limits()).expect_err("escape");
    assert!(
        matches!(&e, BodyError::Malformed(m) if m.contains("value_schema")),
        "{e:?}"
    );
    let small = RequestBounds {
        max_value_bytes: 16,
        ..limits()
    };
    let long = format!(
        r#"{{"value_schema":"{}","records":[{{}}]}}"#,
        "x".repeat(40)
    );
    assert_eq!(
        decode(&long, &small).expect_err("long"),
        BodyError::Malformed("field \"value_schema\" is longer than 16 bytes".into())
    );
    // A parser without side fields refuses them as unknown fields.
    let mut decoder = Decoder::new(V2_FRAMING, v1::V1Record, &limits());
    assert!(matches!(
        decoder.push(br#"{"key_schema":"a","records":[]}"#),
        Err(BodyError::Invalid(m)) if m == "field \"key_schema\": unknown field \"key_schema\""
    ));
}
