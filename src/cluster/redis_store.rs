//! The shared budget state in Redis: three Lua scripts (lease, give back, members), each one
//! atomic on one key, so the state is exact under any number of replicas and works on Redis
//! Cluster too (every key is its own hash tag).
//!
//! Time: production passes no clock and the scripts read Redis's own `TIME`, so every replica
//! counts on one clock whatever its host's skew; tests pass a clock they step.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::redis_connection::{CallError, Connection, UrlError};
use super::store::{
    Ask, BudgetStore, Grant, Membership, QuotaAsk, QuotaGrant, StoreError, StoreFuture,
};
use crate::budget::{BudgetSpec, Clock, PerDimension, RateSpec};
use crate::record::Charge;

impl From<CallError> for StoreError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::NotConnected => StoreError::NotConnected,
            CallError::Timeout(d) => StoreError::Timeout(d),
            CallError::Redis(e) => StoreError::Failed {
                kind: kind(&e),
                source: Box::new(e),
            },
        }
    }
}

/// A Redis error's metric label.
fn kind(e: &redis::RedisError) -> &'static str {
    if e.is_io_error() || e.is_connection_dropped() {
        "io"
    } else if e.kind() == redis::ErrorKind::ResponseError {
        "script"
    } else {
        "other"
    }
}

/// The scripts and the connection.
pub struct RedisStore {
    connection: Connection,
    lease: Script,
    give_back: Script,
    members: Script,
    quota: Script,
    prefix: String,
    /// `None`: Redis's own clock.
    clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("connected", &self.connection.is_connected())
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
    ) -> Result<Self, UrlError> {
        Ok(Self {
            connection: Connection::new(url, connect_timeout, command_timeout)?,
            lease: Script::new(include_str!("lease.lua")),
            give_back: Script::new(include_str!("give_back.lua")),
            members: Script::new(include_str!("members.lua")),
            quota: Script::new(include_str!("quota.lua")),
            prefix: prefix.to_string(),
            clock,
        })
    }

    /// Opens the connection (once; after that the manager reconnects by itself).
    pub async fn connect(&self) -> Result<(), StoreError> {
        Ok(self.connection.connect().await?)
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

    pub fn quota_key(&self, tenant: &str, window: crate::quota::Window, start: i64) -> String {
        format!(
            "{}:quota:{}:{start}",
            self.tenant_key(tenant),
            window.as_str()
        )
    }

    /// [`RedisStore::quota_key`] of a global quota: under the global budget's hash tag.
    pub fn global_quota_key(&self, window: crate::quota::Window, start: i64) -> String {
        format!("{}:quota:{}:{start}", self.global_key(), window.as_str())
    }

    fn members_key(&self) -> String {
        format!("{{{}:members}}", self.prefix)
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        Ok(self.connection.run(invocation).await?)
    }

    /// Takes up to `want` tokens (at least `min`) from the pair at `key`, or nothing.
    pub async fn lease(
        &self,
        key: &str,
        spec: &BudgetSpec,
        asks: PerDimension<Ask>,
    ) -> Result<Grant, StoreError> {
        let mut invocation = self.lease.key(key);
        invocation.arg(self.now_arg());
        // The script's arguments: records, then bytes.
        for (d, ask) in asks.iter() {
            let s = spec[d];
            invocation
                .arg(interval_ms(s).to_string())
                .arg(s.map_or(0, |s| s.burst))
                .arg(ask.want)
                .arg(ask.min)
                .arg(ask.level);
        }
        let answer: Vec<i64> = self.run(&invocation).await?;
        let at = |i: usize| answer.get(i).copied().unwrap_or(0).max(0).unsigned_abs();
        if answer.len() != 5 {
            return Err(StoreError::from(CallError::Redis(redis::RedisError::from(
                (
                    redis::ErrorKind::TypeError,
                    "the lease script answered with an unexpected shape",
                ),
            ))));
        }
        let wait_us = at(4);
        Ok(Grant {
            granted: Charge::new(at(0), at(1)),
            left: Charge::new(at(2), at(3)),
            wait: (wait_us > 0).then(|| Duration::from_micros(wait_us)),
        })
    }

    /// Gives unspent tokens back to the pair at `key`.
    pub async fn give_back(
        &self,
        key: &str,
        spec: &BudgetSpec,
        tokens: Charge,
    ) -> Result<(), StoreError> {
        let mut invocation = self.give_back.key(key);
        invocation.arg(self.now_arg());
        // The script's arguments: records, then bytes.
        for (d, n) in tokens.iter() {
            let s = spec[d];
            invocation
                .arg(interval_ms(s).to_string())
                .arg(s.map_or(0, |s| s.burst))
                .arg(n);
        }
        let _: i64 = self.run(&invocation).await?;
        Ok(())
    }

    /// Leases from (or gives back to) the quota count at `key`.
    pub async fn quota(
        &self,
        key: &str,
        instance: &str,
        ask: QuotaAsk,
    ) -> Result<QuotaGrant, StoreError> {
        let mut invocation = self.quota.key(key);
        invocation
            // The window kind's mark: the count's key with `gen` for the window's start.
            .key(format!(
                "{}:gen",
                key.rsplit_once(':').map_or(key, |(kind, _)| kind)
            ))
            .arg(ask.expire_at_s.max(0))
            .arg(ask.members.max(1))
            .arg(instance)
            .arg(self.now_arg())
            .arg(ask.unsure_ms)
            .arg(ask.fraction.to_string());
        // The script's arguments: records, then bytes.
        for (d, limit) in ask.limit.iter() {
            invocation
                .arg(limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX)))
                .arg(ask.want[d])
                .arg(ask.min[d])
                .arg(ask.known[d])
                .arg(ask.outage[d])
                .arg(ask.give[d])
                .arg(ask.received[d]);
        }
        let answer: Vec<i64> = self.run(&invocation).await?;
        if answer.len() != 6 {
            return Err(StoreError::from(CallError::Redis(redis::RedisError::from(
                (
                    redis::ErrorKind::TypeError,
                    "the quota script answered with an unexpected shape",
                ),
            ))));
        }
        let at = |i: usize| answer[i].max(0).unsigned_abs();
        Ok(QuotaGrant {
            granted: Charge::new(at(0), at(1)),
            count: Charge::new(at(2), at(3)),
            refused: answer[4] == 1,
            unsure_for: (answer[5] > 0)
                .then(|| std::time::Duration::from_millis(answer[5].unsigned_abs())),
        })
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
        let (n, duplicate, holder, beats, rank, fresh): (i64, i64, String, i64, i64, i64) =
            self.run(&invocation).await?;
        let count = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
        Ok(Membership {
            members: count(n),
            rank: count(rank),
            duplicate: duplicate == 1,
            holder: (duplicate == 1).then(|| (holder, beats.max(0).unsigned_abs())),
            fresh: fresh == 1,
        })
    }
}

impl BudgetStore for RedisStore {
    fn connect(&self) -> StoreFuture<'_, ()> {
        Box::pin(RedisStore::connect(self))
    }

    fn tenant_key(&self, tenant: &str) -> String {
        RedisStore::tenant_key(self, tenant)
    }

    fn global_key(&self) -> String {
        RedisStore::global_key(self)
    }

    fn lease<'a>(
        &'a self,
        key: &'a str,
        spec: &'a BudgetSpec,
        asks: PerDimension<Ask>,
    ) -> StoreFuture<'a, Grant> {
        Box::pin(RedisStore::lease(self, key, spec, asks))
    }

    fn give_back<'a>(
        &'a self,
        key: &'a str,
        spec: &'a BudgetSpec,
        tokens: Charge,
    ) -> StoreFuture<'a, ()> {
        Box::pin(RedisStore::give_back(self, key, spec, tokens))
    }

    fn quota_key(&self, tenant: &str, window: crate::quota::Window, start: i64) -> String {
        RedisStore::quota_key(self, tenant, window, start)
    }

    fn global_quota_key(&self, window: crate::quota::Window, start: i64) -> String {
        RedisStore::global_quota_key(self, window, start)
    }

    fn quota<'a>(
        &'a self,
        key: &'a str,
        instance: &'a str,
        ask: QuotaAsk,
    ) -> StoreFuture<'a, QuotaGrant> {
        Box::pin(RedisStore::quota(self, key, instance, ask))
    }

    fn heartbeat<'a>(
        &'a self,
        id: &'a str,
        instance: &'a str,
        ttl: Duration,
        leave: bool,
    ) -> StoreFuture<'a, Membership> {
        Box::pin(RedisStore::heartbeat(self, id, instance, ttl, leave))
    }
}
