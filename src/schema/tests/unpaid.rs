//! What a tenant pays for the schema step's work: charged where it ran, whoever waits for it,
//! and bounded while it runs (reviews 20 and 21 of #37).

use super::super::*;

/// The schema step with `config`, its tenants allowed 1 ms of unpaid work at once and 1 ms a
/// second, on a clock that stands still.
fn one_ms_unpaid(config: SchemaRegistryConfig) -> Arc<Schemas> {
    let config = SchemaRegistryConfig {
        tenant_unpaid_work_ms_per_sec: 1,
        tenant_unpaid_work_ms_burst: 1,
        ..config
    };
    let mut schemas = Schemas::new(&config, &[], (1 << 20, 1 << 20)).expect("schemas");
    schemas.set_clock(Arc::new(crate::budget::ManualClock::new()));
    Arc::new(schemas)
}

/// `{"type":"array"}` compiled, and a value of it past the inline size: checked on the pool,
/// and it passes.
async fn array_on_the_pool(schemas: &Schemas) -> (Arc<Compiled>, Vec<u8>) {
    let schema = schemas
        .compile_for("setup", Format::Json, r#"{"type":"array"}"#, "the schema")
        .await
        .expect("compiles");
    let data = format!("[{}0]", "0,".repeat(5_000)).into_bytes();
    (Arc::new(schema), data)
}

/// Review 20 of #37: a check or compile that had started on the pool was charged only when
/// its answer was awaited, so a client closing its connection mid-check (25 checks of ~1 s)
/// was charged nothing. The charge is made on the schema thread: a passed check's debt
/// charges itself when its answer is dropped unread, and a compile is charged as it ends.
#[tokio::test]
async fn work_whose_caller_left_is_charged_to_its_tenant() {
    let schemas = one_ms_unpaid(SchemaRegistryConfig::default());
    // It passes, owed by its record, which never comes to be admitted: its caller left.
    let (schema, data) = array_on_the_pool(&schemas).await;
    // The check starts (its admission is asked on the schema thread) and waits there until
    // its caller has gone.
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let hook = std::sync::Mutex::new(Some((started, wait)));
    let check = {
        let schemas = schemas.clone();
        let still = move || {
            if let Some((started, wait)) = hook.lock().expect("lock").take() {
                let _ = started.send(());
                let _ = wait.recv();
            }
            true
        };
        tokio::spawn(async move {
            super::work::check_admitting(&schemas, &schema, &data, still)
                .await
                .map(drop)
        })
    };
    running.await.expect("the check started");
    check.abort();
    assert!(check.await.expect_err("aborted").is_cancelled());
    go.send(()).expect("the check waits");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while schemas.pool.load() != (0, 0) {
        assert!(std::time::Instant::now() < until, "the check never ended");
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    // A compile (50 patterns: tens of milliseconds) whose caller leaves once it runs.
    let text = super::pattern_schema(50, 200);
    let compile = {
        let schemas = schemas.clone();
        tokio::spawn(async move {
            schemas
                .compile_for("b", Format::Json, &text, "the schema")
                .await
                .map(drop)
        })
    };
    while schemas.pool.load().1 == 0 && !compile.is_finished() {
        assert!(
            std::time::Instant::now() < until,
            "the compile never started"
        );
        tokio::task::yield_now().await;
    }
    compile.abort();
    // Both jobs run to their end on the pool, and are charged there.
    while schemas.pool.load() != (0, 0) {
        assert!(std::time::Instant::now() < until, "the pool never emptied");
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    for tenant in ["a", "b"] {
        assert!(
            schemas
                .unpaid_work
                .may_check(&*schemas.clock, tenant)
                .is_err(),
            "{tenant}'s work was charged"
        );
    }
}

/// Review 20 of #37: a request's passed checks are owed until it is admitted, and one refused
/// at its last record (10,000 records of ~1 ms each) had a schema thread for 10 s before its
/// tenant paid anything. A request may owe at most what its tenant may spend unpaid at once;
/// past it its next record is refused before its check runs. Another request of the tenant's
/// is not held by what this one owes.
#[tokio::test]
async fn a_request_owes_at_most_its_tenants_unpaid_burst_before_it_is_admitted() {
    let schemas = one_ms_unpaid(SchemaRegistryConfig::default());
    // Each check runs on the pool, passes, and owes what it took.
    let (schema, data) = array_on_the_pool(&schemas).await;
    let mut request = Lookups::per_request("a");
    let mut passed = 0;
    let refusal = loop {
        match schemas
            .write(
                "a",
                &schema,
                &data,
                Side::Value,
                1 << 20,
                true,
                &mut request,
            )
            .await
        {
            Ok(_) => passed += 1,
            Err(f) => break f.error,
        }
        assert!(passed < 100_000, "never refused");
    };
    assert!(
        matches!(&refusal, SchemaError::TooCostly(d) if d.contains("fewer records per request")),
        "{refusal:?}"
    );
    assert!(request.owed() >= std::time::Duration::from_millis(1));
    assert!(passed >= 1, "the first checks pass");
    // While it owes them, another request of the tenant's is checked: its passed checks are
    // paid when it is admitted, and counting them against the tenant's other requests made
    // concurrent valid requests refuse each other (review 22 of #37: 16 of 16 refused).
    let mut next = Lookups::per_request("a");
    assert!(schemas
        .write("a", &schema, &data, Side::Value, 1 << 20, true, &mut next)
        .await
        .is_ok());
    drop(request);
}

/// Review 21 of #37: compiles queued before their tenant's unpaid time ran out all ran when
/// their turn came (40 at once: 2.4 s against a 1 s burst). A compile asks again at its turn.
#[tokio::test]
async fn a_queued_compile_asks_for_its_tenants_time_again_when_its_turn_comes() {
    let schemas = one_ms_unpaid(SchemaRegistryConfig {
        workers: 1,
        tenant_workers: 1,
        ..SchemaRegistryConfig::default()
    });
    let (release, blocker) = super::hold_share(&schemas, "a").await;
    let compile = |text: &'static str| {
        let schemas = schemas.clone();
        tokio::spawn(async move {
            schemas
                .compile_for("a", Format::Json, text, "the schema")
                .await
                .map(drop)
        })
    };
    // Queued one after the other, in that order.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let queued = |n: usize| {
        let schemas = schemas.clone();
        async move {
            while schemas.pool.load().0 < n {
                assert!(std::time::Instant::now() < until, "never queued");
                tokio::task::yield_now().await;
            }
        }
    };
    let first = compile(r#"{"type":"object"}"#);
    queued(1).await;
    let second = compile(r#"{"type":"string"}"#);
    queued(2).await;
    release.send(()).expect("held");
    assert!(blocker.await.expect("joined").is_ok());
    assert!(first.await.expect("joined").is_ok(), "the first had time");
    let second = second.await.expect("joined");
    assert!(
        matches!(second, Err(SchemaError::Busy(..))),
        "the first spent it: {second:?}"
    );
}

/// Review 21 of #37: a check begun with a millisecond of its tenant's unpaid time left ran its
/// whole second, so tenants each within their bound held the schema threads in turns of a
/// second and another tenant's records waited seconds. A check runs at most what its record
/// pays for and its tenant can pay beyond that, then is refused for a while (429).
#[tokio::test]
async fn a_check_runs_no_longer_than_its_tenant_can_pay() {
    let unpaid_only = SchemaRegistryConfig {
        paid_check_us: 0,
        paid_check_us_per_kib: 0,
        ..SchemaRegistryConfig::default()
    };
    let schemas = one_ms_unpaid(unpaid_only.clone());
    // `{}` walks 1 + 80 × (1 + 100) values by default: milliseconds, far past what the tenant
    // can pay (1 ms); padded past the inline size, so it runs on the pool.
    let nulls = (0..100)
        .map(|i| format!(r#"{{"name":"a{i}","type":"null","default":null}}"#))
        .collect::<Vec<_>>()
        .join(",");
    let fields = (0..80)
        .map(|i| match i {
            0 => format!(
                r#"{{"name":"b0","default":{{}},"type":{{"type":"record","name":"A","fields":[{nulls}]}}}}"#
            ),
            _ => format!(r#"{{"name":"b{i}","type":"A","default":{{}}}}"#),
        })
        .collect::<Vec<_>>()
        .join(",");
    let text = format!(r#"{{"type":"record","name":"B","fields":[{fields}]}}"#);
    let schema = Arc::new(Compiled::new(1, Format::Avro, &text).expect("schema"));
    let data = format!("{{{}}}", " ".repeat(5_000)).into_bytes();
    let mut lookups = Lookups::per_request("a");
    let r = schemas
        .write(
            "a",
            &schema,
            &data,
            Side::Value,
            1 << 20,
            false,
            &mut lookups,
        )
        .await;
    assert!(
        matches!(
            r,
            Err(Failure {
                error: SchemaError::Busy(..),
                ..
            })
        ),
        "stopped where its tenant could pay no more: {r:?}"
    );
    // Given the time, the same check passes.
    let roomy = SchemaRegistryConfig {
        tenant_unpaid_work_ms_per_sec: 1,
        tenant_unpaid_work_ms_burst: 1_000,
        ..unpaid_only
    };
    let schemas = Schemas::new(&roomy, &[], (1 << 20, 1 << 20)).expect("schemas");
    let mut lookups = Lookups::per_request("a");
    assert!(schemas
        .write(
            "a",
            &schema,
            &data,
            Side::Value,
            1 << 20,
            false,
            &mut lookups
        )
        .await
        .is_ok());
}
