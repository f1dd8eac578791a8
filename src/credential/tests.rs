//! The seam's decisions without sockets: which credential counts, how a claim or a certificate
//! name finds its tenant, and what a stream's re-check says as time and the registry move.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue};
use base64::Engine as _;
use serde_json::json;

use super::*;
use crate::budget::ManualClock;
use crate::config::{ClientCertConfig, JwtClaim, TenantConfig};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An Ed25519 key generated here, its JWKS in a file, and a signer.
struct Idp {
    key: jsonwebtoken::EncodingKey,
    file: tempfile::NamedTempFile,
}

impl Idp {
    fn new() -> Self {
        use ring::signature::{Ed25519KeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("key");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("key");
        let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k1",
            "x": b64(pair.public_key().as_ref())}]});
        let file = tempfile::NamedTempFile::new().expect("file");
        std::fs::write(file.path(), jwks.to_string()).expect("write");
        Self {
            key: jsonwebtoken::EncodingKey::from_ed_der(pkcs8.as_ref()),
            file,
        }
    }

    fn token(&self, client_id: &str, exp: u64) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        header.kid = Some("k1".into());
        let claims = json!({"iss": "https://idp", "aud": "fg", "client_id": client_id, "exp": exp});
        jsonwebtoken::encode(&header, &claims, &self.key).expect("signed")
    }
}

fn auth(idp: &Idp, map: Option<&[(&str, &str)]>, clock: Arc<ManualClock>) -> Authenticator {
    let config = AuthConfig {
        jwt: vec![JwtIssuerConfig {
            issuer: "https://idp".into(),
            audiences: vec!["fg".into()],
            jwks_url: None,
            jwks_file: Some(idp.file.path().to_path_buf()),
            algorithms: vec!["EdDSA".into()],
            leeway_s: 0,
            refresh_s: 300,
            min_refetch_s: 30,
            fetch_timeout_ms: 1000,
            tenant_claim: "client_id".into(),
            map: map.map(|m| {
                m.iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect()
            }),
            topics_claim: None,
        }],
        client_cert: ClientCertConfig {
            name: CertName::SanUri,
            map: None,
        },
        ..AuthConfig::default()
    };
    Authenticator::new(&config, clock).expect("authenticator")
}

fn tenant(id: &str, f: impl FnOnce(&mut TenantConfig)) -> TenantConfig {
    let mut t = TenantConfig {
        id: id.into(),
        api_key_sha256: vec![ApiKeyHash::of_key(&format!("{id}-key")).to_hex()],
        topics: vec!["t.*".into()],
        ..TenantConfig::default()
    };
    f(&mut t);
    t
}

fn tenants(configs: &[TenantConfig]) -> Tenants {
    Tenants::new(Directory::from_configs(configs).expect("valid"))
}

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
    );
    h
}

async fn who(a: &Authenticator, t: &Tenants, headers: &HeaderMap) -> Result<String, String> {
    a.identify(t, &Caller::default(), headers)
        .await
        .map(|i| i.tenant.id.to_string())
        .map_err(|e| e.code().to_string())
}

#[tokio::test]
async fn a_claim_finds_its_tenant_by_listing_then_map_then_id() {
    let idp = Idp::new();
    let clock = Arc::new(ManualClock::new());
    let exp = clock.unix_s() + 60;
    let listed = |t: &mut TenantConfig| {
        t.jwt_claims = vec![JwtClaim {
            issuer: "https://idp".into(),
            value: "svc-a".into(),
        }]
    };
    let reg = tenants(&[
        tenant("acme", listed),
        tenant("svc-b", |_| {}),
        tenant("beta", |_| {}),
    ]);
    // No map: a listing, else the value as a tenant id.
    let a = auth(&idp, None, clock.clone());
    assert_eq!(
        who(&a, &reg, &bearer(&idp.token("svc-a", exp))).await,
        Ok("acme".into())
    );
    assert_eq!(
        who(&a, &reg, &bearer(&idp.token("svc-b", exp))).await,
        Ok("svc-b".into())
    );
    assert_eq!(
        who(&a, &reg, &bearer(&idp.token("nobody", exp))).await,
        Err("unknown_tenant".into())
    );
    // A map replaces the id fallback: only listed or mapped values.
    let a = auth(&idp, Some(&[("svc-c", "beta")]), clock.clone());
    assert_eq!(
        who(&a, &reg, &bearer(&idp.token("svc-c", exp))).await,
        Ok("beta".into())
    );
    assert_eq!(
        who(&a, &reg, &bearer(&idp.token("svc-a", exp))).await,
        Ok("acme".into())
    );
    assert_eq!(
        who(&a, &reg, &bearer(&idp.token("svc-b", exp))).await,
        Err("unknown_tenant".into())
    );
    // API keys still work beside tokens, Bearer or Basic.
    assert_eq!(who(&a, &reg, &bearer("beta-key")).await, Ok("beta".into()));
    let mut basic = HeaderMap::new();
    let creds = base64::engine::general_purpose::STANDARD.encode("user:acme-key");
    basic.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Basic {creds}")).expect("header"),
    );
    assert_eq!(who(&a, &reg, &basic).await, Ok("acme".into()));
    assert_eq!(
        who(&a, &reg, &HeaderMap::new()).await,
        Err("unauthorized".into())
    );
    assert_eq!(
        who(&a, &reg, &bearer(&"x".repeat(100_000))).await,
        Err("unauthorized".into()),
        "a huge bearer value is neither hashed nor parsed"
    );
}

#[tokio::test]
async fn a_streams_token_stops_holding_at_exp_and_when_its_tenant_loses_it() {
    let idp = Idp::new();
    let clock = Arc::new(ManualClock::new());
    let exp = clock.unix_s() + 10;
    let reg = tenants(&[tenant("acme", |_| {})]);
    let a = auth(&idp, None, clock.clone());
    let identity = a
        .identify(&reg, &Caller::default(), &bearer(&idp.token("acme", exp)))
        .await
        .expect("valid");
    assert_eq!(a.still_valid(&reg.load(), &identity), Ok(()));
    // Deleted tenant: the token belongs to no tenant any more.
    let empty = Directory::from_configs::<TenantConfig>(&[]).expect("valid");
    assert_eq!(
        a.still_valid(&empty, &identity),
        Err(AuthError::UnknownTenant(Method::Jwt))
    );
    clock.advance_ms(10_000);
    assert_eq!(
        a.still_valid(&reg.load(), &identity),
        Err(AuthError::Token(TokenProblem::Expired))
    );
}

#[tokio::test]
async fn a_certificate_names_its_tenant_by_the_configured_kind_and_ends_at_not_after() {
    let idp = Idp::new();
    let clock = Arc::new(ManualClock::new());
    let now = i64::try_from(clock.unix_s()).expect("now");
    let listed =
        |t: &mut TenantConfig| t.cert_names = vec!["spiffe://mesh/ns/acme/sa/orders".into()];
    let reg = tenants(&[tenant("acme", listed), tenant("beta", |_| {})]);
    let a = auth(&idp, None, clock.clone());
    let cert = |uris: &[&str], cn: Option<&str>| Caller {
        ip: None,
        cert: Some(Arc::new(ClientCertificate {
            uris: uris.iter().map(|u| u.to_string()).collect(),
            dns: vec!["beta".into()],
            cn: cn.map(str::to_string),
            not_after_unix: now + 5,
        })),
        trust: None,
    };
    let id = |c: &Caller| {
        let (a, reg) = (&a, &reg);
        let c = c.clone();
        async move {
            a.identify(reg, &c, &HeaderMap::new())
                .await
                .map(|i| i.tenant.id.to_string())
                .map_err(|e| e.code())
        }
    };
    let orders = cert(
        &["spiffe://other", "spiffe://mesh/ns/acme/sa/orders"],
        Some("beta"),
    );
    assert_eq!(
        id(&orders).await,
        Ok("acme".into()),
        "the first name that belongs to one"
    );
    // SAN URI is the kind configured: the CN and DNS names are not looked at.
    assert_eq!(id(&cert(&[], Some("beta"))).await, Err("unknown_tenant"));
    // An Authorization header wins over the certificate.
    let with_key = a
        .identify(&reg, &orders, &bearer("beta-key"))
        .await
        .expect("key");
    assert_eq!(with_key.tenant.id.as_str(), "beta");
    clock.advance_ms(6_000);
    assert_eq!(id(&orders).await, Err("certificate_expired"));
}
