//! Helpers for the integration tests of a CLI (feature `testing`): run the built binary as a
//! user runs it and keep what it printed.

use std::process::Command;

/// What a run of a program gave.
#[derive(Debug)]
pub struct Run {
    /// The exit code (-1 when a signal ended it).
    pub code: i32,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
}

impl Run {
    /// Assert the exit code, showing everything when it differs.
    #[track_caller]
    pub fn expect(self, code: i32) -> Run {
        assert_eq!(self.code, code, "exit code\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }
}

/// Run a command to its end, off the async workers (what runs in-process, an operator or a
/// fake server, keeps running). Panics when the program cannot be started: a test's setup error.
pub async fn run_command(mut cmd: Command) -> Run {
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.expect("join").expect("run the program");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_the_code_and_both_outputs() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let r = run_command(cmd).await.expect(3);
        assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("out\n", "err\n"));
    }

    #[tokio::test]
    #[should_panic(expected = "exit code")]
    async fn a_wrong_code_fails_the_test() {
        run_command(Command::new("false")).await.expect(0);
    }
}
