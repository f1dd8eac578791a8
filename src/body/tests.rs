use super::*;
use std::borrow::Cow;

// The decoder's tests run it with `/v1`'s record parser, floodgate's own format (Confluent's
// bodies are tested in their folder, `http::confluent::record`).
use crate::http::v1::{self, parse, Format};

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

fn json(body: &str) -> Result<Vec<Record<'static>>, BodyError> {
    parse(Format::Json, body.as_bytes(), &limits()).map(owned)
}

fn ndjson(body: &str) -> Result<Vec<Record<'static>>, BodyError> {
    parse(Format::Ndjson, body.as_bytes(), &limits()).map(owned)
}

fn malformed(result: Result<Vec<Record<'static>>, BodyError>) -> String {
    match result {
        // Both are a 400 malformed_body on /v1.
        Err(BodyError::Malformed(detail) | BodyError::Invalid(detail)) => detail,
        other => panic!("expected a malformed-body error, got {other:?}"),
    }
}

#[test]
fn json_values_are_kept_byte_for_byte() {
    let body = r#"{"records":[{"value":{"b":1.50,"a":[1e3, 2]},"key":"k1"}]}"#;
    let records = json(body).expect("valid");
    assert_eq!(
        records[0].value.as_deref().unwrap_or_default(),
        br#"{"b":1.50,"a":[1e3, 2]}"#
    );
    assert_eq!(records[0].key.as_deref(), Some(&b"k1"[..]));
}

#[test]
fn base64_values_keys_and_headers_are_decoded() {
    let body = r#"{"records":[{"value_b64":"AAEC/w==","key_b64":"a2V5","headers":{"h":"v\u00e9"},"partition":2,"timestamp_ms":17}]}"#;
    let r = &json(body).expect("valid")[0];
    assert_eq!(r.value.as_deref(), Some(&[0u8, 1, 2, 255][..]));
    assert_eq!(r.key.as_deref(), Some(&b"key"[..]));
    assert_eq!(
        r.headers,
        vec![(Cow::Borrowed("h"), Cow::Owned("vé".as_bytes().to_vec()))]
    );
    assert_eq!((r.partition, r.timestamp_ms), (Some(2), Some(17)));
    assert_eq!(
        r.size(),
        4 + 3 + 1 + 3 + crate::record::RECORD_OVERHEAD_BYTES
    );
}

#[test]
fn a_null_value_is_a_kafka_null_an_absent_one_an_error() {
    let r = &json(r#"{"records":[{"key":"k","value":null}]}"#).expect("valid")[0];
    assert_eq!(r.value, None);
    assert_eq!(r.size(), 1 + crate::record::RECORD_OVERHEAD_BYTES);
}

#[test]
fn errors_name_the_record() {
    let d = malformed(json(r#"{"records":[{"value":1},{"value":2,"colour":3}]}"#));
    assert!(d.starts_with("record 1: unknown field `colour`"), "{d}");
    let d = malformed(json(
        r#"{"records":[{"value":1},{"value":1},{"value_b64":"%%%"}]}"#,
    ));
    assert!(
        d.starts_with("record 2: value_b64 is not valid base64"),
        "{d}"
    );
    let d = malformed(json(r#"{"records":[{"value":1,"value_b64":"AA=="}]}"#));
    assert!(
        d.starts_with("record 0: set value or value_b64, not both"),
        "{d}"
    );
    let d = malformed(json(r#"{"records":[{"key":"k"}]}"#));
    assert!(d.starts_with("record 0: needs value"), "{d}");
    let d = malformed(json(r#"{"records":[{"value":1,"partition":-1}]}"#));
    assert!(d.starts_with("record 0: partition -1 is negative"), "{d}");
}

#[test]
fn ndjson_errors_name_line_and_record() {
    let body = "{\"value\":1}\n\n{\"value\":2}\n{\"value\":3\n";
    let d = malformed(ndjson(body));
    assert!(d.starts_with("line 4 (record 2): "), "{d}");
}

#[test]
fn ndjson_skips_blank_lines_and_keeps_order() {
    let records = ndjson("{\"value\":\"a\"}\r\n\n{\"value\":\"b\"}\n").expect("valid");
    let values: Vec<&[u8]> = records.iter().filter_map(|r| r.value.as_deref()).collect();
    assert_eq!(values, vec![&b"\"a\""[..], &b"\"b\""[..]]);
}

#[test]
fn duplicate_fields_and_headers_are_refused() {
    let d = malformed(json(r#"{"records":[{"value":1,"key":"a","key":"b"}]}"#));
    assert!(d.contains("duplicate field `key`"), "{d}");
    let d = malformed(json(
        r#"{"records":[{"value":1,"headers":{"h":"1","h":"2"}}]}"#,
    ));
    assert!(d.contains("header \"h\" appears twice"), "{d}");
    let d = malformed(json(r#"{"records":[],"records":[]}"#));
    assert!(d.contains("appears twice"), "{d}");
}

#[test]
fn hostile_json_is_a_clear_error_not_a_crash() {
    let deep = format!(
        "{{\"records\":[{{\"value\":{}{}}}]}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let d = malformed(json(&deep));
    assert!(
        d.starts_with("record 0: value nests deeper than 128"),
        "{d}"
    );
    let ok = format!(
        "{{\"records\":[{{\"value\":{}\"[[\\\"\"{}}}]}}",
        "[".repeat(128),
        "]".repeat(128)
    );
    assert!(
        json(&ok).is_ok(),
        "128 levels, brackets inside strings do not count"
    );
    let d = malformed(json(
        r#"{"records":[{"value":1,"partition":99999999999999999999}]}"#,
    ));
    assert!(d.starts_with("record 0:"), "{d}");
    let bad_utf8 = b"{\"records\":[{\"value\":\"\xff\"}]}";
    assert!(matches!(
        parse(Format::Json, bad_utf8, &limits()),
        Err(BodyError::Malformed(_))
    ));
    let d = malformed(json(r#"{"records":[{"value":1}]} trailing"#));
    assert!(d.contains("trailing"), "{d}");
    assert_eq!(json(r#"{"records":[]}"#).err(), Some(BodyError::NoRecords));
    assert!(matches!(json(""), Err(BodyError::Malformed(_))));
}

#[test]
fn huge_numbers_inside_values_survive_as_text() {
    let body = r#"{"records":[{"value":123456789012345678901234567890.000000000000000001}]}"#;
    let r = &json(body).expect("valid")[0];
    assert_eq!(
        r.value.as_deref(),
        Some(&b"123456789012345678901234567890.000000000000000001"[..])
    );
}

#[test]
fn record_count_and_sizes_are_bounded() {
    let l = RequestBounds {
        max_records_per_request: 2,
        max_value_bytes: 4,
        ..RequestBounds::default()
    };
    let three = r#"{"records":[{"value":1},{"value":2},{"value":3}]}"#;
    assert_eq!(
        parse(Format::Json, three.as_bytes(), &l).map(owned),
        Err(BodyError::TooManyRecords { limit: 2 })
    );
    assert_eq!(
        parse(
            Format::Ndjson,
            b"{\"value\":1}\n{\"value\":2}\n{\"value\":3}",
            &l
        )
        .map(owned),
        Err(BodyError::TooManyRecords { limit: 2 })
    );
    match parse(Format::Json, br#"{"records":[{"value":"12345"}]}"#, &l) {
        Err(BodyError::RecordTooLarge(d)) => {
            assert!(d.starts_with("record 0: value is 7 bytes"), "{d}")
        }
        other => panic!("expected RecordTooLarge, got {other:?}"),
    }
}

#[test]
fn content_types_select_the_format() {
    assert_eq!(
        Format::from_content_type("application/json; charset=utf-8"),
        Some(Format::Json)
    );
    assert_eq!(
        Format::from_content_type("application/x-ndjson"),
        Some(Format::Ndjson)
    );
    assert_eq!(Format::from_content_type("text/plain"), None);
    // Read as UTF-8: another charset is refused (415), not misread.
    assert_eq!(
        Format::from_content_type("application/json; charset=\"UTF-8\""),
        Some(Format::Json)
    );
    assert_eq!(
        Format::from_content_type("application/json; charset=\"utf-16\""),
        None
    );
    assert_eq!(
        Format::from_content_type("application/x-ndjson;charset=latin1"),
        None
    );
}

/// A deterministic fuzz smoke test (the coverage-guided target lives in fuzz/): thousands of
/// mutations of valid bodies in both formats; parsing answers Ok or Err and never panics, and
/// every error names a record or a position.
#[test]
fn mutated_bodies_never_panic() {
    let seeds: [&[u8]; 3] = [
        br#"{"records":[{"key":"k","value":{"a":[1,2,{"b":"c"}]},"headers":{"h":"v"},"partition":1,"timestamp_ms":5},{"value_b64":"AAEC","key_b64":"a2V5"}]}"#,
        b"{\"value\":1}\n{\"value\":\"x\",\"key\":\"k\"}\n{\"value_b64\":\"AA==\"}\n",
        br#"{"records":[{"value":"\u00e9\ud83d\ude00","headers":{"a":"1","b":"2"}}]}"#,
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let interesting = b"{}[]\",:\\\n0-eE.nulltrue\xff\xc3";
    for round in 0..30_000u32 {
        let seed = seeds[round as usize % seeds.len()];
        let mut body = seed.to_vec();
        for _ in 0..(1 + next() % 4) {
            let at = (next() as usize) % (body.len() + 1);
            match next() % 3 {
                0 if at < body.len() => {
                    body.remove(at);
                }
                1 => body.insert(at, interesting[(next() as usize) % interesting.len()]),
                _ if at < body.len() => body[at] = next() as u8,
                _ => {}
            }
        }
        for format in [Format::Json, Format::Ndjson] {
            if let Err(BodyError::Malformed(detail) | BodyError::Invalid(detail)) =
                parse(format, &body, &limits())
            {
                assert!(!detail.is_empty());
            }
        }
    }
}

/// Header limits are enforced while the header object is read: a record whose headers pass the
/// limit is refused there (413), before a later problem in the same object is even reached.
#[test]
fn header_limits_apply_while_reading() {
    let l = RequestBounds {
        max_headers_bytes: 1000,
        ..RequestBounds::default()
    };
    let mut headers: Vec<String> = (0..200)
        .map(|i| format!(r#""h{i}":"0123456789""#))
        .collect();
    headers.push(r#""h0":"again""#.into());
    let json_body = format!(
        r#"{{"records":[{{"value":1,"headers":{{{}}}}}]}}"#,
        headers.join(",")
    );
    match parse(Format::Json, json_body.as_bytes(), &l) {
        Err(BodyError::RecordTooLarge(d)) => {
            assert!(d.contains("record 0") && d.contains("1000"), "{d}")
        }
        other => panic!("expected 413, got {other:?}"),
    }
    let ndjson_body = format!(r#"{{"value":1,"headers":{{{}}}}}"#, headers.join(","));
    match parse(Format::Ndjson, ndjson_body.as_bytes(), &l) {
        Err(BodyError::RecordTooLarge(d)) => assert!(d.contains("line 1"), "{d}"),
        other => panic!("expected 413, got {other:?}"),
    }
    // Under the limit, a repeated name is still found, also past the linear-scan size.
    let mut many: Vec<String> = (0..40).map(|i| format!(r#""h{i}":"v""#)).collect();
    many.push(r#""h3":"again""#.into());
    let body = format!(
        r#"{{"records":[{{"value":1,"headers":{{{}}}}}]}}"#,
        many.join(",")
    );
    assert!(malformed(json(&body)).contains("\"h3\" appears twice"));
}

/// What a decoder holds never passes what has arrived: records move from the body's tail into
/// the arena, they are not kept twice.
#[test]
fn a_decoder_holds_no_more_than_has_arrived() {
    let body: String = (0..200)
        .map(|i| format!("{{\"value\":\"{}\",\"key\":\"k{i}\"}}\n", "v".repeat(i * 7)))
        .collect();
    let mut decoder = Decoder::new(Framing::Lines, v1::V1Record, &limits());
    let mut arrived = 0;
    for piece in body.as_bytes().chunks(333) {
        arrived += piece.len();
        decoder.push(piece).expect("valid");
        assert!(decoder.held() <= arrived, "{} > {arrived}", decoder.held());
    }
    assert_eq!(decoder.finish().expect("valid").len(), 200);
}

/// Records taken whole where they start and records followed across chunk ends by the scanner
/// decode alike: the same records, in order, and the same error for the same bad body, however
/// the body is cut.
#[test]
fn every_cut_of_a_body_decodes_alike() {
    let nested = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    let good = format!(
        r#"{{"records":[{{"value":{{"a":"x}}\"{{","b":[1,2.50]}},"key":"k\u00e9"}}, {{"value_b64":"aGk=","headers":{{"h":"v"}}}},{{"value":{}}},{{"value":null,"partition":2}}]}}"#,
        nested(MAX_VALUE_DEPTH)
    );
    let too_deep = format!(
        r#"{{"records":[{{"value":1}},{{"value":{}}}]}}"#,
        nested(MAX_VALUE_DEPTH + 1)
    );
    let bad_second = r#"{"records":[{"value":1},{"value":tru},{"value":2}]}"#;
    let whole = |body: &str| parse(Format::Json, body.as_bytes(), &limits()).map(owned);
    let cut = |body: &str, size: usize| {
        let mut decoder = Decoder::new(Format::Json.framing(), v1::V1Record, &limits());
        for piece in body.as_bytes().chunks(size) {
            decoder.push(piece)?;
        }
        decoder.finish().map(owned)
    };
    let records = whole(&good).expect("valid");
    assert_eq!(records.len(), 4);
    assert_eq!(records[2].value.as_deref(), Some(nested(128).as_bytes()));
    assert_eq!(
        malformed(whole(&too_deep)),
        "record 1: value nests deeper than 128 levels"
    );
    assert_eq!(malformed(whole(bad_second)), malformed(cut(bad_second, 7)));
    assert!(malformed(whole(bad_second)).starts_with("record 1: expected ident"));
    for size in 1..good.len() {
        assert_eq!(
            cut(&good, size).expect("valid"),
            records,
            "cut every {size}"
        );
        assert_eq!(
            malformed(cut(&too_deep, size)),
            "record 1: value nests deeper than 128 levels",
            "cut every {size}"
        );
    }
}
