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
//! refill) before it is answered; if Redis has less, the request is refused and charged
//! nothing. Slices not refilled for `slice_ttl_ms` are given back.
//!
//! **The bound.** Over any window of T seconds, a tenant's admitted total across all replicas
//! is at most what Redis granted in the window (≤ burst + rate × T, GCRA) plus the slices held
//! at its start (≤ ε × burst): **burst × (1 + ε) + rate × T**.
//!
//! **Redis unreachable.** The first failed call switches every bucket to a local share
//! (rate / N, burst / N, N = the members last counted, or `[cluster] expected_replicas` before
//! any were); the heartbeat keeps trying and the first answer switches back to leased slices.
//! A share starts from where the last outage left it plus the slice given up (never a fresh
//! burst), so a Redis that flaps costs one share's burst in all: see `budget::share_entry`.
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
//! Layer: services. Imports budgets, tenants and the foundations; the pipeline calls it when
//! admission needs a lease; nothing here knows HTTP or Kafka.

mod redis_store;
mod stats;

pub use redis_store::{Ask, Grant, Membership, RedisStore, StoreError};
pub use stats::{ClusterStats, LeaseOutcome, Scope, ERROR_KINDS};

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admission::LeaseNeed;
use crate::budget::{BudgetSpec, Clock, Dimension, GlobalBudget, Missing, Mode, Sharing, Slice};
use crate::config::ClusterConfig;
use crate::refusal::{Reason, Refusal};
use crate::tenant::{Tenant, Tenants};

/// The timings and sizes the agent works with (from `[cluster]`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub replica_id: String,
    /// This process, among all that ever held `replica_id` (random per start).
    pub instance: String,
    /// Members assumed until they have been counted.
    pub expected_replicas: u32,
    pub slice_fraction: f64,
    pub slice_horizon: Duration,
    pub slice_ttl: Duration,
    pub heartbeat: Duration,
    pub member_ttl: Duration,
}

impl Settings {
    pub fn from_config(config: &ClusterConfig, produce_port: u16) -> Self {
        Self {
            replica_id: config
                .replica_id
                .clone()
                .unwrap_or_else(|| format!("{}:{produce_port}", hostname())),
            instance: instance_id(),
            expected_replicas: config.expected_replicas.max(1),
            slice_fraction: config.slice_fraction,
            slice_horizon: Duration::from_millis(config.slice_horizon_ms),
            slice_ttl: Duration::from_millis(config.slice_ttl_ms),
            heartbeat: Duration::from_millis(config.heartbeat_ms),
            member_ttl: Duration::from_millis(config.member_ttl_ms),
        }
    }
}

/// A random id for this process (OS randomness; never fails in practice, and a clash is only
/// as bad as the duplicate check missing once).
fn instance_id() -> String {
    let mut bytes = [0u8; 12];
    let _ = getrandom::fill(&mut bytes);
    hex::encode(bytes)
}

/// Why a replica may not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(
        "cluster.replica_id {0:?} is held by another live replica: give every replica its own \
         id (two replicas counted as one would each take too large a share)"
    )]
    DuplicateReplica(String),
}

/// The machine's name, as the kernel has it (no extra dependency for one file read).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "floodgate".into())
}

/// One replica's membership in the cluster.
#[derive(Debug)]
pub struct Cluster {
    store: RedisStore,
    pub sharing: Arc<Sharing>,
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
}

/// A slice the agent looks after: whose, the tenant (for its lock), the slice, its budget.
type Tended = (Scope, String, Option<Arc<Tenant>>, Arc<Slice>, BudgetSpec);

/// The agent's view of one slice's demand.
#[derive(Debug, Default)]
struct Demand {
    slice: usize,
    spent: (u64, u64),
    /// Tokens per second, smoothed.
    rate: (f64, f64),
}

impl Cluster {
    pub fn new(
        store: RedisStore,
        tenants: Arc<Tenants>,
        global: Arc<GlobalBudget>,
        clock: Arc<dyn Clock>,
        settings: Settings,
    ) -> Self {
        Self {
            store,
            // Until Redis has answered, the members are not known: assume as many as expected.
            sharing: Arc::new(
                Sharing::new(settings.expected_replicas).reprobing_every(settings.heartbeat),
            ),
            stats: ClusterStats::default(),
            tenants,
            global,
            clock,
            settings,
            in_flight: std::sync::Mutex::new(HashMap::new()),
            refused: tokio::sync::watch::Sender::new(false),
        }
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

    /// Joins the cluster: connects, announces this replica, switches to leased slices. If
    /// Redis cannot be reached the replica runs on its local share (1/`expected_replicas`
    /// until members are counted) and the agent keeps trying. A replica id held by another
    /// instance is watched: refused if that instance is alive, taken over once its entry
    /// lapses if it is not (see the module's comment).
    pub async fn join(&self) -> Result<(), JoinError> {
        let first = match self.heartbeat().await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    share = format!("1/{}", self.members()),
                    "cluster: Redis unreachable at start; admitting from a local share of \
                     every budget (expected_replicas, members not counted yet) until it answers"
                );
                return Ok(());
            }
        };
        if first.duplicate {
            tracing::warn!(
                replica = %self.settings.replica_id,
                ttl_ms = duration_ms(self.settings.member_ttl),
                "cluster: this replica_id is held by another instance; waiting for it to lapse \
                 (a previous process that died without leaving) unless it is alive"
            );
            let watch = DuplicateWatch::new(first.holder);
            // A lapse is decided by Redis's clock; this bounds the wait by ours, in case the
            // two disagree (a holder that neither beats nor lapses is not taken over).
            let most = (self
                .settings
                .member_ttl
                .saturating_add(self.settings.heartbeat))
            .saturating_mul(2);
            let deadline = Instant::now().checked_add(most);
            loop {
                tokio::time::sleep(self.settings.heartbeat).await;
                match self.heartbeat().await {
                    Ok(m) if !m.duplicate => break,
                    Ok(m)
                        if watch.alive(&m.holder)
                            || deadline.is_some_and(|d| Instant::now() >= d) =>
                    {
                        return Err(self.refuse());
                    }
                    Ok(_) => {}
                    // Redis went away meanwhile: serve on the local share; the agent watches.
                    Err(_) => return Ok(()),
                }
            }
        }
        tracing::info!(
            replica = %self.settings.replica_id,
            members = self.stats.members.load(Relaxed),
            "cluster: joined; budgets are shared through Redis"
        );
        Ok(())
    }

    /// This replica may not hold its id: another live instance does.
    fn refuse(&self) -> JoinError {
        self.stats.duplicate.store(true, Relaxed);
        tracing::error!(replica = %self.settings.replica_id,
            "cluster: another live replica holds this replica_id — give every replica its own id");
        JoinError::DuplicateReplica(self.settings.replica_id.clone())
    }

    /// Resolves once a live replica has been found holding this replica's id after start-up
    /// (Redis was unreachable at join): the run then drains and stops with
    /// [`JoinError::DuplicateReplica`]. Never resolves otherwise.
    pub async fn refused(&self) -> JoinError {
        let mut seen = self.refused.subscribe();
        let _ = seen.wait_for(|refused| *refused).await;
        JoinError::DuplicateReplica(self.settings.replica_id.clone())
    }

    async fn heartbeat(&self) -> Result<Membership, StoreError> {
        let result = async {
            self.store.connect().await?;
            self.store
                .heartbeat(
                    &self.settings.replica_id,
                    &self.settings.instance,
                    self.settings.member_ttl,
                    false,
                )
                .await
        }
        .await;
        match result {
            Ok(m) => {
                self.stats.members.store(m.members.max(1), Relaxed);
                self.recover();
                Ok(m)
            }
            Err(e) => {
                self.degrade(&e);
                Err(e)
            }
        }
    }

    /// The agent's heartbeat: counts the members, and watches an id held by another instance
    /// (possible only if Redis was unreachable at join) until it lapses or proves alive.
    async fn beat(&self, watch: &mut Option<DuplicateWatch>) {
        let Ok(m) = self.heartbeat().await else {
            return;
        };
        if !m.duplicate {
            *watch = None;
            return;
        }
        match watch {
            None => {
                tracing::warn!(replica = %self.settings.replica_id,
                    "cluster: Redis answers, and this replica_id is held by another instance; \
                     watching whether it is alive");
                *watch = Some(DuplicateWatch::new(m.holder));
            }
            // Once refused, the run is draining: said once.
            Some(w) if w.alive(&m.holder) && !*self.refused.borrow() => {
                let _ = self.refuse();
                self.refused.send_replace(true);
            }
            Some(_) => {}
        }
    }

    /// The members last counted, or as many as expected before any were.
    fn members(&self) -> u32 {
        match self.stats.members.load(Relaxed) {
            0 => self.settings.expected_replicas,
            n => n,
        }
    }

    /// Redis failed: every bucket admits from its local share until it answers again.
    fn degrade(&self, error: &StoreError) {
        self.stats.count_error(error.kind());
        let n = self.members();
        let now = self.clock.now_ns();
        self.sharing.set(Mode::Share(n), now);
        if !self.stats.degraded.swap(true, Relaxed) {
            self.stats.degraded_since(now);
            tracing::warn!(
                error = %error,
                share = format!("1/{n}"),
                "cluster: Redis unreachable; admitting from this replica's local share of every \
                 budget until it answers again"
            );
        }
    }

    fn recover(&self) {
        let now = self.clock.now_ns();
        self.sharing.set(Mode::Leased, now);
        if self.stats.degraded.swap(false, Relaxed) {
            self.stats.recovered(now);
            tracing::info!("cluster: Redis answers again; budgets are shared again");
        }
    }

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
        let registry = self.tenants.load();
        let mut slices: Vec<Tended> = registry
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
            slice.set_target(target.0, target.1);
            let (held_r, held_b) = slice.held();
            let idle_for = now.saturating_sub(slice.granted_at_ns());
            let key = match scope {
                Scope::Tenant => self.store.tenant_key(&id),
                Scope::Global => self.store.global_key(),
            };
            if (held_r > 0 || held_b > 0)
                && slice.granted_at_ns() > 0
                && idle_for > duration_ns(self.settings.slice_ttl)
                && d.rate == (0.0, 0.0)
            {
                // Drained under the tenant's lock: admissions take from a tenant's slice only
                // under it, so nothing they checked disappears before they commit.
                let (r, b) = match &tenant {
                    Some(t) => {
                        let _state = t.admission_state();
                        slice.drain()
                    }
                    None => slice.drain(),
                };
                let cluster = self.clone();
                work.spawn(async move {
                    cluster.give_back(&key, &spec, r, b).await;
                });
                continue;
            }
            let low = |held: u64, target: u64, limited: bool| limited && held < target / 2 + 1;
            let busy = d.rate.0 > 0.0 || d.rate.1 > 0.0;
            if busy
                && (low(held_r, target.0, spec.records.is_some())
                    || low(held_b, target.1, spec.bytes.is_some()))
            {
                let records = Ask {
                    want: target.0.saturating_sub(held_r),
                    min: 0,
                };
                let bytes = Ask {
                    want: target.1.saturating_sub(held_b),
                    min: 0,
                };
                let cluster = self.clone();
                work.spawn(async move {
                    let _ = cluster
                        .lease(scope, &key, &spec, records, bytes, &slice)
                        .await;
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
    ) -> (u64, u64) {
        let id = Arc::as_ptr(slice) as usize;
        let spent = slice.spent();
        if d.slice != id {
            *d = Demand {
                slice: id,
                spent,
                rate: (0.0, 0.0),
            };
        }
        let secs = tick.as_secs_f64();
        let fresh = (
            spent.0.saturating_sub(d.spent.0) as f64 / secs,
            spent.1.saturating_sub(d.spent.1) as f64 / secs,
        );
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
        d.rate = (smooth(d.rate.0, fresh.0), smooth(d.rate.1, fresh.1));
        let horizon = self.settings.slice_horizon.as_secs_f64();
        let members = f64::from(self.members());
        let target = |rate: f64, s: Option<crate::budget::RateSpec>| {
            s.map_or(0, |s| {
                let cap = ((self.settings.slice_fraction * s.burst as f64 / members) as u64).max(1);
                ((rate * horizon).ceil() as u64).clamp(1, cap)
            })
        };
        (target(d.rate.0, spec.records), target(d.rate.1, spec.bytes))
    }

    /// One lease call: credits the slice with what was granted. `Ok(Some(wait, dimension))`
    /// when Redis did not have the minimum; `Err` when Redis did not answer (the replica is
    /// then degraded).
    async fn lease(
        &self,
        scope: Scope,
        key: &str,
        spec: &BudgetSpec,
        records: Ask,
        bytes: Ask,
        slice: &Slice,
    ) -> Result<Option<(Duration, Dimension)>, ()> {
        let started = Instant::now();
        let answer = self.store.lease(key, spec, records, bytes).await;
        self.stats
            .lease_seconds
            .observe(started.elapsed().as_secs_f64());
        let now = self.clock.now_ns();
        match answer {
            Ok(grant) => {
                slice.note_cluster(grant.left_records, grant.left_bytes, now);
                if let Some(wait) = grant.wait {
                    self.stats.count_lease(scope, LeaseOutcome::Refused);
                    let dimension = if spec.records.is_some() && records.min > grant.left_records {
                        Dimension::Records
                    } else {
                        Dimension::Bytes
                    };
                    return Ok(Some((wait, dimension)));
                }
                slice.credit(grant.records, grant.bytes, now);
                self.stats.count_lease(scope, LeaseOutcome::Granted);
                self.stats.granted_records.fetch_add(grant.records, Relaxed);
                self.stats.granted_bytes.fetch_add(grant.bytes, Relaxed);
                Ok(None)
            }
            Err(e) => {
                self.stats.count_lease(scope, LeaseOutcome::Error);
                self.degrade(&e);
                Err(())
            }
        }
    }

    async fn give_back(&self, key: &str, spec: &BudgetSpec, records: u64, bytes: u64) {
        if records == 0 && bytes == 0 {
            return;
        }
        match self.store.give_back(key, spec, records, bytes).await {
            Ok(()) => {
                self.stats.returned_records.fetch_add(records, Relaxed);
                self.stats.returned_bytes.fetch_add(bytes, Relaxed);
            }
            Err(e) => self.stats.count_error(e.kind()),
        }
    }

    /// On the request path: asks Redis for what a request's slices lack (plus a refill).
    /// `Ok` means ask admission again (tokens were granted, or Redis failed and the buckets
    /// are now on their local share); `Err` is the refusal to answer.
    pub async fn lease_for(&self, tenant: &Tenant, need: LeaseNeed) -> Result<(), Refusal> {
        if let Some(missing) = need.tenant {
            let (slice, spec) = {
                let state = tenant.admission_state();
                (state.buckets.slice().cloned(), state.buckets.spec())
            };
            let Some(slice) = slice else {
                return Ok(()); // the mode changed meanwhile
            };
            let lock = self.lease_lock(&slice);
            let _one_lease_at_a_time = lock.lock().await;
            if slice.missing(&spec, need.charge).is_none() {
                return Ok(()); // another request's lease brought enough
            }
            let key = self.store.tenant_key(tenant.id.as_str());
            let (records, bytes) = asks(&slice, &spec, missing, need.partial);
            match self
                .lease(Scope::Tenant, &key, &spec, records, bytes, &slice)
                .await
            {
                Ok(Some((wait, dimension))) => {
                    return Err(Refusal {
                        reason: match dimension {
                            Dimension::Records => Reason::TenantRecords,
                            Dimension::Bytes => Reason::TenantBytes,
                        },
                        retry_after: wait,
                        class: None,
                        lag: None,
                    })
                }
                Ok(None) => {}
                Err(()) => return Ok(()),
            }
        }
        if let Some(missing) = need.global {
            let Some(slice) = self.global.slice() else {
                return Ok(());
            };
            let spec = self.global.spec();
            let lock = self.lease_lock(&slice);
            let _one_lease_at_a_time = lock.lock().await;
            if slice.missing(&spec, need.charge).is_none() {
                return Ok(());
            }
            let (records, bytes) = asks(&slice, &spec, missing, need.partial);
            let key = self.store.global_key();
            if let Ok(Some((wait, dimension))) = self
                .lease(Scope::Global, &key, &spec, records, bytes, &slice)
                .await
            {
                return Err(Refusal {
                    reason: match dimension {
                        Dimension::Records => Reason::GlobalRecords,
                        Dimension::Bytes => Reason::GlobalBytes,
                    },
                    retry_after: wait,
                    class: None,
                    lag: None,
                });
            }
        }
        Ok(())
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
            if let Some((r, b)) = slice {
                self.give_back(&self.store.tenant_key(t.id.as_str()), &spec, r, b)
                    .await;
            }
        }
        if let Some(slice) = self.global.slice() {
            let (r, b) = slice.drain();
            self.give_back(&self.store.global_key(), &self.global.spec(), r, b)
                .await;
        }
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

/// What to ask for: at least what is missing, and enough to leave the slice at its target.
/// What to ask for: at least what is missing (or, `partial`, at least one token of what is
/// missing: records admitted one by one take what there is), and enough to leave the slice at
/// its target.
fn asks(slice: &Slice, spec: &BudgetSpec, missing: Missing, partial: bool) -> (Ask, Ask) {
    let (target_r, target_b) = slice.target();
    let ask = |limited: bool, missing: u64, target: u64| {
        if limited {
            Ask {
                want: missing.saturating_add(target.max(1)),
                min: if partial { missing.min(1) } else { missing },
            }
        } else {
            Ask::default()
        }
    };
    (
        ask(spec.records.is_some(), missing.records, target_r),
        ask(spec.bytes.is_some(), missing.bytes, target_b),
    )
}

/// Another instance holding this replica's id, as first seen: alive if its heartbeat count
/// (or the instance itself) has changed since.
#[derive(Debug)]
struct DuplicateWatch {
    holder: Option<(String, u64)>,
}

impl DuplicateWatch {
    fn new(holder: Option<(String, u64)>) -> Self {
        Self { holder }
    }

    fn alive(&self, now: &Option<(String, u64)>) -> bool {
        *now != self.holder
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
