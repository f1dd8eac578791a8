//! What a load run measured, per tenant: counts, rates, latency quantiles.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

/// One tenant's raw observations.
#[derive(Debug, Default, Clone)]
pub struct Observed {
    pub offered: u64,
    pub admitted: u64,
    pub refused: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    /// Latencies of admitted requests, microseconds.
    pub latencies_us: Vec<u64>,
}

#[derive(Debug, Serialize)]
pub struct TenantSummary {
    pub tenant: String,
    pub offered_per_sec: f64,
    pub admitted_per_sec: f64,
    pub admitted_records_per_sec: f64,
    pub refused_per_sec: BTreeMap<String, f64>,
    pub errors: BTreeMap<String, u64>,
    pub latency_ms: Quantiles,
}

#[derive(Debug, Serialize, Default)]
pub struct Quantiles {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub duration_secs: f64,
    pub records_per_request: usize,
    pub tenants: Vec<TenantSummary>,
}

pub fn quantiles(latencies_us: &mut [u64]) -> Quantiles {
    if latencies_us.is_empty() {
        return Quantiles::default();
    }
    latencies_us.sort_unstable();
    let at = |q: f64| {
        let i = ((latencies_us.len() as f64 * q).ceil() as usize).clamp(1, latencies_us.len()) - 1;
        latencies_us[i] as f64 / 1000.0
    };
    Quantiles {
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
    }
}

impl Summary {
    pub fn new(
        duration_secs: f64,
        records_per_request: usize,
        tenants: Vec<(String, Observed)>,
    ) -> Self {
        let per_sec = |n: u64| n as f64 / duration_secs;
        let tenants = tenants
            .into_iter()
            .map(|(tenant, mut o)| TenantSummary {
                offered_per_sec: per_sec(o.offered),
                admitted_per_sec: per_sec(o.admitted),
                admitted_records_per_sec: per_sec(o.admitted * records_per_request as u64),
                refused_per_sec: o
                    .refused
                    .iter()
                    .map(|(k, v)| (k.clone(), per_sec(*v)))
                    .collect(),
                errors: o.errors.clone(),
                latency_ms: quantiles(&mut o.latencies_us),
                tenant,
            })
            .collect();
        Self {
            duration_secs,
            records_per_request,
            tenants,
        }
    }

    /// The one-screen summary.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<12} {:>10} {:>10} {:>12} {:>9} {:>9} {:>9}  refused/s by reason\n",
            "tenant", "offered/s", "admit/s", "records/s", "p50 ms", "p99 ms", "p999 ms"
        );
        for t in &self.tenants {
            let refused: Vec<String> = t
                .refused_per_sec
                .iter()
                .map(|(r, v)| format!("{r}={v:.1}"))
                .collect();
            let _ = writeln!(
                out,
                "{:<12} {:>10.1} {:>10.1} {:>12.0} {:>9.2} {:>9.2} {:>9.2}  {}{}",
                t.tenant,
                t.offered_per_sec,
                t.admitted_per_sec,
                t.admitted_records_per_sec,
                t.latency_ms.p50,
                t.latency_ms.p99,
                t.latency_ms.p999,
                refused.join(" "),
                if t.errors.is_empty() {
                    String::new()
                } else {
                    format!("  errors: {:?}", t.errors)
                }
            );
        }
        out
    }
}
