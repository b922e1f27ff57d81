//! Varroa's mite PKI.
//!
//! The mite (the sidecar next to each Jenkins controller) dials out to the gateway over gRPC with
//! mutual TLS. This crate holds everything both ends and the operator need for that:
//!
//! - [`CertificateAuthority`]: the gateway CA (a certificate and its key, loaded from PEM or
//!   generated for development), which issues
//!   - mite client certificates ([`CertificateAuthority::issue_mite`]) naming a [`MiteIdentity`],
//!   - the gateway's own server certificate ([`CertificateAuthority::issue_server`]);
//! - [`identity_of`] / [`identity_of_der`]: what the gateway calls on a presented client
//!   certificate (after rustls has verified it against the CA) to learn which controller dialled;
//! - [`needs_rotation`]: what the operator calls on each reconcile of a Controller to decide
//!   whether the mite certificate kept in the Controller's Secret must be (re)issued, and why
//!   ([`RotationReason`]).
//!
//! # Identity
//!
//! One certificate per Controller: all cells of a controller share it, and a mite reports its cell
//! in its hello message. The identity is encoded as a URI subject alternative name
//! `spiffe://varroa.dev/ns/<namespace>/controller/<name>` (SPIFFE-style, see [`MiteIdentity::uri`]),
//! which is authoritative; the subject common name `<namespace>/<name>` is only there for humans
//! reading `openssl x509 -text`.
//!
//! # Keys and times
//!
//! Every key this crate generates is ECDSA P-256. Certificates get `not_before = now - 5 minutes`
//! ([`CLOCK_SKEW`]) so a peer whose clock is slightly behind accepts them at once, and
//! `not_after = now + validity`. X.509 times have a one-second resolution: the times reported in
//! [`IssuedCert`] are those written in the certificate.

mod ca;
mod error;
mod identity;
mod inspect;
mod pem;
mod times;

pub use ca::{CertificateAuthority, IssuedCert};
pub use error::PkiError;
pub use identity::{MiteIdentity, TRUST_DOMAIN};
pub use inspect::{
    RotationReason, identity_of, identity_of_der, issuer_fingerprint_matches, needs_rotation, not_after,
};

use std::time::Duration;

/// How far back in time certificates start being valid (`not_before = now - CLOCK_SKEW`), so that
/// peers whose clocks lag behind the issuer's by up to five minutes accept a fresh certificate.
pub const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);
