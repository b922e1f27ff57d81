//! `stop NAME` and `start NAME` [--wait [--timeout D]]: set `spec.powerState` (JSON merge patch,
//! field manager `varroa-cli`), then optionally wait until the operator reports the controller
//! stopped (phase Stopped) or started (phase Running or Connected) for this very change
//! (`status.observedGeneration` at least the generation the patch produced).
//!
//! The controller is watched (no polling). On a terminal each change of state is shown on
//! stderr as it happens; otherwise nothing is printed until the end. A wait that runs out exits
//! with code 3 and says what was seen last.

use crate::cli::PowerArgs;
use crate::client::{Controllers, Target};
use crate::controller::{self, MANAGER, request_error};
use crate::error::{Error, Result};
use clikit::timefmt;
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use varroa_api::{Controller, ControllerPhase, PowerState};

/// Words for one direction.
struct Words {
    verb: &'static str,
    doing: &'static str,
    done: &'static str,
}

fn words(want: PowerState) -> Words {
    match want {
        PowerState::Stopped => Words { verb: "stop", doing: "stopping", done: "stopped" },
        PowerState::Running => Words { verb: "start", doing: "starting", done: "started" },
    }
}

/// Run `stop` (`want` Stopped) or `start` (`want` Running).
pub async fn run(t: &Target, want: PowerState, args: PowerArgs) -> Result<()> {
    let w = words(want);
    let patch = json!({"spec": {"powerState": want}});
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    let c = t
        .controllers()
        .patch(&args.name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|e| request_error(t, &args.name, w.doing, e))?;
    let id = controller::id(&c);
    outln!("controller {id} {}", w.doing);
    if !args.wait {
        return Ok(());
    }
    let generation = c.metadata.generation.unwrap_or(0);
    let c = wait(t, &args.name, &id, want, generation, args.timeout).await?;
    let phase = c.status.and_then(|s| s.phase).map(|p| p.to_string()).unwrap_or_default();
    outln!("controller {id} {} ({phase})", w.done);
    Ok(())
}

/// Whether the phase is the one `want` leads to.
pub fn reached(want: PowerState, phase: Option<ControllerPhase>) -> bool {
    match want {
        PowerState::Stopped => phase == Some(ControllerPhase::Stopped),
        PowerState::Running => matches!(phase, Some(ControllerPhase::Running | ControllerPhase::Connected)),
    }
}

/// "Running (status describes generation 2, waiting for 3)", "Running, attention Boot failed
/// (JenkinsBootFailed: ...)".
pub fn state(c: &Controller, generation: i64) -> String {
    let status = controller::status_of(c);
    let mut s = status.phase.map(|p| p.to_string()).unwrap_or_else(|| "no status yet".into());
    if !controller::observed(c, generation) {
        let seen =
            status.observed_generation.map(|g| format!("generation {g}")).unwrap_or_else(|| "no generation".into());
        s.push_str(&format!(" (status describes {seen}, waiting for the operator to see {generation})"));
    }
    if let Some(a) = varroa_api::attention(&status) {
        s.push_str(&format!(", attention {a}"));
        if let Some(cause) = controller::attention_cause(&status, a) {
            s.push_str(&format!(" ({cause})"));
        }
    }
    s
}

/// Progress lines on a terminal: one per change, with the time since the wait started.
struct Progress {
    tty: bool,
    started: Instant,
    id: String,
    last: Option<String>,
}

impl Progress {
    fn show(&mut self, state: String) {
        if self.last.as_ref() != Some(&state) {
            self.note(&state);
            self.last = Some(state);
        }
    }

    fn note(&self, text: &str) {
        if self.tty {
            eprintln!("[{:>5}] {}: {text}", timefmt::age(self.started.elapsed()), self.id);
        }
    }
}

/// A watch error that retrying will not cure.
fn fatal(t: &Target, name: &str, e: &watcher::Error) -> Option<Error> {
    let inner = match e {
        watcher::Error::InitialListFailed(k) | watcher::Error::WatchStartFailed(k) | watcher::Error::WatchFailed(k) => {
            k
        }
        _ => return None,
    };
    let s = clikit::apierror::status(inner)?;
    match s.code {
        404 => Some(controller::crd_missing(t)),
        401 | 403 => Some(request_error(t, name, "watching", kube::Error::Api(Box::new(s.clone())))),
        _ => None,
    }
}

/// Wait until the controller reached the phase `want` leads to, for `generation` or later.
async fn wait(
    t: &Target,
    name: &str,
    id: &str,
    want: PowerState,
    generation: i64,
    timeout: Duration,
) -> Result<Controller> {
    let w = words(want);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut stream = watcher::watch_object(t.controllers(), name).default_backoff().boxed();
    let mut progress =
        Progress { tty: std::io::stderr().is_terminal(), started: Instant::now(), id: id.to_string(), last: None };
    let mut last_error: Option<String> = None;
    loop {
        let item = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => return Err(Error::Failed(format!("the watch of controller {id} ended unexpectedly"))),
            Err(_) => {
                let mut msg =
                    format!("timed out after {} waiting for controller {id} to {}", timefmt::exact(timeout), w.verb);
                if let Some(last) = &progress.last {
                    msg.push_str(&format!("; last seen: {last}"));
                }
                if let Some(e) = &last_error {
                    msg.push_str(&format!("; last watch error: {e}"));
                }
                msg.push_str(&format!(
                    "\n(is the operator running? `varroa describe controller {name} -n {}` shows its conditions and events)",
                    t.namespace
                ));
                return Err(Error::Timeout(msg));
            }
        };
        let c = match item {
            Ok(Some(c)) => c,
            Ok(None) => {
                return Err(Error::Failed(format!("controller {id} was deleted while waiting for it to {}", w.verb)));
            }
            Err(e) => {
                if let Some(err) = fatal(t, name, &e) {
                    return Err(err);
                }
                let text = e.to_string();
                progress.note(&format!("watch interrupted ({text}), retrying"));
                last_error = Some(text);
                continue;
            }
        };
        last_error = None;
        if c.spec.power_state != want {
            return Err(Error::Failed(format!(
                "spec.powerState of controller {id} was changed to {:?} by someone else while waiting for it to {}",
                c.spec.power_state, w.verb
            )));
        }
        progress.show(state(&c, generation));
        let phase = c.status.as_ref().and_then(|s| s.phase);
        if controller::observed(&c, generation) && reached(want, phase) {
            return Ok(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_counts_as_stopped_and_started() {
        assert!(reached(PowerState::Stopped, Some(ControllerPhase::Stopped)));
        assert!(!reached(PowerState::Stopped, Some(ControllerPhase::Hibernated)));
        assert!(reached(PowerState::Running, Some(ControllerPhase::Connected)));
        assert!(reached(PowerState::Running, Some(ControllerPhase::Running)));
        assert!(!reached(PowerState::Running, Some(ControllerPhase::Provisioning)));
        assert!(!reached(PowerState::Running, None));
    }

    #[test]
    fn the_state_says_what_the_operator_has_not_seen_yet() {
        let mut c = Controller::new("x", Default::default());
        c.status = Some(serde_json::from_value(json!({"phase": "Running", "observedGeneration": 1})).unwrap());
        assert_eq!(state(&c, 2), "Running (status describes generation 1, waiting for the operator to see 2)");
        assert_eq!(state(&c, 1), "Running");
    }
}
