//! `kubectl port-forward` to a pod of the process runtime: kubectl 1.32 speaks SPDY/3 with the
//! `portforward.k8s.io` sub-protocol, inside a WebSocket (`SPDY/3.1+portforward.k8s.io`) or, when
//! told to (`KUBECTL_PORT_FORWARD_WEBSOCKETS=false`), over a connection upgraded to SPDY/3.1.
//! Both are checked with the real kubectl: forwarded connections reach the container's port,
//! several at once, and a port nothing listens on is reported with the kubelet's message.

use devcluster::runtime::RunRule;
use devcluster::{DevCluster, Options};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const IMAGE: &str = "example.com/testpod:v1";

struct Forward(Child);

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kubectl(dc: &DevCluster) -> Command {
    let mut c = Command::new("kubectl");
    c.env("KUBECONFIG", dc.kubeconfig_path());
    c
}

fn ok(mut c: Command) -> String {
    let out = c.output().expect("kubectl runs");
    assert!(out.status.success(), "kubectl failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl port-forward pod/web :<ports>`; returns the process and the local ports, read from
/// its "Forwarding from 127.0.0.1:LOCAL -> REMOTE" lines.
fn forward(
    dc: &DevCluster,
    websockets: bool,
    remote: &[u16],
) -> (Forward, Vec<u16>, BufReader<std::process::ChildStderr>) {
    let mut cmd = kubectl(dc);
    cmd.args(["port-forward", "pod/web"])
        .args(remote.iter().map(|p| format!(":{p}")))
        .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", if websockets { "true" } else { "false" })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl port-forward starts");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut lines = BufReader::new(stdout).lines();
    let mut local = vec![];
    while local.len() < remote.len() {
        let line = lines.next().expect("kubectl port-forward printed its ports").expect("utf-8");
        if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
            local.push(rest.split_whitespace().next().and_then(|p| p.parse().ok()).expect("a port"));
        }
    }
    // Keep reading its stdout ("Handling connection for ..."): a closed pipe would end kubectl.
    std::thread::spawn(move || for _ in lines {});
    (Forward(child), local, stderr)
}

fn get(port: u16, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

async fn cluster_with_web() -> DevCluster {
    let dc = DevCluster::start_with(Options {
        run: vec![RunRule::new("example.com/testpod*", env!("CARGO_BIN_EXE_devcluster-testpod"))],
        ..Default::default()
    })
    .await
    .expect("devcluster starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("web.yaml");
    std::fs::write(
        &manifest,
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  containers:
  - name: app
    image: {IMAGE}
    env:
    - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    - {{name: PORT, value: "8080"}}
    ports: [{{containerPort: 8080}}]
    readinessProbe: {{httpGet: {{path: /healthz, port: 8080}}, periodSeconds: 1}}
"#
        ),
    )
    .expect("write");
    let mut apply = kubectl(&dc);
    apply.arg("apply").arg("-f").arg(&manifest);
    ok(apply);
    let mut wait = kubectl(&dc);
    wait.args(["wait", "--for=condition=Ready", "pod/web", "--timeout=60s"]);
    ok(wait);
    dc
}

async fn forwards_through(websockets: bool) {
    let dc = cluster_with_web().await;
    let (_pf, local, _) = tokio::task::block_in_place(|| forward(&dc, websockets, &[8080]));
    // Several connections, some at once, each reaching the container.
    let port = local[0];
    let answers: Vec<String> = tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(move || get(port, "/healthz"))).collect();
            handles.into_iter().map(|h| h.join().expect("joins").expect("a forwarded connection")).collect()
        })
    });
    for a in &answers {
        assert!(a.starts_with("HTTP/1.1 200") && a.ends_with("ok"), "{a}");
    }
    let again = tokio::task::block_in_place(|| get(port, "/healthz")).expect("one more");
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_over_its_websocket_tunnel() {
    forwards_through(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_over_plain_spdy() {
    forwards_through(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_nothing_listens_on_is_reported_as_the_kubelet_does() {
    let dc = cluster_with_web().await;
    let (_pf, local, mut stderr) = tokio::task::block_in_place(|| forward(&dc, true, &[9]));
    // The local connection is accepted, then closed; kubectl prints the pod side's error.
    let _ = tokio::task::block_in_place(|| get(local[0], "/"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut err = String::new();
    tokio::task::block_in_place(|| {
        while !err.contains("error forwarding port 9 to pod web_default") {
            assert!(Instant::now() < deadline, "no error from kubectl: {err}");
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            err.push_str(&line);
        }
    });
    assert!(err.contains("error forwarding port 9 to pod web_default, uid "), "{err}");
    assert!(err.contains(": connect: connection refused"), "{err}");
}
