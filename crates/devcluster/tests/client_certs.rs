//! x509 client-certificate authentication, as a real cluster's admin kubeconfig uses it: a
//! certificate signed by the cluster CA names the user (CN) and groups (O); one from another CA,
//! an expired one, or one not meant for client authentication is refused with 401; a bearer
//! token still works beside an untrusted certificate. Checked with the real kubectl and with
//! kube::Client, and through the binary (`serve --kubeconfig-auth cert`, `devcluster cert`).

use base64::Engine;
use devcluster::{DevCluster, Options};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl").env("KUBECONFIG", kubeconfig).args(args).output().expect("kubectl runs")
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "kubectl failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

fn write(dir: &Path, name: &str, content: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).expect("write");
    p
}

/// A certificate for `cn` in `orgs`, signed by the CA whose PEMs are given, with the given
/// validity window and extended key usages.
fn signed_cert(
    ca_crt: &str,
    ca_key: &str,
    cn: &str,
    orgs: &[&str],
    window: (time::OffsetDateTime, time::OffsetDateTime),
    ekus: Vec<ExtendedKeyUsagePurpose>,
) -> (String, String) {
    let ca_key = KeyPair::from_pem(ca_key).expect("CA key");
    let issuer = Issuer::from_ca_cert_pem(ca_crt, ca_key).expect("CA cert");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name.push(DnType::CommonName, cn);
    for o in orgs {
        p.distinguished_name.push(DnType::OrganizationName, *o);
    }
    (p.not_before, p.not_after) = window;
    p.extended_key_usages = ekus;
    let key = KeyPair::generate().expect("key");
    let cert = p.signed_by(&key, &issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

/// A key and a certificate for `subject` made with the openssl CLI, signed by the CA.
/// With `v3`, the certificate carries a clientAuth extended key usage (an X.509 v3 certificate);
/// without, it is a v1 certificate, as `openssl x509 -req` makes by default.
fn openssl_cert(dir: &Path, ca_crt: &str, ca_key: &str, subject: &str, v3: bool) -> (String, String) {
    let ca_crt = write(dir, "ca.crt", ca_crt);
    let ca_key = write(dir, "ca.key", ca_key);
    let (key, csr, crt) = (dir.join("u.key"), dir.join("u.csr"), dir.join("u.crt"));
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new("openssl").args(args).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    run(&[
        &os("req"),
        &os("-new"),
        &os("-newkey"),
        &os("ec"),
        &os("-pkeyopt"),
        &os("ec_paramgen_curve:prime256v1"),
        &os("-nodes"),
        &os("-subj"),
        &os(subject),
        &os("-keyout"),
        key.as_os_str(),
        &os("-out"),
        csr.as_os_str(),
    ]);
    let ext = write(dir, "client.ext", "extendedKeyUsage = clientAuth\n");
    let os_ext = os("-extfile");
    run(&[
        &os("x509"),
        &os("-req"),
        &os("-days"),
        &os("1"),
        &os("-in"),
        csr.as_os_str(),
        &os("-CA"),
        ca_crt.as_os_str(),
        &os("-CAkey"),
        ca_key.as_os_str(),
        &os("-out"),
        crt.as_os_str(),
    ]
    .into_iter()
    .chain(if v3 { vec![&*os_ext, ext.as_os_str()] } else { vec![] })
    .collect::<Vec<_>>());
    (std::fs::read_to_string(crt).expect("crt"), std::fs::read_to_string(key).expect("key"))
}

fn valid_now() -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (now - time::Duration::hours(1), now + time::Duration::hours(1))
}

/// A kubeconfig for `dc` that presents the certificate (and, if given, a bearer token too).
fn cert_kubeconfig(dc: &DevCluster, user: &str, crt: &str, key: &str, token: Option<&str>) -> String {
    let ca = dc
        .kubeconfig_yaml()
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data:"))
        .expect("CA data")
        .trim()
        .to_string();
    let mut yaml = devcluster::tls::kubeconfig_for_cert(dc.url(), &ca, user, crt, key);
    if let Some(t) = token {
        yaml.push_str(&format!("    token: {t}\n"));
    }
    yaml
}

async fn cluster_with_pki() -> (DevCluster, tempfile::TempDir, String, String) {
    let data = tempfile::tempdir().expect("tempdir");
    let dc = DevCluster::start_with(Options { data_dir: Some(data.path().to_path_buf()), ..Default::default() })
        .await
        .expect("devcluster");
    let ca_crt = std::fs::read_to_string(data.path().join("pki/ca.crt")).expect("ca.crt");
    let ca_key = std::fs::read_to_string(data.path().join("pki/ca.key")).expect("ca.key");
    (dc, data, ca_crt, ca_key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_signed_by_the_cluster_ca_names_the_user_and_groups() {
    let (dc, data, ca_crt, ca_key) = cluster_with_pki().await;
    let dir = data.path();
    // Made by openssl, as an administrator makes one: a subject with two O (two groups).
    let (crt, key) = openssl_cert(dir, &ca_crt, &ca_key, "/CN=jane/O=dev/O=qa", false);
    let kc = write(dir, "jane.kubeconfig", &cert_kubeconfig(&dc, "jane", &crt, &key, None));

    let who = ok(kubectl(&kc, &["auth", "whoami", "-o", "json"]));
    let who: serde_json::Value = serde_json::from_str(&who).expect("json");
    let info = &who["status"]["userInfo"];
    assert_eq!(info["username"], "jane", "{who}");
    assert_eq!(info["groups"], serde_json::json!(["dev", "qa", "system:authenticated"]), "{who}");
    let id = info["extra"]["authentication.kubernetes.io/credential-id"][0].as_str().expect("credential id");
    assert!(id.starts_with("X509SHA256=") && id.len() == "X509SHA256=".len() + 64, "{id}");

    // RBAC applies to the certificate's user and groups: nothing until a binding names group dev.
    let denied = kubectl(&kc, &["get", "pods", "-n", "default"]);
    assert!(!denied.status.success());
    let err = String::from_utf8_lossy(&denied.stderr);
    assert!(err.contains("User \"jane\" cannot list resource \"pods\""), "{err}");
    let admin = dc.kubeconfig_path();
    ok(kubectl(&admin, &["create", "rolebinding", "dev-view", "--clusterrole=view", "--group=dev", "-n", "default"]));
    ok(kubectl(&kc, &["get", "pods", "-n", "default"]));

    // The same with kube::Client (whose rustls only loads X.509 v3 certificates): a typed list
    // works as the certificate's user.
    let (crt, key) = openssl_cert(dir, &ca_crt, &ca_key, "/CN=jane/O=dev/O=qa", true);
    let client = devcluster::client_for(&cert_kubeconfig(&dc, "jane", &crt, &key, None)).await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default()).await.expect("jane may list pods in default");
    let nss: Api<Namespace> = Api::all(client);
    let e = nss.list(&ListParams::default()).await.expect_err("jane may not list namespaces");
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 403), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_expired_or_server_only_certificates_are_unauthorized() {
    let (dc, data, ca_crt, ca_key) = cluster_with_pki().await;
    let dir = data.path();
    // Another CA, same names.
    let other_key = KeyPair::generate().expect("key");
    let mut other = CertificateParams::new(Vec::<String>::new()).expect("params");
    other.distinguished_name.push(DnType::CommonName, "devcluster-ca");
    other.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other_crt = other.self_signed(&other_key).expect("other CA").pem();
    let now = time::OffsetDateTime::now_utc();
    let cases = [
        (
            "foreign",
            signed_cert(&other_crt, &other_key.serialize_pem(), "mallory", &["system:masters"], valid_now(), vec![]),
        ),
        (
            "expired",
            signed_cert(
                &ca_crt,
                &ca_key,
                "old",
                &["system:masters"],
                (now - time::Duration::days(2), now - time::Duration::days(1)),
                vec![],
            ),
        ),
        (
            "server-only",
            signed_cert(
                &ca_crt,
                &ca_key,
                "srv",
                &["system:masters"],
                valid_now(),
                vec![ExtendedKeyUsagePurpose::ServerAuth],
            ),
        ),
        ("no-cn", signed_cert(&ca_crt, &ca_key, "", &["system:masters"], valid_now(), vec![])),
    ];
    for (name, (crt, key)) in &cases {
        let kc = write(dir, &format!("{name}.kubeconfig"), &cert_kubeconfig(&dc, name, crt, key, None));
        let out = kubectl(&kc, &["get", "namespaces"]);
        assert!(!out.status.success(), "{name}: accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("You must be logged in to the server"), "{name}: {err}");
    }
    // Beside a good bearer token, an untrusted certificate does not stop the request: the token
    // authenticates it (the apiserver's union of authenticators).
    let token = dc
        .kubeconfig_yaml()
        .lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .expect("admin token")
        .trim()
        .to_string();
    let (crt, key) = &cases[0].1;
    let kc = write(dir, "both.kubeconfig", &cert_kubeconfig(&dc, "both", crt, key, Some(&token)));
    let who = ok(kubectl(&kc, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]));
    assert_eq!(who, "admin");
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(kubeconfig: &Path, extra: &[&str]) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["serve", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(kubeconfig)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("devcluster starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(kubeconfig).map(|m| m.len()).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "no kubeconfig written");
        std::thread::sleep(Duration::from_millis(20));
    }
    Server(child)
}

#[test]
fn serve_writes_a_certificate_kubeconfig_on_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    let _server = serve(&kc, &["--kubeconfig-auth", "cert"]);
    let yaml = std::fs::read_to_string(&kc).expect("kubeconfig");
    assert!(yaml.contains("client-certificate-data:") && yaml.contains("client-key-data:"), "{yaml}");
    assert!(!yaml.contains("token:"), "no bearer token in a certificate kubeconfig:\n{yaml}");
    let data = yaml.lines().find_map(|l| l.trim().strip_prefix("client-certificate-data:")).expect("cert data");
    let pem = base64::engine::general_purpose::STANDARD.decode(data.trim()).expect("base64");
    assert!(String::from_utf8_lossy(&pem).starts_with("-----BEGIN CERTIFICATE-----"));
    let who = ok(kubectl(&kc, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"]));
    assert_eq!(who, r#"["system:masters","system:authenticated"]"#);
    ok(kubectl(&kc, &["create", "namespace", "made-by-cert"]));

    let bad = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["serve", "--kubeconfig-auth", "password"])
        .output()
        .expect("runs");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--kubeconfig-auth") && err.contains("token") && err.contains("cert"), "{err}");
}

#[test]
fn devcluster_cert_issues_a_kubeconfig_through_the_certificates_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    let _server = serve(&kc, &[]);
    let out = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["cert", "jane", "--group", "dev", "--group", "qa", "--kubeconfig"])
        .arg(&kc)
        .output()
        .expect("cert runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let jane = write(dir.path(), "jane.kubeconfig", &String::from_utf8(out.stdout).expect("utf-8"));
    let who =
        ok(kubectl(&jane, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"]));
    assert_eq!(who, r#"jane ["dev","qa","system:authenticated"]"#);
    // The request was approved, issued and then removed: nothing is left behind.
    let left = ok(kubectl(&kc, &["get", "certificatesigningrequests", "-o", "name"]));
    assert_eq!(left.trim(), "", "{left}");

    let bad = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["cert", "jane", "--duration", "60", "--kubeconfig"])
        .arg(&kc)
        .output()
        .expect("cert runs");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--duration 60: must be at least 600 seconds"));
}
