//! The NatsServer fixture and the bucket helpers against a real nats-server.
#![cfg(feature = "testing")]

use std::time::Duration;

use varroa_link::kv::{self, ControllerKey, DesiredEntry};
use varroa_link::nats::{ConnectSettings, connect};
use varroa_link::testing::NatsServer;

fn settings(url: String, creds: Option<std::path::PathBuf>) -> ConnectSettings {
    ConnectSettings {
        url,
        credentials_file: creds,
        name: "test".into(),
        max_reconnect_delay: Duration::from_millis(200),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_are_created_once_with_history_one_and_survive_a_restart() {
    let mut nats = NatsServer::start().unwrap();
    let client = connect(&settings(nats.url(), None)).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let desired = kv::open_desired(&js, 1).await.unwrap();
    let again = kv::open_desired(&js, 1).await.unwrap();
    let status = again.status().await.unwrap();
    assert_eq!(status.history(), 1);
    assert_eq!(status.bucket(), kv::DESIRED_BUCKET);
    let key = ControllerKey::new("team-a", "ci").unwrap();
    let entry = DesiredEntry {
        digest: "sha256:1".into(),
        files: [("jenkins.yaml".into(), "a: 1".into())].into(),
        cells: Some(2),
    };
    desired.put(key.to_string(), kv::encode(&entry)).await.unwrap();

    nats.restart().unwrap();
    // The client reconnects by itself and the value was stored on disk.
    let value = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(Some(v)) = desired.get(key.to_string()).await {
                return v;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(kv::decode_desired(&key.to_string(), &value).unwrap(), entry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_is_read_from_the_file_on_reconnect() {
    let mut nats = NatsServer::start_with_auth("gw", "one").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("creds");
    NatsServer::write_credentials(&creds, "gw", "one").unwrap();
    let client = connect(&settings(nats.url(), Some(creds.clone()))).await.unwrap();
    client.flush().await.unwrap();
    let connects = client.statistics().connects.load(std::sync::atomic::Ordering::Relaxed);

    NatsServer::write_credentials(&creds, "gw", "two").unwrap();
    nats.set_password("two").unwrap();
    // The server drops the old credential; the client reconnects with the file's new one.
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let reply = client.request("$JS.API.INFO", "".into()).await;
            let reconnected = client.statistics().connects.load(std::sync::atomic::Ordering::Relaxed) > connects;
            if reply.is_ok() && reconnected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
}

#[test]
fn the_server_named_by_the_environment_is_used_when_new_enough_and_skipped_when_old() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let fake = |name: &str, version: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\necho 'nats-server: v{version}'\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let new = fake("new", "2.11.0");
    let old = fake("old", "2.9.10");
    // SAFETY: nextest runs each test in its own process; nothing else reads the environment here.
    unsafe { std::env::set_var("VARROA_NATS_SERVER", &new) };
    assert_eq!(varroa_link::testing::find_binary().unwrap(), new);
    unsafe { std::env::set_var("VARROA_NATS_SERVER", &old) };
    let found = varroa_link::testing::find_binary();
    assert_ne!(found.as_ref().ok(), Some(&old), "a 2.9 server is never used");
    if let Err(e) = found {
        assert!(e.to_string().contains("make deps") && e.to_string().contains("is 2.9"), "{e}");
    }
}
