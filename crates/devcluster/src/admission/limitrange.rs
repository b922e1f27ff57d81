//! The `LimitRanger` admission plugin (plugin/pkg/admission/limitranger/admission.go, v1.33) as
//! pure functions over JSON objects: defaulting of container requests and limits (the mutating
//! half) and the min / max / maxLimitRequestRatio checks of Pods and PersistentVolumeClaims (the
//! validating half).
//!
//! Where the real plugin applies, and what the integrator must do around these functions:
//!
//! * Only requests on the main resource (`pods`, `persistentvolumeclaims`) are handled; every
//!   subresource is ignored. Pods are handled on create only (their containers are immutable);
//!   claims on create and update. An update whose stored object has a `deletionTimestamp` is
//!   ignored.
//! * [`default_pod`] runs in the mutating phase, [`validate_pod`] / [`validate_pvc`] in the
//!   validating phase, over all LimitRanges of the namespace.
//! * A refusal is `admission.NewForbidden(attrs, err)`: HTTP 403, reason `Forbidden`, message
//!   `pods "<name>" is forbidden: <message>` (`persistentvolumeclaims "<name>" ...` for claims),
//!   where `<name>` is `metadata.name`, else `metadata.generateName`, else `Unknown`; the status
//!   `details` carry `{name, kind: "pods"}`. The message is the first failing LimitRange's
//!   errors, aggregated as `utilerrors.NewAggregate` prints them: one error alone, several as
//!   `[first, second]` (duplicates dropped).
//!
//! Deliberate difference: Go iterates the `min`/`max`/`maxLimitRequestRatio` maps in random
//! order, so the order of several errors varies between runs upstream; here resource names are
//! taken in sorted order. LimitRanges are taken in the order given.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::quota::{ResourceList, pod_spec_totals, resource_list};
use crate::builtin::quantity::Quantity;

/// The annotation LimitRanger writes on the pods it defaults.
pub const LIMIT_RANGER_ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// `resource.MaxMilliValue`: above it, comparisons fall back to whole units.
const MAX_MILLI_VALUE: i64 = i64::MAX / 1000;

fn limit_items(limit_range: &Value) -> &[Value] {
    limit_range.pointer("/spec/limits").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn item_type(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or("")
}

/// `defaultContainerResourceRequirements`: `(defaultRequest, default)` of the `Container` items
/// (a later item overrides an earlier one for the same resource).
fn default_requirements(limit_range: &Value) -> (ResourceList, ResourceList) {
    let mut requests = ResourceList::new();
    let mut limits = ResourceList::new();
    for item in limit_items(limit_range).iter().filter(|i| item_type(i) == "Container") {
        requests.extend(resource_list(item.get("defaultRequest")));
        limits.extend(resource_list(item.get("default")));
    }
    (requests, limits)
}

/// Set every resource of `defaults` missing from `container.resources.<which>`; the names set,
/// sorted.
fn fill(container: &mut Map<String, Value>, which: &str, defaults: &ResourceList) -> Vec<String> {
    let existing: BTreeSet<String> = container
        .get("resources")
        .and_then(|r| r.get(which))
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let missing: Vec<(&String, &Quantity)> = defaults.iter().filter(|(k, _)| !existing.contains(*k)).collect();
    if missing.is_empty() {
        return Vec::new();
    }
    let resources = container.entry("resources").or_insert_with(|| Value::Object(Map::new()));
    if !resources.is_object() {
        *resources = Value::Object(Map::new());
    }
    let Some(resources) = resources.as_object_mut() else { return Vec::new() };
    let list = resources.entry(which).or_insert_with(|| Value::Object(Map::new()));
    if !list.is_object() {
        *list = Value::Object(Map::new());
    }
    let Some(list) = list.as_object_mut() else { return Vec::new() };
    for (k, q) in &missing {
        list.insert((*k).clone(), Value::String(q.to_canonical()));
    }
    missing.into_iter().map(|(k, _)| k.clone()).collect()
}

/// `mergeContainerResources`: defaults one container, returning its annotation parts.
fn merge_container(c: &mut Value, requests: &ResourceList, limits: &ResourceList, kind: &str, out: &mut Vec<String>) {
    let Some(obj) = c.as_object_mut() else { return };
    let name = obj.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let set_limits = fill(obj, "limits", limits);
    let set_requests = fill(obj, "requests", requests);
    if !set_requests.is_empty() {
        out.push(format!("{} request for {kind} {name}", set_requests.join(", ")));
    }
    if !set_limits.is_empty() {
        out.push(format!("{} limit for {kind} {name}", set_limits.join(", ")));
    }
}

/// LimitRanger's mutation (`PodMutateLimitFunc` for each LimitRange in turn): every container
/// and init container gets the `default` (as limits) and `defaultRequest` (as requests) of the
/// `type: Container` items for the resources it does not set, and the pod is annotated
/// `kubernetes.io/limit-ranger: LimitRanger plugin set: cpu, memory request for container app;
/// cpu, memory limit for container app` (`init container` for init containers). As upstream,
/// each LimitRange that sets something rewrites the whole annotation.
///
/// The LimitRanges are expected as stored, i.e. with the API defaults applied
/// (`default` ← `max`, `defaultRequest` ← `default` ← `min`); the pod as decoded, i.e. with its
/// own defaults applied (requests ← limits).
pub fn default_pod(pod: &mut Value, limit_ranges: &[Value]) {
    for lr in limit_ranges {
        let (requests, limits) = default_requirements(lr);
        let mut parts = Vec::new();
        for (key, kind) in [("containers", "container"), ("initContainers", "init container")] {
            if let Some(cs) = pod.pointer_mut(&format!("/spec/{key}")).and_then(Value::as_array_mut) {
                for c in cs {
                    merge_container(c, &requests, &limits, kind, &mut parts);
                }
            }
        }
        if parts.is_empty() {
            continue;
        }
        let Some(obj) = pod.as_object_mut() else { return };
        let meta = obj.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        let Some(meta) = meta.as_object_mut() else { return };
        let annotations = meta.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
        if !annotations.is_object() {
            *annotations = Value::Object(Map::new());
        }
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(
                LIMIT_RANGER_ANNOTATION.to_string(),
                Value::String(format!("LimitRanger plugin set: {}", parts.join("; "))),
            );
        }
    }
}

/// `requestLimitEnforcedValues`: milli-units when all three fit, whole units otherwise.
fn values(req: Option<&Quantity>, lim: Option<&Quantity>, enforced: &Quantity) -> (i64, i64, i64) {
    let zero = Quantity::zero();
    let (r, l) = (req.unwrap_or(&zero), lim.unwrap_or(&zero));
    if r.value() <= MAX_MILLI_VALUE && l.value() <= MAX_MILLI_VALUE && enforced.value() <= MAX_MILLI_VALUE {
        (r.milli_value(), l.milli_value(), enforced.milli_value())
    } else {
        (r.value(), l.value(), enforced.value())
    }
}

/// `minConstraint`.
fn min_constraint(t: &str, k: &str, e: &Quantity, request: &ResourceList, limit: &ResourceList) -> Option<String> {
    let (req, lim) = (request.get(k), limit.get(k));
    let (rv, lv, ev) = values(req, lim, e);
    let e = e.to_canonical();
    match (req, lim) {
        (None, _) => Some(format!("minimum {k} usage per {t} is {e}.  No request is specified")),
        (Some(r), _) if rv < ev => Some(format!("minimum {k} usage per {t} is {e}, but request is {r}")),
        (_, Some(l)) if lv < ev => Some(format!("minimum {k} usage per {t} is {e}, but limit is {l}")),
        _ => None,
    }
}

/// `maxConstraint`.
fn max_constraint(t: &str, k: &str, e: &Quantity, request: &ResourceList, limit: &ResourceList) -> Option<String> {
    let (req, lim) = (request.get(k), limit.get(k));
    let (rv, lv, ev) = values(req, lim, e);
    let e = e.to_canonical();
    match (req, lim) {
        (_, None) => Some(format!("maximum {k} usage per {t} is {e}.  No limit is specified")),
        (_, Some(l)) if lv > ev => Some(format!("maximum {k} usage per {t} is {e}, but limit is {l}")),
        (Some(r), _) if rv > ev => Some(format!("maximum {k} usage per {t} is {e}, but request is {r}")),
        _ => None,
    }
}

/// `maxRequestConstraint`: claims have no limits, the max applies to the request.
fn max_request_constraint(t: &str, k: &str, e: &Quantity, request: &ResourceList) -> Option<String> {
    let req = request.get(k);
    let (rv, _, ev) = values(req, None, e);
    let e = e.to_canonical();
    match req {
        None => Some(format!("maximum {k} usage per {t} is {e}.  No request is specified")),
        Some(r) if rv > ev => Some(format!("maximum {k} usage per {t} is {e}, but request is {r}")),
        _ => None,
    }
}

/// `limitRequestRatioConstraint`; the ratio prints with Go's `%f` (six decimals).
fn ratio_constraint(t: &str, k: &str, e: &Quantity, request: &ResourceList, limit: &ResourceList) -> Option<String> {
    let (req, lim) = (request.get(k), limit.get(k));
    let (rv, lv, _) = values(req, lim, e);
    let es = e.to_canonical();
    if req.is_none() || rv == 0 {
        return Some(format!(
            "{k} max limit to request ratio per {t} is {es}, but no request is specified or request is 0"
        ));
    }
    if lim.is_none() || lv == 0 {
        return Some(format!(
            "{k} max limit to request ratio per {t} is {es}, but no limit is specified or limit is 0"
        ));
    }
    let display = lv as f64 / rv as f64;
    let (observed, max) = if e.value() <= MAX_MILLI_VALUE {
        (display * 1000.0, e.milli_value() as f64)
    } else {
        (display, e.value() as f64)
    };
    (observed > max)
        .then(|| format!("{k} max limit to request ratio per {t} is {es}, but provided ratio is {display:.6}"))
}

/// The min, max and ratio checks of one item against one set of requests and limits.
fn check_item(item: &Value, t: &str, requests: &ResourceList, limits: &ResourceList, errs: &mut Vec<String>) {
    for (k, v) in resource_list(item.get("min")) {
        errs.extend(min_constraint(t, &k, &v, requests, limits));
    }
    for (k, v) in resource_list(item.get("max")) {
        errs.extend(max_constraint(t, &k, &v, requests, limits));
    }
    for (k, v) in resource_list(item.get("maxLimitRequestRatio")) {
        errs.extend(ratio_constraint(t, &k, &v, requests, limits));
    }
}

/// `utilerrors.NewAggregate(errs).Error()`.
fn aggregate(errs: &[String]) -> String {
    let mut seen = BTreeSet::new();
    let distinct: Vec<&str> = errs.iter().filter(|e| seen.insert(e.as_str())).map(String::as_str).collect();
    match distinct.as_slice() {
        [one] => (*one).to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

fn first_failure(limit_ranges: &[Value], check: impl Fn(&Value) -> Vec<String>) -> Result<(), String> {
    for lr in limit_ranges {
        let errs = check(lr);
        if !errs.is_empty() {
            return Err(aggregate(&errs));
        }
    }
    Ok(())
}

/// `PodValidateLimitFunc` for each LimitRange in turn: `type: Container` items check every
/// container and init container (`maximum cpu usage per Container is 1, but limit is 2`);
/// `type: Pod` items check the pod's totals (containers and sidecars summed, the largest init
/// container if greater; overhead not included), e.g. `minimum memory usage per Pod is 1Gi, but
/// request is 512Mi`. Returns the message of the first LimitRange that fails.
pub fn validate_pod(pod: &Value, limit_ranges: &[Value]) -> Result<(), String> {
    let containers: Vec<&Value> = ["/spec/containers", "/spec/initContainers"]
        .iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten()
        .collect();
    first_failure(limit_ranges, |lr| {
        let mut errs = Vec::new();
        for item in limit_items(lr) {
            match item_type(item) {
                t @ "Container" => {
                    for c in &containers {
                        let requests = resource_list(c.pointer("/resources/requests"));
                        let limits = resource_list(c.pointer("/resources/limits"));
                        check_item(item, t, &requests, &limits, &mut errs);
                    }
                }
                t @ "Pod" => {
                    check_item(item, t, &pod_spec_totals(pod, true), &pod_spec_totals(pod, false), &mut errs);
                }
                _ => {}
            }
        }
        errs
    })
}

/// `PersistentVolumeClaimValidateLimitFunc` for each LimitRange in turn: `type:
/// PersistentVolumeClaim` items bound `spec.resources.requests` (`minimum storage usage per
/// PersistentVolumeClaim is 1Gi, but request is 500Mi`, `maximum storage usage per
/// PersistentVolumeClaim is 10Gi.  No request is specified`).
pub fn validate_pvc(pvc: &Value, limit_ranges: &[Value]) -> Result<(), String> {
    let requests = resource_list(pvc.pointer("/spec/resources/requests"));
    let none = ResourceList::new();
    first_failure(limit_ranges, |lr| {
        let mut errs = Vec::new();
        for item in limit_items(lr).iter().filter(|i| item_type(i) == "PersistentVolumeClaim") {
            let t = "PersistentVolumeClaim";
            for (k, v) in resource_list(item.get("min")) {
                errs.extend(min_constraint(t, &k, &v, &requests, &none));
            }
            for (k, v) in resource_list(item.get("max")) {
                errs.extend(max_request_constraint(t, &k, &v, &requests));
            }
        }
        errs
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn lr(limits: Value) -> Value {
        json!({"metadata": {"name": "limits", "namespace": "test"}, "spec": {"limits": limits}})
    }

    fn container(name: &str, requests: Value, limits: Value) -> Value {
        json!({"name": name, "image": "nginx", "resources": {"requests": requests, "limits": limits}})
    }

    fn pod(containers: Vec<Value>) -> Value {
        json!({"metadata": {"name": "p", "namespace": "test"}, "spec": {"containers": containers}})
    }

    fn defaults() -> Value {
        lr(json!([{"type": "Container",
                   "default": {"cpu": "500m", "memory": "512Mi"},
                   "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
                   "max": {"cpu": "1", "memory": "1Gi"}}]))
    }

    #[test]
    fn defaults_requests_and_limits_with_the_annotation() {
        let mut p = json!({"metadata": {"name": "p"},
                           "spec": {"containers": [{"name": "app", "image": "nginx"}],
                                    "initContainers": [{"name": "init", "resources": {
                                        "limits": {"cpu": "200m"}, "requests": {"cpu": "200m"}}}]}});
        default_pod(&mut p, &[defaults()]);
        assert_eq!(
            p["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "256Mi"}})
        );
        assert_eq!(
            p["spec"]["initContainers"][0]["resources"],
            json!({"limits": {"cpu": "200m", "memory": "512Mi"}, "requests": {"cpu": "200m", "memory": "256Mi"}})
        );
        assert_eq!(
            p["metadata"]["annotations"][LIMIT_RANGER_ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for container app; \
             memory request for init container init; memory limit for init container init"
        );
        assert_eq!(validate_pod(&p, &[defaults()]), Ok(()));
    }

    #[test]
    fn nothing_to_default_leaves_the_pod_alone() {
        let mut p =
            pod(vec![container("app", json!({"cpu": "1", "memory": "1Gi"}), json!({"cpu": "1", "memory": "1Gi"}))]);
        let before = p.clone();
        default_pod(&mut p, &[defaults()]);
        assert_eq!(p, before);
        // A LimitRange of another type defaults nothing.
        let mut p = pod(vec![json!({"name": "app"})]);
        let before = p.clone();
        default_pod(&mut p, &[lr(json!([{"type": "Pod", "max": {"cpu": "2"}}]))]);
        assert_eq!(p, before);
    }

    #[test]
    fn rejects_a_container_over_its_max() {
        let p = pod(vec![container("app", json!({"cpu": "2"}), json!({"cpu": "2", "memory": "512Mi"}))]);
        assert_eq!(validate_pod(&p, &[defaults()]), Err("maximum cpu usage per Container is 1, but limit is 2".into()));
        let p = pod(vec![container("app", json!({"cpu": "500m"}), json!({"cpu": "500m"}))]);
        assert_eq!(
            validate_pod(&p, &[defaults()]),
            Err("maximum memory usage per Container is 1Gi.  No limit is specified".into())
        );
        // Several errors are aggregated in brackets.
        let p = pod(vec![container("a", json!({"cpu": "2"}), json!({"cpu": "2", "memory": "2Gi"}))]);
        assert_eq!(
            validate_pod(&p, &[defaults()]),
            Err("[maximum cpu usage per Container is 1, but limit is 2, \
                 maximum memory usage per Container is 1Gi, but limit is 2Gi]"
                .into())
        );
        // A request above the max with a limit within it.
        let max = lr(json!([{"type": "Container", "max": {"cpu": "1"}}]));
        let p = pod(vec![container("a", json!({"cpu": "2"}), json!({"cpu": "1"}))]);
        assert_eq!(validate_pod(&p, &[max]), Err("maximum cpu usage per Container is 1, but request is 2".into()));
    }

    #[test]
    fn min_and_ratio_messages() {
        let min = lr(json!([{"type": "Container", "min": {"memory": "100Mi"}}]));
        let p = pod(vec![container("a", json!({"memory": "50Mi"}), json!({}))]);
        assert_eq!(
            validate_pod(&p, std::slice::from_ref(&min)),
            Err("minimum memory usage per Container is 100Mi, but request is 50Mi".into())
        );
        let p = pod(vec![container("a", json!({}), json!({}))]);
        assert_eq!(
            validate_pod(&p, std::slice::from_ref(&min)),
            Err("minimum memory usage per Container is 100Mi.  No request is specified".into())
        );
        let p = pod(vec![container("a", json!({"memory": "200Mi"}), json!({"memory": "90Mi"}))]);
        assert_eq!(
            validate_pod(&p, &[min]),
            Err("minimum memory usage per Container is 100Mi, but limit is 90Mi".into())
        );

        let ratio = lr(json!([{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]));
        let p = pod(vec![container("a", json!({"cpu": "250m"}), json!({"cpu": "1"}))]);
        assert_eq!(
            validate_pod(&p, std::slice::from_ref(&ratio)),
            Err("cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000".into())
        );
        let p = pod(vec![container("a", json!({"cpu": "300m"}), json!({"cpu": "1"}))]);
        assert_eq!(
            validate_pod(&p, std::slice::from_ref(&ratio)),
            Err("cpu max limit to request ratio per Container is 2, but provided ratio is 3.333333".into())
        );
        let p = pod(vec![container("a", json!({"cpu": "500m"}), json!({"cpu": "1"}))]);
        assert_eq!(validate_pod(&p, std::slice::from_ref(&ratio)), Ok(()));
        let p = pod(vec![container("a", json!({}), json!({"cpu": "1"}))]);
        assert_eq!(
            validate_pod(&p, &[ratio]),
            Err("cpu max limit to request ratio per Container is 2, but no request is specified or request is 0".into())
        );
    }

    #[test]
    fn pod_items_check_the_totals() {
        let pod_max = lr(json!([{"type": "Pod", "max": {"cpu": "2"}, "min": {"memory": "1Gi"}}]));
        let p = pod(vec![
            container("a", json!({"cpu": "1", "memory": "256Mi"}), json!({"cpu": "1500m"})),
            container("b", json!({"cpu": "1", "memory": "256Mi"}), json!({"cpu": "1500m"})),
        ]);
        assert_eq!(
            validate_pod(&p, &[pod_max]),
            Err("[minimum memory usage per Pod is 1Gi, but request is 512Mi, \
                 maximum cpu usage per Pod is 2, but limit is 3]"
                .into())
        );
        // An init container larger than the sum of the containers counts instead.
        let pod_max = lr(json!([{"type": "Pod", "max": {"cpu": "2"}}]));
        let mut p = pod(vec![container("a", json!({"cpu": "1"}), json!({"cpu": "1"}))]);
        p["spec"]["initContainers"] = json!([container("init", json!({"cpu": "3"}), json!({"cpu": "3"}))]);
        assert_eq!(validate_pod(&p, &[pod_max]), Err("maximum cpu usage per Pod is 2, but limit is 3".into()));
    }

    #[test]
    fn first_failing_limit_range_wins() {
        let ok = lr(json!([{"type": "Container", "max": {"cpu": "4"}}]));
        let strict = lr(json!([{"type": "Container", "max": {"cpu": "1"}}]));
        let p = pod(vec![container("a", json!({"cpu": "2"}), json!({"cpu": "2"}))]);
        assert_eq!(
            validate_pod(&p, &[ok.clone(), strict]),
            Err("maximum cpu usage per Container is 1, but limit is 2".into())
        );
        assert_eq!(validate_pod(&p, &[ok]), Ok(()));
    }

    #[test]
    fn claims_are_bounded_by_their_request() {
        let storage =
            lr(json!([{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]));
        let claim = |size: Value| json!({"spec": {"resources": {"requests": size}}});
        assert_eq!(validate_pvc(&claim(json!({"storage": "5Gi"})), std::slice::from_ref(&storage)), Ok(()));
        assert_eq!(
            validate_pvc(&claim(json!({"storage": "500Mi"})), std::slice::from_ref(&storage)),
            Err("minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi".into())
        );
        assert_eq!(
            validate_pvc(&claim(json!({"storage": "20Gi"})), std::slice::from_ref(&storage)),
            Err("maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi".into())
        );
        assert_eq!(
            validate_pvc(&claim(json!({})), &[storage]),
            Err("[minimum storage usage per PersistentVolumeClaim is 1Gi.  No request is specified, \
                 maximum storage usage per PersistentVolumeClaim is 10Gi.  No request is specified]"
                .into())
        );
        // Container limits do not apply to claims, nor claim limits to pods.
        assert_eq!(validate_pvc(&claim(json!({"storage": "1"})), &[defaults()]), Ok(()));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,20}", n in any::<i64>(), t in 0usize..4) {
            let ty = ["Container", "Pod", "PersistentVolumeClaim", "x"][t];
            let q = json!(s.clone());
            let range = json!({"spec": {"limits": [{"type": ty, "min": {s.clone(): q.clone(), "cpu": n},
                "max": {"cpu": q.clone(), "memory": n}, "maxLimitRequestRatio": {"cpu": n, s.clone(): q.clone()},
                "default": {s.clone(): q.clone()}, "defaultRequest": {"cpu": n}}]}});
            let c = json!({"name": s.clone(), "resources": {"requests": {"cpu": q.clone(), s.clone(): n},
                                                            "limits": {"cpu": n, "memory": q.clone()}}});
            let mut p = json!({"metadata": s.clone(), "spec": {"containers": [c.clone(), s.clone()],
                                                               "initContainers": [c, {"resources": n}]}});
            default_pod(&mut p, std::slice::from_ref(&range));
            let _ = validate_pod(&p, std::slice::from_ref(&range));
            let claim = json!({"spec": {"resources": {"requests": {"storage": q}}}});
            let _ = validate_pvc(&claim, std::slice::from_ref(&range));
            let mut junk = json!(s);
            default_pod(&mut junk, &[range.clone(), json!(n)]);
            let _ = validate_pod(&junk, &[range]);
        }
    }
}
