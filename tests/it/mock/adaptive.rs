//! Adaptive broker protection against librdkafka's mock cluster, whose broker round-trip time
//! the test raises and lowers: the limit falls before the buffer fills and refusals say
//! `adaptive`; once the broker is fast again, 90 % of the healthy admitted rate is back within
//! 3 s and the limit reaches the configured budget and holds (no oscillation); under a
//! low limit, batch is refused first and critical keeps its share. (The controller's rules are
//! unit-tested with a stepped clock in `src/adaptive/controller.rs`.)
//!
//! Offered load here comes from real clients on the real clock: the assertions are on bands,
//! and each names the time it allows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::exposition::{scrape, value};
use crate::common::load::offer;
use crate::common::*;
use floodgate::config::{Config, Priority};

const TOPIC: &str = "test.adaptive";

fn adaptive(cfg: &mut Config, ceiling: u64) {
    cfg.global.records_per_sec = Some(ceiling);
    cfg.global.records_burst = Some(ceiling);
    cfg.adaptive.enabled = true;
    cfg.adaptive.interval_ms = 250;
    // Well above what a loaded test machine shows, well below the 300 ms the broker is given.
    cfg.adaptive.target_delivery_ms = Some(200);
    cfg.adaptive.decrease_cooldown_ms = 500;
    // Growth keeps its defaults (slow start x2 per interval, then 5 % per second): recovery
    // time is what the first test measures.
}

#[derive(Default)]
struct Tally {
    admitted: AtomicU64,
    adaptive: AtomicU64,
    /// 429 for another reason (the configured budgets).
    budget: AtomicU64,
    other: AtomicU64,
}

/// Sends 10-record async requests with `key` until `stop`, at most `per_sec` requests per
/// second (0: as fast as it can).
fn sender(
    url: String,
    key: &'static str,
    per_sec: u64,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> tokio::task::JoinHandle<()> {
    offer(url, key, per_sec, stop, move |status, _, answer| {
        match (status, answer["reason"].as_str()) {
            (202, _) => tally.admitted.fetch_add(10, Relaxed),
            (429, Some("adaptive")) => tally.adaptive.fetch_add(1, Relaxed),
            (429, _) => tally.budget.fetch_add(1, Relaxed),
            _ => tally.other.fetch_add(1, Relaxed),
        };
    })
}

/// The series `name` now (NaN when absent).
async fn metric(gw: &Gateway, name: &str) -> f64 {
    value(&scrape(gw).await, name).unwrap_or(f64::NAN)
}

fn buffer_fill(text: &str) -> f64 {
    let get = |name: &str| value(text, name).unwrap_or(0.0);
    (get("floodgate_buffer_held_records") / get("floodgate_buffer_capacity_records").max(1.0))
        .max(get("floodgate_buffer_held_bytes") / get("floodgate_buffer_capacity_bytes").max(1.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_broker_lowers_the_limit_before_the_buffer_fills_and_it_recovers_without_oscillating(
) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (cluster, gw) = gateway_on_mock(TOPIC, Time::Real, |cfg| {
        adaptive(cfg, 3000);
        cfg.buffer.max_records = 20_000;
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let senders: Vec<_> = (0..3)
        .map(|_| sender(gw.url(TOPIC), KEY, 0, stop.clone(), tally.clone()))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // What a healthy broker is given: the admitted rate over two seconds before the fault.
    let before = (Instant::now(), tally.admitted.load(Relaxed));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let healthy_rate =
        (tally.admitted.load(Relaxed) - before.1) as f64 / before.0.elapsed().as_secs_f64();
    assert_eq!(
        metric(&gw, "floodgate_adaptive_limit_ratio").await,
        1.0,
        "a fast broker: no limit"
    );
    assert_eq!(tally.adaptive.load(Relaxed), 0);

    cluster
        .broker_round_trip_time(1, Duration::from_millis(300))
        .expect("rtt");
    let slowed = Instant::now();
    let mut worst_fill = 0.0f64;
    let mut fell_after = None;
    while slowed.elapsed() < Duration::from_secs(8) {
        let text = scrape(&gw).await;
        worst_fill = worst_fill.max(buffer_fill(&text));
        if fell_after.is_none() && metric(&gw, "floodgate_adaptive_limit_ratio").await < 1.0 {
            fell_after = Some(slowed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fell_after = fell_after.expect("the limit fell");
    assert!(
        fell_after < Duration::from_secs(3),
        "fell after {fell_after:?}"
    );
    let low = metric(&gw, "floodgate_adaptive_limit_ratio").await;
    assert!(low < 0.5, "limit {low}");
    // Why it is there, in the admin API: the cause, and where healthy signals take it back.
    let (_, view) = admin_get(&gw, "/admin/adaptive").await;
    // Cutting (or at the floor) while the p99 is over the target, or while records wait with
    // nothing delivered for longer than it (a 300 ms round trip at a low limit: the stall
    // signal); holding while deliveries are too sparse to measure with records waiting.
    let (phase, reason) = (
        view["phase"].as_str().unwrap_or(""),
        view["reason"].as_str().unwrap_or(""),
    );
    assert!(
        match phase {
            "cutting" | "floor" => {
                reason.contains("p90 is above 200.0 ms")
                    || (reason.contains("nothing was delivered") && reason.contains("records wait"))
            }
            "dead_band" => reason.contains("between 100.0 ms and 200.0 ms"),
            _ => false,
        },
        "{view}"
    );
    assert!(
        view["recovery_level_ratio"]
            .as_f64()
            .is_some_and(|l| l >= 0.9),
        "Kafka carried the whole budget before the fault: {view}"
    );
    assert_eq!(view["dead_band_ms"]["target"], 200.0, "{view}");
    assert!(
        worst_fill < 0.5,
        "the buffer reached {worst_fill:.2} of its capacity"
    );
    assert!(tally.adaptive.load(Relaxed) > 0, "refusals say adaptive");
    assert_eq!(tally.other.load(Relaxed), 0, "nothing but 202 and 429");

    cluster
        .broker_round_trip_time(1, Duration::from_millis(1))
        .expect("rtt");
    let fast = Instant::now();
    // Service is back when a second's admissions reach 90 % of the healthy rate: sampled every
    // 100 ms, the first second that does must end within 3 s of the broker's recovery.
    let mut seen = std::collections::VecDeque::from([(fast, tally.admitted.load(Relaxed))]);
    let served_after = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = (Instant::now(), tally.admitted.load(Relaxed));
        seen.push_back(now);
        while seen.len() > 2 && now.0 - seen[1].0 >= Duration::from_secs(1) {
            seen.pop_front();
        }
        let (t0, n0) = seen[0];
        let span = (now.0 - t0).as_secs_f64();
        if span >= 0.95 && (now.1 - n0) as f64 / span >= 0.9 * healthy_rate {
            break fast.elapsed();
        }
        assert!(
            fast.elapsed() < Duration::from_secs(3),
            "not back to 90 % of {healthy_rate:.0} records/s within 3 s: {:.0} in the last second",
            (now.1 - n0) as f64 / span
        );
    };
    loop {
        if metric(&gw, "floodgate_adaptive_limit_ratio").await >= 1.0 {
            break;
        }
        assert!(fast.elapsed() < Duration::from_secs(15), "did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recovered = fast.elapsed();
    let (_, status) = admin_get(&gw, "/admin/status").await;
    assert_eq!(status["adaptive"]["phase"], "ceiling", "{status}");
    // Held there: sampled for three seconds after recovery.
    let held = Instant::now();
    let (before_admitted, before_refused) =
        (tally.admitted.load(Relaxed), tally.adaptive.load(Relaxed));
    while held.elapsed() < Duration::from_secs(3) {
        assert_eq!(
            metric(&gw, "floodgate_adaptive_limit_ratio").await,
            1.0,
            "oscillation"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rate = (tally.admitted.load(Relaxed) - before_admitted) as f64 / 3.0;
    // The global bucket (3000/s, burst 3000) may start these 3 s full: at most 4000/s.
    assert!(
        (2400.0..=4200.0).contains(&rate),
        "after recovery: {rate} records/s against a 3000/s budget"
    );
    assert_eq!(
        tally.adaptive.load(Relaxed),
        before_refused,
        "no adaptive refusal once recovered"
    );
    eprintln!("healthy: {healthy_rate:.0} records/s; limit fell {fell_after:?} after the slowdown to {low:.2}, buffer at most {worst_fill:.3}; 90 % of healthy service {served_after:?} after the broker recovered, the limit at the budget {recovered:?} after; {rate:.0} records/s held");
    stop.store(true, Relaxed);
    for s in senders {
        let _ = s.await;
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_low_limit_batch_is_refused_first_and_critical_keeps_its_share() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (cluster, gw) = gateway_on_mock(TOPIC, Time::Real, |cfg| {
        adaptive(cfg, 2000);
        // The ceiling is the section's own, not a global budget: without pressure nobody is
        // refused at all. A slow broker takes the limit to its floor, 1000 records/s.
        cfg.global.records_per_sec = None;
        cfg.global.records_burst = None;
        cfg.adaptive.max_records_per_sec = Some(2000);
        cfg.adaptive.floor = 0.5;
        cfg.tenants[0].priority = Some(Priority::Critical);
        let mut standard = tenant("standard", "test-key-standard", &["test.*"]);
        standard.priority = Some(Priority::Standard);
        let mut batch = tenant("batch", "test-key-batch", &["test.*"]);
        batch.priority = Some(Priority::Batch);
        cfg.tenants.extend([standard, batch]);
    })
    .await;
    let (s, view) = admin_get(&gw, "/admin/tenants/batch").await;
    assert_eq!((s, view["priority"].as_str()), (200, Some("batch")));
    let stop = Arc::new(AtomicBool::new(false));
    let tallies: Vec<Arc<Tally>> = (0..3).map(|_| Arc::new(Tally::default())).collect();
    let mut senders = Vec::new();
    // critical: 40 requests/s of 10 = 400 records/s; the others as fast as they can.
    senders.push(sender(
        gw.url(TOPIC),
        KEY,
        40,
        stop.clone(),
        tallies[0].clone(),
    ));
    for _ in 0..2 {
        senders.push(sender(
            gw.url(TOPIC),
            "test-key-standard",
            0,
            stop.clone(),
            tallies[1].clone(),
        ));
        senders.push(sender(
            gw.url(TOPIC),
            "test-key-batch",
            0,
            stop.clone(),
            tallies[2].clone(),
        ));
    }
    // No pressure: everyone is served.
    // The first deliveries (connections, metadata) may be slow enough to move the limit:
    // measure once it is back at the ceiling.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let warm = Instant::now();
    while metric(&gw, "floodgate_adaptive_limit_ratio").await < 1.0 {
        assert!(
            warm.elapsed() < Duration::from_secs(10),
            "no recovery after warm-up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused_before: u64 = tallies.iter().map(|t| t.adaptive.load(Relaxed)).sum();
    let admitted_before: Vec<u64> = tallies.iter().map(|t| t.admitted.load(Relaxed)).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, view) = admin_get(&gw, "/admin/adaptive").await;
    assert!(
        tallies
            .iter()
            .zip(&admitted_before)
            .all(|(t, b)| t.admitted.load(Relaxed) > *b),
        "everyone served: {view}"
    );
    assert_eq!(
        tallies
            .iter()
            .map(|t| t.adaptive.load(Relaxed))
            .sum::<u64>(),
        refused_before,
        "no adaptive refusal without pressure: {view}"
    );

    cluster
        .broker_round_trip_time(1, Duration::from_millis(300))
        .expect("rtt");
    let started = Instant::now();
    while metric(&gw, "floodgate_adaptive_limit_ratio").await > 0.5 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the limit did not reach its floor"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let the plan settle, then measure five seconds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before: Vec<u64> = tallies.iter().map(|t| t.admitted.load(Relaxed)).collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rates: Vec<f64> = tallies
        .iter()
        .zip(&before)
        .map(|(t, b)| (t.admitted.load(Relaxed) - b) as f64 / 5.0)
        .collect();
    let limit = 1000.0;
    eprintln!(
        "records/s under a limit of {limit}: critical {:.0}, standard {:.0}, batch {:.0}",
        rates[0], rates[1], rates[2]
    );
    assert!(
        rates[0] >= 0.2 * limit * 0.85,
        "critical kept its reserve: {rates:?}"
    );
    assert!(
        rates[0] >= 400.0 * 0.85,
        "critical got what it asked for: {rates:?}"
    );
    assert!(rates[1] >= 0.35 * limit, "standard got the rest: {rates:?}");
    assert!(rates[2] <= 0.05 * limit, "batch refused first: {rates:?}");
    assert!(
        rates.iter().sum::<f64>() <= limit * 1.15,
        "within the limit: {rates:?}"
    );
    assert!(tallies[2].adaptive.load(Relaxed) > 0);
    stop.store(true, Relaxed);
    for s in senders {
        let _ = s.await;
    }
    gw.shutdown().await;
}
