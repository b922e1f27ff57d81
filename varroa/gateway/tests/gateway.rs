//! The gateway with a real nats-server, real TLS and real gRPC; the mites are test clients.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::kv::Store;
use tokio::sync::mpsc;
use tonic::Streaming;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
use varroa_gateway::{GatewayConfig, GatewayOptions, RunningGateway, TlsFiles};
use varroa_link::kv::{self, ControllerKey, DesiredEntry, MiteEntry};
use varroa_link::nats::ConnectSettings;
use varroa_link::proto::v1::{
    self as pb, GatewayMessage, MiteMessage, gateway_message, mite_link_client::MiteLinkClient, mite_message,
};
use varroa_link::testing::NatsServer;
use varroa_pki::{CertificateAuthority, IssuedCert, MiteIdentity};

const DEADLINE: Duration = Duration::from_secs(20);
const DAY: Duration = Duration::from_secs(86_400);

struct Harness {
    nats: NatsServer,
    dir: tempfile::TempDir,
    ca: CertificateAuthority,
    tls: TlsFiles,
    gw: Option<RunningGateway>,
    mites: Store,
    desired: Store,
    creds: Option<PathBuf>,
    client: async_nats::Client,
    max_streams: usize,
    heartbeat: Duration,
    hello_timeout: Duration,
    /// The console log store (`None`: the gateway has none).
    log_store: Option<varroa_blobs::StoreSettings>,
}

impl Harness {
    async fn start() -> Harness {
        Self::start_inner(None).await
    }

    async fn start_with_auth(password: &str) -> Harness {
        Self::start_inner(Some(password)).await
    }

    async fn start_inner(password: Option<&str>) -> Harness {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("varroa test gateway CA", DAY).unwrap();
        let server = ca.issue_server(&["localhost".into()], DAY, SystemTime::now()).unwrap();
        let tls = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            ca: dir.path().join("ca.crt"),
        };
        std::fs::write(&tls.cert, &server.cert_pem).unwrap();
        std::fs::write(&tls.key, &server.key_pem).unwrap();
        std::fs::write(&tls.ca, ca.cert_pem()).unwrap();
        let (nats, creds) = match password {
            Some(pw) => {
                let creds = dir.path().join("nats-credentials");
                NatsServer::write_credentials(&creds, "gateway", pw).unwrap();
                (NatsServer::start_with_auth("gateway", pw).unwrap(), Some(creds))
            }
            None => (NatsServer::start().unwrap(), None),
        };
        let settings = ConnectSettings {
            url: nats.url(),
            credentials_file: creds.clone(),
            name: "test".into(),
            max_reconnect_delay: Duration::from_millis(250),
        };
        let client = varroa_link::nats::connect(&settings).await.unwrap();
        let js = async_nats::jetstream::new(client.clone());
        let mites = kv::open_mites(&js, 1).await.unwrap();
        let desired = kv::open_desired(&js, 1).await.unwrap();
        let mut h = Harness {
            nats,
            dir,
            ca,
            tls,
            gw: None,
            mites,
            desired,
            creds,
            client,
            max_streams: 100,
            heartbeat: Duration::from_secs(2),
            hello_timeout: Duration::from_secs(5),
            log_store: None,
        };
        h.start_gateway().await;
        h
    }

    async fn start_gateway(&mut self) {
        let config = GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            health_listen: "127.0.0.1:0".parse().unwrap(),
            tls: self.tls.clone(),
            nats: ConnectSettings {
                url: self.nats.url(),
                credentials_file: self.creds.clone(),
                name: "varroa-gateway/test".into(),
                max_reconnect_delay: Duration::from_millis(250),
            },
            bucket_replicas: 1,
            options: GatewayOptions {
                replica: "gw-test-0".into(),
                heartbeat_interval: self.heartbeat,
                hello_timeout: self.hello_timeout,
                cluster: "test".into(),
                max_streams: self.max_streams,
            },
        };
        let gw = varroa_gateway::start_with(config, self.log_store.clone()).await.unwrap();
        let ready = gw.readiness.clone();
        eventually("the gateway is ready", || {
            let ready = ready.clone();
            async move { ready.is_ready().then_some(()) }
        })
        .await;
        self.gw = Some(gw);
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.gw.as_ref().unwrap().grpc_addr
    }

    fn mite_cert(&self, ns: &str, name: &str) -> IssuedCert {
        self.ca.issue_mite(&MiteIdentity::new(ns, name), DAY, SystemTime::now()).unwrap()
    }

    async fn dial(&self, cert: Option<&IssuedCert>, hello: pb::Hello) -> Result<TestMite, String> {
        TestMite::dial(self.addr(), self.ca.cert_pem(), cert, hello).await
    }

    async fn entry(&self, ns: &str, name: &str, cell: u32) -> Option<MiteEntry> {
        let key = ControllerKey::new(ns, name).unwrap().cell(cell).to_string();
        let value = self.mites.get(&key).await.ok()??;
        Some(kv::decode_mite(&key, &value).unwrap())
    }

    async fn wait_entry(
        &self,
        ns: &str,
        name: &str,
        cell: u32,
        what: &str,
        pred: impl Fn(&MiteEntry) -> bool,
    ) -> MiteEntry {
        eventually(what, || async { self.entry(ns, name, cell).await.filter(|e| pred(e)) }).await
    }

    async fn put_desired(&self, ns: &str, name: &str, digest: &str, cells: Option<u32>) -> DesiredEntry {
        let entry = DesiredEntry {
            digest: digest.into(),
            files: BTreeMap::from([(
                "jenkins.yaml".to_string(),
                format!("# {digest}\njenkins:\n  systemMessage: hi\n"),
            )]),
            cells,
        };
        let key = ControllerKey::new(ns, name).unwrap().to_string();
        eventually("the desired entry is written", || async { self.desired.put(&key, kv::encode(&entry)).await.ok() })
            .await;
        entry
    }

    async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.gw.as_ref().unwrap().health_addr);
        reqwest::get(url).await.unwrap().text().await.unwrap()
    }
}

fn hello(ns: &str, name: &str, cell: u32) -> pb::Hello {
    pb::Hello {
        identity: MiteIdentity::new(ns, name).uri(),
        cell,
        jenkins_version: "2.479.1".into(),
        plugin_digest: "sha256:plugins".into(),
        mite_version: "0.1.0".into(),
    }
}

/// Polls `f` until it yields a value, failing the test after [`DEADLINE`].
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
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

#[derive(Debug)]
struct TestMite {
    tx: mpsc::Sender<MiteMessage>,
    rx: Streaming<GatewayMessage>,
    heartbeats: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for TestMite {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeats.take() {
            h.abort();
        }
    }
}

impl TestMite {
    async fn dial(
        addr: std::net::SocketAddr,
        server_ca: &str,
        cert: Option<&IssuedCert>,
        hello: pb::Hello,
    ) -> Result<TestMite, String> {
        let mut address = varroa_link::client::GatewayAddress::new(format!("https://localhost:{}", addr.port()));
        address.connect_timeout = Duration::from_secs(5);
        let channel = match cert {
            Some(c) => varroa_link::client::channel(&address, server_ca, &c.cert_pem, &c.key_pem)
                .await
                .map_err(|e| e.to_string())?,
            None => {
                // No client certificate: the shared helper always presents one, so build by hand.
                let tls =
                    ClientTlsConfig::new().ca_certificate(Certificate::from_pem(server_ca)).domain_name("localhost");
                Endpoint::from_shared(address.url.clone())
                    .map_err(|e| e.to_string())?
                    .tls_config(tls)
                    .map_err(|e| e.to_string())?
                    .connect()
                    .await
                    .map_err(|e| format!("connect: {e:?}"))?
            }
        };
        let (tx, mut out) = mpsc::channel::<MiteMessage>(16);
        tx.send(MiteMessage { kind: Some(mite_message::Kind::Hello(hello)) }).await.unwrap();
        let outbound = futures::stream::poll_fn(move |cx| out.poll_recv(cx));
        let response = MiteLinkClient::new(channel)
            .connect(outbound)
            .await
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
        let mut mite = TestMite { tx, rx: response.into_inner(), heartbeats: None };
        match mite.next().await {
            Some(gateway_message::Kind::Welcome(w)) => {
                // Heartbeat as a mite does, at the interval the Welcome asks for (halved).
                let tx = mite.tx.clone();
                let every = Duration::from_millis(u64::from(w.heartbeat_interval_seconds) * 500);
                mite.heartbeats = Some(tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(every).await;
                        let beat = MiteMessage {
                            kind: Some(mite_message::Kind::Heartbeat(pb::Heartbeat { sent_at_unix_ms: 0 })),
                        };
                        if tx.send(beat).await.is_err() {
                            return;
                        }
                    }
                }));
                Ok(mite)
            }
            other => Err(format!("expected a Welcome, got {other:?}")),
        }
    }

    async fn next(&mut self) -> Option<gateway_message::Kind> {
        match tokio::time::timeout(DEADLINE, self.rx.message()).await {
            Ok(Ok(Some(m))) => m.kind,
            Ok(Ok(None)) => None,
            Ok(Err(status)) => panic!("stream failed: {status:?}"),
            Err(_) => panic!("no message from the gateway within {DEADLINE:?}"),
        }
    }

    async fn next_desired(&mut self) -> pb::Desired {
        loop {
            match self.next().await {
                Some(gateway_message::Kind::Desired(d)) => return d,
                Some(_) => continue,
                None => panic!("stream ended before a Desired"),
            }
        }
    }

    async fn send(&self, kind: mite_message::Kind) {
        self.tx.send(MiteMessage { kind: Some(kind) }).await.unwrap();
    }
}

fn status_code(err: &str) -> &str {
    err.split(':').next().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_mite_connects_and_its_state_lands_in_varroa_mites() {
    let h = Harness::start().await;
    let cert = h.mite_cert("team-a", "ci");
    let mite = h.dial(Some(&cert), hello("team-a", "ci", 0)).await.unwrap();
    let e = h.wait_entry("team-a", "ci", 0, "the mite shows connected", |e| e.connected).await;
    assert_eq!(e.gateway_replica, "gw-test-0");
    assert_eq!(e.jenkins_version, "2.479.1");
    assert_eq!(e.plugin_digest, "sha256:plugins");
    assert!(e.since.is_some() && e.last_heartbeat.is_some());

    mite.send(mite_message::Kind::Observation(pb::Observation {
        queue_length: Some(4),
        mode: Some("NORMAL".into()),
        ..Default::default()
    }))
    .await;
    mite.send(mite_message::Kind::Observation(pb::Observation { queue_length: Some(1), ..Default::default() })).await;
    mite.send(mite_message::Kind::ApplyResult(pb::ApplyResult {
        digest: "sha256:abc".into(),
        succeeded: false,
        message: "Invalid configuration elements for type: class jenkins.model.Jenkins : bogus".into(),
        drift_paths: vec!["jenkins.systemMessage".into()],
        finished_at_unix_ms: 1_767_225_600_000,
    }))
    .await;
    let e = h
        .wait_entry("team-a", "ci", 0, "the observation and apply result land", |e| {
            e.observation.queue_length == Some(1) && e.last_apply_result.is_some()
        })
        .await;
    assert_eq!(e.observation.mode.as_deref(), Some("NORMAL"), "deltas merge");
    let apply = e.last_apply_result.unwrap();
    assert_eq!((apply.digest.as_str(), apply.succeeded), ("sha256:abc", false));
    assert_eq!(apply.drift_paths, ["jenkins.systemMessage"]);
    assert!(apply.finished_at.is_some());

    drop(mite);
    let e = h.wait_entry("team-a", "ci", 0, "the mite shows disconnected", |e| !e.connected).await;
    assert!(e.disconnected_at.is_some());
    assert_eq!(e.observation.queue_length, Some(1), "the observation is kept for the next stream");
    assert_eq!(h.gw.as_ref().unwrap().gateway.stream_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificates_and_false_identities_are_refused_while_a_good_mite_keeps_working() {
    let h = Harness::start().await;
    let good = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    let mut good = good;

    // No client certificate: the handshake refuses it.
    let err = h.dial(None, hello("team-a", "ci", 1)).await.unwrap_err();
    assert!(!err.starts_with("PermissionDenied"), "refused at the handshake, not later: {err}");
    // A certificate from another CA.
    let other = CertificateAuthority::generate("someone else's CA", DAY).unwrap();
    let foreign = other.issue_mite(&MiteIdentity::new("team-a", "ci"), DAY, SystemTime::now()).unwrap();
    let err = h.dial(Some(&foreign), hello("team-a", "ci", 1)).await.unwrap_err();
    assert!(!err.starts_with("PermissionDenied"), "refused at the handshake, not later: {err}");
    // An expired certificate from the right CA (issued for a minute, four minutes ago).
    let past = SystemTime::now() - Duration::from_secs(240);
    let expired = h.ca.issue_mite(&MiteIdentity::new("team-a", "ci"), Duration::from_secs(60), past).unwrap();
    assert!(h.dial(Some(&expired), hello("team-a", "ci", 1)).await.is_err());
    // A valid certificate whose hello claims another controller.
    let err = h.dial(Some(&h.mite_cert("team-b", "ci")), hello("team-a", "ci", 1)).await.unwrap_err();
    assert_eq!(status_code(&err), "PermissionDenied", "{err}");
    assert!(
        err.contains("spiffe://varroa.dev/ns/team-b/controller/ci"),
        "the refusal names the certificate's identity: {err}"
    );

    // Nothing was written for the refused ones; the good mite still gets its configuration.
    assert!(h.entry("team-a", "ci", 1).await.is_none());
    let entry = h.put_desired("team-a", "ci", "sha256:after-refusals", None).await;
    assert_eq!(good.next_desired().await.digest, entry.digest);
    let metrics = h.metrics().await;
    assert!(metrics.contains("varroa_gateway_refused_total{reason=\"identity_mismatch\"} 1"), "{metrics}");
    assert!(metrics.contains("varroa_gateway_refused_total{reason=\"handshake\"}"), "{metrics}");
    assert!(metrics.contains("varroa_gateway_streams 1"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desired_configuration_reaches_the_mite_at_once_and_again_on_reconnect() {
    let h = Harness::start().await;
    let cert = h.mite_cert("team-a", "ci");
    let first = h.put_desired("team-a", "ci", "sha256:one", Some(2)).await;
    let mut mite = h.dial(Some(&cert), hello("team-a", "ci", 1)).await.unwrap();
    let d = mite.next_desired().await;
    assert_eq!(d.digest, first.digest, "the current entry is sent on connect");
    assert_eq!(d.files.get("jenkins.yaml"), first.files.get("jenkins.yaml"));

    let second = h.put_desired("team-a", "ci", "sha256:two", Some(2)).await;
    assert_eq!(mite.next_desired().await.digest, second.digest, "a new entry is pushed at once");

    drop(mite);
    let mut again = h.dial(Some(&cert), hello("team-a", "ci", 1)).await.unwrap();
    assert_eq!(again.next_desired().await.digest, second.digest, "the current entry is sent on reconnect");

    // The controller has two cells: ordinal 2 is refused.
    let err = h.dial(Some(&cert), hello("team-a", "ci", 2)).await.unwrap_err();
    assert_eq!(status_code(&err), "PermissionDenied", "{err}");
    assert!(err.contains("cell 2"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stream_for_the_same_cell_replaces_the_first() {
    let h = Harness::start().await;
    let cert = h.mite_cert("team-a", "ci");
    let mut old = h.dial(Some(&cert), hello("team-a", "ci", 0)).await.unwrap();
    let first = h.wait_entry("team-a", "ci", 0, "connected", |e| e.connected).await;
    let _new = h.dial(Some(&cert), hello("team-a", "ci", 0)).await.unwrap();
    match old.next().await {
        Some(gateway_message::Kind::Error(e)) => assert_eq!(e.code, "replaced"),
        other => panic!("expected Error replaced, got {other:?}"),
    }
    let e = h.wait_entry("team-a", "ci", 0, "the new session owns the entry", |e| e.session != first.session).await;
    assert!(e.connected);
    assert_eq!(h.gw.as_ref().unwrap().gateway.stream_count(), 1);
    // Once the old stream has ended, the cell is still connected: its end wrote nothing.
    eventually("the old stream ended", || async {
        h.metrics().await.contains("varroa_gateway_streams 1\n").then_some(())
    })
    .await;
    let e = h.entry("team-a", "ci", 0).await.unwrap();
    assert!(e.connected && e.session != first.session, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_ca_file_is_used_for_new_handshakes_without_restart() {
    let h = Harness::start().await;
    let old_mite = h.dial(Some(&h.mite_cert("team-a", "old")), hello("team-a", "old", 0)).await.unwrap();
    let new_ca = CertificateAuthority::generate("rotated gateway CA", DAY).unwrap();
    let new_cert = new_ca.issue_mite(&MiteIdentity::new("team-a", "ci"), DAY, SystemTime::now()).unwrap();
    assert!(h.dial(Some(&new_cert), hello("team-a", "ci", 0)).await.is_err(), "not trusted yet");

    std::fs::write(&h.tls.ca, new_ca.cert_pem()).unwrap();
    let mite = h.dial(Some(&new_cert), hello("team-a", "ci", 0)).await.unwrap();
    h.wait_entry("team-a", "ci", 0, "the new CA's mite is connected", |e| e.connected).await;
    assert!(
        h.dial(Some(&h.mite_cert("team-a", "other")), hello("team-a", "other", 0)).await.is_err(),
        "the old CA is no longer trusted"
    );
    // A stream accepted before the change stays up.
    old_mite
        .send(mite_message::Kind::Observation(pb::Observation { queue_length: Some(7), ..Default::default() }))
        .await;
    h.wait_entry("team-a", "old", 0, "the old stream still reports", |e| e.observation.queue_length == Some(7)).await;

    // A broken CA file keeps the last good configuration.
    std::fs::write(&h.tls.ca, "not a certificate").unwrap();
    let again = h.dial(Some(&new_cert), hello("team-a", "ci", 1)).await;
    assert!(again.is_ok(), "{:?}", again.err());
    assert!(h.metrics().await.contains("varroa_gateway_tls_reloads_total{reason=\"failed\"} 1"));
    drop(mite);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_recovers_from_a_nats_restart() {
    let mut h = Harness::start().await;
    let mut mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    h.wait_entry("team-a", "ci", 0, "connected", |e| e.connected).await;

    h.nats.restart().unwrap();
    // State written after the restart lands, and desired entries written after it are pushed.
    mite.send(mite_message::Kind::Observation(pb::Observation { busy_executors: Some(3), ..Default::default() })).await;
    h.wait_entry("team-a", "ci", 0, "the observation after the restart lands", |e| {
        e.observation.busy_executors == Some(3)
    })
    .await;
    let d = h.put_desired("team-a", "ci", "sha256:after-restart", None).await;
    assert_eq!(mite.next_desired().await.digest, d.digest);
    // New mites connect.
    let _other = h.dial(Some(&h.mite_cert("team-b", "ci")), hello("team-b", "ci", 0)).await.unwrap();
    h.wait_entry("team-b", "ci", 0, "a mite connecting after the restart is recorded", |e| e.connected).await;
    drop(h.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_nats_password_is_picked_up_from_the_file_without_restart() {
    let mut h = Harness::start_with_auth("first-password").await;
    let mut mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    h.wait_entry("team-a", "ci", 0, "connected", |e| e.connected).await;

    // Rotate in NATS first: the gateway loses NATS (its file still has the old password) and
    // says so on /readyz, while the mite's stream stays up.
    let connections = h.gw.as_ref().unwrap().nats_connections();
    assert!(connections >= 1);
    h.nats.set_password("second-password").unwrap();
    let ready = h.gw.as_ref().unwrap().readiness.clone();
    eventually("the gateway reports NATS lost", || {
        let ready = ready.clone();
        async move { (!ready.is_ready()).then_some(()) }
    })
    .await;
    // Then the Secret (the file): the next reconnect attempt reads it.
    let creds = h.creds.clone().unwrap();
    NatsServer::write_credentials(&creds, "gateway", "second-password").unwrap();
    eventually("the gateway is ready again", || {
        let ready = ready.clone();
        async move { ready.is_ready().then_some(()) }
    })
    .await;

    mite.send(mite_message::Kind::Observation(pb::Observation { idle_for_seconds: Some(42), ..Default::default() }))
        .await;
    h.wait_entry("team-a", "ci", 0, "an observation after the rotation lands", |e| {
        e.observation.idle_for_seconds == Some(42)
    })
    .await;
    let d = h.put_desired("team-a", "ci", "sha256:after-rotation", None).await;
    assert_eq!(mite.next_desired().await.digest, d.digest);
    assert!(
        h.gw.as_ref().unwrap().nats_connections() > connections,
        "NATS dropped the old credential and the gateway reconnected with the new one"
    );
}

#[test]
fn the_binary_documents_its_flags_and_environment() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_varroa-gateway")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--tls-ca",
        "--nats-url",
        "--nats-credentials-file",
        "--replica",
        "--heartbeat-seconds",
        "VARROA_NATS_URL",
        "POD_NAME",
        "--log-store",
        "VARROA_LOG_STORE",
        "--log-store-credentials-file",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_mite_is_closed_after_three_heartbeat_intervals() {
    let mut h = Harness::start().await;
    h.gw.take().unwrap().shutdown().await;
    h.heartbeat = Duration::from_secs(1);
    h.start_gateway().await;
    let mut mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    mite.heartbeats.take().unwrap().abort();
    let started = std::time::Instant::now();
    match mite.next().await {
        Some(gateway_message::Kind::Error(e)) => assert_eq!(e.code, "heartbeat_timeout"),
        other => panic!("expected Error heartbeat_timeout, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_secs(2), "not before the intervals passed");
    h.wait_entry("team-a", "ci", 0, "the silent mite shows disconnected", |e| !e.connected).await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_mites_and_shuts_down_cleanly_on_sigterm() {
    let mut h = Harness::start_with_auth("binary-password").await;
    // The in-process gateway is not needed here: the binary replaces it.
    h.gw.take().unwrap().shutdown().await;
    let (grpc, health) = (free_port(), free_port());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-gateway"))
        .env("VARROA_GATEWAY_LISTEN", format!("127.0.0.1:{grpc}"))
        .env("VARROA_GATEWAY_HEALTH_LISTEN", format!("127.0.0.1:{health}"))
        .env("VARROA_GATEWAY_TLS_CERT", &h.tls.cert)
        .env("VARROA_GATEWAY_TLS_KEY", &h.tls.key)
        .env("VARROA_GATEWAY_TLS_CA", &h.tls.ca)
        .env("VARROA_NATS_URL", h.nats.url())
        .env("VARROA_NATS_CREDENTIALS_FILE", h.creds.as_ref().unwrap())
        .env("POD_NAME", "varroa-gateway-7d9f-abcde")
        .env("VARROA_GATEWAY_HEARTBEAT_SECONDS", "2")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let readyz = format!("http://127.0.0.1:{health}/readyz");
    eventually("the binary is ready", || async {
        reqwest::get(&readyz).await.ok().filter(|r| r.status() == 200).map(|_| ())
    })
    .await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], grpc));
    let mut mite = TestMite::dial(addr, h.ca.cert_pem(), Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0))
        .await
        .unwrap();
    let e = h.wait_entry("team-a", "ci", 0, "the binary records the mite", |e| e.connected).await;
    assert_eq!(e.gateway_replica, "varroa-gateway-7d9f-abcde", "the replica name defaults to POD_NAME");

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    match mite.next().await {
        Some(gateway_message::Kind::Error(e)) => assert_eq!(e.code, "shutting_down"),
        other => panic!("expected Error shutting_down, got {other:?}"),
    }
    let status = tokio::time::timeout(DEADLINE, child.wait()).await.expect("the binary exits after SIGTERM").unwrap();
    assert!(status.success(), "{status}");
    let e = h.entry("team-a", "ci", 0).await.unwrap();
    assert!(!e.connected, "the stream was recorded closed before exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mite_that_moves_to_another_replica_is_released_by_the_first() {
    let mut h = Harness::start().await;
    let first = h.gw.take().unwrap();
    h.start_gateway().await; // a second replica on the same NATS
    let cert = h.mite_cert("team-a", "ci");
    let mut on_first =
        TestMite::dial(first.grpc_addr, h.ca.cert_pem(), Some(&cert), hello("team-a", "ci", 0)).await.unwrap();
    let old = h.wait_entry("team-a", "ci", 0, "connected through the first replica", |e| e.connected).await;
    let _on_second = h.dial(Some(&cert), hello("team-a", "ci", 0)).await.unwrap();
    h.wait_entry("team-a", "ci", 0, "the second replica's session owns the entry", |e| {
        e.session != old.session && e.connected
    })
    .await;
    // The first replica notices at its next write (a heartbeat) and ends its stream as replaced.
    match on_first.next().await {
        Some(gateway_message::Kind::Error(e)) => assert_eq!(e.code, "replaced"),
        other => panic!("expected Error replaced, got {other:?}"),
    }
    eventually("the first replica holds no stream", || async { (first.gateway.stream_count() == 0).then_some(()) })
        .await;
    let e = h.entry("team-a", "ci", 0).await.unwrap();
    assert!(e.connected && e.session != old.session, "the first replica did not write over the second: {e:?}");
    first.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chatty_mite_costs_a_few_writes_and_its_last_word_lands() {
    let h = Harness::start().await;
    let mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    h.wait_entry("team-a", "ci", 0, "connected", |e| e.connected).await;
    let key = ControllerKey::new("team-a", "ci").unwrap().cell(0).to_string();
    let before = h.mites.entry(&key).await.unwrap().unwrap().revision;
    for n in 1..=100u32 {
        mite.send(mite_message::Kind::Observation(pb::Observation { queue_length: Some(n), ..Default::default() }))
            .await;
    }
    h.wait_entry("team-a", "ci", 0, "the last observation lands", |e| e.observation.queue_length == Some(100)).await;
    let writes = h.mites.entry(&key).await.unwrap().unwrap().revision - before;
    assert!((1..=10).contains(&writes), "100 observations in a burst cost {writes} writes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mite_observed_changes_are_published_as_activity() {
    use futures::StreamExt;
    use varroa_link::activity::{self, ActivityEvent};
    let h = Harness::start().await;
    let mut events = h.client.subscribe("activity.test.team-a.ci").await.unwrap();
    h.client.flush().await.unwrap();
    let mut next = async || -> ActivityEvent {
        let msg = tokio::time::timeout(DEADLINE, events.next()).await.expect("an activity event").unwrap();
        serde_json::from_slice(&msg.payload).unwrap()
    };
    let mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    let e = next().await;
    assert_eq!((e.kind.as_str(), e.source.as_str(), e.cell), (activity::MITE_CONNECTED, "mite", Some(0)));
    assert_eq!((e.cluster.as_str(), e.namespace.as_str(), e.controller.as_str()), ("test", "team-a", "ci"));

    let base = pb::Observation {
        version: Some("2.479.1".into()),
        quieting_down: Some(false),
        queue_length: Some(0),
        ..Default::default()
    };
    mite.send(mite_message::Kind::Observation(base)).await;
    mite.send(mite_message::Kind::Observation(pb::Observation { queue_length: Some(5), ..Default::default() })).await;
    mite.send(mite_message::Kind::Observation(pb::Observation { quieting_down: Some(true), ..Default::default() }))
        .await;
    assert_eq!(
        next().await.kind,
        activity::QUIET_DOWN_STARTED,
        "the first full observation and queue changes are not activity"
    );
    mite.send(mite_message::Kind::ApplyResult(pb::ApplyResult {
        digest: "sha256:x".into(),
        succeeded: false,
        message: "unknown root key bogus".into(),
        ..Default::default()
    }))
    .await;
    let e = next().await;
    assert_eq!(e.kind, activity::APPLY_FAILED);
    assert!(e.message.contains("unknown root key bogus"), "{}", e.message);
    drop(mite);
    let e = next().await;
    assert_eq!(e.kind, activity::MITE_DISCONNECTED);
    assert_ne!(e.id, "", "events carry an id for deduplication");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_replica_refuses_new_streams_but_lets_a_cell_reconnect() {
    let mut h = Harness::start().await;
    h.gw.take().unwrap().shutdown().await;
    h.max_streams = 1;
    h.start_gateway().await;
    let cert = h.mite_cert("team-a", "ci");
    let _one = h.dial(Some(&cert), hello("team-a", "ci", 0)).await.unwrap();
    let err = h.dial(Some(&cert), hello("team-a", "ci", 1)).await.unwrap_err();
    assert_eq!(status_code(&err), "ResourceExhausted", "{err}");
    assert!(err.contains("maximum of 1 streams"), "{err}");
    // The same cell reconnecting replaces its stream instead of counting twice.
    let _again = h.dial(Some(&cert), hello("team-a", "ci", 0)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_desired_entry_reaches_every_cell_of_the_controller_and_no_other() {
    let h = Harness::start().await;
    let cert = h.mite_cert("team-a", "big");
    let mut cells = Vec::new();
    for cell in 0..40 {
        cells.push(h.dial(Some(&cert), hello("team-a", "big", cell)).await.unwrap());
    }
    let mut bystander = h.dial(Some(&h.mite_cert("team-a", "small")), hello("team-a", "small", 0)).await.unwrap();
    let d = h.put_desired("team-a", "big", "sha256:fan-out", Some(40)).await;
    for mite in &mut cells {
        assert_eq!(mite.next_desired().await.digest, d.digest);
    }
    // The other controller got nothing: its next message is its own entry, written now.
    let own = h.put_desired("team-a", "small", "sha256:own", None).await;
    assert_eq!(bystander.next_desired().await.digest, own.digest);
    assert_eq!(h.gw.as_ref().unwrap().gateway.stream_count(), 41);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_a_hello_is_ended_after_the_hello_timeout() {
    let mut h = Harness::start().await;
    h.gw.take().unwrap().shutdown().await;
    h.hello_timeout = Duration::from_secs(1);
    h.start_gateway().await;
    let cert = h.mite_cert("team-a", "ci");
    let address = varroa_link::client::GatewayAddress::new(format!("https://localhost:{}", h.addr().port()));
    let channel = varroa_link::client::channel(&address, h.ca.cert_pem(), &cert.cert_pem, &cert.key_pem).await.unwrap();
    // A stream that never says anything.
    let silent = futures::stream::pending::<MiteMessage>();
    let status = MiteLinkClient::new(channel.clone()).connect(silent).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    // A first message that is not a Hello.
    let beat = MiteMessage { kind: Some(mite_message::Kind::Heartbeat(pb::Heartbeat { sent_at_unix_ms: 0 })) };
    let status = MiteLinkClient::new(channel).connect(futures::stream::iter([beat])).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(h.entry("team-a", "ci", 0).await.is_none());
    let metrics = h.metrics().await;
    assert!(metrics.contains("varroa_gateway_refused_total{reason=\"hello_timeout\"} 1"), "{metrics}");
}

// Build events: the mite's BuildEvents batches, stored in the varroa_builds stream.

/// A valid build event of `team-a/app` as the plugin protocol has it.
fn build_event(id: &str, build: u64) -> serde_json::Value {
    serde_json::json!({"v": 1, "id": id, "time": "2026-12-03T08:00:00.120Z", "job": "team-a/app",
        "build": build, "kind": "started", "cause": "timer"})
}

fn bytes_of(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

/// One message of the varroa_builds stream: subject, `Nats-Msg-Id`, the stamped event.
#[derive(Debug)]
struct Stored {
    subject: String,
    msg_id: String,
    record: varroa_link::builds::RecordedEvent,
}

/// Every message of the varroa_builds stream, read with a fresh consumer from the start.
async fn stored_builds(client: &async_nats::Client) -> Vec<Stored> {
    use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
    use futures::StreamExt;
    let js = async_nats::jetstream::new(client.clone());
    let mut stream = js.get_stream(varroa_link::builds::STREAM).await.unwrap();
    let n = stream.info().await.unwrap().state.messages as usize;
    if n == 0 {
        return Vec::new();
    }
    let config = pull::Config { deliver_policy: DeliverPolicy::All, ack_policy: AckPolicy::None, ..Default::default() };
    let messages = stream.create_consumer(config).await.unwrap().messages().await.unwrap();
    let got: Vec<_> = tokio::time::timeout(DEADLINE, messages.take(n).collect::<Vec<_>>()).await.unwrap();
    got.into_iter()
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

fn stored_ids(stored: &[Stored]) -> Vec<String> {
    let mut ids: Vec<_> = stored.iter().map(|s| s.record.event.id.clone()).collect();
    ids.sort();
    ids
}

/// The value of one metric line (0 when absent).
fn metric_value(text: &str, line_prefix: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(line_prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

impl TestMite {
    async fn send_batch(&self, batch: u64, events: Vec<Vec<u8>>) {
        self.send(mite_message::Kind::BuildEvents(pb::BuildEvents { batch, events })).await;
    }

    async fn next_ack(&mut self) -> pb::EventsAck {
        loop {
            match self.next().await {
                Some(gateway_message::Kind::EventsAck(a)) => return a,
                Some(_) => continue,
                None => panic!("stream ended before an EventsAck"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_events_are_stored_stamped_from_the_certificate_and_a_resent_batch_is_stored_once() {
    let h = Harness::start().await;
    let mut a = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 1)).await.unwrap();
    let mut b = h.dial(Some(&h.mite_cert("team-b", "ci")), hello("team-b", "ci", 0)).await.unwrap();

    // The mite is in the tenant's pod: an event naming another controller is stored as its own.
    let mut claims_other = build_event("x#1:finished", 1);
    claims_other["kind"] = "finished".into();
    claims_other["result"] = "FAILURE".into();
    claims_other["duration_ms"] = 10.into();
    for (k, v) in [("cluster", "prod"), ("namespace", "team-b"), ("controller", "ci")] {
        claims_other[k] = v.into();
    }
    let batch = vec![bytes_of(&build_event("x#1:started", 1)), bytes_of(&claims_other)];
    a.send_batch(1, batch.clone()).await;
    let ack = a.next_ack().await;
    assert_eq!((ack.batch, ack.accepted, ack.retry_after_ms), (1, 2, 0), "{ack:?}");
    assert!(ack.rejected.is_empty(), "{ack:?}");
    // Another tenant's event with the same id is its own message.
    b.send_batch(7, vec![bytes_of(&build_event("x#1:started", 1))]).await;
    let ack = b.next_ack().await;
    assert_eq!((ack.batch, ack.accepted), (7, 1), "{ack:?}");

    // The same batch again (a retry): accepted, and JetStream drops the copies.
    a.send_batch(2, batch).await;
    let ack = a.next_ack().await;
    assert_eq!((ack.batch, ack.accepted, ack.retry_after_ms), (2, 2, 0), "{ack:?}");

    let stored = stored_builds(&h.client).await;
    assert_eq!(stored.len(), 3, "{stored:#?}");
    for s in &stored {
        let r = &s.record;
        let (ns, cell) = if s.subject.ends_with("team-a.ci") { ("team-a", 1) } else { ("team-b", 0) };
        assert_eq!(s.subject, format!("varroa.builds.test.{ns}.ci"));
        assert_eq!((r.cluster.as_str(), r.namespace.as_str(), r.controller.as_str(), r.cell), ("test", ns, "ci", cell));
        assert_eq!(s.msg_id, format!("test/{ns}/ci/{}", r.event.id));
    }
    let a_ids: Vec<_> = stored.iter().filter(|s| s.record.namespace == "team-a").map(|s| &s.record.event.id).collect();
    assert_eq!(a_ids.len(), 2, "{stored:#?}");
    let claimed = stored.iter().find(|s| s.record.event.id == "x#1:finished").unwrap();
    assert_eq!(claimed.subject, "varroa.builds.test.team-a.ci", "the certificate decides, not the event");
    assert_eq!((claimed.record.cluster.as_str(), claimed.record.namespace.as_str()), ("test", "team-a"));
    let m = h.metrics().await;
    assert_eq!(metric_value(&m, "varroa_gateway_build_events_total{outcome=\"stored\"}"), 3, "{m}");
    assert_eq!(metric_value(&m, "varroa_gateway_build_events_total{outcome=\"duplicate\"}"), 2, "{m}");
    assert_eq!(metric_value(&m, "varroa_gateway_messages_total{kind=\"build_events\"}"), 3, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_batches_are_rejected_with_a_reason_and_nothing_else_breaks() {
    let h = Harness::start().await;
    let mut mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    h.wait_entry("team-a", "ci", 0, "connected", |e| e.connected).await;

    let mut zero = build_event("zero", 1);
    zero["build"] = 0.into();
    let mut huge = build_event("huge", 1);
    huge["job"] = "j".repeat(varroa_link::builds::MAX_EVENT_BYTES).into();
    let garbage = vec![
        b"not json".to_vec(),
        b"[1]".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x80],
        Vec::new(),
        bytes_of(&huge),
        bytes_of(&zero),
        bytes_of(&build_event("ok-1", 1)),
    ];
    mite.send_batch(1, garbage).await;
    let ack = mite.next_ack().await;
    assert_eq!((ack.accepted, ack.retry_after_ms), (1, 0), "{ack:?}");
    let reasons: Vec<(&str, &str)> =
        ack.rejected.iter().map(|r| (r.id.as_str(), r.error.split(':').next().unwrap())).collect();
    assert_eq!(
        reasons,
        [("", "event"), ("", "event"), ("", "event"), ("", "event"), ("", "event"), ("zero", "build")],
        "{ack:?}"
    );
    assert!(ack.rejected[4].error.contains("larger than"), "{ack:?}");

    // More events than one batch may carry: refused whole, with the reason.
    let oversized: Vec<_> = (0..501).map(|i| bytes_of(&build_event(&format!("o-{i}"), 1))).collect();
    mite.send_batch(2, oversized).await;
    let ack = mite.next_ack().await;
    assert_eq!((ack.batch, ack.accepted, ack.retry_after_ms), (2, 0, 0), "{ack:?}");
    assert_eq!(ack.rejected.len(), 1, "{ack:?}");
    assert!(ack.rejected[0].error.contains("501 events, at most 500"), "{ack:?}");

    // The stream, the session and the JetStream stream are still fine.
    mite.send_batch(3, vec![bytes_of(&build_event("ok-2", 2))]).await;
    let ack = mite.next_ack().await;
    assert_eq!((ack.batch, ack.accepted), (3, 1), "{ack:?}");
    mite.send(mite_message::Kind::Observation(pb::Observation { queue_length: Some(5), ..Default::default() })).await;
    h.wait_entry("team-a", "ci", 0, "the stream still works", |e| e.observation.queue_length == Some(5)).await;
    assert_eq!(stored_ids(&stored_builds(&h.client).await), ["ok-1", "ok-2"]);
    let m = h.metrics().await;
    assert_eq!(metric_value(&m, "varroa_gateway_build_events_total{outcome=\"rejected\"}"), 6 + 501, "{m}");
    assert_eq!(metric_value(&m, "varroa_gateway_build_batches_total{outcome=\"oversized\"}"), 1, "{m}");
    assert_eq!(h.gw.as_ref().unwrap().gateway.stream_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nats_down_batches_are_answered_retry_at_most_four_wait_and_the_resent_ones_are_stored_once() {
    let mut h = Harness::start().await;
    let mut mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    h.wait_entry("team-a", "ci", 0, "connected", |e| e.connected).await;
    let batch = |i: u64| vec![bytes_of(&build_event(&format!("n-{i}"), i))];

    h.nats.stop();
    for i in 1..=6 {
        mite.send_batch(i, batch(i)).await;
    }
    // Four are being stored (and wait for JetStream); the two beyond are answered at once.
    let mut acks = Vec::new();
    for _ in 0..6 {
        acks.push(mite.next_ack().await);
    }
    let order: Vec<(u64, u32)> = acks.iter().map(|a| (a.batch, a.retry_after_ms)).collect();
    assert_eq!(&order[..2], [(5, 1000), (6, 1000)], "{order:?}");
    let mut waited: Vec<_> = order[2..].to_vec();
    waited.sort();
    assert_eq!(waited, [(1, 2000), (2, 2000), (3, 2000), (4, 2000)], "{order:?}");
    assert!(acks.iter().all(|a| a.accepted == 0 && a.rejected.is_empty()), "{acks:?}");

    h.nats.start_again().unwrap();
    let ready = h.gw.as_ref().unwrap().readiness.clone();
    eventually("the gateway is ready again", || {
        let ready = ready.clone();
        async move { ready.is_ready().then_some(()) }
    })
    .await;
    // As the mite does: each batch again, whole, until it is stored.
    let mut next = 10;
    for i in 1..=6 {
        loop {
            next += 1;
            mite.send_batch(next, batch(i)).await;
            let ack = mite.next_ack().await;
            assert_eq!(ack.batch, next);
            if ack.retry_after_ms == 0 {
                assert_eq!(ack.accepted, 1, "{ack:?}");
                break;
            }
            assert!(next < 200, "batch {i} still not stored: {ack:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let ids = stored_ids(&stored_builds(&h.client).await);
    assert_eq!(ids, ["n-1", "n-2", "n-3", "n-4", "n-5", "n-6"], "one message per event");
    let m = h.metrics().await;
    assert_eq!(metric_value(&m, "varroa_gateway_build_batches_total{outcome=\"busy\"}"), 2, "{m}");
    assert!(metric_value(&m, "varroa_gateway_build_batches_total{outcome=\"retry\"}") >= 4, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_stream_is_created_again_for_the_retry() {
    let h = Harness::start().await;
    let mut mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    let js = async_nats::jetstream::new(h.client.clone());
    js.delete_stream(varroa_link::builds::STREAM).await.unwrap();

    mite.send_batch(1, vec![bytes_of(&build_event("d-1", 1))]).await;
    let ack = mite.next_ack().await;
    assert_eq!((ack.accepted, ack.retry_after_ms), (0, 2000), "no stream: retry, {ack:?}");
    mite.send_batch(2, vec![bytes_of(&build_event("d-1", 1))]).await;
    let ack = mite.next_ack().await;
    assert_eq!((ack.accepted, ack.retry_after_ms), (1, 0), "{ack:?}");
    assert_eq!(stored_ids(&stored_builds(&h.client).await), ["d-1"]);
    let info = js.get_stream(varroa_link::builds::STREAM).await.unwrap().cached_info().config.clone();
    assert_eq!(info.duplicate_window, varroa_link::builds::DUPLICATE_WINDOW, "created with the stream's settings");
}

impl TestMite {
    async fn send_chunk(&self, id: u64, job: &str, build: u64, offset: u64, data: &[u8], last: bool) {
        let chunk = pb::LogChunk { id, job: job.into(), build, offset, data: data.to_vec(), last };
        self.send(mite_message::Kind::LogChunk(chunk)).await;
    }

    async fn next_log_ack(&mut self) -> pb::LogAck {
        loop {
            match self.next().await {
                Some(gateway_message::Kind::LogAck(a)) => return a,
                Some(_) => continue,
                None => panic!("stream ended before a LogAck"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_chunks_are_checked_again_and_written_under_the_certificates_controller() {
    let mut h = Harness::start().await;
    // A gateway without a log store asks for the chunk later (the plugin keeps the log).
    let mut m = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    m.send_chunk(1, "app", 1, 0, b"x", false).await;
    let ack = m.next_log_ack().await;
    assert_eq!((ack.id, ack.outcome(), ack.retry_after_ms), (1, pb::LogOutcome::Retry, 30_000), "{ack:?}");
    assert!(ack.error.contains("no log store"), "{ack:?}");
    drop(m);

    let root = h.dir.path().join("log-store");
    h.log_store = Some(varroa_blobs::StoreSettings::new(format!("file://{}", root.display())));
    h.gw.take().unwrap().shutdown().await;
    h.start_gateway().await;
    let mut notices = h.client.subscribe("varroa.logs.test.team-a.ci").await.unwrap();
    h.client.flush().await.unwrap();
    let mut m = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    // What a mite would never forward, checked again here (the mite runs in the tenant's pod).
    let big = vec![b'x'; varroa_blobs::logs::MAX_CHUNK_BYTES + 1];
    for (id, job, build, data, why) in [
        (2, "app", 1, &big[..], "at most 1048576"),
        (3, "", 1, &b"x"[..], "job: must not be empty"),
        (4, "a\u{7}b", 1, &b"x"[..], "control characters"),
        (5, "app", 0, &b"x"[..], "build: 0"),
        (6, "app", 1, &b""[..], "empty chunk"),
    ] {
        m.send_chunk(id, job, build, 0, data, false).await;
        let ack = m.next_log_ack().await;
        assert_eq!((ack.id, ack.outcome()), (id, pb::LogOutcome::Refused), "{ack:?}");
        assert!(ack.error.contains(why), "{id}: {ack:?}");
    }
    m.send_chunk(7, "team/app", 3, 0, b"hello\n", false).await;
    let ack = m.next_log_ack().await;
    assert_eq!((ack.id, ack.outcome(), ack.next, ack.complete), (7, pb::LogOutcome::Stored, 6, false), "{ack:?}");
    m.send_chunk(8, "team/app", 3, 9, b"gap", false).await;
    let ack = m.next_log_ack().await;
    assert_eq!((ack.outcome(), ack.next), (pb::LogOutcome::Conflict, 6), "{ack:?}");
    m.send_chunk(9, "team/app", 3, 6, b"", true).await;
    let ack = m.next_log_ack().await;
    assert_eq!((ack.outcome(), ack.next, ack.complete), (pb::LogOutcome::Stored, 6, true), "{ack:?}");
    let build = root.join("logs/test/team-a/ci/team%2Fapp/3");
    assert_eq!(std::fs::read(build.join("00000000000000000000")).unwrap(), b"hello\n");
    assert!(build.join("complete").is_file());

    // Each landed chunk is announced on core NATS.
    use futures::StreamExt;
    for want in [(6, false), (6, true)] {
        let msg = tokio::time::timeout(DEADLINE, notices.next()).await.unwrap().unwrap();
        let n: varroa_blobs::Notice = serde_json::from_slice(&msg.payload).unwrap();
        assert_eq!((n.job.as_str(), n.build, n.next, n.last), ("team/app", 3, want.0, want.1));
    }
    let text = h.metrics().await;
    assert_eq!(metric_value(&text, "varroa_gateway_log_chunks_total{outcome=\"refused\"}"), 5, "{text}");
    assert_eq!(metric_value(&text, "varroa_gateway_log_chunks_total{outcome=\"conflict\"}"), 1, "{text}");
    assert_eq!(metric_value(&text, "varroa_gateway_log_bytes_total"), 6, "{text}");
}

// Build claims: the ledger is played by a queue subscriber on varroa.claims.> (the real one is
// the recorder's), answering JSON LedgerAnswers after a delay of its own.

type LedgerBehaviour = dyn Fn(&varroa_link::claims::LedgerRequest) -> (Duration, Option<Vec<u8>>) + Send + Sync;

struct Ledger {
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, varroa_link::claims::LedgerRequest)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Ledger {
    /// Answers each request with what `behaviour` says (raw bytes: tests send garbage too).
    async fn start(
        client: &async_nats::Client,
        behaviour: impl Fn(&varroa_link::claims::LedgerRequest) -> (Duration, Option<Vec<u8>>) + Send + Sync + 'static,
    ) -> Ledger {
        use futures::StreamExt;
        let behaviour: std::sync::Arc<LedgerBehaviour> = std::sync::Arc::new(behaviour);
        let client = client.clone();
        let mut sub =
            client.queue_subscribe("varroa.claims.>", varroa_link::claims::QUEUE_GROUP.to_string()).await.unwrap();
        client.flush().await.unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let request: varroa_link::claims::LedgerRequest = serde_json::from_slice(&msg.payload).unwrap();
                let (delay, answer) = behaviour(&request);
                record.lock().unwrap().push((msg.subject.to_string(), request));
                let (Some(reply), Some(answer)) = (msg.reply, answer) else { continue };
                let client = client.clone();
                tokio::spawn(async move {
                    // The ledger's own slowness, not a wait of the test.
                    tokio::time::sleep(delay).await;
                    let _ = client.publish(reply, answer.into()).await;
                    let _ = client.flush().await;
                });
            }
        });
        Ledger { seen, task }
    }

    fn seen(&self) -> Vec<(String, varroa_link::claims::LedgerRequest)> {
        self.seen.lock().unwrap().clone()
    }
}

fn ledger_json(a: varroa_link::claims::LedgerAnswer) -> Option<Vec<u8>> {
    Some(serde_json::to_vec(&a).unwrap())
}

fn claim_request(id: u64, claim_id: &str, trigger: &str, budget_ms: u32) -> pb::ClaimRequest {
    pb::ClaimRequest { id, claim_id: claim_id.into(), job: "team-a/app".into(), trigger: trigger.into(), budget_ms }
}

impl TestMite {
    async fn send_claim(&self, claim: pb::ClaimRequest) {
        self.send(mite_message::Kind::ClaimRequest(claim)).await;
    }

    async fn next_claim_answer(&mut self) -> pb::ClaimAnswer {
        loop {
            match self.next().await {
                Some(gateway_message::Kind::ClaimAnswer(a)) => return a,
                Some(_) => continue,
                None => panic!("stream ended before a ClaimAnswer"),
            }
        }
    }

    /// Sends one claim and waits for its answer; how long it took.
    async fn ask(&mut self, claim: pb::ClaimRequest) -> (pb::ClaimAnswer, Duration) {
        let id = claim.id;
        let t = std::time::Instant::now();
        self.send_claim(claim).await;
        let a = self.next_claim_answer().await;
        assert_eq!(a.id, id, "the answer echoes the request's number");
        (a, t.elapsed())
    }
}

fn decision(a: &pb::ClaimAnswer) -> pb::ClaimDecision {
    pb::ClaimDecision::try_from(a.decision).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_checked_again_stamped_from_the_certificate_and_hello_and_the_ledgers_answers_become_decisions() {
    use varroa_link::claims::LedgerAnswer;
    let h = Harness::start().await;
    let ledger = Ledger::start(&h.client, |r| {
        let a = match r.trigger.as_str() {
            "t:grant" => LedgerAnswer::Granted { build: if r.namespace == "team-b" { 1 } else { 42 } },
            "t:refuse" => LedgerAnswer::Refused { holder: 3 },
            // Below the shortest retry: clamped.
            "t:retry" => LedgerAnswer::Retry { after_ms: 5, reason: "the ledger's database is away".into() },
            _ => LedgerAnswer::Rejected { error: "trigger: unknown to the ledger".into() },
        };
        (Duration::ZERO, ledger_json(a))
    })
    .await;
    let mut a = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 1)).await.unwrap();
    let mut b = h.dial(Some(&h.mite_cert("team-b", "ci")), hello("team-b", "ci", 0)).await.unwrap();

    let (ans, _) = a.ask(claim_request(1, "q-1", "t:grant", 4000)).await;
    assert_eq!((decision(&ans), ans.build), (pb::ClaimDecision::Granted, 42), "{ans:?}");
    let (ans, _) = b.ask(claim_request(1, "q-1", "t:grant", 4000)).await;
    assert_eq!((decision(&ans), ans.build), (pb::ClaimDecision::Granted, 1), "the other tenant's own sequence");
    let seen = ledger.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].0, "varroa.claims.test.team-a.ci");
    let r = &seen[0].1;
    assert_eq!((r.cluster.as_str(), r.namespace.as_str(), r.controller.as_str(), r.cell), ("test", "team-a", "ci", 1));
    assert_eq!((r.id.as_str(), r.job.as_str(), r.trigger.as_str()), ("q-1", "team-a/app", "t:grant"));
    assert!(r.budget_ms <= 3750 && r.budget_ms > 3500, "the gateway kept its share (250 ms) of 4000: {r:?}");
    assert_eq!(seen[1].0, "varroa.claims.test.team-b.ci");
    assert_eq!((seen[1].1.namespace.as_str(), seen[1].1.cell), ("team-b", 0));

    let (ans, _) = a.ask(claim_request(2, "q-2", "t:refuse", 4000)).await;
    assert_eq!((decision(&ans), ans.holder), (pb::ClaimDecision::Refused, 3), "{ans:?}");
    let (ans, _) = a.ask(claim_request(3, "q-3", "t:retry", 4000)).await;
    assert_eq!((decision(&ans), ans.retry_after_ms), (pb::ClaimDecision::Retry, 100), "{ans:?}");
    assert_eq!(ans.error, "the ledger's database is away");
    let (ans, _) = a.ask(claim_request(4, "q-4", "t:odd", 4000)).await;
    assert_eq!((decision(&ans), ans.error.as_str()), (pb::ClaimDecision::Rejected, "trigger: unknown to the ledger"));

    // What a mite would never forward is rejected here, naming the field, without asking.
    let asked = ledger.seen().len();
    for (claim, field) in [
        (claim_request(5, "x y", "t:grant", 4000), "id"),
        (pb::ClaimRequest { job: String::new(), ..claim_request(6, "q-6", "t:grant", 4000) }, "job"),
        (claim_request(7, "q-7", "t\u{7}", 4000), "trigger"),
        (claim_request(8, "q-8", "t:grant", 0), "budget_ms"),
        (claim_request(9, "q-9", "t:grant", 60_000), "budget_ms"),
    ] {
        let (ans, _) = a.ask(claim).await;
        assert_eq!(decision(&ans), pb::ClaimDecision::Rejected, "{field}: {ans:?}");
        assert!(ans.error.starts_with(&format!("{field}: ")), "{ans:?}");
    }
    assert_eq!(ledger.seen().len(), asked, "malformed claims never reach the ledger");

    let text = h.metrics().await;
    assert_eq!(metric_value(&text, "varroa_gateway_claims_total{decision=\"granted\"}"), 2);
    assert_eq!(metric_value(&text, "varroa_gateway_claims_total{decision=\"refused\"}"), 1);
    assert_eq!(metric_value(&text, "varroa_gateway_claims_total{decision=\"retry\"}"), 1);
    assert_eq!(metric_value(&text, "varroa_gateway_claims_total{decision=\"rejected\"}"), 6);
    assert_eq!(metric_value(&text, "varroa_gateway_claim_seconds_count"), 10);
    assert_eq!(metric_value(&text, "varroa_gateway_messages_total{kind=\"claim_request\"}"), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_the_ledger_does_not_decide_are_ledger_down_saying_why_within_the_budget() {
    use varroa_link::claims::LedgerAnswer;
    let mut h = Harness::start().await;
    let mut mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    h.wait_entry("team-a", "ci", 0, "connected", |e| e.connected).await;
    let down = |a: &pb::ClaimAnswer, why: &str| {
        assert_eq!(decision(a), pb::ClaimDecision::LedgerDown, "{a:?}");
        assert_eq!(a.retry_after_ms, 1000, "{a:?}");
        assert!(a.error.contains(why), "{why}: {a:?}");
    };

    // Nobody subscribed.
    let (ans, took) = mite.ask(claim_request(1, "q-1", "t:1", 4000)).await;
    down(&ans, "no responders");
    assert!(took < Duration::from_secs(2), "known at once: {took:?}");

    let _ledger = Ledger::start(&h.client, |r| match r.trigger.as_str() {
        "t:slow" => (Duration::from_secs(3), ledger_json(LedgerAnswer::Granted { build: 1 })),
        "t:garbage" => (Duration::ZERO, Some(b"{\"decision\": \"maybe\"}".to_vec())),
        "t:zero" => (Duration::ZERO, ledger_json(LedgerAnswer::Granted { build: 0 })),
        _ => (Duration::ZERO, ledger_json(LedgerAnswer::Granted { build: 8 })),
    })
    .await;
    // Slower than the gateway's share: answered LEDGER_DOWN within the budget.
    let (ans, took) = mite.ask(claim_request(2, "q-2", "t:slow", 1500)).await;
    down(&ans, "did not answer within");
    assert!(took < Duration::from_millis(1500), "within the budget the mite gave: {took:?}");
    let (ans, _) = mite.ask(claim_request(3, "q-3", "t:garbage", 4000)).await;
    down(&ans, "not a LedgerAnswer");
    let (ans, _) = mite.ask(claim_request(4, "q-4", "t:zero", 4000)).await;
    down(&ans, "granted build 0");
    // A budget with nothing left to hand on.
    let (ans, _) = mite.ask(claim_request(5, "q-5", "t:ok", 20)).await;
    down(&ans, "leaves nothing");
    let (ans, _) = mite.ask(claim_request(6, "q-6", "t:ok", 4000)).await;
    assert_eq!((decision(&ans), ans.build), (pb::ClaimDecision::Granted, 8), "the stream goes on: {ans:?}");

    // NATS away: said at once.
    h.nats.stop();
    let ready = h.gw.as_ref().unwrap().readiness.clone();
    eventually("the gateway sees NATS down", || {
        let ready = ready.clone();
        async move { (!ready.is_ready()).then_some(()) }
    })
    .await;
    let (ans, took) = mite.ask(claim_request(7, "q-7", "t:ok", 4000)).await;
    down(&ans, "NATS is not connected");
    assert!(took < Duration::from_secs(1), "{took:?}");

    let text = h.metrics().await;
    for (why, n) in [("no_responders", 1), ("timeout", 1), ("bad_reply", 2), ("budget", 1), ("nats_down", 1)] {
        assert_eq!(
            metric_value(&text, &format!("varroa_gateway_claims_ledger_down_total{{why=\"{why}\"}}")),
            n,
            "{why}"
        );
    }
    assert_eq!(metric_value(&text, "varroa_gateway_claims_total{decision=\"ledger_down\"}"), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_beyond_32_in_flight_on_a_stream_are_ledger_down_at_once() {
    use varroa_link::claims::LedgerAnswer;
    let h = Harness::start().await;
    let _ledger =
        Ledger::start(&h.client, |_| (Duration::from_secs(30), ledger_json(LedgerAnswer::Granted { build: 1 }))).await;
    let mut mite = h.dial(Some(&h.mite_cert("team-a", "ci")), hello("team-a", "ci", 0)).await.unwrap();
    for i in 1..=33 {
        mite.send_claim(claim_request(i, &format!("q-{i}"), "t:held", 3000)).await;
    }
    let first = mite.next_claim_answer().await;
    assert_eq!(
        (first.id, decision(&first), first.retry_after_ms),
        (33, pb::ClaimDecision::LedgerDown, 250),
        "{first:?}"
    );
    assert!(first.error.contains("32 claims"), "{first:?}");
    let mut rest: Vec<_> = Vec::new();
    for _ in 0..32 {
        rest.push(mite.next_claim_answer().await);
    }
    assert!(rest.iter().all(|a| decision(a) == pb::ClaimDecision::LedgerDown && a.error.contains("did not answer")));
    // The permits are back: a claim is asked again.
    mite.send_claim(claim_request(34, "q-34", "t:held", 200)).await;
    let again = mite.next_claim_answer().await;
    assert!(again.id == 34 && again.error.contains("did not answer"), "{again:?}");
    let text = h.metrics().await;
    assert_eq!(metric_value(&text, "varroa_gateway_claims_ledger_down_total{why=\"busy\"}"), 1);
}
