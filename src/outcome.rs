//! The outcome room: every status and body floodgate answers with is decided here — the
//! produce API's errors ([`ApiError`], with `From` for body and admission errors), the admin
//! API's ([`AdminError`], with `From` for registry errors), produce results ([`Produced`]:
//! 202, 200, 502, 503), and readiness ([`Readiness`]). Error bodies are
//! `{"error": CODE, "detail": "..."}` with stable codes; internal details stay in the logs.
//! Wire formats with other shapes (Confluent's) map the same values in their own encoder, in
//! their folder under `http` (`http::confluent::answers`).
//!
//! Layer: outcomes and pipeline. Imports the values it answers for (refusals, body errors,
//! delivery batches, registry errors); imported by the ingest pipeline and the HTTP edges.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::json;

use crate::body::BodyError;
use crate::credential::AuthError;
use crate::refusal::{wait_ms, wait_secs, Denial, Refusal, TooLarge};

pub mod admin;
mod detail;
mod panic;
mod produced;
pub mod ratelimit;
mod readiness;

pub use admin::AdminError;
pub use panic::panic_response;
pub use produced::Produced;
pub use readiness::Readiness;

#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    Unauthorized,
    InvalidTopic(String),
    ForbiddenTopic(String),
    /// A topic internal to Kafka or floodgate (its registry): no key may write it.
    InternalTopic(String),
    UnsupportedMediaType(String),
    /// A `Content-Encoding` floodgate does not decode, or too many stacked (the detail says
    /// which; the answer carries `Accept-Encoding`).
    UnsupportedEncoding(String),
    BodyTooLarge {
        limit: u64,
    },
    /// A coded body inflating to more than this many times its coded size
    /// (`[server] max_inflation_ratio`): refused while it inflates.
    InflationRatio(u32),
    TooManyRecords {
        limit: usize,
    },
    RecordTooLarge(String),
    Malformed(String),
    /// A well-formed body without a single record.
    NoRecords,
    /// A record id breaking the wire format's id rule (Confluent's batch entry ids).
    EntryId(String),
    /// Well-formed JSON that is not a valid record: `/v1` answers it like `Malformed`,
    /// Confluent's shapes with 422.
    InvalidRecord(String),
    ExceedsBurst(TooLarge),
    UnknownTopic(String),
    UnknownPartition(String),
    RateLimited(Refusal),
    /// Too many failed authentications from this address: wait this long.
    AuthFailures(std::time::Duration),
    /// Cluster mode: the tenant gave up its allowance of claimed `Idempotency-Key`s (requests
    /// refused after their key was claimed, `[idempotency] releases_per_tenant_*`): wait this
    /// long.
    IdempotencyReleases(std::time::Duration),
    /// The tenant holds its allowance of connections (`max_connections_per_tenant`, this many):
    /// this connection closes after the answer.
    TenantConnections(usize),
    BodyTimeout,
    /// A stream had no new record for its idle time (milliseconds).
    StreamIdle(u64),
    /// A stream reached its longest time (milliseconds).
    StreamTooLong(u64),
    /// The key an open stream was authenticated with was revoked, or its tenant deleted.
    CredentialRevoked,
    /// A JWT or client certificate that does not authenticate (401), is valid but belongs to
    /// no tenant (403), or whose issuer's keys cannot be fetched (503).
    Auth(AuthError),
    KafkaUnavailable(String),
    /// A malformed `Idempotency-Key`, or one sent where it cannot be honoured (the detail
    /// names the header).
    IdempotencyKey(String),
    /// Another request with the same `Idempotency-Key` is still being read or admitted.
    IdempotencyKeyInUse(std::time::Duration),
    /// The `Idempotency-Key` was used for another request (another body, path, query or
    /// content type).
    IdempotencyKeyReused,
    /// The key store did not answer (`[idempotency] on_store_error = "refuse"`).
    IdempotencyUnavailable(String),
    /// A record's key or value does not fit its schema (the detail names the record and the
    /// field by JSON pointer).
    SchemaViolation(String),
    /// A schema id, subject or version the registry does not have.
    SchemaNotFound(String),
    /// A schema that does not compile, or is not of the format the record said.
    SchemaInvalid(String),
    /// The Schema Registry did not answer and the schema is not cached.
    SchemaRegistryUnavailable(String),
    /// The registry refused to register the record's schema (`schema_invalid`, as
    /// `SchemaInvalid`): the registry's state, not the request's.
    SchemaRefused(String),
    /// Checking the record, or compiling its schema, is over a bound the detail names.
    SchemaTooCostly(String),
    /// The tenant's share of the schema step's threads was not free within the wait limit,
    /// or its registrations are spent: retry after this long.
    SchemaBusy(std::time::Duration, String),
    /// The schema step's threads were busy with other tenants' work within the wait limit
    /// (`schema_busy` too, as `SchemaBusy`): not what the tenant spent itself.
    SchemaCrowded(std::time::Duration, String),
    ShuttingDown,
    /// No route has this path.
    NotFound,
    /// The path is served, not with this method (the answer's `Allow` names those it is).
    MethodNotAllowed(String),
    /// A path parameter that cannot be read (percent-encoded bytes that are not UTF-8): the
    /// detail names the parameter.
    InvalidPath(String),
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::Malformed(d) => Self::Malformed(d),
            BodyError::Invalid(d) => Self::InvalidRecord(d),
            BodyError::TooManyRecords { limit } => Self::TooManyRecords { limit },
            BodyError::RecordTooLarge(d) => Self::RecordTooLarge(d),
            BodyError::NoRecords => Self::NoRecords,
            BodyError::EntryId(d) => Self::EntryId(d),
        }
    }
}

impl From<Denial> for ApiError {
    fn from(d: Denial) -> Self {
        match d {
            Denial::Refused(r) => Self::RateLimited(r),
            Denial::TooLarge(t) => Self::ExceedsBurst(t),
        }
    }
}

impl ApiError {
    /// The stable code clients match on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized | Self::CredentialRevoked => "unauthorized",
            Self::Auth(e) => e.code(),
            Self::InvalidTopic(_) => "invalid_topic",
            Self::ForbiddenTopic(_) | Self::InternalTopic(_) => "forbidden_topic",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::UnsupportedEncoding(_) => "unsupported_encoding",
            Self::BodyTooLarge { .. } | Self::InflationRatio(_) => "body_too_large",
            Self::TooManyRecords { .. } => "too_many_records",
            Self::RecordTooLarge(_) => "record_too_large",
            Self::Malformed(_) | Self::InvalidRecord(_) | Self::NoRecords | Self::EntryId(_) => {
                "malformed_body"
            }
            Self::ExceedsBurst(_) => "exceeds_burst",
            Self::UnknownTopic(_) => "unknown_topic",
            Self::UnknownPartition(_) => "unknown_partition",
            Self::RateLimited(_)
            | Self::AuthFailures(_)
            | Self::IdempotencyReleases(_)
            | Self::TenantConnections(_) => "rate_limited",
            Self::BodyTimeout | Self::StreamIdle(_) | Self::StreamTooLong(_) => "body_timeout",
            Self::KafkaUnavailable(_) => "kafka_unavailable",
            Self::IdempotencyKey(_) => "invalid_idempotency_key",
            Self::IdempotencyKeyInUse(_) => "idempotency_key_in_use",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::IdempotencyUnavailable(_) => "idempotency_unavailable",
            Self::SchemaViolation(_) => "schema_violation",
            Self::SchemaNotFound(_) => "schema_not_found",
            Self::SchemaInvalid(_) | Self::SchemaRefused(_) => "schema_invalid",
            Self::SchemaTooCostly(_) => "schema_too_costly",
            Self::SchemaBusy(..) | Self::SchemaCrowded(..) => "schema_busy",
            Self::SchemaRegistryUnavailable(_) => "schema_registry_unavailable",
            Self::ShuttingDown => "shutting_down",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed(_) => "method_not_allowed",
            Self::InvalidPath(_) => "invalid_path",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized | Self::CredentialRevoked => StatusCode::UNAUTHORIZED,
            Self::Auth(AuthError::UnknownTenant(_)) => StatusCode::FORBIDDEN,
            Self::Auth(AuthError::KeysUnavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Auth(_) => StatusCode::UNAUTHORIZED,
            Self::IdempotencyKeyInUse(_) => StatusCode::CONFLICT,
            Self::IdempotencyKey(_) => StatusCode::BAD_REQUEST,
            Self::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::IdempotencyUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::InvalidTopic(_)
            | Self::InvalidPath(_)
            | Self::Malformed(_)
            | Self::InvalidRecord(_)
            | Self::NoRecords
            | Self::EntryId(_) => StatusCode::BAD_REQUEST,
            Self::UnknownPartition(_) => StatusCode::NOT_FOUND,
            Self::ForbiddenTopic(_) | Self::InternalTopic(_) => StatusCode::FORBIDDEN,
            Self::UnsupportedMediaType(_) | Self::UnsupportedEncoding(_) => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            Self::BodyTooLarge { .. }
            | Self::InflationRatio(_)
            | Self::TooManyRecords { .. }
            | Self::RecordTooLarge(_)
            | Self::ExceedsBurst(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnknownTopic(_) | Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::RateLimited(_)
            | Self::AuthFailures(_)
            | Self::IdempotencyReleases(_)
            | Self::TenantConnections(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::BodyTimeout | Self::StreamIdle(_) | Self::StreamTooLong(_) => {
                StatusCode::REQUEST_TIMEOUT
            }
            Self::KafkaUnavailable(_) | Self::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            Self::SchemaViolation(_)
            | Self::SchemaNotFound(_)
            | Self::SchemaInvalid(_)
            | Self::SchemaRefused(_)
            | Self::SchemaTooCostly(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::SchemaBusy(..) | Self::SchemaCrowded(..) => StatusCode::TOO_MANY_REQUESTS,
            Self::SchemaRegistryUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The body's detail, cut (`quote`): it may quote the client's input, and is stored.
    pub fn detail(&self) -> String {
        crate::quote::brief(self.full_detail())
    }
}

/// A 429's body.
#[derive(Serialize)]
struct RateLimitedBody {
    error: &'static str,
    reason: &'static str,
    retry_after_ms: u64,
    detail: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = match &self {
            Self::RateLimited(r) => {
                // Typed, not a json! map: the refusal path is hot under a flood.
                let body = RateLimitedBody {
                    error: self.code(),
                    reason: r.reason.as_str(),
                    retry_after_ms: r.retry_after_ms(),
                    detail: self.detail(),
                };
                let mut response = (status, Json(body)).into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(r.retry_after_secs()));
                response
            }
            Self::AuthFailures(_) | Self::IdempotencyReleases(_) | Self::TenantConnections(_) => {
                let (reason, wait) = match &self {
                    Self::AuthFailures(wait) => ("auth_failures", *wait),
                    Self::IdempotencyReleases(wait) => ("idempotency_releases", *wait),
                    _ => ("tenant_connections", std::time::Duration::from_secs(1)),
                };
                let body = json!({
                    "error": self.code(),
                    "reason": reason,
                    "retry_after_ms": wait_ms(wait),
                    "detail": self.detail(),
                });
                let mut response = (status, Json(body)).into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(wait_secs(wait)));
                response
            }
            Self::IdempotencyKeyInUse(wait)
            | Self::SchemaBusy(wait, _)
            | Self::SchemaCrowded(wait, _) => {
                let body = json!({
                    "error": self.code(),
                    "retry_after_ms": wait_ms(*wait),
                    "detail": self.detail(),
                });
                let mut response = (status, Json(body)).into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(wait_secs(*wait)));
                response
            }
            _ => (
                status,
                Json(json!({"error": self.code(), "detail": self.detail()})),
            )
                .into_response(),
        };
        if matches!(self, Self::ShuttingDown) {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        accept_encoding(&self, response.headers_mut());
        if matches!(
            self,
            Self::Unauthorized
                | Self::CredentialRevoked
                | Self::Auth(AuthError::Unauthorized | AuthError::CertificateExpired)
        ) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Self::Auth(AuthError::Token(_)) = &self {
            // RFC 6750 §3: a bad token is `invalid_token`; the detail stays in the body.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer error=\"invalid_token\""),
            );
        }
        if let Self::Auth(AuthError::KeysUnavailable(wait)) = &self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(wait_secs(*wait)));
        }
        if let Self::SchemaRegistryUnavailable(_) = &self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// RFC 9110 §15.5.16: a 415 for a content coding says which codings are accepted.
pub fn accept_encoding(e: &ApiError, headers: &mut axum::http::HeaderMap) {
    if let ApiError::UnsupportedEncoding(_) = e {
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static(crate::inflate::ACCEPTED),
        );
    }
}

#[cfg(test)]
mod tests;
