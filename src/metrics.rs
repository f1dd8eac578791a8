//! Prometheus metrics, served at `GET /metrics` on the admin listener.
//!
//! The request path only touches atomics it already owns (tenant counters, the buffer's word,
//! bucket TATs); everything per tenant is read at scrape time by [`LiveCollector`], so no label
//! lookup or allocation happens per request. Histograms (HTTP and delivery latency) are the
//! exception, with small fixed label sets. Label values come from the registry (tenant ids) or
//! from closed sets (reasons, outcomes, routes, status codes, librdkafka error names, brokers),
//! never from request data.
//!
//! One submodule per subsystem, each with an `encode` that writes that subsystem's families
//! from its live state; this module registers the histograms and calls them in a fixed order
//! (the exposition's family order).
//!
//! Layer: decisions and state (observability). Imports tenants, admission, the cluster, the
//! agents and Kafka's own statistics; written to by nothing but the HTTP edge's latency
//! histogram.

use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::adaptive_agent::AdaptiveAgent;
use crate::admission::Admission;
use crate::auth_failures::AuthFailures;
use crate::cluster::Cluster;
use crate::inflight_bodies::InflightBodies;
use crate::kafka::KafkaMetrics;
use crate::lag_agent::LagAgent;
use crate::tenant::Tenants;

mod adaptive;
pub mod auth;
pub mod bodies;
mod buffer;
mod classic;
mod cluster;
pub mod connections;
mod global;
mod holds;
mod idempotency;
mod kafka;
mod lag;
mod registry;
pub mod schemas;
pub mod tenants;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub route: &'static str,
    pub status: u16,
}

/// The long-running parts whose state the metrics show: the two controllers' agents and the
/// registry (its follower counts the records it refused).
#[derive(Debug)]
pub struct Agents {
    pub adaptive: Arc<AdaptiveAgent>,
    pub lag: Arc<LagAgent>,
    pub registry: Arc<crate::registry::RegistryStore>,
    /// `Idempotency-Key`: outcomes, store errors, the memory store's fill and evictions.
    pub idempotency: Arc<crate::idempotency::Idempotency>,
    /// The per-tenant series, which read the status page's history to find the busiest.
    pub tenant_series: tenants::TenantSeries,
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub http_seconds: Family<HttpLabels, Histogram>,
    pub kafka: KafkaMetrics,
}

impl Metrics {
    pub fn new(
        tenants: Arc<Tenants>,
        admission: Arc<Admission>,
        kafka: KafkaMetrics,
        failures: [Arc<AuthFailures>; 2],
        bodies: Arc<InflightBodies>,
        cluster: Option<Arc<Cluster>>,
        agents: Agents,
    ) -> Self {
        let mut registry = Registry::with_prefix("floodgate");
        let http_seconds = Family::<HttpLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 18))
        });
        registry.register_with_unit(
            "http_request_duration",
            "HTTP request latency by route and status",
            Unit::Seconds,
            http_seconds.clone(),
        );
        kafka::register(&mut registry, &kafka);
        if let Some(cluster) = &cluster {
            cluster::register(&mut registry, cluster);
        }
        registry.register_collector(Box::new(LiveCollector {
            tenants,
            admission,
            kafka: kafka.clone(),
            failures,
            bodies,
            cluster,
            agents,
        }));
        Self {
            registry,
            http_seconds,
            kafka,
        }
    }

    /// Adds a collector read at every scrape (the authenticator's series).
    pub fn with_collector(
        mut self,
        collector: Box<dyn prometheus_client::collector::Collector>,
    ) -> Self {
        self.registry.register_collector(collector);
        self
    }

    /// The exposition in OpenMetrics text, which Prometheus asks for when it scrapes.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "metrics encoding failed");
        }
        out
    }

    /// The exposition in Prometheus' classic text format (0.0.4), for clients that do not ask
    /// for OpenMetrics (curl, promtool, older scrapers).
    pub fn render_classic(&self) -> String {
        classic::to_classic_text(&self.render())
    }
}

/// Reads live state at scrape time.
#[derive(Debug)]
struct LiveCollector {
    tenants: Arc<Tenants>,
    admission: Arc<Admission>,
    kafka: KafkaMetrics,
    failures: [Arc<AuthFailures>; 2],
    bodies: Arc<InflightBodies>,
    cluster: Option<Arc<Cluster>>,
    agents: Agents,
}

impl prometheus_client::collector::Collector for LiveCollector {
    /// The subsystems in the exposition's order.
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        let agents = &self.agents;
        agents.tenant_series.encode(e)?;
        buffer::encode(e, &self.admission.buffer)?;
        global::encode(e, &self.admission)?;
        auth::encode_failures(e, &self.failures)?;
        bodies::encode(e, &self.bodies)?;
        holds::encode(e, &self.admission.waits)?;
        if let Some(cluster) = &self.cluster {
            cluster::encode(e, cluster, &self.tenants, &self.admission)?;
        }
        adaptive::encode(e, &agents.adaptive)?;
        lag::encode(e, &agents.lag)?;
        registry::encode(e, &agents.registry)?;
        idempotency::encode(e, &agents.idempotency)?;
        kafka::encode(e, &self.kafka.latest())
    }
}

/// A series' labels: names from the code, values from the registry or closed sets.
type Labels<'a> = Vec<(&'static str, &'a str)>;

/// One family: its descriptor, then each series.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric_type: MetricType,
    series: &[(Labels<'_>, M)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, unit, metric_type)?;
    for (labels, value) in series {
        value.encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

/// A single unlabelled gauge.
fn gauge(v: u64) -> Vec<(Labels<'static>, ConstGauge<f64>)> {
    vec![(Vec::new(), ConstGauge::new(v as f64))]
}
