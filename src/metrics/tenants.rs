//! Per-tenant series, at the cardinality `[metrics] per_tenant` chooses.
//!
//! - `all`: every tenant has its own series (a scrape grows with the tenants: ~1.6 KB each).
//! - `top` (the default): the `top_tenants` busiest tenants of the last minute (admitted plus
//!   refused requests, from the status page's history) have their own series, the others are
//!   summed under `tenant="_other"`. While there are no more tenants than `top_tenants`, every
//!   tenant has its own, as in `all`.
//! - `none`: every tenant is summed under `_other`.
//!
//! Totals stay exact and every counter series stays monotonic as tenants move in and out of
//! the top: a tenant's own series counts from when it got one (its counts up to then stay in
//! `_other`, where they were), and when it leaves the top its counts go back to `_other`.
//! `_other` is the total over all tenants minus what the tenants with series of their own
//! show, plus what deleted tenants had counted: a tenant deleted takes its own series with it,
//! but what it had counted while summed under `_other` stays there (a counter never goes
//! down). A deleted tenant that comes back while still remembered has its counters back.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};
use prometheus_client::registry::Unit;

use super::{family, Labels};
use crate::admission::Admission;
use crate::config::{MetricsConfig, PerTenant};
use crate::identity::TenantId;
use crate::record::Api;
use crate::refusal::Reason;
use crate::status::StatusBoard;
use crate::tenant::{Directory, Tenant, Tenants, Totals, TOTALS};

/// The name the tenants without series of their own are summed under.
pub const OTHER: &str = "_other";

/// Every counter a tenant has, in the order [`Totals`] states.
const COUNTERS: usize = TOTALS;
type Counts = Totals;

/// Which family and labels each slot of [`Counts`] is.
fn counter_series() -> Vec<(usize, [(&'static str, &'static str); 2])> {
    let mut out = vec![
        (0, [("outcome", "admitted"), ("", "")]),
        (0, [("outcome", "rejected"), ("", "")]),
        (1, [("outcome", "admitted"), ("", "")]),
        (1, [("outcome", "failed"), ("", "")]),
        (2, [("outcome", "admitted"), ("", "")]),
    ];
    for r in Reason::ALL {
        out.push((3, [("reason", r.as_str()), ("", "")]));
    }
    for api in Api::ALL {
        out.push((4, [("api", api.as_str()), ("outcome", "ok")]));
        out.push((4, [("api", api.as_str()), ("outcome", "error")]));
    }
    for r in Reason::ALL {
        out.push((5, [("reason", r.as_str()), ("", "")]));
    }
    out
}

/// The counter families, by the index [`counter_series`] gives.
const FAMILIES: [(&str, &str, Option<Unit>); 6] = [
    (
        "tenant_requests",
        "Produce requests by tenant and outcome",
        None,
    ),
    (
        "tenant_records",
        "Records by tenant and outcome (failed: not acknowledged by Kafka)",
        None,
    ),
    (
        "tenant_record",
        "Record bytes (key + value + headers + record overhead) admitted, by tenant",
        Some(Unit::Bytes),
    ),
    (
        "tenant_rejections",
        "Requests refused with 429, by tenant and reason",
        None,
    ),
    (
        "tenant_api_requests",
        "Produce requests by tenant, API (v1, Confluent v2, v3) and outcome (ok: 2xx)",
        None,
    ),
    (
        "tenant_shadow_rejections",
        "Requests a limit in shadow mode would have refused with 429 (admitted all the same), by tenant and the reason it would have given",
        None,
    ),
];

/// Appends one tenant's series of family `f`.
fn push_series<'a>(
    series: &mut Vec<(Labels<'a>, ConstCounter<u64>)>,
    slots: &[(usize, [(&'static str, &'static str); 2])],
    f: usize,
    id: &'a str,
    counts: &Counts,
) {
    for (slot, (_, labels)) in slots.iter().enumerate().filter(|(_, (g, _))| *g == f) {
        let mut l: Labels<'a> = vec![("tenant", id)];
        l.extend(labels.iter().filter(|(k, _)| !k.is_empty()).copied());
        series.push((l, ConstCounter::new(counts[slot])));
    }
}

/// What the last scrape left: each tenant with series of its own and the counts it started
/// from, and the first serial of a tenant made after that scrape.
#[derive(Debug, Default)]
struct Members {
    baselines: HashMap<TenantId, Counts>,
    next_serial: u64,
}

/// The per-tenant part of the exposition.
#[derive(Debug)]
pub struct TenantSeries {
    tenants: Arc<Tenants>,
    admission: Arc<Admission>,
    status: Arc<StatusBoard>,
    mode: PerTenant,
    top: usize,
    members: Mutex<Members>,
}

impl TenantSeries {
    pub fn new(
        tenants: Arc<Tenants>,
        admission: Arc<Admission>,
        status: Arc<StatusBoard>,
        config: &MetricsConfig,
    ) -> Self {
        Self {
            tenants,
            admission,
            status,
            mode: config.per_tenant,
            top: config.top_tenants,
            members: Mutex::new(Members::default()),
        }
    }

    pub fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let directory = self.tenants.load();
        let chosen = self.choose(&directory);
        let shown = self.count(&directory, &chosen);
        encode_counters(encoder, &shown)?;
        self.encode_gauges(encoder, &shown)
    }

    /// The tenants with series of their own at this scrape.
    fn choose(&self, directory: &Directory) -> HashSet<TenantId> {
        let everyone = directory.len() <= self.top;
        match self.mode {
            PerTenant::All => directory.tenants().map(|t| t.id.clone()).collect(),
            PerTenant::Top if everyone => directory.tenants().map(|t| t.id.clone()).collect(),
            PerTenant::Top => self.status.busiest(self.top).into_iter().collect(),
            PerTenant::None => Default::default(),
        }
    }

    /// Each chosen tenant's counts since it got series of its own, and what `_other` sums;
    /// remembers the chosen tenants' baselines for the next scrape.
    fn count<'a>(&self, directory: &'a Directory, chosen: &HashSet<TenantId>) -> Shown<'a> {
        let mut members = self
            .members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Deleted tenants' counters stay in the total, so `_other` never goes down.
        let mut total = *directory.retired();
        let mut own: Vec<(&Arc<Tenant>, Counts)> = Vec::with_capacity(chosen.len());
        let mut baselines = HashMap::with_capacity(chosen.len());
        let mut other_buffer = 0u64;
        for t in directory.tenants() {
            let c = t.totals();
            for (sum, n) in total.iter_mut().zip(c) {
                *sum = sum.saturating_add(n);
            }
            if !chosen.contains(&t.id) {
                other_buffer += t.usage.bytes.load(Relaxed);
                continue;
            }
            // Counts from when it got series of its own: what it did before is in `_other`
            // already — unless it is new since the last scrape (then nothing of it was).
            let base = match members.baselines.get(&t.id) {
                Some(base) => *base,
                None if self.mode == PerTenant::All || t.serial >= members.next_serial => {
                    [0; COUNTERS]
                }
                None => c,
            };
            baselines.insert(t.id.clone(), base);
            own.push((t, std::array::from_fn(|i| c[i].saturating_sub(base[i]))));
        }
        members.baselines = baselines;
        members.next_serial = Tenant::next_serial();
        drop(members);
        let shown: Counts = std::array::from_fn(|i| own.iter().map(|(_, c)| c[i]).sum());
        let other: Counts = std::array::from_fn(|i| total[i].saturating_sub(shown[i]));
        let with_other = own.len() < directory.len() || self.mode == PerTenant::None;
        Shown {
            own,
            other,
            other_buffer,
            with_other,
        }
    }

    /// The shown tenants' bucket levels, and what each holds in the buffer (`_other`'s
    /// summed).
    fn encode_gauges(
        &self,
        encoder: &mut DescriptorEncoder,
        shown: &Shown<'_>,
    ) -> Result<(), std::fmt::Error> {
        let mut tokens = Vec::new();
        let mut held = Vec::new();
        let (mut quota_used, mut quota_limit) = (Vec::new(), Vec::new());
        for (t, _) in &shown.own {
            let id = t.id.as_str();
            let view = self.admission.view(t);
            for (d, v) in view.tenant.iter() {
                if let Some(v) = v {
                    tokens.push((
                        vec![("tenant", id), ("bucket", d.as_str())],
                        ConstGauge::new(v.available as f64),
                    ));
                }
            }
            for (d, q) in view.quotas.iter().flatten() {
                let labels = vec![
                    ("tenant", id),
                    ("window", q.window.as_str()),
                    ("dimension", d.as_str()),
                ];
                quota_used.push((labels.clone(), ConstGauge::new(q.used as f64)));
                quota_limit.push((labels, ConstGauge::new(q.limit as f64)));
            }
            held.push((
                vec![("tenant", id)],
                ConstGauge::new(t.usage.bytes.load(Relaxed) as f64),
            ));
        }
        if shown.with_other {
            held.push((
                vec![("tenant", OTHER)],
                ConstGauge::new(shown.other_buffer as f64),
            ));
        }
        family(
            encoder,
            "tenant_tokens",
            "Tokens available now in each tenant bucket (tenants with series of their own)",
            None,
            G,
            &tokens,
        )?;
        family(
            encoder,
            "tenant_quota_used",
            "What each calendar quota's current window has admitted (tenants with series of \
             their own), by window and dimension",
            None,
            G,
            &quota_used,
        )?;
        family(
            encoder,
            "tenant_quota_limit",
            "Each calendar quota's limit per window, by window and dimension",
            None,
            G,
            &quota_limit,
        )?;
        family(
            encoder,
            "tenant_buffer",
            "Record bytes each tenant holds in the buffer",
            Some(&Unit::Bytes),
            G,
            &held,
        )
    }
}

/// What one scrape shows: the tenants with series of their own and their counts since they
/// got them, and what `_other` sums (shown only when some tenant is summed there).
struct Shown<'a> {
    own: Vec<(&'a Arc<Tenant>, Counts)>,
    other: Counts,
    other_buffer: u64,
    with_other: bool,
}

/// The counter families: each shown tenant's series, then `_other`'s.
fn encode_counters(
    encoder: &mut DescriptorEncoder,
    shown: &Shown<'_>,
) -> Result<(), std::fmt::Error> {
    let slots = counter_series();
    for (f, (name, help, unit)) in FAMILIES.iter().enumerate() {
        let mut series: Vec<(Labels<'_>, ConstCounter<u64>)> = Vec::new();
        for (t, c) in &shown.own {
            push_series(&mut series, &slots, f, t.id.as_str(), c);
        }
        if shown.with_other {
            push_series(&mut series, &slots, f, OTHER, &shown.other);
        }
        family(encoder, name, help, unit.as_ref(), C, &series)?;
    }
    Ok(())
}
