//! v3 streaming produce, `POST .../topics/{topic}/records`: the request's framing (concatenated
//! JSON objects of v3's record shape) and the encoding of its reports — one JSON line per
//! record, `\r\n` after each, reports already settled written together. The pipeline's stream
//! decides everything else.
//!
//! Layer: HTTP edge. Imports the app state, the pipeline's stream and the outcome room.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use super::{cluster_id, error, is_json, other_cluster, JSON};
use crate::app::AppState;
use crate::http::confluent::answers::{v3_refusal, v3_report, Described};
use crate::http::confluent::record::{DataType, V3Record, V3Types};
use crate::http::extract::Path;
use crate::ingest::stream::{Report, Reports, Said, StreamRequest, REPORT_COALESCE};
use crate::ingest::Api;

/// Settled reports are written together up to this much (held by the stream), so a chunk of
/// records costs one write rather than one per record.
const COALESCE_BYTES: usize = REPORT_COALESCE;

/// Produce: one record, several, or a stream, answered with one delivery report per record.
pub async fn produce_records(
    State(app): State<Arc<AppState>>,
    Path((cluster, topic)): Path<(String, String)>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    if let Some(response) = other_cluster(&app, &parts, &cluster).await {
        return response;
    }
    let parser = if is_json(&parts.headers) {
        Ok(V3Record::default().with_registry(app.ingest.schemas.has_registry()))
    } else {
        Err(super::not_json(
            &parts.headers,
            "send records as application/json (concatenated JSON objects)",
        ))
    };
    let request = StreamRequest {
        api: Api::V3,
        peer: crate::http::extract::peer(&parts),
        headers: &parts.headers,
        topic: &topic,
        body,
    };
    let (buckets, opened) = app.ingest.open_stream(request, parser).await;
    let mut response = match opened {
        Ok(reports) => {
            let deadline = reports.deadline();
            let (lines, body) = mpsc::channel(1);
            tokio::spawn(encode(reports, cluster_id(&app), topic, lines));
            let mut response = (StatusCode::OK, Body::new(Lines(body))).into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
            // The connection closes a stream whose client stops reading its reports.
            response.extensions_mut().insert(deadline);
            response
        }
        Err(e) => error(&e),
    };
    if let Some(buckets) = buckets {
        crate::outcome::ratelimit::insert(response.headers_mut(), &buckets);
    }
    response
}

/// The answer's body: the report frames, as they are encoded.
struct Lines(mpsc::Receiver<Bytes>);

impl axum::body::HttpBody for Lines {
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

/// Encodes the stream's reports in order until it is over or the client is gone.
async fn encode(
    mut reports: Reports<V3Types>,
    cluster: String,
    topic: String,
    lines: mpsc::Sender<Bytes>,
) {
    let mut out = Vec::new();
    loop {
        // A connection closed (its client gone, or cut for not reading) ends the encoding at
        // once: the reports' hold on the body budget goes back now, not once Kafka answered.
        let report = tokio::select! {
            report = reports.next() => report,
            () = lines.closed() => return,
        };
        let Some(report) = report else {
            return;
        };
        write_report(&mut out, &cluster, &topic, &report);
        drop(report);
        if out.len() < COALESCE_BYTES && reports.ready() {
            continue;
        }
        let Some(frame) = reports.frame(std::mem::take(&mut out)).await else {
            return;
        };
        if lines.send(frame).await.is_err() {
            return; // the client went away
        }
    }
}

fn write_report(out: &mut Vec<u8>, cluster: &str, topic: &str, report: &Report<V3Types>) {
    let described = |t: Option<DataType>, size: usize| {
        t.map(|t| Described {
            data_type: t.as_str(),
            size,
        })
    };
    let report = match report.said() {
        Said::Record { outcome, note } => v3_report(
            cluster,
            topic,
            outcome,
            described(note.key, note.key_size),
            described(note.value, note.value_size),
        ),
        Said::Refused { error, .. } | Said::Ended(error) => v3_refusal(error),
    };
    // Serialising plain structs into a Vec does not fail; were it to, the line is empty.
    let _ = serde_json::to_writer(&mut *out, &report);
    out.extend_from_slice(b"\r\n");
}
