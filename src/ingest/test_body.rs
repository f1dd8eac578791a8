//! Tests' request bodies: fed by the test chunk by chunk, ended when the sender is dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use tokio::sync::mpsc;

/// A request body fed by the test, chunk by chunk.
pub struct Chunks(pub mpsc::Receiver<Bytes>);

impl axum::body::HttpBody for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|c| c.map(|c| Ok(hyper::body::Frame::data(c))))
    }
}
