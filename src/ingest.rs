//! The ingest pipeline: what every produce request goes through, whatever its wire format.
//!
//! authenticate → topic (parse, may the tenant write it) → the `Idempotency-Key`, if any
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
//! Layer: pipeline. Imports admission, tenants, Kafka, idempotency and the outcome room; never
//! HTTP routing or response shapes (those are the adapters' [`Respond`]).

mod contracts;
mod idempotent;
pub mod stream;
#[cfg(test)]
mod test_body;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use axum::response::Response;
use http_body_util::BodyExt;
use tracing::Instrument as _;

use crate::admission::{Admission, Blocked, BucketsView};
use crate::body::{BodyError, Decoder, Framing, ParseRecord, RecordArena};
use crate::body_budget::{BodyBudget, BodyHold, Cut};
use crate::buffer::BufferLease;
use crate::cluster::Cluster;
use crate::config::RequestBounds;
use crate::credential::{Authenticator, Caller, Identity};
use crate::failure_guard::FailureGuard;
use crate::idempotency::{Fingerprinter, Idempotency, IdempotencyKey, StoredAnswer};
use crate::identity::Topic;
use crate::kafka::{Batch, FailureCounter, KafkaProducer, TopicCatalog, TopicInfo};
use crate::outcome::{ApiError, Produced};
use crate::record::{Charge, Record};
use crate::refusal::{Denial, Reason, Refusal};
pub use crate::tenant::Api;
use crate::tenant::{Tenant, TenantStats, Tenants};
pub use contracts::{failure_error, RecordSchemas};

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
    fn as_str(self) -> &'static str {
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
enum Answer {
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
    pub body_read_timeout: Duration,
    /// Request bodies in memory, over all requests (shared with the metrics).
    pub body_budget: Arc<BodyBudget>,
    /// Failed authentications per client address on the produce listener.
    pub failures: Arc<FailureGuard>,
    /// Proxies whose forwarding headers say who the client is.
    pub proxies: crate::forwarded::TrustedProxies,

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

/// Retry hint for a request whose leased tokens were taken by others while it waited.
const CONTENDED_RETRY: Duration = Duration::from_millis(10);

/// Largest declared body that is drained after an early refusal.
const DRAIN_MAX_BYTES: u64 = 16 * 1024;
/// How long draining may delay an early refusal.
const DRAIN_WAIT: Duration = Duration::from_millis(5);

/// The tenant's failure counter is where Kafka-side failures are counted.
impl FailureCounter for TenantStats {
    fn records_failed(&self, records: u64) {
        self.failed(records);
    }
}

impl Ingest {
    /// Runs the whole pipeline. Returns the tenant once authenticated (its buckets go into
    /// every answer's RateLimit fields) and the answer, written by the request's encoder.
    ///
    /// `format` is the wire format's body format for this request, or what the adapter found
    /// wrong with the request's format (content type, query): reported after the key and the
    /// topic are checked, like every other problem with the request itself.
    pub async fn produce(
        &self,
        request: ProduceRequest<'_>,
        format: Result<BodyFormat<'_>, ApiError>,
    ) -> (Option<Arc<Tenant>>, Response) {
        let respond = request.respond;
        let who = match self.identify(&request.peer, request.headers).await {
            Ok(who) => who,
            Err(e) => {
                drain_if_small(declared_length(request.headers), request.body).await;
                return (None, respond.respond(Err(e)));
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
        let answer = match credential_allows(&who, request.topic) {
            Err(e) => refused_unread(e, request).await,
            Ok(()) => {
                self.produce_for(&tenant, request, format)
                    .instrument(span.clone())
                    .await
            }
        };
        let response = match answer {
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
        (Some(tenant), response)
    }

    async fn produce_for(
        &self,
        tenant: &Tenant,
        request: ProduceRequest<'_>,
        format: Result<BodyFormat<'_>, ApiError>,
    ) -> Answer {
        let topic = match self.topic(tenant, request.topic) {
            Ok(t) => t,
            Err(e) => return refused_unread(e, request).await,
        };
        tracing::Span::current().record("topic", topic.as_str());
        let format = match format {
            Ok(f) => f,
            Err(e) => return refused_unread(e, request).await,
        };
        match IdempotencyKey::from_headers(request.headers) {
            Err(detail) => refused_unread(ApiError::IdempotencyKey(detail), request).await,
            Ok(Some(key)) => {
                self.produce_keyed(tenant, &topic, request, format, key)
                    .await
            }
            Ok(None) => {
                let declared = declared_length(request.headers);
                let ack = request.ack;
                let sent = self
                    .process(tenant, &topic, request.body, declared, format, None)
                    .await;
                Answer::Outcome(match sent {
                    Ok(batch) => self.settle(batch, ack).await,
                    Err(e) => Err(e),
                })
            }
        }
    }

    /// From the early check to the producer: the request's records sent, or why not.
    /// `print`, for a keyed request, takes every body byte as it is read.
    async fn process(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        body: Body,
        declared: Option<u64>,
        format: BodyFormat<'_>,
        print: Option<&mut Fingerprinter>,
    ) -> Result<Arc<Batch>, ApiError> {
        if let Err(e) = self.early_check(tenant, topic, declared) {
            drain_if_small(declared, body).await;
            return Err(e);
        }
        let (arena, mut hold) = self
            .read_records(tenant, topic, body, declared, format, print)
            .await?;
        let arena = self
            .apply_schemas(tenant, topic, arena, &mut hold, &format)
            .await?;
        let records = arena.records();
        tracing::Span::current().record("records", records.len());
        self.check_topic(topic, &records).await?;
        if records.is_empty() {
            // Every entry failed and the format reports them one by one (a batch): nothing is
            // admitted or sent, and the answer lists each failure.
            return Ok(Arc::new(Batch::empty(tenant.stats().clone())));
        }
        let lease = self.admit(tenant, topic, arena.charge()).await?;
        let batch = self.send(tenant, topic, &records, lease);
        drop(records);
        drop(arena);
        drop(hold);
        Ok(batch)
    }

    /// The tenant the request's credential belongs to (see [`Ingest::identify`]).
    pub async fn authenticate(
        &self,
        peer: Caller,
        headers: &HeaderMap,
    ) -> Result<Arc<Tenant>, ApiError> {
        self.identify(&peer, headers).await.map(|who| who.tenant)
    }

    /// Who the request is: its API key, JWT or client certificate, as
    /// [`Authenticator::identify`] decides. A valid credential is never refused for its
    /// address's failed authentications; a failing request from an address with too many
    /// recent failures is answered 429 instead of 401/403, and every failure is counted
    /// against the client's address (behind trusted proxies, the address they forwarded for):
    /// decided and counted in one step, so concurrent failures cannot slip past the count.
    pub async fn identify(&self, peer: &Caller, headers: &HeaderMap) -> Result<Identity, ApiError> {
        let failure = match self.auth.identify(&self.tenants, peer, headers).await {
            Ok(who) => return Ok(who),
            Err(e) if !e.is_failure() => return Err(ApiError::Auth(e)),
            Err(crate::credential::AuthError::Unauthorized) => ApiError::Unauthorized,
            Err(e) => ApiError::Auth(e),
        };
        let Some(client) = peer.ip.map(|p| self.proxies.client(p, headers)) else {
            return Err(failure);
        };
        // Decided and counted in one step, so concurrent failures cannot slip past the count.
        match self.failures.fail(client) {
            Some(wait) => Err(ApiError::AuthFailures(wait)),
            None => Err(failure),
        }
    }

    /// The topic, if it is a legal Kafka name the tenant may write: not an internal topic,
    /// and within the tenant's patterns.
    pub fn topic(&self, tenant: &Tenant, name: &str) -> Result<Topic, ApiError> {
        let topic = Topic::parse(name).map_err(ApiError::InvalidTopic)?;
        if self.internal.contains(&topic) {
            return Err(ApiError::InternalTopic(topic.as_str().to_string()));
        }
        if !tenant.may_write(&topic) {
            return Err(ApiError::ForbiddenTopic(topic.as_str().to_string()));
        }
        Ok(topic)
    }

    /// Before the body is read: is it too large to accept, and could the tenant be admitted
    /// with one record and the declared length in bytes (which bounds the record bytes from
    /// above)? Charges nothing.
    pub fn early_check(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        declared: Option<u64>,
    ) -> Result<(), ApiError> {
        if declared.is_some_and(|n| n > self.max_body_bytes) {
            return Err(ApiError::BodyTooLarge {
                limit: self.max_body_bytes,
            });
        }
        self.admission
            .precheck_to(tenant, Some(topic), declared.unwrap_or(1))
            .map_err(|refusal| refused(tenant, refusal))
    }

    /// Reads and decodes the body as it arrives, within `max_body_bytes` and
    /// `body_read_timeout`, held against the body budget (the declared length is reserved
    /// before the first byte is read, a chunked body's chunks as they arrive; the hold is given
    /// back when dropped). After every chunk the records decoded so far are checked against
    /// the tenant's budgets, its buffer share and the buffer: the moment they cannot be
    /// admitted, the request is refused and the rest of the body is never read.
    ///
    /// A tenant's bodies together may hold at most its `max_buffer_share` of the budget. An
    /// upload refused before its end is read on (and discarded) for a moment after the answer
    /// is sent — see [`linger`] — so the client sees the answer instead of a reset.
    pub async fn read_records(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        mut body: Body,
        declared: Option<u64>,
        format: BodyFormat<'_>,
        print: Option<&mut Fingerprinter>,
    ) -> Result<(RecordArena, BodyHold), ApiError> {
        let mut hold = self
            .body_budget
            .hold(tenant.body_bytes.clone(), tenant.buffer_share());
        match self
            .decode_body(tenant, topic, &mut body, &mut hold, declared, format, print)
            .await
        {
            Ok(arena) => Ok((arena, hold)),
            Err(e) => {
                drop(hold);
                linger(body);
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)] // one call site: the request's parts, passed through
    async fn decode_body(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        body: &mut Body,
        hold: &mut BodyHold,
        declared: Option<u64>,
        format: BodyFormat<'_>,
        mut print: Option<&mut Fingerprinter>,
    ) -> Result<RecordArena, ApiError> {
        if !hold.grow(declared.unwrap_or(0)) {
            return Err(self.cut_short(Cut::ServerBusy, self.busy(tenant)));
        }
        let mut bounds = self.bounds.clone();
        if let Some(max) = format.max_records {
            bounds.max_records_per_request = bounds.max_records_per_request.min(max);
        }
        let mut decoder = Decoder::new(format.framing, format.record, &bounds);
        let deadline = tokio::time::Instant::now() + self.body_read_timeout;
        let mut received = 0u64;
        let mut checked = Charge::default();
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Err(ApiError::BodyTimeout),
                Ok(None) => {
                    if let Some(print) = print.as_deref_mut() {
                        print.body_complete();
                    }
                    break;
                }
                Ok(Some(Err(e))) => {
                    return Err(ApiError::Malformed(format!(
                        "the body could not be read: {e}"
                    )))
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if let Some(print) = print.as_deref_mut() {
                print.update(&data);
            }
            received += data.len() as u64;
            if received > self.max_body_bytes {
                let limit = self.max_body_bytes;
                return Err(self.cut_short(Cut::BodyTooLarge, ApiError::BodyTooLarge { limit }));
            }
            if received > hold.bytes() && !hold.grow(received - hold.bytes()) {
                return Err(self.cut_short(Cut::ServerBusy, self.busy(tenant)));
            }
            let charge = decoder
                .push(&data)
                .map_err(|e| self.cut_short(cut_for(&e), e.into()))?;

            if charge.records > checked.records {
                checked = charge;
                if let Err(denial) = self.admission.check_to(tenant, Some(topic), charge) {
                    let cut = match denial {
                        Denial::Refused(_) => {
                            tenant.stats().refused_records(charge.records);
                            Cut::RateLimited
                        }
                        Denial::TooLarge(_) => Cut::ExceedsBurst,
                    };
                    return Err(self.cut_short(cut, self.denied(tenant, denial)));
                }
            }
        }
        Ok(decoder.finish()?)
    }

    fn busy(&self, tenant: &Tenant) -> ApiError {
        let retry_after = self.body_budget.retry_hint();
        refused(
            tenant,
            Refusal {
                reason: Reason::ServerBusy,
                retry_after,
                class: None,
                lag: None,
            },
        )
    }

    /// Counts an upload answered before its body was read to the end.
    fn cut_short(&self, cut: Cut, error: ApiError) -> ApiError {
        self.body_budget.count_cut_short(cut);
        error
    }

    /// Does the topic exist, and does every record's partition?
    pub async fn check_topic(&self, topic: &Topic, records: &[Record<'_>]) -> Result<(), ApiError> {
        let partitions = match self
            .catalog
            .lookup(topic.as_str())
            .await
            .map_err(ApiError::KafkaUnavailable)?
        {
            TopicInfo::Missing => return Err(ApiError::UnknownTopic(topic.as_str().to_string())),
            TopicInfo::Exists { partitions } => partitions,
        };
        for (i, r) in records.iter().enumerate() {
            if let Some(p) = r.partition.filter(|p| *p as u32 >= partitions) {
                return Err(ApiError::UnknownPartition(format!(
                    "record {i}: partition {p} does not exist (the topic has {partitions})"
                )));
            }
        }
        Ok(())
    }

    /// Charges every budget and reserves buffer space for the whole request, or nothing.
    /// In cluster mode a request the local slices cannot cover waits for one lease call (the
    /// missing tokens, or the refusal) and is decided again.
    pub async fn admit(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        charge: Charge,
    ) -> Result<BufferLease, ApiError> {
        // Two lease rounds cover a tenant and a global slice both short.
        self.admit_with(tenant, topic, charge, &mut 2).await
    }

    /// [`Ingest::admit`] with at most `leases` lease calls (counted down), so a caller
    /// admitting many records one by one (a stream's chunk) bounds its calls to Redis. A
    /// request still short of leased tokens when they are used up is refused with a short
    /// wait: other requests took the tokens first, or the caller has spent its calls.
    pub async fn admit_with(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        charge: Charge,
        leases: &mut u32,
    ) -> Result<BufferLease, ApiError> {
        tenant.stats().offered(charge.records, charge.bytes);
        let admitted = self.admit_counted(tenant, topic, charge, leases).await;
        if let Err(ApiError::RateLimited(_)) = &admitted {
            // Its body was read: the status page shows the records refused, not just requests.
            tenant.stats().refused_records(charge.records);
        }
        admitted
    }

    async fn admit_counted(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        charge: Charge,
        leases: &mut u32,
    ) -> Result<BufferLease, ApiError> {
        let last_need = loop {
            let (decision, _view) = self.admission.admit_to(tenant, Some(topic), charge);
            match decision {
                Ok(lease) => {
                    tenant.stats().admitted(charge.records, charge.bytes);
                    return Ok(lease);
                }
                Err(Blocked::Denied(denial)) => return Err(self.denied(tenant, denial)),
                Err(Blocked::Lease(need)) => {
                    let Some(cluster) = self.cluster.as_ref().filter(|_| *leases > 0) else {
                        break need;
                    };
                    *leases -= 1;
                    if let Err(refusal) = cluster.lease_for(tenant, need).await {
                        return Err(refused(tenant, refusal));
                    }
                }
            }
        };
        let reason = match (last_need.tenant, last_need.global) {
            (Some(m), _) if m.records > 0 => Reason::TenantRecords,
            (Some(_), _) => Reason::TenantBytes,
            (None, Some(m)) if m.records > 0 => Reason::GlobalRecords,
            _ => Reason::GlobalBytes,
        };
        Err(refused(
            tenant,
            Refusal {
                reason,
                retry_after: CONTENDED_RETRY,
                class: None,
                lag: None,
            },
        ))
    }

    /// A denial as the client hears it; a 429 is counted against the tenant.
    fn denied(&self, tenant: &Tenant, denial: Denial) -> ApiError {
        match denial {
            Denial::Refused(r) => refused(tenant, r),
            Denial::TooLarge(t) => ApiError::ExceedsBurst(t),
        }
    }

    /// Hands the admitted records to the producer.
    pub fn send(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        records: &[Record<'_>],
        lease: BufferLease,
    ) -> Arc<Batch> {
        self.producer
            .send(topic.as_str(), records, lease, tenant.stats().clone())
    }

    /// Waits for what the client asked to wait for.
    pub async fn settle(&self, batch: Arc<Batch>, ack: Ack) -> Result<Produced, ApiError> {
        if ack == Ack::Enqueued && !failed_at_enqueue(&batch) {
            return Ok(Produced::Accepted {
                records: batch.len(),
            });
        }
        if tokio::time::timeout(self.delivery_timeout, batch.wait())
            .await
            .is_err()
        {
            return Err(self.not_acknowledged(&batch, ""));
        }
        Ok(Produced::Settled(batch))
    }

    /// The 503 of a sync request whose records Kafka has not answered in time (`more` adds
    /// to the detail).
    fn not_acknowledged(&self, batch: &Batch, more: &str) -> ApiError {
        let pending = batch.outcomes().filter(Option::is_none).count();
        ApiError::KafkaUnavailable(format!(
            "Kafka did not acknowledge {pending} of {} records within {} ms; they stay queued \
             and will be written when Kafka accepts them{more}",
            batch.len(),
            self.delivery_timeout.as_millis()
        ))
    }

    /// The buckets a tenant is shown in its RateLimit fields: its own, and the global ones
    /// unless the operator hides them.
    pub fn view(&self, tenant: &Tenant) -> BucketsView {
        let mut view = self.admission.view(tenant);
        if !self.admission.global.visible_to_tenants() {
            view.global_records = None;
            view.global_bytes = None;
        }
        view
    }
}

/// Some record could not even be handed to the producer: an async request waits for the
/// others' outcome too.
fn failed_at_enqueue(batch: &Batch) -> bool {
    batch.outcomes().any(|o| matches!(o, Some(Err(_))))
}

fn cut_for(e: &BodyError) -> Cut {
    match e {
        BodyError::Malformed(_)
        | BodyError::Invalid(_)
        | BodyError::NoRecords
        | BodyError::EntryId(_) => Cut::Malformed,
        BodyError::TooManyRecords { .. } => Cut::TooManyRecords,
        BodyError::RecordTooLarge(_) => Cut::RecordTooLarge,
    }
}

/// A 429, counted against the tenant where it is decided.
fn refused(tenant: &Tenant, refusal: Refusal) -> ApiError {
    tenant.stats().rejected(refusal.reason);
    tracing::debug!(reason = refusal.reason.as_str(), "refused");
    ApiError::RateLimited(refusal)
}

/// A credential's own limits on the topic (a JWT's topics claim), checked right after
/// authentication; a name that is not a legal topic is left to the topic step to report.
fn credential_allows(who: &Identity, name: &str) -> Result<(), ApiError> {
    match Topic::parse(name) {
        Ok(topic) if !who.credential_allows(&topic) => {
            Err(ApiError::ForbiddenTopic(topic.as_str().to_string()))
        }
        _ => Ok(()),
    }
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
}

/// After an answer given before the body's end, how much of the rest is read and discarded,
/// and for how long at most.
const LINGER_BYTES: u64 = 1024 * 1024;
const LINGER_TIME: Duration = Duration::from_secs(1);

/// A client still sending when we answer may get a connection reset before it reads the answer
/// if we close with its data unread (as every server that stops reading risks). So the rest of
/// the body is read and dropped in the background for a moment (at most [`LINGER_BYTES`] and
/// [`LINGER_TIME`], like nginx's lingering close), while the answer goes out; then the
/// connection closes. Nothing read here is kept.
fn linger(mut body: Body) {
    use axum::body::HttpBody as _;
    if body.is_end_stream() {
        return;
    }
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + LINGER_TIME;
        let mut read = 0u64;
        while read < LINGER_BYTES {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    read += frame.data_ref().map_or(0, |d| d.len() as u64);
                }
                _ => break,
            }
        }
    });
}

/// A refusal decided before the body is read (credential, topic, format, key): the body is
/// drained if small, as after the early check, then the refusal answered.
async fn refused_unread(e: ApiError, request: ProduceRequest<'_>) -> Answer {
    drain_if_small(declared_length(request.headers), request.body).await;
    e.into()
}

/// An HTTP/1.1 connection whose request body was not read cannot carry another request, so an
/// early refusal would cost the client a new connection (and a TLS handshake) for every
/// refusal. On HTTP/2 a request body dropped unread resets its stream, and the reset can
/// overtake the answer (curl: "stream error in the HTTP/2 framing layer", no status at all). A small body that has already arrived — the common case — is read and dropped; a
/// large or slow one is not waited for, and its connection closes.
async fn drain_if_small(declared: Option<u64>, body: Body) {
    if declared.is_some_and(|n| n > DRAIN_MAX_BYTES) {
        return;
    }
    // Undeclared (chunked, or an HTTP/2 body without content-length): read while it stays
    // small, as a declared small one is.
    let limited = http_body_util::Limited::new(body, DRAIN_MAX_BYTES as usize);
    let _ = tokio::time::timeout(DRAIN_WAIT, limited.collect()).await;
}
