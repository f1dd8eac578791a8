//! The `[auth]` section: credentials besides API keys — JWT bearer tokens from the issuers in
//! `[[auth.jwt]]`, and how a verified client certificate (`[server] tls_client_ca_file`) names
//! its tenant (`[auth.client_cert]`) — and their validation.
//!
//! Which tenant a credential belongs to is found, in order: the tenant whose registry entry
//! lists it (`jwt_claims`, `cert_names`: changed through the admin API like keys), then the
//! section's `map`, then — only when no `map` is set — the claim value or certificate name
//! itself as a tenant id. `map = {}` therefore means "listed credentials only".

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigProblem;
use crate::identity::TenantId;

/// Credentials besides API keys.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Issuers whose JWT bearer tokens are accepted (none: only API keys and certificates).
    pub jwt: Vec<JwtIssuerConfig>,
    /// Verified tokens remembered (by SHA-256 of the token, until the token's `exp`), so a
    /// producer reusing its token pays one signature verification per token, not per request.
    pub jwt_cache_entries: usize,
    /// Largest JWKS document read from an issuer, in bytes.
    pub jwks_max_bytes: usize,
    /// How the client certificate names its tenant (with `[server] tls_client_ca_file`).
    pub client_cert: ClientCertConfig,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            jwt: Vec::new(),
            jwt_cache_entries: 100_000,
            jwks_max_bytes: 256 * 1024,
            client_cert: ClientCertConfig::default(),
        }
    }
}

/// One issuer of JWT bearer tokens.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JwtIssuerConfig {
    /// The `iss` claim, compared exactly (`https://idp.example.com/realms/prod`).
    pub issuer: String,
    /// Accepted `aud` values: a token must name at least one.
    pub audiences: Vec<String>,
    /// Where the issuer's keys are published (JWKS): `https://...`, or `http://` on loopback.
    /// Fetched at start-up, refreshed after its `Cache-Control: max-age` (within
    /// `min_refetch_s`..`refresh_s`), and refetched when a token names an unknown `kid`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// A JWKS file read at start-up instead of `jwks_url` (keys that never rotate by themselves).
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// Signature algorithms accepted: a subset of `RS256`, `ES256`, `EdDSA` (the default: all
    /// three). `none` and HMAC (`HS*`) are never accepted.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway")]
    pub leeway_s: u64,
    /// Longest time between two fetches of `jwks_url`, in seconds.
    #[serde(default = "default_refresh")]
    pub refresh_s: u64,
    /// Shortest time between two fetches, in seconds: however many tokens with unknown `kid`s
    /// arrive, the JWKS is refetched at most this often.
    #[serde(default = "default_min_refetch")]
    pub min_refetch_s: u64,
    /// Time allowed for one JWKS fetch, in milliseconds.
    #[serde(default = "default_fetch_timeout")]
    pub fetch_timeout_ms: u64,
    /// The claim whose (string) value names the tenant: `client_id` (RFC 9068), `sub`, `azp`
    /// or a custom claim.
    #[serde(default = "default_tenant_claim")]
    pub tenant_claim: String,
    /// Claim values to tenant ids. Unset: a value no tenant lists is taken as a tenant id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<BTreeMap<String, String>>,
    /// A claim listing topic patterns (an array of strings, or one space-separated string):
    /// when set and present in a token, the token may write only topics that both its patterns
    /// and its tenant's allow. It can only narrow, never widen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics_claim: Option<String>,
}

fn default_algorithms() -> Vec<String> {
    ALGORITHMS.iter().map(|a| a.to_string()).collect()
}
fn default_leeway() -> u64 {
    60
}
fn default_refresh() -> u64 {
    300
}
fn default_min_refetch() -> u64 {
    30
}
fn default_fetch_timeout() -> u64 {
    5_000
}
fn default_tenant_claim() -> String {
    "client_id".into()
}

/// The signature algorithms floodgate verifies (RFC 8725: asymmetric only).
pub const ALGORITHMS: [&str; 3] = ["RS256", "ES256", "EdDSA"];

/// Which name of a client certificate names its tenant.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CertName {
    /// A URI subject alternative name (a SPIFFE id: `spiffe://mesh/ns/acme/sa/orders`).
    #[default]
    SanUri,
    /// A DNS subject alternative name.
    SanDns,
    /// The subject's common name.
    Cn,
}

/// How a verified client certificate names its tenant.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClientCertConfig {
    /// `san_uri` (default), `san_dns` or `cn`. With several names of that kind, the first one
    /// that belongs to a tenant is taken.
    pub name: CertName,
    /// Certificate names to tenant ids. Unset: a name no tenant lists is taken as a tenant id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map: Option<BTreeMap<String, String>>,
}

/// Longest issuer, audience, claim name or value, or certificate name accepted anywhere.
pub const MAX_NAME_BYTES: usize = 512;
/// Most issuers, audiences per issuer, and map entries.
const MAX_ISSUERS: usize = 32;
const MAX_AUDIENCES: usize = 32;
const MAX_MAP_ENTRIES: usize = 100_000;

fn name_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        Some("must not be empty".into())
    } else if value.len() > MAX_NAME_BYTES {
        Some(format!("must be at most {MAX_NAME_BYTES} bytes"))
    } else if value.chars().any(char::is_control) {
        Some("must not contain control characters".into())
    } else {
        None
    }
}

fn map_problems(at: &str, map: &BTreeMap<String, String>) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    if map.len() > MAX_MAP_ENTRIES {
        problems.push(ConfigProblem::new(
            at,
            format!("has more than {MAX_MAP_ENTRIES} entries"),
        ));
    }
    for (from, to) in map {
        if let Some(p) = name_problem(from) {
            problems.push(ConfigProblem::new(format!("{at}.{from:?}"), p));
        }
        if let Some(p) = TenantId::problem(to) {
            problems.push(ConfigProblem::new(
                format!("{at}.{from:?}"),
                format!("the tenant id {p}"),
            ));
        }
    }
    problems
}

/// Whether `url` may be fetched: HTTPS anywhere, plain HTTP only on loopback.
pub fn jwks_url_problem(url: &str) -> Option<String> {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return Some("is not a URL".into());
    };
    let Some(host) = parsed.host_str() else {
        return Some("has no host".into());
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" => None,
        "http" if loopback => None,
        "http" => Some("must be https:// (plain http:// only on loopback)".into()),
        other => Some(format!("scheme {other:?} is not https")),
    }
}

impl AuthConfig {
    pub fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if self.jwt.len() > MAX_ISSUERS {
            problems.push(ConfigProblem::new(
                "auth.jwt",
                format!("at most {MAX_ISSUERS} issuers"),
            ));
        }
        if !(1..=10_000_000).contains(&self.jwt_cache_entries) {
            problems.push(ConfigProblem::new(
                "auth.jwt_cache_entries",
                "must be between 1 and 10000000",
            ));
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.jwks_max_bytes) {
            problems.push(ConfigProblem::new(
                "auth.jwks_max_bytes",
                "must be between 1024 and 16777216",
            ));
        }
        let mut issuers = HashSet::new();
        for (i, jwt) in self.jwt.iter().enumerate() {
            let at = format!("auth.jwt[{i}]");
            if !issuers.insert(jwt.issuer.as_str()) {
                problems.push(ConfigProblem::new(
                    format!("{at}.issuer"),
                    "is configured twice",
                ));
            }
            problems.extend(jwt.problems(&at));
        }
        if let Some(map) = &self.client_cert.map {
            problems.extend(map_problems("auth.client_cert.map", map));
        }
        problems
    }

    /// Whether an issuer is configured.
    pub fn has_issuer(&self, issuer: &str) -> bool {
        self.jwt.iter().any(|j| j.issuer == issuer)
    }

    /// Valid but probably not meant: an issuer (or the client certificates) without a `map`
    /// takes any claim value (certificate name) no tenant lists as a tenant id, so whoever can
    /// shape that value at the IdP or the CA (a `sub`, a username, a SAN) names any tenant.
    /// `client_certs`: whether the listener verifies client certificates.
    pub fn warnings(&self, client_certs: bool) -> Vec<ConfigProblem> {
        let mut out: Vec<ConfigProblem> = self
            .jwt
            .iter()
            .enumerate()
            .filter(|(_, j)| j.map.is_none())
            .map(|(i, j)| {
                ConfigProblem::new(
                    format!("auth.jwt[{i}].map"),
                    format!(
                        "is not set: a {:?} value no tenant lists in jwt_claims is taken as a                          tenant id, so a token naming any tenant's id acts as that tenant; set a                          map (or list every claim in the tenants' jwt_claims) unless {:?}                          values are under your control",
                        j.tenant_claim, j.issuer
                    ),
                )
            })
            .collect();
        if self.client_cert.map.is_none() && client_certs {
            out.push(ConfigProblem::new(
                "auth.client_cert.map",
                "is not set: a certificate name no tenant lists in cert_names is taken as a \
                 tenant id, so a certificate naming any tenant's id acts as that tenant",
            ));
        }
        out
    }
}

impl JwtIssuerConfig {
    fn problems(&self, at: &str) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let mut push =
            |key: &str, p: String| problems.push(ConfigProblem::new(format!("{at}.{key}"), p));
        if let Some(p) = name_problem(&self.issuer) {
            push("issuer", p);
        }
        if self.audiences.is_empty() {
            push(
                "audiences",
                "must name at least one audience (RFC 8725: check aud)".into(),
            );
        }
        if self.audiences.len() > MAX_AUDIENCES {
            push("audiences", format!("at most {MAX_AUDIENCES}"));
        }
        for (i, a) in self.audiences.iter().enumerate() {
            if let Some(p) = name_problem(a) {
                push(&format!("audiences[{i}]"), p);
            }
        }
        match (&self.jwks_url, &self.jwks_file) {
            (Some(url), None) => {
                if let Some(p) = jwks_url_problem(url) {
                    push("jwks_url", p);
                }
            }
            (None, Some(_)) => {}
            _ => push(
                "jwks_url",
                "set exactly one of jwks_url and jwks_file".into(),
            ),
        }
        if self.algorithms.is_empty() {
            push(
                "algorithms",
                "must list at least one of RS256, ES256, EdDSA".into(),
            );
        }
        let mut seen = HashSet::new();
        for (i, alg) in self.algorithms.iter().enumerate() {
            if !ALGORITHMS.contains(&alg.as_str()) {
                push(
                    &format!("algorithms[{i}]"),
                    format!(
                        "{alg:?} is not accepted: only RS256, ES256 and EdDSA (never none or HS*)"
                    ),
                );
            } else if !seen.insert(alg.as_str()) {
                push(&format!("algorithms[{i}]"), "is listed twice".into());
            }
        }
        if self.leeway_s > 600 {
            push("leeway_s", "must be at most 600".into());
        }
        if !(1..=86_400).contains(&self.min_refetch_s) {
            push("min_refetch_s", "must be between 1 and 86400".into());
        }
        if self.refresh_s < self.min_refetch_s || self.refresh_s > 7 * 86_400 {
            push(
                "refresh_s",
                "must be at least min_refetch_s and at most 604800".into(),
            );
        }
        if !(100..=60_000).contains(&self.fetch_timeout_ms) {
            push("fetch_timeout_ms", "must be between 100 and 60000".into());
        }
        if let Some(p) = name_problem(&self.tenant_claim) {
            push("tenant_claim", p);
        }
        if let Some(claim) = &self.topics_claim {
            if let Some(p) = name_problem(claim) {
                push("topics_claim", p);
            }
        }
        if let Some(map) = &self.map {
            problems.extend(map_problems(&format!("{at}.map"), map));
        }
        problems
    }
}
