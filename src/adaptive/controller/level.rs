//! The recovery level: the share of the ceiling slow start brings the limit back to.
//!
//! It is the highest share Kafka carried over a whole interval at healthy latency — the
//! ceiling while nothing was carried yet. Pressure that returns while the limit grows toward
//! it marks the limit reached as *suspect* and keeps the level (one flap of the fault says
//! nothing of the broker's capacity); pressure that returns again before the limit was
//! healthy at the suspect level lowers the level to the limit before that growth (the broker
//! takes less than it did).
//!
//! Known limit: a fault that flaps every other interval looks, interval by interval, exactly
//! like a broker that lost capacity (slow at the level, healthy at 0.7 of it), and lowers the
//! level the same way (0.5 -> 0.06 of the ceiling over 30 s of flapping; recovery after it is
//! the additive probe's). Restoring a level on pressure at or below it was tried: it took two
//! losses of capacity in one episode for a flap and saw-toothed (5-7 cuts in 9 s) until the
//! baseline crept. A smaller broker's saw-tooth is the worse failure, so the level stays.

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Level {
    /// The level learned; `None` until one was carried (slow start aims at the ceiling).
    carried: Option<f64>,
    /// The limit a growth toward the level reached when pressure came back, until the limit
    /// has carried that much at healthy latency.
    suspect: Option<f64>,
}

impl Level {
    /// The level (fraction of the ceiling).
    pub(super) fn get(&self) -> f64 {
        self.carried.unwrap_or(1.0)
    }

    pub(super) fn learned(&self) -> bool {
        self.carried.is_some()
    }

    pub(super) fn suspect(&self) -> Option<f64> {
        self.suspect
    }

    /// A whole healthy interval at `limit` that carried `carried`.
    pub(super) fn carried(&mut self, limit: f64, carried: f64) {
        // With nothing learned, a limit below the ceiling is one a fault cut (at start-up):
        // what it carries is no level to stop at, and slow start aims at the ceiling.
        let learn = self.carried.is_some() || limit >= 1.0;
        if learn && carried.is_finite() && carried > 0.0 {
            self.carried = Some(self.carried.map_or(carried, |r| r.max(carried)));
        }
        if self.suspect.is_some_and(|s| limit >= s) {
            self.suspect = None;
        }
    }

    /// Growth toward the level, from `from`, brought pressure back at `limit`.
    pub(super) fn pressure_during_growth(&mut self, from: f64, limit: f64) {
        if self.suspect.take().is_none() {
            self.suspect = Some(limit);
            return;
        }
        // Again before the limit was healthy at the suspect level: the broker takes less
        // than it did, and recovery stops below it.
        self.carried = Some(self.carried.map_or(from, |r| r.min(from)));
    }
}
