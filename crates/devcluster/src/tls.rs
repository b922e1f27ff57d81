//! The cluster's credentials: a CA it generates, a serving certificate signed by it, the admin
//! bearer token, and the kubeconfig that ties them together.
//!
//! Without a data directory everything is random per start. With one, the CA and the admin token
//! are kept there (mode 0600), so a kubeconfig written before a restart keeps working.

use base64::Engine;
use rand::RngExt;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating certificates: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// The CA and the admin token of a cluster.
pub struct Credentials {
    pub ca_cert_pem: String,
    ca_key: KeyPair,
    ca_params: CertificateParams,
    pub admin_token: String,
    /// The key service-account tokens are signed with (HMAC-SHA256).
    pub sa_key: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

/// A random token of 32 URL-safe characters.
pub fn random_token() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(DnType::CommonName, "devcluster-ca");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    Ok(p)
}

impl Credentials {
    /// Fresh random credentials.
    pub fn generate() -> Result<Credentials, TlsError> {
        let ca_key = KeyPair::generate()?;
        let ca_params = ca_params()?;
        let cert = ca_params.self_signed(&ca_key)?;
        let sa_key: [u8; 32] = rand::rng().random();
        Ok(Credentials {
            ca_cert_pem: cert.pem(),
            ca_key,
            ca_params,
            admin_token: random_token(),
            sa_key: sa_key.to_vec(),
        })
    }

    /// Load the credentials kept in `dir`, or generate and keep them there.
    pub fn load_or_generate(dir: &Path) -> Result<Credentials, TlsError> {
        let pki = dir.join("pki");
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| TlsError::Io { path, source }
        };
        let (crt, key, tok, sak) =
            (pki.join("ca.crt"), pki.join("ca.key"), pki.join("admin.token"), pki.join("sa.key"));
        if crt.exists() && key.exists() && tok.exists() && sak.exists() {
            let ca_cert_pem = std::fs::read_to_string(&crt).map_err(io(&crt))?;
            let key_pem = std::fs::read_to_string(&key).map_err(io(&key))?;
            let admin_token = std::fs::read_to_string(&tok).map_err(io(&tok))?.trim().to_string();
            let sa_key = base64::engine::general_purpose::STANDARD
                .decode(std::fs::read_to_string(&sak).map_err(io(&sak))?.trim())
                .map_err(|e| TlsError::Io { path: sak.display().to_string(), source: std::io::Error::other(e) })?;
            let ca_key = KeyPair::from_pem(&key_pem)?;
            // The issuer is identified by its name and key; both are the same as when the CA was made.
            let ca_params = ca_params()?;
            return Ok(Credentials { ca_cert_pem, ca_key, ca_params, admin_token, sa_key });
        }
        let c = Credentials::generate()?;
        std::fs::create_dir_all(&pki).map_err(io(&pki))?;
        write_private(&crt, &c.ca_cert_pem).map_err(io(&crt))?;
        write_private(&key, &c.ca_key.serialize_pem()).map_err(io(&key))?;
        write_private(&tok, &c.admin_token).map_err(io(&tok))?;
        write_private(&sak, &base64::engine::general_purpose::STANDARD.encode(&c.sa_key)).map_err(io(&sak))?;
        Ok(c)
    }

    /// A serving certificate for the API server's addresses, signed by the CA; returns
    /// (certificate chain PEM, key PEM).
    pub fn serving_cert(&self, ips: &[IpAddr]) -> Result<(String, String), TlsError> {
        let mut names: Vec<String> = [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        names.sort();
        let mut p = CertificateParams::new(names)?;
        for ip in ips.iter().chain([IpAddr::from([127, 0, 0, 1]), IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1])].iter()) {
            let san = SanType::IpAddress(*ip);
            if !p.subject_alt_names.contains(&san) {
                p.subject_alt_names.push(san);
            }
        }
        p.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = p.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The rustls server configuration (HTTP/2 and HTTP/1.1 by ALPN).
    pub fn server_config(&self, ips: &[IpAddr]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let (cert_pem, key_pem) = self.serving_cert(ips)?;
        let certs = pem_certs(&cert_pem);
        let key = rustls::pki_types::PrivateKeyDer::try_from(pem_block(&key_pem, "PRIVATE KEY").unwrap_or_default())
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }

    /// A kubeconfig for user `admin` with the CA and the bearer token.
    pub fn kubeconfig(&self, server: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_cert_pem.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: devcluster\ncontexts:\n- context:\n    cluster: devcluster\n    namespace: default\n    user: admin\n  name: devcluster\ncurrent-context: devcluster\npreferences: {{}}\nusers:\n- name: admin\n  user:\n    token: {}\n",
            self.admin_token
        )
    }
}

fn write_private(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(path)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()
}

/// The DER bytes of the first PEM block with this label.
fn pem_block(pem: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = pem[start..].find(&end)? + start;
    let b64: String = pem[start..stop].chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

fn pem_certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    let mut out = vec![];
    let mut rest = pem;
    while let Some(i) = rest.find("-----BEGIN CERTIFICATE-----") {
        let block = &rest[i..];
        if let Some(der) = pem_block(block, "CERTIFICATE") {
            out.push(rustls::pki_types::CertificateDer::from(der));
        }
        rest = &block["-----BEGIN CERTIFICATE-----".len()..];
    }
    out
}
