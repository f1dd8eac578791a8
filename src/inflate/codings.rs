//! What a `Content-Encoding` names: the codings floodgate decodes, read from the header's
//! fields in the order they were applied.

use std::fmt;

use super::{ACCEPTED, MAX_CODINGS};

/// One content coding floodgate decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Gzip,
    Deflate,
    Zstd,
    Snappy,
}

impl Coding {
    pub const ALL: [Coding; 4] = [Coding::Gzip, Coding::Deflate, Coding::Zstd, Coding::Snappy];

    /// Its name in `Content-Encoding` (and its metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Zstd => "zstd",
            Coding::Snappy => "snappy",
        }
    }

    /// A token of `Content-Encoding`: a coding, `Ok(None)` for identity, `Err` if unknown.
    fn from_token(token: &str) -> Result<Option<Coding>, ()> {
        const NAMES: [(&str, Option<Coding>); 7] = [
            ("identity", None),
            ("gzip", Some(Coding::Gzip)),
            // RFC 9110 §8.4.1.3: a recipient should take x-gzip for gzip.
            ("x-gzip", Some(Coding::Gzip)),
            ("deflate", Some(Coding::Deflate)),
            ("zstd", Some(Coding::Zstd)),
            ("snappy", Some(Coding::Snappy)),
            // The framing format's own name (its spec's MIME type): the same sniffed decoder.
            ("x-snappy-framed", Some(Coding::Snappy)),
        ];
        NAMES
            .iter()
            .find(|(name, _)| token.eq_ignore_ascii_case(name))
            .map(|(_, coding)| *coding)
            .ok_or(())
    }
}

impl fmt::Display for Coding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The codings of one body, in the order they were applied (decoded last to first). `Copy`
/// and allocation-free: reading an absent header costs a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Codings {
    applied: [Option<Coding>; MAX_CODINGS],
    len: usize,
}

/// Why a `Content-Encoding` is not accepted (415).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsupported {
    /// A coding floodgate does not decode (as sent, cut to 64 characters).
    Unknown(String),
    /// More codings stacked than [`MAX_CODINGS`].
    TooMany(usize),
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsupported::Unknown(name) => write!(
                f,
                "Content-Encoding {name:?} is not accepted; use {ACCEPTED} (Accept-Encoding \
                 says the same)"
            ),
            Unsupported::TooMany(n) => write!(
                f,
                "Content-Encoding stacks {n} codings; at most {MAX_CODINGS} are decoded"
            ),
        }
    }
}

impl Codings {
    /// No coding: the body is read as it arrives.
    pub const IDENTITY: Codings = Codings {
        applied: [None; MAX_CODINGS],
        len: 0,
    };

    /// Every `Content-Encoding` field value of a request, in order (a coding list may be split
    /// over several fields). Tokens are case-insensitive; `identity` and empty tokens are
    /// skipped.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Self, Unsupported> {
        let mut codings = Codings::IDENTITY;
        let mut stacked = 0;
        for value in values {
            for token in value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                if token.is_empty() {
                    continue;
                }
                let name = std::str::from_utf8(token).ok();
                let coding = name.ok_or(()).and_then(Coding::from_token).map_err(|()| {
                    let shown: String = String::from_utf8_lossy(token).chars().take(64).collect();
                    Unsupported::Unknown(shown)
                })?;
                let Some(coding) = coding else { continue };
                stacked += 1;
                if let Some(slot) = codings.applied.get_mut(codings.len) {
                    *slot = Some(coding);
                    codings.len += 1;
                }
            }
        }
        if stacked > MAX_CODINGS {
            return Err(Unsupported::TooMany(stacked));
        }
        Ok(codings)
    }

    pub fn is_identity(&self) -> bool {
        self.len == 0
    }

    /// In the order they were applied.
    pub fn applied(&self) -> impl DoubleEndedIterator<Item = Coding> + '_ {
        self.applied[..self.len].iter().flatten().copied()
    }
}
