//! Fault injection: rules keyed by container image that make the simulated kubelet fail the way
//! real clusters fail, so operators can be tested against failures users meet.
//!
//! A rule matches a container (or init container) whose image equals the rule's pattern, or
//! starts with it when the pattern ends in `*`. Set rules with `Options::faults` or
//! `DevCluster::set_faults` (library), or `devcluster serve --fault PATTERN=KIND` (CLI), where
//! KIND is one of:
//!
//! | KIND | what the pod shows |
//! |---|---|
//! | `image-pull` | Pending; container waiting `ImagePullBackOff` (`ErrImagePull` events) |
//! | `crash-loop[:CODE]` | Running, not ready; waiting `CrashLoopBackOff`, `lastState.terminated.exitCode` CODE (default 1), `restartCount` growing with the real back-off (10s, 20s, 40s, ... 5m) |
//! | `unready` | Running, containers started but never ready |
//! | `deadline` | like `unready`, and a Deployment running the image reports `Progressing=False`, reason `ProgressDeadlineExceeded` at once instead of after `progressDeadlineSeconds` |
//! | `exit[:CODE]` | for a Job's pod: the container exits with CODE (default 1) after the Job pod duration: `restartPolicy: Never` makes the pod `Failed` (container `terminated`, reason `Error`), `OnFailure` restarts it with the crash-loop back-off; other pods run as without a rule |

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    ImagePull,
    CrashLoop {
        exit_code: i32,
    },
    Unready,
    Deadline,
    /// A run-to-completion container (a Job's pod) exits with this code.
    Exit {
        exit_code: i32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    /// An image (`registry.example.com/app:v2`) or a prefix ending in `*`.
    pub image: String,
    pub fault: Fault,
}

impl FaultRule {
    pub fn new(image: impl Into<String>, fault: Fault) -> Self {
        FaultRule { image: image.into(), fault }
    }

    pub fn matches(&self, image: &str) -> bool {
        match self.image.strip_suffix('*') {
            Some(prefix) => image.starts_with(prefix),
            None => image == self.image,
        }
    }
}

/// The first rule matching an image.
pub fn find(rules: &[FaultRule], image: &str) -> Option<Fault> {
    rules.iter().find(|r| r.matches(image)).map(|r| r.fault)
}

impl fmt::Display for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.fault {
            Fault::ImagePull => "image-pull".to_string(),
            Fault::CrashLoop { exit_code } => format!("crash-loop:{exit_code}"),
            Fault::Unready => "unready".to_string(),
            Fault::Deadline => "deadline".to_string(),
            Fault::Exit { exit_code } => format!("exit:{exit_code}"),
        };
        write!(f, "{}={kind}", self.image)
    }
}

impl FromStr for FaultRule {
    type Err = String;

    /// `IMAGE=KIND`, e.g. `example.com/app:broken=crash-loop:137`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (image, kind) = s
            .rsplit_once('=')
            .ok_or_else(|| format!("fault {s:?}: expected IMAGE=KIND, e.g. example.com/app:v2=image-pull"))?;
        if image.is_empty() {
            return Err(format!("fault {s:?}: the image pattern is empty"));
        }
        let fault = match kind.split_once(':') {
            None if kind == "image-pull" => Fault::ImagePull,
            None if kind == "crash-loop" => Fault::CrashLoop { exit_code: 1 },
            None if kind == "unready" => Fault::Unready,
            None if kind == "deadline" => Fault::Deadline,
            None if kind == "exit" => Fault::Exit { exit_code: 1 },
            Some(("exit", code)) => Fault::Exit {
                exit_code: code.parse().map_err(|_| format!("fault {s:?}: exit code {code:?} is not an integer"))?,
            },
            Some(("crash-loop", code)) => Fault::CrashLoop {
                exit_code: code.parse().map_err(|_| format!("fault {s:?}: exit code {code:?} is not an integer"))?,
            },
            _ => {
                return Err(format!(
                    "fault {s:?}: unknown kind {kind:?}; use image-pull, crash-loop[:CODE], unready, deadline or exit[:CODE]"
                ));
            }
        };
        Ok(FaultRule { image: image.to_string(), fault })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_matches() {
        let r: FaultRule = "example.com/app:*=crash-loop:137".parse().unwrap();
        assert_eq!(r.fault, Fault::CrashLoop { exit_code: 137 });
        assert!(r.matches("example.com/app:v1"));
        assert!(!r.matches("example.com/other:v1"));
        assert_eq!(r.to_string(), "example.com/app:*=crash-loop:137");
        assert!("nginx".parse::<FaultRule>().unwrap_err().contains("IMAGE=KIND"));
        assert!("nginx=boom".parse::<FaultRule>().unwrap_err().contains("unknown kind"));
        let exact: FaultRule = "nginx:1=image-pull".parse().unwrap();
        assert!(exact.matches("nginx:1") && !exact.matches("nginx:12"));
        let exit: FaultRule = "busybox*=exit:3".parse().unwrap();
        assert_eq!(exit.fault, Fault::Exit { exit_code: 3 });
        assert_eq!(exit.to_string(), "busybox*=exit:3");
        assert_eq!("b=exit".parse::<FaultRule>().unwrap().fault, Fault::Exit { exit_code: 1 });
    }
}
