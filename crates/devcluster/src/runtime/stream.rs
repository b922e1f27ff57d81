//! Probes, `pods/exec` and `pods/portforward` of runtime pods.
//!
//! Probes follow pkg/kubelet/prober (httpGet to the pod IP with the kubelet's headers, 2xx and
//! 3xx succeed; tcpSocket connects; exec runs the command in the container's environment and
//! succeeds on exit 0; thresholds, delays, periods and timeouts as specified).
//!
//! Exec and port-forward speak the WebSocket protocols of the kubelet's streaming server
//! (k8s.io/apimachinery/pkg/util/httpstream/wsstream, pkg/kubelet/cri/streaming): exec with the
//! channel subprotocols `v5.channel.k8s.io` (close signals on channel 255) and
//! `v4.channel.k8s.io` (stdin 0, stdout 1, stderr 2, a `Status` on 3, resize 4 ignored: no
//! TTY), which kubectl 1.31+ and kube-rs use; port-forward with `v4.channel.k8s.io` (two
//! channels per port, data and error, each opened by a frame carrying the port little-endian),
//! which kube-rs uses; and kubectl port-forward's SPDY (src/spdy.rs), tunnelled through its
//! WebSocket (`SPDY/3.1+portforward.k8s.io`) or over a connection upgraded to `SPDY/3.1`. Exec
//! over SPDY is refused with a 400 (kubectl 1.31+ execs over WebSocket).

use super::spec::{self, Launch};
use super::{PodRun, process, worker};
use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult};
use crate::request::Body;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

// ---- probes -------------------------------------------------------------------------------

fn int(p: &Value, k: &str, d: i64) -> i64 {
    p.get(k).and_then(Value::as_i64).unwrap_or(d)
}

/// A port of a probe: a number, or the name of a container port.
fn probe_port(container: &Value, port: Option<&Value>) -> Option<u16> {
    match port? {
        Value::Number(n) => n.as_u64().map(|n| n as u16),
        Value::String(s) => s.parse().ok().or_else(|| {
            container
                .get("ports")
                .and_then(Value::as_array)?
                .iter()
                .find(|p| p.get("name").and_then(Value::as_str) == Some(s))?
                .get("containerPort")?
                .as_u64()
                .map(|n| n as u16)
        }),
        _ => None,
    }
}

/// Run one probe: Ok(true) success, Ok(false) failure.
pub(crate) async fn probe_once(run: &PodRun, container: &Value, launch: &Launch, p: &Value) -> bool {
    let timeout = Duration::from_secs(int(p, "timeoutSeconds", 1).max(1) as u64);
    if let Some(h) = p.get("httpGet") {
        let host = h.get("host").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        let host = host.unwrap_or_else(|| run.ip.to_string());
        let Some(port) = probe_port(container, h.get("port")) else { return false };
        let path = h.get("path").and_then(Value::as_str).unwrap_or("/");
        let scheme = h.get("scheme").and_then(Value::as_str).unwrap_or("HTTP");
        let mut headers = vec![];
        for hd in h.get("httpHeaders").and_then(Value::as_array).into_iter().flatten() {
            let n = hd.get("name").and_then(Value::as_str).unwrap_or("");
            let v = hd.get("value").and_then(Value::as_str).unwrap_or("");
            if !n.is_empty() {
                headers.push((n.to_string(), v.to_string()));
            }
        }
        return tokio::time::timeout(timeout, http_get(&host, port, path, scheme, &headers))
            .await
            .is_ok_and(|r| r.is_some_and(|code| (200..400).contains(&code)));
    }
    if let Some(t) = p.get("tcpSocket") {
        let host = t.get("host").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        let host = host.unwrap_or_else(|| run.ip.to_string());
        let Some(port) = probe_port(container, t.get("port")) else { return false };
        return tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host.as_str(), port)))
            .await
            .is_ok_and(|r| r.is_ok());
    }
    if let Some(e) = p.get("exec") {
        let command: Vec<String> = e
            .get("command")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        let argv = spec::exec_argv(launch, &command);
        let Ok(sp) = process::spawn(&argv, &launch.env, &launch.cwd, false).await else { return false };
        let pid = sp.pid;
        return match tokio::time::timeout(timeout, sp.exit).await {
            Ok(Ok(code)) => code == 0,
            _ => {
                process::signal_group(pid, libc::SIGKILL);
                false
            }
        };
    }
    // gRPC and unknown handlers: not probed, counted as success.
    true
}

/// What failed, for the Unhealthy event.
fn describe(p: &Value) -> String {
    if let Some(h) = p.get("httpGet") {
        format!("HTTP probe of {} failed", h.get("path").and_then(Value::as_str).unwrap_or("/"))
    } else if p.get("tcpSocket").is_some() {
        "TCP probe failed".to_string()
    } else if p.get("exec").is_some() {
        "command failed".to_string()
    } else {
        "probe failed".to_string()
    }
}

/// A minimal HTTP/1.1 GET (as the kubelet's prober sends it); the status code.
async fn http_get(host: &str, port: u16, path: &str, scheme: &str, headers: &[(String, String)]) -> Option<u16> {
    let tcp = tokio::net::TcpStream::connect((host, port)).await.ok()?;
    let mut req = format!("GET {path} HTTP/1.1\r\n");
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has("host") {
        req.push_str(&format!("Host: {host}:{port}\r\n"));
    }
    if !has("user-agent") {
        req.push_str("User-Agent: kube-probe/1.33\r\n");
    }
    if !has("accept") {
        req.push_str("Accept: */*\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("Connection: close\r\n\r\n");
    let mut buf = vec![0u8; 64];
    let n = if scheme.eq_ignore_ascii_case("HTTPS") {
        let cfg = rustls::ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify))
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).ok()?;
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.ok()?;
        tls.write_all(req.as_bytes()).await.ok()?;
        read_status_line(&mut tls, &mut buf).await?
    } else {
        let mut tcp = tcp;
        tcp.write_all(req.as_bytes()).await.ok()?;
        read_status_line(&mut tcp, &mut buf).await?
    };
    let line = String::from_utf8_lossy(&buf[..n]);
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn read_status_line(r: &mut (impl tokio::io::AsyncRead + Unpin), buf: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    while n < buf.len() {
        let k = r.read(&mut buf[n..]).await.ok()?;
        if k == 0 {
            break;
        }
        n += k;
        if buf[..n].contains(&b'\n') {
            break;
        }
    }
    (n > 0).then_some(n)
}

/// The kubelet's prober does not verify certificates (it probes the pod's own endpoint).
#[derive(Debug)]
struct NoVerify;

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider().signature_verification_algorithms.supported_schemes()
    }
}

/// Probe a container as long as this instance runs: the startup probe first, then readiness and
/// liveness. A failing liveness (or startup) probe sends on `kill`.
pub(crate) async fn probe_loop(
    cl: Arc<Cluster>,
    run: Arc<PodRun>,
    name: String,
    container: Value,
    launch: Launch,
    kill: tokio::sync::mpsc::Sender<&'static str>,
) {
    if let Some(p) = container.get("startupProbe") {
        tokio::time::sleep(Duration::from_secs(int(p, "initialDelaySeconds", 0).max(0) as u64)).await;
        let period = Duration::from_secs(int(p, "periodSeconds", 10).max(1) as u64);
        let threshold = int(p, "failureThreshold", 3).max(1);
        let mut failures = 0;
        loop {
            if probe_once(&run, &container, &launch, p).await {
                worker::set_ready(&cl, &run, &name, None, Some(true));
                break;
            }
            failures += 1;
            worker::event(&cl, &run, "Warning", "Unhealthy", &format!("Startup probe failed: {}", describe(p)));
            if failures >= threshold {
                let _ = kill.send("startup").await;
                return;
            }
            tokio::time::sleep(period).await;
        }
    }
    let readiness = container.get("readinessProbe").cloned();
    let liveness = container.get("livenessProbe").cloned();
    if readiness.is_none() {
        worker::set_ready(&cl, &run, &name, Some(true), Some(true));
    }
    let ready_loop = {
        let (cl, run, name, container, launch) =
            (cl.clone(), run.clone(), name.clone(), container.clone(), launch.clone());
        async move {
            let Some(p) = readiness else { return };
            tokio::time::sleep(Duration::from_secs(int(&p, "initialDelaySeconds", 0).max(0) as u64)).await;
            let period = Duration::from_secs(int(&p, "periodSeconds", 10).max(1) as u64);
            let (need_ok, need_fail) = (int(&p, "successThreshold", 1).max(1), int(&p, "failureThreshold", 3).max(1));
            let (mut oks, mut fails) = (0, 0);
            loop {
                if probe_once(&run, &container, &launch, &p).await {
                    oks += 1;
                    fails = 0;
                    if oks >= need_ok {
                        worker::set_ready(&cl, &run, &name, Some(true), None);
                    }
                } else {
                    fails += 1;
                    oks = 0;
                    worker::event(
                        &cl,
                        &run,
                        "Warning",
                        "Unhealthy",
                        &format!("Readiness probe failed: {}", describe(&p)),
                    );
                    if fails >= need_fail {
                        worker::set_ready(&cl, &run, &name, Some(false), None);
                    }
                }
                tokio::time::sleep(period).await;
            }
        }
    };
    let live_loop = async move {
        let Some(p) = liveness else { return std::future::pending::<()>().await };
        tokio::time::sleep(Duration::from_secs(int(&p, "initialDelaySeconds", 0).max(0) as u64)).await;
        let period = Duration::from_secs(int(&p, "periodSeconds", 10).max(1) as u64);
        let need_fail = int(&p, "failureThreshold", 3).max(1);
        let mut fails = 0;
        loop {
            if probe_once(&run, &container, &launch, &p).await {
                fails = 0;
            } else {
                fails += 1;
                worker::event(&cl, &run, "Warning", "Unhealthy", &format!("Liveness probe failed: {}", describe(&p)));
                if fails >= need_fail {
                    let _ = kill.send("liveness").await;
                    return;
                }
            }
            tokio::time::sleep(period).await;
        }
    };
    tokio::join!(ready_loop, live_loop);
}

// ---- exec and port-forward ----------------------------------------------------------------

/// A request for exec or port-forward, as `api` hands it over.
pub struct StreamRequest {
    pub namespace: String,
    pub name: String,
    pub subresource: String,
    pub raw_query: Option<String>,
    pub headers: HeaderMap,
    pub on_upgrade: Option<hyper::upgrade::OnUpgrade>,
}

fn params(raw: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(raw.unwrap_or("").as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

fn flag(ps: &[(String, String)], k: &str) -> bool {
    ps.iter().any(|(n, v)| n == k && (v == "true" || v == "1"))
}

/// The subprotocol to answer with, from the client's offer.
fn choose(headers: &HeaderMap, supported: &[&str]) -> Option<String> {
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_string()).collect::<Vec<_>>())
        .collect();
    offered.into_iter().find(|o| supported.contains(&o.as_str()))
}

fn is_websocket(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
}

/// `pods/exec` and `pods/portforward`: checks, then the WebSocket upgrade.
pub fn serve(cl: &Cluster, rt: &super::Runtime, req: StreamRequest) -> ApiResult<Response<Body>> {
    let pod = cl
        .store
        .get(&crate::registry::GroupResource::new("", "pods"), &req.namespace, &req.name)
        .ok_or_else(|| ApiError::not_found("", "pods", &req.name))?;
    let name = req.name.clone();
    if pod.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(ApiError::bad_request(format!("pod {name} does not have a host assigned")));
    }
    let ps = params(req.raw_query.as_deref());
    let exec = req.subresource == "exec";
    let container = if exec {
        Some(
            worker::pick_container(&pod, ps.iter().find(|(k, _)| k == "container").map(|(_, v)| v.as_str()))
                .map_err(ApiError::bad_request)?,
        )
    } else {
        None
    };
    let Some(run) = rt.pod(&req.namespace, &req.name).filter(|r| r.uid == crate::meta::uid(&pod)) else {
        return Err(super::logs::simulated(&name));
    };
    if let Some(c) = &container
        && !worker::container(&run, c).is_some_and(|s| s.runs)
    {
        return Err(super::logs::simulated(&name));
    }
    if matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed")) {
        return Err(ApiError::bad_request(format!(
            "cannot {} into a container in a completed pod; current phase is {}",
            if exec { "exec" } else { "port-forward" },
            pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
        )));
    }
    let target = crate::spdy::Target {
        ip: std::net::IpAddr::V4(run.ip),
        pod: format!("{name}_{}", req.namespace),
        uid: run.uid.clone(),
    };
    if !is_websocket(&req.headers) {
        let spdy = req
            .headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|u| u.to_ascii_uppercase().starts_with("SPDY"));
        // kubectl port-forward's fallback: the connection itself upgraded to SPDY/3.1.
        if spdy && !exec {
            return spdy_upgrade(&req.headers, req.on_upgrade, target);
        }
        return Err(ApiError::bad_request(if spdy {
            "devcluster does not speak SPDY/3.1: use a WebSocket client (kubectl 1.31+ exec, kube-rs exec and portforward)".to_string()
        } else {
            "Upgrade request required".to_string()
        }));
    }
    let protocol = if exec {
        choose(&req.headers, &["v5.channel.k8s.io", "v4.channel.k8s.io"])
    } else {
        choose(&req.headers, &["v4.channel.k8s.io", "SPDY/3.1+portforward.k8s.io"])
    };
    let Some(key) = req.headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(ApiError::bad_request("missing Sec-WebSocket-Key"));
    };
    let Some(on_upgrade) = req.on_upgrade else {
        return Err(ApiError::bad_request("Upgrade request required"));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    if exec {
        let command: Vec<String> = ps.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
        if command.is_empty() {
            return Err(ApiError::bad_request("you must specify at least 1 command"));
        }
        let (stdin, stdout, stderr) = (flag(&ps, "stdin"), flag(&ps, "stdout"), flag(&ps, "stderr"));
        if !stdin && !stdout && !stderr {
            return Err(ApiError::bad_request("you must specify at least 1 of stdin, stdout, stderr"));
        }
        let c = container.unwrap_or_default();
        let Some(launch) = worker::container(&run, &c).and_then(|s| if s.pid.is_some() { s.launch } else { None })
        else {
            return Err(ApiError::bad_request(format!("container not found ({c:?})")));
        };
        let v5 = protocol.as_deref() == Some("v5.channel.k8s.io");
        tokio::spawn(async move {
            let Ok(up) = on_upgrade.await else { return };
            let ws = WebSocketStream::from_raw_socket(hyper_util::rt::TokioIo::new(up), Role::Server, None).await;
            exec_session(ws, &run, launch, command, stdin, stdout, stderr, v5).await;
        });
    } else if protocol.as_deref() == Some("SPDY/3.1+portforward.k8s.io") {
        // kubectl 1.31+: SPDY frames inside WebSocket binary messages; the ports come with each
        // stream, not in the query.
        tokio::spawn(async move {
            let Ok(up) = on_upgrade.await else { return };
            let ws = WebSocketStream::from_raw_socket(hyper_util::rt::TokioIo::new(up), Role::Server, None).await;
            crate::spdy::over_websocket(ws, target).await;
        });
    } else {
        let mut ports: Vec<u16> = vec![];
        for (k, v) in &ps {
            if k == "ports" || k == "port" {
                for p in v.split(',').filter(|s| !s.is_empty()) {
                    match p.trim().parse::<u16>() {
                        Ok(n) if n > 0 => ports.push(n),
                        _ => {
                            return Err(ApiError::bad_request(format!(
                                "unable to parse \"{p}\" as a port: invalid port"
                            )));
                        }
                    }
                }
            }
        }
        if ports.is_empty() {
            return Err(ApiError::bad_request("query parameter \"port\" is required"));
        }
        let ip = run.ip;
        let uid = run.uid.clone();
        tokio::spawn(async move {
            let Ok(up) = on_upgrade.await else { return };
            let ws = WebSocketStream::from_raw_socket(hyper_util::rt::TokioIo::new(up), Role::Server, None).await;
            portforward_session(ws, ip, &name, &uid, ports).await;
        });
    }
    let mut r = Response::new(http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}).boxed());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if let Some(p) = protocol
        && let Ok(v) = HeaderValue::from_str(&p)
    {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, v);
    }
    Ok(r)
}

/// Answer an `Upgrade: SPDY/3.1` port-forward request (101, `X-Stream-Protocol-Version:
/// portforward.k8s.io`) and serve the upgraded connection.
fn spdy_upgrade(
    headers: &HeaderMap,
    on_upgrade: Option<hyper::upgrade::OnUpgrade>,
    target: crate::spdy::Target,
) -> ApiResult<Response<Body>> {
    const PROTOCOL: &str = "portforward.k8s.io";
    let offered: Vec<&str> = headers
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(str::trim))
        .collect();
    if !offered.is_empty() && !offered.contains(&PROTOCOL) {
        return Err(ApiError::forbidden_message(
            "",
            "pods",
            &target.pod,
            format!("unable to upgrade: no common protocols (client: {offered:?}, server: [\"{PROTOCOL}\"])"),
        ));
    }
    let Some(on_upgrade) = on_upgrade else {
        return Err(ApiError::bad_request("Upgrade request required"));
    };
    tokio::spawn(async move {
        let Ok(up) = on_upgrade.await else { return };
        crate::spdy::over_connection(hyper_util::rt::TokioIo::new(up), target).await;
    });
    let mut r = Response::new(http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}).boxed());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    h.insert("x-stream-protocol-version", HeaderValue::from_static(PROTOCOL));
    Ok(r)
}

type Ws = WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

/// End the socket with a normal closure (1000), which clients read as the end of the streams.
async fn close(sink: &mut futures::stream::SplitSink<Ws, Message>) {
    use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
    let _ = sink.send(Message::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "".into() }))).await;
    let _ = sink.close().await;
}

/// Pump a pipe into the channel `ch` of the socket (through `tx`).
fn pipe_to(mut from: impl Read + Send + 'static, ch: u8, tx: tokio::sync::mpsc::Sender<(u8, Vec<u8>)>) {
    let _ = std::thread::Builder::new().name("devcluster-exec-io".into()).spawn(move || {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send((ch, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

/// The Status the error channel carries when the command ended
/// (pkg/kubelet/cri/streaming/remotecommand/httpstream.go `v4WriteStatusFunc`).
fn exit_status(code: i32, argv: &[String]) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({"metadata": {}, "status": "Failure",
        "message": format!("command terminated with non-zero exit code: command '{}' exited with {code}", argv.join(" ")),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
}

#[allow(clippy::too_many_arguments)]
async fn exec_session(
    ws: Ws,
    run: &PodRun,
    launch: Launch,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    v5: bool,
) {
    let (mut sink, source) = ws.split();
    let argv = spec::exec_argv(&launch, &command);
    let sp = match process::spawn(&argv, &launch.env, &launch.cwd, stdin).await {
        Ok(sp) => sp,
        Err(e) => {
            let status = json!({"metadata": {}, "status": "Failure",
                "message": format!("failed to exec in container: failed to start exec: OCI runtime exec failed: exec failed: unable to start container process: exec: {:?}: {e}", argv.first().cloned().unwrap_or_default()),
                "reason": "InternalError"});
            let mut m = vec![3u8];
            m.extend(serde_json::to_vec(&status).unwrap_or_default());
            let _ = sink.send(Message::binary(m)).await;
            close(&mut sink).await;
            return;
        }
    };
    // The kubelet opens the stream with an empty frame on the lowest writable channel.
    let first = if stdout {
        1
    } else if stderr {
        2
    } else {
        3
    };
    let _ = sink.send(Message::binary(vec![first])).await;
    let (tx, rx) = tokio::sync::mpsc::channel::<(u8, Vec<u8>)>(16);
    if let Some(o) = sp.stdout {
        if stdout { pipe_to(o, 1, tx.clone()) } else { pipe_to(o, 255, tx.clone()) }
    }
    if let Some(e) = sp.stderr {
        if stderr { pipe_to(e, 2, tx.clone()) } else { pipe_to(e, 255, tx.clone()) }
    }
    drop(tx);
    // Stdin: frames on channel 0 written by a thread; v5's close of channel 0 (or the socket
    // closing) ends it.
    let (in_tx, in_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    if let Some(mut si) = sp.stdin {
        let _ = std::thread::Builder::new().name("devcluster-exec-stdin".into()).spawn(move || {
            while let Ok(chunk) = in_rx.recv() {
                if si.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
    }
    let pid = sp.pid;
    run.exec_started(pid);
    exec_loop(sink, source, sp.exit, rx, in_tx, pid, &command, v5).await;
    run.exec_ended(pid);
}

#[allow(clippy::too_many_arguments)]
async fn exec_loop(
    mut sink: futures::stream::SplitSink<Ws, Message>,
    mut source: futures::stream::SplitStream<Ws>,
    exit: tokio::sync::oneshot::Receiver<i32>,
    mut rx: tokio::sync::mpsc::Receiver<(u8, Vec<u8>)>,
    in_tx: std::sync::mpsc::Sender<Vec<u8>>,
    pid: i32,
    command: &[String],
    v5: bool,
) {
    let mut in_tx = Some(in_tx);
    let mut exit = exit;
    let mut code: Option<i32> = None;
    let mut outputs_open = true;
    loop {
        if code.is_some() && !outputs_open {
            break;
        }
        tokio::select! {
            c = &mut exit, if code.is_none() => { code = Some(c.unwrap_or(137)); }
            item = rx.recv(), if outputs_open => match item {
                Some((255, _)) => {}
                Some((ch, data)) => {
                    let mut m = Vec::with_capacity(data.len() + 1);
                    m.push(ch);
                    m.extend(data);
                    if sink.send(Message::binary(m)).await.is_err() { break; }
                }
                None => outputs_open = false,
            },
            msg = source.next() => match msg {
                Some(Ok(Message::Binary(b))) if !b.is_empty() => match b[0] {
                    0 => { if let Some(t) = &in_tx { let _ = t.send(b[1..].to_vec()); } }
                    255 if v5 && b.get(1) == Some(&0) => { in_tx = None; }
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    // The client went away: the command ends with it.
                    process::signal_group(pid, libc::SIGKILL);
                    return;
                }
                _ => {}
            },
        }
    }
    drop(in_tx);
    let status = exit_status(code.unwrap_or(137), command);
    let mut m = vec![3u8];
    m.extend(serde_json::to_vec(&status).unwrap_or_default());
    let _ = sink.send(Message::binary(m)).await;
    close(&mut sink).await;
}

async fn portforward_session(ws: Ws, ip: std::net::Ipv4Addr, pod: &str, uid: &str, ports: Vec<u16>) {
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(u8, Option<Vec<u8>>)>(16);
    let mut writers: Vec<Option<tokio::net::tcp::OwnedWriteHalf>> = vec![];
    let mut open = 0usize;
    for (i, port) in ports.iter().enumerate() {
        let data_ch = (2 * i) as u8;
        let le = port.to_le_bytes();
        let _ = sink.send(Message::binary(vec![data_ch, le[0], le[1]])).await;
        let _ = sink.send(Message::binary(vec![data_ch + 1, le[0], le[1]])).await;
        match tokio::net::TcpStream::connect((ip, *port)).await {
            Ok(tcp) => {
                let (mut r, w) = tcp.into_split();
                writers.push(Some(w));
                open += 1;
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 32 * 1024];
                    loop {
                        match r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if tx.send((data_ch, Some(buf[..n].to_vec()))).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    let _ = tx.send((data_ch, None)).await;
                });
            }
            Err(e) => {
                writers.push(None);
                let msg = format!(
                    "an error occurred forwarding {port} -> {port}: error forwarding port {port} to pod {pod}, uid {uid}: failed to connect to {ip}:{port}: {e}"
                );
                let mut m = vec![data_ch + 1];
                m.extend(msg.into_bytes());
                let _ = sink.send(Message::binary(m)).await;
            }
        }
    }
    drop(tx);
    while open > 0 {
        tokio::select! {
            item = rx.recv() => match item {
                Some((ch, Some(data))) => {
                    let mut m = Vec::with_capacity(data.len() + 1);
                    m.push(ch);
                    m.extend(data);
                    if sink.send(Message::binary(m)).await.is_err() { return; }
                }
                Some((_, None)) => open -= 1,
                None => break,
            },
            msg = source.next() => match msg {
                Some(Ok(Message::Binary(b))) if !b.is_empty() => {
                    let ch = b[0] as usize;
                    if ch.is_multiple_of(2) && let Some(Some(w)) = writers.get_mut(ch / 2) && w.write_all(&b[1..]).await.is_err() {
                        writers[ch / 2] = None;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                _ => {}
            },
        }
    }
    close(&mut sink).await;
}
