//! The steps that can refuse a request before its body is read — who the caller is, whether
//! its credential and tenant may write the topic, whether one record could be admitted at
//! all — and, once the records are known, whether the topic and their partitions exist.

use axum::http::HeaderMap;

use super::{refused, Held};
use crate::credential::{Caller, Identity};
use crate::identity::Topic;
use crate::kafka::TopicInfo;
use crate::outcome::ApiError;
use crate::record::Record;
use crate::tenant::Tenant;
use std::sync::Arc;

use super::Ingest;

impl Ingest {
    /// The tenant the request's credential belongs to (see [`Ingest::identify`]).
    pub async fn authenticate(
        &self,
        peer: Caller,
        headers: &HeaderMap,
    ) -> Result<Arc<Tenant>, ApiError> {
        self.identify(&peer, headers).await.map(|who| who.tenant)
    }

    /// Who the request is: its API key, JWT or client certificate, as
    /// [`Authenticator::identify`] decides. A valid credential is never refused for its
    /// address's failed authentications; a failing request from an address with too many
    /// recent failures is answered 429 instead of 401/403, and every failure is counted
    /// against the client's address (behind trusted proxies, the address they forwarded for):
    /// decided and counted in one step, so concurrent failures cannot slip past the count.
    pub async fn identify(&self, peer: &Caller, headers: &HeaderMap) -> Result<Identity, ApiError> {
        // Only asked before a token's signature is checked (see `Authenticator::identify_held`).
        let held = || {
            let client = self.proxies.client(peer.ip?, headers);
            self.failures.over(client)
        };
        let failure = match self
            .auth
            .identify_held(&self.tenants, peer, headers, &held)
            .await
        {
            Ok(who) => {
                // The connection has authenticated: counted against its tenant now, not its
                // address.
                if let Some(trust) = &peer.trust {
                    if !trust.verified_as(who.tenant.id.as_str()) {
                        return Err(ApiError::TenantConnections(
                            self.unverified.tenant_allowance(),
                        ));
                    }
                }
                return Ok(who);
            }
            Err(crate::credential::AuthError::Held(wait)) => {
                self.failures
                    .refused
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(ApiError::AuthFailures(wait));
            }
            Err(e) if !e.is_failure() => return Err(ApiError::Auth(e)),
            Err(crate::credential::AuthError::Unauthorized) => ApiError::Unauthorized,
            Err(e) => ApiError::Auth(e),
        };
        let Some(client) = peer.ip.map(|p| self.proxies.client(p, headers)) else {
            return Err(failure);
        };
        // Decided and counted in one step, so concurrent failures cannot slip past the count.
        match self.failures.fail(client) {
            Some(wait) => Err(ApiError::AuthFailures(wait)),
            None => Err(failure),
        }
    }

    /// The topic, if it is a legal Kafka name the tenant may write: not an internal topic,
    /// and within the tenant's patterns.
    pub fn topic(&self, tenant: &Tenant, name: &str) -> Result<Topic, ApiError> {
        let topic = Topic::parse(name).map_err(ApiError::InvalidTopic)?;
        if self.internal.contains(&topic) {
            return Err(ApiError::InternalTopic(topic.as_str().to_string()));
        }
        if !tenant.may_write(&topic) {
            return Err(ApiError::ForbiddenTopic(topic.as_str().to_string()));
        }
        Ok(topic)
    }

    /// Before the body is read: is it too large to accept, and could the tenant be admitted
    /// with one record and the declared length in bytes (which bounds the record bytes from
    /// above)? Charges nothing. With `[wait]`, a request short only of tokens due within
    /// `max_ms` goes on if it can take a seat in the waiting room (`held`), and hears its 429
    /// now, before it uploads, if it cannot.
    pub(super) fn early_check<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        declared: Option<u64>,
        held: &mut Held<'a>,
    ) -> Result<(), ApiError> {
        if declared.is_some_and(|n| n > self.max_body_bytes) {
            return Err(ApiError::BodyTooLarge {
                limit: self.max_body_bytes,
            });
        }
        self.admission
            .precheck_to(tenant, Some(topic), declared.unwrap_or(1))
            .or_else(|refusal| self.seated(tenant, held, refusal))
            .map_err(|refusal| refused(tenant, refusal))
    }

    /// Does the topic exist, and does every record's partition?
    pub async fn check_topic(&self, topic: &Topic, records: &[Record<'_>]) -> Result<(), ApiError> {
        let partitions = match self
            .catalog
            .lookup(topic.as_str())
            .await
            .map_err(ApiError::KafkaUnavailable)?
        {
            TopicInfo::Missing => return Err(ApiError::UnknownTopic(topic.as_str().to_string())),
            TopicInfo::Exists { partitions } => partitions,
        };
        for (i, r) in records.iter().enumerate() {
            if let Some(detail) = missing_partition(r, partitions) {
                return Err(ApiError::UnknownPartition(format!("record {i}: {detail}")));
            }
        }
        Ok(())
    }
}

/// The one partition check, for a request's records and a stream's: the partition a record
/// names, when a topic of `partitions` does not have it (a record naming none is placed by
/// the producer).
pub(super) fn missing_partition(record: &Record<'_>, partitions: u32) -> Option<String> {
    let p = record.partition.filter(|p| *p as u32 >= partitions)?;
    Some(format!(
        "partition {p} does not exist (the topic has {partitions})"
    ))
}

/// A credential's own limits on the topic (a JWT's topics claim), checked right after
/// authentication; a name that is not a legal topic is left to the topic step to report.
pub(super) fn credential_allows(who: &Identity, name: &str) -> Result<(), ApiError> {
    match Topic::parse(name) {
        Ok(topic) if !who.credential_allows(&topic) => {
            Err(ApiError::ForbiddenTopic(topic.as_str().to_string()))
        }
        _ => Ok(()),
    }
}
