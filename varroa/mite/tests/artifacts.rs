//! Archived artifacts end to end, every process real: the Jenkins double plays the Varroa plugin
//! (a job that declares artifacts; when its build finishes the double asks the mite,
//! `POST /v1/artifacts/{job}/{build}`, and `PUT`s each file to its presigned URL); the real mite
//! forwards the request over its gRPC stream with mutual TLS to the real gateway, which signs the
//! URLs for a real moto S3 server behind the SigV4 check (varroa_blobs::presign_check: moto does
//! not check presigned signatures or expiry itself). What the tests check is what a user checks:
//! the HTTP answers, the objects under the cell's prefix, their bytes.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use varroa_blobs::presign_check::PresignCheck;
use varroa_blobs::testing::MotoServer;
use varroa_blobs::{ArtifactKey, Artifacts, BlobStore};
use varroa_jenkins_double::artifacts::{ArtifactConfig, pattern};
use varroa_jenkins_double::builds::JobConfig;
use varroa_jenkins_double::plugin::PluginConfig;
use varroa_jenkins_double::{JenkinsDouble, Options};
use varroa_link::proto::v1::{self as pb, gateway_message, mite_link_client::MiteLinkClient, mite_message};
use varroa_mite::link::{self, MiteHandle};

const BUCKET: &str = "varroa-artifacts";

struct S3 {
    moto: MotoServer,
    check: PresignCheck,
}

impl S3 {
    fn start() -> S3 {
        let moto = MotoServer::start().unwrap();
        moto.create_bucket(BUCKET).unwrap();
        let check =
            PresignCheck::start(format!("127.0.0.1:{}", moto.port()).parse().unwrap(), "varroa-test-secret").unwrap();
        S3 { moto, check }
    }
    fn settings(&self) -> varroa_blobs::StoreSettings {
        self.moto.settings(&self.check.endpoint(), BUCKET, "prod")
    }
}

async fn connected(mite: &MiteHandle) {
    eventually("the mite's stream is up", || async { mite.status().connected.then_some(()) }).await;
}

/// `POST /v1/artifacts/<path>` with `body`, as the plugin sends it.
async fn post(addr: SocketAddr, token: &str, path: &str, body: serde_json::Value) -> Reply {
    let rsp = reqwest::Client::new()
        .post(format!("http://{addr}/v1/artifacts/{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send();
    let rsp = tokio::time::timeout(DEADLINE, rsp).await.unwrap().unwrap();
    let status = rsp.status().as_u16();
    let retry_after = rsp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(|v| v.parse().unwrap());
    let content_type = rsp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let body = serde_json::from_slice(&rsp.bytes().await.unwrap()).unwrap();
    Reply { status, retry_after, content_type, allow: None, body }
}

/// A double playing the plugin against `mite`, with one job that archives `files`.
async fn double(w: &World, mite: &MiteHandle, cell_dir: &str, files: Vec<ArtifactConfig>) -> JenkinsDouble {
    let job = JobConfig { artifacts: files, ..JobConfig::simple("team/app", 1, 1) };
    JenkinsDouble::start(Options {
        build_jobs: vec![job],
        plugin: Some(PluginConfig {
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_millis(200),
            ..PluginConfig::new(
                format!("http://{}", mite.plugin_addr.unwrap()),
                w.dir.path().join("plugin").join(cell_dir).join("token"),
            )
        }),
        time_scale: 0.0,
        ..Default::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doubles_artifacts_land_under_its_cells_prefix_with_their_bytes() {
    let s3 = S3::start();
    let w = World::start_with_log_store(Some(s3.settings())).await;
    let settings = varroa_mite::settings::RunSettings { cell: 1, ..w.settings("mite") };
    let mite = link::start(settings).await.unwrap();
    connected(&mite).await;
    let files = vec![
        ArtifactConfig { path: "target/app.jar".into(), content: None, size: 300_000 },
        ArtifactConfig { path: "reports/index #1.html".into(), content: Some("<h1>ok</h1>".into()), size: 0 },
    ];
    let jenkins = double(&w, &mite, "mite", files).await;
    let number = jenkins.builds().run("team/app").await.unwrap();
    let uploads = jenkins.builds().artifacts().unwrap().clone();
    tokio::time::timeout(DEADLINE, uploads.wait_builds(1)).await.expect("the upload ended in time");
    let c = jenkins.artifact_counters().unwrap();
    assert_eq!((c.uploaded_builds, c.files, c.bytes), (1, 2, 300_011), "{c:?}");

    let artifacts = Artifacts::new(BlobStore::open(&s3.settings()).unwrap());
    let key = ArtifactKey::new("test", NS, CTRL, 1, "team/app", number).unwrap();
    let listed = artifacts.list(&key).await.unwrap();
    let listed: Vec<(&str, u64)> = listed.iter().map(|a| (a.path.as_str(), a.size)).collect();
    assert_eq!(listed, vec![("reports/index #1.html", 11), ("target/app.jar", 300_000)]);
    assert_eq!(artifacts.read(&key, "target/app.jar").await.unwrap().unwrap(), pattern("target/app.jar", 300_000));
    assert_eq!(&artifacts.read(&key, "reports/index #1.html").await.unwrap().unwrap()[..], b"<h1>ok</h1>");
    assert_eq!(artifacts.cells("test", NS, CTRL).await.unwrap(), vec![1], "only the writing cell's prefix");
    assert_eq!(metric(w.gw.as_ref().unwrap().health_addr, "varroa_gateway_artifact_urls_total").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_refused_at_the_mite_and_at_the_gateway_and_no_url_leaves_the_cells_prefix() {
    let s3 = S3::start();
    let w = World::start_with_log_store(Some(s3.settings())).await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    connected(&mite).await;
    let addr = mite.plugin_addr.unwrap();
    let token = plugin_token(&settings);
    let one = |path: &str, size: u64| serde_json::json!({"v": 1, "files": [{"path": path, "size": size}]});

    // At the mite: 400 naming the field, nothing forwarded.
    for (path, body, field) in [
        ("team/app/1", one("../cell-1/team%2Fapp/1/x", 1), "files[0].path"),
        ("team/app/1", one("/etc/passwd", 1), "files[0].path"),
        ("team/app/1", one("a//b", 1), "files[0].path"),
        ("team/app/1", one("a\u{7}b", 1), "files[0].path"),
        ("team/app/1", one("a\\..\\b", 1), "files[0].path"),
        ("team/app/1", one("big.iso", (5 << 30) + 1), "files[0].size"),
        (
            "team/app/1",
            serde_json::json!({"v": 1, "files": (0..1001).map(|i| serde_json::json!({"path": format!("f{i}"), "size": 1})).collect::<Vec<_>>()}),
            "files",
        ),
        ("team/app/1", serde_json::json!({"v": 2, "files": []}), "v"),
        ("team/a%0Ap/1", one("x", 1), "job"),
        ("team/app/0", one("x", 1), "build"),
    ] {
        let r = post(addr, &token, path, body).await;
        assert_eq!(r.status, 400, "{path}: {r:?}");
        assert!(r.error().starts_with(field), "{path}: {field}: {r:?}");
    }
    let r = post(addr, "wrong", "team/app/1", one("x", 1)).await;
    assert_eq!(r.status, 401, "{r:?}");

    // The valid request: one URL under cell 0's own prefix, the job one encoded segment.
    let r = post(addr, &token, "..%2Fcell-1/1", one("x.txt", 1)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let url = r.body["uploads"][0]["url"].as_str().unwrap().to_owned();
    let prefix =
        format!("{}/{BUCKET}/prod/artifacts/test/{NS}/{CTRL}/cell-0/%252E.%252Fcell-1/1/x.txt?", s3.check.endpoint());
    assert!(url.starts_with(&prefix), "{url}");
    assert!(r.body["expires"].as_str().unwrap().ends_with('Z'), "{r:?}");
    // That URL cannot write elsewhere: another cell's prefix fails the signature at the store.
    let http = reqwest::Client::new();
    let other = http.put(url.replace("/cell-0/", "/cell-1/")).body("x").send().await.unwrap();
    assert_eq!(other.status(), 403);
    assert_eq!(http.put(&url).body("x").send().await.unwrap().status(), 200);

    // At the gateway, a mite that forwards what a mite never would: refused naming the field.
    let d = w.dir.path().join("mite");
    let ca = std::fs::read_to_string(d.join("ca.crt")).unwrap();
    let cert = std::fs::read_to_string(d.join("tls.crt")).unwrap();
    let key = std::fs::read_to_string(d.join("tls.key")).unwrap();
    let mut address = varroa_link::client::GatewayAddress::new(format!("https://{}", w.grpc_addr));
    address.server_name = Some("localhost".into());
    let channel = varroa_link::client::channel(&address, &ca, &cert, &key).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel::<pb::MiteMessage>(8);
    let hello = pb::Hello {
        identity: varroa_pki::MiteIdentity::new(NS, CTRL).uri(),
        cell: 3,
        mite_version: "test".into(),
        ..Default::default()
    };
    tx.send(pb::MiteMessage { kind: Some(mite_message::Kind::Hello(hello)) }).await.unwrap();
    let outbound = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut inbound = MiteLinkClient::new(channel).connect(outbound).await.unwrap().into_inner();
    let mut ask = async |id: u64, job: &str, build: u64, path: &str| {
        let files = vec![pb::ArtifactFile { path: path.into(), size: 1 }];
        let req = pb::ArtifactRequest { id, job: job.into(), build, files };
        tx.send(pb::MiteMessage { kind: Some(mite_message::Kind::ArtifactRequest(req)) }).await.unwrap();
        loop {
            let m = tokio::time::timeout(DEADLINE, inbound.message()).await.unwrap().unwrap().unwrap();
            if let Some(gateway_message::Kind::ArtifactAnswer(a)) = m.kind {
                assert_eq!(a.id, id);
                return a;
            }
        }
    };
    for (id, job, build, path, field) in [
        (1, "team/app", 1, "../../cell-0/team%2Fapp/1/x", "files[0].path"),
        (2, "team/app", 1, "/abs", "files[0].path"),
        (3, "team/app", 1, "a/./b", "files[0].path"),
        (4, "team/app", 1, "", "files[0].path"),
        (5, "team\napp", 1, "x", "job"),
        (6, "team/app", 0, "x", "build"),
    ] {
        let a = ask(id, job, build, path).await;
        assert_eq!(a.outcome, pb::ArtifactOutcome::Refused as i32, "{path:?}: {a:?}");
        assert!(a.error.starts_with(field), "{path:?}: {a:?}");
        assert!(a.uploads.is_empty());
    }
    let a = ask(7, "team/app", 1, "ok.txt").await;
    assert_eq!(a.outcome, pb::ArtifactOutcome::Signed as i32, "{a:?}");
    assert!(a.uploads[0].url.contains(&format!("/artifacts/test/{NS}/{CTRL}/cell-3/team%252Fapp/1/ok.txt?")), "{a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_store_answers_501_and_the_double_falls_back_to_jenkins_archiving() {
    let w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    connected(&mite).await;
    let r = post(
        mite.plugin_addr.unwrap(),
        &plugin_token(&settings),
        "team/app/1",
        serde_json::json!({"v": 1, "files": [{"path": "a.txt", "size": 1}]}),
    )
    .await;
    assert_eq!(r.status, 501, "{r:?}");
    assert!(r.error().contains("artifacts need an s3:// store"), "{r:?}");

    let jenkins =
        double(&w, &mite, "mite", vec![ArtifactConfig { path: "a.txt".into(), content: None, size: 3 }]).await;
    jenkins.builds().run("team/app").await.unwrap();
    let uploads = jenkins.builds().artifacts().unwrap().clone();
    tokio::time::timeout(DEADLINE, uploads.wait_builds(1)).await.expect("the upload ended in time");
    let c = jenkins.artifact_counters().unwrap();
    assert_eq!((c.fallbacks, c.files), (1, 0), "{c:?}");
    assert!(c.last_error.unwrap().contains("501"));
}
