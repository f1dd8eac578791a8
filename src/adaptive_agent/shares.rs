//! How a tick shares the limit out: each tenant's demand (measured while it sends, remembered
//! while it does not), then its share of the limit as a budget, by priority class and
//! configured rate.

use std::collections::HashMap;
use std::sync::Arc;

use super::signals::{Counts, Seen};
use super::{Ceiling, DEMAND_HALF_LIFE_S};
use crate::adaptive::Allotment;
use crate::allocation::{share, Demand};
use crate::budget::{BudgetSpec, RateSpec};
use crate::tenant::Tenant;

/// Seconds of a tenant's share its adaptive bucket holds.
const BURST_SECS: u64 = 2;

/// A remembered demand below this (per second) is forgotten.
const FORGOTTEN: f64 = 1e-3;

/// Demand per tenant of `tenants` (the registry in force), in the dimension the ceiling counts
/// first: the rate offered over the interval of `secs`, or the remembered one decayed over an
/// interval it sent nothing in. With what to remember of each tenant that offered anything.
pub(super) fn demands<'a>(
    tenants: impl Iterator<Item = &'a Arc<Tenant>>,
    counts: &Counts,
    previous: &HashMap<String, Seen>,
    secs: f64,
    ceiling: Ceiling,
) -> (Vec<Demand>, HashMap<String, Seen>) {
    let by_records = ceiling.by_records();
    let decay = 0.5f64.powf(secs / DEMAND_HALF_LIFE_S);
    let mut seen = HashMap::with_capacity(counts.offered.len());
    let demands = tenants
        .map(|t| {
            let id = t.id.as_str().to_string();
            let offered_now = counts.offered.get(&id).copied();
            let (r, b) = offered_now.unwrap_or_default();
            // Not seen at the last tick: its counters started since (all they hold is new).
            let before = previous.get(&id).cloned().unwrap_or_default();
            let (now_n, then_n) = if by_records {
                (r, before.records)
            } else {
                (b, before.bytes)
            };
            let offered = now_n.saturating_sub(then_n) as f64 / secs;
            // Measured while it sends; remembered (decaying) only over intervals it sends nothing
            // in — a client waiting out a Retry-After, or sending every few seconds. (The
            // highest of recent intervals, kept while it sends, held a busy tenant's share
            // at its peak and shrank the others': tests/it/mock/adaptive.rs.)
            let mut demand = if offered > 0.0 {
                offered
            } else {
                before.demand * decay
            };
            if !demand.is_finite() || demand < FORGOTTEN {
                demand = 0.0;
            }
            let spec = t.spec();
            let weight = if by_records { spec.records } else { spec.bytes }
                .map_or(ceiling.records.or(ceiling.bytes).unwrap_or(1) as f64, |s| {
                    s.per_sec as f64
                });
            if offered_now.is_some() {
                seen.insert(
                    id.clone(),
                    Seen {
                        records: r,
                        bytes: b,
                        demand,
                    },
                );
            }
            Demand {
                id,
                class: t.priority(),
                weight,
                offered: demand,
                // No claims from the agent: a claimed share the tenant does not use is
                // refused to the others (tests/it/mock/adaptive.rs: a critical tenant
                // refused once held its whole weight and starved standard). The remembered
                // demand — a refused request counts its records — and a wait no longer than
                // the next plan give a client that honours Retry-After its share back instead.
                claiming: false,
            }
        })
        .collect();
    (demands, seen)
}

/// The limit (a fraction of `ceiling`) shared among `demands`: each tenant's share as a budget,
/// and the rate each class got (indexed like `Priority::ALL`).
pub(super) fn shares(
    demands: &[Demand],
    ceiling: Ceiling,
    limit: f64,
    critical_reserve: f64,
) -> (HashMap<String, Allotment>, [f64; 3]) {
    let primary = ceiling.primary().unwrap_or(0) as f64 * limit;
    let allocation = share(primary, critical_reserve, demands);
    let mut class_rate = [0.0f64; 3];
    let per_sec = |ceiling: Option<u64>, fraction: f64| {
        ceiling.map(|c| ((c as f64 * limit * fraction) as u64).max(1))
    };
    let shares = demands
        .iter()
        .map(|d| {
            let rate = allocation.rates.get(&d.id).copied().unwrap_or(0.0);
            class_rate[d.class as usize] += rate;
            let fraction = |rate: f64| {
                if primary > 0.0 && rate.is_finite() {
                    (rate / primary).clamp(0.0, 1.0)
                } else {
                    0.0
                }
            };
            let own = fraction(rate);
            let dim = |ceiling: Option<u64>| {
                per_sec(ceiling, own).map(|per_sec| RateSpec {
                    per_sec,
                    burst: per_sec.saturating_mul(BURST_SECS).max(1),
                })
            };
            let present = d.claiming || d.offered > 0.0;
            let claimed = fraction(allocation.claimed(d.class, d.weight, present)).max(own);
            (
                d.id.clone(),
                Allotment {
                    class: d.class,
                    spec: BudgetSpec {
                        records: dim(ceiling.records),
                        bytes: dim(ceiling.bytes),
                    },
                    claimed: (
                        per_sec(ceiling.records, claimed),
                        per_sec(ceiling.bytes, claimed),
                    ),
                },
            )
        })
        .collect();
    (shares, class_rate)
}
