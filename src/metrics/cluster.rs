//! Cluster mode's series: lease calls to Redis and their latency, tokens granted and given
//! back, Redis errors, members, the degraded state, and the leased tokens this replica holds
//! now (per tenant and of the global budget). None of it exists without `[cluster]`.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{self, Counter as C, Gauge as G};
use prometheus_client::registry::{Registry, Unit};

use super::{family, gauge, Labels};
use crate::admission::Admission;
use crate::cluster::{Cluster, ClusterStats, LeaseOutcome, Scope};
use crate::tenant::Tenants;

/// The lease latency histogram, owned by the cluster's stats.
#[derive(Debug)]
struct LeaseHistogram(Arc<Cluster>);

impl EncodeMetric for LeaseHistogram {
    fn encode(&self, encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.0.stats.lease_seconds.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The lease histogram (written by the cluster on every call, so registered, not collected).
pub(super) fn register(directory: &mut Registry, cluster: &Arc<Cluster>) {
    directory.register_with_unit(
        "cluster_lease_duration",
        "Time of one lease call to Redis (request path and refills)",
        Unit::Seconds,
        LeaseHistogram(cluster.clone()),
    );
}

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    cluster: &Cluster,
    tenants: &Tenants,
    admission: &Admission,
) -> Result<(), std::fmt::Error> {
    encode_leases(encoder, &cluster.stats)?;
    encode_state(encoder, cluster)?;
    encode_slices(encoder, tenants, admission)
}

/// Per bucket dimension: records, then bytes.
fn by_bucket(records: &AtomicU64, bytes: &AtomicU64) -> Vec<(Labels<'static>, ConstCounter)> {
    vec![
        (
            vec![("bucket", "records")],
            ConstCounter::new(records.load(Relaxed)),
        ),
        (
            vec![("bucket", "bytes")],
            ConstCounter::new(bytes.load(Relaxed)),
        ),
    ]
}

/// Lease calls by scope and outcome, tokens granted and given back, Redis errors.
fn encode_leases(encoder: &mut DescriptorEncoder, s: &ClusterStats) -> Result<(), std::fmt::Error> {
    let mut calls = Vec::new();
    for scope in Scope::ALL {
        for outcome in LeaseOutcome::ALL {
            calls.push((
                vec![("scope", scope.as_str()), ("outcome", outcome.as_str())],
                ConstCounter::new(s.lease_calls(scope, outcome)),
            ));
        }
    }
    family(
        encoder,
        "cluster_lease_calls",
        "Lease calls to Redis by scope and outcome (granted, refused: the shared bucket lacked the minimum, error: Redis did not answer)",
        None,
        C,
        &calls,
    )?;
    family(
        encoder,
        "cluster_granted_tokens",
        "Tokens leased from the shared buckets",
        None,
        C,
        &by_bucket(&s.granted_records, &s.granted_bytes),
    )?;
    family(
        encoder,
        "cluster_returned_tokens",
        "Leased tokens given back unspent (expired slices, shutdown)",
        None,
        C,
        &by_bucket(&s.returned_records, &s.returned_bytes),
    )?;
    let errors: Vec<_> = s
        .redis_errors()
        .map(|(kind, n)| (vec![("kind", kind)], ConstCounter::new(n)))
        .collect();
    family(
        encoder,
        "cluster_redis_errors",
        "Redis calls that failed, by kind",
        None,
        C,
        &errors,
    )
}

/// Members, and whether (and how long, how often) this replica admitted from local shares.
fn encode_state(encoder: &mut DescriptorEncoder, cluster: &Cluster) -> Result<(), std::fmt::Error> {
    let s = &cluster.stats;
    family(
        encoder,
        "cluster_members",
        "Live replicas counted from heartbeats (the last count while Redis is unreachable)",
        None,
        G,
        &gauge(u64::from(s.members.load(Relaxed))),
    )?;
    family(
        encoder,
        "cluster_degraded",
        "1 while Redis is unreachable and this replica admits from its local share",
        None,
        G,
        &gauge(u64::from(cluster.is_degraded())),
    )?;
    family(
        encoder,
        "cluster_local_share",
        "Time this replica spent admitting from its local shares (the cluster bound grows by rate / members for it)",
        Some(&Unit::Seconds),
        C,
        &[(Vec::new(), ConstCounter::new(cluster.degraded_seconds()))],
    )?;
    family(
        encoder,
        "cluster_degradations",
        "Times this replica went to its local shares (Redis unreachable or slow)",
        None,
        C,
        &[(Vec::new(), ConstCounter::new(s.degradations.load(Relaxed)))],
    )
}

/// The leased tokens held now: per tenant (tenants with a live slice), then the global one's.
fn encode_slices(
    encoder: &mut DescriptorEncoder,
    tenants: &Tenants,
    admission: &Admission,
) -> Result<(), std::fmt::Error> {
    let directory = tenants.load();
    let mut held = Vec::new();
    for t in directory.tenants() {
        let slice = t
            .admission_if_live()
            .and_then(|s| s.buckets.slice().map(|s| s.held()));
        if let Some(tokens) = slice {
            for (d, n) in tokens.iter() {
                held.push((
                    vec![("tenant", t.id.as_str()), ("bucket", d.as_str())],
                    ConstGauge::new(*n as f64),
                ));
            }
        }
    }
    family(
        encoder,
        "cluster_slice_tokens",
        "Leased tokens this replica holds now, per tenant",
        None,
        G,
        &held,
    )?;
    let global: Vec<_> = admission
        .global
        .slice()
        .map(|s| s.held())
        .map(|tokens| {
            tokens
                .iter()
                .map(|(d, n)| (vec![("bucket", d.as_str())], ConstGauge::new(*n as f64)))
                .collect()
        })
        .unwrap_or_default();
    family(
        encoder,
        "cluster_global_slice_tokens",
        "Leased tokens of the global budget this replica holds now",
        None,
        G,
        &global,
    )
}
