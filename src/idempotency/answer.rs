//! A stored answer: the status, headers and body bytes exactly as the wire format's encoder
//! wrote them the first time, so a replay is the same answer byte for byte on any replica
//! (and across versions that encode differently).
//!
//! One buffer per answer — `status u16 | headers u8 | (name u8, value u16)* | body` —
//! so an entry costs one allocation, the same in memory and in Redis. Decoding checks every
//! length: a truncated or foreign value from Redis is an error, never a panic.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};

/// The header a replayed answer carries (the draft's name for it is not fixed; this is
/// Stripe's and the most widely used).
pub const REPLAYED: &str = "idempotent-replayed";

/// Most headers an answer keeps (encoders write one or two).
const MAX_HEADERS: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    encoded: Bytes,
    /// Where the body starts in `encoded`.
    body_at: usize,
}

/// A stored value that is not an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a stored answer could not be read back (truncated or not written by floodgate)")]
pub struct Corrupt;

impl StoredAnswer {
    /// Its size as stored (what a replay copies out of the store).
    pub fn stored_bytes(&self) -> usize {
        self.encoded.len()
    }

    /// The answer an encoder produced (its body is already in memory: encoders write whole
    /// bodies, so collecting it does not wait).
    pub async fn from_response(response: Response) -> Self {
        Self::keep(response).await.0
    }

    fn encode(parts: &axum::http::response::Parts, body: &Bytes) -> Self {
        let headers: Vec<_> = parts
            .headers
            .iter()
            .filter(|(n, v)| n.as_str().len() <= 255 && v.len() <= usize::from(u16::MAX))
            .take(MAX_HEADERS)
            .collect();
        let head: usize = headers
            .iter()
            .map(|(n, v)| 3 + n.as_str().len() + v.len())
            .sum();
        let mut out = BytesMut::with_capacity(3 + head + body.len());
        out.put_u16(parts.status.as_u16());
        out.put_u8(headers.len() as u8);
        for (name, value) in headers {
            out.put_u8(name.as_str().len() as u8);
            out.put_slice(name.as_str().as_bytes());
            out.put_u16(value.len() as u16);
            out.put_slice(value.as_bytes());
        }
        let body_at = out.len();
        out.put_slice(body);
        Self {
            encoded: out.freeze(),
            body_at,
        }
    }

    /// The answer kept, and the response to send now: the encoder's own parts with the same
    /// body (nothing parsed back).
    pub async fn keep(response: Response) -> (Self, Response) {
        let (parts, body) = response.into_parts();
        let body = collect(body).await;
        let kept = Self::encode(&parts, &body);
        (kept, Response::from_parts(parts, Body::from(body)))
    }

    /// Reads back what [`StoredAnswer::encoded`] wrote.
    pub fn decode(encoded: Bytes) -> Result<Self, Corrupt> {
        let mut at = 0usize;
        let take = |at: &mut usize, n: usize| -> Result<&[u8], Corrupt> {
            let end = at.checked_add(n).ok_or(Corrupt)?;
            let slice = encoded.get(*at..end).ok_or(Corrupt)?;
            *at = end;
            Ok(slice)
        };
        let status = take(&mut at, 2)?;
        StatusCode::from_u16(u16::from_be_bytes([status[0], status[1]])).map_err(|_| Corrupt)?;
        let count = usize::from(take(&mut at, 1)?[0]);
        if count > MAX_HEADERS {
            return Err(Corrupt);
        }
        for _ in 0..count {
            let n = usize::from(take(&mut at, 1)?[0]);
            HeaderName::from_bytes(take(&mut at, n)?).map_err(|_| Corrupt)?;
            let len = take(&mut at, 2)?;
            let v = usize::from(u16::from_be_bytes([len[0], len[1]]));
            HeaderValue::from_bytes(take(&mut at, v)?).map_err(|_| Corrupt)?;
        }
        Ok(Self {
            encoded,
            body_at: at,
        })
    }

    /// The bytes kept for this answer.
    pub fn encoded(&self) -> &Bytes {
        &self.encoded
    }

    pub fn status(&self) -> StatusCode {
        let code = u16::from_be_bytes([self.encoded[0], self.encoded[1]]);
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn body(&self) -> Bytes {
        self.encoded.slice(self.body_at..)
    }

    /// The stored headers, in order.
    pub fn headers(&self) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
        let bytes = &self.encoded[..self.body_at];
        let count = usize::from(bytes.get(2).copied().unwrap_or(0));
        let mut at = 3usize;
        (0..count).filter_map(move |_| {
            let n = usize::from(*bytes.get(at)?);
            let name = HeaderName::from_bytes(bytes.get(at + 1..at + 1 + n)?).ok()?;
            at += 1 + n;
            let len = bytes.get(at..at + 2)?;
            let v = usize::from(u16::from_be_bytes([len[0], len[1]]));
            let value = HeaderValue::from_bytes(bytes.get(at + 2..at + 2 + v)?).ok()?;
            at += 2 + v;
            Some((name, value))
        })
    }

    /// The answer as sent again: the same status, headers and body; `replayed` adds
    /// `Idempotent-Replayed: true`.
    pub fn response(&self, replayed: bool) -> Response {
        let mut response = Response::new(Body::from(self.body()));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        for (name, value) in self.headers() {
            headers.append(name, value);
        }
        if replayed {
            headers.insert(REPLAYED, HeaderValue::from_static("true"));
        }
        response
    }
}

/// An encoder's body, whole: one frame as it is (encoders write one), more joined.
async fn collect(mut body: Body) -> Bytes {
    use http_body_util::BodyExt as _;
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        match (&mut joined, first.take()) {
            (Some(all), _) => all.put_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(previous)) => {
                let mut all = BytesMut::with_capacity(previous.len() + data.len());
                all.put_slice(&previous);
                all.put_slice(&data);
                joined = Some(all);
            }
        }
    }
    joined.map_or_else(|| first.unwrap_or_default(), BytesMut::freeze)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;
    use axum::response::IntoResponse;

    #[tokio::test]
    async fn an_answer_comes_back_byte_for_byte() {
        let mut original = (StatusCode::MULTI_STATUS, "{\"a\":[1,2]}").into_response();
        original.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let stored = StoredAnswer::from_response(original).await;
        let again = StoredAnswer::decode(stored.encoded().clone()).expect("decodes");
        assert_eq!(again, stored);
        let replay = again.response(true);
        assert_eq!(replay.status(), StatusCode::MULTI_STATUS);
        assert_eq!(replay.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(replay.headers()[REPLAYED], "true");
        let body = axum::body::to_bytes(replay.into_body(), 1024)
            .await
            .unwrap_or_default();
        assert_eq!(&body[..], b"{\"a\":[1,2]}");
    }

    #[test]
    fn foreign_or_truncated_values_are_errors() {
        for bad in [
            &b""[..],
            b"\x00",
            b"\x00\x01\x00",         // status 1
            b"\x00\xc8\x01\x05name", // header cut short
            b"\x00\xc8\x11",         // too many headers
            b"\x00\xc8\x01\x01\n\x00\x00",
        ] {
            assert_eq!(
                StoredAnswer::decode(Bytes::copy_from_slice(bad)),
                Err(Corrupt),
                "{bad:?}"
            );
        }
        let ok = StoredAnswer::decode(Bytes::from_static(b"\x00\xc8\x00body")).expect("ok");
        assert_eq!(
            (ok.status(), &ok.body()[..]),
            (StatusCode::OK, &b"body"[..])
        );
    }
}
