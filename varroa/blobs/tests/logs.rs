//! Console logs in a real store: a local directory in a temp dir, and S3 on a real moto server
//! (varroa_blobs::testing::MotoServer). The same checks run on both: chunks in order end
//! complete, a retried chunk is written once, gaps and offsets inside the log are conflicts
//! answered with the stored end, a store that fails is an error and works again after, and a
//! follower sees appended bytes and stops at the marker.

use std::time::Duration;

use bytes::Bytes;
use varroa_blobs::logs::{ChunkError, ChunkOutcome, Follower, LogKey, LogWriter, Logs, MARKER, follow};
use varroa_blobs::store::{BlobStore, StoreSettings};
use varroa_blobs::testing::{MotoServer, TcpProxy};

fn key(job: &str, build: u64) -> LogKey {
    LogKey::new("eu", "team-a", "ci", job, build).unwrap()
}

fn stored(next: u64, duplicate: bool, complete: bool) -> ChunkOutcome {
    ChunkOutcome::Stored { next, duplicate, complete }
}

fn conflict(next: u64, complete: bool) -> ChunkOutcome {
    ChunkOutcome::Conflict { next, complete }
}

async fn read_all(logs: &Logs, key: &LogKey) -> Vec<u8> {
    let state = logs.state(key).await.unwrap();
    let mut out = Vec::new();
    for c in &state.chunks {
        out.extend_from_slice(&logs.read_chunk(key, *c, 0).await.unwrap());
    }
    out
}

/// The offset semantics, on whatever store `settings` opens.
async fn offset_semantics(settings: StoreSettings) {
    let store = BlobStore::open(&settings).unwrap();
    let writer = LogWriter::new(Logs::new(store.clone()));
    let k = key("team/my app", 7);
    let w =
        |offset: u64, data: &'static [u8], last: bool| writer.write_chunk(&k, offset, Bytes::from_static(data), last);

    assert!(!writer.logs().state(&k).await.unwrap().exists(), "nothing yet");
    assert_eq!(w(0, b"hello ", false).await.unwrap(), stored(6, false, false));
    // The same chunk three times: written once, answered the same.
    for round in 0..3 {
        assert_eq!(w(6, b"world\n", false).await.unwrap(), stored(12, round > 0, false), "round {round}");
    }
    // A gap, an offset inside a chunk, a chunk start with another length: the stored end.
    assert_eq!(w(20, b"later", false).await.unwrap(), conflict(12, false));
    assert_eq!(w(3, b"lo world", false).await.unwrap(), conflict(12, false));
    assert_eq!(w(6, b"world", false).await.unwrap(), conflict(12, false));
    // Malformed chunks are refused as such.
    assert!(matches!(w(12, b"", false).await, Err(ChunkError::Invalid(e)) if e.contains("empty")));
    let big = Bytes::from(vec![b'x'; varroa_blobs::logs::MAX_CHUNK_BYTES + 1]);
    assert!(
        matches!(writer.write_chunk(&k, 12, big, false).await, Err(ChunkError::Invalid(e)) if e.contains("at most"))
    );
    assert!(matches!(
        writer.write_chunk(&k, 1 << 53, Bytes::from_static(b"x"), false).await,
        Err(ChunkError::Invalid(_))
    ));
    // A chunk of exactly the largest size is fine.
    let max = Bytes::from(vec![b'm'; varroa_blobs::logs::MAX_CHUNK_BYTES]);
    let end = 12 + max.len() as u64;
    assert_eq!(writer.write_chunk(&k, 12, max, false).await.unwrap(), stored(end, false, false));
    // The final chunk writes the marker; sent again, the same answer; data after it is refused.
    assert_eq!(w(end, b"done\n", true).await.unwrap(), stored(end + 5, false, true));
    assert_eq!(w(end, b"done\n", true).await.unwrap(), stored(end + 5, true, true));
    assert_eq!(w(end + 5, b"more", false).await.unwrap(), conflict(end + 5, true));
    assert_eq!(w(end + 5, b"", true).await.unwrap(), stored(end + 5, true, true), "an empty final at the end");
    // A retry of an earlier chunk of a complete log is still the same answer.
    assert_eq!(w(6, b"world\n", false).await.unwrap(), stored(12, true, true));
    assert_eq!(writer.cached(), 0, "a complete log leaves the cache");

    let state = writer.logs().state(&k).await.unwrap();
    assert_eq!(state.end, end + 5);
    assert_eq!(state.complete, Some(end + 5));
    assert_eq!(state.chunks.iter().map(|c| c.offset).collect::<Vec<_>>(), [0, 6, 12, end]);
    let bytes = read_all(writer.logs(), &k).await;
    assert!(bytes.starts_with(b"hello world\nmmm") && bytes.ends_with(b"mmmdone\n"));
    assert_eq!(bytes.len() as u64, end + 5);

    // A second writer (another gateway replica, cold cache) finds the end by listing; a chunk
    // it gets at a stale offset is a conflict, never a second copy.
    let k2 = key("app", 1);
    assert_eq!(writer.write_chunk(&k2, 0, Bytes::from_static(b"a"), false).await.unwrap(), stored(1, false, false));
    let other = LogWriter::new(Logs::new(store.clone()));
    assert_eq!(other.write_chunk(&k2, 1, Bytes::from_static(b"b"), false).await.unwrap(), stored(2, false, false));
    // The first writer's cache says 1; the chunk at 1 is there with the same length: a duplicate.
    assert_eq!(writer.write_chunk(&k2, 1, Bytes::from_static(b"b"), false).await.unwrap(), stored(2, true, false));
    assert_eq!(writer.write_chunk(&k2, 2, Bytes::from_static(b"c"), true).await.unwrap(), stored(3, false, true));
    assert_eq!(read_all(writer.logs(), &k2).await, b"abc");
    // An empty final chunk completes a log without data.
    let k3 = key("empty", 1);
    assert_eq!(writer.write_chunk(&k3, 0, Bytes::new(), true).await.unwrap(), stored(0, false, true));
    let s = writer.logs().state(&k3).await.unwrap();
    assert!(s.exists() && s.chunks.is_empty() && s.complete == Some(0));

    // The cluster a log is in.
    let logs = writer.logs();
    assert_eq!(logs.clusters_with("team-a", "ci", "team/my app", 7).await.unwrap(), ["eu"]);
    assert!(logs.clusters_with("team-a", "ci", "team/my app", 8).await.unwrap().is_empty());
    assert!(logs.clusters_with("team-b", "ci", "team/my app", 7).await.unwrap().is_empty());
}

#[tokio::test]
async fn offset_semantics_on_a_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    offset_semantics(StoreSettings::new(format!("file://{}", root.display()))).await;
    // The layout on disk is the documented one, with no staging files left.
    let build = root.join("logs/eu/team-a/ci/team%2Fmy%20app/7");
    let mut names: Vec<String> =
        std::fs::read_dir(&build).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names[..3], ["00000000000000000000", "00000000000000000006", "00000000000000000012"]);
    assert_eq!(names[4], MARKER);
    assert_eq!(names.len(), 5, "{names:?}");
    let marker: serde_json::Value = serde_json::from_slice(&std::fs::read(build.join(MARKER)).unwrap()).unwrap();
    assert_eq!(marker["chunks"], 4);
    assert_eq!(marker["v"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_semantics_on_s3() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = MotoServer::start().unwrap();
    moto.create_bucket("varroa-logs").unwrap();
    offset_semantics(moto.settings(&moto.endpoint(), "varroa-logs", "prod/eu")).await;
}

#[tokio::test]
async fn a_failing_directory_is_an_error_and_the_log_goes_on_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let store = BlobStore::open(&StoreSettings::new(format!("file://{}", root.display()))).unwrap();
    let writer = LogWriter::new(Logs::new(store));
    let k = key("app", 3);
    assert_eq!(writer.write_chunk(&k, 0, Bytes::from_static(b"one\n"), false).await.unwrap(), stored(4, false, false));
    // The controller's directory becomes a file: nothing can be written (even as root).
    let ctrl = root.join("logs/eu/team-a/ci");
    std::fs::rename(&ctrl, dir.path().join("aside")).unwrap();
    std::fs::write(&ctrl, "not a directory").unwrap();
    let e = writer.write_chunk(&k, 4, Bytes::from_static(b"two\n"), false).await.unwrap_err();
    assert!(matches!(e, ChunkError::Store(_)), "{e}");
    assert!(e.to_string().contains(&format!("file://{}", root.display())), "the error names the store: {e}");
    std::fs::remove_file(&ctrl).unwrap();
    std::fs::rename(dir.path().join("aside"), &ctrl).unwrap();
    assert_eq!(writer.write_chunk(&k, 4, Bytes::from_static(b"two\n"), true).await.unwrap(), stored(8, false, true));
    assert_eq!(read_all(writer.logs(), &k).await, b"one\ntwo\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_s3_is_an_error_within_seconds_and_the_log_goes_on_after_it() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = MotoServer::start().unwrap();
    moto.create_bucket("varroa-logs").unwrap();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", moto.port()).parse().unwrap()).unwrap();
    let store = BlobStore::open(&moto.settings(&proxy.endpoint(), "varroa-logs", "")).unwrap();
    let writer = LogWriter::new(Logs::new(store));
    let k = key("app", 3);
    assert_eq!(writer.write_chunk(&k, 0, Bytes::from_static(b"one\n"), false).await.unwrap(), stored(4, false, false));
    proxy.cut();
    let t = std::time::Instant::now();
    let e = writer.write_chunk(&k, 4, Bytes::from_static(b"two\n"), false).await.unwrap_err();
    assert!(matches!(e, ChunkError::Store(_)), "{e}");
    assert!(t.elapsed() < Duration::from_secs(16), "bounded: {:?}", t.elapsed());
    proxy.restore();
    assert_eq!(writer.write_chunk(&k, 4, Bytes::from_static(b"two\n"), true).await.unwrap(), stored(8, false, true));
    assert_eq!(read_all(writer.logs(), &k).await, b"one\ntwo\n");
}

/// A follower, woken by a channel (as the CLI is by NATS), sees each chunk and stops at the
/// marker; without wake-ups it polls.
async fn following(settings: StoreSettings) {
    let store = BlobStore::open(&settings).unwrap();
    let writer = std::sync::Arc::new(LogWriter::new(Logs::new(store.clone())));
    let k = key("team/app", 9);
    writer.write_chunk(&k, 0, Bytes::from_static(b"line 0\n"), false).await.unwrap();
    let (wake_tx, wake_rx) = futures::channel::mpsc::unbounded::<()>();
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let follower = Follower::new(Logs::new(store.clone()), k.clone(), 0);
    let task = tokio::spawn(follow(follower, Some(wake_rx), Duration::from_secs(30), move |b: &[u8]| {
        let _ = seen_tx.send(b.to_vec());
        Ok(())
    }));
    assert_eq!(seen_rx.recv().await.unwrap(), b"line 0\n");
    let mut offset = 7;
    for i in 1..=3u8 {
        let line = format!("line {i}\n").into_bytes();
        let n = line.len() as u64;
        let t = std::time::Instant::now();
        writer.write_chunk(&k, offset, Bytes::from(line.clone()), i == 3).await.unwrap();
        wake_tx.unbounded_send(()).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), seen_rx.recv()).await.unwrap().unwrap();
        assert_eq!(got, line);
        assert!(t.elapsed() < Duration::from_secs(1), "seen within a second: {:?}", t.elapsed());
        offset += n;
    }
    let read = tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    assert_eq!(read, offset, "the follower stopped at the marker");

    // From the middle of a chunk, polling only (no wake-ups).
    let follower = Follower::new(Logs::new(store), k, 3);
    let mut out = Vec::new();
    let n = follow(
        follower,
        None::<futures::channel::mpsc::UnboundedReceiver<()>>,
        Duration::from_millis(50),
        |b: &[u8]| {
            out.extend_from_slice(b);
            Ok(())
        },
    )
    .await
    .unwrap();
    assert_eq!(n, offset);
    assert_eq!(out, b"e 0\nline 1\nline 2\nline 3\n");
}

#[tokio::test]
async fn a_follower_sees_appended_chunks_on_a_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    following(StoreSettings::new(format!("file://{}", dir.path().display()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sees_appended_chunks_on_s3() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = MotoServer::start().unwrap();
    moto.create_bucket("varroa-logs").unwrap();
    following(moto.settings(&moto.endpoint(), "varroa-logs", "x")).await;
}
