//! A real `nats-server` with JetStream for tests (cargo feature `testing`).
//!
//! [`NatsServer::start`] finds a current server (2.10 or later: Debian's 2.9 is too old for the
//! key-value features async-nats uses), starts it on a free loopback port with JetStream storing
//! into a temporary directory, and returns once it answers. The server is killed when the fixture
//! drops. Fault tests [`NatsServer::stop`], [`NatsServer::kill`] and [`NatsServer::restart`] it
//! (same port, same store: clients reconnect and find their buckets), and rotate the password
//! ([`NatsServer::set_password`]: rewrites the config and signals `reload`, as an operator does).
//!
//! Where the binary comes from, first found wins: `$VARROA_NATS_SERVER`; `.tools/bin/nats-server`
//! in the workspace (installed by `make deps`, i.e. `scripts/ensure-deps.sh`); `nats-server` on
//! `PATH`. One that is too old is skipped; when none fits, the error says to run `make deps`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The oldest nats-server the fixture accepts.
pub const MIN_VERSION: (u32, u32) = (2, 10);

/// How long [`NatsServer::start`] waits for the server to answer.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// How long [`NatsServer::set_password`] waits for the server to apply its new configuration.
const RELOAD_DEADLINE: Duration = Duration::from_secs(20);

/// Errors of the fixture.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// No usable nats-server.
    #[error("no nats-server {}.{} or later found ({tried}); run `make deps` (scripts/ensure-deps.sh installs one into .tools/bin) or set VARROA_NATS_SERVER", MIN_VERSION.0, MIN_VERSION.1)]
    NotFound {
        /// What was looked at and why it did not fit.
        tried: String,
    },
    /// Starting, stopping or configuring failed.
    #[error("nats-server: {0}")]
    Io(String),
    /// The server did not answer in time.
    #[error("nats-server did not become ready within {deadline:?} on 127.0.0.1:{port}; its log:\n{log}")]
    NotReady {
        /// The client port.
        port: u16,
        /// How long was waited.
        deadline: Duration,
        /// The end of the server's log.
        log: String,
    },
}

/// A running nats-server with JetStream (see the module docs).
pub struct NatsServer {
    binary: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    monitor_port: u16,
    auth: Option<(String, String)>,
    /// Extra configuration (e.g. the accounts of deploy/varroa/nats.yaml) and the environment it
    /// reads (`$VAR` references), for [`NatsServer::start_with_config`].
    extra: Option<(String, Vec<(String, String)>)>,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts a server without authentication.
    pub fn start() -> Result<NatsServer, FixtureError> {
        Self::start_inner(None)
    }

    /// Starts a server that requires `user` and `password`.
    pub fn start_with_auth(user: &str, password: &str) -> Result<NatsServer, FixtureError> {
        Self::start_inner(Some((user.to_owned(), password.to_owned())))
    }

    /// Starts a server whose configuration also holds `config` (NATS configuration text, e.g.
    /// an `accounts { ... }` block), with `env` in its environment for the `$VAR` references in
    /// it. Authentication is whatever `config` sets.
    pub fn start_with_config(config: &str, env: &[(&str, &str)]) -> Result<NatsServer, FixtureError> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Self::start_inner_with(None, Some((config.to_owned(), env)))
    }

    fn start_inner(auth: Option<(String, String)>) -> Result<NatsServer, FixtureError> {
        Self::start_inner_with(auth, None)
    }

    fn start_inner_with(
        auth: Option<(String, String)>,
        extra: Option<(String, Vec<(String, String)>)>,
    ) -> Result<NatsServer, FixtureError> {
        let binary = find_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("varroa-nats-")
            .tempdir()
            .map_err(|e| FixtureError::Io(format!("temp dir: {e}")))?;
        let mut server = NatsServer { binary, dir, port: 0, monitor_port: 0, auth, extra, child: None };
        let mut last = None;
        // A port picked free can be taken before the server binds it: try a few.
        for _ in 0..3 {
            server.port = free_port()?;
            server.monitor_port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| FixtureError::Io("could not start".into())))
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Writes a credentials file for [`crate::nats::connect`] holding `user` and `password`.
    pub fn write_credentials(path: &Path, user: &str, password: &str) -> Result<(), FixtureError> {
        std::fs::write(path, format!("user={user}\npassword={password}\n"))
            .map_err(|e| FixtureError::Io(format!("write {}: {e}", path.display())))
    }

    /// Changes the password the server requires (config rewritten, then `--signal reload`):
    /// clients authenticated with the old one are disconnected by the server. Returns once the
    /// server has applied the new configuration (its `/varz` `config_load_time` changed): the
    /// signal only asks for the reload, and a client connecting right after it could still meet
    /// the old password.
    pub fn set_password(&mut self, password: &str) -> Result<(), FixtureError> {
        let before = self.config_load_time();
        let Some((user, _)) = self.auth.take() else {
            return Err(FixtureError::Io("set_password on a server started without authentication".into()));
        };
        self.auth = Some((user, password.to_owned()));
        self.write_config()?;
        let pid = self.pid().ok_or_else(|| FixtureError::Io("set_password on a stopped server".into()))?;
        let status = Command::new(&self.binary)
            .arg("--signal")
            .arg(format!("reload={pid}"))
            .status()
            .map_err(|e| FixtureError::Io(format!("--signal reload: {e}")))?;
        if !status.success() {
            return Err(FixtureError::Io(format!("--signal reload={pid} exited with {status}")));
        }
        let deadline = Instant::now() + RELOAD_DEADLINE;
        loop {
            let now = self.config_load_time();
            if now.is_some() && now != before {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(FixtureError::Io(format!(
                    "the reload was not applied within {RELOAD_DEADLINE:?} (config_load_time still {before:?}); its log:\n{}",
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `config_load_time` from the monitoring endpoint's `/varz`: when the server last (re)read
    /// its configuration.
    fn config_load_time(&self) -> Option<String> {
        let body = http_get(SocketAddr::from(([127, 0, 0, 1], self.monitor_port)), "/varz")?;
        let varz: serde_json::Value = serde_json::from_str(&body).ok()?;
        varz.get("config_load_time")?.as_str().map(str::to_owned)
    }

    /// Stops the server gracefully (SIGTERM, then SIGKILL after 10 s) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child we own and have not reaped yet.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => return,
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                    _ => break,
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server and starts it again on the same port with the same store.
    pub fn restart(&mut self) -> Result<(), FixtureError> {
        self.stop();
        self.spawn()
    }

    /// Starts the server after [`NatsServer::stop`] or [`NatsServer::kill`] (same port, same store).
    pub fn start_again(&mut self) -> Result<(), FixtureError> {
        if self.child.is_some() {
            return Ok(());
        }
        self.spawn()
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("nats.conf")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats.log")
    }

    fn write_config(&self) -> Result<(), FixtureError> {
        let mut conf = String::from("# written by varroa_link::testing::NatsServer\n");
        if let Some((user, password)) = &self.auth {
            conf.push_str(&format!("authorization {{\n  user: {}\n  password: {}\n}}\n", quote(user), quote(password)));
        }
        if let Some((extra, _)) = &self.extra {
            conf.push_str(extra);
            conf.push('\n');
        }
        std::fs::write(self.config_path(), conf).map_err(|e| FixtureError::Io(format!("write config: {e}")))
    }

    fn spawn(&mut self) -> Result<(), FixtureError> {
        self.write_config()?;
        let store = self.dir.path().join("jetstream");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| FixtureError::Io(format!("log file: {e}")))?;
        let log2 = log.try_clone().map_err(|e| FixtureError::Io(format!("log file: {e}")))?;
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(self.config_path())
            .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string(), "-m", &self.monitor_port.to_string()])
            .arg("-sd")
            .arg(&store)
            .envs(self.extra.iter().flat_map(|(_, env)| env.iter().map(|(k, v)| (k, v))))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| FixtureError::Io(format!("spawn {}: {e}", self.binary.display())))?;
        self.child = Some(child);
        self.wait_ready()
    }

    /// Polls the monitoring endpoint's `/healthz?js-enabled-only=true` (JetStream up) until it
    /// answers 200, the process exits, or the deadline passes.
    fn wait_ready(&mut self) -> Result<(), FixtureError> {
        let deadline = Instant::now() + START_DEADLINE;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.monitor_port));
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(FixtureError::NotReady {
                    port: self.port,
                    deadline: START_DEADLINE,
                    log: format!("exited with {status}\n{}", self.log_tail()),
                });
            }
            if http_ok(addr, "/healthz?js-enabled-only=true") && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(FixtureError::NotReady { port: self.port, deadline: START_DEADLINE, log: self.log_tail() });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn free_port() -> Result<u16, FixtureError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| FixtureError::Io(format!("free port: {e}")))?;
    l.local_addr().map(|a| a.port()).map_err(|e| FixtureError::Io(format!("free port: {e}")))
}

fn http_ok(addr: SocketAddr, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap_or(0);
    let head = String::from_utf8_lossy(&buf[..n]);
    head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200")
}

/// The body of `GET path` (HTTP/1.0, so the server closes the connection after it), when the
/// answer is 200.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).ok()?;
    let mut text = String::new();
    s.take(1 << 20).read_to_string(&mut text).ok()?;
    if !(text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200")) {
        return None;
    }
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned())
}

/// Finds a nats-server of at least [`MIN_VERSION`] (see the module docs).
pub fn find_binary() -> Result<PathBuf, FixtureError> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("VARROA_NATS_SERVER") {
        candidates.push(PathBuf::from(p));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    candidates.push(workspace.join(".tools/bin/nats-server"));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("nats-server")));
    }
    let mut tried = Vec::new();
    for c in candidates {
        if !c.is_file() {
            continue;
        }
        match version_of(&c) {
            Some(v) if v >= MIN_VERSION => return Ok(c),
            Some((major, minor)) => tried.push(format!("{} is {major}.{minor}", c.display())),
            None => tried.push(format!("{}: no version from --version", c.display())),
        }
    }
    if tried.is_empty() {
        tried.push("none in VARROA_NATS_SERVER, .tools/bin or PATH".into());
    }
    Err(FixtureError::NotFound { tried: tried.join("; ") })
}

/// `nats-server --version` prints `nats-server: v2.12.8`.
fn version_of(binary: &Path) -> Option<(u32, u32)> {
    let out = Command::new(binary).arg("--version").output().ok()?;
    parse_version(&String::from_utf8_lossy(&out.stdout))
}

fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text.trim().rsplit(' ').next()?.trim_start_matches('v');
    let mut parts = v.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("nats-server: v2.12.8\n"), Some((2, 12)));
        assert_eq!(parse_version("nats-server: v2.9.10"), Some((2, 9)));
        assert!(parse_version("").is_none());
        assert!((2, 9) < MIN_VERSION && (2, 12) >= MIN_VERSION);
    }
}
