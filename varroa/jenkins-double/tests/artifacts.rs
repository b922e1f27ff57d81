//! The double's archived-artifacts client against a scripted mite that is also the "store" its
//! URLs point to: what the plugin does when the mite is away (503: again after the back-off),
//! when the store refuses a URL (403: new URLs for the files not sent yet), when the gateway's
//! store cannot presign (501: fallback to Jenkins' archiving) and when the request is malformed
//! (400: refused).

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use varroa_jenkins_double::artifacts::{ArtifactConfig, ArtifactsClient, ArtifactsConfig, Outcome, pattern};

const TOKEN: &str = "artifact-token";

#[derive(Default)]
struct State {
    /// The statuses of the next `POST`s (200 once empty).
    posts: VecDeque<u16>,
    /// The paths whose next `PUT` is answered 403.
    refuse_put: Vec<String>,
    /// Each `POST`'s asked paths.
    asked: Vec<Vec<String>>,
    /// What was `PUT`, by path.
    stored: BTreeMap<String, Bytes>,
}

async fn handle(addr: SocketAddr, st: &Mutex<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let reply = |status: u16, json: serde_json::Value| {
        let mut r = Response::new(Full::new(Bytes::from(json.to_string())));
        *r.status_mut() = StatusCode::from_u16(status).unwrap();
        r
    };
    let path = parts.uri.path().to_owned();
    if parts.method == http::Method::PUT {
        let file = path.strip_prefix("/store/").unwrap_or_default().to_owned();
        let mut s = st.lock().unwrap();
        if let Some(i) = s.refuse_put.iter().position(|p| *p == file) {
            s.refuse_put.remove(i);
            return reply(403, serde_json::json!({"Code": "AccessDenied"}));
        }
        s.stored.insert(file, body);
        return reply(200, serde_json::json!({}));
    }
    assert_eq!(path, "/v1/artifacts/team/my%20app/7");
    assert_eq!(parts.headers["authorization"], format!("Bearer {TOKEN}"));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let files: Vec<String> =
        v["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_owned()).collect();
    let mut s = st.lock().unwrap();
    s.asked.push(files.clone());
    match s.posts.pop_front().unwrap_or(200) {
        200 => {
            let uploads: Vec<_> = files
                .iter()
                .map(|p| serde_json::json!({"path": p, "url": format!("http://{addr}/store/{p}")}))
                .collect();
            reply(200, serde_json::json!({"uploads": uploads, "expires": "2026-12-03T08:15:00Z"}))
        }
        other => reply(other, serde_json::json!({"error": format!("scripted {other}")})),
    }
}

async fn mite(state: Arc<Mutex<State>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let st = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let st = st.clone();
                    async move { Ok::<_, std::convert::Infallible>(handle(addr, &st, req).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

fn client(addr: SocketAddr, dir: &tempfile::TempDir) -> ArtifactsClient {
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    ArtifactsClient::new(ArtifactsConfig {
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        request_timeout: Duration::from_secs(5),
        ..ArtifactsConfig::new(format!("http://{addr}"), token)
    })
    .unwrap()
}

fn files() -> Vec<ArtifactConfig> {
    vec![
        ArtifactConfig { path: "app.jar".into(), content: None, size: 70_000 },
        ArtifactConfig { path: "notes.txt".into(), content: Some("done".into()), size: 0 },
    ]
}

#[tokio::test]
async fn a_mite_away_is_asked_again_and_a_refused_url_gets_new_urls_for_what_is_left() {
    let state = Arc::new(Mutex::new(State {
        posts: VecDeque::from([503, 502]),
        refuse_put: vec!["notes.txt".into()],
        ..Default::default()
    }));
    let addr = mite(state.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let c = client(addr, &dir);
    let outcome = tokio::time::timeout(Duration::from_secs(20), c.upload("team/my app", 7, &files())).await.unwrap();
    assert_eq!(outcome, Outcome::Uploaded);
    let s = state.lock().unwrap();
    assert_eq!(s.asked.len(), 4, "503, 502, 200, then again for the refused file: {:?}", s.asked);
    assert_eq!(s.asked[3], vec!["notes.txt".to_owned()], "only what was not sent yet");
    assert_eq!(s.stored["app.jar"], pattern("app.jar", 70_000));
    assert_eq!(&s.stored["notes.txt"][..], b"done");
    let counters = c.counters();
    assert_eq!(
        (counters.files, counters.bytes, counters.requests, counters.retries),
        (2, 70_004, 4, 2),
        "{counters:?}"
    );
}

#[tokio::test]
async fn a_store_that_cannot_presign_falls_back_and_a_malformed_request_is_refused() {
    let state = Arc::new(Mutex::new(State { posts: VecDeque::from([501, 400, 404]), ..Default::default() }));
    let addr = mite(state.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let c = client(addr, &dir);
    assert!(matches!(c.upload("team/my app", 7, &files()).await, Outcome::Fallback(e) if e.contains("501")));
    assert!(matches!(c.upload("team/my app", 7, &files()).await, Outcome::Refused(e) if e.contains("scripted 400")));
    assert!(matches!(c.upload("team/my app", 7, &files()).await, Outcome::Fallback(e) if e.contains("404")));
    assert!(state.lock().unwrap().stored.is_empty(), "nothing uploaded");
}
