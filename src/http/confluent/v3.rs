//! Confluent REST Proxy v3, under both `/v3` and `/kafka/v3` (Confluent Cloud's prefix):
//! the cluster list and cluster, produce (one record, several, or an open stream of them) and
//! produce batch.
//!
//! **Produce** ([`stream`]) takes records as concatenated JSON objects, with or without chunked
//! transfer, and answers HTTP 200 as soon as the stream starts, then one delivery report per
//! record, in order, each followed by `\r\n`. The pipeline's stream ([`crate::ingest::stream`])
//! does everything else: admission per record, bounds, re-checks, lifetime.
//!
//! **Batch** (`records:batch`) is answered 207 with successes and failures in request order.
//! An entry that does not decode is a failure of its own (the parser notes it; see
//! [`crate::body::ParseRecord::skip_failed`]) and the others are written; the entries written
//! are admitted whole, like a `/v1` request. A later pipeline step may fail more entries by
//! record index ([`crate::body::ParseRecord::fail_record`], which the schema step calls); the answer merges every note with Kafka's
//! outcomes by entry position.
//!
//! An adapter: it decodes the URL and the framing and encodes answers; statuses and bodies
//! come from [`super::answers`].

mod stream;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::answers::{
    error_response, unknown_cluster, v3_batch_answer, v3_batch_error, V3_MEDIA_TYPE as JSON,
};
use super::record::{V3Entry, V3Record};
use crate::app::AppState;
use crate::body::Framing;
use crate::http::extract::produce_request;
use crate::http::extract::Path;
use crate::ingest::{Ack, Api, BodyFormat, Respond};
use crate::outcome::{ApiError, Produced};

pub use stream::produce_records;

/// The routes, each under `/v3` and `/kafka/v3`.
pub const CLUSTERS: [&str; 2] = ["/v3/clusters", "/kafka/v3/clusters"];
pub const CLUSTER: [&str; 2] = [
    "/v3/clusters/{cluster_id}",
    "/kafka/v3/clusters/{cluster_id}",
];
pub const RECORDS: [&str; 2] = [
    "/v3/clusters/{cluster_id}/topics/{topic}/records",
    "/kafka/v3/clusters/{cluster_id}/topics/{topic}/records",
];
pub const BATCH: [&str; 2] = [
    "/v3/clusters/{cluster_id}/topics/{topic}/records:batch",
    "/kafka/v3/clusters/{cluster_id}/topics/{topic}/records:batch",
];

/// The cluster id these routes report.
fn cluster_id(app: &AppState) -> String {
    app.compat
        .cluster_id
        .clone()
        .or_else(|| app.ingest.catalog.cluster_id())
        .unwrap_or_else(|| "floodgate".into())
}

fn error(e: &ApiError) -> Response {
    error_response(e, JSON)
}

/// The cluster as v3 describes it: the fields clients read.
fn cluster_json(headers: &HeaderMap, prefix: &str, id: &str) -> Value {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let base = format!("http://{host}{prefix}/clusters/{id}");
    json!({
        "kind": "KafkaCluster",
        "metadata": {"self": base, "resource_name": format!("crn:///kafka={id}")},
        "cluster_id": id,
        "topics": {"related": format!("{base}/topics")},
    })
}

fn prefix_of(path: &str) -> &'static str {
    if path.starts_with("/kafka/v3") {
        "/kafka/v3"
    } else {
        "/v3"
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

pub async fn list_clusters(State(app): State<Arc<AppState>>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let list = || {
        let prefix = prefix_of(parts.uri.path());
        let id = cluster_id(&app);
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        json_response(
            StatusCode::OK,
            &json!({
                "kind": "KafkaClusterList",
                "metadata": {"self": format!("http://{host}{prefix}/clusters"), "next": null},
                "data": [cluster_json(&parts.headers, prefix, &id)],
            }),
        )
    };
    app.ingest
        .answer_authenticated(
            &crate::http::extract::peer(&parts),
            &parts.headers,
            error,
            list,
        )
        .await
}

pub async fn get_cluster(
    State(app): State<Arc<AppState>>,
    Path(requested): Path<String>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let describe = || {
        let id = cluster_id(&app);
        if requested != id {
            return unknown_cluster(&requested, &id);
        }
        json_response(
            StatusCode::OK,
            &cluster_json(&parts.headers, prefix_of(parts.uri.path()), &id),
        )
    };
    app.ingest
        .answer_authenticated(
            &crate::http::extract::peer(&parts),
            &parts.headers,
            error,
            describe,
        )
        .await
}

/// The answer to a request naming another cluster, when the operator asked for the check —
/// given only to an authenticated client (the 404 names the cluster this gateway serves).
async fn other_cluster(
    app: &AppState,
    parts: &axum::http::request::Parts,
    requested: &str,
) -> Option<Response> {
    let id = cluster_id(app);
    if !app.compat.check_cluster_id || requested == id {
        return None;
    }
    let unknown = || unknown_cluster(requested, &id);
    Some(
        app.ingest
            .answer_authenticated(
                &crate::http::extract::peer(parts),
                &parts.headers,
                error,
                unknown,
            )
            .await,
    )
}

/// A v3 route's 415: the content type sent, and what this route takes instead.
fn not_json(headers: &HeaderMap, send: &str) -> ApiError {
    let sent = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    ApiError::UnsupportedMediaType(format!(
        "Content-Type {sent:?} is not accepted on this Confluent v3 route; {send}"
    ))
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .is_some_and(|v| v.eq_ignore_ascii_case(JSON))
}

/// `records:batch`'s answers: 207 naming each entry's id (from the parser, which saw them).
struct BatchAnswers<'a> {
    parser: &'a V3Record,
    cluster: String,
    topic: &'a str,
    max: usize,
}

impl Respond for BatchAnswers<'_> {
    fn respond(&self, outcome: Result<Produced, ApiError>) -> Response {
        batch_response(
            outcome,
            &self.cluster,
            self.topic,
            self.max,
            &self.parser.take_seen(),
        )
    }

    fn detach(&self) -> Arc<dyn Respond> {
        Arc::new(DetachedBatchAnswers {
            seen: self.parser.take_seen(),
            cluster: self.cluster.clone(),
            topic: self.topic.to_string(),
            max: self.max,
        })
    }
}

/// The same, owning the entries' ids: answers once Kafka has, after the request has gone.
struct DetachedBatchAnswers {
    seen: Vec<V3Entry>,
    cluster: String,
    topic: String,
    max: usize,
}

impl Respond for DetachedBatchAnswers {
    fn respond(&self, outcome: Result<Produced, ApiError>) -> Response {
        batch_response(outcome, &self.cluster, &self.topic, self.max, &self.seen)
    }

    fn detach(&self) -> Arc<dyn Respond> {
        Arc::new(DetachedBatchAnswers {
            seen: self.seen.clone(),
            cluster: self.cluster.clone(),
            topic: self.topic.clone(),
            max: self.max,
        })
    }
}

fn batch_response(
    outcome: Result<Produced, ApiError>,
    cluster: &str,
    topic: &str,
    max: usize,
    seen: &[V3Entry],
) -> Response {
    match outcome {
        Ok(Produced::Settled(batch)) => v3_batch_answer(cluster, topic, &batch, seen),
        Ok(Produced::Accepted { .. }) => StatusCode::ACCEPTED.into_response(),
        Err(e) => v3_batch_error(&e, max),
    }
}

/// `records:batch`: `{"entries": [{"id", ...record}]}`, admitted whole; 207 with successes and
/// failures in request order.
pub async fn produce_batch(
    State(app): State<Arc<AppState>>,
    Path((cluster, topic)): Path<(String, String)>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    if let Some(response) = other_cluster(&app, &parts, &cluster).await {
        return response;
    }
    let parser = V3Record::batch().with_registry(app.ingest.schemas.has_registry());
    let max = app.compat.batch_max_entries;
    let format = if is_json(&parts.headers) {
        Ok(BodyFormat {
            framing: Framing::Envelope("entries"),
            record: &parser,
            max_records: Some(max),
            schemas: Some(&parser),
        })
    } else {
        Err(not_json(
            &parts.headers,
            "send the batch as application/json",
        ))
    };
    let respond = BatchAnswers {
        parser: &parser,
        cluster: cluster_id(&app),
        topic: &topic,
        max,
    };
    let request = produce_request(&parts, Api::V3, &topic, Ack::Kafka, body, &respond);
    app.ingest.produce(request, format).await
}

/// The schema step reads what each v3 record's key and value want from the parser.
impl crate::ingest::RecordSchemas for V3Record {
    fn take_wanted(
        &self,
        _records: &[crate::record::Record<'_>],
    ) -> Result<Vec<crate::schema::Wanted>, ApiError> {
        Ok(V3Record::take_wanted(self))
    }

    fn wanted_at(&self, index: usize) -> Option<crate::schema::Wanted> {
        V3Record::wanted_at(self, index)
    }
}
