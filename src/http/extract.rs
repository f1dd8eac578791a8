//! Extractors that answer in the listener's own error shape, never axum's plain text: path
//! parameters (a segment whose percent-encoding is not UTF-8 is a JSON 400 `invalid_path`
//! naming the parameter, in Confluent's envelope under its prefixes) and whole bodies (one
//! over the limit is a JSON 413 `body_too_large`). Both listeners use them. And the caller
//! ([`peer`]: address, client certificate, trust) every produce adapter hands the pipeline.
//!
//! Layer: HTTP edges. Imports the outcome room and the caller's parts (credential, tls, server).

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::Response;
use serde::de::DeserializeOwned;

use crate::outcome::ApiError;

/// `axum::extract::Path`, refused in JSON.
#[derive(Debug)]
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Self(value)),
            // Nothing here depends on who asks: the path names nothing that exists, as with
            // an unknown path (answered without authentication too).
            Err(e) => Err(super::answer_outside_routes(
                parts.uri.path(),
                &ApiError::InvalidPath(e.body_text()),
            )),
        }
    }
}

/// The most bytes an admin call's body may have (a tenant with its keys and patterns is a
/// few kilobytes; the registry's own limits are far below this).
pub const MAX_ADMIN_BODY_BYTES: usize = 2 * 1024 * 1024;

/// A whole request body, at most the router's `DefaultBodyLimit`, refused in JSON.
#[derive(Debug)]
pub struct Body(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let path = request.uri().path().to_string();
        match axum::body::Bytes::from_request(request, state).await {
            Ok(bytes) => Ok(Self(bytes)),
            Err(e) => {
                let error = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::BodyTooLarge {
                        limit: MAX_ADMIN_BODY_BYTES as u64,
                    }
                } else {
                    ApiError::Malformed(e.body_text())
                };
                Err(super::answer_outside_routes(&path, &error))
            }
        }
    }
}

impl std::ops::Deref for Body {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// What a produce adapter hands the pipeline: the request's head as it came, with what the
/// adapter decoded (`api`, the topic as the URL named it, the acknowledgement asked for) and
/// its encoder.
pub fn produce_request<'a>(
    parts: &'a axum::http::request::Parts,
    api: crate::ingest::Api,
    topic: &'a str,
    ack: crate::ingest::Ack,
    body: axum::body::Body,
    respond: &'a dyn crate::ingest::Respond,
) -> crate::ingest::ProduceRequest<'a> {
    crate::ingest::ProduceRequest {
        api,
        peer: peer(parts),
        headers: &parts.headers,
        path: parts.uri.path(),
        topic,
        ack,
        body,
        respond,
    }
}

/// The client's address and verified client certificate, as the connection loop recorded them.
pub fn peer(parts: &axum::http::request::Parts) -> crate::credential::Caller {
    let peer = parts.extensions.get::<crate::server::Peer>();
    crate::credential::Caller {
        ip: peer.map(|p| p.addr.ip()),
        cert: peer.and_then(|p| p.cert.clone()),
        trust: peer.and_then(|p| p.trust.clone()),
    }
}
