//! `POST /v1/topics/{topic}/records`.
//!
//! The order of steps is the design: everything that can refuse a request without reading its
//! body (key, topic, content type, declared length, budgets) runs first, so a refused client
//! costs us a few hundred nanoseconds and no memory, and a client announcing a large body
//! hears 429 before it uploads.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{header, request::Parts, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::{BodyExt, Limited};
use serde::Serialize;
use tracing::Instrument as _;

use crate::admission::Denial;
use crate::app::AppState;
use crate::body::{self, BodyError, Format, Record};
use crate::error::ApiError;
use crate::kafka::{Batch, FailureKind, TopicInfo};
use crate::ratelimit_headers;
use crate::tenant::{Tenant, Topic};

pub async fn produce(
    State(app): State<Arc<AppState>>,
    topic: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let Some(tenant) = authenticate(&app, &parts) else {
        return ApiError::Unauthorized.into_response();
    };
    let topic = match topic {
        Ok(Path(t)) => t,
        Err(e) => return ApiError::InvalidTopic(e.body_text()).into_response(),
    };
    // One span per request: tenant, topic, record count and outcome; never keys or payloads.
    let span = tracing::info_span!(
        "produce",
        tenant = %tenant.id,
        topic = %topic,
        records = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    let mut response = match produce_for(&app, &tenant, &topic, &parts, body)
        .instrument(span.clone())
        .await
    {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    span.record("status", response.status().as_u16());
    span.in_scope(|| tracing::debug!("produce request done"));
    // Every answer to an authenticated client says where its buckets stand.
    ratelimit_headers::insert(response.headers_mut(), &app.admission.view(&tenant));
    response
}

fn authenticate(app: &AppState, parts: &Parts) -> Option<Arc<Tenant>> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    app.tenants.load().authenticate(key.trim()).cloned()
}

/// `?async=true` answers 202 once records are handed to the producer.
fn is_async(parts: &Parts) -> Result<bool, ApiError> {
    let mut result = false;
    for pair in parts.uri.query().unwrap_or("").split('&') {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("", _) => {}
            ("async", "true" | "1" | "") => result = true,
            ("async", "false" | "0") => result = false,
            (name, _) => {
                return Err(ApiError::Malformed(format!(
                    "query parameter {name:?} is not understood (only async=true|false)"
                )))
            }
        }
    }
    Ok(result)
}

async fn produce_for(
    app: &AppState,
    tenant: &Tenant,
    topic: &str,
    parts: &Parts,
    body: Body,
) -> Result<Response, ApiError> {
    let topic = Topic::parse(topic).map_err(ApiError::InvalidTopic)?;
    if !tenant.may_write(&topic) {
        return Err(ApiError::ForbiddenTopic(topic.as_str().to_string()));
    }
    let async_mode = is_async(parts)?;
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let format = Format::from_content_type(&content_type)
        .ok_or(ApiError::UnsupportedMediaType(content_type))?;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > app.max_body_bytes) {
        return Err(ApiError::BodyTooLarge {
            limit: app.max_body_bytes,
        });
    }
    // Refuse before reading: the declared length bounds the record bytes from above.
    if let Err(refusal) = app.admission.precheck(tenant, declared.unwrap_or(1)) {
        tenant.stats.rejected(refusal.reason);
        keep_alive_if_small(declared, body).await;
        return Err(ApiError::RateLimited(refusal));
    }

    let bytes = read_body(app, body).await?;
    let records = body::parse(format, &bytes, &app.limits).map_err(|e| match e {
        BodyError::Malformed(d) => ApiError::Malformed(d),
        BodyError::TooManyRecords { limit } => ApiError::TooManyRecords { limit },
        BodyError::RecordTooLarge(d) => ApiError::RecordTooLarge(d),
    })?;

    match app
        .catalog
        .lookup(topic.as_str())
        .await
        .map_err(ApiError::KafkaUnavailable)?
    {
        TopicInfo::Missing => return Err(ApiError::UnknownTopic(topic.as_str().to_string())),
        TopicInfo::Exists { partitions } => check_partitions(&records, partitions)?,
    }

    tracing::Span::current().record("records", records.len());
    let record_bytes: u64 = records.iter().map(Record::size).sum();
    let (admitted, _view) = app
        .admission
        .admit(tenant, records.len() as u64, record_bytes);
    let lease = admitted.map_err(|d| match d {
        Denial::Refused(r) => {
            tenant.stats.rejected(r.reason);
            ApiError::RateLimited(r)
        }
        Denial::TooLarge(t) => ApiError::ExceedsBurst(t),
    })?;
    tenant.stats.admitted(records.len() as u64, record_bytes);
    let batch = app
        .producer
        .send(topic.as_str(), &records, lease, tenant.stats.clone());
    drop(records);
    drop(bytes);

    if async_mode && !has_failures(&batch) {
        return Ok((
            StatusCode::ACCEPTED,
            Json(serde_json::json!({"accepted": batch.len()})),
        )
            .into_response());
    }
    if tokio::time::timeout(app.delivery_timeout, batch.wait())
        .await
        .is_err()
    {
        let pending = batch.outcomes().filter(Option::is_none).count();
        return Err(ApiError::KafkaUnavailable(format!(
            "Kafka did not acknowledge {pending} of {} records within {} ms; they stay queued \
             and will be written when Kafka accepts them",
            batch.len(),
            app.delivery_timeout.as_millis()
        )));
    }
    Ok(delivery_response(&batch))
}

/// Largest declared body that is drained after an early refusal.
const DRAIN_MAX_BYTES: u64 = 16 * 1024;
/// How long draining may delay an early refusal.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

/// An HTTP/1.1 connection whose request body was not read cannot carry another request, so an
/// early 429 would cost the client a new connection (and a TLS handshake) for every refusal.
/// A small body that has already arrived — the common case — is read and dropped; a large or
/// slow one is not waited for, and its connection closes.
async fn keep_alive_if_small(declared: Option<u64>, body: Body) {
    if declared.is_some_and(|n| n <= DRAIN_MAX_BYTES) {
        let _ = tokio::time::timeout(DRAIN_WAIT, body.collect()).await;
    }
}

async fn read_body(app: &AppState, body: Body) -> Result<bytes::Bytes, ApiError> {
    let limit = usize::try_from(app.max_body_bytes).unwrap_or(usize::MAX);
    let collected =
        tokio::time::timeout(app.body_read_timeout, Limited::new(body, limit).collect())
            .await
            .map_err(|_| ApiError::BodyTimeout)?;
    match collected {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::BodyTooLarge {
            limit: app.max_body_bytes,
        }),
        Err(e) => Err(ApiError::Malformed(format!(
            "the body could not be read: {e}"
        ))),
    }
}

fn check_partitions(records: &[Record<'_>], partitions: u32) -> Result<(), ApiError> {
    for (i, r) in records.iter().enumerate() {
        if let Some(p) = r.partition.filter(|p| *p as u32 >= partitions) {
            return Err(ApiError::UnknownPartition(format!(
                "record {i}: partition {p} does not exist (the topic has {partitions})"
            )));
        }
    }
    Ok(())
}

fn has_failures(batch: &Batch) -> bool {
    batch.outcomes().any(|o| matches!(o, Some(Err(_))))
}

#[derive(Serialize)]
#[serde(untagged)]
enum RecordResult<'a> {
    Delivered { partition: i32, offset: i64 },
    Failed { error: &'a str },
}

/// 200 with offsets in record order; 502 (or 503 when Kafka was unreachable for every failed
/// record) with each record's offset or error.
fn delivery_response(batch: &Batch) -> Response {
    let mut failed = 0usize;
    let mut unavailable = 0usize;
    let results: Vec<RecordResult<'_>> = batch
        .outcomes()
        .map(|o| match o {
            Some(Ok(d)) => RecordResult::Delivered {
                partition: d.partition,
                offset: d.offset,
            },
            Some(Err(f)) => {
                failed += 1;
                if f.kind == FailureKind::Unavailable {
                    unavailable += 1;
                }
                RecordResult::Failed { error: &f.code }
            }
            None => {
                failed += 1;
                RecordResult::Failed { error: "pending" }
            }
        })
        .collect();
    if failed == 0 {
        return (
            StatusCode::OK,
            Json(serde_json::json!({"offsets": results})),
        )
            .into_response();
    }
    let (status, code) = if unavailable == failed {
        (StatusCode::SERVICE_UNAVAILABLE, "kafka_unavailable")
    } else {
        (StatusCode::BAD_GATEWAY, "delivery_failed")
    };
    let detail = format!("{failed} of {} records were not delivered", batch.len());
    (
        status,
        Json(serde_json::json!({"error": code, "detail": detail, "offsets": results})),
    )
        .into_response()
}
