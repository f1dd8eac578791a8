//! The pipeline's `Idempotency-Key` step: exactly once from the client's view. Every wire
//! format that is answered once per request (`/v1`, Confluent v2, v3 `records:batch`) comes
//! through here; streams refuse the header (see `stream`).
//!
//! - **First request** with a key: processed as any other, its body hashed as it is decoded
//!   (the fingerprint: tenant, method, path, acknowledgement, content type, body). Its answer
//!   is stored once it is final — 202 at once, 200/207/502 once Kafka answered every record —
//!   and only when records went to Kafka: a request refused whole (any 4xx, a 429, a 503)
//!   wrote nothing and was charged nothing, so its answer is not stored and a retry is decided
//!   again (the same way, unless the world changed: a schema registered, a topic made).
//!   Storing them would let any tenant fill the store with answers it paid nothing for —
//!   each as large as its error detail — and so shorten every other tenant's window; and a
//!   stored refusal about the registry's or the broker's state would stand for `ttl_s` after
//!   it stopped being true. (Stripe's keys do the same for requests that failed validation.)
//! - **Retry, same fingerprint**: the stored answer, byte for byte, `Idempotent-Replayed:
//!   true`; nothing is written or charged.
//! - **Retry while the original's records are with Kafka** (a sync request that got 503, or
//!   whose answer was lost): waits for those records' outcome, up to `delivery_timeout_ms`,
//!   and answers with it; or 503 again — never writing anything new.
//! - **Retry while the original is being read or admitted**: 409 `idempotency_key_in_use`.
//! - **Same key, another request**: 422 `idempotency_key_reused`.
//!
//! A sync original waits for Kafka itself; if it stops waiting first (its delivery timeout, or
//! its client gone and the request dropped), a task takes its claim over and stores the answer
//! once Kafka has given it — the case a retry exists for.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::Response;

use super::frames::{Frames, Stopped};
use super::{declared_length, drain_if_small, failed_at_enqueue, Ack, Answer, BodyFormat};
use super::{Drain, Ingest, ProduceRequest, Respond};
use crate::config::OnStoreError;
use crate::idempotency::{
    Begin, Claim, Fingerprint, Fingerprinter, FlightState, IdempotencyKey, KeyOutcome,
    RequestShape, StoredAnswer, TenantKey, Waiter,
};
use crate::identity::Topic;
use crate::kafka::{Batch, FailureKind};
use crate::outcome::{ApiError, Produced};
use crate::refusal::Reason;
use crate::tenant::Tenant;

/// How long a 409 asks the client to wait: an original still being read or admitted is
/// usually done within milliseconds (Retry-After counts whole seconds).
pub const IN_USE_RETRY: Duration = Duration::from_secs(1);

/// First and longest pause between reads of another replica's pending request.
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(500);

impl Ingest {
    pub(super) async fn produce_keyed(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        request: ProduceRequest<'_>,
        format: BodyFormat<'_>,
        key: IdempotencyKey<'_>,
        drain: &Drain,
    ) -> Answer {
        let content_type = request
            .headers
            .get(header::CONTENT_TYPE)
            .map_or(&b""[..], |v| v.as_bytes());
        let print = Fingerprinter::new(RequestShape {
            tenant: tenant.id.as_str(),
            method: "POST",
            path: request.path,
            ack: request.ack.as_str(),
            content_type,
        });
        let key = key.scoped(&tenant.id);
        let declared = declared_length(request.headers);
        let stats = &self.idempotency.stats;
        // Cluster mode: a tenant that gave up its allowance of claims (and more, by requests
        // in progress) is refused before anything is asked of Redis, not even whether an
        // answer is stored: its retries are answered once the allowance has room again.
        if let Some(wait) = self.idempotency.releases_spent(&tenant.id) {
            stats.count(KeyOutcome::Held);
            drain_if_small(declared, request.body).await;
            return ApiError::IdempotencyReleases(wait).into();
        }
        // Refused before its key is claimed if its budgets refuse it now and [wait] would not
        // hold it: a refusal costs no claim and no release.
        let may_claim = || self.refused_at_once(tenant, topic, declared);
        let begin = match self.idempotency.begin_if(key.clone(), may_claim).await {
            Ok(begin) => begin,
            Err(e) => {
                drain_if_small(declared, request.body).await;
                return e.into();
            }
        };
        let fresh = match begin {
            Begin::Fresh(claim) => claim,
            Begin::InUse => {
                stats.count(KeyOutcome::Conflict);
                drain_if_small(declared, request.body).await;
                return ApiError::IdempotencyKeyInUse(IN_USE_RETRY).into();
            }
            Begin::Unavailable(detail) => match self.idempotency.settings.on_store_error {
                OnStoreError::Refuse => {
                    stats.count(KeyOutcome::Refused);
                    drain_if_small(declared, request.body).await;
                    return ApiError::IdempotencyUnavailable(detail).into();
                }
                OnStoreError::Accept => {
                    stats.count(KeyOutcome::Unprotected);
                    let (answer, _) = self
                        .process_and_settle(tenant, topic, (request, declared), format, drain)
                        .await;
                    return answer;
                }
            },
            Begin::Stored(original, answer) => {
                return match self
                    .same_request(print, request.body, declared, original)
                    .await
                {
                    Ok(()) => {
                        stats.count(KeyOutcome::Replayed);
                        Answer::Stored {
                            answer,
                            replayed: true,
                        }
                    }
                    Err(e) => e.into(),
                };
            }
            Begin::Attach(original, flight) => {
                if let Err(e) = self
                    .same_request(print, request.body, declared, original)
                    .await
                {
                    return e.into();
                }
                stats.count(KeyOutcome::Attached);
                return self.await_flight(flight).await;
            }
            Begin::Remote(original) => {
                if let Err(e) = self
                    .same_request(print, request.body, declared, original)
                    .await
                {
                    return e.into();
                }
                stats.count(KeyOutcome::Attached);
                return self.await_remote(key, original).await;
            }
        };
        stats.count(KeyOutcome::Processed);
        self.process_claimed(tenant, topic, (request, declared), format, print, fresh)
            .await
    }

    /// The first request with its key: the usual pipeline, then the answer stored.
    async fn process_claimed(
        &self,
        tenant: &Arc<Tenant>,
        topic: &Topic,
        (request, declared): (ProduceRequest<'_>, Option<u64>),
        format: BodyFormat<'_>,
        mut print: Fingerprinter,
        mut claim: Claim,
    ) -> Answer {
        let (ack, respond) = (request.ack, request.respond);
        let sent = self
            .process(
                tenant,
                topic,
                request.body,
                declared,
                format,
                Some(&mut print),
            )
            .await;
        // Refused whole, or every entry of a batch failed: nothing was written or charged, so
        // nothing is stored (see the module's comment) and the key is free again.
        let batch = match sent {
            Ok(sent) if !sent.batch.is_empty() => sent.batch,
            Ok(sent) => {
                // Every entry failed (a batch's): counted, as its entries are its own.
                claim.release(true).await;
                return Answer::Outcome(Ok(Produced::Settled(sent.batch)));
            }
            Err(e) => {
                claim.release(counted(&e)).await;
                return e.into();
            }
        };
        // Records are decoded only once the body has ended (`decode_body` marks it), so a
        // sent request's fingerprint stands for its whole body.
        debug_assert!(print.is_complete(), "records sent before the body's end");
        let fp = print.seal();
        // From here on a retry waits for these records instead of writing them again.
        claim.pending(fp);
        if ack == Ack::Enqueued && !failed_at_enqueue(&batch) {
            let accepted = Produced::Accepted {
                records: batch.len(),
            };
            return keep(claim, fp, respond.respond(Ok(accepted))).await;
        }
        // Waits here for Kafka like any sync request; if the wait ends first (the delivery
        // timeout, or this request dropped because its client left), the claim is handed to a
        // task that stores the answer once Kafka has given it.
        let mut settling = Settling {
            claim: Some(claim),
            batch: batch.clone(),
            respond,
            fp,
        };
        if tokio::time::timeout(self.delivery_timeout, batch.wait())
            .await
            .is_err()
        {
            drop(settling);
            return self
                .not_acknowledged(
                    &batch,
                    "; a retry with the same Idempotency-Key waits for them instead of writing \
                     them again",
                )
                .into();
        }
        let Some(claim) = settling.claim.take() else {
            return Answer::Outcome(Ok(Produced::Settled(batch)));
        };
        if nothing_written(&batch) {
            claim.release(false).await;
            return Answer::Outcome(Ok(Produced::Settled(batch)));
        }
        keep(claim, fp, respond.respond(Ok(Produced::Settled(batch)))).await
    }

    /// A retry waits for the original's answer, up to the delivery timeout.
    async fn await_flight(&self, flight: Waiter) -> Answer {
        let settled = tokio::time::timeout(self.delivery_timeout, flight.settled()).await;
        let state = match settled {
            Ok(state) => state,
            Err(_) => {
                return ApiError::KafkaUnavailable(format!(
                    "the original request with this Idempotency-Key is still waiting for Kafka \
                     after {} ms; nothing was written again: retry with the same key",
                    self.delivery_timeout.as_millis()
                ))
                .into()
            }
        };
        match state {
            FlightState::Answered(_, answer) => Answer::Stored {
                answer,
                replayed: true,
            },
            _ => ApiError::KafkaUnavailable(
                "Kafka did not take the records of the request with this Idempotency-Key, so \
                 nothing was written: retry with the same key"
                    .into(),
            )
            .into(),
        }
    }

    /// Another replica's request is pending: read its key until the answer is there, up to
    /// the delivery timeout.
    async fn await_remote(&self, key: TenantKey, original: Fingerprint) -> Answer {
        let deadline = tokio::time::Instant::now() + self.delivery_timeout;
        let mut pause = POLL_FIRST;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return ApiError::KafkaUnavailable(format!(
                    "the original request with this Idempotency-Key (on another replica) is \
                     still waiting for Kafka after {} ms; nothing was written again: retry \
                     with the same key",
                    self.delivery_timeout.as_millis()
                ))
                .into();
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(POLL_MAX);
            match self.idempotency.read(&key).await {
                Ok(Some(FlightState::Answered(fp, answer))) if fp == original => {
                    return Answer::Stored {
                        answer,
                        replayed: true,
                    }
                }
                // Answered for another request: the key was given up and used again meanwhile.
                Ok(Some(FlightState::Answered(..))) => {
                    self.idempotency.stats.count(KeyOutcome::Reused);
                    return ApiError::IdempotencyKeyReused.into();
                }
                // Given up with nothing written: the next try is processed afresh.
                Ok(None | Some(FlightState::Released)) => {
                    return ApiError::IdempotencyKeyInUse(IN_USE_RETRY).into()
                }
                Ok(Some(FlightState::Claimed | FlightState::Pending(_))) | Err(_) => {}
            }
        }
    }

    /// Reads and hashes a retry's body (never decoded: it is compared, not processed). The
    /// same request is `Ok`; another one under the same key is 422.
    async fn same_request(
        &self,
        mut print: Fingerprinter,
        mut body: Body,
        declared: Option<u64>,
        original: Fingerprint,
    ) -> Result<(), ApiError> {
        let limit = self.max_body_bytes;
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::BodyTooLarge { limit });
        }
        let mut frames = Frames::new(&mut body, self.body_read_timeout, limit);
        loop {
            match frames.next().await {
                Ok(Some(data)) => print.update(&data),
                Ok(None) => break,
                Err(Stopped::Timeout) => return Err(ApiError::BodyTimeout),
                Err(Stopped::TooLarge) => return Err(ApiError::BodyTooLarge { limit }),
                Err(Stopped::Unreadable(e)) => return Err(self.unreadable(None, &e)),
            }
        }
        print.body_complete();
        if print.finish() == Some(original) {
            return Ok(());
        }
        self.idempotency.stats.count(KeyOutcome::Reused);
        Err(ApiError::IdempotencyKeyReused)
    }
}

/// Whether a request refused after its claim spends its tenant's allowance of releases: a
/// 4xx does, and a 429 of what the tenant's own traffic spent (its budgets, its share of the
/// buffer, its unpaid schema work and the schema threads its jobs keep busy: review 30 of
/// #37, uncounted, let a tenant give up 3,600 claims a second). A 5xx (Kafka, the registry
/// or the store away) does not, nor a 429 of a limit every tenant shares (the global budgets,
/// the buffer, Kafka's pace, a lag guard): counted, another tenant's load held a victim
/// 7.5–14.5 s after it ended (review 31). Such a 429 after a claim is rare: a keyed request
/// those limits refuse before its claim asks Redis nothing. The body budget's
/// (`server_busy`) counts: a tenant can fill it itself, and uncounted, one that did had its
/// keyed requests claimed and refused at 38,000 Redis commands a second (review 32); a
/// declared length it cannot take is refused before the claim, so only a body without one,
/// or one that outgrows what is free, is refused after it. A `schema_busy` of schema
/// threads busy with other tenants' work, nothing of the tenant's own ahead, does not count
/// (R-3 of review 30: another tenant's checks got a victim's keyed records refused after
/// their claim, and the victim was held 11–12 s after the attack). It comes after the wait
/// limit (2 s by default) with no other job of the tenant queued or running, so about one
/// such claim per wait limit and replica can be given up uncounted.
fn counted(e: &ApiError) -> bool {
    match e {
        ApiError::SchemaCrowded(..) => false,
        ApiError::RateLimited(refusal) => {
            refusal.reason.is_tenants_own() || refusal.reason == Reason::ServerBusy
        }
        e => !e.status().is_server_error(),
    }
}

/// Every record failed without reaching Kafka (the producer could not take them): nothing
/// was written, so nothing is stored and a retry is processed afresh.
fn nothing_written(batch: &Batch) -> bool {
    batch
        .outcomes()
        .all(|o| matches!(o, Some(Err(f)) if f.kind == FailureKind::Unavailable))
}

/// Stores the original's answer, and sends it as the encoder wrote it.
async fn keep(claim: Claim, fp: Fingerprint, response: Response) -> Answer {
    let (answer, response) = StoredAnswer::keep(response).await;
    claim.finish(fp, answer).await;
    Answer::Sent(response)
}

/// A sync original waiting for Kafka. Dropped with its claim still in it (the delivery
/// timeout passed, or the request was dropped), it hands the claim to a task that stores the
/// answer once Kafka has answered every record.
struct Settling<'a> {
    claim: Option<Claim>,
    batch: Arc<Batch>,
    respond: &'a dyn Respond,
    fp: Fingerprint,
}

impl Drop for Settling<'_> {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        let (batch, respond, fp) = (self.batch.clone(), self.respond.detach(), self.fp);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime: the process is ending, and the claim with it
        };
        runtime.spawn(async move {
            batch.wait().await;
            if nothing_written(&batch) {
                claim.release(false).await;
                return;
            }
            let answer = respond.respond(Ok(Produced::Settled(batch)));
            let (answer, _) = StoredAnswer::keep(answer).await;
            claim.finish(fp, answer).await;
        });
    }
}

#[cfg(test)]
mod tests;
