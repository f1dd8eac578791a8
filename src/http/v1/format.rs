//! Which `/v1` format a request's `Content-Type` names, and how its body is framed.

use crate::body::Framing;

/// The `/v1` formats a produce request may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Ndjson,
}

impl Format {
    /// The format for a `Content-Type` value; `None` for another type, or for a `charset`
    /// other than UTF-8 (the body is read as UTF-8, as JSON is exchanged: RFC 8259 §8.1; a
    /// body declared UTF-16 was read as UTF-8, review 41-r8 of #37). Other parameters are
    /// ignored.
    pub fn from_content_type(value: &str) -> Option<Self> {
        let mut parts = value.split(';');
        let essence = parts.next().unwrap_or("").trim();
        let foreign = parts.any(|p| {
            p.split_once('=').is_some_and(|(name, charset)| {
                let charset = charset.trim().trim_matches('"');
                name.trim().eq_ignore_ascii_case("charset")
                    && !["utf-8", "utf8", "us-ascii"]
                        .iter()
                        .any(|c| charset.eq_ignore_ascii_case(c))
            })
        });
        if foreign {
            None
        } else if essence.eq_ignore_ascii_case("application/json") {
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
