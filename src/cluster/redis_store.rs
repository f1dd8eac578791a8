//! The shared budget state in Redis: three Lua scripts (lease, give back, members), each one
//! atomic on one key, so the state is exact under any number of replicas and works on Redis
//! Cluster too (every key is its own hash tag).
//!
//! Time: production passes no clock and the scripts read Redis's own `TIME`, so every replica
//! counts on one clock whatever its host's skew; tests pass a clock they step.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use crate::budget::{BudgetSpec, Clock, RateSpec};

/// What a lease call answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub records: u64,
    pub bytes: u64,
    /// What the shared buckets have left after this call.
    pub left_records: u64,
    pub left_bytes: u64,
    /// Set when the minimum asked for was not there: nothing was granted, and this is how
    /// long until it would be.
    pub wait: Option<Duration>,
}

/// What a heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Live members, this one included.
    pub members: u32,
    /// This replica's id is held by another process whose entry has not lapsed: this
    /// heartbeat changed nothing.
    pub duplicate: bool,
    /// With `duplicate`: that process's instance id and the heartbeats it has sent. A holder
    /// whose count moves between two looks is alive; one whose count stands still until its
    /// entry lapses is gone (killed without leaving).
    pub holder: Option<(String, u64)>,
}

/// How many tokens to ask for in each dimension.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask {
    pub want: u64,
    pub min: u64,
}

/// Why Redis did not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not connected to Redis yet")]
    NotConnected,
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

impl StoreError {
    /// A closed label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::NotConnected => "not_connected",
            StoreError::Timeout(_) => "timeout",
            StoreError::Redis(e) if e.is_io_error() || e.is_connection_dropped() => "io",
            StoreError::Redis(e) if e.kind() == redis::ErrorKind::ResponseError => "script",
            StoreError::Redis(_) => "other",
        }
    }
}

/// The scripts and the connection.
pub struct RedisStore {
    client: redis::Client,
    connection: OnceLock<ConnectionManager>,
    lease: Script,
    give_back: Script,
    members: Script,
    prefix: String,
    connect_timeout: Duration,
    command_timeout: Duration,
    /// `None`: Redis's own clock.
    clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("connected", &self.connection.get().is_some())
            .finish_non_exhaustive()
    }
}

/// ms per token, as the scripts count; 0 for a dimension that is not limited.
fn interval_ms(spec: Option<RateSpec>) -> f64 {
    spec.map_or(0.0, |s| 1000.0 / s.per_sec.max(1) as f64)
}

impl RedisStore {
    pub fn new(
        url: &str,
        prefix: &str,
        connect_timeout: Duration,
        command_timeout: Duration,
        clock: Option<Arc<dyn Clock>>,
    ) -> Result<Self, redis::RedisError> {
        Ok(Self {
            client: redis::Client::open(url)?,
            connection: OnceLock::new(),
            lease: Script::new(include_str!("lease.lua")),
            give_back: Script::new(include_str!("give_back.lua")),
            members: Script::new(include_str!("members.lua")),
            prefix: prefix.to_string(),
            connect_timeout,
            command_timeout,
            clock,
        })
    }

    /// Opens the connection (once; after that the manager reconnects by itself).
    pub async fn connect(&self) -> Result<(), StoreError> {
        if self.connection.get().is_some() {
            return Ok(());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(self.connect_timeout)
            .set_response_timeout(self.command_timeout)
            // Reconnect attempts are cheap and bounded; the agent's heartbeat is the retry loop.
            .set_number_of_retries(1)
            .set_max_delay(1000);
        let manager = tokio::time::timeout(
            self.connect_timeout * 2,
            ConnectionManager::new_with_config(self.client.clone(), config),
        )
        .await
        .map_err(|_| StoreError::Timeout(self.connect_timeout))??;
        let _ = self.connection.set(manager);
        Ok(())
    }

    fn connection(&self) -> Result<ConnectionManager, StoreError> {
        self.connection
            .get()
            .cloned()
            .ok_or(StoreError::NotConnected)
    }

    /// The scripts' `now`: empty for Redis's clock.
    fn now_arg(&self) -> String {
        match &self.clock {
            None => String::new(),
            Some(c) => format!("{}", c.now_ns() as f64 / 1e6),
        }
    }

    pub fn tenant_key(&self, tenant: &str) -> String {
        format!("{{{}:tenant:{tenant}}}", self.prefix)
    }

    pub fn global_key(&self) -> String {
        format!("{{{}:global}}", self.prefix)
    }

    fn members_key(&self) -> String {
        format!("{{{}:members}}", self.prefix)
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection()?;
        // The manager's response timeout covers a command; this also covers a reload after
        // NOSCRIPT (two round trips).
        tokio::time::timeout(
            self.command_timeout * 2,
            invocation.invoke_async(&mut connection),
        )
        .await
        .map_err(|_| StoreError::Timeout(self.command_timeout))?
        .map_err(StoreError::from)
    }

    /// Takes up to `want` tokens (at least `min`) from the pair at `key`, or nothing.
    pub async fn lease(
        &self,
        key: &str,
        spec: &BudgetSpec,
        records: Ask,
        bytes: Ask,
    ) -> Result<Grant, StoreError> {
        let mut invocation = self.lease.key(key);
        invocation.arg(self.now_arg());
        for (s, ask) in [(spec.records, records), (spec.bytes, bytes)] {
            invocation
                .arg(interval_ms(s).to_string())
                .arg(s.map_or(0, |s| s.burst))
                .arg(ask.want)
                .arg(ask.min);
        }
        let answer: Vec<i64> = self.run(&invocation).await?;
        let at = |i: usize| answer.get(i).copied().unwrap_or(0).max(0).unsigned_abs();
        if answer.len() != 5 {
            return Err(StoreError::Redis(redis::RedisError::from((
                redis::ErrorKind::TypeError,
                "the lease script answered with an unexpected shape",
            ))));
        }
        let wait_us = at(4);
        Ok(Grant {
            records: at(0),
            bytes: at(1),
            left_records: at(2),
            left_bytes: at(3),
            wait: (wait_us > 0).then(|| Duration::from_micros(wait_us)),
        })
    }

    /// Gives unspent tokens back to the pair at `key`.
    pub async fn give_back(
        &self,
        key: &str,
        spec: &BudgetSpec,
        records: u64,
        bytes: u64,
    ) -> Result<(), StoreError> {
        let mut invocation = self.give_back.key(key);
        invocation.arg(self.now_arg());
        for (s, n) in [(spec.records, records), (spec.bytes, bytes)] {
            invocation
                .arg(interval_ms(s).to_string())
                .arg(s.map_or(0, |s| s.burst))
                .arg(n);
        }
        let _: i64 = self.run(&invocation).await?;
        Ok(())
    }

    /// Announces replica `id`, held by this process (`instance`), or takes it out; counts the
    /// live members by distinct id.
    pub async fn heartbeat(
        &self,
        id: &str,
        instance: &str,
        ttl: Duration,
        leave: bool,
    ) -> Result<Membership, StoreError> {
        let members = self.members_key();
        let mut invocation = self.members.key(&members);
        invocation
            .key(format!("{members}:instances"))
            .key(format!("{members}:beats"))
            .arg(self.now_arg())
            .arg(id)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            .arg(if leave { "1" } else { "0" })
            .arg(instance);
        let (n, duplicate, holder, beats): (i64, i64, String, i64) = self.run(&invocation).await?;
        let count = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
        Ok(Membership {
            members: count(n),
            duplicate: duplicate == 1,
            holder: (duplicate == 1).then(|| (holder, beats.max(0).unsigned_abs())),
        })
    }
}
