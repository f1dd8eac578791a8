//! Offered load for the tests that measure rates on the real clock (`mock::adaptive`,
//! `mock::lag_guard`): paced producers that count what they hear.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

/// Sends 10-record async requests to the produce `url` with `key` until `stop`, at most
/// `per_sec` a second (0: as fast as it can), and hands each answer — status, headers and body
/// (`null` if it is not JSON) — to `tally`. A request that gets no answer is not counted.
pub fn offer(
    url: String,
    key: &'static str,
    per_sec: u64,
    stop: Arc<AtomicBool>,
    mut tally: impl FnMut(u16, &HeaderMap, &Value) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        let body = json!({"records": (0..10).map(|i| json!({"value": i})).collect::<Vec<_>>()});
        let pace = (per_sec > 0).then(|| Duration::from_nanos(1_000_000_000 / per_sec));
        let mut next = tokio::time::Instant::now();
        while !stop.load(Relaxed) {
            if let Some(p) = pace {
                next += p;
                tokio::time::sleep_until(next).await;
            }
            let sent = http
                .post(format!("{url}?async=true"))
                .bearer_auth(key)
                .json(&body)
                .send()
                .await;
            let Ok(response) = sent else {
                continue;
            };
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let answer: Value = response.json().await.unwrap_or_default();
            tally(status, &headers, &answer);
        }
    })
}
