//! The shared registry's series: records of its topic every replica skipped, and the keys it
//! writes again (see `registry::log`).

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};

use super::family;
use crate::registry::RegistryStore;

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    registry: &RegistryStore,
) -> Result<(), std::fmt::Error> {
    let Some(counts) = registry.shared_counts() else {
        return Ok(());
    };
    let series: Vec<_> = counts
        .skipped
        .iter()
        .map(|(reason, n)| (vec![("reason", *reason)], ConstCounter::new(*n)))
        .collect();
    family(
        encoder,
        "registry_rejected_entries",
        "Records of the shared registry topic every replica skips: unsigned (no fg-mac), bad_mac (no secret verifies it), malformed (signed but not an entry), stale (not newer than the key's version: a race's loser or a replay), invalid (would make the registry invalid)",
        None,
        C,
        &series,
    )?;
    family(
        encoder,
        "registry_old_secret_entries",
        "Keys of the shared registry whose entry only an older secret of the list verifies; they are signed again with the first: drop the old secret once this is 0 on every replica",
        None,
        G,
        &[(Vec::new(), ConstGauge::new(counts.old_secret as i64))],
    )?;
    family(
        encoder,
        "registry_reasserts_pending",
        "Keys whose last record in the registry topic was skipped and says something else; written again within seconds, before compaction could keep only that record",
        None,
        G,
        &[(Vec::new(), ConstGauge::new(counts.to_reassert as i64))],
    )?;
    family(
        encoder,
        "registry_rewritten_entries",
        "Entries this replica wrote again to the registry topic (reasserted or signed again)",
        None,
        C,
        &[(Vec::new(), ConstCounter::new(counts.rewritten))],
    )
}
