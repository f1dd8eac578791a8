//! The `Idempotency-Key` header (draft-ietf-httpapi-idempotency-key-header): 1 to 255 visible
//! ASCII characters, sent as a bare token or as a Structured Field string (`"..."`, with `\"`
//! and `\\` escapes). Both spellings of the same characters are the same key.
//!
//! A key is scoped per tenant: two tenants' key "a" are different keys. What is kept is the
//! SHA-256 of tenant and key ([`KeyDigest`]), so every entry has the same small size whatever
//! the key, and no key text reaches a log or a Redis key name.

use std::borrow::Cow;

use axum::http::HeaderMap;
use sha2::{Digest as _, Sha256};

use crate::identity::TenantId;

/// The header's name, as requests carry it.
pub const HEADER: &str = "idempotency-key";

/// The longest key, in characters (the draft leaves it open; Stripe takes 255).
pub const MAX_KEY_CHARS: usize = 255;

/// A key as the client sent it (unquoted; borrowed from the header unless it had escapes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey<'a>(Cow<'a, [u8]>);

/// A tenant's key, as it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyDigest(pub [u8; 32]);

impl KeyDigest {
    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

/// A key and the tenant whose it is: the stores share themselves out by tenant (each tenant's
/// answers are counted and bounded as its own).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantKey {
    pub tenant: TenantId,
    pub digest: KeyDigest,
}

impl<'a> IdempotencyKey<'a> {
    /// The request's key: `Ok(None)` without the header, `Err` (naming the header) when it is
    /// sent twice, empty, too long, or not visible ASCII.
    pub fn from_headers(headers: &'a HeaderMap) -> Result<Option<Self>, String> {
        let mut values = headers.get_all(HEADER).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err("Idempotency-Key: sent more than once; send one key".into());
        }
        Self::parse(value.as_bytes()).map(Some)
    }

    /// One header value, optional white space around it.
    pub fn parse(raw: &'a [u8]) -> Result<Self, String> {
        let text = raw.trim_ascii();
        let key = match text {
            [b'"', inner @ .., b'"'] => unquote(inner)?,
            [b'"', ..] => {
                return Err("Idempotency-Key: a quoted key must end with a closing quote".into())
            }
            _ => Cow::Borrowed(text),
        };
        if key.is_empty() {
            return Err("Idempotency-Key: must not be empty".into());
        }
        if key.len() > MAX_KEY_CHARS {
            return Err(format!(
                "Idempotency-Key: at most {MAX_KEY_CHARS} characters (this one has {})",
                key.len()
            ));
        }
        if let Some(at) = key.iter().position(|b| !b.is_ascii_graphic()) {
            return Err(format!(
                "Idempotency-Key: only visible ASCII characters (! to ~); character {} is not",
                at + 1
            ));
        }
        Ok(Self(key))
    }

    /// The key's characters (visible ASCII).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The key within `tenant`'s scope, as the stores keep it.
    pub fn scoped(&self, tenant: &TenantId) -> TenantKey {
        TenantKey {
            tenant: tenant.clone(),
            digest: self.digest(tenant.as_str()),
        }
    }

    /// The key within a tenant's scope, as it is kept.
    pub fn digest(&self, tenant: &str) -> KeyDigest {
        let mut sha = Sha256::new();
        // Length-prefixed, so no tenant and key pair can spell another's.
        sha.update(b"floodgate idempotency key\0");
        sha.update((tenant.len() as u64).to_be_bytes());
        sha.update(tenant.as_bytes());
        sha.update(&self.0);
        KeyDigest(sha.finalize().into())
    }
}

/// The inside of a Structured Field string: `\"` and `\\` are escapes, any other backslash or
/// a bare quote is malformed (RFC 8941 §4.2.5).
fn unquote(inner: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    if !inner.iter().any(|b| matches!(b, b'\\' | b'"')) {
        return Ok(Cow::Borrowed(inner));
    }
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e),
                _ => {
                    return Err(
                        "Idempotency-Key: in a quoted key only \\\" and \\\\ are escapes".into(),
                    )
                }
            },
            b'"' => {
                return Err("Idempotency-Key: a quote inside a quoted key must be escaped".into())
            }
            _ => out.push(b),
        }
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(raw: &str) -> Result<String, String> {
        IdempotencyKey::parse(raw.as_bytes()).map(|k| String::from_utf8_lossy(&k.0).into_owned())
    }

    #[test]
    fn bare_and_quoted_spellings_are_one_key() {
        assert_eq!(key("abc-123").as_deref(), Ok("abc-123"));
        assert_eq!(key("\"abc-123\"").as_deref(), Ok("abc-123"));
        assert_eq!(key("  \"a\\\"b\\\\c\"  ").as_deref(), Ok("a\"b\\c"));
        let a = IdempotencyKey::parse(b"k1").expect("key");
        let b = IdempotencyKey::parse(b"\"k1\"").expect("key");
        assert_eq!(a.digest("acme"), b.digest("acme"));
        assert_ne!(a.digest("acme"), a.digest("other"), "scoped per tenant");
    }

    #[test]
    fn bad_keys_are_refused_naming_the_header() {
        let long = "x".repeat(256);
        for bad in [
            "",
            "\"\"",
            "\"open",
            "a b",
            "\"a b\"",
            "\"a\\b\"",
            "\"a\"b\"",
            long.as_str(),
            "caf\u{e9}",
        ] {
            let e = key(bad).expect_err(bad);
            assert!(e.starts_with("Idempotency-Key: "), "{bad:?}: {e}");
        }
        assert!(key(&"x".repeat(255)).is_ok());
    }

    #[test]
    fn a_repeated_header_is_refused() {
        let mut h = HeaderMap::new();
        assert_eq!(IdempotencyKey::from_headers(&h), Ok(None));
        h.append(HEADER, "a".parse().expect("value"));
        assert!(IdempotencyKey::from_headers(&h).is_ok_and(|k| k.is_some()));
        h.append(HEADER, "b".parse().expect("value"));
        assert!(IdempotencyKey::from_headers(&h).is_err());
    }
}
