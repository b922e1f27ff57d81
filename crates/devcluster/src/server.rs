//! Serving HTTPS: accept TCP connections, terminate TLS (HTTP/2 or HTTP/1.1 by ALPN), and hand each
//! request to `api::handle`. Shutdown closes the listener and every open connection.

use crate::api::PeerCertificate;
use crate::cluster::Cluster;
use crate::runtime::Runtime;
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
    rt: Arc<Runtime>,
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
                let rt = rt.clone();
                conns.spawn(async move {
                    let tls = match acceptor.accept(tcp).await {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                    };
                    // The client certificate, if one was presented: the x509 authenticator
                    // decides per request whether it names a user.
                    let peer_cert = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|c| PeerCertificate(Arc::new(c.to_vec())));
                    let svc = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                        if let Some(cert) = &peer_cert {
                            req.extensions_mut().insert(cert.clone());
                        }
                        crate::api::handle(cl.clone(), rt.clone(), req)
                    });
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
