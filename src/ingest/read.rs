//! Reading a request's body: decoded as it arrives, held against the body budget, checked
//! against the tenant's budgets after every chunk but the last (admission itself comes
//! next), and cut short the moment it cannot be admitted. A request refused early has its body drained if small, or read on for a moment
//! (lingering), so the client hears the answer rather than a reset.

use std::time::Duration;

use axum::body::Body;
use axum::body::HttpBody as _;
use axum::http::{header, HeaderMap};
use http_body_util::BodyExt;

use super::frames::{Frames, Stopped};
use super::reading::BodyOwed;
use super::reading::{too_costly, unpaid_refusal, BodyWork, LingerBill, Reading};
use super::{refused, Answer, BodyFormat, Held, Ingest, ProduceRequest};
use crate::body::{BodyError, Decoder, RecordArena};
use crate::idempotency::Fingerprinter;
use crate::identity::Topic;
use crate::inflight_bodies::{BodyHold, Cut};
use crate::outcome::ApiError;
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal};
use crate::schema::Schemas;
use crate::tenant::Tenant;
use std::sync::Arc;

impl Ingest {
    /// Reads and decodes the body as it arrives, within `max_body_bytes` and
    /// `body_read_timeout`, held against the body budget as it arrives (a declared length
    /// that does not fit now is refused before the first byte is read; the hold is given
    /// back when dropped). After every chunk the records decoded so far are checked against
    /// the tenant's budgets, its buffer share and the buffer: the moment they cannot be
    /// admitted, the request is refused and the rest of the body is never read — unless, with
    /// `[wait]`, they are short only of tokens due within `max_ms` and the request has (or
    /// takes now) a seat in the waiting room (`held`, kept until admission).
    ///
    /// A tenant's bodies together may hold at most its `max_buffer_share` of the budget. An
    /// upload refused before its end is read on (and discarded) for a moment after the answer
    /// is sent — see [`linger`] — so the client sees the answer instead of a reset.
    #[allow(clippy::too_many_arguments)] // one call site: the request's parts, passed through
    pub(super) async fn read_records<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        mut body: Body,
        declared: Option<u64>,
        format: BodyFormat<'_>,
        print: Option<&mut Fingerprinter>,
        held: &mut Held<'a>,
    ) -> Result<(RecordArena, BodyHold, BodyOwed<'a>), ApiError> {
        let mut hold = self
            .inflight_bodies
            .hold(tenant.body_bytes.clone(), tenant.buffer_share());
        hold.watch_while_reading();
        // What reading the body costs is owed until admission pays (see `BodyWork`).
        let mut owed = BodyOwed::new(&self.schemas, tenant.id.as_str());
        match self
            .decode_body(
                tenant,
                topic,
                &mut body,
                (&mut hold, &mut owed),
                declared,
                format,
                print,
                held,
            )
            .await
        {
            Ok(arena) => {
                hold.read();
                Ok((arena, hold, owed))
            }
            Err(e) => {
                drop(hold);
                linger(body, (self.schemas.clone(), tenant.id.as_str().into()));
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)] // one call site: the request's parts, passed through
    async fn decode_body<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        body: &mut Body,
        (hold, owed): (&mut BodyHold, &mut BodyOwed<'_>),
        declared: Option<u64>,
        format: BodyFormat<'_>,
        mut print: Option<&mut Fingerprinter>,
        held: &mut Held<'a>,
    ) -> Result<RecordArena, ApiError> {
        // A declared length that does not fit now is refused before the body is read; what
        // is held is what arrived. Reserved whole up front, eight requests from two tenants
        // allowed 1 record a second, each declaring 8 MiB and sending 13 bytes, held the whole
        // 64 MiB budget for the 30 s body timeout and every tenant was refused (review 31 of
        // #37: 0 of 378 admitted). One room could be made for (`inflight_bodies::room`) goes
        // on, and room is made as its bytes arrive: made for a declared length, it was cut
        // for bodies never sent (review 33: 110 such requests cut 40 uploads).
        if !hold.fits_or_could_make_room(declared.unwrap_or(0)) {
            return Err(self.cut_short(Cut::ServerBusy, self.busy(tenant)));
        }
        let mut bounds = self.bounds.clone();
        if let Some(max) = format.max_records {
            bounds.max_records_per_request = bounds.max_records_per_request.min(max);
        }
        let mut decoder = Decoder::new(format.framing, format.record, &bounds);
        let mut frames = Frames::new(body, self.body_read_timeout, self.max_body_bytes);
        let mut checked = Charge::default();
        let mut work = BodyWork::new(declared, self.schemas.most_owed());
        loop {
            let next = tokio::select! {
                biased;
                () = hold.cut() => {
                    return Err(self.cut_short(Cut::MadeRoom, self.busy(tenant)));
                }
                next = frames.next() => next,
            };
            let data = match next {
                Ok(Some(data)) => data,
                Ok(None) => {
                    if let Some(print) = print.as_deref_mut() {
                        print.body_complete();
                    }
                    break;
                }
                Err(Stopped::Timeout) => return Err(ApiError::BodyTimeout),
                Err(Stopped::Unreadable(e)) => return Err(self.unreadable(Some(tenant), &e)),
                Err(Stopped::TooLarge) => {
                    let limit = self.max_body_bytes;
                    let e = ApiError::BodyTooLarge { limit };
                    return Err(self.cut_short(Cut::BodyTooLarge, e));
                }
            };
            if let Some(print) = print.as_deref_mut() {
                print.update(&data);
            }
            let received = frames.received();
            match work.read(data.len(), received, owed) {
                Reading::On => {}
                // A body that may cost more than a small one, or arrives in many pieces: not
                // read on for a tenant whose unpaid work is spent (its refusals would be paid
                // by no one).
                Reading::Ask => self
                    .schemas
                    .unpaid_allows(tenant.id.as_str())
                    .map_err(|e| self.cut_short(Cut::RateLimited, unpaid_refusal(&e)))?,
                Reading::TooCostly(most) => {
                    return Err(self.cut_short(
                        Cut::Malformed,
                        too_costly(most, super::reading::NS_PER_PIECE),
                    ));
                }
            }
            if received > hold.bytes()
                && !hold
                    .grow_making_room(received - hold.bytes(), ROOM_WAIT)
                    .await
            {
                return Err(self.cut_short(Cut::ServerBusy, self.busy(tenant)));
            }
            let read = decoder
                .push(&data)
                .map_err(|e| self.cut_short(cut_for(&e), e.into()))?;
            // Could the records read so far still be admitted? Not asked of a body that has
            // ended (its length all read): admission itself comes next. So a body of one chunk
            // meets admission twice in all (the early check, the decision), one of N chunks at
            // most N + 1 times.
            if !frames.ended() {
                // More to come: watched whatever it holds, stalled small uploads too.
                hold.watch_now();
            }
            if read.records > checked.records && !frames.ended() {
                checked = read;
                self.still_admissible(tenant, topic, read, held)?;
            }
        }
        Ok(decoder.finish()?)
    }

    /// Mid-upload: could `read` (the records read so far) be admitted now? If not, the whole
    /// request cannot be either, and it is cut short before the rest is read. With `[wait]`, a
    /// short wait goes on only on a seat of the waiting room.
    fn still_admissible<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        read: Charge,
        held: &mut Held<'a>,
    ) -> Result<(), ApiError> {
        let checked = match self.admission.check_to(tenant, Some(topic), read) {
            Err(Denial::Refused(r)) => self.seated(tenant, held, r).map_err(Denial::Refused),
            other => other,
        };
        let Err(denial) = checked else {
            return Ok(());
        };
        let cut = match &denial {
            Denial::Refused(r) => {
                tenant
                    .stats()
                    .decided(read.records, read.bytes, Some(r.reason), true);
                Cut::RateLimited
            }
            Denial::TooLarge(_) => Cut::ExceedsBurst,
        };
        Err(self.cut_short(cut, self.denied(tenant, denial)))
    }

    pub(super) fn busy(&self, tenant: &Tenant) -> ApiError {
        let retry_after = self.inflight_bodies.retry_hint();
        refused(tenant, Refusal::new(Reason::ServerBusy, retry_after))
    }

    /// Counts an upload answered before its body was read to the end.
    pub(super) fn cut_short(&self, cut: Cut, error: ApiError) -> ApiError {
        self.inflight_bodies.count_cut_short(cut);
        error
    }
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

/// How long a body waits for the room another's cut uploads give back.
const ROOM_WAIT: Duration = Duration::from_millis(500);

/// After an answer given before the body's end, how much of the rest is read and discarded,
/// and for how long at most.
const LINGER_BYTES: u64 = 1024 * 1024;

const LINGER_TIME: Duration = Duration::from_secs(1);

/// ... and in how many pieces at most: a body sent in 1-byte chunks made its 1 MiB cost ~0.9 s
/// of CPU after every refusal (review 37a of #37). Ordinary clients send pieces of kilobytes.
const LINGER_PIECES: u32 = 1024;

/// A client still sending when we answer may get a connection reset before it reads the answer
/// if we close with its data unread (as every server that stops reading risks). So the rest of
/// the body is read and dropped in the background for a moment (at most [`LINGER_BYTES`],
/// [`LINGER_PIECES`] and [`LINGER_TIME`], like nginx's lingering close), while the answer goes
/// out; then the connection closes. Nothing read here is kept; what reading it costs is its
/// tenant's unpaid work, and a tenant whose unpaid work is spent is not read for (review 38a of
/// #37: 64 KiB bodies in 1-byte HTTP/2 frames, refused, were read on for 1,024 pieces each).
fn linger(mut body: Body, (schemas, tenant): (Arc<Schemas>, Arc<str>)) {
    if body.is_end_stream() {
        return;
    }
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + LINGER_TIME;
        let (mut read, mut pieces) = (0u64, 0u32);
        let mut bill = LingerBill::new(&schemas, &tenant, super::reading::NS_PER_PIECE);
        while read < LINGER_BYTES && pieces < LINGER_PIECES {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                    read += len;
                    pieces += 1;
                    if !bill.read(len) {
                        return;
                    }
                }
                _ => break,
            }
        }
    });
}

/// A refusal decided before the body is read (credential, topic, format, key): the body is
/// drained if small, as after the early check, then the refusal answered.
pub(super) async fn refused_unread(e: ApiError, request: ProduceRequest<'_>) -> Answer {
    drain_if_small(declared_length(request.headers), request.body).await;
    e.into()
}

/// An HTTP/1.1 connection whose request body was not read cannot carry another request, so an
/// early refusal would cost the client a new connection (and a TLS handshake) for every
/// refusal. On HTTP/2 a request body dropped unread resets its stream, and the reset can
/// overtake the answer (curl: "stream error in the HTTP/2 framing layer", no status at all). A small body that has already arrived — the common case — is read and dropped; a
/// large or slow one is not waited for, and its connection closes.
pub(super) async fn drain_if_small(declared: Option<u64>, body: Body) {
    if declared.is_some_and(|n| n > DRAIN_MAX_BYTES) {
        return;
    }
    // Undeclared (chunked, or an HTTP/2 body without content-length): read while it stays
    // small, as a declared small one is.
    let limited = http_body_util::Limited::new(body, DRAIN_MAX_BYTES as usize);
    let _ = tokio::time::timeout(DRAIN_WAIT, limited.collect()).await;
}

/// Largest declared body that is drained after an early refusal.
const DRAIN_MAX_BYTES: u64 = 16 * 1024;

/// How long draining may delay an early refusal.
const DRAIN_WAIT: Duration = Duration::from_millis(5);

pub(super) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
}
