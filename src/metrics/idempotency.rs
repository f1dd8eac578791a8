//! `Idempotency-Key`'s series: what became of keyed requests, store errors by operation, and
//! the single replica's store (answers and bytes held against their bounds, evictions,
//! expirations).

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};
use prometheus_client::registry::Unit;
use std::sync::atomic::Ordering::Relaxed;

use super::{family, gauge};
use crate::idempotency::{Idempotency, KeyOutcome, MemoryStore, StoreOp};

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    keys: &Idempotency,
) -> Result<(), std::fmt::Error> {
    let stats = &keys.stats;
    let outcomes: Vec<_> = KeyOutcome::ALL
        .iter()
        .map(|o| {
            (
                vec![("outcome", o.as_str())],
                ConstCounter::new(stats.outcome(*o)),
            )
        })
        .collect();
    family(
        encoder,
        "idempotency_requests",
        "Requests with an Idempotency-Key by outcome: processed (first sight of the key), replayed (stored answer sent again), attached (waited for the original's records), conflict (409, original still being read), reused (422, key used for another request), refused (503, store unavailable), unprotected (store unavailable, processed without de-duplication), held (cluster mode: 429 before the key was claimed, the tenant's allowance of given-up claims spent)",
        None,
        C,
        &outcomes,
    )?;
    let errors: Vec<_> = StoreOp::ALL
        .iter()
        .map(|op| {
            (
                vec![("op", op.as_str())],
                ConstCounter::new(stats.store_errors(*op)),
            )
        })
        .collect();
    family(
        encoder,
        "idempotency_store_errors",
        "Key store operations that failed, by operation (claim, store, renew, release, read; too_large: an answer larger than the whole memory store)",
        None,
        C,
        &errors,
    )?;
    family(
        encoder,
        "idempotency_in_flight",
        "Keys this replica is working on now (claimed or pending; never evicted)",
        None,
        G,
        &gauge(keys.in_flight() as u64),
    )?;
    // Exported in cluster mode too (0: Redis keeps answers for their TTL; what Redis itself
    // evicts under its maxmemory policy is Redis's to count), so one dashboard fits both.
    let evictions = keys
        .memory()
        .map_or(0, |m| m.counts.evictions.load(Relaxed));
    family(
        encoder,
        "idempotency_evictions",
        "Answers evicted from the single replica's memory before their TTL to make room (oldest first): a retry of one is processed again",
        None,
        C,
        &[(Vec::new(), ConstCounter::new(evictions))],
    )?;
    match keys.memory() {
        Some(memory) => encode_memory(encoder, memory),
        None => Ok(()),
    }
}

/// The single replica's store: answers and bytes held against their bounds, expirations.
fn encode_memory(
    encoder: &mut DescriptorEncoder,
    memory: &MemoryStore,
) -> Result<(), std::fmt::Error> {
    let (entries, bytes) = memory.held();
    let bounds = memory.bounds();
    family(
        encoder,
        "idempotency_entries",
        "Answers kept in memory, against [idempotency] max_entries",
        None,
        G,
        &[
            (vec![("of", "held")], ConstGauge::new(entries as f64)),
            (
                vec![("of", "max")],
                ConstGauge::new(bounds.max_entries as f64),
            ),
        ],
    )?;
    family(
        encoder,
        "idempotency_memory",
        "Bytes the answers kept in memory take (with their bookkeeping), against [idempotency] max_bytes",
        Some(&Unit::Bytes),
        G,
        &[
            (vec![("of", "held")], ConstGauge::new(bytes as f64)),
            (vec![("of", "max")], ConstGauge::new(bounds.max_bytes as f64)),
        ],
    )?;
    family(
        encoder,
        "idempotency_expirations",
        "Answers dropped at the end of their TTL ([idempotency] ttl_s)",
        None,
        C,
        &[(
            Vec::new(),
            ConstCounter::new(memory.counts.expirations.load(Relaxed)),
        )],
    )
}
