//! `[wait]`: requests over budget held for their tokens instead of refused, when the wait is
//! short (off by default), and what a burst below its per-second rate costs a client that
//! honours `Retry-After` (warned by `check-config` and the admin API).

use serde::{Deserialize, Serialize};

use super::{ConfigProblem, TenantConfig};

/// The longest hold allowed: `Retry-After` is whole seconds, so a wait of a second or more is
/// told to the client instead.
pub const MAX_WAIT_MS: u64 = 1000;

/// Holding requests for their tokens (docs/book/src/budgets.md: "Retry-After and the wait").
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WaitConfig {
    /// A request refused only because a tenant or global budget refills in at most this many
    /// milliseconds is held that long and admitted instead of answered 429 (0: never held; at
    /// most 1000). A held request keeps its body counted in the body budget and its
    /// connection in `server.max_connections`.
    pub max_ms: u64,
    /// Requests held at once, all tenants; a request finding none free is answered 429.
    pub max_requests: usize,
    /// Requests of one tenant held at once (so one tenant cannot take every seat).
    pub max_requests_per_tenant: usize,
}

impl Default for WaitConfig {
    fn default() -> Self {
        Self {
            max_ms: 0,
            max_requests: 1024,
            max_requests_per_tenant: 64,
        }
    }
}

impl WaitConfig {
    pub(super) fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if self.max_ms > MAX_WAIT_MS {
            problems.push(ConfigProblem::new(
                "wait.max_ms",
                format!(
                    "is {} ms; at most {MAX_WAIT_MS} (a longer wait is told in Retry-After's whole seconds)",
                    self.max_ms
                ),
            ));
        }
        if self.max_ms > 0 && self.max_requests == 0 {
            problems.push(ConfigProblem::new(
                "wait.max_requests",
                "must be at least 1 when wait.max_ms is set",
            ));
        }
        if self.max_ms > 0 && self.max_requests_per_tenant == 0 {
            problems.push(ConfigProblem::new(
                "wait.max_requests_per_tenant",
                "must be at least 1 when wait.max_ms is set",
            ));
        }
        problems
    }
}

/// What a tenant's burst below its per-second rate costs its clients, one sentence per
/// dimension (records, bytes) where it is: `Retry-After` is whole seconds, so a client that
/// honours it waits a second for tokens due in milliseconds and gets about burst / rate of
/// its budget — unless `[wait]` holds such requests. Empty when each burst is at least its rate.
pub fn burst_costs(tenant: &TenantConfig, wait: &WaitConfig) -> Vec<(&'static str, String)> {
    let dimensions = [
        ("records", tenant.records_per_sec, tenant.records_burst),
        ("bytes", tenant.bytes_per_sec, tenant.bytes_burst),
    ];
    let mut costs = Vec::new();
    for (unit, rate, burst) in dimensions {
        let (Some(rate), Some(burst)) = (rate, burst) else {
            continue;
        };
        if burst >= rate {
            continue;
        }
        let percent = burst.saturating_mul(100) / rate.max(1);
        let key = if unit == "records" {
            "records_burst"
        } else {
            "bytes_burst"
        };
        // The wait for one record (or byte) to refill, rounded up to whole milliseconds.
        let one_ms = 1000u64.div_ceil(rate.max(1));
        let cost = if wait.max_ms == 0 {
            format!(
                "{key} {burst} is below {unit}_per_sec {rate}: Retry-After is whole seconds, so a \
                 client that honours it waits a second for {unit} due in milliseconds and gets \
                 about {percent}% of its rate; raise {key} to {rate} (one second), or set \
                 [wait] max_ms (at least {one_ms}) to hold such requests instead"
            )
        } else {
            // What a hold covers: a request of at most this many records (bytes) — what
            // refills within max_ms, and never more than the burst (a larger request can
            // never be admitted: 413 exceeds_burst).
            let covered = (rate.saturating_mul(wait.max_ms) / 1000).min(burst);
            format!(
                "{key} {burst} is below {unit}_per_sec {rate}: waits up to [wait] max_ms ({} ms) \
                 are held, which covers a request of up to {covered} {unit} at a time; a longer \
                 wait is told in Retry-After's whole seconds, and a client waiting for it gets \
                 about {percent}% of its rate; raise {key} to {rate} (one second) if its \
                 requests are larger",
                wait.max_ms
            )
        };
        costs.push((key, cost));
    }
    costs
}

/// The configuration's tenants whose bursts are below their rates, as warnings.
pub(super) fn burst_warnings(tenants: &[TenantConfig], wait: &WaitConfig) -> Vec<ConfigProblem> {
    tenants
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            burst_costs(t, wait)
                .into_iter()
                .map(move |(key, cost)| ConfigProblem::new(format!("tenants[{i}].{key}"), cost))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(rate: u64, burst: u64) -> TenantConfig {
        TenantConfig {
            id: "t".into(),
            records_per_sec: Some(rate),
            records_burst: Some(burst),
            ..TenantConfig::default()
        }
    }

    #[test]
    fn a_burst_below_its_rate_is_warned_with_what_it_costs() {
        let off = WaitConfig::default();
        let costs = burst_costs(&tenant(50, 10), &off);
        assert_eq!(costs.len(), 1);
        assert_eq!(costs[0].0, "records_burst");
        assert!(
            costs[0].1.contains("about 20% of its rate"),
            "{}",
            costs[0].1
        );
        assert!(
            costs[0].1.contains("max_ms (at least 20)"),
            "{}",
            costs[0].1
        );
        let on = WaitConfig {
            max_ms: 250,
            ..WaitConfig::default()
        };
        let costs = burst_costs(&tenant(50, 10), &on);
        assert!(costs[0].1.contains("up to 10 records"), "{}", costs[0].1);
        // What refills within max_ms when the burst holds more: 100/s × 250 ms.
        let costs = burst_costs(&tenant(100, 50), &on);
        assert!(costs[0].1.contains("up to 25 records"), "{}", costs[0].1);
        // Never more than the burst: 10/s × 1000 ms refills 10, but a request over the burst
        // of 2 is 413 exceeds_burst however long it waits.
        let second = WaitConfig {
            max_ms: 1000,
            ..WaitConfig::default()
        };
        let costs = burst_costs(&tenant(10, 2), &second);
        assert!(costs[0].1.contains("up to 2 records"), "{}", costs[0].1);
        assert!(burst_costs(&tenant(50, 50), &off).is_empty());
        assert!(burst_costs(&TenantConfig::default(), &off).is_empty());
        let warnings = burst_warnings(&[tenant(50, 50), tenant(50, 10)], &off);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0]
            .to_string()
            .starts_with("tenants[1].records_burst"));
    }

    #[test]
    fn a_hold_is_bounded() {
        let long = WaitConfig {
            max_ms: 1500,
            ..WaitConfig::default()
        };
        assert_eq!(long.problems().len(), 1);
        let no_seats = WaitConfig {
            max_ms: 100,
            max_requests: 0,
            max_requests_per_tenant: 0,
        };
        assert_eq!(no_seats.problems().len(), 2);
        assert!(WaitConfig::default().problems().is_empty());
    }
}
