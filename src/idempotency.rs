//! `Idempotency-Key`: who holds a key, and what was answered for it.
//!
//! Two places keep keys. **Flights** are the keys this process is working on now: claimed
//! (the request is being read or admitted) or pending (its records are with Kafka and a
//! retry can wait for their outcome). They live exactly as long as that work, so they are
//! bounded by the requests in progress and by the buffer (a pending request holds at least
//! one record of it), and are never evicted — evicting one would let a retry write again.
//! The **store** keeps final answers: in memory on a single replica ([`memory`], bounded by
//! `[idempotency] max_entries` and `max_bytes`, oldest evicted first), or in a
//! [`ClusterKeyStore`] in cluster mode (Redis, `cluster::RedisIdempotencyStore`), where claims
//! live too, so a retry on another replica finds them.
//!
//! [`Idempotency::begin`] answers what a request with a key should do; the pipeline
//! (`ingest::idempotent`) does it: process, replay, wait, or refuse.
//!
//! Layer: decisions and state. Imports the clock and configuration; knows nothing of HTTP
//! routes, Kafka or tenants beyond the id a key is scoped by.

mod answer;
mod claim;
mod cluster_store;
mod fingerprint;
mod flight;
mod key;
pub mod memory;
mod releases;
mod stats;

pub use answer::{Corrupt, StoredAnswer, REPLAYED};
pub use claim::Claim;
pub use cluster_store::{ClusterKeyFuture, ClusterKeyStore, ClusterKeyStoreError, Found};
pub use fingerprint::{Fingerprint, Fingerprinter, RequestShape};
pub use flight::{FlightState, Waiter};
pub use key::{IdempotencyKey, KeyDigest, TenantKey, HEADER, MAX_KEY_CHARS};
pub use memory::{MemoryBounds, MemoryStore, ENTRY_OVERHEAD, TENANT_OVERHEAD};
pub use releases::Releases;
pub use stats::{KeyOutcome, KeyStats, StoreOp};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::budget::Clock;
use crate::config::{IdempotencyConfig, OnStoreError};
use crate::identity::TenantId;
use flight::Flight;

/// One request's hold on a key: this process's instance id and a sequence number, 32
/// characters (what the Redis scripts compare).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Token(pub [u8; 32]);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({})", String::from_utf8_lossy(&self.0))
    }
}

/// What a request with a key is to do.
#[derive(Debug)]
pub enum Begin {
    /// The key is this request's: process it and settle the claim.
    Fresh(Claim),
    /// Another request with the key is being read or admitted: 409.
    InUse,
    /// Another request's records are pending on this replica: compare fingerprints, then wait.
    Attach(Fingerprint, Waiter),
    /// Another replica's request is pending: compare fingerprints, then wait for its answer.
    Remote(Fingerprint),
    /// The answer stored for the key: compare fingerprints, then replay it.
    Stored(Fingerprint, StoredAnswer),
    /// The store did not answer (`[idempotency] on_store_error` decides).
    Unavailable(String),
}

/// Renewals in flight at once (cluster mode).
const RENEW_AT_ONCE: usize = 64;

/// Settings the pipeline reads.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub on_store_error: OnStoreError,
    /// How long an answer is kept.
    pub ttl: Duration,
    /// Cluster mode: how long a claim outlives a holder that stops renewing it.
    pub claim_ttl: Duration,
}

#[derive(Debug)]
enum Backend {
    /// Boxed: the two variants' sizes differ (the enum is made once).
    Memory(Box<MemoryStore>),
    Cluster(Box<dyn ClusterKeyStore>),
}

#[derive(Debug)]
pub struct Idempotency {
    flights: Mutex<HashMap<KeyDigest, Arc<Flight>>>,
    backend: Backend,
    pub settings: Settings,
    pub stats: KeyStats,
    /// 24 hex characters, random per process.
    instance: [u8; 24],
    next: AtomicU32,
    /// Releases being tried again (at most `claim::MAX_UNCLAIMING`).
    unclaiming: AtomicUsize,
    /// Cluster mode: each tenant's allowance of claims given up (a release is two Redis
    /// scripts for a request charged nothing).
    releases: Option<Releases>,
    /// Notified whenever a flight ends (shutdown waits for the pending ones).
    landed: Notify,
}

impl Idempotency {
    /// A single replica's: answers kept in memory on `clock`.
    pub fn in_memory(config: &IdempotencyConfig, clock: Arc<dyn Clock>) -> Self {
        let bounds = MemoryBounds {
            ttl_ns: config.ttl_s.saturating_mul(1_000_000_000),
            max_entries: config.max_entries,
            max_bytes: config.max_bytes,
        };
        Self::with(
            config,
            Backend::Memory(Box::new(MemoryStore::new(bounds, clock))),
            None,
        )
    }

    /// Cluster mode's: claims and answers in `store`, shared by every replica; each tenant's
    /// releases counted on `clock`.
    pub fn clustered(
        config: &IdempotencyConfig,
        store: Box<dyn ClusterKeyStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let releases = Releases::new(
            config.releases_per_tenant_per_sec,
            config.releases_per_tenant_burst,
            clock,
        );
        Self::with(config, Backend::Cluster(store), Some(releases))
    }

    fn with(config: &IdempotencyConfig, backend: Backend, releases: Option<Releases>) -> Self {
        let mut random = [0u8; 12];
        let _ = getrandom::fill(&mut random);
        let mut instance = [0u8; 24];
        instance.copy_from_slice(hex::encode(random).as_bytes());
        Self {
            flights: Mutex::new(HashMap::new()),
            backend,
            settings: Settings {
                on_store_error: config.on_store_error,
                ttl: Duration::from_secs(config.ttl_s),
                claim_ttl: Duration::from_millis(config.claim_ttl_ms),
            },
            stats: KeyStats::default(),
            instance,
            next: AtomicU32::new(0),
            unclaiming: AtomicUsize::new(0),
            releases,
            landed: Notify::new(),
        }
    }

    fn token(&self) -> Token {
        let mut t = [0u8; 32];
        t[..24].copy_from_slice(&self.instance);
        let n = self.next.fetch_add(1, Relaxed);
        // Eight hex digits, written in place (no string per request).
        for (i, d) in t[24..].iter_mut().enumerate() {
            let nibble = (n >> (28 - 4 * i)) & 0xf;
            *d = b"0123456789abcdef"[nibble as usize];
        }
        Token(t)
    }

    fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<KeyDigest, Arc<Flight>>> {
        self.flights
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The memory store, on a single replica (its counts and bounds are metrics).
    pub fn memory(&self) -> Option<&MemoryStore> {
        match &self.backend {
            Backend::Memory(m) => Some(&**m),
            Backend::Cluster(_) => None,
        }
    }

    pub fn is_clustered(&self) -> bool {
        matches!(self.backend, Backend::Cluster(_))
    }

    /// Cluster mode: how long until `tenant` may give a claim up again, if its allowance of
    /// releases is spent (its keyed requests are then refused before they are claimed).
    pub fn releases_spent(&self, tenant: &TenantId) -> Option<Duration> {
        self.releases.as_ref()?.spent(tenant)
    }

    /// Keys this process is working on now.
    pub fn in_flight(&self) -> usize {
        self.flights().len()
    }

    /// What a request with `key` is to do. A fresh claim is this process's flight before the
    /// store is asked, so a second request here waits on it instead of asking Redis too.
    pub async fn begin(self: &Arc<Self>, key: TenantKey) -> Begin {
        match self
            .begin_if(key, || Ok::<(), std::convert::Infallible>(()))
            .await
        {
            Ok(begin) => begin,
        }
    }

    /// [`Self::begin`], claiming the key only if `may_claim` says so when nothing this process
    /// holds answers for it (its error if not): a request its budgets refuse now is answered
    /// from what this process holds, or refused without asking the store anything, never a
    /// claim (review 17 of #37: 6.1 Redis commands per keyed request refused 429, a claim and
    /// its release; review 30: one read each).
    pub async fn begin_if<E>(
        self: &Arc<Self>,
        key: TenantKey,
        may_claim: impl FnOnce() -> Result<(), E>,
    ) -> Result<Begin, E> {
        let claim = {
            let mut flights = self.flights();
            if let Some(flight) = flights.get(&key.digest) {
                return Ok(match &*flight.state() {
                    FlightState::Pending(fp) => Begin::Attach(*fp, Waiter(flight.clone())),
                    FlightState::Answered(fp, answer) => Begin::Stored(*fp, answer.clone()),
                    FlightState::Claimed | FlightState::Released => Begin::InUse,
                });
            }
            if let Backend::Memory(store) = &self.backend {
                if let Some((fp, answer)) = store.get(&key.digest) {
                    return Ok(Begin::Stored(fp, answer));
                }
            }
            if let Err(refused) = may_claim() {
                Err((key, refused))
            } else {
                let flight = Arc::new(Flight::new(self.token(), key.clone(), !self.is_clustered()));
                flights.insert(key.digest, flight.clone());
                Ok(Claim {
                    owner: self.clone(),
                    key,
                    flight,
                    sent: false,
                    settled: false,
                })
            }
        };
        let claim = match claim {
            Ok(claim) => claim,
            // Nothing asked of the store: a refusal costs Redis nothing (review 30 of #37: one
            // read each, 3,810 commands a second from one client of a tenant allowed 1 record
            // a second). An answer another replica stored is replayed once the budgets admit
            // the retry; a 429 writes nothing, so nothing is written twice.
            Err((_, refused)) => return Err(refused),
        };
        let Backend::Cluster(store) = &self.backend else {
            return Ok(Begin::Fresh(claim));
        };
        let token = claim.flight.token;
        let key = claim.key.clone();
        Ok(
            match store.claim(&key, &token, self.settings.claim_ttl).await {
                Ok(None) => {
                    claim.flight.held.store(true, Relaxed);
                    Begin::Fresh(claim)
                }
                // Its own token: the claim is this request's (nothing else writes it before the
                // claim is held; kept apart so a second write of the same claim stays harmless).
                Ok(Some(Found::Claimed(t))) if t == token => {
                    claim.flight.held.store(true, Relaxed);
                    Begin::Fresh(claim)
                }
                Ok(Some(found)) => {
                    claim.forget();
                    self.count_store_answer(&key.tenant, &found);
                    match found {
                        // claim.lua takes a given-up key as free: never found here.
                        Found::Claimed(_) | Found::Released => Begin::InUse,
                        Found::Pending(_, fp) => Begin::Remote(fp),
                        Found::Answered(fp, answer) => Begin::Stored(fp, answer),
                    }
                }
                Err(e) => {
                    claim.forget();
                    self.stats.store_error(StoreOp::Claim);
                    // A claim that timed out may still run once Redis answers again (a paused or
                    // slow Redis queues it): given up behind it on the same connection, or it would
                    // hold the key — every retry 409 — until claim_ttl.
                    if e.may_have_run() {
                        let me = self.clone();
                        tokio::spawn(async move { me.unclaim(key, token).await });
                    }
                    Begin::Unavailable(e.to_string())
                }
            },
        )
    }

    /// Cluster mode: what another replica's request left under `key` (`None`: nothing, it
    /// gave the key up).
    pub async fn read(&self, key: &TenantKey) -> Result<Option<FlightState>, String> {
        let Backend::Cluster(store) = &self.backend else {
            return Ok(None);
        };
        match store.read(key).await {
            Ok(None | Some(Found::Released)) => Ok(None),
            Ok(Some(Found::Claimed(_))) => Ok(Some(FlightState::Claimed)),
            Ok(Some(Found::Pending(_, fp))) => Ok(Some(FlightState::Pending(fp))),
            Ok(Some(Found::Answered(fp, a))) => Ok(Some(FlightState::Answered(fp, a))),
            Err(e) => {
                self.stats.store_error(StoreOp::Read);
                Err(e.to_string())
            }
        }
    }

    fn land(&self, key: &TenantKey, flight: &Arc<Flight>) {
        let mut flights = self.flights();
        if flights
            .get(&key.digest)
            .is_some_and(|f| Arc::ptr_eq(f, flight))
        {
            flights.remove(&key.digest);
        }
        drop(flights);
        self.landed.notify_waiters();
    }

    /// Cluster mode: connects to Redis, then renews this process's claims every quarter of
    /// `claim_ttl` (and keeps trying to connect while Redis is away). `None` on a single
    /// replica.
    pub fn start(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        if !self.is_clustered() {
            return None;
        }
        let me = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(me.settings.claim_ttl / 4);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut warned = false;
            loop {
                tick.tick().await;
                let Backend::Cluster(store) = &me.backend else {
                    return;
                };
                if let Err(e) = store.connect().await {
                    if !warned {
                        warned = true;
                        tracing::warn!(error = %e, "idempotency: Redis unreachable; requests \
                            with an Idempotency-Key follow [idempotency] on_store_error");
                    }
                    continue;
                }
                me.renew().await;
            }
        }))
    }

    /// Connects to Redis now (cluster mode), so the first keyed requests need not wait for
    /// the renewer.
    pub async fn connect(&self) -> Result<(), String> {
        match &self.backend {
            Backend::Cluster(store) => store.connect().await.map_err(|e| e.to_string()),
            Backend::Memory(_) => Ok(()),
        }
    }

    /// One renewal of every claim this process holds, up to [`RENEW_AT_ONCE`] calls at a
    /// time on the multiplexed connection (one slow answer does not hold the others up).
    async fn renew(self: &Arc<Self>) {
        let held: Vec<(TenantKey, Token, Option<Fingerprint>)> = self
            .flights()
            .values()
            .filter(|f| f.held.load(Relaxed))
            .filter_map(|f| match &*f.state() {
                FlightState::Claimed => Some((f.key.clone(), f.token, None)),
                FlightState::Pending(fp) => Some((f.key.clone(), f.token, Some(*fp))),
                // Being stored, or given up: nothing to renew.
                FlightState::Answered(..) | FlightState::Released => None,
            })
            .collect();
        for chunk in held.chunks(RENEW_AT_ONCE) {
            let mut calls = tokio::task::JoinSet::new();
            for (key, token, pending) in chunk.iter().cloned() {
                let me = self.clone();
                calls.spawn(async move {
                    let Backend::Cluster(store) = &me.backend else {
                        return;
                    };
                    match store
                        .renew(&key, &token, pending, me.settings.claim_ttl)
                        .await
                    {
                        Ok(true) => {}
                        Ok(false) => {
                            // Another request took the key after this one's claim lapsed
                            // (Redis away longer than claim_ttl): nothing to do but say so.
                            me.stats.store_error(StoreOp::Renew);
                            tracing::warn!(
                                "idempotency: a claim lapsed and was taken by another \
                                 request; a retry of it may have been processed twice"
                            );
                        }
                        Err(_) => me.stats.store_error(StoreOp::Renew),
                    }
                });
            }
            while calls.join_next().await.is_some() {}
        }
    }

    /// Waits until no flight is left (shutdown: pending requests store their answers once
    /// the producer's flush has given them their outcome), or until `deadline`.
    pub async fn landed(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let notified = self.landed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.in_flight() == 0;
            }
        }
    }
}
