//! `Config::validate`: every semantic problem, section by section (the parser already caught
//! unknown keys and wrong types), and the warnings `check-config` prints.

use super::*;

impl Config {
    /// Every semantic problem (the parser already caught unknown keys and wrong types), in
    /// the file's order of sections.
    pub fn validate(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        self.listeners_and_bounds_problems(&mut problems);
        self.compat_problems(&mut problems);
        self.stores_and_metrics_problems(&mut problems);
        self.protection_problems(&mut problems);
        self.tls_and_proxies_problems(&mut problems);
        self.kafka_and_global_problems(&mut problems);
        self.tenants_problems(&mut problems);
        problems
    }

    /// The listeners differ; every count, size and timeout is at least 1; the server's own bounds.
    fn listeners_and_bounds_problems(&self, problems: &mut Vec<ConfigProblem>) {
        let s = &self.server;
        if s.listen == s.admin_listen {
            problems.push(ConfigProblem::new(
                "server.admin_listen",
                "must differ from server.listen (the admin API is never served on the produce listener)",
            ));
        }
        for (key, value) in [
            ("server.max_body_bytes", s.max_body_bytes),
            (
                "server.max_inflation_ratio",
                u64::from(s.max_inflation_ratio),
            ),
            ("server.max_connections", s.max_connections as u64),
            (
                "server.max_unauthenticated_per_address",
                s.max_unauthenticated_per_address as u64,
            ),
            (
                "server.max_connections_per_tenant",
                s.max_connections_per_tenant as u64,
            ),
            (
                "server.max_unauthenticated_bytes",
                s.max_unauthenticated_bytes,
            ),
            ("server.header_read_timeout_ms", s.header_read_timeout_ms),
            ("server.idle_timeout_ms", s.idle_timeout_ms),
            ("server.http2_max_streams", u64::from(s.http2_max_streams)),
            ("server.max_inflight_body_bytes", s.max_inflight_body_bytes),
            (
                "server.auth_failures_per_sec",
                u64::from(s.auth_failures_per_sec),
            ),
            (
                "server.auth_failures_burst",
                u64::from(s.auth_failures_burst),
            ),
            ("server.body_read_timeout_ms", s.body_read_timeout_ms),
            ("server.max_header_bytes", s.max_header_bytes as u64),
            ("buffer.max_bytes", self.buffer.max_bytes),
            ("buffer.max_records", self.buffer.max_records),
            (
                "limits.max_records_per_request",
                self.limits.max_records_per_request as u64,
            ),
            ("limits.max_value_bytes", self.limits.max_value_bytes as u64),
            ("kafka.metadata_timeout_ms", self.kafka.metadata_timeout_ms),
            ("kafka.metadata_ttl_ms", self.kafka.metadata_ttl_ms),
            ("kafka.delivery_timeout_ms", self.kafka.delivery_timeout_ms),
            (
                "compat.stream_max_unsettled",
                self.compat.stream_max_unsettled as u64,
            ),
            (
                "compat.stream_idle_timeout_ms",
                self.compat.stream_idle_timeout_ms,
            ),
            (
                "compat.stream_max_duration_ms",
                self.compat.stream_max_duration_ms,
            ),
            (
                "cluster.connect_timeout_ms",
                self.cluster.connect_timeout_ms,
            ),
            (
                "cluster.command_timeout_ms",
                self.cluster.command_timeout_ms,
            ),
            ("cluster.slice_horizon_ms", self.cluster.slice_horizon_ms),
            ("cluster.slice_ttl_ms", self.cluster.slice_ttl_ms),
            ("cluster.heartbeat_ms", self.cluster.heartbeat_ms),
            ("cluster.member_ttl_ms", self.cluster.member_ttl_ms),
        ] {
            if value == 0 {
                problems.push(ConfigProblem::new(key, "must be at least 1"));
            }
        }
        // tokio's semaphore panics above its MAX_PERMITS; no machine serves a million sockets.
        if s.max_connections > 1_000_000 {
            problems.push(ConfigProblem::new(
                "server.max_connections",
                "must be at most 1000000",
            ));
        }
        if s.max_body_bytes > s.max_inflight_body_bytes {
            problems.push(ConfigProblem::new(
                "server.max_body_bytes",
                "must be at most server.max_inflight_body_bytes (a body that large could never be read)",
            ));
        }
        if s.max_body_bytes > u64::from(u32::MAX) {
            problems.push(ConfigProblem::new(
                "server.max_body_bytes",
                "must be at most 4294967295",
            ));
        }
    }

    /// `[compat]`: the v3 batch and stream bounds, the reported cluster id.
    fn compat_problems(&self, problems: &mut Vec<ConfigProblem>) {
        if !(1..=50).contains(&self.compat.batch_max_entries) {
            problems.push(ConfigProblem::new(
                "compat.batch_max_entries",
                "must be from 1 to 50",
            ));
        }
        if self.compat.stream_max_unsettled > 100_000 {
            problems.push(ConfigProblem::new(
                "compat.stream_max_unsettled",
                "must be at most 100000",
            ));
        }
        if let Some(id) = &self.compat.cluster_id {
            if id.is_empty()
                || id.len() > 128
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                problems.push(ConfigProblem::new(
                    "compat.cluster_id",
                    "must be 1 to 128 characters of a-z A-Z 0-9 - _ .",
                ));
            }
        }
    }

    /// `[cluster]`, `[idempotency]` and `[metrics]`.
    fn stores_and_metrics_problems(&self, problems: &mut Vec<ConfigProblem>) {
        problems.extend(self.cluster.problems());
        problems.extend(self.idempotency.problems());
        // An answer that does not fit the store is not kept, and a retry of it writes again:
        // the store must hold the largest answer a request may have.
        let largest = idempotency::largest_answer(self.limits.max_records_per_request);
        if self.idempotency.max_bytes < largest {
            problems.push(ConfigProblem::new(
                "idempotency.max_bytes",
                format!(
                    "must hold the largest answer [limits] max_records_per_request = {} allows: at least {largest}",
                    self.limits.max_records_per_request
                ),
            ));
        }
        if !(1..=10_000).contains(&self.metrics.top_tenants) {
            problems.push(ConfigProblem::new(
                "metrics.top_tenants",
                "must be from 1 to 10000",
            ));
        }
        if self
            .metrics
            .token_env
            .as_deref()
            .is_some_and(|n| n.is_empty() || n.contains('='))
        {
            problems.push(ConfigProblem::new(
                "metrics.token_env",
                "must be an environment variable's name",
            ));
        }
    }

    /// `[adaptive]`, the schemas, `[[lag_guards]]`.
    fn protection_problems(&self, problems: &mut Vec<ConfigProblem>) {
        problems.extend(self.adaptive.problems(&self.global));
        problems.extend(self.wait.problems());
        problems.extend(self.schema_registry.problems(&self.schemas));
        if self.lag_guards.len() > MAX_LAG_GUARDS {
            problems.push(ConfigProblem::new(
                "lag_guards",
                format!("at most {MAX_LAG_GUARDS} lag guards"),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, g) in self.lag_guards.iter().enumerate() {
            problems.extend(g.problems(&format!("lag_guards[{i}]")));
            if !names.insert(g.name.as_str()) {
                problems.push(ConfigProblem::new(
                    format!("lag_guards[{i}].name"),
                    format!("{:?} is used by an earlier guard", g.name),
                ));
            }
        }
    }

    /// TLS, header and readiness bounds, trusted proxies.
    fn tls_and_proxies_problems(&self, problems: &mut Vec<ConfigProblem>) {
        let s = &self.server;
        if s.tls_cert_file.is_some() != s.tls_key_file.is_some() {
            problems.push(ConfigProblem::new(
                "server.tls_key_file",
                "tls_cert_file and tls_key_file are set together or not at all",
            ));
        }
        if s.tls_client_ca_file.is_some() && s.tls_cert_file.is_none() {
            problems.push(ConfigProblem::new(
                "server.tls_client_ca_file",
                "client certificates need TLS: set tls_cert_file and tls_key_file too",
            ));
        }
        // Requiring a certificate without a CA to verify it by would require nothing: the
        // listener asks for client certificates only with tls_client_ca_file.
        if s.require_client_cert == Some(true) && s.tls_client_ca_file.is_none() {
            problems.push(ConfigProblem::new(
                "server.require_client_cert",
                "true needs tls_client_ca_file (the CAs client certificates are verified by); \
                 set it, or set require_client_cert = false",
            ));
        }
        if s.max_header_bytes < 8192 && s.max_header_bytes > 0 {
            problems.push(ConfigProblem::new(
                "server.max_header_bytes",
                "must be at least 8192 (hyper's smallest read buffer)",
            ));
        }
        if !(self.buffer.ready_high_water > 0.0 && self.buffer.ready_high_water <= 1.0) {
            problems.push(ConfigProblem::new(
                "buffer.ready_high_water",
                "must be greater than 0 and at most 1",
            ));
        }
        if let Err((i, text)) = crate::forwarded::TrustedProxies::parse(
            &self.server.trusted_proxies,
            self.server.forwarded_header,
        ) {
            problems.push(ConfigProblem::new(
                format!("server.trusted_proxies[{i}]"),
                format!("{text:?} is not a CIDR block or an address"),
            ));
        }
    }

    /// `[kafka]` and `[global]`.
    fn kafka_and_global_problems(&self, problems: &mut Vec<ConfigProblem>) {
        for (i, pattern) in self.kafka.internal_topics.iter().enumerate() {
            if let Some(p) = crate::identity::topic_pattern_problem(pattern) {
                problems.push(ConfigProblem::new(format!("kafka.internal_topics[{i}]"), p));
            }
        }
        if self.kafka.bootstrap_servers.trim().is_empty() {
            problems.push(ConfigProblem::new(
                "kafka.bootstrap_servers",
                "must not be empty",
            ));
        }
        if let Err(p) = self.global.spec() {
            problems.push(p);
        }
        if self.cluster.counts_apart() && !self.global.quotas.is_empty() {
            problems.push(ConfigProblem::new("global.quotas", super::COUNTED_APART));
        }
        problems.extend(self.quotas.problems(self.cluster.redis_url.is_some()));
        problems.extend(self.usage.problems());
        problems.extend(librdkafka::problems(&self.kafka.producer));
    }

    /// `[auth]` and the tenants, each and together.
    fn tenants_problems(&self, problems: &mut Vec<ConfigProblem>) {
        problems.extend(self.auth.problems());
        let replicas = self.cluster.counts_apart();
        for (i, t) in self.tenants.iter().enumerate() {
            problems.extend(t.problems(&format!("tenants[{i}]")));
            if replicas && !t.quotas.is_empty() {
                problems.push(ConfigProblem::new(
                    format!("tenants[{i}].quotas"),
                    super::COUNTED_APART,
                ));
            }
            for (j, claim) in t.jwt_claims.iter().enumerate() {
                if !self.auth.has_issuer(&claim.issuer) {
                    problems.push(ConfigProblem::new(
                        format!("tenants[{i}].jwt_claims[{j}].issuer"),
                        "is not an issuer of [[auth.jwt]]",
                    ));
                }
            }
        }
        problems.extend(cross_tenant_problems(
            self.tenants
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("tenants[{i}]"), t)),
        ));
    }

    /// What is valid but probably not meant: printed by `check-config` and logged at start-up,
    /// never refused.
    pub fn warnings(&self) -> Vec<ConfigProblem> {
        let mut warnings = self.auth.warnings(self.server.tls_client_ca_file.is_some());
        warnings.extend(self.proxy_warnings());
        warnings.extend(wait::burst_warnings(&self.tenants, &self.wait));
        warnings
    }

    fn proxy_warnings(&self) -> Vec<ConfigProblem> {
        crate::forwarded::trusts_everyone(&self.server.trusted_proxies)
            .into_iter()
            .map(|i| {
                ConfigProblem::new(
                    format!("server.trusted_proxies[{i}]"),
                    format!(
                        "{:?} trusts every address: any client can name itself in {} and \
                         get a fresh allowance of failed authentications per name; list only \
                         your proxies",
                        self.server
                            .trusted_proxies
                            .get(i)
                            .map_or("", String::as_str),
                        match self.server.forwarded_header {
                            crate::forwarded::ForwardedHeader::XForwardedFor => "X-Forwarded-For",
                            crate::forwarded::ForwardedHeader::Forwarded => "Forwarded",
                        }
                    ),
                )
            })
            .collect()
    }
}
