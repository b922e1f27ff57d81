//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1),
//! enforced as the apiserver's `ValidatingAdmissionPolicy` admission plugin does (Kubernetes 1.33,
//! `k8s.io/apiserver/pkg/admission/plugin/policy/validating`).
//!
//! Mirrored behaviour:
//!
//! - Every write (create, update, patch, apply, delete, and their subresources; dry runs too) of
//!   every user, ServiceAccount and of the cluster's own controllers is checked, except writes of
//!   admissionregistration.k8s.io objects (`IsExemptAdmissionConfigurationResource`).
//! - A policy applies when its `spec.matchConstraints` match the request (`namespaceSelector`,
//!   `objectSelector` on the new or the old object, `resourceRules` with `apiGroups`,
//!   `apiVersions`, `resources` incl. `*`, `res/sub`, `*/sub`, `res/*`, `operations`, `scope`,
//!   `resourceNames`, then `excludeResourceRules`; `matchPolicy: Equivalent` also matches the other
//!   served versions of the same storage), and one of its bindings (`spec.policyName`) matches
//!   with its `spec.matchResources` (unset: everything the policy matches).
//! - Per matching binding: `matchConditions` (all true, else skipped; errors go to the failure
//!   policy), then `variables` (lazily: an error only matters to the expressions that use it),
//!   then every `validation`. A false validation is enforced with the binding's
//!   `validationActions`: `Deny` refuses the request with
//!   `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>' with binding
//!   '<binding>' denied request: <message>`, reason and code from the validation's `reason`
//!   (default `Invalid`, 422; `Forbidden` is 403); `Warn` adds the warning
//!   `Validation failed for ValidatingAdmissionPolicy '<policy>' with binding '<binding>':
//!   <message>`; `Audit` is accepted and does nothing (devcluster writes no audit log). The
//!   message is the evaluated `messageExpression`, else `message`, else
//!   `failed expression: <expression>`.
//! - Errors (runtime errors `expression '<e>' resulted in error: <err>`, expressions that fail to
//!   compile) deny when `failurePolicy` is `Fail` (the default) and are ignored when `Ignore`.
//! - CEL variables: `object` (null on DELETE), `oldObject` (null on CREATE), `request`
//!   (`operation`, `userInfo.username/uid/groups/extra`, `namespace`, `name`, `kind`,
//!   `resource`, `subResource`, `requestKind`, `requestResource`, `requestSubResource`, `dryRun`,
//!   `uid`), `namespaceObject` (the request's namespace; null for cluster-scoped objects and for
//!   Namespaces themselves, as upstream), `variables`. For a Namespace, `request.namespace` is its
//!   name on UPDATE and DELETE and empty on CREATE, as upstream.
//! - Policies and bindings are validated when written: expressions must compile (undeclared
//!   variables, syntax errors and obviously non-boolean validations are refused with 422 and
//!   cel-go's error text at `spec.validations[i].expression`, as the apiserver's strict
//!   compilation of new expressions does), as must the rules, actions and reasons.
//!
//! Deliberate differences: `paramKind` is refused (`spec.paramKind: Forbidden`) and a binding's
//! `paramRef` is ignored; `authorizer` is declared but not bound (an expression using it fails
//! at run time and the failure policy applies); `auditAnnotations` are accepted and ignored; the
//! CEL environment is the standard library with the strings and lists extensions (Kubernetes
//! library functions such as `quantity()`, `url()`, regex `find()` and `cel.bind` fail at run
//! time); objects are untyped JSON, so type errors show up at run time and `status.typeChecking`
//! is never written; field names are not escaped (use `object.metadata.labels['a/b']`); no cost
//! budget.

use crate::auth::rbac::UserInfo;
use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult, Cause};
use crate::field::{FieldError, Path};
use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use crate::selector::LabelSelector;
use ::cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo};
use ::cel::common::value::Val;
use ::cel::objects::{Key, Map as CelMap};
use ::cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

pub const GROUP: &str = "admissionregistration.k8s.io";
const POLICIES: &str = "validatingadmissionpolicies";
const BINDINGS: &str = "validatingadmissionpolicybindings";

/// What admission knows of a request.
pub struct Attributes<'a> {
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    pub def: &'a ResourceDef,
    /// The object's namespace (empty for cluster-scoped objects).
    pub namespace: &'a str,
    pub name: &'a str,
    pub subresource: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
    /// `None`: a write of the cluster itself (controllers, bootstrap).
    pub user: Option<&'a UserInfo>,
    pub field_manager: &'a str,
    pub dry_run: bool,
}

impl Attributes<'_> {
    fn is_namespace(&self) -> bool {
        self.def.group.is_empty() && self.def.plural == "namespaces"
    }

    /// `attr.GetNamespace()`: a Namespace's own name on UPDATE and DELETE (the apiserver takes it
    /// from the URL), empty on CREATE.
    fn request_namespace(&self) -> &str {
        if self.is_namespace() && self.operation != "CREATE" { self.name } else { self.namespace }
    }
}

/// The user a write of the cluster itself is made as.
fn system_user(field_manager: &str) -> UserInfo {
    let name = if field_manager.is_empty() {
        "system:apiserver".to_string()
    } else {
        format!("system:serviceaccount:kube-system:{field_manager}")
    };
    UserInfo::new(&name, &["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"])
}

/// Run every policy that matches the request. Returns the warnings to send back, or the error
/// of the first denying validation.
pub fn admit(cl: &Cluster, a: &Attributes) -> ApiResult<Vec<String>> {
    let mut warnings = vec![];
    if a.def.group == GROUP {
        return Ok(warnings);
    }
    let (mut policies, _) = cl.store.list(&GroupResource::new(GROUP, POLICIES), None);
    if policies.is_empty() {
        return Ok(warnings);
    }
    let (mut bindings, _) = cl.store.list(&GroupResource::new(GROUP, BINDINGS), None);
    if bindings.is_empty() {
        return Ok(warnings);
    }
    policies.sort_by(|x, y| meta::name(x).cmp(meta::name(y)));
    bindings.sort_by(|x, y| meta::name(x).cmp(meta::name(y)));
    let system;
    let user = match a.user {
        Some(u) => u,
        None => {
            system = system_user(a.field_manager);
            &system
        }
    };
    let ns_obj = namespace_object(cl, a);
    let mut denied: Option<(String, String)> = None;
    for policy in &policies {
        let spec = policy.get("spec").unwrap_or(&Value::Null);
        let pname = meta::name(policy);
        let mine: Vec<&Arc<Value>> =
            bindings.iter().filter(|b| b.pointer("/spec/policyName").and_then(Value::as_str) == Some(pname)).collect();
        if mine.is_empty() {
            continue;
        }
        let Some(constraints) = spec.get("matchConstraints") else { continue };
        if !matches(cl, a, constraints, &ns_obj, true) {
            continue;
        }
        let fail = spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore");
        let mut eval = Evaluation::new(a, user, &ns_obj);
        for binding in mine {
            let bspec = binding.get("spec").unwrap_or(&Value::Null);
            if let Some(mr) = bspec.get("matchResources").filter(|m| !m.is_null())
                && !matches(cl, a, mr, &ns_obj, false)
            {
                continue;
            }
            let bname = meta::name(binding);
            let actions: Vec<&str> = bspec
                .get("validationActions")
                .and_then(Value::as_array)
                .map_or(vec![], |v| v.iter().filter_map(Value::as_str).collect());
            for d in eval.decisions(spec, fail) {
                for action in &actions {
                    match *action {
                        "Deny" if denied.is_none() => {
                            denied = Some((
                                format!(
                                    "ValidatingAdmissionPolicy '{pname}' with binding '{bname}' denied request: {}",
                                    d.message
                                ),
                                d.reason.clone(),
                            ));
                        }
                        "Warn" => warnings.push(format!(
                            "Validation failed for ValidatingAdmissionPolicy '{pname}' with binding '{bname}': {}",
                            d.message
                        )),
                        _ => {}
                    }
                }
            }
        }
    }
    if let Some((message, reason)) = denied {
        return Err(denied_error(a, &message, &reason));
    }
    Ok(warnings)
}

/// `admission.NewForbidden` with the reason and code of the denying validation.
fn denied_error(a: &Attributes, message: &str, reason: &str) -> ApiError {
    let name = match (a.name, a.object.or(a.old)) {
        ("", Some(o)) => meta::meta_str(o, "generateName").unwrap_or(""),
        (n, _) => n,
    };
    let mut e = ApiError::forbidden(&a.def.group, &a.def.plural, name, message);
    let (reason, code): (&'static str, u16) = match reason {
        "Forbidden" => ("Forbidden", 403),
        "Unauthorized" => ("Unauthorized", 401),
        "RequestEntityTooLarge" => ("RequestEntityTooLarge", 413),
        _ => ("Invalid", 422),
    };
    e.reason = reason;
    e.code = code;
    if let Some(d) = e.details.as_mut() {
        d.causes.push(Cause { reason: String::new(), message: message.to_string(), field: String::new() });
    }
    e
}

/// The namespace of a namespaced request, without its managed fields; `Null` for cluster-scoped
/// requests and for Namespaces themselves ("the namespace object has the namespace of itself").
fn namespace_object(cl: &Cluster, a: &Attributes) -> Value {
    if a.is_namespace() || a.namespace.is_empty() {
        return Value::Null;
    }
    match cl.store.get(&GroupResource::new("", "namespaces"), "", a.namespace) {
        Some(ns) => {
            let mut ns = (*ns).clone();
            if let Some(m) = meta::meta_mut(&mut ns) {
                m.remove("managedFields");
            }
            if let Some(m) = ns.as_object_mut() {
                m.insert("apiVersion".into(), "v1".into());
                m.insert("kind".into(), "Namespace".into());
            }
            ns
        }
        None => Value::Null,
    }
}

// ---------------------------------------------------------------------------------------------
// Matching
// ---------------------------------------------------------------------------------------------

fn strs(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(vec![], |a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
}

fn selector_matches(sel: Option<&Value>, labels: Option<&Map<String, Value>>) -> Option<bool> {
    let Some(sel) = sel.filter(|s| !s.is_null()) else { return Some(true) };
    let parsed = LabelSelector::from_label_selector(sel).ok()?;
    Some(parsed.matches(labels))
}

/// `MatchResources` against the request (`matching.Matcher.Matches`). `resource_rules_required`:
/// a policy's constraints match nothing without rules; a binding's match everything.
fn matches(cl: &Cluster, a: &Attributes, mr: &Value, ns_obj: &Value, resource_rules_required: bool) -> bool {
    // namespaceSelector: cluster-scoped requests (other than Namespaces) always match.
    let ns_name = a.request_namespace();
    if !ns_name.is_empty() || a.is_namespace() {
        let labels = if a.is_namespace() && a.subresource.is_empty() && a.operation != "DELETE" {
            a.object.and_then(meta::labels)
        } else if a.is_namespace() {
            a.old.or(a.object).and_then(meta::labels)
        } else {
            meta::labels(ns_obj)
        };
        if selector_matches(mr.get("namespaceSelector"), labels) != Some(true) {
            return false;
        }
    }
    // objectSelector: the new or the old object.
    if let Some(sel) = mr.get("objectSelector").filter(|s| !s.is_null()) {
        let Ok(parsed) = LabelSelector::from_label_selector(sel) else { return false };
        let labelled = |o: Option<&Value>| o.is_some_and(|o| parsed.matches(meta::labels(o)));
        if !parsed.is_empty() && !labelled(a.object) && !labelled(a.old) {
            return false;
        }
    }
    let equivalent = mr.get("matchPolicy").and_then(Value::as_str) != Some("Exact");
    let empty = vec![];
    let excluded = mr.get("excludeResourceRules").and_then(Value::as_array).unwrap_or(&empty);
    if rules_match(cl, a, excluded, equivalent) {
        return false;
    }
    match mr.get("resourceRules").and_then(Value::as_array) {
        Some(rules) if !rules.is_empty() => rules_match(cl, a, rules, equivalent),
        _ => !resource_rules_required,
    }
}

/// Whether one of the rules matches the request's resource, or (Equivalent) the same storage
/// served in another group/version.
fn rules_match(cl: &Cluster, a: &Attributes, rules: &[Value], equivalent: bool) -> bool {
    let direct = (a.def.group.as_str(), a.def.version.as_str(), a.def.plural.as_str());
    if rules.iter().any(|r| rule_matches(a, r, direct)) {
        return true;
    }
    if !equivalent {
        return false;
    }
    cl.registry.by_storage(&a.def.storage).iter().any(|d| {
        let gvr = (d.group.as_str(), d.version.as_str(), d.plural.as_str());
        gvr != direct && rules.iter().any(|r| rule_matches(a, r, gvr))
    })
}

fn any_or(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

/// `rules.Matcher` plus `resourceNames`.
fn rule_matches(a: &Attributes, rule: &Value, (group, version, resource): (&str, &str, &str)) -> bool {
    if !any_or(&strs(rule, "operations"), a.operation)
        || !any_or(&strs(rule, "apiGroups"), group)
        || !any_or(&strs(rule, "apiVersions"), version)
    {
        return false;
    }
    let res_ok = strs(rule, "resources").iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == resource) && (sub == "*" || sub == a.subresource)
    });
    if !res_ok {
        return false;
    }
    let cluster_request = a.is_namespace() || a.request_namespace().is_empty();
    let scope_ok = match rule.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => !cluster_request,
        Some("Cluster") => cluster_request,
        _ => true,
    };
    if !scope_ok {
        return false;
    }
    let names = strs(rule, "resourceNames");
    names.is_empty() || names.iter().any(|n| n == a.name)
}

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

/// A failed validation (or an error under `failurePolicy: Fail`).
struct Decision {
    message: String,
    reason: String,
}

/// The CEL inputs of one request to one policy; variables are computed once, when first needed.
struct Evaluation {
    object: CelValue,
    old: CelValue,
    request: CelValue,
    namespace: CelValue,
    variables: Option<(CelValue, HashMap<String, String>)>,
}

impl Evaluation {
    fn new(a: &Attributes, user: &UserInfo, ns_obj: &Value) -> Self {
        let kind = json!({"group": a.def.group, "version": a.def.version, "kind": a.def.kind});
        let resource = json!({"group": a.def.group, "version": a.def.version, "resource": a.def.plural});
        let mut user_info = json!({"username": user.name, "groups": user.groups});
        if !user.uid.is_empty() {
            user_info["uid"] = user.uid.clone().into();
        }
        if !user.extra.is_empty() {
            user_info["extra"] = json!(user.extra);
        }
        let mut request = json!({
            "uid": meta::new_uid(),
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "name": a.name,
            "namespace": a.request_namespace(),
            "operation": a.operation,
            "userInfo": user_info,
            "dryRun": a.dry_run,
        });
        if !a.subresource.is_empty() {
            request["subResource"] = a.subresource.into();
            request["requestSubResource"] = a.subresource.into();
        }
        Evaluation {
            object: a.object.map_or(CelValue::Null, to_cel),
            old: a.old.map_or(CelValue::Null, to_cel),
            request: to_cel(&request),
            namespace: to_cel(ns_obj),
            variables: None,
        }
    }

    fn context(&self, with_variables: bool) -> Option<Context<'static, 'static>> {
        let env = ENV.as_ref()?;
        let mut ctx = Context::with_env(Arc::clone(env));
        for (name, v) in [
            ("object", &self.object),
            ("oldObject", &self.old),
            ("request", &self.request),
            ("namespaceObject", &self.namespace),
        ] {
            ctx.add_variable_as_val(name, to_box(v.clone())?);
        }
        if with_variables && let Some((vars, _)) = &self.variables {
            ctx.add_variable_as_val("variables", to_box(vars.clone())?);
        }
        Some(ctx)
    }

    /// `variables`, each evaluated with the ones before it; the errors by name.
    fn compute_variables(&mut self, spec: &Value) {
        if self.variables.is_some() {
            return;
        }
        let mut values: HashMap<Key, CelValue> = HashMap::new();
        let mut errors = HashMap::new();
        self.variables = Some((map_value(HashMap::new()), HashMap::new()));
        for v in spec.get("variables").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
            let name = v.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            let expr = v.get("expression").and_then(Value::as_str).unwrap_or("");
            let result = match uses_failed_variable(expr, &errors) {
                Some(e) => Err(e),
                None => self.run(expr, Kind::Variable),
            };
            match result {
                Ok(val) => {
                    values.insert(Key::String(Arc::new(name)), val);
                }
                Err(e) => {
                    errors.insert(name, e);
                }
            }
            self.variables = Some((map_value(values.clone()), errors.clone()));
        }
    }

    /// Compile (cached) and run an expression.
    fn run(&self, expr: &str, kind: Kind) -> Result<CelValue, String> {
        let compiled = compile(expr, kind);
        let program = match compiled.as_ref() {
            Ok(p) => p,
            Err(e) => return Err(format!("compilation error: {e}")),
        };
        let Some(ctx) = self.context(kind != Kind::MatchCondition) else {
            return Err("CEL environment initialization error".into());
        };
        program.execute(&ctx).map_err(|e| format!("expression '{expr}' resulted in error: {}", runtime_error(&e)))
    }

    /// The failed validations of the policy for this request (`validator.Validate`).
    fn decisions(&mut self, spec: &Value, fail: bool) -> Vec<Decision> {
        let mut out = vec![];
        let error = |out: &mut Vec<Decision>, message: String| {
            if fail {
                out.push(Decision { message, reason: "Invalid".into() });
            }
        };
        // matchConditions: any false skips the policy; errors (when none is false) go to the
        // failure policy.
        let mut errors = vec![];
        for mc in spec.get("matchConditions").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
            let expr = mc.get("expression").and_then(Value::as_str).unwrap_or("");
            match self.run(expr, Kind::MatchCondition) {
                Ok(CelValue::Bool(true)) => {}
                Ok(CelValue::Bool(false)) => return out,
                Ok(_) => errors.push(format!("expression '{expr}' resulted in error: must evaluate to bool")),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            let msg = if errors.len() == 1 { errors.remove(0) } else { format!("[{}]", errors.join(", ")) };
            error(&mut out, msg);
            return out;
        }
        self.compute_variables(spec);
        let var_errors = self.variables.as_ref().map(|(_, e)| e.clone()).unwrap_or_default();
        for v in spec.get("validations").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
            let expr = v.get("expression").and_then(Value::as_str).unwrap_or("");
            let result = match uses_failed_variable(expr, &var_errors) {
                Some(e) => Err(e),
                None => self.run(expr, Kind::Validation),
            };
            match result {
                Ok(CelValue::Bool(true)) => {}
                Ok(_) => {
                    let message = v
                        .get("messageExpression")
                        .and_then(Value::as_str)
                        .filter(|m| !m.trim().is_empty())
                        .and_then(|m| match self.run(m, Kind::Message) {
                            Ok(CelValue::String(s)) => Some(s.trim().to_string()),
                            _ => None,
                        })
                        .filter(|m| !m.is_empty() && !m.contains('\n') && m.len() <= 5 * 1024)
                        .or_else(|| {
                            v.get("message")
                                .and_then(Value::as_str)
                                .map(str::trim)
                                .filter(|m| !m.is_empty())
                                .map(str::to_string)
                        })
                        .unwrap_or_else(|| format!("failed expression: {}", expr.trim()));
                    let reason = v.get("reason").and_then(Value::as_str).unwrap_or("Invalid").to_string();
                    out.push(Decision { message, reason });
                }
                Err(e) => error(&mut out, e),
            }
        }
        out
    }
}

/// The error of a failed variable an expression uses (`variables.<name>`), if any.
fn uses_failed_variable(expr: &str, errors: &HashMap<String, String>) -> Option<String> {
    if errors.is_empty() {
        return None;
    }
    let compiled = compile(expr, Kind::Variable);
    let program = compiled.as_ref().as_ref().ok()?;
    let mut used = HashSet::new();
    variable_refs(program.expression(), &mut used);
    used.iter().find_map(|n| errors.get(n).cloned())
}

fn variable_refs(e: &IdedExpr, out: &mut HashSet<String>) {
    walk(e, &mut |e| {
        if let Expr::Select(sel) = &e.expr
            && matches!(&sel.operand.expr, Expr::Ident(n) if n == "variables")
        {
            out.insert(sel.field.clone());
        }
    });
}

fn walk(e: &IdedExpr, f: &mut dyn FnMut(&IdedExpr)) {
    f(e);
    match &e.expr {
        Expr::Select(sel) => walk(&sel.operand, f),
        Expr::Call(CallExpr { target, args, .. }) => {
            if let Some(t) = target {
                walk(t, f);
            }
            for a in args {
                walk(a, f);
            }
        }
        Expr::Comprehension(c) => {
            for x in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                walk(x, f);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| walk(x, f)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    walk(&me.key, f);
                    walk(&me.value, f);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(sf) = &entry.expr {
                    walk(&sf.value, f);
                }
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn runtime_error(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::UndeclaredReference(name) => format!("undeclared reference to '{name}'"),
        ExecutionError::FunctionError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

fn map_value(entries: HashMap<Key, CelValue>) -> CelValue {
    CelValue::Map(CelMap { map: Arc::new(entries) })
}

/// JSON as CEL: integers are `int`, other numbers `double`, objects maps with string keys.
fn to_cel(v: &Value) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => CelValue::Int(i),
            None => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::from(s.as_str()),
        Value::Array(a) => CelValue::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => map_value(m.iter().map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v))).collect()),
    }
}

fn to_box(v: CelValue) -> Option<Box<dyn Val>> {
    Box::<dyn Val>::try_from(v).ok()
}

// ---------------------------------------------------------------------------------------------
// Compilation
// ---------------------------------------------------------------------------------------------

static ENV: LazyLock<Option<Arc<Env>>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(::cel::extensions::strings).ok()?;
    env.add_extension(::cel::extensions::lists).ok()?;
    Some(Arc::new(env))
});

/// Which expression of a policy: each sees its own variables and must return its own type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    MatchCondition,
    Variable,
    Validation,
    Message,
}

impl Kind {
    fn declared(self) -> &'static [&'static str] {
        match self {
            Kind::MatchCondition => &["object", "oldObject", "request", "namespaceObject", "authorizer"],
            Kind::Message => &["object", "oldObject", "request", "namespaceObject", "variables"],
            _ => &["object", "oldObject", "request", "namespaceObject", "variables", "authorizer"],
        }
    }
}

type Compiled = Arc<Result<Program, String>>;

static CACHE: LazyLock<Mutex<HashMap<(Kind, String), Compiled>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn compile(src: &str, kind: Kind) -> Compiled {
    let key = (kind, src.to_string());
    if let Ok(cache) = CACHE.lock()
        && let Some(c) = cache.get(&key)
    {
        return Arc::clone(c);
    }
    let compiled = Arc::new(compile_uncached(src, kind));
    if let Ok(mut cache) = CACHE.lock() {
        if cache.len() >= 1024 {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&compiled));
    }
    compiled
}

const TYPE_IDENTS: &[&str] =
    &["int", "uint", "double", "string", "bytes", "bool", "list", "map", "null_type", "type", "dyn"];

fn compile_uncached(src: &str, kind: Kind) -> Result<Program, String> {
    let Some(env) = ENV.as_ref() else { return Err("CEL environment initialization error".into()) };
    let program =
        env.compile(src).map_err(|e| format!("compilation failed: {}", e.to_string().replace("\n| ", "\n | ")))?;
    let mut issues = vec![];
    let mut bound: Vec<String> = kind.declared().iter().map(|s| s.to_string()).collect();
    undeclared(program.expression(), program.source_info(), src, &mut bound, &mut issues);
    if !issues.is_empty() {
        return Err(format!("compilation failed: {}", issues.join("\n")));
    }
    let e = program.expression();
    match kind {
        Kind::MatchCondition | Kind::Validation if !may_be_bool(e) => Err("must evaluate to bool".into()),
        Kind::Message if !may_be_string(e) => Err("must evaluate to string".into()),
        _ => Ok(program),
    }
}

/// cel-go's text for an undeclared identifier: `ERROR: <input>:1:1: undeclared reference to
/// 'x' (in container '')` with the source line and a caret.
fn undeclared(e: &IdedExpr, info: &SourceInfo, src: &str, bound: &mut Vec<String>, out: &mut Vec<String>) {
    match &e.expr {
        Expr::Ident(name) => {
            if !bound.iter().any(|b| b == name) && !TYPE_IDENTS.contains(&name.as_str()) {
                let start = info.offset_for(e.id).map_or(0, |(s, _)| s as usize);
                let before = src.get(..start.min(src.len())).unwrap_or("");
                let line = before.matches('\n').count() + 1;
                let line_start = before.rfind('\n').map_or(0, |i| i + 1);
                let col = before[line_start..].chars().count() + 1;
                let text = src.lines().nth(line - 1).unwrap_or("");
                out.push(format!(
                    "ERROR: <input>:{line}:{col}: undeclared reference to '{name}' (in container '')\n | {text}\n | {}^",
                    ".".repeat(col - 1)
                ));
            }
        }
        Expr::Select(sel) => undeclared(&sel.operand, info, src, bound, out),
        Expr::Call(CallExpr { target, args, .. }) => {
            if let Some(t) = target
                && !matches!(&t.expr, Expr::Ident(ns) if ["optional", "strings", "lists", "math", "base64", "sets", "cel"].contains(&ns.as_str()))
            {
                undeclared(t, info, src, bound, out);
            }
            for a in args {
                undeclared(a, info, src, bound, out);
            }
        }
        Expr::Comprehension(c) => {
            undeclared(&c.iter_range, info, src, bound, out);
            undeclared(&c.accu_init, info, src, bound, out);
            let before = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                bound.push(v.clone());
            }
            bound.push(c.accu_var.clone());
            for x in [&c.loop_cond, &c.loop_step, &c.result] {
                undeclared(x, info, src, bound, out);
            }
            bound.truncate(before);
        }
        Expr::List(l) => l.elements.iter().for_each(|x| undeclared(x, info, src, bound, out)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    undeclared(&me.key, info, src, bound, out);
                    undeclared(&me.value, info, src, bound, out);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(sf) = &entry.expr {
                    undeclared(&sf.value, info, src, bound, out);
                }
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// False only when the expression certainly does not evaluate to a bool.
fn may_be_bool(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Literal(LiteralValue::Boolean(_)) => true,
        Expr::Literal(_) | Expr::List(_) | Expr::Map(_) => false,
        Expr::Call(c) => !["_+_", "_-_", "_*_", "_/_", "_%_", "-_", "size"].contains(&c.func_name.as_str()),
        _ => true,
    }
}

/// False only when the expression certainly does not evaluate to a string.
fn may_be_string(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Literal(LiteralValue::String(_)) => true,
        Expr::Literal(_) | Expr::Map(_) | Expr::List(_) => false,
        Expr::Call(c) => !matches!(
            c.func_name.as_str(),
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "_&&_" | "_||_" | "!_" | "@in" | "size"
        ),
        _ => true,
    }
}

// ---------------------------------------------------------------------------------------------
// Validation of the objects
// ---------------------------------------------------------------------------------------------

fn expression_errors(v: &Value, key: &str, kind: Kind, p: &Path, required: bool, errs: &mut Vec<FieldError>) {
    let p = p.child(key);
    match v.get(key).and_then(Value::as_str) {
        None | Some("") if required => errs.push(FieldError::required(&p, "")),
        None | Some("") => {}
        Some(src) => {
            if let Err(e) = compile(src, kind).as_ref() {
                errs.push(FieldError::invalid(&p, src, e.clone()));
            }
        }
    }
}

fn one_of(v: &Value, key: &str, p: &Path, allowed: &[&str], errs: &mut Vec<FieldError>) {
    if let Some(s) = v.get(key).and_then(Value::as_str)
        && !allowed.contains(&s)
    {
        errs.push(FieldError::not_supported(p.child(key), s, allowed));
    }
}

fn rule_list_errors(rules: &[Value], p: &Path, errs: &mut Vec<FieldError>) {
    for (i, r) in rules.iter().enumerate() {
        let rp = p.index(i);
        for key in ["apiGroups", "apiVersions", "operations"] {
            let values = strs(r, key);
            if values.is_empty() {
                errs.push(FieldError::required(rp.child(key), ""));
            } else if values.len() > 1 && values.iter().any(|v| v == "*") {
                errs.push(FieldError::invalid(
                    rp.child(key),
                    json!(values),
                    "if '*' is present, must not specify other values",
                ));
            }
        }
        resources_errors(&strs(r, "resources"), &rp.child("resources"), errs);
        for (j, op) in strs(r, "operations").iter().enumerate() {
            if !["*", "CREATE", "UPDATE", "DELETE", "CONNECT"].contains(&op.as_str()) {
                errs.push(FieldError::not_supported(
                    rp.child("operations").index(j),
                    op.as_str(),
                    &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
                ));
            }
        }
        one_of(r, "scope", &rp, &["*", "Cluster", "Namespaced"], errs);
    }
}

/// `validateResources`: wildcards may not overlap what they already cover.
fn resources_errors(resources: &[String], p: &Path, errs: &mut Vec<FieldError>) {
    if resources.is_empty() {
        errs.push(FieldError::required(p, ""));
    }
    let (mut wild_sub, mut wild_res) = (HashSet::new(), HashSet::new());
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, rs) in resources.iter().enumerate() {
        if rs.is_empty() {
            errs.push(FieldError::required(p.index(i), ""));
            continue;
        }
        double |= rs == "*/*";
        single |= rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            plain = rs != "*";
            continue;
        };
        if wild_sub.contains(res) {
            errs.push(FieldError::invalid(
                p.index(i),
                rs.as_str(),
                format!("if '{res}/*' is present, must not specify {rs}"),
            ));
        }
        if wild_res.contains(sub) {
            errs.push(FieldError::invalid(
                p.index(i),
                rs.as_str(),
                format!("if '*/{sub}' is present, must not specify {rs}"),
            ));
        }
        if sub == "*" {
            wild_sub.insert(res);
        }
        if res == "*" {
            wild_res.insert(sub);
        }
    }
    if resources.len() > 1 && double {
        errs.push(FieldError::invalid(p, json!(resources), "if '*/*' is present, must not specify other resources"));
    }
    if single && plain {
        errs.push(FieldError::invalid(
            p,
            json!(resources),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
}

fn match_resources_errors(mr: &Value, p: &Path, rules_required: bool, errs: &mut Vec<FieldError>) {
    let rules = mr.get("resourceRules").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    if rules_required && rules.is_empty() {
        errs.push(FieldError::required(p.child("resourceRules"), ""));
    }
    rule_list_errors(rules, &p.child("resourceRules"), errs);
    let excluded = mr.get("excludeResourceRules").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    rule_list_errors(excluded, &p.child("excludeResourceRules"), errs);
    one_of(mr, "matchPolicy", p, &["Equivalent", "Exact"], errs);
    for key in ["namespaceSelector", "objectSelector"] {
        if let Some(sel) = mr.get(key).filter(|s| !s.is_null())
            && let Err(e) = LabelSelector::from_label_selector(sel)
        {
            errs.push(FieldError::invalid(p.child(key), sel.clone(), e.to_string()));
        }
    }
}

/// The checks `ValidateValidatingAdmissionPolicy` makes that devcluster mirrors.
pub fn validate_policy(obj: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let p = Path::new("spec");
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    if spec.get("paramKind").is_some_and(|v| !v.is_null()) {
        errs.push(FieldError::forbidden(
            p.child("paramKind"),
            "devcluster does not support parameter resources (see docs/devcluster.md)",
        ));
    }
    one_of(spec, "failurePolicy", &p, &["Fail", "Ignore"], &mut errs);
    match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        None => errs.push(FieldError::required(p.child("matchConstraints"), "")),
        Some(mc) => match_resources_errors(mc, &p.child("matchConstraints"), true, &mut errs),
    }
    let list = |key: &str| spec.get(key).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    if list("validations").is_empty() && list("auditAnnotations").is_empty() {
        errs.push(FieldError::required(
            p.child("validations"),
            "validations or auditAnnotations must contain at least one item",
        ));
    }
    let mut names = HashSet::new();
    for (i, mc) in list("matchConditions").iter().enumerate() {
        let mp = p.child("matchConditions").index(i);
        match mc.get("name").and_then(Value::as_str).unwrap_or("") {
            "" => errs.push(FieldError::required(mp.child("name"), "")),
            n if !names.insert(n.to_string()) => errs.push(FieldError::duplicate(mp.child("name"), n)),
            _ => {}
        }
        expression_errors(mc, "expression", Kind::MatchCondition, &mp, true, &mut errs);
    }
    let mut vars = HashSet::new();
    for (i, v) in list("variables").iter().enumerate() {
        let vp = p.child("variables").index(i);
        match v.get("name").and_then(Value::as_str).unwrap_or("") {
            "" => errs.push(FieldError::required(vp.child("name"), "")),
            n if !n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                errs.push(FieldError::invalid(vp.child("name"), n, "name is not a valid CEL identifier"))
            }
            n if !vars.insert(n.to_string()) => errs.push(FieldError::duplicate(vp.child("name"), n)),
            _ => {}
        }
        expression_errors(v, "expression", Kind::Variable, &vp, true, &mut errs);
    }
    for (i, v) in list("validations").iter().enumerate() {
        let vp = p.child("validations").index(i);
        expression_errors(v, "expression", Kind::Validation, &vp, true, &mut errs);
        expression_errors(v, "messageExpression", Kind::Message, &vp, false, &mut errs);
        one_of(v, "reason", &vp, &["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"], &mut errs);
    }
    errs
}

/// The checks `ValidateValidatingAdmissionPolicyBinding` makes that devcluster mirrors.
pub fn validate_binding(obj: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let p = Path::new("spec");
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    if spec.get("policyName").and_then(Value::as_str).unwrap_or("").is_empty() {
        errs.push(FieldError::required(p.child("policyName"), ""));
    }
    let actions = strs(spec, "validationActions");
    let ap = p.child("validationActions");
    if actions.is_empty() {
        errs.push(FieldError::required(&ap, "at least one validation action is required"));
    }
    let mut seen = HashSet::new();
    for (i, a) in actions.iter().enumerate() {
        if !["Deny", "Warn", "Audit"].contains(&a.as_str()) {
            errs.push(FieldError::not_supported(ap.index(i), a.as_str(), &["Audit", "Deny", "Warn"]));
        } else if !seen.insert(a.clone()) {
            errs.push(FieldError::duplicate(ap.index(i), a.as_str()));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errs.push(FieldError::invalid(
            &ap,
            json!(actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if let Some(mr) = spec.get("matchResources").filter(|m| !m.is_null()) {
        match_resources_errors(mr, &p.child("matchResources"), false, &mut errs);
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undeclared_variables_are_compile_errors() {
        let e = compile_uncached("foo == 1", Kind::Validation).err().unwrap_or_default();
        assert!(e.starts_with("compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo'"), "{e}");
        assert!(compile_uncached("object.spec.replicas <= 5", Kind::Validation).is_ok());
        assert!(compile_uncached("object.items.all(x, x > 1)", Kind::Validation).is_ok());
        let e = compile_uncached("variables.x", Kind::MatchCondition).err().unwrap_or_default();
        assert!(e.contains("undeclared reference to 'variables'"), "{e}");
        assert_eq!(compile_uncached("1 + 2", Kind::Validation).err().as_deref(), Some("must evaluate to bool"));
    }

    #[test]
    fn binding_actions_are_checked() {
        let errs = validate_binding(&json!({"spec": {"policyName": "p", "validationActions": ["Deny", "Warn"]}}));
        assert_eq!(errs.len(), 1);
        let errs = validate_binding(&json!({"spec": {"validationActions": ["Nope"]}}));
        assert_eq!(errs.len(), 2);
    }
}
