//! floodgate: an HTTP ingest gateway in front of Kafka that refuses exactly and never queues
//! without bound.
//!
//! Modules by layer, lowest first. A module may import modules of its own layer or below,
//! never above (docs/ARCHITECTURE.md draws the same picture with one request's path); each
//! module's first comment ends with its "Layer:" line, in these seven names.
//!
//! 1. Foundations — import nothing of floodgate's but each other:
//!    [`dimension`] (records and bytes, and a value for each), [`quota`] (calendar quotas:
//!    hour, day and month windows and what is used of them), [`record`] (records, the
//!    `Charge` they make, the `Api` they came by), [`refusal`] (why a
//!    request is not admitted), [`identity`] (tenant ids, key digests and ids, new keys, topics,
//!    topic patterns), [`env_secret`] (a secret from `NAME` or the file `NAME_FILE` names),
//!    [`access`] (admin tokens), [`budget`] (GCRA token buckets), [`buffer`]
//!    (the bounded downstream buffer), [`inflight_bodies`] (request bodies in memory),
//!    [`inflate`] (content-coded bodies inflated a piece at a time within bounds),
//!    [`auth_failures`] (per-address limit on failed authentications), [`heap`] (each
//!    thread's live heap bytes, counted by the global allocator), [`hold`] (seats for
//!    requests held for their tokens), [`agent`] (the plan cell
//!    and loop every agent shares), [`forwarded`] (the client's address behind trusted
//!    proxies), [`quote`] (how much of its input an answer quotes), [`server`] and [`tls`] (bounded accept loop), [`descriptors`] (the process's
//!    descriptor limit against what the listeners may hold).
//! 2. Configuration — [`config`]: the typed, validated configuration file, one module per
//!    section; then the pure controllers built on it: [`adaptive`] (the adaptive limit),
//!    [`lag`] (lag guards: offsets in, a cap on producers out) and [`allocation`] (a limit
//!    shared by priority class and demand, for both).
//! 3. Domain — [`tenant`] (live tenants and the key `Directory`), [`body`] (the body decoders),
//!    [`kafka`] (every rdkafka client: settings, the shared producer, delivery reports, topic
//!    catalog, statistics, the offsets reader, the registry topic's log), [`schema`] (Schema
//!    Registry schemas and the topics' data contracts).
//! 4. Decisions and state — [`admission`] (the atomic admit-or-refuse decision),
//!    [`credential`] (a credential becomes an identity), [`registry`] (the registry's
//!    declarative state, its changes, audit and persistence), [`quota_file`] (what the
//!    quotas used, kept across a restart), [`usage`] (usage by tenant and hour, for
//!    chargeback), [`idempotency`]
//!    (`Idempotency-Key`), [`cluster`] (every use of Redis: shared budgets behind
//!    `BudgetStore`, the shared idempotency store), the agents that feed the controllers:
//!    [`adaptive_agent`] (Kafka's signals) and [`lag_agent`] (consumer-group offsets), and what
//!    operators read: [`metrics`] (Prometheus, one module per subsystem) and [`status`] (the
//!    status page's snapshot and history).
//! 5. Outcomes and pipeline — [`outcome`] (every status and body decided once; the admin API's
//!    errors in their own enum), then [`ingest`] (the produce pipeline every wire format
//!    shares).
//! 6. Assembly — [`app`] (the shared state).
//! 7. HTTP edges — [`http`] (produce routes, one folder per wire format, and the IETF
//!    `RateLimit` fields), [`admin`] (admin routes, from one table), [`reload`] (SIGHUP),
//!    [`run`] (one run: start, serve, drain), [`telemetry`] (logging), [`dev`] (the embedded
//!    broker).

// #27: no function over 100 lines outside tests (clippy.toml sets the threshold).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod access;
pub mod adaptive;
pub mod adaptive_agent;
pub mod admin;
pub mod admission;
pub mod agent;
pub mod allocation;
pub mod app;
pub mod auth_failures;
pub mod body;
pub mod budget;
pub mod buffer;
pub mod cluster;
pub mod config;
pub mod credential;
pub mod descriptors;
pub mod dev;
pub mod dimension;
pub mod env_secret;
pub mod forwarded;
pub mod heap;
pub mod hold;
pub mod http;
pub mod idempotency;
pub mod identity;
pub mod inflate;
pub mod inflight_bodies;
pub mod ingest;
pub mod kafka;
pub mod lag;
pub mod lag_agent;
pub mod metrics;
pub mod outcome;
pub mod quota;
pub mod quota_file;
pub mod quote;
pub mod record;
pub mod refusal;
pub mod registry;
pub mod reload;
pub mod run;
pub mod schema;
pub mod server;
pub mod status;
pub mod telemetry;
pub mod tenant;
pub mod tls;
pub mod usage;

// The unit tests measure what schema compiles keep, as the gateway does (main.rs).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

pub use run::{run, Listeners, RunOptions, ShutdownReport};
