//! `varroa-mite install-plugins`, the real binary, against a small update site served here.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// An update site: path -> content, with a number of 503s to answer first per path.
#[derive(Default)]
struct Site {
    files: HashMap<String, Vec<u8>>,
    fail_first: HashMap<String, u32>,
    hits: Vec<String>,
}

async fn serve(site: Arc<Mutex<Site>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let site = site.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let site = site.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        let mut s = site.lock().unwrap();
                        s.hits.push(path.clone());
                        let rsp = match s.fail_first.get_mut(&path) {
                            Some(n) if *n > 0 => {
                                *n -= 1;
                                let mut r = Response::new(Full::new(Bytes::from_static(b"busy")));
                                *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                                r
                            }
                            _ => match s.files.get(&path) {
                                Some(b) => Response::new(Full::new(Bytes::from(b.clone()))),
                                None => {
                                    let mut r = Response::new(Full::new(Bytes::from_static(b"not found")));
                                    *r.status_mut() = StatusCode::NOT_FOUND;
                                    r
                                }
                            },
                        };
                        Ok::<_, std::convert::Infallible>(rsp)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|b| format!("{b:02x}")).collect()
}

struct Case {
    dir: tempfile::TempDir,
    site: Arc<Mutex<Site>>,
    url: String,
}

impl Case {
    async fn new(plugins: &[(&str, &str, &[u8])]) -> Case {
        let dir = tempfile::tempdir().unwrap();
        let mut site = Site::default();
        let mut txt = String::new();
        let mut sums = String::new();
        for (name, version, content) in plugins {
            site.files.insert(format!("/download/plugins/{name}/{version}/{name}.hpi"), content.to_vec());
            txt.push_str(&format!("{name}:{version}\n"));
            sums.push_str(&format!("{}  {name}.hpi\n", sha(content)));
        }
        std::fs::write(dir.path().join("plugins.txt"), txt).unwrap();
        std::fs::write(dir.path().join("plugins-sha256.txt"), sums).unwrap();
        std::fs::create_dir(dir.path().join("dest")).unwrap();
        let site = Arc::new(Mutex::new(site));
        let url = serve(site.clone()).await;
        Case { dir, site, url }
    }

    fn dest(&self) -> std::path::PathBuf {
        self.dir.path().join("dest")
    }

    async fn run(&self) -> std::process::Output {
        let p = |f: &str| self.dir.path().join(f);
        tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-mite"))
            .arg("install-plugins")
            .arg("--plugins")
            .arg(p("plugins.txt"))
            .arg("--sha256")
            .arg(p("plugins-sha256.txt"))
            .arg("--update-site")
            .arg(format!("{}/", self.url))
            .arg("--dest")
            .arg(self.dest())
            .args(["--initial-backoff-ms", "10", "--max-backoff-ms", "50", "--attempts", "4"])
            .env("NO_COLOR", "1")
            .output()
            .await
            .unwrap()
    }

    fn hits(&self) -> Vec<String> {
        self.site.lock().unwrap().hits.clone()
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn installs_verified_plugins_as_jpi() {
    let c = Case::new(&[("git", "5.7.0", b"git plugin bytes"), ("job-dsl", "1.90", b"job-dsl bytes")]).await;
    std::fs::write(c.dest().join("git.hpi"), "an older copy").unwrap();
    let out = c.run().await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(listing(&c.dest()), vec!["git.jpi", "job-dsl.jpi"], "stale .hpi removed, nothing temporary left");
    assert_eq!(std::fs::read(c.dest().join("git.jpi")).unwrap(), b"git plugin bytes");
    assert!(String::from_utf8_lossy(&out.stdout).contains("installed 2 plugin(s)"));

    // Run again (a restarted pod): files with the locked digest are kept, nothing is downloaded.
    let before = c.hits().len();
    let out = c.run().await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.hits().len(), before);
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 downloaded, 2 already in place"));
}

#[tokio::test]
async fn a_digest_mismatch_exits_non_zero_naming_plugin_and_digests_and_installs_nothing() {
    let c = Case::new(&[("git", "5.7.0", b"git plugin bytes"), ("job-dsl", "1.90", b"job-dsl bytes")]).await;
    let served = b"tampered job-dsl";
    c.site.lock().unwrap().files.insert("/download/plugins/job-dsl/1.90/job-dsl.hpi".into(), served.to_vec());
    let out = c.run().await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("plugin job-dsl 1.90: SHA-256 mismatch"), "{err}");
    assert!(err.contains(&format!("expected {}", sha(b"job-dsl bytes"))), "{err}");
    assert!(err.contains(&format!("got {}", sha(served))), "{err}");
    assert!(listing(&c.dest()).is_empty(), "not even the good plugin, and no partial file: {:?}", listing(&c.dest()));
}

/// plugin-versions.json as jenkins-infra/update-center2 writes it: every version of a plugin,
/// each with its sha256 in base64 (and other fields the mite ignores).
fn plugin_versions(entries: &[(&str, &str, &[u8])]) -> Vec<u8> {
    use base64::Engine as _;
    let mut plugins = serde_json::Map::new();
    for (name, version, content) in entries {
        let sha = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(content));
        let versions = plugins.entry(name.to_string()).or_insert_with(|| serde_json::json!({}));
        versions[*version] = serde_json::json!({
            "buildDate": "Jan 01, 2025", "name": name, "requiredCore": "2.479.1", "sha1": "AAAA",
            "sha256": sha, "url": format!("https://updates.example/download/plugins/{name}/{version}/{name}.hpi"),
            "version": version, "dependencies": [{"name": "structs", "optional": false, "version": "1.0"}],
        });
    }
    serde_json::to_vec(&serde_json::json!({"generationTimestamp": "2025-01-01T00:00:00Z", "plugins": plugins})).unwrap()
}

const PLUGIN_INFO: &str = "/current/plugin-versions.json";

/// A Controller's pin the version profile does not lock (timestamper:1.28): plugins.txt lists it,
/// plugins-sha256.txt does not.
async fn case_with_an_unlocked_pin(served: &[u8]) -> Case {
    let c = Case::new(&[("git", "5.7.0", b"git plugin bytes")]).await;
    std::fs::write(c.dir.path().join("plugins.txt"), "git:5.7.0\ntimestamper:1.28\n").unwrap();
    c.site.lock().unwrap().files.insert("/download/plugins/timestamper/1.28/timestamper.hpi".into(), served.to_vec());
    c
}

#[tokio::test]
async fn an_unlocked_plugin_is_verified_against_the_digest_the_update_site_publishes() {
    let c = case_with_an_unlocked_pin(b"timestamper 1.28 bytes").await;
    let info = plugin_versions(&[
        ("timestamper", "1.27", b"timestamper 1.27 bytes"),
        ("timestamper", "1.28", b"timestamper 1.28 bytes"),
        ("git", "5.7.0", b"another git, which the lock overrides"),
        ("ansicolor", "1.0.4", b"not wanted"),
    ]);
    c.site.lock().unwrap().files.insert(PLUGIN_INFO.into(), info);
    let out = c.run().await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(listing(&c.dest()), vec!["git.jpi", "timestamper.jpi"], "no temporary file left");
    assert_eq!(std::fs::read(c.dest().join("timestamper.jpi")).unwrap(), b"timestamper 1.28 bytes");
    assert_eq!(c.hits().iter().filter(|h| *h == PLUGIN_INFO).count(), 1, "the metadata is read once: {:?}", c.hits());

    // A tampered file of an unlocked plugin is refused like a locked one, naming where the
    // expected digest came from; nothing is installed.
    let c = case_with_an_unlocked_pin(b"tampered").await;
    c.site
        .lock()
        .unwrap()
        .files
        .insert(PLUGIN_INFO.into(), plugin_versions(&[("timestamper", "1.28", b"timestamper 1.28 bytes")]));
    let out = c.run().await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("plugin timestamper 1.28: SHA-256 mismatch"), "{err}");
    assert!(
        err.contains(&format!("expected {} (published in {}{PLUGIN_INFO})", sha(b"timestamper 1.28 bytes"), c.url)),
        "{err}"
    );
    assert!(listing(&c.dest()).is_empty(), "{:?}", listing(&c.dest()));
}

#[tokio::test]
async fn a_plugin_neither_locked_nor_published_is_refused_before_any_download() {
    let c = case_with_an_unlocked_pin(b"timestamper 1.28 bytes").await;
    c.site
        .lock()
        .unwrap()
        .files
        .insert(PLUGIN_INFO.into(), plugin_versions(&[("timestamper", "1.27", b"an older one")]));
    let out = c.run().await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("refusing to install unverified plugins: timestamper 1.28 is not locked")
            && err
                .contains("publishes no SHA-256 for it: add it to the JenkinsVersionProfile's plugins with its sha256"),
        "{err}"
    );
    assert_eq!(c.hits(), vec![PLUGIN_INFO.to_string()], "nothing but the metadata was downloaded");
    assert!(listing(&c.dest()).is_empty());

    // Metadata the site does not have is an error naming it (a 404 is not retried).
    let c = case_with_an_unlocked_pin(b"timestamper 1.28 bytes").await;
    let out = c.run().await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "reading the update site's plugin metadata {}{PLUGIN_INFO} (for the unlocked plugins timestamper 1.28)",
            c.url
        )),
        "{err}"
    );
    assert!(err.contains("404"), "{err}");
    assert!(listing(&c.dest()).is_empty());
}

#[tokio::test]
async fn with_plugin_info_none_every_unlocked_plugin_is_refused() {
    let c = case_with_an_unlocked_pin(b"timestamper 1.28 bytes").await;
    let p = |f: &str| c.dir.path().join(f);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-mite"))
        .arg("install-plugins")
        .arg("--plugins")
        .arg(p("plugins.txt"))
        .arg("--sha256")
        .arg(p("plugins-sha256.txt"))
        .args(["--update-site", &c.url, "--plugin-info", "none"])
        .arg("--dest")
        .arg(c.dest())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("refusing to install unverified plugins: timestamper has no SHA-256"), "{err}");
    assert!(c.hits().is_empty(), "nothing downloaded");
    assert!(listing(&c.dest()).is_empty());
}

#[tokio::test]
async fn transient_503s_are_retried() {
    let c = Case::new(&[("git", "5.7.0", b"git plugin bytes")]).await;
    c.site.lock().unwrap().fail_first.insert("/download/plugins/git/5.7.0/git.hpi".into(), 2);
    let out = c.run().await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.hits().len(), 3, "two 503s, then the file");
    assert_eq!(listing(&c.dest()), vec!["git.jpi"]);
}

#[tokio::test]
async fn a_permanent_failure_leaves_nothing_partial_in_dest() {
    let c = Case::new(&[("git", "5.7.0", b"git plugin bytes"), ("gone", "1.0", b"gone bytes")]).await;
    c.site.lock().unwrap().files.remove("/download/plugins/gone/1.0/gone.hpi");
    let out = c.run().await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("plugin gone 1.0: downloading"), "{err}");
    assert!(err.contains("404"), "{err}");
    assert_eq!(c.hits().iter().filter(|h| h.contains("gone")).count(), 1, "a 404 is not retried");
    assert!(listing(&c.dest()).is_empty(), "{:?}", listing(&c.dest()));

    // Retries run out on a site that keeps failing.
    c.site.lock().unwrap().fail_first.insert("/download/plugins/git/5.7.0/git.hpi".into(), 100);
    std::fs::write(c.dir.path().join("plugins.txt"), "git:5.7.0\n").unwrap();
    let out = c.run().await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("failed after 4 attempt(s): HTTP 503"), "{}", stderr(&out));
    assert!(listing(&c.dest()).is_empty());
}

#[tokio::test]
async fn a_malformed_lock_names_the_line() {
    let c = Case::new(&[("git", "5.7.0", b"git")]).await;
    std::fs::write(c.dir.path().join("plugins-sha256.txt"), "nothex  git.hpi\n").unwrap();
    let out = c.run().await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("plugins-sha256.txt line 1: \"nothex\" is not a SHA-256"), "{}", stderr(&out));
}

#[tokio::test]
async fn installed_plugins_are_what_jenkins_reports_and_the_digest_is_plugins_txts() {
    // The chain a pod runs: plugins-init installs the lock, Jenkins (the double) loads the
    // plugins directory, the mite observes it. The observed digest is the SHA-256 of plugins.txt.
    let c = Case::new(&[
        ("git", "5.7.0", b"Short-Name: git\nPlugin-Version: 5.7.0\n"),
        ("credentials", "1415.v831096eb_5534", b"Short-Name: credentials\nPlugin-Version: 1415.v831096eb_5534\n"),
    ])
    .await;
    std::fs::write(c.dir.path().join("plugins.txt"), "credentials:1415.v831096eb_5534\ngit:5.7.0\n").unwrap();
    let out = c.run().await;
    assert!(out.status.success(), "{}", stderr(&out));

    let token = c.dir.path().join("token");
    std::fs::write(&token, "t").unwrap();
    let double = varroa_jenkins_double::JenkinsDouble::start(varroa_jenkins_double::Options {
        api_token: Some("t".into()),
        plugins_dir: Some(c.dest()),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = varroa_mite::jenkins::JenkinsClient::new(varroa_mite::jenkins::ClientConfig::new(
        &double.url(),
        "admin",
        &token,
    ))
    .unwrap();
    let o = client.observe().await.unwrap();
    let txt = std::fs::read(c.dir.path().join("plugins.txt")).unwrap();
    assert_eq!(o.plugins_digest, format!("sha256:{}", sha(&txt)));
}
