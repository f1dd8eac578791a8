//! A raw schema as a record names it (its text, not an id): what the registry is asked about
//! it, and the key it is cached and reserved under.

use std::sync::Arc;

use super::Format;

/// A raw schema's cache key: the scope its subject comes from, and its text's digest (the
/// text itself is not kept twice).
pub(super) type RawKey = (String, [u8; 32]);

pub(super) fn digest(text: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes()).into()
}

/// A raw schema as a record named it: its subject, and what the registry is asked.
#[derive(Debug)]
pub(super) struct RawUse {
    pub subject: String,
    pub format: Format,
    pub text: Arc<str>,
    pub key: RawKey,
}
