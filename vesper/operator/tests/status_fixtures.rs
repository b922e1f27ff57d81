//! The status step of a preview, table-driven from YAML fixtures (issue 14): no API server, no
//! cluster, only the pure functions of `vesper_operator::status`. Every file under
//! `tests/fixtures/status/` is one case; adding a file adds a case.
//!
//! A fixture holds the inputs as Kubernetes YAML (the PreviewEnvironment with the status the last
//! pass left, the preview's Deployment, its pods, a fixed `now`) and what `kubectl get -o yaml`
//! should then show: `expect.status` is compared as a subset of the computed status (conditions
//! matched by `type`, `absent: true` for one that must not be there; `null` means absent; a key `<field>Contains` lists fragments of `<field>`),
//! and `expect.events` is the exact list of Events the pass records (reason, Normal/Warning,
//! message fragments): the comparison both operators' fixtures share, `optest::fixtures`.
//!
//! `step` selects what the controller runs (vesper/operator/src/controller.rs):
//! - `status` (default): step 2 then 7 of a reconcile: an unparseable TTL fails the preview
//!   (`failed`, InvalidSpec), a passed TTL expires it (`expired`), else `compute`, with
//!   `expiresAt` derived from creationTimestamp + spec.ttl as `ttl::expires_at` does;
//! - `failed`: a conflict found while setting up (`failure.reason`, `failure.message`);
//! - `reconcileError`: a step failed with `error`;
//! - `deleting`: the finalizer waits for `previewNamespace` (absent: it is gone).
//!
//! Coverage (phases, Ready reasons, the other conditions and signals):
//!
//! | Phase / signal | Fixtures |
//! |---|---|
//! | Pending, Creating (no Deployment yet) | pending-creating |
//! | Pending, RollingOut (controller has not seen the spec) | pending-rolling-out-unobserved |
//! | Pending, RollingOut (n of m pods ready) + pod problem CrashLoopBackOff | pending-crashloop |
//! | Pending, RollingOut + pod problem ErrImagePull | pending-image-pull |
//! | Ready -> Pending (new image rolling out) | ready-to-pending-new-image |
//! | Ready, Available (event Ready, resolvedImage from imageID) | ready-available |
//! | Ready, ScaledToZero | ready-scaled-to-zero |
//! | Ready again: no change, no event | ready-steady-no-event |
//! | Failed, PodsRejected (ReplicaFailure) | failed-pods-rejected |
//! | Failed, RolloutStuck (ProgressDeadlineExceeded) | failed-rollout-stuck |
//! | Failed -> Pending (spec fixed; old stuck condition ignored) | failed-to-pending-spec-fixed |
//! | Failed, NamespaceConflict | failed-namespace-conflict |
//! | Failed, InvalidSpec (bad quantity, via reconcile_error) | failed-invalid-spec-quantity |
//! | Failed, InvalidSpec (bad TTL) | failed-invalid-ttl |
//! | ReconcileError (phase kept) | reconcile-error-keeps-phase |
//! | Expired (TTLExpired), from Ready | expired-from-ready |
//! | Expired, from Pending and from Failed | expired-from-pending, expired-from-failed |
//! | Expired again: no second event | expired-again-no-event |
//! | ExpiringSoon=True (ExpiresSoon, Warning event) | ready-expiring-soon |
//! | Available=Unknown / False from the Deployment | pending-creating, failed-rollout-stuck |
//! | Deleting (namespace content/finalizers remaining) | deleting-namespace-remaining |
//! | Deleting (namespace gone) | deleting-namespace-gone |

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use optest::fixtures::{event, field, text};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use vesper_api::PreviewEnvironment;
use vesper_operator::status::{self, Computed, Inputs};

fn timestamp(s: &str, file: &str) -> Timestamp {
    s.parse().unwrap_or_else(|e| panic!("{file}: {s:?} is not a timestamp: {e}"))
}

/// Runs the step the fixture names.
fn run(case: &Value, file: &str) -> Computed {
    let pe: PreviewEnvironment =
        field(case, "previewEnvironment", file).unwrap_or_else(|| panic!("{file}: `previewEnvironment` is required"));
    let now = timestamp(text(case, "now", file), file);
    match case.get("step").and_then(Value::as_str).unwrap_or("status") {
        "status" => {
            let expires_at = match vesper_operator::ttl::expires_at(&pe) {
                Ok(t) => t,
                Err(e) => return status::failed(&pe, "InvalidSpec", &e.to_string(), now),
            };
            if now >= expires_at {
                return status::expired(&pe, expires_at, now);
            }
            let deployment: Option<Deployment> = field(case, "deployment", file);
            let pods: Vec<Pod> = field(case, "pods", file).unwrap_or_default();
            let warning = case.get("expiryWarningSeconds").and_then(Value::as_u64).unwrap_or(3600);
            status::compute(Inputs {
                pe: &pe,
                deployment: deployment.as_ref(),
                pods: &pods,
                namespace: case.get("namespace").and_then(Value::as_str).unwrap_or("vesper-team-a-pr-42-3f9c2a1b"),
                url: field(case, "url", file),
                expires_at,
                expiry_warning: Duration::from_secs(warning),
                now,
            })
        }
        "failed" => {
            let f = case.get("failure").unwrap_or_else(|| panic!("{file}: `failure` is required"));
            status::failed(&pe, text(f, "reason", file), text(f, "message", file), now)
        }
        "reconcileError" => status::reconcile_error(&pe, text(case, "error", file), now),
        "deleting" => {
            let ns: Option<Namespace> = field(case, "previewNamespace", file);
            Computed { status: status::deleting(&pe, ns.as_ref(), now), notes: vec![] }
        }
        other => panic!("{file}: unknown step {other:?} (status, failed, reconcileError, deleting)"),
    }
}

#[test]
fn every_status_fixture_holds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/status");
    optest::fixtures::every_case_holds(&dir, 20, |case, file| {
        let got = run(case, file);
        let events = got.notes.iter().map(|n| event(&n.reason, n.warning, &n.message)).collect();
        (serde_json::to_value(&got.status).expect("the status serializes"), events)
    });
}
