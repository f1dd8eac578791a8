use super::*;

const ALL: [Algorithm; 3] = [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

#[test]
fn odd_keys_are_skipped_not_fatal() {
    let doc = br#"{"keys":[
        {"kty":"oct","k":"c2VjcmV0","kid":"hmac"},
        {"kty":"EC","crv":"P-384","x":"AA","y":"AA","kid":"p384"},
        {"kty":"RSA","n":"AQAB","e":"AQAB","use":"enc","kid":"enc"},
        {"kty":"RSA","n":"AQAB","e":"AQAB","alg":"ES256","kid":"lies"},
        {"kty":"what"},
        42,
        {"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"ed"}
    ]}"#;
    let set = parse(doc, &ALL).expect("a set");
    assert_eq!(set.keys.len(), 1);
    assert_eq!(set.skipped, 6);
    assert!(matches!(
        set.find(Some("ed"), Algorithm::EdDSA),
        Lookup::Found(_)
    ));
    assert!(matches!(
        set.find(Some("ed"), Algorithm::RS256),
        Lookup::Unknown
    ));
    assert!(matches!(
        set.find(Some("hmac"), Algorithm::EdDSA),
        Lookup::Unknown
    ));
    assert!(matches!(set.find(None, Algorithm::EdDSA), Lookup::Found(_)));
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for doc in [
        &b""[..],
        b"[]",
        b"{\"keys\":{}}",
        b"\xff\xfe",
        b"{\"keys\":[",
        b"null",
    ] {
        assert!(parse(doc, &ALL).is_err(), "{doc:?}");
    }
    // Not allowed by the issuer: skipped.
    let doc = br#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;
    assert_eq!(parse(doc, &[Algorithm::RS256]).expect("set").keys.len(), 0);
}

#[test]
fn max_age_schedules_the_next_fetch_within_bounds() {
    let (min, max) = (Duration::from_secs(30), Duration::from_secs(300));
    assert_eq!(next_refresh(None, min, max), max);
    assert_eq!(
        next_refresh(Some("public, max-age=120"), min, max),
        Duration::from_secs(120)
    );
    assert_eq!(next_refresh(Some("max-age=1"), min, max), min);
    assert_eq!(next_refresh(Some("max-age=99999"), min, max), max);
    assert_eq!(next_refresh(Some("no-cache, max-age=x"), min, max), max);
}
