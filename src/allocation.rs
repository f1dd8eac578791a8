//! Sharing the adaptive limit: strictly by priority class — critical first (and never less
//! than its reserve, which only critical tenants may use), then standard, then batch, so batch
//! is refused first — and within a class by the tenants' configured rates, each capped at what
//! it asks for, the rest going to the others (water-filling), not first come first served.
//!
//! What a tenant "asks for" is its demand as the agent remembers it (see `adaptive_agent`).
//! A tenant may also be marked *claiming* — it then asks for its configured rate, so within its
//! class its share follows its weight; the agent does not use this (a claimed share a tenant
//! does not use is refused to the others), and [`Allocation::claimed`] says what such a share
//! would be, for the wait a refusal names.
//!
//! Layer: configuration. Imports configuration and the foundations.

use std::collections::HashMap;

use crate::config::Priority;

/// One tenant's claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    pub id: String,
    pub class: Priority,
    /// Its configured rate (its share within the class is proportional to this).
    pub weight: f64,
    /// What it asks for, per second (the agent's remembered demand).
    pub offered: f64,
    /// Refused by the limit lately: it asks for `weight` (its configured rate).
    pub claiming: bool,
}

impl Demand {
    /// Asks for anything (or claims): it counts among the tenants sharing its class.
    fn present(&self) -> bool {
        self.claiming || self.offered > 0.0
    }

    /// What it asks for: the most it is given.
    fn cap(&self) -> f64 {
        if self.claiming {
            self.weight.max(self.offered * HEADROOM)
        } else {
            self.offered * HEADROOM
        }
    }
}

/// Each tenant's rate, and what a class shares among the tenants in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocation {
    pub rates: HashMap<String, f64>,
    /// Per class (indexed like `Priority::ALL`): its part of the limit, and the summed weight
    /// of the tenants present in it.
    pub class_total: [f64; 3],
    pub class_weight: [f64; 3],
}

impl Allocation {
    /// What a tenant of `class` with `weight` gets once it claims: its weight's part of the
    /// class, counted among those present (itself included once). The wait a refusal names
    /// is computed against this, not against the share it had when it asked for little.
    pub fn claimed(&self, class: Priority, weight: f64, present: bool) -> f64 {
        let i = class as usize;
        let weight = weight.max(1e-9);
        let all = self.class_weight[i] + if present { 0.0 } else { weight };
        if all > 0.0 {
            self.class_total[i] * (weight / all).min(1.0)
        } else {
            0.0
        }
    }
}

/// A tenant may grow this much above what it asked for, so demand that is rising is not held
/// at last interval's level.
const HEADROOM: f64 = 1.25;

/// Splits `total` by `weights`, giving no one more than its cap; what a capped one leaves goes
/// to the others by weight. If everyone is capped, the rest is spread by weight anyway (the
/// whole total is always handed out).
fn water_fill(total: f64, claims: &[(f64, f64)]) -> Vec<f64> {
    let mut out = vec![0.0; claims.len()];
    let mut open: Vec<usize> = (0..claims.len()).collect();
    let mut left = total;
    while left > 1e-9 && !open.is_empty() {
        let weight: f64 = open.iter().map(|&i| claims[i].0.max(1e-9)).sum();
        let mut capped = Vec::new();
        for &i in &open {
            let fair = left * claims[i].0.max(1e-9) / weight;
            if out[i] + fair >= claims[i].1 {
                capped.push(i);
            }
        }
        if capped.is_empty() {
            for &i in &open {
                out[i] += left * claims[i].0.max(1e-9) / weight;
            }
            left = 0.0;
        } else {
            for &i in &capped {
                left -= claims[i].1 - out[i];
                out[i] = claims[i].1;
            }
            open.retain(|i| !capped.contains(i));
        }
    }
    if left > 1e-9 && !claims.is_empty() {
        let weight: f64 = claims.iter().map(|c| c.0.max(1e-9)).sum();
        for (i, c) in claims.iter().enumerate() {
            out[i] += left * c.0.max(1e-9) / weight;
        }
    }
    out
}

/// Each tenant's rate under `limit` (records/s or bytes/s, whichever the demands count).
pub fn allocate(limit: f64, critical_reserve: f64, demands: &[Demand]) -> HashMap<String, f64> {
    share(limit, critical_reserve, demands).rates
}

/// [`allocate`], with what each class shares.
pub fn share(limit: f64, critical_reserve: f64, demands: &[Demand]) -> Allocation {
    let mut out = Allocation::default();
    let has = |c: Priority| demands.iter().any(|d| d.class == c);
    let wanted = |c: Priority| -> f64 {
        demands
            .iter()
            .filter(|d| d.class == c)
            .map(Demand::cap)
            .sum()
    };
    let mut left = limit;
    // Critical: what it asks for, at least its reserve (kept even when unused).
    if has(Priority::Critical) {
        let c = wanted(Priority::Critical)
            .max(limit * critical_reserve)
            .min(left);
        out.class_total[Priority::Critical as usize] = c;
        left -= c;
    }
    // Standard, then batch, up to what they ask for; the last class present takes what is left.
    let rest: Vec<Priority> = [Priority::Standard, Priority::Batch]
        .into_iter()
        .filter(|c| has(*c))
        .collect();
    for (i, class) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        let c = if last { left } else { wanted(*class).min(left) };
        out.class_total[*class as usize] = c;
        left -= c;
    }
    for class in Priority::ALL {
        if !has(class) {
            continue;
        }
        let members: Vec<&Demand> = demands.iter().filter(|d| d.class == class).collect();
        out.class_weight[class as usize] = members
            .iter()
            .filter(|d| d.present())
            .map(|d| d.weight.max(1e-9))
            .sum();
        let claims: Vec<(f64, f64)> = members.iter().map(|d| (d.weight, d.cap())).collect();
        let total = out.class_total[class as usize];
        for (d, rate) in members.iter().zip(water_fill(total, &claims)) {
            out.rates.insert(d.id.clone(), rate);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(id: &str, class: Priority, weight: f64, offered: f64) -> Demand {
        Demand {
            id: id.into(),
            class,
            weight,
            offered,
            claiming: false,
        }
    }

    #[test]
    fn batch_is_cut_first_then_standard_and_critical_keeps_its_reserve() {
        let demands = [
            d("c", Priority::Critical, 1.0, 100.0),
            d("s", Priority::Standard, 1.0, 1000.0),
            d("b", Priority::Batch, 1.0, 1000.0),
        ];
        // Limit 1000: critical asks 125 (with headroom) but keeps its 200 reserve; standard
        // gets the rest; batch nothing.
        let r = allocate(1000.0, 0.2, &demands);
        assert!((r["c"] - 200.0).abs() < 1e-6);
        assert!((r["s"] - 800.0).abs() < 1e-6);
        assert!(r["b"].abs() < 1e-6);
        // Limit 3000: everyone is served, batch takes what is left.
        let r = allocate(3000.0, 0.2, &demands);
        assert!((r["s"] - 1250.0).abs() < 1e-6);
        assert!((r["b"] - 1150.0).abs() < 1e-6);
        let total: f64 = r.values().sum();
        assert!((total - 3000.0).abs() < 1e-6, "never more than the limit");
    }

    #[test]
    fn within_a_class_the_share_follows_the_configured_rates_not_arrival() {
        let demands = [
            d("big", Priority::Standard, 300.0, 10_000.0),
            d("small", Priority::Standard, 100.0, 10_000.0),
            d("idle", Priority::Standard, 100.0, 8.0),
        ];
        let r = allocate(1000.0, 0.2, &demands);
        // idle needs 10 (8 with headroom); the other 990 split 3:1.
        assert!((r["idle"] - 10.0).abs() < 1e-6);
        assert!((r["big"] - 742.5).abs() < 1e-6);
        assert!((r["small"] - 247.5).abs() < 1e-6);
    }

    #[test]
    fn a_claiming_tenant_gets_its_weight_of_its_class_whatever_it_sent() {
        // The review of #29: "polite" honours Retry-After, so it sent one 30-record request in
        // the interval (60/s) while "greedy" sent 10,000/s; equal configured rates.
        let mut polite = d("polite", Priority::Standard, 1000.0, 60.0);
        let greedy = Demand {
            claiming: true,
            ..d("greedy", Priority::Standard, 1000.0, 10_000.0)
        };
        let r = allocate(1000.0, 0.2, &[polite.clone(), greedy.clone()]);
        assert!((r["polite"] - 75.0).abs() < 1e-6, "{r:?}");
        // Refused lately: it claims, and the class follows the configured rates.
        polite.claiming = true;
        let a = share(1000.0, 0.2, &[polite.clone(), greedy.clone()]);
        assert!((a.rates["polite"] - 500.0).abs() < 1e-6, "{a:?}");
        assert!((a.rates["greedy"] - 500.0).abs() < 1e-6, "{a:?}");
        // A tenant that asked for nothing yet is told the wait against its part once it
        // claims: its weight among those present, itself included.
        let quiet = d("quiet", Priority::Standard, 2000.0, 0.0);
        let a = share(1000.0, 0.2, &[polite, greedy, quiet]);
        assert!(a.rates["quiet"].abs() < 1e-6);
        assert!((a.claimed(Priority::Standard, 2000.0, false) - 500.0).abs() < 1e-6);
        assert!((a.claimed(Priority::Standard, 1000.0, true) - 500.0).abs() < 1e-6);
        assert_eq!(a.claimed(Priority::Batch, 1000.0, false), 0.0);
    }

    #[test]
    fn a_claiming_standard_tenant_takes_from_batch_never_from_critical() {
        let demands = [
            d("c", Priority::Critical, 1.0, 400.0),
            Demand {
                claiming: true,
                ..d("s", Priority::Standard, 2000.0, 100.0)
            },
            d("b", Priority::Batch, 1.0, 1000.0),
        ];
        let r = allocate(1000.0, 0.2, &demands);
        assert!((r["c"] - 500.0).abs() < 1e-6, "{r:?}");
        // Standard was refused: it asks for its configured rate, and batch gives way first.
        assert!((r["s"] - 500.0).abs() < 1e-6, "{r:?}");
        assert!(r["b"].abs() < 1e-6, "{r:?}");
        // Not claiming, it gets what it sent with headroom and batch the rest.
        let mut demands = demands;
        demands[1].claiming = false;
        let r = allocate(1000.0, 0.2, &demands);
        assert!((r["s"] - 125.0).abs() < 1e-6, "{r:?}");
        assert!((r["b"] - 375.0).abs() < 1e-6, "{r:?}");
    }
}
