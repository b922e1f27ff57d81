//! `varroa-mite run` end to end with real processes and servers: a real nats-server (JetStream),
//! the real gateway (varroa_gateway, in-process, as its own tests start it), TLS from varroa-pki,
//! the Jenkins double as Jenkins, and the mite (in-process through `varroa_mite::link`, and the
//! real binary). What the tests check is what a user checks: the `varroa_mites` entry, Jenkins'
//! live configuration and its reloads.

mod common;

use common::*;
use std::time::{Duration, SystemTime};
use varroa_mite::link::{self, JenkinsView};
use varroa_pki::{CertificateAuthority, MiteIdentity};

#[tokio::test]
async fn the_mite_connects_reports_jenkins_and_applies_the_desired_configuration() {
    let w = World::start().await;
    let mite = w.mite().await;
    let e = w
        .wait_entry("the mite is connected with the Jenkins version", |e| {
            e.connected && e.observation.version.as_deref() == Some("2.479.3")
        })
        .await;
    assert_eq!(e.gateway_replica, "gw-test-0");
    assert_eq!(e.mite_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(e.observation.mode.as_deref(), Some("NORMAL"));
    assert_eq!(e.observation.idle_executors, Some(2));
    assert!(e.observation.idle_for_seconds.is_some());
    // /readyz is the stream.
    let ready = reqwest::get(format!("http://{}/readyz", mite.health_addr.unwrap())).await.unwrap();
    assert!(ready.status().is_success());

    // Observation deltas: a queued build reaches the entry.
    w.jenkins.set_queue_length(3);
    w.wait_entry("the queue length is reported", |e| e.observation.queue_length == Some(3)).await;

    w.put_desired("sha256:one", "jenkins:\n  systemMessage: from the operator\n").await;
    let e = w.wait_entry("the apply result lands", |e| applied(e, "sha256:one").is_some()).await;
    let r = e.last_apply_result.unwrap();
    assert!(r.succeeded, "{r:?}");
    assert!(r.drift_paths.is_empty() && r.finished_at.is_some(), "{r:?}");
    assert_eq!(w.system_message().as_deref(), Some("from the operator"));
    assert_eq!(w.jenkins.applied_count(), 1);
    let on_disk = std::fs::read_to_string(w.dir.path().join("casc/jenkins.yaml")).unwrap();
    assert!(on_disk.contains("from the operator"), "{on_disk}");
    mite.shutdown().await;
}

#[tokio::test]
async fn an_invalid_jcasc_fails_with_jenkins_message_and_jenkins_keeps_the_last_good_one() {
    let w = World::start().await;
    let mite = w.mite().await;
    w.put_desired("sha256:good", "jenkins:\n  systemMessage: good\n").await;
    w.wait_entry("the good configuration is applied", |e| applied(e, "sha256:good") == Some(true)).await;

    w.put_desired("sha256:bad", "jenkins:\n  systemMessage: bad\nalice: {}\n").await;
    let e = w.wait_entry("the bad configuration is reported", |e| applied(e, "sha256:bad").is_some()).await;
    let r = e.last_apply_result.unwrap();
    assert!(!r.succeeded);
    assert!(r.message.contains("No configurator found for the following root element: alice"), "{}", r.message);
    assert_eq!(w.system_message().as_deref(), Some("good"), "Jenkins keeps its last good configuration");
    let on_disk = std::fs::read_to_string(w.dir.path().join("casc/jenkins.yaml")).unwrap();
    assert!(on_disk.contains("good") && !on_disk.contains("alice"), "the last good files are back: {on_disk}");

    // Fixing the bundle clears it.
    w.put_desired("sha256:fixed", "jenkins:\n  systemMessage: fixed\n").await;
    w.wait_entry("the fixed configuration is applied", |e| applied(e, "sha256:fixed") == Some(true)).await;
    assert_eq!(w.system_message().as_deref(), Some("fixed"));
    mite.shutdown().await;
}

#[tokio::test]
async fn after_a_gateway_restart_the_mite_reconnects_and_does_not_apply_again() {
    let mut w = World::start().await;
    let mite = w.mite().await;
    let health = mite.health_addr.unwrap();
    w.put_desired("sha256:one", "jenkins:\n  systemMessage: once\n").await;
    w.wait_entry("applied", |e| applied(e, "sha256:one") == Some(true)).await;
    let reloads = w.jenkins.reloads().len();
    assert_eq!(reloads, 1);

    w.gw.take().unwrap().shutdown().await;
    w.wait_entry("the gateway marked the mite disconnected", |e| !e.connected).await;
    eventually("the mite sees the stream down", || async { (!mite.status().connected).then_some(()) }).await;
    assert!(!reqwest::get(format!("http://{health}/readyz")).await.unwrap().status().is_success());

    w.start_gateway().await;
    w.wait_entry("the mite reconnected by itself", |e| e.connected).await;
    eventually("the mite's second stream is up", || async { (mite.status().sessions == 2).then_some(()) }).await;
    // The gateway resends the current entry on reconnect; the mite checks it for drift only.
    eventually("the resent digest is recognised as already applied", || async {
        (metric(health, "varroa_mite_applies_total{outcome=\"unchanged\"}").await >= 1).then_some(())
    })
    .await;
    assert_eq!(w.jenkins.reloads().len(), reloads, "the same digest is not applied twice");

    // Drift by hand, then a restart of the stream: the digest is applied again, once.
    w.jenkins.drift("jenkins:\n  systemMessage: clicked in the UI\n").unwrap();
    w.gw.take().unwrap().shutdown().await;
    w.start_gateway().await;
    eventually("the drifted configuration is applied again", || async {
        (w.jenkins.reloads().len() == reloads + 1).then_some(())
    })
    .await;
    assert_eq!(w.system_message().as_deref(), Some("once"));
    mite.shutdown().await;
}

#[tokio::test]
async fn with_jenkins_down_the_stream_stays_up_and_the_state_says_so() {
    let w = World::start().await;
    let mite = w.mite().await;
    w.wait_entry("connected with a version", |e| e.connected && e.observation.version.is_some()).await;
    let sessions = mite.status().sessions;

    w.jenkins.refuse_connections();
    let e =
        w.wait_entry("the entry says Jenkins does not answer", |e| e.observation.version.as_deref() == Some("")).await;
    assert!(e.connected);
    assert!(matches!(mite.jenkins(), JenkinsView::Down(_)), "{:?}", mite.jenkins());
    // Heartbeats keep going while Jenkins is down.
    let hb = e.last_heartbeat.unwrap();
    w.wait_entry("a later heartbeat", |e| e.connected && e.last_heartbeat.is_some_and(|t| t > hb)).await;

    // A desired configuration written meanwhile is applied once Jenkins is back.
    w.put_desired("sha256:later", "jenkins:\n  systemMessage: later\n").await;
    w.jenkins.accept_connections();
    let e = w
        .wait_entry("Jenkins is back and the configuration applied", |e| {
            e.observation.version.as_deref() == Some("2.479.3") && applied(e, "sha256:later") == Some(true)
        })
        .await;
    assert!(e.connected);
    assert_eq!(mite.status().sessions, sessions, "the stream never dropped");
    mite.shutdown().await;
}

#[tokio::test]
async fn a_certificate_for_another_controller_is_refused_and_the_mite_keeps_retrying() {
    let w = World::start().await;
    w.write_mite_cert(NS, "someone-else", "other");
    let mite = link::start(w.settings("other")).await.unwrap();
    let status = eventually("the mite has been refused twice", || async {
        let s = mite.status();
        (s.failures >= 2).then_some(s)
    })
    .await;
    let err = status.last_error.unwrap();
    assert!(err.contains("refused") && err.contains("PermissionDenied"), "{err}");
    assert!(err.contains("fix:"), "{err}");
    assert!(!status.connected && status.sessions == 0);
    assert!(w.entry().await.is_none(), "no state for a refused mite");
    mite.shutdown().await;
}

#[tokio::test]
async fn the_binary_runs_from_the_operators_environment_and_exits_cleanly_on_sigterm() {
    let w = World::start().await;
    let t = w.dir.path().join("mite");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-mite"))
        .arg("run")
        .env_clear()
        .env("VARROA_CONTROLLER", CTRL)
        .env("VARROA_NAMESPACE", NS)
        .env("VARROA_GATEWAY_ENDPOINT", w.grpc_addr.to_string())
        .env("VARROA_GATEWAY_SERVER_NAME", "localhost")
        .env("VARROA_JENKINS_URL", w.jenkins.url())
        .env("POD_NAME", "ci-0")
        .env("VARROA_TLS_CERT", t.join("tls.crt"))
        .env("VARROA_TLS_KEY", t.join("tls.key"))
        .env("VARROA_TLS_CA", t.join("ca.crt"))
        .env("VARROA_JENKINS_USER", "admin")
        .env("VARROA_JENKINS_TOKEN_FILE", w.dir.path().join("jenkins-token"))
        .env("VARROA_CASC_DIR", w.dir.path().join("casc"))
        .env("VARROA_OBSERVE_INTERVAL_SECONDS", "1")
        .env("VARROA_HEALTH_LISTEN", "127.0.0.1:0")
        .env("VARROA_PLUGIN_LISTEN", "off")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    w.wait_entry("the binary's stream is up", |e| e.connected && e.jenkins_version == "2.479.3").await;
    w.put_desired("sha256:bin", "jenkins:\n  systemMessage: from the binary\n").await;
    w.wait_entry("applied by the binary", |e| applied(e, "sha256:bin") == Some(true)).await;
    assert_eq!(w.system_message().as_deref(), Some("from the binary"));

    let pid = child.id().unwrap() as libc::pid_t;
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(DEADLINE, child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
    w.wait_entry("the gateway saw the stream close", |e| !e.connected).await;
}

#[tokio::test]
async fn a_bad_setting_exits_non_zero_naming_the_flag_and_the_fix() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-mite"))
        .arg("run")
        .env_clear()
        .env("VARROA_CONTROLLER", CTRL)
        .env("VARROA_NAMESPACE", NS)
        .env("VARROA_GATEWAY_ENDPOINT", "http://gw:8443")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--gateway-endpoint (VARROA_GATEWAY_ENDPOINT)") && err.contains("fix:"), "{err}");
}

#[tokio::test]
async fn a_slow_jenkins_is_reported_as_not_answering_and_the_stream_stays_up() {
    let w = World::start().await;
    let mite = w.mite().await;
    w.wait_entry("connected with a version", |e| e.connected && e.observation.version.is_some()).await;
    // Slower than the mite's 2 s per-request limit.
    w.jenkins.set_delay(Duration::from_secs(3));
    let e =
        w.wait_entry("the entry says Jenkins does not answer", |e| e.observation.version.as_deref() == Some("")).await;
    assert!(e.connected);
    match mite.jenkins() {
        JenkinsView::Down(why) => assert!(why.contains("did not answer"), "{why}"),
        other => panic!("{other:?}"),
    }
    w.jenkins.set_delay(Duration::ZERO);
    w.wait_entry("Jenkins answers again", |e| e.connected && e.observation.version.as_deref() == Some("2.479.3")).await;
    assert_eq!(mite.status().sessions, 1, "the stream never dropped");
    mite.shutdown().await;
}

#[tokio::test]
async fn sigterm_while_the_gateway_is_unreachable_exits_promptly() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let ca = CertificateAuthority::generate("varroa test gateway CA", DAY).unwrap();
    let cert = ca.issue_mite(&MiteIdentity::new(NS, CTRL), DAY, SystemTime::now()).unwrap();
    std::fs::write(dir.path().join("tls.crt"), &cert.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &cert.key_pem).unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca.cert_pem()).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-mite"))
        .args(["run", "--namespace", NS, "--controller", CTRL, "--gateway-endpoint"])
        .arg(closed.to_string())
        .arg("--jenkins-url")
        .arg(format!("http://{closed}"))
        .arg("--tls-cert")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key")
        .arg(dir.path().join("tls.key"))
        .arg("--tls-ca")
        .arg(dir.path().join("ca.crt"))
        .args(["--health-listen", "off", "--plugin-listen", "off", "--cell", "0"])
        .env_clear()
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Wait until it has tried (and failed) to dial, by its log.
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    tokio::time::timeout(DEADLINE, async {
        use tokio::io::AsyncBufReadExt;
        while !log.contains("reconnecting") {
            if stderr.read_line(&mut log).await.unwrap() == 0 {
                break;
            }
        }
    })
    .await
    .unwrap();
    assert!(log.contains("cannot connect to the gateway"), "{log}");
    let pid = child.id().unwrap() as libc::pid_t;
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
}
