//! The `/v1` wire format: `POST /v1/topics/{topic}/records` with a JSON (`{"records":[...]}`)
//! or NDJSON body, `?async=true` for a 202 once enqueued. An adapter on the ingest pipeline:
//! it picks the decoder for the content type and encodes the outcome in floodgate's own shape.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::app::AppState;
use crate::body::v1::V1Record;
use crate::body::Format;
use crate::ingest::{Ack, Api, BodyFormat, OwnShapes, ProduceRequest};
use crate::outcome::ApiError;

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
            // Authentication still comes first: an unauthenticated client learns nothing.
            if let Err(e) = app.ingest.authenticate(peer(&parts), &parts.headers).await {
                return e.into_response();
            }
            return ApiError::InvalidTopic(e.body_text()).into_response();
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
    let request = ProduceRequest {
        api: Api::V1,
        peer: peer(&parts),
        headers: &parts.headers,
        path: parts.uri.path(),
        topic,
        ack,
        body,
        respond: &OwnShapes,
    };
    app.ingest.produce(request, decoder).await
}

/// The client's address and verified client certificate, as the connection loop recorded them.
pub fn peer(parts: &axum::http::request::Parts) -> crate::credential::Caller {
    crate::credential::Caller {
        ip: parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip()),
        cert: parts
            .extensions
            .get::<Arc<crate::tls::ClientCertificate>>()
            .cloned(),
        trust: parts
            .extensions
            .get::<crate::server::ConnectionTrust>()
            .cloned(),
    }
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
