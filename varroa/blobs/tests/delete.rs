//! Deleting a build's log (`Logs::delete`, what the recorder's retention calls) in a real store:
//! a local directory in a temp dir, and S3 on a real moto server. The same checks on both: every
//! object under the build's prefix goes (chunks, marker, strays), a build whose number starts
//! the same (12 next to 1) and another job are untouched, deleting again is harmless, and a
//! store that is away is an error that leaves the log for the next try.

use bytes::Bytes;
use varroa_blobs::logs::{Deleted, LogKey, LogWriter, Logs};
use varroa_blobs::store::{BlobStore, StoreSettings};
use varroa_blobs::testing::{MotoServer, TcpProxy};

fn key(job: &str, build: u64) -> LogKey {
    LogKey::new("eu", "team-a", "ci", job, build).unwrap()
}

/// A complete log of three chunks.
async fn write_log(writer: &LogWriter, k: &LogKey) {
    writer.write_chunk(k, 0, Bytes::from_static(b"one\n"), false).await.unwrap();
    writer.write_chunk(k, 4, Bytes::from_static(b"two\n"), false).await.unwrap();
    writer.write_chunk(k, 8, Bytes::from_static(b"three\n"), true).await.unwrap();
}

async fn deleting(settings: StoreSettings) -> BlobStore {
    let store = BlobStore::open(&settings).unwrap();
    let writer = LogWriter::new(Logs::new(store.clone()));
    let logs = writer.logs().clone();
    let (doomed, twelve, other) = (key("team/my app", 1), key("team/my app", 12), key("team/other", 1));
    for k in [&doomed, &twelve, &other] {
        write_log(&writer, k).await;
    }
    assert_eq!(logs.state(&doomed).await.unwrap().complete, Some(14));

    assert_eq!(logs.delete(&doomed).await.unwrap(), Deleted { objects: 4 }, "three chunks and the marker");
    assert!(!logs.state(&doomed).await.unwrap().exists(), "nothing of the log is left");
    for k in [&twelve, &other] {
        let s = logs.state(k).await.unwrap();
        assert_eq!((s.end, s.complete, s.chunks.len()), (14, Some(14), 3), "{} untouched", k.describe());
    }
    assert_eq!(logs.delete(&doomed).await.unwrap(), Deleted { objects: 0 }, "deleting again is harmless");
    assert_eq!(logs.delete(&key("never", 3)).await.unwrap(), Deleted { objects: 0 }, "a build without a log");
    store
}

#[tokio::test]
async fn a_log_is_deleted_whole_on_a_local_directory_and_its_empty_directories_go() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("logs-store");
    let settings = StoreSettings::new(format!("file://{}", root.display()));
    let store = deleting(settings).await;
    let build_dir = root.join("logs/eu/team-a/ci/team%2Fmy%20app");
    assert!(!build_dir.join("1").exists(), "the build's directory is removed");
    assert!(build_dir.join("12").is_dir(), "build 12 keeps its own");

    // A stray file in a build's directory goes too, and then the job's empty directory.
    let logs = Logs::new(store);
    let lone = key("lone", 5);
    let writer = LogWriter::new(logs.clone());
    write_log(&writer, &lone).await;
    let lone_dir = root.join("logs/eu/team-a/ci/lone");
    std::fs::write(lone_dir.join("5/stray.tmp"), b"x").unwrap();
    assert_eq!(logs.delete(&lone).await.unwrap(), Deleted { objects: 5 });
    assert!(!lone_dir.exists(), "the job's directory, empty, is removed");
    assert!(root.join("logs/eu/team-a/ci").is_dir(), "never above the job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_is_deleted_whole_on_s3_and_an_unreachable_store_is_an_error() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = tokio::task::spawn_blocking(MotoServer::start).await.unwrap().expect("moto_server");
    moto.create_bucket("varroa-logs").unwrap();
    deleting(moto.settings(&moto.endpoint(), "varroa-logs", "prod")).await;

    // Through a proxy that is cut: an error within the store's bounds, the log stays whole.
    let proxy = TcpProxy::start(([127, 0, 0, 1], moto.port()).into()).unwrap();
    let store = BlobStore::open(&moto.settings(&proxy.endpoint(), "varroa-logs", "prod")).unwrap();
    let writer = LogWriter::new(Logs::new(store));
    let k = key("cut", 9);
    write_log(&writer, &k).await;
    proxy.cut();
    let e = writer.logs().delete(&k).await.unwrap_err().to_string();
    assert!(e.contains("varroa-logs"), "the error names the store: {e}");
    proxy.restore();
    assert_eq!(writer.logs().state(&k).await.unwrap().complete, Some(14), "the log is still there");
    assert_eq!(writer.logs().delete(&k).await.unwrap(), Deleted { objects: 4 }, "and goes once the store is back");
}
