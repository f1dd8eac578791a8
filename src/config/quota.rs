//! Calendar quotas in the configuration: a tenant's `quotas` list, and `[quotas]`, where the
//! windows' edges fall.

use serde::{Deserialize, Serialize};

use super::{whole_number, ConfigProblem};
use crate::dimension::PerDimension;
use crate::quota::{Calendar, QuotaSpec, Window};

/// One quota: at most `records` and `bytes` per calendar `window` (for example
/// `{ window = "month", records = 10_000_000, bytes = 50_000_000_000 }`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// The calendar period counted: `hour`, `day` or `month` (in `[quotas] utc_offset`).
    pub window: WindowName,
    /// Records admitted per window; unset: not counted against a limit.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub records: Option<u64>,
    /// Record bytes admitted per window (each record's key, value, headers and overhead, as
    /// the byte budgets count them); unset: not counted against a limit.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes: Option<u64>,
    /// `shadow`: the quota refuses nothing; what it would refuse is counted (metrics, usage,
    /// the status page) as `tenant_quota`, and admitted, its window's use not charged.
    #[serde(default, skip_serializing_if = "super::LimitMode::is_enforce")]
    pub mode: super::LimitMode,
}

/// A quota's window as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WindowName {
    Hour,
    Day,
    Month,
}

impl From<WindowName> for Window {
    fn from(w: WindowName) -> Self {
        match w {
            WindowName::Hour => Window::Hour,
            WindowName::Day => Window::Day,
            WindowName::Month => Window::Month,
        }
    }
}

/// Why quotas are refused where replicas share tenants without Redis: each replica counts a
/// quota alone (in memory and `[quotas] state_file`), so N replicas would each admit it whole.
/// With `[cluster] redis_url` the counts are shared in Redis (`quota::shared`).
pub const COUNTED_APART: &str = "quotas need [cluster] redis_url when replicas share the \
     registry: without it each replica would count its own (N times the quota)";

/// The largest quota: counts in Redis's scripts are exact up to 2^53 (review 1 of #41: a quota
/// of 2^63 overflowed there and admitted nothing).
pub const MAX_QUOTA: u64 = 1 << 53;

/// The most quotas one list holds: one per window kind.
pub const MAX_QUOTAS: usize = Window::ALL.len();

/// A list of quotas, checked: at most one per window, each limiting something, each limit at
/// least 1. Problems are named under `at` (`tenants[0].quotas`).
pub fn quota_specs(at: &str, quotas: &[QuotaConfig]) -> Result<Vec<QuotaSpec>, ConfigProblem> {
    let mut specs: Vec<QuotaSpec> = Vec::with_capacity(quotas.len());
    for (i, q) in quotas.iter().enumerate() {
        let window = Window::from(q.window);
        if specs.iter().any(|s| s.window == window) {
            return Err(ConfigProblem::new(
                format!("{at}[{i}].window"),
                format!("a second {} quota; at most one per window", window.as_str()),
            ));
        }
        if q.records.is_none() && q.bytes.is_none() {
            return Err(ConfigProblem::new(
                format!("{at}[{i}]"),
                "limits nothing: set records, bytes or both",
            ));
        }
        for (key, limit) in [("records", q.records), ("bytes", q.bytes)] {
            if limit == Some(0) {
                return Err(ConfigProblem::new(
                    format!("{at}[{i}].{key}"),
                    "must be at least 1",
                ));
            }
            if limit.is_some_and(|l| l > MAX_QUOTA) {
                return Err(ConfigProblem::new(
                    format!("{at}[{i}].{key}"),
                    format!(
                        "must be at most {MAX_QUOTA} (2^53: what Redis's scripts count exactly)"
                    ),
                ));
            }
        }
        specs.push(QuotaSpec {
            window,
            limit: PerDimension {
                records: q.records,
                bytes: q.bytes,
            },
            shadow: q.mode.is_shadow(),
        });
    }
    Ok(specs)
}

/// `[quotas]`: where the calendar windows of every quota turn.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QuotasConfig {
    /// The offset from UTC the windows follow, `+HH:MM` or `-HH:MM` (`+02:00`: days and months
    /// start at 22:00 UTC). A fixed offset, not a zone: daylight saving does not move it.
    /// Unset: UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utc_offset: Option<String>,
    /// Where a single replica keeps what its tenants' quota windows have used, so a restart
    /// does not hand out a fresh allowance: rewritten every `save_ms` and at shutdown (a crash
    /// loses at most `save_ms` of counts). Unset: the counts live in memory only. Not with
    /// `[cluster] redis_url`: the replicas' counts live in Redis then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_file: Option<std::path::PathBuf>,
    /// How often the counts are written to `state_file`, in milliseconds (100 to 60,000).
    #[serde(default = "default_save_ms")]
    pub save_ms: u64,
}

fn default_save_ms() -> u64 {
    1_000
}

impl Default for QuotasConfig {
    fn default() -> Self {
        Self {
            utc_offset: None,
            state_file: None,
            save_ms: default_save_ms(),
        }
    }
}

impl QuotasConfig {
    /// Problems with `save_ms`.
    /// The problems of `[quotas]`; `redis` is whether `[cluster] redis_url` is set (the
    /// counts then live in Redis, and a state file would not be read).
    pub fn problems(&self, redis: bool) -> Vec<ConfigProblem> {
        let mut problems: Vec<ConfigProblem> = self.calendar().err().into_iter().collect();
        if redis && self.state_file.is_some() {
            problems.push(ConfigProblem::new(
                "quotas.state_file",
                "is not read with [cluster] redis_url: the counts live in Redis",
            ));
        }
        if !(100..=60_000).contains(&self.save_ms) {
            problems.push(ConfigProblem::new("quotas.save_ms", "must be 100 to 60000"));
        }
        problems
    }

    /// The calendar, or the problem with `utc_offset`.
    pub fn calendar(&self) -> Result<Calendar, ConfigProblem> {
        let Some(text) = &self.utc_offset else {
            return Ok(Calendar::default());
        };
        let problem = || {
            ConfigProblem::new(
                "quotas.utc_offset",
                "must be +HH:MM or -HH:MM, within ±23:59 (for example +02:00)",
            )
        };
        let bytes = text.as_bytes();
        if bytes.len() != 6 || bytes[3] != b':' {
            return Err(problem());
        }
        let sign = match bytes[0] {
            b'+' => 1,
            b'-' => -1,
            _ => return Err(problem()),
        };
        let number = |s: &str| {
            s.parse::<i32>()
                .ok()
                .filter(|_| s.bytes().all(|b| b.is_ascii_digit()))
        };
        let (Some(h), Some(m)) = (number(&text[1..3]), number(&text[4..6])) else {
            return Err(problem());
        };
        if h > 23 || m > 59 {
            return Err(problem());
        }
        Calendar::with_offset(sign * (h * 3_600 + m * 60)).ok_or_else(problem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(window: WindowName, records: Option<u64>, bytes: Option<u64>) -> QuotaConfig {
        QuotaConfig {
            window,
            records,
            bytes,
            mode: Default::default(),
        }
    }

    #[test]
    fn a_list_is_one_quota_per_window_each_limiting_something() {
        let ok = quota_specs(
            "q",
            &[
                quota(WindowName::Day, Some(10), None),
                quota(WindowName::Month, None, Some(5)),
            ],
        )
        .expect("valid");
        assert_eq!(ok.len(), 2);
        let twice = [
            quota(WindowName::Day, Some(1), None),
            quota(WindowName::Day, Some(2), None),
        ];
        assert_eq!(
            quota_specs("q", &twice).expect_err("twice").key,
            "q[1].window"
        );
        let nothing = [quota(WindowName::Hour, None, None)];
        assert_eq!(quota_specs("q", &nothing).expect_err("nothing").key, "q[0]");
        let zero = [quota(WindowName::Hour, Some(0), None)];
        assert_eq!(
            quota_specs("q", &zero).expect_err("zero").key,
            "q[0].records"
        );
    }
    #[test]
    fn a_quota_past_what_redis_counts_exactly_is_refused() {
        let at = "tenants[a].quotas";
        let huge = quota(WindowName::Day, Some(MAX_QUOTA + 1), None);
        let e = quota_specs(at, &[huge]).expect_err("past 2^53");
        assert_eq!(e.key, "tenants[a].quotas[0].records");
        assert!(quota_specs(at, &[quota(WindowName::Day, None, Some(MAX_QUOTA))]).is_ok());
    }

    #[test]
    fn an_offset_is_plus_or_minus_hours_and_minutes() {
        let at = |s: &str| {
            QuotasConfig {
                utc_offset: Some(s.into()),
                ..QuotasConfig::default()
            }
            .calendar()
        };
        assert_eq!(
            at("+02:00").expect("valid"),
            Calendar::with_offset(7_200).expect("offset")
        );
        assert_eq!(
            at("-05:30").expect("valid"),
            Calendar::with_offset(-19_800).expect("offset")
        );
        for bad in [
            "02:00",
            "+2:00",
            "+24:00",
            "+02:60",
            "+0a:00",
            "+02-00",
            "",
            "+02:00:00",
        ] {
            assert_eq!(at(bad).expect_err(bad).key, "quotas.utc_offset", "{bad}");
        }
    }
}
