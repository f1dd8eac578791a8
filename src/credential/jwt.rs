//! Reading a JWT (RFC 7519) strictly: its three parts, its header's `alg`, `kid` and `crit`,
//! and the claims floodgate checks — `iss`, `aud`, `exp`, `nbf`, the tenant claim, the topics
//! claim — each with the one JSON type it may have (a string `exp` is an error, not "no exp").
//!
//! Pure: no keys, no clock, no I/O. The signature is verified by the caller with the key the
//! issuer's set binds to the header's algorithm; every check that costs no signature runs
//! before it, so an expired or foreign token costs a parse, not a verification (RFC 8725).

use base64::Engine as _;
use jsonwebtoken::Algorithm;
use serde::Deserialize;

use super::TokenProblem;
use crate::identity::TopicPatterns;

/// Longest token accepted (an access token is one or two kilobytes; more is not a token).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Longest decoded header.
const MAX_HEADER_BYTES: usize = 2 * 1024;
/// Most topic patterns a token's topics claim may list.
const MAX_TOKEN_TOPICS: usize = 100;

/// Whether a bearer value has a JWT's shape: three base64url parts, within the size bound.
pub fn looks_like_jwt(token: &str) -> bool {
    token.len() <= MAX_TOKEN_BYTES
        && token.bytes().filter(|b| *b == b'.').count() == 2
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A token split and its header read.
#[derive(Debug)]
pub struct Parsed<'a> {
    pub alg: Algorithm,
    pub kid: Option<String>,
    /// `header.payload`, what the signature covers.
    pub signed: &'a str,
    pub signature: &'a str,
    pub claims: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct Header {
    alg: Option<serde_json::Value>,
    kid: Option<serde_json::Value>,
    crit: Option<serde_json::Value>,
}

fn b64(part: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .ok()
}

fn malformed(detail: &str) -> TokenProblem {
    TokenProblem::Malformed(detail.to_string())
}

/// Splits a token, reads its header and claims. Refuses `alg: none`, HMAC and every algorithm
/// but RS256, ES256 and EdDSA here, before any key is looked at.
pub fn parse(token: &str) -> Result<Parsed<'_>, TokenProblem> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(malformed("the token is longer than 16 KiB"));
    }
    let (signed, signature) = token
        .rsplit_once('.')
        .ok_or_else(|| malformed("a JWT has three dot-separated parts"))?;
    let (header, payload) = signed
        .split_once('.')
        .ok_or_else(|| malformed("a JWT has three dot-separated parts"))?;
    if payload.contains('.') {
        return Err(malformed(
            "a JWT has three dot-separated parts (JWE is not accepted)",
        ));
    }
    if header.len() > MAX_HEADER_BYTES * 4 / 3 + 4 {
        return Err(malformed("the JOSE header is too long"));
    }
    let header: Header = b64(header)
        .and_then(|h| serde_json::from_slice(&h).ok())
        .ok_or_else(|| malformed("the JOSE header is not base64url JSON"))?;
    if header.crit.is_some() {
        return Err(TokenProblem::Algorithm(
            "the header lists critical extensions (crit), which floodgate does not implement"
                .into(),
        ));
    }
    let alg =
        match header.alg.as_ref().and_then(|a| a.as_str()) {
            Some("RS256") => Algorithm::RS256,
            Some("ES256") => Algorithm::ES256,
            Some("EdDSA") => Algorithm::EdDSA,
            Some(none) if none.eq_ignore_ascii_case("none") => {
                return Err(TokenProblem::Algorithm(
                    "alg none (an unsigned token) is never accepted".into(),
                ))
            }
            Some(hs) if hs.starts_with("HS") => return Err(TokenProblem::Algorithm(
                "HMAC (HS*) is never accepted: tokens are verified with the issuer's public keys \
                 (RS256, ES256, EdDSA)"
                    .into(),
            )),
            Some(_) => {
                return Err(TokenProblem::Algorithm(
                    "the header's alg is not accepted: only RS256, ES256 and EdDSA".into(),
                ))
            }
            None => return Err(malformed("the JOSE header has no alg string")),
        };
    let kid = match header.kid {
        None => None,
        Some(serde_json::Value::String(k)) if k.len() <= 256 => Some(k),
        Some(_) => {
            return Err(malformed(
                "the header's kid is not a string of at most 256 bytes",
            ))
        }
    };
    let claims = b64(payload)
        .and_then(|p| serde_json::from_slice::<serde_json::Value>(&p).ok())
        .and_then(|v| match v {
            serde_json::Value::Object(map) => Some(map),
            _ => None,
        })
        .ok_or_else(|| malformed("the payload is not a base64url JSON object"))?;
    Ok(Parsed {
        alg,
        kid,
        signed,
        signature,
        claims,
    })
}

/// A NumericDate claim (RFC 7519 §2): a non-negative JSON number of seconds, fractions cut.
fn numeric_date(
    claims: &serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Result<Option<u64>, TokenProblem> {
    match claims.get(name) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .map(Some)
            .ok_or_else(|| TokenProblem::Claims(format!("the {name} claim is not a NumericDate"))),
    }
}

/// What the claims checks need of an issuer.
#[derive(Debug)]
pub struct ClaimRules<'a> {
    pub audiences: &'a [String],
    pub leeway_s: u64,
    pub tenant_claim: &'a str,
    pub topics_claim: Option<&'a str>,
}

/// A token's claims, checked.
#[derive(Debug)]
pub struct Checked {
    /// The value of the tenant claim.
    pub subject: String,
    pub exp: u64,
    /// The token's topic patterns, when the issuer has a topics claim and the token carries it.
    pub topics: Option<TopicPatterns>,
}

/// Checks everything but the issuer (already matched) and the signature, at `now` (Unix
/// seconds).
pub fn check_claims(
    claims: &serde_json::Map<String, serde_json::Value>,
    rules: &ClaimRules<'_>,
    now: u64,
) -> Result<Checked, TokenProblem> {
    let exp = numeric_date(claims, "exp")?
        .ok_or_else(|| TokenProblem::Claims("the token has no exp claim".into()))?;
    if now >= exp.saturating_add(rules.leeway_s) {
        return Err(TokenProblem::Expired);
    }
    if let Some(nbf) = numeric_date(claims, "nbf")? {
        if now.saturating_add(rules.leeway_s) < nbf {
            return Err(TokenProblem::NotYetValid);
        }
    }
    let audience_ok = match claims.get("aud") {
        Some(serde_json::Value::String(a)) => rules.audiences.iter().any(|x| x == a),
        Some(serde_json::Value::Array(list)) => list
            .iter()
            .filter_map(|a| a.as_str())
            .any(|a| rules.audiences.iter().any(|x| x == a)),
        _ => false,
    };
    if !audience_ok {
        return Err(TokenProblem::Audience);
    }
    let subject = match claims.get(rules.tenant_claim) {
        Some(serde_json::Value::String(s))
            if !s.is_empty() && s.len() <= crate::config::MAX_NAME_BYTES =>
        {
            s.clone()
        }
        _ => {
            return Err(TokenProblem::Claims(format!(
                "the token has no {:?} claim of 1 to {} bytes (the issuer's tenant_claim)",
                rules.tenant_claim,
                crate::config::MAX_NAME_BYTES
            )))
        }
    };
    let topics = match rules
        .topics_claim
        .and_then(|name| claims.get(name).map(|v| (name, v)))
    {
        None => None,
        Some((name, value)) => Some(topic_patterns(name, value)?),
    };
    Ok(Checked {
        subject,
        exp,
        topics,
    })
}

/// A topics claim: an array of patterns, or one string of space-separated patterns (the shape
/// of OAuth's `scope`).
fn topic_patterns(name: &str, value: &serde_json::Value) -> Result<TopicPatterns, TokenProblem> {
    let bad = || {
        TokenProblem::Claims(format!(
            "the {name:?} claim is not a list of at most {MAX_TOKEN_TOPICS} topic patterns"
        ))
    };
    let list: Vec<String> = match value {
        serde_json::Value::String(s) => s.split_whitespace().map(str::to_string).collect(),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if list.len() > MAX_TOKEN_TOPICS {
        return Err(bad());
    }
    if list.is_empty() {
        // A token that lists no topic may write none.
        return TopicPatterns::parse(&[]).map_err(|_| bad());
    }
    TopicPatterns::parse(&list).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(header: &str, payload: &str) -> String {
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!("{}.{}.c2ln", e.encode(header), e.encode(payload))
    }

    #[test]
    fn the_header_decides_nothing_dangerous() {
        for (header, want) in [
            (r#"{"alg":"none"}"#, "token_algorithm"),
            (r#"{"alg":"NONE"}"#, "token_algorithm"),
            (r#"{"alg":"HS256"}"#, "token_algorithm"),
            (r#"{"alg":"PS256"}"#, "token_algorithm"),
            (r#"{"alg":"RS256","crit":["exp"]}"#, "token_algorithm"),
            (r#"{"typ":"JWT"}"#, "token_malformed"),
            (r#"{"alg":7}"#, "token_malformed"),
            (r#"{"alg":"RS256","kid":5}"#, "token_malformed"),
            ("[]", "token_malformed"),
        ] {
            let e = parse(&token(header, "{}")).expect_err(header);
            assert_eq!(e.code(), want, "{header}");
        }
        let text = token(r#"{"alg":"ES256","kid":"k1"}"#, r#"{"a":1}"#);
        let ok = parse(&text).expect("parses");
        assert_eq!((ok.alg, ok.kid.as_deref()), (Algorithm::ES256, Some("k1")));
        for garbage in [
            "",
            ".",
            "..",
            "a.b.c.d",
            "e30.e30",
            "!!!.e30.c2ln",
            "e30.W10.c2ln",
        ] {
            assert!(parse(garbage).is_err(), "{garbage}");
        }
        assert!(parse(&"a".repeat(MAX_TOKEN_BYTES + 1)).is_err());
    }

    fn rules() -> ClaimRules<'static> {
        static AUD: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        ClaimRules {
            audiences: AUD.get_or_init(|| vec!["floodgate".into()]),
            leeway_s: 10,
            tenant_claim: "client_id",
            topics_claim: Some("topics"),
        }
    }

    fn claims(json: &str) -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_str(json).expect("object")
    }

    #[test]
    fn claims_are_checked_with_their_types_and_leeway() {
        let r = rules();
        let ok = r#"{"exp":1000,"nbf":500,"aud":["x","floodgate"],"client_id":"c"}"#;
        assert_eq!(
            check_claims(&claims(ok), &r, 1009).expect("valid").subject,
            "c"
        );
        let cases = [
            (ok, 1010, "token_expired"),
            (ok, 489, "token_not_yet_valid"),
            (r#"{"aud":"floodgate","client_id":"c"}"#, 1, "token_claims"),
            (
                r#"{"exp":"9999","aud":"floodgate","client_id":"c"}"#,
                1,
                "token_claims",
            ),
            (
                r#"{"exp":9999,"nbf":"0","aud":"floodgate","client_id":"c"}"#,
                1,
                "token_claims",
            ),
            (
                r#"{"exp":9999,"aud":"other","client_id":"c"}"#,
                1,
                "token_audience",
            ),
            (
                r#"{"exp":9999,"aud":[1,2],"client_id":"c"}"#,
                1,
                "token_audience",
            ),
            (r#"{"exp":9999,"client_id":"c"}"#, 1, "token_audience"),
            (
                r#"{"exp":9999,"aud":"floodgate","client_id":7}"#,
                1,
                "token_claims",
            ),
            (
                r#"{"exp":9999,"aud":"floodgate","client_id":""}"#,
                1,
                "token_claims",
            ),
            (
                r#"{"exp":9999,"aud":"floodgate","client_id":"c","topics":"events.[a"}"#,
                1,
                "token_claims",
            ),
            (
                r#"{"exp":9999,"aud":"floodgate","client_id":"c","topics":{"a":1}}"#,
                1,
                "token_claims",
            ),
            (
                r#"{"exp":-5,"aud":"floodgate","client_id":"c"}"#,
                1,
                "token_claims",
            ),
        ];
        for (json, now, want) in cases {
            let e = check_claims(&claims(json), &r, now).expect_err(json);
            assert_eq!(e.code(), want, "{json} at {now}");
        }
    }

    #[test]
    fn the_topics_claim_is_a_list_or_a_scope_string() {
        let r = rules();
        let t = |topics: &str| {
            let json =
                format!(r#"{{"exp":9999,"aud":"floodgate","client_id":"c","topics":{topics}}}"#);
            check_claims(&claims(&json), &r, 1)
                .expect("valid")
                .topics
                .expect("topics")
        };
        let a = crate::identity::Topic::parse("events.a").expect("topic");
        let b = crate::identity::Topic::parse("events.b").expect("topic");
        assert!(t(r#"["events.a"]"#).allows(&a));
        assert!(!t(r#"["events.a"]"#).allows(&b));
        assert!(t(r#""events.b events.a""#).allows(&b));
        assert!(!t("[]").allows(&a), "an empty list allows nothing");
    }
}
