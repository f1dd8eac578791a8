//! An issuer's signing keys (RFC 7517 JWK sets): parsed strictly, fetched with bounds, kept
//! while the JWKS server is away, refreshed on a schedule, refetched for an unknown `kid` at most
//! once per `min_refetch_s` — and once more per tenant for its own producers' addresses
//! ([`acquainted`]), so a stranger's forged `kid` cannot keep a rotated-in key refused.
//!
//! Each key is bound to the one algorithm its type allows when the set is read — RSA → RS256,
//! EC P-256 → ES256, OKP Ed25519 → EdDSA — and a token's `alg` must equal it. So a token can
//! never choose how a key is used (no RSA key used as an HMAC secret, no curve confusion), and
//! HMAC keys (`kty: oct`), encryption keys (`use: enc`) and other curves are skipped, counted,
//! never fatal: one odd key does not take an issuer's other keys down.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::budget::Clock;

mod acquainted;
mod document;
use acquainted::Acquainted;
pub use document::parse;

/// Most keys kept from one set (issuers publish a handful; the rest are ignored).
pub const MAX_KEYS: usize = 64;
/// Longest `kid` kept.
const MAX_KID_BYTES: usize = 256;

/// One verification key and the one algorithm it verifies.
pub struct VerifyKey {
    pub kid: Option<String>,
    pub alg: Algorithm,
    pub key: DecodingKey,
    /// SHA-256 of the key's parameters (its type, curve and public values): tells whether a
    /// later set still holds the very key a token was verified with, whatever its `kid`.
    pub id: [u8; 32],
}

impl std::fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish()
    }
}

/// The usable keys of one JWKS document.
#[derive(Debug, Default)]
pub struct KeySet {
    pub keys: Vec<VerifyKey>,
    /// Keys of the document that were skipped (unsupported type, curve or use, bad values).
    pub skipped: usize,
    /// The source's key-set generation this set is (see [`KeySource::generation`]): kept
    /// with the keys, so a reader gets both from one load. Read apart, a request could see
    /// the new keys with the old generation and its cached token be verified again.
    pub generation: u64,
}

/// What a token's header asks for: the key to verify it with.
#[derive(Debug)]
pub enum Lookup<'a> {
    Found(&'a VerifyKey),
    /// No key with this `kid` (or, without a `kid`, no key for the algorithm).
    Unknown,
    /// No `kid`, and several keys could verify: the token must say which.
    Ambiguous,
}

impl KeySet {
    pub fn find(&self, kid: Option<&str>, alg: Algorithm) -> Lookup<'_> {
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .find(|k| k.kid.as_deref() == Some(kid) && k.alg == alg)
                .map_or(Lookup::Unknown, Lookup::Found),
            None => {
                let mut candidates = self.keys.iter().filter(|k| k.alg == alg);
                match (candidates.next(), candidates.next()) {
                    (None, _) => Lookup::Unknown,
                    (Some(k), None) => Lookup::Found(k),
                    (Some(_), Some(_)) => Lookup::Ambiguous,
                }
            }
        }
    }

    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }
}

/// How long until the next scheduled fetch: the answer's `Cache-Control: max-age` within
/// `[min, max]`, or `max` without one.
pub fn next_refresh(cache_control: Option<&str>, min: Duration, max: Duration) -> Duration {
    let max_age = cache_control.and_then(|value| {
        value.split(',').find_map(|directive| {
            let (name, seconds) = directive.trim().split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("max-age") {
                return None;
            }
            seconds.trim().trim_matches('"').parse::<u64>().ok()
        })
    });
    match max_age {
        Some(s) => Duration::from_secs(s).clamp(min, max),
        None => max,
    }
}

/// Where the keys come from.
#[derive(Debug)]
enum Origin {
    Url {
        url: String,
        client: reqwest::Client,
        max_bytes: usize,
    },
    /// Read once at start-up: never refetched.
    File,
}

/// Who a refetch for an unknown `kid` is made for ([`KeySource::asker`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asker {
    /// A token from an address that verified as this tenant lately.
    Known(Arc<str>),
    Stranger,
}

/// Why a refetch did not happen or did not help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// A new set was read.
    Fresh,
    /// Not now: the last fetch was less than `min_refetch_s` ago (or the keys come from a file).
    Throttled,
    /// A fetch that began after this one was asked for, and ended while it waited, is this
    /// one's answer (its keys, or its failure: [`KeySource::last_failed`]).
    Joined,
    /// Only fetches that began before this one was asked for ended while it waited: their
    /// keys may predate the token's (the issuer may have published its key since they read
    /// the set), and the throttle allows no other fetch yet.
    JoinedEarlier,
    /// The fetch failed; the keys held before stay.
    Failed(String),
}

/// One issuer's keys, shared by every request.
#[derive(Debug)]
pub struct KeySource {
    origin: Origin,
    allowed: Vec<Algorithm>,
    keys: ArcSwap<KeySet>,
    last_digest: parking_lot::Mutex<[u8; 32]>,
    clock: Arc<dyn Clock>,
    min_refetch: Duration,
    refresh: Duration,
    /// One fetch at a time; a request that waited for it uses its result.
    fetching: tokio::sync::Mutex<()>,
    /// Clock reading (ns) of the last fetch attempt, and whether any attempt was made.
    last_attempt_ns: AtomicU64,
    attempted: AtomicBool,
    /// Whether the last attempt failed (an unknown `kid` then says the keys are unavailable,
    /// not that the token is bad).
    last_failed: AtomicBool,
    /// Fetch attempts and failures, for metrics and tests.
    pub fetches: AtomicU64,
    /// Fetches ended (bumped before the lock is let go): a request that waited for the lock
    /// sees whether one ended meanwhile.
    finished: AtomicU64,
    pub failures: AtomicU64,
    /// Addresses its tokens were verified from lately: their tenants' own refetch allowances.
    acquainted: Acquainted,
}

/// What builds a key source.
pub struct SourceSettings {
    pub allowed: Vec<Algorithm>,
    pub min_refetch: Duration,
    pub refresh: Duration,
    pub fetch_timeout: Duration,
    pub max_bytes: usize,
}

impl KeySource {
    /// Keys fetched from `url` (nothing is fetched until [`KeySource::fetch`] or a refetch).
    pub fn from_url(
        url: &str,
        settings: SourceSettings,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(settings.fetch_timeout)
            .connect_timeout(settings.fetch_timeout)
            // A JWKS URL is configured exactly: a redirect is a misconfiguration or an attack.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Self::new(
            Origin::Url {
                url: url.to_string(),
                client,
                max_bytes: settings.max_bytes,
            },
            KeySet::default(),
            settings,
            clock,
        ))
    }

    /// Keys read from a JWKS document once.
    pub fn from_document(
        bytes: &[u8],
        settings: SourceSettings,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        let set = parse(bytes, &settings.allowed)?;
        // Never refetched: a file with no key floodgate can use would refuse every token of
        // its issuer for as long as the process runs.
        if set.keys.is_empty() {
            return Err(format!(
                "has no usable key ({} skipped: HMAC secrets, other curves or algorithms than the issuer's)",
                set.skipped
            ));
        }
        Ok(Self::new(Origin::File, set, settings, clock))
    }

    fn new(origin: Origin, set: KeySet, s: SourceSettings, clock: Arc<dyn Clock>) -> Self {
        Self {
            origin,
            allowed: s.allowed,
            keys: ArcSwap::from_pointee(set),
            last_digest: parking_lot::Mutex::new([0; 32]),
            clock,
            min_refetch: s.min_refetch,
            refresh: s.refresh,
            fetching: tokio::sync::Mutex::new(()),
            last_attempt_ns: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            attempted: AtomicBool::new(false),
            last_failed: AtomicBool::new(false),
            fetches: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            acquainted: Acquainted::default(),
        }
    }

    /// The key set's generation: changes of the key set so far (a fetched document that
    /// differs from the last one by SHA-256 counts one). A token verified under an earlier
    /// generation is verified again on its next request, so a key the issuer withdrew stops
    /// admitting its cached tokens.
    pub fn generation(&self) -> u64 {
        self.keys.load().generation
    }

    pub fn keys(&self) -> arc_swap::Guard<Arc<KeySet>> {
        self.keys.load()
    }

    pub fn is_remote(&self) -> bool {
        matches!(self.origin, Origin::Url { .. })
    }

    /// Whether the keys held now include the one with this id (see [`VerifyKey::id`]).
    pub fn holds(&self, id: &[u8; 32]) -> bool {
        self.keys.load().keys.iter().any(|k| &k.id == id)
    }

    /// Whether the last fetch failed.
    pub fn last_failed(&self) -> bool {
        self.last_failed.load(Ordering::Acquire)
    }

    /// How long until the throttle allows the next fetch for a token from `asker` (zero: now).
    /// An unknown `kid` within that time may be a key the issuer rotated in since the last
    /// fetch: its client is told to come back then (503 `jwks_unavailable`), not that its
    /// token is bad.
    pub fn next_fetch_in(&self, asker: &Asker) -> Duration {
        if !self.attempted.load(Ordering::Acquire) {
            return Duration::ZERO;
        }
        let now = self.clock.now_ns();
        let since = now.saturating_sub(self.last_attempt_ns.load(Ordering::Acquire));
        let general = self.min_refetch.saturating_sub(Duration::from_nanos(since));
        match asker {
            Asker::Known(t) => general.min(self.acquainted.wait(t, now, self.min_refetch)),
            Asker::Stranger => general,
        }
    }

    /// Who asks for a refetch: the tenant the token's address verified as lately, if any.
    pub fn asker(&self, ip: Option<std::net::IpAddr>) -> Asker {
        let now = self.clock.now_ns();
        match ip.and_then(|ip| self.acquainted.tenant_of(ip, now)) {
            Some(t) => Asker::Known(t),
            None => Asker::Stranger,
        }
    }

    /// A token of this issuer was verified from `ip` as `tenant`.
    pub fn verified_from(&self, ip: Option<std::net::IpAddr>, tenant: &str) {
        if let Some(ip) = ip {
            self.acquainted.note(ip, tenant, self.clock.now_ns());
        }
    }

    /// Whether a fetch may start now.
    fn due(&self, now_ns: u64) -> bool {
        !self.attempted.load(Ordering::Acquire)
            || now_ns.saturating_sub(self.last_attempt_ns.load(Ordering::Acquire))
                >= u64::try_from(self.min_refetch.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Fetches the set again unless a fetch was made less than `min_refetch_s` ago. Waits for
    /// a fetch in progress instead of starting another (requests queue on one lock, each then
    /// sees the throttle: a flood makes one fetch, not one each); the keys held stay if it fails.
    /// Returns when the next scheduled refresh is due, with the outcome.
    pub async fn fetch(&self) -> (Fetched, Duration) {
        self.fetch_for(&Asker::Stranger).await
    }

    /// [`KeySource::fetch`] for an unknown `kid` of a token from `asker`: a known tenant's
    /// producers may fetch on its own allowance when the general one is spent.
    pub async fn fetch_for(&self, asker: &Asker) -> (Fetched, Duration) {
        let Origin::Url {
            url,
            client,
            max_bytes,
        } = &self.origin
        else {
            return (Fetched::Throttled, self.refresh);
        };
        // A fetch in progress is waited for (its keys may be the ones wanted); when none is,
        // the lock is free and this costs nothing. Whoever held it before us may have just
        // fetched: then the throttle says no and the caller looks at the new keys.
        let before = self.finished.load(Ordering::Acquire);
        let begun = self.fetches.load(Ordering::Acquire);
        let _one = self.fetching.lock().await;
        let now = self.clock.now_ns();
        // A fetch that ended while this one waited is this one's answer, due or not: a fetch
        // slower than `min_refetch_s` (a hanging server) would otherwise make every waiter
        // fetch again in turn, and the last of a queue wait one timeout per request before it.
        // Fetches run one at a time under the lock, so one begun since `begun` was read has
        // ended by now: it read the set after this request came.
        if self.finished.load(Ordering::Acquire) != before {
            let fetched = if self.fetches.load(Ordering::Acquire) != begun {
                Fetched::Joined
            } else {
                Fetched::JoinedEarlier
            };
            return (fetched, self.min_refetch);
        }
        if !self.due(now) {
            let Asker::Known(tenant) = asker else {
                return (Fetched::Throttled, self.min_refetch);
            };
            if !self
                .acquainted
                .wait(tenant, now, self.min_refetch)
                .is_zero()
            {
                return (Fetched::Throttled, self.min_refetch);
            }
            self.acquainted.fetched(tenant, now);
        }
        self.last_attempt_ns.store(now, Ordering::Release);
        self.attempted.store(true, Ordering::Release);
        self.fetches.fetch_add(1, Ordering::AcqRel);
        let outcome = self.fetch_now(client, url, *max_bytes).await;
        self.finished.fetch_add(1, Ordering::Release);
        outcome
    }

    /// One fetch, under the `fetching` lock.
    async fn fetch_now(
        &self,
        client: &reqwest::Client,
        url: &str,
        max_bytes: usize,
    ) -> (Fetched, Duration) {
        match read(client, url, max_bytes).await {
            Ok((bytes, cache_control)) => match parse(&bytes, &self.allowed) {
                // A set with no key floodgate can use (an empty list, every key of another
                // type) is an IdP's fault or an attacker's answer, never a rotation: keeping
                // the keys held beats refusing every producer until the next fetch.
                Ok(set) if set.keys.is_empty() => self.failed(
                    url,
                    format!("the JWKS has no usable key ({} skipped)", set.skipped),
                ),
                Ok(mut set) => {
                    use sha2::Digest as _;
                    let digest: [u8; 32] = sha2::Sha256::digest(&bytes).into();
                    let mut last = self.last_digest.lock();
                    if *last != digest {
                        // Fetches run one at a time (under `fetching`): nobody else stores.
                        set.generation = self.keys.load().generation + 1;
                        self.keys.store(Arc::new(set));
                        *last = digest;
                    }
                    drop(last);
                    self.last_failed.store(false, Ordering::Release);
                    let next =
                        next_refresh(cache_control.as_deref(), self.min_refetch, self.refresh);
                    (Fetched::Fresh, next)
                }
                Err(e) => self.failed(url, e),
            },
            Err(e) => self.failed(url, e),
        }
    }

    fn failed(&self, url: &str, error: String) -> (Fetched, Duration) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.last_failed.store(true, Ordering::Release);
        tracing::warn!(%url, %error, "JWKS fetch failed; the keys held stay in use");
        (Fetched::Failed(error), self.min_refetch)
    }

    /// Keeps the keys fresh: fetches now, then whenever the last answer says (within
    /// `min_refetch_s`..`refresh_s`), until the task is aborted.
    pub async fn refresh_forever(self: Arc<Self>) {
        if !self.is_remote() {
            return;
        }
        loop {
            let (_, next) = self.fetch().await;
            tokio::time::sleep(next).await;
        }
    }
}

/// GETs `url`: a 200 whose body is at most `max_bytes`, and its Cache-Control.
async fn read(
    client: &reqwest::Client,
    url: &str,
    max_bytes: usize,
) -> Result<(Vec<u8>, Option<String>), String> {
    let mut response = client
        .get(url)
        .header("accept", "application/json, application/jwk-set+json")
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(format!("answered {}", response.status().as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|n| n > max_bytes as u64)
    {
        return Err(format!("the JWKS is larger than {max_bytes} bytes"));
    }
    let cache_control = response
        .headers()
        .get(reqwest::header::CACHE_CONTROL)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading the body failed: {e}"))?
    {
        if body.len() + chunk.len() > max_bytes {
            return Err(format!("the JWKS is larger than {max_bytes} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, cache_control))
}

#[cfg(test)]
mod tests;
