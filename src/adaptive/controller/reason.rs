//! Where the limit stands, as a word (`phase`) and a sentence (`reason`), for the admin API,
//! the status page and the metrics.

use super::evidence::ACCEPTED_SLOW;
use super::{Cause, Controller, Move, MAX_WINDOW_INTERVALS, MIN_DELIVERIES, MIN_FEW_DELIVERIES};

impl Controller {
    /// Where the limit stands, as a word for the admin API and the metrics.
    pub fn phase(&self) -> &'static str {
        if self.limit >= 1.0 && self.pressure.is_none() && self.last != Move::Hold("unconfirmed") {
            return "ceiling";
        }
        match (self.last, self.pressure) {
            (Move::Hold("ceiling"), _) => "ceiling",
            (Move::Decrease(_), _) => "cutting",
            (Move::Hold("floor"), _) => "floor",
            (Move::Hold(_), Some(_)) => "cutting",
            (Move::Hold("dead_band" | "unconfirmed" | "accepted"), None) => "dead_band",
            (Move::Recover, _) => "recovering",
            (Move::Increase | Move::Hold(_), _) if !self.reached => "demand_below_limit",
            (Move::Increase | Move::Hold(_), _) => "probing",
        }
    }

    /// What the target is judged from, in a few words.
    fn target_words(&self) -> String {
        let Some(t) = self.target_ms() else {
            return "the target".to_string();
        };
        if let Some(a) = self.accepted_ms().filter(|a| t <= a * ACCEPTED_SLOW) {
            return format!(
                "{t:.1} ms ({ACCEPTED_SLOW} x {a:.1} ms, a p90 that cutting to the floor did \
                 not move: the path's own until it is healthy again)"
            );
        }
        match (self.settings.target_delivery_ms, self.baseline.value_ms()) {
            (None, Some(b)) => format!(
                "{t:.1} ms ({} x the path's baseline of {b:.1} ms + 4 x its noise of {:.1} ms)",
                self.settings.baseline_factor,
                self.baseline.noise_ms()
            ),
            _ => format!("{t:.1} ms"),
        }
    }

    /// What the latency says when nothing is wrong: healthy, the path's accepted latency, or
    /// too little to tell (a quiet path is not called healthy beside a slow p90 of a handful
    /// of deliveries).
    fn fine(&self, healthy: &str) -> String {
        if let Some((n, k)) = self.unmeasured {
            return format!(
                "no latency reading yet ({n} deliveries over {k} interval(s): a reading needs \
                 {MIN_DELIVERIES}, or {MIN_FEW_DELIVERIES} over {MAX_WINDOW_INTERVALS} intervals)"
            );
        }
        match (self.healthy_below_ms(), self.accepted_ms()) {
            (Some(_), Some(a)) => format!(
                "Kafka answers at the p90 accepted as its path's own ({a:.1} ms, {:.0} x its \
                 baseline: cutting to the floor did not move it; p90 under {healthy})",
                a / self.baseline.value_ms().unwrap_or(a).max(1e-3)
            ),
            (Some(_), None) => format!("Kafka is healthy (p90 under {healthy})"),
            (None, _) => "no sign of trouble (the path's baseline is still being learned)".into(),
        }
    }

    /// Why the limit is where it is, in one sentence.
    pub fn reason(&self) -> String {
        let pct = |v: f64| format!("{:.0} %", v * 100.0);
        let s = &self.settings;
        let target = self.target_words();
        let healthy = self.healthy_below_ms().map_or_else(
            || "the healthy line (not learned yet)".to_string(),
            |h| format!("{h:.1} ms"),
        );
        let pressure = |c: Cause| match c {
            Cause::Latency => {
                format!(
                    "delivery p90 is above {target} in this interval and in one of the three \
                     before"
                )
            }
            Cause::Throttle => "the broker throttles".to_string(),
            Cause::Buffer => format!("the buffer is over {} full", pct(s.buffer_pressure)),
            Cause::Stall => format!(
                "nothing was delivered for {:.0} ms while records wait (over {:.0} ms)",
                self.stalled_ms,
                self.stall_after_ms()
            ),
        };
        let level = pct(self.recover_to());
        let carried = if self.level_learned() {
            format!("{level}, what it last carried at healthy latency")
        } else {
            "the ceiling (nothing carried at healthy latency yet)".to_string()
        };
        let suspect = self.level.suspect().map_or_else(String::new, |v| {
            format!(
                "; pressure came back once at {}: again before it is healthy there lowers the \
                 level",
                pct(v)
            )
        });
        let fine = self.fine(&healthy);
        if self.phase() == "ceiling" || self.last == Move::Hold("ceiling") {
            return format!("at the ceiling: {fine}; the configured budgets alone decide");
        }
        match (self.last, self.pressure) {
            (Move::Decrease(c), _) => format!(
                "cut to {} because {}; cuts again in {} ms while it lasts (doubled by each cut \
                 the latency did not answer)",
                pct(self.limit),
                pressure(c),
                self.cut_wait_ms
            ),
            (Move::Hold("floor"), Some(c)) => {
                format!("at its floor ({}) because {}", pct(s.floor), pressure(c))
            }
            (Move::Hold(_), Some(c)) => format!(
                "{}: waiting {} ms after the last cut for it to show before cutting again",
                pressure(c),
                self.cut_wait_ms
            ),
            (Move::Hold("unconfirmed"), None) => format!(
                "holding: delivery p90 above {target} in this interval only (the three before \
                 were under it): a blip until the next one agrees"
            ),
            (Move::Hold("accepted"), None) => format!(
                "not held at the floor: the delivery p90 stayed where it was with the load cut to \
                 the floor, so it is the path's latency, not the load's; slow is now above \
                 {target}"
            ),
            (Move::Hold("dead_band"), None) => format!(
                "holding in the dead band: delivery p90 between {healthy} and {target} \
                 (or too few deliveries to measure, and those slow or records waiting)"
            ),
            (Move::Recover, _) => format!(
                "{fine}: growing x{} per {} ms interval back to \
                 {carried}; there in {:.1} s{suspect}",
                s.recovery_factor,
                s.interval_ms,
                self.time_to_recover_s()
            ),
            _ if !self.reached => format!(
                "{fine} and producers use less than the limit: \
                 giving it back toward the ceiling by {} of it every {} ms",
                pct(s.increase_step),
                self.probe_wait_ms
            ),
            (_, _) => format!(
                "{fine} and the limit is used: probing above {level} by {} of the \
                 ceiling every {} ms (doubled by each probe that brought pressure)",
                pct(s.increase_step),
                self.probe_wait_ms
            ),
        }
    }
}
