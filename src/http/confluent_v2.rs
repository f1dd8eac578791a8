//! Confluent REST Proxy v2 produce, as an adapter on the ingest pipeline:
//! `POST /topics/{topic}` and `POST /topics/{topic}/partitions/{partition}`, bodies
//! `{"records": [{"key", "value", "partition"}]}` in the binary (base64) or json embedded
//! format, answers in v2's shape. Budgets, the buffer and the early check apply exactly as on
//! `/v1`; a 429 carries `Retry-After` and the RateLimit fields, which Confluent's proxy never
//! sends.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::app::AppState;
use crate::body::confluent::{V2Format, V2Record};
use crate::body::Framing;
use crate::ingest::{Ack, Api, BodyFormat, ProduceRequest, Respond};
use crate::outcome::confluent::{error_response, not_acceptable, v2_produced, V2_MEDIA_TYPE};
use crate::outcome::{ApiError, Produced};
use crate::ratelimit_headers;

pub const TOPIC: &str = "/topics/{topic}";
pub const PARTITION: &str = "/topics/{topic}/partitions/{partition}";

/// The embedded format a `Content-Type` asks for, or why floodgate cannot take it.
fn embedded_format(headers: &HeaderMap) -> Result<V2Format, ApiError> {
    let value = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/vnd.kafka.binary.v2+json" => Ok(V2Format::Binary),
        "application/vnd.kafka.json.v2+json" => Ok(V2Format::Json),
        "application/vnd.kafka.avro.v2+json"
        | "application/vnd.kafka.jsonschema.v2+json"
        | "application/vnd.kafka.protobuf.v2+json" => Err(ApiError::UnsupportedMediaType(format!(
            "{value} needs a Schema Registry, which floodgate does not serve; send application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json"
        ))),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "{value:?}; send application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json"
        ))),
    }
}

/// Can the client take one of the media types a v2 answer is written in?
fn accepts_answer(headers: &HeaderMap) -> bool {
    let mut any = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(text) = value.to_str() else { continue };
        for range in text.split(',') {
            any = true;
            let essence = range
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if matches!(
                essence.as_str(),
                "*/*"
                    | "application/*"
                    | "application/vnd.kafka.v2+json"
                    | "application/vnd.kafka+json"
                    | "application/json"
            ) {
                return true;
            }
        }
    }
    !any
}

/// v2's answers: Confluent's shapes.
struct V2Answers;

impl Respond for V2Answers {
    fn respond(&self, outcome: Result<Produced, ApiError>) -> Response {
        match outcome {
            Ok(Produced::Settled(batch)) => v2_produced(&batch),
            Ok(Produced::Accepted { .. }) => StatusCode::ACCEPTED.into_response(),
            Err(e) => error_response(&e, V2_MEDIA_TYPE),
        }
    }

    fn detach(&self) -> Arc<dyn Respond> {
        Arc::new(V2Answers)
    }
}

pub async fn produce(
    State(app): State<Arc<AppState>>,
    Path(topic): Path<String>,
    request: Request,
) -> Response {
    produce_to(app, topic, None, request).await
}

pub async fn produce_partition(
    State(app): State<Arc<AppState>>,
    Path((topic, partition)): Path<(String, String)>,
    request: Request,
) -> Response {
    let partition = partition.parse::<i32>().ok().filter(|p| *p >= 0);
    let Some(partition) = partition else {
        return error_response(
            &ApiError::UnknownPartition(
                "the partition in the path is not a partition number".into(),
            ),
            V2_MEDIA_TYPE,
        );
    };
    produce_to(app, topic, Some(partition), request).await
}

async fn produce_to(
    app: Arc<AppState>,
    topic: String,
    partition: Option<i32>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    if !accepts_answer(&parts.headers) {
        return not_acceptable();
    }
    let parser = embedded_format(&parts.headers).map(|format| V2Record {
        format,
        default_partition: partition,
    });
    let format = parser.as_ref().map(|p| BodyFormat {
        framing: Framing::Envelope("records"),
        record: p,
        max_records: None,
        schemas: None,
    });
    let request = ProduceRequest {
        api: Api::V2,
        peer: super::v1::peer(&parts),
        headers: &parts.headers,
        path: parts.uri.path(),
        topic: &topic,
        ack: Ack::Kafka,
        body,
        respond: &V2Answers,
    };
    let (tenant, mut response) = app
        .ingest
        .produce(request, format.map_err(|e| e.clone()))
        .await;
    if let Some(tenant) = tenant {
        ratelimit_headers::insert(response.headers_mut(), &app.ingest.view(&tenant));
    }
    response
}
