//! The early check made before a body is read: could the tenant be admitted with at least one
//! record? Charges nothing.

use super::{global_reason, lag, refused_plain, tenant_reason, Admission, Pending};
use crate::budget::Scope;
use crate::identity::Topic;
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal};
use crate::tenant::Tenant;

impl Admission {
    /// The early check made before the body is read: could this tenant be admitted with at
    /// least one record and `bytes_upper` bytes (the body's declared length, which bounds
    /// the record bytes from above)? Charges nothing. A refusal `[wait]` could hold comes only
    /// when nothing else refuses (the caller decides whether the request may wait).
    pub fn precheck(&self, tenant: &Tenant, bytes_upper: u64) -> Result<(), Refusal> {
        self.precheck_to(tenant, None, bytes_upper)
    }

    /// [`Admission::precheck`] for records to `topic`.
    pub fn precheck_to(
        &self,
        tenant: &Tenant,
        topic: Option<&Topic>,
        bytes_upper: u64,
    ) -> Result<(), Refusal> {
        let now = self.clock.now_ns();
        let mut state = tenant.admission_state();
        self.align(&mut state.buckets, now);
        self.follow_plan(tenant, &mut state, now);
        self.follow_lag(tenant, &mut state, topic, now, 0);
        if let Err(Denial::Refused(r)) = self.adaptive_check(tenant, &state, now, Charge::new(1, 1))
        {
            // Refused before its records are counted: count what this tenant's requests
            // usually hold, so the next split sees the demand the limit held back.
            tenant
                .stats()
                .decided(lag::typical_records(tenant), 0, Some(r.reason), false);
            return Err(r);
        }
        if let Err(Denial::Refused(r)) = self.lag_check(&state, topic, now, 1) {
            // Refused before its records are counted: count what this tenant's requests
            // usually hold, so the next split and the guard's release rule see the demand the
            // cap holds back (the plan is already followed: nothing moves).
            let typical = lag::typical_records(tenant);
            self.follow_lag(tenant, &mut state, topic, now, typical);
            tenant.stats().decided(1, 0, Some(r.reason), false);
            return Err(r);
        }
        // A used-up window (the tenant's or a global one): refused before the body is read.
        let one = Charge::new(1, 1);
        if let Err(Denial::Refused(r)) =
            self.quota_check(&state.quotas, Scope::Tenant, now, one, false)
        {
            return Err(r);
        }
        if let Err(Denial::Refused(r)) = self.global_quota_check(now, one, &mut None) {
            return Err(r);
        }
        let spec = state.buckets.spec();
        let global_spec = self.global.spec();
        // Only ask for as many bytes as a bucket could ever hold: the exact count, made after
        // parsing, decides the rest.
        let cap = |burst: Option<u64>| burst.map_or(bytes_upper, |b| bytes_upper.min(b));
        let tenant_bytes = cap(spec.bytes.map(|s| s.burst));
        let global_bytes = cap(global_spec.bytes.map(|s| s.burst));
        let mut pending = Pending::default();
        // A budget in shadow mode refuses nothing (`shadow`).
        if !state.budget_shadow {
            if let Err(t) = state.buckets.estimate(now, Charge::new(1, tenant_bytes)) {
                pending.add(self, refused_plain(tenant_reason(t), t.wait_ns))?;
            }
        }
        if !self.global.is_shadow() {
            if let Err(g) = self.global.estimate(now, Charge::new(1, global_bytes)) {
                pending.add(self, refused_plain(global_reason(g), g.wait_ns))?;
            }
        }
        let (held_bytes, held_records) = self.tenant_usage(tenant);
        let (share_bytes, share_records) = self.share(state.buffer_share);
        if state.buffer_share < 1.0 && (held_records >= share_records || held_bytes >= share_bytes)
        {
            return Err(self.buffer_refusal_plain(Reason::TenantBuffer));
        }
        if !self.buffer.has_room(Charge::new(1, 1)) {
            return Err(self.buffer_refusal_plain(Reason::BufferFull));
        }
        pending.finish()
    }
}
