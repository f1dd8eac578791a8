//! The schema step's series: record values refused for not fitting their schema, per tenant
//! and topic (bounded: past the schema room's limit of pairs, a tenant's further topics count
//! under `_other`); requests refused by a bound of the step's work, per bound; and the
//! step's threads' jobs, waiting and running.

use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::Counter as C;
use prometheus_client::metrics::MetricType::Gauge as G;

use super::{family, Labels};
use crate::schema::Schemas;

/// Reads the violation counts at scrape time.
#[derive(Debug)]
pub struct SchemaCollector(pub Arc<Schemas>);

impl prometheus_client::collector::Collector for SchemaCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut counts = self.0.violations();
        counts.sort();
        let series: Vec<(Labels<'_>, ConstCounter<u64>)> = counts
            .iter()
            .map(|(tenant, topic, n)| {
                (
                    vec![("tenant", &**tenant), ("topic", &**topic)],
                    ConstCounter::new(*n),
                )
            })
            .collect();
        family(
            &mut encoder,
            "schema_violations",
            "Records refused because a key or value did not fit its schema (or its topic's contract), per tenant and topic",
            None,
            C,
            &series,
        )?;
        let (refusals, (waiting, running)) = self.0.work_counts();
        let series: Vec<(Labels<'_>, ConstCounter<u64>)> = refusals
            .iter()
            .map(|(bound, n)| (vec![("bound", *bound)], ConstCounter::new(*n)))
            .collect();
        family(
            &mut encoder,
            "schema_work_refusals",
            "Records refused by a bound of the schema step's work: check_work (the cost model), check_cpu (max_check_cpu_ms), schema_memory (max_schema_memory_bytes, max_schema_patterns), wait (wait_ms), registrations (tenant_registrations_per_sec)",
            None,
            C,
            &series,
        )?;
        let jobs: Vec<(Labels<'_>, ConstGauge<f64>)> = vec![
            (vec![("state", "waiting")], ConstGauge::new(waiting as f64)),
            (vec![("state", "running")], ConstGauge::new(running as f64)),
        ];
        family(
            &mut encoder,
            "schema_jobs",
            "Schema compiles and record checks on the schema step's threads, waiting and running",
            None,
            G,
            &jobs,
        )
    }
}
