//! Addresses a connection authenticated from lately. A flood's connections never
//! authenticate; a client that showed a credential from an address is not the flood, and,
//! while the address holds no slot, its newcomers wait for one where an unknown address's are
//! refused past [`super::WAITING_PER_ADDRESS`] (review 31 of #37: against 200 addresses of two
//! connections each, closed by the attacker at 0.9 s, a client's pool of eight got two served
//! of each eight). Holding a slot, it is refused past two as any address is: a flood with one
//! valid key, one request from each of its addresses, kept a new client out 9.9 s (review
//! 32).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an address counts as known after a connection from it authenticated.
pub const KNOWN_FOR: Duration = Duration::from_secs(300);

/// Addresses remembered at most; past it those not known any more are forgotten, and while
/// all are, a new one is not remembered (a tenant's clients on that many addresses wait as
/// unknown ones do).
const MAX_KNOWN: usize = 65_536;

#[derive(Debug, Default)]
pub(super) struct Known(Mutex<HashMap<IpAddr, Instant>>);

impl Known {
    /// A connection from `address` authenticated (once per connection).
    pub(super) fn note(&self, address: IpAddr) {
        let now = Instant::now();
        let mut known = self.lock();
        if known.len() >= MAX_KNOWN && !known.contains_key(&address) {
            known.retain(|_, at| now.duration_since(*at) < KNOWN_FOR);
            if known.len() >= MAX_KNOWN {
                return;
            }
        }
        known.insert(address, now);
    }

    /// Whether a connection from `address` authenticated within [`KNOWN_FOR`].
    pub(super) fn recent(&self, address: &IpAddr) -> bool {
        self.lock()
            .get(address)
            .is_some_and(|at| at.elapsed() < KNOWN_FOR)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Instant>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
