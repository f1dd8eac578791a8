//! Names the gateway checks and compares: tenant ids, API-key digests, Kafka topic names and the
//! topic patterns a tenant may write.
//!
//! A foundation module: it imports nothing of floodgate's, so configuration validation,
//! tenants and the registry can all use it without knowing each other.
//!
//! API keys are never stored: only their SHA-256 digests. A request's key is hashed once and
//! looked up by digest. The lookup's timing can only reveal digests of valid keys, which
//! (SHA-256 being preimage resistant) do not help an attacker forge a key.
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

/// The metrics' label for the sum over tenants without series of their own: no tenant may
/// take it, or its counts could not be told from the sum.
pub const RESERVED_TENANT_ID: &str = "_other";

/// A tenant's stable identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(Arc<str>);

impl TenantId {
    pub fn new(id: &str) -> Self {
        Self(Arc::from(id))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Why `id` cannot name a tenant, if it cannot. Besides its characters: not dots only (a
    /// path segment of `.` or `..` is removed by every client that normalises paths, so the
    /// tenant's admin routes could not be reached), and not [`RESERVED_TENANT_ID`].
    pub fn problem(id: &str) -> Option<&'static str> {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if id.is_empty() || id.len() > 128 || !id.chars().all(legal) {
            Some("must be 1 to 128 characters of a-z A-Z 0-9 . _ -")
        } else if id.chars().all(|c| c == '.') {
            Some("must not be dots only (clients drop . and .. from paths)")
        } else if id == RESERVED_TENANT_ID {
            Some("_other is reserved: the metrics sum the tenants without series of their own under it")
        } else {
            None
        }
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The SHA-256 digest of an API key: all the gateway ever keeps of a key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApiKeyHash([u8; 32]);

impl ApiKeyHash {
    pub fn of_key(key: &str) -> Self {
        Self(Sha256::digest(key.as_bytes()).into())
    }

    /// A digest already computed (the SHA-256 of the presented key).
    pub fn from_bytes(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// Parses 64 lowercase hex digits.
    pub fn from_hex(text: &str) -> Option<Self> {
        if text.len() != 64 || text.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Self(out))
    }

    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }

    /// The key's id: the first 16 hex digits (64 bits) of its digest, unsalted. It names a key
    /// in the admin API, the audit and exports, and is no secret: like the digest itself it
    /// lets whoever sees it test a guessed key offline (hash the guess, compare), so it
    /// protects nothing a weak key lacks. A random 256-bit key, as the admin API issues, is not
    /// found that way from either. What it leaves out is the rest of the digest a state file
    /// carries.
    pub fn key_id(self) -> String {
        key_id(&self.to_hex())
    }
}

/// A key's id from its digest written in hex, as state files and the admin API hold it (see
/// [`ApiKeyHash::key_id`]).
pub fn key_id(digest_hex: &str) -> String {
    digest_hex.chars().take(16).collect()
}

/// A new random API key: 32 bytes of OS randomness, hex encoded, after `prefix`.
pub fn random_key(prefix: &str) -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{prefix}{}", hex::encode(bytes)))
}

impl fmt::Debug for ApiKeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A digest is not a secret, but an abbreviated one is all a log needs.
        write!(f, "ApiKeyHash({}…)", &self.to_hex()[..8])
    }
}

/// A Kafka topic name, checked against Kafka's rules (legal characters, length).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Topic(String);

impl Topic {
    pub fn parse(name: &str) -> Result<Self, String> {
        if name.is_empty() || name.len() > 249 {
            return Err("topic names are 1 to 249 characters".into());
        }
        if name == "." || name == ".." {
            return Err("topic name cannot be '.' or '..'".into());
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(format!(
                "character {c:?} is not allowed in a topic name (allowed: a-z A-Z 0-9 . _ -)"
            ));
        }
        Ok(Self(name.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The topics a tenant may write, as glob patterns.
///
/// Most patterns are a plain name (`events.demo`) or a prefix (`events.acme.*`); those are kept
/// as the text they match — a few dozen bytes — rather than as a compiled glob, which costs
/// about half a kilobyte per pattern and would be most of an idle tenant's memory at 100,000
/// tenants. Anything else is a `glob::Pattern`; every form matches exactly what the glob does.
#[derive(Debug, Clone)]
pub struct TopicPatterns(Box<[TopicPattern]>);

#[derive(Debug, Clone)]
enum TopicPattern {
    /// No wildcard: the topic itself.
    Exact(Box<str>),
    /// One `*`, at the end: every topic that starts with this.
    Prefix(Box<str>),
    Glob(Box<glob::Pattern>),
}

impl TopicPattern {
    fn parse(text: &str) -> Result<Self, String> {
        // Validated as a glob first: errors and their wording are glob's.
        let glob = glob::Pattern::new(text).map_err(|e| e.to_string())?;
        let wild = |c: char| matches!(c, '*' | '?' | '[' | ']');
        Ok(match text.strip_suffix('*') {
            _ if !text.contains(wild) => Self::Exact(text.into()),
            Some(prefix) if !prefix.contains(wild) => Self::Prefix(prefix.into()),
            _ => Self::Glob(Box::new(glob)),
        })
    }

    fn matches(&self, topic: &str) -> bool {
        match self {
            Self::Exact(t) => &**t == topic,
            Self::Prefix(p) => topic.starts_with(&**p),
            Self::Glob(g) => g.matches(topic),
        }
    }
}

/// Why `text` cannot be a pattern of topic names, if it cannot: a glob that could match no
/// legal topic because it holds a character no topic name has (`"not a topic!"`), or is
/// empty or longer than any topic name.
pub fn topic_pattern_problem(text: &str) -> Option<String> {
    if let Err(e) = glob::Pattern::new(text) {
        return Some(format!("is not a valid pattern: {e}"));
    }
    if text.is_empty() || text.len() > 249 {
        return Some("must be 1 to 249 characters, as topic names are".into());
    }
    // Besides a topic's own characters, only glob's: * ? [ ] and ! (negation in brackets).
    let allowed = |c: char| {
        c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*' | '?' | '[' | ']' | '!')
    };
    text.chars().find(|c| !allowed(*c)).map(|c| {
        format!(
            "character {c:?} is in no topic name (allowed: a-z A-Z 0-9 . _ - and the wildcards * ? [ ] !)"
        )
    })
}

impl TopicPatterns {
    /// The patterns, or the index of the first invalid one and why.
    pub fn parse(patterns: &[String]) -> Result<Self, (usize, String)> {
        patterns
            .iter()
            .enumerate()
            .map(|(i, p)| TopicPattern::parse(p).map_err(|e| (i, e)))
            .collect::<Result<Box<[_]>, _>>()
            .map(Self)
    }

    pub fn allows(&self, topic: &Topic) -> bool {
        self.0.iter().any(|p| p.matches(topic.as_str()))
    }

    /// About how many bytes the compiled patterns hold: a name or prefix is its text, a glob
    /// about 40 bytes a character (`glob` keeps one token per character beside the text).
    pub fn footprint(&self) -> usize {
        const GLOB_BYTES_PER_CHAR: usize = 40;
        self.0
            .iter()
            .map(|p| match p {
                TopicPattern::Exact(t) | TopicPattern::Prefix(t) => 16 + t.len(),
                TopicPattern::Glob(g) => 16 + g.as_str().len() * GLOB_BYTES_PER_CHAR,
            })
            .sum()
    }
}

/// Topics no tenant may write, whatever its patterns: Kafka's own (`__consumer_offsets`,
/// `__transaction_state`: every name starting with `__`), floodgate's registry topic, and the
/// operator's list (`[kafka] internal_topics`: Schema Registry's, Kafka Connect's, ...). The
/// registry is the source of truth for tenants and keys: a tenant able to write it could make
/// itself any tenant.
#[derive(Debug, Clone)]
pub struct InternalTopics {
    registry: String,
    listed: TopicPatterns,
}

impl InternalTopics {
    /// `listed` must be valid patterns (the configuration checks them); an invalid one is
    /// dropped rather than making the list refuse nothing.
    pub fn new(registry: &str, listed: &[String]) -> Self {
        let listed = listed
            .iter()
            .filter_map(|p| TopicPattern::parse(p).ok())
            .collect();
        Self {
            registry: registry.to_string(),
            listed: TopicPatterns(listed),
        }
    }

    pub fn contains(&self, topic: &Topic) -> bool {
        topic.as_str().starts_with("__")
            || topic.as_str() == self.registry
            || self.listed.allows(topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_only_and_the_metrics_sum_are_not_tenant_ids() {
        for bad in [".", "..", "...", "_other", "", "a b", "a/b"] {
            assert!(TenantId::problem(bad).is_some(), "{bad:?}");
        }
        for good in ["acme", "a.b", ".a", "_others", "other", "-", "_"] {
            assert_eq!(TenantId::problem(good), None, "{good:?}");
        }
    }

    #[test]
    fn a_topic_pattern_holds_topic_characters_and_wildcards_only() {
        for good in ["_schemas", "_confluent*", "connect-[a-z]*", "x.?", "[!_]*"] {
            assert_eq!(topic_pattern_problem(good), None, "{good:?}");
        }
        for bad in ["not a topic!", "a/b", "", "é*", "[", &"x".repeat(250)] {
            assert!(topic_pattern_problem(bad).is_some(), "{bad:?}");
        }
    }

    /// The compact forms match exactly what the glob they stand for matches.
    #[test]
    fn compact_patterns_match_what_the_glob_matches() {
        let patterns = [
            "events.demo",
            "events.*",
            "*",
            "ev*nts",
            "events.?",
            "[ab]x.*",
            "a*b*",
            "x.*.y",
            "events.demo*",
            "*demo",
            "",
        ];
        let topics = [
            "events.demo",
            "events.demo.audit",
            "events.",
            "events.x",
            "events",
            "ax.1",
            "bx.",
            "cx.1",
            "ab",
            "aXbY",
            "x.1.y",
            "x..y",
            "demo",
            "evnts",
            "e",
            "events.demox",
        ];
        for p in patterns {
            let glob = glob::Pattern::new(p).expect("valid");
            let compact = TopicPattern::parse(p).expect("valid");
            for t in topics {
                assert_eq!(compact.matches(t), glob.matches(t), "{p:?} on {t:?}");
            }
        }
        assert!(matches!(
            TopicPattern::parse("events.demo"),
            Ok(TopicPattern::Exact(_))
        ));
        assert!(matches!(
            TopicPattern::parse("events.*"),
            Ok(TopicPattern::Prefix(_))
        ));
        assert!(TopicPattern::parse("events.[").is_err());
    }

    #[test]
    fn internal_topics_are_kafkas_the_registry_and_the_list() {
        let internal = InternalTopics::new(
            "_floodgate_registry",
            &["_schemas".into(), "connect-*".into()],
        );
        for name in [
            "__consumer_offsets",
            "__anything",
            "_floodgate_registry",
            "_schemas",
            "connect-offsets",
        ] {
            assert!(
                internal.contains(&Topic::parse(name).expect("legal")),
                "{name}"
            );
        }
        for name in ["_floodgate_registry2", "events._schemas", "_x", "connect"] {
            assert!(
                !internal.contains(&Topic::parse(name).expect("legal")),
                "{name}"
            );
        }
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(Topic::parse("events.acme/../x").is_err());
        assert!(Topic::parse("événements").is_err());
        assert!(Topic::parse("..").is_err());
        assert!(Topic::parse(&"a".repeat(250)).is_err());
        assert!(Topic::parse("a_b-c.d").is_ok());
    }

    #[test]
    fn digests_are_lowercase_hex_only() {
        assert!(ApiKeyHash::from_hex("ABC").is_none());
        assert!(ApiKeyHash::from_hex(&"A".repeat(64)).is_none());
        let h = ApiKeyHash::of_key("k");
        assert_eq!(ApiKeyHash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(h.key_id(), h.to_hex()[..16]);
    }
}
