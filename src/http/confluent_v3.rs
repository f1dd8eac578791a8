//! Confluent REST Proxy v3, under both `/v3` and `/kafka/v3` (Confluent Cloud's prefix):
//! the cluster list and cluster, produce (one record, several, or an open stream of them) and
//! produce batch.
//!
//! **Produce** takes records as concatenated JSON objects, with or without chunked transfer,
//! and answers HTTP 200 as soon as the stream starts, then one delivery report per record, in
//! order, each followed by `\r\n` and sent as soon as that record and all before it are
//! settled — full duplex: a client may read reports while it is still sending. Each record is
//! admitted on its own as it arrives: a record over budget gets an in-stream report with
//! `error_code` 429 and `retry_after_ms`, and is not written; later records may still succeed.
//! Every edge is bounded: at most `[compat] stream_max_unsettled` records handed to Kafka and
//! not yet reported (then floodgate stops reading the stream until reports drain), an idle
//! time and a total time per stream, the body budget for the bytes being decoded.
//!
//! **Batch** (`records:batch`) is admitted whole, like a `/v1` request, and answered 207 with
//! successes and failures in request order.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::app::AppState;
use crate::body::confluent::{DataType, V3Record, V3Types};
use crate::body::{Decoder, Framing, Record};
use crate::buffer::BufferLease;
use crate::identity::Topic;
use crate::ingest::{Ack, Api, BodyFormat, ProduceRequest};
use crate::kafka::Batch;
use crate::outcome::confluent::{
    error_response, error_with, v3_refusal, v3_report, Described, V3Report,
};
use crate::outcome::{ApiError, Produced};
use crate::ratelimit_headers;
use crate::record::Charge;
use crate::tenant::Tenant;

const JSON: &str = "application/json";

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
    if let Err(e) = app
        .ingest
        .authenticate(super::v1::peer(&parts), &parts.headers)
    {
        return error(&e);
    }
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
}

pub async fn get_cluster(
    State(app): State<Arc<AppState>>,
    Path(requested): Path<String>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    if let Err(e) = app
        .ingest
        .authenticate(super::v1::peer(&parts), &parts.headers)
    {
        return error(&e);
    }
    let id = cluster_id(&app);
    if requested != id {
        return error_with(
            StatusCode::NOT_FOUND,
            40401,
            format!("no cluster {requested:?}; this gateway serves cluster {id:?}"),
            None,
            JSON,
        );
    }
    json_response(
        StatusCode::OK,
        &cluster_json(&parts.headers, prefix_of(parts.uri.path()), &id),
    )
}

/// The answer to a request naming another cluster, when the operator asked for the check.
fn other_cluster(app: &AppState, requested: &str) -> Option<Response> {
    let id = cluster_id(app);
    (app.compat.check_cluster_id && requested != id).then(|| {
        error_with(
            StatusCode::NOT_FOUND,
            40401,
            format!("no cluster {requested:?}; this gateway serves cluster {id:?}"),
            None,
            JSON,
        )
    })
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .is_some_and(|v| v.eq_ignore_ascii_case(JSON))
}

fn described(types: Option<DataType>, bytes: Option<&[u8]>) -> Option<Described> {
    types.map(|t| Described {
        data_type: t.as_str(),
        size: bytes.map_or(0, <[u8]>::len),
    })
}

/// `records:batch`: `{"entries": [{"id", ...record}]}`, admitted whole; 207 with successes and
/// failures in request order.
pub async fn produce_batch(
    State(app): State<Arc<AppState>>,
    Path((cluster, topic)): Path<(String, String)>,
    request: Request,
) -> Response {
    if let Some(response) = other_cluster(&app, &cluster) {
        return response;
    }
    let (parts, body) = request.into_parts();
    let parser = V3Record::batch();
    let max = app.compat.batch_max_entries;
    let format = if is_json(&parts.headers) {
        Ok(BodyFormat {
            framing: Framing::Envelope("entries"),
            record: &parser,
            max_records: Some(max),
        })
    } else {
        Err(ApiError::UnsupportedMediaType(
            "send the batch as application/json".into(),
        ))
    };
    let request = ProduceRequest {
        api: Api::V3,
        peer: super::v1::peer(&parts),
        headers: &parts.headers,
        topic: &topic,
        ack: Ack::Kafka,
        body,
    };
    let (tenant, outcome) = app.ingest.produce(request, format).await;
    let batch_rule =
        |message: String| error_with(StatusCode::UNPROCESSABLE_ENTITY, 42208, message, None, JSON);
    let mut response = match outcome {
        Ok(Produced::Settled(batch)) => {
            let seen = parser.take_seen();
            batch_answer(&cluster_id(&app), &topic, &batch, &seen)
        }
        Ok(Produced::Accepted { .. }) => StatusCode::ACCEPTED.into_response(),
        Err(ApiError::TooManyRecords { .. }) => {
            batch_rule(format!("a batch has 1 to {max} entries"))
        }
        Err(ApiError::Malformed(m)) if m.contains("no records") => {
            batch_rule(format!("a batch has 1 to {max} entries"))
        }
        Err(ApiError::InvalidRecord(m)) if m.contains(": entry id") => batch_rule(m),
        Err(e) => error(&e),
    };
    if let Some(tenant) = tenant {
        ratelimit_headers::insert(response.headers_mut(), &app.ingest.view(&tenant));
    }
    response
}

fn batch_answer(
    cluster: &str,
    topic: &str,
    batch: &Batch,
    seen: &[(Option<String>, V3Types)],
) -> Response {
    let (mut successes, mut failures) = (Vec::new(), Vec::new());
    for (outcome, (id, types)) in batch.outcomes().zip(seen) {
        // Sizes are not kept per record once sent; a batch answer names the types.
        let sized = |t: Option<DataType>| {
            t.map(|t| Described {
                data_type: t.as_str(),
                size: 0,
            })
        };
        let mut report = v3_report(
            cluster,
            topic,
            outcome,
            sized(types.key),
            sized(types.value),
        );
        report.id = Some(id.as_deref().unwrap_or_default());
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
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

#[derive(serde::Serialize)]
struct BatchAnswer<'a> {
    successes: Vec<V3Report<'a>>,
    failures: Vec<V3Report<'a>>,
}

/// One entry of a stream's report queue: a record on its way to Kafka, or a report that is
/// already known (a refusal, a malformed record).
enum Pending {
    Sent {
        batch: Arc<Batch>,
        index: usize,
        key: Option<Described>,
        value: Option<Described>,
    },
    Known(V3Report<'static>),
}

/// A response body fed by a channel of report lines.
struct Reports(mpsc::Receiver<Bytes>);

impl axum::body::HttpBody for Reports {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|line| line.map(|l| Ok(hyper::body::Frame::data(l))))
    }
}

/// Produce: one record, several, or a stream, answered with one delivery report per record.
pub async fn produce_records(
    State(app): State<Arc<AppState>>,
    Path((cluster, topic)): Path<(String, String)>,
    request: Request,
) -> Response {
    if let Some(response) = other_cluster(&app, &cluster) {
        return response;
    }
    let (parts, body) = request.into_parts();
    let ingest = &app.ingest;
    let tenant = match ingest.authenticate(super::v1::peer(&parts), &parts.headers) {
        Ok(t) => t,
        Err(e) => return error(&e),
    };
    let refuse = |e: ApiError| {
        tenant.stats.count_api(Api::V3, false);
        let mut response = error(&e);
        ratelimit_headers::insert(response.headers_mut(), &ingest.view(&tenant));
        response
    };
    let topic = match ingest.topic(&tenant, &topic) {
        Ok(t) => t,
        Err(e) => return refuse(e),
    };
    if !is_json(&parts.headers) {
        return refuse(ApiError::UnsupportedMediaType(
            "send records as application/json (concatenated JSON objects)".into(),
        ));
    }
    // Refused before any record is read: the whole request gets the 429.
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Err(e) = ingest.early_check(&tenant, &topic, declared) {
        return refuse(e);
    }
    if let Err(e) = ingest.check_topic(&topic, &[]).await {
        return refuse(e);
    }
    // The first chunk decides whether there is a stream at all: bytes that are not a record
    // are answered as a whole-request error, as they would be for a single record.
    let mut body = body;
    let mut decoder =
        Decoder::streaming(Framing::Concatenated, V3Record::default(), &ingest.bounds);
    let idle = Duration::from_millis(app.compat.stream_idle_timeout_ms);
    loop {
        match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return refuse(ApiError::BodyTimeout),
            Ok(None) => return refuse(ApiError::Malformed("the request has no records".into())),
            Ok(Some(Err(e))) => {
                return refuse(ApiError::Malformed(format!(
                    "the body could not be read: {e}"
                )))
            }
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if let Err(e) = decoder.push(&data) {
                    return refuse(e.into());
                }
                break;
            }
        }
    }
    tenant.stats.count_api(Api::V3, true);
    let unsettled = app.compat.stream_max_unsettled.max(1);
    let (pending_tx, pending_rx) = mpsc::channel(unsettled);
    let (lines_tx, lines_rx) = mpsc::channel(16);
    tokio::spawn(report(
        app.clone(),
        cluster_id(&app),
        topic.as_str().to_string(),
        pending_rx,
        lines_tx,
    ));
    tokio::spawn(pump(
        app.clone(),
        tenant.clone(),
        topic,
        body,
        decoder,
        pending_tx,
    ));
    let mut response = (StatusCode::OK, Body::new(Reports(lines_rx))).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    ratelimit_headers::insert(response.headers_mut(), &ingest.view(&tenant));
    response
}

/// Reads the stream, admits and sends each record as it arrives, and queues its report.
/// Waiting for room in the queue is what stops the reading when the client does not read its
/// reports.
async fn pump(
    app: Arc<AppState>,
    tenant: Arc<Tenant>,
    topic: Topic,
    mut body: Body,
    mut decoder: Decoder<V3Record>,
    pending: mpsc::Sender<Pending>,
) {
    let ingest = &app.ingest;
    // The records of the first chunk, decoded before the stream was answered.
    let first = decoder.take_decoded();
    let seen = decoder.parser().take_seen();
    let entries = admit_chunk(ingest, &tenant, &topic, first.records(), seen).await;
    if !queue(&pending, entries).await {
        return;
    }
    let idle = Duration::from_millis(app.compat.stream_idle_timeout_ms);
    let ends =
        tokio::time::Instant::now() + Duration::from_millis(app.compat.stream_max_duration_ms);
    loop {
        let next = tokio::time::timeout(idle, body.frame());
        let frame = match tokio::time::timeout_at(ends, next).await {
            Err(_) => {
                let report = V3Report::failed(
                    408,
                    "the stream reached its longest time; open a new one".into(),
                );
                let _ = pending.send(Pending::Known(report)).await;
                return;
            }
            Ok(Err(_)) => {
                let report = V3Report::failed(
                    408,
                    "no record arrived within the stream's idle time".into(),
                );
                let _ = pending.send(Pending::Known(report)).await;
                return;
            }
            Ok(Ok(None)) => break,
            Ok(Ok(Some(Err(_)))) => return,
            Ok(Ok(Some(Ok(frame)))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        // Only the tail still being decoded stays in memory; it is held against the budget
        // for as long as this chunk is being worked on.
        let mut hold = ingest
            .body_budget
            .hold(tenant.body_bytes.clone(), tenant.buffer_share());
        if !hold.grow((data.len() + decoder.held()) as u64) {
            let e = ApiError::RateLimited(crate::refusal::Refusal {
                reason: crate::refusal::Reason::ServerBusy,
                retry_after: ingest.body_budget.retry_hint(),
                class: None,
                lag: None,
            });
            let _ = pending.send(Pending::Known(v3_refusal(&e))).await;
            return;
        }
        let pushed = decoder.push(&data);
        let decoded = decoder.take_decoded();
        let seen = decoder.parser().take_seen();
        let entries = admit_chunk(ingest, &tenant, &topic, decoded.records(), seen).await;
        if !queue(&pending, entries).await {
            return; // the client went away
        }
        drop(hold);
        if let Err(e) = pushed {
            let _ = pending
                .send(Pending::Known(v3_refusal(&ApiError::from(e))))
                .await;
            return;
        }
    }
    match decoder.finish_stream() {
        Ok(rest) => {
            let seen = decoder.parser().take_seen();
            let entries = admit_chunk(ingest, &tenant, &topic, rest.records(), seen).await;
            queue(&pending, entries).await;
        }
        Err(e) => {
            let _ = pending
                .send(Pending::Known(v3_refusal(&ApiError::from(e))))
                .await;
        }
    }
}

/// Queues entries in order; false when the client went away.
async fn queue(pending: &mpsc::Sender<Pending>, entries: Vec<Pending>) -> bool {
    for entry in entries {
        if pending.send(entry).await.is_err() {
            return false;
        }
    }
    true
}

/// Admits the records of one chunk each on its own — a record over budget is refused alone,
/// and later ones may still pass — and sends the admitted ones to Kafka as one batch: one
/// delivery context and one wake-up per chunk instead of per record.
async fn admit_chunk(
    ingest: &crate::ingest::Ingest,
    tenant: &Tenant,
    topic: &Topic,
    records: Vec<Record<'_>>,
    seen: Vec<(Option<String>, V3Types)>,
) -> Vec<Pending> {
    enum Slot {
        Admitted(usize, Option<Described>, Option<Described>),
        Refused(V3Report<'static>),
    }
    let mut slots = Vec::with_capacity(records.len());
    let mut admitted: Vec<Record<'_>> = Vec::with_capacity(records.len());
    let mut lease: Option<BufferLease> = None;
    let mut stray = Vec::new();
    let types = seen
        .into_iter()
        .map(|(_, types)| types)
        .chain(std::iter::repeat(V3Types::default()));
    for (record, types) in records.into_iter().zip(types) {
        let one = std::slice::from_ref(&record);
        let admission = match ingest.check_topic(topic, one).await {
            Ok(()) => ingest.admit(tenant, topic, Charge::of(one)).await,
            Err(e) => Err(e),
        };
        match admission {
            Ok(taken) => {
                match lease.as_mut() {
                    None => lease = Some(taken),
                    // Never happens (same buffer, same tenant); if it did, the space is still
                    // held until the chunk is sent.
                    Some(held) => stray.extend(held.absorb(taken).err()),
                }
                slots.push(Slot::Admitted(
                    admitted.len(),
                    described(types.key, record.key.as_deref()),
                    described(types.value, record.value.as_deref()),
                ));
                admitted.push(record);
            }
            Err(e) => slots.push(Slot::Refused(v3_refusal(&e))),
        }
    }
    let batch = lease.map(|lease| ingest.send(tenant, topic, &admitted, lease));
    drop(stray);
    slots
        .into_iter()
        .map(|slot| match (slot, &batch) {
            (Slot::Admitted(index, key, value), Some(batch)) => Pending::Sent {
                batch: batch.clone(),
                index,
                key,
                value,
            },
            (Slot::Refused(report), _) => Pending::Known(report),
            (Slot::Admitted(..), None) => {
                Pending::Known(V3Report::failed(500, "the record was not sent".into()))
            }
        })
        .collect()
}

/// Turns queued entries into report lines, in order, each as soon as it is settled.
async fn report(
    app: Arc<AppState>,
    cluster: String,
    topic: String,
    mut pending: mpsc::Receiver<Pending>,
    lines: mpsc::Sender<Bytes>,
) {
    /// Reports already settled are written together, up to this much, so a chunk of records
    /// costs one write rather than one per record.
    const COALESCE_BYTES: usize = 64 * 1024;
    let timeout = app.ingest.delivery_timeout;
    let mut out = Vec::new();
    let mut next = pending.recv().await;
    while let Some(entry) = next.take() {
        let report = match entry {
            Pending::Known(report) => serde_json::to_writer(&mut out, &report),
            Pending::Sent {
                batch,
                index,
                key,
                value,
            } => {
                let _ = tokio::time::timeout(timeout, batch.wait()).await;
                let report = v3_report(&cluster, &topic, batch.outcome(index), key, value);
                serde_json::to_writer(&mut out, &report)
            }
        };
        // Serialising plain structs into a Vec does not fail; were it to, the line is empty.
        let _ = report;
        out.extend_from_slice(b"\r\n");
        if out.len() < COALESCE_BYTES {
            next = match pending.try_recv() {
                Ok(entry) if settled(&entry) => Some(entry),
                Ok(entry) => {
                    // Not settled yet: send what is ready before waiting for it.
                    if lines
                        .send(Bytes::from(std::mem::take(&mut out)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    Some(entry)
                }
                Err(_) => None,
            };
            if next.is_some() {
                continue;
            }
        }
        if lines
            .send(Bytes::from(std::mem::take(&mut out)))
            .await
            .is_err()
        {
            return; // the client went away
        }
        next = pending.recv().await;
    }
}

/// Can this entry be reported without waiting?
fn settled(entry: &Pending) -> bool {
    match entry {
        Pending::Known(_) => true,
        Pending::Sent { batch, .. } => batch.is_complete(),
    }
}
