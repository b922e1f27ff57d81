//! The mite's Jenkins client and apply against the Jenkins double, over real HTTP.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use varroa_jenkins_double::{JenkinsDouble, Options, Plugin};
use varroa_mite::apply::{Applier, ApplyError, DesiredConfig};
use varroa_mite::jenkins::{ClientConfig, JenkinsClient, JenkinsError, plugins_digest};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

struct Setup {
    double: JenkinsDouble,
    dir: tempfile::TempDir,
    client: Arc<JenkinsClient>,
}

impl Setup {
    fn casc_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("casc")
    }
}

/// A double with security on and JCasC reading `<tmp>/casc`, holding a valid configuration.
async fn setup(tweak: impl FnOnce(&mut Options)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let casc = dir.path().join("casc");
    std::fs::create_dir(&casc).unwrap();
    std::fs::write(casc.join("jenkins.yaml"), "jenkins:\n  systemMessage: boot\n").unwrap();
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
    let mut opts =
        Options { api_token: Some(TOKEN.into()), casc_config: Some(casc.display().to_string()), ..Default::default() };
    tweak(&mut opts);
    let double = JenkinsDouble::start(opts).await.unwrap();
    let client =
        Arc::new(JenkinsClient::new(ClientConfig::new(&double.url(), "admin", dir.path().join("token"))).unwrap());
    Setup { double, dir, client }
}

fn desired(digest: &str, yaml: &str) -> DesiredConfig {
    DesiredConfig { digest: digest.into(), files: BTreeMap::from([("jenkins.yaml".to_string(), yaml.to_string())]) }
}

fn on_disk(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read_to_string(e.path()).unwrap()))
        .collect()
}

#[tokio::test]
async fn observe_reads_version_mode_queue_executors_and_plugins() {
    let s = setup(|o| {
        o.version = "2.479.3".into();
        o.num_executors = 3;
    })
    .await;
    s.double.set_plugins(vec![Plugin::new("git", "5.7.0"), Plugin::new("credentials", "1415.v831096eb_5534")]);
    s.double.set_queue_length(2);
    s.double.set_busy_executors(1);
    let o = s.client.observe().await.unwrap();
    assert_eq!(o.version, "2.479.3");
    assert_eq!(o.mode, "NORMAL");
    assert!(!o.quieting_down);
    assert_eq!((o.queue_length, o.busy_executors, o.idle_executors), (2, 1, 2));
    assert_eq!(o.idle_since_unix, None, "Jenkins has work");
    assert_eq!(o.plugins_digest, plugins_digest([("credentials", "1415.v831096eb_5534"), ("git", "5.7.0")]));
}

#[tokio::test]
async fn deltas_carry_only_what_changed_and_idle_time_is_tracked() {
    let s = setup(|_| {}).await;
    let first = s.client.observe().await.unwrap();
    let since = first.idle_since_unix.expect("an empty Jenkins is idle");
    assert!(first.idle_for(std::time::SystemTime::now()).is_some());
    let second = s.client.observe().await.unwrap();
    assert!(second.delta(&first).is_empty(), "an idle Jenkins produces no delta: {:?}", second.delta(&first));
    assert_eq!(second.idle_since_unix, Some(since));

    s.double.set_queue_length(1);
    s.double.set_version("2.480");
    let third = s.client.observe().await.unwrap();
    let d = third.delta(&second);
    assert_eq!(d.queue_length, Some(1));
    assert_eq!(d.idle_since_unix, Some(None));
    assert_eq!(d.version.as_deref(), Some("2.480"));
    assert_eq!((d.mode.clone(), d.busy_executors, d.plugins_digest.clone()), (None, None, None));

    s.double.set_queue_length(0);
    let fourth = s.client.observe().await.unwrap();
    assert!(fourth.idle_since_unix.unwrap() >= since, "idle again from now on");
    assert_eq!(fourth.delta(&third).queue_length, Some(0));
}

#[tokio::test]
async fn quiet_down_with_a_token_needs_no_crumb() {
    let s = setup(|_| {}).await;
    s.client.quiet_down(Some("hibernating")).await.unwrap();
    assert!(s.double.quieting_down());
    assert!(s.client.observe().await.unwrap().quieting_down);
    s.client.cancel_quiet_down().await.unwrap();
    assert!(!s.double.quieting_down());
}

#[tokio::test]
async fn crumbs_are_fetched_cached_and_refetched_when_refused() {
    // A password (not a token) in the file: Jenkins wants a crumb on every POST.
    let s = setup(|o| {
        o.api_token = None;
        o.password = Some(TOKEN.into());
    })
    .await;
    s.client.quiet_down(None).await.unwrap();
    assert!(s.double.quieting_down());
    s.double.rotate_crumbs();
    s.client.cancel_quiet_down().await.unwrap();
    assert!(!s.double.quieting_down(), "the refused crumb was replaced and the POST retried");
}

#[tokio::test]
async fn wrong_or_missing_credentials_are_clear_errors() {
    let s = setup(|_| {}).await;
    std::fs::write(s.dir.path().join("token"), "not-the-token").unwrap();
    let e = s.client.observe().await.unwrap_err();
    assert!(matches!(e, JenkinsError::Unauthorized { .. }), "{e}");
    assert!(e.to_string().contains("check that the API token in"), "{e}");

    std::fs::write(s.dir.path().join("token"), "  \n").unwrap();
    let e = s.client.observe().await.unwrap_err();
    assert!(matches!(e, JenkinsError::EmptyToken { .. }), "{e}");

    std::fs::remove_file(s.dir.path().join("token")).unwrap();
    let e = s.client.observe().await.unwrap_err();
    assert!(e.to_string().contains("cannot read the Jenkins API token"), "{e}");

    // The token is read on each use: writing it back is enough.
    std::fs::write(s.dir.path().join("token"), TOKEN).unwrap();
    s.client.observe().await.unwrap();

    // Anonymous requests get Jenkins' 403.
    let c = reqwest::Client::new();
    let r = c.get(format!("{}/api/json", s.double.url())).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn slow_failing_and_refusing_jenkins_give_clear_errors() {
    let s = setup(|_| {}).await;
    let mut cfg = ClientConfig::new(&s.double.url(), "admin", s.dir.path().join("token"));
    cfg.timeout = Duration::from_millis(300);
    let client = JenkinsClient::new(cfg).unwrap();

    s.double.set_delay(Duration::from_secs(2));
    let e = client.observe().await.unwrap_err();
    assert!(matches!(e, JenkinsError::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("did not answer"), "{e}");
    s.double.set_delay(Duration::ZERO);

    s.double.set_fail_500(true);
    let e = client.observe().await.unwrap_err();
    assert!(matches!(e, JenkinsError::Status { status: 500, .. }), "{e}");
    assert!(e.to_string().contains("Oops"), "{e}");
    s.double.set_fail_500(false);

    s.double.refuse_connections();
    let mut e = None;
    for _ in 0..100 {
        match client.observe().await {
            Err(err @ JenkinsError::Unreachable { .. }) => {
                e = Some(err);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(e.expect("refused").to_string().contains("unreachable"));
    s.double.accept_connections();
}

#[tokio::test]
async fn answers_are_bounded() {
    let s = setup(|_| {}).await;
    s.double.set_queue_length(50);
    let mut cfg = ClientConfig::new(&s.double.url(), "admin", s.dir.path().join("token"));
    cfg.max_body = 4096;
    let client = JenkinsClient::new(cfg).unwrap();
    let e = client.observe().await.unwrap_err();
    assert!(matches!(e, JenkinsError::TooLarge { limit: 4096, .. }), "{e}");
}

#[tokio::test]
async fn apply_writes_checks_reloads_and_reports_no_drift() {
    let s = setup(|_| {}).await;
    let mut applier = Applier::new(s.client.clone(), s.casc_dir());
    let want = desired("sha256:one", "jenkins:\n  systemMessage: hello\n  numExecutors: 4\n");
    let r = applier.apply(&want).await.unwrap();
    assert!(r.succeeded && r.applied, "{r:?}");
    assert_eq!(r.digest, "sha256:one");
    assert!(r.drift.is_empty(), "{r:?}");
    assert_eq!(s.double.live_config()["jenkins"]["systemMessage"], "hello");
    assert_eq!(s.double.applied_count(), 1);
    assert_eq!(on_disk(&s.casc_dir()), want.files, "exactly the desired files, no temporary left");
    assert_eq!(applier.state().last_applied.as_deref(), Some("sha256:one"));
    let o = s.client.observe().await.unwrap();
    assert_eq!(o.idle_executors, 4, "the reloaded numExecutors is live");
}

#[tokio::test]
async fn apply_refused_by_check_keeps_the_last_good_configuration() {
    let s = setup(|_| {}).await;
    let mut applier = Applier::new(s.client.clone(), s.casc_dir());
    let good = desired("sha256:good", "jenkins:\n  systemMessage: good\n");
    assert!(applier.apply(&good).await.unwrap().succeeded);

    let bad = DesiredConfig {
        digest: "sha256:bad".into(),
        files: BTreeMap::from([(
            "jenkins.yaml".to_string(),
            "jenkins:\n  systemMessage: bad\nalice:\n  hello: bob\n".to_string(),
        )]),
    };
    let r = applier.apply(&bad).await.unwrap();
    assert!(!r.succeeded && !r.applied);
    assert_eq!(r.digest, "sha256:bad");
    assert!(r.message.starts_with("No configurator found for the following root element: alice."), "{}", r.message);
    assert_eq!(on_disk(&s.casc_dir()), good.files, "the files went back to the last good ones");
    assert_eq!(s.double.live_config()["jenkins"]["systemMessage"], "good");
    assert_eq!(s.double.applied_count(), 1, "a refused configuration is never reloaded");
    assert_eq!(applier.state().last_applied.as_deref(), Some("sha256:good"));

    // Fixing the bundle clears it.
    let fixed = desired("sha256:fixed", "jenkins:\n  systemMessage: fixed\n");
    assert!(applier.apply(&fixed).await.unwrap().succeeded);
    assert_eq!(s.double.live_config()["jenkins"]["systemMessage"], "fixed");
}

#[tokio::test]
async fn the_same_digest_is_not_applied_twice() {
    let s = setup(|_| {}).await;
    let mut applier = Applier::new(s.client.clone(), s.casc_dir());
    let want = desired("sha256:one", "jenkins:\n  systemMessage: once\n");
    assert!(applier.apply(&want).await.unwrap().applied);
    let checks = s.double.check_count();
    let r = applier.apply(&want).await.unwrap();
    assert!(r.succeeded && !r.applied, "{r:?}");
    assert_eq!(s.double.applied_count(), 1);
    assert_eq!(s.double.check_count(), checks, "not even checked again");
}

#[tokio::test]
async fn drift_is_detected_and_the_same_digest_is_applied_again() {
    let s = setup(|_| {}).await;
    let mut applier = Applier::new(s.client.clone(), s.casc_dir());
    let want = desired("sha256:one", "jenkins:\n  systemMessage: wanted\n  numExecutors: 2\n");
    assert!(applier.apply(&want).await.unwrap().succeeded);

    assert!(applier.check_drift(&want).await.unwrap().is_empty());
    s.double.drift("jenkins:\n  systemMessage: clicked in the UI\n").unwrap();
    assert_eq!(applier.check_drift(&want).await.unwrap(), vec!["jenkins.systemMessage"]);
    let r = applier.apply(&want).await.unwrap();
    assert!(r.succeeded && r.applied, "drift makes the same digest apply again: {r:?}");
    assert!(r.drift.is_empty());
    assert_eq!(s.double.applied_count(), 2);
    assert_eq!(s.double.live_config()["jenkins"]["systemMessage"], "wanted");
}

#[tokio::test]
async fn drift_that_a_reload_does_not_fix_is_reported() {
    // JCasC reads CASC_JENKINS_CONFIG, a different directory from the one the mite writes:
    // the reload succeeds but Jenkins does not run what was asked, and the export says so.
    let s = setup(|_| {}).await;
    let elsewhere = s.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let mut applier = Applier::new(s.client.clone(), &elsewhere);
    let want = desired(
        "sha256:one",
        "jenkins:\n  systemMessage: wanted\n  numExecutors: 2\nunclassified:\n  location:\n    url: https://ci.example.com/\n",
    );
    let r = applier.apply(&want).await.unwrap();
    assert!(r.succeeded, "{r:?}");
    assert_eq!(r.drift, vec!["jenkins.systemMessage", "unclassified.location.url"]);
    assert!(r.message.contains("differs at jenkins.systemMessage"), "{}", r.message);
}

#[tokio::test]
async fn apply_when_jenkins_fails_is_an_error_and_restores_the_files() {
    let s = setup(|_| {}).await;
    let mut applier = Applier::new(s.client.clone(), s.casc_dir());
    let before = on_disk(&s.casc_dir());
    s.double.set_fail_500(true);
    let e = applier.apply(&desired("sha256:x", "jenkins:\n  systemMessage: x\n")).await.unwrap_err();
    assert!(matches!(e, ApplyError::Jenkins { source: JenkinsError::Status { status: 500, .. }, .. }), "{e}");
    assert!(e.to_string().starts_with("applying sha256:x: Jenkins answered 500"), "{e}");
    assert_eq!(on_disk(&s.casc_dir()), before);
    assert_eq!(applier.state().last_applied, None);
}

#[tokio::test]
async fn several_files_and_removed_files() {
    let s = setup(|_| {}).await;
    let mut applier = Applier::new(s.client.clone(), s.casc_dir());
    let want = DesiredConfig {
        digest: "sha256:two-files".into(),
        files: BTreeMap::from([
            ("10-jenkins.yaml".to_string(), "jenkins:\n  systemMessage: split\n".to_string()),
            ("20-location.yaml".to_string(), "unclassified:\n  location:\n    url: https://ci/\n".to_string()),
        ]),
    };
    let r = applier.apply(&want).await.unwrap();
    assert!(r.succeeded && r.drift.is_empty(), "{r:?}");
    assert_eq!(on_disk(&s.casc_dir()), want.files, "the old jenkins.yaml is gone: JCasC reads every yaml there");
    assert_eq!(s.double.live_config()["unclassified"]["location"]["url"], "https://ci/");

    let bad_name = desired("sha256:bad-name", "jenkins: {}\n");
    let bad_name =
        DesiredConfig { files: BTreeMap::from([("../escape.yaml".to_string(), "x: 1".to_string())]), ..bad_name };
    let r = applier.apply(&bad_name).await.unwrap();
    assert!(!r.succeeded);
    assert!(r.message.contains("must be a file name without directories"), "{}", r.message);

    let empty = DesiredConfig { digest: "sha256:empty".into(), files: BTreeMap::new() };
    let r = applier.apply(&empty).await.unwrap();
    assert!(!r.succeeded && r.message.contains("has no files"), "{r:?}");
    assert_eq!(on_disk(&s.casc_dir()), want.files, "nothing removed");
}
