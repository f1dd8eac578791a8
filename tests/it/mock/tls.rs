//! With a certificate configured, both listeners speak TLS and plain HTTP is refused.

use crate::common::*;
use rdkafka::mocking::MockCluster;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn https(addr: std::net::SocketAddr, request: String) -> String {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let mut tls = tls_connector(&[])
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    tls.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_listeners_serve_tls_when_configured() {
    let cluster = MockCluster::new(1).expect("mock");
    cluster.create_topic("test.tls", 1, 1).expect("topic");
    let mut cfg = config(&cluster.bootstrap_servers());
    cfg.server.tls_cert_file = Some(format!("{TLS_FIXTURES}/cert.pem").into());
    cfg.server.tls_key_file = Some(format!("{TLS_FIXTURES}/key.pem").into());
    let gw = Gateway::start(cfg).await;

    let body = r#"{"records":[{"value":"over tls"}]}"#;
    let answer = https(
        gw.addr,
        format!(
            "POST /v1/topics/test.tls/records HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"offsets\""), "{answer}");
    let health = https(
        gw.admin,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".into(),
    )
    .await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");

    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(gw.addr).await.expect("connect");
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        plain.read_to_end(&mut out),
    )
    .await;
    assert!(!String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    gw.shutdown().await;
}

#[test]
fn a_key_without_a_certificate_is_a_config_error() {
    let problems = floodgate::config::Config::from_toml_with_env(
        "[server]\ntls_key_file = \"/k.pem\"\n",
        Vec::new(),
    )
    .expect_err("invalid")
    .problems;
    assert_eq!(problems[0].key, "server.tls_key_file");
}
