//! Why a credential was not accepted, each with its stable code.

use super::Method;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenProblem {
    Malformed(String),
    /// `none`, HMAC, anything not accepted, or not the algorithm of the key it names.
    Algorithm(String),
    /// No issuer of `[[auth.jwt]]` has this `iss`.
    Issuer,
    Audience,
    Expired,
    NotYetValid,
    /// No key of the issuer has the token's `kid` (after the refetch the throttle allowed).
    UnknownKey(String),
    Signature,
    Claims(String),
}

impl TokenProblem {
    pub fn code(&self) -> &'static str {
        match self {
            TokenProblem::Malformed(_) => "token_malformed",
            TokenProblem::Algorithm(_) => "token_algorithm",
            TokenProblem::Issuer => "token_issuer",
            TokenProblem::Audience => "token_audience",
            TokenProblem::Expired => "token_expired",
            TokenProblem::NotYetValid => "token_not_yet_valid",
            TokenProblem::UnknownKey(_) => "token_key_unknown",
            TokenProblem::Signature => "token_signature",
            TokenProblem::Claims(_) => "token_claims",
        }
    }

    pub fn detail(&self) -> String {
        match self {
            TokenProblem::Malformed(d) => format!("the bearer token is not a valid JWT: {d}"),
            TokenProblem::Algorithm(d) | TokenProblem::Claims(d) | TokenProblem::UnknownKey(d) => {
                d.clone()
            }
            TokenProblem::Issuer => {
                "the token's issuer (iss) is not one this gateway trusts".into()
            }
            TokenProblem::Audience => {
                "the token's audience (aud) names none of the issuer's audiences".into()
            }
            TokenProblem::Expired => "the token has expired (exp)".into(),
            TokenProblem::NotYetValid => "the token is not valid yet (nbf)".into(),
            TokenProblem::Signature => {
                "the token's signature does not verify with the issuer's key".into()
            }
        }
    }
}

/// Why a request is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// No credential, or an API key no tenant has: 401 `unauthorized`.
    Unauthorized,
    /// A bad JWT: 401 with the problem's code.
    Token(TokenProblem),
    /// The client certificate expired while its connection was open: 401.
    CertificateExpired,
    /// A valid token or certificate that belongs to no tenant: 403 `unknown_tenant`.
    UnknownTenant(Method),
    /// The issuer's keys could not be fetched, or a key unknown here may have been rotated in
    /// since the last fetch and the next is not allowed yet, so a possibly valid token cannot
    /// be checked: 503 `jwks_unavailable` (counted against the address's allowance like any
    /// failure, see [`AuthError::is_failure`]), with `Retry-After` set to when the next fetch
    /// is allowed (this wait, at least a second).
    KeysUnavailable(std::time::Duration),
    /// A token not verified before, from an address whose allowance of failed authentications
    /// is spent for this long: refused without checking its signature (the pipeline answers
    /// 429 `auth_failures`; not counted again).
    Held(std::time::Duration),
}

impl AuthError {
    pub fn code(&self) -> &'static str {
        match self {
            AuthError::Unauthorized => "unauthorized",
            AuthError::Token(p) => p.code(),
            AuthError::CertificateExpired => "certificate_expired",
            AuthError::UnknownTenant(_) => "unknown_tenant",
            AuthError::KeysUnavailable(_) => "jwks_unavailable",
            AuthError::Held(_) => "auth_failures",
        }
    }

    /// Whether this counts against the address's failed-authentication allowance: every
    /// failure does, `jwks_unavailable` included. A token naming a key the gateway does not
    /// hold may be one the issuer rotated in since the last fetch, but it may as well be
    /// forged, and an uncounted 503 would let one address ask without limit which claims pass
    /// (the 503 says its issuer, audience, algorithm and expiry were accepted). A client that
    /// honours `Retry-After` spends one failure per fetch interval; past the allowance it hears
    /// 429 `auth_failures` with the wait instead. `Held` is that 429 itself, not counted again.
    pub fn is_failure(&self) -> bool {
        !matches!(self, AuthError::Held(_))
    }
}
