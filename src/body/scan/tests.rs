use super::*;

/// Collects records; with `quick`, takes every record it can parse whole from where it
/// starts (as the decoder does), so both ways of finding a record are exercised.
#[derive(Default)]
struct Collect {
    quick: bool,
    out: Vec<String>,
    taken_whole: usize,
    side: Vec<(String, String)>,
}

impl Sink for Collect {
    type Error = ();
    fn side_field(&mut self, name: &'static str, raw: &[u8]) -> Result<(), ()> {
        self.side
            .push((name.to_string(), String::from_utf8_lossy(raw).into_owned()));
        Ok(())
    }
    fn record(&mut self, text: &[u8], _line: usize) -> Result<(), ()> {
        self.out.push(String::from_utf8_lossy(text).into_owned());
        Ok(())
    }
    fn record_at(&mut self, rest: &[u8], _line: usize) -> Result<Option<usize>, ()> {
        if !self.quick {
            return Ok(None);
        }
        let mut values =
            serde_json::Deserializer::from_slice(rest).into_iter::<serde::de::IgnoredAny>();
        match values.next() {
            Some(Ok(_)) => {
                let len = values.byte_offset();
                self.record(&rest[..len], 0)?;
                self.taken_whole += 1;
                Ok(Some(len))
            }
            _ => Ok(None),
        }
    }
}

fn scan_with(
    sink: &mut Collect,
    framing: Framing,
    chunks: &[&str],
) -> Result<Vec<String>, ScanError> {
    let mut s = Scanner::new(framing, 130);
    let unwrap = |e: Stop<()>| match e {
        Stop::Scan(e) => e,
        Stop::Sink(()) => ScanError::Structure("sink".into()),
    };
    for c in chunks {
        s.push(c.as_bytes(), sink).map_err(unwrap)?;
    }
    s.finish(sink).map_err(unwrap)?;
    Ok(std::mem::take(&mut sink.out))
}

fn records(framing: Framing, chunks: &[&str]) -> Result<Vec<String>, ScanError> {
    scan_with(&mut Collect::default(), framing, chunks)
}

#[test]
fn envelope_records_are_found_across_chunk_boundaries() {
    let body = r#" {"records": [ {"value":"a}\"{"}, {"value":[1,{"x":2}]} ] } "#;
    let want = vec![r#"{"value":"a}\"{"}"#, r#"{"value":[1,{"x":2}]}"#];
    let mut taken_whole = 0;
    for split in 0..body.len() {
        let (a, b) = body.split_at(split);
        assert_eq!(
            records(Framing::Envelope("records"), &[a, b]).expect("valid"),
            want,
            "split at {split}"
        );
        let mut quick = Collect {
            quick: true,
            ..Collect::default()
        };
        let found = scan_with(&mut quick, Framing::Envelope("records"), &[a, b]);
        assert_eq!(found.expect("valid"), want, "quick, split at {split}");
        taken_whole += quick.taken_whole;
    }
    // Records not cut by the split were taken whole where they start; the others were
    // followed to their end by the scanner, in the same order.
    assert!(taken_whole > body.len(), "{taken_whole}");
}

#[test]
fn envelope_structure_errors_are_named() {
    let e = |body: &str| match records(Framing::Envelope("records"), &[body]) {
        Err(ScanError::Structure(m)) => m,
        Err(ScanError::Truncated { .. }) => "ends inside a record".into(),
        other => panic!("{body}: {other:?}"),
    };
    assert!(e(r#"{"recs":[]}"#).contains("unknown field \"recs\""));
    assert!(e(r#"{"records":[{}],"records":[]}"#).contains("appears twice"));
    assert!(e(r#"{"records":[{},]}"#).contains("expected a record object"));
    assert!(e(r#"{"records":[1]}"#).contains("expected a record object"));
    assert!(e(r#"{"records":[{}]} x"#).contains("trailing"));
    assert!(e(r#"{"records":[{"v":1"#).contains("ends inside a record"));
    assert!(e(r#"{}"#).contains("missing field `records`"));
    assert!(e("").contains("empty"));
}

#[test]
fn lines_and_streams() {
    assert_eq!(
        records(Framing::Lines, &["{\"a\":1}\n\n{\"b\"", ":2}"]).expect("lines"),
        vec!["{\"a\":1}", "{\"b\":2}"]
    );
    assert_eq!(
        records(
            Framing::Concatenated,
            &["{\"a\":\"}\"}{\"b\":", "2}\r\n {}"]
        )
        .expect("stream"),
        vec!["{\"a\":\"}\"}", "{\"b\":2}", "{}"]
    );
}

#[test]
fn nesting_is_bounded_while_scanning() {
    let deep = format!("{{\"records\":[{{\"value\":{}", "[".repeat(200));
    let e = records(Framing::Envelope("records"), &[&deep]).expect_err("deep");
    assert_eq!(e, ScanError::TooDeep { line: 1 });
}

#[test]
fn only_the_unfinished_tail_is_kept() {
    let mut sink = Collect::default();
    let mut s = Scanner::new(Framing::Lines, 10);
    s.push(b"{\"a\":1}\n{\"b\":", &mut sink).expect("push");
    assert_eq!(sink.out, vec!["{\"a\":1}"]);
    assert_eq!(s.tail, b"{\"b\":");
    s.push(b"2}\n", &mut sink).expect("push");
    assert_eq!(sink.out, vec!["{\"a\":1}", "{\"b\":2}"]);
    assert_eq!(s.held(), 0);
    let mut s = Scanner::new(Framing::Envelope("records"), 10);
    s.push(br#"{"rec"#, &mut sink).expect("push");
    assert_eq!(s.tail, br#"rec"#, "an unfinished field name is kept");
}

const SIDE: Framing = Framing::EnvelopeSide {
    records: "records",
    side: &["key_schema", "value_schema_id"],
};

#[test]
fn side_fields_are_handed_whole_before_or_after_the_records_at_any_split() {
    let body = r#"{"key_schema": "{\"type\": \"string\", \"q\": \"\\\"}\"}", "records": [{"value":1}], "value_schema_id" :-12e3 }"#;
    for split in 0..body.len() {
        let (a, b) = body.split_at(split);
        for quick in [false, true] {
            let mut sink = Collect {
                quick,
                ..Collect::default()
            };
            let got = scan_with(&mut sink, SIDE, &[a, b]).expect("valid");
            assert_eq!(got, vec![r#"{"value":1}"#], "split at {split}");
            assert_eq!(
                sink.side,
                vec![
                    (
                        "key_schema".to_string(),
                        r#""{\"type\": \"string\", \"q\": \"\\\"}\"}""#.to_string()
                    ),
                    ("value_schema_id".to_string(), "-12e3".to_string()),
                ],
                "split at {split}"
            );
        }
    }
    let mut sink = Collect::default();
    scan_with(
        &mut sink,
        SIDE,
        &[r#"{"value_schema_id":null,"records":[{}]}"#],
    )
    .expect("null");
    assert_eq!(sink.side, vec![("value_schema_id".into(), "null".into())]);
}

#[test]
fn side_fields_are_bounded_typed_and_named() {
    let e = |body: &str| match scan_with(&mut Collect::default(), SIDE, &[body]) {
        Err(ScanError::Structure(m)) => m,
        other => panic!("{body}: {other:?}"),
    };
    assert!(e(r#"{"key_schema":{"type":"string"},"records":[{}]}"#)
        .contains("must be a string, a number or null"));
    assert!(e(r#"{"key_schema":[1],"records":[{}]}"#).contains("must be a string"));
    assert!(e(r#"{"key_schema":true,"records":[{}]}"#).contains("must be a string"));
    assert!(e(r#"{"key_schema":"a","key_schema":"b","records":[{}]}"#).contains("twice"));
    assert!(e(r#"{"key_schema":"a"}"#).contains("missing field `records`"));
    assert!(e(r#"{"colour":1,"records":[{}]}"#).contains("beside it only key_schema"));
    assert!(e(r#"{"key_schema" 1,"records":[{}]}"#).contains("expected ':'"));
    assert!(e(r#"{"key_schema":"a" "records":[{}]}"#).contains("expected '}'"));
    assert!(e(r#"{"records":[{}],"key_schema":"a"#).contains("ends before"));
    // Only the records framing's own field is known to a plain envelope.
    assert!(matches!(
        records(Framing::Envelope("records"), &[r#"{"key_schema":"a","records":[{}]}"#]),
        Err(ScanError::Structure(m)) if m.contains("unknown field \"key_schema\"")
    ));
    // A side value longer than the limit is refused while it arrives, in any chunking.
    let long = format!(r#"{{"key_schema":"{}","records":[{{}}]}}"#, "x".repeat(100));
    for chunk in [1, 7, 1000] {
        let mut s = Scanner::new(SIDE, 10).with_side_limit(50);
        let mut sink = Collect::default();
        let mut out = Ok(());
        for piece in long.as_bytes().chunks(chunk) {
            out = s.push(piece, &mut sink);
            if out.is_err() {
                break;
            }
            assert!(s.held() <= 50 + chunk, "the tail stays bounded");
        }
        assert_eq!(
            out,
            Err(Stop::Scan(ScanError::Structure(
                "field \"key_schema\" is longer than 50 bytes".into()
            ))),
            "chunks of {chunk}"
        );
    }
}

/// White space between records is bounded, whatever the framing and however it is cut into
/// chunks; inside a record's strings it is the record's (bounded by the record's size).
#[test]
fn a_run_of_white_space_past_the_bound_is_refused() {
    let blanks = " ".repeat(MAX_BLANK);
    for framing in [
        Framing::Envelope("records"),
        Framing::Lines,
        Framing::Concatenated,
    ] {
        let (open, close) = match framing {
            Framing::Envelope(_) => (r#"{"records":["#, "]}"),
            _ => ("", ""),
        };
        let within = format!("{open}{blanks}{{\"v\":1}}{close}");
        assert_eq!(records(framing, &[&within]).expect("within").len(), 1);
        let over = format!("{open}{blanks} {{\"v\":1}}{close}");
        let (a, b) = over.split_at(over.len() / 2);
        match records(framing, &[a, b]) {
            Err(ScanError::Structure(m)) => assert!(m.contains("white space in a row"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    let inside = format!(r#"{{"v":"{blanks}{blanks}"}}"#);
    assert_eq!(
        records(Framing::Lines, &[&inside])
            .expect("a string's")
            .len(),
        1
    );
}
