//! A flood of unique `Idempotency-Key`s keeps a single replica's memory within the stated
//! bound: `[idempotency] max_bytes` of answers, each counted with its bookkeeping, the oldest
//! evicted first and counted. Measured as the process's RSS (this binary runs nothing else),
//! through the same calls the pipeline makes for each keyed request: claim, pending, answer.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;
use floodgate::budget::ManualClock;
use floodgate::config::IdempotencyConfig;
use floodgate::idempotency::{
    Begin, Fingerprint, Idempotency, IdempotencyKey, StoredAnswer, ENTRY_OVERHEAD,
};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A sync answer with three offsets, as `/v1` writes it (its own allocation, as in the
/// pipeline).
fn answer(i: u64) -> StoredAnswer {
    let body = format!(
        "{{\"offsets\":[{{\"offset\":{i},\"partition\":0}},{{\"offset\":{},\"partition\":1}},{{\"offset\":{},\"partition\":2}}]}}",
        i + 1,
        i + 2
    );
    let mut v = vec![0u8, 200, 1, 12];
    v.extend_from_slice(b"content-type");
    v.extend_from_slice(&16u16.to_be_bytes());
    v.extend_from_slice(b"application/json");
    v.extend_from_slice(body.as_bytes());
    StoredAnswer::decode(Bytes::from(v)).expect("answer")
}

/// Sends `n` requests with unique keys through the store; returns the RSS growth.
async fn flood(keys: &Arc<Idempotency>, from: u64, n: u64, mut check: impl FnMut(u64, u64)) {
    let start = rss_bytes();
    for i in from..from + n {
        let text = format!("flood-{i}");
        let key = IdempotencyKey::parse(text.as_bytes()).expect("key");
        let Begin::Fresh(mut claim) = keys
            .begin(key.scoped(&floodgate::identity::TenantId::new("acme")))
            .await
        else {
            panic!("a unique key is fresh");
        };
        let fp = Fingerprint([(i % 251) as u8; 32]);
        claim.pending(fp);
        claim.finish(fp, answer(i)).await;
        if (i - from) % 50_000 == 49_999 {
            check(i - from + 1, rss_bytes().saturating_sub(start));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unique_keys_stays_within_max_bytes() {
    let max_bytes: u64 = 32 << 20;
    let config = IdempotencyConfig {
        max_bytes,
        max_entries: 100_000_000,
        ..IdempotencyConfig::default()
    };
    let keys = Arc::new(Idempotency::in_memory(
        &config,
        Arc::new(ManualClock::new()),
    ));
    let memory = keys.memory().expect("memory store");

    // 1,000,000 unique keys of ~180-byte answers into 32 MiB (about 56,000 of them fit).
    let total = 1_000_000u64;
    let mut peak = 0u64;
    flood(&keys, 0, total, |done, grown| {
        peak = peak.max(grown);
        let (entries, held) = memory.held();
        eprintln!(
            "{done} keys: {entries} kept, {held} bytes counted, RSS +{:.1} MiB",
            grown as f64 / (1 << 20) as f64
        );
        assert!(held <= max_bytes, "counted {held} > {max_bytes}");
        // The bound, as the book states it: max_bytes, plus a few MiB of allocator slack.
        assert!(
            grown <= max_bytes + (8 << 20),
            "RSS grew {grown} bytes, more than max_bytes + 8 MiB"
        );
    })
    .await;
    let (entries, held) = memory.held();
    let evicted = memory.counts.evictions.load(Relaxed);
    assert_eq!(
        entries + evicted,
        total,
        "every key kept or counted as evicted"
    );
    assert!(evicted > 900_000, "{evicted}");
    assert!(
        held > max_bytes - 2 * (ENTRY_OVERHEAD + 200),
        "the store fills up: {held}"
    );
    eprintln!(
        "bounded: {entries} kept, {evicted} evicted, peak RSS growth {:.1} MiB for max_bytes {} MiB",
        peak as f64 / (1 << 20) as f64,
        max_bytes >> 20
    );
    assert_eq!(keys.in_flight(), 0, "no flight left behind");
}
