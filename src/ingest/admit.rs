//! Admission as the pipeline asks for it: every budget charged and buffer space reserved for
//! the whole request, or nothing; in cluster mode with bounded lease calls. Every 429 is
//! counted against the tenant where it is decided. With `[wait]`, a request refused only for
//! a short wait is held for its tokens on a seat of the waiting room ([`Held`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Ingest;
use crate::admission::{Blocked, BucketsView, LeaseNeed, Reservation};
use crate::budget::{Dimension, PerDimension, Scope};
use crate::buffer::BufferLease;
use crate::cluster::Asked;
use crate::hold::{Seat, WaitRoom};
use crate::identity::Topic;
use crate::outcome::ApiError;
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal};
use crate::tenant::Tenant;

impl Ingest {
    /// Charges every budget and reserves buffer space for the whole request, or nothing.
    /// In cluster mode a request the local slices cannot cover waits for one lease call (the
    /// missing tokens, or the refusal) and is decided again. `held` is the request's place in
    /// `[wait]`'s waiting room (a seat it may have taken before its body was read);
    /// `reserved`, what it reserved before registering its raw schemas.
    pub(super) async fn admit<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        (charge, reserved): (Charge, Option<&mut Reservation>),
        held: &mut Held<'a>,
    ) -> Result<BufferLease, ApiError> {
        // Two lease rounds cover a tenant and a global slice both short.
        self.admit_counted(tenant, topic, (charge, reserved), &mut 2, held)
            .await
    }

    /// [`Ingest::admit`] for one of a stream's records, with at most `leases` lease calls
    /// (counted down), so a caller admitting many records one by one (a stream's chunk)
    /// bounds its calls to Redis. Never held (a stream's own bounds — its credential, its
    /// longest time, shutdown — are checked between its records, not during a hold): a
    /// record refused for a short wait gets its 429 report at once, and so does one still
    /// short of leased tokens when the calls are used up (other requests took the tokens
    /// first, or the caller has spent its calls).
    pub async fn admit_with(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        (charge, reserved): (Charge, Option<&mut Reservation>),
        leases: &mut u32,
    ) -> Result<BufferLease, ApiError> {
        let held = &mut Held::never();
        self.admit_counted(tenant, topic, (charge, reserved), leases, held)
            .await
    }

    async fn admit_counted<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        (charge, reserved): (Charge, Option<&mut Reservation>),
        leases: &mut u32,
        held: &mut Held<'a>,
    ) -> Result<BufferLease, ApiError> {
        let admitted = self
            .decide(tenant, topic, (charge, reserved), leases, held)
            .await;
        let refused = match &admitted {
            Ok(_) => None,
            Err(ApiError::RateLimited(r)) => Some(r.reason),
            // Larger than a bucket or share could ever hold (413): neither demand nor refused
            // for a while.
            Err(_) => return admitted,
        };
        tenant
            .stats()
            .decided(charge.records, charge.bytes, refused, true);
        admitted
    }

    async fn decide<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        (charge, mut reserved): (Charge, Option<&mut Reservation>),
        leases: &mut u32,
        held: &mut Held<'a>,
    ) -> Result<BufferLease, ApiError> {
        let room = &*self.admission.waits;
        let mut free_rounds = FREE_ROUNDS;
        loop {
            // When the refusal's wait is counted from: a hold ends at this reading plus the
            // wait, however late it starts.
            let mut asked = self.admission.now_ns();
            let (decision, view) =
                self.admission
                    .admit_reserved(tenant, Some(topic), charge, reserved.as_deref_mut());
            // Taken under the decision's own lock: the answer's RateLimit fields need no
            // second look at the buckets.
            held.view = Some(view);
            let refusal = match decision {
                Ok(lease) => {
                    held.admitted(room);
                    tenant.stats().admitted(charge.records, charge.bytes);
                    return Ok(lease);
                }
                Err(Blocked::Denied(Denial::Refused(r))) => r,
                Err(Blocked::Denied(denial)) => {
                    held.refused(room);
                    return Err(self.denied(tenant, denial));
                }
                Err(Blocked::Lease(need)) => match self.cluster.as_ref().filter(|_| *leases > 0) {
                    Some(cluster) => {
                        *leases -= 1;
                        asked = self.admission.now_ns();
                        match cluster.lease_for(tenant, need).await {
                            Ok(Asked::Redis) => continue,
                            // Another request's lease brought the tokens while this one
                            // waited its turn, and another took them again before this one
                            // asked admission: not a call to Redis, so not one of its rounds,
                            // up to FREE_ROUNDS (review 31 of #37: counted, a wave of 50
                            // one-record requests within every budget got 2 admitted).
                            Ok(Asked::Nothing) if free_rounds > 0 => {
                                free_rounds -= 1;
                                *leases += 1;
                                continue;
                            }
                            Ok(Asked::Nothing) => contended(need),
                            Err(refusal) => refusal,
                        }
                    }
                    None => contended(need),
                },
            };
            let until = asked.saturating_add(duration_ns(refusal.retry_after));
            if let Err(r) = self.hold(tenant, held, refusal, until).await {
                held.refused(room);
                return Err(refused(tenant, r));
            }
            // Cluster mode: each hold earns one more lease call, HELD_LEASES at most, so a
            // held request asks Redis a bounded number of times however its holds go.
            if held.leases < HELD_LEASES {
                held.leases += 1;
                *leases = leases.saturating_add(1);
            }
        }
    }

    /// A stream about to open: could one record be admitted now? With `[wait]`, a stream
    /// short only of tokens due within `max_ms` is held for them as a request is, on a seat
    /// given back once it opens: a single v3 record (sent as a stream of one) is held as a
    /// `/v1` request is. Its records, once it is open, are never held ([`Ingest::admit_with`]).
    pub(super) async fn open_check(&self, tenant: &Tenant, topic: &Topic) -> Result<(), ApiError> {
        let room = &*self.admission.waits;
        let mut held = Held::new();
        loop {
            let asked = self.admission.now_ns();
            let Err(refusal) = self.admission.precheck_to(tenant, Some(topic), 1) else {
                held.admitted(room);
                return Ok(());
            };
            let until = asked.saturating_add(duration_ns(refusal.retry_after));
            if let Err(r) = self.hold(tenant, &mut held, refusal, until).await {
                held.refused(room);
                return Err(refused(tenant, r));
            }
        }
    }

    /// `[wait]`: a refusal a check made before admission found (the early check, or the one
    /// after a chunk of the body) lets the request through only if it has a seat of the
    /// waiting room or takes one now, to be held at admission; a request finding no seat is
    /// refused at once, before it uploads (more of) its body. Refusals a hold cannot change
    /// are refused as they are.
    pub(super) fn seated<'a>(
        &'a self,
        tenant: &'a Tenant,
        held: &mut Held<'a>,
        refusal: Refusal,
    ) -> Result<(), Refusal> {
        if !held.may_hold || !self.admission.holdable(&refusal) {
            return Err(refusal);
        }
        if held.seat.is_none() {
            match self.admission.waits.enter(&tenant.held) {
                Some(seat) => held.seat = Some(seat),
                None => return Err(refusal),
            }
        }
        Ok(())
    }

    /// `[wait]`: holds a request refused only for a short wait until `until` (admission
    /// clock: when its tokens are due), on its seat of the waiting room (taken now if it has
    /// none), so the admission decision can be asked again. Refused when it may not be held,
    /// when no seat is free, or when its holds would end past `max_ms` after the first began
    /// (another request took the tokens meanwhile).
    async fn hold<'a>(
        &'a self,
        tenant: &'a Tenant,
        held: &mut Held<'a>,
        refusal: Refusal,
        until: u64,
    ) -> Result<(), Refusal> {
        self.seated(tenant, held, refusal.clone())?;
        let since = held.since.unwrap_or_else(|| self.admission.now_ns());
        let max = duration_ns(self.admission.waits.max_wait);
        if until.saturating_sub(since) > max {
            return Err(refusal);
        }
        held.since = Some(since);
        self.admission.hold_until(until).await;
        Ok(())
    }

    /// A denial as the client hears it; a 429 is counted against the tenant.
    pub(super) fn denied(&self, tenant: &Tenant, denial: Denial) -> ApiError {
        match denial {
            Denial::Refused(r) => refused(tenant, r),
            Denial::TooLarge(t) => ApiError::ExceedsBurst(t),
        }
    }

    /// The buckets a tenant is shown in its RateLimit fields: its own, and the global ones
    /// unless the operator hides them.
    pub fn view(&self, tenant: &Tenant) -> BucketsView {
        self.shown(self.admission.view(tenant))
    }

    /// `view` as the tenant may see it: the global buckets and quotas hidden unless the
    /// operator shows them.
    pub(super) fn shown(&self, mut view: BucketsView) -> BucketsView {
        if !self.admission.global.visible_to_tenants() {
            view.global = PerDimension::default();
            view.global_quotas = Default::default();
        }
        view
    }
}

/// A 429, counted against the tenant where it is decided.
pub(super) fn refused(tenant: &Tenant, refusal: Refusal) -> ApiError {
    tenant.stats().rejected(refusal.reason);
    tracing::debug!(reason = refusal.reason.as_str(), "refused");
    ApiError::RateLimited(refusal)
}

/// A request still short of leased tokens once its lease calls are spent: other requests
/// took the tokens first, or the caller has spent its calls.
fn contended(need: LeaseNeed) -> Refusal {
    if need.tenant.is_none() && need.global.is_none() {
        let first = |windows: u8| {
            crate::quota::Window::ALL
                .into_iter()
                .find(|w| windows & (1 << *w as usize) != 0)
        };
        if let Some(window) = first(need.quotas) {
            return Refusal::quota(window, CONTENDED_RETRY);
        }
        if let Some(window) = first(need.global_quotas) {
            return Refusal::quota_of(Scope::Global, window, CONTENDED_RETRY);
        }
    }
    let (scope, missing) = match (need.tenant, need.global) {
        (Some(m), _) => (Scope::Tenant, Some(m)),
        (None, global) => (Scope::Global, global),
    };
    let dimension = if missing.is_some_and(|m| m.records > 0) {
        Dimension::Records
    } else {
        Dimension::Bytes
    };
    let reason = Reason::Budget(scope, dimension);
    Refusal::new(reason, CONTENDED_RETRY)
}

/// A request's place in `[wait]`'s waiting room, from its early check to its admission: the
/// seat it took (at the early check, after a chunk of its body, or at admission, whichever
/// first found it short of tokens), and when its first hold began (admission clock). The seat
/// is given back when this is dropped — on every way out of the pipeline — and what became of
/// a seated request is counted once it is decided.
pub(super) struct Held<'a> {
    seat: Option<Seat<'a>>,
    since: Option<u64>,
    /// Lease calls its holds have earned so far (cluster mode).
    leases: u32,
    /// Whether the request may be held at all (a stream's records never are).
    may_hold: bool,
    /// The buckets as the last admission decision left them (taken under its lock).
    view: Option<BucketsView>,
}

impl Held<'_> {
    /// A request that may be held, with no seat yet.
    pub(super) fn new() -> Self {
        Self {
            seat: None,
            since: None,
            leases: 0,
            may_hold: true,
            view: None,
        }
    }

    /// A request that is never held.
    fn never() -> Self {
        Self {
            may_hold: false,
            ..Self::new()
        }
    }

    /// The buckets as the admission decision left them, if one was made.
    pub(super) fn view(&self) -> Option<BucketsView> {
        self.view
    }

    fn admitted(&mut self, room: &WaitRoom) {
        if self.seat.take().is_some() {
            room.admitted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Refused: counted as a hold that ended in a refusal only if the request was held at
    /// all. One refused before its first hold (its wait past `max_ms` from the start) gives
    /// its seat back uncounted, as a request cut short while its body arrives does: whether
    /// that is decided after a chunk or at admission must not change the count.
    fn refused(&mut self, room: &WaitRoom) {
        if self.seat.take().is_some() && self.since.is_some() {
            room.refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Retry hint for a request whose leased tokens were taken by others while it waited.
const CONTENDED_RETRY: Duration = Duration::from_millis(10);

/// Cluster mode: the most lease calls a request's holds earn it (on top of its own two).
const HELD_LEASES: u32 = 4;

/// Lease rounds a request may take without asking Redis (another request's lease brought what
/// it lacked, and another request took it first): each is one more wait for the slice's lease,
/// so a request's rounds stay bounded however many requests share the slice. At 8, one request
/// of a wave of 50 within every budget still lost all its rounds now and then on a loaded
/// machine (two workers, a build beside them) and was refused; each round is one lease's
/// round trip, so 32 cost at most ~32 round trips of waiting.
const FREE_ROUNDS: u32 = 32;

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
