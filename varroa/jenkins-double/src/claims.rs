//! The Varroa plugin's build claims (docs/varroa/plugin-protocol.md, "Build claims"): before a
//! queued build runs, the plugin asks the mite, `POST {plugin-url}/v1/claims`, whether it may and
//! with which number.
//!
//! [`ClaimsClient`] is a [`BuildNumbers`]: the double's builds ask it as they are queued, and it
//! acts on the answer as the plugin does:
//!
//! - `granted` -> the build runs with that number;
//! - `refused` -> the queue item is dropped (no events), counted;
//! - `retry` -> the item stays queued ("waiting for a build claim") and asks again with the same
//!   id after `after_ms`; an item that waited longer than [`ClaimsConfig::wait_limit`] (an hour)
//!   is dropped with a log line;
//! - `ungated`, `404`, `501` -> the build runs with Jenkins' own number;
//! - `400` -> logged, the item is dropped (a malformed claim does not get better);
//! - `401` -> the token file is read again and the claim resent at once; a second `401` in a row
//!   backs off;
//! - `503`, another `5xx`, a refused connection or no answer within the budget -> the back-off
//!   (1 s doubling to 30 s, `Retry-After` instead when the answer has one), then the same id
//!   again.
//!
//! Every claim carries `v: 1`, the queue item's stable id, the job, the trigger and `budget_ms`,
//! which is also how long one request waits for its answer.

use crate::builds::{BoxFuture, BuildNumbers, Claim};
use crate::client::{self, Http, Token};
use crate::plugin::PluginError;
use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::Full;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use varroa_link::claims::{Answer, ClaimRequest, MAX_RETRY_AFTER, MIN_RETRY_AFTER, VERSION};

/// How the claims client reaches the mite, and how long it waits.
#[derive(Debug, Clone)]
pub struct ClaimsConfig {
    /// `VARROA_PLUGIN_URL`.
    pub url: String,
    /// `VARROA_PLUGIN_TOKEN_FILE`.
    pub token_file: PathBuf,
    /// `budget_ms` of every claim, and the request's timeout. Default 5 s (100 ms to 30 s).
    pub budget: Duration,
    /// How long a queue item waits for a decision (retries, an unreachable mite) before it is
    /// dropped. Default 1 hour.
    pub wait_limit: Duration,
    /// The first back-off after a failed attempt (1 s).
    pub backoff_initial: Duration,
    /// The longest back-off (30 s).
    pub backoff_max: Duration,
}

impl ClaimsConfig {
    /// The protocol's defaults.
    pub fn new(url: impl Into<String>, token_file: impl Into<PathBuf>) -> ClaimsConfig {
        ClaimsConfig {
            url: url.into(),
            token_file: token_file.into(),
            budget: varroa_link::claims::DEFAULT_BUDGET,
            wait_limit: Duration::from_secs(3600),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// What the claims client did so far (`GET /__double/plugin`, `claims`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimCounters {
    /// Requests made, answered or not.
    pub requests: u64,
    /// Claims granted.
    pub granted: u64,
    /// Claims refused (the queue item was dropped: another cell runs the trigger).
    pub refused: u64,
    /// `retry` answers (the item waited and asked again).
    pub retries: u64,
    /// Claims that ran with Jenkins' own number (`ungated`, `404`, `501`).
    pub ungated: u64,
    /// Claims answered `400` (the item was dropped).
    pub rejected: u64,
    /// Items dropped because they waited longer than the wait limit.
    pub expired: u64,
    /// Attempts that got no decision (`503`, `5xx`, `401`, a refused connection, a timeout).
    pub failures: u64,
    /// Claims waiting for a decision now.
    pub waiting: u64,
    /// Times the token file was read.
    pub token_reads: u64,
    /// What went wrong last, if anything did since the last decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The claims client.
#[derive(Debug)]
pub struct ClaimsClient {
    config: ClaimsConfig,
    endpoint: Uri,
    http: Http,
    token: Token,
    counters: Mutex<ClaimCounters>,
}

/// One attempt's outcome.
enum Attempt {
    Decided(Result<Claim, String>),
    Retry(Duration),
    Unauthorized,
    Failed { after: Option<Duration>, reason: String },
}

impl ClaimsClient {
    /// Checks the URL and reads the token file (a missing one is read again before the first
    /// request). Needs a tokio runtime only when claiming.
    pub fn new(config: ClaimsConfig) -> Result<Arc<ClaimsClient>, PluginError> {
        let endpoint: Uri = format!("{}/v1/claims", client::base_url(&config.url)?)
            .parse()
            .map_err(|e: http::uri::InvalidUri| PluginError::Url { url: config.url.clone(), reason: e.to_string() })?;
        let ms = config.budget.as_millis();
        let (lo, hi) = (varroa_link::claims::MIN_BUDGET.as_millis(), varroa_link::claims::MAX_BUDGET.as_millis());
        if !(lo..=hi).contains(&ms) {
            return Err(PluginError::Url {
                url: config.url.clone(),
                reason: format!("the claim budget {ms} ms is outside {lo} to {hi} ms"),
            });
        }
        Ok(Arc::new(ClaimsClient {
            http: client::http(config.budget),
            token: Token::new(config.token_file.clone()),
            endpoint,
            config,
            counters: Mutex::new(ClaimCounters::default()),
        }))
    }

    /// The configuration.
    pub fn config(&self) -> &ClaimsConfig {
        &self.config
    }

    /// The counters now.
    pub fn counters(&self) -> ClaimCounters {
        let mut c = self.lock().clone();
        c.token_reads = self.token.reads();
        c
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClaimCounters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn attempt(&self, body: &Bytes, token: Option<&str>) -> Attempt {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.endpoint.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json");
        if let Some(t) = token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = match req.body(Full::new(body.clone())) {
            Ok(r) => r,
            Err(e) => return Attempt::Decided(Err(format!("building the claim request: {e}"))),
        };
        self.lock().requests += 1;
        let a = match client::exchange(&self.http, req, self.config.budget).await {
            Ok(a) => a,
            Err(reason) => return Attempt::Failed { after: None, reason },
        };
        match a.status {
            StatusCode::OK => match serde_json::from_slice::<Answer>(&a.body) {
                Ok(Answer::Granted { build }) => Attempt::Decided(Ok(Claim::Granted(build))),
                Ok(Answer::Refused { holder }) => Attempt::Decided(Ok(Claim::Refused { holder })),
                Ok(Answer::Ungated { reason }) => Attempt::Decided(Ok(Claim::Ungated { reason })),
                Ok(Answer::Retry { after_ms, reason }) => {
                    let after = Duration::from_millis(after_ms).clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER);
                    let mut c = self.lock();
                    c.retries += 1;
                    c.last_error = Some(format!("retry: {reason}"));
                    Attempt::Retry(after)
                }
                // A decision this side does not know: not a grant, so the item waits (fail closed).
                Err(e) => Attempt::Failed {
                    after: None,
                    reason: format!("the mite's 200 answer is not a decision this plugin knows: {e}"),
                },
            },
            StatusCode::NOT_FOUND | StatusCode::NOT_IMPLEMENTED => Attempt::Decided(Ok(Claim::Ungated {
                reason: format!("the mite answered {} (an older mite): no build claims", a.status.as_u16()),
            })),
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => Attempt::Decided(Err(format!(
                "the mite refused the claim as malformed ({}): {}",
                a.status.as_u16(),
                a.error()
            ))),
            StatusCode::UNAUTHORIZED => Attempt::Unauthorized,
            s => Attempt::Failed { after: a.retry_after, reason: format!("{} {}", s.as_u16(), a.error()) },
        }
    }

    /// Asks until there is a decision (or the item is dropped: `Err`).
    async fn decide(&self, job: &str, trigger: &str, claim_id: &str) -> Result<Claim, String> {
        let request = ClaimRequest {
            v: VERSION,
            id: claim_id.to_owned(),
            job: job.to_owned(),
            trigger: trigger.to_owned(),
            budget_ms: Some(self.config.budget.as_millis() as u64),
        };
        if let Err(e) = request.validate() {
            self.lock().rejected += 1;
            tracing::error!(job, trigger, claim = claim_id, error = %e, "build claim malformed, not sent: the queue item is dropped");
            return Err(format!("the claim is malformed, not sent: {e}"));
        }
        let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        let deadline = Instant::now() + self.config.wait_limit;
        let mut failures: u32 = 0;
        let mut reread = false;
        loop {
            let token = self.token.get();
            let wait = match self.attempt(&body, token.as_deref()).await {
                Attempt::Decided(Err(e)) => {
                    self.lock().rejected += 1;
                    tracing::error!(job, trigger, claim = claim_id, error = %e, "build claim refused as malformed: the queue item is dropped");
                    return Err(e);
                }
                Attempt::Decided(d) => return d,
                Attempt::Retry(after) => {
                    failures = 0;
                    reread = false;
                    after
                }
                Attempt::Unauthorized => {
                    let mut c = self.lock();
                    c.failures += 1;
                    c.last_error = Some("401: the token is not the mite's".into());
                    drop(c);
                    if !reread && self.token.reread(token.as_deref()) {
                        reread = true;
                        continue;
                    }
                    reread = true;
                    failures = failures.saturating_add(1);
                    client::backoff(self.config.backoff_initial, self.config.backoff_max, failures)
                }
                Attempt::Failed { after, reason } => {
                    failures = failures.saturating_add(1);
                    reread = false;
                    let wait = after.unwrap_or_else(|| {
                        client::backoff(self.config.backoff_initial, self.config.backoff_max, failures)
                    });
                    tracing::warn!(job, claim = claim_id, retry_in = ?wait, reason, "no build claim decision; asking again with the same id");
                    let mut c = self.lock();
                    c.failures += 1;
                    c.last_error = Some(reason);
                    wait
                }
            };
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            tokio::time::sleep(wait.min(deadline - now)).await;
            if Instant::now() >= deadline {
                break;
            }
        }
        self.lock().expired += 1;
        let limit = self.config.wait_limit;
        tracing::warn!(
            job,
            trigger,
            claim = claim_id,
            ?limit,
            "dropped from the queue: waited for a build claim longer than the limit"
        );
        Err(format!("waited for a build claim longer than {limit:?}"))
    }
}

impl BuildNumbers for ClaimsClient {
    fn gated(&self) -> bool {
        true
    }

    fn claim<'a>(&'a self, job: &'a str, trigger: &'a str, claim_id: &'a str) -> BoxFuture<'a, Result<Claim, String>> {
        Box::pin(async move {
            self.lock().waiting += 1;
            let decision = self.decide(job, trigger, claim_id).await;
            let mut c = self.lock();
            c.waiting -= 1;
            match &decision {
                Ok(Claim::Granted(_)) => c.granted += 1,
                Ok(Claim::Refused { .. }) => c.refused += 1,
                Ok(Claim::Ungated { .. }) => c.ungated += 1,
                Err(_) => {}
            }
            if decision.is_ok() {
                c.last_error = None;
            }
            decision
        })
    }
}
