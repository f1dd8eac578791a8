//! The integration tests, in one binary: each test binary links librdkafka and OpenSSL, which
//! on a 2-core builder costs more than compiling the tests, so they share one link. Grouped by
//! the real parts a test needs, so its path says what must be running (scripts/test.sh starts
//! Tansu and Redis and exports their addresses):
//!
//! - `mock`: librdkafka's in-process mock cluster only (nothing to start);
//! - `tansu`: the Tansu broker (`FLOODGATE_TEST_BROKER`), and the mock cluster for some;
//! - `redis`: Redis (`FLOODGATE_TEST_REDIS`, or a redis-server of the test's own), with the
//!   mock cluster or a Tansu of the test's own;
//! - `standalone`: no broker at all.
//!
//! The tests share this process: a SIGHUP reaches every gateway started with a `config_path`
//! (only `tansu::reload` starts one), and the rate and latency tests (`mock::adaptive`,
//! `mock::lag_guard`, `mock::retry_after`, `tansu::adaptive_recovery`) take
//! [`common::ONE_AT_A_TIME`]; scripts/test.sh runs those after the rest, so that they have the
//! machine to themselves as they had in their own binaries.
//! `tests/idempotency_memory.rs` stays a binary of its own: it measures the process's RSS.

mod common;

// The gateways run in this process: schema compiles are measured as in the binary.
#[global_allocator]
static ALLOCATOR: floodgate::heap::Counting = floodgate::heap::Counting;

/// librdkafka's in-process mock cluster only.
mod mock {
    mod adaptive;
    mod admin;
    mod admin_floods;
    mod backpressure;
    mod budgets;
    mod descriptors;
    mod encodings;
    mod first_scrape;
    mod holds;
    mod hostile;
    mod idempotency_fairness;
    mod jwt;
    mod lag_guard;
    mod metadata;
    mod metrics;
    mod mtls;
    mod partitioner;
    mod quotas;
    mod reliability;
    mod retry_after;
    mod room;
    mod slow_clients;
    mod status;
    mod streams;
    mod tls;
    mod uploads;
    mod usage;
}

/// The Tansu broker started by scripts/test.sh (and the mock cluster for some).
mod tansu {
    mod adaptive_recovery;
    mod confluent;
    mod encodings;
    mod node_client;
    mod produce;
    mod registry;
    mod reload;
    mod schema_costs;
    mod schemas;
    mod shutdown;
}

/// Redis (scripts/test.sh's, or one of the test's own), with the mock cluster or a Tansu of
/// the test's own.
mod redis {
    mod cluster;
    mod dashboards;
    mod global_quotas;
    mod holds;
    mod idempotency;
    mod idempotency_cluster;
    mod idempotency_fairness;
    mod leases;
    mod quotas;
}

/// No broker at all.
mod standalone {
    mod openapi;
}
