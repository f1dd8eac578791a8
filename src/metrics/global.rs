//! The global budget's series: the tokens its buckets hold now (a dimension without a global
//! limit has no series).

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::Gauge as G;

use super::family;
use crate::admission::Admission;

pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    admission: &Admission,
) -> Result<(), std::fmt::Error> {
    let view = admission.global.view(admission.now_ns());
    let global: Vec<_> = view
        .iter()
        .filter_map(|(d, v)| {
            v.map(|v| {
                (
                    vec![("bucket", d.as_str())],
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
