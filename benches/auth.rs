//! The cost of authenticating one request (issue #32): an API key (one SHA-256 and a map
//! lookup) beside a JWT already verified once (one SHA-256 of the token and a cache hit), and a
//! token seen for the first time (parse, claims, one signature verification per algorithm).
//! `Authenticator::identify` is the whole of what differs between the credentials; the rest of
//! a request's path is the same for all of them.

#[path = "../tests/it/common/idp.rs"]
#[allow(dead_code)]
// the JWT tests' identity provider: this bench signs tokens with it, nothing more
mod idp;

use std::hint::black_box;
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use floodgate::budget::{Clock as _, MonotonicClock};
use floodgate::config::{AuthConfig, JwtIssuerConfig, TenantConfig};
use floodgate::credential::{Authenticator, Caller};
use floodgate::identity::ApiKeyHash;
use floodgate::tenant::{Directory, Tenants};
use idp::Signer;
use serde_json::json;

const KEY: &str = "bench-api-key-0123456789abcdef";

fn bearer(value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {value}")).expect("header"),
    );
    h
}

fn bench(c: &mut Criterion) {
    let signers = [Signer::rsa("rsa"), Signer::ec("ec"), Signer::ed("ed")];
    let file = tempfile::NamedTempFile::new().expect("file");
    std::fs::write(file.path(), idp::jwks(&signers.iter().collect::<Vec<_>>())).expect("jwks");
    let config = AuthConfig {
        jwt: vec![JwtIssuerConfig {
            issuer: "https://idp.bench".into(),
            audiences: vec!["floodgate".into()],
            jwks_url: None,
            jwks_file: Some(file.path().to_path_buf()),
            algorithms: vec!["RS256".into(), "ES256".into(), "EdDSA".into()],
            leeway_s: 30,
            refresh_s: 300,
            min_refetch_s: 30,
            fetch_timeout_ms: 1000,
            tenant_claim: "client_id".into(),
            map: None,
            topics_claim: None,
        }],
        ..AuthConfig::default()
    };
    let clock = Arc::new(MonotonicClock::new());
    let now = clock.unix_s();
    let auth = Authenticator::new(&config, clock.clone()).expect("authenticator");
    let tenants = Tenants::new(
        Directory::from_configs(&[TenantConfig {
            id: "acme".into(),
            api_key_sha256: vec![ApiKeyHash::of_key(KEY).to_hex()],
            topics: vec!["*".into()],
            ..TenantConfig::default()
        }])
        .expect("registry"),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let caller = Caller::default();
    let claims = |jti: u64| {
        json!({"iss": "https://idp.bench", "aud": "floodgate", "client_id": "acme",
               "iat": now, "nbf": now, "exp": now + 3600, "jti": jti,
               "scope": "produce", "sub": "service-account-orders"})
    };

    let key = bearer(KEY);
    c.bench_function("identify/api key", |b| {
        b.iter(|| {
            let who = rt.block_on(auth.identify(&tenants, &caller, black_box(&key)));
            black_box(who.is_ok())
        })
    });
    for signer in &signers {
        let token = bearer(&signer.sign(&claims(0)));
        assert!(rt
            .block_on(auth.identify(&tenants, &caller, &token))
            .is_ok());
        c.bench_function(&format!("identify/cached jwt ({:?})", signer.alg), |b| {
            b.iter(|| {
                let who = rt.block_on(auth.identify(&tenants, &caller, black_box(&token)));
                black_box(who.is_ok())
            })
        });
    }
    // First seen: a fresh token each time (signed outside the timing), so every one is parsed,
    // checked and its signature verified, then remembered.
    for signer in &signers {
        let mut jti = 1;
        c.bench_function(
            &format!("identify/first-seen jwt ({:?})", signer.alg),
            |b| {
                b.iter_batched(
                    || {
                        jti += 1;
                        bearer(&signer.sign(&claims(jti)))
                    },
                    |token| {
                        let who = rt.block_on(auth.identify(&tenants, &caller, &token));
                        assert!(who.is_ok());
                    },
                    BatchSize::SmallInput,
                )
            },
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
