//! HTTP produce load, per tenant, at an offered rate (open loop, with a burst profile) or as
//! fast as `--concurrency` allows.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;

use crate::report::{Observed, Summary};
use crate::LoadArgs;

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(4096)
        .build(connector)
}

/// `records` records with values of `size` bytes of JSON text, in the shape of `api`: `/v1` and Confluent v2 (json embedded format) share
/// the envelope; v3 writes one `{"key":{"type":"STRING",...},"value":{"type":"JSON",...}}`
/// object per record, concatenated. `log`: values like a log line's (see `log_value`).
pub fn body_for(api: &str, records: usize, size: usize, log: bool) -> Bytes {
    let value = |i: usize| {
        if log {
            log_value(i, size.saturating_sub(2))
        } else {
            "x".repeat(size.saturating_sub(2))
        }
    };
    if api == "v3" {
        let items: Vec<String> = (0..records)
            .map(|i| {
                format!(
                    r#"{{"key":{{"type":"STRING","data":"k{i}"}},"value":{{"type":"JSON","data":"{}"}}}}"#,
                    value(i)
                )
            })
            .collect();
        return Bytes::from(items.join("\n"));
    }
    let items: Vec<String> = (0..records)
        .map(|i| format!(r#"{{"key":"k{i}","value":"{}"}}"#, value(i)))
        .collect();
    Bytes::from(format!(r#"{{"records":[{}]}}"#, items.join(",")))
}

/// A log line of `len` characters (no quotes or backslashes): timestamp, level, a request
/// path and its time, a host, from a reproducible sequence; padded with words.
fn log_value(i: usize, len: usize) -> String {
    let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut line = format!(
        "2026-12-04T12:{:02}:{:02}.{:03}Z {} GET /api/v2/items/{} took {} ms host=10.0.{}.{} trace={:016x}",
        next() % 60,
        next() % 60,
        next() % 1000,
        ["INFO", "WARN", "ERROR", "DEBUG"][(next() % 4) as usize],
        next() % 100_000,
        next() % 997,
        next() % 256,
        next() % 256,
        next()
    );
    let words = [
        "user", "cache", "miss", "retry", "ok", "db", "shard", "queue",
    ];
    while line.len() < len {
        line.push(' ');
        line.push_str(words[(next() % words.len() as u64) as usize]);
    }
    line.truncate(len);
    line
}

/// The path and content type of a produce request in `api`'s shape.
fn route(api: &str, topic: &str, async_mode: bool) -> Result<(String, &'static str), String> {
    match api {
        "v1" => Ok((
            format!(
                "/v1/topics/{topic}/records{}",
                if async_mode { "?async=true" } else { "" }
            ),
            "application/json",
        )),
        "v2" => Ok((
            format!("/topics/{topic}"),
            "application/vnd.kafka.json.v2+json",
        )),
        "v3" => Ok((
            format!("/v3/clusters/load/topics/{topic}/records"),
            "application/json",
        )),
        other => Err(format!("--api {other:?}: use v1, v2 or v3")),
    }
}

/// A burst: rate multiplied by `factor` for `[start, start + length)`.
#[derive(Debug, Clone, Copy)]
pub struct Burst {
    pub factor: f64,
    pub start: f64,
    pub length: f64,
}

impl Burst {
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("--burst {text:?}: expected FACTORxSECONDS@START, e.g. 10x5@3");
        let (factor, rest) = text.split_once('x').ok_or_else(bad)?;
        let (length, start) = rest.split_once('@').ok_or_else(bad)?;
        Ok(Self {
            factor: factor.parse().map_err(|_| bad())?,
            length: length.parse().map_err(|_| bad())?,
            start: start.parse().map_err(|_| bad())?,
        })
    }

    fn factor_at(burst: Option<Self>, t: f64) -> f64 {
        match burst {
            Some(b) if t >= b.start && t < b.start + b.length => b.factor,
            _ => 1.0,
        }
    }
}

/// One second of one tenant: offered, admitted, refused.
pub type Timeline = Arc<Mutex<Vec<[u64; 3]>>>;

struct Tenant {
    key: String,
    rate: f64,
    observed: Arc<Mutex<Observed>>,
    timeline: Timeline,
    /// Nanoseconds since start before which this tenant does not send (Retry-After).
    resume_at_ns: AtomicU64,
}

struct Shared {
    client: HttpClient,
    uri: Uri,
    content_type: &'static str,
    body: Bytes,
    start: Instant,
    args: LoadArgs,
    burst: Option<Burst>,
    /// `--idempotency-keys`: the next key's number (keys are unique per run: the start time
    /// is part of them).
    next_key: AtomicU64,
    run_id: u128,
}

fn bump(timeline: &Timeline, second: usize, column: usize) {
    let mut t = timeline
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if t.len() <= second {
        t.resize(second + 1, [0; 3]);
    }
    t[second][column] += 1;
}

async fn one_request(shared: Arc<Shared>, tenant: Arc<Tenant>) {
    let sent_at = Instant::now();
    let second = sent_at.duration_since(shared.start).as_secs() as usize;
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(shared.uri.clone())
        .header("authorization", format!("Bearer {}", tenant.key))
        .header("content-type", shared.content_type);
    if shared.args.content_encoding != "identity" {
        request = request.header("content-encoding", &shared.args.content_encoding);
    }
    if shared.args.idempotency_keys {
        let n = shared.next_key.fetch_add(1, Ordering::Relaxed);
        request = request.header("idempotency-key", format!("load-{:x}-{n}", shared.run_id));
    }
    let request = request.body(Full::new(shared.body.clone()));
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            record_error(&tenant, e.to_string());
            return;
        }
    };
    let response = shared.client.request(request).await;
    let latency = sent_at.elapsed();
    let response = match response {
        Ok(r) => r,
        Err(e) => {
            record_error(&tenant, format!("connection: {e}"));
            return;
        }
    };
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    // A v3 answer is 200 once the stream starts; each record's report says how it went.
    let v3_refused = shared.args.api == "v3"
        && status == 200
        && body
            .split(|b| *b == b'\n')
            .filter(|line| line.len() > 2)
            .any(|line| !line.windows(16).any(|w| w == br#""error_code":200"#));
    if v3_refused {
        record_error(&tenant, "v3 report other than 200".into());
        return;
    }
    match status {
        200 | 202 => {
            bump(&tenant.timeline, second, 1);
            let mut o = lock(&tenant.observed);
            o.admitted += 1;
            o.latencies_us.push(latency.as_micros() as u64);
        }
        429 => {
            bump(&tenant.timeline, second, 2);
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let reason = answer["reason"].as_str().unwrap_or("unknown").to_string();
            *lock(&tenant.observed).refused.entry(reason).or_default() += 1;
            if shared.args.respect_retry_after {
                let wait = answer["retry_after_ms"].as_u64().unwrap_or(1000);
                let resume = shared.start.elapsed() + Duration::from_millis(wait);
                tenant
                    .resume_at_ns
                    .fetch_max(resume.as_nanos() as u64, Ordering::Relaxed);
            }
        }
        other => record_error(&tenant, format!("http {other}")),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn record_error(tenant: &Tenant, what: String) {
    *lock(&tenant.observed).errors.entry(what).or_default() += 1;
}

async fn drive(shared: Arc<Shared>, tenant: Arc<Tenant>) {
    let permits = Arc::new(Semaphore::new(shared.args.concurrency));
    let deadline = shared.start + Duration::from_secs_f64(shared.args.duration_secs);
    let mut next = Instant::now();
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let resume =
            shared.start + Duration::from_nanos(tenant.resume_at_ns.load(Ordering::Relaxed));
        if resume > now {
            tokio::time::sleep_until(resume.min(deadline).into()).await;
            next = next.max(Instant::now());
            continue;
        }
        let permit = if tenant.rate > 0.0 {
            // Open loop: send when due, whatever the answers are doing.
            if next > now {
                tokio::time::sleep_until(next.into()).await;
            }
            let t = shared.start.elapsed().as_secs_f64();
            let rate = tenant.rate * Burst::factor_at(shared.burst, t);
            next += Duration::from_secs_f64(1.0 / rate);
            let second = shared.start.elapsed().as_secs() as usize;
            bump(&tenant.timeline, second, 0);
            lock(&tenant.observed).offered += 1;
            match permits.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    record_error(&tenant, "client_saturated".into());
                    continue;
                }
            }
        } else {
            let Ok(p) = permits.clone().acquire_owned().await else {
                break;
            };
            let second = shared.start.elapsed().as_secs() as usize;
            bump(&tenant.timeline, second, 0);
            lock(&tenant.observed).offered += 1;
            p
        };
        let (shared, tenant) = (shared.clone(), tenant.clone());
        tokio::spawn(async move {
            one_request(shared, tenant).await;
            drop(permit);
        });
    }
    let _ = permits.acquire_many(shared.args.concurrency as u32).await;
}

pub async fn run(args: LoadArgs) -> Result<Summary, String> {
    run_with_timeline(args).await.map(|(summary, _)| summary)
}

/// Per tenant label, one `[offered, admitted, refused]` per second.
pub type Timelines = Vec<(String, Vec<[u64; 3]>)>;

pub async fn run_with_timeline(args: LoadArgs) -> Result<(Summary, Timelines), String> {
    let (path, content_type) = route(&args.api, &args.topic, args.async_mode)?;
    let uri: Uri = format!("{}{path}", args.url.trim_end_matches('/'))
        .parse()
        .map_err(|e| format!("bad --url: {e}"))?;
    let burst = args.burst.as_deref().map(Burst::parse).transpose()?;
    let tenants: Vec<Arc<Tenant>> = args
        .tenants
        .iter()
        .map(|spec| {
            let (key, rate) = match spec.rsplit_once('@') {
                Some((k, r)) => (
                    k,
                    r.parse::<f64>()
                        .map_err(|_| format!("bad rate in {spec:?}"))?,
                ),
                None => (spec.as_str(), 0.0),
            };
            Ok(Arc::new(Tenant {
                key: key.to_string(),
                rate,
                observed: Arc::default(),
                timeline: Arc::default(),
                resume_at_ns: AtomicU64::new(0),
            }))
        })
        .collect::<Result<_, String>>()?;
    let shared = Arc::new(Shared {
        client: client(),
        uri,
        content_type,
        body: crate::coding::encode(
            &args.content_encoding,
            &body_for(
                &args.api,
                args.records_per_request,
                args.record_size,
                args.log_values,
            ),
        )?,
        start: Instant::now(),
        args: args.clone(),
        burst,
        next_key: AtomicU64::new(0),
        run_id: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    });
    let progress = tokio::spawn(progress(shared.clone(), tenants.clone()));
    let drivers: Vec<_> = tenants
        .iter()
        .map(|t| tokio::spawn(drive(shared.clone(), t.clone())))
        .collect();
    for d in drivers {
        let _ = d.await;
    }
    progress.abort();
    eprintln!();
    let elapsed = args.duration_secs;
    let observed = tenants
        .iter()
        .map(|t| (label(&t.key), lock(&t.observed).clone()))
        .collect();
    let summary = Summary::new(elapsed, args.records_per_request, observed);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.csv {
        write_timeline(path, &tenants)?;
    }
    let timelines = tenants
        .iter()
        .map(|t| (label(&t.key), lock(&t.timeline).clone()))
        .collect();
    Ok((summary, timelines))
}

/// Keys are secrets: reports name a tenant by the key's first characters only.
fn label(key: &str) -> String {
    key.chars().take(10).collect()
}

fn write_timeline(path: &std::path::Path, tenants: &[Arc<Tenant>]) -> Result<(), String> {
    let mut out = String::from("second,tenant,offered,admitted,refused\n");
    for t in tenants {
        for (s, [o, a, r]) in lock(&t.timeline).iter().enumerate() {
            out.push_str(&format!("{s},{},{o},{a},{r}\n", label(&t.key)));
        }
    }
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
}

async fn progress(shared: Arc<Shared>, tenants: Vec<Arc<Tenant>>) {
    let mut last: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut line = format!("\r[{:>5.1}s]", shared.start.elapsed().as_secs_f64());
        for t in &tenants {
            let o = lock(&t.observed);
            let refused: u64 = o.refused.values().sum();
            let (pa, pr) = last
                .insert(label(&t.key), (o.admitted, refused))
                .unwrap_or((0, 0));
            line.push_str(&format!(
                "  {}: admitted {}/s refused {}/s",
                label(&t.key),
                o.admitted - pa,
                refused - pr
            ));
        }
        eprint!("{line}   ");
    }
}
