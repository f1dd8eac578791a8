//! mTLS on the produce listener with certificates made here (rcgen): a client certificate from
//! the trusted CA names its tenant; an untrusted or expired one is refused in the handshake; with
//! `require_client_cert = false` a connection without one falls back to API keys and JWTs.

use std::path::Path;

use crate::common::*;
use floodgate::config::{CertName, Config};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use serde_json::{json, Value};

const SPIFFE: &str = "spiffe://mesh.test/ns/acme/sa/orders";

struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = params.self_signed(&key).expect("CA").pem();
        Self { params, key, pem }
    }

    /// A certificate signed by this CA; its PEM and its key's PEM.
    fn issue(&self, params: CertificateParams) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).expect("signed");
        (cert.pem(), key.serialize_pem())
    }

    fn client(&self, uri: &str, valid: bool) -> reqwest::Identity {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "orders-producer");
        params.subject_alt_names = vec![SanType::URI(uri.try_into().expect("uri"))];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if !valid {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let (cert, key) = self.issue(params);
        reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).expect("identity")
    }
}

/// A gateway serving TLS with a server certificate from `ca`, verifying clients against it.
async fn gateway(ca: &Ca, dir: &Path, require: bool, topic: &str) -> (Cluster, Gateway) {
    let (cert, key) = ca.issue(CertificateParams::new(vec!["localhost".into()]).expect("params"));
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    let (cert, key, ca_file) = (
        write("server.pem", &cert),
        write("server.key", &key),
        write("ca.pem", &ca.pem),
    );
    gateway_on_mock(topic, Time::Real, move |c: &mut Config| {
        c.server.tls_cert_file = Some(cert);
        c.server.tls_key_file = Some(key);
        c.server.tls_client_ca_file = Some(ca_file);
        c.server.require_client_cert = Some(require);
        c.auth.client_cert.name = CertName::SanUri;
        c.tenants[0].cert_names = vec![SPIFFE.into()];
        c.tenants.push(tenant("other", "other-key", &["test.*"]));
    })
    .await
}

fn https(gw: &Gateway, ca: &Ca, identity: Option<reqwest::Identity>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("ca"))
        .resolve("localhost", gw.addr)
        .timeout(std::time::Duration::from_secs(10));
    if let Some(identity) = identity {
        builder = builder.identity(identity);
    }
    builder.build().expect("client")
}

async fn produce(
    client: &reqwest::Client,
    gw: &Gateway,
    topic: &str,
    key: Option<&str>,
) -> Result<(u16, Value), reqwest::Error> {
    let mut request = client
        .post(format!(
            "https://localhost:{}/v1/topics/{topic}/records",
            gw.addr.port()
        ))
        .json(&json!({"records": [{"value": "over mTLS"}]}));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

async fn admitted(gw: &Gateway, tenant: &str) -> u64 {
    // The admin listener speaks TLS too, without asking for a client certificate.
    let body: Value = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .expect("client")
        .get(format!("https://{}/admin/tenants/{tenant}", gw.admin))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("admin")
        .json()
        .await
        .expect("json");
    body["live"]["admitted"]["requests"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_client_certificate_names_its_tenant_and_others_are_refused_in_the_handshake() {
    let ca = Ca::new("mesh CA");
    let dir = tempfile::tempdir().expect("dir");
    let topic = "test.mtls.required";
    let (cluster, gw) = gateway(&ca, dir.path(), true, topic).await;

    let trusted = https(&gw, &ca, Some(ca.client(SPIFFE, true)));
    let (status, body) = produce(&trusted, &gw, topic, None)
        .await
        .expect("handshake");
    assert_eq!(status, 200, "{body}");
    assert_eq!(admitted(&gw, "acme").await, 1);

    // A certificate from a CA the gateway does not trust, an expired one, and none at all.
    let rogue = Ca::new("rogue CA");
    for (what, identity) in [
        ("untrusted", Some(rogue.client(SPIFFE, true))),
        ("expired", Some(ca.client(SPIFFE, false))),
        ("none", None),
    ] {
        let client = https(&gw, &ca, identity);
        let result = produce(&client, &gw, topic, Some(KEY)).await;
        assert!(result.is_err(), "{what}: {result:?}");
    }

    // Trusted, but its name belongs to no tenant: 403.
    let stranger = https(
        &gw,
        &ca,
        Some(ca.client("spiffe://mesh.test/ns/x/sa/y", true)),
    );
    let (status, body) = produce(&stranger, &gw, topic, None)
        .await
        .expect("handshake");
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("unknown_tenant")),
        "{body}"
    );

    assert_eq!(
        read_back(&cluster.bootstrap_servers(), topic, 1, 1).len(),
        1
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_require_client_cert_a_connection_without_one_falls_back_to_keys() {
    let ca = Ca::new("mesh CA");
    let dir = tempfile::tempdir().expect("dir");
    let topic = "test.mtls.optional";
    let (_cluster, gw) = gateway(&ca, dir.path(), false, topic).await;

    let anonymous = https(&gw, &ca, None);
    let (status, body) = produce(&anonymous, &gw, topic, Some("other-key"))
        .await
        .expect("tls");
    assert_eq!(status, 200, "{body}");
    let (status, body) = produce(&anonymous, &gw, topic, None).await.expect("tls");
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    // A presented certificate is still verified, and names its tenant.
    let trusted = https(&gw, &ca, Some(ca.client(SPIFFE, true)));
    assert_eq!(
        produce(&trusted, &gw, topic, None).await.expect("tls").0,
        200
    );
    let rogue = Ca::new("rogue CA");
    let untrusted = https(&gw, &ca, Some(rogue.client(SPIFFE, true)));
    assert!(produce(&untrusted, &gw, topic, None).await.is_err());
    assert_eq!(admitted(&gw, "acme").await, 1);
    assert_eq!(admitted(&gw, "other").await, 1);
    gw.shutdown().await;
}
