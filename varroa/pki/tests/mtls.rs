//! Real mutual-TLS handshakes over 127.0.0.1 with rustls: the gateway (server) requires a client
//! certificate from the CA and reads the mite identity from it.

use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use varroa_pki::{CertificateAuthority, IssuedCert, MiteIdentity, identity_of_der};

const DAY: Duration = Duration::from_secs(86_400);
const GATEWAY: &str = "gateway.varroa.test";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca: &CertificateAuthority) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap()).unwrap();
    Arc::new(roots)
}

fn chain_and_key(cert: &IssuedCert) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    (
        vec![CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).unwrap()],
        PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap(),
    )
}

/// The gateway: trusts client certificates from `ca` only, and requires one.
fn gateway_config(ca: &CertificateAuthority, server: &IssuedCert) -> Arc<ServerConfig> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca), provider()).build().unwrap();
    let (chain, key) = chain_and_key(server);
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    Arc::new(config)
}

/// A mite: trusts servers from `ca`, presents `client` if any.
fn mite_config(ca: &CertificateAuthority, client: Option<&IssuedCert>) -> Arc<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots(ca));
    let config = match client {
        Some(c) => {
            let (chain, key) = chain_and_key(c);
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// One connection: the gateway accepts, reads the identity of the presented certificate and
/// sends it back; the mite connects to `server_name` and reads the answer.
/// Returns (gateway side, mite side).
async fn dial(
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    server_name: &str,
) -> (io::Result<MiteIdentity>, io::Result<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gateway = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await?;
        let mut tls = TlsAcceptor::from(server).accept(tcp).await?;
        let presented = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).cloned();
        let presented = presented.ok_or_else(|| io::Error::other("no client certificate"))?;
        let id = identity_of_der(&presented).map_err(io::Error::other)?;
        tls.write_all(format!("hello {id}").as_bytes()).await?;
        tls.shutdown().await?;
        Ok::<_, io::Error>(id)
    });
    let name = ServerName::try_from(server_name.to_owned()).unwrap();
    let mite = async {
        let tcp = TcpStream::connect(addr).await?;
        let mut tls = TlsConnector::from(client).connect(name, tcp).await?;
        let mut answer = String::new();
        tls.read_to_string(&mut answer).await?;
        Ok::<_, io::Error>(answer)
    }
    .await;
    (gateway.await.unwrap(), mite)
}

fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// Signed by a CA the peer does not trust: with the same CA name, webpki finds the anchor by name
/// and then the signature fails; with another name, there is no issuer at all.
fn refused_as_foreign(e: &io::Error) -> bool {
    use rustls::CertificateError::{BadSignature, UnknownIssuer};
    matches!(rustls_error(e), Some(rustls::Error::InvalidCertificate(BadSignature | UnknownIssuer)))
}

fn fixture() -> (CertificateAuthority, Arc<ServerConfig>) {
    let ca = CertificateAuthority::generate("varroa-gateway-ca", 30 * DAY).unwrap();
    let server = ca.issue_server(&[GATEWAY.into(), "127.0.0.1".into()], DAY, SystemTime::now()).unwrap();
    let config = gateway_config(&ca, &server);
    (ca, config)
}

#[tokio::test]
async fn gateway_reads_the_mite_identity_from_its_client_certificate() {
    let (ca, gateway) = fixture();
    let me = MiteIdentity::new("team-a", "ci");
    let cert = ca.issue_mite(&me, DAY, SystemTime::now()).unwrap();
    let (server, client) = dial(gateway, mite_config(&ca, Some(&cert)), GATEWAY).await;
    assert_eq!(server.unwrap(), me);
    assert_eq!(client.unwrap(), "hello team-a/ci");
}

#[tokio::test]
async fn server_certificate_also_names_its_ip_address() {
    let (ca, gateway) = fixture();
    let cert = ca.issue_mite(&MiteIdentity::new("ns", "ci"), DAY, SystemTime::now()).unwrap();
    let (server, client) = dial(gateway, mite_config(&ca, Some(&cert)), "127.0.0.1").await;
    assert_eq!(server.unwrap(), MiteIdentity::new("ns", "ci"));
    assert_eq!(client.unwrap(), "hello ns/ci");
}

#[tokio::test]
async fn client_certificate_from_another_ca_is_refused() {
    let (ca, gateway) = fixture();
    let other = CertificateAuthority::generate("varroa-gateway-ca", DAY).unwrap(); // same name
    let forged = other.issue_mite(&MiteIdentity::new("team-a", "ci"), DAY, SystemTime::now()).unwrap();
    let (server, client) = dial(gateway, mite_config(&ca, Some(&forged)), GATEWAY).await;
    let err = server.unwrap_err();
    assert!(refused_as_foreign(&err), "{err:?}");
    assert!(client.is_err(), "the mite must not get an answer: {client:?}");
}

#[tokio::test]
async fn mite_without_a_client_certificate_is_refused() {
    let (ca, gateway) = fixture();
    let (server, client) = dial(gateway, mite_config(&ca, None), GATEWAY).await;
    let err = server.unwrap_err();
    assert!(matches!(rustls_error(&err), Some(rustls::Error::NoCertificatesPresented)), "{err:?}");
    assert!(client.is_err());
}

#[tokio::test]
async fn gateway_server_certificate_cannot_be_used_as_a_client_certificate() {
    let (ca, gateway) = fixture();
    let server_cert = ca.issue_server(&["mite.example".into()], DAY, SystemTime::now()).unwrap();
    let (server, client) = dial(gateway, mite_config(&ca, Some(&server_cert)), GATEWAY).await;
    let err = server.unwrap_err();
    assert!(matches!(rustls_error(&err), Some(rustls::Error::InvalidCertificate(_))), "{err:?}");
    assert!(client.is_err());
}

#[tokio::test]
async fn mite_refuses_a_gateway_from_another_ca() {
    let (ca, _) = fixture();
    let other = CertificateAuthority::generate("varroa-gateway-ca", DAY).unwrap();
    let impostor = other.issue_server(&[GATEWAY.into()], DAY, SystemTime::now()).unwrap();
    let cert = ca.issue_mite(&MiteIdentity::new("ns", "ci"), DAY, SystemTime::now()).unwrap();
    let (_, client) = dial(gateway_config(&other, &impostor), mite_config(&ca, Some(&cert)), GATEWAY).await;
    let err = client.unwrap_err();
    assert!(refused_as_foreign(&err), "{err:?}");
}
