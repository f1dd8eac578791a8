//! The body's content coding, a step between a request's head and its first body byte.
//!
//! `Content-Encoding` is read once ([`codings`]): a coding floodgate does not decode, or too
//! many stacked, is 415 with `Accept-Encoding`. A coded body is replaced by an [`Inflating`]
//! one ([`Ingest::decoded_body`]), so every reader of the body — `read`'s decoder, the stream
//! pump, a retry's fingerprint — reads inflated bytes, a piece at a time, and no wire format's
//! adapter knows there was a coding. Everything the pipeline bounds by the body's bytes
//! (`max_body_bytes`, the body budget, the tenants' byte budgets through the records) is so
//! bounded by what the body inflates to; the coded form is bounded as well (`max_body_bytes`,
//! and the ratio).
//!
//! Layer: pipeline, as `ingest`.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{header, HeaderMap};
use hyper::body::Frame;

use super::Ingest;
use crate::inflate::{Codings, InflateError, Inflater, Limits, Next};
use crate::inflight_bodies::{BodyHold, Cut, CutSignal};
use crate::outcome::ApiError;
use crate::refusal::{Reason, Refusal};
use crate::tenant::Tenant;

/// A request's `Content-Encoding` fields: their codings, or 415.
pub(super) fn codings(headers: &HeaderMap) -> Result<Codings, ApiError> {
    Codings::parse(
        headers
            .get_all(header::CONTENT_ENCODING)
            .iter()
            .map(|v| v.as_bytes()),
    )
    .map_err(|e| ApiError::UnsupportedEncoding(e.to_string()))
}

/// Set once the pipeline is done reading a coded body: whatever reads on (a lingering drain,
/// which only discards) gets the rest as it came, never inflated — so a drain of a refused
/// upload reads as many of the client's bytes, at as little cost, as for a plain body.
/// A body that is not coded has none (nothing to switch, nothing allocated).
#[derive(Debug, Clone, Default)]
pub(super) struct Drain(Option<Arc<AtomicBool>>);

impl Drain {
    pub(super) fn start(&self) {
        if let Some(flag) = &self.0 {
            flag.store(true, Ordering::Release);
        }
    }

    fn started(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Acquire))
    }
}

impl Ingest {
    /// The body the pipeline reads: the request's own when it is not coded, else the same
    /// inflated as it is read, with the switch that ends its inflating. `stream`: a stream's
    /// length is bounded by its time, not by `max_body_bytes` (its records still are, one by
    /// one).
    pub(super) fn decoded_body(
        &self,
        tenant: &Tenant,
        body: Body,
        codings: Codings,
        stream: bool,
    ) -> (Body, Drain) {
        let whole = if stream {
            u64::MAX
        } else {
            self.max_body_bytes
        };
        let limits = Limits {
            max_output: whole,
            max_input: whole,
            ratio: self.max_inflation_ratio,
            max_block: self.max_body_bytes,
        };
        let Some(inflater) = Inflater::new(codings, limits, self.codings.clone()) else {
            return (body, Drain::default());
        };
        let drain = Drain(Some(Arc::default()));
        let mut hold = self
            .inflight_bodies
            .hold(tenant.body_bytes.clone(), tenant.buffer_share());
        // The decoders' memory may be cut for a newcomer as the body's bytes may (review 33
        // of #37: a zstd frame of 109 bytes asking for an 8 MiB window held 8.9 MB that was
        // never cut, and such bodies kept the whole budget).
        hold.watch_while_reading();
        let inflating = Inflating {
            wire: body,
            inflater: Some(inflater),
            hold,
            cut: None,
            drain: drain.clone(),
            owe_yield: false,
            wire_ended: false,
            ahead: None,
            done: false,
        };
        (Body::new(inflating), drain)
    }

    /// Why a body could not be read to its end, as the request's answer: the coding's refusal
    /// (counted as an upload cut short), or the body broke off.
    pub(super) fn unreadable(&self, tenant: Option<&Tenant>, e: &axum::Error) -> ApiError {
        self.coding_refusal(tenant, e)
            .unwrap_or_else(|| ApiError::Malformed(format!("the body could not be read: {e}")))
    }

    /// The refusal an [`Inflating`] body failed with; `None` when the body broke off (the
    /// client went away, or sent a broken chunk).
    pub(super) fn coding_refusal(
        &self,
        tenant: Option<&Tenant>,
        e: &axum::Error,
    ) -> Option<ApiError> {
        let failure = std::error::Error::source(e)?.downcast_ref::<Failure>()?;
        let (cut, error) = match failure {
            Failure::Wire(_) => return None,
            Failure::Inflate(InflateError::TooLarge { limit }) => {
                (Cut::BodyTooLarge, ApiError::BodyTooLarge { limit: *limit })
            }
            Failure::Inflate(InflateError::Ratio { ratio }) => {
                (Cut::BodyTooLarge, ApiError::InflationRatio(*ratio))
            }
            Failure::Inflate(invalid) => (Cut::Malformed, ApiError::Malformed(invalid.to_string())),
            Failure::Busy | Failure::MadeRoom => (
                match failure {
                    Failure::MadeRoom => Cut::MadeRoom,
                    _ => Cut::ServerBusy,
                },
                match tenant {
                    Some(tenant) => self.busy(tenant),
                    None => ApiError::RateLimited(Refusal::new(
                        Reason::ServerBusy,
                        self.inflight_bodies.retry_hint(),
                    )),
                },
            ),
        };
        Some(self.cut_short(cut, error))
    }
}

/// Why an [`Inflating`] body stopped.
#[derive(Debug)]
enum Failure {
    /// The coded data is invalid, or inflates past a bound.
    Inflate(InflateError),
    /// The body budget cannot hold the decoders' memory now.
    Busy,
    /// Its decoders' memory was cut to make room for a newcomer (`inflight_bodies::room`).
    MadeRoom,
    /// The request's own body broke off.
    Wire(axum::Error),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Inflate(e) => e.fmt(f),
            Failure::Busy => f.write_str("no room in the body budget for the decoders"),
            Failure::MadeRoom => f.write_str("cut to make room in the body budget"),
            Failure::Wire(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Failure {}

/// A coded body, inflated as it is read. What its decoders hold (their state, the coded bytes
/// waiting) is held against the body budget and the tenant's share, resized after every step;
/// the inflated pieces are charged by whoever reads them, as any body's bytes are. After
/// handing out a piece it yields once before the next, so a body that inflates far costs its
/// reader one piece of work per poll, never a run of them.
struct Inflating {
    wire: Body,
    /// `None` once it failed or its drain started: only a drain reads on, and the rest passes
    /// as it came.
    inflater: Option<Inflater>,
    hold: BodyHold,
    /// Resolves once the hold is cut for a newcomer (`inflight_bodies::room`): the body
    /// then fails as the budget's refusal.
    cut: Option<CutSignal>,
    drain: Drain,
    owe_yield: bool,
    /// The wire body has ended (and the inflater knows).
    wire_ended: bool,
    /// Once the wire has ended, the inflater's next answer is taken ahead, so the body can
    /// say it is at its end (a stream's first read tells one record from a stream by it).
    ahead: Option<Result<Next, InflateError>>,
    done: bool,
}

type Polled = Poll<Option<Result<Frame<Bytes>, Failure>>>;

impl Inflating {
    fn fail(&mut self, failure: Failure) -> Polled {
        self.inflater = None;
        self.ahead = None;
        self.hold.resize(0);
        Poll::Ready(Some(Err(failure)))
    }

    /// The decoders' memory held; `false` when the budget cannot hold it.
    fn held(&mut self) -> bool {
        let memory = self.inflater.as_ref().map_or(0, Inflater::memory);
        self.hold.resize(memory as u64)
    }

    /// Hands the next wire frame to the inflater (or its end).
    fn read_wire(&mut self, cx: &mut Context<'_>) -> Option<Polled> {
        let frame = match Pin::new(&mut self.wire).poll_frame(cx) {
            Poll::Pending => return Some(Poll::Pending),
            Poll::Ready(None) => None,
            Poll::Ready(Some(Err(e))) => return Some(self.fail(Failure::Wire(e))),
            Poll::Ready(Some(Ok(frame))) => Some(frame),
        };
        let last = frame.is_none() || self.wire.is_end_stream();
        let inflater = self.inflater.as_mut()?;
        if let Some(Ok(data)) = frame.map(Frame::into_data) {
            if let Err(e) = inflater.push(&data) {
                return Some(self.fail(Failure::Inflate(e)));
            }
        }
        if last {
            self.wire_ended = true;
            inflater.end_input();
        }
        if !self.held() {
            return Some(self.fail(Failure::Busy));
        }
        None
    }
}

impl HttpBody for Inflating {
    type Data = Bytes;
    type Error = Failure;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = self.get_mut();
        if this.drain.started() && this.inflater.is_some() {
            // Its reader is done: the decoders and what they hold go now.
            this.inflater = None;
            this.ahead = None;
            this.hold.resize(0);
        }
        if this.inflater.is_none() && !this.done {
            // Failed: only a drain reads on, so the rest goes by as it came, never inflated.
            return Pin::new(&mut this.wire)
                .poll_frame(cx)
                .map(|f| f.map(|f| f.map_err(Failure::Wire)));
        }
        if this.done {
            return Poll::Ready(None);
        }
        if this.cut.is_none() {
            this.cut = this.hold.cut_signal();
        }
        if let Some(cut) = this.cut.as_mut() {
            if cut.as_mut().poll(cx).is_ready() {
                return this.fail(Failure::MadeRoom);
            }
        }
        if this.owe_yield {
            this.owe_yield = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        loop {
            let Some(inflater) = this.inflater.as_mut() else {
                return Poll::Ready(None);
            };
            let next = match this.ahead.take() {
                Some(next) => next,
                None => inflater.next_piece(),
            };
            match next {
                Err(e) => return this.fail(Failure::Inflate(e)),
                Ok(Next::End) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Ok(Next::Piece(piece)) => {
                    if this.wire_ended {
                        let ahead = inflater.next_piece();
                        this.done = matches!(ahead, Ok(Next::End));
                        this.ahead = Some(ahead);
                    }
                    if !this.held() {
                        return this.fail(Failure::Busy);
                    }
                    this.owe_yield = true;
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(piece)))));
                }
                Ok(Next::Again) => {
                    // A piece of work and nothing to show: let others run, then go on.
                    if !this.held() {
                        return this.fail(Failure::Busy);
                    }
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Ok(Next::NeedInput) => {
                    if let Some(polled) = this.read_wire(cx) {
                        return polled;
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
