//! Where blobs are: a store URL, and the [`BlobStore`] it opens.
//!
//! Two kinds of URL (`--log-store`, `VARROA_LOG_STORE`):
//!
//! - `file:///var/lib/varroa/logs`: a local directory (absolute path; created, with the
//!   directories under it, on the first write). Objects are files; a write goes to a staging file
//!   beside its object and is published with a hard link (a conditional create) or a rename, then
//!   fsynced with its directory, so a reader never sees half an object and an acknowledged write
//!   survives a crash.
//! - `s3://bucket[/prefix][?endpoint=URL&region=NAME]`: an S3 bucket, every object under
//!   `prefix/`. `endpoint` is an S3-compatible server (MinIO, Ceph, moto), path-style; an
//!   `http://` endpoint is allowed as written (say `https://` for TLS). `region` defaults to
//!   `AWS_REGION`/`AWS_DEFAULT_REGION`, else `us-east-1`. Credentials come from the usual AWS
//!   environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, web
//!   identity, the container or instance metadata), or from a credentials file
//!   ([`StoreSettings::credentials_file`], re-read when it changes: see [`crate::credentials`]).
//!   A conditional create is `PUT` with `If-None-Match: *` (S3 has it since 2024; MinIO and moto
//!   too).
//!
//! Every request is bounded: [`REQUEST_TIMEOUT`] per attempt, at most [`RETRIES`] retries within
//! [`RETRY_TIMEOUT`], so that a store that is away is reported in seconds (the gateway answers the
//! plugin "retry"), not after object_store's default three minutes.
//!
//! TLS (an `https://` endpoint, AWS itself) is rustls with the process's default provider: the
//! binaries install ring at the top of `main`. Neither openssl nor aws-lc-rs is compiled in.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

/// The default store: a local directory.
pub const DEFAULT_URL: &str = "file:///var/lib/varroa/logs";
/// How long one request attempt may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Retries of one request (object_store retries on connection errors and 5xx).
pub const RETRIES: usize = 2;
/// How long an operation with its retries may take in all.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(8);

/// Errors opening a store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is not one this crate opens.
    #[error("invalid store URL {url:?}: {reason}; {}", FIX)]
    Url {
        /// The URL as given (it carries no secret: credentials never go in it).
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// object_store refused the configuration.
    #[error("cannot open the store {url}: {message}")]
    Open {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The credentials file is unusable.
    #[error(transparent)]
    Credentials(#[from] crate::credentials::CredentialsError),
}

const FIX: &str = "use file:///absolute/directory or s3://bucket/prefix?endpoint=https://host:port&region=name";

/// Errors of one store operation.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path} in {store}: {message}")]
pub struct BlobError {
    /// What was done (`write`, `list`, `read`).
    pub op: &'static str,
    /// The object or prefix.
    pub path: String,
    /// The store's URL.
    pub store: String,
    /// The store's error.
    pub message: String,
}

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// A local directory.
    File {
        /// The absolute directory.
        root: PathBuf,
    },
    /// An S3 bucket.
    S3 {
        /// The bucket.
        bucket: String,
        /// The prefix every object is under (no leading or trailing `/`; empty: the bucket's root).
        prefix: String,
        /// An S3-compatible endpoint (`http://127.0.0.1:9000`).
        endpoint: Option<String>,
        /// The region.
        region: Option<String>,
    },
}

impl StoreUrl {
    /// Parses `file:///dir` or `s3://bucket/prefix?endpoint=...&region=...`.
    pub fn parse(text: &str) -> Result<StoreUrl, StoreError> {
        let bad = |reason: &str| StoreError::Url { url: text.to_owned(), reason: reason.to_owned() };
        let url = url::Url::parse(text).map_err(|e| bad(&format!("not a URL ({e})")))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("credentials do not go in the URL (use the AWS environment or the credentials file)"));
        }
        if url.fragment().is_some() {
            return Err(bad("a #fragment means nothing here"));
        }
        match url.scheme() {
            "file" => {
                if url.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
                    return Err(bad("a file URL names a local directory: file:///absolute/path (no host)"));
                }
                if url.query().is_some() {
                    return Err(bad("a file URL takes no ?options"));
                }
                let root = url.to_file_path().map_err(|_| bad("not an absolute local path"))?;
                let s = root.to_string_lossy();
                if s == "/" {
                    return Err(bad("the file system's root is not a store directory"));
                }
                if root.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
                    return Err(bad("'..' is not allowed in the directory"));
                }
                Ok(StoreUrl::File { root })
            }
            "s3" => {
                let bucket = url.host_str().unwrap_or_default().to_owned();
                if let Some(why) = bucket_problem(&bucket) {
                    return Err(bad(&format!("bucket {bucket:?}: {why}")));
                }
                let prefix = url.path().trim_matches('/').to_owned();
                if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains("//") {
                    return Err(bad("the prefix must be plain path segments (no '.', '..' or empty ones)"));
                }
                let prefix = percent_decode(&prefix).ok_or_else(|| bad("the prefix is not UTF-8 once decoded"))?;
                let (mut endpoint, mut region) = (None, None);
                for (k, v) in url.query_pairs() {
                    match k.as_ref() {
                        "endpoint" => {
                            let e =
                                url::Url::parse(&v).map_err(|e| bad(&format!("endpoint {v:?} is not a URL ({e})")))?;
                            if !matches!(e.scheme(), "http" | "https") || e.host_str().is_none() {
                                return Err(bad(&format!("endpoint {v:?}: expected http(s)://host[:port]")));
                            }
                            endpoint = Some(v.trim_end_matches('/').to_owned());
                        }
                        "region" if !v.is_empty() => region = Some(v.into_owned()),
                        other => {
                            return Err(bad(&format!("unknown option {other:?}; the options are endpoint and region")));
                        }
                    }
                }
                Ok(StoreUrl::S3 { bucket, prefix, endpoint, region })
            }
            other => Err(bad(&format!("unknown scheme {other:?}"))),
        }
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What is wrong with an S3 bucket name, if anything (AWS' rules, as far as a typo goes).
fn bucket_problem(b: &str) -> Option<&'static str> {
    if b.len() < 3 || b.len() > 63 {
        return Some("must be 3 to 63 characters");
    }
    if !b.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.') {
        return Some("only lowercase letters, digits, '-' and '.' are allowed");
    }
    let first_last = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !first_last(b.as_bytes()[0]) || !first_last(b.as_bytes()[b.len() - 1]) {
        return Some("must start and end with a letter or digit");
    }
    None
}

/// How to open a store (the flags `--log-store` and `--log-store-credentials-file`).
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// The store URL.
    pub url: String,
    /// An S3 credentials file (`access_key_id=`, `secret_access_key=`, `session_token=` lines),
    /// re-read when it changes; without it the AWS environment is used.
    pub credentials_file: Option<PathBuf>,
}

impl StoreSettings {
    /// Settings for `url` with the AWS environment's credentials.
    pub fn new(url: impl Into<String>) -> StoreSettings {
        StoreSettings { url: url.into(), credentials_file: None }
    }
}

/// A conditional create's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The object did not exist and now holds the bytes.
    Created,
    /// An object was there already; nothing was written.
    AlreadyExists,
}

/// An opened store: every object under one root (cheap to clone).
#[derive(Clone)]
pub struct BlobStore {
    inner: Arc<dyn ObjectStore>,
    /// What presigns URLs: the S3 store itself; `None` for a directory (nothing to presign).
    signer: Option<Arc<dyn object_store::signer::Signer>>,
    root: Path,
    url: String,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStore").field("url", &self.url).finish()
    }
}

impl BlobStore {
    /// Opens the store `settings` name. Nothing is contacted yet: a store that is away fails the
    /// first operation, not this.
    pub fn open(settings: &StoreSettings) -> Result<BlobStore, StoreError> {
        let parsed = StoreUrl::parse(&settings.url)?;
        let url = settings.url.clone();
        let open_err = |e: object_store::Error| StoreError::Open { url: url.clone(), message: e.to_string() };
        match parsed {
            StoreUrl::File { root } => {
                if settings.credentials_file.is_some() {
                    return Err(StoreError::Url { url, reason: "a credentials file is for s3:// stores only".into() });
                }
                // The file system's root as the store, the directory as the prefix: the
                // directory need not exist yet (it is created on the first write).
                let fs = object_store::local::LocalFileSystem::new().with_fsync(true);
                let root = Path::from_absolute_path(&root).map_err(|e| open_err(e.into()))?;
                Ok(BlobStore { inner: Arc::new(fs), signer: None, root, url })
            }
            StoreUrl::S3 { bucket, prefix, endpoint, region } => {
                use object_store::aws::AmazonS3Builder;
                let mut b = AmazonS3Builder::from_env().with_bucket_name(&bucket);
                let region = region
                    .or_else(|| std::env::var("AWS_REGION").ok().filter(|r| !r.is_empty()))
                    .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok().filter(|r| !r.is_empty()))
                    .unwrap_or_else(|| "us-east-1".to_owned());
                b = b.with_region(region);
                let mut client = object_store::ClientOptions::new()
                    .with_timeout(REQUEST_TIMEOUT)
                    .with_connect_timeout(CONNECT_TIMEOUT);
                if let Some(e) = endpoint {
                    client = client.with_allow_http(e.starts_with("http://"));
                    b = b.with_endpoint(e).with_virtual_hosted_style_request(false);
                }
                b = b.with_client_options(client).with_retry(object_store::RetryConfig {
                    backoff: object_store::BackoffConfig {
                        init_backoff: Duration::from_millis(100),
                        max_backoff: Duration::from_secs(1),
                        base: 2.0,
                    },
                    max_retries: RETRIES,
                    retry_timeout: RETRY_TIMEOUT,
                });
                if let Some(path) = &settings.credentials_file {
                    let provider = crate::credentials::FileCredentials::new(path.clone())?;
                    b = b.with_credentials(Arc::new(provider));
                }
                let s3 = Arc::new(b.build().map_err(open_err)?);
                let root = Path::from_iter(prefix.split('/').filter(|p| !p.is_empty()));
                Ok(BlobStore { inner: s3.clone(), signer: Some(s3), root, url })
            }
        }
    }

    /// The store's URL (it holds no secret).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The root every object is under.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The name of `path` relative to `prefix`'s directory (its last part).
    pub(crate) fn name_in(path: &Path) -> Option<String> {
        path.filename().map(str::to_owned)
    }

    fn err(&self, op: &'static str, path: &Path, e: impl std::fmt::Display) -> BlobError {
        BlobError { op, path: path.to_string(), store: self.url.clone(), message: e.to_string() }
    }

    /// Writes `bytes` at `path` only if nothing is there.
    pub(crate) async fn create(&self, path: &Path, bytes: Bytes) -> Result<Created, BlobError> {
        let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
        let put = self.inner.put_opts(path, PutPayload::from_bytes(bytes), opts);
        match bounded(put).await {
            Ok(Ok(_)) => Ok(Created::Created),
            Ok(Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. })) => {
                Ok(Created::AlreadyExists)
            }
            Ok(Err(e)) => Err(self.err("write", path, e)),
            Err(t) => Err(self.err("write", path, t)),
        }
    }

    /// Writes `bytes` at `path`, replacing what is there.
    pub(crate) async fn overwrite(&self, path: &Path, bytes: Bytes) -> Result<(), BlobError> {
        match bounded(self.inner.put(path, PutPayload::from_bytes(bytes))).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.err("write", path, e)),
            Err(t) => Err(self.err("write", path, t)),
        }
    }

    /// The objects directly or deeper under `prefix` whose path sorts after `after`, in no
    /// promised order.
    pub(crate) async fn list(&self, prefix: &Path, after: Option<&Path>) -> Result<Vec<ObjectMeta>, BlobError> {
        let stream = match after {
            Some(a) => self.inner.list_with_offset(Some(prefix), a),
            None => self.inner.list(Some(prefix)),
        };
        match bounded(stream.try_collect::<Vec<_>>()).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.err("list", prefix, e)),
            Err(t) => Err(self.err("list", prefix, t)),
        }
    }

    /// The names of the "directories" directly under `prefix`.
    pub(crate) async fn dirs(&self, prefix: &Path) -> Result<Vec<String>, BlobError> {
        match bounded(self.inner.list_with_delimiter(Some(prefix))).await {
            Ok(Ok(r)) => Ok(r.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_owned)).collect()),
            Ok(Err(e)) => Err(self.err("list", prefix, e)),
            Err(t) => Err(self.err("list", prefix, t)),
        }
    }

    /// A URL that lets whoever holds it `method` the object at `path` until `expires_in` has
    /// passed, signed with the store's credentials (S3's SigV4 query signing); `Ok(None)` when
    /// this store cannot presign (a directory).
    pub(crate) async fn presign(
        &self,
        method: object_store::signer::Method,
        path: &Path,
        expires_in: Duration,
    ) -> Result<Option<url::Url>, BlobError> {
        let Some(signer) = &self.signer else { return Ok(None) };
        match bounded(signer.signed_url(method, path, expires_in)).await {
            Ok(Ok(u)) => Ok(Some(u)),
            Ok(Err(e)) => Err(self.err("sign", path, e)),
            Err(t) => Err(self.err("sign", path, t)),
        }
    }

    /// Whether this store can presign URLs (an `s3://` store).
    pub fn can_presign(&self) -> bool {
        self.signer.is_some()
    }

    /// Deletes the objects at `paths`; one that is not there (deleted meanwhile) is not an error.
    /// S3 deletes up to 1,000 keys per request (`DeleteObjects`), a directory a few files at once;
    /// each group of [`DELETE_GROUP`] is bounded like any other operation. Returns how many are
    /// gone (deleted now, or not there).
    pub(crate) async fn delete_all(&self, mut paths: Vec<Path>) -> Result<u64, BlobError> {
        let mut done = 0;
        while !paths.is_empty() {
            let rest = paths.split_off(paths.len().min(DELETE_GROUP));
            let group = std::mem::replace(&mut paths, rest);
            let first = group[0].clone();
            let locations = futures::stream::iter(group.into_iter().map(Ok)).boxed();
            let delete = async {
                let mut results = self.inner.delete_stream(locations);
                while let Some(r) = results.next().await {
                    match r {
                        Ok(_) | Err(object_store::Error::NotFound { .. }) => done += 1,
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            };
            match bounded(delete).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(self.err("delete", &first, e)),
                Err(t) => return Err(self.err("delete", &first, t)),
            }
        }
        Ok(done)
    }

    /// On a `file://` store, removes the directory of `dir` and then its parents while they are
    /// empty, `levels` at most (a directory that is not empty, or not there, ends it). S3 has no
    /// directories: nothing to do.
    pub(crate) fn remove_empty_dirs(&self, dir: &Path, levels: usize) {
        let Ok(StoreUrl::File { root: base }) = StoreUrl::parse(&self.url) else { return };
        // The store is the file system's root with the directory as its root path (open).
        let Ok(mut path) = object_store::local::LocalFileSystem::new().path_to_filesystem(dir) else { return };
        if !path.starts_with(&base) || path == base {
            return;
        }
        for _ in 0..levels {
            if std::fs::remove_dir(&path).is_err() || !path.pop() || path == base {
                break;
            }
        }
    }

    /// The object's size, or `None` when there is none.
    pub(crate) async fn size(&self, path: &Path) -> Result<Option<u64>, BlobError> {
        match bounded(self.inner.head(path)).await {
            Ok(Ok(m)) => Ok(Some(m.size)),
            Ok(Err(object_store::Error::NotFound { .. })) => Ok(None),
            Ok(Err(e)) => Err(self.err("read", path, e)),
            Err(t) => Err(self.err("read", path, t)),
        }
    }

    /// The object's bytes from `from` on, or `None` when there is none.
    pub(crate) async fn read(&self, path: &Path, from: u64) -> Result<Option<Bytes>, BlobError> {
        let opts = GetOptions { range: (from > 0).then_some(GetRange::Offset(from)), ..Default::default() };
        let get = async {
            let r = self.inner.get_opts(path, opts).await?;
            r.bytes().await
        };
        match bounded(get).await {
            Ok(Ok(b)) => Ok(Some(b)),
            Ok(Err(object_store::Error::NotFound { .. })) => Ok(None),
            Ok(Err(e)) => Err(self.err("read", path, e)),
            Err(t) => Err(self.err("read", path, t)),
        }
    }
}

/// The most objects one delete request (one bounded operation) is given.
pub const DELETE_GROUP: usize = 1000;

/// How long one operation may take in all (object_store's own bounds are per request).
const OPERATION_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug)]
struct TimedOut;

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no answer within {OPERATION_TIMEOUT:?}")
    }
}

async fn bounded<T>(f: impl Future<Output = T>) -> Result<T, TimedOut> {
    tokio::time::timeout(OPERATION_TIMEOUT, f).await.map_err(|_| TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_what_is_wrong() {
        assert_eq!(
            StoreUrl::parse("file:///var/lib/varroa/logs").unwrap(),
            StoreUrl::File { root: "/var/lib/varroa/logs".into() }
        );
        assert_eq!(
            StoreUrl::parse("file:///tmp/with%20space").unwrap(),
            StoreUrl::File { root: "/tmp/with space".into() }
        );
        assert_eq!(
            StoreUrl::parse("s3://varroa-logs/eu/prod?endpoint=http://127.0.0.1:9000/&region=eu-west-1").unwrap(),
            StoreUrl::S3 {
                bucket: "varroa-logs".into(),
                prefix: "eu/prod".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: Some("eu-west-1".into()),
            }
        );
        assert_eq!(
            StoreUrl::parse("s3://logs").unwrap(),
            StoreUrl::S3 { bucket: "logs".into(), prefix: "".into(), endpoint: None, region: None }
        );
        for (bad, why) in [
            ("/var/lib/varroa/logs", "not a URL"),
            ("file://host/x", "no host"),
            ("file:///", "root"),
            ("file:///x?y=1", "no ?options"),
            ("s3://ab", "3 to 63"),
            ("s3://Logs", "lowercase"),
            ("s3://logs?endpoint=ftp://x", "http(s)"),
            ("s3://logs?bucket=x", "unknown option \"bucket\""),
            ("s3://key:secret@logs", "credentials do not go in the URL"),
            ("s3://logs/a//b", "plain path segments"),
            ("gs://logs", "unknown scheme"),
        ] {
            let e = StoreUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("file:///absolute/directory"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_file_store_opens_without_its_directory_and_s3_without_contacting_anything() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/not/yet", dir.path().display());
        let s = BlobStore::open(&StoreSettings::new(&url)).unwrap();
        assert_eq!(s.url(), url);
        assert!(!dir.path().join("not").exists(), "created on the first write only");
        BlobStore::open(&StoreSettings::new("s3://logs/x?endpoint=http://127.0.0.1:1")).unwrap();
        let with_file = StoreSettings { credentials_file: Some(dir.path().join("c")), ..StoreSettings::new(&url) };
        assert!(BlobStore::open(&with_file).unwrap_err().to_string().contains("s3:// stores only"));
    }
}
