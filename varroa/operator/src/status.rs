//! The status of a Controller, computed from what the cluster and the mite report: the phase
//! (the seed's table), the conditions behind the attention signal, and the Events of every
//! change.

use crate::mite::MiteState;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use opkit::conditions::{ConditionStatus, DesiredCondition, find_condition, set_condition};
use varroa_api::lifecycle::{
    CONTAINER_JENKINS, CONTAINER_PLUGINS_INIT, REASON_HOST_IN_USE, REASON_STREAM_LOST, condition,
};
use varroa_api::{Controller, ControllerPhase, ControllerStatus, PowerState, ResolvedSummary};
use varroa_config::Rendered;

/// What a pass learned.
pub struct Inputs<'a> {
    pub controller: &'a Controller,
    /// The rendered configuration, or why it could not be rendered (Blocked).
    pub rendered: Result<&'a Rendered, &'a crate::error::Blocker>,
    /// Why provisioning stopped (Failed): the API server refused an object the operator wrote
    /// (`ProvisioningRefused`), or an object of its name is not the Controller's
    /// (`OwnershipConflict`).
    pub failed: Option<Failure>,
    /// The Ingress host is served by another Controller's Ingress (no Ingress was written).
    pub ingress_conflict: Option<String>,
    pub stateful_set: Option<&'a StatefulSet>,
    pub pods: &'a [Pod],
    pub mite: &'a MiteState,
    pub now: jiff::Timestamp,
}

/// Why a pass ended the controller in Failed: a CamelCase reason and a message naming the object
/// and the fix.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub reason: String,
    pub message: String,
}

/// A change worth an Event (opkit's: both operators' status functions return them).
pub use opkit::events::Note;

fn cond(type_: &str, status: bool, reason: &str, message: String) -> (String, &'static str, String, String) {
    (type_.to_string(), if status { "True" } else { "False" }, reason.to_string(), message)
}

/// The phase from the StatefulSet and pods alone (also used while Blocked, to keep showing where
/// the controller is).
pub fn phase_from_workload(c: &Controller, sts: Option<&StatefulSet>, mite: &MiteState) -> ControllerPhase {
    let Some(sts) = sts else { return ControllerPhase::Provisioning };
    let desired = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = sts.status.clone().unwrap_or_default();
    let parked = sts.annotations().contains_key(varroa_api::lifecycle::ANNOTATION_HIBERNATED);
    if c.spec.power_state == PowerState::Stopped || desired == 0 {
        return match (st.replicas == 0, parked && c.spec.power_state == PowerState::Running) {
            (true, true) => ControllerPhase::Hibernated,
            (true, false) => ControllerPhase::Stopped,
            (false, _) => ControllerPhase::Provisioning,
        };
    }
    let generation = sts.metadata.generation.unwrap_or(0);
    let rolled = st.observed_generation.unwrap_or(0) >= generation
        && st.updated_replicas.unwrap_or(0) >= desired
        && st.current_revision.is_some()
        && st.current_revision == st.update_revision
        && st.replicas == desired;
    let ready = st.ready_replicas.unwrap_or(0) >= desired;
    if !(rolled && ready) {
        return ControllerPhase::Provisioning;
    }
    if mite.connected { ControllerPhase::Connected } else { ControllerPhase::Running }
}

fn waiting(cs: &ContainerStatus) -> Option<(&str, &str)> {
    let w = cs.state.as_ref()?.waiting.as_ref()?;
    Some((w.reason.as_deref().unwrap_or(""), w.message.as_deref().unwrap_or("")))
}

fn last_exit(cs: &ContainerStatus) -> Option<i32> {
    cs.last_state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

/// JenkinsBootFailed: a crash-looping jenkins container or an image that cannot be pulled.
fn boot_failure(pods: &[Pod]) -> Option<(String, String)> {
    for p in pods {
        for cs in p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).into_iter().flatten() {
            if cs.name != CONTAINER_JENKINS {
                continue;
            }
            match waiting(cs) {
                Some(("CrashLoopBackOff", _)) => {
                    return Some((
                        "CrashLoopBackOff".into(),
                        format!(
                            "container jenkins of pod {} is crash-looping: exit code {}, {} restarts; read its logs: kubectl logs {} -c jenkins --previous -n {}",
                            p.name_any(),
                            last_exit(cs).map(|c| c.to_string()).unwrap_or_else(|| "unknown".into()),
                            cs.restart_count,
                            p.name_any(),
                            p.namespace().unwrap_or_default()
                        ),
                    ));
                }
                Some((r @ ("ImagePullBackOff" | "ErrImagePull" | "InvalidImageName"), msg)) => {
                    return Some((
                        r.to_string(),
                        format!(
                            "the Jenkins image {} of pod {} cannot be pulled ({r}{}): check the JenkinsVersionProfile's image and the registry's credentials",
                            cs.image,
                            p.name_any(),
                            if msg.is_empty() { String::new() } else { format!(": {msg}") }
                        ),
                    ));
                }
                _ => {}
            }
        }
    }
    None
}

/// PluginRollFailed: the plugins-init step failed.
fn plugin_roll_failure(pods: &[Pod]) -> Option<String> {
    for p in pods {
        for cs in p.status.as_ref().and_then(|s| s.init_container_statuses.as_ref()).into_iter().flatten() {
            if cs.name != CONTAINER_PLUGINS_INIT {
                continue;
            }
            let failed_now = cs.state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code != 0);
            let looping = matches!(waiting(cs), Some(("CrashLoopBackOff" | "ImagePullBackOff" | "ErrImagePull", _)));
            if failed_now || looping {
                let code = cs
                    .state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .map(|t| t.exit_code)
                    .or_else(|| last_exit(cs));
                return Some(format!(
                    "plugins-init of pod {} failed{}{} ({} restarts): the locked plugins could not be installed; read its logs: kubectl logs {} -c plugins-init -n {}",
                    p.name_any(),
                    code.map(|c| format!(" with exit code {c}")).unwrap_or_default(),
                    waiting(cs).map(|(r, _)| format!(", {r}")).unwrap_or_default(),
                    cs.restart_count,
                    p.name_any(),
                    p.namespace().unwrap_or_default()
                ));
            }
        }
    }
    None
}

/// The status a pass leaves, with the Events its changes deserve. `stamp` is the
/// lastReconciledAt to write (the caller decides whether the pass earns a new one).
pub fn compute(i: &Inputs, stamp: Option<Time>) -> (ControllerStatus, Vec<Note>) {
    let c = i.controller;
    let old = c.status.clone().unwrap_or_default();
    let mut wanted: Vec<(String, &'static str, String, String)> = Vec::new();

    let phase = if let Some(f) = &i.failed {
        wanted.push(cond(condition::FAILED, true, &f.reason, f.message.clone()));
        ControllerPhase::Failed
    } else {
        wanted.push(cond(condition::FAILED, false, "NoError", String::new()));
        phase_from_workload(c, i.stateful_set, i.mite)
    };
    match &i.rendered {
        Err(e) => wanted.push(cond(condition::RECONCILE_BLOCKED, true, "ConfigurationInvalid", e.to_string())),
        Ok(_) => wanted.push(cond(condition::RECONCILE_BLOCKED, false, "Resolved", String::new())),
    }
    match boot_failure(i.pods) {
        Some((reason, msg)) => wanted.push(cond(condition::JENKINS_BOOT_FAILED, true, &reason, msg)),
        None => wanted.push(cond(condition::JENKINS_BOOT_FAILED, false, "NoFailure", String::new())),
    }
    match plugin_roll_failure(i.pods) {
        Some(msg) => wanted.push(cond(condition::PLUGIN_ROLL_FAILED, true, "PluginsInitFailed", msg)),
        None => wanted.push(cond(condition::PLUGIN_ROLL_FAILED, false, "NoFailure", String::new())),
    }
    let mite = if i.mite.connected {
        cond(condition::MITE_CONNECTED, true, "StreamActive", "the mite's stream to the gateway is up".into())
    } else if i.mite.lost {
        cond(
            condition::MITE_CONNECTED,
            false,
            REASON_STREAM_LOST,
            "the mite's stream to the gateway was lost; the pod stays in place".into(),
        )
    } else {
        cond(condition::MITE_CONNECTED, false, "NotConnected", "no mite stream has been established yet".into())
    };
    wanted.push(mite);
    match &i.ingress_conflict {
        Some(msg) => wanted.push(cond(condition::INGRESS_HOST_CONFLICT, true, REASON_HOST_IN_USE, msg.clone())),
        None => wanted.push(cond(condition::INGRESS_HOST_CONFLICT, false, "NoConflict", String::new())),
    }
    let ready = matches!(phase, ControllerPhase::Running | ControllerPhase::Connected);
    wanted.push(cond(
        condition::READY,
        ready,
        &phase.to_string(),
        match phase {
            ControllerPhase::Connected => "Jenkins runs and its mite is connected".into(),
            ControllerPhase::Running => "Jenkins runs; the mite stream is not up".into(),
            ControllerPhase::Stopped => "stopped by spec.powerState".into(),
            ControllerPhase::Hibernated => "parked by its inactivity policy until woken".into(),
            ControllerPhase::Provisioning => "creating or rolling the Jenkins pod".into(),
            ControllerPhase::Failed => i.failed.as_ref().map(|f| f.message.clone()).unwrap_or_default(),
            _ => String::new(),
        },
    ));

    let mut conditions = old.conditions.clone();
    let mut notes = Vec::new();
    for (type_, status, reason, message) in wanted {
        let prev = find_condition(&conditions, &type_).cloned();
        let changed = prev.as_ref().is_none_or(|p| p.status != status || p.reason != reason || p.message != message);
        let bad = matches!(
            (type_.as_str(), status),
            ("Failed" | "ReconcileBlocked" | "JenkinsBootFailed" | "PluginRollFailed" | "IngressHostConflict", "True")
                | ("MiteConnected", "False")
        ) && reason != "NotConnected";
        if changed && (prev.is_some() || status == "True" || bad) {
            notes.push(Note {
                warning: bad,
                reason: if status == "True" { type_.clone() } else { format!("{type_}Cleared") },
                message: if message.is_empty() { format!("{type_} is {status} ({reason})") } else { message.clone() },
            });
        }
        // opkit's rules (apimachinery's SetStatusCondition): the transition time moves only with
        // the status, and a condition the API server would refuse is not set.
        let desired = DesiredCondition::new(type_, ConditionStatus::from(status == "True"), reason, message)
            .observed_generation(c.metadata.generation);
        if let Err(e) = set_condition(&mut conditions, desired, i.now) {
            tracing::warn!(controller = %c.name_any(), error = %e, "a condition was not set");
        }
    }
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    if old.phase != Some(phase) {
        notes.push(Note {
            warning: phase == ControllerPhase::Failed,
            reason: format!("Phase{phase}"),
            message: format!(
                "phase {} -> {phase}",
                old.phase.map(|p| p.to_string()).unwrap_or_else(|| "(none)".into())
            ),
        });
    }
    let mut status = ControllerStatus {
        phase: Some(phase),
        attention: None,
        conditions,
        last_reconciled_at: stamp,
        last_apply_result: i.mite.last_apply.clone().or(old.last_apply_result.clone()),
        config_digest: i.rendered.as_ref().ok().map(|r| r.digest.clone()).or(old.config_digest.clone()),
        resolved: match &i.rendered {
            Ok(r) => Some(ResolvedSummary {
                version_profile: Some(r.profile.clone()),
                jenkins_version: Some(r.jenkins_version.clone()),
                bundle: Some(r.bundle.clone()),
                plugin_count: Some(r.plugins.len() as i32),
            }),
            Err(_) => old.resolved.clone(),
        },
        ready_cells: Some(i.stateful_set.and_then(|s| s.status.as_ref()).and_then(|s| s.ready_replicas).unwrap_or(0)),
        observed_generation: c.metadata.generation,
    };
    status.attention = varroa_api::attention(&status).map(|a| a.as_str().to_string());
    (status, notes)
}
