//! A produce error's detail: the sentence that says what refused, naming the record, field or
//! setting, and what to do about it. Cut to its stored length by [`ApiError::detail`].
//!
//! Layer: outcomes and pipeline (the outcome room's).

use super::ApiError;
use crate::credential::AuthError;
use crate::refusal::{wait_ms, Refusal};

impl ApiError {
    pub(super) fn full_detail(&self) -> String {
        match self {
            Self::Unauthorized => {
                "missing or unknown API key (send Authorization: Bearer <key>)".into()
            }
            Self::InvalidTopic(d)
            | Self::InvalidPath(d)
            | Self::Malformed(d)
            | Self::InvalidRecord(d)
            | Self::EntryId(d)
            | Self::UnknownPartition(d)
            | Self::UnsupportedEncoding(d) => d.clone(),
            Self::NoRecords => "the request has no records".into(),
            Self::Auth(e) => auth_detail(e),
            Self::CredentialRevoked => "the credential this stream was opened with (API key, \
                                        token or certificate) no longer names its tenant: \
                                        revoked, remapped, or the tenant deleted while it was \
                                        open"
                .into(),
            Self::StreamIdle(ms) => {
                format!("no record arrived within the stream's idle time ({ms} ms)")
            }
            Self::StreamTooLong(ms) => {
                format!("the stream reached its longest time ({ms} ms); open a new one")
            }
            Self::RecordTooLarge(d)
            | Self::KafkaUnavailable(d)
            | Self::IdempotencyKey(d)
            | Self::SchemaViolation(d)
            | Self::SchemaNotFound(d)
            | Self::SchemaInvalid(d)
            | Self::SchemaRefused(d)
            | Self::SchemaTooCostly(d)
            | Self::SchemaBusy(_, d)
            | Self::SchemaCrowded(_, d) => d.clone(),
            Self::SchemaRegistryUnavailable(d) => {
                format!("{d}; nothing was written: retry shortly")
            }
            Self::IdempotencyKeyInUse(wait) => format!(
                "Idempotency-Key: another request with this key is still being read or \
                 admitted; retry in {} ms with the same key",
                wait_ms(*wait)
            ),
            Self::IdempotencyKeyReused => "Idempotency-Key: this key was used for another \
                request (another body, path, query or content type); use a new key for a new \
                request"
                .into(),
            Self::IdempotencyUnavailable(d) => format!(
                "Idempotency-Key: the key store did not answer ({d}); nothing was written: \
                 retry with the same key"
            ),
            Self::ForbiddenTopic(t) => format!(
                "this credential may not write to topic {t:?} (outside its tenant's patterns, \
                 or its token's topics claim)"
            ),
            Self::InternalTopic(t) => format!(
                "topic {t:?} is internal (Kafka's, floodgate's registry, or listed in [kafka] \
                 internal_topics): no API key may write it"
            ),
            Self::UnsupportedMediaType(got) => format!(
                "Content-Type {got:?} is not accepted; use application/json or application/x-ndjson (UTF-8)"
            ),
            Self::BodyTooLarge { limit } => format!("the body (as inflated, if it is compressed) is larger than {limit} bytes"),
            Self::InflationRatio(ratio) => format!(
                "the body inflates to more than {ratio} times its coded size (server.max_inflation_ratio): \
                 refused as a compression bomb; send it less compressed, or in smaller requests"
            ),
            Self::TooManyRecords { limit } => {
                format!("a request carries at most {limit} records")
            }
            Self::ExceedsBurst(t) => format!(
                "the request has {} {}, more than the {} of {}: it can never be admitted, split it",
                t.requested, t.unit, t.limit, t.allowed
            ),
            Self::UnknownTopic(t) => format!("topic {t:?} does not exist in Kafka"),
            Self::RateLimited(r) => rate_limited_detail(r),
            Self::AuthFailures(wait) => format!(
                "too many failed authentications from this address; retry in {} ms",
                wait_ms(*wait)
            ),
            Self::IdempotencyReleases(wait) => format!(
                "this tenant's requests with an Idempotency-Key were refused after their key was \
                 claimed too often ([idempotency] releases_per_tenant_per_sec); retry in {} ms",
                wait_ms(*wait)
            ),
            Self::TenantConnections(n) => format!(
                "this tenant holds its {n} connections ([server] max_connections_per_tenant): this one closes; send on the ones it has"
            ),
            Self::BodyTimeout => "the request body was not received in time".into(),
            Self::ShuttingDown => "floodgate is shutting down; retry on another instance".into(),
            Self::NotFound => "no such route".into(),
            Self::MethodNotAllowed(method) => {
                format!(
                    "this path does not serve {method}; the Allow header names the methods it does"
                )
            }
        }
    }
}

/// Why a credential does not authenticate (or belongs to no tenant), for its 401/403/503.
fn auth_detail(e: &AuthError) -> String {
    match e {
        AuthError::Unauthorized => {
            "missing or unknown API key (send Authorization: Bearer <key>)".into()
        }
        AuthError::Token(p) => p.detail(),
        AuthError::CertificateExpired => "the client certificate has expired".into(),
        AuthError::UnknownTenant(method) => format!(
            "the {} is valid but belongs to no tenant here (list it in a tenant's {}, or \
             map it in [auth])",
            match method {
                crate::credential::Method::ClientCert => "client certificate",
                _ => "token",
            },
            match method {
                crate::credential::Method::ClientCert => "cert_names",
                _ => "jwt_claims",
            }
        ),
        AuthError::KeysUnavailable(wait) => format!(
            "the token's issuer keys (JWKS) do not hold its key: they could not be fetched, or \
             the issuer may have rotated it in since the last fetch and the next is allowed in \
             {} ms; retry then",
            wait_ms(*wait)
        ),
        AuthError::Held(wait) => format!(
            "too many failed authentications from this address: a token not seen before is \
             not checked for {} ms",
            wait_ms(*wait)
        ),
    }
}

/// A 429's detail: what refused, and what to do about it.
fn rate_limited_detail(r: &Refusal) -> String {
    if let Some(window) = r.quota {
        return format!(
            "{}: the {} quota is used up until its window turns; retry in {} ms{}",
            r.reason.as_str(),
            window.as_str(),
            r.retry_after_ms(),
            if r.retry_after >= crate::refusal::MAX_RETRY_AFTER {
                " (or later: a wait is told at most a day ahead)"
            } else {
                ""
            }
        );
    }
    match (r.class, &r.lag) {
        (_, Some(lag)) => format!(
            "{}: consumer group {:?} is behind on topic {:?} (lag guard {:?}): producers \
             are capped at what the consumers read, so the lag shrinks; retry in {} ms",
            r.reason.as_str(),
            lag.group,
            lag.topic,
            lag.guard,
            r.retry_after_ms()
        ),
        (Some(class), None) => format!(
            "{}: Kafka is slow and the adaptive limit admits no more {class} traffic now \
             (batch is refused first, then standard); retry in {} ms",
            r.reason.as_str(),
            r.retry_after_ms()
        ),
        (None, None) => format!(
            "{} exhausted; retry in {} ms",
            r.reason.as_str(),
            r.retry_after_ms()
        ),
    }
}
