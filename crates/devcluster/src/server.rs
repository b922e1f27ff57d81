//! Serving HTTPS: accept TCP connections, terminate TLS (HTTP/2 or HTTP/1.1 by ALPN), and hand each
//! request to `api::handle`. Shutdown closes the listener and every open connection.

use crate::cluster::Cluster;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// Serve until `stop` turns true.
pub async fn serve(
    cl: Arc<Cluster>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => {
                let Ok((tcp, peer)) = accepted else { continue };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let cl = cl.clone();
                conns.spawn(async move {
                    let tls = match acceptor.accept(tcp).await {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                    };
                    let svc = service_fn(move |req| crate::api::handle(cl.clone(), req));
                    let builder = Builder::new(TokioExecutor::new());
                    if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc).await {
                        tracing::debug!(%peer, error = %e, "connection ended");
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}
