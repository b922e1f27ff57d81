//! The status step of a Controller, table-driven from YAML fixtures (issue 14): no API server, no
//! cluster, no NATS, only `varroa_operator::status::compute` (and `varroa_config::render`, also
//! pure, for the configuration). Every file under `tests/fixtures/status/` is one case; adding a
//! file adds a case.
//!
//! A fixture holds the inputs as Kubernetes YAML: the Controller (with the status the last pass
//! left), `world` (the JenkinsVersionProfiles, ControllerClasses, ProvisioningDefaults,
//! ComposedBundles, CatalogItems and PodTemplates it renders from; a render error is the Blocked
//! case, as in controller.rs), or `blocker` for a Blocker found before rendering
//! (`unknownUpdateCenter: <name>`, `gatewayCaMissing: {namespace, name}`), the StatefulSet, the
//! pods, `mite` (connected, lost, lastApply), `failure` (reason, message: why provisioning
//! stopped), `ingressConflict`, and a fixed `now`. `compute` gets the old lastReconciledAt as its
//! stamp, as `Context::finish` passes it.
//!
//! It holds then what `kubectl get controller -o yaml` should show: `expect.status` is compared
//! as a subset of the computed status (conditions matched by `type`, `absent: true` for one that
//! must not be there; `null` means absent; a key `<field>Contains` lists fragments of `<field>`),
//! and `expect.events` is the exact list of Events the pass records (reason, Normal/Warning,
//! message fragments): the comparison both operators' fixtures share, `optest::fixtures`.
//!
//! Coverage (the seed's phase table and attention signals; status.rs's conditions):
//!
//! | Phase / signal | Fixtures |
//! |---|---|
//! | Pending: `compute` never returns it; a Controller without a status is Pending ("(none)" in the first phase event) | provisioning-first-pass (starts from it) |
//! | Provisioning, no StatefulSet yet (resolved settings, config digest) | provisioning-first-pass |
//! | Provisioning (rolling: revisions differ, pods not ready) | provisioning-rolling |
//! | Running (rolled and ready, no mite stream yet: no attention) | running-mite-not-connected |
//! | Connected (the steady state: Ready=True, no attention, no event) | connected-steady |
//! | Running -> Connected (MiteConnected=True, event) | connected-from-running |
//! | Stopped (spec.powerState: Stopped, scaled to zero) | stopped |
//! | Stopped requested, pods still there: Provisioning | stopping-still-scaling-down |
//! | Hibernated (parked by the inactivity policy) | hibernated |
//! | Failed (ProvisioningRefused) / attention Failed | failed-provisioning-refused |
//! | Failed (OwnershipConflict), over Blocked-free boot failure | failed-ownership-conflict |
//! | Blocked: unknown version profile (render error) | blocked-profile-not-found |
//! | Blocked: plugin pin against the profile's lock | blocked-pin-conflicts-with-lock |
//! | Blocked: the gateway CA Secret is missing (before render), over Boot failed | blocked-gateway-ca-missing |
//! | Blocked: unknown UpdateCenter | blocked-unknown-update-center |
//! | Boot failed: CrashLoopBackOff (exit code, restarts) | boot-failed-crashloop |
//! | Boot failed: ImagePullBackOff, over Apply failed and Mite unreachable | boot-failed-image-pull |
//! | Boot failed cleared (JenkinsBootFailedCleared event) | boot-failed-cleared |
//! | Plugin roll failed (plugins-init exit code) | plugin-roll-failed |
//! | Plugin roll failed (plugins-init crash-looping) | plugin-roll-failed-crashloop |
//! | Apply failed (lastApplyResult.succeeded: false), over Mite unreachable | apply-failed |
//! | Mite unreachable (MiteConnected=False, StreamLost; phase Running) | mite-unreachable-stream-lost |
//! | IngressHostConflict=True (HostInUse; no attention signal) | ingress-host-conflict |

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
mod fixture_inputs;

use fixture_inputs::{mite, world};
use optest::fixtures::{event, field, text};
use serde_json::Value;
use std::path::Path;
use varroa_api::Controller;
use varroa_operator::error::{Blocker, CaError};
use varroa_operator::status::{Failure, Inputs, compute};

fn blocker(case: &Value, file: &str) -> Option<Blocker> {
    let b = case.get("blocker").filter(|v| !v.is_null())?;
    if let Some(name) = b.get("unknownUpdateCenter").and_then(Value::as_str) {
        return Some(Blocker::UnknownUpdateCenter { name: name.to_string() });
    }
    if let Some(s) = b.get("gatewayCaMissing") {
        return Some(Blocker::GatewayCa(CaError::Missing {
            namespace: text(s, "namespace", file).to_string(),
            name: text(s, "name", file).to_string(),
        }));
    }
    panic!("{file}: `blocker` is unknownUpdateCenter or gatewayCaMissing")
}

/// The status pass on the fixture's inputs: the status (as JSON) and the Events it records.
fn run(case: &Value, file: &str) -> (Value, Vec<Value>) {
    let controller: Controller =
        field(case, "controller", file).unwrap_or_else(|| panic!("{file}: `controller` is required"));
    let now: jiff::Timestamp = text(case, "now", file).parse().unwrap_or_else(|e| panic!("{file}: `now`: {e}"));
    let sts: Option<StatefulSet> = field(case, "statefulSet", file);
    let pods: Vec<Pod> = field(case, "pods", file).unwrap_or_default();
    let mite = mite(case, file);
    let failed = case.get("failure").filter(|v| !v.is_null()).map(|f| Failure {
        reason: text(f, "reason", file).to_string(),
        message: text(f, "message", file).to_string(),
    });
    let rendered_or = match blocker(case, file) {
        Some(b) => Err(b),
        None => varroa_config::render(&controller, &world(case, file)).map_err(Blocker::from),
    };
    let inputs = Inputs {
        controller: &controller,
        rendered: rendered_or.as_ref(),
        failed,
        ingress_conflict: field(case, "ingressConflict", file),
        stateful_set: sts.as_ref(),
        pods: &pods,
        mite: &mite,
        now,
    };
    let stamp: Option<Time> = controller.status.as_ref().and_then(|s| s.last_reconciled_at.clone());
    let (status, notes) = compute(&inputs, stamp);
    let events = notes.iter().map(|n| event(&n.reason, n.warning, &n.message)).collect();
    (serde_json::to_value(&status).expect("the status serializes"), events)
}

#[test]
fn every_status_fixture_holds() {
    optest::fixtures::every_case_holds(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/status"), 20, run);
}
