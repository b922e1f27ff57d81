//! The cluster's credentials: a CA it generates, a serving certificate signed by it, the admin
//! bearer token, and the kubeconfig that ties them together.
//!
//! Without a data directory everything is random per start. With one, the CA and the admin token
//! are kept there (mode 0600), so a kubeconfig written before a restart keeps working.

use base64::Engine;
use rand::RngExt;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType,
};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating certificates: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("certificate request: {0}")]
    Request(String),
    #[error(transparent)]
    X509(#[from] crate::x509::X509Error),
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
        let verifier = Arc::new(RequestClientCert { provider: provider.clone() });
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }

    /// A client certificate for `user` in `groups` (its CN and one O per group), signed by the
    /// CA and valid for `validity` from now: (certificate PEM, key PEM). What `devcluster serve
    /// --kubeconfig-auth cert` writes for `admin` (in `system:masters`).
    pub fn issue_client_cert(
        &self,
        user: &str,
        groups: &[String],
        validity: std::time::Duration,
    ) -> Result<(String, String), TlsError> {
        let key = KeyPair::generate()?;
        let der = self.issue(&crate::x509::name(user, groups), &key.subject_public_key_info(), validity, true)?;
        Ok((crate::x509::pem("CERTIFICATE", &der), key.serialize_pem()))
    }

    /// Sign a PKCS#10 request (PEM) as the `kubernetes.io/kube-apiserver-client` signer does
    /// (pkg/controller/certificates/signer): the subject and public key of the request as they
    /// are, the usages of the CertificateSigningRequest (`client auth` adds the clientAuth
    /// extended usage), valid for `validity` from now; the request's own extensions are not
    /// copied. Err when the request does not parse or its signature does not verify.
    pub fn sign_client_csr(
        &self,
        csr_pem: &str,
        usages: &[&str],
        validity: std::time::Duration,
    ) -> Result<String, TlsError> {
        use x509_parser::prelude::{FromDer, X509CertificationRequest};
        let bad = |why: String| TlsError::Request(why);
        let der = pem_block(csr_pem, "CERTIFICATE REQUEST")
            .or_else(|| pem_block(csr_pem, "NEW CERTIFICATE REQUEST"))
            .ok_or_else(|| bad("no PEM block of type CERTIFICATE REQUEST".into()))?;
        let (_, csr) = X509CertificationRequest::from_der(&der).map_err(|e| bad(format!("malformed request: {e}")))?;
        csr.verify_signature().map_err(|_| bad("the request's signature does not verify".into()))?;
        let info = &csr.certification_request_info;
        let client_auth = usages.contains(&"client auth");
        let der = self.issue(info.subject.as_raw(), info.subject_pki.raw, validity, client_auth)?;
        Ok(crate::x509::pem("CERTIFICATE", &der))
    }

    /// A leaf certificate signed by the CA, backdated five minutes for clock skew as the
    /// signer does.
    fn issue(
        &self,
        subject_der: &[u8],
        spki_der: &[u8],
        validity: std::time::Duration,
        client_auth: bool,
    ) -> Result<Vec<u8>, TlsError> {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let ca_der = pem_block(&self.ca_cert_pem, "CERTIFICATE")
            .ok_or_else(|| TlsError::Request("the cluster CA does not parse".into()))?;
        let (_, ca) =
            X509Certificate::from_der(&ca_der).map_err(|e| TlsError::Request(format!("the cluster CA: {e}")))?;
        let now = time::OffsetDateTime::now_utc();
        let not_after = now
            + time::Duration::seconds(
                i64::try_from(validity.as_secs()).unwrap_or(i64::MAX / 4).min(100 * 365 * 86_400),
            );
        Ok(crate::x509::issue(
            subject_der,
            spki_der,
            ca.subject().as_raw(),
            &self.ca_key,
            now - time::Duration::minutes(5),
            not_after,
            client_auth,
        )?)
    }

    /// Who a client certificate names, if the CA signed it and it is valid now for client
    /// authentication, as the apiserver's x509 authenticator checks it
    /// (staging/src/k8s.io/apiserver/pkg/authentication/request/x509/x509.go): Err says why not.
    pub fn verify_client_cert(&self, der: &[u8]) -> Result<ClientIdentity, String> {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let ca_der = pem_block(&self.ca_cert_pem, "CERTIFICATE").ok_or("the cluster CA does not parse")?;
        let (_, ca) = X509Certificate::from_der(&ca_der).map_err(|e| format!("the cluster CA: {e}"))?;
        let (_, cert) = X509Certificate::from_der(der).map_err(|e| format!("x509: malformed certificate: {e}"))?;
        if cert.issuer() != ca.subject() || cert.verify_signature(Some(ca.public_key())).is_err() {
            return Err("x509: certificate signed by unknown authority".into());
        }
        if !cert.validity().is_valid() {
            return Err("x509: certificate has expired or is not yet valid".into());
        }
        if let Ok(Some(eku)) = cert.extended_key_usage()
            && !eku.value.any
            && !eku.value.client_auth
        {
            return Err("x509: certificate specifies an incompatible key usage".into());
        }
        let subject = cert.subject();
        let user = subject.iter_common_name().next().and_then(|cn| cn.as_str().ok()).unwrap_or("").to_string();
        if user.is_empty() {
            return Err("common name of the provided certificate is nil".into());
        }
        let groups = subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_string).collect();
        let digest = ring::digest::digest(&ring::digest::SHA256, der);
        let fingerprint = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        Ok(ClientIdentity { user, groups, fingerprint })
    }

    /// A kubeconfig for user `admin` that authenticates with a client certificate (CN `admin`,
    /// O `system:masters`) instead of the bearer token.
    pub fn kubeconfig_with_cert(&self, server: &str) -> Result<String, TlsError> {
        let (crt, key) = self.issue_client_cert("admin", &["system:masters".to_string()], CLIENT_CERT_VALIDITY)?;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_cert_pem.as_bytes());
        Ok(kubeconfig_for_cert(server, &ca, "admin", &crt, &key))
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

/// A kubeconfig for `user` that presents `cert_pem` and `key_pem` to `server`, trusting the CA
/// in `ca_data` (base64 of its PEM, as `certificate-authority-data`).
pub fn kubeconfig_for_cert(server: &str, ca_data: &str, user: &str, cert_pem: &str, key_pem: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    // A JSON string is a YAML double-quoted scalar: any user name stays one value.
    let user = serde_json::to_string(user).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca_data}\n    server: {server}\n  name: devcluster\ncontexts:\n- context:\n    cluster: devcluster\n    namespace: default\n    user: {user}\n  name: devcluster\ncurrent-context: devcluster\npreferences: {{}}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(cert_pem),
        b64(key_pem),
    )
}

/// How long the admin's client certificate is valid (a year, as kubeadm's admin.conf).
pub const CLIENT_CERT_VALIDITY: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

/// Who an accepted client certificate names: CN the user, O the groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub user: String,
    pub groups: Vec<String>,
    /// Hex SHA-256 of the certificate's DER (the credential id the apiserver records).
    pub fingerprint: String,
}

/// Asks every client for a certificate and accepts any that proves possession of its key, as
/// the apiserver's `tls.RequestClientCert` does: whether the certificate is trusted is the x509
/// authenticator's question ([`Credentials::verify_client_cert`]), answered with a 401, not a
/// failed handshake. Clients without a certificate go on to token authentication.
#[derive(Debug)]
struct RequestClientCert {
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::server::danger::ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        // By the certificate's public key alone: webpki refuses to parse X.509 v1 certificates
        // (what `openssl x509 -req` makes without extensions), which the apiserver accepts.
        use x509_parser::prelude::{FromDer, X509Certificate};
        let (_, parsed) = X509Certificate::from_der(cert.as_ref())
            .map_err(|_| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
        let spki = rustls::pki_types::SubjectPublicKeyInfoDer::from(parsed.public_key().raw);
        rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &spki,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
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
