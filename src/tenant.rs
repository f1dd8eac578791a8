//! Tenants: identities, API-key authentication, topic patterns, and the live registry.
//!
//! API keys are never stored: the registry maps SHA-256 digests of keys to tenants. A request's
//! key is hashed once and looked up by digest. The lookup's timing can only reveal digests of
//! valid keys, which (SHA-256 being preimage resistant) do not help an attacker forge a key.

mod registry;
mod stats;

pub use registry::{Registry, Tenants};
pub use stats::TenantStats;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use crate::budget::TenantBuckets;
use crate::buffer::TenantUsage;
use crate::config::{ConfigProblem, TenantConfig};

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
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The SHA-256 digest of an API key: all the gateway ever keeps of a key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApiKeyHash([u8; 32]);

impl ApiKeyHash {
    pub fn of_key(key: &str) -> Self {
        Self(Sha256::digest(key.as_bytes()).into())
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
#[derive(Debug, Clone)]
pub struct TopicPatterns(Vec<glob::Pattern>);

impl TopicPatterns {
    pub fn parse(patterns: &[String]) -> Result<Self, (usize, String)> {
        patterns
            .iter()
            .enumerate()
            .map(|(i, p)| glob::Pattern::new(p).map_err(|e| (i, e.to_string())))
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    pub fn allows(&self, topic: &Topic) -> bool {
        self.0.iter().any(|p| p.matches(topic.as_str()))
    }
}

/// The part of a tenant that admission reads and changes under the tenant's own lock.
#[derive(Debug)]
pub struct TenantLimits {
    pub buckets: TenantBuckets,
    /// Largest fraction of the buffer this tenant may hold.
    pub buffer_share: f64,
}

/// A tenant as the gateway serves it. Shared by the registry and in-flight requests; an admin
/// change replaces its settings in place, so bucket levels and buffer usage carry over.
#[derive(Debug)]
pub struct Tenant {
    pub id: TenantId,
    /// Topic patterns; swapped whole on a change, read lock-free on every request.
    topics: ArcSwap<TopicPatterns>,
    /// Budgets and buffer share: the per-tenant lock of the admission decision.
    limits: Mutex<TenantLimits>,
    /// What this tenant holds in the downstream buffer now.
    pub usage: Arc<TenantUsage>,
    /// Outcome counters since start, for the admin API and metrics.
    pub stats: Arc<TenantStats>,
}

impl Tenant {
    pub fn from_config(config: &TenantConfig) -> Result<Self, ConfigProblem> {
        let spec = config.spec()?;
        let topics = TopicPatterns::parse(&config.topics).map_err(|(i, e)| {
            ConfigProblem::new(format!("tenants[{}].topics[{i}]", config.id), e)
        })?;
        Ok(Self {
            id: TenantId::new(&config.id),
            topics: ArcSwap::from_pointee(topics),
            limits: Mutex::new(TenantLimits {
                buckets: TenantBuckets::new(spec),
                buffer_share: config.buffer_share(),
            }),
            usage: Arc::new(TenantUsage::default()),
            stats: Arc::new(TenantStats::default()),
        })
    }

    /// Applies a changed configuration in place: topics and share are replaced, each bucket
    /// keeps its current level (clamped to the new burst) so an edit never refills a bucket.
    pub fn apply(&self, config: &TenantConfig, now_ns: u64) -> Result<(), ConfigProblem> {
        let spec = config.spec()?;
        let topics = TopicPatterns::parse(&config.topics).map_err(|(i, e)| {
            ConfigProblem::new(format!("tenants[{}].topics[{i}]", config.id), e)
        })?;
        self.topics.store(Arc::new(topics));
        let mut limits = self.limits();
        limits.buckets.set_spec(spec, now_ns);
        limits.buffer_share = config.buffer_share();
        Ok(())
    }

    pub fn may_write(&self, topic: &Topic) -> bool {
        self.topics.load().allows(topic)
    }

    /// The tenant's admission lock. A panic while it was held cannot leave the buckets
    /// half-updated (commit is one assignment), so a poisoned lock is still usable.
    pub fn limits(&self) -> MutexGuard<'_, TenantLimits> {
        self.limits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Every semantic problem with one tenant's configuration, keys prefixed by `at`.
pub fn validate_tenant(t: &TenantConfig, at: &str) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    if t.id.is_empty()
        || !t
            .id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        problems.push(ConfigProblem::new(
            format!("{at}.id"),
            "must be non-empty and use only a-z A-Z 0-9 . _ -",
        ));
    }
    for (i, h) in t.api_key_sha256.iter().enumerate() {
        if ApiKeyHash::from_hex(h).is_none() {
            problems.push(ConfigProblem::new(
                format!("{at}.api_key_sha256[{i}]"),
                "must be 64 lowercase hex digits (the SHA-256 of the key)",
            ));
        }
    }
    if t.topics.is_empty() {
        problems.push(ConfigProblem::new(
            format!("{at}.topics"),
            "must list at least one pattern",
        ));
    }
    if let Err((i, e)) = TopicPatterns::parse(&t.topics) {
        problems.push(ConfigProblem::new(format!("{at}.topics[{i}]"), e));
    }
    if let Err(mut p) = t.spec() {
        p.key = p.key.replacen(&format!("tenants[{}]", t.id), at, 1);
        problems.push(p);
    }
    if let Some(share) = t.max_buffer_share {
        if !(share > 0.0 && share <= 1.0) {
            problems.push(ConfigProblem::new(
                format!("{at}.max_buffer_share"),
                "must be greater than 0 and at most 1",
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant_config(key: &str) -> TenantConfig {
        TenantConfig {
            id: "acme".into(),
            api_key_sha256: vec![ApiKeyHash::of_key(key).to_hex()],
            topics: vec!["events.acme.*".into()],
            records_per_sec: None,
            records_burst: None,
            bytes_per_sec: None,
            bytes_burst: None,
            max_buffer_share: None,
        }
    }

    #[test]
    fn applying_a_new_budget_keeps_the_bucket_level() {
        let mut c = tenant_config("k");
        c.records_per_sec = Some(10);
        let tenant = Tenant::from_config(&c).expect("valid");
        let charge = tenant.limits().buckets.check(0, 8, 0).expect("fits");
        tenant.limits().buckets.commit(charge);
        c.records_per_sec = Some(1000);
        tenant.apply(&c, 0).expect("valid");
        let (records, _) = tenant.limits().buckets.view(0);
        assert_eq!(records.map(|v| v.available), Some(2));
    }

    #[test]
    fn authenticates_by_key_digest_only() {
        let registry = Registry::from_configs(&[tenant_config("s3cret")]).expect("valid");
        assert_eq!(
            registry.authenticate("s3cret").map(|t| t.id.as_str()),
            Some("acme")
        );
        assert!(registry.authenticate("s3cret ").is_none());
        assert!(registry.authenticate("").is_none());
    }

    #[test]
    fn topic_patterns_bound_what_a_tenant_may_write() {
        let tenant = Tenant::from_config(&tenant_config("k")).expect("valid");
        let ok = Topic::parse("events.acme.clicks").expect("legal");
        let other = Topic::parse("events.other.clicks").expect("legal");
        assert!(tenant.may_write(&ok));
        assert!(!tenant.may_write(&other));
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
    fn rejects_uppercase_or_short_digests() {
        let mut c = tenant_config("k");
        c.api_key_sha256 = vec!["ABC".into(), "A".repeat(64)];
        let problems = validate_tenant(&c, "tenants[0]");
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0].key, "tenants[0].api_key_sha256[0]");
    }
}
