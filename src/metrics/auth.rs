//! Authentication's series: requests by credential method and outcome (the outcome is the
//! answer's code: `ok`, `unauthorized`, `token_expired`, `unknown_tenant`, ...), JWKS fetches per
//! issuer, signature verifications and the verified-token cache; and the failed
//! authentications each listener counted against their addresses.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};

use super::{family, Labels};
use crate::auth_failures::AuthFailures;
use crate::credential::{Authenticator, Method};

/// Failed authentications, and requests refused because of them, on the produce and admin
/// listeners (in that order).
pub(super) fn encode_failures(
    encoder: &mut DescriptorEncoder,
    failures: &[Arc<AuthFailures>; 2],
) -> Result<(), std::fmt::Error> {
    let mut series = Vec::new();
    for (listener, f) in ["produce", "admin"].into_iter().zip(failures) {
        series.push((
            vec![("listener", listener), ("outcome", "failed")],
            ConstCounter::new(f.failed.load(Relaxed)),
        ));
        series.push((
            vec![("listener", listener), ("outcome", "refused")],
            ConstCounter::new(f.refused.load(Relaxed)),
        ));
    }
    family(
        encoder,
        "auth_failures",
        "Failing requests by listener: answered 401 and counted against their address's allowance (failed), or answered 429 because it was spent (refused)",
        None,
        C,
        &series,
    )
}

/// The token problems' codes (`TokenProblem::code`), and the other outcomes of a JWT.
const JWT_OUTCOMES: [&str; 12] = [
    "ok",
    "token_malformed",
    "token_algorithm",
    "token_issuer",
    "token_audience",
    "token_expired",
    "token_not_yet_valid",
    "token_key_unknown",
    "token_signature",
    "token_claims",
    "unknown_tenant",
    "jwks_unavailable",
];

/// Every (method, outcome) an authentication can be counted under (a JWT's only when issuers
/// are configured: without one no bearer is read as a token).
fn known_outcomes(no_issuers: bool) -> impl Iterator<Item = (Method, &'static str)> {
    let jwt = JWT_OUTCOMES
        .into_iter()
        .filter(move |_| !no_issuers)
        .map(|o| (Method::Jwt, o));
    [
        (Method::ApiKey, "ok"),
        (Method::ApiKey, "unauthorized"),
        (Method::None, "unauthorized"),
        (Method::ClientCert, "ok"),
        (Method::ClientCert, "unknown_tenant"),
        (Method::ClientCert, "certificate_expired"),
    ]
    .into_iter()
    .chain(jwt)
}

/// Reads the authenticator at scrape time.
#[derive(Debug)]
pub struct AuthCollector(pub Arc<Authenticator>);

impl prometheus_client::collector::Collector for AuthCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let auth = &self.0;
        // Every outcome a method can have exists from the first scrape, at 0 until it happens.
        let mut counts: std::collections::BTreeMap<(&'static str, &'static str), u64> =
            known_outcomes(auth.issuer_names().is_empty())
                .map(|(method, outcome)| ((method.as_str(), outcome), 0))
                .collect();
        for (method, outcome, n) in auth.counts.snapshot() {
            counts.insert((method.as_str(), outcome), n);
        }
        let series: Vec<(Labels<'_>, ConstCounter<u64>)> = counts
            .into_iter()
            .map(|((method, outcome), n)| {
                (
                    vec![("method", method), ("outcome", outcome)],
                    ConstCounter::new(n),
                )
            })
            .collect();
        family(
            &mut encoder,
            "authentications",
            "Produce-listener authentications by credential method (api_key, jwt, client_cert, none) and outcome (ok, or the answer's error code)",
            None,
            C,
            &series,
        )?;
        let issuers = auth.issuer_names();
        let mut fetches = Vec::new();
        for (i, name) in issuers.iter().enumerate() {
            if let Some(source) = auth.key_source(i) {
                let failed = source.failures.load(Relaxed);
                let all = source.fetches.load(Relaxed);
                fetches.push((
                    vec![("issuer", name.as_str()), ("outcome", "ok")],
                    ConstCounter::new(all.saturating_sub(failed)),
                ));
                fetches.push((
                    vec![("issuer", name.as_str()), ("outcome", "failed")],
                    ConstCounter::new(failed),
                ));
            }
        }
        family(
            &mut encoder,
            "jwks_fetches",
            "JWKS fetches per issuer (scheduled refreshes and refetches for unknown kids) by outcome; a failed fetch keeps the keys held",
            None,
            C,
            &fetches,
        )?;
        family(
            &mut encoder,
            "jwt_verifications",
            "JWT signature verifications (tokens not found in the verified-token cache)",
            None,
            C,
            &[(
                Vec::new(),
                ConstCounter::new(auth.verifications.load(Relaxed)),
            )],
        )?;
        family(
            &mut encoder,
            "jwt_cache_entries",
            "Verified tokens remembered (by SHA-256) until their exp",
            None,
            G,
            &[(Vec::new(), ConstGauge::new(auth.cached_tokens() as f64))],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credential::{AuthError, TokenProblem};

    /// The seeded outcomes are the codes the authenticator counts: every token problem's, and
    /// the other answers a JWT gets.
    #[test]
    fn every_jwt_outcome_is_seeded() {
        let d = String::new;
        let problems = [
            TokenProblem::Malformed(d()),
            TokenProblem::Algorithm(d()),
            TokenProblem::Issuer,
            TokenProblem::Audience,
            TokenProblem::Expired,
            TokenProblem::NotYetValid,
            TokenProblem::UnknownKey(d()),
            TokenProblem::Signature,
            TokenProblem::Claims(d()),
        ];
        let errors = problems.into_iter().map(AuthError::Token).chain([
            AuthError::UnknownTenant(Method::Jwt),
            AuthError::KeysUnavailable(std::time::Duration::ZERO),
        ]);
        for e in errors {
            assert!(JWT_OUTCOMES.contains(&e.code()), "{}", e.code());
        }
        assert_eq!(known_outcomes(true).count(), 6);
        assert_eq!(known_outcomes(false).count(), 6 + JWT_OUTCOMES.len());
    }
}
