//! The global quotas (`[global] quotas`): calendar quotas on what all tenants send together,
//! counted as a tenant's are ([`Quotas`]), under one lock of their own.
//!
//! Every admission takes that lock (twice: to plan, then to commit) only while a global quota
//! is set; without one it reads a flag and goes on, so a gateway without global quotas pays
//! one atomic load a request for them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{QuotaSpec, Quotas};

#[derive(Debug, Default)]
pub struct GlobalQuotas {
    /// Whether any global quota is set (read without the lock).
    any: AtomicBool,
    quotas: Mutex<Quotas>,
}

impl GlobalQuotas {
    /// Whether any global quota is set.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// Sets the quotas, keeping what their windows have used (the rules in `quota`'s comment:
    /// an operator's change never hands out a fresh allowance).
    pub fn set_specs(&self, specs: Arc<[QuotaSpec]>) {
        let mut quotas = self.lock();
        self.any.store(!specs.is_empty(), Ordering::Release);
        quotas.specs = specs;
    }

    /// The quotas and their counts. Held briefly (never across an await): a check, a commit,
    /// a lease's answer written in.
    pub fn lock(&self) -> MutexGuard<'_, Quotas> {
        // A panic elsewhere while it was held left counts that are still counts.
        self.quotas.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dimension::PerDimension;
    use crate::quota::{Calendar, Window};
    use crate::record::Charge;

    fn day(records: u64) -> Arc<[QuotaSpec]> {
        Arc::from(vec![QuotaSpec {
            window: Window::Day,
            limit: PerDimension {
                records: Some(records),
                bytes: None,
            },
            shadow: false,
        }])
    }

    #[test]
    fn a_change_of_the_global_quotas_keeps_what_their_window_used() {
        let global = GlobalQuotas::default();
        assert!(!global.any());
        global.set_specs(day(10));
        assert!(global.any());
        let calendar = Calendar::default();
        let unix_s = 1_800_000_000;
        {
            let mut q = global.lock();
            let (used, _) = q
                .take(&calendar, unix_s, Charge::new(8, 0), false)
                .expect("8 of 10");
            q.used = used;
        }
        global.set_specs(day(12));
        let q = global.lock();
        // 8 used of 12: 5 more is past it, 4 is the difference the raise gave.
        assert!(q.take(&calendar, unix_s, Charge::new(5, 0), false).is_err());
        assert!(q.take(&calendar, unix_s, Charge::new(4, 0), false).is_ok());
        drop(q);
        global.set_specs(Arc::from(Vec::new()));
        assert!(!global.any());
    }
}
