//! Authenticated registry entries: every record floodgate writes to the registry topic carries
//! an HMAC-SHA256 (`fg-mac`) over its key, its value and its `fg-*` headers, with a secret the
//! replicas share (`[cluster] registry_secret_env`). A record without a valid MAC — written by
//! a tenant, by any other Kafka client allowed on the topic, or changed in the topic — is never
//! applied: the registry decides who may write what, so only those who hold the secret may
//! change it.
//!
//! The MAC covers the topic's name too, so a record copied into another registry topic is not
//! an entry there. And each record's Kafka key carries a tag derived from the secret
//! (`tenant:acme#1f0c...`): a writer without the secret cannot write a record under the same
//! Kafka key as a real one, so compaction (which keeps the last record per Kafka key) never
//! drops a real entry in favour of a forged one — a forged tombstone or value stays a skipped
//! record of its own key.
//!
//! Rotation: the variable holds one or more secrets separated by commas; records are signed
//! with the first and accepted when any of them verifies. No replica may sign with a secret
//! another does not accept yet (their registries would drift apart), so a rotation is three
//! rolls: `old,new` everywhere (accept the new one), then `new,old` (sign with it: each replica
//! writes again, signed with the new secret, every entry it holds that only an older one
//! verifies — same version, same value: `registry.resign` — and
//! `floodgate_registry_old_secret_entries` counts what is left), then `new` once that reads 0
//! on every replica.
//!
//! What the MAC does not do: it does not hide the registry (anyone who can read the topic sees
//! tenants, budgets and key digests), and it does not stop a holder of the secret. Replaying an
//! old, validly signed record is caught by the version rule: a record applies only if it
//! carries a newer version of its key than the replica holds.

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Shortest secret accepted: 128 bits of a random secret's worth of text.
pub const MIN_SECRET_BYTES: usize = 16;

/// The registry's shared secrets; the first signs. Never printed.
#[derive(Clone)]
pub struct RegistrySecrets(Vec<Vec<u8>>);

impl std::fmt::Debug for RegistrySecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RegistrySecrets(<{} redacted>)", self.0.len())
    }
}

impl RegistrySecrets {
    /// `new[,old...]`: at least one, each at least [`MIN_SECRET_BYTES`] long.
    pub fn parse(text: &str) -> Result<Self, String> {
        let secrets: Vec<Vec<u8>> = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.as_bytes().to_vec())
            .collect();
        if secrets.is_empty() {
            return Err("no secret".into());
        }
        if let Some(i) = secrets.iter().position(|s| s.len() < MIN_SECRET_BYTES) {
            return Err(format!(
                "secret {} of the list is shorter than {MIN_SECRET_BYTES} bytes",
                i + 1
            ));
        }
        Ok(Self(secrets))
    }

    /// The secrets in the environment variable `name`, or in the file `name_FILE` names.
    pub fn from_env(name: &str) -> Result<Self, String> {
        let text = crate::env_secret::read(name)?.ok_or_else(|| {
            format!("the environment variable {name} is not set (nor {name}_FILE)")
        })?;
        Self::parse(&text).map_err(|e| format!("{name}: {e}"))
    }

    /// The MAC of an entry's parts, with the signing secret.
    pub fn sign(&self, parts: &[Option<&[u8]>]) -> [u8; 32] {
        let Some(secret) = self.0.first() else {
            return [0; 32];
        };
        let mut mac = keyed(secret);
        feed(&mut mac, parts);
        mac.finalize().into_bytes().into()
    }

    /// Which secret `tag` is the MAC of `parts` under (0: the signing one), if any (compared in
    /// constant time).
    pub fn verify(&self, parts: &[Option<&[u8]>], tag: &[u8]) -> Option<usize> {
        self.0.iter().position(|secret| {
            let mut mac = keyed(secret);
            feed(&mut mac, parts);
            mac.verify_slice(tag).is_ok()
        })
    }

    /// The tag a record of `key` carries in its Kafka key under the signing secret: 16 hex
    /// digits of an HMAC no one without the secret can compute.
    pub fn key_tag(&self, key: &str) -> String {
        let Some(secret) = self.0.first() else {
            return String::new();
        };
        let mut mac = keyed(secret);
        mac.update(b"floodgate-registry-key-v1");
        mac.update(key.as_bytes());
        let tag: [u8; 32] = mac.finalize().into_bytes().into();
        hex::encode(&tag[..8])
    }
}

fn keyed(secret: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length; this cannot fail.
    <HmacSha256 as hmac::digest::KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default()))
}

/// An unambiguous encoding of the parts: a domain tag, then each part as a presence byte and,
/// when present, its length and bytes — so no two different entries feed the same bytes (a
/// tombstone and an empty value differ, and no part can run into the next).
fn feed(mac: &mut HmacSha256, parts: &[Option<&[u8]>]) {
    mac.update(b"floodgate-registry-entry-v2");
    for part in parts {
        match part {
            None => mac.update(&[0]),
            Some(bytes) => {
                mac.update(&[1]);
                mac.update(&(bytes.len() as u64).to_be_bytes());
                mac.update(bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mac_verifies_only_for_the_same_parts_and_a_known_secret() {
        let both =
            RegistrySecrets::parse("new-secret-0123456789, old-secret-0123456789").expect("valid");
        let old = RegistrySecrets::parse("old-secret-0123456789").expect("valid");
        let parts: [Option<&[u8]>; 3] = [Some(b"tenant:a"), Some(b"{}"), Some(b"0")];
        let by_old = old.sign(&parts);
        assert_eq!(
            both.verify(&parts, &by_old),
            Some(1),
            "the previous secret still verifies"
        );
        let by_new = both.sign(&parts);
        assert_eq!(both.verify(&parts, &by_new), Some(0));
        assert_eq!(
            old.verify(&parts, &by_new),
            None,
            "signed with the first secret"
        );
        let tombstone: [Option<&[u8]>; 3] = [Some(b"tenant:a"), None, Some(b"0")];
        let empty: [Option<&[u8]>; 3] = [Some(b"tenant:a"), Some(b""), Some(b"0")];
        assert_eq!(both.verify(&tombstone, &both.sign(&empty)), None);
        let shifted: [Option<&[u8]>; 3] = [Some(b"tenant:a{"), Some(b"}"), Some(b"0")];
        assert_eq!(
            both.verify(&shifted, &by_new),
            None,
            "parts cannot run into each other"
        );
        assert_eq!(both.verify(&parts, &by_new[..31]), None);
        assert_ne!(both.key_tag("tenant:a"), old.key_tag("tenant:a"));
        assert_eq!(both.key_tag("tenant:a").len(), 16);
    }

    #[test]
    fn secrets_are_long_enough_and_never_printed() {
        assert!(RegistrySecrets::parse("").is_err());
        assert!(RegistrySecrets::parse("short").is_err());
        assert!(RegistrySecrets::parse("long-enough-secret-1, short").is_err());
        let s = RegistrySecrets::parse("long-enough-secret-1").expect("valid");
        assert!(!format!("{s:?}").contains("long-enough"));
    }
}
