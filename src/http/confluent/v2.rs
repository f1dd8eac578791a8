//! Confluent REST Proxy v2 produce, as an adapter on the ingest pipeline:
//! `POST /topics/{topic}` and `POST /topics/{topic}/partitions/{partition}`, bodies
//! `{"records": [{"key", "value", "partition"}]}` in the binary (base64) or json embedded
//! format (the schema fields `key_schema`, `key_schema_id`, `value_schema`,
//! `value_schema_id` may stand beside `records`), answers in v2's shape. Budgets, the buffer
//! and the early check apply exactly as on `/v1`; a 429 carries `Retry-After` and the
//! RateLimit fields, which Confluent's proxy never sends. An empty `records` list is 422, as
//! kafka-rest answers it (its `records` must not be empty).
//!
//! **REST Proxy v1's content types** (`application/vnd.kafka.v1+json`, `.binary.v1+json`,
//! `.json.v1+json`) are served here too, answered in v1's media type: kafka-rest's v1 produce
//! took the same body and gave the same answer (`{"offsets": [{"partition", "offset",
//! "error_code", "error"}], "key_schema_id", "value_schema_id"}`, embedded format binary when
//! none is named), so serving them costs nothing and lets old clients (kafka-rest's own Node
//! client sends `application/vnd.kafka.binary.v1+json`) switch unchanged. v1's Avro
//! (`.avro.v1+json`) is refused with a 415 naming its v2 equivalent.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::app::AppState;
use crate::http::extract::Path;
use parking_lot::Mutex;

use super::answers::{
    error_response, error_with, not_acceptable, v2_produced, V1_MEDIA_TYPE, V2_MEDIA_TYPE,
};
use super::record::{V2Format, V2Record, V2Side, V2_FRAMING};
use crate::http::extract::produce_request;
use crate::ingest::{Ack, Api, BodyFormat, RecordSchemas, Respond};
use crate::outcome::{ApiError, Produced};
use crate::record::Record;
use crate::schema;

pub const TOPIC: &str = "/topics/{topic}";
pub const PARTITION: &str = "/topics/{topic}/partitions/{partition}";

/// What this route takes, for 415 details.
const SEND: &str =
    "send application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json \
     (and, with a Schema Registry, application/vnd.kafka.avro.v2+json, .jsonschema.v2+json or \
     .protobuf.v2+json)";

/// The REST Proxy API version a request's content type names: its answer is written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// The embedded format (and API version) a `Content-Type` asks for, or why floodgate cannot
/// take it; every 415 detail names what to send instead.
fn embedded_format(headers: &HeaderMap, registry: bool) -> Result<(V2Format, Version), ApiError> {
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
        "application/vnd.kafka.binary.v2+json" => Ok((V2Format::Binary, Version::V2)),
        "application/vnd.kafka.json.v2+json" => Ok((V2Format::Json, Version::V2)),
        // v1 with no embedded format meant binary.
        "application/vnd.kafka.v1+json" | "application/vnd.kafka.binary.v1+json" => {
            Ok((V2Format::Binary, Version::V1))
        }
        "application/vnd.kafka.json.v1+json" => Ok((V2Format::Json, Version::V1)),
        "application/vnd.kafka.avro.v1+json" => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {essence} (REST Proxy v1's Avro) is not served: send the same body as \
             application/vnd.kafka.avro.v2+json; records without a schema as \
             application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json"
        ))),
        "application/vnd.kafka.avro.v2+json"
        | "application/vnd.kafka.jsonschema.v2+json"
        | "application/vnd.kafka.protobuf.v2+json"
            if !registry =>
        {
            Err(ApiError::UnsupportedMediaType(format!(
                "Content-Type {essence} needs a Schema Registry, which this gateway has not configured ([schema_registry] url); {SEND}"
            )))
        }
        "application/vnd.kafka.avro.v2+json" => {
            Ok((V2Format::Schema(schema::Format::Avro), Version::V2))
        }
        "application/vnd.kafka.jsonschema.v2+json" => {
            Ok((V2Format::Schema(schema::Format::Json), Version::V2))
        }
        "application/vnd.kafka.protobuf.v2+json" => {
            Ok((V2Format::Schema(schema::Format::Protobuf), Version::V2))
        }
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {value:?} is not accepted on this Confluent v2 route; {SEND} \
             (REST Proxy v1's application/vnd.kafka[.binary|.json].v1+json are taken too)"
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
                    | "application/vnd.kafka.v1+json"
                    | "application/vnd.kafka+json"
                    | "application/json"
            ) {
                return true;
            }
        }
    }
    !any
}

/// The key and value schema ids a request's records were written with: set by the schema
/// step, read by the answer.
type SchemaIds = Arc<Mutex<(Option<u32>, Option<u32>)>>;

/// v2's answers (and v1's, the same shapes in v1's media type): Confluent's shapes.
#[derive(Clone)]
struct V2Answers {
    media_type: &'static str,
    ids: SchemaIds,
}

impl Respond for V2Answers {
    fn respond(&self, outcome: Result<Produced, ApiError>) -> Response {
        match outcome {
            Ok(Produced::Settled(batch)) => {
                let ids = *self.ids.lock();
                v2_produced(&batch, self.media_type, ids)
            }
            Ok(Produced::Accepted { .. }) => StatusCode::ACCEPTED.into_response(),
            // kafka-rest validates `records` as not empty: a constraint violation, 422.
            Err(ApiError::NoRecords) => error_with(
                StatusCode::UNPROCESSABLE_ENTITY,
                422,
                "records must not be empty: send at least one record in \"records\"".into(),
                None,
                self.media_type,
            ),
            Err(e) => error_response(&e, self.media_type),
        }
    }

    fn detach(&self) -> Arc<dyn Respond> {
        Arc::new(self.clone())
    }
}

/// What a v2 body's records want of the schema step: every key the key schema its side
/// fields name, every value the value schema (`key_schema_id` / `value_schema_id`, or the raw
/// `key_schema` / `value_schema`, under `<topic>-key` / `<topic>-value`).
struct V2Schemas<'a> {
    parser: &'a V2Record,
    ids: SchemaIds,
}

/// A side field's schema: its id, or its raw text; `None` when not sent (or `null`).
fn side_use(
    format: schema::Format,
    raw: Option<&str>,
    id: Option<&str>,
    field: &str,
) -> Result<Option<schema::Use>, ApiError> {
    let source = match (id.filter(|t| *t != "null"), raw.filter(|t| *t != "null")) {
        (Some(id), _) => schema::Source::Id(serde_json::from_str::<u32>(id).map_err(|_| {
            ApiError::InvalidRecord(format!(
                "{field}_schema_id must be a schema id (a whole number), not {id}"
            ))
        })?),
        (None, Some(text)) => schema::Source::Raw(
            format,
            serde_json::from_str::<String>(text)
                .map_err(|_| {
                    ApiError::InvalidRecord(format!(
                        "{field}_schema must be the schema as a JSON string"
                    ))
                })?
                .into(),
        ),
        (None, None) => return Ok(None),
    };
    Ok(Some(schema::Use {
        source,
        subject: None,
        strategy: schema::Strategy::TopicName,
        format: Some(format),
    }))
}

impl RecordSchemas for V2Schemas<'_> {
    fn take_wanted(&self, records: &[Record<'_>]) -> Result<Vec<schema::Wanted>, ApiError> {
        let side = self.parser.take_side();
        let V2Format::Schema(format) = self.parser.format else {
            if side != V2Side::default() {
                return Err(ApiError::InvalidRecord(
                    "key_schema, key_schema_id, value_schema and value_schema_id are for the \
                     avro, jsonschema and protobuf embedded formats"
                        .into(),
                ));
            }
            return Ok(Vec::new());
        };
        let key = side_use(
            format,
            side.key_schema.as_deref(),
            side.key_schema_id.as_deref(),
            "key",
        )?;
        let value = side_use(
            format,
            side.value_schema.as_deref(),
            side.value_schema_id.as_deref(),
            "value",
        )?;
        // kafka-rest's 42201 / 42202: data in a schema format needs its schema.
        if key.is_none() {
            if let Some(i) = records.iter().position(|r| r.key.is_some()) {
                return Err(ApiError::SchemaNotFound(format!(
                    "record {i}: the record has a key and the request names no key_schema or key_schema_id"
                )));
            }
        }
        if value.is_none() {
            if let Some(i) = records.iter().position(|r| r.value.is_some()) {
                return Err(ApiError::SchemaNotFound(format!(
                    "record {i}: the record has a value and the request names no value_schema or value_schema_id"
                )));
            }
        }
        Ok(vec![schema::Wanted { key, value }; records.len()])
    }

    fn used_ids(&self, key: Option<u32>, value: Option<u32>) {
        *self.ids.lock() = (key, value);
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
    let wire = embedded_format(&parts.headers, app.ingest.schemas.has_registry());
    let ids = SchemaIds::default();
    let respond = V2Answers {
        media_type: match wire {
            Ok((_, Version::V1)) => V1_MEDIA_TYPE,
            _ => V2_MEDIA_TYPE,
        },
        ids: ids.clone(),
    };
    let parser = wire.map(|(format, _)| V2Record::new(format, partition));
    let schemas = parser.as_ref().ok().map(|parser| V2Schemas {
        parser,
        ids: ids.clone(),
    });
    let format = parser.as_ref().map(|p| BodyFormat {
        framing: V2_FRAMING,
        record: p,
        max_records: None,
        schemas: schemas.as_ref().map(|s| s as &dyn RecordSchemas),
    });
    let request = produce_request(&parts, Api::V2, &topic, Ack::Kafka, body, &respond);
    app.ingest
        .produce(request, format.map_err(|e| e.clone()))
        .await
}
