//! The mite's client for Jenkins' documented HTTP API, and what it observes.
//!
//! The mite reaches Jenkins only through the endpoints a Jenkins administrator can script against
//! (<https://www.jenkins.io/doc/book/using/remote-access-api/>); `docs/varroa/jenkins-double.md`
//! lists each with the Jenkins source it follows, and varroa-jenkins-double plays them in tests.
//!
//! - **Credentials**: HTTP basic `user:apitoken`. The token is read from a file on every request,
//!   so a rotated Secret needs no restart; the file holds the token alone (whitespace trimmed).
//! - **CSRF crumbs**: Jenkins exempts requests authenticated by an API token from crumbs
//!   (`ApiCrumbExclusion`, 2.96 and later), so with a token a crumb is never needed. The client
//!   still fetches one from `/crumbIssuer/api/json` before its first POST, caches it, and on a 403
//!   "No valid crumb was included in the request" refetches it and retries once: the same client
//!   then works with a password, and with a Jenkins that restarted and changed its crumb salt. A
//!   404 from the crumb issuer means CSRF protection is off and no header is sent.
//! - **Bounds**: every request has a timeout ([`ClientConfig::timeout`]) and every answer a size
//!   limit ([`ClientConfig::max_body`]); redirects are not followed (Jenkins answers a successful
//!   POST with 302, which is the answer we want to see).
//!
//! # Observations
//!
//! [`JenkinsClient::observe`] reads `/api/json` (with the `X-Jenkins` version header), the queue,
//! the executors and the plugins, and returns an [`Observation`]. How long Jenkins has been idle
//! is tracked here, not asked: Jenkins has no such field. The client remembers when it first saw
//! an empty queue and no busy executor after seeing work, and reports that instant
//! ([`Observation::idle_since_unix`]) rather than a growing duration, so that an idle Jenkins
//! produces no delta at all between two observations ([`Observation::delta`]). The plugins digest
//! is `sha256:<hex>` over the lines `name:version\n` of every installed plugin sorted by name:
//! the SHA-256 of a sorted plugins.txt listing exactly the installed plugins.

use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The header Jenkins' CSRF filter reads unless configured otherwise.
pub const DEFAULT_CRUMB_FIELD: &str = "Jenkins-Crumb";

/// Where Jenkins is and how to talk to it.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Jenkins' root URL, e.g. `http://127.0.0.1:8080` (a trailing slash is ignored).
    pub url: String,
    /// The user the API token belongs to.
    pub user: String,
    /// A file holding the API token, read on every request.
    pub token_file: PathBuf,
    /// The most one request may take, connect to last byte.
    pub timeout: Duration,
    /// The largest answer read.
    pub max_body: usize,
}

impl ClientConfig {
    /// Defaults: 10 s per request, 8 MiB per answer.
    pub fn new(url: &str, user: &str, token_file: impl Into<PathBuf>) -> Self {
        ClientConfig {
            url: url.trim_end_matches('/').to_string(),
            user: user.into(),
            token_file: token_file.into(),
            timeout: Duration::from_secs(10),
            max_body: 8 << 20,
        }
    }
}

/// A failure talking to Jenkins, naming what to check.
#[derive(Debug, thiserror::Error)]
pub enum JenkinsError {
    /// The token file is unreadable.
    #[error("cannot read the Jenkins API token from {path}: {source} (mount the token Secret there)")]
    Token {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The token file is empty.
    #[error("the Jenkins API token file {path} is empty (write the user's API token into it)")]
    EmptyToken {
        /// The file.
        path: PathBuf,
    },
    /// No connection (refused, reset, DNS).
    #[error("Jenkins is unreachable at {url}: {detail}")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// The cause.
        detail: String,
    },
    /// No complete answer in time.
    #[error("Jenkins did not answer {url} within {timeout:?}")]
    Timeout {
        /// The URL asked.
        url: String,
        /// The limit.
        timeout: Duration,
    },
    /// 401: Jenkins does not accept the credentials.
    #[error(
        "Jenkins refused the credentials of user {user} on {url} (401): check that the API token in {token_file} belongs to {user}"
    )]
    Unauthorized {
        /// The URL asked.
        url: String,
        /// The user.
        user: String,
        /// Where the token came from.
        token_file: PathBuf,
    },
    /// 403 for lack of permission (or of credentials).
    #[error("Jenkins denied {url} to {user} (403{permission}): grant the permission or use an administrator's token")]
    Forbidden {
        /// The URL asked.
        url: String,
        /// The user.
        user: String,
        /// `, needs <permission>` when Jenkins said which.
        permission: String,
    },
    /// Jenkins kept refusing the crumb.
    #[error("Jenkins refused the CSRF crumb on {url} even after fetching a new one")]
    Crumb {
        /// The URL asked.
        url: String,
    },
    /// Any other unexpected status.
    #[error("Jenkins answered {status} on {url}: {excerpt}")]
    Status {
        /// The URL asked.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body.
        excerpt: String,
    },
    /// The answer is larger than the limit.
    #[error("the answer to {url} is larger than {limit} bytes")]
    TooLarge {
        /// The URL asked.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// The answer is not what Jenkins sends.
    #[error("the answer to {url} is not what Jenkins sends: {detail}")]
    Decode {
        /// The URL asked.
        url: String,
        /// What is wrong.
        detail: String,
    },
}

impl JenkinsError {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            JenkinsError::Token { .. } | JenkinsError::EmptyToken { .. } => "token",
            JenkinsError::Unreachable { .. } => "unreachable",
            JenkinsError::Timeout { .. } => "timeout",
            JenkinsError::Unauthorized { .. } => "unauthorized",
            JenkinsError::Forbidden { .. } => "forbidden",
            JenkinsError::Crumb { .. } => "crumb",
            JenkinsError::Status { .. } => "status",
            JenkinsError::TooLarge { .. } => "too_large",
            JenkinsError::Decode { .. } => "decode",
        }
    }
}

/// An answer read in full (within the limit).
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Answer {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One problem `/configuration-as-code/check` reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckProblem {
    /// The line in the YAML, -1 when unknown.
    pub line: i64,
    /// JCasC's message.
    pub message: String,
}

/// What `/configuration-as-code/check` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// JCasC would apply it.
    pub accepted: bool,
    /// The error (refused) or the warnings (accepted).
    pub problems: Vec<CheckProblem>,
}

/// What `/configuration-as-code/reload` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The configuration is live (Jenkins redirected).
    Applied,
    /// JCasC refused it and kept the previous configuration; Jenkins' message.
    Refused(String),
}

/// An installed plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledPlugin {
    /// `shortName`.
    pub name: String,
    /// `version`.
    pub version: String,
    /// `active`.
    pub active: bool,
    /// `enabled`.
    pub enabled: bool,
}

/// What the mite reports about Jenkins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// `X-Jenkins`.
    pub version: String,
    /// `NORMAL` or `EXCLUSIVE`.
    pub mode: String,
    /// Jenkins is quieting down (no new builds start).
    pub quieting_down: bool,
    /// Items in the build queue.
    pub queue_length: u32,
    /// Executors running a build.
    pub busy_executors: u32,
    /// Executors free.
    pub idle_executors: u32,
    /// Since when (Unix seconds) the queue and the busy executors have both been zero; None
    /// while Jenkins has work.
    pub idle_since_unix: Option<u64>,
    /// `sha256:<hex>` over the sorted `name:version` lines of the installed plugins.
    pub plugins_digest: String,
}

/// The fields of an [`Observation`] that changed; None means unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservationDelta {
    /// New version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// New mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// New quieting-down state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quieting_down: Option<bool>,
    /// New queue length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_length: Option<u32>,
    /// New busy executors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy_executors: Option<u32>,
    /// New idle executors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_executors: Option<u32>,
    /// New idle-since (Some(None): Jenkins has work now; serialized as null).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub idle_since_unix: Option<Option<u64>>,
    /// New plugins digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugins_digest: Option<String>,
}

/// A field that is present (even as null) is `Some`.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl ObservationDelta {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        *self == ObservationDelta::default()
    }
}

impl Observation {
    /// Only the fields that differ from `previous`.
    pub fn delta(&self, previous: &Observation) -> ObservationDelta {
        fn changed<T: PartialEq + Clone>(now: &T, before: &T) -> Option<T> {
            (now != before).then(|| now.clone())
        }
        ObservationDelta {
            version: changed(&self.version, &previous.version),
            mode: changed(&self.mode, &previous.mode),
            quieting_down: changed(&self.quieting_down, &previous.quieting_down),
            queue_length: changed(&self.queue_length, &previous.queue_length),
            busy_executors: changed(&self.busy_executors, &previous.busy_executors),
            idle_executors: changed(&self.idle_executors, &previous.idle_executors),
            idle_since_unix: changed(&self.idle_since_unix, &previous.idle_since_unix),
            plugins_digest: changed(&self.plugins_digest, &previous.plugins_digest),
        }
    }

    /// How long Jenkins has been idle at `now` (None while it has work).
    pub fn idle_for(&self, now: SystemTime) -> Option<Duration> {
        let since = UNIX_EPOCH + Duration::from_secs(self.idle_since_unix?);
        Some(now.duration_since(since).unwrap_or_default())
    }
}

/// The digest of a plugin list: `sha256:<hex>` over sorted `name:version\n` lines.
pub fn plugins_digest<'a>(plugins: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut lines: Vec<String> = plugins.into_iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    lines.sort();
    let mut h = Sha256::new();
    for l in &lines {
        h.update(l.as_bytes());
    }
    format!("sha256:{}", crate::hex(&h.finalize()))
}

#[derive(Debug, Clone)]
enum Crumb {
    /// CSRF protection is off (the crumb issuer answered 404).
    Off,
    /// Send this header.
    Header(String, String),
}

/// A client for one Jenkins.
pub struct JenkinsClient {
    cfg: ClientConfig,
    http: reqwest::Client,
    crumb: tokio::sync::Mutex<Option<Crumb>>,
    idle_since: Mutex<Option<u64>>,
}

/// Installs the ring rustls provider once (reqwest is built without one: the workspace uses ring
/// everywhere, never aws-lc).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl JenkinsClient {
    /// A client; nothing is sent yet.
    pub fn new(cfg: ClientConfig) -> Result<JenkinsClient, JenkinsError> {
        install_crypto_provider();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .build()
            .map_err(|e| JenkinsError::Unreachable { url: cfg.url.clone(), detail: e.to_string() })?;
        Ok(JenkinsClient { cfg, http, crumb: tokio::sync::Mutex::new(None), idle_since: Mutex::new(None) })
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.cfg.url)
    }

    async fn token(&self) -> Result<String, JenkinsError> {
        let path = &self.cfg.token_file;
        let t = tokio::fs::read_to_string(path)
            .await
            .map_err(|source| JenkinsError::Token { path: path.clone(), source })?;
        let t = t.trim();
        if t.is_empty() {
            return Err(JenkinsError::EmptyToken { path: path.clone() });
        }
        Ok(t.to_string())
    }

    /// Sends one request and reads the answer within the limits; 401 is an error, every other
    /// status is the caller's to judge.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, JenkinsError> {
        let url = self.url(path);
        let token = self.token().await?;
        let mut req = self.http.request(method, &url).basic_auth(&self.cfg.user, Some(token));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.header(reqwest::header::CONTENT_TYPE, "application/x-yaml; charset=utf-8").body(b);
        }
        let map_err = |e: reqwest::Error| {
            if e.is_timeout() {
                JenkinsError::Timeout { url: url.clone(), timeout: self.cfg.timeout }
            } else {
                JenkinsError::Unreachable { url: url.clone(), detail: error_chain(&e) }
            }
        };
        let mut rsp = req.send().await.map_err(map_err)?;
        let limit = self.cfg.max_body;
        if rsp.content_length().is_some_and(|n| n > limit as u64) {
            return Err(JenkinsError::TooLarge { url, limit });
        }
        let status = rsp.status();
        let headers = rsp.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = rsp.chunk().await.map_err(map_err)? {
            if body.len() + chunk.len() > limit {
                return Err(JenkinsError::TooLarge { url, limit });
            }
            body.extend_from_slice(&chunk);
        }
        if status == StatusCode::UNAUTHORIZED {
            return Err(JenkinsError::Unauthorized {
                url,
                user: self.cfg.user.clone(),
                token_file: self.cfg.token_file.clone(),
            });
        }
        Ok(Answer { status, headers, body: Bytes::from(body) })
    }

    fn unexpected(&self, path: &str, a: &Answer) -> JenkinsError {
        let url = self.url(path);
        if a.status == StatusCode::FORBIDDEN {
            let permission = a
                .headers
                .get("X-Required-Permission")
                .and_then(|v| v.to_str().ok())
                .map(|p| format!(", needs {p}"))
                .unwrap_or_default();
            return JenkinsError::Forbidden { url, user: self.cfg.user.clone(), permission };
        }
        JenkinsError::Status { url, status: a.status.as_u16(), excerpt: excerpt(&a.text()) }
    }

    /// GET a JSON API page; anything but 200 is an error.
    pub async fn get_json(&self, path: &str) -> Result<(HeaderMap, Value), JenkinsError> {
        let a = self.send(Method::GET, path, None, &[]).await?;
        if a.status != StatusCode::OK {
            return Err(self.unexpected(path, &a));
        }
        let v = serde_json::from_slice(&a.body)
            .map_err(|e| JenkinsError::Decode { url: self.url(path), detail: format!("not JSON: {e}") })?;
        Ok((a.headers, v))
    }

    async fn current_crumb(&self, refresh: bool) -> Result<Crumb, JenkinsError> {
        let mut cached = self.crumb.lock().await;
        if let (false, Some(c)) = (refresh, cached.as_ref()) {
            return Ok(c.clone());
        }
        let path = "/crumbIssuer/api/json";
        let a = self.send(Method::GET, path, None, &[]).await?;
        let crumb = match a.status {
            StatusCode::NOT_FOUND => Crumb::Off,
            StatusCode::OK => {
                let v: Value = serde_json::from_slice(&a.body)
                    .map_err(|e| JenkinsError::Decode { url: self.url(path), detail: format!("not JSON: {e}") })?;
                let value = v.get("crumb").and_then(Value::as_str);
                let field = v.get("crumbRequestField").and_then(Value::as_str).unwrap_or(DEFAULT_CRUMB_FIELD);
                match value {
                    Some(c) => Crumb::Header(field.to_string(), c.to_string()),
                    None => {
                        return Err(JenkinsError::Decode { url: self.url(path), detail: "no crumb field".into() });
                    }
                }
            }
            _ => return Err(self.unexpected(path, &a)),
        };
        *cached = Some(crumb.clone());
        Ok(crumb)
    }

    /// POST with a crumb (fetched and cached; refetched once on a crumb refusal).
    pub async fn post(&self, path: &str, body: Option<Vec<u8>>) -> Result<Answer, JenkinsError> {
        let mut refresh = false;
        loop {
            let crumb = self.current_crumb(refresh).await?;
            let headers: Vec<(&str, &str)> = match &crumb {
                Crumb::Off => Vec::new(),
                Crumb::Header(k, v) => vec![(k.as_str(), v.as_str())],
            };
            let a = self.send(Method::POST, path, body.clone(), &headers).await?;
            let crumb_refused = a.status == StatusCode::FORBIDDEN && a.text().contains("No valid crumb");
            if !crumb_refused {
                return Ok(a);
            }
            if refresh {
                return Err(JenkinsError::Crumb { url: self.url(path) });
            }
            tracing::info!(path, "Jenkins refused the crumb; fetching a new one");
            refresh = true;
        }
    }

    /// `POST /quietDown`: no new builds start.
    pub async fn quiet_down(&self, message: Option<&str>) -> Result<(), JenkinsError> {
        let path = match message {
            Some(m) => format!("/quietDown?message={}", encode(m)),
            None => "/quietDown".into(),
        };
        self.expect_redirect(&path).await
    }

    /// `POST /cancelQuietDown`.
    pub async fn cancel_quiet_down(&self) -> Result<(), JenkinsError> {
        self.expect_redirect("/cancelQuietDown").await
    }

    async fn expect_redirect(&self, path: &str) -> Result<(), JenkinsError> {
        let a = self.post(path, None).await?;
        if a.status.is_redirection() || a.status == StatusCode::OK {
            return Ok(());
        }
        Err(self.unexpected(path, &a))
    }

    /// `POST /configuration-as-code/check`. JCasC answers 400 with the error when it refuses the
    /// YAML, and 200 with the warnings its configurators raised (deprecated or ignored
    /// attributes; often none) when it accepts it (`ConfigurationAsCode.doCheck`).
    pub async fn casc_check(&self, yaml: &str) -> Result<CheckReport, JenkinsError> {
        let path = "/configuration-as-code/check";
        let a = self.post(path, Some(yaml.as_bytes().to_vec())).await?;
        if a.status != StatusCode::OK && a.status != StatusCode::BAD_REQUEST {
            return Err(self.unexpected(path, &a));
        }
        let mut problems: Vec<CheckProblem> = serde_json::from_slice(&a.body).map_err(|e| JenkinsError::Decode {
            url: self.url(path),
            detail: format!("expected [{{line, message}}]: {e}"),
        })?;
        let accepted = a.status == StatusCode::OK;
        if !accepted && problems.is_empty() {
            problems.push(CheckProblem { line: -1, message: "Jenkins refused the configuration (400)".into() });
        }
        Ok(CheckReport { accepted, problems })
    }

    /// `POST /configuration-as-code/reload`: re-reads the configured sources. JCasC redirects on
    /// success and renders its "Error loading configuration" page (status 200) on failure.
    pub async fn casc_reload(&self) -> Result<ReloadOutcome, JenkinsError> {
        let path = "/configuration-as-code/reload";
        let a = self.post(path, None).await?;
        if a.status.is_redirection() {
            return Ok(ReloadOutcome::Applied);
        }
        if a.status == StatusCode::OK {
            let text = a.text();
            if text.contains("Error loading configuration") {
                return Ok(ReloadOutcome::Refused(error_page_message(&text)));
            }
            return Ok(ReloadOutcome::Applied);
        }
        Err(self.unexpected(path, &a))
    }

    /// `POST /configuration-as-code/export`: the live configuration as YAML.
    pub async fn casc_export(&self) -> Result<String, JenkinsError> {
        let path = "/configuration-as-code/export";
        let a = self.post(path, None).await?;
        if a.status != StatusCode::OK {
            return Err(self.unexpected(path, &a));
        }
        Ok(a.text())
    }

    /// `GET /pluginManager/api/json?depth=1`.
    pub async fn plugins(&self) -> Result<Vec<InstalledPlugin>, JenkinsError> {
        let path = "/pluginManager/api/json?depth=1";
        let (_, v) = self.get_json(path).await?;
        let list = v
            .get("plugins")
            .and_then(Value::as_array)
            .ok_or_else(|| JenkinsError::Decode { url: self.url(path), detail: "no plugins array".into() })?;
        let mut out = Vec::with_capacity(list.len());
        for p in list {
            let (Some(name), Some(version)) =
                (p.get("shortName").and_then(Value::as_str), p.get("version").and_then(Value::as_str))
            else {
                return Err(JenkinsError::Decode {
                    url: self.url(path),
                    detail: "a plugin without shortName or version (was depth=1 honoured?)".into(),
                });
            };
            out.push(InstalledPlugin {
                name: name.into(),
                version: version.into(),
                active: p.get("active").and_then(Value::as_bool).unwrap_or(true),
                enabled: p.get("enabled").and_then(Value::as_bool).unwrap_or(true),
            });
        }
        Ok(out)
    }

    /// Reads Jenkins' state once (the four pages concurrently) and updates the idle tracking.
    pub async fn observe(&self) -> Result<Observation, JenkinsError> {
        let ((headers, root), (_, queue), (_, computers), plugins) = tokio::try_join!(
            self.get_json("/api/json"),
            self.get_json("/queue/api/json"),
            self.get_json("/computer/api/json"),
            self.plugins(),
        )?;
        let version = headers.get("X-Jenkins").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        if version.is_empty() {
            return Err(JenkinsError::Decode {
                url: self.url("/api/json"),
                detail: "no X-Jenkins header: is this Jenkins?".into(),
            });
        }
        let mode = root.get("mode").and_then(Value::as_str).unwrap_or("NORMAL").to_string();
        let quieting_down = root.get("quietingDown").and_then(Value::as_bool).unwrap_or(false);
        let queue_length = queue.get("items").and_then(Value::as_array).map(|i| i.len() as u32).unwrap_or(0);
        let busy = computers.get("busyExecutors").and_then(Value::as_u64).unwrap_or(0) as u32;
        let total = computers.get("totalExecutors").and_then(Value::as_u64).unwrap_or(0) as u32;
        let idle_since_unix = {
            let mut since = self.idle_since.lock().unwrap_or_else(|e| e.into_inner());
            if queue_length == 0 && busy == 0 {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
                Some(*since.get_or_insert(now))
            } else {
                *since = None;
                None
            }
        };
        Ok(Observation {
            version,
            mode,
            quieting_down,
            queue_length,
            busy_executors: busy,
            idle_executors: total.saturating_sub(busy),
            idle_since_unix,
            plugins_digest: plugins_digest(plugins.iter().map(|p| (p.name.as_str(), p.version.as_str()))),
        })
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn excerpt(text: &str) -> String {
    let t = strip_tags(text);
    let mut out: String = t.chars().take(300).collect();
    if t.chars().count() > 300 {
        out.push('…');
    }
    out
}

/// The text of an HTML page, whitespace collapsed, entities for `<>&"` decoded.
fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => {
                in_tag = true;
                out.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = out.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The message on JCasC's "Error loading configuration" page (`error.jelly`): the text after the
/// heading, the configurator names included.
fn error_page_message(html: &str) -> String {
    let start = html.find("<h1>").or_else(|| html.find("<body")).unwrap_or(0);
    let text = strip_tags(&html[start..]);
    let text = text.trim_start_matches("Error loading configuration").trim();
    if text.is_empty() { "JCasC could not load the configuration (no message)".into() } else { text.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_order_independent_and_equals_a_sorted_plugins_txt() {
        let a = plugins_digest([("git", "5.7.0"), ("credentials", "1415.v831096eb_5534")]);
        let b = plugins_digest([("credentials", "1415.v831096eb_5534"), ("git", "5.7.0")]);
        assert_eq!(a, b);
        let txt = "credentials:1415.v831096eb_5534\ngit:5.7.0\n";
        assert_eq!(a, format!("sha256:{}", crate::hex(&Sha256::digest(txt.as_bytes()))));
    }

    #[test]
    fn error_page_message_keeps_the_message_and_the_names() {
        let page = "<html><head><title>Error loading configuration [Jenkins]</title></head><body><h1>Error loading configuration</h1><p>No configurator found for the following root element: alice. Verify.<pre><code>alice</code></pre></p></body></html>";
        assert_eq!(
            error_page_message(page),
            "No configurator found for the following root element: alice. Verify. alice"
        );
    }

    #[test]
    fn delta_lists_only_changes() {
        let a = Observation {
            version: "2.479.3".into(),
            mode: "NORMAL".into(),
            quieting_down: false,
            queue_length: 0,
            busy_executors: 0,
            idle_executors: 2,
            idle_since_unix: Some(100),
            plugins_digest: "sha256:x".into(),
        };
        assert!(a.delta(&a).is_empty());
        let b = Observation { queue_length: 1, idle_since_unix: None, ..a.clone() };
        let d = b.delta(&a);
        assert_eq!(d, ObservationDelta { queue_length: Some(1), idle_since_unix: Some(None), ..Default::default() });
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json, serde_json::json!({"queue_length": 1, "idle_since_unix": null}));
        assert_eq!(serde_json::from_value::<ObservationDelta>(json).unwrap(), d);
    }
}
