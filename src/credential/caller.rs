//! Who is calling and what the credential proved: the connection's view (`Caller`), the
//! credential (`Credential`) and the identity it becomes.

use std::net::IpAddr;
use std::sync::Arc;

use crate::identity::{ApiKeyHash, Topic, TopicPatterns};
use crate::tenant::Tenant;
use crate::tls::ClientCertificate;

/// Who is calling, as the connection knows it.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The peer's address (failed authentications are limited per address).
    pub ip: Option<IpAddr>,
    /// The connection's verified client certificate (mTLS).
    pub cert: Option<Arc<ClientCertificate>>,
    /// The connection's mark while none of its requests has authenticated (the produce
    /// listener bounds such connections per address).
    pub trust: Option<crate::server::ConnectionTrust>,
}

/// How a request authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    ApiKey,
    Jwt,
    ClientCert,
    /// No credential at all.
    None,
}

impl Method {
    pub const ALL: [Method; 4] = [
        Method::ApiKey,
        Method::Jwt,
        Method::ClientCert,
        Method::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::ApiKey => "api_key",
            Method::Jwt => "jwt",
            Method::ClientCert => "client_cert",
            Method::None => "none",
        }
    }
}

/// A verified token, as remembered between its requests.
#[derive(Debug)]
pub struct VerifiedToken {
    /// Index of the issuer in `[[auth.jwt]]`.
    pub(super) issuer: usize,
    /// The tenant claim's value.
    pub(super) subject: Box<str>,
    /// Unix second from which the token is no longer accepted (`exp` + leeway).
    pub(super) until_s: u64,
    /// The token's own topic patterns (its topics claim), if any: they only narrow.
    pub(super) topics: Option<TopicPatterns>,
    /// The key it was verified with ([`jwks::VerifyKey::id`]) and the issuer's key-set
    /// generation then: an open stream asks whether the key is still held when the set changed.
    pub(super) key_id: [u8; 32],
    pub(super) keys_generation: u64,
}

/// The credential a request authenticated with: what a long-lived request (a stream) checks
/// again later.
#[derive(Debug, Clone)]
pub enum Credential {
    ApiKey(ApiKeyHash),
    Jwt(Arc<VerifiedToken>),
    Certificate(Arc<ClientCertificate>),
}

impl Credential {
    pub fn method(&self) -> Method {
        match self {
            Credential::ApiKey(_) => Method::ApiKey,
            Credential::Jwt(_) => Method::Jwt,
            Credential::Certificate(_) => Method::ClientCert,
        }
    }
}

/// An authenticated request: its tenant and its credential.
#[derive(Debug, Clone)]
pub struct Identity {
    pub tenant: Arc<Tenant>,
    pub credential: Credential,
}

impl Identity {
    /// Whether the credential's own limits allow this topic (a token's topics claim); the
    /// tenant's patterns are checked by the pipeline as for every request.
    pub fn credential_allows(&self, topic: &Topic) -> bool {
        match &self.credential {
            Credential::Jwt(t) => t.topics.as_ref().is_none_or(|p| p.allows(topic)),
            _ => true,
        }
    }

    /// Tenant patterns and credential limits together.
    pub fn may_write(&self, topic: &Topic) -> bool {
        self.tenant.may_write(topic) && self.credential_allows(topic)
    }
}
