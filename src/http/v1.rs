//! The `/v1` wire format: `POST /v1/topics/{topic}/records` with a JSON (`{"records":[...]}`)
//! or NDJSON body, `?async=true` for a 202 once enqueued. An adapter on the ingest pipeline:
//! it picks the decoder for the content type and encodes the outcome in floodgate's own shape.
//!
//! The format's own parts live here too: [`format`] (which `Content-Type` is which framing),
//! [`record`] (the record shape, through serde_json, naming every error) and `fast` (the
//! common record read in one pass). The decoder they plug into is [`crate::body`]'s.
//!
//! Layer: HTTP edges. Imports the app state, the pipeline, the outcome room and the decoder.

mod fast;
pub mod format;
pub mod record;

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::app::AppState;
use crate::body::{BodyError, Decoder, RecordArena};
use crate::config::RequestBounds;
use crate::ingest::{Ack, Api, BodyFormat, OwnShapes};
use crate::outcome::ApiError;
pub use format::Format;
pub use record::V1Record;

/// The route, as registered and as documented in `openapi.json`.
pub const PRODUCE: &str = "/v1/topics/{topic}/records";

/// JSON or NDJSON records of the `/v1` shape.
fn body_format(format: Format) -> BodyFormat<'static> {
    BodyFormat {
        framing: format.framing(),
        record: &V1Record,
        max_records: None,
        schemas: None,
    }
}

pub async fn produce(
    State(app): State<Arc<AppState>>,
    topic: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let topic = match &topic {
        Ok(Path(t)) => t.as_str(),
        Err(e) => {
            let invalid = ApiError::InvalidTopic(e.body_text());
            return app
                .ingest
                .answer_authenticated(
                    &super::extract::peer(&parts),
                    &parts.headers,
                    |e| e.clone().into_response(),
                    || invalid.into_response(),
                )
                .await;
        }
    };
    let wire = ack_mode(parts.uri.query()).and_then(|ack| {
        // Borrowed from the header; copied only into the error that names it.
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()))
            .unwrap_or_default();
        let format = Format::from_content_type(&content_type)
            .ok_or_else(|| ApiError::UnsupportedMediaType(content_type.to_string()))?;
        Ok((ack, body_format(format)))
    });
    let (ack, decoder) = match wire {
        Ok((ack, format)) => (ack, Ok(format)),
        Err(e) => (Ack::Kafka, Err(e)),
    };
    let request = super::extract::produce_request(&parts, Api::V1, topic, ack, body, &OwnShapes);
    app.ingest.produce(request, decoder).await
}

/// `?async=true` answers 202 once records are handed to the producer.
fn ack_mode(query: Option<&str>) -> Result<Ack, ApiError> {
    let mut ack = Ack::Kafka;
    for pair in query.unwrap_or("").split('&') {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("", _) => {}
            ("async", "true" | "1") => ack = Ack::Enqueued,
            ("async", "false" | "0") => ack = Ack::Kafka,
            ("async", other) => {
                return Err(ApiError::Malformed(format!(
                    "query parameter async must be true or false, not {other:?}"
                )))
            }
            (name, _) => {
                return Err(ApiError::Malformed(format!(
                    "query parameter {name:?} is not understood (only async=true|false)"
                )))
            }
        }
    }
    Ok(ack)
}

/// Decodes a whole `/v1` body at once (for tests, benches and the fuzz target; the gateway
/// feeds a [`Decoder`] as chunks arrive).
pub fn parse(
    format: Format,
    body: &[u8],
    bounds: &RequestBounds,
) -> Result<RecordArena, BodyError> {
    let mut decoder = Decoder::new(format.framing(), V1Record, bounds);
    decoder.push(body)?;
    decoder.finish()
}
