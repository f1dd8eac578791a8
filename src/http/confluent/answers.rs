//! The same outcomes in Confluent REST Proxy's shapes: errors as `{"error_code", "message"}`
//! with Confluent's codes, v2 produce answers with per-record error codes, v3 delivery reports
//! and batch answers. floodgate adds what Confluent never sends: `Retry-After`, the RateLimit
//! fields and `retry_after_ms` on every 429.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;

use super::record::V3Entry;
use crate::kafka::{Batch, DeliveryFailure, FailureKind, Outcome};
use crate::outcome::ApiError;
use crate::refusal::{wait_ms, wait_secs};

/// v2's response media type.
pub const V2_MEDIA_TYPE: &str = "application/vnd.kafka.v2+json";
/// REST Proxy v1's response media type (v1 content types are served on the v2 routes).
pub const V1_MEDIA_TYPE: &str = "application/vnd.kafka.v1+json";

/// Confluent's status and error code for an outcome.
pub fn status_and_code(e: &ApiError) -> (StatusCode, u32) {
    use ApiError as E;
    match e {
        E::Unauthorized | E::CredentialRevoked => (StatusCode::UNAUTHORIZED, 40101),
        E::Auth(crate::credential::AuthError::UnknownTenant(_)) => (StatusCode::FORBIDDEN, 40302),
        E::Auth(crate::credential::AuthError::KeysUnavailable(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, 50304)
        }
        E::Auth(_) => (StatusCode::UNAUTHORIZED, 40101),
        E::ForbiddenTopic(_) | E::InternalTopic(_) => (StatusCode::FORBIDDEN, 40301),
        E::UnknownTopic(_) => (StatusCode::NOT_FOUND, 40401),
        // No route, or not with this method: kafka-rest (Jersey, through rest-utils' exception
        // mapper) answers these with the HTTP status as the error code.
        E::NotFound => (StatusCode::NOT_FOUND, 404),
        E::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, 405),
        E::UnknownPartition(_) => (StatusCode::NOT_FOUND, 40402),
        E::BodyTimeout | E::StreamIdle(_) | E::StreamTooLong(_) => {
            (StatusCode::REQUEST_TIMEOUT, 40801)
        }
        E::BodyTooLarge { .. }
        | E::InflationRatio(_)
        | E::TooManyRecords { .. }
        | E::RecordTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, 41301),
        E::ExceedsBurst(_) => (StatusCode::PAYLOAD_TOO_LARGE, 41302),
        E::UnsupportedMediaType(_) | E::UnsupportedEncoding(_) => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, 41501)
        }
        E::InvalidRecord(_) => (StatusCode::UNPROCESSABLE_ENTITY, 42206),
        E::RateLimited(_)
        | E::AuthFailures(_)
        | E::IdempotencyReleases(_)
        | E::TenantConnections(_) => (StatusCode::TOO_MANY_REQUESTS, 42901),
        E::InvalidTopic(_) | E::InvalidPath(_) | E::Malformed(_) | E::NoRecords | E::EntryId(_) => {
            (StatusCode::BAD_REQUEST, 40001)
        }
        E::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, 50301),
        E::KafkaUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, 50302),
        E::IdempotencyKeyInUse(_) => (StatusCode::CONFLICT, 40901),
        E::IdempotencyKey(_) => (StatusCode::BAD_REQUEST, 40002),
        E::IdempotencyKeyReused => (StatusCode::UNPROCESSABLE_ENTITY, 42207),
        E::IdempotencyUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, 50303),
        // kafka-rest's 42203 is its JSON-to-schema conversion failure.
        E::SchemaViolation(_) => (StatusCode::UNPROCESSABLE_ENTITY, 42203),
        E::SchemaNotFound(_) => (StatusCode::UNPROCESSABLE_ENTITY, 42204),
        E::SchemaInvalid(_) | E::SchemaRefused(_) => (StatusCode::UNPROCESSABLE_ENTITY, 42205),
        E::SchemaTooCostly(_) => (StatusCode::UNPROCESSABLE_ENTITY, 42209),
        E::SchemaBusy(..) | E::SchemaCrowded(..) => (StatusCode::TOO_MANY_REQUESTS, 42902),
        E::SchemaRegistryUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, 50305),
    }
}

/// An error in Confluent's envelope, as `media_type`.
pub fn error_response(e: &ApiError, media_type: &'static str) -> Response {
    let (status, code) = status_and_code(e);
    let message = match e {
        // Confluent's envelope has one number for every 401: floodgate's own code says which.
        ApiError::Auth(a) => format!("{}: {}", a.code(), e.detail()),
        // Each Confluent adapter names its own content types (the shared detail is /v1's).
        ApiError::UnsupportedMediaType(detail) => detail.clone(),
        _ => e.detail(),
    };
    let mut response = error_with(status, code, message, retry_after(e), media_type);
    crate::outcome::accept_encoding(e, response.headers_mut());
    response
}

/// An error envelope with an explicit status and code (for conditions only Confluent's shapes
/// have, such as a batch's id rules).
pub fn error_with(
    status: StatusCode,
    code: u32,
    message: String,
    retry: Option<std::time::Duration>,
    media_type: &'static str,
) -> Response {
    let mut body = json!({"error_code": code, "message": message});
    if let Some(wait) = retry {
        body["retry_after_ms"] = json!(wait_ms(wait));
    }
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    if let Some(wait) = retry {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(wait_secs(wait)));
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer, Basic realm=\"floodgate\""),
        );
    }
    // Shutting down: this connection takes no more requests.
    if code == 50301 {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// v2: the client's `Accept` allows none of the media types a v2 answer is written in. No
/// body: there is no shape the client said it could read.
pub fn not_acceptable() -> Response {
    StatusCode::NOT_ACCEPTABLE.into_response()
}

/// v3: a path naming a cluster this gateway does not serve.
pub fn unknown_cluster(requested: &str, served: &str) -> Response {
    error_with(
        StatusCode::NOT_FOUND,
        40401,
        format!("no cluster {requested:?}; this gateway serves cluster {served:?}"),
        None,
        V3_MEDIA_TYPE,
    )
}

/// v3's media type (requests and answers).
pub const V3_MEDIA_TYPE: &str = "application/json";

/// v3 `records:batch`: an error with the whole batch. Breaking the batch's own rules — 1 to
/// `max` entries, each with a unique, well-formed id — is Confluent's 42208; anything else is
/// answered as for any request.
pub fn v3_batch_error(e: &ApiError, max: usize) -> Response {
    let rule = |message: String| {
        error_with(
            StatusCode::UNPROCESSABLE_ENTITY,
            42208,
            message,
            None,
            V3_MEDIA_TYPE,
        )
    };
    match e {
        ApiError::TooManyRecords { .. } | ApiError::NoRecords => {
            rule(format!("a batch has 1 to {max} entries"))
        }
        ApiError::EntryId(m) => rule(m.clone()),
        _ => error_response(e, V3_MEDIA_TYPE),
    }
}

/// v3 `records:batch`: 207 with successes and failures in request order, each naming its
/// entry id. `seen` lists every entry in request order; the batch holds the outcomes of the
/// entries that were sent (decoded and not failed), in the same order: an entry noted as
/// failed (at decoding, or later by [`crate::body::ParseRecord::fail_record`]) takes its
/// failure from its note, every other entry the next outcome.
pub fn v3_batch_answer(cluster: &str, topic: &str, batch: &Batch, seen: &[V3Entry]) -> Response {
    let (mut successes, mut failures) = (Vec::new(), Vec::new());
    let mut outcomes = batch.outcomes();
    for entry in seen {
        let id = entry.id.as_deref().unwrap_or_default();
        if let Some((status, message)) = &entry.failed {
            let mut report = V3Report::failed(u32::from(*status), message.clone());
            report.id = Some(id);
            failures.push(report);
            continue;
        }
        let types = entry.types;
        let described = |t: Option<super::record::DataType>, size: usize| {
            t.map(|t| Described {
                data_type: t.as_str(),
                size,
            })
        };
        let mut report = v3_report(
            cluster,
            topic,
            outcomes.next().flatten(),
            described(types.key, types.key_size),
            described(types.value, types.value_size),
        );
        report.id = Some(id);
        if report.written() {
            report.error_code = None;
            successes.push(report);
        } else {
            failures.push(report);
        }
    }
    let body = serde_json::to_vec(&BatchAnswer {
        successes,
        failures,
    })
    .unwrap_or_default();
    let mut response = (StatusCode::MULTI_STATUS, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(V3_MEDIA_TYPE),
    );
    response
}

#[derive(Serialize)]
struct BatchAnswer<'a> {
    successes: Vec<V3Report<'a>>,
    failures: Vec<V3Report<'a>>,
}

/// How long a refused client should wait, when the outcome says.
pub fn retry_after(e: &ApiError) -> Option<std::time::Duration> {
    match e {
        ApiError::RateLimited(r) => Some(r.retry_after),
        ApiError::AuthFailures(wait)
        | ApiError::IdempotencyReleases(wait)
        | ApiError::IdempotencyKeyInUse(wait)
        | ApiError::Auth(crate::credential::AuthError::KeysUnavailable(wait))
        | ApiError::SchemaBusy(wait, _)
        | ApiError::SchemaCrowded(wait, _) => Some(*wait),
        ApiError::SchemaRegistryUnavailable(_) | ApiError::TenantConnections(_) => {
            Some(std::time::Duration::from_secs(1))
        }
        _ => None,
    }
}

/// Confluent's per-record code for a record Kafka did not take.
pub fn failure_code(f: &DeliveryFailure) -> u32 {
    match f.kind {
        FailureKind::Unavailable => 50003,
        FailureKind::Rejected => 50002,
    }
}

#[derive(Serialize)]
struct V2Offset<'a> {
    partition: Option<i32>,
    offset: Option<i64>,
    error_code: Option<u32>,
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct V2Answer<'a> {
    offsets: Vec<V2Offset<'a>>,
    key_schema_id: Option<u32>,
    value_schema_id: Option<u32>,
}

/// v2's answer to a settled produce: 200, one entry per record in request order; a record
/// Kafka did not take carries its error code (as Confluent does, with HTTP 200). Written with
/// typed structs: building a JSON map per record showed up first in the profile. v1's answer
/// had the same shape: `media_type` says which version it is written as.
/// `ids`: the key and value schema ids the records were written with (schema formats).
pub fn v2_produced(
    batch: &Batch,
    media_type: &'static str,
    ids: (Option<u32>, Option<u32>),
) -> Response {
    let offsets = batch
        .outcomes()
        .map(|o| match o {
            Some(Ok(d)) => V2Offset {
                partition: Some(d.partition),
                offset: Some(d.offset),
                error_code: None,
                error: None,
            },
            Some(Err(f)) => V2Offset {
                partition: None,
                offset: None,
                error_code: Some(failure_code(f)),
                error: Some(&f.code),
            },
            None => V2Offset {
                partition: None,
                offset: None,
                error_code: Some(50003),
                error: Some("not acknowledged in time; it stays queued"),
            },
        })
        .collect();
    let body = serde_json::to_vec(&V2Answer {
        offsets,
        key_schema_id: ids.0,
        value_schema_id: ids.1,
    })
    .unwrap_or_default();
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    response
}

/// What a v3 delivery report says about a record's key or value.
#[derive(Debug, Clone, Copy)]
pub struct Described {
    pub data_type: &'static str,
    pub size: usize,
}

/// The size and type of a record's key or value, as v3 reports them.
#[derive(Serialize)]
pub struct PartReport {
    #[serde(rename = "type")]
    data_type: &'static str,
    size: usize,
}

/// A v3 delivery report for one record, written with typed fields (a JSON map per record was
/// the first thing in the profile). `id` is set in batch answers only.
#[derive(Serialize)]
pub struct V3Report<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_id: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PartReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<PartReport>,
}

impl V3Report<'_> {
    /// Was the record written?
    pub fn written(&self) -> bool {
        self.offset.is_some()
    }

    /// A report for a record that was not written.
    pub fn failed(code: u32, message: String) -> Self {
        V3Report {
            id: None,
            error_code: Some(code),
            message: Some(message),
            retry_after_ms: None,
            cluster_id: None,
            topic_name: None,
            partition_id: None,
            offset: None,
            timestamp: None,
            key: None,
            value: None,
        }
    }
}

/// A v3 delivery report for one record. A written record's report carries `error_code` 200,
/// as Confluent's streaming reports do.
pub fn v3_report<'a>(
    cluster_id: &'a str,
    topic: &'a str,
    outcome: Option<&Outcome>,
    key: Option<Described>,
    value: Option<Described>,
) -> V3Report<'a> {
    let part = |d: Option<Described>| {
        d.map(|p| PartReport {
            data_type: p.data_type,
            size: p.size,
        })
    };
    match outcome {
        Some(Ok(d)) => V3Report {
            id: None,
            error_code: Some(200),
            message: None,
            retry_after_ms: None,
            cluster_id: Some(cluster_id),
            topic_name: Some(topic),
            partition_id: Some(d.partition),
            offset: Some(d.offset),
            timestamp: d.timestamp_ms.and_then(rfc3339),
            key: part(key),
            value: part(value),
        },
        Some(Err(f)) => V3Report::failed(
            failure_code(f),
            format!("Kafka did not take the record: {}", f.code),
        ),
        None => V3Report::failed(
            50302,
            "Kafka did not acknowledge the record in time; it stays queued and will be written \
             when Kafka accepts it"
                .into(),
        ),
    }
}

/// A v3 report for a record refused before it reached Kafka.
pub fn v3_refusal(e: &ApiError) -> V3Report<'static> {
    let (status, _) = status_and_code(e);
    let mut report = V3Report::failed(u32::from(status.as_u16()), e.detail());
    report.retry_after_ms = retry_after(e).map(wait_ms);
    report
}

/// RFC 3339 text of a Kafka timestamp.
pub fn rfc3339(ms: i64) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    at.format(&time::format_description::well_known::Rfc3339)
        .ok()
}
