//! Produce results: 202 with the records accepted, 200 with each record's offset, 502 or 503
//! with each record's offset or error (`/v1`; Confluent's shapes are in `confluent`).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::kafka::{Batch, FailureKind};

/// A 202's body.
#[derive(Serialize)]
struct AcceptedBody {
    accepted: usize,
}

/// What a produce request achieved.
#[derive(Debug)]
pub enum Produced {
    /// Handed to the producer (async mode): 202.
    Accepted { records: usize },
    /// Every record has Kafka's answer: 200, or 502/503 if some were not delivered.
    Settled(Arc<Batch>),
}

#[derive(Serialize)]
#[serde(untagged)]
enum RecordResult<'a> {
    Delivered { partition: i32, offset: i64 },
    Failed { error: &'a str },
}

impl IntoResponse for Produced {
    /// 202 `{"accepted": N}`; 200 with offsets in record order; 502 (or 503 when Kafka was
    /// unreachable for every failed record) with each record's offset or error.
    fn into_response(self) -> Response {
        let batch = match self {
            Self::Accepted { records } => {
                return (
                    StatusCode::ACCEPTED,
                    Json(AcceptedBody { accepted: records }),
                )
                    .into_response()
            }
            Self::Settled(batch) => batch,
        };
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
        // Typed answers, not `json!`: that would build a JSON map per record, which is what
        // the profile of a 100-record request showed first.
        if failed == 0 {
            return (StatusCode::OK, Json(Offsets { offsets: results })).into_response();
        }
        let (status, code) = if unavailable == failed {
            (StatusCode::SERVICE_UNAVAILABLE, "kafka_unavailable")
        } else {
            (StatusCode::BAD_GATEWAY, "delivery_failed")
        };
        let detail = format!("{failed} of {} records were not delivered", batch.len());
        (
            status,
            Json(PartlyDelivered {
                error: code,
                detail,
                offsets: results,
            }),
        )
            .into_response()
    }
}

#[derive(Serialize)]
struct Offsets<'a> {
    offsets: Vec<RecordResult<'a>>,
}

#[derive(Serialize)]
struct PartlyDelivered<'a> {
    error: &'static str,
    detail: String,
    offsets: Vec<RecordResult<'a>>,
}
