//! Starting and ending processes without orphans.
//!
//! Every process starts in its own process group (`setpgid(0, 0)`), so signals reach what it
//! started too, and with `prctl(PR_SET_PDEATHSIG, SIGKILL)`: the kernel kills it when the thread
//! that forked it ends — which is why all forks happen on one thread that lives as long as the
//! devcluster process, so a `kill -9` of devcluster ends every container. A cluster that stops
//! (Drop, Ctrl-C) signals every group itself (`terminate_all`).

use std::io::{self, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

type Job = (Command, tokio::sync::oneshot::Sender<io::Result<Child>>);

/// The thread every process is forked from.
fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new().name("devcluster-spawner".into()).spawn(move || {
            while let Ok((mut cmd, reply)) = rx.recv() {
                let _ = reply.send(cmd.spawn());
            }
        });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not start the process spawner thread");
        }
        Mutex::new(tx)
    })
}

/// How a process ended: its exit code, or 128 + the signal that killed it (as container
/// runtimes report it).
pub fn exit_code(status: &std::process::ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(9))
}

/// A started process: its pid (= its process group) and a receiver of its exit code.
pub struct Spawned {
    pub pid: i32,
    pub exit: tokio::sync::oneshot::Receiver<i32>,
    pub stdin: Option<std::process::ChildStdin>,
    pub stdout: Option<std::process::ChildStdout>,
    pub stderr: Option<std::process::ChildStderr>,
}

/// Start `argv` with exactly `env` in `cwd`, stdout and stderr piped, stdin piped or closed.
pub async fn spawn(
    argv: &[String],
    env: &[(String, String)],
    cwd: &std::path::Path,
    stdin: bool,
) -> io::Result<Spawned> {
    let Some((prog, args)) = argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
    };
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(cwd)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls (setpgid, prctl, getppid, raise) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died between fork and prctl: do not outlive it.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    spawner()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, tx))
        .map_err(|_| io::Error::other("the process spawner thread is gone"))?;
    let mut child = rx.await.map_err(|_| io::Error::other("the process spawner thread is gone"))??;
    let pid = child.id() as i32;
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (etx, erx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name(format!("devcluster-wait-{pid}")).spawn(move || {
        let code = match child.wait() {
            Ok(s) => exit_code(&s),
            Err(_) => 128 + libc::SIGKILL,
        };
        let _ = etx.send(code);
    })?;
    Ok(Spawned { pid, exit: erx, stdin, stdout, stderr })
}

/// Signal a process group (ignoring one that is already gone).
pub fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Whether any process of a group is still there.
pub fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    pgid > 1 && unsafe { libc::kill(-pgid, 0) } == 0
}

/// SIGTERM every group, wait up to `grace` for them to go, SIGKILL the rest.
pub fn terminate_all(groups: &[i32], grace: Duration) {
    if groups.is_empty() {
        return;
    }
    if !grace.is_zero() {
        for g in groups {
            signal_group(*g, libc::SIGTERM);
        }
        let until = std::time::Instant::now() + grace;
        while std::time::Instant::now() < until && groups.iter().any(|g| group_alive(*g)) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for g in groups {
        signal_group(*g, libc::SIGKILL);
    }
}

/// Copy a pipe into a log file in the CRI format, line by line, until it closes.
pub fn capture(mut from: impl Read + Send + 'static, stream: &'static str, log: Arc<Mutex<super::logs::LogFile>>) {
    let _ = std::thread::Builder::new().name("devcluster-log".into()).spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        let mut pending: Vec<u8> = vec![];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=i).collect();
                log.lock().unwrap_or_else(|e| e.into_inner()).append(stream, &line[..line.len() - 1], false);
            }
            // A line longer than 16 KiB is written in parts (`P`), as CRI runtimes do.
            while pending.len() >= 16 * 1024 {
                let part: Vec<u8> = pending.drain(..16 * 1024).collect();
                log.lock().unwrap_or_else(|e| e.into_inner()).append(stream, &part, true);
            }
        }
        if !pending.is_empty() {
            log.lock().unwrap_or_else(|e| e.into_inner()).append(stream, &pending, false);
        }
    });
}
