//! The Varroa plugin's archived artifacts (docs/varroa/plugin-protocol.md, "Archived
//! artifacts"): when a build of a job that declares `artifacts` finishes, the double asks the mite
//! for upload URLs, `POST {plugin-url}/v1/artifacts/{job}/{build}` with every file's path and
//! size, and `PUT`s each file's bytes straight to its presigned URL: the files never go through
//! the mite or the gateway, and no store credential is in the pod.
//!
//! What the plugin does with each answer, as the double does it:
//!
//! - `200 {"uploads": [{"path", "url"}], "expires"}`: each file is `PUT` to its URL, one after
//!   the other. A `2xx` is done. A `403` (the URL expired or was refused) asks the mite again for
//!   the files not sent yet (at most [`ArtifactsConfig::max_rounds`] rounds). Another status or
//!   a failed connection sends the file again after the back-off.
//! - `400`: the request is malformed (the error names the field): nothing is uploaded, logged
//!   once; the files stay with Jenkins' own archiving.
//! - `404` (a mite without artifacts) or `501` (the gateway's store cannot presign: artifacts
//!   need an `s3://` store): **fallback**, the files stay with Jenkins' own archiving.
//! - `401`: the token file is read again and the request sent again at once.
//! - `503`, another `5xx`, a refused connection or a timeout: asked again after `Retry-After`,
//!   else the back-off (1 s doubling to 30 s), for at most [`ArtifactsConfig::give_up_after`]
//!   (5 minutes), then fallback.
//!
//! The double's `PUT` is plain HTTP (hyper without TLS): enough for an `http://` endpoint such as
//! moto in tests; the real plugin uses Jenkins' HTTP client, with TLS.

use crate::client::{self, Http, Token};
use crate::logs::job_path;
use crate::plugin::PluginError;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// One file a job's builds archive.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactConfig {
    /// The path relative to the build's artifacts (`target/app.jar`).
    pub path: String,
    /// The file's text; without it, `size` bytes of [`pattern`].
    #[serde(default)]
    pub content: Option<String>,
    /// The size when there is no `content` (default 0).
    #[serde(default)]
    pub size: u64,
}

impl ArtifactConfig {
    /// The file's bytes.
    pub fn bytes(&self) -> Bytes {
        match &self.content {
            Some(c) => Bytes::from(c.clone().into_bytes()),
            None => pattern(&self.path, self.size),
        }
    }
}

/// `size` deterministic bytes for `path` (so a test can compare what landed).
pub fn pattern(path: &str, size: u64) -> Bytes {
    let seed = path.bytes().fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
    (0..size).map(|i| seed.wrapping_add((i % 251) as u8)).collect::<Vec<u8>>().into()
}

/// How artifacts are sent.
#[derive(Debug, Clone)]
pub struct ArtifactsConfig {
    /// `VARROA_PLUGIN_URL`.
    pub url: String,
    /// `VARROA_PLUGIN_TOKEN_FILE`.
    pub token_file: PathBuf,
    /// One request's timeout, to the mite or one `PUT` (30 s).
    pub request_timeout: Duration,
    /// The first back-off (1 s).
    pub backoff_initial: Duration,
    /// The longest back-off (30 s).
    pub backoff_max: Duration,
    /// How long a build's upload is retried before it falls back to Jenkins' archiving (5 min).
    pub give_up_after: Duration,
    /// How often URLs are asked for again after `403`s (3).
    pub max_rounds: u32,
}

impl ArtifactsConfig {
    /// The protocol's defaults.
    pub fn new(url: impl Into<String>, token_file: impl Into<PathBuf>) -> ArtifactsConfig {
        ArtifactsConfig {
            url: url.into(),
            token_file: token_file.into(),
            request_timeout: Duration::from_secs(30),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            give_up_after: Duration::from_secs(300),
            max_rounds: 3,
        }
    }
}

/// What the artifacts client did so far (`GET /__double/plugin`, `artifacts`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactCounters {
    /// Builds whose upload ended (uploaded, fell back or refused).
    pub builds: u64,
    /// Builds whose every file was uploaded.
    pub uploaded_builds: u64,
    /// Files `PUT` with a `2xx`.
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Requests to the mite.
    pub requests: u64,
    /// Attempts again (`503`, `5xx`, `401`, refused connections, timeouts, failed `PUT`s).
    pub retries: u64,
    /// Builds left to Jenkins' own archiving (`404`, `501`, gave up).
    pub fallbacks: u64,
    /// Requests answered `400`.
    pub refused: u64,
    /// The last error, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Debug)]
struct Inner {
    config: ArtifactsConfig,
    base: String,
    http: Http,
    token: Token,
    counters: Mutex<ArtifactCounters>,
    done: watch::Sender<u64>,
}

impl Inner {
    fn counters(&self) -> MutexGuard<'_, ArtifactCounters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The artifacts client.
#[derive(Debug, Clone)]
pub struct ArtifactsClient {
    inner: Arc<Inner>,
}

/// How one build's upload ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every file landed.
    Uploaded,
    /// Left to Jenkins' own archiving, and why.
    Fallback(String),
    /// Refused as malformed (`400`), and why.
    Refused(String),
}

#[derive(Deserialize)]
struct Upload {
    path: String,
    url: String,
}

#[derive(Deserialize)]
struct Uploads {
    uploads: Vec<Upload>,
}

impl ArtifactsClient {
    /// Checks the URL and reads the token file.
    pub fn new(config: ArtifactsConfig) -> Result<ArtifactsClient, PluginError> {
        let base = client::base_url(&config.url)?;
        Ok(ArtifactsClient {
            inner: Arc::new(Inner {
                http: client::http(config.request_timeout),
                token: Token::new(config.token_file.clone()),
                counters: Mutex::new(ArtifactCounters::default()),
                done: watch::Sender::new(0),
                base,
                config,
            }),
        })
    }

    /// The counters now.
    pub fn counters(&self) -> ArtifactCounters {
        self.inner.counters().clone()
    }

    /// Waits until `n` builds' uploads ended (uploaded, fell back or refused).
    pub async fn wait_builds(&self, n: u64) {
        let mut rx = self.inner.done.subscribe();
        let _ = rx.wait_for(|d| *d >= n).await;
    }

    /// Uploads a finished build's files in the background.
    pub fn spawn(&self, job: &str, build: u64, files: Vec<ArtifactConfig>) {
        let this = self.clone();
        let job = job.to_owned();
        tokio::spawn(async move {
            let outcome = this.upload(&job, build, &files).await;
            let mut c = this.inner.counters();
            c.builds += 1;
            match &outcome {
                Outcome::Uploaded => c.uploaded_builds += 1,
                Outcome::Fallback(why) => {
                    c.fallbacks += 1;
                    tracing::warn!(%job, build, reason = %why, "artifacts left to Jenkins' own archiving");
                    c.last_error = Some(why.clone());
                }
                Outcome::Refused(why) => {
                    c.refused += 1;
                    tracing::warn!(%job, build, error = %why, "the mite refused the artifact request");
                    c.last_error = Some(why.clone());
                }
            }
            drop(c);
            this.inner.done.send_modify(|d| *d += 1);
        });
    }

    /// Uploads a build's files; how it ended.
    pub async fn upload(&self, job: &str, build: u64, files: &[ArtifactConfig]) -> Outcome {
        let inner = &self.inner;
        let started = Instant::now();
        let mut left: Vec<&ArtifactConfig> = files.iter().collect();
        let mut failures = 0u32;
        let mut rounds = 0u32;
        let mut reread = false;
        while !left.is_empty() {
            if started.elapsed() > inner.config.give_up_after {
                return Outcome::Fallback(format!(
                    "no upload within {:?}: the mite or the store is away",
                    inner.config.give_up_after
                ));
            }
            let token = inner.token.get();
            let body = serde_json::json!({
                "v": 1,
                "files": left.iter().map(|f| serde_json::json!({"path": f.path, "size": f.bytes().len()})).collect::<Vec<_>>(),
            });
            let mut req = Request::builder()
                .method(Method::POST)
                .uri(format!("{}/v1/artifacts/{}/{build}", inner.base, job_path(job)))
                .header(http::header::CONTENT_TYPE, "application/json");
            if let Some(t) = &token {
                req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
            }
            let Ok(req) = req.body(Full::new(Bytes::from(body.to_string()))) else {
                return Outcome::Refused(format!("job {job:?}: cannot be put in a request path"));
            };
            inner.counters().requests += 1;
            let again = |failures: &mut u32, after: Option<Duration>, why: String| {
                *failures += 1;
                let mut c = inner.counters();
                c.retries += 1;
                c.last_error = Some(why);
                after.unwrap_or_else(|| {
                    client::backoff(inner.config.backoff_initial, inner.config.backoff_max, *failures)
                })
            };
            let a = match client::exchange(&inner.http, req, inner.config.request_timeout).await {
                Ok(a) => a,
                Err(why) => {
                    tokio::time::sleep(again(&mut failures, None, why)).await;
                    continue;
                }
            };
            match a.status {
                StatusCode::OK => {}
                StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => return Outcome::Refused(a.error()),
                StatusCode::NOT_FOUND | StatusCode::NOT_IMPLEMENTED => {
                    return Outcome::Fallback(format!("{} {}", a.status.as_u16(), a.error()));
                }
                StatusCode::UNAUTHORIZED if !reread && inner.token.reread(token.as_deref()) => {
                    reread = true;
                    continue;
                }
                s => {
                    let wait = again(&mut failures, a.retry_after, format!("{} {}", s.as_u16(), a.error()));
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
            reread = false;
            let Ok(uploads) = serde_json::from_slice::<Uploads>(&a.body) else {
                let wait = again(&mut failures, None, "200 without uploads".into());
                tokio::time::sleep(wait).await;
                continue;
            };
            let mut expired = false;
            let mut sent = Vec::new();
            for f in &left {
                let Some(u) = uploads.uploads.iter().find(|u| u.path == f.path) else {
                    continue;
                };
                loop {
                    if started.elapsed() > inner.config.give_up_after {
                        return Outcome::Fallback(format!(
                            "{} not uploaded within {:?}",
                            f.path, inner.config.give_up_after
                        ));
                    }
                    match put(inner, &u.url, f.bytes()).await {
                        Ok(n) => {
                            let mut c = inner.counters();
                            c.files += 1;
                            c.bytes += n;
                            sent.push(f.path.clone());
                            break;
                        }
                        Err(Put::Forbidden(why)) => {
                            inner.counters().last_error = Some(why);
                            expired = true;
                            break;
                        }
                        Err(Put::Again(why)) => {
                            tokio::time::sleep(again(&mut failures, None, why)).await;
                        }
                    }
                }
                if expired {
                    break;
                }
            }
            left.retain(|f| !sent.contains(&f.path));
            if expired {
                rounds += 1;
                if rounds >= inner.config.max_rounds {
                    return Outcome::Fallback(format!("the store refused the upload URLs {rounds} times"));
                }
            }
        }
        Outcome::Uploaded
    }
}

enum Put {
    /// `403`: the URL expired or the store refused its signature: ask for new URLs.
    Forbidden(String),
    /// Send it again after the back-off.
    Again(String),
}

async fn put(inner: &Inner, url: &str, bytes: Bytes) -> Result<u64, Put> {
    let n = bytes.len() as u64;
    let req = Request::builder()
        .method(Method::PUT)
        .uri(url)
        .header(http::header::CONTENT_LENGTH, n)
        .body(Full::new(bytes))
        .map_err(|e| Put::Forbidden(format!("the upload URL is not usable: {e}")))?;
    match client::exchange(&inner.http, req, inner.config.request_timeout).await {
        Ok(a) if a.status.is_success() => Ok(n),
        Ok(a) if a.status == StatusCode::FORBIDDEN => {
            Err(Put::Forbidden(format!("PUT: 403 {}", String::from_utf8_lossy(&a.body[..a.body.len().min(256)]))))
        }
        Ok(a) => Err(Put::Again(format!("PUT: {} {}", a.status.as_u16(), a.error()))),
        Err(why) => Err(Put::Again(format!("PUT: {why}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_have_their_content_or_a_pattern_of_their_size() {
        let a = ArtifactConfig { path: "a.txt".into(), content: Some("hello".into()), size: 99 };
        assert_eq!(a.bytes(), Bytes::from_static(b"hello"));
        let b = ArtifactConfig { path: "b.bin".into(), content: None, size: 1000 };
        assert_eq!(b.bytes().len(), 1000);
        assert_eq!(b.bytes(), pattern("b.bin", 1000));
        assert_ne!(pattern("b.bin", 10), pattern("c.bin", 10));
    }
}
