//! The schema step's CPU that no budget pays for, charged to the tenant that caused it: every
//! compile, every check that refused its record, the checks of a record refused after they
//! passed ([`ChecksOwed`]), and what a passing check costs past what an admitted record pays
//! for (`paid_check_us`, `paid_check_us_per_kib`). The pipeline charges the same bucket for
//! reading a body whose request is then refused (estimated per piece and per byte:
//! `ingest::read`), and asks it before reading a large, unsized or inflated body. An admitted record pays for an ordinary
//! check through the tenant's budgets (records, bytes); nothing paid for a compile, nor for the
//! check of a record refused by it (422 `schema_violation`, `schema_too_costly`), so a tenant
//! allowed 1 record/s could make the step work without pause:
//! - review 10 of #37: 0.37 s of CPU per refused check (3.5 KB against 100 patterns under
//!   `anyOf`), 27 in 10 s from one tenant; two such tenants held both schema threads and
//!   another tenant's checks waited 0.9–1.2 s; small invalid records checked on the request
//!   workers took 0.95 ms each, 965 a second from one tenant;
//! - review 11: a new raw schema per request (a 255 KB `pattern`), its data then refused:
//!   75 ms of compile per request, 1,500× a 401, a core per attacking tenant, RSS +90 MiB in
//!   ten requests.
//!
//! Each tenant has a bucket of CPU milliseconds (`tenant_unpaid_work_ms_per_sec`,
//! `tenant_unpaid_work_ms_burst`). Unpaid work takes what it spent, measured, even past what
//! is left (the bucket then owes it); while the bucket is empty the tenant's records are
//! refused before their check or compile with 429 `schema_busy` and the time until it holds a
//! millisecond again. A tenant whose records fit schemas it has compiled never spends it; a
//! new schema costs its compile once (then it is cached).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::SchemaError;
use crate::budget::{Clock, RateSpec};

/// Most tenants followed at once (buckets that are full again are forgotten first).
const MAX_TENANTS: usize = 10_000;

/// Each tenant's bucket of CPU milliseconds for refused checks, counted in microseconds: a
/// check is charged what it took, not a millisecond at least (thousands of passing checks of a
/// request, each a little over what its record pays for, would each cost a millisecond).
pub(super) struct UnpaidWork {
    /// In microseconds.
    spec: RateSpec,
    /// Each tenant's TAT, in ticks of `1 / per_sec` (see [`crate::budget::RateSpec`]).
    tats: Mutex<HashMap<Arc<str>, u64>>,
}

/// Microseconds a millisecond holds.
const US_PER_MS: u64 = 1_000;

impl UnpaidWork {
    pub(super) fn new(ms_per_sec: u64, burst_ms: u64) -> Self {
        Self {
            spec: RateSpec {
                per_sec: ms_per_sec.max(1).saturating_mul(US_PER_MS),
                burst: burst_ms.max(1).saturating_mul(US_PER_MS),
            },
            tats: Mutex::new(HashMap::new()),
        }
    }

    /// The bucket's settings in milliseconds (for the refusal's detail).
    pub(super) fn spec(&self) -> RateSpec {
        RateSpec {
            per_sec: self.spec.per_sec / US_PER_MS,
            burst: self.spec.burst / US_PER_MS,
        }
    }

    /// Whether `tenant` may have a record checked now, or how long until it may.
    pub(super) fn may_check(&self, clock: &dyn Clock, tenant: &str) -> Result<(), Duration> {
        let now = clock.now_ns();
        let tats = self.tats.lock();
        let Some(&tat) = tats.get(tenant) else {
            return Ok(());
        };
        // At least one millisecond left: taking none would always succeed.
        self.spec
            .try_take(tat, now, US_PER_MS)
            .map(drop)
            .map_err(Duration::from_nanos)
    }

    /// What `tenant` may still spend unpaid now: the longest a check of its may run past
    /// what its record pays for.
    pub(super) fn left(&self, clock: &dyn Clock, tenant: &str) -> Duration {
        let now = clock.now_ns();
        let tat = self.tats.lock().get(tenant).copied();
        let available = tat.map_or(self.spec.burst, |tat| self.spec.available(tat, now));
        Duration::from_micros(available)
    }

    /// Work of `tenant`'s that no budget pays for took `spent` of CPU: the bucket takes it all.
    pub(super) fn charge(&self, clock: &dyn Clock, tenant: &str, spent: Duration) {
        let now = clock.now_ns();
        let us = u64::try_from(spent.as_micros()).unwrap_or(u64::MAX).max(1);
        let mut tats = self.tats.lock();
        if tats.len() >= MAX_TENANTS && !tats.contains_key(tenant) {
            let full = self.spec.full_tat(now);
            tats.retain(|_, tat| *tat > full);
        }
        let tat = tats
            .get(tenant)
            .copied()
            .unwrap_or_else(|| self.spec.full_tat(now));
        // Past what is left too: the bucket owes it, and the tenant waits it off.
        let now_ticks = self.spec.ticks_at(now);
        tats.insert(tenant.into(), tat.max(now_ticks).saturating_add(us));
    }
}

/// The CPU of checks that passed, owed by their records until admission takes them: a record
/// refused after its check passed (its other side failed, its partition does not exist, the
/// budgets refused it, its request was refused for another record or went away) had its check
/// paid by no budget. Review 13 of #37: a key checked for 0.3 s beside a value that fails at
/// once cost the tenant 1 ms. Charged to the tenant's unpaid work when dropped, on every way
/// out, unless [`ChecksOwed::admitted`] says a budget paid.
pub struct ChecksOwed {
    unpaid: Arc<UnpaidWork>,
    clock: Arc<dyn Clock>,
    tenant: Arc<str>,
    cpu: Duration,
}

impl ChecksOwed {
    pub(super) fn new(unpaid: Arc<UnpaidWork>, clock: Arc<dyn Clock>, tenant: &str) -> Self {
        Self {
            unpaid,
            clock,
            tenant: tenant.into(),
            cpu: Duration::ZERO,
        }
    }

    /// A record's passed checks, owed with the others.
    pub fn add(&mut self, cpu: Duration) {
        self.cpu = self.cpu.saturating_add(cpu);
    }

    /// What is owed, handed to the caller to owe (nothing is charged here).
    pub fn hand_over(mut self) -> Duration {
        std::mem::take(&mut self.cpu)
    }

    /// The records were admitted: their budgets paid for the checks.
    pub fn admitted(mut self) {
        self.cpu = Duration::ZERO;
    }
}

impl Drop for ChecksOwed {
    fn drop(&mut self) {
        if !self.cpu.is_zero() {
            self.unpaid.charge(&*self.clock, &self.tenant, self.cpu);
        }
    }
}

impl super::Schemas {
    /// What `tenant`'s records will owe for their passed checks, nothing yet.
    pub fn owed(&self, tenant: &str) -> ChecksOwed {
        ChecksOwed::new(self.unpaid_work.clone(), self.clock.clone(), tenant)
    }

    /// Work of `tenant`'s that no budget paid for (a body read for a request that was refused)
    /// took about `cost`: its unpaid work takes it.
    pub fn charge_unpaid(&self, tenant: &str, cost: std::time::Duration) {
        if !cost.is_zero() {
            self.unpaid_work.charge(&*self.clock, tenant, cost);
        }
    }

    /// The most unpaid work one request may owe: the bucket's burst.
    pub fn most_owed(&self) -> Duration {
        Duration::from_millis(self.unpaid_work.spec().burst)
    }

    /// Whether `tenant` may have work done that no budget may pay for (an unpaid check, a
    /// large body read that may end refused), or the 429 until it may.
    pub fn unpaid_allows(&self, tenant: &str) -> Result<(), SchemaError> {
        self.unpaid_work
            .may_check(&*self.clock, tenant)
            .map_err(|wait| self.unpaid_work_spent(wait))
    }

    /// The tenant's refused checks spent its milliseconds: 429 until it holds one again.
    pub(super) fn unpaid_work_spent(&self, wait: std::time::Duration) -> SchemaError {
        self.count_refusal("unpaid_work");
        let spec = self.unpaid_work.spec();
        SchemaError::Busy(
            wait,
            format!(
                "this tenant's schema compiles and refused checks used more CPU than it may spend unpaid ({} ms at once, {} ms each second: [schema_registry] tenant_unpaid_work_ms_burst, tenant_unpaid_work_ms_per_sec); retry in {} ms",
                spec.burst,
                spec.per_sec,
                wait.as_millis().max(1)
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ManualClock;

    #[test]
    fn refused_checks_spend_the_tenants_milliseconds_and_the_others_keep_theirs() {
        let clock = ManualClock::new();
        let work = UnpaidWork::new(100, 1_000);
        assert!(work.may_check(&clock, "a").is_ok(), "nothing spent yet");
        // Two refusals of 400 ms: 200 ms left.
        work.charge(&clock, "a", Duration::from_millis(400));
        work.charge(&clock, "a", Duration::from_millis(400));
        assert!(work.may_check(&clock, "a").is_ok());
        // One more of 400 ms: it owes 200 ms, 2 s at 100 ms/s, and then one more to check.
        work.charge(&clock, "a", Duration::from_millis(400));
        let wait = work.may_check(&clock, "a").expect_err("empty");
        assert_eq!(wait.as_millis(), 2_010);
        assert!(
            work.may_check(&clock, "b").is_ok(),
            "another tenant's bucket"
        );
        clock.advance_ms(2_000);
        assert!(work.may_check(&clock, "a").is_err(), "still owes");
        clock.advance_ms(10);
        assert!(work.may_check(&clock, "a").is_ok());
    }

    #[test]
    fn checks_owed_are_charged_on_every_way_out_but_admission() {
        let clock = Arc::new(ManualClock::new());
        let work = Arc::new(UnpaidWork::new(100, 1_000));
        let owed = |cpu_ms| {
            let mut owed = ChecksOwed::new(work.clone(), clock.clone(), "a");
            owed.add(Duration::from_millis(cpu_ms));
            owed
        };
        owed(600).admitted();
        assert_eq!(owed(600).hand_over(), Duration::from_millis(600));
        assert!(work.may_check(&*clock, "a").is_ok(), "nothing charged yet");
        // Dropped (a refusal, an error, a client gone): charged.
        drop(owed(600));
        assert!(work.may_check(&*clock, "a").is_ok(), "400 ms left");
        drop(owed(600));
        let wait = work.may_check(&*clock, "a").expect_err("owes 200 ms");
        assert_eq!(wait.as_millis(), 2_010);
    }

    #[test]
    fn a_full_bucket_is_forgotten_when_many_tenants_are_followed() {
        let clock = ManualClock::new();
        let work = UnpaidWork::new(1_000, 1_000);
        for n in 0..MAX_TENANTS {
            work.charge(&clock, &format!("t{n}"), Duration::from_millis(1));
        }
        clock.advance_ms(10);
        work.charge(&clock, "new", Duration::from_millis(1));
        assert!(work.tats.lock().len() <= 2, "the full ones went");
    }
}
