//! Varroa's Git and OCI inputs: fetched, verified, cached by digest, and kept when a later fetch
//! fails.
//!
//! A `ComposedBundle` lists ordered inputs; the `git` and `oci` ones become a [`Source`] here.
//! [`Fetcher::fetch_or_last_good`] turns a source into an [`Artifact`]: the set of files it
//! holds, the revision they came from (a Git commit or an OCI manifest digest) and a digest of
//! the files. Merging artifacts into one JCasC document and plugin list is not done here.
//!
//! # Git
//!
//! [`GitSource::url`] is anything Git accepts: `https://` (TLS by rustls), `ssh://` or
//! `user@host:path` (through the `ssh` program), `file://` URLs and plain paths (through
//! `git-upload-pack`, so the `git` program must be installed for those). [`GitSource::reference`]
//! is a tag, a branch (tried in that order, like `git rev-parse`), a full ref name
//! (`refs/...`), `HEAD`, or a full 40-hex commit sha. A full sha resolves to itself: when that
//! commit was fetched before, no server is contacted at all; otherwise that commit alone is asked
//! for, and the server sends it only if a branch or tag reaches it. Fetches are shallow (depth 1:
//! the commit and its tree, no history) and single-ref (the one ref named, or for a short name
//! the tag and the branch of that name), so the transfer is about the size of one checkout. [`GitSource::path`] is a directory
//! in the repository (`""`, `"."` or `"/"` is the root; `..` is refused); the artifact's files
//! are the regular and executable files under it, with paths relative to it. Symlinks are not
//! followed: a symlink that stays inside `path` is left out, one pointing outside `path` fails
//! the fetch ([`SourceError::UnsafeContent`]). Submodules are left out.
//!
//! Clones are bare repositories: under `<cache_dir>/git/` when [`Fetcher::new`] is given a cache
//! directory (later fetches of the same URL then transfer only new objects), else in a temporary
//! directory removed after each fetch. Credentials for private repositories come from the usual
//! Git configuration (credential helpers) of the process, or from the URL.
//!
//! # OCI
//!
//! [`OciSource::reference`] is `registry/repository:tag` or `registry/repository@sha256:<hex>`
//! (a reference without a registry means Docker Hub). A tag is resolved to its manifest digest
//! first (a `HEAD` request); a digest reference is its own revision. The manifest must be an OCI
//! or Docker image manifest (an image index is refused). Its config blob is not read. Each layer
//! is one of:
//!
//! 1. **A file (ORAS style)**: a layer with an `org.opencontainers.image.title` annotation is
//!    one file, named by the title, whatever its media type. This is what
//!    `oras push registry/repo:tag jenkins.yaml plugins.yaml` produces: two files,
//!    `jenkins.yaml` and `plugins.yaml`.
//! 2. **A directory tree**: a layer of media type tar or tar+gzip
//!    (`application/vnd.oci.image.layer.v1.tar`, `...tar+gzip`,
//!    `application/vnd.docker.image.rootfs.diff.tar.gzip`, ...) without a title annotation, or
//!    any layer with ORAS's `io.deis.oras.content.unpack: "true"` annotation (what
//!    `oras push registry/repo:tag casc/` produces), is unpacked: its regular files are kept at
//!    their paths in the archive (ORAS's `casc/...` entries stay under `casc/`). Absolute paths,
//!    `..` and links pointing outside the archive are refused; other links, devices and the
//!    like are skipped.
//!
//! A file may appear only once across all layers. Layers of any other kind are refused with
//! [`SourceError::Unsupported`].
//!
//! Verification: the manifest's bytes must hash to the digest it was fetched by (the digest in
//! the reference, or the one the registry gave for the tag), and every layer's bytes must hash to
//! its descriptor's digest and have its size; otherwise the fetch fails with
//! [`SourceError::DigestMismatch`]. Descriptor `urls` (foreign layers) are never followed.
//! Registries named in [`FetchOptions::insecure_registries`] are spoken to over plain HTTP,
//! every other one over HTTPS with rustls; [`FetchOptions::oci_credentials`] gives basic-auth
//! credentials per registry (token authentication is negotiated from them as the registry asks).
//!
//! # Digest, cache and last good result
//!
//! [`Artifact::digest`] is [`files_digest`] of the files: the same files give the same digest
//! from Git or OCI. Artifacts are cached in memory by revision (Git: URL, commit and path; OCI:
//! repository and manifest digest), so a fetch first resolves the reference and downloads content
//! only for a revision it has not seen. [`Fetcher::fetch_or_last_good`] returns, when a fetch
//! fails, the last artifact fetched successfully for that same source along with the error, so
//! the caller keeps a working configuration and reports the failure.
//!
//! # Limits on tenant-chosen inputs
//!
//! Inputs are chosen by tenants and fetched by a process that holds a Kubernetes token, so every
//! fetch is bounded ([`FetchOptions`], with safe defaults):
//!
//! - **Bytes** ([`FetchOptions::max_bytes`], 64 MiB): Git counts the pack as it is read and stops
//!   the transfer at the limit (gix's interrupt flag, checked on every read); OCI checks the
//!   declared layer sizes before downloading, streams each layer against its declared size and
//!   checks the manifest's size; the files of an artifact are held to the same limit.
//!   [`SourceError::TooLarge`] names the limit. Not counted: the Git ref advertisement, which is
//!   bounded by the time-out only.
//! - **Time** ([`FetchOptions::timeout`], 60 s, from the first lookup to the last byte): Git runs
//!   in a blocking worker whose HTTP requests carry the remaining time as their own time-out and
//!   whose pack transfer is interrupted at the deadline, so the worker really stops and closes
//!   its connection, and the URL's lock is released with it; OCI is async, and the future
//!   dropped at the deadline closes its connection. [`SourceError::TimedOut`] names the limit.
//!   One case is only abandoned, not stopped: an `ssh` program stuck in its own handshake (the
//!   operator's image ships no `ssh`); the caller is answered 10 s after the deadline anyway.
//! - **Hosts**: loopback, link-local, the cloud metadata service, unspecified addresses,
//!   [`FetchOptions::denied_addresses`] (the Kubernetes API server) and the local file system are
//!   refused ([`SourceError::HostRefused`]) unless [`FetchOptions::allow_private_hosts`] or
//!   [`FetchOptions::allowed_hosts`] allows them. Git over HTTP(S) checks the addresses it
//!   connects to and follows no redirects; the others resolve and check just before fetching
//!   (the DNS-rebinding limit is described in net.rs and docs/varroa/security.md).
//!
//! # TLS
//!
//! HTTPS (Git and OCI) goes through reqwest with rustls and the `ring` provider, which
//! [`Fetcher::new`] installs as the process's default rustls provider if none is installed yet.
//! No openssl is involved.

mod error;
mod files;
mod git;
mod net;
mod oci;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use error::SourceError;
pub use files::files_digest;
pub use net::AddressRange;

/// One Git or OCI input of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// A directory of a Git repository at a branch, tag or commit.
    Git(GitSource),
    /// An OCI artifact in a registry.
    Oci(OciSource),
}

/// A directory of a Git repository at a branch, tag or commit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GitSource {
    /// The repository: `https://...`, `ssh://...`, `file://...` or a local path.
    pub url: String,
    /// A tag, a branch, a full ref name (`refs/...`), `HEAD`, or a full 40-hex commit sha.
    pub reference: String,
    /// The directory in the repository; `""`, `"."` or `"/"` is the root; `..` is refused.
    pub path: String,
}

/// An OCI artifact in a registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OciSource {
    /// `registry/repository:tag` or `registry/repository@sha256:<hex>`.
    pub reference: String,
}

impl fmt::Display for Source {
    /// `git <url> ref <reference> path <path>` or `oci <reference>`: how errors name the input.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Git(g) => write!(f, "git {} ref {} path \"{}\"", g.url, g.reference, g.path),
            Source::Oci(o) => write!(f, "oci {}", o.reference),
        }
    }
}

/// What a fetch produced: the files of one input at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// Git: the full sha of the commit the reference resolved to. OCI: the manifest digest,
    /// `sha256:<hex>`.
    pub revision: String,
    /// [`files_digest`] of [`Artifact::files`]: `sha256:<hex>`.
    pub digest: String,
    /// The files, by path relative to the input's root (Git: `path`), `/`-separated.
    pub files: BTreeMap<String, Vec<u8>>,
}

impl Artifact {
    /// Builds an artifact, computing its digest.
    pub fn new(revision: String, files: BTreeMap<String, Vec<u8>>) -> Self {
        Artifact { revision, digest: files_digest(&files), files }
    }

    /// The total size of the files, in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.files.values().map(|c| c.len() as u64).sum()
    }
}

/// Basic-auth credentials for one registry. `Debug` does not show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth").field("username", &self.username).field("password", &"<redacted>").finish()
    }
}

/// How a [`Fetcher`] fetches. The defaults are safe for tenant-chosen inputs: 64 MiB, 60 s, no
/// private hosts.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Registries (`host` or `host:port`, as written in references) spoken to over plain HTTP
    /// rather than HTTPS. This does not exempt them from the host check: see `allowed_hosts`.
    pub insecure_registries: Vec<String>,
    /// The most bytes one fetch may bring: the sum of an artifact's files, the Git pack
    /// transferred for it, and for OCI the sum of its layers as stored. A transfer that passes it
    /// is stopped ([`SourceError::TooLarge`]). Default 64 MiB.
    pub max_bytes: u64,
    /// Basic-auth credentials by registry (`host` or `host:port`); registries not listed are
    /// accessed anonymously.
    pub oci_credentials: BTreeMap<String, BasicAuth>,
    /// The longest one fetch may take, from the first lookup to the last byte. When it passes,
    /// the transfer is stopped and its connection closed ([`SourceError::TimedOut`]). Default
    /// 60 seconds.
    pub timeout: Duration,
    /// How many artifacts (revisions) the in-memory cache keeps; the least recently used go
    /// first. Last good artifacts are kept apart from this. Default 64.
    pub cache_capacity: usize,
    /// Fetch from any host, including loopback, link-local, metadata and `denied_addresses`, and
    /// from `file://` URLs and paths. For tests and development only. Default false.
    pub allow_private_hosts: bool,
    /// Hosts (`name`, `address`, or either with `:port`, as written in inputs) fetched from even
    /// when they resolve to a refused address. Default none.
    pub allowed_hosts: Vec<String>,
    /// Addresses refused besides loopback, link-local, metadata and unspecified ones: the
    /// Kubernetes API server's (service address and endpoints). Default none.
    pub denied_addresses: Vec<AddressRange>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            insecure_registries: Vec::new(),
            max_bytes: DEFAULT_MAX_BYTES,
            oci_credentials: BTreeMap::new(),
            timeout: DEFAULT_TIMEOUT,
            cache_capacity: 64,
            allow_private_hosts: false,
            allowed_hosts: Vec::new(),
            denied_addresses: Vec::new(),
        }
    }
}

/// The default of [`FetchOptions::max_bytes`]: 64 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// The default of [`FetchOptions::timeout`]: 60 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl FetchOptions {
    fn host_policy(&self) -> net::HostPolicy {
        net::HostPolicy {
            allow_private: self.allow_private_hosts,
            allowed_hosts: self.allowed_hosts.clone(),
            denied: self.denied_addresses.clone(),
        }
    }
}

/// The result of [`Fetcher::fetch_or_last_good`].
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The fresh artifact, or when the fetch failed the last good one for the same source;
    /// `None` only if this source was never fetched successfully.
    pub artifact: Option<Arc<Artifact>>,
    /// Why this fetch failed; `None` when `artifact` is fresh.
    pub error: Option<SourceError>,
}

impl Fetched {
    /// Whether `artifact` is an older result kept because this fetch failed.
    pub fn is_stale(&self) -> bool {
        self.error.is_some() && self.artifact.is_some()
    }
}

/// Counters of a [`Fetcher`], for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Fetches that downloaded and verified content (cache misses).
    pub downloads: u64,
    /// Fetches answered from the cache because the revision was known.
    pub cache_hits: u64,
    /// Fetches that failed.
    pub failures: u64,
}

/// Fetches [`Source`]s, caching artifacts by revision and remembering the last good artifact of
/// each source. Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct Fetcher {
    inner: Arc<Inner>,
}

impl fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetcher")
            .field("options", &self.inner.options)
            .field("cache_dir", &self.inner.cache_dir)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

// A fetcher is shared between tasks and threads.
const _: fn() = || {
    fn shared<T: Clone + Send + Sync + 'static>() {}
    shared::<Fetcher>();
};

/// Where a cached artifact is filed: the revision, and what it was fetched from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum CacheKey {
    Git { url: String, commit: String, path: String },
    Oci { repository: String, digest: String },
}

#[derive(Default)]
struct State {
    by_revision: HashMap<CacheKey, (Arc<Artifact>, u64)>,
    last_good: HashMap<Source, Arc<Artifact>>,
    tick: u64,
}

struct Inner {
    options: FetchOptions,
    policy: net::HostPolicy,
    cache_dir: Option<PathBuf>,
    oci: Result<oci_client::Client, String>,
    state: Mutex<State>,
    git_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    downloads: AtomicU64,
    cache_hits: AtomicU64,
    failures: AtomicU64,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement, so a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached artifact of `key`, counting a hit.
    fn cached(&self, key: &CacheKey) -> Option<Arc<Artifact>> {
        let mut state = self.state();
        state.tick += 1;
        let tick = state.tick;
        let entry = state.by_revision.get_mut(key)?;
        entry.1 = tick;
        let artifact = entry.0.clone();
        drop(state);
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
        Some(artifact)
    }

    /// Files a freshly downloaded artifact under `key`, counting a download.
    fn store(&self, key: CacheKey, artifact: Artifact) -> Arc<Artifact> {
        let artifact = Arc::new(artifact);
        let mut state = self.state();
        state.tick += 1;
        let tick = state.tick;
        state.by_revision.insert(key, (artifact.clone(), tick));
        let capacity = self.options.cache_capacity.max(1);
        while state.by_revision.len() > capacity {
            let oldest = state.by_revision.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
            match oldest {
                Some(k) => state.by_revision.remove(&k),
                None => break,
            };
        }
        drop(state);
        self.downloads.fetch_add(1, Ordering::Relaxed);
        artifact
    }

    /// The lock serializing work on the on-disk clone of `url`.
    fn git_lock(&self, url: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.git_locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(url.to_string()).or_default().clone()
    }
}

impl Fetcher {
    /// A fetcher with an empty cache. `cache_dir`, when given, keeps Git clones on disk between
    /// fetches (created if missing); artifacts are cached in memory either way.
    ///
    /// Installs rustls's `ring` provider as the process default if no default is installed.
    pub fn new(options: FetchOptions, cache_dir: Option<PathBuf>) -> Self {
        // Err means another provider is already the default: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let oci = oci::client(&options);
        Fetcher {
            inner: Arc::new(Inner {
                policy: options.host_policy(),
                options,
                cache_dir,
                oci,
                state: Mutex::new(State::default()),
                git_locks: Mutex::new(HashMap::new()),
                downloads: AtomicU64::new(0),
                cache_hits: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            }),
        }
    }

    /// The options this fetcher was made with.
    pub fn options(&self) -> &FetchOptions {
        &self.inner.options
    }

    /// Fetches `source` now: resolves its reference to a revision (Git commit, OCI manifest
    /// digest); returns the cached artifact if that revision was fetched before, else downloads,
    /// verifies and caches it. A success also becomes the source's last good artifact.
    pub async fn fetch(&self, source: &Source) -> Result<Arc<Artifact>, SourceError> {
        // Git enforces the time-out inside its worker (which stops the transfer and answers
        // TimedOut); OCI is async, so dropping its future at the time-out closes its connection.
        let result = match source {
            Source::Git(git) => git::fetch(&self.inner, git).await,
            Source::Oci(oci) => {
                let timeout = self.inner.options.timeout;
                match tokio::time::timeout(timeout, oci::fetch(&self.inner, oci)).await {
                    Ok(result) => result,
                    Err(_) => Err(SourceError::TimedOut {
                        input: source.to_string(),
                        limit: timeout,
                        detail: "the registry did not deliver the artifact in time".to_string(),
                    }),
                }
            }
        };
        match &result {
            Ok(artifact) => {
                self.inner.state().last_good.insert(source.clone(), artifact.clone());
            }
            Err(error) => {
                self.inner.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "fetching a bundle input failed");
            }
        }
        result
    }

    /// Fetches `source` like [`Fetcher::fetch`]; when that fails, returns the last good artifact
    /// of the same source (if any) together with the error, so the caller can keep using it and
    /// report the failure.
    pub async fn fetch_or_last_good(&self, source: &Source) -> Fetched {
        match self.fetch(source).await {
            Ok(artifact) => Fetched { artifact: Some(artifact), error: None },
            Err(error) => Fetched { artifact: self.last_good(source), error: Some(error) },
        }
    }

    /// The last artifact fetched successfully for `source`, without fetching.
    pub fn last_good(&self, source: &Source) -> Option<Arc<Artifact>> {
        self.inner.state().last_good.get(source).cloned()
    }

    /// Forgets the last good artifact of a source that is no longer used.
    pub fn forget(&self, source: &Source) {
        self.inner.state().last_good.remove(source);
    }

    /// The counters since this fetcher was made.
    pub fn stats(&self) -> FetchStats {
        FetchStats {
            downloads: self.inner.downloads.load(Ordering::Relaxed),
            cache_hits: self.inner.cache_hits.load(Ordering::Relaxed),
            failures: self.inner.failures.load(Ordering::Relaxed),
        }
    }
}
