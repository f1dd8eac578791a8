//! `GET /admin/status`, the status page's data: admin auth like every admin route, and numbers
//! that move by exactly what a scripted set of requests did, on a clock the test steps. The
//! page itself is checked in a real browser by `scripts/ui-check.py` (run by `.ci/run`).

use crate::common::*;
use reqwest::Method;
use serde_json::json;

fn records(n: usize, value: &str) -> serde_json::Value {
    let r: Vec<_> = (0..n).map(|_| json!({ "value": value })).collect();
    json!({ "records": r })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_counts_exactly_what_happened_and_needs_the_admin_token() {
    let (_cluster, gw) = gateway_on_mock("test.status", Time::Manual, |cfg| {
        limit_records(cfg, 10, 10);
        limit_bytes(cfg, 200, 200);
        cfg.tenants
            .push(tenant("other", "test-key-other", &["test.*"]));
    })
    .await;
    let (s, body) = admin(&gw, Method::GET, "/admin/status", None, None).await;
    assert_eq!((s, body["error"].as_str()), (401, Some("unauthorized")));
    let (s, body) = admin(
        &gw,
        Method::GET,
        "/admin/status",
        None,
        Some("wrong-token-0000000"),
    )
    .await;
    assert_eq!(s, 401, "{body}");
    let (s, first) = admin_get(&gw, "/admin/status").await;
    assert_eq!(s, 200, "{first}");
    assert_eq!(first["window_secs"], 0.0);
    assert_eq!(first["tenants"].as_array().map(Vec::len), Some(2));

    // acme: three requests of two one-byte records, then one refused for records (5 wanted,
    // 4 left) and one for bytes (a 199-character value does not fit). other: one.
    let url = gw.url("test.status");
    for _ in 0..3 {
        let (s, _, a) = post_json(&url, KEY, &records(2, "x")).await;
        assert_eq!(s, 200, "{a}");
    }
    let (s, _, a) = post_json(&url, KEY, &records(5, "y")).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_records")),
        "{a}"
    );
    let (s, _, a) = post_json(&url, KEY, &records(1, &"z".repeat(199))).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_bytes")),
        "{a}"
    );
    let (s, _, a) = post_json(&url, "test-key-other", &records(1, "o")).await;
    assert_eq!(s, 200, "{a}");

    // Levels are live at once; rates wait for a second of the clock.
    let (_, now) = admin_get(&gw, "/admin/status").await;
    let acme = |v: &serde_json::Value| {
        v["tenants"]
            .as_array()
            .and_then(|ts| ts.iter().find(|x| x["id"] == "acme").cloned())
            .expect("acme")
    };
    assert_eq!(
        acme(&now)["records_bucket"],
        json!({"available": 4, "burst": 10, "per_sec": 10})
    );
    // A value is written as its JSON text: "x" is 3 bytes, so 6 records took 18, and 8 bytes
    // of record overhead each.
    assert_eq!(acme(&now)["bytes_bucket"]["available"], 134);
    assert_eq!(now["window_secs"], 0.0);

    gw.advance_ms(1000);
    let (_, later) = admin_get(&gw, "/admin/status").await;
    assert_eq!(later["window_secs"], 1.0);
    let a = acme(&later);
    assert_eq!(a["admitted_records_per_sec"], 6.0);
    assert_eq!(a["admitted_requests_per_sec"], 3.0);
    assert_eq!(a["refused_requests_per_sec"], 2.0);
    assert_eq!(
        a["refused_by_reason"],
        json!({"tenant_records": 1.0, "tenant_bytes": 1.0})
    );
    assert_eq!(
        a["history"],
        json!([{"admitted_records": 6.0, "refused_requests": 2.0}])
    );
    let other = later["tenants"]
        .as_array()
        .and_then(|ts| ts.iter().find(|x| x["id"] == "other").cloned())
        .expect("other");
    assert_eq!(other["admitted_records_per_sec"], 1.0);
    assert_eq!(other["refused_by_reason"], json!({}));
    assert_eq!(
        other["records_bucket"],
        serde_json::Value::Null,
        "unlimited"
    );
    // The rest of the picture is there.
    assert!(later["buffer"]["max_bytes"].as_u64().is_some_and(|b| b > 0));
    assert_eq!(later["buffer"]["ready_high_water"], 0.9);
    assert!(later["kafka"]["queue_messages"].is_u64());
    assert_eq!(later["cluster"], serde_json::Value::Null);

    // Another second with nothing happening: the window grows, the rates halve.
    gw.advance_ms(1000);
    let (_, quiet) = admin_get(&gw, "/admin/status").await;
    assert_eq!(quiet["window_secs"], 2.0);
    assert_eq!(acme(&quiet)["admitted_records_per_sec"], 3.0);
    assert_eq!(
        acme(&quiet)["history"],
        json!([{"admitted_records": 6.0, "refused_requests": 2.0},
               {"admitted_records": 0.0, "refused_requests": 0.0}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_with_a_strict_policy_and_holds_no_secret() {
    let (_cluster, gw) = gateway_on_mock("test.ui", Time::Real, |_| {}).await;
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let response = reqwest::get(gw.admin_url(path)).await.expect("get");
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers().clone();
        assert!(headers["content-type"]
            .to_str()
            .is_ok_and(|v| v.starts_with(kind)));
        let csp = headers["content-security-policy"].to_str().expect("csp");
        assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
        let text = response.text().await.expect("text");
        assert!(!text.contains(ADMIN_TOKEN) && !text.contains(KEY));
        if path == "/ui" {
            assert!(
                !text.contains("<script>") && !text.contains("style="),
                "no inline code"
            );
        }
    }
}

/// Nobody looks while a tenant is refused for five seconds; the status asked for afterwards
/// shows it first, with its reason and its seconds, from the history the gateway kept by
/// itself. The answer holds the tenants asked for, not all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_asked_for_after_an_incident_shows_it_from_the_history_kept_meanwhile() {
    let (_cluster, gw) = gateway_on_mock("test.after", Time::Manual, |cfg| {
        let mut refused = tenant("refused", "key-refused", &["test.*"]);
        refused.records_per_sec = Some(1);
        refused.records_burst = Some(1);
        cfg.tenants.push(refused);
        for i in 0..100 {
            cfg.tenants.push(tenant(
                &format!("idle-{i:03}"),
                &format!("key-idle-{i}"),
                &["test.*"],
            ));
        }
    })
    .await;
    let url = gw.url("test.after");
    for _ in 0..5 {
        for _ in 0..3 {
            post_json(&url, "key-refused", &records(1, "r")).await;
        }
        post_json(&url, KEY, &records(2, "a")).await;
        gw.advance_ms(1000);
        // The sampler looks four times a second.
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    let (s, status) = admin_get(&gw, "/admin/status?limit=2").await;
    assert_eq!(s, 200, "{status}");
    assert_eq!(status["tenant_count"], 102);
    let tenants = status["tenants"].as_array().expect("tenants");
    assert_eq!(tenants.len(), 2, "the tenants asked for");
    assert_eq!(tenants[0]["id"], "refused", "{status}");
    assert!(tenants[0]["refused_requests_per_sec"]
        .as_f64()
        .is_some_and(|r| r >= 1.5));
    assert!(tenants[0]["refused_by_reason"]["tenant_records"]
        .as_f64()
        .is_some_and(|r| r > 0.0));
    let refused_seconds = tenants[0]["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|s| s["refused_requests"].as_f64().unwrap_or(0.0) > 0.0)
        .count();
    assert!(
        refused_seconds >= 4,
        "{refused_seconds} seconds of refusals in {status}"
    );
    assert_eq!(tenants[1]["id"], "acme", "then the busiest of the rest");
    assert!(status["totals"]["refused_requests_per_sec"]
        .as_f64()
        .is_some_and(|r| r >= 1.5));
    // Searched on the server, by id prefix.
    let (_, found) = admin_get(&gw, "/admin/status?q=idle-05&limit=50").await;
    let ids = listed_ids(&found, "tenants");
    assert_eq!(ids.len(), 10, "{ids:?}");
    assert!(ids.iter().all(|id| id.starts_with("idle-05")));
    let (s, _) = admin_get(&gw, "/admin/status?limit=0").await;
    assert_eq!(s, 422);
}
