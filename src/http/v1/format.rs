//! Which `/v1` format a request's `Content-Type` names, and how its body is framed.

use crate::body::Framing;

/// The `/v1` formats a produce request may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Ndjson,
}

impl Format {
    /// The format for a `Content-Type` value, ignoring parameters such as `charset`.
    pub fn from_content_type(value: &str) -> Option<Self> {
        let essence = value.split(';').next().unwrap_or("").trim();
        if essence.eq_ignore_ascii_case("application/json") {
            Some(Self::Json)
        } else if essence.eq_ignore_ascii_case("application/x-ndjson")
            || essence.eq_ignore_ascii_case("application/ndjson")
        {
            Some(Self::Ndjson)
        } else {
            None
        }
    }

    pub fn framing(self) -> Framing {
        match self {
            Self::Json => Framing::Envelope("records"),
            Self::Ndjson => Framing::Lines,
        }
    }
}
