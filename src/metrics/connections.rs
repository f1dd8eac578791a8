//! The produce listener's connections closed by its bounds, read at scrape time: at accept,
//! over their address's allowance of unauthenticated connections (or a newcomer whose address
//! held the most when the listener was full); and, the listener full, closed to make room for
//! a newcomer — an address's oldest unauthenticated one, or a tenant's oldest idle one.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType::Counter as C;

use super::family;
use crate::server::Unverified;

/// Reads the produce listener's connection bounds at scrape time.
#[derive(Debug)]
pub struct ConnectionCollector(pub Arc<Unverified>);

impl prometheus_client::collector::Collector for ConnectionCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let u = &self.0;
        let series = [
            ("refused_at_accept", u.refused.load(Relaxed)),
            ("made_room_unauthenticated", u.evicted.load(Relaxed)),
            ("made_room_tenant", u.evicted_bound.load(Relaxed)),
            ("unauthenticated_bytes", u.closed_for_heads()),
        ]
        .map(|(reason, n)| (vec![("reason", reason)], ConstCounter::new(n)));
        family(
            &mut encoder,
            "connections_closed",
            "Produce-listener connections closed by its bounds: at accept, over their address's allowance of unauthenticated connections or a newcomer whose address held the most (refused_at_accept); and, the listener full, to make room for a newcomer: an address's oldest unauthenticated one (made_room_unauthenticated), or the tenant holding the most connections' oldest idle one, closed gracefully (made_room_tenant); and an unauthenticated one holding more than an equal share of max_unauthenticated_bytes when it is spent (unauthenticated_bytes)",
            None,
            C,
            &series,
        )
    }
}
