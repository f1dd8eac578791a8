//! Reading a gateway's `/metrics` (the Prometheus text exposition) in tests.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{client, Gateway};

/// The admin listener's `/metrics`, as text.
pub async fn scrape(gw: &Gateway) -> String {
    client()
        .get(gw.admin_url("/metrics"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text")
}

/// The value of one sample (`series` written as in the exposition, labels included), 0 when
/// absent.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// The value of the series `name` (labels included, if any, as the exposition writes them) in
/// a scrape; `None` if absent.
pub fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The sum of every series whose line starts with `prefix` (a family and its `{`: all its
/// label sets).
pub fn sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of the series `name`, scraped now; `None` if the scrape fails or the series is
/// absent.
pub async fn metric(gw: &Gateway, name: &str) -> Option<f64> {
    metric_at(gw.admin, name).await
}

/// [`metric`] from the admin listener at `admin`, for a gateway the harness did not start.
pub async fn metric_at(admin: SocketAddr, name: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    value(&text, name)
}

/// Polls (every 50 ms) until the series `name` reads `value`; how long that took. Fails after
/// `within`, with what it read last.
pub async fn wait_for_metric(gw: &Gateway, name: &str, value: f64, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let got = metric(gw, name).await;
        if got == Some(value) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{name} did not reach {value} within {within:?} (now {got:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `promtool check metrics` on an exposition: its problems, or `Ok`.
pub fn promtool_check(text: &str) -> Result<(), String> {
    use std::io::Write as _;
    let output = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .expect("promtool (apt-get install -y prometheus)");
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
