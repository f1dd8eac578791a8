//! JWT bearer tokens: verified once, then served from the token cache until their `exp`,
//! and resolved to a tenant again whenever the registry changes.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::cache::Cached;
use super::jwks::{Fetched, Lookup};
use super::{
    jwt, AuthError, Authenticator, Credential, Identity, Method, TokenProblem, VerifiedToken,
};
use crate::tenant::{Directory, Tenant, Tenants};

/// A token's cache entry: the verification, and the tenant it resolved to under a registry
/// generation (resolved again when the registry changes).
#[derive(Debug)]
pub(super) struct TokenEntry {
    pub(super) token: Arc<VerifiedToken>,
    /// The issuer's key-set generation it was verified under.
    pub(super) keys_generation: u64,
    pub(super) generation: u64,
    pub(super) tenant: Option<Arc<Tenant>>,
}

/// Most bytes a cached token's compiled topics claim may hold (see `footprint`): bounds the
/// token cache at `jwt_cache_entries` × (a few hundred bytes + this).
const MAX_CACHED_TOPICS_BYTES: usize = 1024;

impl Authenticator {
    /// A JWT: from the cache, or verified and remembered until its `exp`.
    pub(super) async fn by_token(
        &self,
        tenants: &Tenants,
        token: &str,
        digest: [u8; 32],
        (held, source): (
            &(dyn Fn() -> Option<std::time::Duration> + Sync),
            Option<std::net::IpAddr>,
        ),
    ) -> Result<Identity, AuthError> {
        let now = self.clock.unix_s();
        let generation = tenants.generation();
        let hit = self.cache.with(&digest, now, |entry| {
            let keys = self.issuers.get(entry.token.issuer)?.keys.generation();
            if keys != entry.keys_generation {
                // The issuer's keys changed since: verify again (the key may be gone).
                return None;
            }
            if entry.generation != generation {
                entry.tenant = self.resolve_token(&tenants.load(), &entry.token);
                entry.generation = generation;
            }
            Some((entry.token.clone(), entry.tenant.clone()))
        });
        let (token, tenant) = match hit {
            Cached::Live(Some(found)) => found,
            Cached::Expired => return Err(AuthError::Token(TokenProblem::Expired)),
            Cached::Live(None) | Cached::Missing => {
                // Not verified before (or under older keys): an address over its allowance of
                // failures gets no signature check, the costly step of a guess.
                if let Some(wait) = held() {
                    return Err(AuthError::Held(wait));
                }
                let (verified, keys_generation) = self.verify(token, now, source).await?;
                let verified = Arc::new(verified);
                let tenant = self.resolve_token(&tenants.load(), &verified);
                if let (Some(t), Some(issuer)) = (&tenant, self.issuers.get(verified.issuer)) {
                    issuer.keys.verified_from(source, t.id.as_str());
                }
                // A token whose topics claim compiles to more than MAX_CACHED_TOPICS_BYTES is
                // verified on every request instead: the cache's bound is in entries, and one
                // such entry could hold hundreds of kilobytes.
                let cacheable = verified
                    .topics
                    .as_ref()
                    .is_none_or(|t| t.footprint() <= MAX_CACHED_TOPICS_BYTES);
                if cacheable {
                    self.cache.insert(
                        digest,
                        TokenEntry {
                            token: verified.clone(),
                            keys_generation,
                            generation,
                            tenant: tenant.clone(),
                        },
                        verified.until_s,
                        now,
                    );
                }
                (verified, tenant)
            }
        };
        let tenant = tenant.ok_or(AuthError::UnknownTenant(Method::Jwt))?;
        Ok(Identity {
            tenant,
            credential: Credential::Jwt(token),
        })
    }

    /// Verifies a token not seen before: every check that needs no key first, then the key
    /// (refetching the issuer's set once for an unknown `kid`, as the throttle allows), then
    /// the signature.
    /// Returns the token and the issuer's key-set generation it was verified under.
    pub(super) async fn verify(
        &self,
        token: &str,
        now: u64,
        source: Option<std::net::IpAddr>,
    ) -> Result<(VerifiedToken, u64), AuthError> {
        let bad = AuthError::Token;
        let parsed = jwt::parse(token).map_err(bad)?;
        let index = parsed
            .claims
            .get("iss")
            .and_then(|i| i.as_str())
            .and_then(|i| self.by_issuer.get(i).copied())
            .ok_or(AuthError::Token(TokenProblem::Issuer))?;
        let issuer = &self.issuers[index];
        let config = &issuer.config;
        if !config
            .algorithms
            .iter()
            .any(|a| *a == format!("{:?}", parsed.alg))
        {
            return Err(bad(TokenProblem::Algorithm(
                "the token's alg is not one this issuer's tokens may use (its algorithms)".into(),
            )));
        }
        let checked = jwt::check_claims(
            &parsed.claims,
            &jwt::ClaimRules {
                audiences: &config.audiences,
                leeway_s: config.leeway_s,
                tenant_claim: &config.tenant_claim,
                topics_claim: config.topics_claim.as_deref(),
            },
            now,
        )
        .map_err(bad)?;
        // The set and its generation come from one load (a set stored after it is newer than
        // the one verified with).
        let mut keys = issuer.keys.keys();
        // Only a kid the issuer does not have is worth a refetch: a known kid named with
        // another algorithm (key confusion) is refused as it stands.
        let known_kid = parsed.kid.as_deref().is_some_and(|kid| keys.has_kid(kid));
        if !known_kid
            && matches!(
                keys.find(parsed.kid.as_deref(), parsed.alg),
                Lookup::Unknown
            )
        {
            // From an address that verified as a tenant lately, on its tenant's allowance too.
            let asker = issuer.keys.asker(source);
            let (fetched, _) = issuer.keys.fetch_for(&asker).await;
            keys = issuer.keys.keys();
            if matches!(
                keys.find(parsed.kid.as_deref(), parsed.alg),
                Lookup::Unknown
            ) {
                let unavailable = AuthError::KeysUnavailable(issuer.keys.next_fetch_in(&asker));
                match fetched {
                    Fetched::Failed(_) => return Err(unavailable),
                    // Joined a fetch that read the set before this token came: the key may
                    // have been published since.
                    Fetched::JoinedEarlier => return Err(unavailable),
                    Fetched::Throttled | Fetched::Joined if issuer.keys.last_failed() => {
                        return Err(unavailable)
                    }
                    // No fetch could be made for this token (the last one was less than
                    // `min_refetch_s` ago): the issuer may have rotated the key in since, so
                    // the token may be valid. Come back when the next fetch is allowed.
                    Fetched::Throttled if issuer.keys.is_remote() => return Err(unavailable),
                    // Read for this token (or while it waited), or never refetched (a file):
                    // the issuer has no such key.
                    Fetched::Fresh | Fetched::Joined | Fetched::Throttled => {}
                }
            }
        }
        let key = match keys.find(parsed.kid.as_deref(), parsed.alg) {
            Lookup::Found(key) => key,
            Lookup::Ambiguous => {
                return Err(bad(TokenProblem::UnknownKey(
                    "the token names no key (kid) and the issuer has several for its alg".into(),
                )))
            }
            Lookup::Unknown => {
                let detail = match &parsed.kid {
                    Some(kid) if keys.has_kid(kid) => {
                        "the key the token names (kid) is for another algorithm than its alg"
                    }
                    Some(_) => "no key of the issuer has the token's kid",
                    None => "the issuer has no key for the token's alg",
                };
                return Err(bad(TokenProblem::UnknownKey(detail.into())));
            }
        };
        let keys_generation = keys.generation;
        self.verifications.fetch_add(1, Ordering::Relaxed);
        let valid = jsonwebtoken::crypto::verify(
            parsed.signature,
            parsed.signed.as_bytes(),
            &key.key,
            key.alg,
        )
        .unwrap_or(false);
        if !valid {
            return Err(bad(TokenProblem::Signature));
        }
        Ok((
            VerifiedToken {
                issuer: index,
                subject: checked.subject.into_boxed_str(),
                until_s: checked.exp.saturating_add(config.leeway_s),
                topics: checked.topics,
                key_id: key.id,
                keys_generation,
            },
            keys_generation,
        ))
    }

    /// The tenant a verified token belongs to under `registry`: the tenant listing it, else
    /// the issuer's map, else (no map) the tenant whose id is the claim value.
    pub(super) fn resolve_token(
        &self,
        directory: &Directory,
        token: &VerifiedToken,
    ) -> Option<Arc<Tenant>> {
        let issuer = &self.issuers.get(token.issuer)?.config;
        directory
            .by_jwt(&issuer.issuer, &token.subject)
            .or_else(|| match &issuer.map {
                Some(map) => directory.get(map.get(&*token.subject)?),
                None => directory.get(&token.subject),
            })
            .cloned()
    }
}
