//! What a compile with hostile names (or numbers) takes on its way, counted by the heap
//! counter: they are bounded before a descriptor pool or apache-avro sees them (reviews 16–18
//! of #37).

use super::super::*;

/// What compiling `text` took on the way (the test binary counts, lib.rs), and its outcome.
fn compile_usage(format: Format, text: &str) -> (Result<Compiled, String>, crate::heap::Usage) {
    let (compiled, used) = crate::heap::usage(|| Compiled::new(1, format, text));
    (compiled, used.expect("the test binary counts"))
}

/// Review 16 of #37: a Protobuf package of n parts cost the descriptor pool's builder ~n² bytes
/// (it adds every prefix of the package as a name): a 90 KB package took the process to 1.9
/// GiB. Names are bounded on the parsed file, before the pool is built.
#[test]
fn a_package_of_thousands_of_parts_is_refused_before_its_pool_is_built() {
    // 5,000 parts, 10 KB: the pool's builder would have allocated ~25 MB for the prefixes.
    let package = vec!["p"; 5000].join(".");
    let text = format!("syntax = \"proto3\"; package {package}; message M {{ int32 a = 1; }}");
    let (compiled, used) = compile_usage(Format::Protobuf, &text);
    let e = compiled.expect_err("too many parts");
    assert!(
        e.contains("the package") && e.contains("at most 512"),
        "{e}"
    );
    assert!(
        used.allocated < 256 * text.len() as u64 + (1 << 20),
        "refused after {used:?} for a {}-byte schema",
        text.len()
    );
    let long = "p".repeat(MAX_NAME_BYTES);
    let e = Compiled::new(
        1,
        Format::Protobuf,
        &format!("syntax = \"proto3\"; package {long}; message M {{ int32 a = 1; }}"),
    )
    .expect_err("a full name of 514 bytes");
    assert!(
        e.contains("message `M`") && e.contains("at most 512"),
        "{e}"
    );
    // A real package compiles.
    let ok = "syntax = \"proto3\"; package com.example.orders.v1; message M { int32 a = 1; }";
    assert!(Compiled::new(1, Format::Protobuf, ok).is_ok());
}

/// Review 16 of #37: relative type references under a long package were each tried in every
/// enclosing scope, a copy of the scope per try: one 258 KB schema took 170 s of CPU. A full
/// name has at most 16 parts and 512 bytes, so a reference costs at most 16 tries of ~1 KB.
#[test]
fn relative_references_under_a_deep_scope_cost_at_most_a_few_tries_each() {
    let refs = |package: &str| {
        let fields: Vec<String> = (1..=2000).map(|i| format!("T f{i} = {i};")).collect();
        format!(
            "syntax = \"proto3\"; package {package}; message T {{}} message M {{ {} }}",
            fields.join(" ")
        )
    };
    // 400 parts: each of the 2,000 references would have been tried ~400 times.
    let deep = refs(&vec!["q"; 400].join("."));
    let (compiled, used) = compile_usage(Format::Protobuf, &deep);
    assert!(compiled.is_err(), "a package of 400 parts is refused");
    assert!(
        used.allocated < 256 * deep.len() as u64 + (1 << 20),
        "refused after {used:?} for a {}-byte schema",
        deep.len()
    );
    // Near the most a full name may be: 14 parts of 30 bytes, then the message and its field.
    // Each reference still resolves, and the compile's work stays a multiple of the text's.
    let widest = refs(&vec!["q".repeat(30); 14].join("."));
    let (compiled, used) = compile_usage(Format::Protobuf, &widest);
    assert!(compiled.is_ok(), "{:?}", compiled.err());
    assert!(
        used.allocated < 1024 * widest.len() as u64,
        "{used:?} for a {}-byte schema",
        widest.len()
    );
}

/// Review 16 of #37: an Avro namespace of 150,000 bytes shared by 1,300 named enums (258 KB)
/// took 12 s of CPU and 1,150 MiB before the names were checked: every full name, and every
/// default's key, was a copy of the namespace. Names are bounded on the schema's JSON first.
#[test]
fn a_long_namespace_shared_by_many_named_types_is_refused_before_it_is_copied() {
    let namespace = "n".repeat(20_000);
    let enums: Vec<String> = (0..200)
        .map(|i| {
            format!(
                r#"{{"name":"f{i}","type":{{"type":"enum","name":"E{i}","symbols":["A"]}},"default":"A"}}"#
            )
        })
        .collect();
    let text = format!(
        r#"{{"type":"record","name":"R","namespace":"{namespace}","fields":[{}]}}"#,
        enums.join(",")
    );
    let (compiled, used) = compile_usage(Format::Avro, &text);
    let e = compiled.expect_err("too long a namespace");
    assert!(e.contains("/namespace") && e.contains("at most 512"), "{e}");
    assert!(
        used.allocated < 256 * text.len() as u64 + (1 << 20),
        "refused after {used:?} for a {}-byte schema",
        text.len()
    );
    // A name made long by the namespace it inherits is refused where it stands.
    let inherits = format!(
        r#"{{"type":"record","name":"R","namespace":"{}","fields":[{{"name":"e","type":{{"type":"enum","name":"{}","symbols":["A"]}}}}]}}"#,
        "n".repeat(300),
        "E".repeat(300)
    );
    let e = Compiled::new(1, Format::Avro, &inherits).expect_err("601 bytes");
    assert!(
        e.contains("/fields/0/type/name") && e.contains("601 bytes"),
        "{e}"
    );
    // A dotted alias is a full name of its own (review 20 of #37: it was joined to the
    // namespace, and a valid schema was refused for a 608-byte name it does not have);
    // undotted, it is in the namespace.
    let alias = |alias: &str| {
        format!(
            r#"{{"type":"record","name":"R","namespace":"{}","aliases":["{alias}"],"fields":[]}}"#,
            "n".repeat(400)
        )
    };
    let full = format!("other.{}", "a".repeat(200));
    assert!(Compiled::new(1, Format::Avro, &alias(&full)).is_ok());
    let e = Compiled::new(1, Format::Avro, &alias(&"a".repeat(200))).expect_err("601 bytes");
    assert!(e.contains("/aliases") && e.contains("601 bytes"), "{e}");
}

/// Review 17 of #37 showed apache-avro keeps a copy of a named type per alias; measured here,
/// 256 aliases (the most a schema may name) on a record of 10,000 fields (300 KB) took 1 GB.
/// Aliases times the nodes of the types they name are bounded before the library reads them.
#[test]
fn aliases_of_a_large_record_are_refused_before_each_copies_it() {
    let record = |aliases: usize, fields: usize| {
        let al: Vec<String> = (0..aliases).map(|i| format!("\"a{i}\"")).collect();
        let fs: Vec<String> = (0..fields)
            .map(|i| format!(r#"{{"name":"f{i}","type":"int"}}"#))
            .collect();
        format!(
            r#"{{"type":"record","name":"R","namespace":"com.example","aliases":[{}],"fields":[{}]}}"#,
            al.join(","),
            fs.join(",")
        )
    };
    let text = record(256, 10_000);
    let (compiled, used) = compile_usage(Format::Avro, &text);
    let e = compiled.expect_err("256 copies of 10,000 fields");
    assert!(e.contains("aliases would copy"), "{e}");
    assert!(
        used.peak < 64 << 20,
        "refused after {used:?} for a {}-byte schema",
        text.len()
    );
    // A few aliases on a large record, or many on a small one, compile.
    assert!(Compiled::new(1, Format::Avro, &record(3, 10_000)).is_ok());
    assert!(Compiled::new(1, Format::Avro, &record(256, 100)).is_ok());
}

/// Review 18 of #37: `reserved 5,5,5,…` beside fields numbered 5 made the pool's builder report
/// one error per field and range, all held until the compile failed: 6 × 10⁶ errors from 34 KB
/// took 2.8 GiB. Overlapping ranges, and a number inside one, are refused before the pool.
#[test]
fn reserved_ranges_times_fields_are_refused_before_the_pool_counts_them() {
    let schema = |enumeration: bool| {
        let reserved = vec!["5"; 400].join(",");
        let members: Vec<String> = (0..400)
            .map(|i| {
                if enumeration {
                    format!("a{i} = 5;")
                } else {
                    format!("optional int32 a{i} = 5;")
                }
            })
            .collect();
        if enumeration {
            format!(
                "syntax = \"proto2\"; message M {{ optional int32 x = 1; }} enum E {{ option allow_alias = true; reserved {reserved}; {} }}",
                members.join(" ")
            )
        } else {
            format!(
                "syntax = \"proto2\"; message M {{ reserved {reserved}; {} }}",
                members.join(" ")
            )
        }
    };
    for enumeration in [false, true] {
        let text = schema(enumeration);
        let (compiled, used) = compile_usage(Format::Protobuf, &text);
        let e = compiled.expect_err("160,000 conflicts");
        assert!(e.contains("overlaps"), "{e}");
        assert!(
            used.allocated < 256 * text.len() as u64 + (1 << 20),
            "refused after {used:?} for a {}-byte schema",
            text.len()
        );
    }
    // One range, fields inside it: refused at the first, named.
    let inside = "syntax = \"proto3\"; message M { reserved 2 to 9; int32 a = 1; int32 b = 4; }";
    let e = Compiled::new(1, Format::Protobuf, inside).expect_err("b is reserved");
    assert!(e.contains("field `b` = 4"), "{e}");
    // Ranges apart, fields outside them, extensions beside: compiles.
    let ok = "syntax = \"proto2\"; message M { reserved 2, 15, 9 to 11; extensions 100 to max; optional int32 a = 1; optional int32 c = 12; } enum E { reserved 3 to 4; A = 0; B = 5; }";
    let compiled = Compiled::new(1, Format::Protobuf, ok);
    assert!(compiled.is_ok(), "{:?}", compiled.err());
}

/// Review 26 of #37: a 920 KB list of zeros read into `google.protobuf.Value` took 360 MB (each
/// value a message of its own, ~780 bytes), though the parsed-tree bound said 15 MB. Under
/// Google's JSON types each value is counted as such a message, and the record is refused
/// before it is read; the same list as a plain repeated field is read.
#[test]
fn a_protobuf_value_under_googles_json_types_is_counted_as_a_message_each() {
    let zeros = format!("{{\"v\":[{}]}}", vec!["0"; 100_000].join(","));
    let schema = |field: &str| {
        format!(
            "syntax = \"proto3\";\nimport \"google/protobuf/struct.proto\";\nmessage M {{ {field} v = 1; }}"
        )
    };
    let dynamic =
        Compiled::new(1, Format::Protobuf, &schema("google.protobuf.Value")).expect("compiles");
    let (refused, used) = crate::heap::usage(|| dynamic.encode(zeros.as_bytes(), usize::MAX));
    let e = refused.expect_err("refused");
    assert!(e.too_costly, "{}", e.message);
    let peak = used.map_or(0, |u| u.peak);
    assert!(
        peak < 8 * 1024 * 1024,
        "refused before it was read: {peak} bytes"
    );
    // Through `Any`, which may hold a `ListValue` (review 27).
    let any = format!(
        "{{\"v\":{{\"@type\":\"type.googleapis.com/google.protobuf.ListValue\",\"value\":[{}]}}}}",
        vec!["0"; 100_000].join(",")
    );
    let through = Compiled::new(
        1,
        Format::Protobuf,
        &schema("google.protobuf.Any").replace("struct.proto", "any.proto"),
    )
    .expect("compiles");
    let (refused, used) = crate::heap::usage(|| through.encode(any.as_bytes(), usize::MAX));
    assert!(refused.expect_err("refused").too_costly);
    let peak = used.map_or(0, |u| u.peak);
    assert!(
        peak < 8 * 1024 * 1024,
        "refused before it was read: {peak} bytes"
    );
    let plain = Compiled::new(1, Format::Protobuf, &schema("repeated int32")).expect("compiles");
    assert!(plain.encode(zeros.as_bytes(), usize::MAX).is_ok());
}
