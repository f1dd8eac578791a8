//! Adaptive admission judged from outside, on a real broker path: a Tansu of the test's own
//! behind a TCP proxy on loopback that delays the broker's answers by 300 ms for 12 s
//! (`common::delay_proxy`: bytes forwarded as they are, only later), three tenants of priority
//! critical, standard and batch each offering 150 requests/s of 10 records, `[adaptive]
//! enabled` with `max_records_per_sec = 9000` and every other setting at its default.
//!
//! What is judged is what the producers get, against what they got before the fault:
//! - at least 80 % of the pre-fault admitted rate 1–5 s after the fault ends, and at least
//!   95 % 8–14 s after;
//! - during the fault, batch is shed first (refused first, and admitted the smallest share);
//! - no saw-tooth: at most one cut of the limit in the 20 s after the fault ends, the broker
//!   healthy all along;
//! - the limit settles within 10 % of what the path carries: measured before the gateway
//!   starts (a producer with the gateway's settings sending as fast as it can through the
//!   proxy), capped at the ceiling — the limit's median over the last 10 s is at least 90 % of
//!   it, not a fraction.
//!
//! The same with a base delay of 20 ms (a slower but healthy path, as a cluster across zones
//! is). And once after a slow **ramp** (the hostile review of #44: answers delayed ×1.04 more
//! every 0.5 s, to +150 ms over 40 s, held 10 s, then 5 s healthy): before, the learned noise
//! fed itself on the ramp, the target rose to ~950 ms and the 300 ms fault after it was never
//! cut; it must be cut, batch first. The broker's own address is the proxy's (Tansu advertises it), so every client of the
//! gateway goes through it. Each run prints the controller's trace (`GET /admin/adaptive`
//! every 0.5 s from the fault on). `FLOODGATE_RECOVERY_RUNS=5` repeats a scenario five times
//! in a row (as scripts/test.sh does), and the judgement is on the median over the runs of each
//! figure (the share admitted 1–5 s and 8–14 s after, the cuts after, where the limit settles,
//! when each class was first refused and what it was admitted during the fault), with the
//! thresholds above unchanged; each run's own failures are printed beside. The median is what
//! makes the judgement hold on a machine shared with builds: a run in which the machine itself
//! stalls the loopback path (a compiler taking both cores delays Tansu, the proxy and the
//! gateway alike: delivery p90 of 50–225 ms on a path whose baseline is 8 ms, seconds of the
//! test's own polls late) is one run of five, and the other four decide.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use crate::common::delay_proxy::DelayProxy;
use crate::common::faults::OwnTansu;
use crate::common::*;
use floodgate::config::Priority;
use serde_json::{json, Value};

/// (tenant and key, priority), in the order the figures are printed.
const CLASSES: [(&str, Priority); 3] = [
    ("critical", Priority::Critical),
    ("standard", Priority::Standard),
    ("batch", Priority::Batch),
];
const REQUESTS_PER_SEC: u64 = 150;
const RECORDS_PER_REQUEST: usize = 10;
const CEILING: u64 = 9000;
/// Requests one class may have unanswered before a tick is skipped (counted, never queued).
const MAX_INFLIGHT: usize = 256;

/// Seconds from the first request: load until `FAULT_AT`, the pre-fault rate measured over
/// the `PRE_S` before it, the fault for `FAULT_S`, then `AFTER_S` judged.
const FAULT_AT: f64 = 10.0;
const PRE_S: f64 = 5.0;
const FAULT_S: f64 = 12.0;
const AFTER_S: f64 = 20.0;

#[derive(Debug, Clone, Copy)]
struct Scenario {
    /// The path's delay while healthy.
    base: Duration,
    /// Added while the fault lasts.
    fault: Duration,
    /// Zero, or: from `FAULT_AT`, a ramp of the added delay to this (x1.04 per 0.5 s of the
    /// path's ~7 ms), held `RAMP_HOLD_S`, then `RAMP_HEALTHY_S` healthy before the fault.
    ramp_to: Duration,
}

const RAMP_HOLD_S: f64 = 10.0;
const RAMP_HEALTHY_S: f64 = 5.0;

impl Scenario {
    /// The added delay `k` ramp steps in (ms): the path's ~7 ms grown x1.04 per step.
    fn ramp_step_ms(k: u32) -> f64 {
        7.0 * 1.04f64.powf(f64::from(k)) - 7.0
    }

    /// Seconds the ramp takes to reach `ramp_to`.
    fn ramp_s(&self) -> f64 {
        let to = self.ramp_to.as_secs_f64() * 1000.0;
        if to <= 0.0 {
            return 0.0;
        }
        let steps = (0..).find(|k| Self::ramp_step_ms(*k) >= to).unwrap_or(0);
        0.5 * f64::from(steps)
    }

    /// When the fault begins (s from the first request).
    fn fault_at(&self) -> f64 {
        if self.ramp_to.is_zero() {
            FAULT_AT
        } else {
            FAULT_AT + self.ramp_s() + RAMP_HOLD_S + RAMP_HEALTHY_S
        }
    }

    /// The delay the ramp sets at `at` (s), before the fault.
    fn ramp_delay(&self, at: f64) -> Duration {
        let into = at - FAULT_AT;
        if self.ramp_to.is_zero() || into < 0.0 || into >= self.ramp_s() + RAMP_HOLD_S {
            return self.base;
        }
        let k = (into / 0.5) as u32;
        let added = Duration::from_secs_f64(Self::ramp_step_ms(k) / 1000.0).min(self.ramp_to);
        self.base + added
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Admitted,
    Adaptive,
    /// 429 for another reason, or any other status.
    Other,
    /// No answer (or the tick skipped: `MAX_INFLIGHT` unanswered).
    Failed,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    at: f64,
    class: usize,
    kind: Kind,
}

type Events = Arc<Mutex<Vec<Event>>>;

/// What the answers that were neither 202 nor an adaptive 429 said (the first few).
static OTHER: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn note_other(what: String) {
    let mut other = OTHER.lock().expect("other");
    if other.len() < 5 {
        other.push(what);
    }
}

fn key(class: usize) -> String {
    format!("recovery-key-{}", CLASSES[class].0)
}

/// Offers `REQUESTS_PER_SEC` async requests of `RECORDS_PER_REQUEST` records as `class`, each
/// on its own task (open loop: a slow answer does not slow the offer), until `stop`.
fn offer(
    url: String,
    class: usize,
    t0: Instant,
    events: Events,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let records: Vec<Value> = (0..RECORDS_PER_REQUEST)
            .map(|i| json!({"value": {"class": CLASSES[class].0, "i": i, "pad": "x".repeat(64)}}))
            .collect();
        let body = bytes::Bytes::from(json!({ "records": records }).to_string());
        let inflight = Arc::new(tokio::sync::Semaphore::new(MAX_INFLIGHT));
        let mut tick =
            tokio::time::interval(Duration::from_nanos(1_000_000_000 / REQUESTS_PER_SEC));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let key = key(class);
        while !stop.load(Relaxed) {
            tick.tick().await;
            let note = {
                let events = events.clone();
                move |kind| {
                    let at = t0.elapsed().as_secs_f64();
                    events
                        .lock()
                        .expect("events")
                        .push(Event { at, class, kind });
                }
            };
            let Ok(permit) = inflight.clone().try_acquire_owned() else {
                note(Kind::Failed);
                continue;
            };
            let request = http
                .post(format!("{url}?async=true"))
                .bearer_auth(&key)
                .header("content-type", "application/json")
                .body(body.clone());
            tokio::spawn(async move {
                let kind = match request.send().await {
                    Err(_) => Kind::Failed,
                    Ok(r) if r.status().as_u16() == 202 => Kind::Admitted,
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let v: Value = r.json().await.unwrap_or_default();
                        if status == 429 && v["reason"] == "adaptive" {
                            Kind::Adaptive
                        } else {
                            note_other(format!("{status} {v}"));
                            Kind::Other
                        }
                    }
                };
                note(kind);
                drop(permit);
            });
        }
        // Every request sent is answered before the gateway stops (a stopping gateway answers
        // 503, which is not what is judged here).
        let _ = inflight.acquire_many(MAX_INFLIGHT as u32).await;
    })
}

/// `GET /admin/adaptive` and the decreases of the limit so far (every cause, from the
/// metrics); `None` when either got no answer.
async fn poll(gw: &Gateway) -> Option<(Value, u64)> {
    let view: Value = client()
        .get(gw.admin_url("/admin/adaptive"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let text = client()
        .get(gw.admin_url("/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let cuts = text
        .lines()
        .filter(|l| l.starts_with("floodgate_adaptive_changes_total{direction=\"decrease\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64;
    Some((view, cuts))
}

/// One poll of the controller: seconds since the first request, the view, cuts so far.
#[derive(Debug, Clone)]
struct Poll {
    at: f64,
    view: Value,
    cuts: u64,
}

impl Poll {
    fn limit(&self) -> f64 {
        self.view["limit_records_per_sec"].as_f64().unwrap_or(0.0)
    }

    /// One line of the trace, relative to the fault's end (`end`).
    fn line(&self, start: f64, end: f64) -> String {
        let v = &self.view;
        let ms = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
        let when = if self.at < end {
            format!("fault+{:4.1}", self.at - start)
        } else {
            format!("after+{:4.1}", self.at - end)
        };
        let signal = &v["signal"];
        format!(
            "{when}s limit {:>5.0} rec/s ({:>4.2}) {:<18} p99 {:>6} ms target {:>6} ms{} cuts {} | {}",
            self.limit(),
            v["limit_ratio"].as_f64().unwrap_or(f64::NAN),
            v["phase"].as_str().unwrap_or("?"),
            ms(&v["delivery_p99_ms"]),
            ms(&v["target_delivery_ms"]),
            if signal.is_object() {
                format!(
                    " | p90 {} p50 {} ms of {} deliveries; baseline {} noise {} healthy below {} ms",
                    ms(&signal["value_ms"]),
                    ms(&signal["p50_ms"]),
                    signal["deliveries"],
                    ms(&signal["baseline_ms"]),
                    ms(&signal["noise_ms"]),
                    ms(&signal["healthy_below_ms"])
                )
            } else {
                String::new()
            },
            self.cuts,
            v["last_move"].as_str().unwrap_or("?"),
        )
    }
}

/// What one run measured.
#[derive(Debug)]
struct Figures {
    offered: f64,
    pre: f64,
    early: f64,
    late: f64,
    /// Per class: first adaptive refusal after the fault began (s), and the share of its
    /// offered requests admitted during the fault.
    first_refused: [Option<f64>; 3],
    fault_admitted: [f64; 3],
    /// Cuts before the fault (during a ramp), while it lasted, and in the 20 s after it.
    cuts_before: u64,
    cuts_during: u64,
    cuts_after: u64,
    /// What the healthy path carries (records/s, measured before the gateway starts).
    capacity: f64,
    /// Where the limit settles: its median over the last 10 s judged (records/s).
    settled: f64,
    other: usize,
    /// Requests that got no answer, or ticks skipped with `MAX_INFLIGHT` unanswered.
    failed: usize,
}

impl Figures {
    /// Each figure's median over `runs`: the shares after the fault as medians of each run's
    /// own share (of its own pre-fault rate), a class never refused as later than any time;
    /// answers other than 202/429 adaptive summed (one is a failure in any run).
    fn median_of(runs: &[Figures]) -> Figures {
        let of = |f: &dyn Fn(&Figures) -> f64| median(runs.iter().map(f).collect());
        let pre = of(&|r| r.pre);
        let refused = |class: usize| {
            let at = of(&|r| r.first_refused[class].unwrap_or(f64::INFINITY));
            at.is_finite().then_some(at)
        };
        Figures {
            offered: of(&|r| r.offered),
            pre,
            early: pre * of(&|r| r.early / r.pre.max(1.0)),
            late: pre * of(&|r| r.late / r.pre.max(1.0)),
            first_refused: [refused(0), refused(1), refused(2)],
            fault_admitted: [
                of(&|r| r.fault_admitted[0]),
                of(&|r| r.fault_admitted[1]),
                of(&|r| r.fault_admitted[2]),
            ],
            cuts_before: of(&|r| r.cuts_before as f64) as u64,
            cuts_during: of(&|r| r.cuts_during as f64) as u64,
            cuts_after: of(&|r| r.cuts_after as f64) as u64,
            capacity: of(&|r| r.capacity),
            settled: of(&|r| r.settled),
            other: runs.iter().map(|r| r.other).sum(),
            failed: runs.iter().map(|r| r.failed).sum(),
        }
    }

    fn summary(&self) -> String {
        let f = |o: Option<f64>| o.map_or("never".to_string(), |t| format!("{t:.1} s"));
        format!(
            "offered {:.0} rec/s; pre-fault admitted {:.0} rec/s; 1-5 s after the fault {:.0} \
             ({:.0} %), 8-14 s after {:.0} ({:.0} %); first adaptive refusal in the fault: \
             critical {}, standard {}, batch {}; admitted during the fault: critical {:.0} %, \
             standard {:.0} %, batch {:.0} %; cuts before the fault {}, in it {}, in the 20 s \
             after {}; the \
             limit's median \
             over the last 10 s {:.0} rec/s (the path carries {:.0}, the ceiling is {}); other \
             answers {}, unanswered {}",
            self.offered,
            self.pre,
            self.early,
            100.0 * self.early / self.pre,
            self.late,
            100.0 * self.late / self.pre,
            f(self.first_refused[0]),
            f(self.first_refused[1]),
            f(self.first_refused[2]),
            100.0 * self.fault_admitted[0],
            100.0 * self.fault_admitted[1],
            100.0 * self.fault_admitted[2],
            self.cuts_before,
            self.cuts_during,
            self.cuts_after,
            self.settled,
            self.capacity,
            CEILING,
            self.other,
            self.failed,
        )
    }

    /// After a ramp: the ramp itself is seen (a path 20 x slower than its baseline is cut),
    /// and so is the fault after it, batch shed first; nothing else is judged (the ramp was
    /// cut, so the pre-fault rate is a recovery's, not the path's).
    fn ramp_failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        if self.cuts_before == 0 {
            failed.push("the ramp to +150 ms (~20 x the path) was never cut".to_string());
        }
        if self.cuts_during == 0 {
            failed.push("the 300 ms fault after the ramp was never cut".to_string());
        }
        let at = |o: Option<f64>| o.unwrap_or(f64::INFINITY);
        if !(self.first_refused[2].is_some()
            && at(self.first_refused[2]) <= at(self.first_refused[1])
            && at(self.first_refused[1]) <= at(self.first_refused[0]))
        {
            failed.push(format!("batch refused first: {:?}", self.first_refused));
        }
        if self.other != 0 {
            failed.push(format!(
                "{} answers not 202/429 adaptive: {:?}",
                self.other,
                OTHER.lock().expect("other")
            ));
        }
        failed
    }

    /// Every judgement of the run; the failures, if any.
    fn failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        let mut check = |ok: bool, what: String| {
            if !ok {
                failed.push(what);
            }
        };
        check(
            self.pre >= 0.9 * self.offered,
            format!(
                "a healthy path carries what is offered: {:.0} of {:.0}",
                self.pre, self.offered
            ),
        );
        check(
            self.early >= 0.8 * self.pre,
            format!("1-5 s after: {:.0} < 80 % of {:.0}", self.early, self.pre),
        );
        check(
            self.late >= 0.95 * self.pre,
            format!("8-14 s after: {:.0} < 95 % of {:.0}", self.late, self.pre),
        );
        let at = |o: Option<f64>| o.unwrap_or(f64::INFINITY);
        check(
            self.first_refused[2].is_some()
                && at(self.first_refused[2]) <= at(self.first_refused[1])
                && at(self.first_refused[1]) <= at(self.first_refused[0]),
            format!("batch refused first: {:?}", self.first_refused),
        );
        check(
            self.fault_admitted[2] <= self.fault_admitted[1]
                && self.fault_admitted[1] <= self.fault_admitted[0],
            format!("batch shed most: {:?}", self.fault_admitted),
        );
        check(
            self.cuts_after <= 1,
            format!("{} cuts in the 20 s after the fault", self.cuts_after),
        );
        let carried = self.capacity.min(CEILING as f64);
        check(
            self.settled >= 0.9 * carried,
            format!(
                "the limit settles within 10 % of what the path carries ({carried:.0}, the \
                 ceiling at most): {:.0}",
                self.settled
            ),
        );
        check(
            self.other == 0,
            format!(
                "{} answers not 202/429 adaptive: {:?}",
                self.other,
                OTHER.lock().expect("other")
            ),
        );
        failed
    }
}

/// Counts the records the broker acknowledged.
struct Acked(Arc<std::sync::atomic::AtomicU64>);

impl ClientContext for Acked {}

impl ProducerContext for Acked {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_ok() {
            self.0.fetch_add(1, Relaxed);
        }
    }
}

/// What the path carries: records/s a producer with the gateway's settings (acks=all,
/// idempotence, 5 ms linger, lz4, 5 requests in flight) gets acknowledged when it sends
/// `CAPACITY_RECORDS` records of the test's size as fast as it can, through the proxy.
fn path_capacity(bootstrap: &str, topic: &str) -> f64 {
    const CAPACITY_RECORDS: u64 = 40_000;
    let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let producer: ThreadedProducer<Acked> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        .set("max.in.flight.requests.per.connection", "5")
        .create_with_context(Acked(acked.clone()))
        .expect("producer");
    let value = json!({"class": "capacity", "i": 0, "pad": "x".repeat(64)}).to_string();
    // Connected, with a producer id, before the clock starts.
    let _ = producer.send(BaseRecord::<(), _>::to(topic).payload(&value));
    let _ = rdkafka::producer::Producer::flush(&producer, Duration::from_secs(10));
    let before = acked.load(Relaxed);
    let started = Instant::now();
    for _ in 0..CAPACITY_RECORDS {
        let mut record = BaseRecord::<(), _>::to(topic).payload(&value);
        while let Err((_, back)) = producer.send(record) {
            // The queue is full: let deliveries drain it.
            record = back;
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let _ = rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30));
    (acked.load(Relaxed) - before) as f64 / started.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

async fn run_once(scenario: Scenario) -> (Figures, Vec<String>) {
    // The proxy's port first: Tansu advertises it, so the gateway's producer goes through it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let tansu = OwnTansu::start_advertising(Some(listener.local_addr().expect("addr").port()));
    let target = format!("127.0.0.1:{}", tansu.port).parse().expect("addr");
    let proxy = DelayProxy::start(listener, target, scenario.base);
    let bootstrap = proxy.addr.to_string();
    let topic = unique_topic("test.recovery");
    create_topic(&bootstrap, &topic, 3).await;
    let capacity = {
        let (b, t) = (bootstrap.clone(), topic.clone());
        tokio::task::spawn_blocking(move || path_capacity(&b, &t))
            .await
            .expect("capacity")
    };

    let mut cfg = config(&bootstrap);
    cfg.tenants = CLASSES
        .iter()
        .enumerate()
        .map(|(i, (id, priority))| {
            let mut t = tenant(id, &key(i), &["test.*"]);
            t.priority = Some(*priority);
            t
        })
        .collect();
    cfg.adaptive.enabled = true;
    cfg.adaptive.max_records_per_sec = Some(CEILING);
    let gw = Gateway::start(cfg).await;

    let t0 = Instant::now();
    let events: Events = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..CLASSES.len())
        .map(|c| offer(gw.url(&topic), c, t0, events.clone(), stop.clone()))
        .collect();

    let start = scenario.fault_at();
    let end = start + FAULT_S;
    let mut polls = Vec::new();
    let mut faulted = false;
    let mut healed = false;
    let mut next = Duration::ZERO;
    loop {
        let at = t0.elapsed().as_secs_f64();
        if !faulted && at < start {
            proxy.set_delay(scenario.ramp_delay(at));
        }
        if !faulted && at >= start {
            proxy.set_delay(scenario.base + scenario.fault);
            faulted = true;
        }
        if !healed && at >= end {
            proxy.set_delay(scenario.base);
            healed = true;
        }
        if at >= end + AFTER_S + 0.5 {
            break;
        }
        if at >= start - 1.0 {
            // A poll the machine starved past the client's timeout is skipped, not fatal: the
            // figures are judged from the producers' answers and the polls that came back.
            match poll(&gw).await {
                Some((view, cuts)) => polls.push(Poll {
                    at: t0.elapsed().as_secs_f64(),
                    view,
                    cuts,
                }),
                None => eprintln!("a poll at {at:.1} s got no answer (skipped)"),
            }
        }
        next += poll_every();
        tokio::time::sleep_until((t0 + next).into()).await;
    }
    stop.store(true, Relaxed);
    for s in senders {
        let _ = s.await;
    }
    // Answers still on their way land in the events until the gateway stops.
    gw.shutdown().await;
    drop(proxy);
    drop(tansu);

    let events = events.lock().expect("events").clone();
    let rate = |from: f64, to: f64| {
        events
            .iter()
            .filter(|e| e.kind == Kind::Admitted && e.at >= from && e.at < to)
            .count() as f64
            * RECORDS_PER_REQUEST as f64
            / (to - from)
    };
    let in_fault = |e: &&Event| e.at >= start && e.at < end;
    let mut first_refused = [None; 3];
    let mut fault_admitted = [0.0; 3];
    for (class, first) in first_refused.iter_mut().enumerate() {
        let mine: Vec<&Event> = events
            .iter()
            .filter(in_fault)
            .filter(|e| e.class == class)
            .collect();
        *first = mine
            .iter()
            .filter(|e| e.kind == Kind::Adaptive)
            .map(|e| e.at - start)
            .reduce(f64::min);
        fault_admitted[class] = mine.iter().filter(|e| e.kind == Kind::Admitted).count() as f64
            / mine.len().max(1) as f64;
    }
    let cuts_at = |t: f64| polls.iter().rev().find(|p| p.at <= t).map_or(0, |p| p.cuts);
    let figures = Figures {
        offered: (REQUESTS_PER_SEC as usize * CLASSES.len() * RECORDS_PER_REQUEST) as f64,
        pre: rate(start - PRE_S, start),
        early: rate(end + 1.0, end + 5.0),
        late: rate(end + 8.0, end + 14.0),
        first_refused,
        fault_admitted,
        cuts_before: cuts_at(start),
        cuts_during: cuts_at(end) - cuts_at(start),
        cuts_after: cuts_at(end + AFTER_S) - cuts_at(end),
        capacity,
        settled: median(
            polls
                .iter()
                .filter(|p| p.at >= end + AFTER_S - 10.0)
                .map(Poll::limit)
                .collect(),
        ),
        other: events.iter().filter(|e| e.kind == Kind::Other).count(),
        failed: events.iter().filter(|e| e.kind == Kind::Failed).count(),
    };
    let trace = polls
        .iter()
        .filter(|p| p.at >= start)
        .map(|p| p.line(start, end))
        .collect();
    (figures, trace)
}

/// How often the controller is polled: 0.5 s (`FLOODGATE_RECOVERY_POLL_MS` to look closer).
fn poll_every() -> Duration {
    Duration::from_millis(
        std::env::var("FLOODGATE_RECOVERY_POLL_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(500),
    )
}

/// Runs `scenario` `FLOODGATE_RECOVERY_RUNS` times (1 by default) in a row and judges the
/// median over the runs of each figure (each run's own failures printed, not judged).
async fn judge(name: &str, scenario: Scenario) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let runs: usize = std::env::var("FLOODGATE_RECOVERY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut all = Vec::new();
    for run in 1..=runs {
        let (figures, trace) = run_once(scenario).await;
        eprintln!("{name} run {run}/{runs}: {}", figures.summary());
        eprintln!("{name} run {run}/{runs}: GET /admin/adaptive every 0.5 s from the fault on:");
        for line in &trace {
            eprintln!("  {line}");
        }
        for f in figures.failures() {
            eprintln!("{name} run {run}/{runs}, alone: {f}");
        }
        all.push(figures);
    }
    let median = Figures::median_of(&all);
    eprintln!("{name}, the median of {runs} runs: {}", median.summary());
    let failed = median.failures();
    assert!(
        failed.is_empty(),
        "{name}, the median of {runs} runs: {failed:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_ms_fault_on_a_real_broker_path_is_recovered_from_without_a_saw_tooth() {
    judge(
        "fast path",
        Scenario {
            base: Duration::ZERO,
            fault: Duration::from_millis(300),
            ramp_to: Duration::ZERO,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_path_20_ms_slower_the_limit_settles_at_what_the_path_carries() {
    judge(
        "20 ms path",
        Scenario {
            base: Duration::from_millis(20),
            fault: Duration::from_millis(300),
            ramp_to: Duration::ZERO,
        },
    )
    .await;
}

/// Once (the ramp alone takes 40 s): a path slowing x1.04 an interval to +150 ms, held, then
/// healthy 5 s, then the 300 ms fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_latency_ramp_does_not_blind_the_controller_to_the_fault_after_it() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (figures, trace) = run_once(Scenario {
        base: Duration::ZERO,
        fault: Duration::from_millis(300),
        ramp_to: Duration::from_millis(150),
    })
    .await;
    eprintln!("after a ramp: {}", figures.summary());
    for line in &trace {
        eprintln!("  {line}");
    }
    let failed = figures.ramp_failures();
    assert!(failed.is_empty(), "after a ramp: {failed:#?}");
}
