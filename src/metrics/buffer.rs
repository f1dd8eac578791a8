//! The downstream buffer's series: what it holds against its bounds, in bytes and records.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType::Gauge as G;
use prometheus_client::registry::Unit;

use super::{family, gauge};
use crate::buffer::Buffer;

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    buffer: &Buffer,
) -> Result<(), std::fmt::Error> {
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
