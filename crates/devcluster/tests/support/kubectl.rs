//! Running the real `kubectl` against a devcluster: its own kubeconfig, cache and working
//! directory per test.

use devcluster::DevCluster;
use std::path::PathBuf;
use std::process::{Command, Output};

pub struct Kubectl {
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
    dir: tempfile::TempDir,
}

impl Kubectl {
    pub fn new(dc: &DevCluster) -> Self {
        Kubectl {
            kubeconfig: dc.kubeconfig_path(),
            cache: tempfile::tempdir().expect("a temporary cache directory"),
            dir: tempfile::tempdir().expect("a temporary working directory"),
        }
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(args)
            .current_dir(self.dir.path());
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("kubectl runs")
    }

    /// Run and require success; return stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run and require success; return (stdout, stderr).
    pub fn ok2(&self, args: &[&str]) -> (String, String) {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// Run and require failure (kubectl exits 1 on errors); return stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "kubectl {args:?} should fail but printed {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Run and require exit status 1 (what `kubectl auth can-i` returns for "no"); return stdout.
    pub fn exit_1(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "kubectl {args:?}:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn write(&self, name: &str, content: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).expect("writing a manifest");
        p.display().to_string()
    }
}
