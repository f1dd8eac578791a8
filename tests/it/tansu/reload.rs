//! SIGHUP re-reads the configuration file and applies tenant and budget changes live, keeping
//! keys issued through the admin API.
//!
//! The signal goes to the whole process, so every gateway of the binary that listens for it
//! reloads its own file at every test's SIGHUP: the tests that send one take [`SIGHUP`] for
//! their whole run, and each sees only its own gateways reload.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use floodgate::budget::MonotonicClock;
use rdkafka::mocking::MockCluster;
use serde_json::json;

/// Held by every test that sends SIGHUP (or starts a gateway that listens for it), from its
/// first gateway to its last.
static SIGHUP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Sends SIGHUP to this process (every gateway started with a configuration path reloads).
fn sighup() {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(status.success());
}

/// A gateway on the configuration file at `path`, its tenant registry shared through the
/// registry topic `registry`, reloading `path` at SIGHUP.
async fn start_shared(path: &Path, registry: &str) -> Gateway {
    let mut cfg = floodgate::config::Config::load(path).expect("valid");
    cfg.cluster.shared_registry = true;
    cfg.cluster.registry_topic = registry.to_string();
    cfg.cluster.registry_secret_env = Some(REGISTRY_SECRET_ENV.into());
    let mut options = floodgate::RunOptions::new(Arc::new(MonotonicClock::new()));
    options.config_path = Some(path.to_path_buf());
    options.admin_tokens =
        Some(floodgate::access::AdminTokens::parse(ADMIN_TOKENS).expect("tokens"));
    options.registry_secrets = Some(
        floodgate::registry::RegistrySecrets::parse("reload-test-secret-0123").expect("secret"),
    );
    Gateway::start_options(cfg, options).await
}

/// Waits (20 s at most) until `gw` answers ready: for a shared registry, read to its end.
async fn ready(gw: &Gateway) {
    let url = gw.admin_url("/readyz");
    let deadline = Instant::now() + Duration::from_secs(20);
    while reqwest::get(&url)
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
        != 200
    {
        assert!(Instant::now() < deadline, "not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The status of one record sent to `topic` with `key`, once it is not 401 (within `within`).
async fn status_once_known(gw: &Gateway, topic: &str, key: &str, within: Duration) -> u16 {
    let one = json!({"records":[{"value":1}]});
    let deadline = Instant::now() + within;
    let mut status = post_json(&gw.url(topic), key, &one).await.0;
    while status == 401 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = post_json(&gw.url(topic), key, &one).await.0;
    }
    status
}

fn write_config(path: &std::path::Path, bootstrap: &str, records_per_sec: u64, extra_tenant: bool) {
    write_config_keys(path, bootstrap, records_per_sec, extra_tenant, &[KEY]);
}

fn write_config_keys(
    path: &std::path::Path,
    bootstrap: &str,
    records_per_sec: u64,
    extra_tenant: bool,
    keys: &[&str],
) {
    let digests: Vec<String> = keys
        .iter()
        .map(|k| {
            format!(
                "\"{}\"",
                floodgate::identity::ApiKeyHash::of_key(k).to_hex()
            )
        })
        .collect();
    let digest = digests.join(", ");
    let other = floodgate::identity::ApiKeyHash::of_key("new-key").to_hex();
    let mut text = format!(
        "[kafka]\nbootstrap_servers = \"{bootstrap}\"\n\n[[tenants]]\nid = \"acme\"\napi_key_sha256 = [{digest}]\ntopics = [\"test.*\"]\nrecords_per_sec = {records_per_sec}\n"
    );
    if extra_tenant {
        text.push_str(&format!(
            "\n[[tenants]]\nid = \"newcomer\"\napi_key_sha256 = [\"{other}\"]\ntopics = [\"test.*\"]\n"
        ));
    }
    std::fs::write(path, text).expect("write config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_the_edited_file_live() {
    let _sighup = SIGHUP.lock().await;
    let cluster = MockCluster::new(1).expect("mock");
    cluster.create_topic("test.reload", 1, 1).expect("topic");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("floodgate.toml");
    write_config(&path, &cluster.bootstrap_servers(), 100, false);
    let cfg = floodgate::config::Config::load(&path).expect("valid");
    let mut options = floodgate::RunOptions::new(Arc::new(MonotonicClock::new()));
    options.config_path = Some(path.clone());
    options.admin_tokens =
        Some(floodgate::access::AdminTokens::parse(ADMIN_TOKENS).expect("tokens"));
    let gw = Gateway::start_options(cfg, options).await;
    let (_, key) = admin_post(&gw, "/admin/tenants/acme/keys").await;
    let issued = key["api_key"].as_str().expect("key").to_string();
    let (s, _, _) = post_json(
        &gw.url("test.reload"),
        "new-key",
        &json!({"records":[{"value":1}]}),
    )
    .await;
    assert_eq!(s, 401);

    write_config(&path, &cluster.bootstrap_servers(), 5, true);
    sighup();

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, view) = admin_get(&gw, "/admin/tenants/acme").await;
        if view["records_per_sec"] == 5 {
            break;
        }
        assert!(Instant::now() < deadline, "reload not applied: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = gw.url("test.reload");
    let (s, _, a) = post_json(&url, "new-key", &json!({"records":[{"value":1}]})).await;
    assert_eq!(s, 200, "a tenant added to the file works after SIGHUP: {a}");
    let (s, _, a) = post_json(&url, &issued, &json!({"records":[{"value":1}]})).await;
    assert_eq!(s, 200, "keys issued through the API survive a reload: {a}");

    // The file owns the keys it lists: one removed from it stops working at the next reload,
    // while the key issued through the API keeps working.
    write_config_keys(&path, &cluster.bootstrap_servers(), 5, true, &[]);
    sighup();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _, _) = post_json(&url, KEY, &json!({"records":[{"value":1}]})).await;
        if s == 401 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a key removed from the file still works"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (s, _, a) = post_json(&url, &issued, &json!({"records":[{"value":1}]})).await;
    assert_eq!(s, 200, "an API-issued key is not the file's to remove: {a}");
    gw.shutdown().await;
}

/// Shared registry: the file's part as last applied lives in the topic, so a file edited while
/// a replica was down is applied at its next SIGHUP (the tenant removed from the file stops
/// working), not forgotten because the replica started on the new file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_registry_applies_a_file_edited_across_a_restart_at_the_next_sighup() {
    let _sighup = SIGHUP.lock().await;
    let broker = tansu();
    // A topic of its own: the suite may run again against the same broker.
    let topic = tansu_topic("test.reload", 1).await;
    let registry = unique_topic("_fg_registry");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("floodgate.toml");
    write_config(&path, &broker, 100, true);
    let one = json!({"records":[{"value":1}]});
    let a = start_shared(&path, &registry).await;
    ready(&a).await;
    assert_eq!(post_json(&a.url(&topic), "new-key", &one).await.0, 200);
    a.shutdown().await;
    // The newcomer leaves the file while no replica runs; one starts on the edited file.
    write_config(&path, &broker, 100, false);
    let b = start_shared(&path, &registry).await;
    ready(&b).await;
    // Ready is caught up with the topic's end as found at start-up, but the end a broker
    // reports can lag (Tansu's high watermark after a multi-record batch): the key is given a
    // moment. Start-up deleting it from the shared registry would keep it 401 for good.
    assert_eq!(
        status_once_known(&b, &topic, "new-key", Duration::from_secs(15)).await,
        200,
        "start-up applies nothing of the file to a shared registry"
    );
    sighup();
    let deadline = Instant::now() + Duration::from_secs(10);
    while post_json(&b.url(&topic), "new-key", &one).await.0 != 401 {
        assert!(
            Instant::now() < deadline,
            "the tenant removed from the file while the replica was down still works"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(post_json(&b.url(&topic), KEY, &one).await.0, 200);
    b.shutdown().await;
}

/// A gateway that has stopped no longer reloads at SIGHUP: its view of a shared registry
/// stopped with its follower, and a reload from that view would write the file's changes to
/// the topic for every replica (here: delete the tenant the file no longer lists before any
/// running replica was asked to reload).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_gateway_does_not_reload_at_sighup() {
    let _sighup = SIGHUP.lock().await;
    let registry = "_fg_registry_reload";
    let cluster = MockCluster::new(1).expect("mock");
    cluster.create_topic("test.reload", 1, 1).expect("topic");
    cluster.create_topic(registry, 1, 1).expect("topic");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("floodgate.toml");
    write_config(&path, &cluster.bootstrap_servers(), 100, true);
    let a = start_shared(&path, registry).await;
    ready(&a).await;
    let one = json!({"records":[{"value":1}]});
    assert_eq!(
        post_json(&a.url("test.reload"), "new-key", &one).await.0,
        200
    );
    a.shutdown().await;
    write_config(&path, &cluster.bootstrap_servers(), 100, false);
    // No gateway runs: this SIGHUP is nobody's to apply (the pause lets the runtime hand it
    // out, to no listener, before the next gateway listens).
    sighup();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = start_shared(&path, registry).await;
    ready(&b).await;
    // Give a reload of the stopped gateway, had there been one, time to reach the topic and
    // this replica: it takes milliseconds on the mock.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        status_once_known(&b, "test.reload", "new-key", Duration::from_secs(5)).await,
        200,
        "the tenant is deleted only at a SIGHUP to a running replica"
    );
    b.shutdown().await;
}
