//! What a produce request brings to the pipeline and what it is answered with: the wire
//! format's body and encoder (the adapter's part), when it is answered, and the request itself.

use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;

use super::RecordSchemas;
use crate::body::{Framing, ParseRecord};
use crate::credential::Caller;
use crate::idempotency::StoredAnswer;
use crate::outcome::{ApiError, Produced};
use crate::record::Api;

/// A wire format's body: how its records are framed, and what one record looks like.
#[derive(Clone, Copy)]
pub struct BodyFormat<'a> {
    pub framing: Framing,
    pub record: &'a dyn ParseRecord,
    /// The most records one request may carry, when the format's own limit is lower than
    /// `[limits] max_records_per_request` (a Confluent batch).
    pub max_records: Option<usize>,
    /// What the records' keys and values want of the schema step, when the format says.
    pub schemas: Option<&'a dyn RecordSchemas>,
}

/// When a produce request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Once every record has Kafka's answer (200 with offsets).
    Kafka,
    /// Once every record is handed to the producer (202).
    Enqueued,
}

impl Ack {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Ack::Kafka => "kafka",
            Ack::Enqueued => "enqueued",
        }
    }
}

/// How a wire format writes the pipeline's outcomes: the adapter's encoder. The pipeline calls
/// it once an outcome is final, so the answer to a request with an `Idempotency-Key` can be
/// stored exactly as it was sent and replayed byte for byte.
pub trait Respond: Send + Sync {
    fn respond(&self, outcome: Result<Produced, ApiError>) -> Response;
    /// An encoder that owns what it needs, to answer after the request has gone (a keyed
    /// request whose records Kafka has not answered yet). Called after the body was decoded.
    fn detach(&self) -> Arc<dyn Respond>;
}

/// floodgate's own shapes (`outcome`'s): `/v1`'s answers.
pub struct OwnShapes;

impl Respond for OwnShapes {
    fn respond(&self, outcome: Result<Produced, ApiError>) -> Response {
        use axum::response::IntoResponse as _;
        match outcome {
            Ok(produced) => produced.into_response(),
            Err(error) => error.into_response(),
        }
    }

    fn detach(&self) -> Arc<dyn Respond> {
        Arc::new(OwnShapes)
    }
}

/// One produce request as the pipeline sees it.
pub struct ProduceRequest<'a> {
    /// Which API the request came through (counted per tenant).
    pub api: Api,
    /// The client's address, when known (failed authentications are limited per address), and
    /// its verified client certificate.
    pub peer: Caller,
    pub headers: &'a HeaderMap,
    /// The request's path (part of a keyed request's fingerprint: topic, partition, cluster).
    pub path: &'a str,
    /// The topic as the URL named it, already percent-decoded.
    pub topic: &'a str,
    pub ack: Ack,
    pub body: Body,
    /// The wire format's encoder.
    pub respond: &'a dyn Respond,
}

/// What the pipeline answers with: an outcome for the adapter's encoder, or an answer already
/// encoded (a keyed request's, as stored).
pub(super) enum Answer {
    Outcome(Result<Produced, ApiError>),
    /// Encoded already, and stored (a keyed request's first answer).
    Sent(Response),
    Stored {
        answer: StoredAnswer,
        /// Sent again to a retry (`Idempotent-Replayed: true`), not to the original.
        replayed: bool,
    },
}

impl From<ApiError> for Answer {
    fn from(e: ApiError) -> Self {
        Answer::Outcome(Err(e))
    }
}
