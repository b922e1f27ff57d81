//! Archived artifacts on a real moto S3 server, behind the presigned-URL check
//! (varroa_blobs::presign_check: moto itself does not check SigV4 query signatures): URLs signed
//! for a cell's prefix take the file's bytes with a plain `PUT`, and listing finds them; an URL
//! altered to another cell's prefix, or expired, is refused by the store; keys beyond 1024 bytes
//! and hostile paths are refused before anything is signed.

use std::time::{Duration, Instant};

use varroa_blobs::presign_check::PresignCheck;
use varroa_blobs::testing::MotoServer;
use varroa_blobs::{Artifact, ArtifactKey, Artifacts, BlobStore, SignError};

struct S3 {
    moto: MotoServer,
    check: PresignCheck,
}

fn s3(bucket: &str) -> S3 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = MotoServer::start().unwrap();
    moto.create_bucket(bucket).unwrap();
    let upstream = format!("127.0.0.1:{}", moto.port()).parse().unwrap();
    let check = PresignCheck::start(upstream, "varroa-test-secret").unwrap();
    S3 { moto, check }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

async fn put(url: &str, body: &'static [u8]) -> (u16, String) {
    let r = http().put(url).body(body).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

#[tokio::test]
async fn presigned_puts_land_under_the_cells_prefix_and_altered_or_expired_urls_are_refused() {
    let s = s3("varroa-artifacts");
    let settings = s.moto.settings(&s.check.endpoint(), "varroa-artifacts", "eu/prod");
    let artifacts = Artifacts::new(BlobStore::open(&settings).unwrap());
    let key = ArtifactKey::new("eu", "team-a", "ci", 1, "team/my app", 7).unwrap();
    let files = vec![("target/app.jar".to_owned(), 5), ("reports/a #1~.html".to_owned(), 3)];
    let signed = artifacts.sign_puts(&key, &files).await.unwrap();
    let left = signed.expires.duration_since(std::time::SystemTime::now()).unwrap();
    assert!(left > Duration::from_secs(14 * 60) && left <= Duration::from_secs(15 * 60), "{left:?}");
    assert_eq!(signed.uploads.len(), 2);
    let (jar, report) = (signed.uploads[0].1.to_string(), signed.uploads[1].1.to_string());
    assert!(
        jar.starts_with(&format!(
            "{}/varroa-artifacts/eu/prod/artifacts/eu/team-a/ci/cell-1/team%252Fmy%2520app/7/target/app.jar?",
            s.check.endpoint()
        )),
        "{jar}"
    );
    assert!(!jar.contains("secret"), "no credential in the URL: {jar}");

    // Altered: the same signature for another cell's prefix, or another file.
    let other_cell = jar.replace("/cell-1/", "/cell-0/");
    let (status, body) = put(&other_cell, b"evil!").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("SignatureDoesNotMatch"), "{body}");
    let other_file = jar.replace("app.jar", "app.war");
    assert_eq!(put(&other_file, b"evil!").await.0, 403);

    // The real ones.
    assert_eq!(put(&jar, b"JAR!!").await.0, 200);
    assert_eq!(put(&report, b"<p>").await.0, 200);
    let listed = artifacts.list(&key).await.unwrap();
    assert_eq!(
        listed,
        vec![
            Artifact { path: "reports/a #1~.html".into(), size: 3 },
            Artifact { path: "target/app.jar".into(), size: 5 },
        ]
    );
    assert_eq!(artifacts.cells("eu", "team-a", "ci").await.unwrap(), vec![1]);
    let other = ArtifactKey::new("eu", "team-a", "ci", 0, "team/my app", 7).unwrap();
    assert!(artifacts.list(&other).await.unwrap().is_empty(), "nothing landed under cell 0");

    // Expired: a URL valid for one second is refused once the second has passed.
    let short = artifacts.sign_puts_for(&key, &[("late.txt".into(), 4)], Duration::from_secs(1)).await.unwrap();
    let url = short.uploads[0].1.to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let (status, body) = put(&url, b"late").await;
        if status == 403 {
            break body;
        }
        assert!(Instant::now() < deadline, "the expired URL was still taken");
        tokio::task::yield_now().await;
    };
    assert!(refused.contains("Request has expired"), "{refused}");
    assert!(s.check.refused() >= 3);
}

#[tokio::test]
async fn hostile_paths_too_many_files_and_long_keys_are_refused_before_signing() {
    let s = s3("varroa-hostile");
    let settings = s.moto.settings(&s.check.endpoint(), "varroa-hostile", "");
    let artifacts = Artifacts::new(BlobStore::open(&settings).unwrap());
    let key = ArtifactKey::new("eu", "team-a", "ci", 0, "app", 1).unwrap();
    for (path, field) in [
        ("../cell-1/app/1/x", "files[0].path"),
        ("/etc/passwd", "files[0].path"),
        ("a//b", "files[0].path"),
        ("a\u{1b}[2J", "files[0].path"),
    ] {
        let e = artifacts.sign_puts(&key, &[(path.to_owned(), 1)]).await.unwrap_err();
        assert!(matches!(&e, SignError::Invalid(i) if i.field == field), "{path:?}: {e}");
    }
    let many: Vec<(String, u64)> = (0..1001).map(|i| (format!("f{i}"), 1)).collect();
    assert!(artifacts.sign_puts(&key, &many).await.unwrap_err().to_string().starts_with("files: 1001 files"));
    let big = artifacts.sign_puts(&key, &[("x".into(), (5 << 30) + 1)]).await.unwrap_err();
    assert!(big.to_string().starts_with("files[0].size"), "{big}");
    // A long job name and a path of characters S3 advises against (kept as %XX): each within its
    // own rule, the key beyond 1024 bytes.
    let long = ArtifactKey::new("eu", "team-a", "ci", 0, &"j".repeat(500), 1).unwrap();
    let path = format!("{}/{}", "#".repeat(200), "~".repeat(200));
    let e = artifacts.sign_puts(&long, &[(path, 1)]).await.unwrap_err();
    assert!(e.to_string().contains("object key would be") && e.to_string().contains("1024"), "{e}");
}
