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
use crate::credential::Authenticator;

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

/// Reads the authenticator at scrape time.
#[derive(Debug)]
pub struct AuthCollector(pub Arc<Authenticator>);

impl prometheus_client::collector::Collector for AuthCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let auth = &self.0;
        let series: Vec<(Labels<'_>, ConstCounter<u64>)> = auth
            .counts
            .snapshot()
            .into_iter()
            .map(|(method, outcome, n)| {
                (
                    vec![("method", method.as_str()), ("outcome", outcome)],
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
