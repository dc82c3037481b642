//! The trust store for baton's outbound TLS (model sessions over `wss://`, `http` tools over
//! `https://`): rustls with the ring provider, always verifying the server's certificate chain
//! and name. There is no option to turn verification off.
//!
//! Roots, in order:
//! 1. the platform's store, read by `rustls-native-certs` (on Linux the distribution's CA bundle,
//!    which operators already manage; `SSL_CERT_FILE` / `SSL_CERT_DIR`, when set, **replace** it,
//!    as they do for OpenSSL);
//! 2. if that yields no certificate at all (a minimal container without a CA bundle), the Mozilla
//!    roots compiled in from `webpki-roots`, so the public service still verifies;
//! 3. plus the certificates of an extra CA file (`model.ca_file`): a private gateway's CA, added to
//!    the roots above, never replacing them.
//!
//! `rustls-native-certs` rather than `rustls-platform-verifier`: it only loads certificates into a
//! `RootCertStore` that baton owns, so the extra CA file and the fallback compose with it and the
//! verifier stays rustls's own webpki verifier on every platform.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The trust store could not be built; the message names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: cannot read CA certificates: {reason}")]
    CaFile { path: PathBuf, reason: String },
    #[error(
        "{path}: no CERTIFICATE section found; model.ca_file must be a PEM file of CA certificates"
    )]
    NoCertificates { path: PathBuf },
    #[error("{path}: certificate {index} is not a usable CA certificate: {reason}")]
    BadCertificate {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Where the default roots came from (for the start-up log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootSource {
    /// The platform store (or `SSL_CERT_FILE` / `SSL_CERT_DIR`).
    Platform(usize),
    /// The compiled-in Mozilla roots, because the platform had none.
    WebpkiFallback(usize),
}

fn default_roots() -> &'static (RootCertStore, RootSource) {
    static ROOTS: OnceLock<(RootCertStore, RootSource)> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let loaded = rustls_native_certs::load_native_certs();
        for e in &loaded.errors {
            tracing::warn!(error = %e, "some platform CA certificates could not be loaded");
        }
        let mut roots = RootCertStore::empty();
        let (added, _ignored) = roots.add_parsable_certificates(loaded.certs);
        if added > 0 {
            (roots, RootSource::Platform(added))
        } else {
            tracing::warn!(
                "no CA certificates in the platform store: using the compiled-in Mozilla roots"
            );
            let roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let n = roots.len();
            (roots, RootSource::WebpkiFallback(n))
        }
    })
}

/// Where the default roots came from, loading them if needed.
pub fn root_source() -> RootSource {
    default_roots().1
}

/// The certificates of a PEM file, every one checked.
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::CaFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::CaFile {
            path: path.to_path_buf(),
            reason: format!("bad PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificates {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// A client configuration trusting the default roots plus, if given, the CAs in `ca_file`.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = default_roots().0.clone();
    if let Some(path) = ca_file {
        for (index, cert) in read_ca_file(path)?.into_iter().enumerate() {
            roots.add(cert).map_err(|e| TlsError::BadCertificate {
                path: path.to_path_buf(),
                index,
                reason: e.to_string(),
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The configuration with the default roots only, built once per process.
pub fn default_client_config() -> Result<Arc<rustls::ClientConfig>, TlsError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, TlsError>> = OnceLock::new();
    CONFIG.get_or_init(|| client_config(None)).clone()
}

/// What to do about a server certificate that no trusted CA signed (self-signed, or a private
/// CA's): the fix a TLS error says along with it. Names no secret: trust is public material.
pub const UNTRUSTED_HINT: &str = "the server's certificate is not signed by a CA baton trusts \
     (it is self-signed, or a private CA's): trust it by starting baton with \
     SSL_CERT_FILE=/path/to/cert.pem (that file then replaces the system's CA list for baton), \
     or for `baton serve` with model.ca_file = \"/path/to/cert.pem\" (added to the system's list)";

/// [`UNTRUSTED_HINT`] when `e` (or an error it wraps, through I/O errors too) is rustls refusing
/// a server certificate whose issuer it does not know; `None` for any other error, whose fix
/// is not trust.
pub fn untrusted_certificate_hint(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    use rustls::{CertificateError, Error};
    let mut next = Some(e);
    while let Some(err) = next {
        let tls = err.downcast_ref::<Error>().or_else(|| {
            err.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<Error>())
        });
        if let Some(Error::InvalidCertificate(CertificateError::UnknownIssuer)) = tls {
            return Some(UNTRUSTED_HINT);
        }
        next = err.source();
    }
    None
}

/// A failed TLS connection in words: the error, and for an untrusted server certificate how to
/// trust it ([`untrusted_certificate_hint`]).
pub fn failure_words(e: &(dyn std::error::Error + 'static)) -> String {
    match untrusted_certificate_hint(e) {
        Some(hint) => format!("{e}: {hint}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS server with a fresh self-signed certificate (written to `cert`) that takes one
    /// connection and drops it after the handshake; its address.
    async fn self_signed_server(cert: &Path) -> std::net::SocketAddr {
        let setup = crate::mock::tls::TlsSetup::SelfSigned {
            cert_out: cert.to_path_buf(),
        };
        let acceptor = crate::mock::tls::acceptor(&setup).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            if let Ok((tcp, _)) = listener.accept().await {
                let _ = acceptor.accept(tcp).await;
            }
        });
        addr
    }

    /// A `wss://` dial to `addr` as a model session makes it, with `config`'s trust.
    async fn dial(
        addr: std::net::SocketAddr,
        config: Arc<rustls::ClientConfig>,
    ) -> tokio_tungstenite::tungstenite::Error {
        let url = format!("wss://127.0.0.1:{}/ws", addr.port());
        tokio_tungstenite::connect_async_tls_with_config(
            url,
            None,
            true,
            Some(tokio_tungstenite::Connector::Rustls(config)),
        )
        .await
        .err()
        .unwrap()
    }

    #[tokio::test]
    async fn an_untrusted_certificate_says_how_to_trust_it() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        let addr = self_signed_server(&cert).await;
        let e = dial(addr, default_client_config().unwrap()).await;
        let words = failure_words(&e);
        assert!(
            words.contains("UnknownIssuer")
                && words.contains("SSL_CERT_FILE=/path/to/cert.pem")
                && words.contains("model.ca_file"),
            "{words}"
        );
        // Trusted, the same server fails otherwise (it answers no WebSocket): no trust hint.
        let addr = self_signed_server(&cert).await;
        let e = dial(addr, client_config(Some(&cert)).unwrap()).await;
        assert_eq!(untrusted_certificate_hint(&e), None, "{e}");
        assert_eq!(failure_words(&e), e.to_string());
        // Wrapped by rustls's own error type too.
        let e = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        assert_eq!(untrusted_certificate_hint(&e), Some(UNTRUSTED_HINT));
        let e = rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName);
        assert_eq!(untrusted_certificate_hint(&e), None);
    }

    #[test]
    fn ca_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = client_config(Some(&missing)).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "just text\n").unwrap();
        let e = client_config(Some(&empty)).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificates { .. }), "{e}");
        let bad = dir.path().join("bad.pem");
        std::fs::write(
            &bad,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = client_config(Some(&bad)).unwrap_err().to_string();
        assert!(e.contains("bad.pem"), "{e}");
    }

    #[test]
    fn default_roots_are_never_empty() {
        assert!(!default_roots().0.is_empty());
        assert!(default_client_config().is_ok());
    }
}
