use super::compiled::within_bounds;
use super::resolve::own_subject;
use super::*;

#[test]
fn schema_shapes_that_would_overflow_a_parser_are_refused_before_it_runs() {
    // A Protobuf option value nested 1,500 deep (9 KB) overflowed a worker's stack.
    let deep = format!(
        "syntax = \"proto2\"; import \"google/protobuf/descriptor.proto\";\n\
         message M {{ optional M a = 1; }}\n\
         extend google.protobuf.FileOptions {{ optional M foo = 50000; }}\n\
         option (foo) = {}{};",
        "{ a ".repeat(1500),
        "}".repeat(1500)
    );
    let e = within_bounds(Format::Protobuf, &deep, 1 << 20).expect_err("too deep");
    assert!(e.contains("nests"), "{e}");
    assert!(Compiled::new(1, Format::Protobuf, &deep).is_err());
    // A 20,000-long $ref chain overflowed the JSON Schema validator.
    let defs: Vec<String> = (0..20_000)
        .map(|i| format!("\"a{i}\":{{\"$ref\":\"#/$defs/a{}\"}}", i + 1))
        .collect();
    let chain = format!(
        "{{\"$ref\":\"#/$defs/a0\",\"$defs\":{{{}}}}}",
        defs.join(",")
    );
    let e = Compiled::new(1, Format::Json, &chain).expect_err("too many refs");
    assert!(e.contains("$refs"), "{e}");
    // Counted on the parsed JSON: a key spelled with escapes is the key.
    let escaped = chain.replace("\"$ref\"", "\"$r\\u0065f\"");
    assert!(escaped.contains("$r\\u0065f"));
    let e = Compiled::new(1, Format::Json, &escaped).expect_err("too many refs");
    assert!(e.contains("$refs"), "{e}");
    let e = within_bounds(Format::Avro, &"x".repeat(2048), 1024).expect_err("too large");
    assert!(e.contains("max_schema_bytes"), "{e}");
    // Brackets inside strings do not count.
    let quoted = format!("{{\"type\":\"string\",\"doc\":\"{}\"}}", "{[(".repeat(100));
    assert!(within_bounds(Format::Avro, &quoted, 1 << 20).is_ok());
    assert!(within_bounds(
        Format::Protobuf,
        "message M { string s = 1 [default = '{{{{']; }",
        1 << 20
    )
    .is_ok());
}

/// Review 17 of #37: 87,000 levels of an option value hidden between two `// "` lines (a scan
/// that took the comment's quote for a string counted none of them) took one compile ~680 s of
/// CPU. The scan reads comments as the Protobuf parser does.
#[test]
fn nesting_hidden_behind_a_quote_in_a_comment_is_counted() {
    let deep = |open: &str, close: &str| {
        format!(
            "syntax = \"proto2\"; import \"google/protobuf/descriptor.proto\";\n\
             message R {{ optional R r = 1; }}\n\
             extend google.protobuf.FileOptions {{ optional R foo = 50000; }}\n\
             {open}\n\
             option (foo) = {}{};\n\
             {close}\n",
            "{ r ".repeat(200),
            "}".repeat(200)
        )
    };
    for (open, close) in [
        ("// \"", "// \""),
        ("/* \" */", "/* \" */"),
        ("// '", "// '"),
    ] {
        let text = deep(open, close);
        let e = within_bounds(Format::Protobuf, &text, 1 << 20).expect_err(open);
        assert!(e.contains("nests 20"), "{open}: {e}");
        assert!(Compiled::new(1, Format::Protobuf, &text).is_err());
    }
    // Brackets inside comments do not count: the parser does not see them either.
    let commented = format!(
        "// {}\n/* {} */\nsyntax = \"proto3\"; message M {{ string s = 1; }}",
        "{".repeat(100),
        "(".repeat(100)
    );
    assert!(within_bounds(Format::Protobuf, &commented, 1 << 20).is_ok());
    let compiled = Compiled::new(1, Format::Protobuf, &commented);
    assert!(compiled.is_ok(), "{:?}", compiled.err());
}

/// Review 6 of #37: one v3 record naming a raw Avro schema with 20,000 record aliases (169 KB)
/// took the gateway to 23.9 GB and the kernel killed it (2,000 aliases: 348 MiB, kept). An
/// Avro schema names at most `MAX_AVRO_ALIASES`, refused before the library sees it.
#[test]
fn an_avro_schema_naming_thousands_of_aliases_is_refused_before_it_compiles() {
    let record = |n: usize| {
        let aliases: Vec<String> = (0..n).map(|i| format!("\"a{i}\"")).collect();
        format!(
            "{{\"type\":\"record\",\"name\":\"R\",\"aliases\":[{}],\"fields\":[{{\"name\":\"zz\",\"type\":\"int\"}}]}}",
            aliases.join(",")
        )
    };
    let e = Compiled::new(1, Format::Avro, &record(20_000)).expect_err("too many");
    assert!(e.contains("aliases"), "{e}");
    assert!(Compiled::new(1, Format::Avro, &record(compiled::MAX_AVRO_ALIASES)).is_ok());
    assert!(Compiled::new(1, Format::Avro, &record(3)).is_ok());
    // Review 17: the key spelled with an escape (`"\u0061liases"`) passed a count of the
    // text's literal key; 2,000 aliases under a 399-byte namespace took the process to 1.9
    // GiB. They are counted on the parsed JSON, before apache-avro reads them.
    let escaped = record(2_000).replace("\"aliases\"", "\"\\u0061liases\"");
    assert!(escaped.contains("u0061liases"));
    let (compiled, used) = crate::heap::usage(|| Compiled::new(1, Format::Avro, &escaped));
    let e = compiled.expect_err("too many, however spelled");
    assert!(e.contains("2000 aliases"), "{e}");
    let used = used.expect("the test binary counts");
    assert!(used.peak < 16 << 20, "refused after {used:?}");
}

#[test]
fn a_topic_owns_only_its_own_subjects_and_never_a_contracts() {
    let topic = |t: &str| Topic::parse(t).expect("topic");
    assert!(own_subject(&topic("orders"), "orders-value"));
    assert!(own_subject(&topic("orders"), "orders-key"));
    assert!(own_subject(&topic("orders"), "orders-shop.Order"));
    assert!(
        !own_subject(&topic("orders"), "orders-eu-value"),
        "topic orders-eu's"
    );
    assert!(!own_subject(&topic("orders"), "orders-"));
    assert!(!own_subject(&topic("orders"), "ordersx-value"));
    let contract = ContractConfig {
        topics: vec!["orders-eu".into()],
        format: Format::Json,
        mode: ContractMode::Validate,
        subject: None,
    };
    let config = SchemaRegistryConfig {
        url: Some("http://127.0.0.1:9".into()),
        ..SchemaRegistryConfig::default()
    };
    let schemas = Schemas::new(&config, &[contract], (1024, 1024)).expect("schemas");
    assert!(schemas.may_register(&topic("orders"), "orders-value"));
    assert!(
        !schemas.may_register(&topic("orders-eu"), "orders-eu-value"),
        "the contract's"
    );
    assert!(
        !schemas.may_register(&topic("orders"), "orders-eu-value"),
        "not orders' own"
    );
    assert!(schemas
        .may_name(&topic("orders"), "orders-eu-value")
        .is_err());
    assert!(schemas
        .may_name(&topic("orders"), "orders-value/../x")
        .is_err());
}

/// A float `enum` is compared element by element for every value it applies to: jsonschema
/// hashes only enums of strings (and binary-searches integers for an integer value). One
/// 1.1 MB record against such a schema was 46 s of CPU; it is refused before it runs now.
#[test]
fn an_enum_is_counted_by_its_size_unless_the_validator_hashes_it() {
    let floats: Vec<f64> = (0..20_000).map(|i| f64::from(i) + 0.5).collect();
    let schema = serde_json::json!({"type": "array", "items": {"enum": floats}});
    let s = json::JsonSchema::parse(&schema.to_string()).expect("schema");
    let value = serde_json::json!(vec![19_999.5; 100_000]);
    let started = std::time::Instant::now();
    let e = s.check(&value).expect_err("too costly");
    assert!(e.too_costly, "{}", e.message);
    assert!(e.message.contains("subschema checks"), "{}", e.message);
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // Integers are searched, but a float value scans them all: counted by size too.
    let ints: Vec<i64> = (0..20_000).collect();
    let s = json::JsonSchema::parse(&serde_json::json!({"items": {"enum": ints}}).to_string())
        .expect("schema");
    assert!(
        s.check(&serde_json::json!(vec![1.5; 100_000]))
            .expect_err("costly")
            .too_costly
    );
    // Strings are hashed: the same sizes are cheap, and checked.
    let strings: Vec<String> = (0..20_000).map(|i| format!("s{i}")).collect();
    let s = json::JsonSchema::parse(&serde_json::json!({"items": {"enum": strings}}).to_string())
        .expect("schema");
    assert!(s.check(&serde_json::json!(vec!["s19999"; 100_000])).is_ok());
    // A large const is compared node by node.
    let big: Vec<f64> = (0..5_000).map(f64::from).collect();
    let s = json::JsonSchema::parse(&serde_json::json!({"items": {"const": big}}).to_string())
        .expect("schema");
    assert!(
        s.check(&serde_json::json!(vec![[0.0]; 10_000]))
            .expect_err("costly")
            .too_costly
    );
}

fn pattern_schema(patterns: usize, repeat: usize) -> String {
    let props: serde_json::Map<String, serde_json::Value> = (0..patterns)
        .map(|j| {
            (
                format!("f{j}"),
                serde_json::json!({"type": "string", "pattern": format!("\\w{{{}}}", repeat + j)}),
            )
        })
        .collect();
    serde_json::json!({"type": "object", "properties": props}).to_string()
}

/// Regexes compile to thousands of times their text (`\w{2000}` is ~470 KB): their number and
/// each one's compiled size are bounded, and a schema's memory is what its compile kept.
#[test]
fn patterns_are_bounded_in_count_and_size_and_a_schema_by_its_measured_memory() {
    use compiled::{compile, CompileBounds};
    let bounds = CompileBounds {
        max_text: 1 << 20,
        max_memory: 16 << 20,
        json: json::JsonBounds::default(),
    };
    // The review's schema: 1,000 properties, each `\w{2000+j}` (47 KB; 500 MB compiled).
    let e = compile(Format::Json, &pattern_schema(1_000, 2_000), &bounds).expect_err("count");
    assert!(
        matches!(&e, CompileError::TooCostly(m) if m.contains("max_schema_patterns")),
        "{e}"
    );
    let e = compile(Format::Json, &pattern_schema(1, 5_000), &bounds).expect_err("size");
    assert!(e.to_string().contains("max_pattern_bytes"), "{e}");
    // A pattern the engine cannot take is told so, not only of the size.
    let backreference = r#"{"type": "string", "pattern": "(?<n>a)\\k<n>"}"#;
    let e = compile(Format::Json, backreference, &bounds).expect_err("backreference");
    assert!(e.to_string().contains("no backreferences"), "{e}");
    // Within both, the compile is measured: 50 regexes of `\w{200}` keep megabytes, far more
    // than the text times 32 the cache used to count.
    let text = pattern_schema(50, 200);
    let (_, memory) = compile(Format::Json, &text, &bounds).expect("within the bounds");
    assert!(
        memory > 100 * text.len(),
        "{memory} bytes from {}",
        text.len()
    );
    let tight = CompileBounds {
        max_memory: memory / 2,
        ..bounds
    };
    let e = compile(Format::Json, &text, &tight).expect_err("memory");
    assert!(
        matches!(&e, CompileError::TooCostly(m) if m.contains("max_schema_memory_bytes")),
        "{e}"
    );
}

/// A `type` error quoted the whole offending value: an 800 KB string made an 800 KB answer.
#[test]
fn an_error_quotes_at_most_a_few_hundred_bytes_of_the_value() {
    let s = json::JsonSchema::parse(r#"{"type":"integer"}"#).expect("schema");
    let e = s
        .check(&serde_json::json!("x".repeat(800_000)))
        .expect_err("a string");
    assert!(e.message.len() < 2 * MAX_QUOTE, "{} bytes", e.message.len());
    assert!(e.message.contains("is not of type"), "{}", e.message);
    let failure = Failure {
        side: Side::Value,
        error: SchemaError::Violation(Mismatch {
            too_costly: false,
            pointer: "/a".repeat(10_000),
            message: "é".repeat(10_000),
        }),
    };
    assert!(failure.detail().len() < crate::quote::MAX_DETAIL + 64);
}

#[test]
fn registrations_are_charged_to_the_tenant() {
    let config = SchemaRegistryConfig {
        url: Some("http://127.0.0.1:9".into()),
        tenant_registrations_per_sec: 1,
        tenant_registrations_burst: 2,
        ..SchemaRegistryConfig::default()
    };
    let mut schemas = Schemas::new(&config, &[], (1024, 1024)).expect("schemas");
    let clock = Arc::new(crate::budget::ManualClock::new());
    schemas.set_clock(clock.clone());
    assert!(schemas.take_registrations("a", 1).is_ok());
    assert!(schemas.take_registrations("a", 1).is_ok());
    match schemas.take_registrations("a", 1) {
        Err(SchemaError::Busy(wait, detail)) => {
            assert!(
                wait <= Duration::from_secs(1) && !wait.is_zero(),
                "{wait:?}"
            );
            assert!(detail.contains("tenant_registrations_per_sec"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        schemas.take_registrations("b", 1).is_ok(),
        "another tenant's own"
    );
    clock.advance_ms(1_000);
    assert!(schemas.take_registrations("a", 1).is_ok());
}

/// A review of #37: refused requests naming unknown ids made 174 registry calls a second, each
/// request within its own 16. Each call is also one of its tenant's (a bucket per tenant, on
/// a clock the test steps); another tenant's calls are its own.
#[test]
fn registry_lookups_are_charged_to_their_tenant() {
    let config = SchemaRegistryConfig {
        tenant_lookups_per_sec: 1,
        tenant_lookups_burst: 3,
        ..SchemaRegistryConfig::default()
    };
    let mut schemas = Schemas::new(&config, &[], (1024, 1024)).expect("schemas");
    let clock = Arc::new(crate::budget::ManualClock::new());
    schemas.set_clock(clock.clone());
    for _ in 0..3 {
        // A new request each time: its own allowance is never what refuses.
        assert!(schemas.take_lookup(&mut Lookups::per_request("a")).is_ok());
    }
    match schemas.take_lookup(&mut Lookups::per_request("a")) {
        Err(SchemaError::Busy(wait, detail)) => {
            assert!(
                wait <= Duration::from_secs(1) && !wait.is_zero(),
                "{wait:?}"
            );
            assert!(detail.contains("tenant_lookups_per_sec"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert!(schemas.take_lookup(&mut Lookups::per_request("b")).is_ok());
    clock.advance_ms(1_000);
    assert!(schemas.take_lookup(&mut Lookups::per_request("a")).is_ok());
}

/// Review 4 of #37: the inline check's allowance was per record, so a request of a thousand
/// records, each just cheap enough to check on the request worker, ran them all there. A
/// request's inline work is bounded: past it, its records go to the pool, within the tenant's
/// share — here held by another job of the tenant's, so they wait their turn and are refused
/// `schema_busy` past `wait_ms`, while the request worker stays free.
#[tokio::test]
async fn a_requests_inline_checks_are_bounded_and_the_rest_go_to_the_pool() {
    let config = SchemaRegistryConfig {
        workers: 1,
        tenant_workers: 1,
        wait_ms: 200,
        ..SchemaRegistryConfig::default()
    };
    let schemas = Arc::new(Schemas::new(&config, &[], (1 << 20, 1 << 20)).expect("schemas"));
    let text = r#"{"type":"object","properties":{"s":{"type":"string","maxLength":5000}}}"#;
    let schema = Arc::new(
        schemas
            .compile_for("a", Format::Json, text, "the schema")
            .await
            .expect("compiles"),
    );
    let data = format!(r#"{{"s":"{}"}}"#, "x".repeat(3_000)).into_bytes();
    let work = schema
        .work_bound(&data)
        .expect("a JSON Schema check is bounded");
    assert!(
        work <= super::lookups::INLINE_WORK,
        "one record is cheap: {work}"
    );
    let inline = usize::try_from(super::lookups::INLINE_WORK_PER_REQUEST / work).expect("fits");
    assert!(inline >= 2, "{work}");

    let (release, blocker) = hold_share(&schemas, "a").await;
    let write = |allowance: &mut Lookups| {
        let (schemas, schema, data) = (schemas.clone(), schema.clone(), data.clone());
        let mut taken = std::mem::replace(allowance, Lookups::none());
        async move {
            let r = schemas
                .write("a", &schema, &data, Side::Value, 1 << 20, true, &mut taken)
                .await;
            (r, taken)
        }
    };
    let mut allowance = Lookups::per_request("a");
    for i in 0..inline {
        let (r, back) = write(&mut allowance).await;
        allowance = back;
        assert!(r.is_ok(), "record {i} is checked inline: {r:?}");
    }
    let (r, back) = write(&mut allowance).await;
    match r {
        Err(Failure {
            error: SchemaError::Busy(..),
            ..
        }) => {}
        other => panic!("past the request's inline work, the pool: {other:?}"),
    }
    // A new request has its own allowance.
    let (r, _) = write(&mut Lookups::per_request("a")).await;
    assert!(r.is_ok(), "{r:?}");
    drop(back);
    release.send(()).expect("held");
    assert!(blocker.await.expect("joined").is_ok());
}

/// Review 5 of #37: the compiled-schema cache evicted oldest-first over every tenant, so a
/// tenant naming a dozen costly schemas in refused requests evicted everyone else's (51 % of
/// a victim's requests then waited on the registry and were refused `schema_busy`). Over a
/// bound, the tenant holding the largest share loses its own oldest.
#[tokio::test]
async fn a_tenant_filling_the_schema_cache_evicts_its_own_schemas_not_others() {
    let config = SchemaRegistryConfig {
        cache_entries: 10,
        ..SchemaRegistryConfig::default()
    };
    let schemas = Schemas::new(&config, &[], (1 << 20, 1 << 20)).expect("schemas");
    let compiled = schemas
        .compile_for(
            "victim",
            Format::Json,
            r#"{"type":"integer"}"#,
            "the schema",
        )
        .await
        .expect("compiles");
    for id in 1..=3 {
        schemas.keep("victim", Arc::new(compiled.with_id(id)));
    }
    for id in 100..=140 {
        schemas.keep("attacker", Arc::new(compiled.with_id(id)));
    }
    let cache = schemas.cache.lock();
    assert_eq!(cache.by_id.len(), 10);
    for id in 1..=3 {
        assert!(
            cache.by_id.contains_key(&id),
            "the victim's schema {id} was evicted"
        );
    }
    // The attacker keeps its newest.
    assert!(cache.by_id.contains_key(&140) && !cache.by_id.contains_key(&100));
    assert_eq!(cache.held.get("attacker").map(|h| h.1), Some(7));
}

/// The schema step's own bounds on refused and inadmissible work (#37's later reviews).
/// `tenant`'s one share of the pool (`tenant_workers` 1), held until `release` sends; the
/// task ends when it is released.
async fn hold_share(
    schemas: &Arc<Schemas>,
    tenant: &'static str,
) -> (
    std::sync::mpsc::Sender<()>,
    tokio::task::JoinHandle<Result<(), pool::PoolError>>,
) {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let blocker = {
        let schemas = schemas.clone();
        tokio::spawn(async move {
            schemas
                .pool
                .run(tenant, move || {
                    let _ = started.send(());
                    let _ = held.recv();
                })
                .await
        })
    };
    running.await.expect("the tenant's share is held");
    (release, blocker)
}

mod names;
mod unpaid;
mod work;
