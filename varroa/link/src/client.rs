//! The mite's side of the connection: a gRPC channel to the gateway over mutual TLS.
//!
//! [`channel`] takes the PEM contents rather than paths, so a caller re-reads its certificate
//! Secret before each dial (a rotated certificate is then used at the next reconnect). The channel
//! speaks HTTP/2 over rustls (ring) with ALPN `h2`, trusts only the given CA for the server, sends
//! HTTP/2 keepalive pings (so a dead connection is noticed even when the stream is idle), and is
//! bounded in connect time. Use it with
//! `proto::v1::mite_link_client::MiteLinkClient::new(channel)`, and set
//! `max_decoding_message_size(MAX_MESSAGE_BYTES)` on the client to accept the largest Desired.

use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Errors of [`channel`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The gateway address is not a usable `https://host:port` URL.
    #[error(
        "invalid gateway address {url:?}: {reason}; fix: use https://<host>:<port> (e.g. https://varroa-gateway.varroa-system.svc:8443)"
    )]
    Address {
        /// The address given.
        url: String,
        /// Why.
        reason: String,
    },
    /// TLS could not be set up or the connection failed.
    #[error("cannot connect to the gateway at {url}: {reason}")]
    Connect {
        /// The address.
        url: String,
        /// Why (tonic's error chain).
        reason: String,
    },
}

/// How to reach the gateway.
#[derive(Debug, Clone)]
pub struct GatewayAddress {
    /// `https://host:port`.
    pub url: String,
    /// The name the server certificate must carry, when it is not the URL's host (e.g. dialling
    /// by IP, or through a port-forward).
    pub server_name: Option<String>,
    /// How long connecting (TCP and TLS) may take.
    pub connect_timeout: Duration,
    /// HTTP/2 keepalive ping interval (the timeout is the same).
    pub keepalive: Duration,
}

impl GatewayAddress {
    /// `url` with a 10 s connect timeout and 20 s keepalive.
    pub fn new(url: impl Into<String>) -> Self {
        GatewayAddress {
            url: url.into(),
            server_name: None,
            connect_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(20),
        }
    }
}

/// Connects to the gateway presenting `cert_pem`/`key_pem` (the Controller's certificate Secret)
/// and trusting `ca_pem` (the gateway CA) for the server.
pub async fn channel(
    address: &GatewayAddress,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<Channel, ClientError> {
    let url = &address.url;
    if !url.starts_with("https://") {
        return Err(ClientError::Address { url: url.clone(), reason: "not https".into() });
    }
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .identity(Identity::from_pem(cert_pem, key_pem));
    if let Some(name) = &address.server_name {
        tls = tls.domain_name(name.clone());
    }
    let endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| ClientError::Address { url: url.clone(), reason: e.to_string() })?
        .tls_config(tls)
        .map_err(|e| ClientError::Connect { url: url.clone(), reason: chain(&e) })?
        .connect_timeout(address.connect_timeout)
        .http2_keep_alive_interval(address.keepalive)
        .keep_alive_timeout(address.keepalive)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    endpoint.connect().await.map_err(|e| ClientError::Connect { url: url.clone(), reason: chain(&e) })
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_plain_or_broken_address_is_refused_with_the_fix() {
        let err = channel(&GatewayAddress::new("http://gw:8443"), "", "", "").await.unwrap_err().to_string();
        assert!(err.contains("not https") && err.contains("fix: use https://"), "{err}");
        let err = channel(&GatewayAddress::new("https://gw:port"), "", "", "").await.unwrap_err().to_string();
        assert!(err.contains("https://gw:port"), "{err}");
    }
}
