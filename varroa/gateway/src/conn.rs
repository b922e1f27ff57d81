//! The accept loop: TCP, then the TLS handshake with the current [`ReloadingTls`] configuration,
//! then the connection is handed to tonic carrying who the peer is ([`PeerInfo`], read by the
//! service from the request extensions).
//!
//! Each handshake runs in its own task, bounded in time ([`HANDSHAKE_TIMEOUT`]) and in number
//! ([`MAX_HANDSHAKES`] at once), so a slow or silent client cannot hold the loop. A refused
//! handshake (no client certificate, another CA, expired) is logged with the peer address and
//! rustls' reason, never with certificate contents or keys, and counted.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::server::TlsStream;
use varroa_pki::MiteIdentity;

use crate::metrics::Metrics;
use crate::tls::ReloadingTls;

/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many handshakes may run at once; further connections wait in the listen backlog.
pub const MAX_HANDSHAKES: usize = 256;

/// Who is on the other end of a connection, as the handshake proved it.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// The remote address.
    pub addr: SocketAddr,
    /// The identity the client certificate names, or why it names none.
    pub identity: Result<MiteIdentity, String>,
}

/// A TLS connection of a verified client.
pub struct MiteConn {
    inner: TlsStream<TcpStream>,
    info: PeerInfo,
}

impl tonic::transport::server::Connected for MiteConn {
    type ConnectInfo = PeerInfo;
    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for MiteConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for MiteConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Accepts connections until the receiver is dropped, sending each verified one to `out`.
pub async fn accept_loop(
    listener: TcpListener,
    tls: Arc<ReloadingTls>,
    metrics: Arc<Metrics>,
    out: mpsc::Sender<MiteConn>,
) {
    let limit = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else { return };
        let (tcp, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = out.closed() => return,
        };
        let _ = tcp.set_nodelay(true);
        let tls = tls.clone();
        let out = out.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _permit = permit;
            // Reads the TLS files (small, bounded) here rather than in the accept loop.
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::warn!(peer = %addr, error = %e, "TLS handshake refused");
                    metrics.refused("handshake");
                    return;
                }
                Err(_) => {
                    tracing::warn!(peer = %addr, timeout = ?HANDSHAKE_TIMEOUT, "TLS handshake timed out");
                    metrics.refused("handshake_timeout");
                    return;
                }
            };
            let identity = match stream.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                Some(leaf) => varroa_pki::identity_of_der(leaf.as_ref()).map_err(|e| e.to_string()),
                None => Err("no client certificate".to_owned()),
            };
            let _ = out.send(MiteConn { inner: stream, info: PeerInfo { addr, identity } }).await;
        });
    }
}
