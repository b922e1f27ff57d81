//! The RBAC authorizer, evaluated exactly as kube-apiserver evaluates it, as pure functions over
//! the stored JSON of `rbac.authorization.k8s.io/v1` objects.
//!
//! Mirrored upstream code (Kubernetes 1.33):
//! - `plugin/pkg/auth/authorizer/rbac/rbac.go` ([`authorize`], [`rule_allows`], `rules_for`) and
//!   `subject_locator.go` (`allowed_subjects`);
//! - `pkg/registry/rbac/validation/rule.go` (which bindings apply to whom, the order rules are
//!   visited in, the `RBAC: allowed by ...` reasons and the resolution errors that end up after
//!   the forbidden message);
//! - `pkg/apis/rbac/v1/evaluation_helpers.go` (verb / API group / resource / resource name /
//!   non-resource URL matching);
//! - `k8s.io/apiserver/pkg/authorization/authorizerfactory` (the `system:masters` privileged
//!   group authorizer that kube-apiserver puts in front of RBAC: [`privileged`],
//!   [`authorize_chain`]);
//! - `k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go` ([`forbidden_message`],
//!   [`forbidden_status`]);
//! - `k8s.io/apiserver/pkg/endpoints/request/requestinfo.go` ([`verb_for`]);
//! - `k8s.io/apiserver/pkg/endpoints/filters/impersonation.go` ([`impersonation`],
//!   [`authorize_impersonation`]);
//! - `pkg/registry/authorization/*` (SelfSubjectRulesReview and the access reviews:
//!   [`self_subject_rules_review_status`], [`access_review_attributes`]);
//! - `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go` ([`bootstrap_policy`]).
//!
//! Deliberate differences, all invisible to clients:
//! - Bindings are visited in the order of the slices in [`Policy`]; upstream visits them in
//!   informer-cache order, which is unspecified.
//! - ClusterRole aggregation is not performed here: the rules stored in an aggregated
//!   ClusterRole are the ones used (the aggregation controller fills them upstream).
//! - The Node authorizer (which only concerns `system:node:*` users) is not modelled.
//! - Privilege-escalation checks on writes of roles and bindings (`escalate` / `bind`) are not
//!   part of this module.

use crate::field::go_quote;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The group kube-apiserver's privileged-group authorizer allows unconditionally.
pub const SYSTEM_MASTERS: &str = "system:masters";
/// Added to every authenticated user (and to impersonated users, see [`impersonation`]).
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user name of anonymous requests.
pub const ANONYMOUS: &str = "system:anonymous";
/// The verb of every impersonation check.
pub const IMPERSONATE_VERB: &str = "impersonate";
/// `system:serviceaccount:` + namespace + `:` + name is a service account's user name.
pub const SERVICE_ACCOUNT_USERNAME_PREFIX: &str = "system:serviceaccount:";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

/// `user.Info`: who is asking.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups (no uid, no extra).
    pub fn new(name: &str, groups: &[&str]) -> Self {
        UserInfo {
            name: name.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }
}

/// `authorizer.Attributes`: what is being asked for.
///
/// For a resource request `resource_request` is true and `path` is ignored; for a non-resource
/// request (`/healthz`, `/apis`, ...) only `user`, `verb` and `path` matter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attributes {
    pub user: UserInfo,
    pub verb: String,
    pub namespace: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub resource_request: bool,
    pub path: String,
}

/// The RBAC objects in force (JSON of rbac.authorization.k8s.io/v1 objects as stored).
pub struct Policy<'a> {
    pub cluster_roles: &'a [Arc<Value>],
    pub cluster_role_bindings: &'a [Arc<Value>],
    /// Roles of all namespaces.
    pub roles: &'a [Arc<Value>],
    /// RoleBindings of all namespaces.
    pub role_bindings: &'a [Arc<Value>],
}

/// `authorizer.Decision` with the reason string the authorizer returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow {
        reason: String,
    },
    #[allow(
        dead_code,
        reason = "RBAC never denies, only a webhook authorizer would; kept so that the decision and `access_review_status` stay upstream's three-valued ones"
    )]
    Deny {
        reason: String,
    },
    NoOpinion {
        reason: String,
    },
}

impl Decision {
    /// Only `Allow` lets a request through; `NoOpinion` at the end of the chain is a 403.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }

    /// The reason string (may be empty).
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow { reason } | Decision::Deny { reason } | Decision::NoOpinion { reason } => reason,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// JSON access
// ---------------------------------------------------------------------------------------------

fn str_at<'v>(v: &'v Value, path: &[&str]) -> &'v str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

fn str_list<'v>(v: &'v Value, key: &str) -> Vec<&'v str> {
    v.get(key).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

fn name_of(v: &Value) -> &str {
    str_at(v, &["metadata", "name"])
}

fn namespace_of(v: &Value) -> &str {
    str_at(v, &["metadata", "namespace"])
}

/// A `PolicyRule` read from JSON; absent or non-string entries are ignored.
struct Rule<'v> {
    verbs: Vec<&'v str>,
    api_groups: Vec<&'v str>,
    resources: Vec<&'v str>,
    resource_names: Vec<&'v str>,
    non_resource_urls: Vec<&'v str>,
}

impl<'v> Rule<'v> {
    fn parse(v: &'v Value) -> Self {
        Rule {
            verbs: str_list(v, "verbs"),
            api_groups: str_list(v, "apiGroups"),
            resources: str_list(v, "resources"),
            resource_names: str_list(v, "resourceNames"),
            non_resource_urls: str_list(v, "nonResourceURLs"),
        }
    }

    /// `VerbMatches`: `*` or the exact verb.
    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| *v == "*" || *v == verb)
    }

    /// `APIGroupMatches`: `*` or the exact group (`""` is the core group).
    fn api_group_matches(&self, group: &str) -> bool {
        self.api_groups.iter().any(|g| *g == "*" || *g == group)
    }

    /// `ResourceMatches`: `*`, the exact `resource` or `resource/subresource`, or
    /// `*/subresource`. Upstream has no `resource/*` form: such a rule matches only a
    /// subresource literally named `*`.
    fn resource_matches(&self, combined: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            *r == "*"
                || *r == combined
                || (!subresource.is_empty()
                    && r.len() == subresource.len() + 2
                    && r.starts_with("*/")
                    && r.ends_with(subresource))
        })
    }

    /// `ResourceNameMatches`: no names means every name (including none); otherwise the request
    /// must carry one of the names, so list/watch/create/deletecollection (which have no name)
    /// never match a rule with resourceNames.
    fn resource_name_matches(&self, name: &str) -> bool {
        self.resource_names.is_empty() || self.resource_names.contains(&name)
    }

    /// `NonResourceURLMatches`: `*`, the exact path, or a `prefix*` rule whose prefix (with every
    /// trailing `*` removed) starts the path.
    fn non_resource_url_matches(&self, path: &str) -> bool {
        self.non_resource_urls
            .iter()
            .any(|u| *u == "*" || *u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*'))))
    }

    fn allows(&self, attrs: &Attributes) -> bool {
        if attrs.resource_request {
            let combined = if attrs.subresource.is_empty() {
                attrs.resource.clone()
            } else {
                format!("{}/{}", attrs.resource, attrs.subresource)
            };
            self.verb_matches(&attrs.verb)
                && self.api_group_matches(&attrs.api_group)
                && self.resource_matches(&combined, &attrs.subresource)
                && self.resource_name_matches(&attrs.name)
        } else {
            self.verb_matches(&attrs.verb) && self.non_resource_url_matches(&attrs.path)
        }
    }
}

/// `RuleAllows`: whether one `PolicyRule` (JSON) grants the request.
pub fn rule_allows(attrs: &Attributes, rule: &Value) -> bool {
    Rule::parse(rule).allows(attrs)
}

// ---------------------------------------------------------------------------------------------
// Rule resolution (pkg/registry/rbac/validation/rule.go)
// ---------------------------------------------------------------------------------------------

/// Where a rule came from, for the `RBAC: allowed by ...` reason.
struct Source<'p> {
    binding: &'p Value,
    subject: &'p Value,
    cluster: bool,
}

impl Source<'_> {
    /// `clusterRoleBindingDescriber` / `roleBindingDescriber`.
    fn describe(&self) -> String {
        let b = self.binding;
        let ref_kind = str_at(b, &["roleRef", "kind"]);
        let ref_name = str_at(b, &["roleRef", "name"]);
        if self.cluster {
            format!(
                "ClusterRoleBinding {} of {} {} to {}",
                go_quote(name_of(b)),
                ref_kind,
                go_quote(ref_name),
                describe_subject(self.subject, "")
            )
        } else {
            let ns = namespace_of(b);
            format!(
                "RoleBinding {} of {} {} to {}",
                go_quote(&format!("{}/{}", name_of(b), ns)),
                ref_kind,
                go_quote(ref_name),
                describe_subject(self.subject, ns)
            )
        }
    }
}

fn describe_subject(s: &Value, binding_namespace: &str) -> String {
    let kind = str_at(s, &["kind"]);
    let name = str_at(s, &["name"]);
    if kind == "ServiceAccount" {
        let ns = match str_at(s, &["namespace"]) {
            "" => binding_namespace,
            ns => ns,
        };
        format!("{kind} {}", go_quote(&format!("{name}/{ns}")))
    } else {
        format!("{kind} {}", go_quote(name))
    }
}

/// `appliesToUser`.
fn applies_to_user(user: &UserInfo, subject: &Value, namespace: &str) -> bool {
    let name = str_at(subject, &["name"]);
    match str_at(subject, &["kind"]) {
        "User" => user.name == name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let sa_ns = match str_at(subject, &["namespace"]) {
                "" => namespace,
                ns => ns,
            };
            !sa_ns.is_empty() && user.name == service_account_username(sa_ns, name)
        }
        _ => false,
    }
}

/// `appliesTo`: the first subject of the binding that applies to the user.
fn applies_to<'p>(user: &UserInfo, binding: &'p Value, namespace: &str) -> Option<&'p Value> {
    binding.get("subjects").and_then(Value::as_array)?.iter().find(|s| applies_to_user(user, s, namespace))
}

/// `GetRoleReferenceRules`: the rules of the role a binding refers to, or the error message the
/// informer listers give (`clusterrole.rbac.authorization.k8s.io "x" not found`).
fn role_reference_rules<'p>(
    policy: &Policy<'p>,
    binding: &Value,
    binding_namespace: &str,
) -> Result<&'p [Value], String> {
    let kind = str_at(binding, &["roleRef", "kind"]);
    let name = str_at(binding, &["roleRef", "name"]);
    let found = match kind {
        "Role" => policy
            .roles
            .iter()
            .find(|r| !binding_namespace.is_empty() && namespace_of(r) == binding_namespace && name_of(r) == name)
            .ok_or_else(|| format!("role.{RBAC_GROUP} {} not found", go_quote(name)))?,
        "ClusterRole" => policy
            .cluster_roles
            .iter()
            .find(|r| name_of(r) == name)
            .ok_or_else(|| format!("clusterrole.{RBAC_GROUP} {} not found", go_quote(name)))?,
        other => return Err(format!("unsupported role reference kind: {}", go_quote(other))),
    };
    Ok(found.get("rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]))
}

enum Visit<'a, 'p> {
    Rule(&'a Source<'p>, &'p Value),
    Error(String),
}

/// `VisitRulesFor`: every rule that applies to `user` in `namespace` (cluster role bindings
/// first, then the role bindings of the namespace), and every resolution error. The visitor
/// returns false to stop.
fn visit_rules_for<'p>(
    user: &UserInfo,
    namespace: &str,
    policy: &Policy<'p>,
    visitor: &mut dyn FnMut(Visit<'_, 'p>) -> bool,
) {
    for crb in policy.cluster_role_bindings {
        let Some(subject) = applies_to(user, crb, "") else { continue };
        match role_reference_rules(policy, crb, "") {
            Err(e) => {
                if !visitor(Visit::Error(e)) {
                    return;
                }
            }
            Ok(rules) => {
                let source = Source { binding: crb, subject, cluster: true };
                for rule in rules {
                    if !visitor(Visit::Rule(&source, rule)) {
                        return;
                    }
                }
            }
        }
    }
    if namespace.is_empty() {
        return;
    }
    for rb in policy.role_bindings.iter().filter(|rb| namespace_of(rb) == namespace) {
        let Some(subject) = applies_to(user, rb, namespace) else { continue };
        match role_reference_rules(policy, rb, namespace) {
            Err(e) => {
                if !visitor(Visit::Error(e)) {
                    return;
                }
            }
            Ok(rules) => {
                let source = Source { binding: rb, subject, cluster: false };
                for rule in rules {
                    if !visitor(Visit::Rule(&source, rule)) {
                        return;
                    }
                }
            }
        }
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message as is, several deduplicated and
/// bracketed `[a, b]`.
fn aggregate_message(errs: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match (errs.len(), seen.len()) {
        (0, _) => String::new(),
        (1, _) | (_, 1) => seen.first().map(|s| s.to_string()).unwrap_or_default(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

// ---------------------------------------------------------------------------------------------
// Authorization
// ---------------------------------------------------------------------------------------------

/// `RBACAuthorizer.Authorize`: `Allow` with `RBAC: allowed by <binding>` when a rule grants the
/// request, otherwise `NoOpinion` (RBAC never denies) whose reason is empty, or
/// `RBAC: <errors>` when some binding referred to a missing role. `system:masters` is not
/// special here: see [`privileged`] and [`authorize_chain`].
pub fn authorize(attrs: &Attributes, policy: &Policy) -> Decision {
    let mut allowed: Option<String> = None;
    let mut errors: Vec<String> = Vec::new();
    visit_rules_for(&attrs.user, &attrs.namespace, policy, &mut |visit| match visit {
        Visit::Rule(source, rule) => {
            if rule_allows(attrs, rule) {
                allowed = Some(format!("RBAC: allowed by {}", source.describe()));
                false
            } else {
                true
            }
        }
        Visit::Error(e) => {
            errors.push(e);
            true
        }
    });
    if let Some(reason) = allowed {
        return Decision::Allow { reason };
    }
    let reason = if errors.is_empty() { String::new() } else { format!("RBAC: {}", aggregate_message(&errors)) };
    Decision::NoOpinion { reason }
}

/// The privileged-group authorizer kube-apiserver runs before RBAC: members of
/// `system:masters` are allowed everything, whatever the RBAC objects say.
pub fn privileged(user: &UserInfo) -> bool {
    user.groups.iter().any(|g| g == SYSTEM_MASTERS)
}

/// kube-apiserver's authorizer chain as far as devcluster has one: the privileged-group
/// authorizer (`Allow` with an empty reason), then RBAC. The result is what the union
/// authorizer returns; anything but `Allow` is answered with [`forbidden_status`].
pub fn authorize_chain(attrs: &Attributes, policy: &Policy) -> Decision {
    if privileged(&attrs.user) {
        return Decision::Allow { reason: String::new() };
    }
    authorize(attrs, policy)
}

/// `AllowedSubjects` (subject_locator.go): the subjects that may perform the request,
/// `system:masters` first, and the resolution errors met on the way. Unlike upstream (which
/// computes a deduplicated list and then returns the original), duplicates are removed.
#[cfg(test)]
pub fn allowed_subjects(attrs: &Attributes, policy: &Policy) -> (Vec<Value>, Option<String>) {
    let mut subjects: Vec<Value> = vec![json!({"kind": "Group", "apiGroup": RBAC_GROUP, "name": SYSTEM_MASTERS})];
    let mut errors = Vec::new();
    let consider = |binding: &Value, ns: &str, errors: &mut Vec<String>, subjects: &mut Vec<Value>| {
        let rules = match role_reference_rules(policy, binding, ns) {
            Ok(r) => r,
            Err(e) => {
                errors.push(e);
                &[]
            }
        };
        if rules.iter().any(|r| rule_allows(attrs, r))
            && let Some(list) = binding.get("subjects").and_then(Value::as_array)
        {
            subjects.extend(list.iter().cloned());
        }
    };
    for crb in policy.cluster_role_bindings {
        consider(crb, "", &mut errors, &mut subjects);
    }
    if !attrs.namespace.is_empty() {
        for rb in policy.role_bindings.iter().filter(|rb| namespace_of(rb) == attrs.namespace) {
            consider(rb, &attrs.namespace, &mut errors, &mut subjects);
        }
    }
    let mut deduped: Vec<Value> = Vec::new();
    for s in subjects {
        if !deduped.contains(&s) {
            deduped.push(s);
        }
    }
    let err = if errors.is_empty() { None } else { Some(aggregate_message(&errors)) };
    (deduped, err)
}

// ---------------------------------------------------------------------------------------------
// Forbidden responses (responsewriters/errors.go)
// ---------------------------------------------------------------------------------------------

/// The `sanitizer` of errors.go: nothing in an error may look like HTML.
fn sanitize(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `forbiddenMessage` (sanitized as `Forbidden` does):
/// - `User "u" cannot list resource "pods" in API group "" in the namespace "default"`
/// - `User "u" cannot get resource "pods/log" in API group "" at the cluster scope`
/// - `User "u" cannot get path "/healthz"`
///
/// The object name is not part of it: it appears in the `Status` message built by
/// [`forbidden_status_message`] (`pods "web" is forbidden: User ...`).
pub fn forbidden_message(attrs: &Attributes) -> String {
    let user = go_quote(&attrs.user.name);
    let msg = if !attrs.resource_request {
        format!("User {user} cannot {} path {}", attrs.verb, go_quote(&attrs.path))
    } else {
        let resource = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let scope = if attrs.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {}", go_quote(&attrs.namespace))
        };
        format!(
            "User {user} cannot {} resource {} in API group {} {scope}",
            attrs.verb,
            go_quote(&resource),
            go_quote(&attrs.api_group)
        )
    };
    sanitize(&msg)
}

/// The full `Status.message` of the 403 (`apierrors.NewForbidden` around the message and the
/// authorizer's reason):
/// - `pods is forbidden: User "u" cannot list resource "pods" in API group "" in the namespace "default"`
/// - `deployments.apps "web" is forbidden: User "u" cannot get resource "deployments" in API group "apps" ...`
/// - `forbidden: User "u" cannot get path "/metrics"` (non-resource requests)
/// - `...: RBAC: clusterrole.rbac.authorization.k8s.io "x" not found` when `reason` is not empty.
pub fn forbidden_status_message(attrs: &Attributes, reason: &str) -> String {
    let msg = forbidden_message(attrs);
    let err = if reason.is_empty() { msg } else { format!("{msg}: {reason}") };
    if attrs.api_group.is_empty() && attrs.resource.is_empty() {
        return format!("forbidden: {err}");
    }
    let gr = if attrs.api_group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.api_group)
    };
    if attrs.name.is_empty() {
        format!("{gr} is forbidden: {err}")
    } else {
        format!("{gr} {} is forbidden: {err}", go_quote(&attrs.name))
    }
}

/// The 403 `Status` body, fields in the order the apiserver writes them. `details` carries
/// `name`, `group` and `kind` (the resource, without subresource) when not empty, and is `{}`
/// for non-resource requests, as upstream.
pub fn forbidden_status(attrs: &Attributes, reason: &str) -> Value {
    let mut details = Map::new();
    if !attrs.name.is_empty() {
        details.insert("name".into(), attrs.name.clone().into());
    }
    if !attrs.api_group.is_empty() {
        details.insert("group".into(), attrs.api_group.clone().into());
    }
    if !attrs.resource.is_empty() {
        details.insert("kind".into(), attrs.resource.clone().into());
    }
    let mut m = Map::new();
    m.insert("kind".into(), "Status".into());
    m.insert("apiVersion".into(), "v1".into());
    m.insert("metadata".into(), json!({}));
    m.insert("status".into(), "Failure".into());
    m.insert("message".into(), forbidden_status_message(attrs, reason).into());
    m.insert("reason".into(), "Forbidden".into());
    m.insert("details".into(), Value::Object(details));
    m.insert("code".into(), 403.into());
    Value::Object(m)
}

/// `responsewriters.InternalError`: the text/plain 500 body
/// (`Internal Server Error: "<request URI>": <err>` and the newline `http.Error` adds), used
/// upstream for malformed impersonation headers.
pub fn internal_error_body(request_uri: &str, err: &str) -> String {
    format!("{}\n", sanitize(&format!("Internal Server Error: {}: {err}", go_quote(request_uri))))
}

// ---------------------------------------------------------------------------------------------
// Request attributes (requestinfo.go)
// ---------------------------------------------------------------------------------------------

/// The verb the apiserver derives for a resource request: POST `create`; GET/HEAD `get` with a
/// name, else `watch` (when `?watch=` is true, see [`watch_param`]) or `list`; PUT `update`;
/// PATCH `patch`; DELETE `delete` with a name, else `deletecollection`; any other method `""`.
/// A GET with a name and `?watch=true` stays `get`, as upstream. The deprecated `/watch/` path
/// prefix always gives `watch`, and a list or watch whose fieldSelector requires
/// `metadata.name=<n>` carries `n` as the name (so resourceNames rules can match it): both are
/// for the caller. Non-resource requests use [`non_resource_verb`]; impersonation checks use
/// [`IMPERSONATE_VERB`].
pub fn verb_for(method: &str, has_name: bool, is_watch: bool) -> &'static str {
    match method {
        "POST" => "create",
        "GET" | "HEAD" if has_name => "get",
        "GET" | "HEAD" if is_watch => "watch",
        "GET" | "HEAD" => "list",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if has_name => "delete",
        "DELETE" => "deletecollection",
        _ => "",
    }
}

/// The verb of a non-resource request: the lowercase HTTP method.
pub fn non_resource_verb(method: &str) -> String {
    method.to_lowercase()
}

/// How the apiserver reads `?watch=<v>` (metav1 `Convert_Slice_string_To_bool`): every value
/// but `0` and `false` (any case), the empty one included, means true.
pub fn watch_param(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

// ---------------------------------------------------------------------------------------------
// Service account names (k8s.io/apiserver/pkg/authentication/serviceaccount)
// ---------------------------------------------------------------------------------------------

/// `MakeUsername`: `system:serviceaccount:<namespace>:<name>`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_USERNAME_PREFIX}{namespace}:{name}")
}

/// `MakeGroupNames`: the groups every service account of a namespace is in.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec!["system:serviceaccounts".to_string(), format!("system:serviceaccounts:{namespace}")]
}

/// One DNS-1123 label's characters: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => ok(first) && ok(last) && b.iter().all(|c| ok(c) || *c == b'-'),
        _ => false,
    }
}

/// `IsDNS1123Label` (what `ValidateNamespaceName` checks).
fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && is_label_chars(s)
}

/// `IsDNS1123Subdomain` (what `ValidateServiceAccountName` checks): at most 253 characters of
/// dot-separated labels (the regex puts no limit on one label).
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_chars)
}

/// `SplitUsername`: `(namespace, name)` of a service account user name whose namespace is a
/// valid namespace name and whose name a valid service account name; `None` otherwise.
pub fn split_service_account_username(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix(SERVICE_ACCOUNT_USERNAME_PREFIX)?;
    let mut parts = rest.split(':');
    let (ns, name) = (parts.next()?, parts.next()?);
    if parts.next().is_some() || !is_dns1123_label(ns) || !is_dns1123_subdomain(name) {
        return None;
    }
    Some((ns, name))
}

// ---------------------------------------------------------------------------------------------
// Impersonation (filters/impersonation.go)
// ---------------------------------------------------------------------------------------------

const IMPERSONATE_USER: &str = "impersonate-user";
const IMPERSONATE_GROUP: &str = "impersonate-group";
const IMPERSONATE_UID: &str = "impersonate-uid";
const IMPERSONATE_EXTRA_PREFIX: &str = "impersonate-extra-";

/// `v1.ObjectReference` as `%v` prints it: `{Kind Namespace Name UID APIVersion ResourceVersion FieldPath}`.
struct ImpersonationRequest {
    kind: &'static str,
    namespace: String,
    name: String,
    api_version: &'static str,
    field_path: String,
}

impl ImpersonationRequest {
    fn go_string(&self) -> String {
        format!("{{{} {} {}  {}  {}}}", self.kind, self.namespace, self.name, self.api_version, self.field_path)
    }
}

/// `url.PathUnescape`; `None` on a malformed `%` escape or a result that is not UTF-8.
fn path_unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hi = b.get(i + 1).and_then(|h| (*h as char).to_digit(16))?;
            let lo = b.get(i + 2).and_then(|h| (*h as char).to_digit(16))?;
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `unescapeExtraKey`: the lowercased header suffix, %-decoded when that works (kept as is
/// otherwise, as upstream keeps malformed keys).
fn unescape_extra_key(lowered: &str) -> String {
    path_unescape(lowered).unwrap_or_else(|| lowered.to_string())
}

fn extra_key(header_name: &str) -> Option<String> {
    let prefix = header_name.get(..IMPERSONATE_EXTRA_PREFIX.len())?;
    if !prefix.eq_ignore_ascii_case(IMPERSONATE_EXTRA_PREFIX) {
        return None;
    }
    let suffix = header_name.get(IMPERSONATE_EXTRA_PREFIX.len()..)?;
    Some(unescape_extra_key(&suffix.to_lowercase()))
}

/// The values of every line of one header, in order (names are case-insensitive).
fn header_values<'h>(headers: &'h [(String, String)], name: &str) -> Vec<&'h String> {
    headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v).collect()
}

/// `buildImpersonationRequests`.
fn build_impersonation_requests(headers: &[(String, String)]) -> Result<Vec<ImpersonationRequest>, String> {
    let header = |name: &str| header_values(headers, name);
    let mut requests = Vec::new();
    let requested_user = header(IMPERSONATE_USER).first().map(|v| v.as_str()).unwrap_or("");
    let has_user = !requested_user.is_empty();
    if has_user {
        let req = match split_service_account_username(requested_user) {
            Some((ns, name)) => ImpersonationRequest {
                kind: "ServiceAccount",
                namespace: ns.to_string(),
                name: name.to_string(),
                api_version: "",
                field_path: String::new(),
            },
            None => ImpersonationRequest {
                kind: "User",
                namespace: String::new(),
                name: requested_user.to_string(),
                api_version: "",
                field_path: String::new(),
            },
        };
        requests.push(req);
    }
    let mut has_groups = false;
    for g in header(IMPERSONATE_GROUP) {
        has_groups = true;
        requests.push(ImpersonationRequest {
            kind: "Group",
            namespace: String::new(),
            name: g.clone(),
            api_version: "",
            field_path: String::new(),
        });
    }
    // Go iterates a map of canonical header names: values of one header stay together. Keys are
    // taken here in order of first appearance.
    let mut extra_names: Vec<String> = Vec::new();
    for (k, _) in headers {
        if extra_key(k).is_some() && !extra_names.iter().any(|n| n.eq_ignore_ascii_case(k)) {
            extra_names.push(k.clone());
        }
    }
    let has_extra = !extra_names.is_empty();
    for hn in &extra_names {
        let key = extra_key(hn).unwrap_or_default();
        for v in header(hn) {
            requests.push(ImpersonationRequest {
                kind: "UserExtra",
                namespace: String::new(),
                name: v.to_string(),
                api_version: "authentication.k8s.io/v1",
                field_path: key.clone(),
            });
        }
    }
    let requested_uid = header(IMPERSONATE_UID).first().map(|v| v.as_str()).unwrap_or("");
    let has_uid = !requested_uid.is_empty();
    if has_uid {
        requests.push(ImpersonationRequest {
            kind: "UID",
            namespace: String::new(),
            name: requested_uid.to_string(),
            api_version: "authentication.k8s.io/v1",
            field_path: String::new(),
        });
    }
    if (has_groups || has_extra || has_uid) && !has_user {
        let list: Vec<String> = requests.iter().map(ImpersonationRequest::go_string).collect();
        return Err(format!("requested [{}] without impersonating a user", list.join(" ")));
    }
    Ok(requests)
}

/// `WithImpersonation`, minus the authorizer calls: given the authenticated requester and the
/// request headers (names matched case-insensitively, one pair per header line), returns
/// - `Ok(None)` when no impersonation header is present;
/// - `Ok(Some((user, checks)))`: the user the request then runs as, and the attributes that must
///   each be allowed (in order; the first refused one is answered with
///   [`forbidden_status`]`(check, reason)`): verb `impersonate` on `users` / `groups` (core
///   group, name = the value), `serviceaccounts` (core group, in the service account's
///   namespace) for `system:serviceaccount:<ns>:<name>`, `uids` and `userextras/<key>` (group
///   `authentication.k8s.io`, version `v1`). Service accounts get their namespace's groups
///   unless `Impersonate-Group` is given; a non-anonymous user gets `system:authenticated`
///   unless `system:authenticated` or `system:unauthenticated` is among the groups;
///   `system:anonymous` gets `system:unauthenticated`.
/// - `Err(message)` for groups, extras or uid without `Impersonate-User`, e.g.
///   `requested [{Group  devs    }] without impersonating a user`. Upstream answers this with
///   `responsewriters.InternalError`, a text/plain 500 ([`internal_error_body`]), not a 400.
pub fn impersonation(
    requester: &UserInfo,
    headers: &[(String, String)],
) -> Result<Option<(UserInfo, Vec<Attributes>)>, String> {
    let requests = build_impersonation_requests(headers)?;
    if requests.is_empty() {
        return Ok(None);
    }
    let groups_specified = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(IMPERSONATE_GROUP));
    let mut username = String::new();
    let mut groups: Vec<String> = Vec::new();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut uid = String::new();
    let mut checks = Vec::with_capacity(requests.len());
    for r in requests {
        let (group, version) = if r.api_version.is_empty() { ("", "") } else { (AUTHENTICATION_GROUP, "v1") };
        let mut a = Attributes {
            user: requester.clone(),
            verb: IMPERSONATE_VERB.to_string(),
            namespace: r.namespace.clone(),
            api_group: group.to_string(),
            api_version: version.to_string(),
            name: r.name.clone(),
            resource_request: true,
            ..Default::default()
        };
        match r.kind {
            "ServiceAccount" => {
                a.resource = "serviceaccounts".into();
                username = service_account_username(&r.namespace, &r.name);
                if !groups_specified {
                    groups = service_account_groups(&r.namespace);
                }
            }
            "User" => {
                a.resource = "users".into();
                username = r.name;
            }
            "Group" => {
                a.resource = "groups".into();
                groups.push(r.name);
            }
            "UserExtra" => {
                a.resource = "userextras".into();
                a.subresource = r.field_path.clone();
                extra.entry(r.field_path).or_default().push(r.name);
            }
            _ => {
                a.resource = "uids".into();
                uid = r.name;
            }
        }
        checks.push(a);
    }
    if username != ANONYMOUS {
        if !groups.iter().any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED) {
            groups.push(ALL_AUTHENTICATED.to_string());
        }
    } else if !groups.iter().any(|g| g == ALL_UNAUTHENTICATED) {
        groups.push(ALL_UNAUTHENTICATED.to_string());
    }
    Ok(Some((UserInfo { name: username, uid, groups, extra }, checks)))
}

/// Why an impersonated request is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ImpersonationError {
    /// Malformed headers: upstream answers 500 text/plain with
    /// [`internal_error_body`]`(request_uri, message)`.
    Malformed(String),
    /// A check was refused: 403 with this `Status` body (see [`forbidden_status`]).
    Forbidden(Value),
}

/// [`impersonation`] followed by the checks through [`authorize_chain`], as the filter does:
/// `Ok(None)` without impersonation headers, `Ok(Some(user))` to continue as `user`.
pub fn authorize_impersonation(
    requester: &UserInfo,
    headers: &[(String, String)],
    policy: &Policy,
) -> Result<Option<UserInfo>, ImpersonationError> {
    let Some((user, checks)) = impersonation(requester, headers).map_err(ImpersonationError::Malformed)? else {
        return Ok(None);
    };
    for check in &checks {
        let d = authorize_chain(check, policy);
        if !d.is_allowed() {
            return Err(ImpersonationError::Forbidden(forbidden_status(check, d.reason())));
        }
    }
    Ok(Some(user))
}

// ---------------------------------------------------------------------------------------------
// Reviews (pkg/registry/authorization)
// ---------------------------------------------------------------------------------------------

/// `RBACAuthorizer.RulesFor` as SelfSubjectRulesReview reports it: `authorization.k8s.io/v1`
/// `ResourceRule`s (`verbs`, `apiGroups`, `resources`, `resourceNames`; empty lists omitted but
/// `verbs`) for every applying rule with resources, and `NonResourceRule`s (`verbs`,
/// `nonResourceURLs`) for every one with non-resource URLs, in visiting order, not merged.
#[cfg(test)]
pub fn rules_for(user: &UserInfo, namespace: &str, policy: &Policy) -> (Vec<Value>, Vec<Value>) {
    let (res, non_res, _) = rules_with_errors(user, namespace, policy);
    (res, non_res)
}

fn rules_with_errors(user: &UserInfo, namespace: &str, policy: &Policy) -> (Vec<Value>, Vec<Value>, Vec<String>) {
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    let mut errors = Vec::new();
    visit_rules_for(user, namespace, policy, &mut |visit| {
        match visit {
            Visit::Rule(_, rule) => {
                let r = Rule::parse(rule);
                let list = |l: &[&str]| Value::Array(l.iter().map(|s| Value::from(*s)).collect());
                if !r.resources.is_empty() {
                    let mut m = Map::new();
                    m.insert("verbs".into(), list(&r.verbs));
                    if !r.api_groups.is_empty() {
                        m.insert("apiGroups".into(), list(&r.api_groups));
                    }
                    m.insert("resources".into(), list(&r.resources));
                    if !r.resource_names.is_empty() {
                        m.insert("resourceNames".into(), list(&r.resource_names));
                    }
                    resource_rules.push(Value::Object(m));
                }
                if !r.non_resource_urls.is_empty() {
                    let mut m = Map::new();
                    m.insert("verbs".into(), list(&r.verbs));
                    m.insert("nonResourceURLs".into(), list(&r.non_resource_urls));
                    non_resource_rules.push(Value::Object(m));
                }
            }
            Visit::Error(e) => errors.push(e),
        }
        true
    });
    (resource_rules, non_resource_rules, errors)
}

/// The `status` of a SelfSubjectRulesReview for `spec.namespace`:
/// `{"resourceRules": [...], "nonResourceRules": [...], "incomplete": false}` plus
/// `evaluationError` when a binding refers to a missing role. `Err` carries the 400 BadRequest
/// message for an empty namespace (`no namespace on request`).
pub fn self_subject_rules_review_status(user: &UserInfo, namespace: &str, policy: &Policy) -> Result<Value, String> {
    if namespace.is_empty() {
        return Err("no namespace on request".to_string());
    }
    let (res, non_res, errors) = rules_with_errors(user, namespace, policy);
    let mut m = Map::new();
    m.insert("resourceRules".into(), Value::Array(res));
    m.insert("nonResourceRules".into(), Value::Array(non_res));
    m.insert("incomplete".into(), false.into());
    if !errors.is_empty() {
        m.insert("evaluationError".into(), aggregate_message(&errors).into());
    }
    Ok(Value::Object(m))
}

/// The user a SubjectAccessReview `spec` asks about (`user`, `groups`, `extra`, `uid`).
pub fn access_review_user(spec: &Value) -> UserInfo {
    let extra = spec
        .get("extra")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let values = v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect());
                    (k.clone(), values.unwrap_or_default())
                })
                .collect()
        })
        .unwrap_or_default();
    UserInfo {
        name: str_at(spec, &["user"]).to_string(),
        uid: str_at(spec, &["uid"]).to_string(),
        groups: str_list(spec, "groups").into_iter().map(String::from).collect(),
        extra,
    }
}

/// `ResourceAttributesFrom` / `NonResourceAttributesFrom`: the attributes a (Self|Local)
/// SubjectAccessReview `spec` asks about for `user` (`spec.resourceAttributes` when present —
/// an empty `version` means `*` — else `spec.nonResourceAttributes`).
pub fn access_review_attributes(user: &UserInfo, spec: &Value) -> Attributes {
    if let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        let version = match str_at(ra, &["version"]) {
            "" => "*",
            v => v,
        };
        Attributes {
            user: user.clone(),
            verb: str_at(ra, &["verb"]).to_string(),
            namespace: str_at(ra, &["namespace"]).to_string(),
            api_group: str_at(ra, &["group"]).to_string(),
            api_version: version.to_string(),
            resource: str_at(ra, &["resource"]).to_string(),
            subresource: str_at(ra, &["subresource"]).to_string(),
            name: str_at(ra, &["name"]).to_string(),
            resource_request: true,
            path: String::new(),
        }
    } else {
        let nra = spec.get("nonResourceAttributes").unwrap_or(&Value::Null);
        Attributes {
            user: user.clone(),
            verb: str_at(nra, &["verb"]).to_string(),
            path: str_at(nra, &["path"]).to_string(),
            resource_request: false,
            ..Default::default()
        }
    }
}

/// A `SubjectAccessReviewStatus`: `allowed`, then `denied` and `reason` when set.
pub fn access_review_status(decision: &Decision) -> Value {
    let mut m = Map::new();
    m.insert("allowed".into(), decision.is_allowed().into());
    if matches!(decision, Decision::Deny { .. }) {
        m.insert("denied".into(), true.into());
    }
    if !decision.reason().is_empty() {
        m.insert("reason".into(), decision.reason().into());
    }
    Value::Object(m)
}

// ---------------------------------------------------------------------------------------------
// Bootstrap policy (bootstrappolicy/policy.go)
// ---------------------------------------------------------------------------------------------

fn bootstrap_metadata(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

/// `PolicyRuleBuilder.Rule()` sorts every list.
fn sorted(items: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = items.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": bootstrap_metadata(name), "rules": rules})
}

fn cluster_role_binding(name: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> =
        groups.iter().map(|g| json!({"kind": "Group", "apiGroup": RBAC_GROUP, "name": g})).collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": bootstrap_metadata(name),
        "subjects": subjects,
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name}})
}

/// The bootstrap ClusterRoles `system:discovery`, `system:basic-user` and
/// `system:public-info-viewer` and their ClusterRoleBindings (the first two to
/// `system:authenticated`, the last to `system:authenticated` and `system:unauthenticated`),
/// labelled `kubernetes.io/bootstrapping: rbac-defaults` and annotated
/// `rbac.authorization.kubernetes.io/autoupdate: "true"`, ready to create. Roles first.
pub fn bootstrap_policy() -> Vec<Value> {
    let discovery = sorted(&[
        "/livez",
        "/readyz",
        "/healthz",
        "/version",
        "/version/",
        "/openapi",
        "/openapi/*",
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
    ]);
    let public_info = sorted(&["/livez", "/readyz", "/healthz", "/version", "/version/"]);
    vec![
        cluster_role("system:discovery", json!([{"verbs": ["get"], "nonResourceURLs": discovery}])),
        cluster_role(
            "system:basic-user",
            json!([
                {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                {"verbs": ["create"], "apiGroups": [AUTHENTICATION_GROUP], "resources": ["selfsubjectreviews"]},
            ]),
        ),
        cluster_role("system:public-info-viewer", json!([{"verbs": ["get"], "nonResourceURLs": public_info}])),
        cluster_role_binding("system:discovery", &[ALL_AUTHENTICATED]),
        cluster_role_binding("system:basic-user", &[ALL_AUTHENTICATED]),
        cluster_role_binding("system:public-info-viewer", &[ALL_AUTHENTICATED, ALL_UNAUTHENTICATED]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // -- builders mirroring rbac_test.go ---------------------------------------------------

    fn split(s: &str) -> Vec<&str> {
        s.split(',').collect()
    }

    /// `newRule(verbs, apiGroups, resources, nonResourceURLs)`, each comma separated.
    fn new_rule(verbs: &str, groups: &str, resources: &str, urls: &str) -> Value {
        json!({"verbs": split(verbs), "apiGroups": split(groups), "resources": split(resources), "nonResourceURLs": split(urls)})
    }

    fn new_role(name: &str, ns: &str, rules: Vec<Value>) -> Arc<Value> {
        Arc::new(json!({"kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules}))
    }

    fn new_cluster_role(name: &str, rules: Vec<Value>) -> Arc<Value> {
        Arc::new(json!({"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}))
    }

    fn subjects(list: &[&str]) -> Vec<Value> {
        list.iter()
            .map(|s| {
                let (kind, name) = s.split_once(':').unwrap_or(("User", s));
                let group = if kind == "ServiceAccount" { "" } else { RBAC_GROUP };
                json!({"kind": kind, "apiGroup": group, "name": name})
            })
            .collect()
    }

    fn new_crb(name: &str, role: &str, subj: &[&str]) -> Arc<Value> {
        Arc::new(json!({"kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role}, "subjects": subjects(subj)}))
    }

    fn new_rb(name: &str, ns: &str, role_kind: &str, role: &str, subj: &[&str]) -> Arc<Value> {
        Arc::new(json!({"kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role}, "subjects": subjects(subj)}))
    }

    #[derive(Default)]
    struct Objects {
        roles: Vec<Arc<Value>>,
        role_bindings: Vec<Arc<Value>>,
        cluster_roles: Vec<Arc<Value>>,
        cluster_role_bindings: Vec<Arc<Value>>,
    }

    impl Objects {
        fn policy(&self) -> Policy<'_> {
            Policy {
                cluster_roles: &self.cluster_roles,
                cluster_role_bindings: &self.cluster_role_bindings,
                roles: &self.roles,
                role_bindings: &self.role_bindings,
            }
        }
    }

    fn user(name: &str, groups: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: if groups.is_empty() { vec![] } else { groups.split(',').map(String::from).collect() },
            ..Default::default()
        }
    }

    /// `defaultAttributes{user, groups, verb, resource, subresource, namespace, apiGroup}`.
    fn res(u: &str, groups: &str, verb: &str, resource: &str, sub: &str, ns: &str, group: &str) -> Attributes {
        Attributes {
            user: user(u, groups),
            verb: verb.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            api_group: group.into(),
            resource_request: true,
            ..Default::default()
        }
    }

    fn non_res(u: &str, groups: &str, verb: &str, path: &str) -> Attributes {
        Attributes { user: user(u, groups), verb: verb.into(), path: path.into(), ..Default::default() }
    }

    fn allowed(a: &Attributes, o: &Objects) -> bool {
        authorize(a, &o.policy()).is_allowed()
    }

    // -- TestAuthorizer ----------------------------------------------------------------------

    #[test]
    fn upstream_authorizer_table() {
        let cases: Vec<(Objects, Vec<Attributes>, Vec<Attributes>)> = vec![
            (
                Objects {
                    cluster_roles: vec![new_cluster_role("admin", vec![new_rule("*", "*", "*", "*")])],
                    role_bindings: vec![new_rb("", "ns1", "ClusterRole", "admin", &["User:admin", "Group:admins"])],
                    ..Default::default()
                },
                vec![
                    res("admin", "", "get", "Pods", "", "ns1", ""),
                    res("admin", "", "watch", "Pods", "", "ns1", ""),
                    res("admin", "group1", "watch", "Foobar", "", "ns1", ""),
                    res("joe", "admins", "watch", "Foobar", "", "ns1", ""),
                    res("joe", "group1,admins", "watch", "Foobar", "", "ns1", ""),
                ],
                vec![
                    res("admin", "", "GET", "Pods", "", "ns2", ""),
                    res("admin", "", "GET", "Nodes", "", "", ""),
                    res("admin", "admins", "GET", "Pods", "", "ns2", ""),
                    res("admin", "admins", "GET", "Nodes", "", "", ""),
                ],
            ),
            (
                Objects {
                    cluster_roles: vec![
                        new_cluster_role("non-resource-url-getter", vec![new_rule("get", "", "", "/apis")]),
                        new_cluster_role("non-resource-url", vec![new_rule("*", "", "", "/apis")]),
                        new_cluster_role("non-resource-url-prefix", vec![new_rule("get", "", "", "/apis/*")]),
                    ],
                    cluster_role_bindings: vec![
                        new_crb("a", "non-resource-url-getter", &["User:foo", "Group:bar"]),
                        new_crb("b", "non-resource-url", &["User:admin", "Group:admin"]),
                        new_crb("c", "non-resource-url-prefix", &["User:prefixed", "Group:prefixed"]),
                    ],
                    ..Default::default()
                },
                vec![
                    non_res("foo", "", "get", "/apis"),
                    non_res("", "bar", "get", "/apis"),
                    non_res("admin", "", "get", "/apis"),
                    non_res("", "admin", "get", "/apis"),
                    non_res("admin", "", "watch", "/apis"),
                    non_res("", "admin", "watch", "/apis"),
                    non_res("prefixed", "", "get", "/apis/v1"),
                    non_res("", "prefixed", "get", "/apis/v1"),
                    non_res("prefixed", "", "get", "/apis/v1/foobar"),
                    non_res("", "prefixed", "get", "/apis/v1/foorbar"),
                ],
                vec![
                    non_res("foo", "", "watch", "/apis"),
                    non_res("", "bar", "watch", "/apis"),
                    non_res("foo", "", "get", "/api/v1"),
                    non_res("", "bar", "get", "/api/v1"),
                    non_res("admin", "", "get", "/api/v1"),
                    non_res("", "admin", "get", "/api/v1"),
                    non_res("prefixed", "", "get", "/api/v1"),
                    non_res("", "prefixed", "get", "/api/v1"),
                ],
            ),
            (
                Objects {
                    cluster_roles: vec![new_cluster_role("admin", vec![new_rule("*", "*", "pods", "*")])],
                    role_bindings: vec![new_rb("", "ns1", "ClusterRole", "admin", &["User:admin", "Group:admins"])],
                    ..Default::default()
                },
                vec![res("admin", "", "get", "pods", "", "ns1", "")],
                vec![res("admin", "", "get", "pods", "status", "ns1", "")],
            ),
            (
                Objects {
                    cluster_roles: vec![new_cluster_role("admin", vec![new_rule("*", "*", "pods/status", "*")])],
                    role_bindings: vec![new_rb("", "ns1", "ClusterRole", "admin", &["User:admin", "Group:admins"])],
                    ..Default::default()
                },
                vec![res("admin", "", "get", "pods", "status", "ns1", "")],
                vec![res("admin", "", "get", "pods", "", "ns1", "")],
            ),
        ];
        for (i, (objects, pass, fail)) in cases.iter().enumerate() {
            for a in pass {
                assert!(allowed(a, objects), "case {i}: incorrectly restricted {a:?}");
            }
            for a in fail {
                assert!(!allowed(a, objects), "case {i}: incorrectly passed {a:?}");
            }
        }
    }

    // -- TestRuleMatches ---------------------------------------------------------------------

    fn rr(verb: &str, group: &str, resource: &str, sub: &str) -> Attributes {
        res("", "", verb, resource, sub, "", group)
    }

    fn nr(verb: &str, url: &str) -> Attributes {
        non_res("", "", verb, url)
    }

    /// Requests and whether the rule allows them.
    type Expectations = Vec<(Attributes, bool)>;

    #[test]
    fn upstream_rule_matches_table() {
        let r = |verbs: &[&str], groups: &[&str], resources: &[&str]| json!({"verbs": verbs, "apiGroups": groups, "resources": resources});
        let u = |verbs: &[&str], urls: &[&str]| json!({"verbs": verbs, "nonResourceURLs": urls});
        let cases: Vec<(&str, Value, Expectations)> = vec![
            (
                "star verb, exact match other",
                r(&["*"], &["group1"], &["resource1"]),
                vec![
                    (rr("verb1", "group1", "resource1", ""), true),
                    (rr("verb1", "group2", "resource1", ""), false),
                    (rr("verb1", "group1", "resource2", ""), false),
                    (rr("verb1", "group2", "resource2", ""), false),
                    (rr("verb2", "group1", "resource1", ""), true),
                    (rr("verb2", "group2", "resource1", ""), false),
                    (rr("verb2", "group1", "resource2", ""), false),
                    (rr("verb2", "group2", "resource2", ""), false),
                ],
            ),
            (
                "star group, exact match other",
                r(&["verb1"], &["*"], &["resource1"]),
                vec![
                    (rr("verb1", "group1", "resource1", ""), true),
                    (rr("verb1", "group2", "resource1", ""), true),
                    (rr("verb1", "group1", "resource2", ""), false),
                    (rr("verb1", "group2", "resource2", ""), false),
                    (rr("verb2", "group1", "resource1", ""), false),
                    (rr("verb2", "group2", "resource1", ""), false),
                    (rr("verb2", "group1", "resource2", ""), false),
                    (rr("verb2", "group2", "resource2", ""), false),
                ],
            ),
            (
                "star resource, exact match other",
                r(&["verb1"], &["group1"], &["*"]),
                vec![
                    (rr("verb1", "group1", "resource1", ""), true),
                    (rr("verb1", "group2", "resource1", ""), false),
                    (rr("verb1", "group1", "resource2", ""), true),
                    (rr("verb1", "group2", "resource2", ""), false),
                    (rr("verb2", "group1", "resource1", ""), false),
                    (rr("verb2", "group2", "resource1", ""), false),
                    (rr("verb2", "group1", "resource2", ""), false),
                    (rr("verb2", "group2", "resource2", ""), false),
                ],
            ),
            (
                "tuple expansion",
                r(&["verb1", "verb2"], &["group1", "group2"], &["resource1", "resource2"]),
                vec![
                    (rr("verb1", "group1", "resource1", ""), true),
                    (rr("verb1", "group2", "resource1", ""), true),
                    (rr("verb1", "group1", "resource2", ""), true),
                    (rr("verb1", "group2", "resource2", ""), true),
                    (rr("verb2", "group1", "resource1", ""), true),
                    (rr("verb2", "group2", "resource1", ""), true),
                    (rr("verb2", "group1", "resource2", ""), true),
                    (rr("verb2", "group2", "resource2", ""), true),
                ],
            ),
            (
                "subresource expansion",
                r(&["*"], &["*"], &["resource1/subresource1"]),
                vec![
                    (rr("verb1", "group1", "resource1", "subresource1"), true),
                    (rr("verb1", "group2", "resource1", "subresource2"), false),
                    (rr("verb1", "group1", "resource2", "subresource1"), false),
                    (rr("verb1", "group2", "resource2", "subresource1"), false),
                    (rr("verb2", "group1", "resource1", "subresource1"), true),
                    (rr("verb2", "group2", "resource1", "subresource2"), false),
                    (rr("verb2", "group1", "resource2", "subresource1"), false),
                    (rr("verb2", "group2", "resource2", "subresource1"), false),
                ],
            ),
            (
                "star nonresource, exact match other",
                u(&["verb1"], &["*"]),
                vec![
                    (nr("verb1", "/foo"), true),
                    (nr("verb1", "/foo/bar"), true),
                    (nr("verb1", "/foo/baz"), true),
                    (nr("verb1", "/foo/bar/one"), true),
                    (nr("verb1", "/foo/baz/one"), true),
                    (nr("verb2", "/foo"), false),
                    (nr("verb2", "/foo/bar"), false),
                    (nr("verb2", "/foo/baz"), false),
                    (nr("verb2", "/foo/bar/one"), false),
                    (nr("verb2", "/foo/baz/one"), false),
                ],
            ),
            (
                "star nonresource subpath",
                u(&["verb1"], &["/foo/*"]),
                vec![
                    (nr("verb1", "/foo"), false),
                    (nr("verb1", "/foo/bar"), true),
                    (nr("verb1", "/foo/baz"), true),
                    (nr("verb1", "/foo/bar/one"), true),
                    (nr("verb1", "/foo/baz/one"), true),
                    (nr("verb1", "/notfoo"), false),
                    (nr("verb1", "/notfoo/bar"), false),
                    (nr("verb1", "/notfoo/baz"), false),
                    (nr("verb1", "/notfoo/bar/one"), false),
                    (nr("verb1", "/notfoo/baz/one"), false),
                ],
            ),
            (
                "star verb, exact nonresource",
                u(&["*"], &["/foo", "/foo/bar/one"]),
                vec![
                    (nr("verb1", "/foo"), true),
                    (nr("verb1", "/foo/bar"), false),
                    (nr("verb1", "/foo/baz"), false),
                    (nr("verb1", "/foo/bar/one"), true),
                    (nr("verb1", "/foo/baz/one"), false),
                    (nr("verb2", "/foo"), true),
                    (nr("verb2", "/foo/bar"), false),
                    (nr("verb2", "/foo/baz"), false),
                    (nr("verb2", "/foo/bar/one"), true),
                    (nr("verb2", "/foo/baz/one"), false),
                ],
            ),
        ];
        for (name, rule, expectations) in cases {
            for (a, want) in expectations {
                assert_eq!(rule_allows(&a, &rule), want, "{name}: {a:?}");
            }
        }
    }

    // -- evaluation helpers: wildcard subresources, resource names ---------------------------

    #[test]
    fn star_slash_subresource_and_no_resource_slash_star() {
        let star_scale = json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/scale"]});
        assert!(rule_allows(&rr("get", "apps", "deployments", "scale"), &star_scale));
        assert!(rule_allows(&rr("get", "", "replicationcontrollers", "scale"), &star_scale));
        assert!(!rule_allows(&rr("get", "apps", "deployments", ""), &star_scale));
        assert!(!rule_allows(&rr("get", "apps", "deployments", "status"), &star_scale));
        // The suffix must be exactly the subresource: "*/xscale" is not "*/scale".
        let star_x = json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/xscale"]});
        assert!(!rule_allows(&rr("get", "apps", "deployments", "scale"), &star_x));
        // `pods/*` is not a wildcard upstream: it matches no real subresource and not pods.
        let pods_star = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/*"]});
        assert!(!rule_allows(&rr("get", "", "pods", "log"), &pods_star));
        assert!(!rule_allows(&rr("get", "", "pods", ""), &pods_star));
        // `*` covers subresources too.
        let star = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]});
        assert!(rule_allows(&rr("get", "", "pods", "log"), &star));
    }

    #[test]
    fn resource_names_need_a_named_request() {
        let rule = json!({"verbs": ["get", "list", "watch", "update", "delete"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["app-config"]});
        let named = |verb: &str, name: &str| Attributes { name: name.into(), ..rr(verb, "", "configmaps", "") };
        assert!(rule_allows(&named("get", "app-config"), &rule));
        assert!(rule_allows(&named("update", "app-config"), &rule));
        assert!(!rule_allows(&named("get", "other"), &rule));
        // list / watch without a name (no metadata.name field selector) never match.
        assert!(!rule_allows(&named("list", ""), &rule));
        assert!(!rule_allows(&named("watch", ""), &rule));
        // With `fieldSelector=metadata.name=app-config` the apiserver puts the name in.
        assert!(rule_allows(&named("list", "app-config"), &rule));
        assert!(rule_allows(&named("watch", "app-config"), &rule));
    }

    #[test]
    fn non_resource_multiple_trailing_stars() {
        let rule = json!({"verbs": ["get"], "nonResourceURLs": ["/logs**"]});
        assert!(rule_allows(&nr("get", "/logs/kube.log"), &rule));
        assert!(rule_allows(&nr("get", "/logs"), &rule));
        assert!(!rule_allows(&nr("get", "/log"), &rule));
        // A resource rule never grants a non-resource URL and vice versa.
        let resource_rule = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]});
        assert!(!rule_allows(&nr("get", "/healthz"), &resource_rule));
        let url_rule = json!({"verbs": ["*"], "nonResourceURLs": ["*"]});
        assert!(!rule_allows(&rr("get", "", "pods", ""), &url_rule));
    }

    // -- a namespaced Role bound to a service account -----------------------------------------

    fn team_a() -> Objects {
        Objects {
            roles: vec![new_role(
                "configmap-reader",
                "team-a",
                vec![json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]})],
            )],
            role_bindings: vec![Arc::new(json!({
                "kind": "RoleBinding",
                "metadata": {"name": "robot-reads", "namespace": "team-a"},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "configmap-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "team-a"}],
            }))],
            ..Default::default()
        }
    }

    fn robot() -> UserInfo {
        UserInfo {
            name: "system:serviceaccount:team-a:robot".into(),
            uid: "4f1c".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:team-a".into(),
                ALL_AUTHENTICATED.into(),
            ],
            ..Default::default()
        }
    }

    fn robot_attrs(verb: &str, ns: &str, name: &str) -> Attributes {
        Attributes {
            user: robot(),
            verb: verb.into(),
            namespace: ns.into(),
            api_version: "v1".into(),
            resource: "configmaps".into(),
            name: name.into(),
            resource_request: true,
            ..Default::default()
        }
    }

    #[test]
    fn service_account_role_in_its_namespace_only() {
        let o = team_a();
        let p = o.policy();
        let d = authorize(&robot_attrs("get", "team-a", "settings"), &p);
        assert_eq!(
            d,
            Decision::Allow {
                reason: r#"RBAC: allowed by RoleBinding "robot-reads/team-a" of Role "configmap-reader" to ServiceAccount "robot/team-a""#.into()
            }
        );

        let wrong_verb = robot_attrs("list", "team-a", "");
        assert_eq!(authorize(&wrong_verb, &p), Decision::NoOpinion { reason: String::new() });
        assert_eq!(
            forbidden_status_message(&wrong_verb, ""),
            r#"configmaps is forbidden: User "system:serviceaccount:team-a:robot" cannot list resource "configmaps" in API group "" in the namespace "team-a""#
        );

        let elsewhere = robot_attrs("get", "default", "settings");
        assert!(!authorize_chain(&elsewhere, &p).is_allowed());
        assert_eq!(
            forbidden_message(&elsewhere),
            r#"User "system:serviceaccount:team-a:robot" cannot get resource "configmaps" in API group "" in the namespace "default""#
        );
        assert_eq!(
            forbidden_status(&elsewhere, ""),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": r#"configmaps "settings" is forbidden: User "system:serviceaccount:team-a:robot" cannot get resource "configmaps" in API group "" in the namespace "default""#,
                "reason": "Forbidden", "details": {"name": "settings", "kind": "configmaps"}, "code": 403})
        );

        let cluster = robot_attrs("list", "", "");
        assert!(!authorize(&cluster, &p).is_allowed());
        assert_eq!(
            forbidden_status_message(&cluster, ""),
            r#"configmaps is forbidden: User "system:serviceaccount:team-a:robot" cannot list resource "configmaps" in API group "" at the cluster scope"#
        );
    }

    #[test]
    fn forbidden_message_variants() {
        let mut a = res("jane", "", "get", "pods", "log", "web", "");
        a.name = "api-0".into();
        assert_eq!(
            forbidden_status_message(&a, ""),
            r#"pods "api-0" is forbidden: User "jane" cannot get resource "pods/log" in API group "" in the namespace "web""#
        );
        let d = res("jane", "", "patch", "deployments", "scale", "", "apps");
        assert_eq!(
            forbidden_status_message(&d, ""),
            r#"deployments.apps is forbidden: User "jane" cannot patch resource "deployments/scale" in API group "apps" at the cluster scope"#
        );
        let n = non_res("system:anonymous", ALL_UNAUTHENTICATED, "get", "/metrics");
        assert_eq!(forbidden_message(&n), r#"User "system:anonymous" cannot get path "/metrics""#);
        assert_eq!(
            forbidden_status(&n, ""),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": r#"forbidden: User "system:anonymous" cannot get path "/metrics""#,
                "reason": "Forbidden", "details": {}, "code": 403})
        );
        // HTML-looking characters are escaped, quotes use Go's %q.
        let h = non_res("<b>\"x\"", "", "get", "/a&b");
        assert_eq!(forbidden_message(&h), r#"User "&lt;b&gt;\"x\"" cannot get path "/a&amp;b""#);
        // The reason follows the message.
        assert_eq!(
            forbidden_status_message(&n, "RBAC: boom"),
            r#"forbidden: User "system:anonymous" cannot get path "/metrics": RBAC: boom"#
        );
    }

    // -- subjects and binding scopes -----------------------------------------------------------

    #[test]
    fn service_account_subject_namespace_defaults_to_the_binding() {
        let mut o = team_a();
        if let Some(s) = o.role_bindings.first_mut().and_then(|rb| Arc::make_mut(rb).pointer_mut("/subjects/0")) {
            *s = json!({"kind": "ServiceAccount", "name": "robot"});
        }
        let p = o.policy();
        assert_eq!(
            authorize(&robot_attrs("get", "team-a", "x"), &p).reason(),
            r#"RBAC: allowed by RoleBinding "robot-reads/team-a" of Role "configmap-reader" to ServiceAccount "robot/team-a""#
        );
        // A service account of another namespace with the same name does not match.
        let mut other = robot_attrs("get", "team-a", "x");
        other.user.name = "system:serviceaccount:team-b:robot".into();
        assert!(!authorize(&other, &p).is_allowed());

        // In a ClusterRoleBinding a namespace-less ServiceAccount subject matches nobody.
        let o2 = Objects {
            cluster_roles: vec![new_cluster_role("all", vec![new_rule("*", "*", "*", "*")])],
            cluster_role_bindings: vec![Arc::new(
                json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "all"},
                "subjects": [{"kind": "ServiceAccount", "name": "robot"}]}),
            )],
            ..Default::default()
        };
        assert!(!authorize(&robot_attrs("get", "team-a", "x"), &o2.policy()).is_allowed());
    }

    #[test]
    fn rolebinding_to_clusterrole_grants_in_its_namespace_only() {
        let o = Objects {
            cluster_roles: vec![new_cluster_role(
                "view",
                vec![json!({"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]})],
            )],
            role_bindings: vec![new_rb("jane-view", "dev", "ClusterRole", "view", &["User:jane"])],
            cluster_role_bindings: vec![new_crb("ops-view", "view", &["Group:ops"])],
            ..Default::default()
        };
        let p = o.policy();
        assert!(authorize(&res("jane", "", "list", "pods", "", "dev", ""), &p).is_allowed());
        assert!(!authorize(&res("jane", "", "list", "pods", "", "prod", ""), &p).is_allowed());
        assert!(!authorize(&res("jane", "", "list", "pods", "", "", ""), &p).is_allowed());
        assert_eq!(
            authorize(&res("jane", "", "list", "pods", "", "dev", ""), &p).reason(),
            r#"RBAC: allowed by RoleBinding "jane-view/dev" of ClusterRole "view" to User "jane""#
        );
        // ClusterRoleBinding: everywhere, including cluster scope; cluster bindings come first.
        for ns in ["dev", "prod", ""] {
            assert_eq!(
                authorize(&res("bob", "ops", "watch", "pods", "", ns, ""), &p).reason(),
                r#"RBAC: allowed by ClusterRoleBinding "ops-view" of ClusterRole "view" to Group "ops""#
            );
        }
        // A Role of another namespace with the binding's role name does not count.
        let o2 = Objects {
            roles: vec![new_role("r", "other", vec![new_rule("*", "*", "*", "*")])],
            role_bindings: vec![new_rb("rb", "dev", "Role", "r", &["User:jane"])],
            ..Default::default()
        };
        assert_eq!(
            authorize(&res("jane", "", "get", "pods", "", "dev", ""), &o2.policy()),
            Decision::NoOpinion { reason: r#"RBAC: role.rbac.authorization.k8s.io "r" not found"#.into() }
        );
    }

    #[test]
    fn resolution_errors_become_the_reason() {
        let o = Objects {
            cluster_role_bindings: vec![
                new_crb("a", "missing", &["Group:system:authenticated"]),
                new_crb("b", "missing", &["Group:system:authenticated"]),
                new_crb("c", "gone", &["Group:system:authenticated"]),
                new_crb("d", "gone", &["Group:nobody"]),
            ],
            ..Default::default()
        };
        let a = res("jane", ALL_AUTHENTICATED, "get", "pods", "", "", "");
        let d = authorize(&a, &o.policy());
        assert_eq!(
            d.reason(),
            r#"RBAC: [clusterrole.rbac.authorization.k8s.io "missing" not found, clusterrole.rbac.authorization.k8s.io "gone" not found]"#
        );
        assert_eq!(
            forbidden_status_message(&a, d.reason()),
            r#"pods is forbidden: User "jane" cannot get resource "pods" in API group "" at the cluster scope: RBAC: [clusterrole.rbac.authorization.k8s.io "missing" not found, clusterrole.rbac.authorization.k8s.io "gone" not found]"#
        );
        // An unsupported roleRef kind.
        let o2 = Objects {
            cluster_role_bindings: vec![Arc::new(
                json!({"metadata": {"name": "x"}, "roleRef": {"kind": "Thing", "name": "t"},
                "subjects": [{"kind": "User", "name": "jane"}]}),
            )],
            ..Default::default()
        };
        assert_eq!(authorize(&a, &o2.policy()).reason(), r#"RBAC: unsupported role reference kind: "Thing""#);
        // Allowed despite errors: no error in the reason.
        let o3 = Objects {
            cluster_roles: vec![new_cluster_role("pods", vec![new_rule("get", "", "pods", "")])],
            cluster_role_bindings: vec![new_crb("a", "missing", &["User:jane"]), new_crb("b", "pods", &["User:jane"])],
            ..Default::default()
        };
        assert_eq!(
            authorize(&a, &o3.policy()).reason(),
            r#"RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "pods" to User "jane""#
        );
    }

    #[test]
    fn system_masters_is_only_special_in_front_of_rbac() {
        let o = Objects::default();
        let a = res("admin", SYSTEM_MASTERS, "delete", "nodes", "", "", "");
        assert_eq!(authorize(&a, &o.policy()), Decision::NoOpinion { reason: String::new() });
        assert!(privileged(&a.user));
        assert_eq!(authorize_chain(&a, &o.policy()), Decision::Allow { reason: String::new() });
        assert!(!privileged(&user("jane", "system:authenticated")));
    }

    // -- rules review ------------------------------------------------------------------------

    #[test]
    fn rules_for_a_service_account() {
        let mut o = team_a();
        o.cluster_roles.extend(bootstrap_policy().into_iter().filter(|v| v["kind"] == "ClusterRole").map(Arc::new));
        o.cluster_role_bindings
            .extend(bootstrap_policy().into_iter().filter(|v| v["kind"] == "ClusterRoleBinding").map(Arc::new));
        let (res_rules, non_res) = rules_for(&robot(), "team-a", &o.policy());
        assert_eq!(
            res_rules,
            vec![
                json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
                json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]}),
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}),
            ]
        );
        assert_eq!(non_res.len(), 2);
        assert_eq!(non_res.first().and_then(|r| r.get("verbs")), Some(&json!(["get"])));
        // In another namespace only the cluster-wide rules remain.
        let (elsewhere, _) = rules_for(&robot(), "default", &o.policy());
        assert_eq!(elsewhere.len(), 2);

        let status = self_subject_rules_review_status(&robot(), "team-a", &o.policy());
        assert_eq!(status.as_ref().ok().and_then(|s| s.get("incomplete")), Some(&json!(false)));
        assert!(status.as_ref().ok().and_then(|s| s.get("evaluationError")).is_none());
        assert_eq!(self_subject_rules_review_status(&robot(), "", &o.policy()), Err("no namespace on request".into()));

        let broken = Objects {
            role_bindings: vec![new_rb("x", "team-a", "Role", "nope", &["User:jane"])],
            ..Default::default()
        };
        assert_eq!(
            self_subject_rules_review_status(&user("jane", ""), "team-a", &broken.policy()),
            Ok(json!({"resourceRules": [], "nonResourceRules": [], "incomplete": false,
                "evaluationError": r#"role.rbac.authorization.k8s.io "nope" not found"#}))
        );
    }

    #[test]
    fn rules_with_resource_names_and_both_kinds() {
        let o = Objects {
            cluster_roles: vec![new_cluster_role(
                "mixed",
                vec![
                    json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["tls"], "nonResourceURLs": ["/x"]}),
                ],
            )],
            cluster_role_bindings: vec![new_crb("m", "mixed", &["User:jane"])],
            ..Default::default()
        };
        let (r, n) = rules_for(&user("jane", ""), "ns", &o.policy());
        assert_eq!(
            r,
            vec![json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["tls"]})]
        );
        assert_eq!(n, vec![json!({"verbs": ["get"], "nonResourceURLs": ["/x"]})]);
    }

    // -- bootstrap policy ----------------------------------------------------------------------

    fn bootstrap_objects() -> Objects {
        let all = bootstrap_policy();
        Objects {
            cluster_roles: all.iter().filter(|v| v["kind"] == "ClusterRole").cloned().map(Arc::new).collect(),
            cluster_role_bindings: all
                .iter()
                .filter(|v| v["kind"] == "ClusterRoleBinding")
                .cloned()
                .map(Arc::new)
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn bootstrap_policy_grants_as_upstream() {
        let o = bootstrap_objects();
        let p = o.policy();
        let jane = "jane";
        let ssar = res(jane, ALL_AUTHENTICATED, "create", "selfsubjectaccessreviews", "", "", "authorization.k8s.io");
        assert_eq!(
            authorize(&ssar, &p).reason(),
            r#"RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole "system:basic-user" to Group "system:authenticated""#
        );
        assert!(
            authorize(
                &res(jane, ALL_AUTHENTICATED, "create", "selfsubjectreviews", "", "", "authentication.k8s.io"),
                &p
            )
            .is_allowed()
        );
        for path in ["/apis/apps/v1", "/api", "/openapi/v3", "/version", "/healthz", "/livez", "/readyz"] {
            assert!(authorize(&non_res(jane, ALL_AUTHENTICATED, "get", path), &p).is_allowed(), "{path}");
        }
        assert!(!authorize(&non_res(jane, ALL_AUTHENTICATED, "get", "/metrics"), &p).is_allowed());
        assert!(!authorize(&non_res(jane, ALL_AUTHENTICATED, "post", "/api"), &p).is_allowed());
        // Anonymous: only the public info.
        for (path, ok) in
            [("/healthz", true), ("/version", true), ("/version/", true), ("/livez", true), ("/apis", false)]
        {
            assert_eq!(authorize(&non_res(ANONYMOUS, ALL_UNAUTHENTICATED, "get", path), &p).is_allowed(), ok, "{path}");
        }
        assert!(
            !authorize(
                &res(
                    ANONYMOUS,
                    ALL_UNAUTHENTICATED,
                    "create",
                    "selfsubjectaccessreviews",
                    "",
                    "",
                    "authorization.k8s.io"
                ),
                &p
            )
            .is_allowed()
        );
        // Shape of the objects.
        let all = bootstrap_policy();
        assert_eq!(all.len(), 6);
        assert_eq!(
            all.first().map(|r| &r["rules"]),
            Some(
                &json!([{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"]}])
            )
        );
        assert_eq!(
            all.get(5),
            Some(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "system:public-info-viewer", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                "subjects": [{"kind": "Group", "apiGroup": RBAC_GROUP, "name": "system:authenticated"},
                    {"kind": "Group", "apiGroup": RBAC_GROUP, "name": "system:unauthenticated"}],
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "system:public-info-viewer"}}))
        );
    }

    // -- verbs ---------------------------------------------------------------------------------

    #[test]
    fn verbs_as_requestinfo_derives_them() {
        let cases = [
            ("GET", true, false, "get"),
            ("GET", true, true, "get"),
            ("GET", false, false, "list"),
            ("GET", false, true, "watch"),
            ("HEAD", true, false, "get"),
            ("POST", false, false, "create"),
            ("POST", true, false, "create"),
            ("PUT", true, false, "update"),
            ("PATCH", true, false, "patch"),
            ("DELETE", true, false, "delete"),
            ("DELETE", false, false, "deletecollection"),
            ("OPTIONS", true, false, ""),
            ("get", true, false, ""),
        ];
        for (m, named, watch, want) in cases {
            assert_eq!(verb_for(m, named, watch), want, "{m} {named} {watch}");
        }
        assert_eq!(non_resource_verb("GET"), "get");
        assert_eq!(non_resource_verb("Post"), "post");
        assert!(watch_param("true") && watch_param("1") && watch_param("") && watch_param("yes"));
        assert!(!watch_param("false") && !watch_param("FALSE") && !watch_param("0"));
    }

    // -- allowed subjects / access reviews -----------------------------------------------------

    #[test]
    fn allowed_subjects_lists_who_can() {
        let o = team_a();
        let (subjects, err) = allowed_subjects(&robot_attrs("get", "team-a", "x"), &o.policy());
        assert_eq!(
            subjects,
            vec![
                json!({"kind": "Group", "apiGroup": RBAC_GROUP, "name": SYSTEM_MASTERS}),
                json!({"kind": "ServiceAccount", "name": "robot", "namespace": "team-a"}),
            ]
        );
        assert_eq!(err, None);
        let (subjects, _) = allowed_subjects(&robot_attrs("get", "default", "x"), &o.policy());
        assert_eq!(subjects.len(), 1);
    }

    #[test]
    fn access_reviews() {
        let o = team_a();
        let spec = json!({"resourceAttributes": {"namespace": "team-a", "verb": "get", "resource": "configmaps"}});
        let a = access_review_attributes(&robot(), &spec);
        assert_eq!(a.api_version, "*");
        let d = authorize_chain(&a, &o.policy());
        assert_eq!(
            access_review_status(&d),
            json!({"allowed": true, "reason": r#"RBAC: allowed by RoleBinding "robot-reads/team-a" of Role "configmap-reader" to ServiceAccount "robot/team-a""#})
        );
        let spec = json!({"nonResourceAttributes": {"verb": "get", "path": "/healthz"}});
        let a = access_review_attributes(&robot(), &spec);
        assert_eq!(access_review_status(&authorize_chain(&a, &o.policy())), json!({"allowed": false}));
        assert_eq!(
            access_review_status(&Decision::Deny { reason: "no".into() }),
            json!({"allowed": false, "denied": true, "reason": "no"})
        );
        let sar = json!({"user": "jane", "uid": "1", "groups": ["a", "b"], "extra": {"scopes": ["x", "y"]}});
        let u = access_review_user(&sar);
        assert_eq!(u.name, "jane");
        assert_eq!(u.groups, vec!["a", "b"]);
        assert_eq!(u.extra.get("scopes"), Some(&vec!["x".to_string(), "y".to_string()]));
    }

    // -- impersonation -------------------------------------------------------------------------

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn impersonator_objects() -> Objects {
        Objects {
            cluster_roles: vec![new_cluster_role(
                "impersonator",
                vec![json!({"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users", "groups"]})],
            )],
            cluster_role_bindings: vec![new_crb("ci-impersonates", "impersonator", &["User:ci"])],
            roles: vec![new_role(
                "sa-impersonator",
                "team-a",
                vec![
                    json!({"verbs": ["impersonate"], "apiGroups": [""], "resources": ["serviceaccounts"], "resourceNames": ["robot"]}),
                ],
            )],
            role_bindings: vec![new_rb("ci-robot", "team-a", "Role", "sa-impersonator", &["User:ci"])],
        }
    }

    #[test]
    fn impersonating_a_user() {
        let ci = user("ci", ALL_AUTHENTICATED);
        let headers = h(&[("Impersonate-User", "jane"), ("Impersonate-Group", "devs"), ("impersonate-group", "qa")]);
        let Ok(Some((u, checks))) = impersonation(&ci, &headers) else { panic!("expected impersonation") };
        assert_eq!(
            u,
            UserInfo {
                name: "jane".into(),
                groups: vec!["devs".into(), "qa".into(), ALL_AUTHENTICATED.into()],
                ..Default::default()
            }
        );
        let described: Vec<(String, String, String)> =
            checks.iter().map(|a| (a.verb.clone(), a.resource.clone(), a.name.clone())).collect();
        assert_eq!(
            described,
            vec![
                ("impersonate".into(), "users".into(), "jane".into()),
                ("impersonate".into(), "groups".into(), "devs".into()),
                ("impersonate".into(), "groups".into(), "qa".into()),
            ]
        );
        assert!(checks.iter().all(|a| a.resource_request && a.user == ci && a.api_group.is_empty()));

        let o = impersonator_objects();
        assert_eq!(authorize_impersonation(&ci, &headers, &o.policy()), Ok(Some(u)));

        // Someone else is refused with the upstream message.
        let mallory = user("mallory", ALL_AUTHENTICATED);
        assert_eq!(
            authorize_impersonation(&mallory, &h(&[("Impersonate-User", "jane")]), &o.policy()),
            Err(ImpersonationError::Forbidden(
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": r#"users "jane" is forbidden: User "mallory" cannot impersonate resource "users" in API group "" at the cluster scope"#,
                "reason": "Forbidden", "details": {"name": "jane", "kind": "users"}, "code": 403})
            ))
        );
        // No headers: nothing to do.
        assert_eq!(impersonation(&ci, &h(&[("Accept", "application/json")])), Ok(None));
        // system:masters may impersonate anyone.
        let admin = user("admin", "system:masters,system:authenticated");
        assert!(matches!(authorize_impersonation(&admin, &headers, &Objects::default().policy()), Ok(Some(_))));
    }

    #[test]
    fn impersonating_a_service_account() {
        let ci = user("ci", ALL_AUTHENTICATED);
        let headers = h(&[("Impersonate-User", "system:serviceaccount:team-a:robot")]);
        let Ok(Some((u, checks))) = impersonation(&ci, &headers) else { panic!("expected impersonation") };
        assert_eq!(u.name, "system:serviceaccount:team-a:robot");
        assert_eq!(u.groups, vec!["system:serviceaccounts", "system:serviceaccounts:team-a", ALL_AUTHENTICATED]);
        let [check] = checks.as_slice() else { panic!("one check") };
        assert_eq!(
            (check.resource.as_str(), check.namespace.as_str(), check.name.as_str(), check.api_group.as_str()),
            ("serviceaccounts", "team-a", "robot", "")
        );
        let o = impersonator_objects();
        assert_eq!(authorize_impersonation(&ci, &headers, &o.policy()), Ok(Some(u)));

        let other = h(&[("Impersonate-User", "system:serviceaccount:team-b:robot")]);
        let Err(ImpersonationError::Forbidden(status)) = authorize_impersonation(&ci, &other, &o.policy()) else {
            panic!("expected forbidden")
        };
        assert_eq!(
            status["message"],
            r#"serviceaccounts "robot" is forbidden: User "ci" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team-b""#
        );

        // Explicit groups replace the service account groups.
        let with_group = h(&[("Impersonate-User", "system:serviceaccount:team-a:robot"), ("Impersonate-Group", "x")]);
        let Ok(Some((u, _))) = impersonation(&ci, &with_group) else { panic!("expected impersonation") };
        assert_eq!(u.groups, vec!["x", ALL_AUTHENTICATED]);

        // Not a valid service account name: impersonated as a plain user.
        let odd = h(&[("Impersonate-User", "system:serviceaccount:Team_A:robot")]);
        let Ok(Some((_, checks))) = impersonation(&ci, &odd) else { panic!("expected impersonation") };
        assert_eq!(checks.first().map(|c| c.resource.as_str()), Some("users"));
    }

    #[test]
    fn impersonation_extras_uid_and_special_groups() {
        let ci = user("ci", "");
        let headers = h(&[
            ("Impersonate-User", "jane"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Extra-Example.Com%2fRole", "a"),
            ("impersonate-extra-scopes", "edit"),
            ("Impersonate-Uid", "1234"),
        ]);
        let Ok(Some((u, checks))) = impersonation(&ci, &headers) else { panic!("expected impersonation") };
        assert_eq!(u.uid, "1234");
        assert_eq!(u.extra.get("scopes"), Some(&vec!["view".to_string(), "edit".to_string()]));
        assert_eq!(u.extra.get("example.com/role"), Some(&vec!["a".to_string()]));
        let described: Vec<String> = checks
            .iter()
            .map(|a| format!("{}|{}|{}|{}|{}", a.api_group, a.api_version, a.resource, a.subresource, a.name))
            .collect();
        assert_eq!(
            described,
            vec![
                "||users||jane",
                "authentication.k8s.io|v1|userextras|scopes|view",
                "authentication.k8s.io|v1|userextras|scopes|edit",
                "authentication.k8s.io|v1|userextras|example.com/role|a",
                "authentication.k8s.io|v1|uids||1234",
            ]
        );
        let extra_check = checks.get(1).cloned().unwrap_or_default();
        assert_eq!(
            forbidden_status_message(&extra_check, ""),
            r#"userextras.authentication.k8s.io "view" is forbidden: User "ci" cannot impersonate resource "userextras/scopes" in API group "authentication.k8s.io" at the cluster scope"#
        );

        // system:unauthenticated among the groups: no system:authenticated added.
        let Ok(Some((u, _))) =
            impersonation(&ci, &h(&[("Impersonate-User", "jane"), ("Impersonate-Group", ALL_UNAUTHENTICATED)]))
        else {
            panic!()
        };
        assert_eq!(u.groups, vec![ALL_UNAUTHENTICATED]);
        // Anonymous gets system:unauthenticated.
        let Ok(Some((u, _))) = impersonation(&ci, &h(&[("Impersonate-User", ANONYMOUS)])) else { panic!() };
        assert_eq!(u.groups, vec![ALL_UNAUTHENTICATED]);
        // A malformed %-escape keeps the key as sent (lowercased).
        let Ok(Some((u, _))) = impersonation(&ci, &h(&[("Impersonate-User", "j"), ("Impersonate-Extra-A%zz", "v")]))
        else {
            panic!()
        };
        assert!(u.extra.contains_key("a%zz"));
    }

    #[test]
    fn impersonation_without_a_user_is_malformed() {
        let ci = user("ci", "");
        assert_eq!(
            impersonation(&ci, &h(&[("Impersonate-Group", "devs")])),
            Err("requested [{Group  devs    }] without impersonating a user".into())
        );
        assert_eq!(
            impersonation(&ci, &h(&[("Impersonate-Extra-Scopes", "v"), ("Impersonate-Uid", "9")])),
            Err("requested [{UserExtra  v  authentication.k8s.io/v1  scopes} {UID  9  authentication.k8s.io/v1  }] without impersonating a user".into())
        );
        assert_eq!(
            authorize_impersonation(
                &ci,
                &h(&[("Impersonate-Uid", "9"), ("Impersonate-User", "")]),
                &Objects::default().policy()
            ),
            Err(ImpersonationError::Malformed(
                "requested [{UID  9  authentication.k8s.io/v1  }] without impersonating a user".into()
            ))
        );
        assert_eq!(
            internal_error_body("/api/v1/pods?x=<y>", "requested [] without impersonating a user"),
            "Internal Server Error: \"/api/v1/pods?x=&lt;y&gt;\": requested [] without impersonating a user\n"
        );
    }

    #[test]
    fn service_account_username_split() {
        assert_eq!(split_service_account_username("system:serviceaccount:ns:name"), Some(("ns", "name")));
        assert_eq!(split_service_account_username("system:serviceaccount:ns:a.b-c"), Some(("ns", "a.b-c")));
        assert_eq!(split_service_account_username("system:serviceaccount:ns"), None);
        assert_eq!(split_service_account_username("system:serviceaccount:ns:a:b"), None);
        assert_eq!(split_service_account_username("system:serviceaccount::name"), None);
        assert_eq!(split_service_account_username("system:serviceaccount:NS:name"), None);
        assert_eq!(split_service_account_username("system:serviceaccount:ns:"), None);
        assert_eq!(split_service_account_username("jane"), None);
        let long_ns = "a".repeat(64);
        assert_eq!(split_service_account_username(&format!("system:serviceaccount:{long_ns}:x")), None);
    }

    // -- properties ----------------------------------------------------------------------------

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf =
            prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::from), "[a-z*/:]{0,6}".prop_map(Value::from),];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(
                    (
                        prop_oneof![
                            Just("metadata".to_string()),
                            Just("name".to_string()),
                            Just("namespace".to_string()),
                            Just("rules".to_string()),
                            Just("verbs".to_string()),
                            Just("resources".to_string()),
                            Just("subjects".to_string()),
                            Just("roleRef".to_string()),
                            Just("kind".to_string()),
                            "[a-z]{1,4}"
                        ],
                        inner
                    ),
                    0..5
                )
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn authorize_never_panics(objs in prop::collection::vec(arb_json(), 0..6), verb in "[a-z*]{0,5}", ns in "[a-z]{0,3}",
                                  resource in "[a-z*/]{0,6}", sub in "[a-z*]{0,3}", name in "[a-z]{0,3}", rr in any::<bool>()) {
            let objs: Vec<Arc<Value>> = objs.into_iter().map(Arc::new).collect();
            let p = Policy { cluster_roles: &objs, cluster_role_bindings: &objs, roles: &objs, role_bindings: &objs };
            let a = Attributes { user: user("u", "g"), verb, namespace: ns.clone(), resource, subresource: sub, name,
                resource_request: rr, path: "/x".into(), ..Default::default() };
            let d = authorize_chain(&a, &p);
            let _ = forbidden_status(&a, d.reason());
            let _ = rules_for(&a.user, &ns, &p);
            let _ = allowed_subjects(&a, &p);
        }

        #[test]
        fn impersonation_never_panics(headers in prop::collection::vec((
            prop_oneof![Just("Impersonate-User".to_string()), Just("Impersonate-Group".to_string()), Just("Impersonate-Uid".to_string()),
                "Impersonate-Extra-[%a-zA-Z0-9é]{0,6}", "[a-zA-Z-]{0,20}"],
            "\\PC{0,12}"), 0..6)) {
            let _ = authorize_impersonation(&user("u", ""), &headers, &Objects::default().policy());
        }

        #[test]
        fn full_wildcard_allows_every_resource_request(verb in "[a-z]{1,8}", group in "[a-z.]{0,8}",
                                                       resource in "[a-z]{1,8}", sub in "[a-z]{0,5}", name in "[a-z]{0,5}") {
            let rule = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]});
            let a = Attributes { verb, api_group: group, resource, subresource: sub, name, resource_request: true, ..Default::default() };
            prop_assert!(rule_allows(&a, &rule));
        }

        #[test]
        fn exact_rule_matches_itself(verb in "[a-z]{1,8}", group in "[a-z.]{0,8}", resource in "[a-z]{1,8}", sub in "[a-z]{0,5}") {
            let combined = if sub.is_empty() { resource.clone() } else { format!("{resource}/{sub}") };
            let rule = json!({"verbs": [verb], "apiGroups": [group], "resources": [combined]});
            let a = Attributes { verb: verb.clone(), api_group: group.clone(), resource: resource.clone(), subresource: sub.clone(),
                resource_request: true, ..Default::default() };
            prop_assert!(rule_allows(&a, &rule));
            let other = Attributes { verb: format!("{verb}x"), ..a };
            prop_assert!(!rule_allows(&other, &rule));
        }
    }
}
