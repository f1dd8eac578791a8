//! A small identity provider for the JWT tests, with real cryptography and real HTTP: signing
//! keys generated in the test (RSA 2048, EC P-256, Ed25519), tokens signed with them, and their
//! JWKS served by an HTTP server on loopback that counts its fetches and can be changed,
//! stopped and started again. (benches/auth.rs includes this file by path for its signer: it
//! uses nothing of the harness.)

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key and its public JWK.
pub struct Signer {
    pub kid: String,
    pub alg: Algorithm,
    key: EncodingKey,
    pub jwk: Value,
    /// The RSA public key as PEM text (what an HS256 "confusion" token is signed with).
    pub public_pem: Option<String>,
}

impl Signer {
    pub fn rsa(kid: &str) -> Self {
        use rsa::pkcs1::{EncodeRsaPrivateKey, EncodeRsaPublicKey};
        use rsa::traits::PublicKeyParts;
        let private =
            rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("RSA key generated");
        let der = private.to_pkcs1_der().expect("pkcs1 der");
        let public = private.to_public_key();
        Self {
            kid: kid.into(),
            alg: Algorithm::RS256,
            key: EncodingKey::from_rsa_der(der.as_bytes()),
            jwk: json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                "n": b64(&public.n().to_bytes_be()), "e": b64(&public.e().to_bytes_be())}),
            public_pem: Some(
                public
                    .to_pkcs1_pem(rsa::pkcs8::LineEnding::LF)
                    .expect("pem"),
            ),
        }
    }

    pub fn ec(kid: &str) -> Self {
        use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("EC key generated");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("EC key");
        let point = pair.public_key().as_ref(); // 0x04 || x || y
        Self {
            kid: kid.into(),
            alg: Algorithm::ES256,
            key: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                "x": b64(&point[1..33]), "y": b64(&point[33..65])}),
            public_pem: None,
        }
    }

    pub fn ed(kid: &str) -> Self {
        use ring::signature::{Ed25519KeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("Ed25519 key generated");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("Ed25519 key");
        Self {
            kid: kid.into(),
            alg: Algorithm::EdDSA,
            key: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
                "x": b64(pair.public_key().as_ref())}),
            public_pem: None,
        }
    }

    /// A token with these claims, signed with this key and naming its `kid`.
    pub fn sign(&self, claims: &Value) -> String {
        self.sign_as(&self.kid, claims)
    }

    /// Signed with this key but naming another `kid`.
    pub fn sign_as(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, claims, &self.key).expect("signed")
    }
}

/// A JWKS document of these keys.
pub fn jwks(signers: &[&Signer]) -> String {
    json!({"keys": signers.iter().map(|s| s.jwk.clone()).collect::<Vec<_>>()}).to_string()
}

/// An unsigned token (`alg: none`) naming `kid`.
pub fn unsigned(kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT", "kid": kid}).to_string();
    format!(
        "{}.{}.",
        b64(header.as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

/// An HS256 token whose HMAC secret is `secret` (an RSA public key, in the confusion attack).
pub fn hs256(kid: &str, secret: &[u8], claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret)).expect("signed")
}

/// `token` with its payload replaced by `claims` and its signature kept.
pub fn tampered(token: &str, claims: &Value) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    format!(
        "{}.{}.{}",
        parts[0],
        b64(claims.to_string().as_bytes()),
        parts[2]
    )
}

/// Serves one JWKS document on loopback (`GET /jwks`), with `Cache-Control: max-age=300`,
/// counting fetches.
pub struct JwksServer {
    pub addr: SocketAddr,
    doc: Arc<Mutex<String>>,
    fetches: Arc<AtomicU64>,
    /// While set, a fetch is counted and then never answered.
    hang: Arc<std::sync::atomic::AtomicBool>,
    /// While set, a fetch reads the document and is answered with it only once unset: a
    /// slow fetch that read the set before a change made meanwhile.
    paused: Arc<tokio::sync::watch::Sender<bool>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl JwksServer {
    pub async fn start(doc: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut server = Self {
            addr,
            doc: Arc::new(Mutex::new(doc)),
            fetches: Arc::new(AtomicU64::new(0)),
            hang: Arc::default(),
            paused: Arc::new(tokio::sync::watch::channel(false).0),
            stop: None,
            task: None,
        };
        server.serve(listener);
        server
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let (doc, fetches, hang) = (self.doc.clone(), self.fetches.clone(), self.hang.clone());
        let paused = self.paused.clone();
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (doc, fetches, hang) = (doc.clone(), fetches.clone(), hang.clone());
                let mut paused = paused.subscribe();
                async move {
                    let body = doc.lock().expect("doc").clone();
                    fetches.fetch_add(1, Ordering::SeqCst);
                    if hang.load(Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                    let _ = paused.wait_for(|p| !*p).await;
                    (
                        [
                            ("content-type", "application/json"),
                            ("cache-control", "public, max-age=300"),
                        ],
                        body,
                    )
                }
            }),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        self.stop = Some(stop);
        self.task = Some(tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        }));
    }

    pub fn url(&self) -> String {
        format!("http://{}/jwks", self.addr)
    }

    pub fn set(&self, doc: String) {
        *self.doc.lock().expect("doc") = doc;
    }

    /// Accept fetches but never answer them (`false`: answer again).
    pub fn hang(&self, hang: bool) {
        self.hang.store(hang, Ordering::SeqCst);
    }

    /// Answer fetches only once unpaused, each with the document it read when it came.
    pub fn pause(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::SeqCst)
    }

    /// Stops serving: the port refuses connections.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            // Graceful: open keep-alive connections are closed too.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
        }
    }
}
