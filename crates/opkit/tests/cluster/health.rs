//! The health server over real TCP: raw HTTP/1.1 requests and hyper's client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use opkit::health::{HealthServer, OPENMETRICS_CONTENT_TYPE, Readiness};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

/// One raw HTTP/1.1 request; the whole answer as text.
async fn raw(addr: SocketAddr, method: &str, path: &str) -> anyhow::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("{method} {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

fn status_line(resp: &str) -> &str {
    resp.lines().next().unwrap_or_default()
}

#[tokio::test]
async fn probes_and_metrics_over_http() -> anyhow::Result<()> {
    let mut registry = Registry::with_prefix("vesper");
    let reconciles = Counter::<u64>::default();
    registry.register("reconciles", "Reconciliations", reconciles.clone());
    reconciles.inc_by(7);
    let readiness = Readiness::new();
    let server = HealthServer::bind("127.0.0.1:0".parse()?, readiness.clone(), Arc::new(registry)).await?;
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));

    let r = raw(addr, "GET", "/healthz").await?;
    assert_eq!(status_line(&r), "HTTP/1.1 200 OK");
    assert!(r.ends_with("ok\n"), "{r}");

    let r = raw(addr, "GET", "/readyz").await?;
    assert_eq!(status_line(&r), "HTTP/1.1 503 Service Unavailable");
    assert!(r.ends_with("not ready: starting\n"), "{r}");
    readiness.set_not_ready("waiting for leadership");
    assert!(raw(addr, "GET", "/readyz").await?.ends_with("not ready: waiting for leadership\n"));
    readiness.set_ready();
    assert_eq!(status_line(&raw(addr, "GET", "/readyz?verbose").await?), "HTTP/1.1 200 OK");

    let r = raw(addr, "GET", "/metrics").await?;
    assert_eq!(status_line(&r), "HTTP/1.1 200 OK");
    assert!(r.to_ascii_lowercase().contains(&format!("content-type: {OPENMETRICS_CONTENT_TYPE}")), "{r}");
    assert!(r.contains("# TYPE vesper_reconciles counter"), "{r}");
    assert!(r.contains("vesper_reconciles_total 7"), "{r}");
    assert!(r.ends_with("# EOF\n"), "{r}");

    let r = raw(addr, "HEAD", "/healthz").await?;
    assert_eq!(status_line(&r), "HTTP/1.1 200 OK");
    assert!(!r.contains("ok\n"), "no body for HEAD: {r}");
    assert_eq!(status_line(&raw(addr, "GET", "/nope").await?), "HTTP/1.1 404 Not Found");
    let r = raw(addr, "POST", "/healthz").await?;
    assert_eq!(status_line(&r), "HTTP/1.1 405 Method Not Allowed");
    assert!(r.to_ascii_lowercase().contains("allow: get, head"), "{r}");

    // hyper's client, keep-alive: two requests on one connection.
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    for path in ["/healthz", "/readyz"] {
        let req = http::Request::get(path).header("host", "probe").body(Empty::<Bytes>::new())?;
        let resp = sender.send_request(req).await?;
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.into_body().collect().await?.to_bytes(), "ok\n");
    }
    drop(sender);
    let _ = conn.await;

    // Graceful shutdown: serve returns, the port is closed.
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(5), serving).await???;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "listener closed");
    Ok(())
}

#[tokio::test]
async fn shutdown_lets_a_request_in_flight_finish() -> anyhow::Result<()> {
    let server = HealthServer::bind("127.0.0.1:0".parse()?, Readiness::new(), Arc::new(Registry::default()))
        .await?
        .with_shutdown_timeout(Duration::from_secs(5));
    let addr = server.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    // A connection that has sent half a request when shutdown starts.
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: probe\r\n").await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = stop.send(());
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.write_all(b"Connection: close\r\n\r\n").await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    assert_eq!(status_line(&out), "HTTP/1.1 200 OK", "{out}");
    tokio::time::timeout(Duration::from_secs(5), serving).await???;
    Ok(())
}

#[tokio::test]
async fn binding_a_taken_port_names_the_address() -> anyhow::Result<()> {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = taken.local_addr()?;
    let err = HealthServer::bind(addr, Readiness::new(), Arc::new(Registry::default())).await.expect_err("in use");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    Ok(())
}
