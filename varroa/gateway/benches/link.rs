//! The control link benchmark (`cargo bench -p varroa-gateway --bench link`): issue 12's
//! "1,000 mites on one gateway replica", in one run.
//!
//! The gateway is the release binary as its own process (`CARGO_BIN_EXE_varroa-gateway`), NATS is
//! a real `nats-server` with JetStream (`varroa_link::testing::NatsServer`), and the mites are
//! played by a light client in this process: one TLS connection and one stream per mite, each
//! Controller with its own client certificate from one CA, a Hello, a Heartbeat at the Welcome's
//! interval (first beats spread evenly over one interval, as independent pods would be), and an
//! ApplyResult (succeeded) for every Desired at once. No Jenkins: what is measured is the link.
//!
//! Measured, in this order:
//! 1. the gateway's RSS when ready with no stream, and with N streams (each cell connected and its
//!    first Desired applied), per stream; its CPU (utime + stime from /proc) and nats-server's over
//!    a steady period of heartbeats only, with the gateway's `--heartbeat-seconds`;
//! 2. a bundle change: N `varroa_desired` entries written at once (what the operator does when a
//!    bundle shared by all controllers changes) until a watcher of `varroa_mites` has seen N
//!    apply results with the new digest;
//! 3. the latency of one message: a mite sends an Observation, until a watcher of `varroa_mites`
//!    sees the entry change (round robin over the mites, each cell's previous write at least
//!    250 ms old so the gateway's 200 ms write coalescing is not what is measured; a heartbeat
//!    write of the cell just before a sample still delays it, about 200 ms / interval of them).
//!
//! The floors run last, after the mites are gone and the gateway has exited, on the same NATS
//! server, in buckets of their own with the same settings: the same N puts of the same desired
//! entries seen by a watcher; a KV put of a real `varroa_mites` entry (bytes as the gateway wrote
//! them) seen by a watcher; a core NATS publish of the same bytes seen by a subscriber. Writers
//! and watchers use two NATS connections, as the gateway and the operator would.
//!
//! Environment: `VARROA_BENCH_MITES` (N, default 1000), `VARROA_BENCH_HEARTBEAT_SECONDS` (default
//! 10, the gateway's default), `VARROA_BENCH_STEADY_SECONDS` (default 60), `VARROA_BENCH_SAMPLES`
//! (latency samples, default 300). nats-server is found as the tests find it (`make deps`).
//! Prints a Markdown table for docs/benchmarks.md.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use async_nats::jetstream::{self, kv::Store};
use futures::{StreamExt, TryStreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use varroa_link::kv::{self, ControllerKey, DesiredEntry, MiteEntry};
use varroa_link::nats::ConnectSettings;
use varroa_link::proto::v1::{
    self as pb, GatewayMessage, MiteMessage, gateway_message, mite_link_client::MiteLinkClient, mite_message,
};
use varroa_link::testing::NatsServer;
use varroa_pki::{CertificateAuthority, IssuedCert, MiteIdentity};

/// The namespace of every benchmark Controller (`c-<i>`, one cell each).
const NS: &str = "bench";
/// Mites dialling at once (the gateway accepts at most 256 handshakes at once).
const DIAL_CONCURRENCY: usize = 32;
/// The longest any phase may take.
const TIMEOUT: Duration = Duration::from_secs(600);
/// How long one latency sample may take.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(10);
/// The gap kept between two writes of one cell in the latency phase: above the gateway's
/// coalescing interval (`MIN_WRITE_INTERVAL`, 200 ms).
const CELL_GAP: Duration = Duration::from_millis(250);
const DAY: Duration = Duration::from_secs(86_400);
const FIRST: &str = "sha256:bench-first";
const CHANGED: &str = "sha256:bench-changed";

/// A positive integer from the environment, or `default`.
fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => n,
            _ => panic!("{name}={v:?} is not a positive integer; fix: set it to e.g. {default}, or unset it"),
        },
    }
}

/// What the mites did, counted across all of them.
#[derive(Default)]
struct Stats {
    heartbeats: AtomicU64,
    desired: AtomicU64,
    /// Streams that ended while the benchmark ran (there should be none).
    lost: AtomicU64,
    /// When the last Desired with [`CHANGED`] arrived at a mite.
    last_changed: Mutex<Option<Instant>>,
}

/// One mite: its outbound queue (the bench sends Observations through it) and its task.
struct Mite {
    tx: mpsc::Sender<MiteMessage>,
    task: tokio::task::JoinHandle<()>,
}

fn msg(kind: mite_message::Kind) -> MiteMessage {
    MiteMessage { kind: Some(kind) }
}

fn unix_ms() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Dials the gateway as mite `i` and runs it: heartbeats from `first_beat` after the Welcome, an
/// ApplyResult for each Desired.
async fn dial(
    i: usize,
    grpc: SocketAddr,
    ca_pem: &str,
    cert: &IssuedCert,
    first_beat: f64,
    stats: Arc<Stats>,
) -> Result<Mite, String> {
    let mut address = varroa_link::client::GatewayAddress::new(format!("https://{grpc}"));
    address.server_name = Some("localhost".into());
    address.connect_timeout = Duration::from_secs(60);
    let channel = varroa_link::client::channel(&address, ca_pem, &cert.cert_pem, &cert.key_pem)
        .await
        .map_err(|e| format!("mite {i}: {e}"))?;
    let (tx, mut out) = mpsc::channel::<MiteMessage>(64);
    let hello = pb::Hello {
        identity: MiteIdentity::new(NS, format!("c-{i}")).uri(),
        cell: 0,
        jenkins_version: "2.479.1".into(),
        plugin_digest: "sha256:plugins".into(),
        mite_version: "bench".into(),
    };
    tx.send(msg(mite_message::Kind::Hello(hello))).await.map_err(|e| e.to_string())?;
    let outbound = futures::stream::poll_fn(move |cx| out.poll_recv(cx));
    let mut inbound = MiteLinkClient::new(channel)
        .max_decoding_message_size(varroa_link::MAX_MESSAGE_BYTES)
        .connect(outbound)
        .await
        .map_err(|s| format!("mite {i}: {:?}: {}", s.code(), s.message()))?
        .into_inner();
    let interval = match inbound.message().await {
        Ok(Some(GatewayMessage { kind: Some(gateway_message::Kind::Welcome(w)) })) => {
            Duration::from_secs(u64::from(w.heartbeat_interval_seconds.max(1)))
        }
        other => return Err(format!("mite {i}: expected a Welcome, got {other:?}")),
    };
    let own = tx.clone();
    let task = tokio::spawn(async move {
        let start = tokio::time::Instant::now() + interval.mul_f64(first_beat);
        let mut beats = tokio::time::interval_at(start, interval);
        beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                m = inbound.message() => match m {
                    Ok(Some(GatewayMessage { kind: Some(gateway_message::Kind::Desired(d)) })) => {
                        stats.desired.fetch_add(1, Ordering::Relaxed);
                        if d.digest == CHANGED {
                            let now = Instant::now();
                            let mut last = stats.last_changed.lock().unwrap_or_else(|p| p.into_inner());
                            *last = Some(last.map_or(now, |l| l.max(now)));
                        }
                        let result = pb::ApplyResult {
                            digest: d.digest,
                            succeeded: true,
                            finished_at_unix_ms: unix_ms(),
                            ..Default::default()
                        };
                        if own.send(msg(mite_message::Kind::ApplyResult(result))).await.is_err() {
                            return;
                        }
                    }
                    Ok(Some(GatewayMessage { kind: Some(gateway_message::Kind::Error(e)) })) => {
                        eprintln!("mite {i}: the gateway ended the stream: {} {}", e.code, e.message);
                        stats.lost.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => {
                        stats.lost.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                },
                _ = beats.tick() => {
                    let beat = pb::Heartbeat { sent_at_unix_ms: unix_ms() };
                    if own.send(msg(mite_message::Kind::Heartbeat(beat))).await.is_err() {
                        return;
                    }
                    stats.heartbeats.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    Ok(Mite { tx, task })
}

/// The gateway binary as a child process, killed on drop.
struct Gateway {
    child: Child,
    health: SocketAddr,
}

impl Gateway {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn get(&self, path: &str) -> std::io::Result<String> {
        let mut s = tokio::net::TcpStream::connect(self.health).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    }

    /// The value of an unlabelled metric, e.g. `varroa_gateway_streams`.
    async fn metric(&self, name: &str) -> Option<f64> {
        let body = self.get("/metrics").await.ok()?;
        body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// SIGTERM and wait for the exit.
    async fn terminate(mut self) {
        // SAFETY: kill(2) on the pid of a child we own and have not reaped yet.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().ok().flatten().is_none() {
            assert!(Instant::now() < deadline, "the gateway did not exit within 30 s of SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port")
}

/// Resident memory of `pid` in MiB (VmRSS).
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// CPU time (user + system) `pid` has used, from /proc/<pid>/stat.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // The command name is in parentheses and may hold spaces: fields are counted after it.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5); the state (field 3) is fields[0].
    let ticks: u64 = fields.get(11..13).into_iter().flatten().filter_map(|f| f.parse::<u64>().ok()).sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64(ticks as f64 / hz)
}

/// Writes made to a bucket so far (the last sequence of its stream).
async fn bucket_writes(js: &jetstream::Context, bucket: &str) -> u64 {
    js.get_stream(format!("KV_{bucket}")).await.expect("the bucket's stream").cached_info().state.last_sequence
}

fn desired(digest: &str, i: usize) -> DesiredEntry {
    DesiredEntry {
        digest: digest.into(),
        files: BTreeMap::from([(
            "jenkins.yaml".to_string(),
            format!(
                "# {digest}\njenkins:\n  systemMessage: \"Controller c-{i}, bundle {digest}\"\n  numExecutors: 0\n"
            ),
        )]),
        cells: Some(1),
    }
}

fn controller_key(i: usize) -> String {
    ControllerKey::new(NS, &format!("c-{i}")).expect("a valid key").to_string()
}

fn mite_key(i: usize) -> String {
    ControllerKey::new(NS, &format!("c-{i}")).expect("a valid key").cell(0).to_string()
}

/// Puts every `(key, value)` at once (all in flight together).
async fn put_all(store: &Store, entries: &[(String, bytes::Bytes)]) {
    futures::future::try_join_all(entries.iter().map(|(k, v)| store.put(k, v.clone())))
        .await
        .expect("the puts succeed");
}

/// Reads `watch` until `n` distinct keys have had an update satisfying `done`; returns when the
/// last one was seen.
async fn until_keys(
    watch: &mut async_nats::jetstream::kv::Watch,
    n: usize,
    what: &str,
    done: impl Fn(&str, &[u8]) -> bool,
) -> Instant {
    let mut seen = HashSet::new();
    let wait = async {
        while let Some(e) = watch.try_next().await.expect("watching") {
            if done(&e.key, &e.value) {
                seen.insert(e.key);
                if seen.len() >= n {
                    return;
                }
            }
        }
        panic!("the watch ended");
    };
    if tokio::time::timeout(TIMEOUT, wait).await.is_err() {
        panic!("timed out after {TIMEOUT:?} waiting until {what} ({} of {n})", seen.len());
    }
    Instant::now()
}

fn mite_entry(key: &str, value: &[u8]) -> Option<MiteEntry> {
    kv::decode_mite(key, value).ok()
}

/// Median and 95th percentile of `samples`.
fn median_p95(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

fn ms(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.2} ms", d.as_secs_f64() * 1000.0)
    } else if d < Duration::from_secs(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let n = env_number("VARROA_BENCH_MITES", 1000) as usize;
    let heartbeat = env_number("VARROA_BENCH_HEARTBEAT_SECONDS", 10);
    let steady = Duration::from_secs(env_number("VARROA_BENCH_STEADY_SECONDS", 60));
    let samples = env_number("VARROA_BENCH_SAMPLES", 300) as usize;
    let load_at_start = load_average();
    eprintln!("link bench: {n} mites, --heartbeat-seconds {heartbeat}, steady {steady:?}, {samples} samples");

    // NATS, and two connections: one writes (as the operator does), one watches.
    let nats = NatsServer::start().expect("nats-server starts (run `make deps` for one)");
    let settings = |name: &str| ConnectSettings {
        url: nats.url(),
        credentials_file: None,
        name: name.into(),
        max_reconnect_delay: Duration::from_millis(250),
    };
    let writer = varroa_link::nats::connect(&settings("bench-writer")).await.expect("NATS connection");
    let watcher = varroa_link::nats::connect(&settings("bench-watcher")).await.expect("NATS connection");
    let wjs = jetstream::new(writer.clone());
    let rjs = jetstream::new(watcher.clone());
    let desired_w = kv::open_desired(&wjs, 1).await.expect("varroa_desired");
    let mites_w = kv::open_mites(&wjs, 1).await.expect("varroa_mites");
    let mites_r = kv::open_mites(&rjs, 1).await.expect("varroa_mites");

    // One CA, the gateway's server certificate, one client certificate per Controller.
    let dir = tempfile::tempdir().expect("a temp dir");
    let ca = CertificateAuthority::generate("varroa bench gateway CA", DAY).expect("a CA");
    let server = ca.issue_server(&["localhost".into()], DAY, SystemTime::now()).expect("a server certificate");
    let (cert, key, ca_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"), dir.path().join("ca.crt"));
    std::fs::write(&cert, &server.cert_pem).expect("write");
    std::fs::write(&key, &server.key_pem).expect("write");
    std::fs::write(&ca_file, ca.cert_pem()).expect("write");
    let t = Instant::now();
    let certs: Vec<IssuedCert> = (0..n)
        .map(|i| ca.issue_mite(&MiteIdentity::new(NS, format!("c-{i}")), DAY, SystemTime::now()).expect("a mite cert"))
        .collect();
    eprintln!("{n} client certificates issued in {}", ms(t.elapsed()));

    // The gateway binary.
    let (grpc, health) = (free_addr(), free_addr());
    let child = Command::new(env!("CARGO_BIN_EXE_varroa-gateway"))
        .arg("--listen")
        .arg(grpc.to_string())
        .arg("--health-listen")
        .arg(health.to_string())
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .arg("--tls-ca")
        .arg(&ca_file)
        .args(["--nats-url", &nats.url(), "--replica", "gw-bench-0"])
        .args(["--heartbeat-seconds", &heartbeat.to_string()])
        .args(["--max-streams", &(n + 100).to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the gateway starts");
    let gw = Gateway { child, health };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = gw.get("/readyz").await
            && r.starts_with("HTTP/1.1 200")
        {
            break;
        }
        assert!(Instant::now() < deadline, "the gateway was not ready within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = rss_mib(gw.pid());

    // Phase 1: every controller has a desired entry, then N mites connect and apply it.
    let first: Vec<(String, bytes::Bytes)> =
        (0..n).map(|i| (controller_key(i), kv::encode(&desired(FIRST, i)))).collect();
    put_all(&desired_w, &first).await;
    let mut watch = mites_r.watch_all().await.expect("a watch of varroa_mites");
    let stats = Arc::new(Stats::default());
    let t = Instant::now();
    let ca_pem = ca.cert_pem().to_owned();
    let mites: Vec<Mite> = futures::stream::iter(certs.iter().enumerate())
        .map(|(i, c)| dial(i, grpc, &ca_pem, c, i as f64 / n as f64, stats.clone()))
        .buffered(DIAL_CONCURRENCY)
        .try_collect()
        .await
        .expect("every mite connects");
    let dialled = t.elapsed();
    until_keys(&mut watch, n, "every mite is connected and has applied the first bundle", |k, v| {
        mite_entry(k, v).is_some_and(|e| {
            e.connected && e.last_apply_result.as_ref().is_some_and(|r| r.digest == FIRST && r.succeeded)
        })
    })
    .await;
    let connected = t.elapsed();
    drop(watch);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let streams = gw.metric("varroa_gateway_streams").await.unwrap_or(-1.0);
    assert_eq!(streams as usize, n, "the gateway holds one stream per mite");
    let rss_streams = rss_mib(gw.pid());
    eprintln!("phase 1: {n} mites dialled in {}, all applied in {}", ms(dialled), ms(connected));

    // The steady period: heartbeats only.
    let nats_pid = nats.pid().expect("nats-server runs");
    let (gw_cpu0, nats_cpu0) = (cpu_time(gw.pid()), cpu_time(nats_pid));
    let beats0 = stats.heartbeats.load(Ordering::Relaxed);
    let writes0 = bucket_writes(&rjs, kv::MITES_BUCKET).await;
    let t = Instant::now();
    tokio::time::sleep(steady).await;
    let period = t.elapsed();
    let gw_cpu = cpu_time(gw.pid()) - gw_cpu0;
    let nats_cpu = cpu_time(nats_pid) - nats_cpu0;
    let beats = stats.heartbeats.load(Ordering::Relaxed) - beats0;
    let steady_writes = bucket_writes(&rjs, kv::MITES_BUCKET).await - writes0;
    let rss_steady = rss_mib(gw.pid());
    eprintln!("steady: {beats} heartbeats, {steady_writes} writes in {}", ms(period));

    // Phase 2: the bundle shared by all changes.
    let changed: Vec<(String, bytes::Bytes)> =
        (0..n).map(|i| (controller_key(i), kv::encode(&desired(CHANGED, i)))).collect();
    let mut watch = mites_r.watch_all().await.expect("a watch of varroa_mites");
    let writes0 = bucket_writes(&rjs, kv::MITES_BUCKET).await;
    let t = Instant::now();
    let (puts_done, applied) = tokio::join!(
        async {
            put_all(&desired_w, &changed).await;
            t.elapsed()
        },
        until_keys(&mut watch, n, "every mite reports the changed bundle applied", |k, v| {
            mite_entry(k, v).and_then(|e| e.last_apply_result).is_some_and(|r| r.digest == CHANGED && r.succeeded)
        }),
    );
    let applied = applied.duration_since(t);
    let pushed = stats
        .last_changed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .map(|l| l.duration_since(t))
        .expect("the mites received the changed bundle");
    drop(watch);
    let change_writes = bucket_writes(&rjs, kv::MITES_BUCKET).await - writes0;
    eprintln!("phase 2: puts {}, pushed {}, applied {}", ms(puts_done), ms(pushed), ms(applied));

    // Phase 3: one Observation until a watcher sees it, round robin over the mites.
    let mut watch = mites_r.watch_all().await.expect("a watch of varroa_mites");
    let mut last_use: Vec<Option<Instant>> = vec![None; n];
    let mut through_gateway = Vec::with_capacity(samples);
    for s in 0..samples {
        let i = s % n;
        if let Some(at) = last_use[i] {
            tokio::time::sleep_until((at + CELL_GAP).into()).await;
        }
        let queue = 1_000_000 + s as u32;
        let key = mite_key(i);
        let observation = pb::Observation { queue_length: Some(queue), ..Default::default() };
        let t = Instant::now();
        mites[i].tx.send(msg(mite_message::Kind::Observation(observation))).await.expect("the mite's stream is open");
        let wait = async {
            while let Some(e) = watch.try_next().await.expect("watching") {
                if e.key == key
                    && mite_entry(&e.key, &e.value).is_some_and(|m| m.observation.queue_length == Some(queue))
                {
                    return;
                }
            }
            panic!("the watch ended");
        };
        tokio::time::timeout(SAMPLE_TIMEOUT, wait).await.expect("the observation reached the watcher");
        through_gateway.push(t.elapsed());
        last_use[i] = Some(Instant::now());
    }
    drop(watch);
    // A real entry, as the gateway wrote it: the floors' payload.
    let payload = mites_w.get(mite_key(0)).await.expect("reading varroa_mites").expect("mite 0's entry");
    let lost = stats.lost.load(Ordering::Relaxed);
    let desired_received = stats.desired.load(Ordering::Relaxed);

    // The mites go, then the gateway.
    for m in &mites {
        m.task.abort();
    }
    drop(mites);
    gw.terminate().await;

    // Floor of phase 2: the same N puts, a watcher seeing N updates.
    let floor_bucket = |bucket: &'static str, name: &str| {
        let mut config = kv::bucket_config(bucket, 1);
        config.bucket = name.into();
        config
    };
    let floor_desired_w =
        wjs.create_key_value(floor_bucket(kv::DESIRED_BUCKET, "bench_floor_desired")).await.expect("a floor bucket");
    let floor_desired_r = rjs.get_key_value("bench_floor_desired").await.expect("the floor bucket");
    let mut watch = floor_desired_r.watch_all().await.expect("a watch");
    let t = Instant::now();
    let (floor_puts, floor_seen) = tokio::join!(
        async {
            put_all(&floor_desired_w, &changed).await;
            t.elapsed()
        },
        until_keys(&mut watch, n, "the floor watcher sees every put", |_, _| true),
    );
    let floor_seen = floor_seen.duration_since(t);
    drop(watch);

    // Floors of phase 3: a KV put of the same bytes seen by a watcher; a core NATS publish.
    let floor_mites_w =
        wjs.create_key_value(floor_bucket(kv::MITES_BUCKET, "bench_floor_mites")).await.expect("a floor bucket");
    let floor_mites_r = rjs.get_key_value("bench_floor_mites").await.expect("the floor bucket");
    let mut watch = floor_mites_r.watch_all().await.expect("a watch");
    let mut kv_floor = Vec::with_capacity(samples);
    for s in 0..samples {
        let key = mite_key(s % n);
        // Nothing else writes this bucket: the watch's next entry is this put.
        let t = Instant::now();
        let (put, seen) = tokio::join!(floor_mites_w.put(&key, payload.clone()), async {
            let e = tokio::time::timeout(SAMPLE_TIMEOUT, watch.try_next()).await;
            (Instant::now(), e.expect("the put reached the watcher").expect("watching").expect("an entry"))
        });
        let rev = put.expect("a put");
        assert_eq!(seen.1.revision, rev, "the watcher saw this put");
        kv_floor.push(seen.0.duration_since(t));
    }
    drop(watch);
    let mut sub = watcher.subscribe("bench.floor.latency").await.expect("a subscription");
    watcher.flush().await.expect("flush");
    let mut pub_floor = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        writer.publish("bench.floor.latency", payload.clone()).await.expect("a publish");
        tokio::time::timeout(SAMPLE_TIMEOUT, sub.next()).await.expect("the message arrived").expect("subscribed");
        pub_floor.push(t.elapsed());
    }

    let (gw_med, gw_p95) = median_p95(through_gateway);
    let (kv_med, kv_p95) = median_p95(kv_floor);
    let (pub_med, pub_p95) = median_p95(pub_floor);
    let per_stream_kib = (rss_streams - rss_idle) * 1024.0 / n as f64;
    let secs = period.as_secs_f64();
    let rows: Vec<(String, String, String)> = vec![
        (
            format!(
                "{n} mites dial (TLS + Hello, {DIAL_CONCURRENCY} at once) to all connected with the first bundle applied"
            ),
            format!("{} (dialled in {})", ms(connected), ms(dialled)),
            "-".into(),
        ),
        (
            format!("gateway RSS: ready, no stream; with {n} streams (per stream)"),
            format!("{rss_idle:.1} MiB; {rss_streams:.1} MiB ({per_stream_kib:.1} KiB)"),
            "-".into(),
        ),
        (
            format!(
                "gateway CPU over {secs:.0} s of heartbeats (`--heartbeat-seconds {heartbeat}`: {beats} heartbeats, {steady_writes} varroa_mites writes)"
            ),
            format!(
                "{:.2} s ({:.1}% of one core; {:.0} µs per heartbeat)",
                gw_cpu.as_secs_f64(),
                gw_cpu.as_secs_f64() / secs * 100.0,
                gw_cpu.as_secs_f64() * 1e6 / beats.max(1) as f64
            ),
            format!("nats-server: {:.2} s ({:.1}%)", nats_cpu.as_secs_f64(), nats_cpu.as_secs_f64() / secs * 100.0),
        ),
        ("gateway RSS after the steady period".into(), format!("{rss_steady:.1} MiB"), "-".into()),
        (
            format!("bundle change: {n} varroa_desired puts at once to {n} apply results in varroa_mites"),
            format!("{} (puts acknowledged {}; last Desired at a mite {})", ms(applied), ms(puts_done), ms(pushed)),
            format!("{} ({n} puts seen by a watcher; puts acknowledged {})", ms(floor_seen), ms(floor_puts)),
        ),
        (
            "varroa_mites writes for the bundle change (per mite)".into(),
            format!("{change_writes} ({:.1})", change_writes as f64 / n as f64),
            "-".into(),
        ),
        (
            format!(
                "one Observation to a varroa_mites watcher, median (p95) of {samples} ({} bytes entry)",
                payload.len()
            ),
            format!("{} ({})", ms(gw_med), ms(gw_p95)),
            format!(
                "KV put to a watcher {} ({}); core NATS publish to a subscriber {} ({})",
                ms(kv_med),
                ms(kv_p95),
                ms(pub_med),
                ms(pub_p95)
            ),
        ),
    ];

    println!(
        "mites: {n}; heartbeat: --heartbeat-seconds {heartbeat}; load average at start: {load_at_start}, at end: {}",
        load_average()
    );
    println!("| control link | through the gateway | floor |");
    println!("|---|---|---|");
    for (a, b, c) in rows {
        println!("| {a} | {b} | {c} |");
    }
    println!("\nDesired messages received by the mites: {desired_received} (expected {}); streams lost: {lost}", 2 * n);
    drop(nats);
}
