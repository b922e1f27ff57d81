//! Reading issued certificates back: identity, expiry, issuer, and whether to rotate.

use std::fmt;
use std::time::{Duration, SystemTime};

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::identity::{MiteIdentity, TRUST_DOMAIN};
use crate::{CertificateAuthority, PkiError, pem, times};

const CERT: &str = "certificate";

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, PkiError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| PkiError::CertInvalid { what: CERT, reason: e.to_string() })?;
    Ok(cert)
}

/// The mite identity a certificate names (its `spiffe://varroa.dev/ns/<ns>/controller/<name>`
/// URI SAN). `cert_pem` may be a chain: the first certificate is read.
///
/// This does not verify the certificate: the gateway calls it on the client certificate that the
/// TLS handshake already verified against the CA (see [`identity_of_der`] for the DER rustls
/// hands out). Fails when the certificate has no such URI SAN, or several different ones.
pub fn identity_of(cert_pem: &str) -> Result<MiteIdentity, PkiError> {
    identity_of_der(&pem::first_cert_der(CERT, cert_pem)?)
}

/// [`identity_of`] for a DER certificate, e.g. the first of rustls'
/// `ServerConnection::peer_certificates()`.
pub fn identity_of_der(cert_der: &[u8]) -> Result<MiteIdentity, PkiError> {
    let cert = parse(cert_der)?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| PkiError::CertInvalid { what: CERT, reason: format!("unreadable subjectAltName: {e}") })?;
    let uris: Vec<&str> = san
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| if let GeneralName::URI(u) = n { Some(*u) } else { None })
                .collect()
        })
        .unwrap_or_default();
    let prefix = format!("spiffe://{TRUST_DOMAIN}/");
    let mut ours: Vec<&str> = uris.iter().copied().filter(|u| u.starts_with(&prefix)).collect();
    ours.sort_unstable();
    ours.dedup();
    match ours.as_slice() {
        [] if uris.is_empty() => {
            Err(PkiError::NoIdentity { reason: format!("no URI SAN (subject {})", cert.subject()) })
        }
        [] => Err(PkiError::NoIdentity { reason: format!("no URI SAN under {prefix} (found {})", uris.join(", ")) }),
        [uri] => MiteIdentity::from_uri(uri).ok_or_else(|| PkiError::NoIdentity {
            reason: format!("URI SAN {uri} is not ns/<namespace>/controller/<name> with valid Kubernetes names"),
        }),
        several => Err(PkiError::NoIdentity { reason: format!("several identities ({})", several.join(", ")) }),
    }
}

/// The certificate's `notAfter` (the first certificate of `cert_pem`).
pub fn not_after(cert_pem: &str) -> Result<SystemTime, PkiError> {
    let der = pem::first_cert_der(CERT, cert_pem)?;
    Ok(times::from_asn1(parse(&der)?.validity().not_after))
}

/// Whether the (first) certificate of `cert_pem` was signed by `ca`: its issuer name is the CA's
/// subject *and* its signature verifies with the CA's public key, so a certificate from another
/// CA with the same name does not match. `false` when `cert_pem` cannot be read.
pub fn issuer_fingerprint_matches(cert_pem: &str, ca: &CertificateAuthority) -> bool {
    let Ok(der) = pem::first_cert_der(CERT, cert_pem) else {
        return false;
    };
    let (Ok(cert), Ok(ca_cert)) = (parse(&der), parse(ca.cert_der())) else {
        return false;
    };
    signed_by(&cert, &ca_cert)
}

fn signed_by(cert: &X509Certificate<'_>, ca: &X509Certificate<'_>) -> bool {
    cert.issuer().as_raw() == ca.subject().as_raw() && cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// Why a mite certificate must be (re)issued; see [`needs_rotation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RotationReason {
    /// There is no certificate (`None`, or only whitespace).
    Missing,
    /// The stored text is not a readable PEM certificate.
    Unreadable {
        /// What is wrong with it.
        error: String,
    },
    /// The certificate was not signed by the current CA (the CA was replaced), even if the
    /// issuer name is the same.
    IssuerChanged,
    /// The certificate names another identity than the Controller's (`found: None` when it names
    /// none), e.g. a Secret copied from another Controller.
    IdentityMismatch {
        /// The identity the certificate names, if any.
        found: Option<MiteIdentity>,
    },
    /// The certificate expires within the renewal window (or has expired).
    Expiring {
        /// Its `notAfter`.
        not_after: SystemTime,
    },
}

impl RotationReason {
    /// A CamelCase word for Kubernetes condition and event reasons: `Missing`, `Unreadable`,
    /// `IssuerChanged`, `IdentityMismatch` or `Expiring`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "Missing",
            Self::Unreadable { .. } => "Unreadable",
            Self::IssuerChanged => "IssuerChanged",
            Self::IdentityMismatch { .. } => "IdentityMismatch",
            Self::Expiring { .. } => "Expiring",
        }
    }
}

impl fmt::Display for RotationReason {
    /// A sentence for condition and event messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => write!(f, "no mite certificate yet"),
            Self::Unreadable { error } => write!(f, "the stored mite certificate is unreadable: {error}"),
            Self::IssuerChanged => write!(f, "the mite certificate was issued by another CA than the current one"),
            Self::IdentityMismatch { found: Some(id) } => {
                write!(f, "the mite certificate names {id}, not this Controller")
            }
            Self::IdentityMismatch { found: None } => write!(f, "the mite certificate names no Controller"),
            Self::Expiring { not_after } => {
                write!(f, "the mite certificate expires at {}", times::rfc3339(*not_after))
            }
        }
    }
}

/// Whether the stored mite certificate of a Controller must be (re)issued, and why; `None` when
/// it is fine.
///
/// `cert_pem` is the Secret's `tls.crt` (`None` when the Secret or the key is absent); `expected`
/// the Controller's identity (`cell: None`); `renew_before` how long before `notAfter` to renew
/// (e.g. a third of the validity). Checks, first failing wins: [`Missing`], [`Unreadable`],
/// [`IssuerChanged`] (signature checked against `ca`), [`IdentityMismatch`], [`Expiring`]
/// (`notAfter - renew_before <= now`, which includes expired). A certificate that outlives the
/// CA is not flagged here: renew the CA before its [`not_after`](CertificateAuthority::not_after).
///
/// [`Missing`]: RotationReason::Missing
/// [`Unreadable`]: RotationReason::Unreadable
/// [`IssuerChanged`]: RotationReason::IssuerChanged
/// [`IdentityMismatch`]: RotationReason::IdentityMismatch
/// [`Expiring`]: RotationReason::Expiring
pub fn needs_rotation(
    cert_pem: Option<&str>,
    ca: &CertificateAuthority,
    expected: &MiteIdentity,
    renew_before: Duration,
    now: SystemTime,
) -> Option<RotationReason> {
    let text = match cert_pem {
        Some(t) if !t.trim().is_empty() => t,
        _ => return Some(RotationReason::Missing),
    };
    let der = match pem::first_cert_der(CERT, text) {
        Ok(der) => der,
        Err(e) => return Some(RotationReason::Unreadable { error: e.to_string() }),
    };
    let cert = match parse(&der) {
        Ok(c) => c,
        Err(e) => return Some(RotationReason::Unreadable { error: e.to_string() }),
    };
    let ca_signed = parse(ca.cert_der()).map(|ca_cert| signed_by(&cert, &ca_cert)).unwrap_or(false);
    if !ca_signed {
        return Some(RotationReason::IssuerChanged);
    }
    match identity_of_der(&der) {
        Ok(found) if &found == expected => {}
        Ok(found) => return Some(RotationReason::IdentityMismatch { found: Some(found) }),
        Err(_) => return Some(RotationReason::IdentityMismatch { found: None }),
    }
    let not_after = times::from_asn1(cert.validity().not_after);
    let renew_at = not_after.checked_sub(renew_before).unwrap_or(SystemTime::UNIX_EPOCH);
    if renew_at <= now {
        return Some(RotationReason::Expiring { not_after });
    }
    None
}
