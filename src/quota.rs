//! Calendar quotas: an allowance of records and bytes per hour, day or month of the calendar
//! (in UTC or a fixed offset), used up by what is admitted and given back whole when the
//! window turns. "10 M records or 50 GB a month" is one [`QuotaSpec`].
//!
//! Unlike a token bucket nothing refills while the window runs: a request the window cannot
//! take waits for its end, so a refusal names the reset ([`QuotaShort::reset_in_s`]). Windows
//! follow the wall clock (`Clock::unix_s`), not the monotonic one: a month is a month of the
//! calendar. Their edges are computed from the Unix time by integer arithmetic on days (the
//! proleptic Gregorian calendar, so 30- and 31-day months and 29 February fall out of it), and
//! an offset moves every edge by the same seconds (`+05:30`: days start at 18:30 UTC).
//!
//! The rules for a change while a window runs: the amount used is kept (an operator's `PATCH`
//! never hands a tenant a fresh allowance); a limit lowered below what is used admits nothing
//! more until the reset, a raised one admits the difference at once; a quota moved to another
//! window kind starts that window at zero, since what was counted belongs to another window.
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

pub mod global;
pub mod shared;

use crate::dimension::{Dimension, PerDimension};
use crate::record::Charge;

/// The calendar period a quota counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    Hour,
    Day,
    Month,
}

impl Window {
    pub const ALL: [Window; 3] = [Window::Hour, Window::Day, Window::Month];

    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Month => "month",
        }
    }
}

const DAY_S: i64 = 86_400;

/// Where the windows' edges fall: UTC moved by a fixed offset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Calendar {
    /// Seconds east of UTC (`+02:00` is 7,200), within ±24 h.
    offset_s: i32,
}

/// One window: its first second and the first second after it, in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: i64,
    pub end: i64,
}

impl Calendar {
    /// A calendar `offset_s` seconds east of UTC, or `None` past ±24 h.
    pub fn with_offset(offset_s: i32) -> Option<Self> {
        (offset_s.unsigned_abs() < 86_400).then_some(Self { offset_s })
    }

    /// The window of kind `window` that holds the Unix second `unix_s`.
    pub fn span(&self, window: Window, unix_s: i64) -> Span {
        let offset = i64::from(self.offset_s);
        let local = unix_s.saturating_add(offset);
        let (start, end) = match window {
            Window::Hour => {
                let start = local.div_euclid(3_600) * 3_600;
                (start, start.saturating_add(3_600))
            }
            Window::Day => {
                let start = local.div_euclid(DAY_S) * DAY_S;
                (start, start.saturating_add(DAY_S))
            }
            Window::Month => {
                let (year, month, _) = civil_from_days(local.div_euclid(DAY_S));
                let (next_year, next_month) = if month == 12 {
                    (year + 1, 1)
                } else {
                    (year, month + 1)
                };
                (
                    days_from_civil(year, month, 1).saturating_mul(DAY_S),
                    days_from_civil(next_year, next_month, 1).saturating_mul(DAY_S),
                )
            }
        };
        Span {
            start: start.saturating_sub(offset),
            end: end.saturating_sub(offset),
        }
    }
}

/// Days since 1970-01-01 of a date of the proleptic Gregorian calendar (H. Hinnant's
/// `days_from_civil`, exact for every `i64` day count a Unix second can name).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01: (year, month 1–12, day 1–31).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A quota: per window, at most this many records and bytes (`None`: that dimension is not
/// counted against a limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSpec {
    pub window: Window,
    pub limit: PerDimension<Option<u64>>,
    /// Shadow mode: what it would refuse is noted, not refused, and not charged.
    pub shadow: bool,
}

/// What one quota has counted: in which window, and how much of it is used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaUse {
    /// The window counted (its first second); what was counted in an earlier one is gone.
    pub window: Option<(Window, i64)>,
    pub used: Charge,
    /// The first second after that window, once computed (0: not yet): the calendar is not
    /// worked out again for every request while the window runs.
    pub ends: i64,
}

/// A quota that cannot take a request: which dimension, and when its window turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaShort {
    pub dimension: Dimension,
    pub window: Window,
    /// Seconds until the window turns (at least 1).
    pub reset_in_s: u64,
}

/// A quota as its tenant is shown it (a `RateLimit` item).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaView {
    pub window: Window,
    pub limit: u64,
    /// What the window counted: past `limit` once a limit was lowered below it (then
    /// `remaining` is 0, and `limit - remaining` would hide by how much).
    pub used: u64,
    pub remaining: u64,
    /// The window's length and the seconds left of it.
    pub window_s: u64,
    pub reset_in_s: u64,
}

impl QuotaSpec {
    /// Whether `charge` is larger than a whole window in a limited dimension: never admitted.
    pub fn larger_than_window(&self, charge: Charge) -> bool {
        (self.limit.iter()).any(|(d, limit)| limit.is_some_and(|l| charge[d] > l))
    }

    /// What is used of the window holding `unix_s`: `used`'s count if it is that window's.
    pub fn used_at(&self, calendar: &Calendar, used: &QuotaUse, unix_s: i64) -> (Span, Charge) {
        if let Some((w, start)) = used.window {
            if w == self.window && start <= unix_s && unix_s < used.ends {
                let span = Span {
                    start,
                    end: used.ends,
                };
                return (span, used.used);
            }
        }
        let span = calendar.span(self.window, unix_s);
        let counted = match used.window {
            Some((w, start)) if w == self.window && start == span.start => used.used,
            _ => Charge::default(),
        };
        (span, counted)
    }

    /// The use after taking `charge` at `unix_s`, or the dimension short of it with the wait
    /// for the reset. Takes both dimensions or neither.
    pub fn take(
        &self,
        calendar: &Calendar,
        used: &QuotaUse,
        unix_s: i64,
        charge: Charge,
    ) -> Result<QuotaUse, QuotaShort> {
        let (span, counted) = self.used_at(calendar, used, unix_s);
        for (d, limit) in self.limit.iter() {
            let Some(limit) = limit else { continue };
            if counted[d].saturating_add(charge[d]) > *limit {
                return Err(QuotaShort {
                    dimension: d,
                    window: self.window,
                    reset_in_s: reset_in(span, unix_s),
                });
            }
        }
        Ok(QuotaUse {
            window: Some((self.window, span.start)),
            ends: span.end,
            used: PerDimension::from_fn(|d| counted[d].saturating_add(charge[d])),
        })
    }

    /// Each limited dimension as it stands at `unix_s`.
    pub fn view(
        &self,
        calendar: &Calendar,
        used: &QuotaUse,
        unix_s: i64,
    ) -> PerDimension<Option<QuotaView>> {
        let (span, counted) = self.used_at(calendar, used, unix_s);
        PerDimension::from_fn(|d| {
            self.limit[d].map(|limit| QuotaView {
                window: self.window,
                limit,
                used: counted[d],
                remaining: limit.saturating_sub(counted[d]),
                window_s: u64::try_from(span.end.saturating_sub(span.start)).unwrap_or(0),
                reset_in_s: reset_in(span, unix_s),
            })
        })
    }
}

/// A tenant's quotas and what each window kind has used. The use is kept when the quotas
/// change (the rules in the module's comment), so it lives beside them, not in them.
#[derive(Debug, Clone, Default)]
pub struct Quotas {
    pub specs: std::sync::Arc<[QuotaSpec]>,
    /// Indexed by [`Window`] (as `usize`), whichever quotas are set. In cluster mode, the
    /// shared counts as this replica knows them (see `shared::uses`).
    pub used: [QuotaUse; 3],
    /// Cluster mode: this replica's allowances of the shared counts, by window.
    pub shared: [shared::Allowance; 3],
}

impl Quotas {
    /// The uses after taking `charge` from every quota, or the shortfall whose reset comes
    /// last (the request fits no sooner). Takes from all or from none. A quota in shadow mode
    /// that cannot take it is left as it was, and said (the second value); `waived`: every
    /// quota in shadow mode is left as it was (another would refuse the request).
    pub fn take(
        &self,
        calendar: &Calendar,
        unix_s: i64,
        charge: Charge,
        waived: bool,
    ) -> Result<([QuotaUse; 3], Option<QuotaShort>), QuotaShort> {
        let mut used = self.used;
        let mut short: Option<QuotaShort> = None;
        let mut shadow: Option<QuotaShort> = None;
        for spec in self.specs.iter().filter(|s| !(waived && s.shadow)) {
            // Larger than a whole window: enforced, a 413, no quota refusal (review 41-r5).
            if spec.shadow && spec.larger_than_window(charge) {
                continue;
            }
            let slot = &mut used[spec.window as usize];
            match spec.take(calendar, slot, unix_s, charge) {
                Ok(u) => *slot = u,
                Err(s) if spec.shadow => {
                    shadow.get_or_insert(s);
                }
                Err(s) if short.is_none_or(|k| s.reset_in_s > k.reset_in_s) => short = Some(s),
                Err(_) => {}
            }
        }
        short.map_or(Ok((used, shadow)), Err)
    }

    /// Every limited dimension of every quota as it stands at `unix_s`, in window order, into
    /// `out`'s slots (as many as fit). A plain loop: every answer of a tenant with quotas
    /// builds these, and an iterator's adapters cost ~250 instructions an item here.
    pub fn view_into(
        &self,
        calendar: &Calendar,
        unix_s: i64,
        out: &mut [Option<(Dimension, QuotaView)>],
    ) {
        let mut slots = out.iter_mut();
        for spec in self.specs.iter() {
            let Some(used) = self.used.get(spec.window as usize) else {
                continue;
            };
            let views = spec.view(calendar, used, unix_s);
            for d in Dimension::ALL {
                let Some(view) = views[d] else { continue };
                if let Some(slot) = slots.next() {
                    *slot = Some((d, view));
                }
            }
        }
    }
}

fn reset_in(span: Span, unix_s: i64) -> u64 {
    u64::try_from(span.end.saturating_sub(unix_s))
        .unwrap_or(0)
        .max(1)
}

#[cfg(test)]
mod tests;
