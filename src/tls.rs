//! TLS for both listeners (rustls, ring provider), used when `[server] tls_cert_file` and
//! `tls_key_file` are set. HTTP/2 and HTTP/1.1 are offered by ALPN.

use std::path::Path;
use std::sync::Arc;

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

/// An acceptor for the certificate chain and private key in these PEM files.
pub fn acceptor(cert_file: &Path, key_file: &Path) -> Result<TlsAcceptor, TlsError> {
    let file_error = |path: &Path, detail: String| TlsError::File {
        path: path.display().to_string(),
        detail,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| file_error(cert_file, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(cert_file, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error(cert_file, "no certificate in the file".into()));
    }
    let key =
        PrivateKeyDer::from_pem_file(key_file).map_err(|e| file_error(key_file, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
