//! The schema step's series: record values refused for not fitting their schema, per tenant
//! and topic (bounded: past the schema room's limit of pairs, a tenant's further topics count
//! under `_other`).

use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType::Counter as C;

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
        )
    }
}
