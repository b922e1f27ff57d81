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
//! message fragments).
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
use serde_json::Value;
use std::path::{Path, PathBuf};
use varroa_api::{ApplyResult, Controller};
use varroa_config::World;
use varroa_operator::error::{Blocker, CaError};
use varroa_operator::mite::MiteState;
use varroa_operator::status::{Failure, Inputs, Note, compute};

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/status");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn parse<T: serde::de::DeserializeOwned>(v: &Value, what: &str, file: &str) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{file}: {what} does not parse: {e}"))
}

fn field<T: serde::de::DeserializeOwned>(case: &Value, key: &str, file: &str) -> Option<T> {
    case.get(key).filter(|v| !v.is_null()).map(|v| parse(v, &format!("`{key}`"), file))
}

fn text(v: &Value, key: &str, file: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_else(|| panic!("{file}: `{key}` (a string) is required")).to_string()
}

fn world(case: &Value, file: &str) -> World {
    let mut w = World::default();
    for (i, o) in case.get("world").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let what = format!("world[{i}]");
        match o.get("kind").and_then(Value::as_str) {
            Some("JenkinsVersionProfile") => w.profiles.push(parse(o, &what, file)),
            Some("ControllerClass") => w.classes.push(parse(o, &what, file)),
            Some("ProvisioningDefaults") => w.defaults = Some(parse(o, &what, file)),
            Some("ComposedBundle") => w.bundles.push(parse(o, &what, file)),
            Some("CatalogItem") => w.catalog_items.push(parse(o, &what, file)),
            Some("PodTemplate") => w.pod_templates.push(parse(o, &what, file)),
            other => panic!("{file}: {what}: kind {other:?} is not one the fixtures read"),
        }
    }
    w
}

fn blocker(case: &Value, file: &str) -> Option<Blocker> {
    let b = case.get("blocker").filter(|v| !v.is_null())?;
    if let Some(name) = b.get("unknownUpdateCenter").and_then(Value::as_str) {
        return Some(Blocker::UnknownUpdateCenter { name: name.to_string() });
    }
    if let Some(s) = b.get("gatewayCaMissing") {
        return Some(Blocker::GatewayCa(CaError::Missing {
            namespace: text(s, "namespace", file),
            name: text(s, "name", file),
        }));
    }
    panic!("{file}: `blocker` is unknownUpdateCenter or gatewayCaMissing")
}

fn mite(case: &Value, file: &str) -> MiteState {
    let Some(m) = case.get("mite").filter(|v| !v.is_null()) else { return MiteState::default() };
    MiteState {
        connected: m.get("connected").and_then(Value::as_bool).unwrap_or(false),
        lost: m.get("lost").and_then(Value::as_bool).unwrap_or(false),
        last_apply: field::<ApplyResult>(m, "lastApply", file),
        ..MiteState::default()
    }
}

fn run(case: &Value, file: &str) -> (Value, Vec<Note>) {
    let controller: Controller =
        field(case, "controller", file).unwrap_or_else(|| panic!("{file}: `controller` is required"));
    let now: jiff::Timestamp = text(case, "now", file).parse().unwrap_or_else(|e| panic!("{file}: `now`: {e}"));
    let sts: Option<StatefulSet> = field(case, "statefulSet", file);
    let pods: Vec<Pod> = field(case, "pods", file).unwrap_or_default();
    let mite = mite(case, file);
    let failed = case
        .get("failure")
        .filter(|v| !v.is_null())
        .map(|f| Failure { reason: text(f, "reason", file), message: text(f, "message", file) });
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
    (serde_json::to_value(&status).expect("the status serializes"), notes)
}

/// Compares `want` as a subset of `got`, pushing one line per difference, each naming the path.
fn subset(path: &str, want: &Value, got: &Value, diffs: &mut Vec<String>) {
    match (want, got) {
        (Value::Null, Value::Null) => {}
        (Value::Null, g) => diffs.push(format!("{path}: expected absent, got {g}")),
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                if let Some(base) = k.strip_suffix("Contains") {
                    let actual = g.get(base).and_then(Value::as_str).unwrap_or_default();
                    let frags: Vec<&str> = match wv {
                        Value::String(s) => vec![s.as_str()],
                        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                        _ => vec![],
                    };
                    for f in frags {
                        if !actual.contains(f) {
                            diffs.push(format!("{path}.{base}: expected to contain {f:?}, got {actual:?}"));
                        }
                    }
                    continue;
                }
                subset(&format!("{path}.{k}"), wv, g.get(k).unwrap_or(&Value::Null), diffs);
            }
        }
        (Value::Array(w), Value::Array(g)) if !w.is_empty() && w.iter().all(|x| x.get("type").is_some()) => {
            for wc in w {
                let t = &wc["type"];
                let absent = wc.get("absent") == Some(&Value::Bool(true));
                match g.iter().find(|gc| gc.get("type") == Some(t)) {
                    Some(_) if absent => diffs.push(format!("{path}: expected no entry of type {t}, found one")),
                    None if absent => {}
                    Some(gc) => subset(&format!("{path}[type={}]", t.as_str().unwrap_or("?")), wc, gc, diffs),
                    None => diffs.push(format!("{path}: no entry of type {t}")),
                }
            }
        }
        (w, g) if w == g => {}
        (w, g) => diffs.push(format!("{path}: expected {w}, got {g}")),
    }
}

fn check(file: &str, case: &Value, status: &Value, notes: &[Note]) -> Vec<String> {
    let mut diffs = vec![];
    let expect = case.get("expect").unwrap_or_else(|| panic!("{file}: `expect` is required"));
    let want = expect.get("status").unwrap_or_else(|| panic!("{file}: `expect.status` is required"));
    subset("status", want, status, &mut diffs);
    let want_events = expect
        .get("events")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{file}: `expect.events` (a list, [] for none) is required"));
    let got_reasons: Vec<&str> = notes.iter().map(|n| n.reason.as_str()).collect();
    let want_reasons: Vec<&str> = want_events.iter().map(|e| e["reason"].as_str().unwrap_or("?")).collect();
    if got_reasons != want_reasons {
        diffs.push(format!("events: expected reasons {want_reasons:?}, got {got_reasons:?}"));
    } else {
        for (i, (w, n)) in want_events.iter().zip(notes).enumerate() {
            let got = serde_json::json!({
                "reason": n.reason,
                "type": if n.warning { "Warning" } else { "Normal" },
                "message": n.message,
            });
            subset(&format!("events[{i}]"), w, &got, &mut diffs);
        }
    }
    diffs
}

#[test]
fn every_status_fixture_holds() {
    let files = fixtures();
    assert!(files.len() >= 20, "expected the status fixtures, found {}", files.len());
    let mut failures = vec![];
    for path in &files {
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("?").to_string();
        let raw = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {file}: {e}"));
        let case: Value = serde_saphyr::from_str(&raw).unwrap_or_else(|e| panic!("{file}: not YAML: {e}"));
        let (status, notes) = run(&case, &file);
        for d in check(&file, &case, &status, &notes) {
            failures.push(format!("{file}: {d}"));
        }
    }
    assert!(failures.is_empty(), "{} difference(s):\n{}", failures.len(), failures.join("\n"));
}
