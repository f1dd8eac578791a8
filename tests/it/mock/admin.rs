//! The admin API: live tenant administration, key issuance and revocation, persistence across
//! restarts, refusal of a corrupt state file, and every 401/422 path.

use crate::common::*;
use floodgate::config::Config;
use reqwest::Method;
use serde_json::json;

/// A gateway on the mock cluster with "test.admin", on the real clock.
async fn gateway() -> (Cluster, Gateway) {
    gateway_on_mock("test.admin", Time::Real, |_| {}).await
}

/// A mock cluster with "test.admin", a folder of the test's own, and a configuration whose
/// state file is `file` in that folder (not created).
fn with_state_file(file: &str) -> (Cluster, tempfile::TempDir, Config) {
    let cluster = mock_cluster(&["test.admin"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(&cluster.bootstrap_servers());
    cfg.admin.state_file = Some(dir.path().join(file));
    (cluster, dir, cfg)
}

/// Sets tenant `id`'s records budget through the admin API; the answer.
async fn set_records(gw: &Gateway, id: &str, per_sec: u64, burst: u64) -> (u16, serde_json::Value) {
    let budget = json!({"records_per_sec": per_sec, "records_burst": burst});
    admin_patch(gw, &format!("/admin/tenants/{id}"), budget).await
}

fn one_record() -> serde_json::Value {
    json!({"records":[{"value":1}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_call_needs_a_valid_token() {
    let (_cluster, gw) = gateway().await;
    for (method, path) in [
        (Method::GET, "/admin/tenants"),
        (Method::GET, "/admin/tenants/acme"),
        (Method::PUT, "/admin/tenants/acme"),
        (Method::PATCH, "/admin/tenants/acme"),
        (Method::DELETE, "/admin/tenants/acme"),
        (Method::POST, "/admin/tenants/acme/keys"),
        (Method::DELETE, "/admin/tenants/acme/keys/0123"),
        (Method::GET, "/admin/global"),
        (Method::PUT, "/admin/global"),
    ] {
        for token in [None, Some("wrong"), Some(KEY)] {
            let (s, a) = admin(&gw, method.clone(), path, Some(json!({})), token).await;
            assert_eq!(
                (s, a["error"].as_str()),
                (401, Some("unauthorized")),
                "{method} {path} {token:?}"
            );
        }
    }
    // The admin API is not served on the produce listener at all.
    let r = client()
        .get(format!("http://{}/admin/tenants", gw.addr))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 404);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_configured_token_the_admin_api_is_closed() {
    let cluster = mock_cluster(&["test.admin"]);
    let mut options = monotonic_options();
    options.admin_tokens = Some(floodgate::access::AdminTokens::parse("").expect("tokens"));
    let gw = Gateway::start_options(config(&cluster.bootstrap_servers()), options).await;
    let (s, a) = admin_get(&gw, "/admin/tenants").await;
    assert_eq!(s, 401);
    assert!(
        a["detail"].as_str().unwrap_or("").contains("disabled"),
        "{a}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_created_live_works_at_once_and_a_lowered_budget_applies_at_once() {
    let (_cluster, gw) = gateway_on_mock("test.admin", Time::Manual, |_| {}).await;

    let (s, a) = admin_put(
        &gw,
        "/admin/tenants/beta",
        json!({"topics":["test.*"],"records_per_sec":100,"records_burst":100}),
    )
    .await;
    assert_eq!(s, 201, "{a}");
    let (s, key) = admin_post(&gw, "/admin/tenants/beta/keys").await;
    assert_eq!(s, 201, "{key}");
    let api_key = key["api_key"]
        .as_str()
        .expect("key in the clear once")
        .to_string();
    let key_id = key["key_id"].as_str().expect("key id").to_string();
    let url = gw.url("test.admin");
    let (s, _, a) = post_json(&url, &api_key, &one_record()).await;
    assert_eq!(s, 200, "{a}");

    // The key is listed by id only.
    let (s, view) = admin_get(&gw, "/admin/tenants/beta").await;
    assert_eq!(s, 200);
    assert_eq!(view["keys"], json!([{"key_id": key_id}]));
    assert!(!view.to_string().contains(&api_key));
    assert_eq!(view["live"]["tokens"]["records"], 99);
    assert_eq!(view["live"]["admitted"]["records"], 1);

    // Lower the rate to 1/s with burst 3: the bucket keeps its level, clamped to 3 — so the
    // fourth request in the same instant is refused (no clock step in between).
    let (s, a) = set_records(&gw, "beta", 1, 3).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["live"]["tokens"]["records"], 3);
    for _ in 0..3 {
        let (s, _, a) = post_json(&url, &api_key, &one_record()).await;
        assert_eq!(s, 200, "{a}");
    }
    let (s, _, a) = post_json(&url, &api_key, &one_record()).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_records")),
        "{a}"
    );
    let (_, view) = admin_get(&gw, "/admin/tenants/beta").await;
    assert_eq!(view["live"]["rejected"]["tenant_records"], 1);

    // Raising it again does not refill the bucket either.
    let (_, a) = set_records(&gw, "beta", 1000, 1000).await;
    assert_eq!(a["live"]["tokens"]["records"], 0);

    // Revoke: the next request with that key is 401.
    let (s, _) = admin_delete(&gw, &format!("/admin/tenants/beta/keys/{key_id}")).await;
    assert_eq!(s, 204);
    let (s, _, _) = post_json(&url, &api_key, &one_record()).await;
    assert_eq!(s, 401);
    let (s, a) = admin_delete(&gw, &format!("/admin/tenants/beta/keys/{key_id}")).await;
    assert_eq!((s, a["error"].as_str()), (404, Some("key_not_found")));

    // Delete a tenant: its key stops working.
    let (s, _, _) = post_json(&url, KEY, &one_record()).await;
    assert_eq!(s, 200);
    let (s, _) = admin_delete(&gw, "/admin/tenants/acme").await;
    assert_eq!(s, 204);
    let (s, _, _) = post_json(&url, KEY, &one_record()).await;
    assert_eq!(s, 401);
    let (s, a) = admin_get(&gw, "/admin/tenants/acme").await;
    assert_eq!((s, a["error"].as_str()), (404, Some("tenant_not_found")));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_values_are_422_naming_the_field() {
    let (_cluster, gw) = gateway().await;
    let cases = [
        (
            json!({"topics":["a.*"],"records_per_sec":0}),
            "records_per_sec",
        ),
        (
            json!({"topics":["a.*"],"records_per_sec":-5}),
            "records_per_sec",
        ),
        (
            json!({"topics":["a.*"],"records_per_sec":10,"records_burst":0}),
            "records_burst",
        ),
        (json!({"topics":["a.*"],"bytes_burst":10}), "bytes_burst"),
        // Smaller than one record's overhead: could never admit anything.
        (
            json!({"topics":["a.*"],"bytes_per_sec":100,"bytes_burst":7}),
            "bytes_burst",
        ),
        (json!({"topics":["a.*"],"bytes_per_sec":5}), "bytes_burst"),
        (json!({"topics":["a[.*"]}), "topics[0]"),
        (json!({"topics":[]}), "topics"),
        (
            json!({"topics":["a.*"],"max_buffer_share":1.5}),
            "max_buffer_share",
        ),
        (json!({"topics":["a.*"],"colour":"red"}), "colour"),
        (json!({"records_per_sec":5}), "topics"),
    ];
    for (body, field) in cases {
        let (s, a) = admin_put(&gw, "/admin/tenants/x", body.clone()).await;
        assert_eq!(
            (s, a["error"].as_str()),
            (422, Some("invalid_field")),
            "{body}: {a}"
        );
        assert!(
            a["field"].as_str().unwrap_or("").starts_with(field),
            "{body}: {a}"
        );
    }
    let (s, a) = admin_patch(&gw, "/admin/tenants/acme", json!({"records_per_sec":0})).await;
    assert_eq!(
        (s, a["field"].as_str()),
        (422, Some("records_per_sec")),
        "{a}"
    );
    let (s, a) = admin_put(&gw, "/admin/global", json!({"bytes_per_sec":0})).await;
    assert_eq!(
        (s, a["field"].as_str()),
        (422, Some("bytes_per_sec")),
        "{a}"
    );
    let (s, a) = admin_put(
        &gw,
        "/admin/global",
        json!({"bytes_per_sec":1000,"bytes_burst":4}),
    )
    .await;
    assert_eq!((s, a["field"].as_str()), (422, Some("bytes_burst")), "{a}");
    assert!(
        a["detail"].as_str().is_some_and(|d| d.contains("overhead")),
        "{a}"
    );
    // Nothing invalid was applied.
    let (s, a) = admin_get(&gw, "/admin/tenants").await;
    assert_eq!(s, 200);
    assert_eq!(a["tenants"].as_array().map(Vec::len), Some(1), "{a}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_tenants_keys_and_budgets_are_as_they_were() {
    let (_cluster, _dir, cfg) = with_state_file("tenants.state.json");
    let gw = Gateway::start(cfg.clone()).await;
    let (s, _) = admin_put(
        &gw,
        "/admin/tenants/gamma",
        json!({"topics":["test.*"],"bytes_per_sec":5000,"bytes_burst":7000}),
    )
    .await;
    assert_eq!(s, 201);
    let (_, key) = admin_post(&gw, "/admin/tenants/gamma/keys").await;
    let api_key = key["api_key"].as_str().expect("key").to_string();
    let (s, _) = admin_put(&gw, "/admin/global", json!({"records_per_sec":777})).await;
    assert_eq!(s, 200);
    let (s, _) = admin_delete(&gw, "/admin/tenants/acme").await;
    assert_eq!(s, 204);
    gw.shutdown().await;

    let gw = Gateway::start(cfg).await;
    let (s, _, a) = post_json(&gw.url("test.admin"), &api_key, &one_record()).await;
    assert_eq!(s, 200, "{a}");
    let (s, _, _) = post_json(&gw.url("test.admin"), KEY, &one_record()).await;
    assert_eq!(s, 401, "a tenant deleted through the API stays deleted");
    let (_, view) = admin_get(&gw, "/admin/tenants/gamma").await;
    assert_eq!(
        (view["bytes_per_sec"].as_u64(), view["bytes_burst"].as_u64()),
        (Some(5000), Some(7000))
    );
    let (_, global) = admin_get(&gw, "/admin/global").await;
    assert_eq!(global["records_per_sec"], 777);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_state_file_stops_start_up_with_file_and_position() {
    let (_cluster, _dir, cfg) = with_state_file("broken.state.json");
    let state = cfg.admin.state_file.clone().expect("state file");
    let broken = "{\"version\": 1,\n \"tenants\": {\"a\": {\"id\": \"a\", \"topics\": [}}\n";
    std::fs::write(&state, broken).expect("write");
    let listeners = loopback_listeners().await;
    let options =
        floodgate::RunOptions::new(std::sync::Arc::new(floodgate::budget::MonotonicClock::new()));
    let err = floodgate::run(cfg, listeners, options, async {})
        .await
        .expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("broken.state.json") && text.contains("line 2"),
        "{text}"
    );
    // It was not replaced.
    assert!(std::fs::read_to_string(&state)
        .expect("still there")
        .contains("\"topics\": [}"));
}

/// With a state file, the configuration file still owns what it lists: a restart applies what
/// changed in the file (a key removed, a tenant added) and keeps what the API did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_applies_file_edits_and_keeps_api_changes() {
    let (_cluster, _dir, mut cfg) = with_state_file("state/tenants.json");
    let gw = Gateway::start(cfg.clone()).await;
    let (s, key) = admin_post(&gw, "/admin/tenants/acme/keys").await;
    assert_eq!(s, 201);
    let issued = key["api_key"].as_str().expect("key").to_string();
    gw.shutdown().await;

    // The operator removes acme's key from the file and adds a tenant.
    cfg.tenants[0].api_key_sha256.clear();
    cfg.tenants.push(tenant("fresh", "fresh-key", &["test.*"]));
    let gw = Gateway::start(cfg).await;
    let url = gw.url("test.admin");
    let (s, _, _) = post_json(&url, KEY, &one_record()).await;
    assert_eq!(s, 401, "a key removed from the file stops working");
    let (s, _, a) = post_json(&url, &issued, &one_record()).await;
    assert_eq!(s, 200, "the API-issued key stays: {a}");
    let (s, _, a) = post_json(&url, "fresh-key", &one_record()).await;
    assert_eq!(s, 200, "a tenant added to the file exists: {a}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_save_changes_nothing() {
    let (_cluster, dir, mut cfg) = with_state_file("state/tenants.json");
    let state_dir = dir.path().join("state");
    cfg.tenants[0].records_per_sec = Some(100);
    let gw = Gateway::start(cfg).await;
    let (s, _) = admin_get(&gw, "/admin/tenants/acme").await;
    assert_eq!(s, 200);
    // The state file's folder becomes unwritable: the next save fails.
    std::fs::remove_dir_all(&state_dir).expect("remove");
    std::fs::write(&state_dir, "not a folder").expect("block it");
    let (s, a) = admin_patch(
        &gw,
        "/admin/tenants/acme",
        json!({"records_per_sec": 1, "records_burst": 1, "topics": ["nothing.*"]}),
    )
    .await;
    assert_eq!(
        (s, a["error"].as_str()),
        (500, Some("state_not_saved")),
        "{a}"
    );
    // Nothing of the change is in force: budget and topics are as before.
    let (_, view) = admin_get(&gw, "/admin/tenants/acme").await;
    assert_eq!(view["records_per_sec"], 100, "{view}");
    for _ in 0..3 {
        let (s, _, a) = post_json(&gw.url("test.admin"), KEY, &one_record()).await;
        assert_eq!(s, 200, "{a}");
    }
    gw.shutdown().await;
}

/// Paging through the tenants by cursor lists every tenant that exists throughout exactly
/// once, while others are created and deleted between pages; a prefix narrows the listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_pages_list_every_tenant_once_while_tenants_come_and_go() {
    let (_cluster, gw) = gateway_on_mock("test.admin", Time::Manual, |cfg| {
        for i in 0..200 {
            let key = format!("key-{i}");
            cfg.tenants
                .push(tenant(&format!("t{i:03}"), &key, &["test.*"]));
        }
    })
    .await;
    let mut seen: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    let mut deleted = Vec::new();
    let mut page = 0;
    loop {
        let path = match &after {
            Some(a) => format!("/admin/tenants?limit=30&after={a}"),
            None => "/admin/tenants?limit=30".into(),
        };
        let (s, body) = admin_get(&gw, &path).await;
        assert_eq!(s, 200, "{body}");
        let ids = listed_ids(&body, "tenants");
        assert!(ids.len() <= 30);
        seen.extend(ids.into_iter().map(String::from));
        // Between pages: one tenant already listed and one not yet listed go away, and new
        // ones appear before and after the cursor.
        page += 1;
        for id in [
            format!("t{:03}", page * 7),
            format!("t{:03}", 199 - page * 5),
        ] {
            let (s, _) = admin_delete(&gw, &format!("/admin/tenants/{id}")).await;
            if s == 204 {
                deleted.push(id);
            }
        }
        for id in [format!("a-new-{page}"), format!("z-new-{page}")] {
            let (s, b) = admin_put(
                &gw,
                &format!("/admin/tenants/{id}"),
                json!({"topics": ["test.*"]}),
            )
            .await;
            assert_eq!(s, 201, "{b}");
        }
        match body["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "no tenant twice");
    for i in 0..200 {
        let id = format!("t{i:03}");
        if !deleted.contains(&id) {
            assert!(seen.contains(&id), "{id} existed throughout and was listed");
        }
    }
    let (s, body) = admin_get(&gw, "/admin/tenants?prefix=t19&limit=1000").await;
    assert_eq!(s, 200);
    let ids = listed_ids(&body, "tenants");
    assert!(
        !ids.is_empty() && ids.iter().all(|id| id.starts_with("t19")),
        "{ids:?}"
    );
    assert_eq!(body["next"], serde_json::Value::Null);
    for bad in ["limit=0", "limit=1001", "limit=x", "colour=red"] {
        let (s, body) = admin_get(&gw, &format!("/admin/tenants?{bad}")).await;
        assert_eq!(
            (s, body["error"].as_str()),
            (422, Some("invalid_field")),
            "{bad}: {body}"
        );
    }
    gw.shutdown().await;
}

/// Tenant ids of dots only (`.`, `..`: a client that normalises paths could never reach the
/// tenant's routes again) and `_other` (the metrics' sum over tenants) are refused; an id that
/// only contains dots, or starts like it, is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_of_dots_only_and_the_metrics_sum_are_not_tenant_ids() {
    let (_cluster, gw) = gateway().await;
    let body = json!({"topics": ["a.*"]});
    let (s, a) = admin_put(&gw, "/admin/tenants/_other", body.clone()).await;
    assert_eq!(
        (s, a["error"].as_str()),
        (422, Some("invalid_field")),
        "{a}"
    );
    // Raw requests: an HTTP client would normalise the dots away.
    for id in ["..", ".", "%2E%2E", "..."] {
        let mut stream = tokio::net::TcpStream::connect(gw.admin)
            .await
            .expect("connect");
        let text = body.to_string();
        let request = format!(
            "PUT /admin/tenants/{id} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        );
        tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
            .await
            .expect("write");
        let mut answer = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut answer)
            .await
            .expect("read");
        assert!(
            !answer.starts_with("HTTP/1.1 2"),
            "{id}: {}",
            answer.lines().next().unwrap_or_default()
        );
    }
    for id in ["a..b", ".hidden", "_others"] {
        let (s, a) = admin_put(&gw, &format!("/admin/tenants/{id}"), body.clone()).await;
        assert!(s < 300, "{id}: {s} {a}");
    }
    let (_, a) = admin_get(&gw, "/admin/tenants").await;
    let ids = listed_ids(&a, "tenants");
    assert!(
        !ids.iter()
            .any(|i| i.chars().all(|c| c == '.') || *i == "_other"),
        "{ids:?}"
    );
    gw.shutdown().await;
}
