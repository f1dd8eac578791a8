//! `[[tenants]]`: one tenant's keys, topics, budgets and priority, its validation, and the
//! problems that span tenants.

use serde::{Deserialize, Serialize};

use super::{budget_spec, topic_pattern_problems, whole_number, ConfigProblem};
use crate::budget::BudgetSpec;
use crate::identity::{ApiKeyHash, TenantId};

/// One tenant. `Default` is a tenant with no id, no keys and no topics (invalid until those are
/// set), so code and tests write only the fields they care about.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Stable identifier, used in logs, metrics and the admin API.
    pub id: String,
    /// Lowercase hex SHA-256 digests of the tenant's API keys (`printf %s KEY | sha256sum`).
    #[serde(default, deserialize_with = "exact_strings")]
    pub api_key_sha256: Vec<String>,
    /// Patterns of the topics the tenant may write: topic-name characters and the wildcards
    /// `*` (any run of characters) and `?` (one character); 1 to 100 patterns.
    #[serde(deserialize_with = "exact_strings")]
    pub topics: Vec<String>,
    /// Records per second; unset: limited by the global budget only.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub records_per_sec: Option<u64>,
    /// Records the bucket holds (defaults to one second of `records_per_sec`).
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub records_burst: Option<u64>,
    /// Record bytes per second; unset: limited by the global budget only.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_per_sec: Option<u64>,
    /// Bytes the bucket holds (defaults to one second of `bytes_per_sec`).
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_burst: Option<u64>,
    /// Calendar quotas: records and bytes per hour, day or month, at most one per window
    /// (`[{ window = "month", records = 10_000_000, bytes = 50_000_000_000 }]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<super::QuotaConfig>,
    /// `shadow`: the tenant's records and bytes budgets refuse nothing; what they would refuse
    /// is counted (metrics, usage, the status page) with its reason, and admitted.
    #[serde(default, skip_serializing_if = "super::LimitMode::is_enforce")]
    pub budget_mode: super::LimitMode,
    /// Largest fraction of the downstream buffer (bytes and records) this tenant may hold.
    #[serde(default)]
    pub max_buffer_share: Option<f64>,
    /// Who is refused first when the adaptive limit (`[adaptive]`) is below demand: `batch`,
    /// then `standard` (the default); `critical` keeps a reserved share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// JWT bearer tokens this tenant accepts: an issuer of `[[auth.jwt]]` and the value of that
    /// issuer's `tenant_claim` (`{ issuer = "https://idp.example.com", value = "orders-svc" }`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jwt_claims: Vec<JwtClaim>,
    /// Client-certificate names this tenant accepts (the kind `[auth.client_cert] name` picks:
    /// a SAN URI such as a SPIFFE id, a SAN DNS name, or the subject CN).
    #[serde(
        default,
        deserialize_with = "exact_strings",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub cert_names: Vec<String>,
}

/// A JWT a tenant accepts: its issuer and the value of the issuer's tenant claim.
#[derive(
    Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct JwtClaim {
    /// An issuer of `[[auth.jwt]]` (its `issuer`).
    pub issuer: String,
    /// The value of that issuer's `tenant_claim` that names this tenant.
    pub value: String,
}

/// Most JWT claims and certificate names one tenant lists.
pub const MAX_CREDENTIAL_NAMES: usize = 100;

/// A list of strings without the spare room a growing vector keeps: a tenant's keys and
/// patterns are one or two strings each, and four slots each would be 12 MB at 100,000 tenants.
fn exact_strings<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let mut list = Vec::<String>::deserialize(d)?;
    list.shrink_to_fit();
    Ok(list)
}

/// A tenant's priority class under the adaptive limit.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Critical,
    #[default]
    Standard,
    Batch,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Critical, Priority::Standard, Priority::Batch];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Standard => "standard",
            Priority::Batch => "batch",
        }
    }
}

/// Default `max_buffer_share` when a tenant does not set one.
pub const DEFAULT_BUFFER_SHARE: f64 = 0.5;

impl TenantConfig {
    /// The tenant's budget, or the key of the first invalid value.
    pub fn spec(&self) -> Result<BudgetSpec, ConfigProblem> {
        budget_spec(
            &format!("tenants[{}]", self.id),
            self.records_per_sec,
            self.records_burst,
            self.bytes_per_sec,
            self.bytes_burst,
        )
    }

    pub fn buffer_share(&self) -> f64 {
        self.max_buffer_share.unwrap_or(DEFAULT_BUFFER_SHARE)
    }

    /// The key digests, parsed (invalid ones are skipped: [`TenantConfig::problems`] reports
    /// them).
    pub fn key_digests(&self) -> impl Iterator<Item = ApiKeyHash> + '_ {
        self.api_key_sha256
            .iter()
            .filter_map(|h| ApiKeyHash::from_hex(h))
    }

    /// Every semantic problem with this tenant, keys prefixed by `at` (`tenants[0]`).
    pub fn problems(&self, at: &str) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if let Some(p) = TenantId::problem(&self.id) {
            problems.push(ConfigProblem::new(format!("{at}.id"), p));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, h) in self.api_key_sha256.iter().enumerate() {
            match ApiKeyHash::from_hex(h) {
                None => problems.push(ConfigProblem::new(
                    format!("{at}.api_key_sha256[{i}]"),
                    "must be 64 lowercase hex digits (the SHA-256 of the key)",
                )),
                Some(d) if !seen.insert(d) => problems.push(ConfigProblem::new(
                    format!("{at}.api_key_sha256[{i}]"),
                    "is listed twice",
                )),
                Some(_) => {}
            }
        }
        problems.extend(self.credential_problems(at));
        problems.extend(topic_pattern_problems(at, &self.topics));
        if let Err(mut p) = self.spec() {
            p.key = p.key.replacen(&format!("tenants[{}]", self.id), at, 1);
            problems.push(p);
        }
        if let Err(p) = super::quota_specs(&format!("{at}.quotas"), &self.quotas) {
            problems.push(p);
        }
        if let Some(share) = self.max_buffer_share {
            if !(share > 0.0 && share <= 1.0) {
                problems.push(ConfigProblem::new(
                    format!("{at}.max_buffer_share"),
                    "must be greater than 0 and at most 1",
                ));
            }
        }
        problems
    }
}

impl TenantConfig {
    fn credential_problems(&self, at: &str) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let name = |v: &str| {
            if v.is_empty() || v.len() > super::MAX_NAME_BYTES || v.chars().any(char::is_control) {
                Some(format!(
                    "must be 1 to {} bytes without control characters",
                    super::MAX_NAME_BYTES
                ))
            } else {
                None
            }
        };
        for (list, len) in [
            ("jwt_claims", self.jwt_claims.len()),
            ("cert_names", self.cert_names.len()),
        ] {
            if len > MAX_CREDENTIAL_NAMES {
                problems.push(ConfigProblem::new(
                    format!("{at}.{list}"),
                    format!("at most {MAX_CREDENTIAL_NAMES} entries"),
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (i, c) in self.jwt_claims.iter().enumerate() {
            for (field, v) in [("issuer", &c.issuer), ("value", &c.value)] {
                if let Some(p) = name(v) {
                    problems.push(ConfigProblem::new(
                        format!("{at}.jwt_claims[{i}].{field}"),
                        p,
                    ));
                }
            }
            if !seen.insert(c) {
                problems.push(ConfigProblem::new(
                    format!("{at}.jwt_claims[{i}]"),
                    "is listed twice",
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (i, n) in self.cert_names.iter().enumerate() {
            if let Some(p) = name(n) {
                problems.push(ConfigProblem::new(format!("{at}.cert_names[{i}]"), p));
            } else if !seen.insert(n) {
                problems.push(ConfigProblem::new(
                    format!("{at}.cert_names[{i}]"),
                    "is listed twice",
                ));
            }
        }
        problems
    }
}

/// Problems that span tenants: a tenant id used twice, and a key digest held by two tenants
/// (which of them a request authenticates as would be a guess). `tenants` yields each
/// tenant with the key prefix its problems are reported under.
pub fn cross_tenant_problems<'a>(
    tenants: impl IntoIterator<Item = (String, &'a TenantConfig)>,
) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    let mut ids = std::collections::HashSet::new();
    let mut owners: std::collections::HashMap<ApiKeyHash, &str> = Default::default();
    let mut claims: std::collections::HashMap<&JwtClaim, &str> = Default::default();
    let mut certs: std::collections::HashMap<&str, &str> = Default::default();
    for (at, t) in tenants {
        // Like a key, a token or certificate name belongs to one tenant at most.
        for (i, c) in t.jwt_claims.iter().enumerate() {
            match claims.insert(c, t.id.as_str()) {
                Some(owner) if owner != t.id => problems.push(ConfigProblem::new(
                    format!("{at}.jwt_claims[{i}]"),
                    format!("this claim already belongs to tenant {owner:?}"),
                )),
                _ => {}
            }
        }
        for (i, n) in t.cert_names.iter().enumerate() {
            match certs.insert(n.as_str(), t.id.as_str()) {
                Some(owner) if owner != t.id => problems.push(ConfigProblem::new(
                    format!("{at}.cert_names[{i}]"),
                    format!("this certificate name already belongs to tenant {owner:?}"),
                )),
                _ => {}
            }
        }
        if !ids.insert(t.id.as_str()) {
            problems.push(ConfigProblem::new(
                format!("{at}.id"),
                format!("duplicate tenant id {:?}", t.id),
            ));
        }
        for (i, digest) in t.api_key_sha256.iter().enumerate() {
            let Some(d) = ApiKeyHash::from_hex(digest) else {
                continue;
            };
            match owners.get(&d) {
                Some(owner) if *owner != t.id => problems.push(ConfigProblem::new(
                    format!("{at}.api_key_sha256[{i}]"),
                    format!("this key already belongs to tenant {owner:?}"),
                )),
                _ => {
                    owners.insert(d, t.id.as_str());
                }
            }
        }
    }
    problems
}
