//! Calendar windows, month lengths and leap days, and what a quota takes.
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
