//! Admin authentication: bearer tokens from the environment variable named by
//! `[admin] token_env`, never from the config file. The variable holds one token, or
//! comma-separated `id=token` pairs so each operator or automation has an id in the audit log.
//! Tokens are kept as SHA-256 digests and compared in constant time.

use sha2::{Digest, Sha256};

#[derive(Clone, Default)]
pub struct AdminTokens(Vec<(String, [u8; 32])>);

impl std::fmt::Debug for AdminTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.0.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_tuple("AdminTokens").field(&ids).finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Equal without an early exit, so timing says nothing about where two digests differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl AdminTokens {
    /// Parses `token` or `id=token[,id=token...]`; empty entries are ignored.
    pub fn parse(value: &str) -> Self {
        let tokens = value
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|entry| match entry.split_once('=') {
                Some((id, token)) if !id.is_empty() && !token.is_empty() => {
                    (id.to_string(), digest(token))
                }
                _ => ("admin".to_string(), digest(entry)),
            })
            .collect();
        Self(tokens)
    }

    pub fn from_env(var: &str) -> Self {
        std::env::var(var)
            .map(|v| Self::parse(&v))
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The id of the presented token, if it is one of ours. Every token is compared.
    pub fn check(&self, presented: &str) -> Option<&str> {
        let d = digest(presented);
        let mut found = None;
        for (id, token) in &self.0 {
            if constant_time_eq(&d, token) && found.is_none() {
                found = Some(id.as_str());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_ids_for_the_audit_log() {
        let t = AdminTokens::parse("ops=s3cret, ci=other");
        assert_eq!(t.check("s3cret"), Some("ops"));
        assert_eq!(t.check("other"), Some("ci"));
        assert_eq!(t.check("s3cret "), None);
        assert_eq!(AdminTokens::parse("plain").check("plain"), Some("admin"));
        assert!(AdminTokens::parse(" , ").is_empty());
    }
}
