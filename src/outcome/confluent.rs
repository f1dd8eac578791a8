//! The same outcomes in Confluent REST Proxy's shapes: errors as `{"error_code", "message"}`
//! with Confluent's codes, v2 produce answers with per-record error codes, v3 delivery reports
//! and batch answers. floodgate adds what Confluent never sends: `Retry-After`, the RateLimit
//! fields and `retry_after_ms` on every 429.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::ApiError;
use crate::kafka::{Batch, DeliveryFailure, FailureKind, Outcome};
use crate::refusal::{wait_ms, wait_secs};

/// v2's response media type.
pub const V2_MEDIA_TYPE: &str = "application/vnd.kafka.v2+json";

/// Confluent's status and error code for an outcome.
pub fn status_and_code(e: &ApiError) -> (StatusCode, u32) {
    use ApiError as E;
    match e {
        E::Unauthorized | E::AdminUnauthorized(_) => (StatusCode::UNAUTHORIZED, 40101),
        E::ForbiddenTopic(_) => (StatusCode::FORBIDDEN, 40301),
        E::UnknownTopic(_) | E::NotFound | E::TenantNotFound(_) | E::KeyNotFound(_) => {
            (StatusCode::NOT_FOUND, 40401)
        }
        E::UnknownPartition(_) => (StatusCode::NOT_FOUND, 40402),
        E::BodyTimeout => (StatusCode::REQUEST_TIMEOUT, 40801),
        E::BodyTooLarge { .. } | E::TooManyRecords { .. } | E::RecordTooLarge(_) => {
            (StatusCode::PAYLOAD_TOO_LARGE, 41301)
        }
        E::ExceedsBurst(_) => (StatusCode::PAYLOAD_TOO_LARGE, 41302),
        E::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, 41501),
        E::InvalidRecord(_) | E::InvalidField { .. } => (StatusCode::UNPROCESSABLE_ENTITY, 42206),
        E::RateLimited(_) | E::AuthFailures(_) => (StatusCode::TOO_MANY_REQUESTS, 42901),
        E::InvalidTopic(_) | E::Malformed(_) => (StatusCode::BAD_REQUEST, 40001),
        E::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, 50301),
        E::KafkaUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, 50302),
        E::StateNotSaved => (StatusCode::INTERNAL_SERVER_ERROR, 50001),
    }
}

/// An error in Confluent's envelope, as `media_type`.
pub fn error_response(e: &ApiError, media_type: &'static str) -> Response {
    let (status, code) = status_and_code(e);
    error_with(status, code, e.detail(), retry_after(e), media_type)
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

/// How long a refused client should wait, when the outcome says.
pub fn retry_after(e: &ApiError) -> Option<std::time::Duration> {
    match e {
        ApiError::RateLimited(r) => Some(r.retry_after),
        ApiError::AuthFailures(wait) => Some(*wait),
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

/// v2's answer to a settled produce: 200, one entry per record in request order; a record
/// Kafka did not take carries its error code (as Confluent does, with HTTP 200).
pub fn v2_produced(batch: &Batch) -> Response {
    let offsets: Vec<Value> = batch
        .outcomes()
        .map(|o| match o {
            Some(Ok(d)) => json!({"partition": d.partition, "offset": d.offset, "error_code": null, "error": null}),
            Some(Err(f)) => json!({"partition": null, "offset": null, "error_code": failure_code(f), "error": f.code}),
            None => json!({"partition": null, "offset": null, "error_code": 50003, "error": "not acknowledged in time; it stays queued"}),
        })
        .collect();
    let body = json!({"offsets": offsets, "key_schema_id": null, "value_schema_id": null});
    let mut response = (StatusCode::OK, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(V2_MEDIA_TYPE),
    );
    response
}

/// What a v3 delivery report says about a record's key or value.
#[derive(Debug, Clone, Copy)]
pub struct Described {
    pub data_type: &'static str,
    pub size: usize,
}

/// A v3 delivery report for one record.
pub fn v3_report(
    cluster_id: &str,
    topic: &str,
    outcome: Option<&Outcome>,
    key: Option<Described>,
    value: Option<Described>,
) -> Value {
    match outcome {
        Some(Ok(d)) => {
            let mut report = Map::new();
            report.insert("error_code".into(), json!(200));
            report.insert("cluster_id".into(), json!(cluster_id));
            report.insert("topic_name".into(), json!(topic));
            report.insert("partition_id".into(), json!(d.partition));
            report.insert("offset".into(), json!(d.offset));
            if let Some(ts) = d.timestamp_ms.and_then(rfc3339) {
                report.insert("timestamp".into(), json!(ts));
            }
            for (name, part) in [("key", key), ("value", value)] {
                if let Some(p) = part {
                    report.insert(name.into(), json!({"type": p.data_type, "size": p.size}));
                }
            }
            Value::Object(report)
        }
        Some(Err(f)) => {
            json!({"error_code": failure_code(f), "message": format!("Kafka did not take the record: {}", f.code)})
        }
        None => {
            json!({"error_code": 50302, "message": "Kafka did not acknowledge the record in time; it stays queued and will be written when Kafka accepts it"})
        }
    }
}

/// A v3 report for a record refused before it reached Kafka.
pub fn v3_refusal(e: &ApiError) -> Value {
    let (status, _) = status_and_code(e);
    let mut report = json!({"error_code": status.as_u16(), "message": e.detail()});
    if let Some(wait) = retry_after(e) {
        report["retry_after_ms"] = json!(wait_ms(wait));
    }
    report
}

/// RFC 3339 text of a Kafka timestamp.
pub fn rfc3339(ms: i64) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    at.format(&time::format_description::well_known::Rfc3339)
        .ok()
}
