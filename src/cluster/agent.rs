//! The agent: heartbeats, and every slice tended off the request path — its target sized from
//! the replica's observed demand, topped up below half of it, given back when idle.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{duration_ns, Ask, Cluster, Scope};
use crate::budget::{BudgetSpec, Dimension, PerDimension, Slice};
use crate::record::Charge;
use crate::tenant::Tenant;

/// A slice the agent looks after: whose, the tenant (for its lock), the slice, its budget.
type Tended = (Scope, String, Option<Arc<Tenant>>, Arc<Slice>, BudgetSpec);

/// The agent's view of one slice's demand.
#[derive(Debug, Default)]
struct Demand {
    slice: usize,
    spent: Charge,
    /// Tokens per second, smoothed.
    rate: PerDimension<f64>,
}

impl Cluster {
    /// Runs the agent until the process ends: heartbeats, refills and expiry.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let cluster = self.clone();
        tokio::spawn(async move {
            let tick = (cluster.settings.slice_horizon / 4).max(Duration::from_millis(5));
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_heartbeat = Instant::now();
            let mut demand: HashMap<String, Demand> = HashMap::new();
            let mut watch = None;
            loop {
                interval.tick().await;
                if last_heartbeat.elapsed() >= cluster.settings.heartbeat {
                    last_heartbeat = Instant::now();
                    cluster.beat(&mut watch).await;
                }
                if !cluster.is_degraded() {
                    cluster.tend_slices(&mut demand, tick).await;
                }
            }
        })
    }

    /// Every slice: update its demand and target, top it up below half its target, give it
    /// back when it was not refilled for `slice_ttl`.
    async fn tend_slices(self: &Arc<Self>, demand: &mut HashMap<String, Demand>, tick: Duration) {
        let now = self.clock.now_ns();
        let mut work = tokio::task::JoinSet::new();
        let mut seen = Vec::new();
        let directory = self.tenants.load();
        let mut slices: Vec<Tended> = directory
            .tenants()
            .filter_map(|t| {
                let state = t.admission_if_live()?;
                let slice = state.buckets.slice()?.clone();
                Some((
                    Scope::Tenant,
                    t.id.as_str().to_string(),
                    Some(t.clone()),
                    slice,
                    state.buckets.spec(),
                ))
            })
            .collect();
        if let Some(slice) = self.global.slice() {
            slices.push((
                Scope::Global,
                String::new(),
                None,
                slice,
                self.global.spec(),
            ));
        }
        for (scope, id, tenant, slice, spec) in slices {
            let name = format!("{}:{id}", scope.as_str());
            let d = demand.entry(name.clone()).or_default();
            seen.push(name);
            let target = self.observe(d, &slice, &spec, tick);
            slice.set_target(target);
            let held = slice.held();
            let idle_for = now.saturating_sub(slice.granted_at_ns());
            let key = match scope {
                Scope::Tenant => self.store.tenant_key(&id),
                Scope::Global => self.store.global_key(),
            };
            if (held.records > 0 || held.bytes > 0)
                && slice.granted_at_ns() > 0
                && idle_for > duration_ns(self.settings.slice_ttl)
                && d.rate == PerDimension::default()
            {
                // Drained under the tenant's lock: admissions take from a tenant's slice only
                // under it, so nothing they checked disappears before they commit. A slice
                // whose tenant has tokens reserved (a request registering raw schemas, which
                // leased them first) is kept until that request is admitted or gone: given
                // back, another replica would spend them meanwhile (review 41-r10 of #37: a
                // registration slower than `slice_ttl_ms` was refused after it wrote its
                // version).
                let tokens = match &tenant {
                    Some(t) => {
                        let state = t.admission_state();
                        if state.reserved != Charge::default() {
                            continue;
                        }
                        slice.drain()
                    }
                    None => slice.drain(),
                };
                let cluster = self.clone();
                work.spawn(async move {
                    cluster.give_back(&key, &spec, tokens).await;
                });
                continue;
            }
            let low = |d: Dimension| spec[d].is_some() && held[d] < target[d] / 2 + 1;
            let busy = d.rate.records > 0.0 || d.rate.bytes > 0.0;
            if busy && Dimension::ALL.into_iter().any(low) {
                let asks = PerDimension::from_fn(|d| Ask {
                    want: target[d].saturating_sub(held[d]),
                    min: 0,
                    level: 0, // set by `lease` from the slice
                });
                let cluster = self.clone();
                work.spawn(async move {
                    let _ = cluster.lease(scope, &key, &spec, asks, &slice).await;
                });
            }
        }
        demand.retain(|k, _| seen.contains(k));
        while work.join_next().await.is_some() {}
    }

    /// Updates the demand estimate and returns the slice's target, (records, bytes).
    fn observe(
        &self,
        d: &mut Demand,
        slice: &Arc<Slice>,
        spec: &BudgetSpec,
        tick: Duration,
    ) -> Charge {
        let id = Arc::as_ptr(slice) as usize;
        let spent = slice.spent();
        if d.slice != id {
            *d = Demand {
                slice: id,
                spent,
                rate: PerDimension::default(),
            };
        }
        let secs = tick.as_secs_f64();
        let fresh =
            PerDimension::from_fn(|dim| spent[dim].saturating_sub(d.spent[dim]) as f64 / secs);
        d.spent = spent;
        // Smoothing over about four ticks; a demand that stops decays to exactly zero.
        let smooth = |old: f64, new: f64| {
            let v = old * 0.75 + new * 0.25;
            if v < 0.5 {
                0.0
            } else {
                v
            }
        };
        d.rate = PerDimension::from_fn(|dim| smooth(d.rate[dim], fresh[dim]));
        let horizon = self.settings.slice_horizon.as_secs_f64();
        let members = f64::from(self.members());
        let target = |rate: f64, s: Option<crate::budget::RateSpec>| {
            s.map_or(0, |s| {
                let cap = ((self.settings.slice_fraction * s.burst as f64 / members) as u64).max(1);
                ((rate * horizon).ceil() as u64).clamp(1, cap)
            })
        };
        PerDimension::from_fn(|dim| target(d.rate[dim], spec[dim]))
    }
}
