//! The connection's bytes as hyper reads them: the first bytes, read to tell HTTP/1.1 from
//! HTTP/2, put back in front; and each read that brings bytes marked on the connection's
//! activity — a busy connection still being sent to (an upload in progress) is cut to make
//! room only after one that is not.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::Activity;
use super::ConnectionTrust;

/// A stream whose first bytes (`prefix`) were already read, replayed before the rest, its
/// reads marked on `heard` once it is served.
pub(super) struct Wire<T> {
    prefix: Vec<u8>,
    at: usize,
    inner: T,
    heard: Option<Arc<Activity>>,
    /// Counts what it reads while it has not authenticated (`unverified::heads`).
    trust: Option<ConnectionTrust>,
}

impl<T> Wire<T> {
    pub(super) fn new(inner: T, prefix: Vec<u8>) -> Self {
        Self {
            prefix,
            at: 0,
            inner,
            heard: None,
            trust: None,
        }
    }

    /// Its reads counted by `trust` while it has not authenticated.
    pub(super) fn counted_by(self, trust: Option<ConnectionTrust>) -> Self {
        Self { trust, ..self }
    }

    /// Its reads from now on marked on `activity`.
    pub(super) fn heard_by(self, activity: &Arc<Activity>) -> Self {
        Self {
            heard: Some(activity.clone()),
            ..self
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Wire<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n == 0 {
            return read;
        }
        if let Some(a) = this.heard.as_ref() {
            let now = u64::try_from(a.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
            a.heard_ns.store(now, Ordering::Relaxed);
        }
        if let Some(trust) = &this.trust {
            trust.heard(n);
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Wire<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
