use super::*;
use crate::http::v1::record::{serde_parse, serde_prefix};
use crate::record::Record;

/// The fast reader into an arena that already holds a record: what it accepted (the arena
/// gained exactly one record), or `None` with the arena exactly as it was.
fn record(text: &[u8], bounds: &RequestBounds) -> Option<(Record<'static>, usize)> {
    let mut arena = RecordArena::default();
    let earlier = Record {
        key: Some(b"k0".as_slice().into()),
        value: Some(b"0".as_slice().into()),
        headers: vec![("h0".into(), b"v".as_slice().into())],
        ..Record::default()
    };
    arena.push(&earlier);
    let before = (arena.held(), arena.charge());
    let Some(len) = record_into(text, bounds, &mut arena, false) else {
        assert_eq!(
            (arena.held(), arena.charge(), arena.len()),
            (before.0, before.1, 1)
        );
        assert_eq!(arena.records(), vec![earlier]);
        return None;
    };
    let records = arena.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0], earlier);
    let record = records[1].clone().into_owned();
    assert_eq!(arena.charge().bytes - before.1.bytes, record.size());
    Some((record, len))
}

fn bounds() -> RequestBounds {
    RequestBounds {
        max_key_bytes: 40,
        max_value_bytes: 200,
        max_headers_bytes: 30,
        ..RequestBounds::default()
    }
}

const SEEDS: [&str; 8] = [
    r#"{"key":"user-1","value":{"user":"u1","ts":1700000000001,"props":{"x":12.5,"y":[]}},"headers":{"trace":"t1"}}"#,
    r#"{ "value" : [ -0 , 0.5e-3 , 1E+2 , -12.25E7 , true , false , null , "a\"b\\c\/\b\f\n\r\t\u00e9\uD83D" , { } , [ [ ] ] ] , "partition" : 2 , "timestamp_ms" : 0 }"#,
    r#"{"value_b64":"aGVsbG8=","key_b64":"a2V5","headers":{}}"#,
    r#"{"value":null,"key":"caf\u00e9"}"#,
    "{\"value\":\"caf\u{e9} \u{1F600}\",\"headers\":{\"h\u{e9}\":\"v\",\"h2\":\"\"}}",
    r#"{"value":"x","partition":-1}"#,
    r#"{"value":1,"value_b64":"AA=="}"#,
    r#"{"value":{"a":{"b":{"c":[1,[2,[3]]]}}},"key":"k","timestamp_ms":123456789012}"#,
];

/// Wherever the fast reader accepts, serde_json's path accepts the same bytes as the same
/// record (and ends it at the same byte); on valid records it accepts most, and on
/// thousands of mutations (every kind of JSON error, escapes, UTF-8, control characters,
/// numbers, bounds) it never accepts what serde_json would not.
#[test]
fn the_fast_reader_agrees_with_serde_json_wherever_it_accepts() {
    let bounds = bounds();
    let check = |text: &[u8]| -> bool {
        let Some((fast, len)) = record(text, &bounds) else {
            return false;
        };
        let (slow, slow_len) = serde_prefix(text, &bounds).unwrap_or_else(|| {
            panic!(
                "fast accepted, serde refused: {:?}",
                String::from_utf8_lossy(text)
            )
        });
        assert_eq!(fast, slow, "{:?}", String::from_utf8_lossy(text));
        assert_eq!(len, slow_len, "{:?}", String::from_utf8_lossy(text));
        assert_eq!(
            serde_parse(&text[..len], &bounds).as_ref().ok(),
            Some(&fast),
            "{:?}",
            String::from_utf8_lossy(text)
        );
        // Read as a whole record (an NDJSON line), it is taken exactly when only white
        // space follows, and then it is serde_json's record of the whole text.
        let mut arena = RecordArena::default();
        let whole = record_into(text, &bounds, &mut arena, true).is_some();
        let only_space = text[len..].iter().all(|&b| is_json_space(b));
        assert_eq!(whole, only_space, "{:?}", String::from_utf8_lossy(text));
        if whole {
            let slow = serde_parse(text, &bounds).expect("serde takes what the fast reader took");
            assert_eq!(arena.records(), vec![slow]);
        } else {
            assert!(arena.is_empty());
        }
        true
    };
    let accepted = SEEDS.iter().filter(|s| check(s.as_bytes())).count();
    assert_eq!(
        accepted, 5,
        "all but the escaped key, the negative partition and value + value_b64"
    );
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let interesting: &[u8] =
        b"{}[]\",:\\/\n\r\t \x0c\x00\x1f0123456789-+.eEubfnrtlsa\xc3\xa9\xff\x80\xf0";
    let mut mutated_accepted = 0;
    for round in 0..40_000u32 {
        let mut text = SEEDS[round as usize % SEEDS.len()].as_bytes().to_vec();
        for _ in 0..(1 + next() % 3) {
            let at = (next() as usize) % (text.len() + 1);
            match next() % 3 {
                0 if at < text.len() => {
                    text.remove(at);
                }
                1 => text.insert(at, interesting[(next() as usize) % interesting.len()]),
                _ if at < text.len() => {
                    text[at] = interesting[(next() as usize) % interesting.len()]
                }
                _ => {}
            }
        }
        if check(&text) {
            mutated_accepted += 1;
        }
        // The same record followed by white space (a line), then by more bytes (a chunk).
        text.extend_from_slice(b" \r\n\t");
        check(&text);
        text.extend_from_slice(b" ,{\"value\":2}");
        check(&text);
    }
    assert!(mutated_accepted > 2_000, "{mutated_accepted}");
}

#[test]
fn stops_are_found_eight_bytes_at_a_time_as_one_by_one() {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = (state % 40) as usize;
        let text: Vec<u8> = (0..len)
            .map(|i| {
                let r = state.rotate_left(i as u32 * 7) as u8;
                // Mostly plain ASCII, now and then a stop byte.
                if r % 11 == 0 {
                    r
                } else {
                    b'a' + r % 26
                }
            })
            .collect();
        let want = text.iter().position(|&b| STOP[b as usize]);
        let want = want.map(|k| (k, text[k] == b'"'));
        assert_eq!(plain_run_end(&text, 0), want, "{text:?}");
    }
    for b in 0..=255u8 {
        let mut text = vec![b'x'; 13];
        text[9] = b;
        let want = STOP[b as usize].then_some((9, b == b'"'));
        assert_eq!(plain_run_end(&text, 0), want, "byte {b:#x}");
    }
}

#[test]
fn nesting_and_bounds_are_declined_to_the_serde_path() {
    let nested = |n: usize| format!(r#"{{"value":{}1{}}}"#, "[".repeat(n), "]".repeat(n));
    assert!(
        record(nested(MAX_VALUE_DEPTH).as_bytes(), &bounds()).is_none(),
        "over max_value_bytes"
    );
    let big = RequestBounds::default();
    assert!(record(nested(MAX_VALUE_DEPTH).as_bytes(), &big).is_some());
    assert!(record(nested(MAX_VALUE_DEPTH + 1).as_bytes(), &big).is_none());
    let headers = r#"{"value":1,"headers":{"aaaaaaaaaa":"bbbbbbbbbb","c":"dddddddddddd"}}"#;
    assert!(
        record(headers.as_bytes(), &bounds()).is_none(),
        "34 header bytes > 30"
    );
    assert!(record(headers.as_bytes(), &big).is_some());
}
