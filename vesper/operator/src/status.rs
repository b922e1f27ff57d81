//! The preview's status: phase, conditions (Ready, Available, Expired, ExpiringSoon), URL,
//! expiry, namespace, the image actually running; and an Event at each change. Computed from
//! what the preview's Deployment and pods report, as a pure function, then written only when it
//! changed.
//!
//! Phases (the seed's state diagram): Pending until the Deployment is available; Ready; back to
//! Pending while a new image rolls out; Failed when pods are refused (ReplicaFailure), the rollout
//! is stuck (ProgressDeadlineExceeded), the spec cannot be served, or the namespace is not
//! Vesper's; Failed back to Pending when the spec is fixed; Expired when the TTL passed.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use opkit::conditions::{ConditionStatus, DesiredCondition, set_condition};
use std::time::Duration;
use vesper_api::{Phase, PreviewEnvironment, PreviewEnvironmentStatus};

pub const READY: &str = "Ready";
pub const AVAILABLE: &str = "Available";
pub const EXPIRED: &str = "Expired";
pub const EXPIRING_SOON: &str = "ExpiringSoon";

/// An event to record about the preview (opkit's: both operators' status functions return them).
pub use opkit::events::Note;

/// What the status should say, and the events its changes call for.
#[derive(Debug, Clone, PartialEq)]
pub struct Computed {
    pub status: PreviewEnvironmentStatus,
    pub notes: Vec<Note>,
}

fn dep_condition<'a>(d: &'a Deployment, type_: &str) -> Option<&'a k8s_openapi::api::apps::v1::DeploymentCondition> {
    d.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// The phase and the Ready condition's reason and message, from the Deployment.
fn phase_of(pe: &PreviewEnvironment, dep: Option<&Deployment>) -> (Phase, &'static str, String) {
    let want = pe.spec.replicas;
    let Some(d) = dep else { return (Phase::Pending, "Creating", "the preview's Deployment is being created".into()) };
    let st = d.status.clone().unwrap_or_default();
    let generation = d.metadata.generation.unwrap_or(0);
    let observed = st.observed_generation.unwrap_or(0) >= generation;
    let updated = st.updated_replicas.unwrap_or(0);
    let available = st.available_replicas.unwrap_or(0);
    let total = st.replicas.unwrap_or(0);
    let image_current = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
        == Some(pe.spec.image.as_str());
    // Conditions describe the generation the Deployment controller last saw: until it has seen
    // the current spec (a fixed image, say), an old RolloutStuck is not this rollout's.
    if !observed || !image_current {
        return (
            Phase::Pending,
            "RollingOut",
            format!("rolling out {}: the Deployment controller has not seen the change yet", pe.spec.image),
        );
    }
    if let Some(c) = dep_condition(d, "ReplicaFailure").filter(|c| c.status == "True") {
        return (
            Phase::Failed,
            "PodsRejected",
            format!("pods of the preview are refused: {}", c.message.as_deref().unwrap_or("")),
        );
    }
    if let Some(c) = dep_condition(d, "Progressing").filter(|c| c.status == "False") {
        return (
            Phase::Failed,
            "RolloutStuck",
            format!(
                "the rollout of {} made no progress: {}",
                pe.spec.image,
                c.message.as_deref().unwrap_or(c.reason.as_deref().unwrap_or(""))
            ),
        );
    }
    if updated == want && total == want && available == want {
        return if want == 0 {
            (Phase::Ready, "ScaledToZero", "the preview is scaled to zero replicas".into())
        } else {
            (Phase::Ready, "Available", format!("{available} of {want} pods ready"))
        };
    }
    (Phase::Pending, "RollingOut", format!("rolling out {}: {available} of {want} pods ready", pe.spec.image))
}

/// The image the pods run, by digest, from a ready pod's `imageID`.
pub fn resolved_image(pods: &[Pod]) -> Option<String> {
    pods.iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| {
            p.status.as_ref()?.container_statuses.as_ref()?.iter().find(|c| c.name == crate::deployment::CONTAINER)
        })
        .map(|c| c.image_id.clone())
        .find(|id| !id.is_empty())
        .map(|id| id.strip_prefix("docker-pullable://").unwrap_or(&id).to_string())
}

/// Why a pod of the preview is not starting, when its container says so: `pod app-x: container
/// app is CrashLoopBackOff (last exit code 1)`. Routine waits (ContainerCreating,
/// PodInitializing) are not problems.
pub fn pod_problem(pods: &[Pod]) -> Option<String> {
    pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).find_map(|p| {
        let statuses = p.status.as_ref()?.container_statuses.as_ref()?;
        statuses.iter().find_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let reason =
                waiting.reason.as_deref().filter(|r| !matches!(*r, "ContainerCreating" | "PodInitializing"))?;
            let mut text =
                format!("pod {}: container {} is {reason}", p.metadata.name.as_deref().unwrap_or(""), c.name);
            if let Some(code) = c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code) {
                text.push_str(&format!(" (last exit code {code})"));
            } else if let Some(m) = waiting.message.as_deref().filter(|m| !m.is_empty()) {
                text.push_str(&format!(": {m}"));
            }
            Some(text)
        })
    })
}

pub struct Inputs<'a> {
    pub pe: &'a PreviewEnvironment,
    pub deployment: Option<&'a Deployment>,
    pub pods: &'a [Pod],
    pub namespace: &'a str,
    pub url: Option<String>,
    pub expires_at: Timestamp,
    pub expiry_warning: Duration,
    pub now: Timestamp,
}

fn set(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: String,
    gen_: Option<i64>,
    now: Timestamp,
) -> bool {
    set_condition(conds, DesiredCondition::new(type_, status, reason, message).observed_generation(gen_), now)
        .map(|c| c.transitioned)
        .unwrap_or(false)
}

pub fn compute(i: Inputs) -> Computed {
    let old = i.pe.status.clone().unwrap_or_default();
    let generation = i.pe.metadata.generation;
    let mut conds = old.conditions.clone();
    let mut notes = vec![];
    let (phase, reason, mut message) = phase_of(i.pe, i.deployment);
    if phase == Phase::Pending
        && let Some(problem) = pod_problem(i.pods)
    {
        message = format!("{message}; {problem}");
    }
    use ConditionStatus::{False, True, Unknown};
    let ready_status = if phase == Phase::Ready { True } else { False };
    set(&mut conds, READY, ready_status, reason, message.clone(), generation, i.now);
    match i.deployment.and_then(|d| dep_condition(d, "Available")) {
        Some(c) => {
            let s = if c.status == "True" {
                True
            } else if c.status == "False" {
                False
            } else {
                Unknown
            };
            set(
                &mut conds,
                AVAILABLE,
                s,
                c.reason.as_deref().unwrap_or("Unknown"),
                c.message.clone().unwrap_or_default(),
                generation,
                i.now,
            );
        }
        None => {
            set(
                &mut conds,
                AVAILABLE,
                Unknown,
                "DeploymentPending",
                "the Deployment reports no availability yet".into(),
                generation,
                i.now,
            );
        }
    }
    let expires = Time(i.expires_at);
    set(
        &mut conds,
        EXPIRED,
        False,
        "NotExpired",
        format!("the preview expires at {}", i.expires_at),
        generation,
        i.now,
    );
    let left = Duration::try_from(i.expires_at.duration_since(i.now)).unwrap_or(Duration::ZERO);
    let soon = left <= i.expiry_warning;
    let soon_changed = if soon {
        set(
            &mut conds,
            EXPIRING_SOON,
            True,
            "ExpiresSoon",
            format!("the preview expires at {}, in {}", i.expires_at, crate::ttl::human(left)),
            generation,
            i.now,
        )
    } else {
        set(
            &mut conds,
            EXPIRING_SOON,
            False,
            "NotExpiringSoon",
            format!("the preview expires at {}", i.expires_at),
            generation,
            i.now,
        )
    };
    if soon && soon_changed {
        notes.push(Note {
            warning: true,
            reason: "ExpiringSoon".into(),
            message: format!(
                "the preview expires at {} (in {}); extend its ttl to keep it",
                i.expires_at,
                crate::ttl::human(left)
            ),
        });
    }
    if old.phase != Some(phase) {
        // A failure's event carries its cause (RolloutStuck, PodsRejected), as `kubectl get
        // events` shows the reason column first; other phases are named by the phase.
        let reason = if phase == Phase::Failed { reason.to_string() } else { phase.to_string() };
        notes.push(Note { warning: phase == Phase::Failed, reason, message });
    }
    let ready_replicas = i.deployment.and_then(|d| d.status.as_ref()?.ready_replicas);
    let status = PreviewEnvironmentStatus {
        phase: Some(phase),
        conditions: conds,
        url: i.url,
        expires_at: Some(expires),
        namespace: Some(i.namespace.to_string()),
        observed_generation: generation,
        resolved_image: resolved_image(i.pods).or(old.resolved_image.filter(|_| phase == Phase::Ready)),
        ready_replicas,
    };
    Computed { status, notes }
}

/// The status of a preview that cannot be set up: phase Failed, Ready=False with the reason.
pub fn failed(pe: &PreviewEnvironment, reason: &str, message: &str, now: Timestamp) -> Computed {
    let mut status = pe.status.clone().unwrap_or_default();
    let transition = set(
        &mut status.conditions,
        READY,
        ConditionStatus::False,
        reason,
        message.to_string(),
        pe.metadata.generation,
        now,
    );
    let mut notes = vec![];
    if status.phase != Some(Phase::Failed) || transition {
        notes.push(Note { warning: true, reason: reason.to_string(), message: message.to_string() });
    }
    status.phase = Some(Phase::Failed);
    status.observed_generation = pe.metadata.generation;
    Computed { status, notes }
}

/// The status of a reconcile that failed at a step: Ready=False, reason ReconcileError; the
/// phase stays what it was (the error may be passing). When the spec itself is invalid (a
/// quantity Kubernetes would not parse), that is what the status says instead: phase Failed,
/// reason InvalidSpec, the field named; a retry writes nothing more until the spec changes.
pub fn reconcile_error(pe: &PreviewEnvironment, message: &str, now: Timestamp) -> Computed {
    if let Err(e) = crate::quota::validate_spec(pe) {
        return failed(pe, "InvalidSpec", &e.to_string(), now);
    }
    let mut status = pe.status.clone().unwrap_or_default();
    let transition = set(
        &mut status.conditions,
        READY,
        ConditionStatus::False,
        "ReconcileError",
        message.to_string(),
        pe.metadata.generation,
        now,
    );
    if status.phase.is_none() {
        status.phase = Some(Phase::Pending);
    }
    let notes = if transition {
        vec![Note { warning: true, reason: "ReconcileError".into(), message: message.to_string() }]
    } else {
        vec![]
    };
    Computed { status, notes }
}

/// The status of an expired preview.
pub fn expired(pe: &PreviewEnvironment, expires_at: Timestamp, now: Timestamp) -> Computed {
    let mut status = pe.status.clone().unwrap_or_default();
    let ttl = pe.spec.ttl.clone();
    set(
        &mut status.conditions,
        EXPIRED,
        ConditionStatus::True,
        "TTLExpired",
        format!("the ttl of {ttl} passed at {expires_at}"),
        pe.metadata.generation,
        now,
    );
    set(
        &mut status.conditions,
        READY,
        ConditionStatus::False,
        "Expired",
        format!("the ttl of {ttl} passed at {expires_at}; the preview is being deleted"),
        pe.metadata.generation,
        now,
    );
    let notes = if status.phase != Some(Phase::Expired) {
        vec![Note {
            warning: false,
            reason: "Expired".into(),
            message: format!("the ttl of {ttl} passed at {expires_at}; deleting the preview"),
        }]
    } else {
        vec![]
    };
    status.phase = Some(Phase::Expired);
    status.expires_at = Some(Time(expires_at));
    Computed { status, notes }
}

/// While the preview waits for its namespace to go, the namespace's own deletion conditions
/// (content and finalizers remaining) are copied into the preview's status, so a stuck deletion
/// explains itself.
pub fn deleting(
    pe: &PreviewEnvironment,
    ns: Option<&k8s_openapi::api::core::v1::Namespace>,
    now: Timestamp,
) -> PreviewEnvironmentStatus {
    let mut status = pe.status.clone().unwrap_or_default();
    let nsconds = ns.and_then(|n| n.status.as_ref()?.conditions.clone()).unwrap_or_default();
    for c in nsconds
        .iter()
        .filter(|c| matches!(c.type_.as_str(), "NamespaceContentRemaining" | "NamespaceFinalizersRemaining"))
    {
        let s = match c.status.as_str() {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        };
        set(
            &mut status.conditions,
            &c.type_,
            s,
            c.reason.as_deref().unwrap_or("Unknown"),
            c.message.clone().unwrap_or_default(),
            pe.metadata.generation,
            now,
        );
    }
    let message = match ns {
        Some(n) => format!("waiting for namespace {} to be deleted", kube::ResourceExt::name_any(n)),
        None => "the preview's namespace is gone".into(),
    };
    set(&mut status.conditions, READY, ConditionStatus::False, "Deleting", message, pe.metadata.generation, now);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pe(image: &str, replicas: i32) -> PreviewEnvironment {
        serde_json::from_value(json!({
            "apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
            "metadata": {"name": "pr-1", "namespace": "team-a"},
            "spec": {"image": image, "replicas": replicas},
        }))
        .expect("a preview")
    }

    fn dep(image: &str, generation: i64, observed: i64, ready: i32, conditions: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "app", "generation": generation},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}},
            "status": {"observedGeneration": observed, "replicas": ready, "updatedReplicas": ready,
                       "availableReplicas": ready, "readyReplicas": ready, "conditions": conditions},
        }))
        .expect("a deployment")
    }

    fn stuck() -> serde_json::Value {
        json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                "message": "ReplicaSet \"app-1\" has timed out progressing."}])
    }

    #[test]
    fn no_deployment_yet_is_pending() {
        assert_eq!(phase_of(&pe("r.example/a:1", 1), None).0, Phase::Pending);
    }

    #[test]
    fn all_pods_available_for_the_current_spec_is_ready() {
        let (phase, reason, msg) = phase_of(&pe("r.example/a:1", 2), Some(&dep("r.example/a:1", 3, 3, 2, json!([]))));
        assert_eq!((phase, reason, msg.as_str()), (Phase::Ready, "Available", "2 of 2 pods ready"));
        let (phase, reason, _) = phase_of(&pe("r.example/a:1", 0), Some(&dep("r.example/a:1", 1, 1, 0, json!([]))));
        assert_eq!((phase, reason), (Phase::Ready, "ScaledToZero"));
    }

    #[test]
    fn a_stuck_rollout_of_the_current_spec_fails_with_the_controllers_message() {
        let (phase, reason, msg) = phase_of(&pe("r.example/a:bad", 1), Some(&dep("r.example/a:bad", 2, 2, 0, stuck())));
        assert_eq!((phase, reason), (Phase::Failed, "RolloutStuck"));
        assert!(msg.contains("r.example/a:bad") && msg.contains("has timed out progressing"), "{msg}");
    }

    #[test]
    fn an_old_stuck_condition_does_not_fail_a_fixed_image_the_controller_has_not_seen() {
        // The operator just wrote the fixed image (generation 3); the controller still reports
        // generation 2's stuck rollout.
        let (phase, reason, _) =
            phase_of(&pe("r.example/a:fixed", 1), Some(&dep("r.example/a:fixed", 3, 2, 0, stuck())));
        assert_eq!((phase, reason), (Phase::Pending, "RollingOut"));
        // The Deployment still has the old image (the operator has not written it yet).
        let (phase, _, _) = phase_of(&pe("r.example/a:fixed", 1), Some(&dep("r.example/a:bad", 2, 2, 0, stuck())));
        assert_eq!(phase, Phase::Pending);
    }

    #[test]
    fn refused_pods_fail_the_preview() {
        let conds = json!([{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                            "message": "pods \"app-1-x\" is forbidden: exceeded quota"}]);
        let (phase, reason, msg) = phase_of(&pe("r.example/a:1", 1), Some(&dep("r.example/a:1", 1, 1, 0, conds)));
        assert_eq!((phase, reason), (Phase::Failed, "PodsRejected"));
        assert!(msg.contains("exceeded quota"), "{msg}");
    }

    #[test]
    fn a_crash_looping_or_unpullable_pod_is_named() {
        let pod = |name: &str, container: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": name}, "status": {"containerStatuses": [container]}}))
                .expect("a pod")
        };
        let creating = pod(
            "app-1",
            json!({"name": "app", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}}),
        );
        assert_eq!(pod_problem(std::slice::from_ref(&creating)), None);
        let crashing = pod(
            "app-2",
            json!({"name": "app", "image": "i", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container=app"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}),
        );
        assert_eq!(
            pod_problem(&[creating.clone(), crashing]).as_deref(),
            Some("pod app-2: container app is CrashLoopBackOff (last exit code 1)")
        );
        let unpullable = pod(
            "app-3",
            json!({"name": "app", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}}}),
        );
        assert_eq!(
            pod_problem(&[unpullable]).as_deref(),
            Some("pod app-3: container app is ErrImagePull: manifest unknown")
        );
    }

    #[test]
    fn partly_available_is_pending_with_a_count() {
        let mut d = dep("r.example/a:1", 1, 1, 1, json!([]));
        d.status.as_mut().expect("status").available_replicas = Some(1);
        let (phase, reason, msg) = phase_of(&pe("r.example/a:1", 3), Some(&d));
        assert_eq!((phase, reason), (Phase::Pending, "RollingOut"));
        assert!(msg.ends_with("1 of 3 pods ready"), "{msg}");
    }

    #[test]
    fn an_invalid_quantity_fails_the_preview_naming_the_field() {
        let mut p = pe("r.example/a:1", 1);
        p.metadata.generation = Some(2);
        p.spec.resources = Some(serde_json::from_value(json!({"limits": {"cpu": "2 cores"}})).expect("resources"));
        let now: Timestamp = "2026-11-01T00:00:00Z".parse().expect("time");
        let c = reconcile_error(&p, "spec.resources.limits.cpu: \"2 cores\" is not ...", now);
        assert_eq!(c.status.phase, Some(Phase::Failed));
        let ready = c.status.conditions.iter().find(|c| c.type_ == READY).expect("Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "InvalidSpec"));
        assert!(
            ready.message.contains("spec.resources.limits.cpu") && ready.message.contains("2 cores"),
            "{}",
            ready.message
        );
        assert_eq!(c.notes.len(), 1);
        // Valid but unusual quantities are no spec error.
        p.spec.resources = Some(
            serde_json::from_value(json!({"limits": {"cpu": "1e3", "memory": "2Pi"}, "requests": {"cpu": "100u"}}))
                .expect("resources"),
        );
        let c = reconcile_error(&p, "connection refused", now);
        assert_eq!(c.status.phase, Some(Phase::Pending));
        let ready = c.status.conditions.iter().find(|c| c.type_ == READY).expect("Ready");
        assert_eq!(ready.reason, "ReconcileError");
    }
}
