//! Prometheus metrics, served at `GET /metrics` on the admin listener.
//!
//! The request path only touches atomics it already owns (tenant counters, the buffer's word,
//! bucket TATs); everything per tenant is read at scrape time by [`LiveCollector`], so no label
//! lookup or allocation happens per request. Histograms (HTTP and delivery latency) are the
//! exception, with small fixed label sets. Label values come from the registry (tenant ids) or
//! from closed sets (reasons, outcomes, routes, status codes, librdkafka error names, brokers),
//! never from request data.

//!
//! Layer: observability. Imports tenants, admission and Kafka's own statistics; written to by
//! nothing but the HTTP edge's latency histogram.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};
use prometheus_client::registry::{Registry, Unit};

use crate::adaptive::controller::Cause;
use crate::adaptive_agent::AdaptiveAgent;
use crate::admission::Admission;
use crate::body_budget::BodyBudget;
use crate::cluster::{Cluster, LeaseOutcome, Scope};
use crate::config::Priority;
use crate::failure_guard::FailureGuard;
use crate::kafka::{KafkaMetrics, KafkaStats};
use crate::lag_agent::LagAgent;
use crate::tenant::Tenants;

pub mod auth;
mod idempotency;
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
        failures: [Arc<FailureGuard>; 2],
        bodies: Arc<BodyBudget>,
        cluster: Option<Arc<Cluster>>,
        agents: Agents,
    ) -> Self {
        let Agents {
            adaptive,
            lag,
            registry: tenant_registry,
            idempotency,
            tenant_series,
        } = agents;
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
        registry.register_with_unit(
            "kafka_delivery_duration",
            "Time from enqueue to Kafka's answer for a request's last record, per request",
            Unit::Seconds,
            kafka.delivery_seconds.clone(),
        );
        registry.register(
            "kafka_delivery_errors",
            "Records Kafka did not acknowledge, by librdkafka error",
            kafka.delivery_errors.clone(),
        );
        if let Some(cluster) = &cluster {
            registry.register_with_unit(
                "cluster_lease_duration",
                "Time of one lease call to Redis (request path and refills)",
                Unit::Seconds,
                ClusterLeaseHistogram(cluster.clone()),
            );
        }
        registry.register_collector(Box::new(LiveCollector {
            tenants,
            admission,
            kafka: kafka.clone(),
            failures,
            bodies,
            cluster,
            adaptive,
            lag,
            tenant_registry,
            idempotency,
            tenant_series,
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
        to_classic_text(&self.render())
    }
}

/// OpenMetrics text to Prometheus' classic text format: a counter's HELP and TYPE lines name
/// its `_total` series (OpenMetrics names the family without it), and there are no UNIT or EOF
/// lines. Everything else is the same in both formats.
fn to_classic_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut pending_help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            pending_help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let series = if kind == "counter" && !name.ends_with("_total") {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            if let Some(help) = pending_help.take() {
                let text = help.split_once(' ').map_or("", |(_, t)| t);
                out.push_str(&format!("# HELP {series} {text}\n"));
            }
            out.push_str(&format!("# TYPE {series} {kind}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Reads live state at scrape time.
#[cfg(test)]
mod tests {
    #[test]
    fn classic_text_names_counters_by_their_total_series() {
        let om = "# HELP a_requests Requests.\n# TYPE a_requests counter\na_requests_total{x=\"1\"} 3\n\
                  # HELP a_bytes Held.\n# TYPE a_bytes gauge\n# UNIT a_bytes bytes\na_bytes 7\n# EOF\n";
        assert_eq!(
            super::to_classic_text(om),
            "# HELP a_requests_total Requests.\n# TYPE a_requests_total counter\na_requests_total{x=\"1\"} 3\n\
             # HELP a_bytes Held.\n# TYPE a_bytes gauge\na_bytes 7\n"
        );
    }
}

#[derive(Debug)]
struct LiveCollector {
    tenants: Arc<Tenants>,
    admission: Arc<Admission>,
    kafka: KafkaMetrics,
    failures: [Arc<FailureGuard>; 2],
    bodies: Arc<BodyBudget>,
    cluster: Option<Arc<Cluster>>,
    adaptive: Arc<AdaptiveAgent>,
    lag: Arc<LagAgent>,
    tenant_registry: Arc<crate::registry::RegistryStore>,
    idempotency: Arc<crate::idempotency::Idempotency>,
    tenant_series: tenants::TenantSeries,
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric_type: prometheus_client::metrics::MetricType,
    series: &[(Labels<'_>, M)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, unit, metric_type)?;
    for (labels, value) in series {
        value.encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

/// The lease latency histogram, owned by the cluster's stats.
#[derive(Debug)]
struct ClusterLeaseHistogram(Arc<Cluster>);

impl EncodeMetric for ClusterLeaseHistogram {
    fn encode(
        &self,
        encoder: prometheus_client::encoding::MetricEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        self.0.stats.lease_seconds.encode(encoder)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

fn gauge(v: u64) -> Vec<(Labels<'static>, ConstGauge<f64>)> {
    vec![(Vec::new(), ConstGauge::new(v as f64))]
}

impl prometheus_client::collector::Collector for LiveCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.tenant_series.encode(&mut encoder)?;
        self.encode_buffer(&mut encoder)?;
        self.encode_global(&mut encoder)?;
        self.encode_auth_failures(&mut encoder)?;
        self.encode_bodies(&mut encoder)?;
        if let Some(cluster) = &self.cluster {
            self.encode_cluster(&mut encoder, cluster)?;
        }
        self.encode_adaptive(&mut encoder)?;
        lag::encode(&mut encoder, &self.lag)?;
        registry::encode(&mut encoder, &self.tenant_registry)?;
        idempotency::encode(&mut encoder, &self.idempotency)?;
        encode_kafka(&mut encoder, &self.kafka.latest())
    }
}

impl LiveCollector {
    /// The downstream buffer's occupancy and bounds.
    fn encode_buffer(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let buffer = &self.admission.buffer;
        let (b, r) = buffer.held();
        family(
            encoder,
            "buffer_held",
            "Record bytes handed to Kafka and not yet acknowledged",
            Some(&Unit::Bytes),
            G,
            &gauge(b),
        )?;
        family(
            encoder,
            "buffer_held_records",
            "Records handed to Kafka and not yet acknowledged",
            None,
            G,
            &gauge(r),
        )?;
        family(
            encoder,
            "buffer_capacity",
            "Buffer bound in bytes",
            Some(&Unit::Bytes),
            G,
            &gauge(buffer.max_bytes()),
        )?;
        family(
            encoder,
            "buffer_capacity_records",
            "Buffer bound in records",
            None,
            G,
            &gauge(buffer.max_records()),
        )
    }

    /// Request bodies in flight, and uploads answered before their end.
    fn encode_bodies(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let b = &self.bodies;
        family(
            encoder,
            "body_inflight",
            "Request-body bytes held in memory now, over all connections and streams",
            Some(&Unit::Bytes),
            G,
            &gauge(b.held()),
        )?;
        family(
            encoder,
            "body_inflight_capacity",
            "The memory budget for request bodies in flight",
            Some(&Unit::Bytes),
            G,
            &gauge(b.max_bytes()),
        )?;
        let cut: Vec<_> = b
            .uploads_cut_short()
            .map(|(c, n)| (vec![("reason", c.as_str())], ConstCounter::new(n)))
            .collect();
        family(
            encoder,
            "uploads_cut_short",
            "Uploads answered before their body was read to the end, by reason",
            None,
            C,
            &cut,
        )
    }

    /// Failed authentications, and requests refused because of them.
    fn encode_auth_failures(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut series = Vec::new();
        for (listener, f) in ["produce", "admin"].into_iter().zip(&self.failures) {
            series.push((
                vec![("listener", listener), ("outcome", "failed")],
                ConstCounter::new(f.failed.load(Relaxed)),
            ));
            series.push((
                vec![("listener", listener), ("outcome", "refused")],
                ConstCounter::new(f.refused.load(Relaxed)),
            ));
        }
        family(
            encoder,
            "auth_failures",
            "Failing requests by listener: answered 401 and counted against their address's allowance (failed), or answered 429 because it was spent (refused)",
            None,
            C,
            &series,
        )
    }

    /// Cluster mode: lease calls, tokens granted and held, members, the degraded flag.
    fn encode_cluster(
        &self,
        encoder: &mut DescriptorEncoder,
        cluster: &Cluster,
    ) -> Result<(), std::fmt::Error> {
        let s = &cluster.stats;
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
        let tokens = |r: &std::sync::atomic::AtomicU64, b: &std::sync::atomic::AtomicU64| {
            vec![
                (
                    vec![("bucket", "records")],
                    ConstCounter::new(r.load(Relaxed)),
                ),
                (
                    vec![("bucket", "bytes")],
                    ConstCounter::new(b.load(Relaxed)),
                ),
            ]
        };
        family(
            encoder,
            "cluster_granted_tokens",
            "Tokens leased from the shared buckets",
            None,
            C,
            &tokens(&s.granted_records, &s.granted_bytes),
        )?;
        family(
            encoder,
            "cluster_returned_tokens",
            "Leased tokens given back unspent (expired slices, shutdown)",
            None,
            C,
            &tokens(&s.returned_records, &s.returned_bytes),
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
        )?;
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
        )?;
        let registry = self.tenants.load();
        let mut held = Vec::new();
        for t in registry.tenants() {
            let slice = t
                .admission_if_live()
                .and_then(|s| s.buckets.slice().map(|s| s.held()));
            if let Some((r, b)) = slice {
                held.push((
                    vec![("tenant", t.id.as_str()), ("bucket", "records")],
                    ConstGauge::new(r as f64),
                ));
                held.push((
                    vec![("tenant", t.id.as_str()), ("bucket", "bytes")],
                    ConstGauge::new(b as f64),
                ));
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
        let global: Vec<_> = self
            .admission
            .global
            .slice()
            .map(|s| s.held())
            .map(|(r, b)| {
                vec![
                    (vec![("bucket", "records")], ConstGauge::new(r as f64)),
                    (vec![("bucket", "bytes")], ConstGauge::new(b as f64)),
                ]
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

    /// The adaptive limit: where it is, what it acted on, how often it moved and why.
    fn encode_adaptive(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let a = &self.adaptive;
        let s = &a.stats;
        let enabled = a.settings().enabled;
        family(
            encoder,
            "adaptive_enabled",
            "1 when the adaptive limit is on ([adaptive] enabled)",
            None,
            G,
            &gauge(u64::from(enabled)),
        )?;
        family(
            encoder,
            "adaptive_limit_ratio",
            "The adaptive limit as a fraction of its ceiling (1: the configured budgets decide)",
            None,
            G,
            &[(Vec::new(), ConstGauge::new(s.limit_ratio()))],
        )?;
        family(
            encoder,
            "adaptive_floor_ratio",
            "The lowest the adaptive limit goes, as a fraction of its ceiling",
            None,
            G,
            &[(Vec::new(), ConstGauge::new(a.settings().floor))],
        )?;
        let limits = [
            (
                vec![("bucket", "records")],
                ConstGauge::new(s.limit_records.load(Relaxed) as f64),
            ),
            (
                vec![("bucket", "bytes")],
                ConstGauge::new(s.limit_bytes.load(Relaxed) as f64),
            ),
        ];
        family(
            encoder,
            "adaptive_limit",
            "What the adaptive limit admits now, per second (0: that dimension has no ceiling)",
            None,
            G,
            &limits,
        )?;
        family(
            encoder,
            "adaptive_recovery_level_ratio",
            "What Kafka last carried at healthy latency, as a fraction of the ceiling: healthy \
             signals bring the limit back there by slow start (0 while unknown)",
            None,
            G,
            &[(Vec::new(), ConstGauge::new(s.recover_to()))],
        )?;
        family(
            encoder,
            "adaptive_target_delivery",
            "Delivery p99 above which Kafka counts as slow (0 while unknown)",
            Some(&Unit::Seconds),
            G,
            &[(Vec::new(), ConstGauge::new(s.target_ms() / 1000.0))],
        )?;
        family(
            encoder,
            "adaptive_delivery_p99",
            "Delivery p99 over the controller's last interval (0 when it delivered none to \
             measure: see floodgate_adaptive_stalled_seconds)",
            Some(&Unit::Seconds),
            G,
            &[(
                Vec::new(),
                ConstGauge::new(s.p99_ms().unwrap_or(0.0) / 1000.0),
            )],
        )?;
        family(
            encoder,
            "adaptive_stalled",
            "How long records had waited with no delivery at all at the controller's last \
             interval (0: something was delivered, or nothing waits)",
            Some(&Unit::Seconds),
            G,
            &[(Vec::new(), ConstGauge::new(s.stalled_ms() / 1000.0))],
        )?;
        let mut changes: Vec<_> = Cause::ALL
            .iter()
            .map(|c| {
                (
                    vec![("direction", "decrease"), ("cause", c.as_str())],
                    ConstCounter::new(s.decreases(*c)),
                )
            })
            .collect();
        changes.push((
            vec![("direction", "increase"), ("cause", "healthy")],
            ConstCounter::new(s.increases.load(Relaxed)),
        ));
        changes.push((
            vec![("direction", "increase"), ("cause", "recovery")],
            ConstCounter::new(s.recoveries.load(Relaxed)),
        ));
        family(
            encoder,
            "adaptive_changes",
            "Moves of the adaptive limit by direction and cause",
            None,
            C,
            &changes,
        )?;
        let classes: Vec<_> = Priority::ALL
            .iter()
            .map(|p| {
                (
                    vec![("class", p.as_str())],
                    ConstGauge::new(s.class_rate(*p)),
                )
            })
            .collect();
        family(
            encoder,
            "adaptive_class_rate",
            "The adaptive limit's allocation per priority class, per second",
            None,
            G,
            &classes,
        )
    }

    /// The global budget's bucket levels.
    fn encode_global(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (gr, gb) = self.admission.global.view(self.admission.now_ns());
        let global: Vec<_> = [("records", gr), ("bytes", gb)]
            .into_iter()
            .filter_map(|(bucket, v)| {
                v.map(|v| {
                    (
                        vec![("bucket", bucket)],
                        ConstGauge::new(v.available as f64),
                    )
                })
            })
            .collect();
        family(
            encoder,
            "global_tokens",
            "Tokens available now in the global buckets",
            None,
            G,
            &global,
        )
    }
}

/// librdkafka's statistics: queue and per-broker state.
fn encode_kafka(
    encoder: &mut DescriptorEncoder,
    stats: &KafkaStats,
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        "kafka_queue_messages",
        "Messages in librdkafka's queue (librdkafka statistics)",
        None,
        G,
        &gauge(stats.queue_messages),
    )?;
    family(
        encoder,
        "kafka_queue",
        "Bytes in librdkafka's queue",
        Some(&Unit::Bytes),
        G,
        &gauge(stats.queue_bytes),
    )?;
    let per_broker = |value: fn(&crate::kafka::BrokerStats) -> f64| -> Vec<_> {
        stats
            .brokers
            .iter()
            .map(|b| (vec![("broker", b.name.as_str())], ConstGauge::new(value(b))))
            .collect()
    };
    family(
        encoder,
        "kafka_broker_inflight_requests",
        "Requests sent to a broker and not answered",
        None,
        G,
        &per_broker(|b| b.inflight_requests as f64),
    )?;
    family(
        encoder,
        "kafka_broker_rtt",
        "Average broker round-trip time",
        Some(&Unit::Seconds),
        G,
        &per_broker(|b| b.rtt_us as f64 / 1e6),
    )?;
    family(
        encoder,
        "kafka_broker_throttle",
        "Average broker quota throttle time",
        Some(&Unit::Seconds),
        G,
        &per_broker(|b| b.throttle_ms as f64 / 1e3),
    )
}
