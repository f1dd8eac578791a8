//! Cluster mode: tenant and global budgets shared by every replica through Redis.
//!
//! **Leased slices.** The authoritative buckets live in Redis as GCRA state, one hash per
//! tenant (`{fg:tenant:ID}`) and one for the global pair (`{fg:global}`). A replica leases a
//! slice of tokens in one script call and spends it locally with the same atomic admission as
//! a single instance (see `budget::Slice`): no Redis call on the request path while the slice
//! lasts. The agent here tops slices up off the request path when they fall below half their
//! target, sizes each target from the replica's observed demand (`slice_horizon_ms` of it),
//! and caps it at ε × burst / members, so all outstanding slices together stay within
//! ε × burst. A request the slice cannot cover asks Redis for exactly what is missing (plus a
//! refill, and, when other requests wait for the same lease, the replica's share of ε × burst)
//! before it is answered; if Redis has less, the request is refused and charged nothing. Slices not refilled for `slice_ttl_ms` are given back.
//!
//! **The bound.** Over any window of T seconds, a tenant's admitted total across all replicas
//! is at most what Redis granted in the window (≤ burst + rate × T, GCRA) plus the slices held
//! at its start (≤ ε × burst): **burst × (1 + ε) + rate × T**.
//!
//! **Redis unreachable.** The first failed call switches every bucket to a local share
//! (rate / N, burst / N, N = the members last counted, or `[cluster] expected_replicas` before
//! any were); the heartbeat keeps trying and the first answer switches back to leased slices.
//! A share starts from where the last outage left it plus the slice given up (never a fresh
//! burst), so a Redis that flaps costs one share's burst in all: see `budget::fallback_entry`.
//! Serving never stops and readiness does not change; `floodgate_cluster_degraded` says which
//! mode is on.
//!
//! **Members** are counted by distinct replica id; each process holds its id with a random
//! instance id and a count of its heartbeats. Two live processes with one `replica_id` would
//! be counted as one member and each take too large a share, so one of them stops: a process
//! that finds its id held by another instance watches that holder's heartbeat count for up
//! to `member_ttl`. If the count moves, the holder is alive and this process is refused —
//! at join it does not start; if Redis was unreachable at join and the clash shows only when
//! Redis answers, it drains and stops (`run` ends with the same error, exit 64), since it has
//! been taking a share sized for a member count that was wrong. If the count stands still
//! until the holder's entry lapses, the holder is dead — typically this replica's previous
//! process, killed without leaving — and this process takes the id over: a fast restart
//! after `kill -9` waits at most `member_ttl` instead of being refused as its own duplicate.
//!
//! **The store.** The shared state is behind [`BudgetStore`]; Redis ([`RedisStore`]) is the one
//! in production, and everything Redis is in this module: the connection, the scripts, and
//! also the `Idempotency-Key` store in Redis ([`RedisIdempotencyStore`], idempotency's
//! `ClusterKeyStore`).
//!
//! Layer: decisions and state. Imports budgets, tenants, admission's lease need, idempotency's
//! store seam and the foundations; the pipeline calls it when admission needs a lease; nothing
//! here knows HTTP or Kafka.

mod agent;
mod headcount;
mod membership;
mod quota_lease;
mod redis_connection;
mod redis_idempotency;
mod redis_store;
mod settings;
mod stats;
mod store;

pub use membership::JoinError;
pub use redis_connection::UrlError;
pub use redis_idempotency::RedisIdempotencyStore;
pub use redis_store::RedisStore;
pub use settings::Settings;
pub use stats::{ClusterStats, LeaseOutcome, Scope, ERROR_KINDS};
pub use store::{
    Ask, BudgetStore, Grant, Membership, QuotaAsk, QuotaGrant, StoreError, StoreFuture,
};

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admission::LeaseNeed;
use crate::budget::{
    BudgetSpec, Clock, Dimension, GlobalBudget, Missing, ModeCell, PerDimension, Slice,
    REFUSAL_MEMO,
};
use crate::record::Charge;
use crate::refusal::{Reason, Refusal};
use crate::tenant::{Tenant, Tenants};
use quota_lease::Holder;

/// One replica's membership in the cluster.
#[derive(Debug)]
pub struct Cluster {
    store: Box<dyn BudgetStore>,
    pub sharing: Arc<ModeCell>,
    pub stats: ClusterStats,
    tenants: Arc<Tenants>,
    global: Arc<GlobalBudget>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    /// One request-path lease at a time per slice: requests that find the same slice empty
    /// wait for the first one's lease and use its tokens, instead of all asking Redis.
    in_flight: std::sync::Mutex<HashMap<usize, Arc<tokio::sync::Mutex<()>>>>,
    /// Set once a live replica was found holding this replica's id after start-up: the run
    /// drains and stops (see [`Cluster::refused`]).
    refused: tokio::sync::watch::Sender<bool>,
    /// The members the shares are divided among, remembered across a Redis that restarts.
    headcount: std::sync::Mutex<headcount::Headcount>,
    /// One request-path quota lease at a time per tenant (by serial) and window kind.
    quota_in_flight: std::sync::Mutex<QuotaLocks>,
    /// Where the quotas' windows turn (`[quotas] utc_offset`).
    calendar: crate::quota::Calendar,
    /// A heartbeat has answered: one that finds this replica not held is Redis forgetting it
    /// (`forgotten`, until the agent has reminded it of the quotas' counts).
    beaten: std::sync::atomic::AtomicBool,
    forgotten: std::sync::atomic::AtomicBool,
}

/// Keyed by tenant serial (`None`: the global quotas) and window kind.
type QuotaLocks = HashMap<(Option<u64>, crate::quota::Window), Arc<tokio::sync::Mutex<()>>>;

impl Cluster {
    pub fn new(
        store: Box<dyn BudgetStore>,
        tenants: Arc<Tenants>,
        global: Arc<GlobalBudget>,
        clock: Arc<dyn Clock>,
        settings: Settings,
    ) -> Self {
        Self {
            store,
            // Until Redis has answered, the members are not known: assume as many as expected.
            sharing: Arc::new(
                ModeCell::new(settings.expected_replicas).reprobing_every(settings.heartbeat),
            ),
            stats: ClusterStats::default(),
            tenants,
            global,
            clock,
            headcount: std::sync::Mutex::new(headcount::Headcount::new(
                duration_ns(settings.heartbeat),
                duration_ns(settings.member_ttl),
            )),
            settings,
            in_flight: std::sync::Mutex::new(HashMap::new()),
            refused: tokio::sync::watch::Sender::new(false),
            quota_in_flight: std::sync::Mutex::new(HashMap::new()),
            calendar: crate::quota::Calendar::default(),
            beaten: std::sync::atomic::AtomicBool::new(false),
            forgotten: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Quotas whose windows turn by `calendar`.
    pub fn with_calendar(mut self, calendar: crate::quota::Calendar) -> Self {
        self.calendar = calendar;
        self
    }

    /// `[cluster] slice_fraction`: what the replicas' slices and quota allowances hold at most
    /// between them, as a part of the budget or quota.
    pub fn slice_fraction(&self) -> f64 {
        self.settings.slice_fraction
    }

    /// The request-path lease lock of one slice (forgotten once nobody holds it).
    fn lease_lock(&self, slice: &Arc<Slice>) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        locks
            .entry(Arc::as_ptr(slice) as usize)
            .or_default()
            .clone()
    }

    pub fn replica_id(&self) -> &str {
        &self.settings.replica_id
    }

    pub fn is_degraded(&self) -> bool {
        self.stats.degraded.load(Relaxed)
    }

    /// Time spent on the local shares so far, by the budgets' clock.
    pub fn degraded_seconds(&self) -> f64 {
        self.stats.degraded_seconds(self.clock.now_ns())
    }

    /// One lease call: credits the slice with what was granted. `Ok(Some(wait, dimension))`
    /// when Redis did not have the minimum; `Err` when Redis did not answer (the replica is
    /// then degraded).
    async fn lease(
        &self,
        scope: Scope,
        key: &str,
        spec: &BudgetSpec,
        asks: PerDimension<Ask>,
        slice: &Slice,
    ) -> Result<Option<(Duration, Dimension)>, ()> {
        let levels = slice.cluster_levels(spec, self.clock.now_ns());
        let asks = PerDimension::from_fn(|d| Ask {
            level: levels[d],
            ..asks[d]
        });
        // A refusal's wait counts from the asking, as the held request's does: stamped at the
        // answer, a memo would outlast the hold by the call's latency and send the request
        // back to wait again (a test stepping the clock during the call hung on that).
        let asked = self.clock.now_ns();
        let started = Instant::now();
        let answer = self.store.lease(key, spec, asks).await;
        self.stats
            .lease_seconds
            .observe(started.elapsed().as_secs_f64());
        let now = self.clock.now_ns();
        match answer {
            Ok(grant) => {
                slice.note_cluster(grant.left, now);
                if let Some(wait) = grant.wait {
                    self.stats.count_lease(scope, LeaseOutcome::Refused);
                    let dimension =
                        if spec.records.is_some() && asks.records.min > grant.left.records {
                            Dimension::Records
                        } else {
                            Dimension::Bytes
                        };
                    slice.note_refused(asked, wait, dimension);
                    return Ok(Some((wait, dimension)));
                }
                slice.credit(grant.granted, now);
                self.stats.count_lease(scope, LeaseOutcome::Granted);
                self.stats
                    .granted_records
                    .fetch_add(grant.granted.records, Relaxed);
                self.stats
                    .granted_bytes
                    .fetch_add(grant.granted.bytes, Relaxed);
                Ok(None)
            }
            Err(e) => {
                self.stats.count_lease(scope, LeaseOutcome::Error);
                self.degrade(&e);
                Err(())
            }
        }
    }

    async fn give_back(&self, key: &str, spec: &BudgetSpec, tokens: Charge) {
        if tokens.records == 0 && tokens.bytes == 0 {
            return;
        }
        match self.store.give_back(key, spec, tokens).await {
            Ok(()) => {
                self.stats
                    .returned_records
                    .fetch_add(tokens.records, Relaxed);
                self.stats.returned_bytes.fetch_add(tokens.bytes, Relaxed);
            }
            Err(e) => self.stats.count_error(e.kind()),
        }
    }

    /// On the request path: asks Redis for what a request's slices lack (plus a refill).
    /// `Ok` means ask admission again (tokens were granted, another request's lease brought
    /// them meanwhile, or Redis failed and the buckets are now on their local share), with
    /// whether Redis was asked; `Err` is the refusal to answer.
    pub async fn lease_for(&self, tenant: &Tenant, need: LeaseNeed) -> Result<Asked, Refusal> {
        let mut asked = Asked::Nothing;
        // A budget in shadow mode is asked for as an enforced one, but never refuses: its
        // refusal is counted by admission (`admission::shadow`), from the slice's memo of it.
        if let Some(missing) = need.tenant {
            let (slice, spec, shadow) = {
                let state = tenant.admission_state();
                let slice = state.buckets.slice().cloned();
                (slice, state.buckets.spec(), state.budget_shadow)
            };
            let Some(slice) = slice else {
                return Ok(asked); // the mode changed meanwhile
            };
            match slice.refused_lately(self.clock.now_ns(), REFUSAL_MEMO) {
                Some(_) if shadow => return Ok(asked),
                Some((wait, d)) => return Err(lease_refusal(Scope::Tenant, wait, d)),
                None => {}
            }
            let lock = self.lease_lock(&slice);
            let _one_lease_at_a_time = lock.lock().await;
            // Another request's lease may have brought enough meanwhile; the global slice may
            // still lack (review of the wave test: returning here made a request short of
            // both go round again for the global slice alone, its free rounds spent).
            if slice.missing(&spec, need.charge).is_some() {
                let key = self.store.tenant_key(tenant.id.as_str());
                let asks = asks(
                    &slice,
                    &spec,
                    missing,
                    need.partial,
                    self.sharing(&lock, &spec),
                );
                asked = Asked::Redis;
                match self.lease(Scope::Tenant, &key, &spec, asks, &slice).await {
                    Ok(Some(_)) if shadow => return Ok(asked),
                    Ok(Some((wait, dimension))) => {
                        return Err(lease_refusal(Scope::Tenant, wait, dimension))
                    }
                    Ok(None) => {}
                    Err(()) => return Ok(asked),
                }
            }
        }
        // The quotas before the global slice, whose lease may find it brought meanwhile and
        // end the call.
        if need.quotas != 0
            && self
                .lease_quotas(Holder::Tenant(tenant), need.quotas, &need)
                .await?
                == Asked::Redis
        {
            asked = Asked::Redis;
        }
        if need.global_quotas != 0
            && self
                .lease_quotas(Holder::Global, need.global_quotas, &need)
                .await?
                == Asked::Redis
        {
            asked = Asked::Redis;
        }
        if let Some(missing) = need.global {
            let Some(slice) = self.global.slice() else {
                return Ok(asked);
            };
            let shadow = self.global.is_shadow();
            match slice.refused_lately(self.clock.now_ns(), REFUSAL_MEMO) {
                Some(_) if shadow => return Ok(asked),
                Some((wait, d)) => return Err(lease_refusal(Scope::Global, wait, d)),
                None => {}
            }
            let spec = self.global.spec();
            let lock = self.lease_lock(&slice);
            let _one_lease_at_a_time = lock.lock().await;
            if slice.missing(&spec, need.charge).is_none() {
                return Ok(asked);
            }
            let asks = asks(
                &slice,
                &spec,
                missing,
                need.partial,
                self.sharing(&lock, &spec),
            );
            let key = self.store.global_key();
            asked = Asked::Redis;
            if let Ok(Some((wait, dimension))) =
                self.lease(Scope::Global, &key, &spec, asks, &slice).await
            {
                if !shadow {
                    return Err(lease_refusal(Scope::Global, wait, dimension));
                }
            }
        }
        Ok(asked)
    }

    /// Leaves the cluster on shutdown: gives every slice back and takes this replica out of
    /// the members, best effort (bounded by the command timeout).
    pub async fn leave(&self) {
        if self.is_degraded() {
            return;
        }
        let registry = self.tenants.load();
        for t in registry.tenants() {
            let (slice, spec) = {
                let Some(state) = t.admission_if_live() else {
                    continue; // never leased anything
                };
                let slice = state.buckets.slice().cloned();
                (slice.map(|s| s.drain()), state.buckets.spec())
            };
            if let Some(tokens) = slice {
                self.give_back(&self.store.tenant_key(t.id.as_str()), &spec, tokens)
                    .await;
            }
        }
        if let Some(slice) = self.global.slice() {
            self.give_back(&self.store.global_key(), &self.global.spec(), slice.drain())
                .await;
        }
        self.give_back_quotas().await;
        let _ = self
            .store
            .heartbeat(
                &self.settings.replica_id,
                &self.settings.instance,
                self.settings.member_ttl,
                true,
            )
            .await;
    }
}

/// A lease Redis refused (or a refusal remembered from one), as the request's refusal: in
/// its scope and dimension, its tokens due in `wait`.
fn lease_refusal(scope: Scope, wait: Duration, dimension: Dimension) -> Refusal {
    Refusal::new(Reason::Budget(scope, dimension), wait)
}

/// Whether [`Cluster::lease_for`] asked Redis, or found what was missing already brought by
/// another request's lease (it waited for that lease, one at a time per slice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    Redis,
    Nothing,
}

/// The other requests waiting for a slice's lease now, and the most a lease may ask for them
/// in each dimension: a replica's share of `slice_fraction` of the burst, what the slices'
/// targets are held to, so the slices of all replicas stay within the bound they keep.
struct Sharing {
    others: u64,
    /// The most a replica's slice may hold.
    most: Charge,
}

impl Cluster {
    fn sharing(&self, lock: &Arc<tokio::sync::Mutex<()>>, spec: &BudgetSpec) -> Sharing {
        // Each waiting request holds the lock's `Arc`; the map of locks holds one more.
        let waiting = u64::try_from(Arc::strong_count(lock).saturating_sub(1)).unwrap_or(u64::MAX);
        let members = f64::from(self.members().max(1));
        let most = |s: Option<crate::budget::RateSpec>| {
            s.map_or(0, |s| {
                (self.settings.slice_fraction * s.burst as f64 / members) as u64
            })
        };
        Sharing {
            others: waiting.saturating_sub(1),
            most: spec.map(most),
        }
    }
}

/// What to ask for: at least what is missing (or, `partial`, at least one token of what is
/// missing: records admitted one by one take what there is), and enough to leave the slice at
/// its target; and, when other requests wait for the slice's lease, a replica's share of the
/// slices' bound on top, the most its slice may hold (review 31 of #37: a lease for one
/// request at a time, its tokens taken by the next before it asked admission again, refused
/// 39 of a wave of 50 one-record requests within every budget, with Redis never empty; sized
/// for the requests waiting when it was asked, those arriving meanwhile took it, and on a
/// loaded machine up to 40 of such a wave were still refused).
fn asks(
    slice: &Slice,
    spec: &BudgetSpec,
    missing: Missing,
    partial: bool,
    sharing: Sharing,
) -> PerDimension<Ask> {
    let target = slice.target();
    let others = sharing.others > 0;
    PerDimension::from_fn(|d| {
        if spec[d].is_none() {
            return Ask::default();
        }
        let others = if others { sharing.most[d] } else { 0 };
        Ask {
            want: missing[d]
                .saturating_add(others)
                .saturating_add(target[d].max(1)),
            min: if partial {
                missing[d].min(1)
            } else {
                missing[d]
            },
            level: 0, // set by `lease` from the slice
        }
    })
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
