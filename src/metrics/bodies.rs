//! Request bodies' series: the bytes held in memory against their budget
//! (`max_inflight_body_bytes`), and uploads answered before their body was read to the end.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};
use prometheus_client::registry::Unit;

use super::{family, gauge};
use crate::inflight_bodies::InflightBodies;

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    bodies: &InflightBodies,
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        "body_inflight",
        "Request-body bytes held in memory now, over all connections and streams",
        Some(&Unit::Bytes),
        G,
        &gauge(bodies.held()),
    )?;
    family(
        encoder,
        "body_inflight_capacity",
        "The memory budget for request bodies in flight",
        Some(&Unit::Bytes),
        G,
        &gauge(bodies.max_bytes()),
    )?;
    let cut: Vec<_> = bodies
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

/// Content-coded bodies (`Content-Encoding`), per coding, read at scrape time: bodies, bytes
/// as received (coded) and as inflated.
#[derive(Debug)]
pub struct CodingCollector(pub std::sync::Arc<crate::inflate::Counters>);

impl prometheus_client::collector::Collector for CodingCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts: Vec<_> = self.0.snapshot().collect();
        let series = |pick: fn(&(crate::inflate::Coding, u64, u64, u64)) -> u64| {
            counts
                .iter()
                .map(|c| (vec![("encoding", c.0.as_str())], ConstCounter::new(pick(c))))
                .collect::<Vec<_>>()
        };
        family(
            &mut encoder,
            "body_encoded",
            "Request bodies (and streams) received with a Content-Encoding, per coding (each layer of a stacked one)",
            None,
            C,
            &series(|c| c.1),
        )?;
        family(
            &mut encoder,
            "body_encoded_received",
            "Bytes each coding's decoder took in: as received on the wire, for the outermost layer",
            Some(&Unit::Bytes),
            C,
            &series(|c| c.2),
        )?;
        family(
            &mut encoder,
            "body_encoded_inflated",
            "Bytes each coding's decoder inflated them to",
            Some(&Unit::Bytes),
            C,
            &series(|c| c.3),
        )
    }
}
