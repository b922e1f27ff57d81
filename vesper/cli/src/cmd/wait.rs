//! `wait NAME --for ready|deleted [--timeout]`, and the waiting behind `create/apply/delete
//! --wait`. The preview is watched (no polling). On a terminal each change of phase or of the
//! Ready condition is shown on stderr as it happens; otherwise nothing is printed until the end.
//! Ready means phase Ready for the current spec (`status.observedGeneration` caught up), so a
//! wait right after `apply` does not return on the previous image's status. Phase Failed ends
//! the wait (exit 1) once it has held for [`FAILED_GRACE`]; Expired or a deletion end it at once.

use crate::cli::{WaitArgs, WaitFor};
use crate::client::{Previews, Target};
use crate::error::{Error, Result};
use crate::preview::{self, resource_name};
use clikit::timefmt;
use futures::StreamExt;
use kube::runtime::watcher;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use vesper_api::{Phase, PreviewEnvironment};

pub async fn run(t: &Target, args: WaitArgs) -> Result<()> {
    match args.for_ {
        WaitFor::Ready => {
            let pe = ready(t, &args.name, args.timeout).await?;
            outln!("{}", ready_line(&pe));
        }
        WaitFor::Deleted => {
            deleted(t, &args.name, args.timeout).await?;
            outln!("{} deleted", resource_name(&args.name));
        }
    }
    Ok(())
}

/// `previewenvironment.vesper.eventide.dev/NAME ready at URL`.
pub fn ready_line(pe: &PreviewEnvironment) -> String {
    let name = resource_name(&kube::ResourceExt::name_any(pe));
    match pe.status.as_ref().and_then(|s| s.url.as_deref()) {
        Some(url) => format!("{name} ready at {url}"),
        None => format!("{name} ready (no URL: the operator runs without a preview domain)"),
    }
}

/// Wait until the preview is Ready for its current spec; fail if it fails, expires or goes.
pub async fn ready(t: &Target, name: &str, timeout: Duration) -> Result<PreviewEnvironment> {
    match watch(t, name, WaitFor::Ready, timeout).await? {
        Some(pe) => Ok(pe),
        None => Err(preview::not_found(t, name)),
    }
}

/// Wait until the preview is gone.
pub async fn deleted(t: &Target, name: &str, timeout: Duration) -> Result<()> {
    watch(t, name, WaitFor::Deleted, timeout).await.map(|_| ())
}

/// Progress lines on a terminal: one per change, with the time since the wait started.
struct Progress {
    tty: bool,
    started: Instant,
    name: String,
    last: Option<String>,
}

impl Progress {
    fn new(name: &str) -> Progress {
        Progress { tty: std::io::stderr().is_terminal(), started: Instant::now(), name: name.to_string(), last: None }
    }

    fn show(&mut self, state: String) {
        if self.last.as_ref() != Some(&state) {
            if self.tty {
                eprintln!("[{:>5}] {}: {state}", timefmt::age(self.started.elapsed()), self.name);
            }
            self.last = Some(state);
        }
    }

    /// A passing note that is not the preview's state.
    fn note(&self, text: &str) {
        if self.tty {
            eprintln!("[{:>5}] {}: {text}", timefmt::age(self.started.elapsed()), self.name);
        }
    }
}

/// What a preview's state means for a wait for readiness.
enum Outcome {
    Ready,
    Waiting,
    /// Failed: final unless it changes within [`FAILED_GRACE`].
    Failing(Error),
    /// Expired or being deleted.
    Final(Error),
}

fn ready_outcome(pe: &PreviewEnvironment) -> Outcome {
    let name = kube::ResourceExt::name_any(pe);
    if pe.metadata.deletion_timestamp.is_some() {
        return Outcome::Final(Error::Failed(format!("preview {name:?} is being deleted: {}", preview::summary(pe))));
    }
    if !preview::observed(pe) {
        return Outcome::Waiting;
    }
    let why = || {
        preview::condition(pe, "Ready")
            .map(|c| format!("{}: {}", c.reason, c.message))
            .unwrap_or_else(|| "no Ready condition".into())
    };
    match preview::phase(pe) {
        Some(Phase::Ready) if preview::condition(pe, "Ready").is_some_and(|c| c.status == "True") => Outcome::Ready,
        Some(Phase::Failed) => Outcome::Failing(Error::Failed(format!(
            "preview {name:?} failed: {}\n(`vesperctl describe {name}` shows its pods and events)",
            why()
        ))),
        Some(Phase::Expired) => Outcome::Final(Error::Failed(format!("preview {name:?} expired: {}", why()))),
        _ => Outcome::Waiting,
    }
}

/// A watch error that will not go away by retrying.
fn fatal(t: &Target, name: &str, e: watcher::Error) -> Option<Error> {
    let inner = match &e {
        watcher::Error::InitialListFailed(k) | watcher::Error::WatchStartFailed(k) | watcher::Error::WatchFailed(k) => {
            k
        }
        _ => return None,
    };
    match clikit::apierror::code(inner) {
        Some(404) => Some(preview::crd_missing(t)),
        Some(401 | 403) => Some(preview::request_error(
            t,
            name,
            "watching",
            kube::Error::Api(Box::new(clikit::apierror::status(inner)?.clone())),
        )),
        _ => None,
    }
}

/// How long a Failed phase must hold before a wait for readiness gives up on it: a failure can
/// pass within moments (pods refused by the quota while old ones terminate during a rollout, a
/// status computed before the Deployment saw the new spec).
pub const FAILED_GRACE: Duration = Duration::from_secs(5);

async fn watch(t: &Target, name: &str, what: WaitFor, timeout: Duration) -> Result<Option<PreviewEnvironment>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut stream = watcher::watch_object(t.previews(), name).boxed();
    let mut progress = Progress::new(name);
    let mut seen = false;
    let mut last_error: Option<String> = None;
    // A failure seen, and when it is final unless the preview changes.
    let mut failing: Option<(tokio::time::Instant, Error)> = None;
    loop {
        let wake = failing.as_ref().map_or(deadline, |(at, _)| (*at).min(deadline));
        let item = match tokio::time::timeout_at(wake, stream.next()).await {
            Err(_) => match failing.take() {
                // Failed when time ran out (or for the whole grace period): say why, not "timeout".
                Some((_, e)) => return Err(e),
                _ => return Err(timed_out(name, what, timeout, progress.last.as_deref(), last_error.as_deref())),
            },
            Ok(None) => return Err(Error::Failed(format!("the watch of preview {name:?} ended unexpectedly"))),
            Ok(Some(item)) => item,
        };
        let obj = match item {
            Ok(obj) => obj,
            Err(e) => {
                let text = e.to_string();
                if let Some(err) = fatal(t, name, e) {
                    return Err(err);
                }
                progress.note(&format!("watch interrupted ({text}), retrying"));
                last_error = Some(text);
                // The watcher starts over on its next poll: pace the retries.
                if tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_secs(1))).await.is_err() {
                    return Err(timed_out(name, what, timeout, progress.last.as_deref(), last_error.as_deref()));
                }
                continue;
            }
        };
        last_error = None;
        match (what, obj) {
            (WaitFor::Deleted, None) => return Ok(None),
            (WaitFor::Deleted, Some(pe)) => progress.show(preview::summary(&pe)),
            (WaitFor::Ready, None) if seen => {
                return Err(Error::Failed(format!("preview {name:?} was deleted while waiting for it to be ready")));
            }
            (WaitFor::Ready, None) => return Err(preview::not_found(t, name)),
            (WaitFor::Ready, Some(pe)) => {
                seen = true;
                progress.show(preview::summary(&pe));
                match ready_outcome(&pe) {
                    Outcome::Ready => return Ok(Some(pe)),
                    Outcome::Final(e) => return Err(e),
                    Outcome::Failing(e) => {
                        let at =
                            failing.take().map_or_else(|| tokio::time::Instant::now() + FAILED_GRACE, |(at, _)| at);
                        failing = Some((at, e));
                    }
                    Outcome::Waiting => failing = None,
                }
            }
        }
    }
}

fn timed_out(name: &str, what: WaitFor, timeout: Duration, last: Option<&str>, error: Option<&str>) -> Error {
    let goal = match what {
        WaitFor::Ready => "ready",
        WaitFor::Deleted => "deleted",
    };
    let mut msg = format!("timed out after {} waiting for preview {name:?} to be {goal}", timefmt::exact(timeout));
    if let Some(state) = last {
        msg.push_str(&format!("; last seen: {state}"));
    }
    if let Some(e) = error {
        msg.push_str(&format!("; last watch error: {e}"));
    }
    if what == WaitFor::Ready {
        msg.push_str(&format!("\n(`vesperctl describe {name}` shows its pods and events)"));
    }
    Error::Timeout(msg)
}
