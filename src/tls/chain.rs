//! A bound on the client certificate chains webpki builds paths over. rustls-webpki tries every
//! presented intermediate whose subject matches, depth-first, parsing each again at every
//! step, until 200,000 steps are spent: ten self-issued intermediates of one name (60 KB with
//! unknown extensions) cost 6.3 s of CPU for one handshake on a request worker, before any
//! request, credential or budget (review 41-r9 of #37). A real client's chain has a few
//! intermediates, each of its own name, and it is refused here before webpki sees it if not.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

/// Intermediates a client may present beside its certificate.
pub const MAX_INTERMEDIATES: usize = 4;

/// The verifier it wraps, given only chains [`plausible`] passes.
#[derive(Debug)]
pub struct Bounded(pub Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for Bounded {
    fn offer_client_auth(&self) -> bool {
        self.0.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.0.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        if !plausible(intermediates) {
            // No path to a CA through such a chain is tried: none is known.
            return Err(Error::InvalidCertificate(CertificateError::UnknownIssuer));
        }
        self.0.verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// At most [`MAX_INTERMEDIATES`], each parsed once and of a subject no other has: each then
/// has at most one issuer among them, and a path is built in as many steps.
pub fn plausible(intermediates: &[CertificateDer<'_>]) -> bool {
    if intermediates.len() > MAX_INTERMEDIATES {
        return false;
    }
    let mut subjects: Vec<&[u8]> = Vec::with_capacity(intermediates.len());
    for der in intermediates {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
            return false;
        };
        let subject = cert.tbs_certificate.subject.as_raw();
        if subjects.contains(&subject) {
            return false;
        }
        subjects.push(subject);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    fn fixture(name: &str) -> CertificateDer<'static> {
        let path = format!("{}/tests/fixtures/tls/{name}", env!("CARGO_MANIFEST_DIR"));
        CertificateDer::from_pem_file(path).expect("a fixture certificate")
    }

    /// Review 41-r9 of #37: ten self-issued intermediates of one name cost 6.3 s of CPU in
    /// webpki's path building. Such chains are refused before it; a real chain's shape passes.
    #[test]
    fn long_chains_and_repeated_names_are_refused_before_path_building() {
        let (ca, leaf) = (fixture("ca.pem"), fixture("cert.pem"));
        assert!(plausible(&[]));
        assert!(plausible(std::slice::from_ref(&ca)));
        assert!(plausible(&[leaf.clone(), ca.clone()]), "two names");
        assert!(!plausible(&[ca.clone(), ca.clone()]), "one name twice");
        assert!(!plausible(&vec![leaf; MAX_INTERMEDIATES + 1]), "too many");
        assert!(
            !plausible(&[CertificateDer::from(vec![0x30, 0x01])]),
            "no certificate"
        );
    }
}
