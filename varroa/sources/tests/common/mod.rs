//! Test fixtures: Git repositories made with the `git` program, and a real OCI registry
//! (Debian's `docker-registry`) on a free loopback port.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use varroa_sources::{FetchOptions, Fetcher, GitSource, OciSource, Source};

/// A Git repository with a work tree, in its own temporary directory.
pub struct Repo {
    pub dir: tempfile::TempDir,
}

impl Repo {
    pub fn new() -> Repo {
        let repo = Repo { dir: tempfile::tempdir().expect("temp dir") };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `file://` URL of the repository.
    pub fn url(&self) -> String {
        format!("file://{}", self.path().display())
    }

    /// Runs git in the repository with a configuration of its own; returns trimmed stdout.
    pub fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "Test")
            .env("GIT_AUTHOR_EMAIL", "test@example.com")
            .env("GIT_COMMITTER_NAME", "Test")
            .env("GIT_COMMITTER_EMAIL", "test@example.com")
            .output()
            .expect("run git");
        assert!(out.status.success(), "git {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Writes files (path -> content) into the work tree.
    pub fn write(&self, files: &[(&str, &str)]) {
        for (path, content) in files {
            let full = self.path().join(path);
            std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            std::fs::write(full, content).expect("write");
        }
    }

    /// Commits everything; returns the commit sha.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }
}

/// Fetch options for these tests: every server here listens on loopback and every repository is
/// a local path, which the defaults refuse.
pub fn options() -> FetchOptions {
    FetchOptions { allow_private_hosts: true, ..FetchOptions::default() }
}

pub fn git_source(url: &str, reference: &str, path: &str) -> Source {
    Source::Git(GitSource { url: url.to_string(), reference: reference.to_string(), path: path.to_string() })
}

pub fn oci_source(reference: &str) -> Source {
    Source::Oci(OciSource { reference: reference.to_string() })
}

/// The expected file map.
pub fn files(entries: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    entries.iter().map(|(p, c)| (p.to_string(), c.as_bytes().to_vec())).collect()
}

/// A `docker-registry` process serving a temporary filesystem storage on a free loopback port.
pub struct Registry {
    child: Child,
    pub dir: tempfile::TempDir,
    /// `127.0.0.1:<port>`.
    pub addr: String,
}

impl Registry {
    pub fn start() -> Registry {
        let binary = "/usr/bin/docker-registry";
        assert!(
            Path::new(binary).exists(),
            "{binary} is missing: run scripts/ensure-deps.sh (apt-get install docker-registry)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\n  formatter: text\nstorage:\n  filesystem:\n    \
                 rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )
        .expect("write config");
        let mut child = Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start docker-registry");
        // Wait for the registry to say it listens; keep draining its log afterwards.
        let stderr = child.stderr.take().expect("stderr");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = Some(ready_tx);
            let mut log = Vec::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains("listening on") {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(Ok(()));
                    }
                } else if ready.is_some() {
                    log.push(line);
                }
            }
            if let Some(tx) = ready.take() {
                let _ = tx.send(Err(log.join("\n")));
            }
        });
        match ready_rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(Ok(())) => {}
            Ok(Err(log)) => panic!("docker-registry exited before listening:\n{log}"),
            Err(e) => panic!("docker-registry did not start: {e}"),
        }
        let registry = Registry { child, dir, addr };
        assert_eq!(registry.get_status("/v2/"), 200, "GET /v2/ must answer 200");
        registry
    }

    /// The HTTP status of a plain GET.
    pub fn get_status(&self, path: &str) -> u16 {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\nConnection: close\r\n\r\n", self.addr).expect("request");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    /// The file holding blob `digest` in the registry's storage.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
        self.dir.path().join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }

    /// Overwrites blob `digest` in storage with other bytes of the same length.
    pub fn corrupt_blob(&self, digest: &str) {
        let path = self.blob_file(digest);
        let mut data = std::fs::read(&path).expect("read blob");
        assert!(!data.is_empty());
        for b in data.iter_mut() {
            *b = if *b == b'x' { b'y' } else { b'x' };
        }
        std::fs::write(&path, data).expect("write blob");
    }

    /// A fetcher that speaks plain HTTP to this registry.
    pub fn fetcher(&self) -> Fetcher {
        Fetcher::new(FetchOptions { insecure_registries: vec![self.addr.clone()], ..options() }, None)
    }

    /// Pushes layers as `repo:tag`; returns the manifest digest.
    pub async fn push(&self, repo_tag: &str, layers: Vec<ImageLayer>) -> String {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new(ClientConfig { protocol: ClientProtocol::Http, ..Default::default() });
        let reference: Reference = format!("{}/{repo_tag}", self.addr).parse().expect("ref");
        let config = Config::new(b"{}".to_vec(), "application/vnd.oci.empty.v1+json".to_string(), None);
        let mut manifest = OciImageManifest::build(&layers, &config, None);
        manifest.artifact_type = Some("application/vnd.varroa.bundle.v1".to_string());
        client.push(&reference, &layers, config, &RegistryAuth::Anonymous, Some(manifest)).await.expect("push");
        self.tag_digest(repo_tag)
    }

    /// The manifest digest `repo:tag` points to, read from the registry's storage.
    pub fn tag_digest(&self, repo_tag: &str) -> String {
        let (repo, tag) = repo_tag.rsplit_once(':').expect("repo:tag");
        let link = self
            .dir
            .path()
            .join("data/docker/registry/v2/repositories")
            .join(repo)
            .join("_manifests/tags")
            .join(tag)
            .join("current/link");
        std::fs::read_to_string(link).expect("tag link").trim().to_string()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An ORAS-style file layer: the file's bytes, named by the title annotation.
pub fn file_layer(name: &str, content: &str) -> ImageLayer {
    ImageLayer::new(
        content.as_bytes().to_vec(),
        "application/vnd.oci.image.layer.v1.tar".to_string(),
        Some(BTreeMap::from([("org.opencontainers.image.title".to_string(), name.to_string())])),
    )
}

/// A tar+gzip layer holding `entries` (path -> content), without a title.
pub fn tar_gz_layer(entries: &[(&str, &str)]) -> ImageLayer {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        // Written raw so that tests can also build archives with unsafe paths.
        let name = &mut header.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_cksum();
        builder.append(&header, content.as_bytes()).expect("append");
    }
    let tar = builder.into_inner().expect("tar");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).expect("gzip");
    ImageLayer::new(gz.finish().expect("gzip"), "application/vnd.oci.image.layer.v1.tar+gzip".to_string(), None)
}
