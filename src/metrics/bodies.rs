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
