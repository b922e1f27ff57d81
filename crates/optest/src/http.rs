//! Plain HTTP GETs of a process' /healthz, /readyz and /metrics on loopback.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one GET may take.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// `GET path` on `addr` (`127.0.0.1:PORT`): (status, body), or the error (refused while the
/// server starts).
pub async fn try_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer within {TIMEOUT:?}")))??;
    let status = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// `GET path` on `addr`: (status, body); fails the test when there is no answer.
pub async fn get(addr: &str, path: &str) -> (u16, String) {
    try_get(addr, path).await.unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}
