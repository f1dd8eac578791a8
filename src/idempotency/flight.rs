//! Flights: the keys this process is working on now, and the retries waiting on them.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::{Fingerprint, StoredAnswer, TenantKey, Token};

/// Where a flight stands; retries waiting on it wait for `Answered` or `Released`.
#[derive(Debug, Clone)]
pub enum FlightState {
    /// Being read or admitted: a retry is told 409.
    Claimed,
    /// Its records are with Kafka: a retry with this fingerprint waits for their outcome.
    Pending(Fingerprint),
    /// The final answer (also in the store, or about to be).
    Answered(Fingerprint, StoredAnswer),
    /// Given up with nothing stored (nothing written): a retry is processed afresh.
    Released,
}

#[derive(Debug)]
pub(super) struct Flight {
    pub(super) token: Token,
    /// The key, with its tenant (what the store names and counts it by).
    pub(super) key: TenantKey,
    state: Mutex<FlightState>,
    /// Wakes the retries waiting on this flight when its state changes.
    changed: Notify,
    /// Cluster mode: the store said the key is this flight's. Until then the renewer leaves
    /// it alone (renewing re-creates a lapsed claim, and must not race the first claim).
    pub(super) held: std::sync::atomic::AtomicBool,
}

impl Flight {
    pub(super) fn new(token: Token, key: TenantKey, held: bool) -> Self {
        Self {
            token,
            key,
            state: Mutex::new(FlightState::Claimed),
            changed: Notify::new(),
            held: std::sync::atomic::AtomicBool::new(held),
        }
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, FlightState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn set(&self, state: FlightState) {
        *self.state() = state;
        self.changed.notify_waiters();
    }
}

/// A retry waiting on another request's flight (on this replica).
#[derive(Debug)]
pub struct Waiter(pub(super) Arc<Flight>);

impl Waiter {
    /// The flight's end: `Answered` or `Released`.
    pub async fn settled(&self) -> FlightState {
        loop {
            let notified = self.0.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.0.state();
                if matches!(*state, FlightState::Answered(..) | FlightState::Released) {
                    return state.clone();
                }
            }
            notified.await;
        }
    }
}
