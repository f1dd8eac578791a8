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

    /// Every limited dimension of every quota as it stands at `unix_s`, in window order.
    pub fn view(
        &self,
        calendar: &Calendar,
        unix_s: i64,
    ) -> impl Iterator<Item = (Dimension, QuotaView)> + '_ {
        let calendar = *calendar;
        self.specs.iter().flat_map(move |spec| {
            let views = spec.view(&calendar, &self.used[spec.window as usize], unix_s);
            Dimension::ALL
                .into_iter()
                .filter_map(move |d| views[d].map(|v| (d, v)))
        })
    }
}

fn reset_in(span: Span, unix_s: i64) -> u64 {
    u64::try_from(span.end.saturating_sub(unix_s))
        .unwrap_or(0)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Unix second from a UTC date and time, through the `time` crate: an implementation of
    /// the calendar other than ours.
    fn at(year: i32, month: u8, day: u8, h: u8, m: u8, s: u8) -> i64 {
        let month = time::Month::try_from(month).expect("month");
        time::Date::from_calendar_date(year, month, day)
            .expect("date")
            .with_hms(h, m, s)
            .expect("time")
            .assume_utc()
            .unix_timestamp()
    }

    fn spec(window: Window, records: u64) -> QuotaSpec {
        QuotaSpec {
            window,
            limit: PerDimension {
                records: Some(records),
                bytes: None,
            },
            shadow: false,
        }
    }

    #[test]
    fn months_of_30_and_31_days_and_29_february_end_where_the_calendar_does() {
        let utc = Calendar::default();
        let cases = [
            (
                at(2027, 4, 15, 12, 0, 0),
                at(2027, 4, 1, 0, 0, 0),
                at(2027, 5, 1, 0, 0, 0),
                30,
            ),
            (
                at(2027, 5, 31, 23, 59, 59),
                at(2027, 5, 1, 0, 0, 0),
                at(2027, 6, 1, 0, 0, 0),
                31,
            ),
            (
                at(2028, 2, 29, 0, 0, 0),
                at(2028, 2, 1, 0, 0, 0),
                at(2028, 3, 1, 0, 0, 0),
                29,
            ),
            (
                at(2027, 2, 28, 23, 59, 59),
                at(2027, 2, 1, 0, 0, 0),
                at(2027, 3, 1, 0, 0, 0),
                28,
            ),
            (
                at(2100, 2, 10, 0, 0, 0),
                at(2100, 2, 1, 0, 0, 0),
                at(2100, 3, 1, 0, 0, 0),
                28,
            ),
            (
                at(2026, 12, 31, 23, 0, 0),
                at(2026, 12, 1, 0, 0, 0),
                at(2027, 1, 1, 0, 0, 0),
                31,
            ),
        ];
        for (now, start, end, days) in cases {
            let span = utc.span(Window::Month, now);
            assert_eq!((span.start, span.end), (start, end), "at {now}");
            assert_eq!(span.end - span.start, days * DAY_S);
        }
    }

    #[test]
    fn our_calendar_agrees_with_another_implementation_over_four_centuries() {
        // Every 7th day from 1900 to 2300, at a time of day that moves: the month and day
        // windows' edges against the `time` crate's dates.
        let utc = Calendar::default();
        let mut unix = at(1900, 1, 1, 0, 0, 0);
        let last = at(2300, 1, 1, 0, 0, 0);
        while unix < last {
            let date = time::OffsetDateTime::from_unix_timestamp(unix).expect("in range");
            let first = date
                .replace_day(1)
                .expect("day 1")
                .replace_time(time::Time::MIDNIGHT);
            assert_eq!(utc.span(Window::Month, unix).start, first.unix_timestamp());
            let midnight = date.replace_time(time::Time::MIDNIGHT).unix_timestamp();
            assert_eq!(utc.span(Window::Day, unix).start, midnight);
            unix += 7 * DAY_S + 3_607;
        }
    }

    #[test]
    fn an_offset_moves_every_edge() {
        // +02:00: the day starts at 22:00 UTC the day before.
        let east = Calendar::with_offset(7_200).expect("offset");
        let now = at(2027, 3, 31, 22, 30, 0); // 1 April 00:30 at +02:00
        assert_eq!(east.span(Window::Day, now).start, at(2027, 3, 31, 22, 0, 0));
        assert_eq!(
            east.span(Window::Month, now).start,
            at(2027, 3, 31, 22, 0, 0)
        );
        assert_eq!(east.span(Window::Month, now).end, at(2027, 4, 30, 22, 0, 0));
        // +05:30: hours turn at half past in UTC.
        let india = Calendar::with_offset(19_800).expect("offset");
        let hour = india.span(Window::Hour, at(2027, 1, 1, 10, 45, 0));
        assert_eq!(
            (hour.start, hour.end),
            (at(2027, 1, 1, 10, 30, 0), at(2027, 1, 1, 11, 30, 0))
        );
        // West of UTC, before 1970: still whole days.
        let west = Calendar::with_offset(-18_000).expect("offset");
        let day = west.span(Window::Day, at(1969, 12, 31, 3, 0, 0));
        assert_eq!(day.start, at(1969, 12, 30, 5, 0, 0));
        assert!(Calendar::with_offset(86_400).is_none());
    }

    #[test]
    fn a_window_is_used_up_and_given_back_whole_when_it_turns() {
        let utc = Calendar::default();
        let q = spec(Window::Hour, 10);
        let mut used = QuotaUse::default();
        let t = at(2027, 6, 1, 9, 59, 0);
        used = q.take(&utc, &used, t, Charge::new(8, 800)).expect("fits");
        // Whole or nothing: 3 more do not fit, and nothing is taken.
        let short = q
            .take(&utc, &used, t + 30, Charge::new(3, 1))
            .expect_err("over");
        assert_eq!(
            (short.dimension, short.reset_in_s),
            (Dimension::Records, 30)
        );
        assert_eq!(used.used.records, 8);
        used = q
            .take(&utc, &used, t + 30, Charge::new(2, 1))
            .expect("the rest fits");
        // The hour turns: the whole allowance again.
        let next = at(2027, 6, 1, 10, 0, 0);
        let view = q.view(&utc, &used, next).records.expect("limited");
        assert_eq!(
            (view.remaining, view.window_s, view.reset_in_s),
            (10, 3_600, 3_600)
        );
        assert!(q.take(&utc, &used, next, Charge::new(10, 0)).is_ok());
    }

    #[test]
    fn a_change_mid_window_keeps_what_is_used() {
        let utc = Calendar::default();
        let t = at(2027, 6, 15, 12, 0, 0);
        let used = spec(Window::Day, 100)
            .take(&utc, &QuotaUse::default(), t, Charge::new(60, 0))
            .expect("fits");
        // Lowered below the use: nothing more until midnight.
        let lowered = spec(Window::Day, 50);
        let short = lowered
            .take(&utc, &used, t, Charge::new(1, 0))
            .expect_err("spent");
        assert_eq!(short.reset_in_s, 12 * 3_600);
        // Raised: the difference at once.
        let raised = spec(Window::Day, 200);
        assert!(raised.take(&utc, &used, t, Charge::new(140, 0)).is_ok());
        assert!(raised.take(&utc, &used, t, Charge::new(141, 0)).is_err());
        // Moved to a month: a window of its own, from zero.
        let monthly = spec(Window::Month, 100);
        assert!(monthly.take(&utc, &used, t, Charge::new(100, 0)).is_ok());
    }

    #[test]
    fn bytes_are_counted_as_records_are() {
        let utc = Calendar::default();
        let q = QuotaSpec {
            window: Window::Day,
            limit: PerDimension {
                records: None,
                bytes: Some(1_000),
            },
            shadow: false,
        };
        let t = at(2027, 1, 1, 0, 0, 0);
        let used = q
            .take(&utc, &QuotaUse::default(), t, Charge::new(1_000_000, 999))
            .expect("fits");
        let short = q.take(&utc, &used, t, Charge::new(0, 2)).expect_err("over");
        assert_eq!(short.dimension, Dimension::Bytes);
        assert_eq!(q.view(&utc, &used, t).records, None);
    }
}
