//! The `ResourceQuota` admission plugin and the quota controller's usage calculation, as pure
//! functions over JSON objects.
//!
//! Mirrors, from Kubernetes v1.33 onwards:
//!
//! * `staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go`
//!   (`CheckRequest`): which quotas apply to a request, the constraint and "status unknown"
//!   checks, the delta charged on update, and the `exceeded quota: ...` message;
//! * `pkg/quota/v1/evaluator/core` (`pods.go`, `services.go`, `persistent_volume_claims.go`,
//!   `registry.go`) and `staging/src/k8s.io/apiserver/pkg/quota/v1/generic/evaluator.go`: what an
//!   object is charged and which scopes it matches;
//! * `staging/src/k8s.io/apiserver/pkg/quota/v1/resources.go`: `Add`, `Mask`,
//!   `LessThanOrEqual`, `SubtractWithNonNegativeResult`, ...;
//! * `pkg/controller/resourcequota/resource_quota_controller.go` (`syncResourceQuota`) and
//!   `quota.CalculateUsage`: the `status` the quota controller writes.
//!
//! Quantities keep upstream's string semantics (see [`crate::builtin::quantity`]): a quantity
//! copied unchanged from an object prints as it was written there (in canonical form once
//! stored), a computed one prints canonically (`1100m`, `52Gi`), and a sum that starts from zero
//! takes the format of what is added (`0 + 1Gi` prints `1Gi`, as Go's `Quantity.Add` does).
//!
//! Deliberate differences:
//!
//! * Go iterates maps in random order; where that order shows (which of two quotas is reported
//!   first), quotas are taken in the order given and resource names in sorted order.
//! * The `LimitedResources` admission configuration (`insufficient quota to consume`) is not
//!   modelled: the default configuration has none.
//! * Pod-level resources (`spec.resources`, feature gate `PodLevelResources`, off in v1.33) and
//!   DRA device-class quotas are ignored; `PriorityClass` listed in `spec.scopes` (rather than in
//!   `scopeSelector`) is treated as `Exists` by the controller too (upstream errors out there).
//! * Extended resource names are assumed valid (the object passed validation), so the
//!   `IsQualifiedName` check on `requests.<name>` is not repeated.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::builtin::quantity::{Format, Quantity, parse_quantity_value};

/// A `ResourceList`: resource name to quantity, iterated in sorted order.
pub type ResourceList = BTreeMap<String, Quantity>;

/// What [`admit`] returns: `(quota name, new status.used)` for each quota whose usage changes.
pub type QuotaUpdates = Vec<(String, ResourceList)>;

// ---------------------------------------------------------------------------------------------
// ResourceList helpers (k8s.io/apiserver/pkg/quota/v1/resources.go and component-helpers).
// ---------------------------------------------------------------------------------------------

/// A `ResourceList` read from JSON (`{"cpu": "500m", ...}`). Entries that are not quantities are
/// skipped (the objects reaching admission have passed validation); anything that is not a JSON
/// object gives an empty list.
pub fn resource_list(v: Option<&Value>) -> ResourceList {
    let mut out = ResourceList::new();
    if let Some(Value::Object(m)) = v {
        for (k, v) in m {
            if let Ok(Some(q)) = parse_quantity_value(v) {
                out.insert(k.clone(), q);
            }
        }
    }
    out
}

/// A `ResourceList` as the server writes it: keys sorted (Go's `encoding/json` sorts map keys),
/// quantities in their string form.
pub fn resource_list_to_json(list: &ResourceList) -> Value {
    Value::Object(list.iter().map(|(k, q)| (k.clone(), Value::String(q.to_canonical()))).collect())
}

/// Go's `a.Add(b)`: the result is a computed quantity (printed canonically); when `a` is zero it
/// takes the format of `b`.
pub fn quantity_add(a: &Quantity, b: &Quantity) -> Quantity {
    if a.is_zero() { b.add(a) } else { a.add(b) }
}

/// Go's `a.Sub(b)`, with the same format rule as [`quantity_add`].
pub fn quantity_sub(a: &Quantity, b: &Quantity) -> Quantity {
    if a.is_zero() { b.neg().add(a) } else { a.sub(b) }
}

/// `addResourceList(list, newList)`: add `new` into `list` in place (copies for new keys).
pub fn add_into(list: &mut ResourceList, new: &ResourceList) {
    for (k, q) in new {
        let sum = match list.get(k) {
            Some(v) => quantity_add(v, q),
            None => q.clone(),
        };
        list.insert(k.clone(), sum);
    }
}

/// `maxResourceList(list, newList)`: keep the greater of the two for every key of `new`.
pub fn max_into(list: &mut ResourceList, new: &ResourceList) {
    for (k, q) in new {
        if list.get(k).is_none_or(|v| q > v) {
            list.insert(k.clone(), q.clone());
        }
    }
}

/// `quota.Add(a, b)`.
fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, q) in b {
        let sum = match a.get(k) {
            Some(v) => quantity_add(v, q),
            None => q.clone(),
        };
        out.insert(k.clone(), sum);
    }
    out
}

/// `quota.SubtractWithNonNegativeResult(a, b)`.
fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, v) in a {
        let d = match b.get(k) {
            Some(o) => quantity_sub(v, o),
            None => v.clone(),
        };
        out.insert(k.clone(), if d.sign() > 0 { d } else { Quantity::zero() });
    }
    for k in b.keys() {
        out.entry(k.clone()).or_insert_with(Quantity::zero);
    }
    out
}

/// `quota.Mask(list, names)`.
fn mask(list: &ResourceList, names: &BTreeSet<String>) -> ResourceList {
    list.iter().filter(|(k, _)| names.contains(*k)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// `quota.LessThanOrEqual(a, b)`: the keys of `b` whose value in `a` exceeds it.
fn exceeding(a: &ResourceList, b: &ResourceList) -> BTreeSet<String> {
    b.iter().filter(|(k, limit)| a.get(*k).is_some_and(|v| v > *limit)).map(|(k, _)| k.clone()).collect()
}

/// `quota.Equals`.
fn equal(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|o| o == v))
}

/// `prettyPrint`: `name=value` sorted by name, joined by `,`.
fn pretty_print(list: &ResourceList) -> String {
    list.iter().map(|(k, v)| format!("{k}={}", v.to_canonical())).collect::<Vec<_>>().join(",")
}

fn one() -> Quantity {
    Quantity::from_i64(1, Format::DecimalSI)
}

// ---------------------------------------------------------------------------------------------
// JSON access.
// ---------------------------------------------------------------------------------------------

fn path<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |v, k| v.get(*k))
}

fn str_at<'a>(v: &'a Value, keys: &[&str]) -> &'a str {
    path(v, keys).and_then(Value::as_str).unwrap_or("")
}

fn array_at<'a>(v: &'a Value, keys: &[&str]) -> &'a [Value] {
    path(v, keys).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn now_unix_nanos() -> i128 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
        Err(_) => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluators.
// ---------------------------------------------------------------------------------------------

/// `install.DefaultIgnoredResources()`: never quota-ed.
const IGNORED: &[(&str, &str)] = &[
    ("", "bindings"),
    ("", "componentstatuses"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("", "events"),
    ("events.k8s.io", "events"),
];

/// `legacyObjectCountAliases`: core resources counted under a second, historical name.
const LEGACY_ALIASES: &[&str] = &["configmaps", "resourcequotas", "replicationcontrollers", "secrets"];

/// `podResources`.
const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

/// `podResourcePrefixes`.
const POD_RESOURCE_PREFIXES: &[&str] = &["hugepages-", "requests.hugepages-"];

/// `validationSet`: if a quota tracks one of these, every container must set it.
const VALIDATION_SET: &[&str] = &["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

/// `serviceResources`.
const SERVICE_RESOURCES: &[&str] = &["count/services", "services", "services.nodeports", "services.loadbalancers"];

/// `storageClassSuffix`.
const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Evaluator {
    Pods,
    Services,
    Pvcs,
    /// `objectCountEvaluator`: the names it charges one for each object.
    Count(Vec<String>),
}

/// `generic.ObjectCountQuotaResourceNameFor`.
fn object_count_name(group: &str, resource: &str) -> String {
    if group.is_empty() { format!("count/{resource}") } else { format!("count/{resource}.{group}") }
}

/// The evaluator the registry uses for a group/resource; `None` for ignored resources.
fn evaluator(group: &str, resource: &str) -> Option<Evaluator> {
    if IGNORED.contains(&(group, resource)) {
        return None;
    }
    Some(match (group, resource) {
        ("", "pods") => Evaluator::Pods,
        ("", "services") => Evaluator::Services,
        ("", "persistentvolumeclaims") => Evaluator::Pvcs,
        _ => {
            let mut names = vec![object_count_name(group, resource)];
            if group.is_empty() && LEGACY_ALIASES.contains(&resource) {
                names.push(resource.to_string());
            }
            Evaluator::Count(names)
        }
    })
}

/// `helper.IsNativeResource`: no domain, or a `kubernetes.io/` one.
fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// `isExtendedResourceNameForQuota`: `requests.<extended resource>`.
fn is_extended_resource_name_for_quota(name: &str) -> bool {
    !is_native_resource(name) && name.starts_with("requests.")
}

/// `helper.IsExtendedResourceName` (the object is valid, so the qualified-name check holds).
fn is_extended_resource_name(name: &str) -> bool {
    !is_native_resource(name) && !name.starts_with("requests.")
}

impl Evaluator {
    /// `MatchingResources`: the names among `input` that this evaluator tracks.
    fn matching_resources<'a>(&self, input: impl IntoIterator<Item = &'a String>) -> BTreeSet<String> {
        input.into_iter().filter(|name| self.tracks(name)).cloned().collect()
    }

    fn tracks(&self, name: &str) -> bool {
        match self {
            Evaluator::Pods => {
                POD_RESOURCES.contains(&name)
                    || POD_RESOURCE_PREFIXES.iter().any(|p| name.starts_with(p))
                    || is_extended_resource_name_for_quota(name)
            }
            Evaluator::Services => SERVICE_RESOURCES.contains(&name),
            Evaluator::Pvcs => {
                matches!(name, "count/persistentvolumeclaims" | "persistentvolumeclaims" | "requests.storage")
                    || ["persistentvolumeclaims", "requests.storage"]
                        .iter()
                        .any(|r| name.ends_with(&format!("{STORAGE_CLASS_SUFFIX}{r}")))
            }
            Evaluator::Count(names) => names.iter().any(|n| n == name),
        }
    }

    /// `Usage`.
    fn usage(&self, obj: &Value, now: i128) -> ResourceList {
        match self {
            Evaluator::Pods => pod_usage(obj, now),
            Evaluator::Services => service_usage(obj),
            Evaluator::Pvcs => pvc_usage(obj),
            Evaluator::Count(names) => names.iter().map(|n| (n.clone(), one())).collect(),
        }
    }

    /// The scope function: `podMatchesScopeFunc`, `pvcMatchesScopeFunc`, or
    /// `generic.MatchesNoScopeFunc` (services and object counts match no scope at all).
    fn matches_scope(&self, sel: &ScopeSelector, obj: &Value) -> bool {
        match self {
            Evaluator::Pods => pod_matches_scope(sel, obj),
            Evaluator::Pvcs => pvc_matches_scope(sel, obj),
            Evaluator::Services | Evaluator::Count(_) => false,
        }
    }

    /// `Constraints`: only pods have any.
    fn constraints(&self, required: &BTreeSet<String>, obj: &Value) -> Result<(), String> {
        match self {
            Evaluator::Pods => pod_constraints(required, obj),
            _ => Ok(()),
        }
    }

    /// `Handles` for a request on the main resource (`old` is `Some` on update). For pods this is
    /// the current upstream rule (updates are evaluated when `activeDeadlineSeconds` moves the pod
    /// in or out of the `Terminating` scope); v1.33 evaluated pod creates only. The charge of such
    /// an update is zero either way; only the constraint and "status unknown" checks can differ.
    fn handles(&self, obj: &Value, old: Option<&Value>) -> bool {
        match (self, old) {
            (_, None) => true,
            // Pods are charged on update only when the Terminating scope changes.
            (Evaluator::Pods, Some(old)) => is_terminating(old) != is_terminating(obj),
            (Evaluator::Services | Evaluator::Pvcs, Some(_)) => true,
            (Evaluator::Count(_), Some(_)) => false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scopes.
// ---------------------------------------------------------------------------------------------

/// A `ScopedResourceSelectorRequirement`.
#[derive(Debug, Clone)]
struct ScopeSelector {
    scope: String,
    operator: String,
    values: Vec<String>,
}

/// `getScopeSelectorsFromQuota`: every `spec.scopes` entry as `Exists`, then the
/// `spec.scopeSelector.matchExpressions`.
fn scope_selectors(quota: &Value) -> Vec<ScopeSelector> {
    let mut out: Vec<ScopeSelector> = array_at(quota, &["spec", "scopes"])
        .iter()
        .filter_map(Value::as_str)
        .map(|s| ScopeSelector { scope: s.to_string(), operator: "Exists".into(), values: Vec::new() })
        .collect();
    for e in array_at(quota, &["spec", "scopeSelector", "matchExpressions"]) {
        out.push(ScopeSelector {
            scope: str_at(e, &["scopeName"]).to_string(),
            operator: str_at(e, &["operator"]).to_string(),
            values: array_at(e, &["values"]).iter().filter_map(Value::as_str).map(str::to_string).collect(),
        });
    }
    out
}

/// `ScopedResourceSelectorRequirementsAsSelector(...).Matches(labels)` for a label set holding at
/// most the one key the scope is about. An unknown operator is a conversion error upstream; here
/// it matches nothing.
fn selector_matches(sel: &ScopeSelector, label: Option<&str>) -> bool {
    match sel.operator.as_str() {
        "In" => label.is_some_and(|l| sel.values.iter().any(|v| v == l)),
        "NotIn" => label.is_none_or(|l| !sel.values.iter().any(|v| v == l)),
        "Exists" => label.is_some(),
        "DoesNotExist" => label.is_none(),
        _ => false,
    }
}

/// `IsTerminating`: `spec.activeDeadlineSeconds >= 0`.
fn is_terminating(pod: &Value) -> bool {
    path(pod, &["spec", "activeDeadlineSeconds"]).and_then(Value::as_i64).is_some_and(|s| s >= 0)
}

fn containers_and_init(pod: &Value) -> impl Iterator<Item = &Value> {
    array_at(pod, &["spec", "containers"]).iter().chain(array_at(pod, &["spec", "initContainers"]))
}

/// `qos.GetPodQOS(pod) == BestEffort`: the stored `status.qosClass` when set, otherwise
/// `ComputePodQOS` (no container asks for, or limits, a positive amount of cpu or memory).
fn is_best_effort(pod: &Value) -> bool {
    let stored = str_at(pod, &["status", "qosClass"]);
    if !stored.is_empty() {
        return stored == "BestEffort";
    }
    !containers_and_init(pod).any(|c| {
        ["requests", "limits"].iter().any(|which| {
            resource_list(path(c, &["resources", *which]))
                .iter()
                .any(|(k, q)| (k == "cpu" || k == "memory") && q.sign() > 0)
        })
    })
}

/// `usesCrossNamespacePodAffinity`.
fn uses_cross_namespace_pod_affinity(pod: &Value) -> bool {
    let cross = |term: &Value| {
        !array_at(term, &["namespaces"]).is_empty() || path(term, &["namespaceSelector"]).is_some_and(|v| !v.is_null())
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let a = path(pod, &["spec", "affinity", *kind]);
        let a = match a {
            Some(a) => a,
            None => return false,
        };
        array_at(a, &["requiredDuringSchedulingIgnoredDuringExecution"]).iter().any(cross)
            || array_at(a, &["preferredDuringSchedulingIgnoredDuringExecution"])
                .iter()
                .any(|w| path(w, &["podAffinityTerm"]).is_some_and(cross))
    })
}

/// `podMatchesScopeFunc`.
fn pod_matches_scope(sel: &ScopeSelector, pod: &Value) -> bool {
    match sel.scope.as_str() {
        "Terminating" => is_terminating(pod),
        "NotTerminating" => !is_terminating(pod),
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "PriorityClass" => {
            let pc = str_at(pod, &["spec", "priorityClassName"]);
            selector_matches(sel, (!pc.is_empty()).then_some(pc))
        }
        "CrossNamespacePodAffinity" => uses_cross_namespace_pod_affinity(pod),
        _ => false,
    }
}

/// `pvcMatchesScopeFunc`: the `VolumeAttributesClass` scope.
fn pvc_matches_scope(sel: &ScopeSelector, pvc: &Value) -> bool {
    if sel.scope != "VolumeAttributesClass" {
        return false;
    }
    let names: BTreeSet<&str> = [
        str_at(pvc, &["spec", "volumeAttributesClassName"]),
        str_at(pvc, &["status", "currentVolumeAttributesClassName"]),
        str_at(pvc, &["status", "modifyVolumeStatus", "targetVolumeAttributesClassName"]),
    ]
    .into_iter()
    .filter(|s| !s.is_empty())
    .collect();
    if names.is_empty() {
        return selector_matches(sel, None);
    }
    names.into_iter().any(|n| selector_matches(sel, Some(n)))
}

/// Whether the quota's `spec.scopes` and `spec.scopeSelector` all match the object (the scope
/// part of `generic.Matches`). A quota without scopes matches every object; a scoped quota never
/// matches services, object counts or ignored resources (`MatchesNoScopeFunc`), and matches a
/// PersistentVolumeClaim only through the `VolumeAttributesClass` scope.
#[cfg(test)]
pub fn matches_scopes(quota: &Value, group: &str, resource: &str, obj: &Value) -> bool {
    let selectors = scope_selectors(quota);
    match evaluator(group, resource) {
        Some(ev) => selectors.iter().all(|s| ev.matches_scope(s, obj)),
        None => selectors.is_empty(),
    }
}

// ---------------------------------------------------------------------------------------------
// Usage.
// ---------------------------------------------------------------------------------------------

fn container_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    array_at(pod, &["status", "containerStatuses"])
        .iter()
        .chain(array_at(pod, &["status", "initContainerStatuses"]))
        .find(|cs| str_at(cs, &["name"]) == name)
}

/// `IsPodResizeInfeasible`.
fn is_resize_infeasible(pod: &Value) -> bool {
    array_at(pod, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == "PodResizePending")
        .is_some_and(|c| str_at(c, &["reason"]) == "Infeasible")
}

/// A resource list that may be nil (`None`) rather than empty.
fn opt_list(v: Option<&Value>) -> Option<ResourceList> {
    v.filter(|v| v.is_object()).map(|v| resource_list(Some(v)))
}

/// Which per-container list `aggregate` sums.
#[derive(Clone, Copy)]
enum Source {
    SpecRequests,
    AllocatedRequests,
    ActuatedRequests,
    SpecLimits,
    ActuatedLimits,
}

fn container_list(c: &Value, cs: Option<&Value>, infeasible: bool, source: Source) -> Option<ResourceList> {
    let spec_requests = || opt_list(path(c, &["resources", "requests"]));
    let spec_limits = || opt_list(path(c, &["resources", "limits"]));
    let allocated = || cs.and_then(|cs| opt_list(cs.get("allocatedResources")));
    let fallback = |spec: Option<ResourceList>| if infeasible { None } else { spec };
    match source {
        Source::SpecRequests => spec_requests(),
        Source::SpecLimits => spec_limits(),
        Source::AllocatedRequests => allocated().or_else(|| fallback(spec_requests())),
        Source::ActuatedRequests => cs
            .and_then(|cs| opt_list(path(cs, &["resources", "requests"])))
            .or_else(allocated)
            .or_else(|| fallback(spec_requests())),
        Source::ActuatedLimits => {
            cs.and_then(|cs| opt_list(path(cs, &["resources", "limits"]))).or_else(|| fallback(spec_limits()))
        }
    }
}

/// `aggregateContainerResourcesByFn`: the sidecar-aware sum (KEP-753) of one list per container.
fn aggregate(pod: &Value, source: Source) -> ResourceList {
    let infeasible = is_resize_infeasible(pod);
    let list = |c: &Value| {
        let cs = container_status(pod, str_at(c, &["name"]));
        container_list(c, cs, infeasible, source).unwrap_or_default()
    };
    let mut result = ResourceList::new();
    for c in array_at(pod, &["spec", "containers"]) {
        add_into(&mut result, &list(c));
    }
    let mut restartable = ResourceList::new();
    let mut init = ResourceList::new();
    for c in array_at(pod, &["spec", "initContainers"]) {
        let own = list(c);
        let effective = if str_at(c, &["restartPolicy"]) == "Always" {
            add_into(&mut result, &own);
            add_into(&mut restartable, &own);
            restartable.clone()
        } else {
            let mut combined = ResourceList::new();
            add_into(&mut combined, &own);
            add_into(&mut combined, &restartable);
            combined
        };
        max_into(&mut init, &effective);
    }
    max_into(&mut result, &init);
    result
}

/// The sidecar-aware totals of the containers' `spec` requests (`requests = true`) or limits,
/// without status resources or overhead: what LimitRanger's `podRequests`/`podLimits` compute.
pub fn pod_spec_totals(pod: &Value, requests: bool) -> ResourceList {
    aggregate(pod, if requests { Source::SpecRequests } else { Source::SpecLimits })
}

/// `max(a, b...)` of component-helpers.
fn max_of(a: ResourceList, others: &[&ResourceList]) -> ResourceList {
    let mut out = a;
    for o in others {
        max_into(&mut out, o);
    }
    out
}

/// `resourcehelper.PodRequests` as the pod evaluator calls it in v1.33: status resources taken
/// into account (`InPlacePodVerticalScaling` is on), overhead included.
fn pod_requests(pod: &Value) -> ResourceList {
    let spec = aggregate(pod, Source::SpecRequests);
    let allocated = aggregate(pod, Source::AllocatedRequests);
    let actuated = aggregate(pod, Source::ActuatedRequests);
    let mut reqs = if is_resize_infeasible(pod) {
        max_of(actuated, &[&allocated])
    } else {
        max_of(spec, &[&actuated, &allocated])
    };
    add_into(&mut reqs, &resource_list(path(pod, &["spec", "overhead"])));
    reqs
}

/// `resourcehelper.PodLimits`: overhead is added to the limits that are set and non-zero.
fn pod_limits(pod: &Value) -> ResourceList {
    let spec = aggregate(pod, Source::SpecLimits);
    let actuated = aggregate(pod, Source::ActuatedLimits);
    let mut limits = if is_resize_infeasible(pod) { actuated } else { max_of(spec, &[&actuated]) };
    for (k, q) in resource_list(path(pod, &["spec", "overhead"])) {
        if let Some(v) = limits.get(&k).filter(|v| !v.is_zero()) {
            let sum = quantity_add(v, &q);
            limits.insert(k, sum);
        }
    }
    limits
}

/// `podComputeUsageHelper`.
fn pod_compute_usage_helper(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut result = ResourceList::new();
    result.insert("pods".into(), one());
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(r) {
            result.insert(r.into(), q.clone());
            result.insert(format!("requests.{r}"), q.clone());
        }
        if let Some(q) = limits.get(r) {
            result.insert(format!("limits.{r}"), q.clone());
        }
    }
    for (r, q) in requests {
        if r.starts_with("hugepages-") {
            result.insert(r.clone(), q.clone());
            result.insert(format!("requests.{r}"), q.clone());
        }
        if is_extended_resource_name(r) {
            result.insert(format!("requests.{r}"), q.clone());
        }
    }
    result
}

/// `QuotaV1Pod`: terminal pods, and pods whose deletion grace period has run out, are not
/// charged compute resources.
fn quota_v1_pod(pod: &Value, now: i128) -> bool {
    if matches!(str_at(pod, &["status", "phase"]), "Failed" | "Succeeded") {
        return false;
    }
    let deletion =
        path(pod, &["metadata", "deletionTimestamp"]).and_then(Value::as_str).and_then(crate::duration::parse_rfc3339);
    let grace = path(pod, &["metadata", "deletionGracePeriodSeconds"]).and_then(Value::as_i64);
    if let (Some((secs, nanos)), Some(grace)) = (deletion, grace) {
        let deadline = (i128::from(secs) + i128::from(grace)) * 1_000_000_000 + i128::from(nanos);
        if now > deadline {
            return false;
        }
    }
    true
}

/// `PodUsageFunc`: `count/pods` always; compute resources unless the pod is done.
fn pod_usage(pod: &Value, now: i128) -> ResourceList {
    let mut result = ResourceList::new();
    result.insert("count/pods".into(), one());
    if !quota_v1_pod(pod, now) {
        return result;
    }
    add(&result, &pod_compute_usage_helper(&pod_requests(pod), &pod_limits(pod)))
}

/// `serviceEvaluator.Usage`.
fn service_usage(svc: &Value) -> ResourceList {
    let ports = array_at(svc, &["spec", "ports"]);
    let count = |n: usize| Quantity::from_i64(i64::try_from(n).unwrap_or(i64::MAX), Format::DecimalSI);
    let mut result = ResourceList::new();
    result.insert("count/services".into(), one());
    result.insert("services".into(), one());
    result.insert("services.loadbalancers".into(), Quantity::zero());
    result.insert("services.nodeports".into(), Quantity::zero());
    match str_at(svc, &["spec", "type"]) {
        "NodePort" => {
            result.insert("services.nodeports".into(), count(ports.len()));
        }
        "LoadBalancer" => {
            let allocate = path(svc, &["spec", "allocateLoadBalancerNodePorts"]).and_then(Value::as_bool);
            let node_ports = if allocate == Some(false) {
                ports.iter().filter(|p| path(p, &["nodePort"]).and_then(Value::as_i64).is_some_and(|n| n != 0)).count()
            } else {
                ports.len()
            };
            result.insert("services.nodeports".into(), count(node_ports));
            result.insert("services.loadbalancers".into(), one());
        }
        _ => {}
    }
    result
}

/// `storagehelpers.GetPersistentVolumeClaimClass`: the beta annotation first, then
/// `spec.storageClassName`.
fn pvc_class(pvc: &Value) -> &str {
    match path(pvc, &["metadata", "annotations", "volume.beta.kubernetes.io/storage-class"]) {
        Some(v) => v.as_str().unwrap_or(""),
        None => str_at(pvc, &["spec", "storageClassName"]),
    }
}

/// `getStorageUsage`: the request (or the larger allocated size), rounded up to whole bytes.
fn pvc_storage_usage(pvc: &Value) -> Option<Quantity> {
    let round_up = |q: &Quantity| {
        let mut r = q.clone();
        if r.round_up(0) { q.clone() } else { r }
    };
    let result = resource_list(path(pvc, &["spec", "resources", "requests"])).get("storage").map(round_up);
    let allocated = resource_list(path(pvc, &["status", "allocatedResources"]));
    match (result, allocated.get("storage")) {
        (Some(r), Some(a)) if a > &r => Some(round_up(a)),
        (r, _) => r,
    }
}

/// `pvcEvaluator.Usage`.
fn pvc_usage(pvc: &Value) -> ResourceList {
    let mut result = ResourceList::new();
    result.insert("persistentvolumeclaims".into(), one());
    result.insert("count/persistentvolumeclaims".into(), one());
    let class = pvc_class(pvc);
    if !class.is_empty() {
        result.insert(format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"), one());
    }
    if let Some(storage) = pvc_storage_usage(pvc) {
        if !class.is_empty() {
            result.insert(format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"), storage.clone());
        }
        result.insert("requests.storage".into(), storage);
    }
    result
}

/// What `obj` (of `group`/`resource`) is charged, as the quota evaluators measure it: for pods
/// `count/pods`, `pods`, `cpu`/`requests.cpu`, `memory`/`requests.memory`, `limits.*`,
/// `ephemeral-storage`, hugepages and `requests.<extended resource>` (terminal pods, and pods
/// deleted past their grace period, only `count/pods`); for services `services`,
/// `count/services`, `services.loadbalancers`, `services.nodeports`; for claims
/// `persistentvolumeclaims`, `count/persistentvolumeclaims`, `requests.storage` and the
/// `<class>.storageclass.storage.k8s.io/...` forms; for anything else `count/<resource>[.<group>]`
/// plus the legacy names `configmaps`, `secrets`, `replicationcontrollers`, `resourcequotas`.
/// Ignored resources (events, bindings, reviews) are charged nothing.
#[cfg(test)]
pub fn usage(group: &str, resource: &str, obj: &Value) -> BTreeMap<String, Quantity> {
    usage_at(group, resource, obj, now_unix_nanos())
}

/// [`usage`] at a given time (Unix nanoseconds), for deterministic deletion-grace checks.
#[cfg(test)]
pub fn usage_at(group: &str, resource: &str, obj: &Value, now_unix_nanos: i128) -> BTreeMap<String, Quantity> {
    evaluator(group, resource).map(|ev| ev.usage(obj, now_unix_nanos)).unwrap_or_default()
}

/// `podEvaluator.Constraints`: when a quota tracks cpu or memory (requests or limits), every
/// container and init container must state it.
fn pod_constraints(required: &BTreeSet<String>, pod: &Value) -> Result<(), String> {
    let required: Vec<&String> = required.iter().filter(|r| VALIDATION_SET.contains(&r.as_str())).collect();
    let mut missing: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for c in containers_and_init(pod) {
        let usage = pod_compute_usage_helper(
            &resource_list(path(c, &["resources", "requests"])),
            &resource_list(path(c, &["resources", "limits"])),
        );
        for r in &required {
            if !usage.contains_key(*r) {
                missing.entry(r.as_str()).or_default().insert(str_at(c, &["name"]));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| format!("{r} for: {}", names.iter().copied().collect::<Vec<_>>().join(",")))
        .collect();
    Err(format!("must specify {}", parts.join("; ")))
}

// ---------------------------------------------------------------------------------------------
// Admission.
// ---------------------------------------------------------------------------------------------

fn quota_name(quota: &Value) -> &str {
    str_at(quota, &["metadata", "name"])
}

/// Admission of a create (`old` = `None`) or update (`old` = the stored object) of `obj` against
/// the quotas of its namespace, each with its current `status` (`hard` and `used`), as
/// `CheckRequest` does it.
///
/// Returns the quotas whose `status.used` changes, with their new `used` (the caller writes them,
/// keeping `status.hard`), in the order given; `Ok(vec![])` when nothing is charged. On refusal
/// the message is upstream's, which the apiserver wraps with `admission.NewForbidden` into a 403
/// `<resource>[.<group>] "<name>" is forbidden: <message>` (name, else `generateName`, else
/// `Unknown`):
///
/// * `failed quota: <quota>: must specify limits.cpu for: app; requests.cpu for: app`
/// * `status unknown for quota: <quota>, resources: cpu,pods`
/// * `quota usage is negative for resource(s): requests.storage`
/// * `exceeded quota: <quota>, requested: requests.cpu=500m, used: requests.cpu=1, limited:
///   requests.cpu=1`
///
/// Call it for the main resource only, for namespaced objects, and not for the creation of a
/// Namespace: upstream's `Validate` ignores every subresource and cluster-scoped request.
/// Pods are evaluated on update only when the `Terminating` scope changes, object counts only on
/// create; services and claims on both. On update the charge is `new - old` per resource, never
/// negative, unless the old object has no `metadata.resourceVersion` (then the full usage).
pub fn admit(
    quotas: &[Value],
    group: &str,
    resource: &str,
    obj: &Value,
    old: Option<&Value>,
) -> Result<QuotaUpdates, String> {
    admit_at(quotas, group, resource, obj, old, now_unix_nanos())
}

/// [`admit`] at a given time (Unix nanoseconds).
pub fn admit_at(
    quotas: &[Value],
    group: &str,
    resource: &str,
    obj: &Value,
    old: Option<&Value>,
    now_unix_nanos: i128,
) -> Result<QuotaUpdates, String> {
    let Some(ev) = evaluator(group, resource) else { return Ok(Vec::new()) };
    // checkAttributes: a namespace without quotas admits everything, even negative usage.
    if quotas.is_empty() || !ev.handles(obj, old) {
        return Ok(Vec::new());
    }

    let mut interesting = Vec::new();
    for quota in quotas {
        let hard = resource_list(path(quota, &["status", "hard"]));
        let restricted = ev.matching_resources(hard.keys());
        // generic.Matches: at least one tracked resource, and every scope.
        if restricted.is_empty() || !scope_selectors(quota).iter().all(|s| ev.matches_scope(s, obj)) {
            continue;
        }
        let name = quota_name(quota);
        ev.constraints(&restricted, obj).map_err(|e| format!("failed quota: {name}: {e}"))?;
        let used = resource_list(path(quota, &["status", "used"]));
        if hard.keys().any(|k| restricted.contains(k) && !used.contains_key(k)) {
            let names: Vec<&str> = restricted.iter().map(String::as_str).collect();
            return Err(format!("status unknown for quota: {name}, resources: {}", names.join(",")));
        }
        interesting.push((name.to_string(), hard, used));
    }

    let mut delta = ev.usage(obj, now_unix_nanos);
    let negative: Vec<&str> = delta.iter().filter(|(_, q)| q.sign() < 0).map(|(k, _)| k.as_str()).collect();
    if !negative.is_empty() {
        return Err(format!("quota usage is negative for resource(s): {}", negative.join(",")));
    }
    if let Some(old) = old
        && !str_at(old, &["metadata", "resourceVersion"]).is_empty()
    {
        delta = subtract_non_negative(&delta, &ev.usage(old, now_unix_nanos));
    }
    if delta.values().all(Quantity::is_zero) {
        return Ok(Vec::new());
    }

    let mut changed = Vec::new();
    for (name, hard, used) in interesting {
        let hard_names: BTreeSet<String> = hard.keys().cloned().collect();
        let requested = mask(&delta, &hard_names);
        let new_usage = add(&used, &requested);
        let requested_names: BTreeSet<String> = requested.keys().cloned().collect();
        let exceeded = exceeding(&mask(&new_usage, &requested_names), &hard);
        if !exceeded.is_empty() {
            return Err(format!(
                "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                pretty_print(&mask(&requested, &exceeded)),
                pretty_print(&mask(&used, &exceeded)),
                pretty_print(&mask(&hard, &exceeded)),
            ));
        }
        if !equal(&used, &new_usage) {
            changed.push((name, new_usage));
        }
    }
    Ok(changed)
}

// ---------------------------------------------------------------------------------------------
// The quota controller.
// ---------------------------------------------------------------------------------------------

/// The group/resource whose evaluator measures the quota resource `name` in the controller's
/// registry: the core evaluators, the legacy aliases, and a generic object count for every
/// `count/<resource>[.<group>]` (the controller creates one per discovered resource).
fn target_of(name: &str) -> Option<(String, String)> {
    let core = |r: &str| Some((String::new(), r.to_string()));
    if Evaluator::Pods.tracks(name) {
        return core("pods");
    }
    if Evaluator::Services.tracks(name) {
        return core("services");
    }
    if Evaluator::Pvcs.tracks(name) {
        return core("persistentvolumeclaims");
    }
    if LEGACY_ALIASES.contains(&name) {
        return core(name);
    }
    let counted = name.strip_prefix("count/").filter(|s| !s.is_empty())?;
    Some(match counted.split_once('.') {
        Some((resource, group)) => (group.to_string(), resource.to_string()),
        None => (String::new(), counted.to_string()),
    })
}

/// What the quota controller writes into `status`: `hard` copied from `spec.hard`, and `used`
/// recomputed for every hard resource some evaluator tracks, from the objects of the quota's
/// namespace that match its scopes (`objects`: `(group, resource, object)`, every object of the
/// namespace the integrator knows; objects of other kinds are ignored). Tracked resources with
/// no matching object are `0`; untracked ones keep their previous `status.used` value; entries
/// for resources no longer in `spec.hard` are dropped. Empty maps are omitted, as Go's
/// `omitempty` does.
pub fn recompute_status(quota: &Value, objects: &[(&str, &str, &Value)]) -> Value {
    recompute_status_at(quota, objects, now_unix_nanos())
}

/// [`recompute_status`] at a given time (Unix nanoseconds).
pub fn recompute_status_at(quota: &Value, objects: &[(&str, &str, &Value)], now_unix_nanos: i128) -> Value {
    let hard = resource_list(path(quota, &["spec", "hard"]));
    let mut used = resource_list(path(quota, &["status", "used"]));
    let selectors = scope_selectors(quota);

    let mut by_target: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for name in hard.keys() {
        if let Some((g, r)) = target_of(name)
            && evaluator(&g, &r).is_some_and(|ev| ev.tracks(name))
        {
            by_target.entry((g, r)).or_default().insert(name.clone());
        }
    }

    let mut new_usage = ResourceList::new();
    let mut matched = BTreeSet::new();
    for ((g, r), names) in &by_target {
        let Some(ev) = evaluator(g, r) else { continue };
        // CalculateUsageStats: every tracked resource starts at zero.
        let mut stats: ResourceList = names.iter().map(|n| (n.clone(), Quantity::zero())).collect();
        for (og, ores, obj) in objects {
            if *og == g.as_str() && *ores == r.as_str() && selectors.iter().all(|s| ev.matches_scope(s, obj)) {
                stats = add(&stats, &ev.usage(obj, now_unix_nanos));
            }
        }
        new_usage = add(&new_usage, &stats);
        matched.extend(names.iter().cloned());
    }
    for (k, v) in mask(&new_usage, &matched) {
        used.insert(k, v);
    }
    let hard_names: BTreeSet<String> = hard.keys().cloned().collect();
    let used = mask(&used, &hard_names);

    let mut status = Map::new();
    if !hard.is_empty() {
        status.insert("hard".into(), resource_list_to_json(&hard));
    }
    if !used.is_empty() {
        status.insert("used".into(), resource_list_to_json(&used));
    }
    Value::Object(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const NOW: i128 = 1_700_000_000 * 1_000_000_000;

    fn q(s: &str) -> Quantity {
        crate::builtin::quantity::parse_quantity(s).unwrap_or_else(|_| Quantity::zero())
    }

    fn list(v: Value) -> ResourceList {
        resource_list(Some(&v))
    }

    fn printed(l: &ResourceList) -> Value {
        resource_list_to_json(l)
    }

    fn quota(name: &str, hard: Value, used: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "test", "resourceVersion": "124"},
               "spec": {"hard": hard.clone()}, "status": {"hard": hard, "used": used}})
    }

    fn scoped(mut quota: Value, scopes: Value) -> Value {
        quota["spec"]["scopes"] = scopes;
        quota
    }

    /// `validPod(name, n, requirements)` of the upstream tests, with named containers.
    fn pod(name: &str, containers: usize, requests: Value, limits: Value) -> Value {
        let cs: Vec<Value> = (0..containers)
            .map(|i| {
                json!({"name": format!("c{i}"), "image": format!("foo:V{i}"),
                            "resources": {"requests": requests.clone(), "limits": limits.clone()}})
            })
            .collect();
        json!({"metadata": {"name": name, "namespace": "test"}, "spec": {"containers": cs}})
    }

    fn admit_pod(quotas: &[Value], p: &Value) -> Result<Vec<(String, ResourceList)>, String> {
        admit_at(quotas, "", "pods", p, None, NOW)
    }

    #[test]
    fn below_quota_limit_charges_the_pod() {
        // TestAdmitBelowQuotaLimit
        let rq = quota(
            "quota",
            json!({"cpu": "3", "memory": "100Gi", "pods": "5"}),
            json!({"cpu": "1", "memory": "50Gi", "pods": "3"}),
        );
        let p = pod("allowed-pod", 1, json!({"cpu": "100m", "memory": "2Gi"}), json!({}));
        let out = admit_pod(&[rq], &p).unwrap_or_default();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "quota");
        assert_eq!(printed(&out[0].1), json!({"cpu": "1100m", "memory": "52Gi", "pods": "4"}));
    }

    #[test]
    fn exceeded_quota_message_is_upstreams() {
        // TestAdmitExceedQuotaLimit
        let rq = quota(
            "quota",
            json!({"cpu": "3", "memory": "100Gi", "pods": "5"}),
            json!({"cpu": "1", "memory": "50Gi", "pods": "3"}),
        );
        let p = pod("not-allowed-pod", 1, json!({"cpu": "3", "memory": "2Gi"}), json!({}));
        assert_eq!(
            admit_pod(&[rq], &p),
            Err("exceeded quota: quota, requested: cpu=3, used: cpu=1, limited: cpu=3".to_string())
        );
        let rq = quota("compute", json!({"requests.cpu": "1"}), json!({"requests.cpu": "1"}));
        let p = pod("x", 1, json!({"cpu": "500m"}), json!({"cpu": "500m"}));
        assert_eq!(
            admit_pod(&[rq], &p),
            Err("exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=1, limited: requests.cpu=1"
                .to_string())
        );
        // Several resources at once, sorted; memory keeps its binary suffix.
        let rq = quota(
            "q",
            json!({"requests.memory": "1Gi", "pods": "2"}),
            json!({"requests.memory": "600Mi", "pods": "2"}),
        );
        let p = pod("x", 1, json!({"memory": "700Mi"}), json!({}));
        assert_eq!(
            admit_pod(&[rq], &p),
            Err("exceeded quota: q, requested: pods=1,requests.memory=700Mi, used: pods=2,requests.memory=600Mi, \
                 limited: pods=2,requests.memory=1Gi"
                .to_string())
        );
    }

    #[test]
    fn missing_limits_fail_with_the_containers_named() {
        // TestAdmitEnforceQuotaConstraints
        let rq = quota(
            "quota",
            json!({"cpu": "3", "memory": "100Gi", "limits.memory": "200Gi", "pods": "5"}),
            json!({"cpu": "1", "memory": "50Gi", "limits.memory": "100Gi", "pods": "3"}),
        );
        let p = pod("not-allowed-pod", 1, json!({"cpu": "100m", "memory": "2Gi"}), json!({"cpu": "200m"}));
        assert_eq!(admit_pod(&[rq], &p), Err("failed quota: quota: must specify limits.memory for: c0".to_string()));

        let rq = quota(
            "compute",
            json!({"requests.cpu": "2", "limits.cpu": "4"}),
            json!({"requests.cpu": "0", "limits.cpu": "0"}),
        );
        let mut p = pod("x", 1, json!({}), json!({}));
        p["spec"]["containers"][0]["name"] = json!("app");
        p["spec"]["initContainers"] = json!([{"name": "init",
                                              "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}},
                                             {"name": "aaa"}]);
        assert_eq!(
            admit_pod(&[rq], &p),
            Err("failed quota: compute: must specify limits.cpu for: aaa,app; requests.cpu for: aaa,app".to_string())
        );
    }

    #[test]
    fn quota_in_other_namespace_or_unrelated_resources_do_not_block() {
        // TestAdmitPodInNamespaceWithoutQuota: no quota given.
        let p = pod("allowed-pod", 1, json!({"cpu": "100m", "memory": "2Gi"}), json!({"cpu": "200m"}));
        assert_eq!(admit_pod(&[], &p), Ok(vec![]));
        // TestAdmitWhenUnrelatedResourceExceedsQuota
        let rq = quota("quota", json!({"services": "3", "pods": "4"}), json!({"services": "4", "pods": "1"}));
        let out = admit_pod(&[rq], &pod("allowed-pod", 1, json!({}), json!({}))).unwrap_or_default();
        assert_eq!(printed(&out[0].1), json!({"pods": "2", "services": "4"}));
    }

    #[test]
    fn terminating_and_best_effort_scopes() {
        // TestAdmitBelowTerminatingQuotaLimit
        let hard = json!({"cpu": "3", "memory": "100Gi", "pods": "5"});
        let used = json!({"cpu": "1", "memory": "50Gi", "pods": "3"});
        let non_term = scoped(quota("quota-non-terminating", hard.clone(), used.clone()), json!(["NotTerminating"]));
        let term = scoped(quota("quota-terminating", hard, used), json!(["Terminating"]));
        let mut p = pod("allowed-pod", 1, json!({"cpu": "100m", "memory": "2Gi"}), json!({}));
        p["spec"]["activeDeadlineSeconds"] = json!(30);
        let out = admit_pod(&[non_term, term], &p).unwrap_or_default();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "quota-terminating");
        assert_eq!(printed(&out[0].1), json!({"cpu": "1100m", "memory": "52Gi", "pods": "4"}));

        // TestAdmitBelowBestEffortQuotaLimit / TestAdmitBestEffortQuotaLimitIgnoresBurstable
        let be = scoped(quota("quota-besteffort", json!({"pods": "5"}), json!({"pods": "3"})), json!(["BestEffort"]));
        let not_be =
            scoped(quota("quota-not-besteffort", json!({"pods": "5"}), json!({"pods": "3"})), json!(["NotBestEffort"]));
        let out = admit_pod(&[be.clone(), not_be], &pod("p", 1, json!({}), json!({}))).unwrap_or_default();
        assert_eq!(out.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), vec!["quota-besteffort"]);
        assert_eq!(printed(&out[0].1), json!({"pods": "4"}));
        assert_eq!(admit_pod(&[be], &pod("p", 1, json!({"cpu": "100m", "memory": "1Gi"}), json!({}))), Ok(vec![]));
    }

    #[test]
    fn priority_class_scope_selector() {
        let mut rq = quota("quota", json!({"pods": "5", "memory": "10Gi"}), json!({"pods": "0", "memory": "1Gi"}));
        rq["spec"]["scopeSelector"] =
            json!({"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]});
        let mut p = pod("p", 1, json!({"memory": "20Gi"}), json!({}));
        assert_eq!(admit_pod(std::slice::from_ref(&rq), &p), Ok(vec![]));
        p["spec"]["priorityClassName"] = json!("high");
        assert_eq!(
            admit_pod(&[rq.clone()], &p),
            Err("exceeded quota: quota, requested: memory=20Gi, used: memory=1Gi, limited: memory=10Gi".to_string())
        );
        assert!(matches_scopes(&rq, "", "pods", &p));
        rq["spec"]["scopeSelector"]["matchExpressions"][0]["operator"] = json!("NotIn");
        assert!(!matches_scopes(&rq, "", "pods", &p));
        rq["spec"]["scopeSelector"]["matchExpressions"][0] =
            json!({"scopeName": "PriorityClass", "operator": "Exists"});
        assert!(matches_scopes(&rq, "", "pods", &p));
        // Scoped quotas never match services or plain object counts.
        assert!(!matches_scopes(&rq, "", "services", &json!({})));
        assert!(!matches_scopes(&rq, "", "configmaps", &json!({})));
        assert!(matches_scopes(&json!({"spec": {}}), "", "configmaps", &json!({})));
    }

    #[test]
    fn service_updates_charge_the_delta() {
        // TestAdmitHandlesOldObjects
        let rq = quota(
            "quota",
            json!({"services": "10", "services.loadbalancers": "10", "services.nodeports": "10"}),
            json!({"services": "1", "services.loadbalancers": "1", "services.nodeports": "0"}),
        );
        let old = json!({"metadata": {"name": "service", "resourceVersion": "1"}, "spec": {"type": "LoadBalancer"}});
        let new = json!({"metadata": {"name": "service"}, "spec": {"type": "NodePort", "ports": [{"port": 1234}]}});
        let out = admit_at(std::slice::from_ref(&rq), "", "services", &new, Some(&old), NOW).unwrap_or_default();
        assert_eq!(
            printed(&out[0].1),
            json!({"services": "1", "services.loadbalancers": "1", "services.nodeports": "1"})
        );
        // TestAdmitHandlesCreatingUpdates: the old object has no resourceVersion.
        let old = json!({"metadata": {"name": "service"}, "spec": {"type": "LoadBalancer"}});
        let out = admit_at(&[rq], "", "services", &new, Some(&old), NOW).unwrap_or_default();
        assert_eq!(
            printed(&out[0].1),
            json!({"services": "2", "services.loadbalancers": "1", "services.nodeports": "1"})
        );
    }

    #[test]
    fn pvc_updates_and_negative_usage() {
        let rq = quota(
            "quota",
            json!({"persistentvolumeclaims": "3", "requests.storage": "100Gi"}),
            json!({"persistentvolumeclaims": "1", "requests.storage": "10Gi"}),
        );
        let claim = |size: &str, rv: &str| {
            json!({"metadata": {"name": "pvc-to-update", "resourceVersion": rv},
                   "spec": {"resources": {"requests": {"storage": size}}}})
        };
        // TestAdmitHandlesNegativePVCUpdates: shrinking charges nothing.
        let out = admit_at(
            std::slice::from_ref(&rq),
            "",
            "persistentvolumeclaims",
            &claim("5Gi", ""),
            Some(&claim("10Gi", "1")),
            NOW,
        );
        assert_eq!(out, Ok(vec![]));
        // TestAdmitHandlesPVCUpdates
        let out = admit_at(
            std::slice::from_ref(&rq),
            "",
            "persistentvolumeclaims",
            &claim("15Gi", ""),
            Some(&claim("10Gi", "1")),
            NOW,
        )
        .unwrap_or_default();
        assert_eq!(printed(&out[0].1), json!({"persistentvolumeclaims": "1", "requests.storage": "15Gi"}));
        // TestAdmitRejectsNegativeUsage
        assert_eq!(
            admit_at(std::slice::from_ref(&rq), "", "persistentvolumeclaims", &claim("-1Gi", ""), None, NOW),
            Err("quota usage is negative for resource(s): requests.storage".to_string())
        );
        assert!(admit_at(&[rq], "", "persistentvolumeclaims", &claim("1Gi", ""), None, NOW).is_ok());
        // Without any quota in the namespace nothing is checked.
        assert_eq!(admit_at(&[], "", "persistentvolumeclaims", &claim("-1Gi", ""), None, NOW), Ok(vec![]));
    }

    #[test]
    fn status_unknown_and_unsynced_quotas() {
        let rq = quota("quota", json!({"pods": "3", "cpu": "1"}), json!({"pods": "1"}));
        assert_eq!(
            admit_pod(&[rq], &pod("p", 1, json!({"cpu": "1"}), json!({}))),
            Err("status unknown for quota: quota, resources: cpu,pods".to_string())
        );
        // A quota the controller has not synced yet (no status.hard) matches nothing.
        let fresh = json!({"metadata": {"name": "new"}, "spec": {"hard": {"pods": "0"}}});
        assert_eq!(admit_pod(&[fresh], &pod("p", 1, json!({}), json!({}))), Ok(vec![]));
    }

    #[test]
    fn object_counts_and_ignored_resources() {
        let rq = quota(
            "objects",
            json!({"configmaps": "2", "count/deployments.apps": "1", "count/secrets": "5"}),
            json!({"configmaps": "1", "count/deployments.apps": "1", "count/secrets": "0"}),
        );
        let out = admit_at(std::slice::from_ref(&rq), "", "configmaps", &json!({}), None, NOW).unwrap_or_default();
        assert_eq!(printed(&out[0].1), json!({"configmaps": "2", "count/deployments.apps": "1", "count/secrets": "0"}));
        assert_eq!(
            admit_at(std::slice::from_ref(&rq), "apps", "deployments", &json!({}), None, NOW),
            Err("exceeded quota: objects, requested: count/deployments.apps=1, used: count/deployments.apps=1, \
                 limited: count/deployments.apps=1"
                .to_string())
        );
        // Updates of counted objects are free; events are never counted.
        assert_eq!(
            admit_at(std::slice::from_ref(&rq), "apps", "deployments", &json!({}), Some(&json!({})), NOW),
            Ok(vec![])
        );
        assert!(usage("", "events", &json!({})).is_empty());
        assert_eq!(printed(&usage("", "secrets", &json!({}))), json!({"count/secrets": "1", "secrets": "1"}));
    }

    #[test]
    fn pod_usage_follows_the_evaluator() {
        let mut p = pod(
            "p",
            2,
            json!({"cpu": "250m", "memory": "64Mi", "hugepages-2Mi": "2Mi", "nvidia.com/gpu": "1"}),
            json!({"cpu": "500m", "memory": "128Mi"}),
        );
        p["spec"]["initContainers"] = json!([{"name": "init", "resources": {"requests": {"cpu": "2"}}},
                                             {"name": "sidecar", "restartPolicy": "Always",
                                              "resources": {"requests": {"memory": "1Gi"}}}]);
        p["spec"]["overhead"] = json!({"cpu": "10m"});
        assert_eq!(
            printed(&usage_at("", "pods", &p, NOW)),
            json!({"count/pods": "1", "cpu": "2010m", "hugepages-2Mi": "4Mi", "limits.cpu": "1010m",
                   "limits.memory": "256Mi", "memory": "1152Mi", "pods": "1", "requests.cpu": "2010m",
                   "requests.hugepages-2Mi": "4Mi", "requests.memory": "1152Mi", "requests.nvidia.com/gpu": "2"})
        );
    }

    #[test]
    fn terminal_and_expired_pods_count_only_as_objects() {
        let mut p = pod("p", 1, json!({"cpu": "1"}), json!({}));
        p["status"] = json!({"phase": "Succeeded"});
        assert_eq!(printed(&usage_at("", "pods", &p, NOW)), json!({"count/pods": "1"}));
        p["status"] = json!({"phase": "Failed"});
        assert_eq!(printed(&usage_at("", "pods", &p, NOW)), json!({"count/pods": "1"}));
        p["status"] = json!({"phase": "Running"});
        // Deleted at NOW-60s with a 30s grace period: expired. With 120s: still charged.
        p["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:12:20Z");
        p["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        assert_eq!(printed(&usage_at("", "pods", &p, NOW)), json!({"count/pods": "1"}));
        p["metadata"]["deletionGracePeriodSeconds"] = json!(120);
        assert_eq!(usage_at("", "pods", &p, NOW).get("cpu").map(Quantity::to_canonical).as_deref(), Some("1"));
    }

    #[test]
    fn services_and_claims_usage() {
        let lb = json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
                                 "ports": [{"port": 80, "nodePort": 30080}, {"port": 443}]}});
        assert_eq!(
            printed(&usage("", "services", &lb)),
            json!({"count/services": "1", "services": "1", "services.loadbalancers": "1",
                          "services.nodeports": "1"})
        );
        let pvc = json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1.5Gi"}}},
                         "status": {"allocatedResources": {"storage": "2Gi"}}});
        assert_eq!(
            printed(&usage("", "persistentvolumeclaims", &pvc)),
            json!({"count/persistentvolumeclaims": "1", "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "1",
                          "gold.storageclass.storage.k8s.io/requests.storage": "2Gi", "persistentvolumeclaims": "1",
                          "requests.storage": "2Gi"})
        );
        // Fractional bytes round up; the beta annotation wins over spec.storageClassName.
        let pvc = json!({"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "slow"}},
                         "spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "100m"}}}});
        let u = usage("", "persistentvolumeclaims", &pvc);
        assert_eq!(u.get("requests.storage").map(Quantity::to_canonical).as_deref(), Some("1"));
        assert!(u.contains_key("slow.storageclass.storage.k8s.io/requests.storage"));
    }

    #[test]
    fn recompute_status_like_the_controller() {
        let rq = json!({"metadata": {"name": "q"},
            "spec": {"hard": {"pods": "10", "requests.cpu": "4", "requests.memory": "8Gi", "limits.cpu": "8",
                              "count/deployments.apps": "5", "configmaps": "3", "services.nodeports": "2",
                              "gold.storageclass.storage.k8s.io/requests.storage": "10Gi", "foo.example.com/bar": "1"}},
            "status": {"used": {"pods": "7", "foo.example.com/bar": "1", "gone": "3"}}});
        let p1 = pod("a", 1, json!({"cpu": "500m", "memory": "1Gi"}), json!({"cpu": "1"}));
        let p2 = pod("b", 1, json!({"cpu": "1", "memory": "512Mi"}), json!({}));
        let mut done = pod("c", 1, json!({"cpu": "3"}), json!({}));
        done["status"] = json!({"phase": "Succeeded"});
        let deploy = json!({"metadata": {"name": "d"}});
        let svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 1}, {"port": 2}]}});
        let pvc = json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1Gi"}}}});
        let objects: Vec<(&str, &str, &Value)> = vec![
            ("", "pods", &p1),
            ("", "pods", &p2),
            ("", "pods", &done),
            ("apps", "deployments", &deploy),
            ("", "services", &svc),
            ("", "persistentvolumeclaims", &pvc),
        ];
        let status = recompute_status_at(&rq, &objects, NOW);
        assert_eq!(status["hard"], rq["spec"]["hard"]);
        assert_eq!(
            status["used"],
            json!({
            "configmaps": "0", "count/deployments.apps": "1", "foo.example.com/bar": "1",
            "gold.storageclass.storage.k8s.io/requests.storage": "1Gi", "limits.cpu": "1", "pods": "2",
            "requests.cpu": "1500m", "requests.memory": "1536Mi", "services.nodeports": "2"})
        );
        let keys: Vec<&String> = status["used"].as_object().map(|m| m.keys().collect()).unwrap_or_default();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);

        // Scopes: a BestEffort quota counts only best-effort pods; nothing else.
        let be = json!({"spec": {"hard": {"pods": "5"}, "scopes": ["BestEffort"]}});
        let idle = pod("idle", 1, json!({}), json!({}));
        let objects: Vec<(&str, &str, &Value)> = vec![("", "pods", &p1), ("", "pods", &idle)];
        assert_eq!(recompute_status_at(&be, &objects, NOW), json!({"hard": {"pods": "5"}, "used": {"pods": "1"}}));
        assert_eq!(recompute_status_at(&json!({"spec": {}}), &objects, NOW), json!({}));
    }

    #[test]
    fn list_arithmetic_follows_go() {
        // Zero plus a binary quantity takes its format; sums print canonically.
        assert_eq!(quantity_add(&Quantity::zero(), &q("1Gi")).to_canonical(), "1Gi");
        assert_eq!(quantity_add(&q("1"), &q("100m")).to_canonical(), "1100m");
        assert_eq!(quantity_sub(&Quantity::zero(), &q("1Gi")).to_canonical(), "-1Gi");
        let d = subtract_non_negative(&list(json!({"a": "1", "b": "5"})), &list(json!({"a": "3", "c": "1"})));
        assert_eq!(printed(&d), json!({"a": "0", "b": "5", "c": "0"}));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,30}", n in any::<i64>(), flag in any::<bool>()) {
            let qty = json!(s.clone());
            let obj = json!({
                "metadata": {"name": s.clone(), "resourceVersion": s.clone(), "deletionTimestamp": s.clone(),
                             "deletionGracePeriodSeconds": n,
                             "annotations": {"volume.beta.kubernetes.io/storage-class": s.clone()}},
                "spec": {"containers": [{"name": s.clone(), "resources": {
                             "requests": {"cpu": qty.clone(), "memory": n},
                             "limits": {"cpu": n, s.clone(): qty.clone()}}}],
                         "initContainers": [{"restartPolicy": (if flag {"Always"} else {"x"}),
                                             "resources": {"requests": {"cpu": qty.clone()}}}],
                         "overhead": {"cpu": qty.clone()}, "activeDeadlineSeconds": n, "type": s.clone(),
                         "ports": [{"nodePort": n}], "resources": {"requests": {"storage": qty.clone()}},
                         "storageClassName": s.clone()},
                "status": {"phase": s.clone(), "allocatedResources": {"storage": qty.clone()},
                           "containerStatuses": [{"name": s.clone(), "resources": {"requests": {"cpu": qty.clone()}}}]}
            });
            let rq = json!({"metadata": {"name": s.clone()},
                            "spec": {"hard": {s.clone(): qty.clone(), "cpu": n}, "scopes": [s.clone()],
                                     "scopeSelector": {"matchExpressions": [
                                         {"scopeName": s.clone(), "operator": s.clone()}]}},
                            "status": {"hard": {s.clone(): qty.clone(), "pods": n}, "used": {"pods": qty.clone()}}});
            for (g, r) in [("", "pods"), ("", "services"), ("", "persistentvolumeclaims"), ("x", "y")] {
                let _ = usage_at(g, r, &obj, NOW);
                let _ = admit_at(std::slice::from_ref(&rq), g, r, &obj, Some(&obj), NOW);
                let _ = admit_at(std::slice::from_ref(&rq), g, r, &obj, None, NOW);
                let _ = matches_scopes(&rq, g, r, &obj);
            }
            let _ = recompute_status_at(&rq, &[("", "pods", &obj), ("", &s, &obj)], NOW);
            let _ = usage("", "pods", &json!(s));
        }
    }
}
