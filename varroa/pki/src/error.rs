//! The error type of this crate.

/// What went wrong with a certificate, a key, an identity or a validity, and how to fix it.
///
/// `what` fields name the input as a user knows it, e.g. `"CA certificate (tls.crt)"`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PkiError {
    /// The input holds no `-----BEGIN CERTIFICATE-----` block.
    #[error(
        "{what} is not a PEM certificate: no -----BEGIN CERTIFICATE----- block found{detail}; \
         fix: provide the PEM-encoded X.509 certificate"
    )]
    CertNotPem {
        /// The input, e.g. `"CA certificate (tls.crt)"`.
        what: &'static str,
        /// Extra detail (empty, or `" (...)"`).
        detail: String,
    },
    /// The certificate block is there but is not a valid X.509 certificate.
    #[error("{what} is not a valid X.509 certificate: {reason}; fix: provide an unmodified PEM certificate")]
    CertInvalid {
        /// The input, e.g. `"certificate"`.
        what: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// The input holds no private key block.
    #[error(
        "{what} is not a PEM private key: no -----BEGIN PRIVATE KEY----- block found{detail}; \
         fix: provide the unencrypted PKCS#8 PEM private key"
    )]
    KeyNotPem {
        /// The input, e.g. `"CA key (tls.key)"`.
        what: &'static str,
        /// Extra detail (empty, or `" (...)"`).
        detail: String,
    },
    /// The private key is PEM but in a format this crate cannot read (SEC1, PKCS#1, encrypted).
    #[error("{what} is a {label} PEM block, which is not supported; fix: {fix}")]
    KeyFormat {
        /// The input, e.g. `"CA key (tls.key)"`.
        what: &'static str,
        /// The PEM label found, e.g. `"EC PRIVATE KEY"`.
        label: String,
        /// How to convert it.
        fix: &'static str,
    },
    /// The private key block is there but cannot be used.
    #[error(
        "{what} is not a usable private key: {reason}; \
         fix: provide an unencrypted PKCS#8 ECDSA (P-256/P-384), Ed25519 or RSA key"
    )]
    KeyInvalid {
        /// The input, e.g. `"CA key (tls.key)"`.
        what: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// The key does not match the certificate's public key.
    #[error(
        "CA key (tls.key) does not belong to the CA certificate (tls.crt): their public keys differ; \
         fix: put the certificate and the key of the same CA in the Secret"
    )]
    KeyMismatch,
    /// The certificate given as a CA is not a CA.
    #[error(
        "CA certificate (tls.crt) is not a CA certificate (no basicConstraints CA:TRUE, subject {subject}); \
         fix: provide the certificate of the CA that issues mite certificates, not a leaf certificate"
    )]
    NotACa {
        /// The certificate's subject.
        subject: String,
    },
    /// The CA certificate is not valid at the time a certificate is issued.
    #[error(
        "the CA certificate is not valid at {now} (valid from {not_before} to {not_after}); \
         fix: renew the CA (the operator then reissues every mite certificate)"
    )]
    CaNotValid {
        /// The issuing time (RFC 3339).
        now: String,
        /// The CA's `notBefore` (RFC 3339).
        not_before: String,
        /// The CA's `notAfter` (RFC 3339).
        not_after: String,
    },
    /// A validity or issuing time that cannot be written in a certificate.
    #[error("invalid {field}: {reason}")]
    InvalidTime {
        /// The parameter, e.g. `"validity"`.
        field: &'static str,
        /// Why, and the fix.
        reason: String,
    },
    /// A field of a [`MiteIdentity`](crate::MiteIdentity) is not a valid Kubernetes name.
    #[error("invalid mite identity {field} {value:?}: {reason}")]
    InvalidIdentity {
        /// `"namespace"` or `"controller"`.
        field: &'static str,
        /// The value given.
        value: String,
        /// Why, and the fix.
        reason: String,
    },
    /// A per-cell mite certificate was asked for.
    #[error(
        "mite certificates are issued per Controller, not per cell (cell {cell} given); \
         fix: issue with cell None: all cells share the Controller's certificate and each mite \
         reports its cell in its hello"
    )]
    PerCellNotSupported {
        /// The cell given.
        cell: u32,
    },
    /// No name was given for a server certificate.
    #[error("a server certificate needs at least one DNS name or IP address; fix: pass the gateway's Service names")]
    NoServerNames,
    /// A server name is neither a DNS name nor an IP address.
    #[error("server name {name:?} is not a valid DNS name or IP address: {reason}")]
    InvalidServerName {
        /// The name given.
        name: String,
        /// Why.
        reason: String,
    },
    /// The certificate carries no Varroa mite identity.
    #[error(
        "certificate carries no Varroa mite identity: {reason}; \
         fix: use a certificate issued by the operator for a Controller (URI SAN spiffe://varroa.dev/ns/<ns>/controller/<name>)"
    )]
    NoIdentity {
        /// What was found instead.
        reason: String,
    },
    /// Generating or signing a certificate failed.
    #[error("could not {action}: {reason}")]
    Generate {
        /// What was being done, e.g. `"sign the mite certificate"`.
        action: &'static str,
        /// rcgen's complaint.
        reason: String,
    },
}
