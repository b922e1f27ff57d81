//! `varroa logs` as a user runs it: the built binary, against a real log store (a directory, or
//! S3 on a real moto server). The store is written by varroa-blobs' LogWriter, the gateway's own
//! writer, or, for `-f`, by the whole real path: a real nats-server, the real gateway (in
//! process, mutual TLS from varroa-pki), the real mite, and reqwest playing the Jenkins plugin.

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use common::run_command;
use varroa_blobs::logs::{LogKey, LogWriter, Logs};
use varroa_blobs::store::{BlobStore, StoreSettings};
use varroa_blobs::testing::MotoServer;

const DAY: Duration = Duration::from_secs(86_400);

fn varroa(store: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(common::bin());
    cmd.args(args)
        .env("VARROA_LOG_STORE", store)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("VARROA_NATS_URL")
        .env_remove("VARROA_LOG_STORE_CREDENTIALS_FILE")
        .env_remove("HOME");
    cmd
}

async fn write(store: &StoreSettings, cluster: &str, job: &str, build: u64, chunks: &[&[u8]], complete: bool) {
    let writer = LogWriter::new(Logs::new(BlobStore::open(store).unwrap()));
    let key = LogKey::new(cluster, "team-a", "ci", job, build).unwrap();
    let mut offset = 0;
    for (i, c) in chunks.iter().enumerate() {
        let last = complete && i + 1 == chunks.len();
        writer.write_chunk(&key, offset, Bytes::copy_from_slice(c), last).await.unwrap();
        offset += c.len() as u64;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_prints_the_complete_log_and_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("logs").display());
    let store = StoreSettings::new(&url);
    let big: Vec<u8> = (0..40_000).flat_map(|i| format!("line {i}: \u{1b}[32mok\u{1b}[0m\n").into_bytes()).collect();
    let (a, b) = big.split_at(700_000);
    write(&store, "eu", "team/app", 7, &[a, b, b"Finished: SUCCESS\n"], true).await;

    let r = run_command(varroa(&url, &["logs", "ci", "team/app", "#7", "-n", "team-a"])).await.expect(0);
    let mut want = big.clone();
    want.extend_from_slice(b"Finished: SUCCESS\n");
    assert_eq!(r.stdout.len(), want.len());
    assert!(r.stdout.as_bytes() == want.as_slice(), "the bytes as written, in order");
    assert_eq!(r.stderr, "");

    // A build that runs: what is there, and a note.
    write(&store, "eu", "team/app", 8, &[b"Started\n"], false).await;
    let r = run_command(varroa(&url, &["logs", "ci", "team/app", "8", "-n", "team-a"])).await.expect(0);
    assert_eq!(r.stdout, "Started\n");
    assert!(r.stderr.contains("not complete yet") && r.stderr.contains("-f"), "{}", r.stderr);

    // No log: the controller, the job and the number are named.
    let r = run_command(varroa(&url, &["logs", "ci", "team/app", "9", "-n", "team-a"])).await.expect(1);
    assert!(
        r.stderr.starts_with("error: no log of build team/app #9 of controller team-a/ci in file://"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("varroa builds ci -n team-a --job team/app"), "{}", r.stderr);
    let r = run_command(varroa(&url, &["logs", "ci", "team/app", "7", "-n", "team-b"])).await.expect(1);
    assert!(r.stderr.contains("team/app #7 of controller team-b/ci"), "{}", r.stderr);

    // The same build in two clusters: --cluster picks.
    write(&store, "us", "team/app", 7, &[b"from us\n"], true).await;
    let r = run_command(varroa(&url, &["logs", "ci", "team/app", "7", "-n", "team-a"])).await.expect(1);
    assert!(r.stderr.contains("several clusters (eu, us): pick one with --cluster"), "{}", r.stderr);
    let r =
        run_command(varroa(&url, &["logs", "ci", "team/app", "7", "-n", "team-a", "--cluster", "us"])).await.expect(0);
    assert_eq!(r.stdout, "from us\n");
    let r =
        run_command(varroa(&url, &["logs", "ci", "team/app", "7", "-n", "team-a", "--cluster", "ap"])).await.expect(1);
    assert!(r.stderr.contains("in cluster ap"), "{}", r.stderr);

    // Names and flags checked before anything is read.
    let r = run_command(varroa(&url, &["logs", "CI", "team/app", "7", "-n", "team-a"])).await.expect(1);
    assert!(r.stderr.contains("invalid controller name \"CI\""), "{}", r.stderr);
    let r = run_command(varroa(&url, &["logs", "ci", "team//app", "7", "-n", "team-a"])).await.expect(1);
    assert!(r.stderr.contains("invalid job name"), "{}", r.stderr);
    let r = run_command(varroa("s3://x", &["logs", "ci", "app", "7", "-n", "team-a"])).await.expect(1);
    assert!(r.stderr.contains("--log-store: invalid store URL \"s3://x\""), "{}", r.stderr);
    let mut no_store = varroa(&url, &["logs", "ci", "app", "7", "-n", "team-a"]);
    no_store.env_remove("VARROA_LOG_STORE");
    let r = run_command(no_store).await.expect(1);
    assert!(r.stderr.contains("no log store to read: set --log-store or VARROA_LOG_STORE"), "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_reads_s3_with_a_credentials_file() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = MotoServer::start().unwrap();
    moto.create_bucket("varroa-logs").unwrap();
    let store = moto.settings(&moto.endpoint(), "varroa-logs", "prod");
    write(&store, "eu", "team/app", 3, &[b"one\n", b"two\n"], true).await;
    let creds = store.credentials_file.clone().unwrap();
    let mut cmd = varroa(&store.url, &["logs", "ci", "team/app", "3", "-n", "team-a"]);
    cmd.env("VARROA_LOG_STORE_CREDENTIALS_FILE", &creds);
    let r = run_command(cmd).await.expect(0);
    assert_eq!(r.stdout, "one\ntwo\n");
}

/// The whole path, for `-f`.
struct Path {
    _nats: varroa_link::testing::NatsServer,
    nats_url: String,
    dir: tempfile::TempDir,
    gw: Option<varroa_gateway::RunningGateway>,
    mite: Option<varroa_mite::link::MiteHandle>,
    plugin: SocketAddr,
    token: String,
    store: String,
}

impl Path {
    async fn start() -> Path {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let ca = varroa_pki::CertificateAuthority::generate("varroa test gateway CA", DAY).unwrap();
        let server = ca.issue_server(&["localhost".into()], DAY, SystemTime::now()).unwrap();
        let file = |name: &str, text: &str| -> PathBuf {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let tls = varroa_gateway::TlsFiles {
            cert: file("gw.crt", &server.cert_pem),
            key: file("gw.key", &server.key_pem),
            ca: file("ca.crt", ca.cert_pem()),
        };
        let mite_cert = ca.issue_mite(&varroa_pki::MiteIdentity::new("team-a", "ci"), DAY, SystemTime::now()).unwrap();
        let nats = varroa_link::testing::NatsServer::start().unwrap();
        let store = format!("file://{}", dir.path().join("log-store").display());
        let settings = |name: &str| varroa_link::nats::ConnectSettings {
            url: nats.url(),
            credentials_file: None,
            name: name.into(),
            max_reconnect_delay: Duration::from_millis(250),
        };
        let gw = varroa_gateway::start_with(
            varroa_gateway::GatewayConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                health_listen: "127.0.0.1:0".parse().unwrap(),
                tls,
                nats: settings("varroa-gateway/test"),
                bucket_replicas: 1,
                options: varroa_gateway::GatewayOptions {
                    replica: "gw-0".into(),
                    heartbeat_interval: Duration::from_secs(1),
                    hello_timeout: Duration::from_secs(5),
                    cluster: "eu".into(),
                    max_streams: 10,
                },
            },
            Some(StoreSettings::new(&store)),
        )
        .await
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !gw.readiness.is_ready() {
            assert!(Instant::now() < deadline, "the gateway is not ready");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let run = varroa_mite::settings::RunSettings {
            namespace: "team-a".into(),
            controller: "ci".into(),
            cell: 0,
            gateway_url: format!("https://{}", gw.grpc_addr),
            gateway_server_name: Some("localhost".into()),
            tls_cert: file("mite.crt", &mite_cert.cert_pem),
            tls_key: file("mite.key", &mite_cert.key_pem),
            tls_ca: dir.path().join("ca.crt"),
            // No Jenkins at all: the mite keeps its stream and says so.
            jenkins_url: "http://127.0.0.1:9".into(),
            jenkins_user: "admin".into(),
            jenkins_token_file: file("jenkins-token", "x\n"),
            jenkins_timeout: Duration::from_millis(200),
            casc_dir: dir.path().join("casc"),
            observe_interval: Duration::from_secs(1),
            drift_interval: Duration::from_secs(300),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(800),
            health_listen: None,
            plugin_listen: Some("127.0.0.1:0".parse().unwrap()),
            plugin_token_file: dir.path().join("plugin/token"),
        };
        let token_file = run.plugin_token_file.clone();
        let mite = varroa_mite::link::start(run).await.unwrap();
        while !mite.status().connected {
            assert!(Instant::now() < deadline, "the mite's stream is not up");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Path {
            nats_url: nats.url(),
            _nats: nats,
            plugin: mite.plugin_addr.unwrap(),
            token: std::fs::read_to_string(token_file).unwrap(),
            dir,
            gw: Some(gw),
            mite: Some(mite),
            store,
        }
    }

    /// A chunk as the plugin sends it; the answer's status once the mite answered (the ack).
    async fn post(&self, offset: usize, data: &[u8], last: bool) -> u16 {
        let fin = if last { "&final=true" } else { "" };
        reqwest::Client::new()
            .post(format!("http://{}/v1/logs/team/app/5?offset={offset}{fin}", self.plugin))
            .header("authorization", format!("Bearer {}", self.token))
            .body(data.to_vec())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    async fn stop(mut self) {
        if let Some(m) = self.mite.take() {
            m.shutdown().await;
        }
        if let Some(g) = self.gw.take() {
            g.shutdown().await;
        }
        drop(self.dir);
    }
}

/// Reads stdout until `want` bytes were seen: when the last of them arrived, and the text.
async fn read_until(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    seen: &mut Vec<u8>,
    want: usize,
) -> (Instant, String) {
    let mut at = Instant::now();
    while seen.len() < want {
        let (t, b) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.unwrap().unwrap();
        seen.extend_from_slice(&b);
        at = t;
    }
    (at, String::from_utf8(seen.clone()).unwrap())
}

/// `varroa logs -f` on a running build: each chunk the plugin gets acknowledged shows on the
/// command's stdout within a second; the command ends after the final chunk.
async fn follow_a_running_build(nats: bool) {
    let p = Path::start().await;
    assert_eq!(p.post(0, b"Started by user alice\n", false).await, 200);
    let mut args = vec!["logs", "ci", "team/app", "5", "-n", "team-a", "-f"];
    if nats {
        args.extend(["--nats-url", p.nats_url.as_str()]);
    }
    let mut child = varroa(&p.store, &args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // stdout, read on a thread, timestamped.
    let mut stdout = child.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let (_, text) = read_until(&mut rx, &mut seen, 22).await;
    assert_eq!(text, "Started by user alice\n", "what was there already");
    let mut lag = Vec::new();
    let mut log = text.clone();
    for i in 1..=4 {
        // Let the follower settle into its wait (a poll, or a notice), then append.
        tokio::time::sleep(Duration::from_millis(300 + 100 * i)).await;
        let line = format!("[Pipeline] step {i}\n");
        let last = i == 4;
        let status = p.post(log.len(), line.as_bytes(), last).await;
        let acked = Instant::now();
        assert_eq!(status, 200);
        log.push_str(&line);
        let (at, text) = read_until(&mut rx, &mut seen, log.len()).await;
        assert_eq!(text, log);
        lag.push(at.saturating_duration_since(acked));
    }
    // With NATS the notice wakes the reader at once; polling every second may take a second and a
    // listing.
    let bound = if nats { Duration::from_secs(1) } else { Duration::from_millis(1500) };
    assert!(lag.iter().all(|l| *l < bound), "appended bytes within {bound:?} of their ack: {lag:?}");
    // The final chunk ends the command.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "varroa logs -f did not end after the final chunk");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(stderr, "");
    eprintln!("varroa logs -f (nats: {nats}): ack-to-stdout lag {lag:?}");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_with_nats_prints_appended_bytes_within_a_second_and_ends_with_the_build() {
    follow_a_running_build(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_without_nats_polls_and_prints_appended_bytes_within_a_second() {
    follow_a_running_build(false).await;
}
