//! The steps that can refuse a request before its body is read — who the caller is, whether
//! its credential and tenant may write the topic, whether one record could be admitted at
//! all — and, once the records are known, whether the topic and their partitions exist.

use axum::http::HeaderMap;
use axum::response::Response;

use super::{refused, Held};
use crate::credential::{Caller, Identity};
use crate::identity::Topic;
use crate::inflight_bodies::Cut;
use crate::kafka::TopicInfo;
use crate::outcome::ApiError;
use crate::tenant::Tenant;

use super::Ingest;

impl Ingest {
    /// The pipeline's entry for an answer that produces nothing (Confluent's cluster reads, a
    /// produce path refused before its topic is known): the caller is authenticated as every
    /// produce request is ([`Ingest::identify`]), and only then `answer`ed — an
    /// unauthenticated client learns nothing from it; the answer carries the tenant's buckets
    /// as every answer to an authenticated client does. `refuse` is the adapter's encoder of
    /// the authentication's refusal. No adapter authenticates on its own.
    pub async fn answer_authenticated(
        &self,
        peer: &Caller,
        headers: &HeaderMap,
        refuse: impl FnOnce(&ApiError) -> Response,
        answer: impl FnOnce() -> Response,
    ) -> Response {
        match self.identify(peer, headers).await {
            Err(e) => refuse(&e),
            Ok(who) => {
                let mut response = answer();
                crate::outcome::ratelimit::insert(response.headers_mut(), &self.view(&who.tenant));
                response
            }
        }
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
        self.within_body_limit(declared)?;
        self.admission
            .precheck_to(tenant, Some(topic), declared.unwrap_or(1))
            .or_else(|refusal| self.seated(tenant, held, refusal))
            .map_err(|refusal| refused(tenant, refusal))
    }

    /// A declared length over `max_body_bytes` is refused before a byte is read (413).
    fn within_body_limit(&self, declared: Option<u64>) -> Result<(), ApiError> {
        match declared {
            Some(n) if n > self.max_body_bytes => Err(ApiError::BodyTooLarge {
                limit: self.max_body_bytes,
            }),
            _ => Ok(()),
        }
    }

    /// Whether the request is refused now whatever its body holds: too large, or refused by
    /// its budgets for longer than `[wait]` holds a request. Takes nothing, and no seat.
    pub(super) fn refused_at_once(
        &self,
        tenant: &Tenant,
        topic: &Topic,
        declared: Option<u64>,
    ) -> Result<(), ApiError> {
        self.within_body_limit(declared)?;
        // A declared length the body budget cannot take now: refused before the key is
        // claimed, as decoding would refuse it after (review 32 of #37: a tenant that kept the
        // budget full itself had its keyed requests claimed and refused `server_busy`, 38,000
        // Redis commands a second). One room could be made for (`inflight_bodies::room`) goes
        // on, as an unkeyed one does.
        let fits = self
            .inflight_bodies
            .hold(tenant.body_bytes.clone(), tenant.buffer_share())
            .fits_or_could_make_room(declared.unwrap_or(0));
        if !fits {
            return Err(self.cut_short(Cut::ServerBusy, self.busy(tenant)));
        }
        match self
            .admission
            .precheck_to(tenant, Some(topic), declared.unwrap_or(1))
        {
            Err(refusal) if !self.admission.holdable(&refusal) => Err(refused(tenant, refusal)),
            _ => Ok(()),
        }
    }

    /// Does the topic exist, and does the partition every record names (`named`, in record
    /// order)?
    pub async fn check_topic(
        &self,
        topic: &Topic,
        named: impl Iterator<Item = Option<i32>>,
    ) -> Result<(), ApiError> {
        let partitions = match self
            .catalog
            .lookup(topic.as_str())
            .await
            .map_err(ApiError::KafkaUnavailable)?
        {
            TopicInfo::Missing => return Err(ApiError::UnknownTopic(topic.as_str().to_string())),
            TopicInfo::Exists { partitions } => partitions,
        };
        for (i, p) in named.enumerate() {
            if let Some(detail) = missing_partition(p, partitions) {
                return Err(ApiError::UnknownPartition(format!("record {i}: {detail}")));
            }
        }
        Ok(())
    }
}

/// The one partition check, for a request's records and a stream's: the partition a record
/// names (`named`), when a topic of `partitions` does not have it (a record naming none is
/// placed by the producer).
pub(super) fn missing_partition(named: Option<i32>, partitions: u32) -> Option<String> {
    let p = named.filter(|p| *p as u32 >= partitions)?;
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
