//! `[server]` (listeners and connection-level bounds) and `[admin]`.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Listeners and connection-level bounds.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the produce listener.
    pub listen: SocketAddr,
    /// Address of the admin listener (admin API, metrics, health). Never the same as `listen`.
    pub admin_listen: SocketAddr,
    /// Largest request body accepted, in bytes; larger bodies get 413 before they are read.
    /// A `Content-Encoding` body is bounded twice: as sent, and as it inflates (413 the moment
    /// it inflates past this).
    pub max_body_bytes: u64,
    /// How many times its coded size a `Content-Encoding` body may inflate to: past the first
    /// 64 KiB, a body inflating further is refused with 413 while it inflates (a compression
    /// bomb). Counted for every layer of a stacked coding, against the bytes sent.
    pub max_inflation_ratio: u32,
    /// Connections served at once on each listener; further connections wait in the
    /// kernel's accept backlog. Start-up raises the process's soft descriptor limit to its
    /// hard limit and lowers this (with a warning) when `2 × max_connections + 256` still
    /// does not fit.
    pub max_connections: usize,
    /// Connections one client address may hold on the produce listener before one of its
    /// requests authenticates (silent ones included); more are closed at once. Trusted
    /// proxies are not counted.
    pub max_unauthenticated_per_address: usize,
    /// Bytes all connections of the produce listener may have sent before one of their
    /// requests authenticates (heads not finished, HTTP/2 header blocks not ended), together.
    /// Past it, a connection holding more than an equal share of it is closed when it sends
    /// more; each connection's own head is bounded by `max_header_bytes`. Trusted proxies
    /// are not counted.
    pub max_unauthenticated_bytes: u64,
    /// Connections one tenant may hold on the produce listener once authenticated (a
    /// connection counts against the tenant its first authenticated request names); a request
    /// that would bind one more is refused 429 and its connection closed.
    pub max_connections_per_tenant: usize,
    /// Time allowed for a new connection to finish its TLS handshake, show which HTTP version
    /// it speaks and send its first request head; and for every later HTTP/1 request head.
    /// In milliseconds.
    pub header_read_timeout_ms: u64,
    /// Time a connection may stay open with no request in flight (HTTP/1 keep-alive, an idle
    /// HTTP/2 session) before it is closed gracefully, in milliseconds.
    pub idle_timeout_ms: u64,
    /// HTTP/2 streams (concurrent requests) one connection may have open.
    pub http2_max_streams: u32,
    /// Request-body bytes held in memory at once, over all connections and HTTP/2 streams.
    /// A body holds what has arrived of it; one whose declared length does not fit in what
    /// is free now is refused before it is read, and one that outgrows what is free as it
    /// arrives is cut short, both with `429 server_busy` — unless its tenant holds less than
    /// an equal share of the budget: then the stalest large upload of the tenant holding the
    /// most is cut (`429 server_busy`) to make room for it.
    pub max_inflight_body_bytes: u64,
    /// Failed authentications (bad API keys, bad admin tokens) allowed per client address and
    /// second, after a burst of `auth_failures_burst`, counted for each listener on its own;
    /// beyond that, the address's failing requests are answered 429 instead of 401 until its
    /// allowance refills. A request with a valid key or token is never refused for them.
    pub auth_failures_per_sec: u32,
    /// The burst of `auth_failures_per_sec`: failed authentications one address may make at
    /// once.
    pub auth_failures_burst: u32,
    /// Reverse proxies and load balancers (CIDR blocks or addresses) whose `forwarded_header`
    /// says who the client is, so failed authentications are counted against the client, not
    /// the proxy. Empty (the default): the peer is the client and no header is read.
    pub trusted_proxies: Vec<String>,
    /// The one header the trusted proxies write the client's address into:
    /// `"x-forwarded-for"` (the default) or `"forwarded"` (RFC 7239). Only this header is read
    /// (from the right, past trusted hops); the other is ignored even when present, since a
    /// proxy passes a client's own copy of it through.
    pub forwarded_header: crate::forwarded::ForwardedHeader,
    /// Time allowed for a client to send its whole request body, in milliseconds
    /// (a slow upload is cut off with 408).
    pub body_read_timeout_ms: u64,
    /// Largest request head (request line plus headers), in bytes.
    pub max_header_bytes: usize,
    /// Time allowed for a graceful shutdown (drain requests, flush the producer), in milliseconds.
    pub shutdown_timeout_ms: u64,
    /// PEM certificate chain: with `tls_key_file`, both listeners speak TLS (HTTP/2 and 1.1).
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key for `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// PEM certificates of the CAs whose client certificates the produce listener verifies
    /// (mTLS): a verified certificate names its tenant (`[auth.client_cert]`). Needs
    /// `tls_cert_file`. The admin listener never asks for client certificates.
    pub tls_client_ca_file: Option<PathBuf>,
    /// With `tls_client_ca_file`: refuse connections without a client certificate in the
    /// handshake (true, the default), or accept them and authenticate their requests by API
    /// key or JWT (false). A certificate that is presented is always verified. `true` without
    /// `tls_client_ca_file` is refused: there would be no CA to verify a certificate by.
    pub require_client_cert: Option<bool>,
}

impl ServerConfig {
    /// Whether the produce listener refuses connections without a client certificate (with
    /// `tls_client_ca_file`; unset means true).
    pub fn requires_client_cert(&self) -> bool {
        self.require_client_cert.unwrap_or(true)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            max_body_bytes: 8 * 1024 * 1024,
            // Log records compress 5 to 20 times; 100 leaves room for very repetitive ones,
            // and a gzip bomb (1,000 times) is refused within its first 128 KiB inflated.
            max_inflation_ratio: 100,
            max_connections: 4096,
            max_unauthenticated_per_address: 128,
            max_unauthenticated_bytes: 16 * 1024 * 1024,
            max_connections_per_tenant: 1024,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            http2_max_streams: 32,
            trusted_proxies: Vec::new(),
            forwarded_header: crate::forwarded::ForwardedHeader::XForwardedFor,
            max_inflight_body_bytes: 64 * 1024 * 1024,
            auth_failures_per_sec: 10,
            auth_failures_burst: 100,
            body_read_timeout_ms: 30_000,
            max_header_bytes: 64 * 1024,
            shutdown_timeout_ms: 30_000,
            tls_cert_file: None,
            tls_key_file: None,
            tls_client_ca_file: None,
            require_client_cert: None,
        }
    }
}

/// Admin API settings.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Name of the environment variable that holds the admin bearer token (never the token);
    /// or `<name>_FILE` names a file holding it (a mounted Secret).
    pub token_env: String,
    /// Where the tenant registry is persisted; unset keeps admin changes in memory only.
    pub state_file: Option<PathBuf>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            token_env: "FLOODGATE_ADMIN_TOKEN".into(),
            state_file: None,
        }
    }
}
