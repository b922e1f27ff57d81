//! The `devcluster` binary: `serve` flags and `token`.

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

#[tokio::test]
async fn serve_flags_and_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    let _server = serve(&kc, &["--nodes", "2", "--fault", "example.com/app:broken=image-pull"]);
    let client = devcluster::client_for(&std::fs::read_to_string(&kc).expect("kubeconfig")).await.expect("client");
    let nodes: Api<Node> = Api::all(client.clone());
    assert_eq!(nodes.list(&ListParams::default()).await.expect("nodes").items.len(), 2);

    let sas: Api<ServiceAccount> = Api::namespaced(client, "default");
    let sa = ServiceAccount {
        metadata: kube::api::ObjectMeta { name: Some("robot".into()), ..Default::default() },
        ..Default::default()
    };
    sas.create(&PostParams::default(), &sa).await.expect("service account");
    let out = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["token", "default/robot", "--kubeconfig"])
        .arg(&kc)
        .output()
        .expect("token runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).expect("utf-8").trim().to_string();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    // The token is the service account's: kubectl says who it is.
    let who = Command::new("kubectl")
        .env("KUBECONFIG", &kc)
        .args(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", "--token", &token])
        .output()
        .expect("kubectl runs");
    assert_eq!(
        String::from_utf8_lossy(&who.stdout),
        "system:serviceaccount:default:robot",
        "{}",
        String::from_utf8_lossy(&who.stderr)
    );

    let bad = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["token", "robot", "--kubeconfig"])
        .arg(&kc)
        .output()
        .expect("token runs");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected NAMESPACE/NAME"));
}

#[test]
fn bad_flags_say_what_is_wrong() {
    let out = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["serve", "--fault", "nginx=explode"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown kind \"explode\"; use image-pull, crash-loop[:CODE], unready, deadline or exit[:CODE]"),
        "{err}"
    );
    let help = Command::new(env!("CARGO_BIN_EXE_devcluster")).args(["serve", "--help"]).output().expect("runs");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in ["--listen", "--kubeconfig", "--data-dir", "--nodes", "--fault", "--history", "--job-pod-duration-ms"] {
        assert!(text.contains(flag), "{flag} missing from --help");
    }
}
