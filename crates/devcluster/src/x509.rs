//! The few X.509 structures devcluster writes itself (RFC 5280, RFC 2986), because a Kubernetes
//! user's groups are the *repeated* O attributes of a certificate's subject, which rcgen's
//! distinguished names (one value per attribute type) cannot hold:
//! - [`name`]: a subject with CN and any number of O;
//! - [`request`]: a PKCS#10 certificate signing request for such a subject;
//! - [`issue`]: a client certificate for a subject and public key taken as they are (from a
//!   request, as the `kubernetes.io/kube-apiserver-client` signer copies them), signed by the
//!   cluster CA.
//!
//! Only ECDSA P-256 with SHA-256 signing keys are used (what rcgen generates for the CA).

use rcgen::{KeyPair, PublicKeyData, SigningKey};
use yasna::models::{ObjectIdentifier, UTCTime};
use yasna::{DERWriter, Tag};

const ECDSA_WITH_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];
const COMMON_NAME: &[u64] = &[2, 5, 4, 3];
const ORGANIZATION: &[u64] = &[2, 5, 4, 10];
const KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const EXT_KEY_USAGE: &[u64] = &[2, 5, 29, 37];
const BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
const CLIENT_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 2];

#[derive(Debug, thiserror::Error)]
pub enum X509Error {
    #[error("signing: {0}")]
    Sign(#[from] rcgen::Error),
    #[error("the signing key is {0:?}; only ECDSA P-256 SHA-256 keys sign here")]
    Algorithm(String),
}

fn oid(arcs: &[u64]) -> ObjectIdentifier {
    ObjectIdentifier::from_slice(arcs)
}

fn algorithm(w: DERWriter<'_>) {
    w.write_sequence(|w| w.next().write_oid(&oid(ECDSA_WITH_SHA256)));
}

/// The DER of a Name: `CN=<cn>` followed by one `O=<org>` relative name per group, in order.
pub fn name(cn: &str, orgs: &[String]) -> Vec<u8> {
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            let attrs = std::iter::once((COMMON_NAME, cn)).chain(orgs.iter().map(|o| (ORGANIZATION, o.as_str())));
            for (ty, value) in attrs {
                w.next().write_set(|w| {
                    w.next().write_sequence(|w| {
                        w.next().write_oid(&oid(ty));
                        w.next().write_utf8_string(value);
                    })
                });
            }
        })
    })
}

fn check_key(key: &KeyPair) -> Result<(), X509Error> {
    if key.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
        return Err(X509Error::Algorithm(format!("{:?}", key.algorithm())));
    }
    Ok(())
}

/// `to_be_signed` wrapped with the signature algorithm and `key`'s signature over it.
fn signed(to_be_signed: Vec<u8>, key: &KeyPair) -> Result<Vec<u8>, X509Error> {
    check_key(key)?;
    let sig = key.sign(&to_be_signed)?;
    Ok(yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_der(&to_be_signed);
            algorithm(w.next());
            w.next().write_bitvec_bytes(&sig, sig.len() * 8);
        })
    }))
}

/// A PKCS#10 request (DER) for the subject `name_der`, with `key`'s public key, signed by it.
pub fn request(name_der: &[u8], key: &KeyPair) -> Result<Vec<u8>, X509Error> {
    let info = yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_u8(0);
            w.next().write_der(name_der);
            w.next().write_der(&key.subject_public_key_info());
            w.next().write_tagged_implicit(Tag::context(0), |w| w.write_set(|_| {}));
        })
    });
    signed(info, key)
}

/// Time in a certificate: UTCTime until 2049, GeneralizedTime after (RFC 5280 4.1.2.5).
fn time(w: DERWriter<'_>, t: time::OffsetDateTime) {
    // Whole seconds: neither form carries fractions in a certificate.
    let t = t.replace_nanosecond(0).unwrap_or(t);
    if t.year() < 2050 {
        w.write_utctime(&UTCTime::from_datetime(t));
    } else {
        w.write_generalized_time(&yasna::models::GeneralizedTime::from_datetime(t));
    }
}

fn extension(w: DERWriter<'_>, id: &[u64], critical: bool, value: Vec<u8>) {
    w.write_sequence(|w| {
        w.next().write_oid(&oid(id));
        if critical {
            w.next().write_bool(true);
        }
        w.next().write_bytes(&value);
    });
}

/// A certificate (DER) for `subject_der` and `spki_der` (both used as given), issued by
/// `issuer_der` and signed by `issuer_key`, valid from `not_before` to `not_after`, for
/// digital signatures and key encipherment; `client_auth` adds the clientAuth extended usage.
/// Never a CA (basic constraints).
pub fn issue(
    subject_der: &[u8],
    spki_der: &[u8],
    issuer_der: &[u8],
    issuer_key: &KeyPair,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
    client_auth: bool,
) -> Result<Vec<u8>, X509Error> {
    let mut serial: [u8; 16] = rand::RngExt::random(&mut rand::rng());
    serial[0] &= 0x7f;
    serial[0] |= 0x01;
    let tbs = yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_tagged(Tag::context(0), |w| w.write_u8(2));
            w.next().write_bigint_bytes(&serial, true);
            algorithm(w.next());
            w.next().write_der(issuer_der);
            w.next().write_sequence(|w| {
                time(w.next(), not_before);
                time(w.next(), not_after);
            });
            w.next().write_der(subject_der);
            w.next().write_der(spki_der);
            w.next().write_tagged(Tag::context(3), |w| {
                w.write_sequence(|w| {
                    // digitalSignature (bit 0) and keyEncipherment (bit 2).
                    let usage = yasna::construct_der(|w| w.write_bitvec_bytes(&[0b1010_0000], 3));
                    extension(w.next(), KEY_USAGE, true, usage);
                    if client_auth {
                        let eku = yasna::construct_der(|w| w.write_sequence(|w| w.next().write_oid(&oid(CLIENT_AUTH))));
                        extension(w.next(), EXT_KEY_USAGE, false, eku);
                    }
                    let basic = yasna::construct_der(|w| w.write_sequence(|_| {}));
                    extension(w.next(), BASIC_CONSTRAINTS, true, basic);
                })
            });
        })
    });
    signed(tbs, issuer_key)
}

/// PEM of DER bytes with a label (`CERTIFICATE`, `CERTIFICATE REQUEST`).
pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::{FromDer, X509Certificate, X509CertificationRequest};

    #[test]
    fn a_request_and_its_certificate_carry_every_group() {
        let groups = vec!["system:masters".to_string(), "dev".to_string(), "qa".to_string()];
        let key = KeyPair::generate().expect("key");
        let csr = request(&name("jane", &groups), &key).expect("request");
        let (_, parsed) = X509CertificationRequest::from_der(&csr).expect("parses");
        parsed.verify_signature().expect("self-signed request verifies");
        let subject = &parsed.certification_request_info.subject;
        let orgs: Vec<&str> = subject.iter_organization().filter_map(|o| o.as_str().ok()).collect();
        assert_eq!(orgs, ["system:masters", "dev", "qa"]);

        let ca_key = KeyPair::generate().expect("CA key");
        let ca_name = name("devcluster-ca", &[]);
        let now = time::OffsetDateTime::now_utc();
        let der = issue(
            subject.as_raw(),
            parsed.certification_request_info.subject_pki.raw,
            &ca_name,
            &ca_key,
            now,
            now + time::Duration::hours(1),
            true,
        )
        .expect("issue");
        let (_, cert) = X509Certificate::from_der(&der).expect("certificate parses");
        let cn: Vec<&str> = cert.subject().iter_common_name().filter_map(|c| c.as_str().ok()).collect();
        assert_eq!(cn, ["jane"]);
        assert_eq!(cert.subject().iter_organization().count(), 3);
        let ca_spki = ca_key.subject_public_key_info();
        let (_, ca_pub) = x509_parser::x509::SubjectPublicKeyInfo::from_der(&ca_spki).expect("spki");
        cert.verify_signature(Some(&ca_pub)).expect("signed by the CA");
        assert!(cert.validity().is_valid());
        let eku = cert.extended_key_usage().expect("eku parses").expect("eku present");
        assert!(eku.value.client_auth && !eku.value.server_auth);
        assert!(!cert.is_ca());
        assert_eq!(cert.version().0, 2, "v3");
    }

    #[test]
    fn far_future_times_are_generalized() {
        let key = KeyPair::generate().expect("key");
        let n = name("x", &[]);
        let t = time::OffsetDateTime::from_unix_timestamp(2_600_000_000).expect("2052");
        let der =
            issue(&n, &key.subject_public_key_info(), &n, &key, t, t + time::Duration::days(1), false).expect("issue");
        let (_, cert) = X509Certificate::from_der(&der).expect("parses");
        assert_eq!(cert.validity().not_before.timestamp(), 2_600_000_000);
        assert!(cert.extended_key_usage().expect("parses").is_none());
    }
}
