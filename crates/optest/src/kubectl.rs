//! The real `kubectl` (installed at /usr/bin/kubectl on every machine) against one kubeconfig:
//! the client nobody here wrote.

use crate::WAIT;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use tokio::io::AsyncWriteExt;

/// `kubectl` against one cluster, with a home, a discovery cache and a working directory of its
/// own (removed with it), so that tests in parallel share nothing.
pub struct Kubectl {
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

/// What one run of kubectl did.
pub struct Ran {
    /// `kubectl <args>`, for messages.
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Fails the test unless kubectl succeeded.
    pub fn ok(self) -> Ran {
        assert!(self.success(), "{self}");
        self
    }
}

impl fmt::Display for Ran {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}):\n{}{}", self.command, self.status, self.stdout, self.stderr)
    }
}

impl Kubectl {
    /// kubectl with `KUBECONFIG=kubeconfig` (e.g. `DevCluster::kubeconfig_path`).
    pub fn new(kubeconfig: impl Into<PathBuf>) -> Kubectl {
        Kubectl { kubeconfig: kubeconfig.into(), dir: tempfile::tempdir().expect("a directory for kubectl") }
    }

    /// Its working directory (also its HOME): where [`Kubectl::write`] puts files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The command, for what [`Kubectl::run`] does not cover.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .arg(format!("--cache-dir={}", self.dir.path().join("cache").display()))
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs kubectl (stdin empty); the test decides what the outcome means.
    pub async fn run(&self, args: &[&str]) -> Ran {
        self.run_with_input(args, None).await
    }

    /// Runs kubectl with `input` on its stdin (`apply -f -`).
    pub async fn run_with_input(&self, args: &[&str], input: Option<&str>) -> Ran {
        let mut cmd = self.command(args);
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let command = format!("kubectl {}", args.join(" "));
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{command}: kubectl does not run (it is installed at /usr/bin/kubectl): {e}"));
        if let Some(text) = input {
            let mut stdin = child.stdin.take().expect("kubectl's stdin");
            stdin.write_all(text.as_bytes()).await.unwrap_or_else(|e| panic!("{command}: write its stdin: {e}"));
        }
        let out = child.wait_with_output().await.unwrap_or_else(|e| panic!("{command}: {e}"));
        Ran {
            command,
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs kubectl; fails the test unless it succeeds.
    pub async fn ok(&self, args: &[&str]) -> Ran {
        self.run(args).await.ok()
    }

    /// `kubectl apply -f -` of a YAML text; fails the test unless it succeeds.
    pub async fn apply_text(&self, yaml: &str) -> Ran {
        self.run_with_input(&["apply", "-f", "-"], Some(yaml)).await.ok()
    }

    /// Writes `content` to the file `name` in its directory; returns the file's path.
    pub fn write(&self, name: &str, content: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        p.display().to_string()
    }

    /// `kubectl wait --for=condition=Available` on these objects (`deployment/<name>`) in
    /// `namespace`; on timeout, fails with what `kubectl describe` says of the Deployments,
    /// ReplicaSets and pods there (a pod refused by Pod Security shows as FailedCreate).
    pub async fn wait_available(&self, namespace: &str, objects: &[&str]) {
        let t = format!("--timeout={}s", WAIT.as_secs());
        let mut args = vec!["wait", "--for=condition=Available", "-n", namespace, &t];
        args.extend_from_slice(objects);
        let out = self.run(&args).await;
        if !out.success() {
            let describe = self.run(&["describe", "deployment,replicaset,pods", "-n", namespace]).await;
            panic!("{} not Available: {out}\n{}", objects.join(", "), describe.stdout);
        }
    }

    /// `kubectl wait --for=condition=Established` on these CRDs (`crd/<name>`).
    pub async fn wait_established(&self, crds: &[&str]) {
        let t = format!("--timeout={}s", WAIT.as_secs());
        let mut args = vec!["wait", "--for=condition=Established", &t];
        args.extend_from_slice(crds);
        self.ok(&args).await;
    }
}
