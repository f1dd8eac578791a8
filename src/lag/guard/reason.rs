//! A guard's standing in one sentence, for the admin API and the status page.

use super::{Blocker, CapBasis, Guard, Phase};

impl Guard {
    /// Why the guard is where it is, in one sentence for the admin API and the status page.
    pub fn reason(&self) -> String {
        let g = &self.config;
        let f = g.release_fraction;
        let (c, d) = (self.consumer_rate(), self.offered_rate());
        let secs = |v: f64| {
            if v.is_finite() {
                format!("{v:.0} s")
            } else {
                "forever (not shrinking)".into()
            }
        };
        let release_s = f * g.max_recovery_s;
        match self.phase {
            Phase::Starting => "waiting for a second reading to measure rates".into(),
            Phase::Idle if self.recovery_s == 0.0 => "consumers keep up: caught up".into(),
            Phase::Idle => format!(
                "consumers keep up: the lag drains in {} (acts above {})",
                secs(self.recovery_s),
                secs(g.max_recovery_s)
            ),
            Phase::Holding => format!(
                "offsets unreadable: the last cap is kept for at most {} s",
                g.hold_s
            ),
            // Not capping when reads began to fail (at start-up, a group with no commits yet):
            // nothing was held, nothing let go.
            Phase::Released if self.failing_s < g.hold_s => format!(
                "offsets unreadable for {:.0} s: no cap in force, producers follow the static \
                 budgets (a cap would be kept for {} s)",
                self.failing_s, g.hold_s
            ),
            Phase::Released => format!(
                "offsets unreadable for over {} s: no cap, producers follow the static budgets",
                g.hold_s
            ),
            Phase::Capping => {
                let why = match self.basis {
                    CapBasis::Drain => format!(
                        "capped at C / headroom ({:.0}/s) so the lag drains: at the producers' \
                         rate it would take {}",
                        self.cap,
                        secs(self.recovery_s)
                    ),
                    CapBasis::Recovery => format!(
                        "capped at {:.0}/s, the most that still drains the lag within {}",
                        self.cap,
                        secs(release_s)
                    ),
                    CapBasis::ConsumerRate => format!(
                        "the lag is drained: capped at what the consumers read ({:.0}/s)",
                        self.cap
                    ),
                    CapBasis::Probe => format!(
                        "caught up: the cap is raised in steps above what the consumers read \
                         ({c:.0}/s), now {:.0}/s, while the lag stays caught up",
                        self.cap
                    ),
                    CapBasis::Floor => format!(
                        "consumers stopped or slower than the floor: capped at the floor ({:.0}/s)",
                        self.cap
                    ),
                };
                let stays = match self.blocker {
                    Some(Blocker::Lag) => format!(
                        "; lifts once the lag is under {:.0} records",
                        g.max_lag_records.unwrap_or(0) as f64 * f
                    ),
                    Some(Blocker::Behind) => format!(
                        "; lifts once the lag is within {:.1} s of reading, or the consumers \
                         read the offered {d:.0}/s with headroom",
                        f * g.caught_up_s
                    ),
                    Some(Blocker::Demand) => {
                        format!("; lifts once the cap admits all that is offered ({d:.0}/s)")
                    }
                    Some(Blocker::Settling) => format!(
                        "; all that is offered is admitted: lifts after {} s of it if the lag \
                         holds",
                        g.rate_window_s
                    ),
                    Some(Blocker::Growing) => format!(
                        "; at the offered {d:.0}/s the lag grows{}: released, it would fall \
                         behind again (so the cap stays)",
                        self.trend
                            .bounds()
                            .map_or_else(String::new, |(low, high)| format!(
                                " by {:.1} to {:.1}/s",
                                low.max(0.0),
                                high.max(0.0)
                            ))
                    ),
                    None => String::new(),
                };
                why + &stays
            }
        }
    }
}
