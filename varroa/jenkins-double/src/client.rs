//! What the plugin's claims and logs clients share: the token file, one HTTP exchange under a
//! timeout, the back-off, and the mite's URL. (The events client, [`crate::plugin`], keeps its
//! own copies inside its buffer's lock.)

use crate::plugin::{PluginError, parse_retry_after};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub(crate) type Http = Client<HttpConnector, Full<Bytes>>;

/// A plain-HTTP client for the mite's loopback listener.
pub(crate) fn http(connect_timeout: Duration) -> Http {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(connect_timeout));
    Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(connector)
}

/// `VARROA_PLUGIN_URL` without a trailing slash, checked as the events client checks it.
pub(crate) fn base_url(url: &str) -> Result<String, PluginError> {
    let bad = |reason: &str| PluginError::Url { url: url.to_owned(), reason: reason.to_owned() };
    let base = url.trim().trim_end_matches('/');
    let uri: http::Uri = base.parse().map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(bad(&format!(
                "scheme {other}: the plugin protocol is plain HTTP on the pod's loopback (http://)"
            )));
        }
        None => return Err(bad("no scheme: it must start with http://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if uri.query().is_some() {
        return Err(bad("a query is not allowed"));
    }
    Ok(base.to_owned())
}

/// The bearer token the mite writes: read at start, again after a `401`, and before a request
/// while it is missing.
#[derive(Debug)]
pub(crate) struct Token {
    path: PathBuf,
    current: Mutex<Option<String>>,
    reads: AtomicU64,
}

impl Token {
    pub(crate) fn new(path: PathBuf) -> Token {
        let t = Token { path, current: Mutex::new(None), reads: AtomicU64::new(0) };
        t.read();
        t
    }

    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Reads the file; whether it holds a token now.
    fn read(&self) -> Option<String> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let t = std::fs::read_to_string(&self.path).ok().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = t.clone();
        t
    }

    /// The token, read first if it is missing.
    pub(crate) fn get(&self) -> Option<String> {
        let held = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        held.or_else(|| self.read())
    }

    /// After a `401`: reads the file again; whether it holds another token than `used`.
    pub(crate) fn reread(&self, used: Option<&str>) -> bool {
        let now = self.read();
        if now.as_deref() == used {
            tracing::warn!(path = %self.path.display(), "the mite answered 401 and the token file (VARROA_PLUGIN_TOKEN_FILE) holds no newer token; backing off");
            false
        } else {
            true
        }
    }
}

/// One answer of the mite: status, `Retry-After` (parsed), body.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub retry_after: Option<Duration>,
    pub body: Bytes,
}

impl Answer {
    /// The `error` of a JSON error body, else its start.
    pub(crate) fn error(&self) -> String {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body[..self.body.len().min(512)]).into_owned())
    }
}

/// Sends `req` and reads the answer (at most 64 KiB of it) within `timeout`; `Err` names what
/// went wrong (refused connection, reset, no answer in time).
pub(crate) async fn exchange(http: &Http, req: Request<Full<Bytes>>, timeout: Duration) -> Result<Answer, String> {
    let go = async {
        let rsp = http.request(req).await.map_err(|e| {
            use std::error::Error;
            let mut text = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        })?;
        let status = rsp.status();
        let retry_after =
            rsp.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
        let body = Limited::new(rsp.into_body(), 64 << 10)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| format!("reading the answer: {e}"))?;
        Ok(Answer { status, retry_after, body })
    };
    match tokio::time::timeout(timeout, go).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

/// The back-off after `failures` failed attempts in a row: `initial`, doubling, at most `max`.
pub(crate) fn backoff(initial: Duration, max: Duration, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    initial.saturating_mul(1u32 << exp).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_plain_http() {
        assert_eq!(base_url("http://127.0.0.1:8787/").unwrap(), "http://127.0.0.1:8787");
        for bad in ["https://127.0.0.1:1", "127.0.0.1:1", "http://h/?a=b"] {
            assert!(base_url(bad).unwrap_err().to_string().contains("VARROA_PLUGIN_URL"), "{bad}");
        }
        let s = |n| backoff(Duration::from_secs(1), Duration::from_secs(30), n).as_secs();
        assert_eq!([s(1), s(2), s(5), s(6), s(99)], [1, 2, 16, 30, 30]);
    }
}
