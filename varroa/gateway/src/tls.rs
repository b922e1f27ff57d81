//! The gateway's TLS: mutual TLS with a CA (and server certificate) re-read from their files for
//! every new handshake, so a rotated CA is picked up without a restart.
//!
//! **Why our own acceptor.** tonic's built-in TLS builds one rustls `ServerConfig` at start-up;
//! its client-certificate roots cannot change afterwards. Here the accept loop asks
//! [`ReloadingTls::config`] for the configuration of each new connection: it reads the three files
//! (each bounded at [`MAX_PEM_BYTES`]; they are small, and Kubernetes swaps a mounted Secret's files
//! atomically), and when their bytes differ from the last ones it builds a new `ServerConfig`.
//! Streams already open keep the configuration they were accepted with (as a TLS session does);
//! new handshakes use the new CA at once, with no polling interval to wait for.
//!
//! A file that became unreadable or invalid does not take the gateway down: the last good
//! configuration stays in use and the error is logged (once per distinct content) and counted.
//!
//! **Client verification** is rustls' `WebPkiClientVerifier` (ring provider) with the CA bundle
//! as its only roots: a client certificate is required, must chain to the CA, be within its
//! validity period and carry the `clientAuth` extended key usage. The mite identity (the URI SAN)
//! is read afterwards by [`varroa_pki::identity_of_der`] and checked per stream.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

/// The largest certificate, key or CA file read, in bytes.
pub const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// The files of the gateway's TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server certificate chain (PEM), e.g. `tls.crt` of the server certificate Secret.
    pub cert: PathBuf,
    /// The server certificate's private key (PEM, PKCS#8), e.g. `tls.key`.
    pub key: PathBuf,
    /// The CA bundle client certificates must chain to (PEM; several certificates allowed, e.g.
    /// the old and the new CA during a rotation): `tls.crt` of the `gateway-ca` Secret.
    pub ca: PathBuf,
}

/// Errors building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read {what} {path}: {reason}")]
    Read {
        /// Which file (`server certificate`, `server key`, `CA bundle`).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file's content is not what it must be.
    #[error("invalid {what} {path}: {reason}")]
    Invalid {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What is wrong and the fix.
        reason: String,
    },
}

struct Loaded {
    bytes: [Vec<u8>; 3],
    config: Arc<ServerConfig>,
}

/// A TLS configuration rebuilt when its files change (see the module docs).
pub struct ReloadingTls {
    files: TlsFiles,
    current: Mutex<Loaded>,
    /// The content of the last files that failed to load, so the error is logged once.
    last_failed: Mutex<Option<[Vec<u8>; 3]>>,
    reloads: Box<dyn Fn(bool) + Send + Sync>,
}

impl ReloadingTls {
    /// Loads the files; fails when they are not a usable configuration (at start-up, the gateway
    /// must not run without one). `on_reload(ok)` is called after each rebuild attempt.
    pub fn new(files: TlsFiles, on_reload: impl Fn(bool) + Send + Sync + 'static) -> Result<Self, TlsError> {
        let bytes = read_all(&files)?;
        let config = build(&files, &bytes)?;
        Ok(Self {
            files,
            current: Mutex::new(Loaded { bytes, config }),
            last_failed: Mutex::new(None),
            reloads: Box::new(on_reload),
        })
    }

    /// The configuration for a new handshake: the files are read again, and a change rebuilds it.
    pub fn config(&self) -> Arc<ServerConfig> {
        let fresh = read_all(&self.files);
        // Loaded is only ever replaced whole, so a poisoned lock still holds a usable value.
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = match fresh {
            Ok(b) if b != current.bytes => b,
            Ok(_) => return current.config.clone(),
            Err(e) => {
                self.failed(None, &e);
                return current.config.clone();
            }
        };
        match build(&self.files, &bytes) {
            Ok(config) => {
                tracing::info!(ca = %self.files.ca.display(), cert = %self.files.cert.display(), "TLS files changed: new handshakes use them");
                *current = Loaded { bytes, config };
                (self.reloads)(true);
                current.config.clone()
            }
            Err(e) => {
                self.failed(Some(bytes), &e);
                current.config.clone()
            }
        }
    }

    fn failed(&self, bytes: Option<[Vec<u8>; 3]>, e: &TlsError) {
        let mut last = self.last_failed.lock().unwrap_or_else(|p| p.into_inner());
        if bytes.is_none() || *last != bytes {
            tracing::error!(error = %e, "TLS files changed but cannot be used; keeping the last good configuration");
            (self.reloads)(false);
            *last = bytes;
        }
    }
}

fn read_bounded(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let err = |reason: String| TlsError::Read { what, path: path.to_owned(), reason };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1).read_to_end(&mut bytes).map_err(|e| err(e.to_string()))?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(err(format!("larger than {MAX_PEM_BYTES} bytes")));
    }
    Ok(bytes)
}

fn read_all(files: &TlsFiles) -> Result<[Vec<u8>; 3], TlsError> {
    Ok([
        read_bounded("server certificate", &files.cert)?,
        read_bounded("server key", &files.key)?,
        read_bounded("CA bundle", &files.ca)?,
    ])
}

fn build(files: &TlsFiles, bytes: &[Vec<u8>; 3]) -> Result<Arc<ServerConfig>, TlsError> {
    let invalid = |what, path: &Path, reason: String| TlsError::Invalid { what, path: path.to_owned(), reason };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes[0])
        .collect::<Result<_, _>>()
        .map_err(|e| invalid("server certificate", &files.cert, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(
            "server certificate",
            &files.cert,
            "no CERTIFICATE block; fix: point --tls-cert at the server certificate's tls.crt".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&bytes[1]).map_err(|e| {
        invalid(
            "server key",
            &files.key,
            format!("no PEM private key ({e}); fix: point --tls-key at the server certificate's tls.key"),
        )
    })?;
    let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes[2])
        .collect::<Result<_, _>>()
        .map_err(|e| invalid("CA bundle", &files.ca, format!("not PEM certificates: {e}")))?;
    if cas.is_empty() {
        return Err(invalid(
            "CA bundle",
            &files.ca,
            "no CERTIFICATE block; fix: point --tls-ca at tls.crt of the gateway-ca Secret".into(),
        ));
    }
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add(ca).map_err(|e| invalid("CA bundle", &files.ca, format!("unusable CA certificate: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| invalid("CA bundle", &files.ca, e.to_string()))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("server certificate", &files.cert, e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| {
            invalid("server certificate", &files.cert, format!("does not match the key or is unusable: {e}"))
        })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key"), ca: dir.join("ca.crt") }
    }

    fn write_valid(f: &TlsFiles) -> varroa_pki::CertificateAuthority {
        let day = std::time::Duration::from_secs(86_400);
        let ca = varroa_pki::CertificateAuthority::generate("test", day).unwrap();
        let server = ca.issue_server(&["localhost".into()], day, std::time::SystemTime::now()).unwrap();
        std::fs::write(&f.cert, &server.cert_pem).unwrap();
        std::fs::write(&f.key, &server.key_pem).unwrap();
        std::fs::write(&f.ca, ca.cert_pem()).unwrap();
        ca
    }

    #[test]
    fn start_up_errors_name_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let err = ReloadingTls::new(f.clone(), |_| {}).err().unwrap().to_string();
        assert!(err.contains("server certificate") && err.contains("tls.crt"), "{err}");
        write_valid(&f);
        std::fs::write(&f.ca, "garbage").unwrap();
        let err = ReloadingTls::new(f.clone(), |_| {}).err().unwrap().to_string();
        assert!(err.contains("CA bundle") && err.contains("--tls-ca"), "{err}");
        write_valid(&f);
        let other = varroa_pki::CertificateAuthority::generate("other", std::time::Duration::from_secs(3600)).unwrap();
        std::fs::write(&f.key, other.key_pem()).unwrap();
        let err = ReloadingTls::new(f, |_| {}).err().unwrap().to_string();
        assert!(err.contains("does not match the key"), "{err}");
    }

    #[test]
    fn a_change_rebuilds_once_and_a_broken_file_keeps_the_last_good_config() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        write_valid(&f);
        let results = Arc::new(Mutex::new(Vec::new()));
        let r = results.clone();
        let tls = ReloadingTls::new(f.clone(), move |ok| r.lock().unwrap().push(ok)).unwrap();
        let first = tls.config();
        assert!(Arc::ptr_eq(&first, &tls.config()), "unchanged files: the same config");
        write_valid(&f);
        let second = tls.config();
        assert!(!Arc::ptr_eq(&first, &second), "changed files: a new config");
        std::fs::write(&f.ca, "broken").unwrap();
        assert!(Arc::ptr_eq(&second, &tls.config()));
        assert!(Arc::ptr_eq(&second, &tls.config()));
        assert_eq!(*results.lock().unwrap(), vec![true, false], "the broken content is reported once");
    }
}
