//! Lag guards, the pure parts: the per-guard state machine that turns consumer-group offsets
//! into a cap on producers ([`guard`]), the plan admission reads ([`LagPlan`]) and the
//! per-tenant bucket that spends a tenant's share of a cap ([`LagBucket`]). The agent that
//! reads offsets from Kafka and publishes plans lives in `lag_agent`.
//!
//! Layer: configuration; no runtime.

pub mod guard;

use std::collections::HashMap;
use std::sync::Arc;

use crate::identity::{Topic, TopicPatterns};

/// One guard as admission sees it.
#[derive(Debug, Clone)]
pub struct GuardPlan {
    pub name: Arc<str>,
    pub group: Arc<str>,
    pub topics: Arc<TopicPatterns>,
    /// Capping now: tenants spend their `shares` (records/s).
    pub capping: bool,
    /// This replica's share of the cap per tenant, records/s; a tenant not listed gets
    /// `newcomer`.
    pub shares: HashMap<String, f64>,
    pub newcomer: f64,
    /// The wait named when a share admits nothing (one reading interval).
    pub interval_ns: u64,
}

/// What admission enforces now.
#[derive(Debug, Clone, Default)]
pub struct LagPlan {
    /// Changes with every plan, so a tenant's bucket knows to follow.
    pub epoch: u64,
    pub guards: Vec<GuardPlan>,
}

impl LagPlan {
    /// The guards that watch `topic`.
    pub fn watching<'a>(&'a self, topic: &'a Topic) -> impl Iterator<Item = &'a GuardPlan> {
        self.guards.iter().filter(move |g| g.topics.allows(topic))
    }
}

/// The current plan: swapped whole by the agent, read lock-free by admission.
pub type LagPlanCell = crate::agent::PlanCell<LagPlan>;

/// A tenant's records toward one guard's topics: what it offered (for the split of the next
/// cap) and, while capping, its share as a records/s GCRA. Not `budget::RateSpec`: a share is
/// a fraction of a consumer's rate (often under 1 record/s, and 0 at the floor), and a request
/// larger than the share's burst must still pass once the bucket is full rather than never.
#[derive(Debug, Clone)]
pub struct LagBucket {
    pub guard: Arc<str>,
    /// Records offered to the guarded topics, ever (the agent takes differences).
    pub offered: u64,
    epoch: u64,
    /// Records/s while capping; `None` when not.
    rate: Option<f64>,
    /// Theoretical arrival time, ns.
    tat: u64,
}

/// A share may run this far ahead of its rate (a burst of this many seconds of it).
const BURST_S: f64 = 0.5;

impl LagBucket {
    pub fn new(guard: Arc<str>) -> Self {
        Self {
            guard,
            offered: 0,
            epoch: u64::MAX,
            rate: None,
            tat: 0,
        }
    }

    /// Follows the plan: a share coming into force starts full; a changed one keeps the time
    /// already spent.
    pub fn follow(&mut self, epoch: u64, rate: Option<f64>, now: u64) {
        if self.epoch == epoch {
            return;
        }
        self.epoch = epoch;
        if self.rate.is_none() {
            self.tat = now;
        }
        self.rate = rate;
    }

    /// The TAT after admitting `records`, or how long to wait (ns). A request larger than the
    /// burst passes when the bucket is full and pays afterwards, so no request is refused
    /// forever; one that a zero share can never admit waits `idle_ns`.
    pub fn check(&self, now: u64, records: u64, idle_ns: u64) -> Result<Option<u64>, u64> {
        let Some(rate) = self.rate else {
            return Ok(None);
        };
        if rate <= 0.0 {
            return Err(idle_ns.max(1));
        }
        let per_record = 1e9 / rate;
        let burst_ns = (BURST_S * 1e9).max(per_record) as u64;
        let start = self.tat.max(now);
        let cost = (records as f64 * per_record).min(u64::MAX as f64 / 2.0) as u64;
        let new_tat = start.saturating_add(cost);
        if new_tat.saturating_sub(now) <= burst_ns || self.tat <= now {
            Ok(Some(new_tat))
        } else {
            // Admitted once the TAT is back within the burst of the new cost, or full.
            let over = new_tat.saturating_sub(now).saturating_sub(burst_ns);
            Err(over.min(self.tat - now).max(1))
        }
    }

    pub fn commit(&mut self, tat: u64) {
        self.tat = tat;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_share_admits_its_rate_and_names_the_wait() {
        let mut b = LagBucket::new("g".into());
        b.follow(1, Some(100.0), 10 * S);
        // Full: 50 records (half a second) pass at once, the 51st waits 10 ms.
        let mut now = 10 * S;
        for _ in 0..50 {
            let tat = b.check(now, 1, S).expect("within burst").expect("capping");
            b.commit(tat);
        }
        let wait = b.check(now, 1, S).expect_err("burst spent");
        assert_eq!(wait, 10_000_000);
        // Over 10 s, 1,000 more pass: exactly the rate.
        let mut admitted = 0;
        for _ in 0..10_000 {
            now += S / 1000;
            if let Ok(Some(tat)) = b.check(now, 1, S) {
                b.commit(tat);
                admitted += 1;
            }
        }
        assert_eq!(admitted, 1_000);
    }

    #[test]
    fn a_zero_share_waits_an_interval_and_no_cap_charges_nothing() {
        let mut b = LagBucket::new("g".into());
        b.follow(1, Some(0.0), S);
        assert_eq!(b.check(S, 1, 250_000_000), Err(250_000_000));
        b.follow(2, None, S);
        assert_eq!(b.check(S, 1_000_000, 1), Ok(None));
    }

    #[test]
    fn a_request_larger_than_the_burst_passes_when_full_and_pays_after() {
        let mut b = LagBucket::new("g".into());
        b.follow(1, Some(100.0), S);
        let tat = b.check(S, 500, S).expect("full").expect("capping");
        assert_eq!(tat, 6 * S);
        b.commit(tat);
        let wait = b.check(S, 1, S).expect_err("paying");
        assert_eq!(wait, 5 * S - S / 2 + 10_000_000);
    }
}
