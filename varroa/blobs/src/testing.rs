//! Test fixtures (cargo feature `testing`): a real S3 server, and a TCP proxy that can cut the
//! way to a server.
//!
//! [`MotoServer::start`] runs moto's S3 server (`moto_server`, from PyPI's `moto[server]`) on a
//! free loopback port and returns once it answers; [`MotoServer::create_bucket`] makes a bucket;
//! the server is killed when the fixture drops. moto keeps everything in memory: a stopped
//! server loses its buckets, so tests that need the store to fail and come back cut the way to it
//! with a [`TcpProxy`] instead.
//!
//! Where `moto_server` comes from, first found wins: `$VARROA_MOTO_SERVER`;
//! `.tools/bin/moto_server` in the workspace (installed by `make deps`, i.e.
//! `scripts/ensure-deps.sh`); `moto_server` on `PATH`. When none is there, the error says to run
//! `make deps`.
//!
//! The S3 settings a test uses (moto accepts any credential): [`MotoServer::settings`] puts
//! `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` in a credentials file rather than the process
//! environment, which tests share.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::store::StoreSettings;

/// How long [`MotoServer::start`] waits for the server to answer.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// Errors of the fixtures.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// No moto_server.
    #[error(
        "no moto_server found ({0}); run `make deps` (scripts/ensure-deps.sh installs moto into .tools/) or set VARROA_MOTO_SERVER"
    )]
    NotFound(String),
    /// Starting or talking to it failed.
    #[error("moto_server: {0}")]
    Io(String),
}

/// A running moto S3 server (see the module docs).
pub struct MotoServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl MotoServer {
    /// Starts a server on a free port.
    pub fn start() -> Result<MotoServer, FixtureError> {
        let binary = find_binary()?;
        let mut dir = tempfile::Builder::new()
            .prefix("varroa-moto-")
            .tempdir()
            .map_err(|e| FixtureError::Io(format!("temp dir: {e}")))?;
        let mut last = None;
        // A port picked free can be taken before the server binds it: try a few.
        for _ in 0..3 {
            let port = free_port()?;
            let log = std::fs::File::create(dir.path().join("moto.log"))
                .map_err(|e| FixtureError::Io(format!("log file: {e}")))?;
            let log2 = log.try_clone().map_err(|e| FixtureError::Io(format!("log file: {e}")))?;
            let child = Command::new(&binary)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .spawn()
                .map_err(|e| FixtureError::Io(format!("spawn {}: {e}", binary.display())))?;
            let mut server = MotoServer { port, dir, child: Some(child) };
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    server.kill();
                    last = Some(e);
                    dir = std::mem::replace(
                        &mut server.dir,
                        tempfile::TempDir::new().map_err(|e| FixtureError::Io(e.to_string()))?,
                    );
                }
            }
        }
        Err(last.unwrap_or_else(|| FixtureError::Io("could not start".into())))
    }

    /// The endpoint, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates `bucket` (an unsigned `PUT /<bucket>`, which moto accepts).
    pub fn create_bucket(&self, bucket: &str) -> Result<(), FixtureError> {
        let (status, body) = http(self.addr(), "PUT", &format!("/{bucket}"))?;
        if status != 200 {
            return Err(FixtureError::Io(format!("create bucket {bucket}: HTTP {status}: {body}")));
        }
        Ok(())
    }

    /// Store settings for `s3://<bucket>/<prefix>` on `endpoint` (this server's, or a proxy's in
    /// front of it), with a credentials file moto accepts.
    pub fn settings(&self, endpoint: &str, bucket: &str, prefix: &str) -> StoreSettings {
        let creds = self.credentials_file();
        StoreSettings {
            url: format!("s3://{bucket}/{prefix}?endpoint={endpoint}&region=us-east-1"),
            credentials_file: Some(creds),
        }
    }

    /// A credentials file moto accepts (any key does).
    pub fn credentials_file(&self) -> PathBuf {
        let path = self.dir.path().join("s3-credentials");
        let _ = std::fs::write(&path, "access_key_id=varroa-test\nsecret_access_key=varroa-test-secret\n");
        path
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn wait_ready(&mut self) -> Result<(), FixtureError> {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                self.child = None;
                return Err(FixtureError::Io(format!("exited with {status}: {}", self.log_tail())));
            }
            if matches!(http(self.addr(), "GET", "/"), Ok((200, _))) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(FixtureError::Io(format!("not ready within {START_DEADLINE:?}: {}", self.log_tail())));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("moto.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Kills the server (its buckets are lost).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> Result<u16, FixtureError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| FixtureError::Io(format!("free port: {e}")))?;
    l.local_addr().map(|a| a.port()).map_err(|e| FixtureError::Io(format!("free port: {e}")))
}

/// A minimal HTTP/1.0 request; the status and body.
fn http(addr: SocketAddr, method: &str, path: &str) -> Result<(u16, String), FixtureError> {
    let io = |e: std::io::Error| FixtureError::Io(format!("{method} {path}: {e}"));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).map_err(io)?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(io)?;
    s.write_all(format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n").as_bytes())
        .map_err(io)?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(io)?;
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// Finds moto_server (see the module docs).
pub fn find_binary() -> Result<PathBuf, FixtureError> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("VARROA_MOTO_SERVER") {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/bin/moto_server"));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("moto_server")));
    }
    candidates
        .into_iter()
        .find(|c| c.is_file())
        .ok_or_else(|| FixtureError::NotFound("none in VARROA_MOTO_SERVER, .tools/bin or PATH".into()))
}

/// A TCP proxy on a free loopback port in front of `target`. While it is [`TcpProxy::cut`], it
/// refuses new connections (accepts and closes them) and ends the open ones, as a store that
/// became unreachable; [`TcpProxy::restore`] lets traffic through again.
pub struct TcpProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl TcpProxy {
    /// Starts forwarding to `target` (threads, no runtime needed).
    pub fn start(target: SocketAddr) -> Result<TcpProxy, FixtureError> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| FixtureError::Io(format!("proxy: {e}")))?;
        let addr = listener.local_addr().map_err(|e| FixtureError::Io(format!("proxy: {e}")))?;
        listener.set_nonblocking(true).map_err(|e| FixtureError::Io(format!("proxy: {e}")))?;
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (cut.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        if c.load(Ordering::SeqCst) {
                            drop(client);
                            continue;
                        }
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else { continue };
                        pipe(client, server, c.clone(), s.clone());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(TcpProxy { addr, cut, stop })
    }

    /// The endpoint URL, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, nothing gets through.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Traffic flows again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn pipe(client: TcpStream, server: TcpStream, cut: Arc<AtomicBool>, stop: Arc<AtomicBool>) {
    let copy = move |mut from: TcpStream, mut to: TcpStream, cut: Arc<AtomicBool>, stop: Arc<AtomicBool>| {
        let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
        let mut buf = [0u8; 16 * 1024];
        loop {
            if cut.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst) {
                break;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
        let _ = from.shutdown(std::net::Shutdown::Both);
        let _ = to.shutdown(std::net::Shutdown::Both);
    };
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else { return };
    let (cut2, stop2) = (cut.clone(), stop.clone());
    std::thread::spawn(move || copy(client, server, cut, stop));
    std::thread::spawn(move || copy(s2, c2, cut2, stop2));
}
