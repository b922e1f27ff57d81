//! The gateway CA and the certificates it issues.

use std::fmt;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType,
};
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::identity::MiteIdentity;
use crate::{PkiError, pem, times};

/// The gateway CA: a CA certificate and its private key.
///
/// It issues the mites' client certificates and the gateway's server certificate; the gateway
/// trusts client certificates it signed, and mites trust the server certificate it signed.
/// The operator keeps it in a Secret (`tls.crt`, `tls.key`) and stores its
/// [`fingerprint`](Self::fingerprint) next to each issued mite certificate to notice a CA change.
///
/// `Debug` does not print the key.
pub struct CertificateAuthority {
    cert_pem: String,
    cert_der: Vec<u8>,
    not_before: SystemTime,
    not_after: SystemTime,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its freshly generated private key, both PEM, as stored in a Secret
/// (`tls.crt`, `tls.key`).
///
/// `not_before` and `not_after` are the times written in the certificate (whole seconds).
/// `Debug` does not print the key.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCert {
    /// The certificate (one `CERTIFICATE` block, the leaf only: the CA is distributed separately).
    pub cert_pem: String,
    /// Its ECDSA P-256 private key (unencrypted PKCS#8, `-----BEGIN PRIVATE KEY-----`).
    pub key_pem: String,
    /// Start of validity: the issuing time minus [`CLOCK_SKEW`](crate::CLOCK_SKEW).
    pub not_before: SystemTime,
    /// End of validity: the issuing time plus the validity asked for.
    pub not_after: SystemTime,
}

impl fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("not_before", &times::rfc3339(self.not_before))
            .field("not_after", &times::rfc3339(self.not_after))
            .finish()
    }
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("fingerprint", &self.fingerprint())
            .field("not_before", &times::rfc3339(self.not_before))
            .field("not_after", &times::rfc3339(self.not_after))
            .field("key", &"<redacted>")
            .finish()
    }
}

const CA_CERT: &str = "CA certificate (tls.crt)";
const CA_KEY: &str = "CA key (tls.key)";

impl CertificateAuthority {
    /// Loads a CA from its certificate and private key, as found in a `kubernetes.io/tls` Secret.
    ///
    /// `cert_pem` must hold the CA certificate (the first `CERTIFICATE` block is used; others are
    /// ignored) with `basicConstraints CA:TRUE`. `key_pem` must hold its private key as
    /// unencrypted PKCS#8 (`-----BEGIN PRIVATE KEY-----`); ECDSA P-256/P-384, Ed25519 and RSA keys
    /// are accepted. Errors name the input at fault and the fix, e.g. "CA key (tls.key) is not a
    /// PEM private key", "... is a EC PRIVATE KEY PEM block ... convert it to PKCS#8 with openssl
    /// pkcs8 -topk8 ...", "CA key (tls.key) does not belong to the CA certificate (tls.crt)".
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        let cert_der = pem::first_cert_der(CA_CERT, cert_pem)?;
        let (_, cert) = X509Certificate::from_der(&cert_der)
            .map_err(|e| PkiError::CertInvalid { what: CA_CERT, reason: e.to_string() })?;
        if !cert.is_ca() {
            return Err(PkiError::NotACa { subject: cert.subject().to_string() });
        }
        let key_der = pem::private_key_der(CA_KEY, key_pem)?;
        let key = KeyPair::try_from(key_der.as_slice())
            .map_err(|e| PkiError::KeyInvalid { what: CA_KEY, reason: e.to_string() })?;
        if key.public_key_raw() != cert.public_key().subject_public_key.data.as_ref() {
            return Err(PkiError::KeyMismatch);
        }
        let not_before = times::from_asn1(cert.validity().not_before);
        let not_after = times::from_asn1(cert.validity().not_after);
        let issuer = Issuer::from_ca_cert_der(&cert_der.as_slice().into(), key)
            .map_err(|e| PkiError::CertInvalid { what: CA_CERT, reason: e.to_string() })?;
        Ok(Self { cert_pem: pem::encode_cert(&cert_der), cert_der, not_before, not_after, issuer })
    }

    /// Generates a new self-signed CA with an ECDSA P-256 key, valid from 5 minutes ago for
    /// `validity`, that may sign leaf certificates only (path length 0). For development, demos
    /// and tests; production CAs come from a Secret via [`from_pem`](Self::from_pem).
    pub fn generate(common_name: &str, validity: Duration) -> Result<Self, PkiError> {
        let (not_before, not_after) = times::window(SystemTime::now(), validity)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, "Varroa");
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.not_before = not_before;
        params.not_after = not_after;
        let key = new_key("generate the CA key")?;
        let cert = params.self_signed(&key).map_err(|e| gen_err("self-sign the CA certificate", e))?;
        Self::from_pem(&cert.pem(), &key.serialize_pem())
    }

    /// The CA certificate, PEM (one `CERTIFICATE` block): what mites and the gateway trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The CA private key, unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// `sha256:<64 lowercase hex digits>` of the CA certificate's DER. The operator stores it with
    /// each issued certificate: a different value means the CA changed (even if names did not).
    pub fn fingerprint(&self) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, &self.cert_der);
        let mut out = String::from("sha256:");
        for b in digest.as_ref() {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// The CA certificate's `notBefore`.
    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    /// The CA certificate's `notAfter`: mite certificates are useless after it, whatever their own
    /// `notAfter`, so renew the CA before.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// Issues the client certificate of the mites of one Controller, with a new ECDSA P-256 key.
    ///
    /// The certificate names `id` as the URI SAN [`MiteIdentity::uri`] and the subject
    /// `CN=<namespace>/<controller>, OU=mite, O=Varroa`; it is valid for TLS client
    /// authentication only, from `now - 5 minutes` to `now + validity`.
    ///
    /// Fails when `id.cell` is set (certificates are per Controller; see [`MiteIdentity`]), when
    /// a name is not a valid Kubernetes name, or when the CA is not valid at `now`.
    pub fn issue_mite(&self, id: &MiteIdentity, validity: Duration, now: SystemTime) -> Result<IssuedCert, PkiError> {
        if let Some(cell) = id.cell {
            return Err(PkiError::PerCellNotSupported { cell });
        }
        id.validate()?;
        let uri = rcgen::string::Ia5String::try_from(id.uri())
            .map_err(|e| PkiError::Generate { action: "encode the mite identity URI", reason: e.to_string() })?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, "Varroa");
        params.distinguished_name.push(DnType::OrganizationalUnitName, "mite");
        params.distinguished_name.push(DnType::CommonName, id.common_name());
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, validity, now, "sign the mite certificate")
    }

    /// Issues the gateway's server certificate for `dns_names` (DNS names, or IP addresses written
    /// as such, e.g. `"10.0.0.1"`), with a new ECDSA P-256 key, valid for TLS server
    /// authentication only, from `now - 5 minutes` to `now + validity`. The first name is also
    /// the subject common name.
    pub fn issue_server(
        &self,
        dns_names: &[String],
        validity: Duration,
        now: SystemTime,
    ) -> Result<IssuedCert, PkiError> {
        let Some(first) = dns_names.first() else {
            return Err(PkiError::NoServerNames);
        };
        let mut sans = Vec::with_capacity(dns_names.len());
        for name in dns_names {
            check_server_name(name)?;
            let one = CertificateParams::new(vec![name.clone()])
                .map_err(|e| PkiError::InvalidServerName { name: name.clone(), reason: e.to_string() })?;
            sans.extend(one.subject_alt_names);
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, "Varroa");
        params.distinguished_name.push(DnType::OrganizationalUnitName, "gateway");
        let mut cn = first.clone();
        cn.truncate(64); // ASCII (checked), so any byte index is a char boundary
        params.distinguished_name.push(DnType::CommonName, cn);
        params.subject_alt_names = sans;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params, validity, now, "sign the server certificate")
    }

    fn issue(
        &self,
        mut params: CertificateParams,
        validity: Duration,
        now: SystemTime,
        action: &'static str,
    ) -> Result<IssuedCert, PkiError> {
        if now < self.not_before || now > self.not_after {
            return Err(PkiError::CaNotValid {
                now: times::rfc3339(now),
                not_before: times::rfc3339(self.not_before),
                not_after: times::rfc3339(self.not_after),
            });
        }
        let (not_before, not_after) = times::window(now, validity)?;
        params.not_before = not_before;
        params.not_after = not_after;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let key = new_key("generate the certificate key")?;
        let cert = params.signed_by(&key, &self.issuer).map_err(|e| gen_err(action, e))?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_before: times::from_offset(not_before),
            not_after: times::from_offset(not_after),
        })
    }
}

/// A DNS name (letters, digits, '-', dot-separated labels of 1 to 63 characters, at most 253 in
/// all, optionally starting with `*.`) or an IP address.
fn check_server_name(name: &str) -> Result<(), PkiError> {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let bad = |reason: &str| PkiError::InvalidServerName { name: name.to_owned(), reason: reason.to_owned() };
    if name.is_empty() || name.len() > 253 {
        return Err(bad("a DNS name has 1 to 253 characters"));
    }
    let host = name.strip_prefix("*.").unwrap_or(name);
    for label in host.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(bad("each dot-separated label has 1 to 63 characters"));
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(bad("labels hold letters, digits and inner '-' only"));
        }
    }
    Ok(())
}

fn new_key(action: &'static str) -> Result<KeyPair, PkiError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| gen_err(action, e))
}

fn gen_err(action: &'static str, e: rcgen::Error) -> PkiError {
    PkiError::Generate { action, reason: e.to_string() }
}
