//! Sharing the adaptive limit: strictly by priority class — critical first (and never less
//! than its reserve, which only critical tenants may use), then standard, then batch, so batch
//! is refused first — and within a class by the tenants' configured rates, each capped at what
//! it asks for, the rest going to the others (water-filling), not first come first served.

use std::collections::HashMap;

use crate::config::Priority;

/// One tenant's claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    pub id: String,
    pub class: Priority,
    /// Its configured rate (its share within the class is proportional to this).
    pub weight: f64,
    /// What it asked for over the last interval, per second.
    pub offered: f64,
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
    let mut rates = HashMap::new();
    let has = |c: Priority| demands.iter().any(|d| d.class == c);
    let wanted = |c: Priority| -> f64 {
        demands
            .iter()
            .filter(|d| d.class == c)
            .map(|d| d.offered * HEADROOM)
            .sum()
    };
    let mut left = limit;
    let mut class_total = HashMap::new();
    // Critical: what it asks for, at least its reserve (kept even when unused).
    if has(Priority::Critical) {
        let c = wanted(Priority::Critical)
            .max(limit * critical_reserve)
            .min(left);
        class_total.insert(Priority::Critical, c);
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
        class_total.insert(*class, c);
        left -= c;
    }
    for (class, total) in class_total {
        let members: Vec<&Demand> = demands.iter().filter(|d| d.class == class).collect();
        let claims: Vec<(f64, f64)> = members
            .iter()
            .map(|d| (d.weight, d.offered * HEADROOM))
            .collect();
        for (d, rate) in members.iter().zip(water_fill(total, &claims)) {
            rates.insert(d.id.clone(), rate);
        }
    }
    rates
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
}
