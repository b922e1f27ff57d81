//! A fake mite: the mite's side of `POST /v1/events` over real HTTP on a free loopback port,
//! scriptable (503 with or without Retry-After, hanging, a rotated token, rejections), recording
//! every request and every stored event.

#![allow(dead_code)]

pub mod mite;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;
use varroa_link::builds::{BuildEvent, parse_event, raw_id};

/// An HTTP client for the tests (reqwest without a default TLS provider needs one installed).
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(WAIT).build().unwrap()
}

/// How long a test waits for a condition before failing.
pub const WAIT: Duration = Duration::from_secs(20);

/// What the fake answers the next request with, before its normal behaviour.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// 503, with this Retry-After (seconds) or none.
    Unavailable(Option<u64>),
    /// Holds the request without answering (the plugin times out).
    Hang,
}

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When it arrived.
    pub at: Instant,
    /// The token it carried.
    pub token: Option<String>,
    /// The ids of its events.
    pub ids: Vec<String>,
    /// The status answered.
    pub status: u16,
}

type Rejecter = Box<dyn Fn(&BuildEvent) -> Option<String> + Send>;

pub struct Inner {
    pub token: String,
    pub script: VecDeque<Scripted>,
    pub reject: Option<Rejecter>,
    pub requests: Vec<Seen>,
    pub stored: Vec<BuildEvent>,
}

pub struct FakeMite {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    changed: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeMite {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeMite {
    /// Listens on a free loopback port.
    pub async fn start(token: &str) -> FakeMite {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, token)
    }

    /// Serves on `listener`.
    pub fn serve(listener: TcpListener, token: &str) -> FakeMite {
        let addr = listener.local_addr().unwrap();
        let inner = Arc::new(Mutex::new(Inner {
            token: token.into(),
            script: VecDeque::new(),
            reject: None,
            requests: Vec::new(),
            stored: Vec::new(),
        }));
        let changed = watch::Sender::new(0u64);
        let (i, c) = (inner.clone(), changed.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (i, c) = (i.clone(), c.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let (i, c) = (i.clone(), c.clone());
                        async move { Ok::<_, std::convert::Infallible>(handle(&i, &c, req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FakeMite { addr, inner, changed, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap())
    }

    pub fn script(&self, s: Scripted) {
        self.with(|i| i.script.push_back(s));
    }

    pub fn set_token(&self, t: &str) {
        self.with(|i| i.token = t.into());
    }

    pub fn reject(&self, f: impl Fn(&BuildEvent) -> Option<String> + Send + 'static) {
        self.with(|i| i.reject = Some(Box::new(f)));
    }

    pub fn stored(&self) -> Vec<BuildEvent> {
        self.with(|i| i.stored.clone())
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.with(|i| i.requests.clone())
    }

    /// Waits until `cond` holds of the fake's state (checked on every request), at most [`WAIT`].
    pub async fn wait_for(&self, what: &str, cond: impl Fn(&Inner) -> bool) {
        let mut rx = self.changed.subscribe();
        let inner = self.inner.clone();
        // The receiver's borrow holds the channel's lock: dropped at once.
        let done = tokio::time::timeout(WAIT, rx.wait_for(|_| cond(&inner.lock().unwrap()))).await.is_ok();
        assert!(done, "timed out waiting for {what}; requests: {:?}", self.requests());
    }

    /// Waits until `n` events were stored.
    pub async fn wait_stored(&self, n: usize) {
        self.wait_for(&format!("{n} stored events"), |i| i.stored.len() >= n).await;
    }
}

fn answer(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

async fn handle(inner: &Mutex<Inner>, changed: &watch::Sender<u64>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let at = Instant::now();
    if req.uri().path() != "/v1/events" || req.method() != http::Method::POST {
        return answer(StatusCode::NOT_FOUND, json!({"error": "no such endpoint"}));
    }
    let token = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let raw: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let events: Vec<Value> = raw.get("events").and_then(Value::as_array).cloned().unwrap_or_default();
    let ids: Vec<String> = events.iter().map(raw_id).collect();
    let (status, rsp, hang) = {
        let mut i = inner.lock().unwrap();
        let scripted = i.script.pop_front();
        let (status, rsp, hang) = match scripted {
            Some(Scripted::Unavailable(retry_after)) => {
                let mut r = answer(StatusCode::SERVICE_UNAVAILABLE, json!({"error": "the gateway stream is down"}));
                if let Some(s) = retry_after {
                    r.headers_mut().insert(http::header::RETRY_AFTER, s.to_string().parse().unwrap());
                }
                (503, r, false)
            }
            Some(Scripted::Hang) => (0, answer(StatusCode::SERVICE_UNAVAILABLE, json!({"error": "late"})), true),
            None if token.as_deref() != Some(i.token.as_str()) => {
                (401, answer(StatusCode::UNAUTHORIZED, json!({"error": "missing or wrong token"})), false)
            }
            None if !raw.get("events").is_some_and(Value::is_array) => {
                (400, answer(StatusCode::BAD_REQUEST, json!({"error": "events: must be a list"})), false)
            }
            None => {
                let mut rejected = Vec::new();
                let mut accepted = 0;
                for e in &events {
                    match parse_event(e) {
                        Ok(ev) => match i.reject.as_ref().and_then(|f| f(&ev)) {
                            Some(why) => rejected.push(json!({"id": ev.id, "error": why})),
                            None => {
                                accepted += 1;
                                i.stored.push(ev);
                            }
                        },
                        Err(err) => rejected.push(json!({"id": raw_id(e), "error": err.to_string()})),
                    }
                }
                (200, answer(StatusCode::OK, json!({"accepted": accepted, "rejected": rejected})), false)
            }
        };
        i.requests.push(Seen { at, token, ids, status });
        (status, rsp, hang)
    };
    changed.send_modify(|n| *n += 1);
    let _ = status;
    if hang {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    rsp
}

/// The kinds of each build's stored events, per `(job, build)`, in arrival order.
pub fn kinds_per_build(events: &[BuildEvent]) -> std::collections::BTreeMap<(String, u64), Vec<String>> {
    let mut out: std::collections::BTreeMap<(String, u64), Vec<String>> = Default::default();
    for e in events {
        out.entry((e.job.clone(), e.build_number())).or_default().push(e.body.kind().to_owned());
    }
    out
}
