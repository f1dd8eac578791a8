//! What the latency readings say against the target, beyond the one reading: whether a slow
//! reading is confirmed by the ones before it, and whether the cuts made on them were
//! answered.
//!
//! - **Confirmed**: a reading over the line counts as pressure when one of the [`LOOK_BACK`]
//!   readings before it was over the line too. Two in a row would miss a stall that repeats
//!   every other interval (300 ms of every second at the default interval read slow, fast,
//!   slow, fast and was never cut), two of three one every third; one alone is a blip (a
//!   scheduler hiccup slows a tenth of one interval's deliveries), and so is one every fourth
//!   interval or rarer (2 s apart at the default interval).
//! - **Answered**: a latency cut is answered when the p90 at the next cut moved by more than
//!   [`UNANSWERED`] of the p90 at this one. The cut's reading is kept until a reading is
//!   healthy, not dropped by one that merely dips under the target (a path whose p90 sits at
//!   the target dips every few intervals), so the controller's back-off holds.
//! - **Accepted**: a cut due at the floor that the latency did not answer (the load down to
//!   the floor, the p90 where it was) says the latency is the path's, not the load's — up to
//!   [`ACCEPT_AT_MOST`] x the baseline's floor (a path that much slower is a fault, however
//!   long: a 300 ms stall on a 7 ms path stays cut at the floor while it lasts). Holding
//!   the floor would refuse producers for nothing: the reading is *accepted*, the line moves
//!   to [`ACCEPTED_SLOW`] x it (a latency that rises with load from there is cut again), and
//!   readings under [`ACCEPTED_HEALTHY`] x it grow the limit back. Only the floor tells: a
//!   broker that lost capacity answers a cut below its capacity, and one above it may not
//!   (a 30 % broker is as slow at 49 % as at 70 %). A healthy reading by the baseline (the
//!   path is back) forgets it; so does a target learned above it (the baseline caught up).

/// A latency within this fraction of the one at the last cut did not answer it.
pub(super) const UNANSWERED: f64 = 0.25;
/// With a latency accepted, readings above this multiple of it are slow...
pub const ACCEPTED_SLOW: f64 = 1.5;
/// ...and readings under this multiple of it healthy.
pub const ACCEPTED_HEALTHY: f64 = 1.25;
/// Readings before the latest that may confirm it.
pub const LOOK_BACK: usize = 3;
/// A latency over this multiple of the baseline's floor is never accepted.
pub const ACCEPT_AT_MOST: f64 = 16.0;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Evidence {
    /// The readings measured before the latest (newest first): kept over intervals of too few
    /// deliveries, so at a low rate one slow window still needs another to agree.
    recent: [Option<f64>; LOOK_BACK],
    /// The p90 at the last latency cut (ms): the next cut compares against it.
    cut_reading: Option<f64>,
    /// The p90 the floor did not move (ms): the path's own for now.
    accepted: Option<f64>,
}

impl Evidence {
    /// The reading above which the path is slow: the target, or above an accepted latency.
    pub(super) fn slow_line(&self, target: f64) -> f64 {
        self.accepted
            .map_or(target, |a| target.max(a * ACCEPTED_SLOW))
    }

    /// The reading under which the path is healthy enough to grow the limit.
    pub(super) fn healthy_line(&self, healthy: f64) -> f64 {
        self.accepted
            .map_or(healthy, |a| healthy.max(a * ACCEPTED_HEALTHY))
    }

    /// Whether one of the readings before this one was over `line` too (or none was measured
    /// yet: the first reading over the line is not held back for want of history).
    pub(super) fn confirms(&self, line: f64) -> bool {
        self.recent.iter().all(Option::is_none) || self.recent.iter().flatten().any(|r| *r > line)
    }

    /// Remembers a measured reading; `healthy_below` is the baseline's own healthy line (not
    /// widened by an accepted latency), `target` the baseline's target.
    pub(super) fn read(&mut self, x: f64, healthy_below: Option<f64>, target: Option<f64>) {
        self.recent.rotate_right(1);
        self.recent[0] = Some(x);
        if healthy_below.is_some_and(|h| x < h) {
            // The path is back at its baseline: the cuts' story is over.
            self.cut_reading = None;
            self.accepted = None;
        }
        if let (Some(a), Some(t)) = (self.accepted, target) {
            if t >= a * ACCEPTED_SLOW {
                self.accepted = None; // the baseline learned the path
            }
        }
    }

    /// A latency cut is due at `now` (ms): whether the latency answered the last one (or
    /// there was none). `after_growth`: the limit grew since, so the growth brought the
    /// pressure back and the latency answers the load.
    pub(super) fn cut_due(&mut self, now: f64, after_growth: bool) -> Cut {
        let unanswered = !after_growth
            && self
                .cut_reading
                .is_some_and(|before| (now - before).abs() <= UNANSWERED * before);
        self.cut_reading = Some(now);
        if unanswered {
            Cut::Unanswered
        } else {
            Cut::Answered
        }
    }

    /// The floor did not move `now` (ms): the path's latency, if within [`ACCEPT_AT_MOST`] x
    /// `floor_ms` (the baseline's floor). Whether it was accepted.
    pub(super) fn accept(&mut self, now: f64, floor_ms: Option<f64>) -> bool {
        if !floor_ms.is_some_and(|f| now <= ACCEPT_AT_MOST * f) {
            return false;
        }
        self.accepted = Some(now);
        self.cut_reading = None;
        true
    }

    /// The accepted latency (ms), if any.
    pub(super) fn accepted(&self) -> Option<f64> {
        self.accepted
    }
}

/// What a due latency cut found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// The latency moved since the last cut (or there was none): cut on the cool-down's clock.
    Answered,
    /// It did not: cut, and double the wait before the next; at the floor, accept it.
    Unanswered,
}
