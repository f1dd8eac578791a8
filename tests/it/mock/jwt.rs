//! JWT bearer tokens end to end, with real cryptography and real HTTP: keys generated here
//! (RSA, EC P-256, Ed25519), their JWKS served by an HTTP server on loopback, tokens signed
//! here, a gateway on librdkafka's mock cluster whose clock the test steps (exp, nbf, the
//! refetch throttle and the cache's expiry follow it; nothing sleeps to wait).

use crate::common::exposition::{scrape, value};
use crate::common::idp::{JwksServer, Signer};
use crate::common::*;
use floodgate::budget::Clock as _;
use floodgate::config::{Config, JwtClaim, JwtIssuerConfig};
use serde_json::{json, Value};

const ISSUER: &str = "https://idp.test/realms/prod";
const AUDIENCE: &str = "floodgate";

fn issuer(url: &str) -> JwtIssuerConfig {
    JwtIssuerConfig {
        issuer: ISSUER.into(),
        audiences: vec![AUDIENCE.into()],
        jwks_url: Some(url.into()),
        jwks_file: None,
        algorithms: vec!["RS256".into(), "ES256".into(), "EdDSA".into()],
        leeway_s: 30,
        refresh_s: 300,
        min_refetch_s: 60,
        fetch_timeout_ms: 2_000,
        tenant_claim: "client_id".into(),
        // The IdP's client ids, mapped to tenants.
        map: Some([("orders-svc".to_string(), "acme".to_string())].into()),
        topics_claim: Some("topics".into()),
    }
}

fn with_issuer(url: String) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        c.auth.jwt = vec![issuer(&url)];
        c.tenants.push(tenant("other", "other-key", &["test.*"]));
    }
}

/// Claims valid now on the gateway's clock for `client_id`, expiring in ten minutes.
fn claims(gw: &Gateway, client_id: &str) -> Value {
    let now = gw.clock.as_ref().expect("manual clock").unix_s();
    json!({"iss": ISSUER, "aud": AUDIENCE, "client_id": client_id,
           "iat": now, "nbf": now, "exp": now + 600})
}

/// A JWKS server with `signers`' keys, and a gateway on the mock cluster (on a clock the test
/// steps) trusting it as [`ISSUER`], configured by `edit` after that.
async fn behind_idp(
    topic: &str,
    signers: &[&Signer],
    edit: impl FnOnce(&mut Config),
) -> (JwksServer, Cluster, Gateway) {
    let idp = JwksServer::start(idp::jwks(signers)).await;
    let url = idp.url();
    let (cluster, gw) = gateway_on_mock(topic, Time::Manual, move |c: &mut Config| {
        with_issuer(url)(c);
        edit(c);
    })
    .await;
    (idp, cluster, gw)
}

async fn post(gw: &Gateway, topic: &str, token: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    post_json(
        &gw.url(topic),
        token,
        &json!({"records": [{"value": {"n": 1}}]}),
    )
    .await
}

/// A token for "orders-svc" (acme's client), valid now, signed by `signer` under `kid` (its
/// own when `None`).
fn orders_token(gw: &Gateway, signer: &Signer, kid: Option<&str>) -> String {
    let c = claims(gw, "orders-svc");
    match kid {
        Some(kid) => signer.sign_as(kid, &c),
        None => signer.sign(&c),
    }
}

/// The status of a produce with a fresh "orders-svc" token from `signer` (see
/// [`orders_token`]).
async fn produce_as(gw: &Gateway, topic: &str, signer: &Signer, kid: Option<&str>) -> u16 {
    post(gw, topic, &orders_token(gw, signer, kid)).await.0
}

/// A produce with `token` that must be admitted; `what` says which.
async fn assert_admitted(gw: &Gateway, topic: &str, token: &str, what: &str) {
    let (status, _, body) = post(gw, topic, token).await;
    assert_eq!(status, 200, "{what}: {body}");
}

/// A produce with `token` that must be refused with `status` and the error `code` (in
/// `error`, or in `reason` for a 429); `what` says which.
async fn assert_refused(
    gw: &Gateway,
    topic: &str,
    token: &str,
    status: u16,
    code: &str,
    what: &str,
) {
    let (got, _, body) = post(gw, topic, token).await;
    let field = if status == 429 { "reason" } else { "error" };
    assert_eq!(
        (got, body[field].as_str()),
        (status, Some(code)),
        "{what}: {body}"
    );
}

/// A Confluent v2 produce of one record with `token`: the raw answer.
async fn post_v2(gw: &Gateway, topic: &str, token: &str, body: &str) -> (u16, String) {
    let content_type = ("content-type", "application/vnd.kafka.json.v2+json");
    let url = format!("http://{}/topics/{topic}", gw.addr);
    let (status, _, text) = post_text(&url, token, &[content_type], body.to_string()).await;
    (status, text)
}

/// Addresses no token was verified from (until a test verifies one from it): their unknown
/// kids refetch on the general allowance only (the tests' producers send from 127.0.0.1).
const STRANGER: [u8; 4] = [127, 0, 0, 77];
const ANOTHER_STRANGER: [u8; 4] = [127, 0, 0, 78];

/// [`post`] to `url` from the loopback address `from`.
async fn post_from(
    url: &str,
    token: &str,
    from: [u8; 4],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let client = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(from))
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("client");
    let response = client
        .post(url)
        .bearer_auth(token)
        .json(&json!({"records": [{"value": {"n": 1}}]}))
        .send()
        .await
        .expect("sent");
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let body = response.json().await.expect("a JSON answer");
    (status, headers, body)
}

/// A produce with `token` from a stranger's address ([`ANOTHER_STRANGER`]), sent from a task
/// of its own (concurrent ones share a fetch): its status, error code and `Retry-After`.
fn spawn_post(
    gw: &Gateway,
    topic: &str,
    token: String,
) -> tokio::task::JoinHandle<(u16, Option<String>, Option<String>)> {
    let url = gw.url(topic);
    tokio::spawn(async move {
        let (status, headers, body) = post_from(&url, &token, ANOTHER_STRANGER).await;
        let wait = headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        (status, body["error"].as_str().map(str::to_string), wait)
    })
}

/// The series `name` in a scrape of `gw`, which must be there.
async fn series(gw: &Gateway, name: &str) -> f64 {
    let text = scrape(gw).await;
    value(&text, name).unwrap_or_else(|| panic!("{name} in {text}"))
}

/// The count of signature checks so far.
async fn verifications(gw: &Gateway) -> f64 {
    series(gw, "floodgate_jwt_verifications_total").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_tokens_of_each_algorithm_are_admitted_and_charged_to_the_mapped_tenant() {
    let (rsa, ec, ed) = (Signer::rsa("rsa-1"), Signer::ec("ec-1"), Signer::ed("ed-1"));
    let topic = "test.jwt.valid";
    let (_idp, cluster, gw) = behind_idp(topic, &[&rsa, &ec, &ed], |_| {}).await;

    for signer in [&rsa, &ec, &ed] {
        let (status, _, body) = post(&gw, topic, &orders_token(&gw, signer, None)).await;
        assert_eq!(status, 200, "{:?}: {body}", signer.alg);
    }
    // The same token on Confluent's v2 and v3 routes: one seam for every wire format.
    let token = orders_token(&gw, &rsa, None);
    let (v2_status, v2_body) =
        post_v2(&gw, topic, &token, r#"{"records":[{"value":{"n":2}}]}"#).await;
    assert_eq!(v2_status, 200, "{v2_body}");
    let (v3_status, _, v3_body) = post_text(
        &format!(
            "http://{}/v3/clusters/lkc-floodgate/topics/{topic}/records",
            gw.addr
        ),
        &token,
        &[("content-type", "application/json")],
        r#"{"value":{"type":"JSON","data":{"n":3}}}"#,
    )
    .await;
    assert_eq!(v3_status, 200, "{v3_body}");
    assert!(v3_body.contains("\"error_code\":200"), "{v3_body}");

    assert_eq!(admitted_requests(&gw, "acme").await, 5);
    assert_eq!(admitted_requests(&gw, "other").await, 0);
    let records = read_back(&cluster.bootstrap_servers(), topic, 1, 5);
    assert_eq!(records.len(), 5);

    let metrics = scrape(&gw).await;
    assert!(
        metrics.contains(r#"floodgate_authentications_total{method="jwt",outcome="ok"} 5"#),
        "{metrics}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_with_a_clear_code_and_nothing_is_written() {
    let rsa = Signer::rsa("rsa-1");
    let topic = "test.jwt.bad";
    let (_idp, cluster, gw) = behind_idp(topic, &[&rsa], |_| {}).await;
    let valid = claims(&gw, "orders-svc");
    let now = valid["iat"].as_u64().expect("now");
    let with = |field: &str, value: Value| {
        let mut c = valid.clone();
        c[field] = value;
        c
    };
    let attacker = Signer::rsa("rsa-1"); // same kid, another key
    let pem = rsa.public_pem.clone().expect("pem");
    let cases: Vec<(&str, String, u16, &str)> = vec![
        // Past exp + leeway (30 s).
        (
            "expired",
            rsa.sign(&with("exp", json!(now - 31))),
            401,
            "token_expired",
        ),
        (
            "not yet valid",
            rsa.sign(&with("nbf", json!(now + 31))),
            401,
            "token_not_yet_valid",
        ),
        (
            "wrong audience",
            rsa.sign(&with("aud", json!("someone-else"))),
            401,
            "token_audience",
        ),
        (
            "wrong issuer",
            rsa.sign(&with("iss", json!("https://evil.test"))),
            401,
            "token_issuer",
        ),
        (
            "alg none",
            idp::unsigned("rsa-1", &valid),
            401,
            "token_algorithm",
        ),
        (
            "HS256 with the public key",
            idp::hs256("rsa-1", pem.as_bytes(), &valid),
            401,
            "token_algorithm",
        ),
        (
            "another key, same kid",
            attacker.sign(&valid),
            401,
            "token_signature",
        ),
        (
            "tampered payload",
            idp::tampered(&rsa.sign(&valid), &with("client_id", json!("other"))),
            401,
            "token_signature",
        ),
        (
            "no exp",
            rsa.sign(&json!({"iss": ISSUER, "aud": AUDIENCE, "client_id": "orders-svc"})),
            401,
            "token_claims",
        ),
        (
            "no tenant claim",
            rsa.sign(&with("client_id", json!(null))),
            401,
            "token_claims",
        ),
        // Within min_refetch_s of the start-up fetch: a key the issuer may have rotated in
        // since, so not a bad token (a kid still unknown after a fetch is 401
        // token_key_unknown: see the rotation test).
        (
            "unknown kid",
            rsa.sign_as("rsa-9", &valid),
            503,
            "jwks_unavailable",
        ),
        ("not a JWT", "a.b.c".to_string(), 401, "token_malformed"),
        (
            "valid, but no tenant",
            rsa.sign(&with("client_id", json!("stranger"))),
            403,
            "unknown_tenant",
        ),
    ];
    for (what, token, status, code) in &cases {
        let (got, headers, body) = post(&gw, topic, token).await;
        assert_eq!(
            (got, body["error"].as_str()),
            (*status, Some(*code)),
            "{what}: {body}"
        );
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(!detail.is_empty(), "{what}: a detail names the problem");
        assert!(
            !detail.contains(token.as_str()),
            "{what}: the token is never echoed"
        );
        if *status == 401 && code.starts_with("token_") {
            assert_eq!(
                headers["www-authenticate"], r#"Bearer error="invalid_token""#,
                "{what}"
            );
        }
    }
    // Confluent's shapes say the same code in their message.
    let (status, text) = post_v2(&gw, topic, &cases[0].1, r#"{"records":[{"value":1}]}"#).await;
    assert_eq!(status, 401);
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["error_code"], 40101);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("token_expired:"),
        "{body}"
    );

    // Nothing was written: the only record in the topic is the valid one sent last.
    let (status, _, _) = post(&gw, topic, &rsa.sign(&valid)).await;
    assert_eq!(status, 200);
    assert_eq!(
        read_back(&cluster.bootstrap_servers(), topic, 1, 1).len(),
        1
    );
    assert_eq!(admitted_requests(&gw, "acme").await, 1);
    assert_eq!(
        admitted_requests(&gw, "other").await,
        0,
        "the tampered client_id got nothing"
    );
    gw.shutdown().await;
}

/// A key the IdP rotates in within `min_refetch_s` of the last fetch: its tokens may be valid,
/// so they get 503 `jwks_unavailable` with `Retry-After` saying when the next fetch is allowed
/// (not 401), and that fetch admits them. A flood of forged kids still makes at most one fetch
/// per `min_refetch_s`: the JWKS server counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_fetched_once_and_a_flood_of_unknown_kids_refetches_at_most_once_per_min_refetch(
) {
    let (old, new) = (Signer::ec("2026-01"), Signer::ed("2026-02"));
    let topic = "test.jwt.rotation";
    let (idp, _cluster, gw) = behind_idp(topic, &[&old], |_| {}).await;
    assert_admitted(&gw, topic, &orders_token(&gw, &old, None), "old key").await;
    assert_eq!(idp.fetches(), 1, "the start-up fetch");

    // The IdP rotates a new key in. Within min_refetch_s (60 s) of the last fetch, a token
    // with its kid from an address no token was verified from is told to come back when the
    // next fetch is allowed (no fetch now).
    idp.set(idp::jwks(&[&old, &new]));
    gw.advance_ms(45_000);
    let rotated = orders_token(&gw, &new, None);
    let (status, headers, body) = post_from(&gw.url(topic), &rotated, STRANGER).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("jwks_unavailable")),
        "{body}"
    );
    assert_eq!(
        headers["retry-after"], "15",
        "the next fetch is allowed in 15 s"
    );
    assert!(
        headers.get("www-authenticate").is_none(),
        "not a bad credential"
    );
    assert_eq!(idp.fetches(), 1, "throttled");
    // A client that honours Retry-After is admitted, after one refetch.
    gw.advance_ms(15_000);
    let (status, _, body) = post_from(&gw.url(topic), &rotated, STRANGER).await;
    assert_eq!(status, 200, "after Retry-After: {body}");
    assert_eq!(idp.fetches(), 2, "one refetch");

    // A flood of tokens naming kids nobody has, concurrently: no refetch until min_refetch_s
    // has passed, then exactly one more, however many arrive. Within the window each is 503
    // with the wait; the ones that made (or waited for) the round's fetch are 401: the set
    // was just read and has no such key.
    for round in 0..3 {
        let floods: Vec<_> = (0..40)
            .map(|i| {
                let kid = format!("bogus-{round}-{i}");
                spawn_post(&gw, topic, orders_token(&gw, &old, Some(&kid)))
            })
            .collect();
        let mut unknown = 0;
        for f in floods {
            let (status, code, wait) = f.await.expect("task");
            let wait = wait.map(|w| w.parse::<u64>().unwrap_or_else(|_| panic!("{w}")));
            match (status, code, wait) {
                (401, Some(code), None) if code == "token_key_unknown" => unknown += 1,
                (503, Some(code), Some(wait)) if code == "jwks_unavailable" => {
                    assert!((1..=60).contains(&wait), "{wait}");
                }
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(idp.fetches(), 2 + round, "round {round}");
        if round == 0 {
            assert_eq!(unknown, 0, "no fetch made: every one is told to come back");
        } else {
            assert!(unknown >= 1, "the fetching request hears 401");
        }
        gw.advance_ms(60_000);
    }
    gw.shutdown().await;
}

/// Review 41-r9 of #37: one forged token a throttle period (public `iss` and `aud`, an invented
/// `kid`) from anywhere spent the refetch a rotation needs, and every rotated-in key was
/// refused 503 for up to `min_refetch_s`. A token from an address that verified as a tenant
/// lately refetches on that tenant's own allowance, which strangers cannot spend; each
/// allowance still makes at most one fetch per period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_forged_kid_does_not_keep_a_producers_rotated_key_out() {
    let (old, new) = (Signer::ec("2026-01"), Signer::ed("2026-02"));
    let topic = "test.jwt.forged-kid";
    let (idp, _cluster, gw) = behind_idp(topic, &[&old], |_| {}).await;
    // acme's producer verified a token from 127.0.0.1: that address is acme's.
    assert_admitted(&gw, topic, &orders_token(&gw, &old, None), "old key").await;
    gw.advance_ms(60_000);
    let url = gw.url(topic);
    // A stranger's forged kid spends the general refetch (the set has no such key: 401).
    let forged = orders_token(&gw, &old, Some("forged-1"));
    let (status, _, body) = post_from(&url, &forged, STRANGER).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("token_key_unknown")),
        "{body}"
    );
    assert_eq!(idp.fetches(), 2);
    // The IdP rotates a key in; the producer's first token with it is admitted at once, on
    // acme's own allowance (before: 503 until the stranger's period ended).
    idp.set(idp::jwks(&[&old, &new]));
    gw.advance_ms(1_000);
    assert_admitted(&gw, topic, &orders_token(&gw, &new, None), "rotated key").await;
    assert_eq!(idp.fetches(), 3, "one refetch for the producer");
    // Within the period, neither another stranger's kid nor another of acme's fetches again.
    let again = orders_token(&gw, &old, Some("forged-2"));
    let (status, _, body) = post_from(&url, &again, STRANGER).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("jwks_unavailable")),
        "{body}"
    );
    let (status, _, body) = post(&gw, topic, &orders_token(&gw, &old, Some("forged-3"))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("jwks_unavailable")),
        "{body}"
    );
    assert_eq!(
        idp.fetches(),
        3,
        "each allowance fetched once in the period"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_jwks_server_down_cached_keys_keep_working() {
    let rsa = Signer::rsa("rsa-1");
    let topic = "test.jwt.down";
    let (mut idp, _cluster, gw) = behind_idp(topic, &[&rsa], |_| {}).await;
    assert_eq!(produce_as(&gw, topic, &rsa, None).await, 200);
    idp.stop().await;
    gw.advance_ms(120_000);
    // A token never seen before (so verified now) with a key held from before the outage.
    assert_admitted(&gw, topic, &orders_token(&gw, &rsa, None), "held key").await;
    // A kid the held keys lack: the refetch fails, so the gateway cannot tell — 503, not 401.
    let (status, headers, body) = post(&gw, topic, &orders_token(&gw, &rsa, Some("rsa-2"))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("jwks_unavailable")),
        "{body}"
    );
    assert!(headers.contains_key("retry-after"));
    // Confluent's shape: its own code, not the Idempotency-Key store's 50303.
    let token = orders_token(&gw, &rsa, Some("rsa-3"));
    let (status, text) = post_v2(&gw, topic, &token, r#"{"records":[{"value":1}]}"#).await;
    assert_eq!(status, 503);
    let body: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["error_code"], 50304, "{body}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_producer_pays_one_verification_and_its_token_ends_at_exp() {
    let ed = Signer::ed("ed-1");
    let topic = "test.jwt.cache";
    let (_idp, _cluster, gw) = behind_idp(topic, &[&ed], |_| {}).await;
    let token = orders_token(&gw, &ed, None);
    for _ in 0..20 {
        assert_admitted(&gw, topic, &token, "steady").await;
    }
    let metrics = scrape(&gw).await;
    assert!(
        metrics.contains("floodgate_jwt_verifications_total 1\n"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("floodgate_jw"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // exp is 600 s away, leeway 30 s: accepted at 629 s, refused from 630 s, from the cache.
    gw.advance_ms(629_000);
    assert_eq!(post(&gw, topic, &token).await.0, 200);
    gw.advance_ms(1_000);
    assert_refused(&gw, topic, &token, 401, "token_expired", "expired").await;
    assert!(scrape(&gw)
        .await
        .contains("floodgate_jwt_verifications_total 1\n"));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topics_claim_only_narrows_the_tenants_patterns() {
    let rsa = Signer::rsa("rsa-1");
    let idp = JwksServer::start(idp::jwks(&[&rsa])).await;
    let cluster = mock_cluster(&["test.a", "test.b", "other.a"]);
    let mut cfg = config(&cluster.bootstrap_servers());
    with_issuer(idp.url())(&mut cfg);
    let gw = Gateway::start_manual(cfg).await;
    let mut c = claims(&gw, "orders-svc");
    c["topics"] = json!(["test.a", "other.*"]);
    let token = rsa.sign(&c);
    assert_eq!(post(&gw, "test.a", &token).await.0, 200);
    // Outside the token's list, though the tenant may write it.
    assert_refused(&gw, "test.b", &token, 403, "forbidden_topic", "test.b").await;
    // Inside the token's list, but not the tenant's: a token never widens.
    assert_refused(&gw, "other.a", &token, 403, "forbidden_topic", "other.a").await;
    // Without the claim: the tenant's own patterns.
    assert_eq!(produce_as(&gw, "test.b", &rsa, None).await, 200);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claims_a_tenant_accepts_go_through_the_registry_like_keys() {
    let ec = Signer::ec("ec-1");
    let topic = "test.jwt.registry";
    let (_idp, _cluster, gw) = behind_idp(topic, &[&ec], |_| {}).await;
    let token = ec.sign(&claims(&gw, "billing-svc"));
    assert_refused(
        &gw,
        topic,
        &token,
        403,
        "unknown_tenant",
        "no tenant's claim",
    )
    .await;

    // The admin API gives tenant "other" the claim: the same (cached) token now belongs to it.
    let billing = json!({"topics": ["test.*"],
                         "jwt_claims": [{"issuer": ISSUER, "value": "billing-svc"}]});
    let (status, put) = admin_put(&gw, "/admin/tenants/other", billing.clone()).await;
    assert!((200..300).contains(&status), "{put}");
    let (_, view) = admin_get(&gw, "/admin/tenants/other").await;
    assert_eq!(
        view["jwt_claims"],
        json!([JwtClaim {
            issuer: ISSUER.into(),
            value: "billing-svc".into()
        }])
    );
    assert_admitted(&gw, topic, &token, "claim given").await;
    assert_eq!(admitted_requests(&gw, "other").await, 1);

    // Two tenants cannot hold the same claim.
    let (status, clash) = admin_put(&gw, "/admin/tenants/acme", billing).await;
    assert_eq!(status, 422, "{clash}");

    // A PATCH replaces the list like any field: the old client's token no longer belongs.
    let claims_v2 = json!({"jwt_claims": [{"issuer": ISSUER, "value": "billing-v2"}]});
    let (status, patch) = admin_patch(&gw, "/admin/tenants/other", claims_v2).await;
    assert_eq!(status, 200, "{patch}");
    assert_refused(&gw, topic, &token, 403, "unknown_tenant", "claim replaced").await;
    let v2 = ec.sign(&claims(&gw, "billing-v2"));
    assert_eq!(post(&gw, topic, &v2).await.0, 200);
    gw.shutdown().await;
}

/// Every fetch from here on needs a kid the gateway has not seen: a fresh token naming one.
async fn refetch(gw: &Gateway, topic: &str, signer: &Signer, kid: &str) -> (u16, Value) {
    gw.advance_ms(60_000);
    let (status, _, body) = post(gw, topic, &orders_token(gw, signer, Some(kid))).await;
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_answering_garbage_nothing_usable_too_much_or_never_keeps_the_held_keys() {
    let rsa = Signer::rsa("rsa-1");
    let topic = "test.jwt.hostile-idp";
    let (idp, _cluster, gw) = behind_idp(topic, &[&rsa], |c| {
        c.auth.jwt[0].fetch_timeout_ms = 300;
    })
    .await;
    assert_eq!(produce_as(&gw, topic, &rsa, None).await, 200);
    let held = idp.fetches();

    let huge = format!(
        r#"{{"keys":[],"pad":"{}"}}"#,
        "x".repeat(2 * 256 * 1024) // twice auth.jwks_max_bytes
    );
    let answers = [
        ("garbage", "<html>503 upstream</html>".to_string()),
        ("not a set", r#"{"keys":{"kty":"RSA"}}"#.to_string()),
        ("an empty set", r#"{"keys":[]}"#.to_string()),
        (
            "only keys floodgate never uses",
            r#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"rsa-1"}]}"#.to_string(),
        ),
        ("too large", huge),
    ];
    for (round, (what, answer)) in answers.into_iter().enumerate() {
        idp.set(answer);
        let (status, body) = refetch(&gw, topic, &rsa, &format!("new-{round}")).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (503, Some("jwks_unavailable")),
            "{what}: {body}"
        );
        assert_eq!(idp.fetches(), held + 1 + round as u64, "{what}: one fetch");
        // A token never seen before, signed with the key held from before: still verified.
        assert_admitted(&gw, topic, &orders_token(&gw, &rsa, None), what).await;
    }

    // A server that accepts and never answers: one fetch, bounded by fetch_timeout_ms, which a
    // burst of unknown kids waits for together (not one fetch each, not one timeout each).
    idp.set(idp::jwks(&[&rsa]));
    idp.hang(true);
    let before = idp.fetches();
    gw.advance_ms(60_000);
    let started = std::time::Instant::now();
    let burst: Vec<_> = (0..20)
        .map(|i| {
            spawn_post(
                &gw,
                topic,
                orders_token(&gw, &rsa, Some(&format!("hang-{i}"))),
            )
        })
        .collect();
    for b in burst {
        assert_eq!(b.await.expect("task").0, 503);
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(idp.fetches(), before + 1);
    assert_eq!(produce_as(&gw, topic, &rsa, None).await, 200);
    let metrics = scrape(&gw).await;
    assert!(
        metrics.contains(&format!(
            "floodgate_jwks_fetches_total{{issuer=\"{ISSUER}\",outcome=\"failed\"}} 6"
        )),
        "{metrics}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_kid_named_with_another_alg_is_refused_without_a_refetch() {
    let (rsa, ec) = (Signer::rsa("shared"), Signer::ec("ec-1"));
    let topic = "test.jwt.kid-confusion";
    let (idp, _cluster, gw) = behind_idp(topic, &[&rsa, &ec], |_| {}).await;
    assert_eq!(produce_as(&gw, topic, &rsa, None).await, 200);
    let fetches = idp.fetches();
    gw.advance_ms(60_000);
    // Signed with the EC key, naming the RSA key's kid.
    let (status, _, body) = post(&gw, topic, &orders_token(&gw, &ec, Some("shared"))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("token_key_unknown")),
        "{body}"
    );
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("another algorithm"),
        "{body}"
    );
    assert_eq!(
        idp.fetches(),
        fetches,
        "a kid the issuer has is not refetched"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_one_tenant_cannot_write_another_tenants_topic() {
    let rsa = Signer::rsa("rsa-1");
    let idp = JwksServer::start(idp::jwks(&[&rsa])).await;
    let cluster = mock_cluster(&["test.a", "billing.a"]);
    let mut cfg = config(&cluster.bootstrap_servers());
    cfg.auth.jwt = vec![issuer(&idp.url())];
    cfg.tenants
        .push(tenant("billing", "billing-key", &["billing.*"]));
    let gw = Gateway::start_manual(cfg).await;
    let token = orders_token(&gw, &rsa, None); // acme's: test.*
    assert_eq!(post(&gw, "test.a", &token).await.0, 200);
    let (status, _, body) = post(&gw, "billing.a", &token).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("forbidden_topic")),
        "{body}"
    );
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("credential") && !detail.contains("API key"),
        "the detail fits a token too: {detail}"
    );
    // The billing tenant's own key can; the token's tenant is charged only for its own write.
    assert_eq!(post(&gw, "billing.a", "billing-key").await.0, 200);
    assert_eq!(admitted_requests(&gw, "billing").await, 1);
    assert_eq!(admitted_requests(&gw, "acme").await, 1);
    gw.shutdown().await;
}

/// `check-config` refuses what start-up would: a bad `[[auth.jwt]]` (named by issuer index and
/// field) and a `jwks_file` that is not a JWK set, and accepts a worked example like the
/// book's (docs/book/src/identity.md).
#[test]
fn check_config_validates_issuers_and_reads_their_jwks_files() {
    let dir = tempfile::tempdir().expect("dir");
    let jwks = dir.path().join("jwks.json");
    let path = dir.path().join("floodgate.toml");
    let run = |toml: String, jwks_text: &str| {
        std::fs::write(&jwks, jwks_text).expect("jwks");
        std::fs::write(&path, toml).expect("config");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("--config")
            .arg(&path)
            .arg("check-config")
            .output()
            .expect("check-config");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let config = |alg: &str| {
        format!(
            r#"[kafka]
bootstrap_servers = "127.0.0.1:9"
[[auth.jwt]]
issuer = "{ISSUER}"
audiences = ["{AUDIENCE}"]
jwks_file = "{}"
algorithms = ["{alg}"]
tenant_claim = "client_id"
map = {{ "orders-svc" = "acme" }}
[[tenants]]
id = "acme"
topics = ["orders.*"]
jwt_claims = [{{ issuer = "{ISSUER}", value = "billing-svc" }}]
"#,
            jwks.display()
        )
    };
    let good = idp::jwks(&[&Signer::ed("ed-1")]);
    let (ok, err) = run(config("EdDSA"), &good);
    assert!(ok, "{err}");
    let (ok, err) = run(config("HS256"), &good);
    assert!(!ok);
    assert!(err.contains("auth.jwt[0].algorithms[0]"), "{err}");
    let (ok, err) = run(config("EdDSA"), "<html>not keys</html>");
    assert!(!ok);
    assert!(
        err.contains("auth.jwt[0]") && err.contains("jwks_file") && err.contains("not a JWK set"),
        "{err}"
    );
    // A file floodgate can use no key of (never refetched: every token would be refused).
    let (ok, err) = run(
        config("EdDSA"),
        r#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"k"}]}"#,
    );
    assert!(!ok);
    assert!(err.contains("has no usable key"), "{err}");
    // Valid, but an issuer without a map lets any claim value name a tenant: said, not refused.
    let unmapped = config("EdDSA").replace("map = { \"orders-svc\" = \"acme\" }\n", "");
    let (ok, err) = run(unmapped, &good);
    assert!(ok, "{err}");
    assert!(err.contains("warning: auth.jwt[0].map"), "{err}");
    // The TLS files are read as start-up reads them: a client CA file without a certificate.
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not a certificate").expect("ca");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, cert.pem()).expect("cert");
    std::fs::write(&key_file, key.serialize_pem()).expect("key");
    let tls = format!(
        "{}[server]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\ntls_client_ca_file = \"{}\"\n",
        config("EdDSA"),
        cert_file.display(),
        key_file.display(),
        ca.display()
    );
    let (ok, err) = run(tls, &good);
    assert!(!ok, "a CA file with no certificate");
    assert!(err.contains("server.tls"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_issuer_withdraws_stops_admitting_the_tokens_it_verified() {
    let (old, new) = (Signer::rsa("old"), Signer::ec("new"));
    let topic = "test.jwt.withdrawn";
    let (idp, _cluster, gw) = behind_idp(topic, &[&old], |_| {}).await;
    let cached = orders_token(&gw, &old, None);
    for _ in 0..3 {
        assert_eq!(post(&gw, topic, &cached).await.0, 200);
    }
    // The issuer withdraws the key (say it leaked) and publishes another; the gateway reads the
    // new set (here through a token naming the new kid, after the throttle allows a refetch).
    idp.set(idp::jwks(&[&new]));
    gw.advance_ms(60_000);
    assert_eq!(produce_as(&gw, topic, &new, None).await, 200);
    // A cached token whose key is gone is verified again and refused. From a stranger's
    // address at once with 503 (the set was read less than min_refetch_s ago, so its kid
    // could be one rotated in since), then, once the next fetch is allowed and finds no such
    // key, with 401; from its producer's address, with 401 after a refetch on its tenant's
    // allowance.
    let url = gw.url(topic);
    let (status, _, body) = post_from(&url, &cached, STRANGER).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("jwks_unavailable")),
        "{body}"
    );
    let gone = "a cached token whose key is gone";
    assert_refused(&gw, topic, &cached, 401, "token_key_unknown", gone).await;
    gw.advance_ms(60_000);
    let (status, _, body) = post_from(&url, &cached, STRANGER).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("token_key_unknown")),
        "{body}"
    );
    // The same document fetched again changes nothing: cached tokens stay cached.
    let steady = orders_token(&gw, &new, None);
    assert_eq!(post(&gw, topic, &steady).await.0, 200);
    gw.advance_ms(60_000);
    assert_eq!(produce_as(&gw, topic, &new, Some("nobody")).await, 401);
    let before = verifications(&gw).await;
    assert_eq!(post(&gw, topic, &steady).await.0, 200);
    assert_eq!(verifications(&gw).await, before, "no verification again");
    gw.shutdown().await;
}

/// An address allowed three failed authentications at once, one more a second.
fn few_failures(c: &mut Config) {
    c.server.auth_failures_per_sec = 1;
    c.server.auth_failures_burst = 3;
}

/// Bad tokens count against the address's failed-authentication allowance like bad keys (the
/// same limiter). Once it is spent, a token not verified before is refused without its
/// signature being checked (counted: the flood costs no verification), while a token already
/// verified (in the cache) still passes; a new valid one passes once the allowance refills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_spend_the_addresss_allowance_and_then_cost_no_verification() {
    let (rsa, attacker) = (Signer::rsa("rsa-1"), Signer::rsa("rsa-1"));
    let topic = "test.jwt.limiter";
    let (_idp, _cluster, gw) = behind_idp(topic, &[&rsa], few_failures).await;
    let valid = orders_token(&gw, &rsa, None);
    assert_admitted(&gw, topic, &valid, "valid").await;
    let forged = orders_token(&gw, &attacker, None);
    for i in 0..3 {
        let what = format!("failure {i}");
        assert_refused(&gw, topic, &forged, 401, "token_signature", &what).await;
    }
    // The failure that finds the allowance spent is refused (and known from then on).
    assert_refused(&gw, topic, &forged, 429, "auth_failures", "spent").await;
    let checked = verifications(&gw).await;
    assert_eq!(checked, 5.0, "the valid token and four forged ones");
    // 200 junk tokens more, each new (a random claim): all refused, none verified.
    for i in 0..200 {
        let mut junk_claims = claims(&gw, "orders-svc");
        junk_claims["jti"] = json!(format!("junk-{i}"));
        let junk = attacker.sign(&junk_claims);
        assert_refused(&gw, topic, &junk, 429, "auth_failures", "junk").await;
    }
    assert_eq!(
        verifications(&gw).await,
        checked,
        "no signature is checked while the address is over its allowance"
    );
    let never = "a verified token is never refused for its address";
    assert_admitted(&gw, topic, &valid, never).await;
    // A valid token not seen before waits, like any unverified token, until there is room.
    let mut fresh_claims = claims(&gw, "orders-svc");
    fresh_claims["jti"] = json!("fresh");
    let fresh = rsa.sign(&fresh_claims);
    assert_refused(&gw, topic, &fresh, 429, "auth_failures", "fresh").await;
    gw.advance_ms(1_000);
    assert_admitted(&gw, topic, &fresh, "fresh, after the refill").await;
    assert_eq!(verifications(&gw).await, checked + 1.0);
    gw.shutdown().await;
}

/// Tokens naming a key the gateway does not hold spend the address's failure allowance too:
/// each 503 `jwks_unavailable` tells its sender that its issuer, audience, algorithm and
/// expiry were accepted, so one address may not ask without limit. Past the allowance: 429
/// `auth_failures`, no JWKS fetch, and a token verified before still passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kids_spend_the_addresss_allowance() {
    let rsa = Signer::rsa("rsa-1");
    let topic = "test.jwt.unknown-kids";
    let (idp, _cluster, gw) = behind_idp(topic, &[&rsa], few_failures).await;
    let valid = orders_token(&gw, &rsa, None);
    assert_admitted(&gw, topic, &valid, "valid").await;
    // Within min_refetch_s of the start-up fetch: each unknown kid from a stranger's address
    // is told to come back.
    let url = gw.url(topic);
    for i in 0..3 {
        let forged = orders_token(&gw, &rsa, Some(&format!("bogus-{i}")));
        let (status, _, body) = post_from(&url, &forged, STRANGER).await;
        let refused = (status, body["error"].as_str());
        assert_eq!(
            refused,
            (503, Some("jwks_unavailable")),
            "failure {i}: {body}"
        );
    }
    let forged = orders_token(&gw, &rsa, Some("bogus-3"));
    let (status, _, body) = post_from(&url, &forged, STRANGER).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (429, Some("auth_failures")),
        "{body}"
    );
    assert_eq!(idp.fetches(), 1, "only the start-up fetch");
    assert_admitted(&gw, topic, &valid, "verified before").await;
    gw.shutdown().await;
}

/// A valid token that joins a fetch begun before it came (before its key was published) is
/// told to come back when the next fetch is allowed (503 `jwks_unavailable`), not 401: the
/// set that fetch read may predate its key. The next fetch admits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_token_joining_a_fetch_begun_before_its_key_is_told_to_come_back() {
    let (old, new) = (Signer::rsa("rsa-1"), Signer::ed("ed-2"));
    let topic = "test.jwt.joined";
    let (idp, _cluster, gw) = behind_idp(topic, &[&old], |_| {}).await;
    // The keys are held (the start-up fetch is done), and the next fetch is due.
    assert_admitted(&gw, topic, &orders_token(&gw, &old, None), "held").await;
    let fetched = idp.fetches();
    gw.advance_ms(60_000);
    // A forged kid starts a fetch, which reads the set and is answered only once unpaused.
    idp.pause(true);
    let forged = spawn_post(&gw, topic, orders_token(&gw, &old, Some("bogus")));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while idp.fetches() == fetched {
        assert!(std::time::Instant::now() < deadline, "no fetch started");
        tokio::task::yield_now().await;
    }
    // The issuer publishes a new key; a valid token with it queues behind that fetch (real
    // time, only so that it is queued before the fetch ends).
    idp.set(idp::jwks(&[&old, &new]));
    let valid = orders_token(&gw, &new, None);
    let joined = spawn_post(&gw, topic, valid.clone());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    idp.pause(false);
    let (status, code, _) = forged.await.expect("task");
    assert_eq!((status, code.as_deref()), (401, Some("token_key_unknown")));
    let (status, code, wait) = joined.await.expect("task");
    assert_eq!((status, code.as_deref()), (503, Some("jwks_unavailable")));
    assert_eq!(wait.expect("retry-after"), "60");
    assert_eq!(idp.fetches(), fetched + 1, "one fetch");
    gw.advance_ms(60_000);
    assert_admitted(&gw, topic, &valid, "the next fetch").await;
    assert_eq!(idp.fetches(), fetched + 2);
    gw.shutdown().await;
}

/// A fetch slower than `min_refetch_s` (a hanging JWKS server) is waited for once by the
/// requests that queued behind it: they use its outcome rather than each fetching again in
/// turn (which made the last of a queue of N wait N timeouts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_queued_behind_a_slow_fetch_use_its_outcome_instead_of_fetching_in_turn() {
    let rsa = Signer::rsa("rsa-1");
    let topic = "test.jwt.slow-fetch";
    let (idp, _cluster, gw) = behind_idp(topic, &[&rsa], |c| {
        c.auth.jwt[0].fetch_timeout_ms = 2_000;
    })
    .await;
    assert_eq!(produce_as(&gw, topic, &rsa, None).await, 200);
    idp.hang(true);
    gw.advance_ms(60_000);
    let before = idp.fetches();
    let started = std::time::Instant::now();
    let send = |i: usize| {
        spawn_post(
            &gw,
            topic,
            orders_token(&gw, &rsa, Some(&format!("queued-{i}"))),
        )
    };
    let first = send(0);
    while idp.fetches() == before {
        tokio::task::yield_now().await;
    }
    // The fetch is under way; the throttle's interval passes while it hangs, and ten more
    // requests with unknown kids queue behind it.
    gw.advance_ms(60_000);
    let queued: Vec<_> = (1..=10).map(send).collect();
    assert_eq!(first.await.expect("task").0, 503);
    for q in queued {
        assert_eq!(q.await.expect("task").0, 503);
    }
    assert_eq!(idp.fetches(), before + 1, "one fetch for the whole queue");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}: one fetch timeout (2 s), not one per request",
        started.elapsed()
    );
    gw.shutdown().await;
}

/// An open v3 stream whose token's key the issuer withdraws ends, as a new request with the
/// token would be refused; nothing sent after is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_key_ends_an_open_stream_opened_with_its_token() {
    use crate::common::v3::{first_written, open_stream_with, write_chunk};
    let (old, new) = (Signer::rsa("old"), Signer::ec("new"));
    let topic = "test.jwt.stream-withdrawn";
    let (idp, _cluster, gw) = behind_idp(topic, &[&old], |_| {}).await;
    let token = orders_token(&gw, &old, None);
    let record =
        |i: usize| format!("{{\"value\":{{\"type\":\"JSON\",\"data\":{i}}}}}").into_bytes();
    let path = format!("/v3/clusters/c/topics/{topic}/records");
    let (mut stream, reader) = open_stream_with(gw.addr, &path, &token);
    write_chunk(&mut stream, &record(0)).expect("write");
    let mut reader = tokio::task::spawn_blocking(move || first_written(reader))
        .await
        .expect("reader");
    // The issuer withdraws the key and the gateway reads the new set.
    idp.set(idp::jwks(&[&new]));
    gw.advance_ms(60_000);
    assert_eq!(produce_as(&gw, topic, &new, None).await, 200);
    let rest = tokio::task::spawn_blocking(move || {
        let _ = write_chunk(&mut stream, &record(1));
        reader.rest()
    })
    .await
    .expect("reader");
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["error_code"], 401, "{rest:?}");
    gw.shutdown().await;
}

/// The token cache is bounded in entries; a token whose topics claim compiles to more than a
/// kilobyte (globs cost ~40 bytes a character) is verified on each request instead of kept,
/// so a flood of such tokens holds no memory. An ordinary token is verified once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_with_a_huge_topics_claim_is_not_kept_in_the_cache() {
    let rsa = Signer::rsa("rsa-1");
    let topic = "test.jwt.huge-claim";
    let (_idp, _cluster, gw) = behind_idp(topic, &[&rsa], |_| {}).await;
    let mut small = claims(&gw, "orders-svc");
    small["topics"] = json!(["test.jwt.*"]);
    let mut huge = claims(&gw, "orders-svc");
    let globs: Vec<String> = (0..20)
        .map(|i| format!("test.jwt.{i}{}", "?".repeat(60)))
        .chain(["test.jwt.*".to_string()])
        .collect();
    huge["topics"] = json!(globs);
    let (small, huge) = (rsa.sign(&small), rsa.sign(&huge));
    let before = verifications(&gw).await;
    for _ in 0..3 {
        assert_eq!(post(&gw, topic, &small).await.0, 200);
        assert_eq!(post(&gw, topic, &huge).await.0, 200);
    }
    assert_eq!(
        verifications(&gw).await - before,
        4.0,
        "the small token once, the huge one each time"
    );
    assert_eq!(series(&gw, "floodgate_jwt_cache_entries").await, 1.0);
    gw.shutdown().await;
}
