//! The Avro walk against apache-avro's own encoder, and its bounds.
use super::*;
use crate::schema::MAX_NAME_BYTES;
use serde_json::json;

const LIMIT: usize = 1 << 20;
const STEPS: u64 = 1 << 20;

const USER: &str = r#"{"type":"record","name":"User","namespace":"t","fields":[
    {"name":"name","type":"string"},
    {"name":"age","type":"int"},
    {"name":"email","type":["null","string"],"default":null},
    {"name":"tags","type":{"type":"array","items":"string"},"default":[]}]}"#;

#[test]
fn encodes_as_apache_avro_does() {
    let s = AvroSchema::parse(USER).expect("schema");
    let v = json!({"name":"ann","age":42,"email":{"string":"a@x"},"tags":["a","b"]});
    let ours = s.encode(&v, LIMIT, STEPS, None).expect("valid");
    let theirs = {
        use apache_avro::types::Value as A;
        let record = A::Record(vec![
            ("name".into(), A::String("ann".into())),
            ("age".into(), A::Int(42)),
            (
                "email".into(),
                A::Union(1, Box::new(A::String("a@x".into()))),
            ),
            (
                "tags".into(),
                A::Array(vec![A::String("a".into()), A::String("b".into())]),
            ),
        ]);
        apache_avro::to_avro_datum(&s.root, record).expect("theirs")
    };
    assert_eq!(ours, theirs);
    // Defaulted fields give the bytes of their defaults.
    let defaulted = s
        .encode(&json!({"name":"ann","age":42}), LIMIT, STEPS, None)
        .expect("defaults");
    let expected = {
        use apache_avro::types::Value as A;
        let record = A::Record(vec![
            ("name".into(), A::String("ann".into())),
            ("age".into(), A::Int(42)),
            ("email".into(), A::Union(0, Box::new(A::Null))),
            ("tags".into(), A::Array(vec![])),
        ]);
        apache_avro::to_avro_datum(&s.root, record).expect("theirs")
    };
    assert_eq!(defaulted, expected);
    // A bare union value gives the same bytes as the named branch.
    let bare = s.encode(
        &json!({"name":"ann","age":42,"email":"a@x","tags":["a","b"]}),
        LIMIT,
        STEPS,
        None,
    );
    assert_eq!(bare.expect("bare"), theirs);
    assert_eq!(s.record_name.as_deref(), Some("t.User"));
}

#[test]
fn mismatches_name_the_field() {
    let s = AvroSchema::parse(USER).expect("schema");
    let e = |v: Value| s.encode(&v, LIMIT, STEPS, None).expect_err("invalid");
    let m = e(json!({"name":"ann","age":"42"}));
    assert_eq!(m.pointer, "/age");
    assert!(
        m.message.contains("expected an integer, found a string"),
        "{}",
        m.message
    );
    assert_eq!(e(json!({"age":1})).pointer, "/name");
    assert_eq!(
        e(json!({"name":"a","age":1,"colour":"red"})).pointer,
        "/colour"
    );
    assert_eq!(
        e(json!({"name":"a","age":1,"tags":["x",3]})).pointer,
        "/tags/1"
    );
    assert_eq!(e(json!({"name":"a","age":1,"email":5})).pointer, "/email");
    assert_eq!(
        e(json!({"name":"a","age":3_000_000_000_i64})).pointer,
        "/age"
    );
}

#[test]
fn recursive_schemas_are_bounded() {
    let s = AvroSchema::parse(
        r#"{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}"#,
    )
    .expect("schema");
    assert!(s
        .encode(&json!({"next":{"Node":{"next":null}}}), LIMIT, STEPS, None)
        .is_ok());
    let mut deep = json!({"next": null});
    for _ in 0..200 {
        deep = json!({ "next": deep });
    }
    assert!(
        s.encode(&deep, LIMIT, STEPS, None).is_err(),
        "bounded, not a stack overflow"
    );
}

#[test]
fn defaults_cannot_expand_past_the_limit() {
    // Each level holds ten of the level below by default: `{}` is 100 bytes at level 0
    // and 10 GB at level 8, from a 5 KB schema. Parsing it does not expand the defaults
    // (apache-avro's own check of them would, for minutes and gigabytes), and the walk
    // stops at the limit.
    let mut schema = format!(
        r#"{{"type":"record","name":"L0","fields":[{{"name":"s","type":"string","default":"{}"}}]}}"#,
        "x".repeat(100)
    );
    for level in 1..=8 {
        let below = level - 1;
        let mut fields = vec![format!(r#"{{"name":"f0","type":{schema},"default":{{}}}}"#)];
        fields.extend(
            (1..10).map(|i| format!(r#"{{"name":"f{i}","type":"L{below}","default":{{}}}}"#)),
        );
        schema = format!(
            r#"{{"type":"record","name":"L{level}","fields":[{}]}}"#,
            fields.join(",")
        );
    }
    let s = AvroSchema::parse(&schema).expect("schema");
    assert!(
        schema.len() < 4096,
        "a small schema: {} bytes",
        schema.len()
    );
    let e = s
        .encode(&json!({}), 64 * 1024, STEPS, None)
        .expect_err("too large");
    assert!(
        e.message.contains("larger than 65536 bytes"),
        "{}",
        e.message
    );
    // A value that fills the defaults in itself is within the limit.
    let small = AvroSchema::parse(
        r#"{"type":"record","name":"R","fields":[{"name":"s","type":"string","default":"d"}]}"#,
    )
    .expect("schema");
    assert_eq!(
        small.encode(&json!({}), 64, STEPS, None).expect("default"),
        vec![2, b'd']
    );
}

#[test]
fn a_bare_union_value_is_chosen_by_its_kind_without_trying_branches() {
    let s = AvroSchema::parse(
        r#"{"type":"record","name":"N","fields":[{"name":"n","type":["null","N",
            {"type":"record","name":"M","fields":[{"name":"n","type":["null","N","M"]}]}]}]}"#,
    )
    .expect("schema");
    // Two record branches: a bare object is ambiguous, refused at once however deep.
    let mut deep = json!({"n": null});
    for _ in 0..60 {
        deep = json!({ "n": deep });
    }
    let e = s.encode(&deep, LIMIT, STEPS, None).expect_err("ambiguous");
    assert!(e.message.contains("more than one branch"), "{}", e.message);
    assert!(s
        .encode(&json!({"n": {"N": {"n": null}}}), LIMIT, STEPS, None)
        .is_ok());
    let u = AvroSchema::parse(r#"["null","int","string"]"#).expect("union");
    assert_eq!(
        u.encode(&json!(5), LIMIT, STEPS, None).expect("int"),
        vec![2, 10]
    );
    assert_eq!(
        u.encode(&json!("a"), LIMIT, STEPS, None).expect("string"),
        vec![4, 2, b'a']
    );
}

#[test]
fn defaults_that_write_nothing_are_bounded_in_steps() {
    // 40,000 nulls by default, ten of those records per level: nothing grows the datum.
    let mut schema = format!(
        r#"{{"type":"record","name":"L0","fields":[{{"name":"n","type":{{"type":"array","items":"null"}},"default":[{}]}}]}}"#,
        vec!["null"; 40_000].join(",")
    );
    for level in 1..=3 {
        let below = level - 1;
        let mut fields = vec![format!(r#"{{"name":"f0","type":{schema},"default":{{}}}}"#)];
        fields.extend(
            (1..10).map(|i| format!(r#"{{"name":"f{i}","type":"L{below}","default":{{}}}}"#)),
        );
        schema = format!(
            r#"{{"type":"record","name":"L{level}","fields":[{}]}}"#,
            fields.join(",")
        );
    }
    let s = AvroSchema::parse(&schema).expect("schema");
    let e = s
        .encode(&json!({}), LIMIT, 100_000, None)
        .expect_err("too many steps");
    assert!(e.message.contains("too many steps"), "{}", e.message);
}

#[test]
fn a_union_default_is_its_first_branch() {
    let s = AvroSchema::parse(
        r#"{"type":"record","name":"R","fields":[
            {"name":"m","type":[{"type":"map","values":"string"},"string"],"default":{"string":"x"}},
            {"name":"i","type":["int","long"],"default":1}]}"#,
    )
    .expect("schema");
    // m: branch 0 (the map), one entry "string" -> "x"; i: branch 0 (int) 1.
    let bytes = s.encode(&json!({}), LIMIT, STEPS, None).expect("defaults");
    assert_eq!(
        bytes,
        vec![0, 2, 12, b's', b't', b'r', b'i', b'n', b'g', 2, b'x', 0, 0, 2]
    );
}

#[test]
fn a_record_named_with_a_leading_dot_keeps_its_defaults() {
    let s = AvroSchema::parse(
        r#"{"type":"record","name":"O","namespace":"n","fields":[{"name":"i","type":
            {"type":"record","name":".I","fields":[{"name":"a","type":"int","default":7}]}}]}"#,
    )
    .expect("schema");
    assert_eq!(
        s.encode(&json!({"i": {}}), LIMIT, STEPS, None)
            .expect("default"),
        vec![14]
    );
}

#[test]
fn a_large_enum_is_looked_up_not_searched() {
    let symbols: Vec<String> = (0..40_000).map(|i| format!("\"S{i}\"")).collect();
    let s = AvroSchema::parse(&format!(
        r#"{{"type":"array","items":{{"type":"enum","name":"E","symbols":[{}]}}}}"#,
        symbols.join(",")
    ))
    .expect("schema");
    // 1,000 lookups of the last symbol within a budget a linear search would spend 5,000
    // times over.
    let v = json!(vec!["S39999"; 1000]);
    assert!(s.encode(&v, LIMIT, 10_000, None).is_ok());
}

/// A record that holds a list of itself, with 20 defaulted fields, in namespace `ns`.
fn self_listing(ns: &str) -> AvroSchema {
    let fields: Vec<String> = (0..20)
        .map(|i| format!(r#"{{"name":"f{i}","type":"int","default":0}}"#))
        .collect();
    AvroSchema::parse(&format!(
        r#"{{"type":"record","name":"R","namespace":"{ns}","fields":[
            {{"name":"c","type":{{"type":"array","items":"R"}},"default":[]}},{}]}}"#,
        fields.join(",")
    ))
    .expect("schema")
}

/// The hostile review of #37 (round 7): every visit copies or hashes a name, so a 255 KB
/// namespace made each small item cost ~23 copies of it for ~3 steps: 28 s of CPU for a 60 KB
/// value within its step budget. Names are bounded, and a visit costs by the longest.
#[test]
fn a_visit_costs_by_the_schema_s_longest_name() {
    let long = "n".repeat(MAX_NAME_BYTES + 1);
    let e = AvroSchema::parse(&format!(
        r#"{{"type":"record","name":"R","namespace":"{long}","fields":[]}}"#
    ))
    .expect_err("too long a name");
    assert!(e.contains("at most 512"), "{e}");
    assert!(e.contains("/namespace"), "the detail names where: {e}");
    let field = AvroSchema::parse(&format!(
        r#"{{"type":"record","name":"R","fields":[{{"name":"{long}","type":"int"}}]}}"#
    ));
    assert!(field.is_err(), "a field's name is bounded too");
    // 2,000 items of `{}`: what the gateway's budget (16 steps a byte) allows.
    let items = json!({ "c": vec![json!({}); 2000] });
    let steps = 16 * items.to_string().len() as u64 + 16_384;
    assert!(self_listing("a.b")
        .encode(&items, LIMIT, steps, None)
        .is_ok());
    let e = self_listing(&"n".repeat(500))
        .encode(&items, LIMIT, steps, None)
        .expect_err("long names cost more");
    assert!(e.too_costly, "{}", e.message);
}

/// Past its deadline a walk stops (read every few thousand steps), whatever its budget.
#[test]
fn a_walk_stops_at_its_deadline() {
    let s = self_listing("a.b");
    let items = json!({ "c": vec![json!({}); 2000] });
    let past = Instant::now().checked_sub(std::time::Duration::from_secs(1));
    let e = s
        .encode(&items, LIMIT, u64::MAX, past)
        .expect_err("past its deadline");
    assert!(
        e.too_costly && e.message.contains("ran past its time"),
        "{}",
        e.message
    );
    let ahead = Instant::now() + std::time::Duration::from_secs(3600);
    assert!(s.encode(&items, LIMIT, u64::MAX, Some(ahead)).is_ok());
}

/// Past a CPU time of its thread a walk stops too (review 27 of #37: a short job stopped by
/// the clock was stopped for a pause, not for its own work).
#[test]
fn a_walk_stops_past_its_threads_cpu_time() {
    let s = self_listing("a.b");
    let items = json!({ "c": vec![json!({}); 2000] });
    let now = crate::schema::thread_cpu::thread_cpu().expect("thread clock");
    let spent = Until {
        wall: None,
        cpu: now.checked_sub(std::time::Duration::from_nanos(1)),
    };
    let mut steps = u64::MAX;
    let e = s
        .encode_counted(&items, LIMIT, &mut steps, spent)
        .expect_err("past its CPU time");
    assert!(e.message.contains("ran past its time"), "{}", e.message);
    let left = Until {
        wall: None,
        cpu: Some(now + std::time::Duration::from_secs(3600)),
    };
    let mut steps = u64::MAX;
    assert!(s.encode_counted(&items, LIMIT, &mut steps, left).is_ok());
}
