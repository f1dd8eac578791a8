//! A produce request's body read frame by frame within its deadline (`body_read_timeout`)
//! and its size (`max_body_bytes`): the one loop the readers of a whole body share (the
//! records' decoder, and a keyed retry's comparison). A stream's reader waits per record
//! instead (see `stream`), and lingering reads on past an answer with no deadline to report.

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use tokio::time::Instant;

/// Why a body's reading stopped before its end.
pub(super) enum Stopped {
    /// `body_read_timeout` passed.
    Timeout,
    /// More than `max_body_bytes` arrived.
    TooLarge,
    /// The body broke off, or its decoding (an `Inflating` body) refused it.
    Unreadable(axum::Error),
}

/// A body's data frames, in order, until its end.
pub(super) struct Frames<'b> {
    body: &'b mut Body,
    deadline: Instant,
    limit: u64,
    received: u64,
}

impl<'b> Frames<'b> {
    pub(super) fn new(body: &'b mut Body, timeout: std::time::Duration, limit: u64) -> Self {
        Self {
            body,
            deadline: Instant::now() + timeout,
            limit,
            received: 0,
        }
    }

    /// The next data frame, `None` at the body's end (trailers are skipped).
    pub(super) async fn next(&mut self) -> Result<Option<Bytes>, Stopped> {
        loop {
            let frame = match tokio::time::timeout_at(self.deadline, self.body.frame()).await {
                Err(_) => return Err(Stopped::Timeout),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(Stopped::Unreadable(e)),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            self.received += data.len() as u64;
            if self.received > self.limit {
                return Err(Stopped::TooLarge);
            }
            return Ok(Some(data));
        }
    }

    /// Bytes read so far.
    pub(super) fn received(&self) -> u64 {
        self.received
    }

    /// Whether the body has ended (its length all read), though `next` has not said so yet.
    pub(super) fn ended(&self) -> bool {
        axum::body::HttpBody::is_end_stream(&*self.body)
    }
}
