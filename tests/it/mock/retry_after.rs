//! What a real client that honours `Retry-After` gets of its budget: urllib3's `Retry` (PyPI,
//! scripts/retry-after-client.py, in the folder scripts/clients.sh makes) against a tenant at
//! 50 records/s. `Retry-After` is whole seconds, so with a burst of 10 (rate / 5) such a client
//! waits a second for tokens due in 20 ms and gets about a fifth of its budget; with `[wait]`
//! the gateway holds those requests instead, and the client gets its budget. This measures a
//! real client over a few seconds of real time (the gateway's own hold logic is tested on the
//! manual clock in `mock::holds`): scripts/test.sh runs it after the rest of the suite, with the
//! rate tests, so that the machine is not shared.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::common::*;
use serde_json::Value;

const RATE: u64 = 50;

fn python() -> PathBuf {
    let dir = std::env::var("FLOODGATE_CLIENTS").unwrap_or_else(|_| {
        panic!(
            "FLOODGATE_CLIENTS is not set: run the suite with scripts/test.sh, which makes the \
             clients' folder (or scripts/clients.sh DIR and export it)"
        )
    });
    PathBuf::from(dir).join("venv/bin/python")
}

/// The share of its budget the client got in a steady window, with this burst and hold.
async fn measured(burst: u64, max_ms: u64) -> (f64, Value) {
    let (_cluster, gw) = gateway_on_mock("test.retry-after", Time::Real, |cfg| {
        limit_records(cfg, RATE, burst);
        cfg.wait.max_ms = max_ms;
    })
    .await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/retry-after-client.py");
    let mut command = Command::new(python());
    command
        .arg(script)
        .args(["--url", &gw.url("test.retry-after"), "--key", KEY])
        .args(["--warmup", "1.5", "--seconds", "4"])
        .stdin(Stdio::null());
    let stdout = client_output(command, "scripts/retry-after-client.py").await;
    let report: Value = serde_json::from_slice(&stdout).expect("the client's report");
    gw.shutdown().await;
    let share = report["rate"].as_f64().unwrap_or(0.0) / RATE as f64;
    eprintln!(
        "burst {burst}, [wait] max_ms {max_ms}: {report} = {:.0}% of the budget",
        share * 100.0
    );
    (share, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_honouring_retry_after_gets_its_budget_with_the_hold() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // Without the hold: every wait is told as Retry-After: 1 and honoured; about burst / rate.
    let (without, report) = measured(RATE / 5, 0).await;
    assert!(report["requests_429"].as_u64().unwrap_or(0) > 0, "{report}");
    assert!(without < 0.5, "without [wait]: {report}");
    // With the hold (250 ms, far above one record's 20 ms): the budget, and no 429 at all.
    let (held, report) = measured(RATE / 5, 250).await;
    assert!(held >= 0.9, "burst = rate / 5 with [wait]: {report}");
    assert_eq!(report["requests_429"], 0, "{report}");
    // A burst of one second of the rate: the whole budget.
    let (full, report) = measured(RATE, 250).await;
    assert!(full >= 0.97, "burst = rate with [wait]: {report}");
}
