//! The `pods/eviction` subresource: `POST .../pods/NAME/eviction` with a policy/v1 (or v1beta1)
//! `Eviction`, as kubernetes pkg/registry/core/pod/storage/eviction.go serves it (what
//! `kubectl drain` and kube-rs `Api::<Pod>::evict` call).
//!
//! - The body: JSON, YAML or protobuf; `apiVersion` policy/v1 or policy/v1beta1 (others are
//!   `the API version in the data (...) does not match the expected API version (policy/v1)`),
//!   `metadata.name` the pod's (`name in URL does not match name in Eviction object`),
//!   `deleteOptions` applied to the pod's delete (grace period, preconditions, propagation);
//!   `dryRun` of the query and of the deleteOptions must agree (`propagateDryRun`).
//! - Admission: NamespaceLifecycle (no evictions in a terminating namespace: 403 with the
//!   `NamespaceTerminating` cause kubectl drain looks for) and ValidatingAdmissionPolicies on
//!   `pods/eviction` CREATE. RBAC (`create` on `pods/eviction`) was checked by `api`.
//! - A pod that is Succeeded, Failed, Pending or already deleting is deleted without looking
//!   at budgets (`canIgnorePDB`; a Pending pod pinned to the resourceVersion read).
//! - Otherwise the budgets whose selector matches the pod decide: none, the pod is deleted;
//!   more than one is a 500 (`This pod has more than one PodDisruptionBudget, which the
//!   eviction subresource does not support.`); with one, a pod that is not Ready is deleted
//!   without using the budget when the budget's `unhealthyPodEvictionPolicy` is `AlwaysAllow`,
//!   or (`IfHealthyBudget`, the default) when `currentHealthy >= desiredHealthy > 0`, pinned to
//!   the resourceVersion read (a conflict is a 429, so clients retry); otherwise the budget is
//!   checked and decremented (`checkAndDecrement`): not yet observed by the disruption
//!   controller, a 429 `is still being processed by the server` (Retry-After 10); no disruption
//!   allowed, a 429 `Cannot evict pod as it would violate the pod's disruption budget.` with
//!   the cause `The disruption budget NAME needs N healthy pods and has M currently`; else
//!   `disruptionsAllowed` is decremented and `disruptedPods[pod]` recorded by a status update
//!   pinned to the resourceVersion read, retried from a fresh read on conflict, so two evictions
//!   never both pass a budget of one.
//! - Before the delete (not in a dry run) the pod gets the `DisruptionTarget` condition
//!   (`EvictionByEvictionAPI`, `Eviction API: evicting`), as 1.31+ apiservers write it.
//! - Success is `201` with `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}`.
//!
//! `disruptedPods` times come from the controllers' clock (`Cluster::options.clock`), which the
//! disruption controller expires them with.

use crate::auth::rbac::UserInfo;
use crate::cluster::Cluster;
use crate::conditions::{self, Style};
use crate::errors::{ApiError, ApiResult, Cause, Details};
use crate::meta;
use crate::ops::{self, DeleteOpts, WriteOpts};
use crate::pdb::{GROUP, RESOURCE, guards, update_disruption_allowed_condition};
use crate::registry::{GroupResource, ResourceDef};
use crate::request::{self, BodyFormat, Query};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The most `disruptedPods` entries a budget may carry (`MaxDisruptedPodSize`).
const MAX_DISRUPTED_POD_SIZE: usize = 2000;
/// Attempts of a write that conflicts (upstream's EvictionsRetry has 20 steps).
const RETRIES: usize = 20;
/// Who writes a budget's status and a pod's condition during an eviction.
const MANAGER: &str = "kube-apiserver";

const TOO_MANY_REQUESTS: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// Serve one eviction: the HTTP code and body of the answer.
pub fn serve(
    cl: &Cluster,
    ns: &str,
    name: &str,
    q: &Query,
    content_type: Option<&str>,
    body: &[u8],
    user: &UserInfo,
) -> ApiResult<(u16, Value)> {
    let pods = cl.registry.get("", "v1", "pods").ok_or_else(ApiError::not_found_path)?;
    let eviction = decode(content_type, body)?;
    if meta::name(&eviction) != name {
        return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
    }
    let body_ns = meta::namespace(&eviction);
    if !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let options = match eviction.get("deleteOptions") {
        None | Some(Value::Null) => None,
        Some(o) => Some(o),
    };
    let mut delete = DeleteOpts::from_body(options)?;
    delete.dry_run = propagate_dry_run(q, options)?;
    delete.user = Some(user.clone());
    ops::admit_namespace(cl, &pods, ns, name)?;
    let attrs = crate::admission::policy::Attributes {
        operation: "CREATE",
        def: &pods,
        namespace: ns,
        name,
        subresource: "eviction",
        object: Some(&eviction),
        old: None,
        user: Some(user),
        field_manager: "",
        dry_run: delete.dry_run,
    };
    crate::admission::policy::admit(cl, &attrs)?;
    evict(cl, &pods, ns, name, delete)
}

/// Decode the body as an Eviction of policy/v1 or policy/v1beta1.
fn decode(content_type: Option<&str>, body: &[u8]) -> ApiResult<Value> {
    let v = match request::body_format(content_type)? {
        BodyFormat::Json => request::decode_object(body, false, "Eviction")?,
        BodyFormat::Yaml => request::decode_object(body, true, "Eviction")?,
        BodyFormat::Protobuf => crate::protobuf::decode_with_defaults(body, "policy/v1", "Eviction").map_err(|e| {
            if e.is_unsupported() {
                ApiError::unsupported_media_type(content_type.unwrap_or("")).with_message(e.to_string())
            } else {
                ApiError::bad_request(e.to_string())
            }
        })?,
        _ => return Err(ApiError::unsupported_media_type(content_type.unwrap_or(""))),
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type Eviction): couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            crate::golike::json_type_word(&v)
        )));
    }
    let av = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let av = if av.is_empty() { "policy/v1" } else { av };
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let kind = if kind.is_empty() { "Eviction" } else { kind };
    if kind != "Eviction" {
        // The decoder makes the kind the body names: a kind of the policy group that is not an
        // Eviction fails in the REST storage, an unknown one in the scheme.
        if matches!(kind, "PodDisruptionBudget" | "PodDisruptionBudgetList") && av.starts_with("policy/") {
            return Err(ApiError::bad_request(format!("not a Eviction object: *policy.{kind}")));
        }
        return Err(ApiError::bad_request(format!(
            "no kind {kind:?} is registered for version {av:?} in scheme \"pkg/api/legacyscheme/scheme.go:30\""
        )));
    }
    if !matches!(av, "policy/v1" | "policy/v1beta1") {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version (policy/v1)"
        )));
    }
    Ok(v)
}

/// `propagateDryRun`: the query's `dryRun` and the deleteOptions' must agree.
fn propagate_dry_run(q: &Query, options: Option<&Value>) -> ApiResult<bool> {
    let query: Vec<String> = if q.dry_run()? { vec!["All".into()] } else { vec![] };
    let body: Vec<String> = options
        .and_then(|o| o.get("dryRun"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let effective = if body.is_empty() {
        query
    } else if query.is_empty() || query == body {
        body
    } else {
        return Err(ApiError::raw(
            500,
            "Unknown",
            format!(
                "Non-matching dry-run options in request and content: [{}] and [{}]",
                query.join(" "),
                body.join(" ")
            ),
        ));
    };
    if let Some(bad) = effective.iter().find(|v| *v != "All") {
        return Err(ApiError::bad_request(format!("Invalid dry run value: {bad:?}: supported values: \"All\"")));
    }
    Ok(!effective.is_empty())
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

/// `canIgnorePDB`: the pod already is, or cannot yet be, a disruption.
fn can_ignore_pdb(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || meta::is_deleting(pod)
}

/// `shouldEnforceResourceVersion`: all but terminal and deleting pods.
fn should_enforce_resource_version(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && !meta::is_deleting(pod)
}

fn success() -> (u16, Value) {
    (201, json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
}

fn is_conflict(e: &ApiError) -> bool {
    e.code == 409 && e.reason == "Conflict"
}

fn rv_of(obj: &Value) -> String {
    meta::meta_str(obj, "resourceVersion").unwrap_or("").to_string()
}

/// A 429 with a `DisruptionBudget` cause.
fn too_many_requests(cause: String, retry_after: Option<u32>) -> ApiError {
    let mut e = ApiError::raw(429, "TooManyRequests", TOO_MANY_REQUESTS);
    e.details = Some(Box::new(Details {
        causes: vec![Cause { reason: "DisruptionBudget".into(), message: cause, field: String::new() }],
        ..Default::default()
    }));
    e.retry_after = retry_after;
    e
}

/// `createTooManyRequestsError`: the budget is not settled yet.
fn still_processing(pdb: &str) -> ApiError {
    too_many_requests(format!("The disruption budget {pdb} is still being processed by the server."), Some(10))
}

fn evict(cl: &Cluster, pods: &ResourceDef, ns: &str, name: &str, original: DeleteOpts) -> ApiResult<(u16, Value)> {
    let pods_gr = GroupResource::new("", "pods");
    let get_pod = || cl.store.get(&pods_gr, ns, name).ok_or_else(|| ApiError::not_found("", "pods", name));
    // Pods that need no budget: deleted at once (retried on conflicts unless the client pinned
    // a resourceVersion).
    let mut pod = get_pod()?;
    let mut attempts = 0;
    while can_ignore_pdb(&pod) {
        let mut opts = original.clone();
        if should_enforce_resource_version(&pod) && original.precondition_rv.is_none() {
            opts.precondition_rv = Some(rv_of(&pod));
        }
        match add_condition_and_delete(cl, pods, ns, name, opts) {
            Ok(()) => return Ok(success()),
            Err(e) if is_conflict(&e) && original.precondition_rv.is_none() && attempts < RETRIES => {
                attempts += 1;
                pod = get_pod()?;
            }
            Err(e) => return Err(e),
        }
    }
    let budgets: Vec<Arc<Value>> =
        crate::client::list_ns(cl, GROUP, RESOURCE, ns).into_iter().filter(|b| guards(b, &pod)).collect();
    if budgets.len() > 1 {
        // Returned as a Status of Failure, which the apiserver's finisher answers as an error.
        return Ok((
            500,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                "code": 500}),
        ));
    }
    let mut pin_to_read = false;
    if let Some(pdb) = budgets.first() {
        let status = |f: &str| pdb.pointer(&format!("/status/{f}")).and_then(Value::as_i64).unwrap_or(0);
        let unhealthy = !crate::conditions::pod_ready(&pod);
        let always_allow =
            pdb.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) == Some("AlwaysAllow");
        if unhealthy
            && (always_allow || (status("currentHealthy") >= status("desiredHealthy") && status("desiredHealthy") > 0))
        {
            // The pod does not count as healthy: deleting it costs the budget nothing.
            pin_to_read = true;
        } else {
            check_and_decrement(cl, ns, name, pdb.clone(), original.dry_run)?;
        }
    }
    let mut opts = original.clone();
    if pin_to_read {
        opts.precondition_rv = Some(rv_of(&pod));
    }
    match add_condition_and_delete(cl, pods, ns, name, opts) {
        Ok(()) => Ok(success()),
        Err(e) if is_conflict(&e) && pin_to_read && original.precondition_rv.is_none() => {
            Err(still_processing(budgets.first().map(|b| meta::name(b)).unwrap_or("")))
        }
        Err(e) => Err(e),
    }
}

/// `checkAndDecrement`, retried from a fresh read of the budget when its status write conflicts.
fn check_and_decrement(cl: &Cluster, ns: &str, pod: &str, mut pdb: Arc<Value>, dry_run: bool) -> ApiResult<()> {
    let d = cl.registry.get(GROUP, "v1", RESOURCE).ok_or_else(ApiError::not_found_path)?;
    let pdb_name = meta::name(&pdb).to_string();
    let mut last = None;
    for _ in 0..RETRIES {
        match try_decrement(cl, &d, ns, pod, &pdb, dry_run) {
            Ok(()) => return Ok(()),
            Err(e) if is_conflict(&e) => {
                last = Some(e);
                pdb = cl
                    .store
                    .get(&d.storage, ns, &pdb_name)
                    .ok_or_else(|| ApiError::not_found(GROUP, RESOURCE, &pdb_name))?;
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        ApiError::timeout(format!("couldn't update PodDisruptionBudget {pdb_name:?} due to conflicts"))
    }))
}

fn try_decrement(cl: &Cluster, d: &ResourceDef, ns: &str, pod: &str, pdb: &Value, dry_run: bool) -> ApiResult<()> {
    let name = meta::name(pdb);
    let status = pdb.get("status").and_then(Value::as_object).cloned().unwrap_or_default();
    let int = |f: &str| status.get(f).and_then(Value::as_i64).unwrap_or(0);
    if int("observedGeneration") < pdb.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0) {
        return Err(still_processing(name));
    }
    let forbidden = |msg: &str| ApiError::forbidden(GROUP, "poddisruptionbudget", name, msg);
    let allowed = int("disruptionsAllowed");
    if allowed < 0 {
        return Err(forbidden("pdb disruptions allowed is negative"));
    }
    let disrupted = status.get("disruptedPods").and_then(Value::as_object).map_or(0, Map::len);
    if disrupted > MAX_DISRUPTED_POD_SIZE {
        return Err(forbidden("DisruptedPods map too big - too many evictions not confirmed by PDB controller"));
    }
    if allowed == 0 {
        return Err(too_many_requests(
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int("desiredHealthy"),
                int("currentHealthy")
            ),
            None,
        ));
    }
    if dry_run {
        return Ok(());
    }
    let mut next_status = status;
    next_status.insert("disruptionsAllowed".into(), (allowed - 1).into());
    if allowed - 1 == 0 {
        update_disruption_allowed_condition(&mut next_status);
    }
    let mut pods = next_status.get("disruptedPods").and_then(Value::as_object).cloned().unwrap_or_default();
    pods.insert(pod.to_string(), cl.options.clock.now_rfc3339().into());
    next_status.insert("disruptedPods".into(), Value::Object(pods));
    let mut next = pdb.clone();
    if let Some(m) = next.as_object_mut() {
        m.insert("status".into(), Value::Object(next_status));
    }
    // Pinned to the version read (the body carries its resourceVersion): a concurrent
    // eviction's write makes this one conflict and start again from the new status.
    let opts = WriteOpts { subresource: Some("status".into()), ..WriteOpts::system(MANAGER) };
    ops::update(cl, d, ns, name, next, &opts).map(|_| ())
}

/// `addConditionAndDeletePod`: mark the pod `DisruptionTarget` (not in a dry run), then delete it
/// with the eviction's options; a resourceVersion precondition follows the condition's write.
fn add_condition_and_delete(
    cl: &Cluster,
    pods: &ResourceDef,
    ns: &str,
    name: &str,
    mut opts: DeleteOpts,
) -> ApiResult<()> {
    if !opts.dry_run {
        let mut written = None;
        for _ in 0..RETRIES {
            let cur = cl.store.get(&pods.storage, ns, name).ok_or_else(|| ApiError::not_found("", "pods", name))?;
            if let Some(uid) = opts.precondition_uid.as_deref().filter(|u| !u.is_empty())
                && uid != meta::uid(&cur)
            {
                return Err(ApiError::conflict(
                    "",
                    "Pod",
                    name,
                    &format!(
                        "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                        meta::uid(&cur)
                    ),
                ));
            }
            if let Some(rv) = opts.precondition_rv.as_deref().filter(|r| !r.is_empty())
                && rv != rv_of(&cur)
            {
                return Err(ApiError::conflict(
                    "",
                    "Pod",
                    name,
                    &format!(
                        "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                        rv_of(&cur)
                    ),
                ));
            }
            let mut next = (*cur).clone();
            let mut conds = conditions::of(next.get("status"));
            conditions::set(
                &mut conds,
                Style::Pod,
                "DisruptionTarget",
                "True",
                "EvictionByEvictionAPI",
                "Eviction API: evicting",
                &meta::now(),
            );
            if let Some(m) = next.as_object_mut() {
                let st = m.entry("status").or_insert_with(|| json!({}));
                if let Some(sm) = st.as_object_mut() {
                    sm.insert("conditions".into(), Value::Array(conds));
                }
            }
            let wopts = WriteOpts { subresource: Some("status".into()), ..WriteOpts::system(MANAGER) };
            match ops::update(cl, pods, ns, name, next, &wopts) {
                Ok(w) => {
                    written = Some(w.object);
                    break;
                }
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e),
            }
        }
        let Some(w) = written else {
            return Err(ApiError::conflict("", "pods", name, "too many concurrent writes; try again"));
        };
        if opts.precondition_rv.as_deref().is_some_and(|r| !r.is_empty()) {
            opts.precondition_rv = Some(rv_of(&w));
        }
    }
    ops::delete(cl, pods, ns, name, &opts).map(|_| ())
}
