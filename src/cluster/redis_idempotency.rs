//! `Idempotency-Key` claims and answers in Redis (cluster mode: idempotency's
//! [`ClusterKeyStore`]), so a retry that lands on another replica, or on a restarted
//! one, finds the claim or the answer. One Redis key per tenant key
//! (`{PREFIX:idem:TENANT}:HEX`, HEX the key's digest), and per tenant an index of its answers
//! by when they were stored (`{PREFIX:idem:TENANT}`, a sorted set), which bounds how many it
//! keeps (`[idempotency] max_keys_per_tenant`): storing one more drops its oldest. A script
//! touches one key and its tenant's index, which share the tenant's hash tag (works on Redis
//! Cluster).
//!
//! A value is a state byte, the holding request's 32-character token, then what the state
//! needs: `C` claimed (being read or admitted), `P` pending (its records are with Kafka; the
//! fingerprint follows), `D` answered (fingerprint, then the stored answer), `R` given up with
//! nothing stored (free for the next claim; it stops a renewal that was sent before the release
//! and ran after it from taking the key again). Claims and `R` live `claim_ttl_ms` unless
//! renewed by the holder; answers `ttl_s`.
//!
//! Redis gets its own connection with its own timeouts (`[idempotency] command_timeout_ms`):
//! the budgets' connection is tuned for a 25 ms lease on the request path.

use std::time::Duration;

use bytes::Bytes;
use redis::Script;

use super::redis_connection::{CallError, Connection, UrlError};
use crate::idempotency::{
    ClusterKeyFuture, ClusterKeyStore, ClusterKeyStoreError, Corrupt, Fingerprint, Found,
    StoredAnswer, TenantKey, Token,
};

impl From<CallError> for ClusterKeyStoreError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::NotConnected => ClusterKeyStoreError::NotConnected,
            CallError::Timeout(d) => ClusterKeyStoreError::Timeout(d),
            CallError::Redis(e) => ClusterKeyStoreError::Failed {
                may_have_run: !e.is_connection_refusal(),
                source: Box::new(e),
            },
        }
    }
}

pub struct RedisIdempotencyStore {
    connection: Connection,
    claim: Script,
    own: Script,
    prefix: String,
    /// Answers one tenant keeps at most.
    max_per_tenant: u64,
}

impl std::fmt::Debug for RedisIdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisIdempotencyStore")
            .field("prefix", &self.prefix)
            .field("connected", &self.connection.is_connected())
            .finish_non_exhaustive()
    }
}

const CLAIMED: u8 = b'C';
const PENDING: u8 = b'P';
const ANSWERED: u8 = b'D';
const RELEASED: u8 = b'R';

/// A value as the scripts read it: state, token, the rest.
pub fn value(state: u8, token: &Token, rest: &[&[u8]]) -> Vec<u8> {
    let len = 1 + token.0.len() + rest.iter().map(|r| r.len()).sum::<usize>();
    let mut v = Vec::with_capacity(len);
    v.push(state);
    v.extend_from_slice(&token.0);
    for r in rest {
        v.extend_from_slice(r);
    }
    v
}

/// A key's value read back; a key given up is as free as one never used.
fn free_if_released(found: Option<Vec<u8>>) -> Result<Option<Found>, ClusterKeyStoreError> {
    match found.map(|v| parse(&v)).transpose()? {
        Some(Found::Released) => Ok(None),
        found => Ok(found),
    }
}

/// Reads a value back; anything floodgate did not write is [`Corrupt`].
pub fn parse(v: &[u8]) -> Result<Found, Corrupt> {
    let (&state, rest) = v.split_first().ok_or(Corrupt)?;
    let token = Token(
        rest.get(..32)
            .ok_or(Corrupt)?
            .try_into()
            .map_err(|_| Corrupt)?,
    );
    let rest = &rest[32..];
    let fingerprint = || -> Result<Fingerprint, Corrupt> {
        Ok(Fingerprint(
            rest.get(..32)
                .ok_or(Corrupt)?
                .try_into()
                .map_err(|_| Corrupt)?,
        ))
    };
    match state {
        CLAIMED if rest.is_empty() => Ok(Found::Claimed(token)),
        RELEASED if rest.is_empty() => Ok(Found::Released),
        PENDING if rest.len() == 32 => Ok(Found::Pending(token, fingerprint()?)),
        ANSWERED => {
            let fp = fingerprint()?;
            let answer = StoredAnswer::decode(Bytes::copy_from_slice(&rest[32..]))?;
            Ok(Found::Answered(fp, answer))
        }
        _ => Err(Corrupt),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisIdempotencyStore {
    pub fn new(
        url: &str,
        prefix: &str,
        timeouts: (Duration, Duration),
        max_per_tenant: u64,
    ) -> Result<Self, UrlError> {
        let (connect_timeout, command_timeout) = timeouts;
        Ok(Self {
            connection: Connection::new(url, connect_timeout, command_timeout)?,
            claim: Script::new(include_str!("claim.lua")),
            own: Script::new(include_str!("own.lua")),
            prefix: prefix.to_string(),
            max_per_tenant: max_per_tenant.max(1),
        })
    }

    pub fn is_connected(&self) -> bool {
        self.connection.is_connected()
    }

    /// Opens the connection (once; after that the manager reconnects by itself).
    pub async fn connect(&self) -> Result<(), ClusterKeyStoreError> {
        Ok(self.connection.connect().await?)
    }

    /// The tenant's index of answers; also the hash tag its keys share.
    pub fn index_key(&self, key: &TenantKey) -> String {
        format!("{{{}:idem:{}}}", self.prefix, key.tenant)
    }

    pub fn redis_key(&self, key: &TenantKey) -> String {
        format!("{}:{}", self.index_key(key), key.digest.to_hex())
    }

    /// Runs a script (twice the command's time: a script Redis forgot is loaded and run
    /// again).
    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, ClusterKeyStoreError> {
        Ok(self.connection.run(invocation).await?)
    }

    /// Claims `key` for the request holding `token`: `None` when it now holds it, else what
    /// the key holds.
    pub async fn claim(
        &self,
        key: &TenantKey,
        token: &Token,
        ttl: Duration,
    ) -> Result<Option<Found>, ClusterKeyStoreError> {
        let mut invocation = self.claim.key(self.redis_key(key));
        invocation.arg(value(CLAIMED, token, &[])).arg(ms(ttl));
        let found: Option<Vec<u8>> = self.run(&invocation).await?;
        free_if_released(found)
    }

    /// What `key` holds now.
    pub async fn read(&self, key: &TenantKey) -> Result<Option<Found>, ClusterKeyStoreError> {
        let mut connection = self
            .connection
            .manager()
            .map_err(ClusterKeyStoreError::from)?;
        let timeout = self.connection.command_timeout;
        let found: Option<Vec<u8>> = tokio::time::timeout(
            timeout,
            redis::cmd("GET")
                .arg(self.redis_key(key))
                .query_async(&mut connection),
        )
        .await
        .map_err(|_| ClusterKeyStoreError::Timeout(timeout))?
        .map_err(|e| ClusterKeyStoreError::from(CallError::Redis(e)))?;
        free_if_released(found)
    }

    /// Writes the state of a key `token` holds (or took again after its claim lapsed); false
    /// when another request holds it.
    async fn own(
        &self,
        key: &TenantKey,
        token: &Token,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, ClusterKeyStoreError> {
        let mut invocation = self.own.key(self.redis_key(key));
        invocation.arg(&token.0[..]).arg(value).arg(ms(ttl));
        let n: i64 = self.run(&invocation).await?;
        Ok(n == 1)
    }

    /// Renews a claim: still being read (`None`) or pending with this fingerprint.
    pub async fn renew(
        &self,
        key: &TenantKey,
        token: &Token,
        pending: Option<Fingerprint>,
        ttl: Duration,
    ) -> Result<bool, ClusterKeyStoreError> {
        let v = match pending {
            None => value(CLAIMED, token, &[]),
            Some(fp) => value(PENDING, token, &[&fp.0]),
        };
        self.own(key, token, &v, ttl).await
    }

    /// Stores the answer (kept `ttl`).
    pub async fn answer(
        &self,
        key: &TenantKey,
        token: &Token,
        fingerprint: Fingerprint,
        answer: &StoredAnswer,
        ttl: Duration,
    ) -> Result<bool, ClusterKeyStoreError> {
        let v = value(ANSWERED, token, &[&fingerprint.0, answer.encoded()]);
        let index = self.index_key(key);
        let mut invocation = self.own.key(self.redis_key(key));
        invocation
            .key(&index)
            .arg(&token.0[..])
            .arg(v)
            .arg(ms(ttl))
            .arg(self.max_per_tenant)
            .arg(key.digest.to_hex())
            .arg(format!("{index}:"));
        let n: i64 = self.run(&invocation).await?;
        Ok(n == 1)
    }

    /// Gives the claim up (nothing was stored for it). What is left in its place for
    /// `late_renewals` (the claim's own lifetime) tells a renewal of it, sent before and run
    /// after, not to take the key again; a claim takes it as free.
    pub async fn release(
        &self,
        key: &TenantKey,
        token: &Token,
        late_renewals: Duration,
    ) -> Result<bool, ClusterKeyStoreError> {
        self.own(key, token, b"", late_renewals).await
    }
}

impl ClusterKeyStore for RedisIdempotencyStore {
    fn connect(&self) -> ClusterKeyFuture<'_, ()> {
        Box::pin(RedisIdempotencyStore::connect(self))
    }

    fn claim<'a>(
        &'a self,
        key: &'a TenantKey,
        token: &'a Token,
        ttl: Duration,
    ) -> ClusterKeyFuture<'a, Option<Found>> {
        Box::pin(RedisIdempotencyStore::claim(self, key, token, ttl))
    }

    fn read<'a>(&'a self, key: &'a TenantKey) -> ClusterKeyFuture<'a, Option<Found>> {
        Box::pin(RedisIdempotencyStore::read(self, key))
    }

    fn renew<'a>(
        &'a self,
        key: &'a TenantKey,
        token: &'a Token,
        pending: Option<Fingerprint>,
        ttl: Duration,
    ) -> ClusterKeyFuture<'a, bool> {
        Box::pin(RedisIdempotencyStore::renew(self, key, token, pending, ttl))
    }

    fn answer<'a>(
        &'a self,
        key: &'a TenantKey,
        token: &'a Token,
        fingerprint: Fingerprint,
        answer: &'a StoredAnswer,
        ttl: Duration,
    ) -> ClusterKeyFuture<'a, bool> {
        Box::pin(RedisIdempotencyStore::answer(
            self,
            key,
            token,
            fingerprint,
            answer,
            ttl,
        ))
    }

    fn release<'a>(
        &'a self,
        key: &'a TenantKey,
        token: &'a Token,
        late_renewals: Duration,
    ) -> ClusterKeyFuture<'a, bool> {
        Box::pin(RedisIdempotencyStore::release(
            self,
            key,
            token,
            late_renewals,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_and_foreign_ones_are_corrupt() {
        let token = Token(*b"0123456789abcdef0123456789abcdef");
        let fp = Fingerprint([3; 32]);
        assert_eq!(
            parse(&value(CLAIMED, &token, &[])),
            Ok(Found::Claimed(token))
        );
        assert_eq!(
            parse(&value(PENDING, &token, &[&fp.0])),
            Ok(Found::Pending(token, fp))
        );
        assert_eq!(parse(&value(RELEASED, &token, &[])), Ok(Found::Released));
        let answer = StoredAnswer::decode(Bytes::from_static(b"\x00\xca\x00{}")).expect("answer");
        assert_eq!(
            parse(&value(ANSWERED, &token, &[&fp.0, answer.encoded()])),
            Ok(Found::Answered(fp, answer))
        );
        for bad in [
            &b""[..],
            b"C",
            b"X0123456789abcdef0123456789abcdef",
            b"C0123456789abcdef0123456789abcdefextra",
            b"R0123456789abcdef0123456789abcdefextra",
            b"P0123456789abcdef0123456789abcdef",
            b"D0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(parse(bad), Err(Corrupt), "{bad:?}");
        }
    }
}
