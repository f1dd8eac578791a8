//! A gateway running inside the load tool (the scenarios' subject), and reading its metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use floodgate::budget::MonotonicClock;
use floodgate::config::Config;

use crate::load;

/// A gateway running in this process, on loopback ports of its own.
pub struct InProcess {
    pub produce: SocketAddr,
    pub admin: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl InProcess {
    pub async fn start(config: Config) -> Result<Self, String> {
        let bind = || async {
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())
        };
        let listeners = floodgate::Listeners {
            produce: bind().await?,
            admin: bind().await?,
        };
        let produce = listeners.produce.local_addr().map_err(|e| e.to_string())?;
        let admin = listeners.admin.local_addr().map_err(|e| e.to_string())?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let run = floodgate::run(
                config,
                listeners,
                floodgate::RunOptions::new(Arc::new(MonotonicClock::new())),
                async {
                    let _ = stopped.await;
                },
            );
            if let Err(e) = run.await {
                eprintln!("gateway: {e:?}");
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(Self {
            produce,
            admin,
            stop,
            task,
        })
    }

    /// Shuts it down and waits for it.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// The gateway's /metrics, as text.
pub async fn scrape(admin: SocketAddr) -> Option<String> {
    use http_body_util::BodyExt;
    let uri: hyper::Uri = format!("http://{admin}/metrics").parse().ok()?;
    let response = load::client().get(uri).await.ok()?;
    let body = response.into_body().collect().await.ok()?;
    Some(String::from_utf8_lossy(&body.to_bytes()).into_owned())
}

/// The value of the first sample whose line starts with `prefix` (name and labels).
pub fn value(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix)?.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}
