//! TLS for both listeners (rustls, ring provider), used when `[server] tls_cert_file` and
//! `tls_key_file` are set. HTTP/2 and HTTP/1.1 are offered by ALPN.
//!
//! With `tls_client_ca_file`, the produce listener verifies client certificates (rustls's
//! `WebPkiClientVerifier`: the chain to one of those CAs, the validity period, the client-auth
//! key usage), required or optional. A verified certificate's names are read once, at the
//! handshake, into a [`ClientCertificate`] every request of the connection carries. A chain of
//! more than [`chain::MAX_INTERMEDIATES`] intermediates, or naming one subject twice, is
//! refused before webpki builds paths over it ([`chain`]).
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use std::path::Path;
use std::sync::Arc;

mod chain;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {detail}")]
    File { path: String, detail: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// Client certificates a listener verifies.
#[derive(Debug, Clone, Copy)]
pub struct ClientAuth<'a> {
    /// PEM certificates of the trusted CAs.
    pub ca_file: &'a Path,
    /// Refuse handshakes without a client certificate.
    pub required: bool,
}

/// Most names of each kind read from one certificate, and the longest name kept.
const MAX_NAMES: usize = 32;
const MAX_NAME_BYTES: usize = 512;

/// What a verified client certificate says about its holder, read once per connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientCertificate {
    /// URI subject alternative names (SPIFFE ids), in certificate order.
    pub uris: Vec<String>,
    /// DNS subject alternative names, in certificate order.
    pub dns: Vec<String>,
    /// The subject's first common name.
    pub cn: Option<String>,
    /// notAfter, in seconds since the Unix epoch: a connection outliving its certificate is
    /// refused from then on.
    pub not_after_unix: i64,
}

impl ClientCertificate {
    /// The names of a DER certificate (already verified by rustls); `None` if it does not
    /// parse. Names longer than 512 bytes, and names past the 32nd of a kind, are ignored.
    pub fn from_der(der: &[u8]) -> Option<Self> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let mut out = Self {
            not_after_unix: cert.validity().not_after.timestamp(),
            ..Self::default()
        };
        let keep = |list: &mut Vec<String>, name: &str| {
            if list.len() < MAX_NAMES && name.len() <= MAX_NAME_BYTES {
                list.push(name.to_string());
            }
        };
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::URI(uri) => keep(&mut out.uris, uri),
                    GeneralName::DNSName(dns) => keep(&mut out.dns, dns),
                    _ => {}
                }
            }
        }
        out.cn = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .filter(|cn| cn.len() <= MAX_NAME_BYTES)
            .map(str::to_string);
        Some(out)
    }
}

/// The verified client certificate of a TLS connection, if it presented one.
pub fn client_certificate(
    connection: &rustls::ServerConnection,
) -> Option<std::sync::Arc<ClientCertificate>> {
    let leaf = connection.peer_certificates()?.first()?;
    ClientCertificate::from_der(leaf.as_ref()).map(Arc::new)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |detail: String| TlsError::File {
        path: path.display().to_string(),
        detail,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error("no certificate in the file".into()));
    }
    Ok(certs)
}

/// An acceptor for the certificate chain and private key in these PEM files, verifying client
/// certificates when `client` says so.
pub fn acceptor(
    cert_file: &Path,
    key_file: &Path,
    client: Option<ClientAuth<'_>>,
) -> Result<TlsAcceptor, TlsError> {
    let certs = read_certs(cert_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| TlsError::File {
        path: key_file.display().to_string(),
        detail: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client {
        None => builder.with_no_client_auth(),
        Some(client) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in read_certs(client.ca_file)? {
                roots.add(ca).map_err(|e| TlsError::File {
                    path: client.ca_file.display().to_string(),
                    detail: format!("not a usable CA certificate: {e}"),
                })?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider);
            let verifier = if client.required {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Config(rustls::Error::General(e.to_string())))?;
            builder.with_client_cert_verifier(Arc::new(chain::Bounded(verifier)))
        }
    };
    let mut config = builder.with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
