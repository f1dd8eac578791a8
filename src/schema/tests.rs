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
    let e = within_bounds(Format::Json, &chain, 1 << 20).expect_err("too many refs");
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
