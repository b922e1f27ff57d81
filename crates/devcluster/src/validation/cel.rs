//! `x-kubernetes-validations` rules of custom resources, evaluated as apiextensions-apiserver's
//! `schema/cel` package does (Kubernetes 1.33), with the `cel` crate as the interpreter.
//!
//! Mirrored behaviour:
//!
//! - Every rule of every schema node runs with `self` bound to the node's value (never on `null`
//!   values); `self` at a resource root (the custom resource, or an
//!   `x-kubernetes-embedded-resource` object) sees `apiVersion`, `kind` and only
//!   `metadata.name`/`metadata.generateName`, as `model.WithTypeAndObjectMeta` does.
//! - Values are typed from the schema: `integer` → int, `number` → double, `string` with format
//!   `byte`/`duration`/`date`/`date-time` → bytes/duration/timestamp, objects with `properties` →
//!   objects whose field names are escaped (`foo-bar` is `self.foo__dash__bar`, `namespace` is
//!   `self.__namespace__`, ...; unescapable names are not visible), objects with
//!   `additionalProperties` → maps, `x-kubernetes-int-or-string` → int or string.
//! - Transition rules (rules that use `oldSelf`) run only when the node has an old value on
//!   update, which is correlated through object fields (not inside `x-kubernetes-map-type:
//!   atomic` objects) and `x-kubernetes-list-type: map` items by key; `optionalOldSelf: true`
//!   rules always run with `oldSelf` an optional.
//! - Failures are reported as the 1.33 apiserver does: path (with the rule's normalized
//!   `fieldPath`), bad value = the schema type name (`Invalid value: "object"`), detail =
//!   evaluated `messageExpression`, else `message`, else `failed rule: <rule>`; `reason` maps to
//!   Forbidden/Required/Duplicate/Invalid. Runtime errors are `<error> evaluating rule: <rule>`.
//! - On update, errors of rules that do not use `oldSelf` are dropped for unchanged values
//!   (CRD validation ratcheting, on by default in 1.33).
//!
//! Deliberate differences: the `cel` crate is dynamically typed, so type errors that cel-go's
//! checker reports when a CRD is created show up when a rule runs instead (`check_rules` only
//! catches syntax errors, undeclared variables and functions, fields the schema does not declare
//! and obviously non-boolean rules);
//! cost estimation and runtime cost budgets are not enforced; equality of
//! `x-kubernetes-list-type: set|map` lists is order-sensitive (cel-go ignores order); the
//! Kubernetes libraries `url`, `quantity`, `ip`/`cidr`, `format` and `semver` and the
//! two-variable comprehensions are not available (rules using them fail when evaluated).

use super::structural::{self, go_deep_equal, valid_field_path};
use crate::field::{ErrorType, FieldError, Path, go_quote};
use crate::schema::SchemaRef;
use ::cel::common::ast::{CallExpr, ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue, SourceInfo};
use ::cel::common::types::{CelInt, DYN_TYPE, LIST_TYPE};
use ::cel::common::value::{CowVal, Val};
use ::cel::extractors::{Arguments, This};
use ::cel::objects::{Key, Map as CelMap, OptionalValue};
use ::cel::parser::{Macro, MacroExprHelper, ParseError};
use ::cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// Evaluate every rule at every level of the schema against `obj` (and `old` on update). Transition
/// rules (those referring to oldSelf) run only when an old value exists at that path, unless
/// optionalOldSelf. Errors carry the rule's message/messageExpression/reason/fieldPath as upstream:
/// default message `failed rule: <rule>`; bad value is the schema type name (e.g. Invalid value:
/// "object"); reason FieldValueForbidden/Required/Duplicate/Invalid mapping.
///
/// The apiserver only calls this when the schema validation found no blocking error: see
/// [`blocking_error`].
pub fn validate(obj: &Value, old: Option<&Value>, schema: SchemaRef) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !has_rules(schema.raw()) {
        return errs;
    }
    let ratchet = match old {
        Some(o) => Ratchet { current: Some(go_deep_equal(obj, o)), parent_equal: false },
        None => Ratchet::default(),
    };
    walk(None, schema, true, obj, old, ratchet, &mut errs);
    errs
}

/// Compile every rule of a CRD version's schema; compile errors as the real CRD validation reports
/// them. `base` is the path of the schema, e.g. `spec.versions[0].schema.openAPIV3Schema`.
///
/// Also reports transition rules on parts of the schema where old values cannot be correlated,
/// `optionalOldSelf` on rules that do not use `oldSelf`, and (when every rule compiles) defaults
/// that fail the rules of their schema, as `ValidateDefaults` does. The apiserver only compiles
/// rules when the schema has no other error: call this when `structural::validate_schema` found
/// none.
pub fn check_rules(schema: &Value, base: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    check_node(schema, base, true, None, &mut errs);
    if errs.is_empty() {
        let defs = Map::new();
        check_defaults(SchemaRef::new(schema, &defs), base, true, &mut errs);
    }
    errs
}

/// The error the apiserver appends instead of running the CEL rules when the schema validation
/// errors include a blocking one (Unsupported, Required, TooLong, TooMany or a type error):
/// `<nil>: Invalid value: "null": some validation rules were not checked because the object was
/// invalid; correct the existing errors to complete validation`.
pub fn blocking_error(errs: &[FieldError]) -> Option<FieldError> {
    errs.iter()
        .any(|e| {
            matches!(
                e.kind,
                ErrorType::NotSupported
                    | ErrorType::Required
                    | ErrorType::TooLong
                    | ErrorType::TooMany
                    | ErrorType::TypeInvalid
            )
        })
        .then(|| {
            // Go prints the nil bad value of `field.Invalid(nil, nil, ...)` as "null".
            FieldError::invalid(
                "<nil>",
                "null",
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            )
        })
}

// ---------------------------------------------------------------------------------------------
// Environment and compilation
// ---------------------------------------------------------------------------------------------

/// The CEL environment: the standard library, the strings and lists extensions, `cel.bind` and
/// the Kubernetes list functions that clash with extension names (`indexOf`, `lastIndexOf`).
/// The remaining Kubernetes functions are added to each evaluation context.
static ENV: LazyLock<Option<Arc<Env>>> = LazyLock::new(|| build_env().ok().map(Arc::new));

fn build_env() -> Result<Env, ::cel::DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(::cel::extensions::strings)?;
    env.add_extension(::cel::extensions::lists)?;
    env.add_macro(Macro::receiver("bind", 3, bind_macro))?;
    env.add_member_overload("indexOf", "list.indexOf(dyn)", LIST_TYPE, vec![DYN_TYPE], list_index_of)?;
    env.add_member_overload("lastIndexOf", "list.lastIndexOf(dyn)", LIST_TYPE, vec![DYN_TYPE], list_last_index_of)?;
    Ok(env)
}

/// `cel.bind(var, init, expr)`, expanded as cel-go does into a comprehension over an empty list
/// whose accumulator is `var`.
fn bind_macro(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == "cel") {
        return Ok(None);
    }
    let var = match args.first().map(|a| &a.expr) {
        Some(Expr::Ident(name)) => name.clone(),
        _ => {
            let id = args.first().map(|a| a.id).unwrap_or_default();
            return Err(helper.new_error(id, "cel.bind() variable names must be simple identifiers"));
        }
    };
    let (Some(result), Some(init)) = (args.pop(), args.pop()) else {
        return Ok(None);
    };
    let bind = ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_string(),
        iter_var2: None,
        accu_var: var.clone(),
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident(var)),
        result,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(bind)))))
}

fn take2<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<(CelValue, CelValue), ExecutionError> {
    let mut it = args.into_iter();
    match (it.next(), it.next()) {
        (Some(a), Some(b)) => Ok((CelValue::try_from(a.as_ref())?, CelValue::try_from(b.as_ref())?)),
        _ => Err(ExecutionError::invalid_argument_count(2, 0)),
    }
}

fn int_result<'b, 'v>(i: i64) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelInt::from(i)))
}

/// `<list>.indexOf(x)` of the Kubernetes lists library.
fn list_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (list, needle) = take2(args)?;
    let CelValue::List(items) = list else {
        return Err(ExecutionError::function_error("indexOf", "receiver must be a list"));
    };
    int_result(items.iter().position(|x| x == &needle).map_or(-1, |i| i as i64))
}

/// `<list>.lastIndexOf(x)` of the Kubernetes lists library.
fn list_last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (list, needle) = take2(args)?;
    let CelValue::List(items) = list else {
        return Err(ExecutionError::function_error("lastIndexOf", "receiver must be a list"));
    };
    int_result(items.iter().rposition(|x| x == &needle).map_or(-1, |i| i as i64))
}

fn go_regex(function: &str, pattern: &str) -> Result<regex::Regex, ExecutionError> {
    structural::go_regex(pattern).map_err(|e| ExecutionError::function_error(function, e))
}

/// `<string>.find(regex)` of the Kubernetes regex library.
fn find(This(s): This<Arc<String>>, re: Arc<String>) -> Result<CelValue, ExecutionError> {
    let re = go_regex("find", &re)?;
    Ok(re.find(&s).map(|m| m.as_str().to_string()).unwrap_or_default().into())
}

/// `<string>.findAll(regex)` and `<string>.findAll(regex, limit)`.
fn find_all(This(s): This<Arc<String>>, Arguments(args): Arguments) -> Result<CelValue, ExecutionError> {
    let (re, limit) = match args.as_slice() {
        [CelValue::String(re)] => (re, -1),
        [CelValue::String(re), CelValue::Int(n)] => (re, *n),
        _ => return Err(ExecutionError::function_error("findAll", "no such overload")),
    };
    let re = go_regex("findAll", re)?;
    let take = if limit < 0 { usize::MAX } else { limit as usize };
    let found: Vec<CelValue> = re.find_iter(&s).take(take).map(|m| CelValue::from(m.as_str())).collect();
    Ok(CelValue::List(Arc::new(found)))
}

fn list_arg<'a>(function: &str, v: &'a CelValue) -> Result<&'a [CelValue], ExecutionError> {
    match v {
        CelValue::List(items) => Ok(items.as_slice()),
        _ => Err(ExecutionError::function_error(function, "no such overload")),
    }
}

fn compare(function: &str, a: &CelValue, b: &CelValue) -> Result<std::cmp::Ordering, ExecutionError> {
    a.partial_cmp(b).ok_or_else(|| ExecutionError::function_error(function, "no such overload"))
}

/// `<list>.isSorted()`.
fn is_sorted(This(list): This<CelValue>) -> Result<CelValue, ExecutionError> {
    let items = list_arg("isSorted", &list)?;
    for w in items.windows(2) {
        if let [a, b] = w
            && compare("isSorted", a, b)? == std::cmp::Ordering::Greater
        {
            return Ok(false.into());
        }
    }
    Ok(true.into())
}

/// `<list>.sum()`: 0 (of the element type) for an empty list.
fn sum(This(list): This<CelValue>) -> Result<CelValue, ExecutionError> {
    let items = list_arg("sum", &list)?;
    let mut acc = match items.first() {
        None | Some(CelValue::Int(_)) => CelValue::Int(0),
        Some(CelValue::UInt(_)) => CelValue::UInt(0),
        Some(CelValue::Float(_)) => CelValue::Float(0.0),
        Some(first) => return Ok(first.clone()),
    };
    for x in items {
        acc = match (&acc, x) {
            (CelValue::Int(a), CelValue::Int(b)) => CelValue::Int(
                a.checked_add(*b).ok_or_else(|| ExecutionError::function_error("sum", "integer overflow"))?,
            ),
            (CelValue::UInt(a), CelValue::UInt(b)) => CelValue::UInt(
                a.checked_add(*b).ok_or_else(|| ExecutionError::function_error("sum", "unsigned integer overflow"))?,
            ),
            (CelValue::Float(a), CelValue::Float(b)) => CelValue::Float(a + b),
            _ => return Err(ExecutionError::function_error("sum", "no such overload")),
        };
    }
    Ok(acc)
}

fn extreme(function: &str, list: &CelValue, want: std::cmp::Ordering) -> Result<CelValue, ExecutionError> {
    let items = list_arg(function, list)?;
    let mut best = items.first().ok_or_else(|| {
        ExecutionError::function_error(function, format!("{function}(list) argument must not be empty"))
    })?;
    for x in items.iter().skip(1) {
        if compare(function, x, best)? == want {
            best = x;
        }
    }
    Ok(best.clone())
}

/// `<list>.min()`.
fn min(This(list): This<CelValue>) -> Result<CelValue, ExecutionError> {
    extreme("min", &list, std::cmp::Ordering::Less)
}

/// `<list>.max()`.
fn max(This(list): This<CelValue>) -> Result<CelValue, ExecutionError> {
    extreme("max", &list, std::cmp::Ordering::Greater)
}

fn two_lists(function: &str, args: &[CelValue]) -> Result<(Vec<CelValue>, Vec<CelValue>), ExecutionError> {
    match args {
        [CelValue::List(a), CelValue::List(b)] => Ok((a.to_vec(), b.to_vec())),
        _ => Err(ExecutionError::function_error(function, "no such overload")),
    }
}

/// `sets.contains(a, b)`: every element of b is in a.
fn sets_contains(Arguments(args): Arguments) -> Result<CelValue, ExecutionError> {
    let (a, b) = two_lists("sets.contains", &args)?;
    Ok(b.iter().all(|x| a.contains(x)).into())
}

/// `sets.equivalent(a, b)`.
fn sets_equivalent(Arguments(args): Arguments) -> Result<CelValue, ExecutionError> {
    let (a, b) = two_lists("sets.equivalent", &args)?;
    Ok((b.iter().all(|x| a.contains(x)) && a.iter().all(|x| b.contains(x))).into())
}

/// `sets.intersects(a, b)`.
fn sets_intersects(Arguments(args): Arguments) -> Result<CelValue, ExecutionError> {
    let (a, b) = two_lists("sets.intersects", &args)?;
    Ok(b.iter().any(|x| a.contains(x)).into())
}

/// A new evaluation context with the Kubernetes functions that are not environment overloads.
fn new_context(env: &Arc<Env>) -> Context<'static, 'static> {
    let mut ctx = Context::with_env(Arc::clone(env));
    // The names are not declared by the environment, so these cannot fail.
    let _ = ctx.add_function("find", find);
    let _ = ctx.add_function("findAll", find_all);
    let _ = ctx.add_function("isSorted", is_sorted);
    let _ = ctx.add_function("sum", sum);
    let _ = ctx.add_function("min", min);
    let _ = ctx.add_function("max", max);
    let _ = ctx.add_function("sets.contains", sets_contains);
    let _ = ctx.add_function("sets.equivalent", sets_equivalent);
    let _ = ctx.add_function("sets.intersects", sets_intersects);
    ctx
}

/// A compiled rule or message expression.
struct Compiled {
    program: Program,
    uses_old_self: bool,
}

type CompileResult = Arc<Result<Compiled, String>>;

static CACHE: LazyLock<Mutex<HashMap<(bool, String), CompileResult>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Compile a rule (`message == false`) or a message expression, with the checks cel-go's
/// compiler makes that do not need types. Cached by source text.
fn compile(src: &str, message: bool) -> CompileResult {
    let key = (message, src.to_string());
    if let Ok(cache) = CACHE.lock()
        && let Some(c) = cache.get(&key)
    {
        return Arc::clone(c);
    }
    let compiled = Arc::new(compile_uncached(src, message));
    if let Ok(mut cache) = CACHE.lock() {
        if cache.len() >= 1024 {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&compiled));
    }
    compiled
}

fn compile_uncached(src: &str, message: bool) -> Result<Compiled, String> {
    let prefix = if message { "messageExpression compilation failed: " } else { "compilation failed: " };
    let Some(env) = ENV.as_ref() else {
        return Err("rule compiler initialization error".into());
    };
    let program = env.compile(src).map_err(|e| format!("{prefix}{}", e.to_string().replace("\n| ", "\n | ")))?;
    let issues = static_issues(program.expression(), program.source_info(), src);
    if !issues.is_empty() {
        return Err(format!("{prefix}{}", issues.join("\n")));
    }
    if !message && !may_be_bool(program.expression()) {
        return Err("cel expression must evaluate to a bool".into());
    }
    if message && !may_be_string(program.expression()) {
        return Err("messageExpression must evaluate to a string".into());
    }
    let uses_old_self = program.references().has_variable("oldSelf");
    Ok(Compiled { program, uses_old_self })
}

/// Functions and macros the Kubernetes CEL environment declares. Those marked unsupported in the
/// module docs are accepted here and fail when evaluated.
const KNOWN_FUNCTIONS: &[&str] = &[
    // standard library
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "dyn",
    "type",
    "duration",
    "timestamp",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    "has",
    "all",
    "exists",
    "exists_one",
    "existsOne",
    "map",
    "filter",
    // strings, lists and optional extensions
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "format",
    "quote",
    "reverse",
    "slice",
    "flatten",
    "distinct",
    "sort",
    "sortBy",
    "range",
    "of",
    "none",
    "ofNonZeroValue",
    "hasValue",
    "value",
    "or",
    "orValue",
    "optMap",
    "optFlatMap",
    // Kubernetes libraries
    "find",
    "findAll",
    "isSorted",
    "sum",
    "min",
    "max",
    "bind",
    "equivalent",
    "intersects",
    // Kubernetes libraries not implemented here
    "url",
    "isURL",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    "quantity",
    "isQuantity",
    "sign",
    "isGreaterThan",
    "isLessThan",
    "compareTo",
    "add",
    "sub",
    "asInteger",
    "asApproximateFloat",
    "isInteger",
    "ip",
    "isIP",
    "cidr",
    "isCIDR",
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "containsIP",
    "containsCIDR",
    "prefixLength",
    "masked",
    "validate",
    "semver",
    "isSemver",
    "major",
    "minor",
    "patch",
    "transformList",
    "transformMap",
    "transformMapEntry",
    "named",
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
    "ip4",
    "ip6",
    "k8sShortName",
    "k8sLongName",
];

/// Namespaces of qualified function names (`sets.contains`, `optional.of`, `format.named`).
const NAMESPACES: &[&str] = &["optional", "sets", "strings", "lists", "cel", "format", "math", "base64"];

/// Identifiers that name types.
const TYPE_IDENTS: &[&str] =
    &["int", "uint", "double", "string", "bytes", "bool", "list", "map", "null_type", "type", "dyn"];

fn position(src: &str, info: &SourceInfo, id: u64) -> (usize, usize, String) {
    let start = info.offset_for(id).map_or(0, |(s, _)| s as usize);
    let mut line = 1;
    let mut line_start = 0;
    for (i, c) in src.char_indices() {
        if i >= start {
            break;
        }
        if c == '\n' {
            line += 1;
            line_start = i + 1;
        }
    }
    let col = src.get(line_start..start.min(src.len())).map_or(0, |s| s.chars().count()) + 1;
    let text = src.lines().nth(line - 1).unwrap_or("").to_string();
    (line, col, text)
}

/// cel-go's issue text: `ERROR: <input>:1:1: msg` with the source line and a caret.
fn issue(src: &str, info: &SourceInfo, id: u64, msg: &str) -> String {
    let (line, col, text) = position(src, info, id);
    format!("ERROR: <input>:{line}:{col}: {msg}\n | {text}\n | {}^", ".".repeat(col - 1))
}

fn undeclared(src: &str, info: &SourceInfo, id: u64, name: &str) -> String {
    issue(src, info, id, &format!("undeclared reference to '{name}' (in container '')"))
}

/// Undeclared variables and functions, as cel-go's checker reports them.
fn static_issues(expr: &IdedExpr, info: &SourceInfo, src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut bound: Vec<String> = vec!["self".into(), "oldSelf".into()];
    check_expr(expr, info, src, &mut bound, &mut out);
    out
}

fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('@') || name.starts_with('!') || name.starts_with('-')
}

fn check_expr(e: &IdedExpr, info: &SourceInfo, src: &str, bound: &mut Vec<String>, out: &mut Vec<String>) {
    match &e.expr {
        Expr::Ident(name) => {
            if !bound.iter().any(|b| b == name) && !TYPE_IDENTS.contains(&name.as_str()) {
                out.push(undeclared(src, info, e.id, name));
            }
        }
        Expr::Select(sel) => check_expr(&sel.operand, info, src, bound, out),
        Expr::Call(CallExpr { func_name, target, args }) => {
            let qualified = matches!(target.as_deref().map(|t| &t.expr), Some(Expr::Ident(ns)) if NAMESPACES.contains(&ns.as_str()));
            if let Some(t) = target
                && !qualified
            {
                check_expr(t, info, src, bound, out);
            }
            if !is_operator(func_name) && !KNOWN_FUNCTIONS.contains(&func_name.as_str()) {
                out.push(undeclared(src, info, e.id, func_name));
            }
            for a in args {
                check_expr(a, info, src, bound, out);
            }
        }
        Expr::Comprehension(c) => {
            check_expr(&c.iter_range, info, src, bound, out);
            check_expr(&c.accu_init, info, src, bound, out);
            let before = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                bound.push(v.clone());
            }
            bound.push(c.accu_var.clone());
            check_expr(&c.loop_cond, info, src, bound, out);
            check_expr(&c.loop_step, info, src, bound, out);
            check_expr(&c.result, info, src, bound, out);
            bound.truncate(before);
        }
        Expr::List(l) => {
            for x in &l.elements {
                check_expr(x, info, src, bound, out);
            }
        }
        Expr::Map(m) => {
            for entry in &m.entries {
                if let ::cel::common::ast::EntryExpr::MapEntry(me) = &entry.expr {
                    check_expr(&me.key, info, src, bound, out);
                    check_expr(&me.value, info, src, bound, out);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let ::cel::common::ast::EntryExpr::StructField(f) = &entry.expr {
                    check_expr(&f.value, info, src, bound, out);
                }
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

const NON_BOOL_OPERATORS: &[&str] = &["_+_", "_-_", "_*_", "_/_", "_%_", "-_"];

/// False only when the expression certainly does not evaluate to a bool.
fn may_be_bool(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Literal(LiteralValue::Boolean(_)) => true,
        Expr::Literal(_) | Expr::List(_) | Expr::Map(_) => false,
        Expr::Call(c) => !NON_BOOL_OPERATORS.contains(&c.func_name.as_str()) && c.func_name != "size",
        _ => true,
    }
}

/// False only when the expression certainly does not evaluate to a string (or a list of them).
fn may_be_string(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Literal(LiteralValue::String(_)) => true,
        Expr::Literal(_) | Expr::Map(_) => false,
        Expr::Call(c) => !matches!(
            c.func_name.as_str(),
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "_&&_" | "_||_" | "!_" | "@in" | "size"
        ),
        _ => true,
    }
}

// ---------------------------------------------------------------------------------------------
// Converting values for CEL
// ---------------------------------------------------------------------------------------------

const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The CEL field name of a property (`apiserver/pkg/cel.Escape`), `None` when it cannot be
/// accessed from CEL.
pub fn escape(ident: &str) -> Option<String> {
    let first = ident.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&ident) {
        return Some(format!("__{ident}__"));
    }
    let mut out = String::with_capacity(ident.len());
    let mut chars = ident.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

fn map_value(entries: HashMap<Key, CelValue>) -> CelValue {
    CelValue::Map(CelMap { map: Arc::new(entries) })
}

fn key(s: &str) -> Key {
    Key::String(Arc::new(s.to_string()))
}

/// A JSON value without schema (preserved unknown fields, `x-kubernetes-int-or-string`).
fn generic(v: &Value) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match structural::num(n) {
            structural::Num::Int(i) => CelValue::Int(i),
            structural::Num::Float(f) => CelValue::Float(f),
        },
        Value::String(s) => CelValue::from(s.as_str()),
        Value::Array(a) => CelValue::List(Arc::new(a.iter().map(generic).collect())),
        Value::Object(m) => map_value(m.iter().map(|(k, v)| (key(k), generic(v))).collect()),
    }
}

/// Evaluate `func(x)` for a string `x` with the CEL standard library (how durations and
/// timestamps are built without a time library of our own).
fn cel_parse(func: &'static str, arg: &str) -> Option<CelValue> {
    static PROGRAMS: LazyLock<Option<(Program, Program)>> = LazyLock::new(|| {
        let env = ENV.as_ref()?;
        Some((env.compile("duration(x)").ok()?, env.compile("timestamp(x)").ok()?))
    });
    let env = ENV.as_ref()?;
    let (d, t) = PROGRAMS.as_ref()?;
    let program = if func == "duration" { d } else { t };
    let mut ctx = Context::with_env(Arc::clone(env));
    ctx.add_variable_from_value("x", CelValue::from(arg));
    program.execute(&ctx).ok()
}

fn string_value(s: &str, format: Option<&str>) -> CelValue {
    let parsed = match format {
        Some("byte") => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).ok().map(|b| CelValue::Bytes(Arc::new(b)))
        }
        Some("duration") => cel_parse("duration", s),
        Some("date") if structural::date(s) => cel_parse("timestamp", &format!("{s}T00:00:00Z")),
        Some("date-time") if structural::date_time(s) => cel_parse("timestamp", s),
        _ => None,
    };
    parsed.unwrap_or_else(|| CelValue::from(s))
}

/// `UnstructuredToVal`: `v` typed by its schema. `resource_root` restricts `metadata` to
/// `name` and `generateName`.
fn to_cel(v: &Value, s: SchemaRef, resource_root: bool) -> CelValue {
    match v {
        Value::Object(m) => {
            if let Some(ap) = s.additional_properties()
                && !resource_root
            {
                return map_value(m.iter().map(|(k, x)| (key(k), to_cel(x, ap, ap.embedded_resource()))).collect());
            }
            if s.properties_map().is_none() && !resource_root {
                return generic(v);
            }
            let mut out = HashMap::new();
            for (k, x) in m {
                if resource_root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let (Some(p), Some(name)) = (s.property(k), escape(k)) {
                    out.insert(key(&name), to_cel(x, p, p.embedded_resource()));
                }
            }
            if resource_root {
                for field in ["apiVersion", "kind"] {
                    if let Some(Value::String(x)) = m.get(field) {
                        out.insert(key(field), CelValue::from(x.as_str()));
                    }
                }
                if let Some(Value::Object(meta)) = m.get("metadata") {
                    let mut md = HashMap::new();
                    for field in ["name", "generateName"] {
                        if let Some(Value::String(x)) = meta.get(field) {
                            md.insert(key(field), CelValue::from(x.as_str()));
                        }
                    }
                    out.insert(key("metadata"), map_value(md));
                }
            }
            map_value(out)
        }
        Value::Array(items) => match s.items() {
            Some(is) => CelValue::List(Arc::new(items.iter().map(|x| to_cel(x, is, is.embedded_resource())).collect())),
            None => generic(v),
        },
        Value::String(x) => string_value(x, s.format()),
        Value::Number(n) => match (s.ty(), structural::num(n)) {
            (Some("number"), num) => CelValue::Float(match num {
                structural::Num::Int(i) => i as f64,
                structural::Num::Float(f) => f,
            }),
            (Some("integer"), structural::Num::Float(f)) if f.trunc() == f && f.abs() < 9.2e18 => {
                CelValue::Int(f as i64)
            }
            _ => generic(v),
        },
        _ => generic(v),
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

fn rules_of(s: &Value) -> &[Value] {
    s.get("x-kubernetes-validations").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn has_rules(s: &Value) -> bool {
    if !rules_of(s).is_empty() {
        return true;
    }
    let props = s.get("properties").and_then(Value::as_object).into_iter().flat_map(|m| m.values());
    props
        .chain(s.get("items").filter(|i| i.is_object()))
        .chain(s.get("additionalProperties").filter(|a| a.is_object()))
        .any(has_rules)
}

/// Ratcheting state (`ratchetingOptions`): whether the current node is correlated with an old
/// value (and then whether it is unchanged), else whether the nearest correlated ancestor is
/// unchanged.
#[derive(Clone, Copy, Default)]
struct Ratchet {
    current: Option<bool>,
    parent_equal: bool,
}

impl Ratchet {
    fn should_ratchet(self) -> bool {
        self.current.unwrap_or(self.parent_equal)
    }
    fn child(self, correlated: Option<(&Value, &Value)>, at_root_type_meta: bool) -> Ratchet {
        match self.current {
            None => self,
            Some(_) if at_root_type_meta => Ratchet::default(),
            Some(eq) => Ratchet { current: correlated.map(|(n, o)| go_deep_equal(n, o)), parent_equal: eq },
        }
    }
}

fn child_path(p: &Option<Path>, name: &str) -> Option<Path> {
    Some(match p {
        None => Path::new(name),
        Some(p) => p.child(name),
    })
}

fn path_string(p: &Option<Path>) -> String {
    p.as_ref().map_or_else(|| "<nil>".to_string(), |p| p.as_str().to_string())
}

fn walk(
    path: Option<Path>,
    s: SchemaRef,
    resource_root: bool,
    obj: &Value,
    old: Option<&Value>,
    ratchet: Ratchet,
    errs: &mut Vec<FieldError>,
) {
    if obj.is_null() {
        return;
    }
    let old = old.filter(|o| !o.is_null());
    validate_expressions(&path, s, resource_root, obj, old, ratchet, errs);
    match obj {
        Value::Array(items) => {
            let Some(is) = s.items() else { return };
            let keys: Option<Vec<String>> = match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("map") => Some(
                    s.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                        .unwrap_or_default(),
                ),
                _ => None,
            };
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                let old_item = match (&keys, old_items) {
                    (Some(keys), Some(o)) => structural::find_by_keys(o, item, keys),
                    _ => None,
                };
                let r = ratchet.child(old_item.map(|o| (item, o)), false);
                let p = Some(path.clone().unwrap_or_default().index(i));
                walk(p, is, is.embedded_resource(), item, old_item, r, errs);
            }
        }
        Value::Object(map) => {
            let correlatable = !s.map_atomic();
            let old_map = old.and_then(Value::as_object).filter(|_| correlatable);
            if let Some(ap) = s.additional_properties() {
                for (k, v) in map {
                    let o = old_map.and_then(|m| m.get(k));
                    let r = ratchet.child(o.map(|o| (v, o)), false);
                    let p = Some(path.clone().unwrap_or_default().key(k));
                    walk(p, ap, ap.embedded_resource(), v, o, r, errs);
                }
            }
            for (k, v) in map {
                let Some(p) = s.property(k) else { continue };
                let o = old_map.and_then(|m| m.get(k));
                let type_meta = path.is_none() && (k == "apiVersion" || k == "kind");
                let r = ratchet.child(o.map(|o| (v, o)), type_meta);
                walk(child_path(&path, k), p, p.embedded_resource(), v, o, r, errs);
            }
        }
        _ => {}
    }
}

fn rule_error_string(rule: &Value) -> String {
    let msg = rule.get("message").and_then(Value::as_str).unwrap_or("");
    if !msg.is_empty() {
        msg.trim().to_string()
    } else {
        rule.get("rule").and_then(Value::as_str).unwrap_or("").trim().to_string()
    }
}

fn rule_message_or_default(rule: &Value) -> String {
    let msg = rule.get("message").and_then(Value::as_str).unwrap_or("");
    if msg.is_empty() { format!("failed rule: {}", rule_error_string(rule)) } else { msg.trim().to_string() }
}

/// cel-go's text for a runtime error.
fn runtime_error(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::Overflow(..) => "integer overflow".into(),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {}", cel_display(i)),
        ExecutionError::UndeclaredReference(name) => format!("undeclared reference to '{name}'"),
        ExecutionError::FunctionError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn is_no_such_overload(e: &ExecutionError) -> bool {
    matches!(
        e,
        ExecutionError::NoSuchOverload(_)
            | ExecutionError::ValuesNotComparable(..)
            | ExecutionError::UnsupportedBinaryOperator(..)
            | ExecutionError::UnexpectedType { .. }
    ) || matches!(e, ExecutionError::FunctionError { message, .. } if message == "no such overload")
}

fn cel_display(v: &CelValue) -> String {
    match v {
        CelValue::Int(i) => i.to_string(),
        CelValue::UInt(u) => u.to_string(),
        CelValue::Float(f) => structural::go_float(*f),
        CelValue::String(s) => s.to_string(),
        CelValue::Bool(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn to_box(v: CelValue) -> Option<Box<dyn Val>> {
    Box::<dyn Val>::try_from(v).ok()
}

fn optional(v: Option<CelValue>) -> CelValue {
    CelValue::Opaque(Arc::new(match v {
        Some(v) => OptionalValue::of(v),
        None => OptionalValue::none(),
    }))
}

fn error_for_reason(path: String, ty: &str, detail: String, reason: Option<&str>) -> FieldError {
    match reason {
        Some("FieldValueForbidden") => FieldError::forbidden(path, detail),
        Some("FieldValueRequired") => FieldError::required(path, detail),
        Some("FieldValueDuplicate") => FieldError::duplicate(path, ty),
        _ => FieldError::invalid(path, ty, detail),
    }
}

/// `evalMessageExpression`: the trimmed message, or `None` to fall back to the rule's message.
fn eval_message(src: &str, ctx: &Context) -> Option<String> {
    let compiled = compile(src, true);
    let Ok(c) = compiled.as_ref() else { return None };
    let value = c.program.execute(ctx).ok()?;
    let msg = match value {
        CelValue::String(s) => s.trim().to_string(),
        _ => return None,
    };
    (!msg.is_empty() && !msg.contains('\n') && msg.len() <= 5 * 1024).then_some(msg)
}

fn validate_expressions(
    path: &Option<Path>,
    s: SchemaRef,
    resource_root: bool,
    obj: &Value,
    old: Option<&Value>,
    ratchet: Ratchet,
    errs: &mut Vec<FieldError>,
) {
    let rules = rules_of(s.raw());
    if rules.is_empty() {
        return;
    }
    let ty = if s.int_or_string() { "" } else { s.ty().unwrap_or("") };
    let Some(env) = ENV.as_ref() else {
        errs.push(FieldError::invalid(path_string(path), ty, "rule compiler initialization error"));
        return;
    };
    let self_val = to_cel(obj, s, resource_root);
    let old_val = old.map(|o| to_cel(o, s, resource_root));
    let bind = |old_self: Option<CelValue>| {
        let mut ctx = new_context(env);
        if let Some(b) = to_box(self_val.clone()) {
            ctx.add_variable_as_val("self", b);
        }
        if let Some(b) = old_self.and_then(to_box) {
            ctx.add_variable_as_val("oldSelf", b);
        }
        ctx
    };
    let ctx = bind(old_val.clone());
    // `oldSelf` is an optional for the rules with `optionalOldSelf: true`.
    let wants_optional = rules.iter().any(|r| r.get("optionalOldSelf").and_then(Value::as_bool) == Some(true));
    let opt_ctx = wants_optional.then(|| bind(Some(optional(old_val))));
    for rule in rules {
        let src = rule.get("rule").and_then(Value::as_str).unwrap_or("");
        if src.trim().is_empty() {
            continue;
        }
        let compiled = compile(src, false);
        let c = match compiled.as_ref() {
            Ok(c) => c,
            Err(e) => {
                errs.push(FieldError::invalid(path_string(path), ty, format!("rule compile error: {e}")));
                continue;
            }
        };
        let optional_old_self = rule.get("optionalOldSelf").and_then(Value::as_bool).unwrap_or(false);
        if c.uses_old_self && old.is_none() && !optional_old_self {
            continue;
        }
        let rule_ctx = match (&opt_ctx, optional_old_self) {
            (Some(o), true) => o,
            _ => &ctx,
        };
        match c.program.execute(rule_ctx) {
            Err(e) if is_no_such_overload(&e) => errs.push(FieldError::invalid(
                path_string(path),
                ty,
                format!(
                    "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {}",
                    rule_error_string(rule)
                ),
            )),
            Err(e) => errs.push(FieldError::invalid(
                path_string(path),
                ty,
                format!("{} evaluating rule: {}", runtime_error(&e), rule_error_string(rule)),
            )),
            Ok(CelValue::Bool(true)) => {}
            Ok(_) => {
                if !c.uses_old_self && ratchet.should_ratchet() {
                    continue;
                }
                let mut fpath = path.clone();
                if let Some(fp) = rule.get("fieldPath").and_then(Value::as_str).filter(|f| !f.is_empty())
                    && let Ok(p) = valid_field_path(fp, s)
                {
                    fpath = child_path(&fpath, p.as_str());
                }
                let detail = rule
                    .get("messageExpression")
                    .and_then(Value::as_str)
                    .filter(|m| !m.trim().is_empty())
                    .and_then(|m| eval_message(m, &ctx))
                    .unwrap_or_else(|| rule_message_or_default(rule));
                let reason = rule.get("reason").and_then(Value::as_str);
                errs.push(error_for_reason(path_string(&fpath), ty, detail, reason));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// CRD validation of rules
// ---------------------------------------------------------------------------------------------

/// Go's `%#v` of an `apiextensions.ValidationRule`, the bad value of rule compile errors.
fn go_rule_struct(rule: &Value) -> String {
    let s = |k: &str| go_quote(rule.get(k).and_then(Value::as_str).unwrap_or(""));
    let reason = if rule.get("reason").and_then(Value::as_str).is_some() {
        "(*apiextensions.FieldValueErrorReason)(0xc000000000)"
    } else {
        "(*apiextensions.FieldValueErrorReason)(nil)"
    };
    let optional = if rule.get("optionalOldSelf").and_then(Value::as_bool).is_some() {
        "(*bool)(0xc000000000)"
    } else {
        "(*bool)(nil)"
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath"),
    )
}

/// `field.Invalid(path, rule, detail)`: built with the Go text of the rule struct as the start of
/// the detail so that the message reads exactly as the apiserver's.
fn invalid_rule(path: Path, rule: &Value, detail: &str) -> FieldError {
    FieldError::new(ErrorType::Invalid, path, None, format!("{}: {detail}", go_rule_struct(rule)))
}

fn check_node(s: &Value, path: &Path, resource_root: bool, forbid_old_self: Option<&Path>, errs: &mut Vec<FieldError>) {
    if !s.is_object() {
        return;
    }
    let defs = Map::new();
    let node = SchemaRef::new(s, &defs);
    for (i, rule) in rules_of(s).iter().enumerate() {
        let rpath = path.child("x-kubernetes-validations").index(i);
        let src = rule.get("rule").and_then(Value::as_str).unwrap_or("");
        if src.trim().is_empty() {
            continue;
        }
        let compiled = compile(src, false);
        let uses_old_self = match compiled.as_ref() {
            Ok(c) => {
                let issues = field_issues(&c.program, src, node, resource_root);
                if !issues.is_empty() {
                    let detail = format!("compilation failed: {}", issues.join("\n"));
                    errs.push(invalid_rule(rpath.child("rule"), rule, &detail));
                    continue;
                }
                c.uses_old_self
            }
            Err(e) => {
                errs.push(invalid_rule(rpath.child("rule"), rule, e));
                continue;
            }
        };
        if let Some(m) = rule.get("messageExpression").and_then(Value::as_str).filter(|m| !m.trim().is_empty())
            && let Err(e) = compile(m, true).as_ref()
        {
            errs.push(invalid_rule(rpath.child("messageExpression"), rule, e));
        }
        if uses_old_self {
            if let Some(p) = forbid_old_self {
                errs.push(FieldError::invalid(
                    rpath.child("rule"),
                    src,
                    format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {p}"),
                ));
            }
        } else if let Some(b) = rule.get("optionalOldSelf").and_then(Value::as_bool) {
            errs.push(FieldError::invalid(
                rpath.child("optionalOldSelf"),
                b,
                "may not be set if oldSelf is not used in rule",
            ));
        }
    }
    let embedded = |v: &Value| v.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        let atomic = s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
        let forbid = forbid_old_self.or(atomic.then_some(path));
        for (k, p) in props {
            check_node(p, &path.child("properties").key(k), embedded(p), forbid, errs);
        }
    }
    if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
        check_node(ap, &path.child("additionalProperties"), embedded(ap), forbid_old_self, errs);
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        let map_list = s.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
        let forbid = forbid_old_self.or((!map_list).then_some(path));
        check_node(items, &path.child("items"), embedded(items), forbid, errs);
    }
}

/// What the checker knows of an expression's type, from the schema.
#[derive(Clone, Copy)]
enum Known<'a> {
    Schema(SchemaRef<'a>, bool),
    /// The `metadata` of a resource root: only `name` and `generateName`.
    RootMeta,
    Scalar,
}

/// cel-go's `undefined field` errors for selections of fields the schema does not declare
/// (`self.foo` where the object has no property `foo`).
fn field_issues(program: &Program, src: &str, node: SchemaRef, resource_root: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut shadowed = Vec::new();
    let root = Known::Schema(node, resource_root);
    resolve(program.expression(), program.source_info(), src, root, &mut shadowed, &mut out);
    out
}

fn select_field<'a>(known: Known<'a>, field: &str) -> Result<Option<Known<'a>>, ()> {
    match known {
        Known::Scalar => Ok(None),
        Known::RootMeta => match field {
            "name" | "generateName" => Ok(Some(Known::Scalar)),
            _ => Err(()),
        },
        Known::Schema(s, root) => {
            if root {
                match field {
                    "apiVersion" | "kind" => return Ok(Some(Known::Scalar)),
                    "metadata" => return Ok(Some(Known::RootMeta)),
                    _ => {}
                }
            }
            if let Some(ap) = s.additional_properties() {
                return Ok(Some(Known::Schema(ap, ap.embedded_resource())));
            }
            match s.properties_map() {
                Some(_) => s
                    .properties()
                    .find(|(k, _)| escape(k).as_deref() == Some(field))
                    .map(|(_, p)| Some(Known::Schema(p, p.embedded_resource())))
                    .ok_or(()),
                None if s.ty() == Some("object") && !s.preserves_unknown_fields() && !root => Err(()),
                None => Ok(None),
            }
        }
    }
}

fn resolve<'a>(
    e: &IdedExpr,
    info: &SourceInfo,
    src: &str,
    root: Known<'a>,
    shadowed: &mut Vec<String>,
    out: &mut Vec<String>,
) -> Option<Known<'a>> {
    match &e.expr {
        Expr::Ident(name) if (name == "self" || name == "oldSelf") && !shadowed.contains(name) => Some(root),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => None,
        Expr::Select(sel) => {
            let operand = resolve(&sel.operand, info, src, root, shadowed, out)?;
            match select_field(operand, &sel.field) {
                Ok(k) => k,
                Err(()) => {
                    out.push(issue(src, info, e.id, &format!("undefined field '{}'", sel.field)));
                    None
                }
            }
        }
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                resolve(t, info, src, root, shadowed, out);
            }
            for a in &c.args {
                resolve(a, info, src, root, shadowed, out);
            }
            None
        }
        Expr::Comprehension(c) => {
            resolve(&c.iter_range, info, src, root, shadowed, out);
            resolve(&c.accu_init, info, src, root, shadowed, out);
            let before = shadowed.len();
            shadowed.push(c.iter_var.clone());
            shadowed.extend(c.iter_var2.clone());
            shadowed.push(c.accu_var.clone());
            for x in [&c.loop_cond, &c.loop_step, &c.result] {
                resolve(x, info, src, root, shadowed, out);
            }
            shadowed.truncate(before);
            None
        }
        Expr::List(l) => {
            for x in &l.elements {
                resolve(x, info, src, root, shadowed, out);
            }
            None
        }
        Expr::Map(m) => {
            for entry in &m.entries {
                if let ::cel::common::ast::EntryExpr::MapEntry(me) = &entry.expr {
                    resolve(&me.key, info, src, root, shadowed, out);
                    resolve(&me.value, info, src, root, shadowed, out);
                }
            }
            None
        }
        Expr::Struct(st) => {
            for entry in &st.entries {
                if let ::cel::common::ast::EntryExpr::StructField(f) = &entry.expr {
                    resolve(&f.value, info, src, root, shadowed, out);
                }
            }
            None
        }
    }
}

/// Defaults must satisfy the rules of their schema (`ValidateDefaults`, which runs them with the
/// default as both `self` and `oldSelf`).
fn check_defaults(s: SchemaRef, path: &Path, resource_root: bool, errs: &mut Vec<FieldError>) {
    if let Some(d) = s.default_value()
        && has_rules(s.raw())
    {
        let base = Some(path.child("default"));
        walk(base, s, resource_root || s.embedded_resource(), d, Some(d), Ratchet::default(), errs);
    }
    if let Some(items) = s.items() {
        check_defaults(items, &path.child("items"), false, errs);
    }
    for (k, p) in s.properties() {
        check_defaults(p, &path.child("properties").key(k), false, errs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {"rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
                         "message": "minReplicas must not exceed maxReplicas"},
                        {"rule": "!has(self.mode) || self.mode != 'Legacy' || self.maxReplicas == 1",
                         "messageExpression": "'mode Legacy allows 1 replica, got ' + string(self.maxReplicas)",
                         "fieldPath": ".maxReplicas"},
                        {"rule": "self.storageClass == oldSelf.storageClass", "message": "storageClass is immutable",
                         "reason": "FieldValueForbidden", "fieldPath": ".storageClass"}
                    ],
                    "properties": {
                        "minReplicas": {"type": "integer"},
                        "maxReplicas": {"type": "integer"},
                        "mode": {"type": "string"},
                        "storageClass": {"type": "string"},
                        "image": {"type": "string", "x-kubernetes-validations": [
                            {"rule": "self.startsWith('registry.example.com/')"}
                        ]},
                        "timeout": {"type": "string", "format": "duration",
                                    "x-kubernetes-validations": [{"rule": "self <= duration('1h')", "message": "at most an hour"}]},
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "x-kubernetes-validations": [{"rule": "self.all(p, p.port > 0)", "message": "ports must be positive"}],
                            "items": {"type": "object", "properties": {
                                "name": {"type": "string"},
                                "port": {"type": "integer", "x-kubernetes-validations": [
                                    {"rule": "self == oldSelf", "message": "port is immutable"}
                                ]}
                            }}
                        },
                        "labels": {"type": "object", "additionalProperties": {"type": "string"},
                                   "x-kubernetes-validations": [{"rule": "self.all(k, k.matches('^[a-z]+$'))", "message": "bad key"}]},
                        "dash-name": {"type": "string", "x-kubernetes-validations": [{"rule": "size(self) < 4"}]},
                        "namespace": {"type": "string"}
                    }
                }
            },
            "x-kubernetes-validations": [
                {"rule": "self.metadata.name.startsWith('w') && !has(self.metadata.namespace)", "message": "name must start with w"}
            ]
        })
    }

    fn errors(obj: &Value, old: Option<&Value>) -> Vec<String> {
        let s = schema();
        let defs = Map::new();
        validate(obj, old, SchemaRef::new(&s, &defs)).iter().map(ToString::to_string).collect()
    }

    fn cr(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": "ns"}, "spec": spec})
    }

    #[test]
    fn valid_objects_pass() {
        let obj = cr(json!({"minReplicas": 1, "maxReplicas": 3, "storageClass": "fast",
            "image": "registry.example.com/app", "timeout": "30m", "ports": [{"name": "a", "port": 80}],
            "labels": {"abc": "x"}, "dash-name": "abc", "namespace": "x"}));
        assert_eq!(errors(&obj, None), Vec::<String>::new());
        assert_eq!(errors(&obj, Some(&obj)), Vec::<String>::new());
    }

    #[test]
    fn failures_carry_message_path_and_type() {
        let obj = cr(json!({"minReplicas": 5, "maxReplicas": 3, "mode": "Legacy", "image": "docker.io/app",
            "timeout": "2h", "labels": {"Bad": "x"}, "dash-name": "toolong", "ports": [{"name": "a", "port": 0}]}));
        assert_eq!(
            errors(&obj, None),
            vec![
                "spec: Invalid value: \"object\": minReplicas must not exceed maxReplicas",
                "spec.maxReplicas: Invalid value: \"object\": mode Legacy allows 1 replica, got 3",
                "spec.image: Invalid value: \"string\": failed rule: self.startsWith('registry.example.com/')",
                "spec.timeout: Invalid value: \"string\": at most an hour",
                "spec.labels: Invalid value: \"object\": bad key",
                "spec.dash-name: Invalid value: \"string\": failed rule: size(self) < 4",
                "spec.ports: Invalid value: \"array\": ports must be positive",
            ]
        );
    }

    #[test]
    fn root_rules_are_reported_at_nil() {
        let obj = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}, "spec": {}});
        assert_eq!(errors(&obj, None), vec!["<nil>: Invalid value: \"object\": name must start with w"]);
    }

    #[test]
    fn transition_rules_need_an_old_value() {
        let old = cr(json!({"storageClass": "fast", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}));
        let new = cr(json!({"storageClass": "slow", "ports": [{"name": "b", "port": 82}, {"name": "c", "port": 1}]}));
        assert_eq!(errors(&new, None), Vec::<String>::new());
        assert_eq!(
            errors(&new, Some(&old)),
            vec![
                "spec.storageClass: Forbidden: storageClass is immutable",
                "spec.ports[0].port: Invalid value: \"integer\": port is immutable",
            ]
        );
    }

    #[test]
    fn unchanged_values_are_ratcheted() {
        let old = cr(json!({"image": "docker.io/app", "storageClass": "a"}));
        let new = cr(json!({"image": "docker.io/app", "storageClass": "a", "minReplicas": 1}));
        assert_eq!(errors(&new, Some(&old)), Vec::<String>::new());
    }

    #[test]
    fn runtime_errors_are_reported() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "v": {"x-kubernetes-int-or-string": true}},
        "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "message": "min must not exceed max"},
            {"rule": "!has(self.v) || self.v > 0"}
        ]}}});
        let defs = Map::new();
        let errs: Vec<String> = validate(&json!({"spec": {"min": 1, "v": "x"}}), None, SchemaRef::new(&s, &defs))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            vec![
                "spec: Invalid value: \"object\": no such key: max evaluating rule: min must not exceed max",
                "spec: Invalid value: \"object\": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: !has(self.v) || self.v > 0",
            ]
        );
    }

    #[test]
    fn optional_old_self_runs_on_create() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"v": {"type": "integer",
            "x-kubernetes-validations": [{"rule": "!oldSelf.hasValue() || self >= oldSelf.value()",
                                          "optionalOldSelf": true, "message": "may not decrease"}]}}}}});
        let defs = Map::new();
        let sr = SchemaRef::new(&s, &defs);
        assert!(validate(&json!({"spec": {"v": 1}}), None, sr).is_empty());
        let errs: Vec<String> = validate(&json!({"spec": {"v": 1}}), Some(&json!({"spec": {"v": 2}})), sr)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errs, vec!["spec.v: Invalid value: \"integer\": may not decrease"]);
    }

    #[test]
    fn kubernetes_library_functions() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "l": {"type": "array", "items": {"type": "integer"}},
        "s": {"type": "string"}},
        "x-kubernetes-validations": [
            {"rule": "self.l.isSorted() && self.l.sum() == 6 && self.l.min() == 1 && self.l.max() == 3"},
            {"rule": "self.l.indexOf(2) == 1 && self.l.lastIndexOf(9) == -1"},
            {"rule": "self.s.find('[0-9]+') == '42' && self.s.findAll('[a-z]').size() == 3"},
            {"rule": "sets.contains(self.l, [1, 2]) && !sets.intersects(self.l, [7])"},
            {"rule": "cel.bind(n, self.l.size(), n == 3)"},
            {"rule": "self.s.lowerAscii().split('4').size() == 2 && self.s.substring(0, 3) == 'abc'"},
            {"rule": "self.l.map(x, x * 2).filter(x, x > 2).size() == 2 && self.l.exists_one(x, x == 3)"}
        ]}}});
        let defs = Map::new();
        let errs = validate(&json!({"spec": {"l": [1, 2, 3], "s": "abc42"}}), None, SchemaRef::new(&s, &defs));
        assert!(errs.is_empty(), "{errs:?}");
    }

    #[test]
    fn blocking_errors_skip_cel() {
        assert!(blocking_error(&[FieldError::invalid("a", 1, "x")]).is_none());
        let e = blocking_error(&[FieldError::required("a", "")]).map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
            )
        );
    }

    #[test]
    fn escaping_matches_the_apiserver() {
        assert_eq!(escape("foo-bar").as_deref(), Some("foo__dash__bar"));
        assert_eq!(escape("a.b/c").as_deref(), Some("a__dot__b__slash__c"));
        assert_eq!(escape("__x").as_deref(), Some("__underscores__x"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("1abc"), None);
        assert_eq!(escape("a b"), None);
    }

    #[test]
    fn check_rules_reports_compile_errors() {
        let base = Path::new("spec").child("versions").index(0).child("schema").child("openAPIV3Schema");
        let s = json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-validations": [
                {"rule": "self.a =="},
                {"rule": "foo == 1"},
                {"rule": "self.a + 1"},
                {"rule": "self.a > 0", "optionalOldSelf": true},
                {"rule": "has(self.a) && self.b > 0 && self.all(k, k.c)"}
            ], "properties": {"a": {"type": "integer"}}},
            "list": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}
        }});
        let errs: Vec<String> = check_rules(&s, &base).iter().map(ToString::to_string).collect();
        let p = "spec.versions[0].schema.openAPIV3Schema";
        assert_eq!(errs.len(), 6, "{errs:#?}");
        assert!(errs[0].starts_with(&format!(
            "{p}.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:\"self.a ==\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}: compilation failed: ERROR: <input>:1:"
        )), "{}", errs[0]);
        assert!(errs[1].ends_with(
            "compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')\n | foo == 1\n | ^"
        ), "{}", errs[1]);
        assert!(errs[2].ends_with(": cel expression must evaluate to a bool"), "{}", errs[2]);
        assert_eq!(
            errs[3],
            format!(
                "{p}.properties[spec].x-kubernetes-validations[3].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule"
            )
        );
        assert!(errs[4].ends_with(
            "compilation failed: ERROR: <input>:1:20: undefined field 'b'\n | has(self.a) && self.b > 0 && self.all(k, k.c)\n | ...................^"
        ), "{}", errs[4]);
        assert_eq!(
            errs[5],
            format!(
                "{p}.properties[list].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within {p}.properties[list]"
            )
        );
    }

    #[test]
    fn check_rules_validates_defaults() {
        let base = Path::new("s");
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "n": {"type": "integer", "default": 0, "x-kubernetes-validations": [{"rule": "self > 0", "message": "must be positive"}]}}}}});
        let errs: Vec<String> = check_rules(&s, &base).iter().map(ToString::to_string).collect();
        assert_eq!(
            errs,
            vec!["s.properties[spec].properties[n].default: Invalid value: \"integer\": must be positive"]
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)),
            "[a-z0-9 ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            let keys = prop_oneof![
                Just("minReplicas".to_string()),
                Just("maxReplicas".to_string()),
                Just("mode".to_string()),
                Just("storageClass".to_string()),
                Just("ports".to_string()),
                Just("name".to_string()),
                Just("port".to_string()),
                Just("timeout".to_string()),
                Just("labels".to_string()),
                "[a-z]{1,3}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((keys, inner), 0..5).prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn validate_never_panics(spec in arb_json(), old in arb_json()) {
            let s = schema();
            let defs = Map::new();
            let obj = json!({"metadata": {"name": "w"}, "spec": spec});
            let _ = validate(&obj, None, SchemaRef::new(&s, &defs));
            let _ = validate(&obj, Some(&json!({"spec": old})), SchemaRef::new(&s, &defs));
        }

        #[test]
        fn compiling_never_panics(src in "[a-z().=<>!&|'\\[\\] 0-9+,-]{0,30}") {
            let rule = json!({"type": "object", "x-kubernetes-validations": [{"rule": src, "messageExpression": src}]});
            let _ = check_rules(&rule, &Path::new("x"));
            let _ = validate(&json!({}), Some(&json!({})), SchemaRef::new(&rule, &Map::new()));
        }
    }
}
