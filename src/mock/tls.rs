//! TLS for the mock server: a self-signed certificate for `localhost`/`127.0.0.1` made on the spot
//! (its PEM written where clients can trust it via `SSL_CERT_FILE`), or a given certificate and key.
//! rustls with the ring provider.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Where the server's certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSetup {
    /// Make a self-signed certificate for `localhost` and `127.0.0.1`; write its PEM to `cert_out`.
    SelfSigned { cert_out: PathBuf },
    /// Use these PEM files.
    Files { cert: PathBuf, key: PathBuf },
}

/// TLS could not be set up; the message names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path}: {what}")]
    File { path: PathBuf, what: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// Builds the acceptor (and, for [`TlsSetup::SelfSigned`], writes the certificate PEM).
pub fn acceptor(setup: &TlsSetup) -> Result<TlsAcceptor, TlsError> {
    let (certs, key) = match setup {
        TlsSetup::SelfSigned { cert_out } => {
            let ck = rcgen::generate_simple_self_signed(vec![
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
            ])?;
            std::fs::write(cert_out, ck.cert.pem()).map_err(|e| TlsError::File {
                path: cert_out.clone(),
                what: format!("cannot write certificate: {e}"),
            })?;
            let key = PrivateKeyDer::try_from(ck.signing_key.serialize_der()).map_err(|e| {
                TlsError::File {
                    path: cert_out.clone(),
                    what: format!("generated key unusable: {e}"),
                }
            })?;
            (vec![ck.cert.der().clone()], key)
        }
        TlsSetup::Files { cert, key } => (read_certs(cert)?, read_key(key)?),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |what: String| TlsError::File {
        path: path.to_path_buf(),
        what,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(format!("cannot read certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("bad certificate PEM: {e}")))?;
    if certs.is_empty() {
        return Err(err("no CERTIFICATE section found".into()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        path: path.to_path_buf(),
        what: format!("cannot read a private key: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_writes_pem_and_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        acceptor(&TlsSetup::SelfSigned {
            cert_out: cert.clone(),
        })
        .unwrap();
        let pem = std::fs::read_to_string(&cert).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));

        let missing = acceptor(&TlsSetup::Files {
            cert: cert.clone(),
            key: dir.path().join("nokey.pem"),
        })
        .err()
        .unwrap()
        .to_string();
        assert!(missing.contains("nokey.pem"), "{missing}");
    }
}
