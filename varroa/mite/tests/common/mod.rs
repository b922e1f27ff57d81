//! The world the mite's tests run in: a real nats-server (JetStream), the real gateway
//! (varroa_gateway, in-process, as its own tests start it), TLS from varroa-pki, and the Jenkins
//! double as Jenkins. Shared by tests/run.rs and tests/plugin.rs.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::kv::Store;
use varroa_gateway::{GatewayConfig, GatewayOptions, RunningGateway, TlsFiles};
use varroa_jenkins_double::{JenkinsDouble, Options};
use varroa_link::kv::{self, ControllerKey, DesiredEntry, MiteEntry};
use varroa_link::nats::ConnectSettings;
use varroa_link::testing::NatsServer;
use varroa_mite::link::{self, MiteHandle};
use varroa_mite::settings::RunSettings;
use varroa_pki::{CertificateAuthority, MiteIdentity};

pub const DEADLINE: Duration = Duration::from_secs(30);
pub const DAY: Duration = Duration::from_secs(86_400);
pub const TOKEN: &str = "0123456789abcdef0123456789abcdef";
pub const NS: &str = "team-a";
pub const CTRL: &str = "ci";

/// Polls `f` until it yields a value, failing the test after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub struct World {
    pub nats: NatsServer,
    pub nats_url: String,
    pub dir: tempfile::TempDir,
    pub ca: CertificateAuthority,
    pub tls: TlsFiles,
    pub gw: Option<RunningGateway>,
    pub grpc_addr: SocketAddr,
    pub mites: Store,
    pub desired: Store,
    pub jenkins: JenkinsDouble,
    /// JetStream, for reading the `varroa_builds` stream back.
    pub js: async_nats::jetstream::Context,
    /// The gateway's console log store.
    pub log_store: varroa_blobs::StoreSettings,
}

impl World {
    pub async fn start() -> World {
        Self::start_with_log_store(None).await
    }

    /// [`World::start`] with the gateway writing console logs into `log_store` (default: a
    /// directory `<tmp>/log-store`).
    pub async fn start_with_log_store(log_store: Option<varroa_blobs::StoreSettings>) -> World {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("varroa test gateway CA", DAY).unwrap();
        let server = ca.issue_server(&["localhost".into()], DAY, SystemTime::now()).unwrap();
        let gw_dir = dir.path().join("gateway");
        std::fs::create_dir(&gw_dir).unwrap();
        let tls = TlsFiles { cert: gw_dir.join("tls.crt"), key: gw_dir.join("tls.key"), ca: gw_dir.join("ca.crt") };
        std::fs::write(&tls.cert, &server.cert_pem).unwrap();
        std::fs::write(&tls.key, &server.key_pem).unwrap();
        std::fs::write(&tls.ca, ca.cert_pem()).unwrap();
        let nats = NatsServer::start().unwrap();
        let client = varroa_link::nats::connect(&ConnectSettings {
            url: nats.url(),
            credentials_file: None,
            name: "test".into(),
            max_reconnect_delay: Duration::from_millis(250),
        })
        .await
        .unwrap();
        let js = async_nats::jetstream::new(client);
        let js_for_world = js.clone();
        let mites = kv::open_mites(&js, 1).await.unwrap();
        let desired = kv::open_desired(&js, 1).await.unwrap();

        // Jenkins: JCasC reads <tmp>/casc, which the mite writes.
        let casc = dir.path().join("casc");
        std::fs::create_dir(&casc).unwrap();
        std::fs::write(casc.join("jenkins.yaml"), "jenkins:\n  systemMessage: boot\n").unwrap();
        std::fs::write(dir.path().join("jenkins-token"), format!("{TOKEN}\n")).unwrap();
        let jenkins = JenkinsDouble::start(Options {
            api_token: Some(TOKEN.into()),
            casc_config: Some(casc.display().to_string()),
            version: "2.479.3".into(),
            ..Default::default()
        })
        .await
        .unwrap();

        let mut w = World {
            nats_url: nats.url(),
            nats,
            dir,
            ca,
            tls,
            gw: None,
            grpc_addr: "127.0.0.1:0".parse().unwrap(),
            mites,
            desired,
            jenkins,
            js: js_for_world,
            log_store: varroa_blobs::StoreSettings::new("file:///unused"),
        };
        w.log_store = log_store.unwrap_or_else(|| {
            varroa_blobs::StoreSettings::new(format!("file://{}", w.dir.path().join("log-store").display()))
        });
        w.start_gateway().await;
        w.write_mite_cert(NS, CTRL, "mite");
        w
    }

    /// Starts the gateway (again on the same port after the first start).
    pub async fn start_gateway(&mut self) {
        let config = GatewayConfig {
            listen: self.grpc_addr,
            health_listen: "127.0.0.1:0".parse().unwrap(),
            tls: self.tls.clone(),
            nats: ConnectSettings {
                url: self.nats_url.clone(),
                credentials_file: None,
                name: "varroa-gateway/test".into(),
                max_reconnect_delay: Duration::from_millis(250),
            },
            bucket_replicas: 1,
            options: GatewayOptions {
                replica: "gw-test-0".into(),
                heartbeat_interval: Duration::from_secs(1),
                hello_timeout: Duration::from_secs(5),
                cluster: "test".into(),
                max_streams: 100,
            },
        };
        let gw = varroa_gateway::start_with(config, Some(self.log_store.clone())).await.unwrap();
        self.grpc_addr = gw.grpc_addr;
        let ready = gw.readiness.clone();
        eventually("the gateway is ready", || {
            let ready = ready.clone();
            async move { ready.is_ready().then_some(()) }
        })
        .await;
        self.gw = Some(gw);
    }

    /// Writes a mite certificate for `ns/name` with the gateway CA into `<tmp>/<sub>/`.
    pub fn write_mite_cert(&self, ns: &str, name: &str, sub: &str) -> PathBuf {
        let d = self.dir.path().join(sub);
        std::fs::create_dir_all(&d).unwrap();
        let cert = self.ca.issue_mite(&MiteIdentity::new(ns, name), DAY, SystemTime::now()).unwrap();
        std::fs::write(d.join("tls.crt"), &cert.cert_pem).unwrap();
        std::fs::write(d.join("tls.key"), &cert.key_pem).unwrap();
        std::fs::write(d.join("ca.crt"), self.ca.cert_pem()).unwrap();
        d
    }

    pub fn settings(&self, tls_dir: &str) -> RunSettings {
        let t = self.dir.path().join(tls_dir);
        RunSettings {
            namespace: NS.into(),
            controller: CTRL.into(),
            cell: 0,
            gateway_url: format!("https://{}", self.grpc_addr),
            gateway_server_name: Some("localhost".into()),
            tls_cert: t.join("tls.crt"),
            tls_key: t.join("tls.key"),
            tls_ca: t.join("ca.crt"),
            jenkins_url: self.jenkins.url(),
            jenkins_user: "admin".into(),
            jenkins_token_file: self.dir.path().join("jenkins-token"),
            jenkins_timeout: Duration::from_secs(2),
            casc_dir: self.dir.path().join("casc"),
            observe_interval: Duration::from_millis(200),
            drift_interval: Duration::from_secs(300),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(800),
            health_listen: Some("127.0.0.1:0".parse().unwrap()),
            plugin_listen: Some("127.0.0.1:0".parse().unwrap()),
            plugin_token_file: self.dir.path().join("plugin").join(tls_dir).join("token"),
        }
    }

    pub async fn mite(&self) -> MiteHandle {
        link::start(self.settings("mite")).await.unwrap()
    }

    pub async fn entry(&self) -> Option<MiteEntry> {
        let key = ControllerKey::new(NS, CTRL).unwrap().cell(0).to_string();
        let value = self.mites.get(&key).await.ok()??;
        Some(kv::decode_mite(&key, &value).unwrap())
    }

    pub async fn wait_entry(&self, what: &str, pred: impl Fn(&MiteEntry) -> bool) -> MiteEntry {
        eventually(what, || async { self.entry().await.filter(|e| pred(e)) }).await
    }

    pub async fn put_desired(&self, digest: &str, yaml: &str) {
        let entry = DesiredEntry {
            digest: digest.into(),
            files: BTreeMap::from([("jenkins.yaml".to_string(), yaml.to_string())]),
            cells: Some(1),
        };
        let key = ControllerKey::new(NS, CTRL).unwrap().to_string();
        self.desired.put(&key, kv::encode(&entry)).await.unwrap();
    }

    pub fn system_message(&self) -> Option<String> {
        self.jenkins.live_config().pointer("/jenkins/systemMessage").and_then(|v| v.as_str()).map(str::to_owned)
    }
}

pub fn applied(e: &MiteEntry, digest: &str) -> Option<bool> {
    e.last_apply_result.as_ref().filter(|r| r.digest == digest).map(|r| r.succeeded)
}

pub async fn metric(addr: SocketAddr, line_prefix: &str) -> u64 {
    let text = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(line_prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// One message of the `varroa_builds` stream.
#[derive(Debug)]
pub struct Stored {
    pub subject: String,
    pub msg_id: String,
    pub record: varroa_link::builds::RecordedEvent,
}

/// Every message in the `varroa_builds` stream, read with a fresh consumer from the start.
pub async fn stored_events(js: &async_nats::jetstream::Context) -> Vec<Stored> {
    use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
    use futures::StreamExt;
    let mut stream = js.get_stream(varroa_link::builds::STREAM).await.unwrap();
    let n = stream.info().await.unwrap().state.messages as usize;
    if n == 0 {
        return Vec::new();
    }
    let consumer: pull::Stream = stream
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            ..Default::default()
        })
        .await
        .unwrap()
        .messages()
        .await
        .unwrap();
    let msgs: Vec<_> = tokio::time::timeout(DEADLINE, consumer.take(n).collect::<Vec<_>>()).await.unwrap();
    msgs.into_iter()
        .map(|m| {
            let m = m.unwrap();
            let msg_id = m
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default();
            Stored { subject: m.subject.to_string(), msg_id, record: serde_json::from_slice(&m.payload).unwrap() }
        })
        .collect()
}

/// What the mite answered the plugin.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub retry_after: Option<u64>,
    pub content_type: String,
    pub allow: Option<String>,
    pub body: serde_json::Value,
}

impl Reply {
    pub fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or_default()
    }
}

/// A request as the plugin sends it: `method` on `path` of the plugin listener, with this
/// `Authorization` header when one is given.
pub async fn call(addr: SocketAddr, method: &str, path: &str, auth: Option<&str>, body: Vec<u8>) -> Reply {
    let client = reqwest::Client::new();
    let mut req = client
        .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(body);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let rsp = tokio::time::timeout(DEADLINE, req.send()).await.unwrap().unwrap();
    let header = |name: &str| rsp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let status = rsp.status().as_u16();
    let retry_after = header("retry-after").map(|v| v.parse().unwrap());
    let content_type = header("content-type").unwrap_or_default();
    let allow = header("allow");
    let bytes = rsp.bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {bytes:?}"));
    Reply { status, retry_after, content_type, allow, body }
}

/// `POST /v1/events` with `{"events": events}`.
pub async fn post_events(addr: SocketAddr, token: &str, events: &[serde_json::Value]) -> Reply {
    let body = serde_json::to_vec(&serde_json::json!({ "events": events })).unwrap();
    call(addr, "POST", "/v1/events", Some(&format!("Bearer {token}")), body).await
}

/// The token the mite wrote for the plugin.
pub fn plugin_token(settings: &RunSettings) -> String {
    std::fs::read_to_string(&settings.plugin_token_file).unwrap()
}

/// A valid event of build `build` of `team-a/app`.
pub fn event(id: &str, build: u64, kind: &str) -> serde_json::Value {
    let mut e = serde_json::json!({"v": 1, "id": id, "time": "2026-12-03T08:00:00.120Z", "job": "team-a/app",
        "build": build, "kind": kind});
    match kind {
        "started" => e["cause"] = "timer".into(),
        "finished" => {
            e["result"] = "SUCCESS".into();
            e["duration_ms"] = 1300.into();
        }
        "stage_finished" => {
            e["stage"] = serde_json::json!({"id": "7", "name": "Build", "result": "SUCCESS", "duration_ms": 1300})
        }
        _ => {}
    }
    e
}
