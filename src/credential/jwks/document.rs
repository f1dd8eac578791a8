//! A JWKS document read into the keys floodgate can use: each bound to the one algorithm its
//! type allows, the rest skipped and counted (see the parent module).

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use super::{KeySet, VerifyKey, MAX_KEYS, MAX_KID_BYTES};

#[derive(Deserialize)]
struct Document<'a> {
    #[serde(borrow)]
    keys: Vec<&'a serde_json::value::RawValue>,
}

/// The algorithm a key's type allows, if floodgate verifies it.
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {
            Some(Algorithm::ES256)
        }
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            Some(Algorithm::EdDSA)
        }
        // HMAC secrets, other curves: never.
        _ => None,
    }
}

/// Parses a JWKS document, keeping the keys for `allowed` algorithms.
pub fn parse(bytes: &[u8], allowed: &[Algorithm]) -> Result<KeySet, String> {
    let doc: Document<'_> = serde_json::from_slice(bytes)
        .map_err(|e| format!("not a JWK set ({{\"keys\": [...]}}): {e}"))?;
    let mut set = KeySet::default();
    for raw in doc.keys {
        let Some(key) = usable(raw.get(), allowed) else {
            set.skipped += 1;
            continue;
        };
        if set.keys.len() >= MAX_KEYS {
            set.skipped += 1;
            continue;
        }
        set.keys.push(key);
    }
    Ok(set)
}

fn usable(raw: &str, allowed: &[Algorithm]) -> Option<VerifyKey> {
    let jwk: Jwk = serde_json::from_str(raw).ok()?;
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
    ) {
        return None;
    }
    let alg = algorithm_of(&jwk)?;
    if !allowed.contains(&alg) {
        return None;
    }
    // A key that names its algorithm must name the one its type allows.
    if let Some(named) = &jwk.common.key_algorithm {
        if format!("{named:?}") != format!("{alg:?}") {
            return None;
        }
    }
    let kid = jwk.common.key_id.clone();
    if kid.as_ref().is_some_and(|k| k.len() > MAX_KID_BYTES) {
        return None;
    }
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    let id = {
        use sha2::Digest as _;
        let params = serde_json::to_vec(&jwk.algorithm).ok()?;
        sha2::Sha256::digest(&params).into()
    };
    Some(VerifyKey { kid, alg, key, id })
}
