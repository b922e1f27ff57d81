//! The control link end to end, as a user's cluster runs it (issue 12, "Done when" #1): devcluster
//! with its process runtime runs the pods the operator writes, so the `jenkins` container is the
//! real `varroa-jenkins-double` binary, `plugins-init` and `casc-init` and the `mite` sidecar are
//! the real `varroa-mite` binary; a real nats-server (JetStream), the real gateway (in-process,
//! mutual TLS with a server certificate from the gateway CA the operator issues mite
//! certificates from) and the operator with its real `KvLink`. The Jenkins double's stand-in update
//! site is what plugins-init downloads from, with a version profile whose lock matches its files.
//!
//! What it checks is what a user checks: both Controllers (one with two cells) `Connected`; a
//! JCasC change live in Jenkins (the double's admin endpoint on the pod IP) with the new digest in
//! `status.lastApplyResult`, the pod not restarted; a plugin change rolls the pod, which connects
//! again; `varroa describe controller` shows the mite's state.
//!
//! The other crates' binaries: `cargo test -p varroa-operator` builds only this package's, so
//! [`bins`] asks for the workspace's test build (a no-op when `cargo nextest run --workspace`
//! made it) and takes them from it.

mod support;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};
use support::{Env, TEAM, WAIT, attention_of, condition, config, phase_of};
use varroa_api::ControllerPhase;
use varroa_api::lifecycle::condition as cond;
use varroa_gateway::{GatewayConfig, GatewayOptions, RunningGateway, TlsFiles};
use varroa_jenkins_double::update_site::{self, UpdateSite};
use varroa_link::kv::{self, DesiredEntry};
use varroa_link::nats::ConnectSettings;
use varroa_link::testing::NatsServer;
use varroa_operator::link::{KvLink, LinkSettings};

/// The plugins-init image of the operator's test configuration.
const PLUGINS_INIT: &str = "ghcr.io/eventide/varroa-plugins-init*";
/// The mite image (also casc-init's).
const MITE: &str = "ghcr.io/eventide/varroa-mite*";
/// The Jenkins image of the test profile.
const JENKINS: &str = "jenkins/jenkins*";

/// The binaries of the other workspace crates the pods run.
struct Bins {
    mite: PathBuf,
    double: PathBuf,
    varroa: PathBuf,
    gateway: PathBuf,
}

/// `varroa-mite`, `varroa-jenkins-double`, `varroa` (the CLI) and `varroa-gateway`, as the workspace's test build
/// makes them ([`optest::bins::workspace_bins`]), once per test process.
fn bins() -> &'static Bins {
    static BINS: OnceLock<Bins> = OnceLock::new();
    BINS.get_or_init(|| {
        let mut bins =
            optest::bins::workspace_bins(&["varroa-mite", "varroa-jenkins-double", "varroa", "varroa-gateway"]);
        let mut take = |name: &str| bins.remove(name).expect("workspace_bins returns every name");
        Bins {
            mite: take("varroa-mite"),
            double: take("varroa-jenkins-double"),
            varroa: take("varroa"),
            gateway: take("varroa-gateway"),
        }
    })
}

/// The `lts` profile (the test world's default) with a lock that matches the stand-in update
/// site's files.
fn profile(git_version: &str) -> String {
    let plugins = [
        ("configuration-as-code", "1909.vb_b_f59a_27d013"),
        ("git", git_version),
        ("job-dsl", "1.90"),
        ("kubernetes", "4313.va_9b_4fe2a_0e34"),
        ("workflow-aggregator", "600.vb_57cdd26fdd7"),
        ("role-strategy", "756.v978cb_392eb_d3"),
    ];
    let mut y = String::from(
        "apiVersion: varroa.dev/v1alpha1\nkind: JenkinsVersionProfile\nmetadata: {name: lts}\nspec:\n  jenkinsVersion: \"2.479.3\"\n  image: jenkins/jenkins:2.479.3-lts-jdk17\n  plugins:\n",
    );
    for (name, version) in plugins {
        let sha = update_site::plugin_sha256(name, version);
        y.push_str(&format!("  - {{name: {name}, version: \"{version}\", sha256: \"{sha}\"}}\n"));
    }
    y
}

/// The gateway, in-process, with a server certificate for the address the mites dial.
async fn gateway(ca: &varroa_pki::CertificateAuthority, nats: &NatsServer, dir: &Path) -> RunningGateway {
    gateway_with(ca, nats, dir, None).await
}

/// [`gateway`], writing console logs to `log_store`.
async fn gateway_with(
    ca: &varroa_pki::CertificateAuthority,
    nats: &NatsServer,
    dir: &Path,
    log_store: Option<varroa_blobs::StoreSettings>,
) -> RunningGateway {
    let server = ca
        .issue_server(&["127.0.0.1".into()], Duration::from_secs(86_400), SystemTime::now())
        .expect("the gateway's server certificate");
    let tls = TlsFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key"), ca: dir.join("ca.crt") };
    std::fs::write(&tls.cert, &server.cert_pem).expect("write tls.crt");
    std::fs::write(&tls.key, &server.key_pem).expect("write tls.key");
    std::fs::write(&tls.ca, ca.cert_pem()).expect("write ca.crt");
    let gw = varroa_gateway::start_with(
        GatewayConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            health_listen: "127.0.0.1:0".parse().expect("an address"),
            tls,
            nats: ConnectSettings {
                url: nats.url(),
                credentials_file: None,
                name: "varroa-gateway/e2e".into(),
                max_reconnect_delay: Duration::from_millis(500),
            },
            bucket_replicas: 1,
            options: GatewayOptions {
                replica: "varroa-gateway-e2e".into(),
                heartbeat_interval: Duration::from_secs(1),
                hello_timeout: Duration::from_secs(10),
                cluster: "e2e".into(),
                max_streams: 100,
            },
        },
        log_store,
    )
    .await
    .expect("the gateway starts");
    let ready = gw.readiness.clone();
    support::eventually("the gateway is ready", || ready.is_ready()).await;
    gw
}

/// A PostgreSQL of its own, a database in it, and the recorder (with its ledger) draining the
/// streams into it, ready: its streams exist, so the activity of mites connecting later is
/// captured (core NATS keeps nothing for a stream that is not there yet).
async fn record_store(
    nats: &NatsServer,
) -> (varroa_recorder::testing::PgServer, String, varroa_recorder::RunningRecorder) {
    let pg = varroa_recorder::testing::PgServer::start().expect("PostgreSQL starts (make deps installs it)");
    let db = pg.create_database("records").await.expect("a database");
    let recorder = varroa_recorder::start(varroa_recorder::RecorderConfig {
        database: varroa_recorder::DbSettings {
            url: db.clone(),
            password_file: None,
            application_name: "varroa-recorder e2e".into(),
        },
        nats: ConnectSettings {
            url: nats.url(),
            credentials_file: None,
            name: "varroa-recorder/e2e".into(),
            max_reconnect_delay: Duration::from_millis(500),
        },
        health_listen: "127.0.0.1:0".parse().expect("an address"),
        consumers: varroa_recorder::ConsumerSettings {
            batch_size: 256,
            ack_wait: Duration::from_secs(30),
            stream_replicas: 1,
        },
        retention: Default::default(),
    })
    .await
    .expect("the recorder starts");
    let ready = recorder.readiness.clone();
    support::eventually("the recorder is ready", || ready.is_ready()).await;
    (pg, db, recorder)
}

async fn pod(env: &Env, name: &str) -> Pod {
    env.obj::<Pod>(name).await
}

/// The Jenkins double's own view (`/__double/state`) of the pod's Jenkins, on the pod IP.
async fn double_state(http: &reqwest::Client, p: &Pod) -> Option<Value> {
    let ip = p.status.as_ref()?.pod_ip.clone()?;
    let r = http.get(format!("http://{ip}:8080/__double/state")).send().await.ok()?;
    r.json().await.ok()
}

async fn desired_entry(store: &async_nats::jetstream::kv::Store, key: &str) -> Option<DesiredEntry> {
    let v = store.get(key).await.ok()??;
    kv::decode_desired(key, &v).ok()
}

/// Polls until `f` yields a value, failing after [`WAIT`] with `what` and the last value seen.
async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) if tokio::time::Instant::now() >= deadline => panic!("timed out waiting until {what}: {last}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// What both tests run on: devcluster with its process runtime, the gateway CA, the test
/// profile with a lock matching the stand-in update site, a nats-server.
struct World {
    env: Env,
    ca: varroa_pki::CertificateAuthority,
    nats: NatsServer,
    site: UpdateSite,
    dir: tempfile::TempDir,
}

async fn world() -> World {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bins = bins();
    let site = UpdateSite::start("127.0.0.1:0".parse().expect("an address"), Default::default())
        .await
        .expect("the stand-in update site starts");
    let options = devcluster::Options {
        run: vec![
            devcluster::runtime::RunRule::new(JENKINS, &bins.double),
            devcluster::runtime::RunRule::new(MITE, &bins.mite),
            devcluster::runtime::RunRule::new(PLUGINS_INIT, &bins.mite),
        ],
        ..Default::default()
    };
    let env = Env::cluster_with(options).await;
    // The CA the operator issues mite certificates from, and the gateway trusts.
    let ca = support::install_gateway_ca(&env.admin, "e2e gateway CA").await;
    env.apply(&profile("5.7.0")).await;
    let nats = NatsServer::start().expect("nats-server starts (make deps installs it)");
    let dir = tempfile::tempdir().expect("a temporary directory");
    World { env, ca, nats, site, dir }
}

impl World {
    /// Starts the operator on the control link, its mites dialling `gateway`, a mite silent for
    /// `heartbeat_timeout` counting as lost.
    async fn start_operator(&mut self, gateway: &str, heartbeat_timeout: Duration) {
        self.start_operator_recording(gateway, heartbeat_timeout, false).await;
    }

    /// [`World::start_operator`]; with `build_records`, as an installation with the build record
    /// store runs it (`--build-records`: claims on), publishing its lifecycle activity.
    async fn start_operator_recording(&mut self, gateway: &str, heartbeat_timeout: Duration, build_records: bool) {
        let link = KvLink::start(LinkSettings {
            nats: ConnectSettings {
                url: self.nats.url(),
                credentials_file: None,
                name: "varroa-operator/e2e".into(),
                max_reconnect_delay: Duration::from_millis(500),
            },
            heartbeat_timeout,
            replicas: 1,
        })
        .await
        .expect("the operator's link starts");
        let mut cfg = config();
        cfg.gateway_endpoint = gateway.to_string();
        cfg.default_update_site = self.site.url();
        cfg.mite_heartbeat_timeout = heartbeat_timeout;
        cfg.build_records = build_records;
        let activity = if build_records {
            let client = async_nats::connect(self.nats.url()).await.expect("connect to NATS");
            varroa_operator::activity::Publisher::nats(client, "e2e").expect("a publisher")
        } else {
            varroa_operator::activity::Publisher::off()
        };
        self.env.start_operator_publishing(cfg, link, activity);
    }

    /// The mites' and the desired configurations' buckets, as a reader sees them.
    async fn buckets(&self) -> (async_nats::jetstream::kv::Store, async_nats::jetstream::kv::Store) {
        let client = async_nats::connect(self.nats.url()).await.expect("connect to NATS");
        let js = async_nats::jetstream::new(client);
        (
            kv::open_mites(&js, 1).await.expect("the mites bucket"),
            kv::open_desired(&js, 1).await.expect("the desired bucket"),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_connect_through_real_mites_and_jcasc_applies_live() {
    let bins = bins();
    let mut w = world().await;
    let gw = gateway(&w.ca, &w.nats, w.dir.path()).await;
    w.start_operator(&gw.grpc_addr.to_string(), Duration::from_secs(15)).await;
    let env = &w.env;

    env.apply(
        "apiVersion: varroa.dev/v1alpha1\nkind: CatalogItem\nmetadata: {name: msg, namespace: team-a}\nspec: {casc: {jenkins: {systemMessage: one}}}\n---\napiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: b, namespace: team-a}\nspec: {inputs: [{catalogItem: {name: varroa-starter}}, {catalogItem: {name: msg}}]}\n",
    )
    .await;
    env.create("ci", json!({"composedBundleRef": {"name": "b"}})).await;
    env.create("cells", json!({"cells": 2})).await;

    // Both reach Connected through the real mites (every cell of "cells" has its stream).
    let ci = env.wait_phase("ci", ControllerPhase::Connected).await;
    assert_eq!(condition(&ci, cond::MITE_CONNECTED).map(|c| c.status.as_str()), Some("True"));
    env.wait_phase("cells", ControllerPhase::Connected).await;
    let (mites, desired) = w.buckets().await;
    for key in ["team-a.cells.0", "team-a.cells.1", "team-a.ci.0"] {
        until(&format!("{key} is connected in varroa_mites"), || async {
            let v = mites.get(key).await.map_err(|e| e.to_string())?.ok_or("no entry")?;
            let e = kv::decode_mite(key, &v).map_err(|e| e.to_string())?;
            // The mite may say hello before Jenkins answers (both containers start together):
            // the version then comes with its first observation.
            let version = e.observation.version.as_deref().unwrap_or(&e.jenkins_version);
            if e.connected && version == "2.479.3" { Ok(()) } else { Err(format!("{e:?}")) }
        })
        .await;
    }

    // The boot configuration was applied through the link too: the first digest is in the status.
    let first = until("the first desired entry", || async {
        desired_entry(&desired, "team-a.ci").await.ok_or_else(|| "none".to_string())
    })
    .await;
    let ci = env
        .wait("ci", "the first apply result", |c| {
            c.status.as_ref().and_then(|s| s.last_apply_result.as_ref()).is_some_and(|r| r.digest == first.digest)
        })
        .await;
    assert!(ci.status.and_then(|s| s.last_apply_result).is_some_and(|r| r.succeeded));

    // Jenkins, on its pod IP, runs the boot configuration.
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("an HTTP client");
    let ci_pod = pod(env, "ci-0").await;
    let state = until("the double answers on the pod IP", || async {
        double_state(&http, &ci_pod).await.ok_or_else(|| "no answer".to_string())
    })
    .await;
    assert_eq!(state["live"]["jenkins"]["systemMessage"], "one", "{state}");
    let reloads_before = state["reloads"].as_array().map_or(0, Vec::len);

    // A JCasC change: live in Jenkins, the new digest in the status, the pod not restarted.
    env.apply("apiVersion: varroa.dev/v1alpha1\nkind: CatalogItem\nmetadata: {name: msg, namespace: team-a}\nspec: {casc: {jenkins: {systemMessage: two}}}\n").await;
    let second = until("the new JCasC in varroa_desired", || async {
        match desired_entry(&desired, "team-a.ci").await {
            Some(e) if e.digest != first.digest => Ok(e),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let live = until("the double runs the new configuration", || async {
        let s = double_state(&http, &ci_pod).await.ok_or("no answer")?;
        if s["live"]["jenkins"]["systemMessage"] == "two" { Ok(s) } else { Err(s.to_string()) }
    })
    .await;
    assert!(live["reloads"].as_array().map_or(0, Vec::len) > reloads_before, "reloaded, not restarted: {live}");
    let ci = env
        .wait("ci", "the new digest in lastApplyResult", |c| {
            c.status.as_ref().and_then(|s| s.last_apply_result.as_ref()).is_some_and(|r| r.digest == second.digest)
        })
        .await;
    assert!(ci.status.as_ref().and_then(|s| s.last_apply_result.as_ref()).is_some_and(|r| r.succeeded));
    assert_eq!(phase_of(&ci), Some(ControllerPhase::Connected));
    let now_pod = pod(env, "ci-0").await;
    assert_eq!(now_pod.uid(), ci_pod.uid(), "a JCasC change does not restart the pod");
    let restarts: i32 = now_pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0);
    assert_eq!(restarts, 0, "no container restarted");

    // `varroa describe controller` shows the mite's state.
    let kubeconfig = env.dc.kubeconfig_path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&bins.varroa)
            .args(["describe", "controller", "cells", "-n", TEAM])
            .env("KUBECONFIG", kubeconfig)
            .env("NO_COLOR", "1")
            .output()
    })
    .await
    .expect("the describe task")
    .expect("run varroa describe");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in ["Phase: Connected", "Mite: connected since", "Cells: 2/2 ready", "Last apply: succeeded"] {
        assert!(flat.contains(want), "describe lacks {want:?}:\n{text}");
    }

    // A plugin change (a new version in the lock) rolls the pod, which connects again.
    env.apply(&profile("5.7.1")).await;
    let rolled = until("ci-0 is replaced", || async {
        let p = Api::<Pod>::namespaced(env.admin.clone(), TEAM).get_opt("ci-0").await.map_err(|e| e.to_string())?;
        match p {
            Some(p) if p.uid() != ci_pod.uid() => Ok(p),
            _ => Err("the old pod".into()),
        }
    })
    .await;
    env.wait("ci", "Connected after the roll", |c| {
        phase_of(c) == Some(ControllerPhase::Connected)
            && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
    })
    .await;
    let rolled = until("the new pod has its IP", || async {
        let p = pod(env, &rolled.name_any()).await;
        if p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some() { Ok(p) } else { Err("no IP".into()) }
    })
    .await;
    until("the rolled pod's Jenkins runs the current configuration", || async {
        let s = double_state(&http, &rolled).await.ok_or("no answer")?;
        if s["live"]["jenkins"]["systemMessage"] == "two" { Ok(()) } else { Err(s.to_string()) }
    })
    .await;

    w.env.stop_operator().await;
    gw.shutdown().await;
}

/// The gateway binary as its own process on `port` (a fixed one, so that it can come back where
/// the mites dial), with 1 s heartbeats; killed when dropped.
struct GatewayProcess(std::process::Child);

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port()
}

async fn gateway_process(w: &World, port: u16) -> GatewayProcess {
    let dir = w.dir.path();
    if !dir.join("tls.crt").exists() {
        let server =
            w.ca.issue_server(&["127.0.0.1".into()], Duration::from_secs(86_400), SystemTime::now())
                .expect("the gateway's server certificate");
        std::fs::write(dir.join("tls.crt"), &server.cert_pem).expect("write tls.crt");
        std::fs::write(dir.join("tls.key"), &server.key_pem).expect("write tls.key");
        std::fs::write(dir.join("ca.crt"), w.ca.cert_pem()).expect("write ca.crt");
    }
    let health = free_port();
    let child = std::process::Command::new(&bins().gateway)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--health-listen", &format!("127.0.0.1:{health}")])
        .arg("--tls-cert")
        .arg(dir.join("tls.crt"))
        .arg("--tls-key")
        .arg(dir.join("tls.key"))
        .arg("--tls-ca")
        .arg(dir.join("ca.crt"))
        .args(["--nats-url", &w.nats.url(), "--heartbeat-seconds", "1", "--cluster", "e2e", "--replica", "gw-e2e"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the gateway binary starts");
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{health}/readyz");
    until("the gateway process is ready", || async {
        let r = http.get(&url).send().await.map_err(|e| e.to_string())?;
        if r.status().is_success() { Ok(()) } else { Err(r.status().to_string()) }
    })
    .await;
    GatewayProcess(child)
}

/// The reloads the Jenkins double of `pod` has done (each an applied configuration).
async fn reloads(http: &reqwest::Client, p: &Pod) -> usize {
    until("the double answers on the pod IP", || async {
        let s = double_state(http, p).await.ok_or("no answer")?;
        Ok::<_, String>(s["reloads"].as_array().map_or(0, Vec::len))
    })
    .await
}

/// The fault a platform team fears most on the control link: the gateway dies without a word
/// (SIGKILL, no `connected: false` written). Every controller shows `Mite unreachable` once its
/// heartbeat is older than the threshold, and its pod stays; when the gateway is back the mites
/// reconnect, every controller is `Connected` again and no configuration is applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_shows_mite_unreachable_and_its_return_applies_nothing_twice() {
    let mut w = world().await;
    let port = free_port();
    let gw = gateway_process(&w, port).await;
    w.start_operator(&format!("127.0.0.1:{port}"), Duration::from_secs(4)).await;
    let env = &w.env;
    env.create("ci", json!({})).await;
    env.create("cells", json!({"cells": 2})).await;
    let mut first = Vec::new();
    for name in ["ci", "cells"] {
        let c = env
            .wait(name, "Connected with its first apply result", |c| {
                phase_of(c) == Some(ControllerPhase::Connected)
                    && c.status.as_ref().and_then(|s| s.last_apply_result.as_ref()).is_some_and(|r| r.succeeded)
            })
            .await;
        first.push(c.status.and_then(|s| s.last_apply_result).expect("an apply result").digest);
    }
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("an HTTP client");
    let pods: Vec<Pod> = futures::future::join_all(["ci-0", "cells-0", "cells-1"].map(|n| pod(env, n))).await;
    // A controller's apply result comes from whichever cell applied first: wait until every cell
    // has applied the configuration (one reload each) before counting.
    let mut before = Vec::new();
    for p in &pods {
        let n = until(&format!("{} applied its configuration", p.name_any()), || async {
            let n = reloads(&http, p).await;
            if n >= 1 { Ok(n) } else { Err("no reload yet".to_string()) }
        })
        .await;
        before.push(n);
    }

    drop(gw); // SIGKILL
    for name in ["ci", "cells"] {
        let c = env.wait(name, "Mite unreachable", |c| attention_of(c).as_deref() == Some("Mite unreachable")).await;
        let mc = condition(&c, cond::MITE_CONNECTED).expect("MiteConnected");
        assert_eq!((mc.status.as_str(), mc.reason.as_str()), ("False", "StreamLost"), "{name}: {mc:?}");
        assert_eq!(phase_of(&c), Some(ControllerPhase::Running), "{name}: a lost stream keeps the phase Running");
    }
    for p in &pods {
        assert_eq!(pod(env, &p.name_any()).await.uid(), p.uid(), "{}: the pod stays", p.name_any());
    }

    let _gw = gateway_process(&w, port).await;
    for (name, digest) in ["ci", "cells"].iter().zip(&first) {
        let c = env
            .wait(name, "Connected again", |c| {
                phase_of(c) == Some(ControllerPhase::Connected) && attention_of(c).is_none()
            })
            .await;
        assert_eq!(c.status.and_then(|s| s.last_apply_result).map(|r| r.digest).as_ref(), Some(digest));
    }
    // Every cell has its stream again (and so has had the current desired entry pushed at once on
    // its reconnect); none applied it again.
    let (mites, _) = w.buckets().await;
    for key in ["team-a.ci.0", "team-a.cells.0", "team-a.cells.1"] {
        until(&format!("{key} is connected again"), || async {
            let v = mites.get(key).await.map_err(|e| e.to_string())?.ok_or("no entry")?;
            let e = kv::decode_mite(key, &v).map_err(|e| e.to_string())?;
            if e.connected && e.gateway_replica == "gw-e2e" { Ok(()) } else { Err(format!("{e:?}")) }
        })
        .await;
    }
    for (p, n) in pods.iter().zip(&before) {
        assert_eq!(reloads(&http, p).await, *n, "{}: the configuration was applied again", p.name_any());
    }
    w.env.stop_operator().await;
}

/// The build data plane's events path end to end (issue 13): the pods' Jenkins doubles play
/// the Varroa plugin and send their builds' events to their own mite over the pod's loopback
/// (the token from the in-memory volume the operator mounts), the mites carry them to the real
/// gateway, the gateway into JetStream `varroa_builds`, the real recorder into a real
/// PostgreSQL; `varroa builds` and `varroa build` read them back as a user does, and the
/// gateway's activity (the mites connecting) is drained into the activity table.
///
/// Without build claims (an installation without `--build-records`), each cell numbers its builds
/// itself, so the two cells run different jobs here; with claims they share one sequence per job
/// (the next test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_of_two_cells_reach_the_record_store_and_varroa_builds_lists_them() {
    let bins = bins();
    let mut w = world().await;
    let gw = gateway(&w.ca, &w.nats, w.dir.path()).await;
    w.start_operator(&gw.grpc_addr.to_string(), Duration::from_secs(15)).await;
    let (_pg, db, recorder) = record_store(&w.nats).await;
    let env = &w.env;
    env.create("cells", json!({"cells": 2})).await;
    env.wait_phase("cells", ControllerPhase::Connected).await;

    // Each cell's Jenkins gets a job (as a job-dsl seed job would define it) and runs 50 builds.
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("an HTTP client");
    for (cell, job) in [(0, "team/app"), (1, "team/lib")] {
        let p = pod(env, &format!("cells-{cell}")).await;
        let ip = p.status.and_then(|s| s.pod_ip).expect("the pod has its IP");
        let base = format!("http://{ip}:8080/__double");
        let jobs = format!(
            "jobs:\n  - name: {job}\n    stages: [{{name: Build, duration_ms: 0}}, {{name: Test, duration_ms: 0}}]\n    tests: {{total: 12, failed: 0, skipped: 2}}\n"
        );
        let r = http.put(format!("{base}/jobs")).body(jobs).send().await.expect("define the job");
        assert!(r.status().is_success(), "{}", r.text().await.unwrap_or_default());
        let r = http
            .post(format!("{base}/builds"))
            .json(&json!({"job": job, "count": 50, "wait": true}))
            .send()
            .await
            .expect("run the builds");
        assert!(r.status().is_success(), "{}", r.text().await.unwrap_or_default());
    }

    // `varroa builds` lists all 100, finished, numbered 1 to 50 per job, each on its cell.
    let varroa = |args: &[&str]| {
        let out = std::process::Command::new(&bins.varroa)
            .args(args)
            .args(["-n", TEAM, "--database-url", &db])
            .env("NO_COLOR", "1")
            .output()
            .expect("run varroa");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let listed = until("varroa builds lists 100 finished builds", || async {
        let (ok, out, err) = varroa(&["builds", "cells", "--limit", "500", "-o", "json"]);
        if !ok {
            return Err(err);
        }
        let v: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
        let items = v["items"].as_array().cloned().unwrap_or_default();
        let done = items.iter().filter(|b| b["result"] == "SUCCESS").count();
        if items.len() == 100 && done == 100 {
            Ok(items)
        } else {
            Err(format!("{} listed, {done} finished", items.len()))
        }
    })
    .await;
    for (cell, job) in [(0, "team/app"), (1, "team/lib")] {
        let mut numbers: Vec<u64> =
            listed.iter().filter(|b| b["job"] == job).filter_map(|b| b["number"].as_u64()).collect();
        numbers.sort();
        assert_eq!(numbers, (1..=50).collect::<Vec<u64>>(), "{job}: gap-free, each once");
        assert!(listed.iter().filter(|b| b["job"] == job).all(|b| b["cell"] == cell), "{job} ran on cell {cell}");
    }
    let (ok, table, err) = varroa(&["builds", "cells", "--job", "team/app", "--limit", "3"]);
    assert!(ok, "{err}");
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["JOB", "NUMBER", "RESULT", "DURATION", "CELL", "STARTED"]);
    assert!(
        table.lines().nth(1).is_some_and(|l| l.starts_with("team/app") && l.contains("50") && l.contains("SUCCESS")),
        "{table}"
    );

    // One build in detail: its stages in order and its tests.
    let (ok, detail, err) = varroa(&["build", "cells", "team/lib", "7"]);
    assert!(ok, "{err}");
    let flat = detail.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in ["SUCCESS", "Build", "Test", "12 total", "2 skipped"] {
        assert!(flat.contains(want), "varroa build lacks {want:?}:\n{detail}");
    }
    assert!(flat.find("Build").unwrap_or(usize::MAX) < flat.rfind("Test").unwrap_or(0), "stages in order:\n{detail}");

    // The gateway's activity (each cell's mite connecting) reached the activity table.
    until("the mites' connections are in the activity table", || async {
        let (ok, out, err) = varroa(&["activity", "cells", "--since", "1h", "-o", "json"]);
        if !ok {
            return Err(err);
        }
        let connected = out.matches("MiteConnected").count();
        if connected >= 2 { Ok(()) } else { Err(out) }
    })
    .await;

    recorder.shutdown().await;
    w.env.stop_operator().await;
    gw.shutdown().await;
}

/// Issue 13, "Done when": a two-cell controller of an installation with the build record store
/// (`--build-records`: claims on) runs 100 builds through claims. Both cells' Jenkins (the double
/// playing the plugin) queue the same 100 timer triggers at the same moment; every claim goes
/// plugin -> mite -> gateway -> the recorder's ledger over NATS -> back, so each trigger runs on
/// one cell and the job's numbers are one gap-free sequence across both. `varroa builds` lists
/// exactly 100, numbered 1 to 100; a build's console log, sent by the plugin through the mite and
/// the gateway to the log store, is read complete with `varroa logs`, and a running build's log
/// is followed live with `varroa logs -f` until it ends; activity (the operator's lifecycle, the
/// mites connecting) is on the controller's subject and in the activity table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_cell_controller_runs_100_builds_through_claims_with_logs_and_activity() {
    let bins = bins();
    let mut w = world().await;
    let logs_dir = w.dir.path().join("logs");
    std::fs::create_dir_all(&logs_dir).expect("the log store's directory");
    let log_store = format!("file://{}", logs_dir.display());
    let gw = gateway_with(&w.ca, &w.nats, w.dir.path(), Some(varroa_blobs::StoreSettings::new(&log_store))).await;
    let (_pg, db, recorder) = record_store(&w.nats).await;
    // Activity on the controller's subject, as the BFF's live view subscribes it.
    let watcher = async_nats::connect(w.nats.url()).await.expect("connect to NATS");
    let mut activity = watcher.subscribe(format!("activity.e2e.{TEAM}.claims")).await.expect("subscribe");
    watcher.flush().await.expect("the subscription is in place");
    w.start_operator_recording(&gw.grpc_addr.to_string(), Duration::from_secs(15), true).await;
    let env = &w.env;
    env.create("claims", json!({"cells": 2})).await;
    env.wait_phase("claims", ControllerPhase::Connected).await;

    // Both cells define the jobs (as a job-dsl seed job would, the same on every cell).
    let http = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().expect("an HTTP client");
    let jobs = "jobs:\n  - name: team/app\n    stages: [{name: Build, duration_ms: 0, console: [compiling]}, {name: Test, duration_ms: 0, console: [testing]}]\n    tests: {total: 12, failed: 0, skipped: 2}\n  - name: team/slow\n    stages: [{name: Build, duration_ms: 1500, console: [slow build starts]}, {name: Test, duration_ms: 1500, console: [slow tests pass]}]\n";
    let mut bases = Vec::new();
    for cell in 0..2 {
        let p = pod(env, &format!("claims-{cell}")).await;
        let ip = p.status.and_then(|s| s.pod_ip).expect("the pod has its IP");
        let base = format!("http://{ip}:8080/__double");
        let r = http.put(format!("{base}/jobs")).body(jobs).send().await.expect("define the jobs");
        assert!(r.status().is_success(), "{}", r.text().await.unwrap_or_default());
        bases.push(base);
    }
    // The same 100 timer ticks queued on both cells at once; each cell waits for its builds.
    let ask = json!({"job": "team/app", "count": 100, "trigger": "timer:e2e", "wait": true});
    let (a, b) = tokio::join!(
        http.post(format!("{}/builds", bases[0])).json(&ask).send(),
        http.post(format!("{}/builds", bases[1])).json(&ask).send()
    );
    let mut ran = 0;
    let mut refused = 0;
    for r in [a, b] {
        let r = r.expect("run the builds");
        assert!(r.status().is_success(), "{}", r.text().await.unwrap_or_default());
        let v: Value = r.json().await.expect("the double's answer");
        ran += v["builds"].as_array().map_or(0, |b| b.len());
        refused += v["refused"].as_u64().unwrap_or(0);
        assert_eq!(v["dropped"], 0, "no claim was dropped: {v}");
        assert!(v["results"].as_array().is_some_and(|r| r.iter().all(|x| x == "SUCCESS")), "{v}");
    }
    assert_eq!((ran, refused), (100, 100), "each trigger ran on exactly one cell, the other was refused");

    let varroa = |args: &[&str]| {
        let out = std::process::Command::new(&bins.varroa)
            .args(args)
            .args(["-n", TEAM])
            .args(if args[0] == "logs" { ["--log-store", &log_store] } else { ["--database-url", &db] })
            .env("NO_COLOR", "1")
            .output()
            .expect("run varroa");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // `varroa builds` lists exactly 100, finished, numbered 1 to 100 across both cells.
    let listed = until("varroa builds lists 100 finished builds", || async {
        let (ok, out, err) = varroa(&["builds", "claims", "--job", "team/app", "--limit", "500", "-o", "json"]);
        if !ok {
            return Err(err);
        }
        let v: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
        let items = v["items"].as_array().cloned().unwrap_or_default();
        let done = items.iter().filter(|b| b["result"] == "SUCCESS").count();
        if items.len() >= 100 && done == 100 {
            Ok(items)
        } else {
            Err(format!("{} listed, {done} finished", items.len()))
        }
    })
    .await;
    let mut numbers: Vec<u64> = listed.iter().filter_map(|b| b["number"].as_u64()).collect();
    numbers.sort();
    assert_eq!(numbers, (1..=100).collect::<Vec<u64>>(), "one gap-free sequence across both cells, each once");

    // A build's log, complete, as the plugin wrote it: its console lines in order, the end.
    let (ok, log, err) = varroa(&["logs", "claims", "team/app", "42"]);
    assert!(ok, "varroa logs: {err}");
    let at = |what: &str| log.find(what).unwrap_or_else(|| panic!("the log lacks {what:?}:\n{log}"));
    assert!(at("Started by") < at("compiling"), "{log}");
    assert!(at("compiling") < at("testing") && at("testing") < at("Finished: SUCCESS"), "{log}");

    // A running build's log followed live: started while the build runs, it prints the lines
    // as they come and ends with the build.
    let r = http
        .post(format!("{}/builds", bases[0]))
        .json(&json!({"job": "team/slow", "triggers": ["timer:slow"]}))
        .send()
        .await
        .expect("start the slow build");
    let v: Value = r.json().await.expect("the double's answer");
    let n = v["builds"][0].as_u64().unwrap_or_else(|| panic!("the slow build was granted a number: {v}"));
    let number = n.to_string();
    until("the slow build's log has begun", || async {
        let (ok, out, err) = varroa(&["logs", "claims", "team/slow", &number]);
        if ok && out.contains("slow build starts") { Ok(()) } else { Err(format!("{out}{err}")) }
    })
    .await;
    let follow = std::process::Command::new(&bins.varroa)
        .args(["logs", "claims", "team/slow", &number, "-f"])
        .args(["-n", TEAM, "--log-store", &log_store, "--nats-url", &w.nats.url()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("varroa logs -f starts");
    let follow = tokio::task::spawn_blocking(move || follow.wait_with_output());
    let items: Value = http
        .get(format!("{}/items?job=team/slow", bases[0]))
        .send()
        .await
        .expect("the items")
        .json()
        .await
        .expect("JSON");
    assert_eq!(items["items"][0]["state"], "running", "followed while it runs: {items}");
    let out = tokio::time::timeout(WAIT, follow)
        .await
        .expect("varroa logs -f ends when the build's log is complete")
        .expect("the waiting task")
        .expect("its output");
    let followed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "varroa logs -f: {}", String::from_utf8_lossy(&out.stderr));
    let at = |what: &str| followed.find(what).unwrap_or_else(|| panic!("-f lacks {what:?}:\n{followed}"));
    assert!(at("slow build starts") < at("slow tests pass") && at("slow tests pass") < at("Finished: SUCCESS"));

    // Activity: on the controller's subject (the operator's lifecycle, the mites connecting) and
    // drained into the activity table.
    let mut kinds = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !(kinds.iter().any(|k| k == "MiteConnected") && kinds.iter().any(|k| k == "PhaseChanged")) {
        use futures::StreamExt;
        let msg = tokio::time::timeout_at(deadline, activity.next())
            .await
            .unwrap_or_else(|_| panic!("no MiteConnected and PhaseChanged on the subject: {kinds:?}"))
            .expect("the subscription");
        let v: Value = serde_json::from_slice(&msg.payload).expect("an activity event");
        kinds.push(v["kind"].as_str().unwrap_or_default().to_owned());
    }
    until("the activity is in the table", || async {
        let (ok, out, err) = varroa(&["activity", "claims", "--since", "1h", "-o", "json"]);
        if !ok {
            return Err(err);
        }
        if out.matches("MiteConnected").count() >= 2 && out.contains("PhaseChanged") { Ok(()) } else { Err(out) }
    })
    .await;

    recorder.shutdown().await;
    w.env.stop_operator().await;
    gw.shutdown().await;
}
