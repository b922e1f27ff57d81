//! A test mite for claims and logs: the mite's side of `POST /v1/claims`,
//! `POST /v1/logs/{job}/{build}` and `POST /v1/events` over real HTTP on a free loopback port.
//!
//! Claims are answered by a script first, then by a [`Ledger`] (shared by the mites of two
//! cells): the first cell to claim a trigger of a job is granted the job's next number (from 1),
//! every other cell is refused; the same claim id asked again gets the same answer. Log chunks
//! are stored as the mite and the gateway store them (a chunk must start where the stored log
//! ends; the same chunk again is answered as the first time; anything else is `409` with the
//! end), after a script of scripted answers.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::watch;
use varroa_link::builds::{BuildEvent, parse_event};
use varroa_link::claims::{ClaimRequest, parse_request};

/// The ledger of one controller: trigger holders and numbers per job.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Claim id (with the asking cell) to its answer.
    answers: HashMap<(u32, String), Value>,
    /// (job, trigger) to the holding cell and its number.
    holders: HashMap<(String, String), (u32, u64)>,
    /// The last number per job.
    numbers: HashMap<String, u64>,
}

impl Ledger {
    pub fn shared() -> Arc<Mutex<Ledger>> {
        Arc::new(Mutex::new(Ledger::default()))
    }

    fn decide(&mut self, cell: u32, c: &ClaimRequest) -> Value {
        if let Some(a) = self.answers.get(&(cell, c.id.clone())) {
            return a.clone();
        }
        let key = (c.job.clone(), c.trigger.clone());
        let answer = match self.holders.get(&key) {
            Some((holder, _)) if *holder != cell => json!({"decision": "refused", "holder": holder}),
            Some((_, n)) => json!({"decision": "granted", "build": n}),
            None => {
                let n = self.numbers.entry(c.job.clone()).or_insert(0);
                *n += 1;
                self.holders.insert(key, (cell, *n));
                json!({"decision": "granted", "build": *n})
            }
        };
        self.answers.insert((cell, c.id.clone()), answer.clone());
        answer
    }
}

/// A scripted answer.
#[derive(Debug, Clone)]
pub enum Script {
    /// This status, with a `Retry-After` (seconds) or none, and `{"error": ...}`.
    Status(u16, Option<u64>),
    /// `200` with this body.
    Answer(Value),
    /// Logs only: store the first half of the chunk, then answer `409` with the end there (as
    /// if an earlier, shorter try had landed).
    HalfThenConflict,
}

/// One claim request.
#[derive(Debug, Clone)]
pub struct SeenClaim {
    pub token: Option<String>,
    pub body: Value,
    pub status: u16,
    pub answer: Value,
}

/// One log request.
#[derive(Debug, Clone)]
pub struct SeenChunk {
    /// The path's job part as sent (encoded).
    pub raw_job: String,
    pub job: String,
    pub build: u64,
    pub offset: u64,
    pub last: bool,
    pub body: Bytes,
    pub status: u16,
}

#[derive(Debug, Default)]
pub struct StoredLog {
    pub bytes: Vec<u8>,
    /// Chunk starts and lengths.
    pub chunks: BTreeMap<u64, usize>,
    pub complete: bool,
}

#[derive(Default)]
pub struct State {
    pub token: String,
    pub claim_script: VecDeque<Script>,
    pub log_script: VecDeque<Script>,
    pub claims: Vec<SeenClaim>,
    pub chunks: Vec<SeenChunk>,
    pub logs: BTreeMap<(String, u64), StoredLog>,
    pub events: Vec<BuildEvent>,
    /// Log requests being answered per build, and the most seen at once.
    pub in_flight: HashMap<(String, u64), usize>,
    pub max_in_flight_per_build: usize,
}

pub struct TestMite {
    pub addr: SocketAddr,
    pub cell: u32,
    state: Arc<Mutex<State>>,
    changed: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestMite {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Ctx {
    cell: u32,
    ledger: Arc<Mutex<Ledger>>,
    state: Arc<Mutex<State>>,
    changed: watch::Sender<u64>,
}

impl TestMite {
    /// The mite of cell `cell`, answering claims from `ledger`.
    pub async fn start(token: &str, cell: u32, ledger: Arc<Mutex<Ledger>>) -> TestMite {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State { token: token.into(), ..Default::default() }));
        let changed = watch::Sender::new(0u64);
        let ctx = Arc::new(Ctx { cell, ledger, state: state.clone(), changed: changed.clone() });
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let ctx = ctx.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&ctx, req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        TestMite { addr, cell, state, changed, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    pub fn script_claims(&self, s: impl IntoIterator<Item = Script>) {
        self.with(|st| st.claim_script.extend(s));
    }

    pub fn script_logs(&self, s: impl IntoIterator<Item = Script>) {
        self.with(|st| st.log_script.extend(s));
    }

    pub fn claims(&self) -> Vec<SeenClaim> {
        self.with(|st| st.claims.clone())
    }

    pub fn chunks(&self) -> Vec<SeenChunk> {
        self.with(|st| st.chunks.clone())
    }

    pub fn events(&self) -> Vec<BuildEvent> {
        self.with(|st| st.events.clone())
    }

    /// The stored log of a build and whether it is complete.
    pub fn log(&self, job: &str, build: u64) -> Option<(Vec<u8>, bool)> {
        self.with(|st| st.logs.get(&(job.to_owned(), build)).map(|l| (l.bytes.clone(), l.complete)))
    }

    /// Waits until `cond` holds (checked after every request), at most [`super::WAIT`].
    pub async fn wait_for(&self, what: &str, cond: impl Fn(&State) -> bool) {
        let mut rx = self.changed.subscribe();
        let state = self.state.clone();
        let done = tokio::time::timeout(super::WAIT, rx.wait_for(|_| cond(&state.lock().unwrap()))).await.is_ok();
        assert!(done, "timed out waiting for {what}; claims: {:?}; chunks: {:?}", self.claims(), self.chunk_summary());
    }

    /// Waits until the log of a build is complete.
    pub async fn wait_complete(&self, job: &str, build: u64) {
        let key = (job.to_owned(), build);
        self.wait_for(&format!("the log of {job} #{build} complete"), |st| {
            st.logs.get(&key).is_some_and(|l| l.complete)
        })
        .await;
    }

    fn chunk_summary(&self) -> Vec<(String, u64, u64, usize, bool, u16)> {
        self.chunks().iter().map(|c| (c.job.clone(), c.build, c.offset, c.body.len(), c.last, c.status)).collect()
    }
}

fn answer(status: StatusCode, body: Value, retry_after: Option<u64>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    if let Some(s) = retry_after {
        r.headers_mut().insert(http::header::RETRY_AFTER, s.to_string().parse().unwrap());
    }
    r
}

fn decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&segment[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

async fn handle(ctx: &Ctx, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let token = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let authorized = token.as_deref() == Some(ctx.state.lock().unwrap().token.as_str());
    let rsp = if path == "/v1/claims" {
        claim(ctx, token, &body, authorized)
    } else if let Some(rest) = path.strip_prefix("/v1/logs/") {
        chunk(ctx, rest, &query, body, authorized).await
    } else if path == "/v1/events" {
        if !authorized {
            answer(StatusCode::UNAUTHORIZED, json!({"error": "token"}), None)
        } else {
            let raw: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let events = raw["events"].as_array().cloned().unwrap_or_default();
            let mut st = ctx.state.lock().unwrap();
            for e in &events {
                st.events.push(parse_event(e).expect("a valid event"));
            }
            answer(StatusCode::OK, json!({"accepted": events.len(), "rejected": []}), None)
        }
    } else {
        answer(StatusCode::NOT_FOUND, json!({"error": "no such endpoint"}), None)
    };
    ctx.changed.send_modify(|n| *n += 1);
    rsp
}

fn claim(ctx: &Ctx, token: Option<String>, body: &[u8], authorized: bool) -> Response<Full<Bytes>> {
    let raw: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut st = ctx.state.lock().unwrap();
    let (status, value, retry_after) = match st.claim_script.pop_front() {
        Some(Script::Status(s, ra)) => (s, json!({"error": format!("scripted {s}")}), ra),
        Some(Script::Answer(v)) => (200, v, None),
        Some(Script::HalfThenConflict) => unreachable!("a log script"),
        None if !authorized => (401, json!({"error": "missing or wrong token"}), None),
        None => match parse_request(body) {
            Ok(c) => (200, ctx.ledger.lock().unwrap().decide(ctx.cell, &c), None),
            Err(e) => (400, json!({"error": e.to_string()}), None),
        },
    };
    st.claims.push(SeenClaim { token, body: raw, status, answer: value.clone() });
    answer(StatusCode::from_u16(status).unwrap(), value, retry_after)
}

async fn chunk(ctx: &Ctx, rest: &str, query: &str, body: Bytes, authorized: bool) -> Response<Full<Bytes>> {
    let Some((raw_job, build)) = rest.rsplit_once('/') else {
        return answer(StatusCode::BAD_REQUEST, json!({"error": "no build"}), None);
    };
    let job = raw_job.split('/').map(decode).collect::<Vec<_>>().join("/");
    let build: u64 = build.parse().unwrap();
    let q: HashMap<String, String> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    let offset: u64 = q["offset"].parse().unwrap();
    let last = q.get("final").is_some_and(|f| f == "true");
    let key = (job.clone(), build);
    {
        let mut st = ctx.state.lock().unwrap();
        let n = st.in_flight.entry(key.clone()).or_default();
        *n += 1;
        let n = *n;
        st.max_in_flight_per_build = st.max_in_flight_per_build.max(n);
    }
    // Let another chunk of the same build arrive meanwhile, if the sender would send one.
    tokio::task::yield_now().await;
    let mut st = ctx.state.lock().unwrap();
    *st.in_flight.get_mut(&key).unwrap() -= 1;
    let scripted = if authorized { st.log_script.pop_front() } else { None };
    let (status, value, retry_after) = if !authorized {
        (401, json!({"error": "missing or wrong token"}), None)
    } else {
        let log = st.logs.entry(key.clone()).or_default();
        let end = log.bytes.len() as u64;
        match scripted {
            Some(Script::Status(s, ra)) => (s, json!({"error": format!("scripted {s}")}), ra),
            Some(Script::Answer(v)) => (200, v, None),
            Some(Script::HalfThenConflict) if offset == end && body.len() >= 2 => {
                let half = body.len() / 2;
                log.bytes.extend_from_slice(&body[..half]);
                log.chunks.insert(offset, half);
                (
                    409,
                    json!({"next": end + half as u64, "complete": false, "error": "a chunk start with another length"}),
                    None,
                )
            }
            _ if offset == end && !log.complete && (last || !body.is_empty()) => {
                log.bytes.extend_from_slice(&body);
                log.chunks.insert(offset, body.len());
                log.complete = last;
                (200, json!({"next": end + body.len() as u64, "complete": last}), None)
            }
            _ if log.chunks.get(&offset) == Some(&body.len()) && (!body.is_empty() || offset == end) => {
                if last && offset + body.len() as u64 == end {
                    log.complete = true;
                }
                (200, json!({"next": offset + body.len() as u64, "complete": log.complete}), None)
            }
            _ => (409, json!({"next": end, "complete": log.complete, "error": "not where the log ends"}), None),
        }
    };
    st.chunks.push(SeenChunk { raw_job: raw_job.to_owned(), job, build, offset, last, body, status });
    answer(StatusCode::from_u16(status).unwrap(), value, retry_after)
}
