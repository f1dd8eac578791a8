//! Who a request is: the one seam where a credential — an API key, a JWT bearer token or a
//! verified client certificate — becomes an [`Identity`] (a tenant, and what the credential
//! allows). The pipeline's authenticate step calls [`Authenticator::identify`] for every wire
//! format, so budgets, topic patterns, the auth-failure limiter, metrics and the status page see
//! the same tenant whatever the credential.
//!
//! Which credential counts: the `Authorization` header when there is one (`Bearer <API key>`,
//! `Basic base64(user:<API key>)`, or `Bearer <JWT>`), otherwise the connection's verified
//! client certificate. A bearer value is looked up as an API key first (one SHA-256, the same
//! digest the token cache is keyed by), then read as a JWT if it has a JWT's shape and issuers
//! are configured.
//!
//! A token or certificate that is valid but belongs to no tenant is answered **403
//! `unknown_tenant`**, not 401: the credential was proven, so asking for another one (what a
//! 401 challenge means, RFC 6750 §3.1) would not help; the operator must map it. It still counts
//! as a failed authentication for the address's limit.
//!
//! Tokens are never logged or echoed; errors name the problem only.
//!
//! Layer: decisions and state. Imports tenants, configuration and the foundations (`tls`'s
//! client certificate, `identity`, the budget clock).

pub mod cache;
mod caller;
mod error;
pub mod jwks;
pub mod jwt;
mod token;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap};
use sha2::Digest as _;

use crate::budget::Clock;
use crate::config::{AuthConfig, CertName, JwtIssuerConfig};
use crate::identity::ApiKeyHash;
use crate::tenant::{Directory, Tenant, Tenants};
use crate::tls::ClientCertificate;

use cache::TokenCache;
use jwks::{KeySource, SourceSettings};

pub use caller::{Caller, Credential, Identity, Method, VerifiedToken};
pub use error::{AuthError, TokenProblem};
use token::TokenEntry;

/// One issuer, ready to verify.
#[derive(Debug)]
struct Issuer {
    config: JwtIssuerConfig,
    keys: Arc<KeySource>,
}

/// Authentications by method and outcome code, for `/metrics`.
#[derive(Debug, Default)]
pub struct AuthCounts {
    counts: parking_lot::Mutex<HashMap<(Method, &'static str), u64>>,
}

impl AuthCounts {
    fn count(&self, method: Method, outcome: &'static str) {
        *self.counts.lock().entry((method, outcome)).or_default() += 1;
    }

    /// Every (method, outcome, count) seen so far.
    pub fn snapshot(&self) -> Vec<(Method, &'static str, u64)> {
        let mut out: Vec<_> = self
            .counts
            .lock()
            .iter()
            .map(|((m, o), n)| (*m, *o, *n))
            .collect();
        out.sort_by_key(|(m, o, _)| (m.as_str(), *o));
        out
    }
}

/// Turns credentials into identities.
#[derive(Debug)]
pub struct Authenticator {
    issuers: Vec<Issuer>,
    by_issuer: HashMap<String, usize>,
    cache: TokenCache<TokenEntry>,
    cert_name: CertName,
    cert_map: Option<HashMap<String, String>>,
    clock: Arc<dyn Clock>,
    pub counts: AuthCounts,
    /// Signature verifications made (cache misses that got that far).
    pub verifications: AtomicU64,
}

/// Why the authenticator could not be built.
#[derive(Debug, thiserror::Error)]
#[error("auth.jwt[{index}]: {detail}")]
pub struct AuthBuildError {
    pub index: usize,
    pub detail: String,
}

impl Authenticator {
    /// From `[auth]` (already validated). JWKS files are read here; URLs are fetched by
    /// [`Authenticator::start`] and on demand.
    pub fn new(config: &AuthConfig, clock: Arc<dyn Clock>) -> Result<Self, AuthBuildError> {
        let mut issuers = Vec::with_capacity(config.jwt.len());
        let mut by_issuer = HashMap::new();
        for (index, jwt) in config.jwt.iter().enumerate() {
            let settings = SourceSettings {
                allowed: jwt
                    .algorithms
                    .iter()
                    .filter_map(|a| match a.as_str() {
                        "RS256" => Some(jsonwebtoken::Algorithm::RS256),
                        "ES256" => Some(jsonwebtoken::Algorithm::ES256),
                        "EdDSA" => Some(jsonwebtoken::Algorithm::EdDSA),
                        _ => None,
                    })
                    .collect(),
                min_refetch: Duration::from_secs(jwt.min_refetch_s),
                refresh: Duration::from_secs(jwt.refresh_s),
                fetch_timeout: Duration::from_millis(jwt.fetch_timeout_ms),
                max_bytes: config.jwks_max_bytes,
            };
            let error = |detail: String| AuthBuildError { index, detail };
            let keys = match (&jwt.jwks_url, &jwt.jwks_file) {
                (Some(url), _) => {
                    KeySource::from_url(url, settings, clock.clone()).map_err(error)?
                }
                (None, Some(path)) => {
                    let bytes = std::fs::read(path)
                        .map_err(|e| error(format!("jwks_file {}: {e}", path.display())))?;
                    if bytes.len() > config.jwks_max_bytes {
                        return Err(error(format!(
                            "jwks_file {} is larger than auth.jwks_max_bytes",
                            path.display()
                        )));
                    }
                    KeySource::from_document(&bytes, settings, clock.clone())
                        .map_err(|e| error(format!("jwks_file {}: {e}", path.display())))?
                }
                (None, None) => return Err(error("no jwks_url or jwks_file".into())),
            };
            by_issuer.insert(jwt.issuer.clone(), index);
            issuers.push(Issuer {
                config: jwt.clone(),
                keys: Arc::new(keys),
            });
        }
        Ok(Self {
            issuers,
            by_issuer,
            cache: TokenCache::new(config.jwt_cache_entries),
            cert_name: config.client_cert.name,
            cert_map: config
                .client_cert
                .map
                .as_ref()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            clock,
            counts: AuthCounts::default(),
            verifications: AtomicU64::new(0),
        })
    }

    /// Starts keeping every remote JWKS fresh (one task per issuer, aborted with the handles).
    pub fn start(&self) -> Vec<tokio::task::AbortHandle> {
        self.issuers
            .iter()
            .filter(|i| i.keys.is_remote())
            .map(|i| tokio::spawn(i.keys.clone().refresh_forever()).abort_handle())
            .collect()
    }

    /// The key source of issuer `index` (tests and metrics).
    pub fn key_source(&self, index: usize) -> Option<&Arc<KeySource>> {
        self.issuers.get(index).map(|i| &i.keys)
    }

    /// The configured issuers' `iss` values, in `[[auth.jwt]]` order.
    pub fn issuer_names(&self) -> Vec<String> {
        self.issuers
            .iter()
            .map(|i| i.config.issuer.clone())
            .collect()
    }

    /// Verified tokens remembered now.
    pub fn cached_tokens(&self) -> usize {
        self.cache.len()
    }

    /// The identity of a request, from its `Authorization` header or its client certificate.
    /// Counts the outcome by method.
    pub async fn identify(
        &self,
        tenants: &Tenants,
        caller: &Caller,
        headers: &HeaderMap,
    ) -> Result<Identity, AuthError> {
        self.identify_held(tenants, caller, headers, &|| None).await
    }

    /// [`Authenticator::identify`], with `held`: how long the caller's allowance of failed
    /// authentications stays spent, if it is. Asked only before checking the signature of a
    /// token not in the cache — the one costly step only a valid credential earns — which is
    /// then refused (`AuthError::Held`) instead. A cached token, an API key or a certificate
    /// is never refused for it.
    pub async fn identify_held(
        &self,
        tenants: &Tenants,
        caller: &Caller,
        headers: &HeaderMap,
        held: &(dyn Fn() -> Option<Duration> + Sync),
    ) -> Result<Identity, AuthError> {
        let (method, result) = self
            .identify_uncounted(tenants, caller, headers, held)
            .await;
        self.counts.count(
            method,
            match &result {
                Ok(_) => "ok",
                Err(e) => e.code(),
            },
        );
        result
    }

    async fn identify_uncounted(
        &self,
        tenants: &Tenants,
        caller: &Caller,
        headers: &HeaderMap,
        held: &(dyn Fn() -> Option<Duration> + Sync),
    ) -> (Method, Result<Identity, AuthError>) {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return match &caller.cert {
                Some(cert) => (Method::ClientCert, self.by_certificate(tenants, cert)),
                None => (Method::None, Err(AuthError::Unauthorized)),
            };
        };
        let Some((bearer, presented)) = value.to_str().ok().and_then(presented_key) else {
            return (Method::ApiKey, Err(AuthError::Unauthorized));
        };
        let as_key = !presented.is_empty() && presented.len() <= MAX_KEY_BYTES;
        let as_jwt = bearer && !self.issuers.is_empty() && jwt::looks_like_jwt(&presented);
        if !as_key && !as_jwt {
            return (Method::ApiKey, Err(AuthError::Unauthorized));
        }
        // One digest for both: the key registry's and the token cache's.
        let digest = sha256(&presented);
        if as_key {
            let key = ApiKeyHash::from_bytes(digest);
            if let Some(tenant) = tenants.load().by_digest(&key) {
                return (
                    Method::ApiKey,
                    Ok(Identity {
                        tenant: tenant.clone(),
                        credential: Credential::ApiKey(key),
                    }),
                );
            }
        }
        if as_jwt {
            return (
                Method::Jwt,
                self.by_token(tenants, &presented, digest, (held, caller.ip))
                    .await,
            );
        }
        (Method::ApiKey, Err(AuthError::Unauthorized))
    }

    /// A client certificate's tenant: the first of its names (of the configured kind) that
    /// belongs to one.
    fn by_certificate(
        &self,
        tenants: &Tenants,
        cert: &Arc<ClientCertificate>,
    ) -> Result<Identity, AuthError> {
        let directory = tenants.load();
        let tenant = self.resolve_certificate(&directory, cert)?;
        Ok(Identity {
            tenant,
            credential: Credential::Certificate(cert.clone()),
        })
    }

    fn resolve_certificate(
        &self,
        directory: &Directory,
        cert: &ClientCertificate,
    ) -> Result<Arc<Tenant>, AuthError> {
        if i64::try_from(self.clock.unix_s()).unwrap_or(i64::MAX) > cert.not_after_unix {
            return Err(AuthError::CertificateExpired);
        }
        let names: &[String] = match self.cert_name {
            CertName::SanUri => &cert.uris,
            CertName::SanDns => &cert.dns,
            CertName::Cn => cert.cn.as_slice(),
        };
        names
            .iter()
            .find_map(|name| {
                directory.by_cert(name).or_else(|| match &self.cert_map {
                    Some(map) => directory.get(map.get(name)?),
                    None => directory.get(name),
                })
            })
            .cloned()
            .ok_or(AuthError::UnknownTenant(Method::ClientCert))
    }

    /// Whether an identity still holds under the registry now: the credential still belongs to
    /// the same tenant and has not expired (an open stream asks on every registry change and
    /// every second).
    /// Changes of every issuer's key set so far: what a holder of a long-lived credential (an
    /// open stream) compares to see in one load whether a key may have been withdrawn.
    pub fn keys_generation(&self) -> u64 {
        self.issuers
            .iter()
            .map(|i| i.keys.generation())
            .fold(0, u64::wrapping_add)
    }

    pub fn still_valid(&self, directory: &Directory, identity: &Identity) -> Result<(), AuthError> {
        let same = |t: Option<&Arc<Tenant>>| t.is_some_and(|t| Arc::ptr_eq(t, &identity.tenant));
        match &identity.credential {
            Credential::ApiKey(digest) => same(directory.by_digest(digest))
                .then_some(())
                .ok_or(AuthError::Unauthorized),
            Credential::Jwt(token) => {
                if self.clock.unix_s() >= token.until_s {
                    return Err(AuthError::Token(TokenProblem::Expired));
                }
                // The issuer withdrew the key that signed it (a leaked key): the stream ends as
                // a new request with the token would be refused.
                let withdrawn = self.issuers.get(token.issuer).is_some_and(|issuer| {
                    issuer.keys.generation() != token.keys_generation
                        && !issuer.keys.holds(&token.key_id)
                });
                if withdrawn {
                    return Err(AuthError::Token(TokenProblem::UnknownKey(
                        "the key that signed the token was withdrawn by its issuer".into(),
                    )));
                }
                same(self.resolve_token(directory, token).as_ref())
                    .then_some(())
                    .ok_or(AuthError::UnknownTenant(Method::Jwt))
            }
            Credential::Certificate(cert) => {
                let tenant = self.resolve_certificate(directory, cert)?;
                same(Some(&tenant))
                    .then_some(())
                    .ok_or(AuthError::UnknownTenant(Method::ClientCert))
            }
        }
    }
}

fn sha256(text: &str) -> [u8; 32] {
    sha2::Sha256::digest(text.as_bytes()).into()
}

/// Longest API key that is looked up: a key is tens of characters; a header of kilobytes is not
/// a key, and hashing it for every request of a flood would cost the gateway for nothing.
const MAX_KEY_BYTES: usize = 512;

/// The credential in an `Authorization` value, and whether it came as a bearer token: `Bearer
/// VALUE`, or `Basic base64(USER:KEY)` for clients that only speak Basic (Confluent Cloud's, for
/// one); the user name is not checked.
fn presented_key(value: &str) -> Option<(bool, std::borrow::Cow<'_, str>)> {
    let (scheme, rest) = value.split_once(' ')?;
    if scheme.eq_ignore_ascii_case("bearer") {
        // Borrowed: no copy of the key per request.
        return Some((true, std::borrow::Cow::Borrowed(rest.trim())));
    }
    if !scheme.eq_ignore_ascii_case("basic") || rest.len() > 4 * MAX_KEY_BYTES {
        return None;
    }
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_user, key) = text.split_once(':')?;
    Some((false, std::borrow::Cow::Owned(key.to_string())))
}

#[cfg(test)]
mod tests;
