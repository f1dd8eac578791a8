//! SIGTERM during sustained load, on the real binary and the real broker (Tansu): the process
//! drains, flushes and exits 0, and every record answered 200 or 202 before the signal is in
//! Kafka exactly once.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_loses_and_duplicates_nothing_acknowledged() {
    let topic = tansu_topic("test.shutdown", 3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, admin_port) = (free_port(), free_port());
    let digest = floodgate::identity::ApiKeyHash::of_key(KEY).to_hex();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin_port}\"\n\
         shutdown_timeout_ms = 20000\n[kafka]\nbootstrap_servers = \"{}\"\n\
         [[tenants]]\nid = \"acme\"\napi_key_sha256 = [\"{digest}\"]\ntopics = [\"test.*\"]\n",
        tansu()
    );
    let path = dir.path().join("floodgate.toml");
    std::fs::write(&path, config).expect("config");
    let log = std::fs::File::create(dir.path().join("floodgate.log")).expect("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["--config", path.to_str().expect("utf8")])
        .stdout(log)
        .stderr(Stdio::null())
        .spawn()
        .expect("floodgate starts");

    let http = client();
    let deadline = Instant::now() + Duration::from_secs(20);
    while http
        .get(format!("http://127.0.0.1:{admin_port}/healthz"))
        .send()
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "floodgate did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let accepted: Arc<Mutex<Vec<String>>> = Arc::default();
    let url = format!("http://127.0.0.1:{port}/v1/topics/{topic}/records");
    let mut workers = Vec::new();
    for w in 0..4 {
        let (accepted, url, http) = (accepted.clone(), url.clone(), http.clone());
        workers.push(tokio::spawn(async move {
            let mut statuses: HashMap<u16, usize> = HashMap::new();
            for i in 0.. {
                let values: Vec<String> = (0..10).map(|j| format!("w{w}-r{i}-{j}")).collect();
                let records: Vec<_> = values.iter().map(|v| json!({"value": v})).collect();
                let async_mode = if i % 2 == 0 { "?async=true" } else { "" };
                let sent = http
                    .post(format!("{url}{async_mode}"))
                    .bearer_auth(KEY)
                    .json(&json!({ "records": records }))
                    .send()
                    .await;
                let Ok(response) = sent else { break }; // the listener is gone
                let status = response.status().as_u16();
                *statuses.entry(status).or_default() += 1;
                if status == 200 || status == 202 {
                    accepted.lock().expect("lock").extend(values);
                }
            }
            statuses
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before_signal = accepted.lock().expect("lock").len();
    assert!(before_signal > 0, "load is flowing");
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());

    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    for w in workers {
        for (s, n) in w.await.expect("worker") {
            *statuses.entry(s).or_default() += n;
        }
    }
    let log = std::fs::read_to_string(dir.path().join("floodgate.log")).unwrap_or_default();
    assert!(exit.success(), "exit {exit:?}; log:\n{log}");
    assert!(log.contains("shutdown complete"), "{log}");
    let allowed = [200u16, 202, 503];
    assert!(statuses.keys().all(|s| allowed.contains(s)), "{statuses:?}");

    let accepted = accepted.lock().expect("lock").clone();
    let (b, t, n) = (tansu(), topic.clone(), accepted.len());
    let got = tokio::task::spawn_blocking(move || read_back(&b, &t, 3, n))
        .await
        .expect("reader");
    let mut counts: HashMap<String, usize> = HashMap::new();
    for c in &got {
        let v = String::from_utf8_lossy(c.value.as_deref().unwrap_or_default())
            .trim_matches('"')
            .to_string();
        *counts.entry(v).or_default() += 1;
    }
    for v in &accepted {
        assert_eq!(
            counts.get(v),
            Some(&1),
            "{v} acknowledged but found {:?} times",
            counts.get(v)
        );
    }
    assert!(counts.values().all(|n| *n == 1), "duplicates in Kafka");
    eprintln!(
        "accepted {} records ({statuses:?}), {} in Kafka",
        accepted.len(),
        got.len()
    );
}
