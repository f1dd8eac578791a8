//! A request's hold on its key, and how it ends: an answer stored, the key given up (in
//! cluster mode: in Redis, retried while Redis fails, and counted against the tenant's
//! allowance of releases), or (dropped after its records were sent) the claim left to lapse.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::flight::{Flight, FlightState};
use super::{Backend, Fingerprint, Found, Idempotency, StoreOp, StoredAnswer, TenantKey, Token};
use crate::identity::TenantId;

/// A request's hold on its key. It ends by [`Claim::finish`] (the answer is stored),
/// [`Claim::release`] (nothing stored: a retry is processed afresh), or dropped: before its
/// records were sent that is a release; after, the claim is left to lapse (the records may
/// be written: never free the key for a second write).
#[derive(Debug)]
pub struct Claim {
    pub(super) owner: Arc<Idempotency>,
    pub(super) key: TenantKey,
    pub(super) flight: Arc<Flight>,
    pub(super) sent: bool,
    pub(super) settled: bool,
}

impl Claim {
    /// The request's records are with Kafka: from now on a retry with this fingerprint waits
    /// for them, and the key is never given up while they may be written.
    pub fn pending(&mut self, fingerprint: Fingerprint) {
        self.sent = true;
        self.flight.set(FlightState::Pending(fingerprint));
    }

    /// Stores the final answer, then tells whoever waits. In cluster mode the write runs on
    /// a task of its own, so a request dropped meanwhile (its client gone) still stores it.
    pub async fn finish(mut self, fingerprint: Fingerprint, answer: StoredAnswer) {
        self.settled = true;
        let owner = self.owner.clone();
        let (key, flight) = (self.key.clone(), self.flight.clone());
        match &owner.backend {
            Backend::Memory(store) => {
                // Stored and landed under the flights' lock, so `begin` finds the flight or
                // the answer, never neither.
                let (waiting, stored) = {
                    let mut flights = owner.flights();
                    if flights
                        .get(&key.digest)
                        .is_some_and(|f| Arc::ptr_eq(f, &flight))
                    {
                        flights.remove(&key.digest);
                    }
                    // Retries attached to this flight each hold it (besides this claim and
                    // `flight`); no new one can attach now. Only for them is the answer copied.
                    let waiting = (Arc::strong_count(&flight) > 2).then(|| answer.clone());
                    (waiting, store.put(&key, fingerprint, answer))
                };
                if !stored {
                    owner.stats.store_error(StoreOp::TooLarge);
                }
                flight.set(match waiting {
                    Some(answer) => FlightState::Answered(fingerprint, answer),
                    None => FlightState::Released,
                });
                owner.landed.notify_waiters();
            }
            Backend::Cluster(_) => {
                flight.set(FlightState::Answered(fingerprint, answer.clone()));
                let task = tokio::spawn(async move {
                    let Backend::Cluster(store) = &owner.backend else {
                        return;
                    };
                    let ttl = owner.settings.ttl;
                    // Retried while the claim is renewed (the flight stays until then), so a
                    // short Redis outage costs a late write, not a second one.
                    let mut wait = Duration::from_millis(50);
                    let give_up = tokio::time::Instant::now() + owner.settings.claim_ttl;
                    loop {
                        let token = flight.token;
                        match store.answer(&key, &token, fingerprint, &answer, ttl).await {
                            Ok(true) => break,
                            Ok(false) => {
                                // The claim lapsed (Redis away longer than claim_ttl) and
                                // another request holds the key now.
                                owner.stats.store_error(StoreOp::Store);
                                tracing::warn!(
                                    "idempotency: an answer was not stored: the key's claim \
                                     lapsed and another request holds it; a retry of it may \
                                     have been processed twice"
                                );
                                break;
                            }
                            Err(e) => {
                                owner.stats.store_error(StoreOp::Store);
                                if tokio::time::Instant::now() + wait > give_up {
                                    tracing::warn!(error = %e, "idempotency: an answer could \
                                        not be stored in Redis; a retry may be processed again");
                                    break;
                                }
                                tokio::time::sleep(wait).await;
                                wait = (wait * 2).min(Duration::from_secs(1));
                            }
                        }
                    }
                    owner.land(&key, &flight);
                });
                let _ = task.await;
            }
        }
    }

    /// Gives the key up: nothing is stored, and the next request with it is processed.
    /// `counted`: against the tenant's allowance of releases (cluster mode) — not when the
    /// gateway could not serve the request (Kafka, the registry or the store away).
    pub async fn release(mut self, counted: bool) {
        self.settled = true;
        self.flight.set(FlightState::Released);
        let owner = self.owner.clone();
        owner.land(&self.key, &self.flight);
        if counted {
            owner.count_release(&self.key);
        }
        owner.unclaim(self.key.clone(), self.flight.token).await;
    }

    /// The store said the key is not this request's: forget the local flight only.
    pub(super) fn forget(mut self) {
        self.settled = true;
        self.flight.set(FlightState::Released);
        self.owner.land(&self.key, &self.flight);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.flight.set(FlightState::Released);
        self.owner.land(&self.key, &self.flight);
        if self.sent {
            // The records may be written and no answer will be stored here: in cluster mode
            // the claim lapses after claim_ttl (retries get 409 until then).
            tracing::warn!("idempotency: a request with a key ended before its answer was stored");
            return;
        }
        if let (Backend::Cluster(_), Ok(runtime)) =
            (&self.owner.backend, tokio::runtime::Handle::try_current())
        {
            let owner = self.owner.clone();
            let (key, token) = (self.key.clone(), self.flight.token);
            owner.count_release(&key);
            runtime.spawn(async move { owner.unclaim(key, token).await });
        }
    }
}

/// Claims whose release failed that are tried again at once, at most (cluster mode; the rest
/// lapse after claim_ttl_ms).
const MAX_UNCLAIMING: usize = 4096;

/// One of the releases being tried again, counted while it lives.
struct Unclaiming<'a>(&'a AtomicUsize);

impl Drop for Unclaiming<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Idempotency {
    /// A request gave its claim up (cluster mode: against its tenant's allowance). Not a claim
    /// given up behind a Redis that timed out: that is the store's doing, not the tenant's.
    fn count_release(&self, key: &TenantKey) {
        if let Some(releases) = &self.releases {
            releases.count(&key.tenant, 1);
        }
    }

    /// Redis answered a keyed request itself (a stored answer, a key in use, another
    /// replica's request pending): against its tenant's allowance as a given-up claim is,
    /// a replay by the size it copies out ([`super::releases::REPLAY_UNIT`]).
    pub(super) fn count_store_answer(&self, tenant: &TenantId, found: &Found) {
        let Some(releases) = &self.releases else {
            return;
        };
        let units = match found {
            Found::Answered(_, answer) => 1 + answer.stored_bytes() / super::releases::REPLAY_UNIT,
            Found::Claimed(_) | Found::Released | Found::Pending(..) => 1,
        };
        releases.count(tenant, u64::try_from(units).unwrap_or(u64::MAX));
    }

    /// Cluster mode: gives up the claim `token` holds on `key` (if it holds it: a key another
    /// request holds, or an answer, is left alone). Tried once, then, while Redis fails, again
    /// on a task of its own until the claim would have lapsed anyway: a claim left behind
    /// answers the key's retries 409 until then.
    pub(super) async fn unclaim(self: &Arc<Self>, key: TenantKey, token: Token) {
        let Backend::Cluster(store) = &self.backend else {
            return;
        };
        if store
            .release(&key, &token, self.settings.claim_ttl)
            .await
            .is_ok()
        {
            return;
        }
        self.stats.store_error(StoreOp::Release);
        // Bounded: a Redis that stays away would otherwise gather a task per keyed request.
        if self.unclaiming.fetch_add(1, Relaxed) >= MAX_UNCLAIMING {
            self.unclaiming.fetch_sub(1, Relaxed);
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let _done = Unclaiming(&me.unclaiming);
            let Backend::Cluster(store) = &me.backend else {
                return;
            };
            let give_up = tokio::time::Instant::now() + me.settings.claim_ttl;
            let mut wait = Duration::from_millis(50);
            while tokio::time::Instant::now() + wait < give_up {
                tokio::time::sleep(wait).await;
                if store
                    .release(&key, &token, me.settings.claim_ttl)
                    .await
                    .is_ok()
                {
                    return;
                }
                wait = (wait * 2).min(Duration::from_secs(1));
            }
        });
    }
}
