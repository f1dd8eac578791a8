//! The ingest pipeline: what every produce request goes through, whatever its wire format.
//!
//! authenticate → topic (parse, may the tenant write it) → the body's content coding
//! ([`coding`]: 415 for one floodgate does not decode, else the body is read inflated) → the
//! `Idempotency-Key`, if any
//! ([`idempotent`]: replay, wait for the original, or claim the key) → early check (before the
//! body is read) → read and decode the body (the wire format's [`BodyFormat`]) → schemas
//! ([`contracts`]: keys and values in their schemas, or refused naming the field) → topic
//! metadata → admit → send → settle. Each step is a method over typed values; [`Ingest::produce`] runs
//! them in order. A wire format is an adapter at the edge: it picks a decoder for the request's
//! content type and hands in its [`Respond`], the encoder of the [`Produced`] or [`ApiError`]
//! the pipeline reaches; adding a format means adding an adapter and its routes, never
//! touching this module. The pipeline decides when an outcome is final and calls the encoder
//! then, so a keyed request's answer is stored exactly as it was sent.
//!
//! A wire format that reports entries one by one (Confluent's `records:batch`) may decode a
//! body to fewer records than it has entries (the failed ones noted by its parser); a step
//! after decoding fails more through the parser's [`crate::body::ParseRecord::fail_record`] (the schema step does). Only the records left are admitted (whole)
//! and sent; when none is left, nothing is admitted and the answer lists the failures.
//!
//! The order is the design: everything that can refuse a request without reading its body
//! runs first, so a refused client costs a few hundred nanoseconds and no memory, and a client
//! announcing a large body hears 429 before it uploads.
//!
//! A stream of records (Confluent v3's streaming produce) goes through the same steps record by
//! record: [`stream`] owns that path, its bounds and its re-checks.
//!
//! Layer: outcomes and pipeline. Imports admission, tenants, Kafka, idempotency and the outcome room; never
//! HTTP routing or response shapes (those are the adapters' [`Respond`]).

mod admit;
mod checks;
mod coding;
mod contracts;
mod frames;
mod idempotent;
mod read;
mod reading;
mod request;
mod settle;
pub mod stream;
#[cfg(test)]
mod test_body;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use tracing::Instrument as _;

use crate::admission::{Admission, BucketsView};
use crate::auth_failures::AuthFailures;
use crate::cluster::Cluster;
use crate::config::RequestBounds;
use crate::credential::Authenticator;
use crate::idempotency::{Fingerprinter, Idempotency, IdempotencyKey};
use crate::identity::Topic;
use crate::inflight_bodies::InflightBodies;
use crate::kafka::{Batch, KafkaProducer, TopicCatalog};
use crate::outcome::ApiError;
pub use crate::record::Api;
use crate::tenant::{Tenant, Tenants};
use admit::{refused, Held};
use checks::credential_allows;
use coding::Drain;
pub use contracts::{failure_error, RecordSchemas};
use read::{declared_length, drain_if_small, refused_unread};
use request::Answer;
pub use request::{Ack, BodyFormat, OwnShapes, ProduceRequest, Respond};
use settle::failed_at_enqueue;

/// Everything the pipeline needs, shared by every request.
#[derive(Debug)]
pub struct Ingest {
    /// Who is who (swapped whole by registry changes).
    pub tenants: Arc<Tenants>,
    /// Credentials to identities: API keys, JWTs, client certificates.
    pub auth: Arc<Authenticator>,
    /// Budgets and buffer.
    pub admission: Arc<Admission>,
    /// Which topics exist (also the readiness latch).
    pub catalog: Arc<TopicCatalog>,
    /// The one shared librdkafka producer.
    pub producer: Arc<KafkaProducer>,
    /// Per-request and per-record bounds.
    pub bounds: RequestBounds,
    pub max_body_bytes: u64,
    /// How many times its coded size a `Content-Encoding` body may inflate to (past a floor).
    pub max_inflation_ratio: u32,
    /// Bytes in and out of each content coding's decoder.
    pub codings: Arc<crate::inflate::Counters>,
    pub body_read_timeout: Duration,
    /// Request bodies in memory, over all requests (shared with the metrics).
    pub inflight_bodies: Arc<InflightBodies>,
    /// Failed authentications per client address on the produce listener.
    pub failures: Arc<AuthFailures>,
    /// Proxies whose forwarding headers say who the client is.
    pub proxies: crate::forwarded::TrustedProxies,
    /// Connections per address not authenticated yet, on the produce listener (a request that
    /// authenticates marks its connection).
    pub unverified: Arc<crate::server::Unverified>,

    /// How long an `Ack::Kafka` request waits for Kafka before answering 503.
    pub delivery_timeout: Duration,
    /// Cluster mode: where slices are leased from when a request needs more than they hold.
    pub cluster: Option<Arc<Cluster>>,
    /// Bounds of a stream of records (Confluent v3 streaming produce).
    pub streams: stream::StreamBounds,
    /// Topics no tenant may write.
    pub internal: crate::identity::InternalTopics,
    /// Set once shutdown starts: open streams take no more records.
    pub draining: tokio::sync::watch::Sender<bool>,
    /// `Idempotency-Key`: flights and stored answers.
    pub idempotency: Arc<Idempotency>,
    /// Schemas and the topics' data contracts.
    pub schemas: Arc<crate::schema::Schemas>,
}

impl Ingest {
    /// Runs the whole pipeline. Returns the answer, written by the request's encoder; once the
    /// tenant is authenticated, with its buckets as the RateLimit fields (written here once,
    /// for every wire format).
    ///
    /// `format` is the wire format's body format for this request, or what the adapter found
    /// wrong with the request's format (content type, query): reported after the key and the
    /// topic are checked, like every other problem with the request itself.
    pub async fn produce(
        &self,
        request: ProduceRequest<'_>,
        format: Result<BodyFormat<'_>, ApiError>,
    ) -> Response {
        let respond = request.respond;
        let who = match self.identify(&request.peer, request.headers).await {
            Ok(who) => who,
            Err(e) => {
                drain_if_small(declared_length(request.headers), request.body).await;
                return respond.respond(Err(e));
            }
        };
        let tenant = who.tenant.clone();
        // One span per request: tenant, topic, record count and outcome; never keys or
        // payloads, and the topic only once it is known to be a legal name.
        let span = tracing::info_span!(
            "produce",
            tenant = %tenant.id,
            topic = tracing::field::Empty,
            records = tracing::field::Empty,
        );
        let api = request.api;
        let (answer, view) = match credential_allows(&who, request.topic) {
            Err(e) => (refused_unread(e, request).await, None),
            Ok(()) => {
                self.produce_for(&tenant, request, format)
                    .instrument(span.clone())
                    .await
            }
        };
        let mut response = match answer {
            Answer::Outcome(outcome) => {
                tenant.stats().count_api(api, outcome.is_ok());
                span.in_scope(|| match &outcome {
                    Ok(_) => tracing::debug!("produce request done"),
                    Err(e) => tracing::debug!(error = e.code(), "produce request refused"),
                });
                respond.respond(outcome)
            }
            Answer::Sent(response) => {
                tenant
                    .stats()
                    .count_api(api, response.status().is_success());
                response
            }
            Answer::Stored { answer, replayed } => {
                tenant.stats().count_api(api, answer.status().is_success());
                span.in_scope(|| {
                    tracing::debug!(
                        status = answer.status().as_u16(),
                        replayed,
                        "produce request answered"
                    )
                });
                answer.response(replayed)
            }
        };
        // Every answer to an authenticated client says where its buckets stand: as its
        // admission left them, or as they are now for a request refused before admission.
        // Written here, the one place every wire format's answer passes (carried to the edge
        // in the response's extensions, it cost three allocations a request).
        let view = view.map_or_else(|| self.view(&tenant), |v| self.shown(v));
        crate::outcome::ratelimit::insert(response.headers_mut(), &view);
        response
    }

    async fn produce_for(
        &self,
        tenant: &Arc<Tenant>,
        request: ProduceRequest<'_>,
        format: Result<BodyFormat<'_>, ApiError>,
    ) -> (Answer, Option<BucketsView>) {
        let topic = match self.topic(tenant, request.topic) {
            Ok(t) => t,
            Err(e) => return (refused_unread(e, request).await, None),
        };
        tracing::Span::current().record("topic", topic.as_str());
        let format = match format {
            Ok(f) => f,
            Err(e) => return (refused_unread(e, request).await, None),
        };
        let codings = match coding::codings(request.headers) {
            Ok(c) => c,
            Err(e) => return (refused_unread(e, request).await, None),
        };
        let key = match IdempotencyKey::from_headers(request.headers) {
            Err(detail) => {
                let e = ApiError::IdempotencyKey(detail);
                return (refused_unread(e, request).await, None);
            }
            Ok(key) => key,
        };
        // From here on every reader of the body reads it inflated, until the answer is
        // decided: what is read after that (a lingering drain) passes as it came.
        let mut request = request;
        let wire = std::mem::take(&mut request.body);
        let (body, drain) = self.decoded_body(tenant, wire, codings, false);
        request.body = body;
        let answer = match key {
            Some(key) => {
                // Boxed: the keyed path's state is the largest of the pipeline's, and kept
                // inline it would be every request's (moved with it, memcpy in the profile).
                let answer =
                    Box::pin(self.produce_keyed(tenant, &topic, request, format, key, &drain))
                        .await;
                (answer, None)
            }
            None => {
                let declared = declared_length(request.headers);
                self.process_and_settle(tenant, &topic, (request, declared), format, &drain)
                    .await
            }
        };
        drain.start();
        answer
    }

    /// From the early check to the producer: the request's records sent, or why not.
    /// `print`, for a keyed request, takes every body byte as it is read.
    async fn process(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        body: Body,
        declared: Option<u64>,
        format: BodyFormat<'_>,
        print: Option<&mut Fingerprinter>,
    ) -> Result<Admitted, ApiError> {
        // Its place in [wait]'s waiting room: a seat taken by a check before admission is
        // kept until admission decides, and given back on every way out.
        let mut held = Held::new();
        if let Err(e) = self.early_check(tenant, topic, declared, &mut held) {
            drain_if_small(declared, body).await;
            return Err(e);
        }
        let (arena, mut hold, body_owed) = self
            .read_records(tenant, topic, body, declared, format, print, &mut held)
            .await?;
        // The topic and partitions first: a record refused for them costs no schema work.
        self.check_topic(topic, arena.partitions()).await?;
        let contracts::Applied {
            arena,
            owed,
            mut reserved,
        } = self
            .apply_schemas(tenant, topic, arena, &mut hold, &format)
            .await?;
        let records = arena.records();
        tracing::Span::current().record("records", records.len());
        if records.is_empty() {
            // Every entry failed and the format reports them one by one (a batch): nothing is
            // admitted or sent, and the answer lists each failure.
            let batch = Arc::new(Batch::empty(tenant.stats().clone()));
            return Ok(Admitted { batch, view: None });
        }
        let charge = (arena.charge(), reserved.as_mut());
        let lease = self.admit(tenant, topic, charge, &mut held).await?;
        owed.admitted();
        body_owed.admitted();
        let batch = self.send(tenant, topic, &records, lease);
        drop(records);
        drop(arena);
        drop(hold);
        Ok(Admitted {
            batch,
            view: held.view(),
        })
    }
}

/// A request's records handed to the producer, and the buckets as its admission decision left
/// them (`None` when nothing was admitted: every entry of a batch failed).
struct Admitted {
    batch: Arc<Batch>,
    view: Option<BucketsView>,
}
