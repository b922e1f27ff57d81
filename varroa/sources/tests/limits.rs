//! The limits on tenant-chosen inputs: a byte cap that stops the transfer, a time-out that
//! closes the connection, shallow single-ref Git fetches, and hosts that are refused unless
//! allowed.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Registry, Repo, file_layer, files, git_source, oci_source, options};
use varroa_sources::{FetchOptions, Fetcher, SourceError};

/// `n` bytes that do not compress (a xorshift stream), so that a Git pack holding them is about
/// `n` bytes.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test]
async fn a_repository_larger_than_the_cap_is_stopped_during_the_transfer() {
    let repo = Repo::new();
    repo.write(&[("casc/jenkins.yaml", "jenkins: {}\n")]);
    std::fs::write(repo.path().join("blob.bin"), noise(3 * 1024 * 1024, 7)).expect("write");
    repo.commit("big");
    let cap = 1024 * 1024;
    let fetcher = Fetcher::new(FetchOptions { max_bytes: cap, ..options() }, None);
    // The input's directory is tiny: only the transfer (the pack of the whole commit) is over.
    let error = fetcher.fetch(&git_source(&repo.url(), "main", "casc")).await.expect_err("over the cap");
    match &error {
        SourceError::TooLarge { limit, detail, .. } => {
            assert_eq!(*limit, cap);
            assert!(detail.contains("transfer passed the limit"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains("limit of 1048576 bytes"), "{message}");
    assert!(message.contains("--fetch-max-bytes"), "{message}");
    assert!(message.contains(&repo.url()), "{message}");
}

#[tokio::test]
async fn git_fetches_are_shallow_and_single_ref() {
    // Old history and another branch hold 3 MiB; the tip of main holds a few bytes. A cap of
    // 1 MiB passes only if neither the history nor the other branch is transferred.
    let repo = Repo::new();
    std::fs::write(repo.path().join("old.bin"), noise(3 * 1024 * 1024, 11)).expect("write");
    repo.write(&[("casc/jenkins.yaml", "one\n")]);
    repo.commit("old history");
    repo.git(&["checkout", "-q", "-b", "other"]);
    std::fs::write(repo.path().join("other.bin"), noise(3 * 1024 * 1024, 13)).expect("write");
    repo.commit("other branch");
    repo.git(&["checkout", "-q", "main"]);
    repo.git(&["rm", "-q", "old.bin"]);
    repo.write(&[("casc/jenkins.yaml", "two\n")]);
    let tip = repo.commit("small tip");

    let cache = tempfile::tempdir().expect("cache");
    let fetcher = Fetcher::new(FetchOptions { max_bytes: 1024 * 1024, ..options() }, Some(cache.path().into()));
    let artifact = fetcher.fetch(&git_source(&repo.url(), "main", "casc")).await.expect("shallow fetch");
    assert_eq!(artifact.revision, tip);
    assert_eq!(artifact.files, files(&[("jenkins.yaml", "two\n")]));
    // By commit sha: that commit only, not every branch and tag.
    let by_sha = Fetcher::new(FetchOptions { max_bytes: 1024 * 1024, ..options() }, None);
    let artifact = by_sha.fetch(&git_source(&repo.url(), &tip, "casc")).await.expect("by sha");
    assert_eq!(artifact.revision, tip);

    // The on-disk clone holds one commit and is shallow.
    let clone =
        std::fs::read_dir(cache.path().join("git")).expect("git cache").next().expect("a clone").expect("entry");
    let shallow = std::fs::read_to_string(clone.path().join("shallow")).expect("a shallow clone");
    assert_eq!(shallow.trim(), tip);
    let count = std::process::Command::new("git")
        .args(["--git-dir", &clone.path().display().to_string(), "count-objects", "-v"])
        .output()
        .expect("git count-objects");
    let count = String::from_utf8_lossy(&count.stdout).into_owned();
    let size_pack_kib: u64 = count
        .lines()
        .find_map(|l| l.strip_prefix("size-pack: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(u64::MAX);
    assert!(size_pack_kib < 64, "only the tip was transferred: {count}");
}

/// A TCP server on loopback that accepts connections, reads what it is sent and never answers.
/// The receiver gets, for each connection, how long after its acceptance the peer closed it.
fn silent_server() -> (String, mpsc::Receiver<Duration>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let accepted = Instant::now();
                let mut buf = [0u8; 4096];
                // Read until the peer closes (0) or resets (error); never write.
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                let _ = tx.send(accepted.elapsed());
            });
        }
    });
    (addr, rx)
}

/// Asserts that the server's connection was closed by the fetcher soon after the time-out.
fn assert_connection_closed(closed: &mpsc::Receiver<Duration>, timeout: Duration) {
    let open_for = closed
        .recv_timeout(Duration::from_secs(10))
        .expect("the fetcher closed its connection: the transfer was stopped, not abandoned");
    assert!(open_for < timeout + Duration::from_secs(5), "the connection stayed open {open_for:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_server_that_never_answers_is_stopped_by_the_time_out() {
    let (addr, closed) = silent_server();
    let timeout = Duration::from_secs(1);
    let fetcher = Fetcher::new(FetchOptions { timeout, ..options() }, None);
    let started = Instant::now();
    let source = git_source(&format!("http://{addr}/team/casc.git"), "main", "");
    let error = fetcher.fetch(&source).await.expect_err("never answers");
    let took = started.elapsed();
    assert!(matches!(&error, SourceError::TimedOut { limit, .. } if *limit == timeout), "{error:?}");
    assert!(error.to_string().contains("--fetch-timeout"), "{error}");
    assert!(took < timeout + Duration::from_secs(5), "the fetch answered after {took:?}");
    assert_connection_closed(&closed, timeout);

    // The URL's lock was released with the transfer: the next fetch starts at once and is
    // stopped the same way.
    let again = fetcher.fetch(&source).await.expect_err("still never answers");
    assert!(matches!(again, SourceError::TimedOut { .. }), "{again:?}");
    assert_connection_closed(&closed, timeout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_never_answers_is_stopped_by_the_time_out() {
    let (addr, closed) = silent_server();
    let timeout = Duration::from_secs(1);
    let fetcher = Fetcher::new(FetchOptions { timeout, insecure_registries: vec![addr.clone()], ..options() }, None);
    let started = Instant::now();
    let error = fetcher.fetch(&oci_source(&format!("{addr}/team/casc:v1"))).await.expect_err("never answers");
    assert!(matches!(&error, SourceError::TimedOut { limit, .. } if *limit == timeout), "{error:?}");
    assert!(started.elapsed() < timeout + Duration::from_secs(5));
    assert_connection_closed(&closed, timeout);
}

/// A listener that counts the connections it accepts, to show that a refused input never
/// connected.
fn counting_listener() -> (String, impl Fn() -> usize) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr").to_string();
    (addr, move || {
        let mut n = 0;
        while let Ok((mut s, _)) = listener.accept() {
            let _ = s.write_all(b"HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n");
            n += 1;
        }
        n
    })
}

fn assert_refused(error: &SourceError, host: &str, why: &str) {
    match error {
        SourceError::HostRefused { host: h, reason, .. } => {
            assert_eq!(h, host);
            assert!(reason.contains(why), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains("--fetch-allowed-hosts") && message.contains("allow_private_hosts"), "{message}");
}

#[tokio::test]
async fn loopback_and_local_inputs_are_refused_by_default() {
    let (addr, accepted) = counting_listener();
    let fetcher =
        Fetcher::new(FetchOptions { insecure_registries: vec![addr.clone()], ..FetchOptions::default() }, None);

    let error = fetcher.fetch(&git_source(&format!("http://{addr}/team/casc.git"), "main", "")).await.expect_err("git");
    assert_refused(&error, "127.0.0.1", "127.0.0.1, a loopback address");
    let error = fetcher.fetch(&oci_source(&format!("{addr}/team/casc:v1"))).await.expect_err("oci");
    assert_refused(&error, "127.0.0.1", "127.0.0.1, a loopback address");
    assert!(error.to_string().starts_with(&format!("oci {addr}/team/casc:v1: refusing")), "{error}");
    // A name is checked on what it resolves to.
    let port = addr.rsplit_once(':').expect("port").1;
    let error =
        fetcher.fetch(&git_source(&format!("https://localhost:{port}/casc.git"), "main", "")).await.expect_err("name");
    assert_refused(&error, "localhost", "resolves to");
    assert_eq!(accepted(), 0, "a refused input never connects");

    // The metadata service, link-local, unspecified addresses and the local file system.
    for (url, host, why) in [
        ("http://169.254.169.254/latest.git", "169.254.169.254", "metadata"),
        ("https://[fd00:ec2::254]/x.git", "fd00:ec2::254", "metadata"),
        ("https://[fe80::1]/x.git", "fe80::1", "link-local"),
        ("git://0.0.0.0/x.git", "0.0.0.0", "unspecified"),
        ("ssh://git@[::1]/x.git", "::1", "loopback"),
        ("file:///tmp/x", "the local file system", "file system"),
        ("/tmp/x", "the local file system", "file system"),
    ] {
        let error = fetcher.fetch(&git_source(url, "main", "")).await.expect_err(url);
        assert_refused(&error, host, why);
    }
    let error = fetcher.fetch(&oci_source("169.254.169.254/team/casc:v1")).await.expect_err("oci metadata");
    assert_refused(&error, "169.254.169.254", "metadata");
}

#[tokio::test]
async fn the_api_server_is_refused_and_allowed_hosts_pass() {
    let registry = Registry::start();
    registry.push("team/casc:v1", vec![file_layer("jenkins.yaml", "one")]).await;
    let reference = format!("{}/team/casc:v1", registry.addr);

    // Allowed by name (host:port as written in the reference).
    let allowed = Fetcher::new(
        FetchOptions {
            insecure_registries: vec![registry.addr.clone()],
            allowed_hosts: vec![registry.addr.clone()],
            ..FetchOptions::default()
        },
        None,
    );
    let artifact = allowed.fetch(&oci_source(&reference)).await.expect("an allowed host");
    assert_eq!(artifact.files, files(&[("jenkins.yaml", "one")]));

    // A denied range (the API server's addresses) is refused even with private hosts allowed
    // by name elsewhere.
    let denied = Fetcher::new(
        FetchOptions {
            insecure_registries: vec![registry.addr.clone()],
            allowed_hosts: vec!["git.example.com".to_string()],
            denied_addresses: vec!["10.96.0.1".parse().expect("range")],
            ..FetchOptions::default()
        },
        None,
    );
    let error = denied.fetch(&git_source("https://10.96.0.1/casc.git", "main", "")).await.expect_err("api server");
    assert_refused(&error, "10.96.0.1", "denied range 10.96.0.1/32");
}
