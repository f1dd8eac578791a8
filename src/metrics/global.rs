//! The global budget's series: the tokens its buckets hold now (a dimension without a global
//! limit has no series), and its calendar quotas' use.

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
    )?;
    let (mut used, mut limit) = (Vec::new(), Vec::new());
    for (d, q) in admission.global_quotas() {
        let labels = vec![("window", q.window.as_str()), ("dimension", d.as_str())];
        used.push((labels.clone(), ConstGauge::new(q.used as f64)));
        limit.push((labels, ConstGauge::new(q.limit as f64)));
    }
    family(
        encoder,
        "global_quota_used",
        "What each global calendar quota's current window has admitted, by window and dimension",
        None,
        G,
        &used,
    )?;
    family(
        encoder,
        "global_quota_limit",
        "Each global calendar quota's limit per window, by window and dimension",
        None,
        G,
        &limit,
    )
}
