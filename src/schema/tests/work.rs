//! The schema step's work a refused or inadmissible request makes it do: at most what its
//! bounds say (reviews 7, 9 and 10 of #37).

use super::super::*;

/// Tenant `a`'s check of `data` (kept as JSON), asking `still` whether its request could
/// still be admitted when the check starts on a schema thread.
pub(super) async fn check_admitting(
    schemas: &Schemas,
    schema: &Arc<Compiled>,
    data: &[u8],
    still: impl Fn() -> bool + Send + Sync + 'static,
) -> Result<(Option<Vec<u8>>, std::time::Duration), Failure> {
    let mut lookups = Lookups::per_request("a").with_admission(Arc::new(still));
    schemas
        .write("a", schema, data, Side::Value, 1 << 20, true, &mut lookups)
        .await
}

/// Review 7 of #37: a tenant's requests queue for its share of the schema threads, and those
/// its earlier requests' admission left no budget for were still parsed and checked there (16
/// queued 918 KB records, 14 then refused by admission: RSS 21 -> 196 MiB). A check asks
/// whether its request could still be admitted when it starts, and does nothing if not.
#[tokio::test]
async fn a_check_whose_request_can_no_longer_be_admitted_does_nothing() {
    let schemas = Arc::new(
        Schemas::new(&SchemaRegistryConfig::default(), &[], (1 << 20, 1 << 20)).expect("schemas"),
    );
    let text = r#"{"type":"array","items":{"type":"object"}}"#;
    let schema = Arc::new(
        schemas
            .compile_for("a", Format::Json, text, "the schema")
            .await
            .expect("compiles"),
    );
    // Past the inline size: checked on the pool.
    let data = format!("[{}{{}}]", "{},".repeat(5_000)).into_bytes();
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let write = |admissible: bool| {
        let (schemas, schema, data, asked) =
            (schemas.clone(), schema.clone(), data.clone(), asked.clone());
        async move {
            let still = move || {
                asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                admissible
            };
            check_admitting(&schemas, &schema, &data, still).await
        }
    };
    match write(false).await {
        Err(Failure {
            error: SchemaError::Inadmissible,
            ..
        }) => {}
        other => panic!("not admissible: not checked, {other:?}"),
    }
    assert!(write(true).await.is_ok());
    assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 2);
}

/// Review 9 of #37: a JSON Schema check parses the value into a tree many times its text (a
/// 918 KB array of one-key objects is ~90 MB), whatever the schema. A value whose tree would
/// pass `MAX_PARSE_MEMORY` is refused before any codec reads it; one of plain numbers of the
/// same size still fits.
#[test]
fn a_value_whose_parsed_tree_would_take_too_much_memory_is_refused_before_it_is_read() {
    let objects = format!("[{}{{\"a\":0}}]", "{\"a\":0},".repeat(120_000));
    let numbers = format!("[{}0]", "1,".repeat(450_000));
    for (format, schema) in [
        (Format::Json, r#"{"type":"array"}"#),
        (
            Format::Avro,
            r#"{"type":"array","items":{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}}"#,
        ),
    ] {
        let compiled = Compiled::new(1, format, schema).expect("schema");
        let e = compiled
            .encode(objects.as_bytes(), usize::MAX)
            .expect_err("too much");
        assert!(e.too_costly, "{format:?}: {}", e.message);
        assert!(e.message.contains("MiB of memory"), "{}", e.message);
    }
    let json = Compiled::new(1, Format::Json, r#"{"type":"array"}"#).expect("schema");
    let e = json
        .check(objects.as_bytes())
        .expect_err("validate mode too");
    assert!(e.too_costly, "{}", e.message);
    assert!(json.check(numbers.as_bytes()).is_ok());
}

/// Reviews 10 and 11 of #37: work no budget pays for was charged to no one. A tenant's
/// compiles (failed or not) and its failed checks spend its `tenant_unpaid_work_ms_*` bucket;
/// spent, its next compile or check is refused before it runs (429 `schema_busy`), on a stepped
/// clock until paid off; another tenant's is its own.
#[tokio::test]
async fn compiles_and_refused_checks_spend_the_tenants_unpaid_work() {
    let config = SchemaRegistryConfig {
        tenant_unpaid_work_ms_per_sec: 1,
        tenant_unpaid_work_ms_burst: 1,
        ..SchemaRegistryConfig::default()
    };
    let mut schemas = Schemas::new(&config, &[], (1 << 20, 1 << 20)).expect("schemas");
    let clock = Arc::new(crate::budget::ManualClock::new());
    schemas.set_clock(clock.clone());
    let compile = |tenant: &'static str, text: &'static str| {
        let schemas = &schemas;
        async move {
            schemas
                .compile_for(tenant, Format::Json, text, "the schema")
                .await
        }
    };
    let busy = |r: &Result<Compiled, SchemaError>| matches!(r, Err(SchemaError::Busy(..)));
    let schema = Arc::new(
        compile("setup", r#"{"type": "array"}"#)
            .await
            .expect("compiles")
            .with_id(1),
    );
    // A schema that does not compile, and one that does: each charged (a millisecond at
    // least), so the tenant's next compile is refused before it runs.
    let r = compile("a", r#"{"type": 7}"#).await;
    assert!(matches!(r, Err(SchemaError::Invalid(_))), "{r:?}");
    assert!(busy(&compile("a", r#"{"type": "object"}"#).await));
    assert!(compile("c", r#"{"type": "string"}"#).await.is_ok());
    assert!(busy(&compile("c", r#"{"type": "number"}"#).await));
    // A check that fails spends b's: its next check is refused before it runs.
    let check = |data: &'static [u8]| {
        let (schemas, schema) = (&schemas, schema.clone());
        async move {
            let mut lookups = Lookups::per_request("b");
            let r = schemas
                .write("b", &schema, data, Side::Value, 1 << 20, true, &mut lookups)
                .await;
            r.map_err(|f| f.error)
        }
    };
    let r = check(b"{}").await;
    assert!(matches!(r, Err(SchemaError::Violation(_))), "{r:?}");
    let r = check(b"[]").await;
    assert!(matches!(r, Err(SchemaError::Busy(..))), "{r:?}");
    // Paid off on the clock: a tenant's millisecond is a second at 1 ms/s.
    clock.advance_ms(2_000);
    assert!(compile("a", r#"{"type": "object"}"#).await.is_ok());
    let r = check(b"[]").await;
    assert!(r.is_ok(), "{r:?}");
}

/// Review 19 of #37: a failed compile is remembered, shared by every tenant, with its error;
/// apache-avro's message quoted a 260 KB `logicalType` array as 1.4 MB, so 256 remembered
/// failures held ~360 MB. The error is cut before it is kept.
#[tokio::test]
async fn a_remembered_failure_keeps_an_error_of_bounded_size() {
    let schemas =
        Schemas::new(&SchemaRegistryConfig::default(), &[], (1 << 20, 1 << 20)).expect("schemas");
    let zeros = vec!["0"; 60_000].join(",");
    let text = format!(r#"{{"type":"int","logicalType":[{zeros}]}}"#);
    let e = schemas
        .compile_for("a", Format::Avro, &text, "the schema")
        .await
        .expect_err("not a logical type");
    let SchemaError::Invalid(detail) = &e else {
        panic!("{e:?}");
    };
    assert!(
        detail.len() <= crate::quote::MAX_DETAIL + 64,
        "{} bytes kept for a {}-byte schema",
        detail.len(),
        text.len()
    );
    // Remembered as it was answered: the same text is refused again without a compile.
    let again = schemas
        .compile_for("a", Format::Avro, &text, "the schema")
        .await
        .expect_err("remembered");
    assert!(matches!(again, SchemaError::Invalid(d) if d == *detail));
}

/// Review 19 of #37: an Avro check on the request worker was counted by the value's length,
/// but a schema's defaults make a short value long to walk — records `{}` whose defaults
/// expand to ~8,000 steps each ran inline, ~9.5 s of a request worker for 10,000 of them. The
/// inline walk now stops at the request's share of inline work, counted in steps, and the
/// record goes to the pool; a record that is cheap to walk still runs inline.
#[tokio::test]
async fn an_avro_record_expanding_defaults_past_the_inline_share_is_written_on_the_pool() {
    let config = SchemaRegistryConfig {
        workers: 1,
        tenant_workers: 1,
        wait_ms: 100,
        ..SchemaRegistryConfig::default()
    };
    let schemas = Arc::new(Schemas::new(&config, &[], (1 << 20, 1 << 20)).expect("schemas"));
    // `{}` visits 1 + 5 × (1 + 10 × (1 + 10 × (1 + 20))) = 10,556 values by default: more
    // than a request worker's share (2,500 steps), less than the value's own bound (16,416).
    let ints = (0..20)
        .map(|i| format!(r#"{{"name":"i{i}","type":"int","default":{i}}}"#))
        .collect::<Vec<_>>()
        .join(",");
    let fields = |ty: &str, n: usize| {
        (0..n)
            .map(|i| format!(r#"{{"name":"f{i}","type":"{ty}","default":{{}}}}"#))
            .collect::<Vec<_>>()
            .join(",")
    };
    let text = format!(
        r#"{{"type":"record","name":"L3","fields":[{{"name":"first","default":{{}},"type":{{"type":"record","name":"L2","fields":[{{"name":"first","default":{{}},"type":{{"type":"record","name":"L1","fields":[{{"name":"first","default":{{}},"type":{{"type":"record","name":"L0","fields":[{ints}]}}}},{}]}}}},{}]}}}},{}]}}"#,
        fields("L0", 9),
        fields("L1", 9),
        fields("L2", 4),
    );
    let compile = |text: String| {
        let schemas = schemas.clone();
        async move {
            Arc::new(
                schemas
                    .compile_for("a", Format::Avro, &text, "the schema")
                    .await
                    .expect("compiles"),
            )
        }
    };
    let (expanding, plain) = (
        compile(text).await,
        compile(r#"{"type":"record","name":"P","fields":[{"name":"a","type":"int"}]}"#.into())
            .await,
    );
    let write = |schema: Arc<Compiled>, data: &'static [u8], mut allowance: Lookups| {
        let schemas = schemas.clone();
        async move {
            let r = schemas
                .write(
                    "a",
                    &schema,
                    data,
                    Side::Value,
                    1 << 20,
                    false,
                    &mut allowance,
                )
                .await;
            (r.map(|(written, _)| written), allowance.inline_left())
        }
    };

    let (release, blocker) = super::hold_share(&schemas, "a").await;
    let (r, left) = write(expanding.clone(), b"{}", Lookups::per_request("a")).await;
    assert!(
        matches!(
            r,
            Err(Failure {
                error: SchemaError::Busy(..),
                ..
            })
        ),
        "past the inline share, the pool: {r:?}"
    );
    assert_eq!(
        left,
        super::super::lookups::INLINE_WORK_PER_REQUEST - super::super::lookups::INLINE_WORK,
        "the inline walk's steps are the request's"
    );
    let (r, left) = write(plain.clone(), br#"{"a":1}"#, Lookups::per_request("a")).await;
    assert!(r.is_ok(), "a cheap record is written inline: {r:?}");
    assert!(
        left > super::super::lookups::INLINE_WORK_PER_REQUEST - 1_000,
        "{left}"
    );
    release.send(()).expect("held");
    assert!(blocker.await.expect("joined").is_ok());

    let (r, _) = write(expanding.clone(), b"{}", Lookups::per_request("a")).await;
    let written = r.expect("written on the pool").expect("a payload");
    assert_eq!(
        written,
        expanding.encode(b"{}", 1 << 20).expect("by itself")
    );
}
