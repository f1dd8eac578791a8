//! `[global]` (the broker-protection budget) and the checks every budget's rates share.

use serde::{Deserialize, Serialize};

use super::ConfigProblem;
use crate::budget::{BudgetSpec, RateSpec};

/// The global broker-protection budget; unset rates mean "unlimited".
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GlobalBudgetConfig {
    /// Records per second summed over all tenants.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub records_per_sec: Option<u64>,
    /// Records the global bucket can hold (defaults to one second of `records_per_sec`).
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub records_burst: Option<u64>,
    /// Record bytes per second summed over all tenants.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_per_sec: Option<u64>,
    /// Bytes the global bucket can hold (defaults to one second of `bytes_per_sec`).
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_burst: Option<u64>,
    /// Leave the global buckets out of every tenant's `RateLimit` fields, so no tenant learns
    /// how much the others are sending. A refusal for the global budget still says
    /// `global_records` / `global_bytes`, with its `Retry-After`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hide_from_tenants: bool,
    /// `shadow`: the global budget refuses nothing; what it would refuse is counted (metrics,
    /// usage, the status page) with its reason, and admitted.
    #[serde(default, skip_serializing_if = "LimitMode::is_enforce")]
    pub mode: LimitMode,
    /// Calendar quotas on what all tenants send together, at most one per window kind (for
    /// example `[{ window = "month", bytes = 50_000_000_000_000 }]`); refused as
    /// `global_quota`. Each has its own `mode`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<super::QuotaConfig>,
}

/// Whether a limit refuses (`enforce`, the default) or only counts what it would refuse
/// (`shadow`): how a new, tighter limit is rolled out without refusing anyone first.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LimitMode {
    #[default]
    Enforce,
    Shadow,
}

impl LimitMode {
    pub fn is_enforce(&self) -> bool {
        *self == LimitMode::Enforce
    }

    pub fn is_shadow(self) -> bool {
        self == LimitMode::Shadow
    }
}

impl GlobalBudgetConfig {
    /// The budget this section describes, or the key of the first invalid value (its quotas
    /// included: every check of the section goes through here).
    pub fn spec(&self) -> Result<BudgetSpec, ConfigProblem> {
        self.quota_specs()?;
        budget_spec(
            "global",
            self.records_per_sec,
            self.records_burst,
            self.bytes_per_sec,
            self.bytes_burst,
        )
    }

    /// The global quotas, or the key of the first invalid value.
    pub fn quota_specs(&self) -> Result<std::sync::Arc<[crate::quota::QuotaSpec]>, ConfigProblem> {
        super::quota_specs("global.quotas", &self.quotas).map(Into::into)
    }
}

/// A budget's rates from a section's four keys, each problem named under `prefix`.
pub(crate) fn budget_spec(
    prefix: &str,
    records_per_sec: Option<u64>,
    records_burst: Option<u64>,
    bytes_per_sec: Option<u64>,
    bytes_burst: Option<u64>,
) -> Result<BudgetSpec, ConfigProblem> {
    let records = rate_spec(prefix, "records", records_per_sec, records_burst)?;
    let bytes = rate_spec(prefix, "bytes", bytes_per_sec, bytes_burst)?;
    Ok(BudgetSpec { records, bytes })
}

fn rate_spec(
    prefix: &str,
    unit: &str,
    per_sec: Option<u64>,
    burst: Option<u64>,
) -> Result<Option<RateSpec>, ConfigProblem> {
    match (per_sec, burst) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ConfigProblem::new(
            format!("{prefix}.{unit}_burst"),
            format!("is set without {unit}_per_sec"),
        )),
        (Some(0), _) => Err(ConfigProblem::new(
            format!("{prefix}.{unit}_per_sec"),
            "must be at least 1",
        )),
        (Some(_), Some(0)) => Err(ConfigProblem::new(
            format!("{prefix}.{unit}_burst"),
            "must be at least 1",
        )),
        (Some(rate), burst) => {
            let spec = RateSpec {
                per_sec: rate,
                burst: burst.unwrap_or(rate),
            };
            let overhead = crate::record::RECORD_OVERHEAD_BYTES;
            match spec.problem() {
                Some(problem) => Err(ConfigProblem::new(
                    format!("{prefix}.{unit}_per_sec"),
                    problem,
                )),
                // Every record costs its overhead besides its key, value and headers: a bucket
                // smaller than that could never admit one.
                None if unit == "bytes" && spec.burst < overhead => Err(ConfigProblem::new(
                    format!("{prefix}.bytes_burst"),
                    format!(
                        "must be at least {overhead} (every record costs {overhead} bytes of \
                         overhead besides its key, value and headers, so a smaller bucket could \
                         never admit one){}",
                        if burst.is_none() {
                            "; unset, it is bytes_per_sec"
                        } else {
                            ""
                        }
                    ),
                )),
                None => Ok(Some(spec)),
            }
        }
    }
}

/// An optional count written as a whole number: `82`, or `82.0` as some JSON writers and
/// generators put it. A fraction, a negative, a value beyond `u64` or an explicit `null` is an
/// error (an unset count is left out; the admin API's merge patch unsets with `null` before
/// this runs).
pub fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Whole(u64),
        Float(f64),
    }
    match Option::<Number>::deserialize(d)? {
        None => Err(serde::de::Error::custom(
            "null is not a number; leave the field out to unset it",
        )),
        Some(Number::Whole(n)) => Ok(Some(n)),
        Some(Number::Float(x)) if x.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&x) => {
            Ok(Some(x as u64))
        }
        Some(Number::Float(x)) => Err(serde::de::Error::custom(format_args!(
            "{x} is not a whole number of at least 0"
        ))),
    }
}
