//! The `/healthz`, `/readyz` and `/metrics` endpoints every binary serves.
//!
//! Mirrors what Kubernetes components and controller-runtime managers expose on their probe and
//! metrics ports:
//!
//! - `GET /healthz`: `200 ok` while the process runs and answers (the liveness probe);
//! - `GET /readyz`: `200 ok` when the [`Readiness`] flag is set, `503` with the reason in the body
//!   otherwise (`not ready: waiting for leadership`), as kube-apiserver's `/readyz` does;
//! - `GET /metrics`: the [`Registry`] in the OpenMetrics text format (what `prometheus_client`
//!   encodes and Prometheus scrapes), content type
//!   `application/openmetrics-text; version=1.0.0; charset=utf-8`;
//! - `HEAD` works on all three; other paths are `404`, other methods `405` with `Allow`.
//!
//! HTTP/1.1 and HTTP/2 (prior knowledge) on one plain-TCP port. Shutdown is graceful: once the
//! shutdown future completes the listener closes, requests in flight finish (up to
//! [`HealthServer::with_shutdown_timeout`], 10 s by default) and [`HealthServer::serve`] returns.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::error::{Error, Result};

/// The content type of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A shared readiness flag: not ready (with a reason) until [`Readiness::set_ready`].
#[derive(Clone, Debug)]
pub struct Readiness {
    not_ready: Arc<RwLock<Option<String>>>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self::new()
    }
}

impl Readiness {
    /// Not ready, reason `starting`.
    pub fn new() -> Self {
        Readiness { not_ready: Arc::new(RwLock::new(Some("starting".to_string()))) }
    }

    /// Ready: `/readyz` answers 200.
    pub fn set_ready(&self) {
        *self.not_ready.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Not ready: `/readyz` answers 503 with `reason`.
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *self.not_ready.write().unwrap_or_else(|p| p.into_inner()) = Some(reason.into());
    }

    /// `Ok` when ready, the reason otherwise.
    pub fn check(&self) -> std::result::Result<(), String> {
        match &*self.not_ready.read().unwrap_or_else(|p| p.into_inner()) {
            None => Ok(()),
            Some(reason) => Err(reason.clone()),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.check().is_ok()
    }
}

struct State {
    readiness: Readiness,
    registry: Arc<Registry>,
}

/// A bound, not yet serving, health server.
pub struct HealthServer {
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<State>,
    shutdown_timeout: Duration,
}

impl std::fmt::Debug for HealthServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthServer").field("addr", &self.addr).finish()
    }
}

impl HealthServer {
    /// Listen on `addr` (port 0 picks a free port; see [`HealthServer::local_addr`]).
    pub async fn bind(addr: SocketAddr, readiness: Readiness, registry: Arc<Registry>) -> Result<HealthServer> {
        let listener = TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr, source })?;
        let addr = listener.local_addr()?;
        Ok(HealthServer {
            listener,
            addr,
            state: Arc::new(State { readiness, registry }),
            shutdown_timeout: Duration::from_secs(10),
        })
    }

    /// How long shutdown waits for requests in flight before dropping them.
    pub fn with_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve until `shutdown` completes, then shut down gracefully.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let HealthServer { listener, addr, state, shutdown_timeout } = self;
        tracing::info!(%addr, "health server listening (/healthz, /readyz, /metrics)");
        let builder = auto::Builder::new(TokioExecutor::new());
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(v) => v,
                        Err(e) => {
                            // Out of file descriptors and the like: back off, keep serving.
                            tracing::warn!(error = %e, "health server: accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let state = state.clone();
                    let svc = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(route(&state, &req)) }
                    });
                    let conn = builder.serve_connection(TokioIo::new(stream), svc).into_owned();
                    let conn = graceful.watch(conn);
                    tokio::spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!(%peer, error = %e, "health server: connection ended with an error");
                        }
                    });
                }
            }
        }
        drop(listener);
        tracing::info!(%addr, "health server shutting down");
        if tokio::time::timeout(shutdown_timeout, graceful.shutdown()).await.is_err() {
            tracing::warn!(%addr, ?shutdown_timeout, "health server: connections still open after the shutdown timeout");
        }
        Ok(())
    }
}

fn route(state: &State, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/healthz" | "/readyz" | "/metrics") {
        return text(StatusCode::NOT_FOUND, format!("404 page not found: {path}\n"));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, format!("method {} not allowed\n", req.method()));
        r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n".to_string()),
        "/readyz" => match state.readiness.check() {
            Ok(()) => text(StatusCode::OK, "ok\n".to_string()),
            Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}\n")),
        },
        _ => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
                Ok(()) => {
                    let mut r = Response::new(Full::new(Bytes::from(body)));
                    r.headers_mut()
                        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(OPENMETRICS_CONTENT_TYPE));
                    r
                }
                Err(e) => {
                    tracing::warn!(error = %e, "encoding metrics failed");
                    text(StatusCode::INTERNAL_SERVER_ERROR, "encoding metrics failed\n".to_string())
                }
            }
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}
