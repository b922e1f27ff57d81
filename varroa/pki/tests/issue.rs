//! Issuing, reading back, rotation decisions and CA loading errors.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use varroa_pki::{
    CLOCK_SKEW, CertificateAuthority, MiteIdentity, RotationReason, identity_of, issuer_fingerprint_matches,
    needs_rotation, not_after,
};

const DAY: Duration = Duration::from_secs(86_400);

/// Now, in whole seconds (what a certificate can hold), so times compare exactly.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs())
}

fn ca() -> CertificateAuthority {
    CertificateAuthority::generate("varroa-gateway-ca", 365 * DAY).unwrap()
}

fn id(ns: &str, name: &str) -> MiteIdentity {
    MiteIdentity::new(ns, name)
}

#[test]
fn mite_cert_round_trips_identity_and_times() {
    let ca = ca();
    let now = now();
    let issued = ca.issue_mite(&id("team-a", "ci"), 30 * DAY, now).unwrap();
    assert!(issued.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(issued.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    assert_eq!(identity_of(&issued.cert_pem).unwrap(), id("team-a", "ci"));
    assert_eq!(issued.not_before, now - CLOCK_SKEW);
    assert_eq!(issued.not_after, now + 30 * DAY);
    assert_eq!(not_after(&issued.cert_pem).unwrap(), issued.not_after);
    assert!(issuer_fingerprint_matches(&issued.cert_pem, &ca));
    assert!(!format!("{issued:?}").contains("PRIVATE KEY"), "Debug must not print the key");
}

#[test]
fn identity_of_reads_the_leaf_of_a_chain() {
    let ca = ca();
    let issued = ca.issue_mite(&id("ns", "a.b"), DAY, now()).unwrap();
    let chain = format!("{}{}", issued.cert_pem, ca.cert_pem());
    assert_eq!(identity_of(&chain).unwrap(), id("ns", "a.b"));
}

#[test]
fn per_cell_certificates_are_refused() {
    let ca = ca();
    let per_cell = MiteIdentity { cell: Some(2), ..id("ns", "ci") };
    let err = ca.issue_mite(&per_cell, DAY, now()).unwrap_err().to_string();
    assert!(err.contains("per Controller") && err.contains("cell None"), "{err}");
}

#[test]
fn invalid_names_are_refused() {
    let ca = ca();
    let err = ca.issue_mite(&id("Team A", "ci"), DAY, now()).unwrap_err().to_string();
    assert!(err.contains("namespace") && err.contains("fix:"), "{err}");
    let err = ca.issue_server(&[], DAY, now()).unwrap_err().to_string();
    assert!(err.contains("at least one DNS name"), "{err}");
    let err = ca.issue_server(&["bad name".into()], DAY, now()).unwrap_err().to_string();
    assert!(err.contains("\"bad name\""), "{err}");
    let err = ca.issue_mite(&id("ns", "ci"), Duration::ZERO, now()).unwrap_err().to_string();
    assert!(err.contains("validity"), "{err}");
}

#[test]
fn issuing_outside_the_ca_validity_fails() {
    let ca = ca();
    let err = ca.issue_mite(&id("ns", "ci"), DAY, now() + 400 * DAY).unwrap_err().to_string();
    assert!(err.contains("CA certificate is not valid") && err.contains("renew the CA"), "{err}");
}

#[test]
fn server_cert_has_no_mite_identity() {
    let ca = ca();
    let server = ca.issue_server(&["gateway.varroa.test".into(), "10.0.0.1".into()], DAY, now()).unwrap();
    let err = identity_of(&server.cert_pem).unwrap_err().to_string();
    assert!(err.contains("no Varroa mite identity"), "{err}");
    assert!(issuer_fingerprint_matches(&server.cert_pem, &ca));
}

#[test]
fn fingerprint_is_sha256_of_the_ca_and_survives_reloading() {
    let ca = ca();
    let fp = ca.fingerprint();
    assert!(fp.starts_with("sha256:") && fp.len() == 7 + 64, "{fp}");
    let reloaded = CertificateAuthority::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
    assert_eq!(reloaded.fingerprint(), fp);
    assert_eq!(reloaded.cert_pem(), ca.cert_pem());
    // The reloaded CA issues certificates the original accepts.
    let issued = reloaded.issue_mite(&id("ns", "ci"), DAY, now()).unwrap();
    assert!(issuer_fingerprint_matches(&issued.cert_pem, &ca));
    assert!(!format!("{ca:?}").contains("PRIVATE KEY"));
}

#[test]
fn rotation_missing_and_unreadable() {
    let ca = ca();
    let me = id("ns", "ci");
    assert_eq!(needs_rotation(None, &ca, &me, DAY, now()), Some(RotationReason::Missing));
    assert_eq!(needs_rotation(Some(" \n"), &ca, &me, DAY, now()), Some(RotationReason::Missing));
    let reason = needs_rotation(Some("not a cert"), &ca, &me, DAY, now()).unwrap();
    assert_eq!(reason.reason(), "Unreadable");
    assert!(reason.to_string().contains("not a PEM certificate"), "{reason}");
    let truncated = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    assert_eq!(needs_rotation(Some(truncated), &ca, &me, DAY, now()).unwrap().reason(), "Unreadable");
}

#[test]
fn rotation_fresh_then_expiring_within_renew_before() {
    let ca = ca();
    let me = id("ns", "ci");
    let issued_at = now();
    let issued = ca.issue_mite(&me, 10 * DAY, issued_at).unwrap();
    let renew_before = 3 * DAY;
    assert_eq!(needs_rotation(Some(&issued.cert_pem), &ca, &me, renew_before, issued_at), None);
    assert_eq!(needs_rotation(Some(&issued.cert_pem), &ca, &me, renew_before, issued_at + 6 * DAY), None);
    let expiring = Some(RotationReason::Expiring { not_after: issued.not_after });
    assert_eq!(needs_rotation(Some(&issued.cert_pem), &ca, &me, renew_before, issued_at + 7 * DAY), expiring);
    assert_eq!(needs_rotation(Some(&issued.cert_pem), &ca, &me, renew_before, issued_at + 20 * DAY), expiring);
}

#[test]
fn rotation_when_the_ca_changes_even_with_the_same_names() {
    let old = ca();
    let new = ca(); // same subject name, new key
    assert_ne!(old.fingerprint(), new.fingerprint());
    let me = id("ns", "ci");
    let issued = old.issue_mite(&me, 10 * DAY, now()).unwrap();
    assert!(issuer_fingerprint_matches(&issued.cert_pem, &old));
    assert!(!issuer_fingerprint_matches(&issued.cert_pem, &new));
    assert_eq!(needs_rotation(Some(&issued.cert_pem), &new, &me, DAY, now()), Some(RotationReason::IssuerChanged));
    // A CA certificate is not "signed by" another CA either.
    assert!(!issuer_fingerprint_matches(old.cert_pem(), &new));
    assert!(!issuer_fingerprint_matches("garbage", &new));
}

#[test]
fn rotation_when_the_identity_differs() {
    let ca = ca();
    let other = ca.issue_mite(&id("ns", "other"), 10 * DAY, now()).unwrap();
    assert_eq!(
        needs_rotation(Some(&other.cert_pem), &ca, &id("ns", "ci"), DAY, now()),
        Some(RotationReason::IdentityMismatch { found: Some(id("ns", "other")) })
    );
    let server = ca.issue_server(&["gateway".into()], 10 * DAY, now()).unwrap();
    let reason = needs_rotation(Some(&server.cert_pem), &ca, &id("ns", "ci"), DAY, now()).unwrap();
    assert_eq!(reason, RotationReason::IdentityMismatch { found: None });
    assert_eq!(reason.to_string(), "the mite certificate names no Controller");
}

#[test]
fn from_pem_errors_name_the_input_and_the_fix() {
    let ca = ca();
    let other = CertificateAuthority::generate("other", DAY).unwrap();
    let leaf = ca.issue_mite(&id("ns", "ci"), DAY, now()).unwrap();

    let err = CertificateAuthority::from_pem(ca.cert_pem(), "hello").unwrap_err().to_string();
    assert!(err.contains("CA key (tls.key) is not a PEM private key") && err.contains("fix:"), "{err}");

    let err = CertificateAuthority::from_pem("hello", &ca.key_pem()).unwrap_err().to_string();
    assert!(err.contains("CA certificate (tls.crt) is not a PEM certificate"), "{err}");

    // Arguments swapped: say what was found.
    let err = CertificateAuthority::from_pem(&ca.key_pem(), ca.cert_pem()).unwrap_err().to_string();
    assert!(err.contains("tls.crt") && err.contains("found PRIVATE KEY"), "{err}");

    let err = CertificateAuthority::from_pem(ca.cert_pem(), &other.key_pem()).unwrap_err().to_string();
    assert!(err.contains("does not belong to the CA certificate"), "{err}");

    let err = CertificateAuthority::from_pem(&leaf.cert_pem, &leaf.key_pem).unwrap_err().to_string();
    assert!(err.contains("is not a CA certificate") && err.contains("ns/ci"), "{err}");

    let sec1 = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
    let err = CertificateAuthority::from_pem(ca.cert_pem(), sec1).unwrap_err().to_string();
    assert!(err.contains("EC PRIVATE KEY") && err.contains("openssl pkcs8 -topk8"), "{err}");

    let junk_key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    let err = CertificateAuthority::from_pem(ca.cert_pem(), junk_key).unwrap_err().to_string();
    assert!(err.contains("CA key (tls.key) is not a usable private key"), "{err}");
}
