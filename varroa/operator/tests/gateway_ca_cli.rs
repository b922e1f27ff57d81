//! `varroa-operator gateway-ca`, the built binary: the Secret it prints is a valid
//! `kubernetes.io/tls` Secret whose tls.crt and tls.key load back as the gateway CA, and each run
//! makes a new CA.

use k8s_openapi::api::core::v1::Secret;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};
use varroa_pki::{CertificateAuthority, MiteIdentity};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_varroa-operator"))
        .arg("gateway-ca")
        .args(args)
        .output()
        .expect("varroa-operator runs")
}

/// The Secrets printed, in order.
fn secrets(out: &Output) -> Vec<Secret> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let yaml = String::from_utf8(out.stdout.clone()).expect("utf-8");
    yaml.split("\n---\n")
        .map(|doc| serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("not a Secret ({e}):\n{doc}")))
        .collect()
}

/// The CA Secret (the first printed).
fn secret(out: &Output) -> Secret {
    secrets(out).remove(0)
}

fn ca_of(s: &Secret) -> CertificateAuthority {
    let data = s.data.clone().expect("data");
    let text = |k: &str| String::from_utf8(data.get(k).unwrap_or_else(|| panic!("{k} missing")).0.clone()).unwrap();
    CertificateAuthority::from_pem(&text("tls.crt"), &text("tls.key")).expect("the Secret holds a usable CA")
}

#[test]
fn prints_a_tls_secret_the_operator_can_load_as_the_gateway_ca() {
    let out = run(&[]);
    let s = secret(&out);
    assert_eq!(s.metadata.namespace.as_deref(), Some("varroa-system"));
    assert_eq!(s.metadata.name.as_deref(), Some("varroa-gateway-ca"));
    assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
    let ca = ca_of(&s);
    // The default validity is ten years.
    let years = ca.not_after().duration_since(SystemTime::now()).expect("in the future").as_secs() / (365 * 86400);
    assert!((9..=10).contains(&years), "valid for about 10 years, got {years}");
    // The comment names the fingerprint, so a user can tell which CA was applied.
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with(&format!("# Gateway CA \"Varroa gateway CA\" ({})", ca.fingerprint()))
    );
    // It issues mite certificates, as the operator does with it.
    let issued = ca
        .issue_mite(&MiteIdentity::new("team-a", "ci"), Duration::from_secs(86400), SystemTime::now())
        .expect("issues");
    assert_eq!(varroa_pki::identity_of(&issued.cert_pem).expect("identity").to_string(), "team-a/ci");
}

#[test]
fn names_and_validity_follow_the_flags_and_every_run_is_a_new_ca() {
    let args = ["--namespace", "ops", "--name", "my-ca", "--common-name", "Demo CA", "--validity", "30d"];
    let a = secret(&run(&args));
    assert_eq!(a.metadata.namespace.as_deref(), Some("ops"));
    assert_eq!(a.metadata.name.as_deref(), Some("my-ca"));
    let ca = ca_of(&a);
    let left = ca.not_after().duration_since(SystemTime::now()).expect("in the future");
    assert!(left <= Duration::from_secs(30 * 86400) && left > Duration::from_secs(29 * 86400), "{left:?}");
    let b = ca_of(&secret(&run(&args)));
    assert_ne!(ca.fingerprint(), b.fingerprint(), "a fresh CA each run");
}

#[test]
fn a_bad_validity_is_refused_with_the_reason() {
    let out = run(&["--validity", "ten years"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--validity") && err.contains("not a duration"), "{err}");
}

#[test]
fn the_gateway_serving_certificate_verifies_for_its_service_names_against_the_ca() {
    let out = run(&[]);
    let all = secrets(&out);
    assert_eq!(all.len(), 2, "the CA and the gateway's serving certificate");
    let ca = ca_of(&all[0]);
    let tls = &all[1];
    assert_eq!(tls.metadata.namespace.as_deref(), Some("varroa-system"));
    assert_eq!(tls.metadata.name.as_deref(), Some("varroa-gateway-tls"));
    let data = tls.data.clone().expect("data");
    assert!(
        !data.contains_key("ca.key") && data["ca.crt"].0 == ca.cert_pem().as_bytes(),
        "the CA's certificate, never its key"
    );
    // What a mite does on connecting: verify the chain and the name it dialled (rustls, webpki).
    let _ = rustls::crypto::ring::default_provider().install_default();
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    let der = |pem: &[u8]| rustls::pki_types::CertificateDer::from_pem_slice(pem).expect("a PEM certificate");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der(ca.cert_pem().as_bytes())).expect("the CA is a root");
    let verifier = rustls::client::WebPkiServerVerifier::builder(std::sync::Arc::new(roots)).build().expect("verifier");
    let leaf = der(&data["tls.crt"].0);
    let now = rustls::pki_types::UnixTime::now();
    for name in ["varroa-gateway", "varroa-gateway.varroa-system.svc", "varroa-gateway.varroa-system.svc.cluster.local"]
    {
        let server = rustls::pki_types::ServerName::try_from(name).expect("a name");
        verifier.verify_server_cert(&leaf, &[], &server, &[], now).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let other = rustls::pki_types::ServerName::try_from("evil.example.com").expect("a name");
    assert!(verifier.verify_server_cert(&leaf, &[], &other, &[], now).is_err(), "only the Service's names");
    let loopback = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("an address");
    assert!(verifier.verify_server_cert(&leaf, &[], &loopback, &[], now).is_err(), "no address unless asked");
    // --gateway-tls-extra-name: a gateway outside the cluster (the demo's) is reached by address.
    let all = secrets(&run(&["--gateway-tls-extra-name", "127.0.0.1", "--gateway-tls-extra-name", "gw.example.com"]));
    let ca = ca_of(&all[0]);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der(ca.cert_pem().as_bytes())).expect("the CA is a root");
    let verifier = rustls::client::WebPkiServerVerifier::builder(std::sync::Arc::new(roots)).build().expect("verifier");
    let leaf = der(&all[1].data.clone().expect("data")["tls.crt"].0);
    for name in ["127.0.0.1", "gw.example.com", "varroa-gateway.varroa-system.svc"] {
        let server = rustls::pki_types::ServerName::try_from(name).expect("a name");
        verifier.verify_server_cert(&leaf, &[], &server, &[], now).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // --gateway-tls-secret none: the CA alone.
    assert_eq!(secrets(&run(&["--gateway-tls-secret", "none"])).len(), 1);
}
