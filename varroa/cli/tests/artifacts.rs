//! `varroa artifacts` as a user runs it: the built binary against a real PostgreSQL with the
//! recorder's schema (the run record names the cell) and a real moto S3 store whose objects were
//! uploaded through presigned URLs as the plugin uploads them.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{rows, run_command};
use tokio_postgres::NoTls;
use varroa_blobs::testing::MotoServer;
use varroa_blobs::{ArtifactKey, Artifacts, BlobStore, StoreSettings};
use varroa_recorder::migrate;
use varroa_recorder::testing::PgServer;

async fn upload(store: &StoreSettings, cell: u32, build: u64, files: &[(&str, &'static [u8])]) {
    let artifacts = Artifacts::new(BlobStore::open(store).unwrap());
    let key = ArtifactKey::new("eu", "team-a", "ci", cell, "team/app", build).unwrap();
    let asked: Vec<(String, u64)> = files.iter().map(|(p, b)| (p.to_string(), b.len() as u64)).collect();
    let signed = artifacts.sign_puts(&key, &asked).await.unwrap();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    for ((_, url), (_, bytes)) in signed.uploads.iter().zip(files) {
        let r = http.put(url.as_str()).body(*bytes).send().await.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_lists_a_builds_files_under_the_cell_of_its_run_record() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pg = PgServer::start().expect("PostgreSQL");
    let url = pg.create_database("records").await.expect("create database");
    let (mut client, conn) = tokio_postgres::connect(&pg.config("records"), NoTls).await.expect("connect");
    tokio::spawn(conn);
    migrate::migrate(&mut client).await.expect("migrate");
    client
        .batch_execute(
            "INSERT INTO runs (cluster, namespace, controller, job, build, cell, started_at) VALUES
             ('eu', 'team-a', 'ci', 'team/app', 7, 2, now()),
             ('eu', 'team-a', 'ci', 'team/app', 8, 0, now())",
        )
        .await
        .unwrap();
    let moto = MotoServer::start().unwrap();
    moto.create_bucket("varroa-blobs").unwrap();
    let store = moto.settings(&moto.endpoint(), "varroa-blobs", "prod");
    upload(&store, 2, 7, &[("target/app.jar", b"JAR-BYTES"), ("reports/index #1.html", b"<h1>")]).await;
    // Another cell's prefix for the same build number is not this run's.
    upload(&store, 0, 7, &[("stray.txt", b"not mine")]).await;

    let dir = tempfile::tempdir().unwrap();
    let varroa = |args: &[&str]| {
        let mut cmd = Command::new(common::bin());
        cmd.args(args)
            .env("VARROA_DATABASE_URL", &url)
            .env("VARROA_LOG_STORE", &store.url)
            .env("VARROA_LOG_STORE_CREDENTIALS_FILE", store.credentials_file.as_ref().unwrap())
            .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
            .env_remove("VARROA_DATABASE_PASSWORD_FILE")
            .env_remove("HOME");
        cmd
    };

    let r = run_command(varroa(&["artifacts", "ci", "team/app", "#7", "-n", "team-a"])).await.expect(0);
    let table = rows(&r.stdout);
    let got: Vec<(&str, &str)> = table.iter().map(|row| (row["PATH"].as_str(), row["SIZE"].as_str())).collect();
    assert_eq!(got, vec![("reports/index #1.html", "4"), ("target/app.jar", "9")], "{}", r.stdout);

    let r = run_command(varroa(&["artifacts", "ci", "team/app", "7", "-n", "team-a", "-o", "json"])).await.expect(0);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["cell"], 2, "{v}");
    assert_eq!(v["artifacts"][1], serde_json::json!({"path": "target/app.jar", "size": 9}), "{v}");

    // A run without artifacts: an empty table and a note; no run: an error naming the build.
    let r = run_command(varroa(&["artifacts", "ci", "team/app", "8", "-n", "team-a"])).await.expect(0);
    assert!(rows(&r.stdout).is_empty(), "{}", r.stdout);
    assert!(r.stderr.contains("no artifacts of build team/app #8 of controller team-a/ci, cell 0"), "{}", r.stderr);
    let r = run_command(varroa(&["artifacts", "ci", "team/app", "9", "-n", "team-a"])).await.expect(1);
    assert!(r.stderr.contains("no build team/app #9 of controller team-a/ci"), "{}", r.stderr);
    let mut no_store = varroa(&["artifacts", "ci", "team/app", "7", "-n", "team-a"]);
    no_store.env_remove("VARROA_LOG_STORE");
    let r = run_command(no_store).await.expect(1);
    assert!(r.stderr.contains("no store to read: set --log-store"), "{}", r.stderr);
}
