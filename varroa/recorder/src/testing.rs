//! A real PostgreSQL for tests (cargo feature `testing`).
//!
//! [`PgServer::start`] runs `initdb` into a temporary directory and starts `postgres` on a free
//! loopback port, as a child process, and returns once it accepts connections. Every test gets
//! its own server, so that fault tests can [`PgServer::stop`], [`PgServer::kill`] and
//! [`PgServer::start_again`] it (same port, same data) without touching anyone else.
//!
//! `initdb` refuses to run as root: when the tests run as root (as on our CI machines), the
//! fixture runs `initdb` and `postgres` as the `postgres` user (set in the child with
//! `setuid`/`setgid`, no `sudo` or `runuser`), in a directory it hands to that user. The server
//! trusts every local connection (it listens on 127.0.0.1 only) and runs without `fsync`: it is a
//! test server, its data lives as long as the fixture.
//!
//! Where the binaries come from, first found wins: `$VARROA_PG_BIN` (a directory with `initdb` and
//! `postgres`); the newest `/usr/lib/postgresql/<version>/bin` (Debian's packages); `initdb` on
//! `PATH`.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long [`PgServer::start`] waits for the server to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// Errors of the fixture.
#[derive(Debug, thiserror::Error)]
pub enum PgFixtureError {
    /// No PostgreSQL binaries.
    #[error(
        "no PostgreSQL binaries found ({tried}); install Debian's postgresql package (make deps does) or set VARROA_PG_BIN to the directory holding initdb and postgres"
    )]
    NotFound {
        /// Where it looked.
        tried: String,
    },
    /// A step failed.
    #[error("PostgreSQL fixture: {0}")]
    Io(String),
    /// The server did not come up.
    #[error("postgres did not accept connections within {deadline:?} on 127.0.0.1:{port}; its log:\n{log}")]
    NotReady {
        /// The port.
        port: u16,
        /// How long was waited.
        deadline: Duration,
        /// The end of its log.
        log: String,
    },
}

/// A running PostgreSQL (see the module docs).
pub struct PgServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    user: Option<(u32, u32)>,
    child: Option<Child>,
}

fn io(what: &str, e: impl std::fmt::Display) -> PgFixtureError {
    PgFixtureError::Io(format!("{what}: {e}"))
}

/// The directory holding `initdb` and `postgres`.
pub fn find_bin() -> Result<PathBuf, PgFixtureError> {
    let mut tried = Vec::new();
    if let Some(dir) = std::env::var_os("VARROA_PG_BIN") {
        let dir = PathBuf::from(dir);
        if dir.join("initdb").is_file() {
            return Ok(dir);
        }
        tried.push(format!("$VARROA_PG_BIN={} has no initdb", dir.display()));
    }
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<(u32, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let v = e.file_name().to_str()?.parse::<u32>().ok()?;
                let bin = e.path().join("bin");
                bin.join("initdb").is_file().then_some((v, bin))
            })
            .collect();
        versions.sort();
        if let Some((_, bin)) = versions.pop() {
            return Ok(bin);
        }
        tried.push("/usr/lib/postgresql/*/bin has no initdb".into());
    } else {
        tried.push("no /usr/lib/postgresql".into());
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
                return Ok(dir);
            }
        }
    }
    tried.push("no initdb on PATH".into());
    Err(PgFixtureError::NotFound { tried: tried.join("; ") })
}

/// The uid and gid of the `postgres` user, when this process is root (initdb refuses root).
fn postgres_user() -> Result<Option<(u32, u32)>, PgFixtureError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = c"postgres";
    // SAFETY: getpwnam reads a static buffer; the fields are copied out at once, and tests do not
    // call getpwnam concurrently with anything that keeps the pointer.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(PgFixtureError::Io(
            "running as root, and there is no postgres user to run initdb as (initdb refuses root); create one or run the tests as another user".into(),
        ));
    }
    // SAFETY: pw is non-null and points at a valid passwd record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Ok(Some((uid, gid)))
}

fn free_port() -> Result<u16, PgFixtureError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| io("free port", e))?;
    l.local_addr().map(|a| a.port()).map_err(|e| io("free port", e))
}

impl PgServer {
    /// `initdb` into a new temporary directory and start the server.
    pub fn start() -> Result<PgServer, PgFixtureError> {
        let bin = find_bin()?;
        let user = postgres_user()?;
        let dir = tempfile::Builder::new().prefix("varroa-pg-").tempdir().map_err(|e| io("temp dir", e))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).map_err(|e| io("chown temp dir", e))?;
        }
        let mut server = PgServer { bin, dir, port: 0, user, child: None };
        let out = server
            .command("initdb")
            .args(["-D"])
            .arg(server.data())
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| io("initdb", e))?;
        if !out.status.success() {
            return Err(PgFixtureError::Io(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr))));
        }
        let mut last = None;
        // A port picked free can be taken before postgres binds it: try a few.
        for _ in 0..3 {
            server.port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| PgFixtureError::Io("could not start".into())))
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            c.uid(uid).gid(gid);
            // The postgres user cannot read root's working directory.
            c.current_dir(self.dir.path());
        }
        c
    }

    fn spawn(&mut self) -> Result<(), PgFixtureError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| io("log file", e))?;
        if let Some((uid, gid)) = self.user {
            let _ = std::os::unix::fs::chown(self.log_path(), Some(uid), Some(gid));
        }
        let err = log.try_clone().map_err(|e| io("log file", e))?;
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_buffers=16MB"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| io("start postgres", e))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_DEADLINE;
        let mut wait = Duration::from_millis(10);
        loop {
            if self.ready() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(PgFixtureError::Io(format!("postgres exited ({status}); its log:\n{}", self.log_tail())));
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(PgFixtureError::NotReady {
                    port: self.port,
                    deadline: START_DEADLINE,
                    log: self.log_tail(),
                });
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_millis(200));
        }
    }

    /// The server accepts connections: postmaster.pid says `ready` and the port answers.
    fn ready(&self) -> bool {
        let pid_file = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap_or_default();
        // Line 1 is the postmaster's pid: after a kill the old file (which says `ready`) stays
        // until the new server replaces it, so only the file of the server just started counts.
        let ours = self.pid().is_some_and(|pid| pid_file.lines().next().is_some_and(|l| l.trim() == pid.to_string()));
        // Line 8 of postmaster.pid is the server's status (PostgreSQL 10 and later).
        let ready = pid_file.lines().nth(7).is_some_and(|l| l.trim() == "ready");
        ours && ready && TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A connection string for `database` (`host=127.0.0.1 port=... user=postgres dbname=...`).
    pub fn config(&self, database: &str) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname={database}", self.port)
    }

    /// A URL for `database` (`postgres://postgres@127.0.0.1:<port>/<database>`), as the binaries'
    /// `--database-url` takes it.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates an empty database `name` and returns its URL.
    pub async fn create_database(&self, name: &str) -> Result<String, PgFixtureError> {
        let (client, conn) = tokio_postgres::connect(&self.config("postgres"), tokio_postgres::NoTls)
            .await
            .map_err(|e| io("connect", e))?;
        let task = tokio::spawn(conn);
        let quoted = name.replace('"', "\"\"");
        client.batch_execute(&format!("CREATE DATABASE \"{quoted}\"")).await.map_err(|e| io("create database", e))?;
        drop(client);
        let _ = task.await;
        Ok(self.url(name))
    }

    /// Stops the server the way an operator does (`SIGINT`: fast shutdown, open sessions are
    /// ended) and waits for it. [`PgServer::start_again`] starts it on the same port and data.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill with a pid we own and a valid signal.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let _ = child.wait();
        }
    }

    /// Kills the server (`SIGKILL`, no shutdown: what a crashed node does).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped (or killed) server again on the same port and data; after a kill the
    /// server runs crash recovery first, and the old backends may take a moment to go.
    pub fn start_again(&mut self) -> Result<(), PgFixtureError> {
        if self.child.is_some() {
            return Ok(());
        }
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The data directory (for tests that inspect it).
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Immediate shutdown: the data goes with the directory anyway.
            // SAFETY: kill with a pid we own and a valid signal.
            unsafe { libc::kill(child.id() as i32, libc::SIGQUIT) };
            let _ = child.wait();
        }
    }
}
