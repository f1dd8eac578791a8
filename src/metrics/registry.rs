//! The shared registry's series: records of its topic that were not authentic entries.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType::Counter as C;

use super::family;
use crate::registry::RegistryStore;

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    registry: &RegistryStore,
) -> Result<(), std::fmt::Error> {
    let refused = registry.refused_entries();
    if refused.is_empty() {
        return Ok(());
    }
    let series: Vec<_> = refused
        .iter()
        .map(|(reason, n)| (vec![("reason", *reason)], ConstCounter::new(*n)))
        .collect();
    family(
        encoder,
        "registry_rejected_entries",
        "Records of the shared registry topic skipped as not authentic entries: unsigned (no fg-mac), bad_mac (no secret verifies it), malformed (signed but not an entry)",
        None,
        C,
        &series,
    )
}
