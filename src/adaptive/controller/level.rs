//! The recovery level: the share of the ceiling slow start brings the limit back to.
//!
//! It is the highest share Kafka carried over a whole interval at healthy latency — the
//! ceiling while nothing was carried yet. Pressure that returns while the limit grows toward
//! it marks the limit reached as *suspect* and keeps the level (one flap of the fault says
//! nothing of the broker's capacity); pressure that returns again before the limit was
//! healthy at the suspect level lowers the level to the limit before that growth (the broker
//! takes less than it did).
//!
//! A broker that lost capacity is then healthy at the lowered level. Pressure at or below a
//! level lowered in this episode says the opposite: a fault that comes and goes whatever the
//! load (a stall every other interval lowered the level at every flap, 0.5 -> 0.06 of the
//! ceiling in 30 s, and recovery afterwards took the additive probe's 10 s). The level is then
//! restored, and not lowered again until the limit has been healthy at it for a while.

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Level {
    /// The level learned; `None` until one was carried (slow start aims at the ceiling).
    carried: Option<f64>,
    /// The limit a growth toward the level reached when pressure came back, until the limit
    /// has carried that much at healthy latency.
    suspect: Option<f64>,
    /// The level before this episode lowered it.
    before_lowering: Option<f64>,
    /// Pressure came at or below the lowered level: a flapping fault; the level is not
    /// lowered again until the episode is over.
    flapping: bool,
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

    /// A whole healthy interval at `limit` that carried `carried`; `calm`: no cut for long
    /// enough that the episode is over once the limit is at the level.
    pub(super) fn carried(&mut self, limit: f64, carried: f64, calm: bool) {
        // With nothing learned, a limit below the ceiling is one a fault cut (at start-up):
        // what it carries is no level to stop at, and slow start aims at the ceiling.
        let learn = self.carried.is_some() || limit >= 1.0;
        if learn && carried.is_finite() && carried > 0.0 {
            self.carried = Some(self.carried.map_or(carried, |r| r.max(carried)));
        }
        if self.suspect.is_some_and(|s| limit >= s) {
            self.suspect = None;
        }
        if calm && limit >= self.get() {
            self.before_lowering = None;
            self.flapping = false;
        }
    }

    /// Growth toward the level, from `from`, brought pressure back at `limit`.
    pub(super) fn pressure_during_growth(&mut self, from: f64, limit: f64) {
        if self.suspect.take().is_none() {
            self.suspect = Some(limit);
            return;
        }
        if let Some(before) = self.before_lowering {
            if limit <= self.get() + 1e-9 {
                // At or below a level already lowered: not a smaller broker.
                self.carried = Some(before);
                self.flapping = true;
                return;
            }
        }
        if !self.flapping {
            self.before_lowering.get_or_insert(self.get());
            self.carried = Some(self.carried.map_or(from, |r| r.min(from)));
        }
    }
}
