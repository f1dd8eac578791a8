//! One Redis connection as both Redis stores use it (the budgets' and the idempotency keys'):
//! opened once with bounded timeouts, then the connection manager reconnects by itself; every
//! script call bounded too.

use std::sync::OnceLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// Why a call did not get Redis's answer.
#[derive(Debug)]
pub(super) enum CallError {
    NotConnected,
    Timeout(Duration),
    Redis(redis::RedisError),
}

impl From<redis::RedisError> for CallError {
    fn from(e: redis::RedisError) -> Self {
        CallError::Redis(e)
    }
}

/// A Redis URL that cannot be used (validation lets only well-formed ones through).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct UrlError(redis::RedisError);

/// The client and, once connected, its connection manager.
pub(super) struct Connection {
    client: redis::Client,
    manager: OnceLock<ConnectionManager>,
    connect_timeout: Duration,
    pub command_timeout: Duration,
}

impl Connection {
    pub fn new(
        url: &str,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Result<Self, UrlError> {
        Ok(Self {
            client: redis::Client::open(url).map_err(UrlError)?,
            manager: OnceLock::new(),
            connect_timeout,
            command_timeout,
        })
    }

    pub fn is_connected(&self) -> bool {
        self.manager.get().is_some()
    }

    /// Opens the connection (once; after that the manager reconnects by itself).
    pub async fn connect(&self) -> Result<(), CallError> {
        if self.is_connected() {
            return Ok(());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(self.connect_timeout)
            .set_response_timeout(self.command_timeout)
            // Reconnect attempts are cheap and bounded; the callers' loops are the retries.
            .set_number_of_retries(1)
            .set_max_delay(1000);
        let manager = tokio::time::timeout(
            self.connect_timeout * 2,
            ConnectionManager::new_with_config(self.client.clone(), config),
        )
        .await
        .map_err(|_| CallError::Timeout(self.connect_timeout))??;
        let _ = self.manager.set(manager);
        Ok(())
    }

    pub fn manager(&self) -> Result<ConnectionManager, CallError> {
        self.manager.get().cloned().ok_or(CallError::NotConnected)
    }

    /// Runs a script. The manager's response timeout covers a command; this also covers a
    /// reload after NOSCRIPT (two round trips).
    pub async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, CallError> {
        let mut connection = self.manager()?;
        tokio::time::timeout(
            self.command_timeout * 2,
            invocation.invoke_async(&mut connection),
        )
        .await
        .map_err(|_| CallError::Timeout(self.command_timeout))?
        .map_err(CallError::from)
    }
}
