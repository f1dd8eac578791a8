//! What a tenant is shown of the limits that apply to it: its buckets, the global ones, and
//! its calendar quotas, as they stand (the source of the `RateLimit` fields).

use super::Admission;
use crate::budget::{BucketView, Dimension, PerDimension, Scope, TenantBuckets};
use crate::quota::{Calendar, QuotaView, Quotas};
use crate::tenant::{AdmissionState, Tenant};

/// The most quota items a view holds: one per window kind and dimension.
const QUOTA_ITEMS: usize = 6;

/// Every bucket and quota that applies to a tenant, as it stands. `Copy`, on the stack: every
/// answer carries one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketsView {
    pub tenant: PerDimension<Option<BucketView>>,
    pub global: PerDimension<Option<BucketView>>,
    /// The tenant's quotas, window by window, records before bytes.
    pub quotas: [Option<(Dimension, QuotaView)>; QUOTA_ITEMS],
    /// The global quotas, alike (hidden with the global buckets: `hide_from_tenants`).
    pub global_quotas: [Option<(Dimension, QuotaView)>; QUOTA_ITEMS],
}

impl BucketsView {
    /// One scope's buckets.
    pub fn of(&self, scope: Scope) -> &PerDimension<Option<BucketView>> {
        match scope {
            Scope::Tenant => &self.tenant,
            Scope::Global => &self.global,
        }
    }
}

impl Admission {
    /// The global quotas as they stand, window by window, records before bytes (empty: none
    /// is set).
    pub fn global_quotas(&self) -> Vec<(Dimension, QuotaView)> {
        self.global_quota_items(self.clock.now_ns())
            .into_iter()
            .flatten()
            .collect()
    }

    /// The global quotas as an answer's view holds them.
    fn global_quota_items(&self, now: u64) -> [Option<(Dimension, QuotaView)>; QUOTA_ITEMS] {
        if !self.global.quotas.any() {
            return [None; QUOTA_ITEMS];
        }
        let unix = self.unix_s(now);
        items(&self.global.quotas.lock(), &self.calendar, unix)
    }

    /// The tenant's and the global buckets, and its quotas, as they are now.
    pub fn view(&self, tenant: &Tenant) -> BucketsView {
        let now = self.clock.now_ns();
        match tenant.admission_if_live() {
            Some(state) => self.view_locked(&state, now),
            // Never charged: its buckets are full (its quotas are shown from its first
            // admission), and looking must not give it state.
            None => BucketsView {
                tenant: TenantBuckets::new(tenant.spec()).view(now),
                global: self.global.view(now),
                quotas: Default::default(),
                global_quotas: self.global_quota_items(now),
            },
        }
    }

    pub(super) fn view_locked(&self, state: &AdmissionState, now: u64) -> BucketsView {
        let quotas = if state.quotas.specs.is_empty() {
            [None; QUOTA_ITEMS]
        } else {
            items(&state.quotas, &self.calendar, self.unix_s(now))
        };
        BucketsView {
            tenant: state.buckets.view(now),
            global: self.global.view(now),
            quotas,
            global_quotas: self.global_quota_items(now),
        }
    }
}

/// Quota items as a view holds them (at most [`QUOTA_ITEMS`]).
fn items(
    quotas: &Quotas,
    calendar: &Calendar,
    unix_s: i64,
) -> [Option<(Dimension, QuotaView)>; QUOTA_ITEMS] {
    let mut items = [None; QUOTA_ITEMS];
    quotas.view_into(calendar, unix_s, &mut items);
    items
}
