//! Keys in Redis (cluster mode), so a retry that lands on another replica, or on a restarted
//! one, finds the claim or the answer. One Redis key per tenant key (`PREFIX:idem:HEX`, HEX
//! the key's digest), each script touching that one key only (works on Redis Cluster).
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

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use super::{Corrupt, Fingerprint, KeyDigest, StoredAnswer, Token};

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Another request holds it and has not read its body yet.
    Claimed(Token),
    /// Another request's records are with Kafka.
    Pending(Token, Fingerprint),
    /// The answer.
    Answered(Fingerprint, StoredAnswer),
    /// Given up with nothing stored (kept for a while so a late renewal cannot take it again):
    /// free for the next request.
    Released,
}

/// Why Redis did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum RedisKeyError {
    #[error("not connected to Redis yet")]
    NotConnected,
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
}

impl RedisKeyError {
    /// Whether the command may have reached Redis and run there (or may still run: a paused
    /// or slow Redis runs what it was sent once it goes on).
    pub fn may_have_run(&self) -> bool {
        match self {
            Self::Timeout(_) => true,
            Self::Redis(e) => !e.is_connection_refusal(),
            Self::NotConnected | Self::Corrupt(_) => false,
        }
    }
}

pub struct RedisKeys {
    client: redis::Client,
    connection: OnceLock<ConnectionManager>,
    claim: Script,
    own: Script,
    prefix: String,
    connect_timeout: Duration,
    command_timeout: Duration,
}

impl std::fmt::Debug for RedisKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisKeys")
            .field("prefix", &self.prefix)
            .field("connected", &self.connection.get().is_some())
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
fn free_if_released(found: Option<Vec<u8>>) -> Result<Option<Found>, RedisKeyError> {
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

impl RedisKeys {
    pub fn new(
        url: &str,
        prefix: &str,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Result<Self, redis::RedisError> {
        Ok(Self {
            client: redis::Client::open(url)?,
            connection: OnceLock::new(),
            claim: Script::new(include_str!("claim.lua")),
            own: Script::new(include_str!("own.lua")),
            prefix: prefix.to_string(),
            connect_timeout,
            command_timeout,
        })
    }

    pub fn is_connected(&self) -> bool {
        self.connection.get().is_some()
    }

    /// Opens the connection (once; after that the manager reconnects by itself).
    pub async fn connect(&self) -> Result<(), RedisKeyError> {
        if self.is_connected() {
            return Ok(());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(self.connect_timeout)
            .set_response_timeout(self.command_timeout)
            .set_number_of_retries(1)
            .set_max_delay(1000);
        let manager = tokio::time::timeout(
            self.connect_timeout * 2,
            ConnectionManager::new_with_config(self.client.clone(), config),
        )
        .await
        .map_err(|_| RedisKeyError::Timeout(self.connect_timeout))??;
        let _ = self.connection.set(manager);
        Ok(())
    }

    fn connection(&self) -> Result<ConnectionManager, RedisKeyError> {
        self.connection
            .get()
            .cloned()
            .ok_or(RedisKeyError::NotConnected)
    }

    pub fn redis_key(&self, key: &KeyDigest) -> String {
        format!("{}:idem:{}", self.prefix, key.to_hex())
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, RedisKeyError> {
        let mut connection = self.connection()?;
        // Twice the command's time: a script Redis forgot is loaded and run again.
        tokio::time::timeout(
            self.command_timeout * 2,
            invocation.invoke_async(&mut connection),
        )
        .await
        .map_err(|_| RedisKeyError::Timeout(self.command_timeout))?
        .map_err(RedisKeyError::from)
    }

    /// Claims `key` for the request holding `token`: `None` when it now holds it, else what
    /// the key holds.
    pub async fn claim(
        &self,
        key: &KeyDigest,
        token: &Token,
        ttl: Duration,
    ) -> Result<Option<Found>, RedisKeyError> {
        let mut invocation = self.claim.key(self.redis_key(key));
        invocation.arg(value(CLAIMED, token, &[])).arg(ms(ttl));
        let found: Option<Vec<u8>> = self.run(&invocation).await?;
        free_if_released(found)
    }

    /// What `key` holds now.
    pub async fn read(&self, key: &KeyDigest) -> Result<Option<Found>, RedisKeyError> {
        let mut connection = self.connection()?;
        let found: Option<Vec<u8>> = tokio::time::timeout(
            self.command_timeout,
            redis::cmd("GET")
                .arg(self.redis_key(key))
                .query_async(&mut connection),
        )
        .await
        .map_err(|_| RedisKeyError::Timeout(self.command_timeout))??;
        free_if_released(found)
    }

    /// Writes the state of a key `token` holds (or took again after its claim lapsed); false
    /// when another request holds it.
    async fn own(
        &self,
        key: &KeyDigest,
        token: &Token,
        value: &[u8],
        ttl: Duration,
    ) -> Result<bool, RedisKeyError> {
        let mut invocation = self.own.key(self.redis_key(key));
        invocation.arg(&token.0[..]).arg(value).arg(ms(ttl));
        let n: i64 = self.run(&invocation).await?;
        Ok(n == 1)
    }

    /// Renews a claim: still being read (`None`) or pending with this fingerprint.
    pub async fn renew(
        &self,
        key: &KeyDigest,
        token: &Token,
        pending: Option<Fingerprint>,
        ttl: Duration,
    ) -> Result<bool, RedisKeyError> {
        let v = match pending {
            None => value(CLAIMED, token, &[]),
            Some(fp) => value(PENDING, token, &[&fp.0]),
        };
        self.own(key, token, &v, ttl).await
    }

    /// Stores the answer (kept `ttl`).
    pub async fn answer(
        &self,
        key: &KeyDigest,
        token: &Token,
        fingerprint: Fingerprint,
        answer: &StoredAnswer,
        ttl: Duration,
    ) -> Result<bool, RedisKeyError> {
        let v = value(ANSWERED, token, &[&fingerprint.0, answer.encoded()]);
        self.own(key, token, &v, ttl).await
    }

    /// Gives the claim up (nothing was stored for it). What is left in its place for
    /// `late_renewals` (the claim's own lifetime) tells a renewal of it, sent before and run
    /// after, not to take the key again; a claim takes it as free.
    pub async fn release(
        &self,
        key: &KeyDigest,
        token: &Token,
        late_renewals: Duration,
    ) -> Result<bool, RedisKeyError> {
        self.own(key, token, b"", late_renewals).await
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
