//! Who may call the admin API: bearer tokens from the environment variable named by
//! `[admin] token_env` (or the file its `_FILE` twin names: [`crate::env_secret`]), never from
//! the config file.
//!
//! The variable holds comma-separated entries, each either a bare `TOKEN` (its audit id is
//! `admin`) or `NAME:TOKEN`, so each operator or automation has its own id in the audit log.
//! Names are `[A-Za-z0-9_.-]`, so the first `:` always ends the name; tokens may contain any
//! other character (base64's `=` padding included). Tokens shorter than
//! [`MIN_TOKEN_CHARS`] are refused at start-up, and so is the old `NAME=TOKEN` form, which
//! could not tell a name from base64 padding. Tokens are kept as SHA-256 digests, compared in
//! constant time, and never printed, in part or whole.
//!
//! A foundation module: it imports nothing of floodgate's but `env_secret`.
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use sha2::{Digest, Sha256};

/// The shortest token accepted (16 random characters of hex are 64 bits).
pub const MIN_TOKEN_CHARS: usize = 16;

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

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

impl AdminTokens {
    /// Parses the variable's value. Errors name the entry by position and its name, never by
    /// any part of its token.
    pub fn parse(value: &str) -> Result<Self, String> {
        let mut tokens: Vec<(String, [u8; 32])> = Vec::new();
        let entries = value.split(',').map(str::trim).filter(|s| !s.is_empty());
        for (i, entry) in entries.enumerate() {
            let (name, token) = match entry.split_once(':') {
                Some((name, token)) if is_name(name) => (name, token),
                _ => ("admin", entry),
            };
            if !entry.contains(':') {
                if let Some((before, after)) = entry.split_once('=') {
                    if is_name(before) && !after.starts_with('=') && !after.is_empty() {
                        return Err(format!(
                            "entry {} looks like the old NAME=TOKEN form; write {before}:TOKEN",
                            i + 1
                        ));
                    }
                }
            }
            if token.chars().count() < MIN_TOKEN_CHARS {
                return Err(format!(
                    "entry {} (id {name}): the token is shorter than {MIN_TOKEN_CHARS} characters",
                    i + 1
                ));
            }
            if tokens.iter().any(|(n, _)| n == name) {
                return Err(format!("entry {}: the id {name} is used twice", i + 1));
            }
            tokens.push((name.to_string(), digest(token)));
        }
        Ok(Self(tokens))
    }

    /// The tokens in the environment variable `var` or the file `var_FILE` names (none if
    /// neither is set).
    pub fn from_env(var: &str) -> Result<Self, String> {
        match crate::env_secret::read(var)? {
            Some(v) => Self::parse(&v).map_err(|e| format!("{var}: {e}")),
            None => Ok(Self::default()),
        }
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

/// The `/metrics` scrape token (`[metrics] token_env`): one token, trimmed of the white space
/// an env file or a secret mount leaves around it, at least [`MIN_TOKEN_CHARS`] long. The
/// variable must be set: a scrape token that is named but missing is a mistake, not "open".
/// The error names the variable, never any part of its value.
pub fn scrape_token(var: &str, value: Option<&str>) -> Result<String, String> {
    let Some(value) = value else {
        return Err(format!(
            "the environment variable {var} is not set (nor {var}_FILE)"
        ));
    };
    let token = value.trim();
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "the environment variable {var} must hold a token of at least {MIN_TOKEN_CHARS} characters"
        ));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the environment variable {var} must hold one token without white space"
        ));
    }
    Ok(token.to_string())
}

/// [`scrape_token`] from the process environment (`var`, or the file `var_FILE` names).
pub fn scrape_token_from_env(var: &str) -> Result<String, String> {
    let value = crate::env_secret::read(var)?;
    scrape_token(var, value.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_token_is_trimmed_and_must_be_set_and_long_enough() {
        let token = "0123456789abcdef";
        assert_eq!(
            scrape_token("T", Some(&format!(" {token}\n"))),
            Ok(token.into())
        );
        let unset = scrape_token("T", None).expect_err("unset");
        assert!(unset.contains("T is not set"), "{unset}");
        let short = scrape_token("T", Some("  short-token   ")).expect_err("short");
        assert!(short.contains("at least 16"), "{short}");
        assert!(!short.contains("short-token"), "never echoed: {short}");
        assert!(scrape_token("T", Some("0123456789 abcdef")).is_err());
    }

    #[test]
    fn tokens_have_ids_for_the_audit_log() {
        let t = AdminTokens::parse("ops:s3cret-s3cret-s3cret, ci:other-other-other-1").expect("ok");
        assert_eq!(t.check("s3cret-s3cret-s3cret"), Some("ops"));
        assert_eq!(t.check("other-other-other-1"), Some("ci"));
        assert_eq!(t.check("s3cret-s3cret-s3cret "), None);
        let plain = AdminTokens::parse("plain-token-0123456789").expect("ok");
        assert_eq!(plain.check("plain-token-0123456789"), Some("admin"));
        assert!(AdminTokens::parse(" , ").expect("ok").is_empty());
    }

    #[test]
    fn base64_padding_is_part_of_the_token() {
        // `openssl rand -base64 16`: 24 characters ending in "==".
        let token = "q0V3bS9sYWJjZGVmZ2hpag==";
        let t = AdminTokens::parse(&format!("ops:{token}")).expect("ok");
        assert_eq!(t.check(token), Some("ops"));
        assert_eq!(t.check("="), None);
        let bare = AdminTokens::parse(token).expect("a bare base64 token");
        assert_eq!(bare.check(token), Some("admin"));
    }

    #[test]
    fn short_tokens_and_the_old_form_are_refused_without_printing_the_token() {
        let e = AdminTokens::parse("ops:short").expect_err("short");
        assert!(
            e.contains("shorter than 16") && !e.contains("short,"),
            "{e}"
        );
        assert!(!e.contains(":short"), "{e}");
        let e = AdminTokens::parse("ops=0123456789abcdef0123").expect_err("old form");
        assert!(
            e.contains("ops:TOKEN") && !e.contains("0123456789abcdef"),
            "{e}"
        );
        let e = AdminTokens::parse("a:0123456789abcdef,a:fedcba9876543210").expect_err("dup");
        assert!(e.contains("used twice"), "{e}");
    }
}
