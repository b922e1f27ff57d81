//! Pod Security Admission, evaluated as the built-in `PodSecurity` admission plugin of a v1.33
//! kube-apiserver evaluates it (k8s.io/pod-security-admission: `policy/check_*.go`,
//! `policy/registry.go`, `admission/admission.go`, `api/helpers.go`). Pure functions over JSON.
//!
//! What is mirrored:
//! - the namespace labels `pod-security.kubernetes.io/{enforce,audit,warn}[-version]`, their
//!   defaults (`privileged`, `latest`: the default `PodSecurityConfiguration`), their fallbacks
//!   when invalid (enforce fails closed to `restricted`, audit and warn fail open to
//!   `privileged`, a bad version means `latest`) and the `metadata.labels[...]` field errors;
//! - every check of the baseline and restricted levels of the v1.33 registry, with their
//!   `forbiddenReason`/`forbiddenDetail` texts, run in upstream's order (baseline check IDs
//!   sorted, then restricted check IDs sorted; a restricted check drops the baseline check it
//!   overrides), over `initContainers`, `containers` and `ephemeralContainers`;
//! - policy versions: `latest` and any `v1.N` at or above the registry's newest check version
//!   (v1.32 in a v1.33 server) evaluate the newest revision of every check; older versions get
//!   the older revisions, all of which are implemented (see [`check`]);
//! - the 403 message of an enforce violation, the `Warning` text of warn mode (also used for
//!   workload templates, which are never enforced), the audit annotation text, the warnings of a
//!   namespace update that tightens the enforce level, and which pod updates are re-evaluated.
//!
//! Deliberate differences: no exemptions (usernames, namespaces, runtime classes) are
//! configured, as in a default cluster; the `UserNamespacesPodSecurityStandards` feature gate is
//! off (its v1.33 default), so `hostUsers: false` relaxes nothing; metrics and the audit log are
//! not produced (the audit text is returned for whoever wants it); the namespace pod check has
//! no 1 s timeout (only the 3000-pod cap). Objects are expected to be defaulted, as upstream sees
//! them (e.g. a host-network pod's ports carry `hostPort`, a volume without source is `emptyDir`);
//! values of the wrong JSON type are treated as absent instead of failing decoding.

use crate::field::{FieldError, go_quote};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

/// `pod-security.kubernetes.io/enforce`
pub const ENFORCE_LEVEL_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// `pod-security.kubernetes.io/enforce-version`
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
/// `pod-security.kubernetes.io/audit`
pub const AUDIT_LEVEL_LABEL: &str = "pod-security.kubernetes.io/audit";
/// `pod-security.kubernetes.io/audit-version`
pub const AUDIT_VERSION_LABEL: &str = "pod-security.kubernetes.io/audit-version";
/// `pod-security.kubernetes.io/warn`
pub const WARN_LEVEL_LABEL: &str = "pod-security.kubernetes.io/warn";
/// `pod-security.kubernetes.io/warn-version`
pub const WARN_VERSION_LABEL: &str = "pod-security.kubernetes.io/warn-version";

/// The policy version `latest`.
pub const LATEST: &str = "latest";

/// The newest `MinimumVersion` registered by any check of the v1.33 registry (sysctls, v1.32):
/// `latest` and every newer version evaluate as this one (`checkRegistry.maxVersion`).
const MAX_POLICY_MINOR: u64 = 32;

/// Upstream's `namespaceMaxPodsToCheck`.
const NAMESPACE_MAX_PODS_TO_CHECK: usize = 3000;

/// A Pod Security Standards level, ordered from least to most strict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    /// The label value: `privileged`, `baseline` or `restricted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    /// Parse a label value exactly (upstream's `ParseLevel` without its fallback).
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A level at a policy version (`"latest"` or `"v1.33"`), printed `restricted:latest`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: String,
}

impl LevelVersion {
    pub fn new(level: Level, version: impl Into<String>) -> Self {
        LevelVersion { level, version: version.into() }
    }

    /// `level:latest`
    pub fn latest(level: Level) -> Self {
        LevelVersion::new(level, LATEST)
    }
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level, self.version)
    }
}

/// The namespace's policy for the three modes (upstream's `api.Policy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespacePolicy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Default for NamespacePolicy {
    /// The default `PodSecurityConfiguration`: `privileged:latest` for every mode.
    fn default() -> Self {
        let p = LevelVersion::latest(Level::Privileged);
        NamespacePolicy { enforce: p.clone(), audit: p.clone(), warn: p }
    }
}

impl NamespacePolicy {
    /// All three modes are privileged: nothing is ever evaluated.
    #[cfg(test)]
    pub fn fully_privileged(&self) -> bool {
        self.enforce.level == Level::Privileged
            && self.audit.level == Level::Privileged
            && self.warn.level == Level::Privileged
    }
}

/// A parsed policy version: `v1.N` or `latest` (which sorts after every `v1.N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum PolicyVersion {
    Minor(u64),
    Latest,
}

/// Upstream's `ParseVersion`: `latest`, or `v1.N` matching `^v1\.([0-9]|[1-9][0-9]*)$` with `N`
/// fitting a Go `int`.
fn parse_version(s: &str) -> Option<PolicyVersion> {
    if s == LATEST {
        return Some(PolicyVersion::Latest);
    }
    let digits = s.strip_prefix("v1.")?;
    let well_formed = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits.len() == 1 || !digits.starts_with('0'));
    if !well_formed {
        return None;
    }
    let n = digits.parse::<i64>().ok()?;
    u64::try_from(n).ok().map(PolicyVersion::Minor)
}

/// The minor version whose check revisions apply: unparsable versions count as `latest`, and
/// anything newer than the registry's newest revision is clamped to it.
fn effective_minor(version: &str) -> u64 {
    match parse_version(version) {
        Some(PolicyVersion::Minor(n)) => n.min(MAX_POLICY_MINOR),
        Some(PolicyVersion::Latest) | None => MAX_POLICY_MINOR,
    }
}

/// A label value as the string Go would have decoded (labels are always strings there).
fn label_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn label_error(label: &str, value: &str, detail: &str) -> FieldError {
    FieldError::invalid(format!("metadata.labels[{label}]"), value, detail)
}

const LEVEL_ERROR: &str = "must be one of privileged, baseline, restricted";
const VERSION_ERROR: &str = r#"must be "latest" or "v1.x""#;

/// Upstream's `PolicyToEvaluate` with the default configuration: the policy to evaluate (always
/// usable, with upstream's fallbacks for invalid values) and the field errors of invalid labels,
/// in the order enforce, enforce-version, audit, audit-version, warn, warn-version, e.g.
/// `metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "foo": must be one of
/// privileged, baseline, restricted`. A namespace create or update with such errors is rejected
/// with `422 Namespace "x" is invalid: ...` (see [`namespace_label_errors`]).
pub fn namespace_policy_with_errors(ns_labels: Option<&Map<String, Value>>) -> (NamespacePolicy, Vec<FieldError>) {
    let mut policy = NamespacePolicy::default();
    let mut errs = Vec::new();
    let Some(labels) = ns_labels else {
        return (policy, errs);
    };
    let modes: [(&str, &str, &mut LevelVersion, Level); 3] = [
        (ENFORCE_LEVEL_LABEL, ENFORCE_VERSION_LABEL, &mut policy.enforce, Level::Restricted),
        (AUDIT_LEVEL_LABEL, AUDIT_VERSION_LABEL, &mut policy.audit, Level::Privileged),
        (WARN_LEVEL_LABEL, WARN_VERSION_LABEL, &mut policy.warn, Level::Privileged),
    ];
    for (level_label, version_label, lv, fallback) in modes {
        if let Some(v) = labels.get(level_label) {
            let s = label_value(v);
            match Level::parse(&s) {
                Some(level) => lv.level = level,
                None => {
                    lv.level = fallback;
                    errs.push(label_error(level_label, &s, LEVEL_ERROR));
                }
            }
        }
        if let Some(v) = labels.get(version_label) {
            let s = label_value(v);
            if parse_version(&s).is_some() {
                lv.version = s;
            } else {
                lv.version = LATEST.to_string();
                errs.push(label_error(version_label, &s, VERSION_ERROR));
            }
        }
    }
    (policy, errs)
}

/// The namespace's policy from its labels, or the aggregated message of the invalid labels
/// (`metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "foo": must be one of
/// privileged, baseline, restricted`; several errors are bracketed as Go's aggregate prints them).
#[cfg(test)]
pub fn namespace_policy(ns_labels: Option<&Map<String, Value>>) -> Result<NamespacePolicy, String> {
    let (policy, errs) = namespace_policy_with_errors(ns_labels);
    if errs.is_empty() { Ok(policy) } else { Err(crate::field::aggregate(&errs)) }
}

/// The label errors that reject a namespace write (`ValidateNamespace`): on create
/// (`old_labels` is `None`) every error; on update only when the errors differ from those the
/// stored namespace already had, so an unrelated update of an already-invalid namespace passes.
/// The caller answers `ApiError::invalid("", "Namespace", name, &errs)` when non-empty.
pub fn namespace_label_errors(
    old_labels: Option<Option<&Map<String, Value>>>,
    new_labels: Option<&Map<String, Value>>,
) -> Vec<FieldError> {
    let (_, new_errs) = namespace_policy_with_errors(new_labels);
    match old_labels {
        None => new_errs,
        Some(old) => {
            let (_, old_errs) = namespace_policy_with_errors(old);
            if !new_errs.is_empty() && (old_errs.is_empty() || old_errs != new_errs) { new_errs } else { Vec::new() }
        }
    }
}

/// Whether a namespace update must dry-run the new enforce level against the namespace's pods
/// (`ValidateNamespace`): not when the enforce policy is unchanged, not when it becomes
/// privileged, not when the version is the same and the level was relaxed or kept.
pub fn namespace_update_needs_pod_check(old: &NamespacePolicy, new: &NamespacePolicy) -> bool {
    if new.enforce == old.enforce || new.enforce.level == Level::Privileged {
        return false;
    }
    !(new.enforce.version == old.enforce.version && new.enforce.level <= old.enforce.level)
}

/// One failed check: its `forbiddenReason` (`runAsNonRoot != true`) and `forbiddenDetail`
/// (`pod or container "c" must set securityContext.runAsNonRoot=true`, may be empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

impl Violation {
    fn new(reason: impl Into<String>, detail: impl Into<String>) -> Self {
        Violation { reason: reason.into(), detail: detail.into() }
    }
}

/// The pod (template) being checked.
#[derive(Clone, Copy)]
struct Pod<'a> {
    meta: &'a Value,
    spec: &'a Value,
}

/// Every check failed by a pod (its `metadata` and `spec`) at a level and version, in upstream's
/// order. Privileged checks nothing. The check revisions by version:
/// - baseline: `appArmorProfile`, `capabilities_baseline`, `hostNamespaces`, `hostPathVolumes`,
///   `hostPorts`, `privileged`, `procMount`, `seLinuxOptions` (`container_engine_t` allowed from
///   v1.31), `seccompProfile_baseline` (the alpha annotations before v1.19, the fields after),
///   `sysctls` (safe set grown at v1.27, v1.29 and v1.32), `windowsHostProcess`;
/// - restricted adds `allowPrivilegeEscalation` (from v1.8), `capabilities_restricted` (from
///   v1.22, replacing `capabilities_baseline`), `restrictedVolumes` (replacing
///   `hostPathVolumes`), `runAsNonRoot`, `runAsUser` (from v1.23) and `seccompProfile_restricted`
///   (from v1.19, replacing `seccompProfile_baseline`); from v1.25 the allowPrivilegeEscalation,
///   capabilities and seccomp checks admit pods with `spec.os.name: windows`.
///
/// `appArmorProfile` (fields and annotations) and `restrictedVolumes` (`image` allowed) were
/// amended in place upstream, so every version gets their v1.33 behaviour, as upstream does.
pub fn check(lv: &LevelVersion, pod_metadata: &Value, pod_spec: &Value) -> Vec<Violation> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    let v = effective_minor(&lv.version);
    let p = Pod { meta: pod_metadata, spec: pod_spec };
    let restricted = lv.level == Level::Restricted;
    let mut results = vec![app_armor_profile(p)];
    if !(restricted && v >= 22) {
        results.push(capabilities_baseline(p));
    }
    results.push(host_namespaces(p));
    if !restricted {
        results.push(host_path_volumes(p));
    }
    results.push(host_ports(p));
    results.push(privileged(p));
    results.push(proc_mount(p));
    results.push(se_linux_options(p, v >= 31));
    if !(restricted && v >= 19) {
        results.push(if v >= 19 { seccomp_baseline(p) } else { seccomp_baseline_annotations(p) });
    }
    results.push(sysctls(p, v));
    results.push(windows_host_process(p));
    if restricted {
        if v >= 8 {
            results.push(allow_privilege_escalation(p, v >= 25));
        }
        if v >= 22 {
            results.push(capabilities_restricted(p, v >= 25));
        }
        results.push(restricted_volumes(p));
        results.push(run_as_non_root(p));
        if v >= 23 {
            results.push(run_as_user(p));
        }
        if v >= 19 {
            results.push(seccomp_restricted(p, v >= 25));
        }
    }
    results.into_iter().flatten().collect()
}

/// `AggregateCheckResult.ForbiddenDetail()`: `reason (detail), reason, ...`.
pub fn forbidden_detail(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| if v.detail.is_empty() { v.reason.clone() } else { format!("{} ({})", v.reason, v.detail) })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `AggregateCheckResult.ForbiddenReason()`: the reasons alone, comma-separated.
pub fn forbidden_reason(violations: &[Violation]) -> String {
    violations.iter().map(|v| v.reason.as_str()).collect::<Vec<_>>().join(", ")
}

/// The message of the 403 for a pod create/update violating the enforce level:
/// `violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (...), ...`.
/// Upstream wraps it with `apierrors.NewForbidden(pods, name, err)`, so the Status message is
/// `pods "x" is forbidden: <this>` (`ApiError::forbidden("", "pods", name, &msg)`).
pub fn enforce_message(lv: &LevelVersion, violations: &[Violation]) -> String {
    format!("violates PodSecurity {}: {}", go_quote(&lv.to_string()), forbidden_detail(violations))
}

/// The `Warning` header text of warn mode, of pod templates in workload resources, and the value
/// of the `pod-security.kubernetes.io/audit-violations` audit annotation:
/// `would violate PodSecurity "restricted:latest": ...`.
pub fn warning_message(lv: &LevelVersion, violations: &[Violation]) -> String {
    format!("would violate PodSecurity {}: {}", go_quote(&lv.to_string()), forbidden_detail(violations))
}

/// What admission says about one pod or pod template (`Admission.EvaluatePod`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodEvaluation {
    /// The enforce violation message ([`enforce_message`]) when the request must be rejected.
    pub forbidden: Option<String>,
    /// The `audit-violations` annotation text when the audit level is violated.
    pub audit: Option<String>,
    /// `Warning` headers: the warn-level violation, only when the request is not rejected.
    pub warnings: Vec<String>,
}

/// Evaluate a pod against the namespace policy: `enforce` is true for pods (create, update and
/// the `ephemeralcontainers` subresource) and false for workload templates, which only warn.
pub fn evaluate(policy: &NamespacePolicy, pod_metadata: &Value, pod_spec: &Value, enforce: bool) -> PodEvaluation {
    // Upstream evaluates each distinct level:version once per request.
    let mut cache: Vec<(LevelVersion, Vec<Violation>)> = Vec::new();
    let mut run = |lv: &LevelVersion| -> Vec<Violation> {
        if let Some((_, v)) = cache.iter().find(|(l, _)| l == lv) {
            return v.clone();
        }
        let v = check(lv, pod_metadata, pod_spec);
        cache.push((lv.clone(), v.clone()));
        v
    };
    let mut out = PodEvaluation::default();
    if enforce {
        let violations = run(&policy.enforce);
        if !violations.is_empty() {
            out.forbidden = Some(enforce_message(&policy.enforce, &violations));
        }
    }
    let audit = run(&policy.audit);
    if !audit.is_empty() {
        out.audit = Some(warning_message(&policy.audit, &audit));
    }
    if out.forbidden.is_none() {
        let warn = run(&policy.warn);
        if !warn.is_empty() {
            out.warnings.push(warning_message(&policy.warn, &warn));
        }
    }
    out
}

static NULL: Value = Value::Null;

/// Where the pod template lives in an object admission evaluates (`DefaultPodSpecExtractor`):
/// `Pod` itself, `PodTemplate` `.template`, `ReplicationController`, `ReplicaSet`, `Deployment`,
/// `StatefulSet`, `DaemonSet` and `Job` `.spec.template`, `CronJob`
/// `.spec.jobTemplate.spec.template`. `None` for other kinds and for objects without a template
/// (upstream skips those; a missing template would have no violations anyway).
pub fn pod_template_of<'a>(group: &str, kind: &str, obj: &'a Value) -> Option<(&'a Value, &'a Value)> {
    let template = match (group, kind) {
        ("", "Pod") => Some(obj),
        ("", "PodTemplate") => get(obj, "template"),
        ("", "ReplicationController")
        | ("apps", "ReplicaSet" | "Deployment" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job") => path(obj, &["spec", "template"]),
        ("batch", "CronJob") => path(obj, &["spec", "jobTemplate", "spec", "template"]),
        _ => None,
    }?;
    Some((get(template, "metadata").unwrap_or(&NULL), get(template, "spec").unwrap_or(&NULL)))
}

/// Pod subresources admission never evaluates (`ignoredPodSubresources`); every other pod
/// subresource (`ephemeralcontainers`, `resize`, ...) is evaluated like the pod.
pub fn is_ignored_pod_subresource(subresource: &str) -> bool {
    matches!(subresource, "exec" | "attach" | "binding" | "eviction" | "log" | "portforward" | "proxy" | "status")
}

/// Whether a pod update is re-evaluated (`isSignificantPodUpdate`): a container or init container
/// added or removed, an image changed, a container's seccomp alpha annotation changed, or an
/// ephemeral container added or changed. Other updates (labels, status...) are always admitted.
pub fn is_significant_pod_update(new_pod: &Value, old_pod: &Value) -> bool {
    let (new_spec, old_spec) = (get(new_pod, "spec").unwrap_or(&NULL), get(old_pod, "spec").unwrap_or(&NULL));
    let (new_ann, old_ann) = (annotations(new_pod), annotations(old_pod));
    let significant = |c: &Value, old: &Value| {
        if str_at(c, "image") != str_at(old, "image") {
            return true;
        }
        let key = format!("container.seccomp.security.alpha.kubernetes.io/{}", str_at(c, "name"));
        new_ann.and_then(|a| a.get(&key)) != old_ann.and_then(|a| a.get(&key))
    };
    for list in ["containers", "initContainers"] {
        let (new_list, old_list) = (array(new_spec, list), array(old_spec, list));
        if new_list.len() != old_list.len() || new_list.iter().zip(old_list).any(|(c, o)| significant(c, o)) {
            return true;
        }
    }
    let old_ephemeral = array(old_spec, "ephemeralContainers");
    array(new_spec, "ephemeralContainers").iter().any(|c| {
        match old_ephemeral.iter().find(|o| str_at(o, "name") == str_at(c, "name")) {
            None => true,
            Some(o) => significant(c, o),
        }
    })
}

/// The warnings of a namespace update that sets a stricter enforce level
/// (`EvaluatePodsInNamespace`), given the namespace's pods (full objects):
/// `existing pods in namespace "x" violate the new PodSecurity enforce level "restricted:latest"`
/// then one line per distinct set of violated reasons, sorted, each naming the lexically first
/// pod: `p1 (and 2 other pods): allowPrivilegeEscalation != false, unrestricted capabilities`.
/// At most 3000 pods are checked (one per controller first), with upstream's
/// `new PodSecurity enforce level only checked against the first 3000 of N existing pods`.
/// Call it when [`namespace_update_needs_pod_check`] says so.
pub fn namespace_update_warnings(lv: &LevelVersion, ns_name: &str, pods: &[Value]) -> Vec<String> {
    let prioritized = prioritize_pods(pods);
    let total = prioritized.len();
    let checked = total.min(NAMESPACE_MAX_PODS_TO_CHECK);
    let mut pod_warnings: Vec<String> = Vec::new();
    let mut counts: HashMap<String, (String, usize)> = HashMap::new();
    for pod in prioritized.iter().take(checked) {
        let violations = check(lv, get(pod, "metadata").unwrap_or(&NULL), get(pod, "spec").unwrap_or(&NULL));
        if violations.is_empty() {
            continue;
        }
        let warning = forbidden_reason(&violations);
        let name = path(pod, &["metadata", "name"]).and_then(Value::as_str).unwrap_or("");
        match counts.get_mut(&warning) {
            Some((first, count)) => {
                if name < first.as_str() {
                    *first = name.to_string();
                }
                *count += 1;
            }
            None => {
                counts.insert(warning.clone(), (name.to_string(), 1));
                pod_warnings.push(warning);
            }
        }
    }
    let mut warnings = Vec::new();
    if checked < total {
        warnings.push(format!(
            "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
        ));
    }
    if !pod_warnings.is_empty() {
        warnings.push(format!(
            "existing pods in namespace {} violate the new PodSecurity enforce level {}",
            go_quote(ns_name),
            go_quote(&lv.to_string())
        ));
    }
    let mut decorated: Vec<String> = pod_warnings
        .into_iter()
        .map(|w| match counts.get(&w) {
            Some((name, 1)) => format!("{name}: {w}"),
            Some((name, 2)) => format!("{name} (and 1 other pod): {w}"),
            Some((name, n)) => format!("{name} (and {} other pods): {w}", n.saturating_sub(1)),
            None => w,
        })
        .collect();
    decorated.sort();
    warnings.extend(decorated);
    warnings
}

/// `prioritizePods`: the first pod of every controller (and every unowned pod) in list order,
/// then the other replicas, so the 3000-pod cap covers as many controllers as possible.
fn prioritize_pods(pods: &[Value]) -> Vec<&Value> {
    let mut first = Vec::new();
    let mut duplicates = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for pod in pods {
        let controller_uid = array_at(pod, &["metadata", "ownerReferences"])
            .iter()
            .find(|r| get(r, "controller").and_then(Value::as_bool) == Some(true))
            .map(|r| str_at(r, "uid"));
        match controller_uid {
            Some(uid) if !seen.insert(uid) => duplicates.push(pod),
            _ => first.push(pod),
        }
    }
    first.extend(duplicates);
    first
}

// ---------------------------------------------------------------------------------------------
// JSON navigation: a missing key, a JSON null and a value of the wrong type are all "unset".

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_object().and_then(|o| o.get(key)).filter(|x| !x.is_null())
}

fn path<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| get(cur, k))
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    get(v, key).and_then(Value::as_str).unwrap_or("")
}

fn bool_at(v: &Value, keys: &[&str]) -> Option<bool> {
    path(v, keys).and_then(Value::as_bool)
}

fn int_at(v: &Value, keys: &[&str]) -> Option<i64> {
    let x = path(v, keys)?;
    x.as_i64().or_else(|| x.as_f64().map(|f| f as i64))
}

fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    get(v, key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn array_at<'a>(v: &'a Value, keys: &[&str]) -> &'a [Value] {
    path(v, keys).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn annotations(obj: &Value) -> Option<&Map<String, Value>> {
    path(obj, &["metadata", "annotations"]).and_then(Value::as_object)
}

/// `visitContainers`: init containers, containers, then ephemeral containers.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    array(spec, "initContainers").iter().chain(array(spec, "containers")).chain(array(spec, "ephemeralContainers"))
}

fn name(c: &Value) -> &str {
    str_at(c, "name")
}

fn is_windows(p: Pod<'_>) -> bool {
    path(p.spec, &["os", "name"]).and_then(Value::as_str) == Some("windows")
}

/// `joinQuote`: `"a", "b"` (no escaping, as upstream).
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    format!("\"{}\"", items.iter().map(AsRef::as_ref).collect::<Vec<_>>().join("\", \""))
}

fn pluralize<'s>(singular: &'s str, plural: &'s str, count: usize) -> &'s str {
    if count == 1 { singular } else { plural }
}

/// `container "a"` / `containers "a", "b"`
fn containers_phrase(names: &[String]) -> String {
    format!("{} {}", pluralize("container", "containers", names.len()), join_quote(names))
}

fn sorted(set: BTreeSet<String>) -> Vec<String> {
    set.into_iter().collect()
}

// ---------------------------------------------------------------------------------------------
// Baseline checks.

/// `appArmorProfile` v1.0 (as amended in v1.30): `appArmorProfile.type` of the pod and of every
/// container must be `RuntimeDefault` or `Localhost`; the beta annotations
/// `container.apparmor.security.beta.kubernetes.io/*` must be empty, `runtime/default` or
/// `localhost/*`.
fn app_armor_profile(p: Pod<'_>) -> Option<Violation> {
    const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
    let allowed_type = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut bad_setters: Vec<String> = Vec::new();
    let mut bad_values = BTreeSet::new();
    if let Some(profile) = path(p.spec, &["securityContext", "appArmorProfile"]) {
        let t = str_at(profile, "type");
        if !allowed_type(t) {
            bad_setters.push("pod".into());
            bad_values.insert(t.to_string());
        }
    }
    let mut bad_containers = Vec::new();
    for c in containers(p.spec) {
        if let Some(profile) = path(c, &["securityContext", "appArmorProfile"]) {
            let t = str_at(profile, "type");
            if !allowed_type(t) {
                bad_containers.push(name(c).to_string());
                bad_values.insert(t.to_string());
            }
        }
    }
    if !bad_containers.is_empty() {
        bad_setters.push(containers_phrase(&bad_containers));
    }
    let mut forbidden_annotations: Vec<String> = get(p.meta, "annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .map(|(k, v)| (k, label_value(v)))
        .filter(|(_, v)| !(v.is_empty() || v == "runtime/default" || v.starts_with("localhost/")))
        .map(|(k, v)| format!("{k}={}", go_quote(&v)))
        .collect();
    let mut bad_value_list = sorted(bad_values);
    if !forbidden_annotations.is_empty() {
        forbidden_annotations.sort();
        bad_setters.push(pluralize("annotation", "annotations", forbidden_annotations.len()).into());
        bad_value_list.extend(forbidden_annotations);
    }
    if bad_setters.is_empty() {
        return None;
    }
    Some(Violation::new(
        pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", bad_value_list.len()),
        format!("{} must not set AppArmor profile type to {}", bad_setters.join(" and "), join_quote(&bad_value_list)),
    ))
}

/// `capabilities_baseline` v1.0: `capabilities.add` may only hold the default set.
fn capabilities_baseline(p: Pod<'_>) -> Option<Violation> {
    const ALLOWED: [&str; 13] = [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ];
    let mut bad_containers = Vec::new();
    let mut non_default = BTreeSet::new();
    for c in containers(p.spec) {
        let Some(caps) = path(c, &["securityContext", "capabilities"]) else { continue };
        let mut valid = true;
        for cap in array(caps, "add") {
            let cap = label_value(cap);
            if !ALLOWED.contains(&cap.as_str()) {
                valid = false;
                non_default.insert(cap);
            }
        }
        if !valid {
            bad_containers.push(name(c).to_string());
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    Some(Violation::new(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad_containers),
            join_quote(&sorted(non_default))
        ),
    ))
}

/// `hostNamespaces` v1.0: `hostNetwork`, `hostPID`, `hostIPC` must not be true.
fn host_namespaces(p: Pod<'_>) -> Option<Violation> {
    let set: Vec<&str> =
        [("hostNetwork", "hostNetwork=true"), ("hostPID", "hostPID=true"), ("hostIPC", "hostIPC=true")]
            .into_iter()
            .filter(|(k, _)| bool_at(p.spec, &[k]) == Some(true))
            .map(|(_, text)| text)
            .collect();
    if set.is_empty() { None } else { Some(Violation::new("host namespaces", set.join(", "))) }
}

/// `hostPathVolumes` v1.0 (baseline only; restricted uses `restrictedVolumes`).
fn host_path_volumes(p: Pod<'_>) -> Option<Violation> {
    let names: Vec<&str> = array(p.spec, "volumes").iter().filter(|v| get(v, "hostPath").is_some()).map(name).collect();
    if names.is_empty() {
        return None;
    }
    Some(Violation::new(
        "hostPath volumes",
        format!("{} {}", pluralize("volume", "volumes", names.len()), join_quote(&names)),
    ))
}

/// `hostPorts` v1.0: no container port may set a non-zero `hostPort`.
fn host_ports(p: Pod<'_>) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(p.spec) {
        let mut valid = true;
        for port in array(c, "ports") {
            if let Some(h) = int_at(port, &["hostPort"]).filter(|h| *h != 0) {
                valid = false;
                ports.insert(h.to_string());
            }
        }
        if !valid {
            bad_containers.push(name(c).to_string());
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    Some(Violation::new(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad_containers),
            pluralize("uses", "use", bad_containers.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            sorted(ports).join(", ")
        ),
    ))
}

/// `privileged` v1.0: `securityContext.privileged` must not be true.
fn privileged(p: Pod<'_>) -> Option<Violation> {
    let bad: Vec<String> = containers(p.spec)
        .filter(|c| bool_at(c, &["securityContext", "privileged"]) == Some(true))
        .map(|c| name(c).to_string())
        .collect();
    if bad.is_empty() {
        return None;
    }
    Some(Violation::new(
        "privileged",
        format!("{} must not set securityContext.privileged=true", containers_phrase(&bad)),
    ))
}

/// `procMount` v1.0: `securityContext.procMount` must be unset or `Default`.
fn proc_mount(p: Pod<'_>) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(p.spec) {
        if let Some(pm) = path(c, &["securityContext", "procMount"]) {
            let pm = label_value(pm);
            if pm != "Default" {
                bad.push(name(c).to_string());
                types.insert(pm);
            }
        }
    }
    if bad.is_empty() {
        return None;
    }
    Some(Violation::new(
        "procMount",
        format!("{} must not set securityContext.procMount to {}", containers_phrase(&bad), join_quote(&sorted(types))),
    ))
}

/// `seLinuxOptions` v1.0 / v1.31: the type must be empty, `container_t`, `container_init_t`,
/// `container_kvm_t` (or `container_engine_t` from v1.31); user and role must be empty.
fn se_linux_options(p: Pod<'_>, allow_engine: bool) -> Option<Violation> {
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |opts: &Value| {
        let t = str_at(opts, "type");
        let type_ok = matches!(t, "" | "container_t" | "container_init_t" | "container_kvm_t")
            || (allow_engine && t == "container_engine_t");
        if !type_ok {
            bad_types.insert(t.to_string());
        }
        let user = !str_at(opts, "user").is_empty();
        let role = !str_at(opts, "role").is_empty();
        set_user |= user;
        set_role |= role;
        type_ok && !user && !role
    };
    let mut bad_setters: Vec<String> = Vec::new();
    if let Some(opts) = path(p.spec, &["securityContext", "seLinuxOptions"])
        && !valid(opts)
    {
        bad_setters.push("pod".into());
    }
    let mut bad_containers = Vec::new();
    for c in containers(p.spec) {
        if let Some(opts) = path(c, &["securityContext", "seLinuxOptions"])
            && !valid(opts)
        {
            bad_containers.push(name(c).to_string());
        }
    }
    if !bad_containers.is_empty() {
        bad_setters.push(containers_phrase(&bad_containers));
    }
    if bad_setters.is_empty() {
        return None;
    }
    let mut bad_data = Vec::new();
    if !bad_types.is_empty() {
        bad_data.push(format!("{} {}", pluralize("type", "types", bad_types.len()), join_quote(&sorted(bad_types))));
    }
    if set_user {
        bad_data.push("user may not be set".to_string());
    }
    if set_role {
        bad_data.push("role may not be set".to_string());
    }
    Some(Violation::new(
        "seLinuxOptions",
        format!("{} set forbidden securityContext.seLinuxOptions: {}", bad_setters.join(" and "), bad_data.join("; ")),
    ))
}

fn valid_seccomp_type(t: &str) -> bool {
    matches!(t, "Localhost" | "RuntimeDefault")
}

/// `seccompProfile_baseline` v1.0 (policy versions before v1.19): the alpha annotations
/// `seccomp.security.alpha.kubernetes.io/pod` and `container.seccomp.security.alpha.kubernetes.io/<name>`
/// must be `runtime/default`, `docker/default` or `localhost/*` when present.
fn seccomp_baseline_annotations(p: Pod<'_>) -> Option<Violation> {
    const POD_KEY: &str = "seccomp.security.alpha.kubernetes.io/pod";
    let valid = |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let ann = get(p.meta, "annotations").and_then(Value::as_object);
    let mut forbidden = BTreeSet::new();
    let mut check_key = |key: &str| {
        if let Some(v) = ann.and_then(|a| a.get(key)) {
            let v = label_value(v);
            if !valid(&v) {
                forbidden.insert(format!("{key}={}", go_quote(&v)));
            }
        }
    };
    check_key(POD_KEY);
    for c in containers(p.spec) {
        check_key(&format!("container.seccomp.security.alpha.kubernetes.io/{}", name(c)));
    }
    if forbidden.is_empty() {
        return None;
    }
    Some(Violation::new(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", forbidden.len()),
            sorted(forbidden).join(", ")
        ),
    ))
}

/// Pod-level and container-level `seccompProfile.type` values that are set but not
/// `RuntimeDefault`/`Localhost`: (explicit bad setters, bad values, containers without a profile).
fn seccomp_setters(p: Pod<'_>) -> (Vec<String>, BTreeSet<String>, bool, Vec<String>) {
    let mut bad_setters: Vec<String> = Vec::new();
    let mut bad_values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(profile) = path(p.spec, &["securityContext", "seccompProfile"]) {
        let t = str_at(profile, "type");
        if valid_seccomp_type(t) {
            pod_set = true;
        } else {
            bad_setters.push("pod".into());
            bad_values.insert(t.to_string());
        }
    }
    let mut explicitly_bad = Vec::new();
    let mut unset = Vec::new();
    for c in containers(p.spec) {
        match path(c, &["securityContext", "seccompProfile"]) {
            Some(profile) => {
                let t = str_at(profile, "type");
                if !valid_seccomp_type(t) {
                    explicitly_bad.push(name(c).to_string());
                    bad_values.insert(t.to_string());
                }
            }
            None => unset.push(name(c).to_string()),
        }
    }
    if !explicitly_bad.is_empty() {
        bad_setters.push(containers_phrase(&explicitly_bad));
    }
    (bad_setters, bad_values, pod_set, unset)
}

fn seccomp_explicit_violation(bad_setters: &[String], bad_values: BTreeSet<String>) -> Violation {
    Violation::new(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            bad_setters.join(" and "),
            join_quote(&sorted(bad_values))
        ),
    )
}

/// `seccompProfile_baseline` v1.19: a set `seccompProfile.type` must be `RuntimeDefault` or
/// `Localhost` (unset is fine).
fn seccomp_baseline(p: Pod<'_>) -> Option<Violation> {
    let (bad_setters, bad_values, _, _) = seccomp_setters(p);
    if bad_setters.is_empty() { None } else { Some(seccomp_explicit_violation(&bad_setters, bad_values)) }
}

/// `sysctls` v1.0 / v1.27 / v1.29 / v1.32: only the safe sysctls, listed in spec order.
fn sysctls(p: Pod<'_>, minor: u64) -> Option<Violation> {
    const V1_0: [&str; 5] = [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    ];
    const V1_27: [&str; 1] = ["net.ipv4.ip_local_reserved_ports"];
    const V1_29: [&str; 4] = [
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    ];
    const V1_32: [&str; 2] = ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];
    let allowed = |n: &str| {
        V1_0.contains(&n)
            || (minor >= 27 && V1_27.contains(&n))
            || (minor >= 29 && V1_29.contains(&n))
            || (minor >= 32 && V1_32.contains(&n))
    };
    let forbidden: Vec<&str> =
        array_at(p.spec, &["securityContext", "sysctls"]).iter().map(name).filter(|n| !allowed(n)).collect();
    if forbidden.is_empty() { None } else { Some(Violation::new("forbidden sysctls", forbidden.join(", "))) }
}

/// `windowsHostProcess` v1.0: `windowsOptions.hostProcess` must not be true, pod or container.
fn windows_host_process(p: Pod<'_>) -> Option<Violation> {
    let host_process = |v: &Value| bool_at(v, &["securityContext", "windowsOptions", "hostProcess"]) == Some(true);
    let bad: Vec<String> = containers(p.spec).filter(|c| host_process(c)).map(|c| name(c).to_string()).collect();
    let mut setters: Vec<String> = Vec::new();
    if host_process(p.spec) {
        setters.push("pod".into());
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    Some(Violation::new(
        "hostProcess",
        format!("{} must not set securityContext.windowsOptions.hostProcess=true", setters.join(" and ")),
    ))
}

// ---------------------------------------------------------------------------------------------
// Restricted checks.

/// `allowPrivilegeEscalation` v1.8 / v1.25 (Windows pods exempt): every container must set
/// `allowPrivilegeEscalation: false`.
fn allow_privilege_escalation(p: Pod<'_>, windows_exempt: bool) -> Option<Violation> {
    if windows_exempt && is_windows(p) {
        return None;
    }
    let bad: Vec<String> = containers(p.spec)
        .filter(|c| bool_at(c, &["securityContext", "allowPrivilegeEscalation"]) != Some(false))
        .map(|c| name(c).to_string())
        .collect();
    if bad.is_empty() {
        return None;
    }
    Some(Violation::new(
        "allowPrivilegeEscalation != false",
        format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_phrase(&bad)),
    ))
}

/// `capabilities_restricted` v1.22 / v1.25 (Windows pods exempt): every container must drop
/// `ALL` and may only add `NET_BIND_SERVICE`.
fn capabilities_restricted(p: Pod<'_>, windows_exempt: bool) -> Option<Violation> {
    if windows_exempt && is_windows(p) {
        return None;
    }
    let mut missing_drop_all = Vec::new();
    let mut adding_forbidden = Vec::new();
    let mut forbidden_caps = BTreeSet::new();
    for c in containers(p.spec) {
        let Some(caps) = path(c, &["securityContext", "capabilities"]) else {
            missing_drop_all.push(name(c).to_string());
            continue;
        };
        if !array(caps, "drop").iter().any(|d| d.as_str() == Some("ALL")) {
            missing_drop_all.push(name(c).to_string());
        }
        let mut added_forbidden = false;
        for cap in array(caps, "add") {
            let cap = label_value(cap);
            if cap != "NET_BIND_SERVICE" {
                added_forbidden = true;
                forbidden_caps.insert(cap);
            }
        }
        if added_forbidden {
            adding_forbidden.push(name(c).to_string());
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            r#"{} must set securityContext.capabilities.drop=["ALL"]"#,
            containers_phrase(&missing_drop_all)
        ));
    }
    if !adding_forbidden.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding_forbidden),
            join_quote(&sorted(forbidden_caps))
        ));
    }
    if details.is_empty() { None } else { Some(Violation::new("unrestricted capabilities", details.join("; "))) }
}

/// `restrictedVolumes` v1.0 (as amended in v1.33): only configMap, csi, downwardAPI, emptyDir,
/// ephemeral, image, persistentVolumeClaim, projected and secret volumes.
fn restricted_volumes(p: Pod<'_>) -> Option<Violation> {
    const ALLOWED: [&str; 9] = [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    // In the order of upstream's type switch.
    const RESTRICTED: [&str; 21] = [
        "hostPath",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "nfs",
        "iscsi",
        "glusterfs",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "fc",
        "azureFile",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "portworxVolume",
        "scaleIO",
        "storageos",
    ];
    let mut bad_volumes = Vec::new();
    let mut bad_types = BTreeSet::new();
    for volume in array(p.spec, "volumes") {
        if ALLOWED.iter().any(|k| get(volume, k).is_some()) {
            continue;
        }
        bad_volumes.push(name(volume));
        let kind = RESTRICTED.iter().find(|k| get(volume, k).is_some()).copied().unwrap_or("unknown");
        bad_types.insert(kind.to_string());
    }
    if bad_volumes.is_empty() {
        return None;
    }
    Some(Violation::new(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad_volumes.len()),
            join_quote(&bad_volumes),
            pluralize("uses", "use", bad_volumes.len()),
            pluralize("restricted volume type", "restricted volume types", bad_types.len()),
            join_quote(&sorted(bad_types))
        ),
    ))
}

/// `runAsNonRoot` v1.0: `runAsNonRoot: true` at pod level (containers may then leave it unset)
/// or on every container; an explicit `false` anywhere is reported first.
fn run_as_non_root(p: Pod<'_>) -> Option<Violation> {
    let mut bad_setters: Vec<String> = Vec::new();
    let mut pod_non_root = false;
    match bool_at(p.spec, &["securityContext", "runAsNonRoot"]) {
        Some(false) => bad_setters.push("pod".into()),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let mut explicitly_bad = Vec::new();
    let mut implicitly_bad = Vec::new();
    for c in containers(p.spec) {
        match bool_at(c, &["securityContext", "runAsNonRoot"]) {
            Some(false) => explicitly_bad.push(name(c).to_string()),
            Some(true) => {}
            None if !pod_non_root => implicitly_bad.push(name(c).to_string()),
            None => {}
        }
    }
    if !explicitly_bad.is_empty() {
        bad_setters.push(containers_phrase(&explicitly_bad));
    }
    if !bad_setters.is_empty() {
        return Some(Violation::new(
            "runAsNonRoot != true",
            format!("{} must not set securityContext.runAsNonRoot=false", bad_setters.join(" and ")),
        ));
    }
    if !implicitly_bad.is_empty() {
        return Some(Violation::new(
            "runAsNonRoot != true",
            format!("pod or {} must set securityContext.runAsNonRoot=true", containers_phrase(&implicitly_bad)),
        ));
    }
    None
}

/// `runAsUser` v1.23: neither the pod nor a container may set `runAsUser: 0`.
fn run_as_user(p: Pod<'_>) -> Option<Violation> {
    let is_root = |v: &Value| int_at(v, &["securityContext", "runAsUser"]) == Some(0);
    let mut bad_setters: Vec<String> = Vec::new();
    if is_root(p.spec) {
        bad_setters.push("pod".into());
    }
    let bad: Vec<String> = containers(p.spec).filter(|c| is_root(c)).map(|c| name(c).to_string()).collect();
    if !bad.is_empty() {
        bad_setters.push(containers_phrase(&bad));
    }
    if bad_setters.is_empty() {
        return None;
    }
    Some(Violation::new("runAsUser=0", format!("{} must not set runAsUser=0", bad_setters.join(" and "))))
}

/// `seccompProfile_restricted` v1.19 / v1.25 (Windows pods exempt): `seccompProfile.type` must
/// be `RuntimeDefault` or `Localhost`, set at pod level (containers may then leave it unset) or
/// on every container.
fn seccomp_restricted(p: Pod<'_>, windows_exempt: bool) -> Option<Violation> {
    if windows_exempt && is_windows(p) {
        return None;
    }
    let (bad_setters, bad_values, pod_set, unset) = seccomp_setters(p);
    if !bad_setters.is_empty() {
        return Some(seccomp_explicit_violation(&bad_setters, bad_values));
    }
    if !pod_set && !unset.is_empty() {
        return Some(Violation::new(
            "seccompProfile",
            format!(
                r#"pod or {} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
                containers_phrase(&unset)
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const AA: &str = "container.apparmor.security.beta.kubernetes.io/";

    fn lv(level: Level, version: &str) -> LevelVersion {
        LevelVersion::new(level, version)
    }

    fn restricted() -> LevelVersion {
        LevelVersion::latest(Level::Restricted)
    }

    fn baseline() -> LevelVersion {
        LevelVersion::latest(Level::Baseline)
    }

    /// Run one check function over a pod built from metadata and spec.
    fn run(f: impl Fn(Pod<'_>) -> Option<Violation>, meta: Value, spec: Value) -> Option<(String, String)> {
        f(Pod { meta: &meta, spec: &spec }).map(|v| (v.reason, v.detail))
    }

    fn forbidden(got: Option<(String, String)>, reason: &str, detail: &str) {
        assert_eq!(got, Some((reason.to_string(), detail.to_string())));
    }

    fn c(name: &str, sc: Value) -> Value {
        json!({"name": name, "securityContext": sc})
    }

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    // ---- whole-pod results (what a user of the apiserver sees) ----

    #[test]
    fn root_pod_without_security_context_in_restricted_namespace() {
        let spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
        let v = check(&restricted(), &json!({"name": "x"}), &spec);
        assert_eq!(
            enforce_message(&restricted(), &v),
            r#"violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
        );
        assert!(check(&baseline(), &json!({}), &spec).is_empty());
        assert!(check(&LevelVersion::latest(Level::Privileged), &json!({}), &spec).is_empty());
    }

    fn compliant_spec() -> Value {
        json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [{"name": "init", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
            "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
                "securityContext": {"allowPrivilegeEscalation": false, "runAsUser": 1000,
                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
            "volumes": [
                {"name": "a", "emptyDir": {}}, {"name": "b", "configMap": {"name": "x"}},
                {"name": "c", "secret": {"secretName": "s"}}, {"name": "d", "projected": {"sources": []}},
                {"name": "e", "persistentVolumeClaim": {"claimName": "p"}}, {"name": "f", "downwardAPI": {}},
                {"name": "g", "csi": {"driver": "d"}}, {"name": "h", "ephemeral": {}},
                {"name": "i", "image": {"reference": "r"}}
            ]
        })
    }

    #[test]
    fn compliant_restricted_pod_passes_every_level_and_version() {
        for version in ["latest", "v1.33", "v1.32", "v1.25", "v1.22", "v1.19", "v1.8", "v1.0", "v1.99"] {
            for level in [Level::Baseline, Level::Restricted] {
                assert!(check(&lv(level, version), &json!({}), &compliant_spec()).is_empty(), "{level}:{version}");
            }
        }
    }

    #[test]
    fn baseline_allows_what_restricted_forbids() {
        let spec = json!({
            "securityContext": {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}},
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": true,
                "runAsNonRoot": false, "capabilities": {"add": ["CHOWN", "NET_RAW"]}}}],
            "volumes": [{"name": "nfs", "nfs": {"server": "s", "path": "/"}}]
        });
        let r = check(&restricted(), &json!({}), &spec);
        assert_eq!(
            forbidden_detail(&r),
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]; container "c" must not include "CHOWN", "NET_RAW" in securityContext.capabilities.add), restricted volume types (volume "nfs" uses restricted volume type "nfs"), runAsNonRoot != true (container "c" must not set securityContext.runAsNonRoot=false), runAsUser=0 (pod must not set runAsUser=0), seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#
        );
        // Baseline only objects to NET_RAW and the Unconfined seccomp profile.
        let b = check(&baseline(), &json!({}), &spec);
        assert_eq!(
            forbidden_detail(&b),
            r#"non-default capabilities (container "c" must not include "NET_RAW" in securityContext.capabilities.add), seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#
        );
        // Without those two, baseline admits the pod restricted rejects.
        let mut relaxed = spec.clone();
        relaxed["securityContext"]["seccompProfile"] = json!({"type": "RuntimeDefault"});
        relaxed["containers"][0]["securityContext"]["capabilities"] = json!({"add": ["CHOWN"]});
        assert!(check(&baseline(), &json!({}), &relaxed).is_empty());
        assert!(!check(&restricted(), &json!({}), &relaxed).is_empty());
    }

    #[test]
    fn baseline_message_for_a_host_network_pod() {
        let spec = json!({"hostNetwork": true, "containers": [{"name": "nginx",
            "ports": [{"containerPort": 80, "hostPort": 80}],
            "securityContext": {"privileged": true}}],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}]});
        let v = check(&baseline(), &json!({}), &spec);
        assert_eq!(
            enforce_message(&baseline(), &v),
            r#"violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), hostPath volumes (volume "root"), hostPort (container "nginx" uses hostPort 80), privileged (container "nginx" must not set securityContext.privileged=true)"#
        );
        assert_eq!(
            warning_message(&lv(Level::Baseline, "v1.30"), &v),
            r#"would violate PodSecurity "baseline:v1.30": host namespaces (hostNetwork=true), hostPath volumes (volume "root"), hostPort (container "nginx" uses hostPort 80), privileged (container "nginx" must not set securityContext.privileged=true)"#
        );
        // Restricted reports the hostPath volume through restrictedVolumes instead.
        let r = check(&restricted(), &json!({}), &spec);
        let reasons = forbidden_reason(&r);
        assert!(!reasons.contains("hostPath volumes"), "{reasons}");
        assert!(reasons.contains("restricted volume types"), "{reasons}");
    }

    #[test]
    fn every_container_kind_is_visited_in_upstream_order() {
        let spec = json!({
            "containers": [{"name": "app", "securityContext": {"privileged": true}}],
            "initContainers": [{"name": "init", "securityContext": {"privileged": true}}],
            "ephemeralContainers": [{"name": "debug", "securityContext": {"privileged": true}}]
        });
        forbidden(
            run(privileged, json!({}), spec),
            "privileged",
            r#"containers "init", "app", "debug" must not set securityContext.privileged=true"#,
        );
    }

    // ---- policy versions ----

    #[test]
    fn versions_select_check_revisions() {
        let sysctl = json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"},
            {"name": "net.ipv4.tcp_keepalive_time", "value": "1"}, {"name": "net.ipv4.ip_local_reserved_ports"}]}});
        let reasons = |l: LevelVersion, spec: &Value| forbidden_detail(&check(&l, &json!({}), spec));
        assert_eq!(reasons(baseline(), &sysctl), "");
        assert_eq!(reasons(lv(Level::Baseline, "v1.31"), &sysctl), "forbidden sysctls (net.ipv4.tcp_rmem)");
        assert_eq!(
            reasons(lv(Level::Baseline, "v1.28"), &sysctl),
            "forbidden sysctls (net.ipv4.tcp_rmem, net.ipv4.tcp_keepalive_time)"
        );
        assert_eq!(
            reasons(lv(Level::Baseline, "v1.26"), &sysctl),
            "forbidden sysctls (net.ipv4.tcp_rmem, net.ipv4.tcp_keepalive_time, net.ipv4.ip_local_reserved_ports)"
        );

        let engine = json!({"securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}});
        assert_eq!(reasons(lv(Level::Baseline, "v1.31"), &engine), "");
        assert_eq!(
            reasons(lv(Level::Baseline, "v1.30"), &engine),
            r#"seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type "container_engine_t")"#
        );

        // Windows pods are exempt from three restricted checks from v1.25 on.
        let windows = json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true},
            "containers": [{"name": "w"}]});
        assert_eq!(reasons(restricted(), &windows), "");
        assert_eq!(
            reasons(lv(Level::Restricted, "v1.24"), &windows),
            r#"allowPrivilegeEscalation != false (container "w" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "w" must set securityContext.capabilities.drop=["ALL"]), seccompProfile (pod or container "w" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
        );

        // Before v1.22 restricted used the baseline capabilities check; before v1.23 there was
        // no runAsUser check; before v1.19 seccomp meant the alpha annotations; before v1.8 there
        // was no allowPrivilegeEscalation check.
        let old = json!({"securityContext": {"runAsNonRoot": true, "runAsUser": 0},
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"add": ["SYS_ADMIN"]}}}]});
        let meta = json!({"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}});
        assert_eq!(
            forbidden_detail(&check(&lv(Level::Restricted, "v1.18"), &meta, &old)),
            r#"non-default capabilities (container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add), seccompProfile (forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined")"#
        );
        assert_eq!(
            forbidden_detail(&check(&lv(Level::Restricted, "v1.22"), &meta, &old)),
            r#"unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]; container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
        );
        let no_ape = json!({"securityContext": {"runAsNonRoot": true}, "containers": [{"name": "c"}]});
        assert_eq!(reasons(lv(Level::Restricted, "v1.7"), &no_ape), "");
        assert_eq!(
            reasons(lv(Level::Restricted, "v1.8"), &no_ape),
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false)"#
        );
        // Newer than the registry, or unparsable, means the newest revisions.
        assert_eq!(effective_minor("v1.40"), MAX_POLICY_MINOR);
        assert_eq!(effective_minor("bogus"), MAX_POLICY_MINOR);
        assert_eq!(effective_minor("v1.25"), 25);
    }

    // ---- namespace labels ----

    #[test]
    fn namespace_policy_defaults_and_values() {
        assert_eq!(namespace_policy(None), Ok(NamespacePolicy::default()));
        assert!(NamespacePolicy::default().fully_privileged());
        let l = labels(json!({
            ENFORCE_LEVEL_LABEL: "restricted", ENFORCE_VERSION_LABEL: "v1.33",
            WARN_LEVEL_LABEL: "baseline", "app": "x"
        }));
        let p = namespace_policy(Some(&l)).unwrap_or_default();
        assert_eq!(p.enforce, lv(Level::Restricted, "v1.33"));
        assert_eq!(p.audit, LevelVersion::latest(Level::Privileged));
        assert_eq!(p.warn, baseline());
        assert_eq!(p.enforce.to_string(), "restricted:v1.33");
    }

    #[test]
    fn namespace_policy_errors_and_fallbacks() {
        let l = labels(json!({ENFORCE_LEVEL_LABEL: "foo"}));
        assert_eq!(
            namespace_policy(Some(&l)),
            Err(r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "foo": must be one of privileged, baseline, restricted"#.to_string())
        );
        let l = labels(json!({
            ENFORCE_LEVEL_LABEL: "Restricted", ENFORCE_VERSION_LABEL: "v1.033",
            AUDIT_LEVEL_LABEL: "", WARN_VERSION_LABEL: "1.25"
        }));
        let (p, errs) = namespace_policy_with_errors(Some(&l));
        let texts: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "Restricted": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: "v1.033": must be "latest" or "v1.x""#,
                r#"metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: "": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: "1.25": must be "latest" or "v1.x""#,
            ]
        );
        // Enforce fails closed, audit and warn fail open, versions fall back to latest.
        assert_eq!(p.enforce, restricted());
        assert_eq!(p.audit.level, Level::Privileged);
        assert_eq!(p.warn, LevelVersion::latest(Level::Privileged));
        match namespace_policy(Some(&l)) {
            Err(msg) => assert!(msg.starts_with("[metadata.labels[pod-security.kubernetes.io/enforce]: "), "{msg}"),
            Ok(p) => panic!("expected an error, got {p:?}"),
        }
        for good in ["latest", "v1.0", "v1.9", "v1.10", "v1.33"] {
            assert!(parse_version(good).is_some(), "{good}");
        }
        for bad in ["", "v1.", "v1.01", "v2.1", "V1.1", "v1.1 ", "v1.-1", "v1.99999999999999999999", "Latest"] {
            assert!(parse_version(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn namespace_label_errors_on_create_and_update() {
        let bad = labels(json!({ENFORCE_LEVEL_LABEL: "foo"}));
        let worse = labels(json!({ENFORCE_LEVEL_LABEL: "bar"}));
        let good = labels(json!({ENFORCE_LEVEL_LABEL: "baseline"}));
        assert_eq!(namespace_label_errors(None, Some(&bad)).len(), 1);
        assert!(namespace_label_errors(None, Some(&good)).is_empty());
        assert_eq!(namespace_label_errors(Some(Some(&good)), Some(&bad)).len(), 1);
        assert!(namespace_label_errors(Some(Some(&bad)), Some(&bad)).is_empty());
        assert_eq!(namespace_label_errors(Some(Some(&bad)), Some(&worse)).len(), 1);
        assert!(namespace_label_errors(Some(Some(&bad)), Some(&good)).is_empty());
    }

    #[test]
    fn namespace_update_pod_check_decision() {
        let pol = |l: Level, v: &str| NamespacePolicy { enforce: lv(l, v), ..NamespacePolicy::default() };
        let yes = |o: &NamespacePolicy, n: &NamespacePolicy| namespace_update_needs_pod_check(o, n);
        assert!(yes(&pol(Level::Privileged, "latest"), &pol(Level::Restricted, "latest")));
        assert!(yes(&pol(Level::Baseline, "latest"), &pol(Level::Restricted, "latest")));
        assert!(!yes(&pol(Level::Restricted, "latest"), &pol(Level::Restricted, "latest")));
        assert!(!yes(&pol(Level::Restricted, "latest"), &pol(Level::Baseline, "latest")));
        assert!(!yes(&pol(Level::Baseline, "latest"), &pol(Level::Privileged, "latest")));
        assert!(yes(&pol(Level::Restricted, "v1.20"), &pol(Level::Baseline, "latest")));
    }

    #[test]
    fn namespace_update_warnings_group_pods_by_reasons() {
        let pod = |n: &str, spec: Value| json!({"metadata": {"name": n}, "spec": spec});
        let root = json!({"containers": [{"name": "c"}]});
        let privileged_spec = json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}]});
        let pods = vec![
            pod("web-2", root.clone()),
            pod("web-1", root.clone()),
            pod("web-3", root),
            pod("priv", privileged_spec),
            pod("ok", compliant_spec()),
        ];
        assert_eq!(
            namespace_update_warnings(&restricted(), "team", &pods),
            [
                r#"existing pods in namespace "team" violate the new PodSecurity enforce level "restricted:latest""#,
                "priv: privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
                "web-1 (and 2 other pods): allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
            ]
        );
        assert_eq!(namespace_update_warnings(&baseline(), "team", &pods[..3]), Vec::<String>::new());
        let two = vec![pod("b", json!({"hostPID": true})), pod("a", json!({"hostPID": true}))];
        assert_eq!(
            namespace_update_warnings(&baseline(), "t", &two),
            [
                r#"existing pods in namespace "t" violate the new PodSecurity enforce level "baseline:latest""#,
                "a (and 1 other pod): host namespaces",
            ]
        );
    }

    #[test]
    fn namespace_update_warnings_cap_and_prioritize() {
        let owned = |i: usize, uid: &str| {
            json!({"metadata": {"name": format!("p{i:04}"), "ownerReferences": [
                {"uid": uid, "controller": true}]}, "spec": {"hostIPC": true}})
        };
        let mut pods: Vec<Value> = (0..3001).map(|i| owned(i, "rs-1")).collect();
        pods.push(json!({"metadata": {"name": "zz-other"},
            "spec": {"containers": [{"name": "c", "securityContext": {"privileged": true}}]}}));
        let w = namespace_update_warnings(&baseline(), "big", &pods);
        assert_eq!(
            w.first().map(String::as_str),
            Some("new PodSecurity enforce level only checked against the first 3000 of 3002 existing pods")
        );
        // The unowned pod is checked although it comes last.
        assert!(w.iter().any(|l| l == "zz-other: privileged"), "{w:?}");
        assert!(w.iter().any(|l| l == "p0000 (and 2998 other pods): host namespaces"), "{w:?}");
    }

    // ---- admission flow ----

    #[test]
    fn evaluate_enforce_warn_and_audit() {
        let spec = json!({"containers": [{"name": "c"}]});
        let policy = NamespacePolicy { enforce: baseline(), audit: restricted(), warn: restricted() };
        let e = evaluate(&policy, &json!({}), &spec, true);
        assert_eq!(e.forbidden, None);
        assert_eq!(e.warnings.len(), 1);
        assert!(e.warnings.first().is_some_and(|w| {
            w.starts_with(r#"would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false"#)
        }));
        assert_eq!(e.audit.as_ref(), e.warnings.first());

        // A rejected request carries no warnings.
        let strict = NamespacePolicy { enforce: restricted(), audit: restricted(), warn: restricted() };
        let e = evaluate(&strict, &json!({}), &spec, true);
        assert!(e.forbidden.is_some_and(|m| m.starts_with(r#"violates PodSecurity "restricted:latest": "#)));
        assert!(e.warnings.is_empty());
        // Templates are never enforced, only warned about.
        let e = evaluate(&strict, &json!({}), &spec, false);
        assert_eq!(e.forbidden, None);
        assert_eq!(e.warnings.len(), 1);
        // Privileged namespaces say nothing.
        assert_eq!(evaluate(&NamespacePolicy::default(), &json!({}), &spec, true), PodEvaluation::default());
    }

    #[test]
    fn pod_templates_of_workloads() {
        let t = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}});
        let spec_of = |group: &str, kind: &str, obj: &Value| pod_template_of(group, kind, obj).map(|(_, s)| s.clone());
        let wrapped = json!({"spec": {"template": t}});
        for (g, k) in [
            ("apps", "Deployment"),
            ("apps", "ReplicaSet"),
            ("apps", "StatefulSet"),
            ("apps", "DaemonSet"),
            ("batch", "Job"),
            ("", "ReplicationController"),
        ] {
            assert_eq!(spec_of(g, k, &wrapped), Some(t["spec"].clone()), "{g}/{k}");
        }
        let cron = json!({"spec": {"jobTemplate": {"spec": {"template": t}}}});
        assert_eq!(spec_of("batch", "CronJob", &cron), Some(t["spec"].clone()));
        assert_eq!(spec_of("", "PodTemplate", &json!({"template": t})), Some(t["spec"].clone()));
        let pod = json!({"metadata": {"name": "p"}, "spec": {"hostPID": true}});
        assert_eq!(pod_template_of("", "Pod", &pod), Some((&pod["metadata"], &pod["spec"])));
        assert_eq!(spec_of("apps", "Deployment", &json!({"spec": {}})), None);
        assert_eq!(spec_of("", "ConfigMap", &wrapped), None);
        assert_eq!(spec_of("extensions", "Deployment", &wrapped), None);
        let empty = json!({"spec": {"template": {}}});
        let got = pod_template_of("batch", "Job", &empty);
        assert!(got.is_some_and(|(meta, spec)| meta.is_null() && spec.is_null()));
    }

    #[test]
    fn significant_pod_updates() {
        let pod = json!({"metadata": {"labels": {"a": "1"}}, "spec": {
            "containers": [{"name": "c", "image": "nginx:1"}],
            "ephemeralContainers": [{"name": "e", "image": "busybox"}]}});
        let mut relabeled = pod.clone();
        relabeled["metadata"]["labels"]["a"] = json!("2");
        relabeled["spec"]["activeDeadlineSeconds"] = json!(5);
        assert!(!is_significant_pod_update(&relabeled, &pod));
        let mut image = pod.clone();
        image["spec"]["containers"][0]["image"] = json!("nginx:2");
        assert!(is_significant_pod_update(&image, &pod));
        let mut debug = pod.clone();
        debug["spec"]["ephemeralContainers"] = json!([{"name": "e", "image": "busybox"}, {"name": "f", "image": "x"}]);
        assert!(is_significant_pod_update(&debug, &pod));
        let mut seccomp = pod.clone();
        seccomp["metadata"]["annotations"] = json!({"container.seccomp.security.alpha.kubernetes.io/c": "unconfined"});
        assert!(is_significant_pod_update(&seccomp, &pod));
        let mut init = pod.clone();
        init["spec"]["initContainers"] = json!([{"name": "i"}]);
        assert!(is_significant_pod_update(&init, &pod));
        assert!(is_ignored_pod_subresource("status") && is_ignored_pod_subresource("exec"));
        assert!(!is_ignored_pod_subresource("ephemeralcontainers") && !is_ignored_pod_subresource(""));
    }

    // ---- upstream check fixtures (policy/check_*_test.go) ----

    #[test]
    fn fixture_allow_privilege_escalation() {
        let spec = json!({"containers": [{"name": "a"}, c("b", json!({})),
            c("c", json!({"allowPrivilegeEscalation": true})), c("d", json!({"allowPrivilegeEscalation": false}))]});
        let detail = r#"containers "a", "b", "c" must set securityContext.allowPrivilegeEscalation=false"#;
        forbidden(
            run(|p| allow_privilege_escalation(p, false), json!({}), spec.clone()),
            "allowPrivilegeEscalation != false",
            detail,
        );
        forbidden(
            run(|p| allow_privilege_escalation(p, true), json!({}), spec),
            "allowPrivilegeEscalation != false",
            detail,
        );
        let windows = json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]});
        assert_eq!(run(|p| allow_privilege_escalation(p, true), json!({}), windows.clone()), None);
        assert!(run(|p| allow_privilege_escalation(p, false), json!({}), windows).is_some());
        let linux = json!({"os": {"name": "linux"}, "containers": [{"name": "a"}]});
        assert!(run(|p| allow_privilege_escalation(p, true), json!({}), linux).is_some());
    }

    #[test]
    fn fixture_app_armor_profile() {
        let allowed = [
            (json!({"annotations": {format!("{AA}test"): "runtime/default", "env": "prod"}}), json!({})),
            (json!({"annotations": {format!("{AA}test"): "localhost/sec-profile01", "env": "dev"}}), json!({})),
            (json!({"annotations": {"env": "dev"}}), json!({})),
            (json!({}), json!({})),
            (json!({}), json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}})),
            (
                json!({}),
                json!({"containers": [c("foo", json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}))]}),
            ),
        ];
        for (meta, spec) in allowed {
            assert_eq!(run(app_armor_profile, meta, spec), None);
        }
        forbidden(
            run(app_armor_profile, json!({}), json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}})),
            "forbidden AppArmor profile",
            r#"pod must not set AppArmor profile type to "Unconfined""#,
        );
        forbidden(
            run(
                app_armor_profile,
                json!({}),
                json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "foo"}],
                    "initContainers": [c("bar", json!({"appArmorProfile": {"type": "Unconfined"}}))]}),
            ),
            "forbidden AppArmor profile",
            r#"container "bar" must not set AppArmor profile type to "Unconfined""#,
        );
        let meta = json!({"annotations": {
            AA: "bogus", format!("{AA}a"): "", format!("{AA}b"): "runtime/default", format!("{AA}c"): "localhost/",
            format!("{AA}d"): "localhost/foo", format!("{AA}e"): "unconfined", format!("{AA}f"): "unknown"}});
        forbidden(
            run(app_armor_profile, meta, json!({})),
            "forbidden AppArmor profiles",
            &format!(
                r#"annotations must not set AppArmor profile type to "{AA}="bogus"", "{AA}e="unconfined"", "{AA}f="unknown"""#
            ),
        );
        forbidden(
            run(
                app_armor_profile,
                json!({"annotations": {format!("{AA}c"): "unconfined"}}),
                json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}},
                    "containers": [c("c", json!({"appArmorProfile": {"type": "Unconfined"}}))]}),
            ),
            "forbidden AppArmor profiles",
            &format!(
                r#"pod and container "c" and annotation must not set AppArmor profile type to "Unconfined", "{AA}c="unconfined"""#
            ),
        );
    }

    #[test]
    fn fixture_capabilities_baseline() {
        let spec = json!({"containers": [
            c("a", json!({"capabilities": {"add": ["FOO", "BAR"]}})),
            c("b", json!({"capabilities": {"add": ["BAR", "BAZ"]}})),
            c("c", json!({"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"]}})),
        ]});
        forbidden(
            run(capabilities_baseline, json!({}), spec),
            "non-default capabilities",
            r#"containers "a", "b" must not include "BAR", "BAZ", "FOO" in securityContext.capabilities.add"#,
        );
    }

    #[test]
    fn fixture_capabilities_restricted() {
        let spec = json!({"containers": [
            c("a", json!({"capabilities": {"add": ["FOO", "BAR"]}})),
            c("b", json!({"capabilities": {"add": ["BAR", "BAZ"]}})),
            c("c", json!({"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]}})),
        ]});
        let detail = r#"containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; containers "a", "b", "c" must not include "BAR", "BAZ", "CHOWN", "FOO" in securityContext.capabilities.add"#;
        forbidden(
            run(|p| capabilities_restricted(p, false), json!({}), spec.clone()),
            "unrestricted capabilities",
            detail,
        );
        forbidden(run(|p| capabilities_restricted(p, true), json!({}), spec), "unrestricted capabilities", detail);
        let windows = json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]});
        assert_eq!(run(|p| capabilities_restricted(p, true), json!({}), windows), None);
    }

    #[test]
    fn fixture_host_namespaces() {
        forbidden(
            run(host_namespaces, json!({}), json!({"hostNetwork": true, "hostIPC": true, "hostPID": true})),
            "host namespaces",
            "hostNetwork=true, hostPID=true, hostIPC=true",
        );
        assert_eq!(run(host_namespaces, json!({}), json!({"hostNetwork": false})), None);
    }

    #[test]
    fn fixture_host_path_volumes() {
        let spec = json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "hostPath": {"path": "/"}},
            {"name": "c", "hostPath": {"path": "/x"}}]});
        forbidden(run(host_path_volumes, json!({}), spec), "hostPath volumes", r#"volumes "b", "c""#);
    }

    #[test]
    fn fixture_host_ports() {
        forbidden(
            run(
                host_ports,
                json!({}),
                json!({"containers": [{"name": "a", "ports": [{"hostPort": 0}]},
                    {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 20}]}]}),
            ),
            "hostPort",
            r#"container "b" uses hostPort 20"#,
        );
        forbidden(
            run(
                host_ports,
                json!({}),
                json!({"containers": [{"name": "a", "ports": [{"hostPort": 0}]},
                    {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 20}]},
                    {"name": "c", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 30}]}]}),
            ),
            "hostPort",
            r#"containers "b", "c" use hostPorts 10, 20, 30"#,
        );
        // The ports form a set of strings, so they sort as text.
        forbidden(
            run(
                host_ports,
                json!({}),
                json!({"containers": [{"name": "a", "ports": [{"hostPort": 9}, {"hostPort": 8080}]}]}),
            ),
            "hostPort",
            r#"container "a" uses hostPorts 8080, 9"#,
        );
    }

    #[test]
    fn fixture_privileged() {
        let spec = json!({"containers": [{"name": "a"}, c("b", json!({})), c("c", json!({"privileged": false})),
            c("d", json!({"privileged": true})), c("e", json!({"privileged": true}))]});
        forbidden(
            run(privileged, json!({}), spec),
            "privileged",
            r#"containers "d", "e" must not set securityContext.privileged=true"#,
        );
    }

    #[test]
    fn fixture_proc_mount() {
        let spec = json!({"hostUsers": false, "containers": [{"name": "a"}, c("b", json!({})),
            c("c", json!({"procMount": "Default"})), c("d", json!({"procMount": "Unmasked"})),
            c("e", json!({"procMount": "other"}))]});
        // The user-namespace relaxation is behind a feature gate that is off in v1.33.
        forbidden(
            run(proc_mount, json!({}), spec),
            "procMount",
            r#"containers "d", "e" must not set securityContext.procMount to "Unmasked", "other""#,
        );
    }

    #[test]
    fn fixture_restricted_volumes() {
        let mut volumes = vec![];
        for (i, k) in [
            "emptyDir",
            "secret",
            "persistentVolumeClaim",
            "downwardAPI",
            "configMap",
            "projected",
            "csi",
            "ephemeral",
            "image",
        ]
        .iter()
        .enumerate()
        {
            volumes.push(json!({"name": format!("a{}", i + 1), *k: {}}));
        }
        for (i, k) in [
            "hostPath",
            "gcePersistentDisk",
            "awsElasticBlockStore",
            "gitRepo",
            "nfs",
            "iscsi",
            "glusterfs",
            "rbd",
            "flexVolume",
            "cinder",
            "cephfs",
            "flocker",
            "fc",
            "azureFile",
            "vsphereVolume",
            "quobyte",
            "azureDisk",
            "photonPersistentDisk",
            "portworxVolume",
            "scaleIO",
            "storageos",
        ]
        .iter()
        .enumerate()
        {
            volumes.push(json!({"name": format!("b{}", i + 1), *k: {}}));
        }
        volumes.push(json!({"name": "c1"}));
        forbidden(
            run(restricted_volumes, json!({}), json!({"volumes": volumes})),
            "restricted volume types",
            concat!(
                r#"volumes "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9", "b10", "b11", "b12", "b13", "b14", "b15", "b16", "b17", "b18", "b19", "b20", "b21", "c1""#,
                r#" use restricted volume types "#,
                r#""awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "#,
                r#""hostPath", "iscsi", "nfs", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "unknown", "vsphereVolume""#
            ),
        );
    }

    #[test]
    fn fixture_run_as_non_root() {
        let reason = "runAsNonRoot != true";
        let named = |n: &str, sc: Option<Value>| match sc {
            Some(sc) => c(n, sc),
            None => json!({"name": n}),
        };
        // no explicit runAsNonRoot
        forbidden(
            run(run_as_non_root, json!({}), json!({"containers": [named("a", None)]})),
            reason,
            r#"pod or container "a" must set securityContext.runAsNonRoot=true"#,
        );
        // pod runAsNonRoot=false
        forbidden(
            run(
                run_as_non_root,
                json!({}),
                json!({"securityContext": {"runAsNonRoot": false}, "containers": [named("a", None)]}),
            ),
            reason,
            r#"pod must not set securityContext.runAsNonRoot=false"#,
        );
        // containers runAsNonRoot=false
        let spec = json!({"securityContext": {"runAsNonRoot": true}, "containers": [
            named("a", None), named("b", Some(json!({}))), named("c", Some(json!({"runAsNonRoot": false}))),
            named("d", Some(json!({"runAsNonRoot": false}))), named("e", Some(json!({"runAsNonRoot": true}))),
            named("f", Some(json!({"runAsNonRoot": true})))]});
        forbidden(
            run(run_as_non_root, json!({}), spec.clone()),
            reason,
            r#"containers "c", "d" must not set securityContext.runAsNonRoot=false"#,
        );
        // pod and containers runAsNonRoot=false
        let mut both = spec;
        both["securityContext"]["runAsNonRoot"] = json!(false);
        forbidden(
            run(run_as_non_root, json!({}), both),
            reason,
            r#"pod and containers "c", "d" must not set securityContext.runAsNonRoot=false"#,
        );
        // pod nil, container fallthrough
        forbidden(
            run(
                run_as_non_root,
                json!({}),
                json!({"containers": [named("a", None), named("b", Some(json!({}))),
                    named("d", Some(json!({"runAsNonRoot": true}))), named("e", Some(json!({"runAsNonRoot": true})))]}),
            ),
            reason,
            r#"pod or containers "a", "b" must set securityContext.runAsNonRoot=true"#,
        );
        assert_eq!(
            run(
                run_as_non_root,
                json!({}),
                json!({"securityContext": {"runAsNonRoot": true}, "containers": [named("a", None)]})
            ),
            None
        );
    }

    #[test]
    fn fixture_run_as_user() {
        let reason = "runAsUser=0";
        forbidden(
            run(run_as_user, json!({}), json!({"securityContext": {"runAsUser": 0}, "containers": [{"name": "a"}]})),
            reason,
            "pod must not set runAsUser=0",
        );
        forbidden(
            run(
                run_as_user,
                json!({}),
                json!({"securityContext": {"runAsUser": 1000}, "containers": [{"name": "a"},
                    c("b", json!({})), c("c", json!({"runAsUser": 0})), c("d", json!({"runAsUser": 0})),
                    c("e", json!({"runAsUser": 1}))]}),
            ),
            reason,
            r#"containers "c", "d" must not set runAsUser=0"#,
        );
        forbidden(
            run(
                run_as_user,
                json!({}),
                json!({"securityContext": {"runAsUser": 0}, "containers": [c("c", json!({"runAsUser": 0}))]}),
            ),
            reason,
            r#"pod and container "c" must not set runAsUser=0"#,
        );
        assert_eq!(run(run_as_user, json!({}), json!({"containers": [{"name": "a"}], "hostUsers": false})), None);
    }

    #[test]
    fn fixture_se_linux_options() {
        let ok = || {
            vec![
                c("a", json!({"seLinuxOptions": {"type": "container_t"}})),
                c("b", json!({"seLinuxOptions": {"type": "container_init_t"}})),
                c("c", json!({"seLinuxOptions": {"type": "container_kvm_t"}})),
                c("d", json!({"seLinuxOptions": {"type": "container_engine_t"}})),
            ]
        };
        let bad_efg = || {
            vec![
                c("e", json!({"seLinuxOptions": {"type": "bar"}})),
                c("f", json!({"seLinuxOptions": {"user": "bar"}})),
                c("g", json!({"seLinuxOptions": {"role": "baz"}})),
            ]
        };
        let pod_bad = json!({"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}});
        let f = |p: Pod<'_>| se_linux_options(p, true);
        let mut all = ok();
        all.extend(bad_efg());
        forbidden(
            run(f, json!({}), json!({"securityContext": pod_bad, "containers": all.clone()})),
            "seLinuxOptions",
            r#"pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: types "bar", "foo"; user may not be set; role may not be set"#,
        );
        forbidden(
            run(f, json!({}), json!({"securityContext": pod_bad, "containers": ok()})),
            "seLinuxOptions",
            r#"pod set forbidden securityContext.seLinuxOptions: type "foo"; user may not be set; role may not be set"#,
        );
        forbidden(
            run(f, json!({}), json!({"securityContext": {"seLinuxOptions": {}}, "containers": all})),
            "seLinuxOptions",
            r#"containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: type "bar"; user may not be set; role may not be set"#,
        );
        for (opts, detail) in [
            (json!({"type": "bad"}), r#"pod set forbidden securityContext.seLinuxOptions: type "bad""#),
            (json!({"user": "bad"}), "pod set forbidden securityContext.seLinuxOptions: user may not be set"),
            (json!({"role": "bad"}), "pod set forbidden securityContext.seLinuxOptions: role may not be set"),
        ] {
            forbidden(
                run(f, json!({}), json!({"securityContext": {"seLinuxOptions": opts}})),
                "seLinuxOptions",
                detail,
            );
        }
    }

    fn seccomp_containers_invalid() -> Value {
        let sc = |n: &str, t: &str| c(n, json!({"seccompProfile": {"type": t}}));
        json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}, "containers": [
            {"name": "a"}, c("b", json!({})), sc("c", "Unconfined"), sc("d", "Unconfined"),
            sc("e", "RuntimeDefault"), sc("f", "RuntimeDefault")]})
    }

    #[test]
    fn fixture_seccomp_profile_baseline() {
        forbidden(
            run(seccomp_baseline, json!({}), json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}})),
            "seccompProfile",
            r#"pod must not set securityContext.seccompProfile.type to "Unconfined""#,
        );
        forbidden(
            run(seccomp_baseline, json!({}), seccomp_containers_invalid()),
            "seccompProfile",
            r#"containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
        );
        let mut both = seccomp_containers_invalid();
        both["securityContext"]["seccompProfile"]["type"] = json!("Unconfined");
        forbidden(
            run(seccomp_baseline, json!({}), both),
            "seccompProfile",
            r#"pod and containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
        );
        assert_eq!(run(seccomp_baseline, json!({}), json!({"containers": [{"name": "a"}]})), None);
        // v1.0 annotations
        let meta = json!({"annotations": {
            "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
            "container.seccomp.security.alpha.kubernetes.io/a": "runtime/default",
            "container.seccomp.security.alpha.kubernetes.io/b": "docker/default",
            "container.seccomp.security.alpha.kubernetes.io/c": "localhost/x",
            "container.seccomp.security.alpha.kubernetes.io/d": "unconfined",
            "container.seccomp.security.alpha.kubernetes.io/e": "unknown",
            "container.seccomp.security.alpha.kubernetes.io/z": "unconfined"}});
        let spec = json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"}, {"name": "e"}]});
        forbidden(
            run(seccomp_baseline_annotations, meta, spec),
            "seccompProfile",
            concat!(
                r#"forbidden annotations container.seccomp.security.alpha.kubernetes.io/d="unconfined", "#,
                r#"container.seccomp.security.alpha.kubernetes.io/e="unknown", "#,
                r#"seccomp.security.alpha.kubernetes.io/pod="unconfined""#
            ),
        );
    }

    #[test]
    fn fixture_seccomp_profile_restricted() {
        let f = |p: Pod<'_>| seccomp_restricted(p, true);
        forbidden(
            run(f, json!({}), json!({"containers": [{"name": "a"}]})),
            "seccompProfile",
            r#"pod or container "a" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
        );
        assert_eq!(run(f, json!({}), json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]})), None);
        assert!(run(f, json!({}), json!({"os": {"name": "linux"}, "containers": [{"name": "a"}]})).is_some());
        forbidden(
            run(
                f,
                json!({}),
                json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "a"}]}),
            ),
            "seccompProfile",
            r#"pod must not set securityContext.seccompProfile.type to "Unconfined""#,
        );
        forbidden(
            run(f, json!({}), seccomp_containers_invalid()),
            "seccompProfile",
            r#"containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
        );
        let mut fallthrough = seccomp_containers_invalid();
        fallthrough["securityContext"] = json!(null);
        fallthrough["containers"] = json!([{"name": "a"}, c("b", json!({})),
            c("d", json!({"seccompProfile": {"type": "RuntimeDefault"}})),
            c("e", json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}))]);
        forbidden(
            run(f, json!({}), fallthrough),
            "seccompProfile",
            r#"pod or containers "a", "b" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
        );
    }

    #[test]
    fn fixture_sysctls() {
        let spec = |names: &[&str]| json!({"securityContext": {"sysctls": names.iter().map(|n| json!({"name": n, "value": "1"})).collect::<Vec<_>>()}});
        forbidden(run(|p| sysctls(p, 0), json!({}), spec(&["a", "b"])), "forbidden sysctls", "a, b");
        forbidden(
            run(|p| sysctls(p, 0), json!({}), spec(&["net.ipv4.ip_local_reserved_ports"])),
            "forbidden sysctls",
            "net.ipv4.ip_local_reserved_ports",
        );
        assert_eq!(run(|p| sysctls(p, 27), json!({}), spec(&["net.ipv4.ip_local_reserved_ports"])), None);
        for n in [
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
        ] {
            assert!(run(|p| sysctls(p, 27), json!({}), spec(&[n])).is_some());
            assert_eq!(run(|p| sysctls(p, 29), json!({}), spec(&[n])), None);
        }
        assert_eq!(run(|p| sysctls(p, 32), json!({}), spec(&["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"])), None);
    }

    #[test]
    fn fixture_windows_host_process() {
        let hp = |v: bool| json!({"windowsOptions": {"hostProcess": v}});
        let spec = json!({"securityContext": hp(true), "containers": [{"name": "a"}, c("b", hp(false)),
            c("c", hp(true)), c("d", hp(true))]});
        forbidden(
            run(windows_host_process, json!({}), spec),
            "hostProcess",
            r#"pod and containers "c", "d" must not set securityContext.windowsOptions.hostProcess=true"#,
        );
        forbidden(
            run(windows_host_process, json!({}), json!({"containers": [c("c", hp(true))]})),
            "hostProcess",
            r#"container "c" must not set securityContext.windowsOptions.hostProcess=true"#,
        );
    }

    // ---- properties ----

    fn arb_json() -> impl Strategy<Value = Value> {
        let keys = prop::sample::select(vec![
            "name",
            "containers",
            "initContainers",
            "ephemeralContainers",
            "securityContext",
            "capabilities",
            "add",
            "drop",
            "runAsNonRoot",
            "runAsUser",
            "seccompProfile",
            "type",
            "appArmorProfile",
            "seLinuxOptions",
            "user",
            "role",
            "sysctls",
            "volumes",
            "hostPath",
            "emptyDir",
            "ports",
            "hostPort",
            "hostNetwork",
            "os",
            "windowsOptions",
            "hostProcess",
            "procMount",
            "privileged",
            "annotations",
            "allowPrivilegeEscalation",
            "metadata",
            "spec",
            "template",
            "image",
            "ownerReferences",
            "controller",
            "uid",
            "labels",
            AA,
            ENFORCE_LEVEL_LABEL,
            ENFORCE_VERSION_LABEL,
            WARN_LEVEL_LABEL,
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)),
            prop::sample::select(vec![
                "",
                "a",
                "ALL",
                "Unconfined",
                "RuntimeDefault",
                "windows",
                "v1.20",
                "latest",
                "restricted",
                "baseline",
                "localhost/x"
            ])
            .prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((keys.clone(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn never_panics(meta in arb_json(), spec in arb_json(), other in arb_json(), version in ".{0,6}") {
            for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
                for v in ["latest", "v1.0", "v1.18", "v1.24", version.as_str()] {
                    let l = lv(level, v);
                    let violations = check(&l, &meta, &spec);
                    let _ = enforce_message(&l, &violations);
                    let _ = warning_message(&l, &violations);
                    let _ = namespace_update_warnings(&l, "ns", &[meta.clone(), spec.clone(), other.clone()]);
                }
            }
            let _ = namespace_policy_with_errors(meta.as_object());
            let _ = namespace_label_errors(Some(spec.as_object()), meta.as_object());
            let (policy, _) = namespace_policy_with_errors(other.as_object());
            let _ = evaluate(&policy, &meta, &spec, true);
            let _ = is_significant_pod_update(&meta, &spec);
            for (g, k) in [("", "Pod"), ("", "PodTemplate"), ("apps", "Deployment"), ("batch", "CronJob")] {
                let _ = pod_template_of(g, k, &other);
            }
        }

        #[test]
        fn restricted_reports_at_least_what_baseline_does_minus_overrides(spec in arb_json()) {
            // Every baseline violation except the three overridden checks is also a restricted one
            // (Windows pods aside: restricted exempts them from the overriding checks).
            prop_assume!(path(&spec, &["os", "name"]).and_then(Value::as_str) != Some("windows"));
            let meta = json!({});
            let b = check(&baseline(), &meta, &spec);
            let r = check(&restricted(), &meta, &spec);
            for v in b.iter().filter(|v| !matches!(v.reason.as_str(), "non-default capabilities" | "hostPath volumes" | "seccompProfile")) {
                prop_assert!(r.contains(v), "{v:?} missing from {r:?}");
            }
            if !b.is_empty() {
                prop_assert!(!r.is_empty());
            }
        }

        #[test]
        fn valid_labels_round_trip(level in prop::sample::select(vec!["privileged", "baseline", "restricted"]), minor in 0u64..100) {
            let version = format!("v1.{minor}");
            let l = labels(json!({ENFORCE_LEVEL_LABEL: level, ENFORCE_VERSION_LABEL: version}));
            let p = namespace_policy(Some(&l));
            prop_assert_eq!(p.map(|p| p.enforce.to_string()), Ok(format!("{level}:{version}")));
        }
    }
}
