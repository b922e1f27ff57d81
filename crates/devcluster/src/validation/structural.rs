//! Custom-resource validation, pruning and defaulting against a CRD version's structural
//! `openAPIV3Schema`, as kube-apiserver's apiextensions-apiserver does them (Kubernetes 1.33).
//!
//! What is mirrored, and where from:
//!
//! - [`validate`]: kube-openapi's `validate.SchemaValidator` (pkg/validation/validate: type, format,
//!   string, number, slice, enum, object and allOf/anyOf/oneOf/not validators, with their exact
//!   message texts from pkg/validation/errors), converted to field errors the way
//!   apiextensions-apiserver's `kubeOpenAPIResultToFieldErrors` does (Required, NotSupported,
//!   TooLong, TooMany, TypeInvalid, Invalid), followed by the embedded-resource
//!   `apiVersion`/`kind`/`metadata` checks (`schema/objectmeta.Validate`) and the
//!   `x-kubernetes-list-type` set/map uniqueness checks (`schema/listtype`), in that order, as the
//!   custom-resource strategy runs them. Formats the apiserver does not support (`int32`,
//!   `int64`, `double`, ...) are ignored, as `StripUnsupportedFormatsPostProcess` does.
//! - [`validate_update`]: the same with validation ratcheting (GA in 1.33): errors inside a
//!   correlatable subtree that did not change from the old object are dropped.
//! - [`prune`]: `schema/pruning.PruneWithOptions` (with the pruned paths the server reports for
//!   `fieldValidation=Strict`/`Warn`), `defaulting.PruneNonNullableNullsWithoutDefaults`, and the
//!   embedded `metadata` coercion of `schema/objectmeta.Coerce`.
//! - [`apply_defaults`]: `schema/defaulting.Default`, replacing non-nullable nulls too.
//! - [`validate_schema`]: the schema part of the CRD validation
//!   (`validateCustomResourceDefinitionValidation`): structural invariants and completeness
//!   (`schema.ValidateStructural`), defaults (`defaulting.ValidateDefaults`) and the generic
//!   OpenAPI checks of `ValidateCustomResourceDefinitionOpenAPISchema`, including the textual
//!   checks of `x-kubernetes-validations` entries (compiling the rules is `cel::check_rules`).
//!
//! Deliberate differences are noted on the functions that have them. Error order within one kind
//! follows the schema's property order where Go iterates a map in random order.

use crate::field::{ErrorType, FieldError, Path, go_quote};
use crate::schema::SchemaRef;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

/// Validate a custom resource (whole object; the root `metadata` is validated elsewhere, but
/// embedded resources' apiVersion/kind/metadata rules apply) against its schema.
///
/// Returns, in the apiserver's order: the OpenAPI schema errors, the embedded-resource errors and
/// the list-type uniqueness errors. CEL rules are `cel::validate`; the apiserver only runs them
/// when none of these errors is "blocking" (see `cel::blocking_error`).
pub fn validate(obj: &Value, schema: SchemaRef) -> Vec<FieldError> {
    let mut errs = openapi_errors(obj, schema, None, None);
    errs.extend(embedded_errors(obj, schema));
    errs.extend(list_type_errors(obj, schema));
    errs
}

/// [`validate`] for an update, with the validation ratcheting of Kubernetes 1.33: a schema error
/// inside a part of the object that is unchanged from `old` (compared at the nearest node that
/// can be correlated: object fields, and items of `x-kubernetes-list-type: map` lists) is not
/// reported, so that tightening a schema does not block updates of existing objects.
pub fn validate_update(obj: &Value, old: &Value, schema: SchemaRef) -> Vec<FieldError> {
    let mut errs = openapi_errors(obj, schema, None, Some(old));
    errs.extend(embedded_errors(obj, schema));
    errs.extend(list_type_errors(obj, schema));
    errs
}

/// Drop fields the schema does not declare (unless x-kubernetes-preserve-unknown-fields), as the
/// apiserver's pruning does; the root apiVersion/kind/metadata are kept (metadata pruned to the
/// ObjectMeta fields only for embedded resources). Returns the pruned paths in the form the real
/// server uses in its `fieldValidation=Strict` 400 error / Warn warnings, in a deterministic
/// order: the sorted schema-pruned paths (`spec.foo`, `spec.items[0].bar`: the server prints them
/// as `unknown field "spec.foo"`), then the unknown fields dropped from embedded `metadata`.
///
/// Like the server's decoder, this also removes `null` values of fields that are not
/// `nullable` and have no `default` (`PruneNonNullableNullsWithoutDefaults`); those are not
/// reported as unknown.
pub fn prune(obj: &mut Value, schema: SchemaRef) -> Vec<String> {
    let mut paths = Vec::new();
    prune_node(obj, Some(schema), true, &[], &mut paths);
    paths.sort();
    prune_nulls(obj, Some(schema));
    let mut meta_paths = Vec::new();
    coerce_embedded(obj, schema, &Path::root(), &mut meta_paths);
    paths.extend(meta_paths);
    paths
}

/// Apply `default`s as the apiserver does on create/update/read (defaults of absent fields,
/// nested defaulting into objects that exist or were just defaulted; nullable+null rules: a
/// `null` in a field that is not nullable is replaced by the field's default).
pub fn apply_defaults(obj: &mut Value, schema: SchemaRef) {
    default_node(obj, schema);
}

/// Check that a CRD version's schema is acceptable, as the real CRD validation does for
/// `apiextensions.k8s.io/v1`: the structural invariants, defaults that validate against their
/// schema and are pruned, and the generic OpenAPI restrictions (no `$ref`, no
/// `additionalProperties` with `properties`, valid list/map types, ...). `base` is the path of
/// the schema itself, e.g. `spec.versions[0].schema.openAPIV3Schema`.
///
/// Not covered: the root restrictions that apply when the status subresource is enabled, the
/// CEL rule compilation and cost estimation (`cel::check_rules`), and validating defaults against
/// CEL rules (also `cel::check_rules`).
pub fn validate_schema(schema: &Value, base: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let defs = Map::new();
    if flag(schema, "nullable") {
        errs.push(FieldError::forbidden(base.child("nullable"), "nullable cannot be true at the root"));
    }
    if representable(schema) {
        let mut structural = structural_invariants(schema, Level::Root, base);
        structural.extend(structural_completeness(schema, base));
        structural.sort_by_key(|e| e.to_string());
        if !structural.is_empty() {
            errs.extend(structural);
        } else {
            let root = SchemaRef::new(schema, &defs);
            errs.extend(validate_defaults(root, base, true, false));
        }
    }
    let ssv = SpecValidator { allow_defaults: true, disallow_reason: String::new(), inside_meta: false };
    openapi_schema_errors(schema, base, &ssv, true, &mut errs);
    errs
}

/// The field errors of kube-openapi's schema validator for `value` against `schema`, with field
/// paths relative to `base` (`None` is the Go `nil` path the apiserver uses for a whole custom
/// resource; errors that belong to no field are then reported at `<nil>`).
pub(crate) fn openapi_errors(
    value: &Value,
    schema: SchemaRef,
    base: Option<&Path>,
    old: Option<&Value>,
) -> Vec<FieldError> {
    let res = validate_node(value, schema, "", old.map(Some));
    res.errs.into_iter().map(|e| e.into_field_error(base)).collect()
}

// ---------------------------------------------------------------------------------------------
// Go formatting helpers
// ---------------------------------------------------------------------------------------------

/// A JSON number as Go's unstructured decoding sees it: `int64` when the literal is an integer
/// that fits, `float64` otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Num {
    Int(i64),
    Float(f64),
}

pub(crate) fn num(n: &serde_json::Number) -> Num {
    match n.as_i64() {
        Some(i) => Num::Int(i),
        None => Num::Float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

impl Num {
    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

/// The shortest decimal digits of `f` (no sign) and its decimal exponent, e.g. 1234.5 gives
/// ("12345", 3).
fn shortest_digits(f: f64) -> (String, i32) {
    let s = format!("{:e}", f.abs());
    let (mant, exp) = s.split_once('e').unwrap_or((s.as_str(), "0"));
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    (digits, exp.parse().unwrap_or(0))
}

fn plain_decimal(digits: &str, exp: i32) -> String {
    let n = digits.len() as i32;
    if exp < 0 {
        format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
    } else if exp + 1 >= n {
        format!("{}{}", digits, "0".repeat((exp + 1 - n) as usize))
    } else {
        let (a, b) = digits.split_at((exp + 1) as usize);
        format!("{a}.{b}")
    }
}

fn exp_form(digits: &str, exp: i32, min_exp_digits: usize) -> String {
    let (first, rest) = digits.split_at(1.min(digits.len()));
    let mant = if rest.is_empty() { first.to_string() } else { format!("{first}.{rest}") };
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mant}e{sign}{:0width$}", exp.abs(), width = min_exp_digits)
}

/// Go's `%v` of a `float64` (`strconv.FormatFloat(f, 'g', -1, 64)`): `5`, `5.5`, `1e+06`.
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if f == 0.0 {
        return format!("{sign}0");
    }
    let (digits, exp) = shortest_digits(f);
    if !(-4..6).contains(&exp) {
        format!("{sign}{}", exp_form(&digits, exp, 2))
    } else {
        format!("{sign}{}", plain_decimal(&digits, exp))
    }
}

/// Go's `encoding/json` text of a `float64`.
fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return go_float(f);
    }
    let sign = if f.is_sign_negative() && f != 0.0 { "-" } else { "" };
    if f == 0.0 {
        return "0".into();
    }
    let (digits, exp) = shortest_digits(f);
    let abs = f.abs();
    if !(1e-6..1e21).contains(&abs) {
        format!("{sign}{}", exp_form(&digits, exp, 1))
    } else {
        format!("{sign}{}", plain_decimal(&digits, exp))
    }
}

/// `json.Marshal` of a decoded JSON value as Go prints it: object keys sorted, no spaces.
pub(crate) fn go_json(v: &Value) -> String {
    match v {
        Value::Number(n) => match num(n) {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => go_json_float(f),
        },
        Value::Array(a) => format!("[{}]", a.iter().map(go_json).collect::<Vec<_>>().join(",")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), m.get(k).map(go_json).unwrap_or_default()))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// `reflect.DeepEqual` of two decoded JSON values: an `int64` never equals a `float64`.
pub(crate) fn go_deep_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (num(x), num(y)) {
            (Num::Int(i), Num::Int(j)) => i == j,
            (Num::Float(f), Num::Float(g)) => f == g,
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| go_deep_equal(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| go_deep_equal(v, w)))
        }
        _ => a == b,
    }
}

/// `swag.IsFloat64AJSONInteger`.
fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_991.0;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    if f.trunc() == f {
        return true;
    }
    let g = f.round();
    let diff = (f - g).abs();
    diff / (f.abs() + g.abs()) < 1e-9
}

// ---------------------------------------------------------------------------------------------
// Regular expressions with Go (RE2) semantics
// ---------------------------------------------------------------------------------------------

static REGEX_CACHE: LazyLock<Mutex<HashMap<String, Result<regex::Regex, String>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Rewrite the Perl classes whose meaning differs between Go and the `regex` crate: Go's `\d`,
/// `\w`, `\s` and `\b` are ASCII-only.
fn go_regex_source(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut in_class = false;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(n) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let rep = match (in_class, n) {
                    (false, 'd') => Some("[0-9]"),
                    (false, 'D') => Some("[^0-9]"),
                    (false, 'w') => Some("[0-9A-Za-z_]"),
                    (false, 'W') => Some("[^0-9A-Za-z_]"),
                    (false, 's') => Some("[\\t\\n\\f\\r ]"),
                    (false, 'S') => Some("[^\\t\\n\\f\\r ]"),
                    (false, 'b') => Some("(?-u:\\b)"),
                    (false, 'B') => Some("(?-u:\\B)"),
                    (true, 'd') => Some("0-9"),
                    (true, 'w') => Some("0-9A-Za-z_"),
                    (true, 's') => Some("\\t\\n\\f\\r "),
                    _ => None,
                };
                match rep {
                    Some(r) => out.push_str(r),
                    None => {
                        out.push('\\');
                        out.push(n);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                // A leading `^` and a leading `]` are part of the class syntax.
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            '[' if in_class && chars.peek() == Some(&':') => {
                // POSIX class `[:alpha:]` inside a bracket expression.
                out.push('[');
                for d in chars.by_ref() {
                    out.push(d);
                    if d == ']' {
                        break;
                    }
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            c => out.push(c),
        }
    }
    out
}

/// The Go `regexp` error text for a pattern the `regex` crate rejects (best effort: the error
/// code is mapped, the expression quoted is the whole pattern).
fn go_regex_error(pattern: &str, err: &regex::Error) -> String {
    let text = err.to_string();
    let code = if text.contains("unclosed group") {
        "missing closing )"
    } else if text.contains("unopened group") {
        "unexpected )"
    } else if text.contains("unclosed character class") {
        "missing closing ]"
    } else if text.contains("repetition operator missing expression") {
        "missing argument to repetition operator"
    } else if text.contains("invalid character class range") || text.contains("invalid range") {
        "invalid character class range"
    } else if text.contains("escape") {
        "invalid escape sequence"
    } else if text.contains("repetition") || text.contains("decimal") {
        "invalid repeat count"
    } else if text.contains("look-around") || text.contains("flag") {
        "invalid or unsupported Perl syntax"
    } else {
        "invalid nested repetition operator"
    };
    format!("error parsing regexp: {code}: `{pattern}`")
}

/// Compile `pattern` with Go's semantics; the error is Go's `regexp.Compile` error text.
pub(crate) fn go_regex(pattern: &str) -> Result<regex::Regex, String> {
    if let Ok(cache) = REGEX_CACHE.lock()
        && let Some(r) = cache.get(pattern)
    {
        return r.clone();
    }
    let compiled = regex::RegexBuilder::new(&go_regex_source(pattern))
        .size_limit(1 << 22)
        .build()
        .map_err(|e| go_regex_error(pattern, &e));
    if let Ok(mut cache) = REGEX_CACHE.lock() {
        if cache.len() > 512 {
            cache.clear();
        }
        cache.insert(pattern.to_string(), compiled.clone());
    }
    compiled
}

// ---------------------------------------------------------------------------------------------
// kube-openapi schema validation
// ---------------------------------------------------------------------------------------------

/// The error codes of kube-openapi's `errors.Validation` that the apiserver distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Code {
    InvalidType,
    Required,
    TooLong,
    Enum,
    MaxItems,
    TooManyProps,
    /// Any other `errors.Validation`: reported as `Invalid`.
    Other,
    /// An error that is not an `errors.Validation` (allOf/anyOf/oneOf/not): reported as
    /// `Invalid` at the validator's base path with the value `""`.
    Composite,
}

#[derive(Debug, Clone)]
struct OErr {
    code: Code,
    /// kube-openapi's path of the value (`spec.replicas`, `.spec` for a root-level required
    /// field, `spec.items[0]`).
    name: String,
    value: Option<Value>,
    /// Enum values, or the maximum of a TooLong/MaxItems/TooManyProps error.
    values: Vec<Value>,
    max: i64,
    msg: String,
}

impl OErr {
    fn new(code: Code, name: &str, value: Option<Value>, msg: String) -> Self {
        OErr { code, name: name.to_string(), value, values: Vec::new(), max: 0, msg }
    }

    fn into_field_error(self, base: Option<&Path>) -> FieldError {
        let base_str = || base.map(|p| p.as_str().to_string()).unwrap_or_else(|| "<nil>".into());
        let path = if self.name.is_empty() || self.name == "." {
            base_str()
        } else {
            let trimmed = self.name.strip_prefix('.').unwrap_or(&self.name);
            match base {
                Some(p) => p.child(trimmed).into(),
                None => trimmed.to_string(),
            }
        };
        let value = self.value.unwrap_or_else(|| Value::String(String::new()));
        match self.code {
            Code::Required => FieldError::required(path, ""),
            Code::Enum => {
                let quoted: Vec<String> = self
                    .values
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => go_quote(s),
                        other => go_quote(&go_json(other)),
                    })
                    .collect();
                let detail =
                    if quoted.is_empty() { String::new() } else { format!("supported values: {}", quoted.join(", ")) };
                FieldError::new(ErrorType::NotSupported, path, Some(value), detail)
            }
            Code::TooLong => {
                let unit = if self.max == 1 { "byte" } else { "bytes" };
                FieldError::new(ErrorType::TooLong, path, None, format!("may not be more than {} {unit}", self.max))
            }
            Code::MaxItems | Code::TooManyProps => {
                let unit = if self.max == 1 { "item" } else { "items" };
                FieldError::new(ErrorType::TooMany, path, Some(value), format!("must have at most {} {unit}", self.max))
            }
            Code::InvalidType => FieldError::type_invalid(path, value, self.msg),
            Code::Other => FieldError::invalid(path, value, self.msg),
            Code::Composite => FieldError::invalid(base_str(), "", self.msg),
        }
    }
}

/// kube-openapi's `validate.Result`: errors (deduplicated by message, as `AddErrors` does) and the
/// match count used to pick the "best" failing alternative of anyOf/oneOf.
#[derive(Default, Debug)]
struct Res {
    errs: Vec<OErr>,
    matches: usize,
}

impl Res {
    fn err(e: OErr) -> Res {
        Res { errs: vec![e], matches: 0 }
    }
    fn add(&mut self, e: OErr) {
        if !self.errs.iter().any(|x| x.msg == e.msg) {
            self.errs.push(e);
        }
    }
    fn merge(&mut self, other: Res) {
        for e in other.errs {
            self.add(e);
        }
        self.matches += other.matches;
    }
    fn is_valid(&self) -> bool {
        self.errs.is_empty()
    }
}

const SUPPORTED_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// The format the apiserver validates: unsupported formats are stripped.
fn effective_format<'a>(s: SchemaRef<'a>) -> Option<&'a str> {
    let f = s.format()?;
    SUPPORTED_FORMATS.contains(&f.replace('-', "").as_str()).then_some(f)
}

fn schema_types<'a>(s: SchemaRef<'a>) -> Vec<&'a str> {
    if s.int_or_string() {
        return vec!["integer", "string"];
    }
    match s.get("type") {
        Some(Value::String(t)) if !t.is_empty() => vec![t.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) => match num(n) {
            Num::Int(_) => "integer",
            Num::Float(_) => "number",
        },
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `errors.InvalidType`: the message embeds a string value with `%q`.
fn invalid_type(name: &str, type_name: &str, value: &str) -> OErr {
    OErr::new(
        Code::InvalidType,
        name,
        Some(Value::String(value.to_string())),
        format!("{name} in body must be of type {type_name}: {}", go_quote(value)),
    )
}

/// `SchemaValidator.Validate`. `old` is `Some(old value)` when ratcheting an update (the inner
/// `None` means the value has no old counterpart), `None` when not ratcheting.
fn validate_node(data: &Value, s: SchemaRef, path: &str, old: Option<Option<&Value>>) -> Res {
    let mut res = Res::default();
    if let Some(Some(o)) = old
        && go_deep_equal(o, data)
    {
        // Ratcheting: an unchanged correlatable value is not validated.
        res.matches += 1;
        return res;
    }
    let types = schema_types(s);
    let format = effective_format(s);
    if data.is_null() {
        res.merge(type_validate(data, &types, flag(s.raw(), "nullable"), format, path));
        res.merge(enum_validate(data, s, path));
        return res;
    }
    if !types.is_empty() || format.is_some() {
        res.merge(type_validate(data, &types, flag(s.raw(), "nullable"), format, path));
        res.matches += 1;
    }
    res.merge(props_validate(data, s, path));
    res.matches += 1;
    if let Value::String(text) = data {
        res.merge(string_validate(text, s, path));
        res.matches += 1;
        if let Some(f) = format {
            res.merge(format_validate(text, f, path));
            res.matches += 1;
        }
    }
    if let Value::Number(n) = data {
        res.merge(number_validate(num(n), s, path));
        res.matches += 1;
    }
    if let Value::Array(items) = data {
        let old_items = match old {
            Some(Some(Value::Array(o))) => Some(o.as_slice()),
            _ => None,
        };
        res.merge(slice_validate(items, s, path, old.map(|_| old_items)));
        res.matches += 1;
    }
    res.merge(enum_validate(data, s, path));
    res.matches += 1;
    if let Value::Object(map) = data {
        let old_map = match old {
            Some(Some(Value::Object(o))) => Some(o),
            _ => None,
        };
        res.merge(object_validate(map, s, path, old.map(|_| old_map)));
        res.matches += 1;
    }
    res.matches += 1;
    res
}

fn type_validate(data: &Value, types: &[&str], nullable: bool, format: Option<&str>, path: &str) -> Res {
    if data.is_null() {
        if !types.is_empty() && !types.contains(&"null") && !nullable {
            return Res::err(invalid_type(path, &types.join(","), "null"));
        }
        return Res::default();
    }
    let ok = Res { errs: Vec::new(), matches: 1 };
    let sch_type = json_kind(data);
    let data_format = match data {
        Value::Number(n) => match num(n) {
            Num::Int(_) => "int64",
            Num::Float(_) => "float64",
        },
        _ => "",
    };
    let contains = |t: &str| types.contains(&t);
    let is_float_int = match data {
        Value::Number(n) => match num(n) {
            Num::Float(f) => is_json_integer(f) && contains("integer"),
            Num::Int(_) => false,
        },
        _ => false,
    };
    let is_int_float = sch_type == "integer" && contains("number");
    let stringish = matches!(data, Value::String(_) | Value::Array(_));
    if let Some(f) = format
        && !stringish
        && !(contains(sch_type) || data_format == f || is_float_int || is_int_float)
    {
        return Res::err(invalid_type(path, f, data_format));
    }
    if !(contains("number") || contains("integer")) && format.is_some() && stringish {
        return ok;
    }
    if !(contains(sch_type) || is_float_int || is_int_float) {
        return Res::err(invalid_type(path, &types.join(","), sch_type));
    }
    ok
}

fn props_validate(data: &Value, s: SchemaRef, path: &str) -> Res {
    let mut main = Res::default();
    let defs = s.defs();
    let subs = |key: &str| -> Vec<SchemaRef> {
        s.get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|n| SchemaRef::new(n, defs)).collect())
            .unwrap_or_default()
    };
    let any_of = subs("anyOf");
    if !any_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut first_success: Option<Res> = None;
        let mut succeeded = false;
        for sub in any_of {
            let r = validate_node(data, sub, path, None);
            if r.is_valid() {
                best = None;
                succeeded = true;
                first_success = Some(r);
                break;
            }
            if best.as_ref().is_none_or(|b| r.matches > b.matches) {
                best = Some(r);
            }
        }
        if !succeeded {
            main.add(OErr::new(
                Code::Composite,
                path,
                None,
                format!("{} must validate at least one schema (anyOf)", go_quote(path)),
            ));
        }
        if let Some(b) = best {
            main.merge(b);
        } else if let Some(f) = first_success {
            main.merge(f);
        }
    }
    let one_of = subs("oneOf");
    if !one_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut first_success: Option<Res> = None;
        let mut validated = 0;
        for sub in one_of {
            let r = validate_node(data, sub, path, None);
            if r.is_valid() {
                validated += 1;
                best = None;
                if first_success.is_none() {
                    first_success = Some(r);
                }
                continue;
            }
            if validated == 0 && best.as_ref().is_none_or(|b| r.matches > b.matches) {
                best = Some(r);
            }
        }
        if validated != 1 {
            let additional = if validated == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {validated} valid alternatives")
            };
            main.add(OErr::new(
                Code::Composite,
                path,
                None,
                format!("{} must validate one and only one schema (oneOf). {additional}", go_quote(path)),
            ));
            if let Some(b) = best {
                main.merge(b);
            }
        } else if let Some(f) = first_success {
            main.merge(f);
        }
    }
    let all_of = subs("allOf");
    if !all_of.is_empty() {
        let total = all_of.len();
        let mut validated = 0;
        for sub in all_of {
            let r = validate_node(data, sub, path, None);
            if r.is_valid() {
                validated += 1;
            }
            main.merge(r);
        }
        if validated != total {
            let additional = if validated == 0 { ". None validated" } else { "" };
            main.add(OErr::new(
                Code::Composite,
                path,
                None,
                format!("{} must validate all the schemas (allOf){additional}", go_quote(path)),
            ));
        }
    }
    if let Some(not) = s.get("not").filter(|n| n.is_object()) {
        let r = validate_node(data, SchemaRef::new(not, defs), path, None);
        if r.is_valid() {
            main.add(OErr::new(
                Code::Composite,
                path,
                None,
                format!("{} must not validate the schema (not)", go_quote(path)),
            ));
        }
    }
    main.matches += 1;
    main
}

fn int_kw(s: SchemaRef, key: &str) -> Option<i64> {
    s.get(key).and_then(Value::as_number).map(|n| match num(n) {
        Num::Int(i) => i,
        Num::Float(f) => f as i64,
    })
}

fn string_validate(text: &str, s: SchemaRef, path: &str) -> Res {
    let len = text.chars().count() as i64;
    if let Some(max) = int_kw(s, "maxLength")
        && len > max
    {
        let mut e = OErr::new(
            Code::TooLong,
            path,
            Some(Value::String(text.into())),
            format!("{path} in body should be at most {max} chars long"),
        );
        e.max = max;
        return Res::err(e);
    }
    if let Some(min) = int_kw(s, "minLength")
        && len < min
    {
        return Res::err(OErr::new(
            Code::Other,
            path,
            Some(Value::String(text.into())),
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = s.get("pattern").and_then(Value::as_str)
        && !pattern.is_empty()
    {
        match go_regex(pattern) {
            Err(e) => {
                return Res::err(OErr::new(
                    Code::Other,
                    path,
                    Some(Value::String(text.into())),
                    format!("{path} in body should match '{pattern}, but pattern is invalid: {e}'"),
                ));
            }
            Ok(re) if !re.is_match(text) => {
                return Res::err(OErr::new(
                    Code::Other,
                    path,
                    Some(Value::String(text.into())),
                    format!("{path} in body should match '{pattern}'"),
                ));
            }
            Ok(_) => {}
        }
    }
    Res::default()
}

fn format_validate(text: &str, format: &str, path: &str) -> Res {
    if formats::valid(&format.replace('-', ""), text) {
        Res::default()
    } else {
        Res::err(invalid_type(path, format, text))
    }
}

fn number_validate(value: Num, s: SchemaRef, path: &str) -> Res {
    let mut mult = Res::default();
    let mut min_res = Res::default();
    let mut max_res = Res::default();
    let data = Value::Number(match value {
        Num::Int(i) => i.into(),
        Num::Float(f) => serde_json::Number::from_f64(f).unwrap_or_else(|| 0.into()),
    });
    let kw = |key: &str| s.get(key).and_then(Value::as_f64);
    if let Some(factor) = kw("multipleOf") {
        let err = match value {
            Num::Int(i) if !(0.0..1.0).contains(&factor) => {
                let f = factor as i64;
                if f < 0 {
                    Some(format!("factor MultipleOf declared for {path} must be positive: {f}"))
                } else if f != 0 && i % f != 0 {
                    Some(format!("{path} in body should be a multiple of {f}"))
                } else {
                    None
                }
            }
            _ => {
                let d = value.as_f64();
                if factor < 0.0 {
                    Some(format!("factor MultipleOf declared for {path} must be positive: {}", go_float(factor)))
                } else {
                    let m = if factor < 1.0 { 1.0 / factor * d } else { d / factor };
                    (!is_json_integer(m))
                        .then(|| format!("{path} in body should be a multiple of {}", go_float(factor)))
                }
            }
        };
        if let Some(msg) = err {
            mult.add(OErr::new(Code::Other, path, Some(data.clone()), msg));
        }
    }
    if let Some(max) = kw("maximum") {
        let exclusive = flag(s.raw(), "exclusiveMaximum");
        let (over, shown) = match value {
            Num::Int(i) => {
                let m = max as i64;
                ((!exclusive && i > m) || (exclusive && i >= m), m.to_string())
            }
            Num::Float(f) => ((!exclusive && f > max) || (exclusive && f >= max), go_float(max)),
        };
        if over {
            let rel = if exclusive { "less than" } else { "less than or equal to" };
            max_res.add(OErr::new(
                Code::Other,
                path,
                Some(data.clone()),
                format!("{path} in body should be {rel} {shown}"),
            ));
        }
    }
    if let Some(min) = kw("minimum") {
        let exclusive = flag(s.raw(), "exclusiveMinimum");
        let (under, shown) = match value {
            Num::Int(i) => {
                let m = min as i64;
                ((!exclusive && i < m) || (exclusive && i <= m), m.to_string())
            }
            Num::Float(f) => ((!exclusive && f < min) || (exclusive && f <= min), go_float(min)),
        };
        if under {
            let rel = if exclusive { "greater than" } else { "greater than or equal to" };
            min_res.add(OErr::new(
                Code::Other,
                path,
                Some(data.clone()),
                format!("{path} in body should be {rel} {shown}"),
            ));
        }
    }
    let mut res = Res::default();
    res.merge(mult);
    res.merge(min_res);
    res.merge(max_res);
    res.matches += 1;
    res
}

fn slice_validate(items: &[Value], s: SchemaRef, path: &str, old: Option<Option<&[Value]>>) -> Res {
    let mut res = Res::default();
    if let Some(item_schema) = s.items() {
        let keys = match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => Some(map_keys(s)),
            _ => None,
        };
        for (i, item) in items.iter().enumerate() {
            // Ratcheting correlates the items of map lists by key, and nothing else.
            let item_old = match (old, &keys) {
                (Some(Some(o)), Some(keys)) => Some(find_by_keys(o, item, keys)),
                (Some(_), _) => Some(None),
                (None, _) => None,
            };
            res.merge(validate_node(item, item_schema, &format!("{path}[{i}]"), item_old));
        }
    }
    let size = items.len() as i64;
    if let Some(min) = int_kw(s, "minItems")
        && size < min
    {
        res.add(OErr::new(
            Code::Other,
            path,
            Some(size.into()),
            format!("{path} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = int_kw(s, "maxItems")
        && size > max
    {
        let mut e = OErr::new(
            Code::MaxItems,
            path,
            Some(size.into()),
            format!("{path} in body should have at most {max} items"),
        );
        e.max = max;
        res.add(e);
    }
    if flag(s.raw(), "uniqueItems") {
        let dup = items.iter().enumerate().any(|(i, a)| items.iter().take(i).any(|b| go_deep_equal(a, b)));
        if dup {
            res.add(OErr::new(Code::Other, path, None, format!("{path} in body shouldn't contain duplicates")));
        }
    }
    res.matches += 1;
    res
}

fn map_keys(s: SchemaRef) -> Vec<String> {
    s.get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The item of `old` with the same list-map keys as `item`.
pub(crate) fn find_by_keys<'a>(old: &'a [Value], item: &Value, keys: &[String]) -> Option<&'a Value> {
    let key_of = |v: &Value| -> Option<Vec<Option<Value>>> {
        let m = v.as_object()?;
        Some(keys.iter().map(|k| m.get(k).cloned()).collect())
    };
    let wanted = key_of(item)?;
    old.iter().find(|o| {
        key_of(o).is_some_and(|k| {
            k.len() == wanted.len()
                && k.iter().zip(&wanted).all(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => go_deep_equal(a, b),
                    (None, None) => true,
                    _ => false,
                })
        })
    })
}

/// `basicCommonValidator`: enum membership with Go's conversion rules.
fn enum_validate(data: &Value, s: SchemaRef, path: &str) -> Res {
    let Some(values) = s.enum_values().filter(|v| !v.is_empty()) else {
        return Res::default();
    };
    if values.iter().any(|e| enum_matches(data, e)) {
        return Res::default();
    }
    let mut e = OErr::new(
        Code::Enum,
        path,
        Some(if data.is_null() { Value::String("null".into()) } else { data.clone() }),
        format!("{path} in body should be one of {}", go_v(&Value::Array(values.clone()))),
    );
    e.values = values.clone();
    Res::err(e)
}

/// `reflect.DeepEqual(data converted to the enum value's type, enumValue)`.
fn enum_matches(data: &Value, enum_value: &Value) -> bool {
    match (data, enum_value) {
        (Value::Null, _) | (_, Value::Null) => false,
        (Value::Number(d), Value::Number(e)) => match (num(d), num(e)) {
            (Num::Int(a), Num::Int(b)) => a == b,
            (Num::Float(a), Num::Int(b)) => a as i64 == b,
            (Num::Int(a), Num::Float(b)) => a as f64 == b,
            (Num::Float(a), Num::Float(b)) => a == b,
        },
        // Go converts an integer to a string as the code point it names.
        (Value::Number(d), Value::String(e)) => match num(d) {
            Num::Int(i) => {
                let c = u32::try_from(i).ok().and_then(char::from_u32).unwrap_or('\u{FFFD}');
                e.chars().eq(std::iter::once(c))
            }
            Num::Float(_) => false,
        },
        (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => go_deep_equal(data, enum_value),
        (a, b) => a == b,
    }
}

/// Go's `%v` of a decoded JSON value.
fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match num(n) {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => go_float(f),
        },
        Value::Array(a) => format!("[{}]", a.iter().map(go_v).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> =
                keys.into_iter().map(|k| format!("{k}:{}", m.get(k).map(go_v).unwrap_or_default())).collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

fn object_validate(
    map: &Map<String, Value>,
    s: SchemaRef,
    path: &str,
    old: Option<Option<&Map<String, Value>>>,
) -> Res {
    let num_keys = map.len() as i64;
    if let Some(min) = int_kw(s, "minProperties")
        && num_keys < min
    {
        return Res::err(OErr::new(
            Code::Other,
            path,
            Some(num_keys.into()),
            format!("{path} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = int_kw(s, "maxProperties")
        && num_keys > max
    {
        let mut e = OErr::new(
            Code::TooManyProps,
            path,
            Some(num_keys.into()),
            format!("{path} in body should have at most {max} properties"),
        );
        e.max = max;
        return Res::err(e);
    }
    let mut res = Res::default();
    let props = s.properties_map();
    let is_prop = |k: &str| props.is_some_and(|p| p.contains_key(k));
    // Only objects whose map type is not atomic correlate their fields for ratcheting.
    let correlate = !s.map_atomic();
    let old_of =
        |k: &str| -> Option<Option<&Value>> { old.map(|o| if correlate { o.and_then(|m| m.get(k)) } else { None }) };
    if matches!(s.get("additionalProperties"), Some(Value::Bool(false))) {
        for k in map.keys() {
            if !is_prop(k) {
                res.add(OErr::new(
                    Code::Other,
                    path,
                    Some(Value::String(k.clone())),
                    format!("{path}.{k} in body is a forbidden property"),
                ));
            }
        }
    } else if let Some(ap) = s.additional_properties() {
        for (k, v) in map {
            if !is_prop(k) {
                res.merge(validate_node(v, ap, &format!("{path}.{k}"), old_of(k)));
            }
        }
    }
    for (name, prop) in s.properties() {
        if let Some(v) = map.get(name) {
            let child = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
            res.merge(validate_node(v, prop, &child, old_of(name)));
        }
    }
    for k in s.required() {
        if !map.contains_key(k) {
            res.add(OErr::new(Code::Required, &format!("{path}.{k}"), None, format!("{path}.{k} in body is required")));
        }
    }
    res
}

// ---------------------------------------------------------------------------------------------
// Embedded resources: apiVersion, kind and metadata
// ---------------------------------------------------------------------------------------------

fn embedded_errors(obj: &Value, schema: SchemaRef) -> Vec<FieldError> {
    let mut errs = Vec::new();
    embedded_walk(obj, schema, &Path::root(), &mut errs);
    errs
}

/// `objectmeta.Validate` with `isResourceRoot=false`.
fn embedded_walk(x: &Value, s: SchemaRef, path: &Path, errs: &mut Vec<FieldError>) {
    match x {
        Value::Object(map) => {
            if s.embedded_resource() {
                validate_embedded_resource(path, map, errs);
            }
            for (k, v) in map {
                if let Some(p) = s.property(k) {
                    embedded_walk(v, p, &path.child(k), errs);
                } else if let Some(ap) = s.additional_properties() {
                    embedded_walk(v, ap, &path.key(k), errs);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items() {
                for (i, v) in items.iter().enumerate() {
                    embedded_walk(v, is, &path.index(i), errs);
                }
            }
        }
        _ => {}
    }
}

fn validate_embedded_resource(path: &Path, x: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    if !x.contains_key("apiVersion") {
        errs.push(FieldError::required(path.child("apiVersion"), ""));
    }
    if !x.contains_key("kind") {
        errs.push(FieldError::required(path.child("kind"), ""));
    }
    for (k, v) in x {
        match k.as_str() {
            "apiVersion" => match v {
                Value::String(av) if av.is_empty() => {
                    errs.push(FieldError::invalid(path.child("apiVersion"), av.as_str(), "must not be empty"))
                }
                Value::String(av) if av.matches('/').count() > 1 => errs.push(FieldError::invalid(
                    path.child("apiVersion"),
                    av.as_str(),
                    format!("unexpected GroupVersion string: {av}"),
                )),
                Value::String(_) => {}
                other => errs.push(FieldError::invalid(path.child("apiVersion"), other.clone(), "must be a string")),
            },
            "kind" => match v {
                Value::String(kind) if kind.is_empty() => {
                    errs.push(FieldError::invalid(path.child("kind"), kind.as_str(), "must not be empty"))
                }
                Value::String(kind) => {
                    let msgs = crate::names::is_dns1035_label(&kind.to_lowercase());
                    if !msgs.is_empty() {
                        errs.push(FieldError::invalid(
                            path.child("kind"),
                            kind.as_str(),
                            format!("may have mixed case, but should otherwise match: {}", msgs.join(",")),
                        ));
                    }
                }
                other => errs.push(FieldError::invalid(path.child("kind"), other.clone(), "must be a string")),
            },
            "metadata" => match objectmeta::decode_error(v) {
                Some(e) => errs.push(FieldError::invalid(path.child("metadata"), v.clone(), e)),
                None => objectmeta::validate(v, &path.child("metadata"), errs),
            },
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// x-kubernetes-list-type set and map uniqueness
// ---------------------------------------------------------------------------------------------

fn list_type_errors(obj: &Value, schema: SchemaRef) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Value::Object(map) = obj {
        list_maps(&Path::root(), schema, map, &mut errs);
    }
    errs
}

fn list_maps(path: &Path, s: SchemaRef, obj: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    if let Some(ap) = s.additional_properties() {
        for (k, v) in obj {
            list_walk(&path.key(k), ap, v, errs);
        }
    }
    if s.properties_map().is_some() {
        for (k, v) in obj {
            if let Some(p) = s.property(k) {
                list_walk(&path.child(k), p, v, errs);
            }
        }
    }
}

fn list_walk(path: &Path, s: SchemaRef, v: &Value, errs: &mut Vec<FieldError>) {
    match v {
        Value::Array(items) => {
            match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => {
                    for i in non_unique(items) {
                        if let Some(x) = items.get(i) {
                            errs.push(FieldError::duplicate(path.index(i), x.clone()));
                        }
                    }
                }
                Some("map") => list_map_errors(path, &map_keys(s), items, errs),
                _ => {}
            }
            if let Some(is) = s.items() {
                for (i, x) in items.iter().enumerate() {
                    list_walk(&path.index(i), is, x, errs);
                }
            }
        }
        Value::Object(m) => list_maps(path, s, m, errs),
        _ => {}
    }
}

/// The identity of a set element as Go compares it: scalars by type and value, compounds by
/// their JSON encoding.
fn set_key(v: &Value) -> String {
    match v {
        Value::Number(n) => match num(n) {
            Num::Int(i) => format!("i:{i}"),
            Num::Float(f) => format!("f:{}", f.to_bits()),
        },
        Value::String(s) => format!("s:{s}"),
        Value::Bool(b) => format!("b:{b}"),
        Value::Null => "n".into(),
        compound => format!("j:{}", go_json(compound)),
    }
}

/// The indices of the second occurrence of each repeated element.
fn non_unique(items: &[Value]) -> Vec<usize> {
    let keys: Vec<String> = items.iter().map(set_key).collect();
    non_unique_keys(&keys)
}

fn non_unique_keys(keys: &[String]) -> Vec<usize> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let times = seen.entry(k.as_str()).or_insert(0);
        *times += 1;
        if *times == 2 {
            out.push(i);
        }
    }
    out
}

fn list_map_errors(path: &Path, keys: &[String], items: &[Value], errs: &mut Vec<FieldError>) {
    for (i, x) in items.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            errs.push(FieldError::invalid(path.index(i), x.clone(), "must be an object for an array of list-type map"));
            return;
        }
    }
    if items.len() <= 1 {
        return;
    }
    let key_maps: Vec<Map<String, Value>> = items
        .iter()
        .map(|x| {
            let mut key = Map::new();
            if let Value::Object(m) = x {
                for k in keys {
                    if let Some(v) = m.get(k) {
                        key.insert(k.clone(), v.clone());
                    }
                }
            }
            key
        })
        .collect();
    let ids: Vec<String> = key_maps
        .iter()
        .map(|m| {
            if let [single] = keys {
                m.get(single).map(set_key).unwrap_or_else(|| "unspecified".into())
            } else {
                set_key(&Value::Object(m.clone()))
            }
        })
        .collect();
    for i in non_unique_keys(&ids) {
        if let Some(k) = key_maps.get(i) {
            errs.push(FieldError::duplicate(path.index(i), Value::Object(k.clone())));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pruning
// ---------------------------------------------------------------------------------------------

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn path_key(parent: &[String], key: &str) -> Vec<String> {
    let mut p = parent.to_vec();
    if !p.is_empty() {
        p.push(".".into());
    }
    p.push(key.into());
    p
}

fn path_index(parent: &[String], i: usize) -> Vec<String> {
    let mut p = parent.to_vec();
    p.push(format!("[{i}]"));
    p
}

/// `pruning.prune`. `embedded` is the schema's `x-kubernetes-embedded-resource`, forced for the
/// resource root.
fn prune_node(x: &mut Value, s: Option<SchemaRef>, embedded: bool, parent: &[String], out: &mut Vec<String>) {
    if let Some(sch) = s
        && sch.preserves_unknown_fields()
    {
        skip_prune(x, sch, embedded, parent, out);
        return;
    }
    match x {
        Value::Object(map) => {
            let Some(sch) = s else {
                for k in map.keys() {
                    out.push(path_key(parent, k).concat());
                }
                map.clear();
                return;
            };
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let Some(v) = map.get_mut(&k) else { continue };
                let child = path_key(parent, &k);
                if let Some(p) = sch.property(&k) {
                    prune_node(v, Some(p), p.embedded_resource(), &child, out);
                } else if sch.get("additionalProperties").is_some_and(|a| !a.is_null()) {
                    // `additionalProperties: true|false` has no schema: the value is kept and
                    // pruned as a value without schema (objects inside it are emptied).
                    let ap = sch.additional_properties();
                    prune_node(v, ap, ap.is_some_and(|a| a.embedded_resource()), &child, out);
                } else {
                    if !META_FIELDS.contains(&k.as_str()) || !parent.is_empty() {
                        out.push(child.concat());
                    }
                    map.remove(&k);
                }
            }
        }
        Value::Array(items) => {
            let is = s.and_then(|sch| sch.items());
            for (i, v) in items.iter_mut().enumerate() {
                let child = path_index(parent, i);
                prune_node(v, is, is.is_some_and(|i| i.embedded_resource()), &child, out);
            }
        }
        _ => {}
    }
}

fn skip_prune(x: &mut Value, s: SchemaRef, embedded: bool, parent: &[String], out: &mut Vec<String>) {
    match x {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let child = path_key(parent, k);
                if let Some(p) = s.property(k) {
                    prune_node(v, Some(p), p.embedded_resource(), &child, out);
                } else if let Some(ap) = s.additional_properties() {
                    prune_node(v, Some(ap), ap.embedded_resource(), &child, out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items() {
                for (i, v) in items.iter_mut().enumerate() {
                    let child = path_index(parent, i);
                    skip_prune(v, is, is.embedded_resource(), &child, out);
                }
            }
        }
        _ => {}
    }
}

fn schema_for_field<'a>(s: Option<SchemaRef<'a>>, k: &str) -> Option<SchemaRef<'a>> {
    let s = s?;
    s.property(k).or_else(|| s.additional_properties())
}

/// `defaulting.PruneNonNullableNullsWithoutDefaults`.
fn prune_nulls(x: &mut Value, s: Option<SchemaRef>) {
    match x {
        Value::Object(map) => {
            map.retain(|k, v| {
                let fs = schema_for_field(s, k);
                !(v.is_null() && fs.is_some_and(|f| !f.nullable() && f.default_value().is_none()))
            });
            for (k, v) in map.iter_mut() {
                prune_nulls(v, schema_for_field(s, k));
            }
        }
        Value::Array(items) => {
            let is = s.and_then(|sch| sch.items());
            for v in items {
                prune_nulls(v, is);
            }
        }
        _ => {}
    }
}

/// `objectmeta.Coerce` (isResourceRoot=false): embedded `metadata` keeps only ObjectMeta fields.
fn coerce_embedded(x: &mut Value, s: SchemaRef, path: &Path, out: &mut Vec<String>) {
    match x {
        Value::Object(map) => {
            if s.embedded_resource()
                && let Some(meta) = map.get_mut("metadata")
            {
                objectmeta::coerce(meta, &path.child("metadata"), out);
            }
            for (k, v) in map.iter_mut() {
                if let Some(p) = s.property(k) {
                    coerce_embedded(v, p, &path.child(k), out);
                } else if let Some(ap) = s.additional_properties() {
                    coerce_embedded(v, ap, &path.key(k), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items() {
                for (i, v) in items.iter_mut().enumerate() {
                    coerce_embedded(v, is, &path.index(i), out);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Defaulting
// ---------------------------------------------------------------------------------------------

fn default_node(x: &mut Value, s: SchemaRef) {
    match x {
        Value::Object(map) => {
            for (k, prop) in s.properties() {
                let Some(d) = prop.default_value() else { continue };
                let absent_or_null = match map.get(k) {
                    None => true,
                    Some(v) => v.is_null() && !prop.nullable(),
                };
                if absent_or_null {
                    map.insert(k.to_string(), d.clone());
                }
            }
            let ap = s.additional_properties();
            for (k, v) in map.iter_mut() {
                if let Some(p) = s.property(k) {
                    default_node(v, p);
                } else if let Some(ap) = ap {
                    if v.is_null()
                        && !ap.nullable()
                        && let Some(d) = ap.default_value()
                    {
                        *v = d.clone();
                    }
                    default_node(v, ap);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items() {
                for v in items.iter_mut() {
                    if v.is_null()
                        && !is.nullable()
                        && let Some(d) = is.default_value()
                    {
                        *v = d.clone();
                    }
                    default_node(v, is);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// CRD schema validation: structural invariants
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

fn str_kw<'a>(s: &'a Value, key: &str) -> &'a str {
    s.get(key).and_then(Value::as_str).unwrap_or("")
}

fn obj_kw<'a>(s: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    s.get(key).and_then(Value::as_object)
}

fn arr_kw<'a>(s: &'a Value, key: &str) -> &'a [Value] {
    s.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// A schema the structural conversion can represent (no `items` array anywhere).
fn representable(s: &Value) -> bool {
    if s.get("items").is_some_and(Value::is_array) {
        return false;
    }
    let children = obj_kw(s, "properties")
        .into_iter()
        .flat_map(|m| m.values())
        .chain(s.get("items").filter(|i| i.is_object()))
        .chain(s.get("additionalProperties").filter(|i| i.is_object()))
        .chain(s.get("not").filter(|i| i.is_object()))
        .chain(["allOf", "anyOf", "oneOf"].iter().flat_map(|k| arr_kw(s, k)));
    children.into_iter().all(representable)
}

fn is_int_or_string_anyof(any_of: &[Value]) -> bool {
    match any_of {
        [a, b] => a == &serde_json::json!({"type": "integer"}) && b == &serde_json::json!({"type": "string"}),
        _ => false,
    }
}

fn structural_invariants(s: &Value, lvl: Level, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ty = str_kw(s, "type");
    let items = s.get("items").filter(|i| i.is_object());
    if ty == "array" && items.is_none() {
        errs.push(FieldError::required(path.child("items"), "must be specified"));
    }
    if let Some(i) = items {
        errs.extend(structural_invariants(i, Level::Item, &path.child("items")));
    }
    if let Some(props) = obj_kw(s, "properties") {
        for (k, v) in props {
            errs.extend(structural_invariants(v, Level::Field, &path.child("properties").key(k)));
        }
    }
    let ap = s.get("additionalProperties");
    if let Some(ap) = ap {
        if lvl == Level::Root {
            errs.push(FieldError::forbidden(path.child("additionalProperties"), "must not be used at the root"));
        }
        if ap.is_object() {
            errs.extend(structural_invariants(ap, Level::Field, &path.child("additionalProperties")));
        }
    }
    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errs.push(FieldError::invalid(
            path.child("x-kubernetes-preserve-unknown-fields"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(FieldError::invalid(
            path.child("x-kubernetes-embedded-resource"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = is_int_or_string_anyof(arr_kw(s, "anyOf"));
    let skip_first_all_of_any_of =
        arr_kw(s, "allOf").first().is_some_and(|a| is_int_or_string_anyof(arr_kw(a, "anyOf")));
    errs.extend(value_validation(s, skip_any_of, skip_first_all_of_any_of, lvl, path));

    let check_metadata = lvl == Level::Root || embedded;
    if embedded && ty != "object" {
        if ty.is_empty() {
            errs.push(FieldError::required(
                path.child("type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errs.push(FieldError::invalid(
                path.child("type"),
                ty,
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(path.child("type"), detail));
    }
    if embedded && ap.is_some() {
        errs.push(FieldError::forbidden(
            path.child("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !ty.is_empty() && ty != "object" {
        errs.push(FieldError::invalid(path.child("type"), ty, "must be object at the root"));
    }
    let props = obj_kw(s, "properties");
    for meta in ["kind", "apiVersion"] {
        if let Some(p) = props.and_then(|p| p.get(meta))
            && check_metadata
        {
            let t = str_kw(p, "type");
            if t != "string" {
                errs.push(FieldError::invalid(path.child("properties").key(meta).child("type"), t, "must be string"));
            }
        }
    }
    if let Some(meta) = props.and_then(|p| p.get("metadata")) {
        let mpath = path.child("properties").key("metadata");
        let t = str_kw(meta, "type");
        if check_metadata && t != "object" {
            errs.push(FieldError::invalid(mpath.child("type"), t, "must be object"));
        }
        if lvl == Level::Root && !root_metadata_ok(meta) {
            errs.push(FieldError::forbidden(
                mpath,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if embedded && !preserve && props.is_none_or(Map::is_empty) {
        errs.push(FieldError::required(
            path.child("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
    errs
}

/// The root `metadata` schema may only restrict `name` and `generateName`.
fn root_metadata_ok(meta: &Value) -> bool {
    let Some(m) = meta.as_object() else { return true };
    let props = obj_kw(meta, "properties");
    let props_ok = match props {
        None => true,
        Some(p) => {
            let has_name = p.contains_key("name");
            let has_gen = p.contains_key("generateName");
            p.is_empty() || (has_name && has_gen && p.len() == 2) || ((has_name || has_gen) && p.len() == 1)
        }
    };
    props_ok
        && m.iter().all(|(k, v)| match k.as_str() {
            "type" | "default" | "properties" => true,
            // Zero values are equal to an unset field.
            _ => {
                matches!(v, Value::Null | Value::Bool(false))
                    || v.as_str() == Some("")
                    || v.as_array().is_some_and(Vec::is_empty)
            }
        })
}

fn value_validation(s: &Value, skip_any_of: bool, skip_first_all_of: bool, lvl: Level, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !skip_any_of {
        for (i, v) in arr_kw(s, "anyOf").iter().enumerate() {
            errs.extend(nested_value_validation(v, false, lvl, &path.child("anyOf").index(i)));
        }
    }
    for (i, v) in arr_kw(s, "allOf").iter().enumerate() {
        errs.extend(nested_value_validation(v, skip_first_all_of && i == 0, lvl, &path.child("allOf").index(i)));
    }
    for (i, v) in arr_kw(s, "oneOf").iter().enumerate() {
        errs.extend(nested_value_validation(v, false, lvl, &path.child("oneOf").index(i)));
    }
    if let Some(not) = s.get("not").filter(|n| n.is_object()) {
        errs.extend(nested_value_validation(not, false, lvl, &path.child("not")));
    }
    let pattern = str_kw(s, "pattern");
    if !pattern.is_empty()
        && let Err(e) = go_regex(pattern)
    {
        errs.push(FieldError::invalid(
            path.child("pattern"),
            pattern,
            format!("must be a valid regular expression, but isn't: {e}"),
        ));
    }
    errs
}

fn nested_value_validation(v: &Value, skip_any_of: bool, lvl: Level, path: &Path) -> Vec<FieldError> {
    let mut errs = value_validation(v, skip_any_of, false, lvl, path);
    if let Some(i) = v.get("items").filter(|i| i.is_object()) {
        errs.extend(nested_value_validation(i, false, lvl, &path.child("items")));
    }
    if let Some(props) = obj_kw(v, "properties") {
        for (k, p) in props {
            errs.extend(nested_value_validation(p, false, Level::Field, &path.child("properties").key(k)));
        }
    }
    let forbid = |errs: &mut Vec<FieldError>, key: &str, detail: &str| {
        errs.push(FieldError::forbidden(path.child(key), detail));
    };
    if !str_kw(v, "type").is_empty() {
        forbid(&mut errs, "type", "must be empty to be structural");
    }
    if v.get("additionalProperties").is_some() {
        forbid(&mut errs, "additionalProperties", "must be undefined to be structural");
    }
    if v.get("default").is_some_and(|d| !d.is_null()) {
        forbid(&mut errs, "default", "must be undefined to be structural");
    }
    if !str_kw(v, "title").is_empty() {
        forbid(&mut errs, "title", "must be empty to be structural");
    }
    if !str_kw(v, "description").is_empty() {
        forbid(&mut errs, "description", "must be empty to be structural");
    }
    if flag(v, "nullable") {
        forbid(&mut errs, "nullable", "must be false to be structural");
    }
    for key in ["x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string"]
    {
        if flag(v, key) {
            forbid(&mut errs, key, "must be false to be structural");
        }
    }
    if !arr_kw(v, "x-kubernetes-list-map-keys").is_empty() {
        forbid(&mut errs, "x-kubernetes-list-map-keys", "must be empty to be structural");
    }
    if v.get("x-kubernetes-list-type").is_some_and(|t| !t.is_null()) {
        forbid(&mut errs, "x-kubernetes-list-type", "must be undefined to be structural");
    }
    if v.get("x-kubernetes-map-type").is_some_and(|t| !t.is_null()) {
        forbid(&mut errs, "x-kubernetes-map-type", "must be undefined to be structural");
    }
    if !arr_kw(v, "x-kubernetes-validations").is_empty() {
        forbid(&mut errs, "x-kubernetes-validations", "must be empty to be structural");
    }
    if obj_kw(v, "properties").is_some_and(|p| p.contains_key("metadata")) {
        errs.push(FieldError::forbidden(
            path.child("properties").key("metadata"),
            "must not be specified in a nested context",
        ));
    }
    errs
}

/// `validateStructuralCompleteness`: properties and items used in the root's value validations
/// must also be specified outside of them.
fn structural_completeness(s: &Value, path: &Path) -> Vec<FieldError> {
    value_validation_completeness(s, Some(s), path, path)
}

fn value_validation_completeness(v: &Value, s: Option<&Value>, s_path: &Path, v_path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(not) = v.get("not").filter(|n| n.is_object()) {
        errs.extend(nested_completeness(not, s, s_path, &v_path.child("not")));
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, n) in arr_kw(v, key).iter().enumerate() {
            errs.extend(nested_completeness(n, s, s_path, &v_path.child(key).index(i)));
        }
    }
    errs
}

fn nested_completeness(v: &Value, s: Option<&Value>, s_path: &Path, v_path: &Path) -> Vec<FieldError> {
    let Some(s) = s else {
        return vec![FieldError::required(s_path.clone(), format!("because it is defined in {v_path}"))];
    };
    let mut errs = value_validation_completeness(v, Some(s), s_path, v_path);
    if let Some(vi) = v.get("items").filter(|i| i.is_object()) {
        let si = s.get("items").filter(|i| i.is_object());
        errs.extend(nested_completeness(vi, si, &s_path.child("items"), &v_path.child("items")));
    }
    if let Some(vprops) = obj_kw(v, "properties") {
        let sprops = obj_kw(s, "properties");
        for (k, vf) in vprops {
            match sprops.and_then(|p| p.get(k)) {
                None => errs.push(FieldError::required(
                    s_path.child("properties").key(k),
                    format!("because it is defined in {}", v_path.child("properties").key(k)),
                )),
                Some(sf) => errs.extend(nested_completeness(
                    vf,
                    Some(sf),
                    &s_path.child("properties").key(k),
                    &v_path.child("properties").key(k),
                )),
            }
        }
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// CRD schema validation: defaults
// ---------------------------------------------------------------------------------------------

/// `defaulting.ValidateDefaults`: every default must be pruned, carry valid embedded metadata and
/// validate against its schema. Defaults inside resource metadata are validated against their
/// schema only (the surrounding-object check is not reproduced).
fn validate_defaults(s: SchemaRef, path: &Path, embedded: bool, inside_meta: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let embedded = embedded || s.embedded_resource();
    let inside_meta = inside_meta && !embedded;
    if let Some(d) = s.default_value() {
        let dpath = path.child("default");
        if inside_meta {
            errs.extend(openapi_errors(d, s, Some(&dpath), None));
        } else {
            let mut pruned = d.clone();
            let mut unknown = Vec::new();
            prune_node(&mut pruned, Some(s), embedded, &[], &mut unknown);
            if !go_deep_equal(&pruned, d) {
                errs.push(FieldError::invalid(dpath.clone(), d.clone(), "must not have unknown fields"));
            }
            let mut meta = Vec::new();
            if embedded && let Value::Object(m) = d {
                validate_embedded_resource(&dpath, m, &mut meta);
            }
            embedded_walk_children(d, s, &dpath, &mut meta);
            if !meta.is_empty() {
                errs.extend(meta);
            } else {
                errs.extend(openapi_errors(d, s, Some(&dpath), None));
            }
        }
    }
    if let Some(items) = s.items() {
        errs.extend(validate_defaults(items, &path.child("items"), false, inside_meta));
    }
    for (k, p) in s.properties() {
        let sub_meta = inside_meta || (embedded && META_FIELDS.contains(&k));
        errs.extend(validate_defaults(p, &path.child("properties").key(k), false, sub_meta));
    }
    errs
}

fn embedded_walk_children(x: &Value, s: SchemaRef, path: &Path, errs: &mut Vec<FieldError>) {
    if let Value::Object(map) = x {
        for (k, v) in map {
            if let Some(p) = s.property(k) {
                embedded_walk(v, p, &path.child(k), errs);
            } else if let Some(ap) = s.additional_properties() {
                embedded_walk(v, ap, &path.key(k), errs);
            }
        }
    } else {
        embedded_walk(x, s, path, errs);
    }
}

// ---------------------------------------------------------------------------------------------
// CRD schema validation: generic OpenAPI restrictions
// ---------------------------------------------------------------------------------------------

#[derive(Clone)]
struct SpecValidator {
    allow_defaults: bool,
    disallow_reason: String,
    inside_meta: bool,
}

impl SpecValidator {
    fn with_forbidden_defaults(&self, reason: &str) -> Self {
        SpecValidator { allow_defaults: false, disallow_reason: reason.to_string(), ..self.clone() }
    }
    fn with_inside_meta(&self) -> Self {
        SpecValidator { inside_meta: true, ..self.clone() }
    }

    /// `specStandardValidatorV3.validate`.
    fn validate(&self, s: &Value, path: &Path, errs: &mut Vec<FieldError>) {
        const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];
        let ty = str_kw(s, "type");
        if !ty.is_empty() && !TYPES.contains(&ty) {
            errs.push(FieldError::not_supported(path.child("type"), ty, &TYPES));
        }
        if s.get("default").is_some_and(|d| !d.is_null()) && !self.allow_defaults {
            let mut detail = "must not be set".to_string();
            if !self.disallow_reason.is_empty() {
                detail.push(' ');
                detail.push_str(&self.disallow_reason);
            }
            errs.push(FieldError::forbidden(path.child("default"), detail));
        }
        if !str_kw(s, "id").is_empty() {
            errs.push(FieldError::forbidden(path.child("id"), "id is not supported"));
        }
        if s.get("additionalItems").is_some_and(|a| !a.is_null()) {
            errs.push(FieldError::forbidden(path.child("additionalItems"), "additionalItems is not supported"));
        }
        if obj_kw(s, "patternProperties").is_some_and(|p| !p.is_empty()) {
            errs.push(FieldError::forbidden(path.child("patternProperties"), "patternProperties is not supported"));
        }
        if obj_kw(s, "definitions").is_some_and(|p| !p.is_empty()) {
            errs.push(FieldError::forbidden(path.child("definitions"), "definitions is not supported"));
        }
        if s.get("dependencies").is_some_and(|d| !d.is_null()) {
            errs.push(FieldError::forbidden(path.child("dependencies"), "dependencies is not supported"));
        }
        if s.get("$ref").is_some_and(|r| !r.is_null()) {
            errs.push(FieldError::forbidden(path.child("$ref"), "$ref is not supported"));
        }
        if ty == "null" {
            errs.push(FieldError::forbidden(
                path.child("type"),
                "type cannot be set to null, use nullable as an alternative",
            ));
        }
        if s.get("items").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            errs.push(FieldError::forbidden(path.child("items"), "items must be a schema object and not an array"));
        }
        if self.inside_meta && flag(s, "x-kubernetes-embedded-resource") {
            errs.push(FieldError::forbidden(
                path.child("x-kubernetes-embedded-resource"),
                "must not be used inside of resource meta",
            ));
        }
    }
}

fn opt_str_value(v: Option<&Value>) -> Value {
    match v {
        Some(Value::String(s)) => Value::String(s.clone()),
        _ => Value::String("null".into()),
    }
}

/// `ValidateCustomResourceDefinitionOpenAPISchema` (its schema errors; CEL errors are
/// `cel::check_rules`).
fn openapi_schema_errors(s: &Value, path: &Path, ssv: &SpecValidator, is_root: bool, errs: &mut Vec<FieldError>) {
    if !s.is_object() {
        return;
    }
    ssv.validate(s, path, errs);
    if flag(s, "uniqueItems") {
        errs.push(FieldError::forbidden(
            path.child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let props = obj_kw(s, "properties");
    if let Some(ap) = s.get("additionalProperties").filter(|a| !a.is_null()) {
        if props.is_some_and(|p| !p.is_empty()) && (ap == &Value::Bool(false) || ap.is_object()) {
            errs.push(FieldError::forbidden(
                path.child("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        let sub = if ssv.inside_meta {
            ssv.with_forbidden_defaults("inside additionalProperties applying to object metadata")
        } else {
            ssv.clone()
        };
        openapi_schema_errors(ap, &path.child("additionalProperties"), &sub, false, errs);
    }
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if let Some(props) = props {
        for (k, p) in props {
            let mut sub = ssv.clone();
            if (is_root || embedded) && META_FIELDS.contains(&k.as_str()) {
                sub = sub.with_inside_meta();
                if is_root {
                    sub = sub.with_forbidden_defaults(&format!("in top-level {k}"));
                }
            }
            openapi_schema_errors(p, &path.child("properties").key(k), &sub, false, errs);
        }
    }
    if let Some(not) = s.get("not") {
        openapi_schema_errors(not, &path.child("not"), ssv, false, errs);
    }
    for key in ["allOf", "oneOf", "anyOf"] {
        for (i, sub) in arr_kw(s, key).iter().enumerate() {
            openapi_schema_errors(sub, &path.child(key).index(i), ssv, false, errs);
        }
    }
    if let Some(defs) = obj_kw(s, "definitions") {
        for (k, d) in defs {
            openapi_schema_errors(d, &path.child("definitions").key(k), ssv, false, errs);
        }
    }
    match s.get("items") {
        Some(Value::Array(items)) => {
            for (i, it) in items.iter().enumerate() {
                openapi_schema_errors(it, &path.child("items").index(i), ssv, false, errs);
            }
        }
        Some(items) => openapi_schema_errors(items, &path.child("items"), ssv, false, errs),
        None => {}
    }
    if let Some(deps) = obj_kw(s, "dependencies") {
        for (k, d) in deps {
            openapi_schema_errors(d, &path.child("dependencies").key(k), ssv, false, errs);
        }
    }
    if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errs.push(FieldError::invalid(
            path.child("x-kubernetes-preserve-unknown-fields"),
            false,
            "must be true or undefined",
        ));
    }
    let ty = str_kw(s, "type");
    let map_type = s.get("x-kubernetes-map-type").and_then(Value::as_str);
    if map_type.is_some() && ty != "object" {
        if ty.is_empty() {
            errs.push(FieldError::required(path.child("type"), "must be object if x-kubernetes-map-type is specified"));
        } else {
            errs.push(FieldError::invalid(
                path.child("type"),
                ty,
                "must be object if x-kubernetes-map-type is specified",
            ));
        }
    }
    if let Some(mt) = map_type
        && mt != "atomic"
        && mt != "granular"
    {
        errs.push(FieldError::not_supported(path.child("x-kubernetes-map-type"), mt, &["atomic", "granular"]));
    }
    let list_type = s.get("x-kubernetes-list-type").and_then(Value::as_str);
    let item_schema = s.get("items").filter(|i| i.is_object());
    if list_type.is_some() && ty != "array" {
        if ty.is_empty() {
            errs.push(FieldError::required(path.child("type"), "must be array if x-kubernetes-list-type is specified"));
        } else {
            errs.push(FieldError::invalid(
                path.child("type"),
                ty,
                "must be array if x-kubernetes-list-type is specified",
            ));
        }
    } else if list_type == Some("set")
        && let Some(is) = item_schema
    {
        let item_list_type = is.get("x-kubernetes-list-type");
        match str_kw(is, "type") {
            "array" if item_list_type.and_then(Value::as_str).is_some_and(|t| t != "atomic") => {
                errs.push(FieldError::invalid(
                    path.child("items").child("x-kubernetes-list-type"),
                    opt_str_value(item_list_type),
                    "must be atomic as item of a list with x-kubernetes-list-type=set",
                ));
            }
            "object" if is.get("x-kubernetes-map-type").and_then(Value::as_str) != Some("atomic") => {
                errs.push(FieldError::invalid(
                    path.child("items").child("x-kubernetes-map-type"),
                    opt_str_value(item_list_type),
                    "must be atomic as item of a list with x-kubernetes-list-type=set",
                ));
            }
            _ => {}
        }
    }
    if let Some(lt) = list_type
        && !["atomic", "set", "map"].contains(&lt)
    {
        errs.push(FieldError::not_supported(path.child("x-kubernetes-list-type"), lt, &["atomic", "set", "map"]));
    }
    let map_keys_v = arr_kw(s, "x-kubernetes-list-map-keys");
    let map_keys: Vec<&str> = map_keys_v.iter().filter_map(Value::as_str).collect();
    if !map_keys_v.is_empty() {
        match list_type {
            None => errs.push(FieldError::required(
                path.child("x-kubernetes-list-type"),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            Some(lt) if lt != "map" => errs.push(FieldError::invalid(
                path.child("x-kubernetes-list-type"),
                lt,
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            _ => {}
        }
    }
    if list_type == Some("map") {
        if map_keys_v.is_empty() {
            errs.push(FieldError::required(
                path.child("x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match s.get("items") {
            None => errs
                .push(FieldError::required(path.child("items"), "must have a schema if x-kubernetes-list-type is map")),
            Some(Value::Array(a)) => errs.push(FieldError::invalid(
                path.child("items"),
                Value::Array(a.clone()),
                "must only have a single schema if x-kubernetes-list-type is map",
            )),
            Some(is) => {
                let it = str_kw(is, "type");
                if it != "object" {
                    errs.push(FieldError::invalid(
                        path.child("items").child("type"),
                        it,
                        "must be object if parent array's x-kubernetes-list-type is map",
                    ));
                } else {
                    let mut seen = HashSet::new();
                    let iprops = obj_kw(is, "properties");
                    for k in &map_keys {
                        match iprops.and_then(|p| p.get(*k)) {
                            Some(p) => {
                                let pt = str_kw(p, "type");
                                if pt == "array" || pt == "object" {
                                    errs.push(FieldError::invalid(
                                        path.child("items").child("properties").key(k).child("type"),
                                        it,
                                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                    ));
                                }
                            }
                            None => errs.push(FieldError::invalid(
                                path.child("x-kubernetes-list-map-keys"),
                                Value::Array(map_keys_v.to_vec()),
                                "entries must all be names of item properties",
                            )),
                        }
                        if !seen.insert(*k) {
                            errs.push(FieldError::invalid(
                                path.child("x-kubernetes-list-map-keys"),
                                Value::Array(map_keys_v.to_vec()),
                                "must not contain duplicate entries",
                            ));
                        }
                    }
                }
            }
        }
    }
    map_list_keys_map_set(s, path, errs);
    rule_text_errors(s, path, errs);
}

/// `validateMapListKeysMapSet`.
fn map_list_keys_map_set(s: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let Some(is) = s.get("items").filter(|i| i.is_object()) else { return };
    let Some(lt) = s.get("x-kubernetes-list-type").and_then(Value::as_str) else { return };
    if lt != "set" && lt != "map" {
        return;
    }
    if flag(is, "nullable") {
        errs.push(FieldError::forbidden(
            path.child("items").child("nullable"),
            format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
        ));
    }
    if lt == "map" {
        let required: Vec<&str> = arr_kw(is, "required").iter().filter_map(Value::as_str).collect();
        for k in arr_kw(s, "x-kubernetes-list-map-keys").iter().filter_map(Value::as_str) {
            let Some(p) = obj_kw(is, "properties").and_then(|p| p.get(k)) else { continue };
            let ppath = path.child("items").child("properties").key(k);
            if !required.contains(&k) && p.get("default").is_none_or(Value::is_null) {
                errs.push(FieldError::required(
                    ppath.child("default"),
                    "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                ));
            }
            if flag(p, "nullable") {
                errs.push(FieldError::forbidden(
                    ppath.child("nullable"),
                    "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                ));
            }
        }
    }
}

fn has_newlines(s: &str) -> bool {
    s.contains('\n') || s.contains('\r')
}

/// The textual checks of `x-kubernetes-validations` entries (`rule`, `message`,
/// `messageExpression`, `reason`, `fieldPath`); compiling rules is `cel::check_rules`.
fn rule_text_errors(s: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    const REASONS: [&str; 4] =
        ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"];
    for (i, rule) in arr_kw(s, "x-kubernetes-validations").iter().enumerate() {
        let rpath = path.child("x-kubernetes-validations").index(i);
        let text = str_kw(rule, "rule");
        let msg = str_kw(rule, "message");
        let trimmed_rule = text.trim();
        let trimmed_msg = msg.trim();
        if trimmed_rule.is_empty() {
            errs.push(FieldError::required(rpath.child("rule"), "rule is not specified"));
        } else if !msg.is_empty() && trimmed_msg.is_empty() {
            errs.push(FieldError::invalid(rpath.child("message"), msg, "message must be non-empty if specified"));
        } else if has_newlines(trimmed_msg) {
            errs.push(FieldError::invalid(rpath.child("message"), msg, "message must not contain line breaks"));
        } else if has_newlines(trimmed_rule) && trimmed_msg.is_empty() {
            errs.push(FieldError::required(
                rpath.child("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        let msg_expr = str_kw(rule, "messageExpression");
        if !msg_expr.is_empty() && msg_expr.trim().is_empty() {
            errs.push(FieldError::required(
                rpath.child("messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = rule.get("reason").and_then(Value::as_str)
            && !REASONS.contains(&reason)
        {
            errs.push(FieldError::not_supported(rpath.child("reason"), reason, &REASONS));
        }
        let field_path = str_kw(rule, "fieldPath");
        if !field_path.is_empty() && field_path.trim().is_empty() {
            errs.push(FieldError::invalid(
                rpath.child("fieldPath"),
                field_path,
                "fieldPath must be non-empty if specified",
            ));
        }
        if has_newlines(field_path) {
            errs.push(FieldError::invalid(
                rpath.child("fieldPath"),
                field_path,
                "fieldPath must not contain line breaks",
            ));
        }
        if !field_path.is_empty() {
            let defs = Map::new();
            if valid_field_path(field_path, SchemaRef::new(s, &defs)).is_err() {
                errs.push(FieldError::invalid(rpath.child("fieldPath"), field_path, "fieldPath must be a valid path"));
            }
        }
    }
}

/// `cel.ValidFieldPath`: a JSON path of field (`.a`) and map-key (`['k']`) accessors valid for
/// the schema. Returns the normalized field path (`a.b[k]`).
pub(crate) fn valid_field_path(json_path: &str, schema: SchemaRef) -> Result<Path, String> {
    let mut path = Path::root();
    let mut s = schema;
    let mut tokens = tokenize_field_path(json_path).into_iter();
    let append = |path: &mut Path, s: &mut SchemaRef, name: &str| -> Result<(), String> {
        if s.properties_map().is_some() {
            *path = path.child(name);
            *s = s.property(name).ok_or_else(|| "does not refer to a valid field".to_string())?;
            Ok(())
        } else if let Some(ap) = s.additional_properties() {
            *path = path.key(name);
            *s = ap;
            Ok(())
        } else {
            Err("does not refer to a valid field".into())
        }
    };
    while let Some(tok) = tokens.next() {
        match tok.as_str() {
            "[" => {
                let t = tokens.next().ok_or("unexpected end of JSON path")?;
                if t.len() < 2 || !t.starts_with('\'') || !t.ends_with('\'') {
                    return Err(format!("expected single quoted string but got {t}"));
                }
                let inner = t.get(1..t.len() - 1).unwrap_or("");
                let unescaped = unescape_single_quote(inner).map_err(|e| format!("invalid string literal: {e}"))?;
                append(&mut path, &mut s, &unescaped)?;
                let close = tokens.next().ok_or("unexpected end of JSON path")?;
                if close != "]" {
                    return Err(format!("expected ] but got {close}"));
                }
            }
            "." => {
                let t = tokens.next().ok_or("unexpected end of JSON path")?;
                append(&mut path, &mut s, &t)?;
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        }
    }
    Ok(path)
}

fn tokenize_field_path(p: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = p.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' && cur.is_empty() {
            cur.push(c);
            let mut prev = c;
            for d in chars.by_ref() {
                cur.push(d);
                if d == '\'' && prev != '\\' {
                    break;
                }
                prev = d;
            }
            out.push(std::mem::take(&mut cur));
            continue;
        }
        if matches!(c, '.' | '[' | ']') {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            out.push(c.to_string());
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn unescape_single_quote(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('a') => out.push('\u{7}'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('v') => out.push('\u{b}'),
            Some('\'') => out.push('\''),
            Some('\\') => out.push('\\'),
            Some(o) => return Err(format!("invalid escape char \\{o}")),
            None => out.push('\\'),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// ObjectMeta of embedded resources
// ---------------------------------------------------------------------------------------------

mod objectmeta {
    use crate::field::{FieldError, Path};
    use crate::names;
    use serde_json::Value;

    /// The JSON type each ObjectMeta field decodes from.
    #[derive(Clone, Copy)]
    enum Kind {
        Str,
        Int,
        StrMap,
        StrList,
        ObjList,
        Time,
    }

    const FIELDS: &[(&str, Kind, &str)] = &[
        ("name", Kind::Str, "string"),
        ("generateName", Kind::Str, "string"),
        ("namespace", Kind::Str, "string"),
        ("selfLink", Kind::Str, "string"),
        ("uid", Kind::Str, "types.UID"),
        ("resourceVersion", Kind::Str, "string"),
        ("generation", Kind::Int, "int64"),
        ("creationTimestamp", Kind::Time, "v1.Time"),
        ("deletionTimestamp", Kind::Time, "v1.Time"),
        ("deletionGracePeriodSeconds", Kind::Int, "int64"),
        ("labels", Kind::StrMap, "map[string]string"),
        ("annotations", Kind::StrMap, "map[string]string"),
        ("ownerReferences", Kind::ObjList, "[]v1.OwnerReference"),
        ("finalizers", Kind::StrList, "[]string"),
        ("managedFields", Kind::ObjList, "[]v1.ManagedFieldsEntry"),
    ];

    const OWNER_REF_FIELDS: &[&str] = &["apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"];
    const MANAGED_FIELDS: &[&str] =
        &["manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1", "subresource"];

    fn go_json_type(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    fn kind_ok(kind: Kind, v: &Value) -> bool {
        if v.is_null() {
            return true;
        }
        match kind {
            Kind::Str | Kind::Time => v.is_string(),
            Kind::Int => v.as_i64().is_some(),
            Kind::StrMap => v.as_object().is_some_and(|m| m.values().all(|x| x.is_string() || x.is_null())),
            Kind::StrList => v.as_array().is_some_and(|a| a.iter().all(|x| x.is_string() || x.is_null())),
            Kind::ObjList => v.as_array().is_some_and(|a| a.iter().all(|x| x.is_object() || x.is_null())),
        }
    }

    /// The error decoding `metadata` into `metav1.ObjectMeta` gives, if any (the text of Go's
    /// `json.Unmarshal` type errors).
    pub(super) fn decode_error(meta: &Value) -> Option<String> {
        let Some(m) = meta.as_object() else {
            if meta.is_null() {
                return None;
            }
            return Some(format!("json: cannot unmarshal {} into Go value of type v1.ObjectMeta", go_json_type(meta)));
        };
        for (name, kind, go_type) in FIELDS {
            if let Some(v) = m.get(*name)
                && !kind_ok(*kind, v)
            {
                return Some(format!(
                    "json: cannot unmarshal {} into Go struct field ObjectMeta.{name} of type {go_type}",
                    go_json_type(v)
                ));
            }
        }
        None
    }

    fn is_empty(v: &Value) -> bool {
        match v {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Number(n) => n.as_i64() == Some(0),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            Value::Bool(_) => false,
        }
    }

    /// Round-trip `metadata` through ObjectMeta: unknown fields are dropped (and reported),
    /// empty ones omitted. Left alone when it does not decode.
    pub(super) fn coerce(meta: &mut Value, path: &Path, out: &mut Vec<String>) {
        if decode_error(meta).is_some() {
            return;
        }
        let Some(m) = meta.as_object_mut() else { return };
        let keys: Vec<String> = m.keys().cloned().collect();
        for k in keys {
            if !FIELDS.iter().any(|(n, _, _)| *n == k) {
                out.push(path.child(&k).into());
                m.remove(&k);
                continue;
            }
            let drop = m.get(&k).is_some_and(is_empty);
            if drop {
                m.remove(&k);
                continue;
            }
            let allowed = match k.as_str() {
                "ownerReferences" => Some(OWNER_REF_FIELDS),
                "managedFields" => Some(MANAGED_FIELDS),
                _ => None,
            };
            if let (Some(allowed), Some(Value::Array(items))) = (allowed, m.get_mut(&k)) {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Value::Object(o) = item {
                        let unknown: Vec<String> =
                            o.keys().filter(|f| !allowed.contains(&f.as_str())).cloned().collect();
                        for f in unknown {
                            out.push(path.child(&k).index(i).child(&f).into());
                            o.remove(&f);
                        }
                    }
                }
            }
        }
    }

    /// `metavalidation.ValidateObjectMeta` as `objectmeta.Validate` applies it to embedded
    /// resources: names are checked with the path-segment rule, a namespace only when one is set,
    /// and an empty name is not reported (upstream validates a fake name instead).
    pub(super) fn validate(meta: &Value, path: &Path, errs: &mut Vec<FieldError>) {
        let Some(m) = meta.as_object() else { return };
        let namespaced = m.get("namespace").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
        let unnamed = m.get("name").and_then(Value::as_str).is_none_or(str::is_empty);
        let checked = if unnamed {
            let mut named = m.clone();
            named.insert("name".into(), Value::String("fakename".into()));
            Value::Object(named)
        } else {
            meta.clone()
        };
        errs.extend(names::validate_object_meta(&checked, namespaced, names::NameRule::PathSegment, path));
    }
}

// ---------------------------------------------------------------------------------------------
// String formats (kube-openapi strfmt default registry)
// ---------------------------------------------------------------------------------------------

mod formats {
    use std::net::IpAddr;
    use std::sync::LazyLock;

    fn re(p: &str) -> Option<regex::Regex> {
        regex::Regex::new(p).ok()
    }
    fn m(r: &LazyLock<Option<regex::Regex>>, s: &str) -> bool {
        r.as_ref().is_some_and(|r| r.is_match(s))
    }

    static HOSTNAME: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
        re(
            r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9\-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$",
        )
    });
    static UUID: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"));
    static UUID3: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$"));
    static UUID4: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"));
    static UUID5: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"));
    static SSN: LazyLock<Option<regex::Regex>> = LazyLock::new(|| re(r"^[0-9]{3}[- ]?[0-9]{2}[- ]?[0-9]{4}$"));
    static HEXCOLOR: LazyLock<Option<regex::Regex>> = LazyLock::new(|| re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
    static RGBCOLOR: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
        let c = r"(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])";
        re(&format!(r"^rgb\(\s*{c}\s*,\s*{c}\s*,\s*{c}\s*\)$"))
    });
    static BASE64: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| re(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$"));
    static DATETIME_TIME: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| re(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$"));
    static EMAIL: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| re(r#"^(?:[^<>]*<)?[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*>?$"#));

    /// Whether `s` is valid for the (normalized, `-`-less) format name.
    pub(super) fn valid(format: &str, s: &str) -> bool {
        match format {
            "bsonobjectid" => s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit()),
            "uri" => request_uri(s),
            "email" => m(&EMAIL, s),
            "hostname" => m(&HOSTNAME, s) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63),
            "ipv4" => parse_ip_sloppy(s).is_some() && s.contains('.'),
            "ipv6" => s.parse::<IpAddr>().is_ok() && s.contains(':'),
            "cidr" => cidr(s),
            "mac" => mac(s),
            "uuid" => m(&UUID, s),
            "uuid3" => m(&UUID3, s),
            "uuid4" => m(&UUID4, s),
            "uuid5" => m(&UUID5, s),
            "isbn" => isbn10(s) || isbn13(s),
            "isbn10" => isbn10(s),
            "isbn13" => isbn13(s),
            "creditcard" => credit_card(s),
            "ssn" => m(&SSN, s),
            "hexcolor" => m(&HEXCOLOR, s),
            "rgbcolor" => m(&RGBCOLOR, s),
            "byte" => m(&BASE64, s),
            "password" => true,
            "date" => date(s),
            "datetime" => date_time(s),
            "duration" => duration(s),
            _ => true,
        }
    }

    fn request_uri(s: &str) -> bool {
        if s.is_empty() || s.chars().any(|c| c.is_control() || c == ' ') {
            return false;
        }
        if s.starts_with('/') {
            return true;
        }
        let Some((scheme, _)) = s.split_once(':') else { return false };
        let mut cs = scheme.chars();
        cs.next().is_some_and(|c| c.is_ascii_alphabetic())
            && cs.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    }

    fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Some(ip);
        }
        // Leading zeros are tolerated in IPv4 octets, as `netutils.ParseIPSloppy` does.
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() != 4 {
            return None;
        }
        let mut octets = [0u8; 4];
        for (o, p) in octets.iter_mut().zip(&parts) {
            if p.is_empty() || p.len() > 3 || !p.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            *o = p.parse().ok()?;
        }
        Some(IpAddr::from(octets))
    }

    fn cidr(s: &str) -> bool {
        let Some((ip, bits)) = s.split_once('/') else { return false };
        let Some(addr) = parse_ip_sloppy(ip) else { return false };
        let max = if addr.is_ipv4() && !ip.contains(':') { 32 } else { 128 };
        !bits.is_empty() && bits.chars().all(|c| c.is_ascii_digit()) && bits.parse::<u32>().is_ok_and(|b| b <= max)
    }

    /// `net.ParseMAC`: 6, 8 or 20 octets as `xx:..`, `xx-..` or `xxxx.xxxx...`.
    fn mac(s: &str) -> bool {
        let hex = |p: &str, n: usize| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit());
        let octets_ok = |n: usize| n == 6 || n == 8 || n == 20;
        if s.contains(':') || s.contains('-') {
            let sep = if s.contains(':') { ':' } else { '-' };
            let parts: Vec<&str> = s.split(sep).collect();
            octets_ok(parts.len()) && parts.iter().all(|p| hex(p, 2))
        } else {
            let parts: Vec<&str> = s.split('.').collect();
            octets_ok(parts.len() * 2) && parts.iter().all(|p| hex(p, 4))
        }
    }

    fn isbn_digits(s: &str) -> String {
        s.chars().filter(|c| *c != '-' && *c != ' ').collect()
    }

    fn isbn10(s: &str) -> bool {
        let d: Vec<char> = isbn_digits(s).chars().collect();
        if d.len() != 10 {
            return false;
        }
        let mut sum = 0u32;
        for (i, c) in d.iter().enumerate() {
            let v = match (i, c) {
                (9, 'X') => 10,
                (_, c) => match c.to_digit(10) {
                    Some(v) => v,
                    None => return false,
                },
            };
            sum += (i as u32 + 1) * v;
        }
        sum.is_multiple_of(11)
    }

    fn isbn13(s: &str) -> bool {
        let d: Vec<u32> = isbn_digits(s).chars().filter_map(|c| c.to_digit(10)).collect();
        if d.len() != 13 || isbn_digits(s).len() != 13 {
            return false;
        }
        let sum: u32 = d.iter().take(12).enumerate().map(|(i, v)| if i % 2 == 0 { *v } else { 3 * v }).sum();
        d.get(12).is_some_and(|last| (10 - sum % 10) % 10 == *last)
    }

    fn credit_card(s: &str) -> bool {
        let digits: String = s.chars().filter(char::is_ascii_digit).collect();
        static CC: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
            re(
                r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|(222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}|27[01][0-9]|2720)[0-9]{12}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11}|6[27][0-9]{14})$",
            )
        });
        if !m(&CC, &digits) {
            return false;
        }
        let mut sum = 0u32;
        for (i, c) in digits.chars().rev().enumerate() {
            let mut v = c.to_digit(10).unwrap_or(0);
            if i % 2 == 1 {
                v *= 2;
                if v > 9 {
                    v -= 9;
                }
            }
            sum += v;
        }
        sum.is_multiple_of(10)
    }

    fn days_in_month(y: i64, mo: u32) -> u32 {
        match mo {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
            2 => 28,
            _ => 0,
        }
    }

    /// `time.Parse("2006-01-02", s)`.
    pub(crate) fn date(s: &str) -> bool {
        let b = s.as_bytes();
        if b.len() != 10 || b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
            return false;
        }
        let num = |r: std::ops::Range<usize>| {
            s.get(r).filter(|p| p.chars().all(|c| c.is_ascii_digit())).and_then(|p| p.parse::<u32>().ok())
        };
        let (Some(y), Some(mo), Some(d)) = (num(0..4), num(5..7), num(8..10)) else { return false };
        (1..=12).contains(&mo) && d >= 1 && d <= days_in_month(i64::from(y), mo)
    }

    /// `strfmt.IsDateTime`.
    pub(crate) fn date_time(s: &str) -> bool {
        if s.len() < 4 {
            return false;
        }
        let lower = s.to_lowercase();
        let parts: Vec<&str> = lower.split('t').collect();
        let (Some(d), Some(t)) = (parts.first(), parts.get(1)) else { return false };
        if parts.len() < 2 || !date(d) {
            return false;
        }
        let Some(re) = DATETIME_TIME.as_ref() else { return false };
        let Some(c) = re.captures(t) else { return false };
        let g = |i: usize| c.get(i).map(|m| m.as_str()).unwrap_or("");
        g(1) <= "23" && g(2) <= "59" && g(3) <= "59"
    }

    /// `strfmt.ParseDuration`: Go durations, or `<n> <unit>` pairs with long unit names.
    pub(crate) fn duration(s: &str) -> bool {
        go_duration_nanos(s).is_some() || loose_duration(s)
    }

    fn loose_duration(s: &str) -> bool {
        static PAIR: LazyLock<Option<regex::Regex>> = LazyLock::new(|| re(r"([0-9]+)\s*([A-Za-zµ]+)"));
        const UNITS: &[&[&str]] = &[
            &["ns", "nano"],
            &["us", "µs", "micro"],
            &["ms", "milli"],
            &["s", "sec"],
            &["m", "min"],
            &["h", "hr", "hour"],
            &["d", "day"],
            &["w", "wk", "week"],
        ];
        let Some(re) = PAIR.as_ref() else { return false };
        re.captures_iter(s).any(|c| {
            let unit = c.get(2).map(|m| m.as_str().trim().to_lowercase()).unwrap_or_default();
            c.get(1).is_some_and(|n| n.as_str().parse::<i64>().is_ok())
                && UNITS.iter().any(|variants| {
                    let last = variants.len() - 1;
                    variants
                        .iter()
                        .enumerate()
                        .any(|(i, v)| (i == last && unit.starts_with(v)) || v.eq_ignore_ascii_case(&unit))
                })
        })
    }

    /// `time.ParseDuration`, in nanoseconds.
    pub(crate) fn go_duration_nanos(s: &str) -> Option<i128> {
        let (neg, mut rest) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        if rest == "0" {
            return Some(0);
        }
        if rest.is_empty() {
            return None;
        }
        let mut total: f64 = 0.0;
        while !rest.is_empty() {
            let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
            let (n, tail) = rest.split_at(num_len);
            if n.is_empty() || n == "." {
                return None;
            }
            let value: f64 = n.parse().ok()?;
            let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
            let (unit, tail) = tail.split_at(unit_len);
            let mult = match unit {
                "ns" => 1.0,
                "us" | "µs" | "μs" => 1e3,
                "ms" => 1e6,
                "s" => 1e9,
                "m" => 60e9,
                "h" => 3600e9,
                _ => return None,
            };
            total += value * mult;
            rest = tail;
        }
        if total > 9.223_372_036_854_775e18 {
            return None;
        }
        let t = total as i128;
        Some(if neg { -t } else { t })
    }
}

pub(crate) use formats::{date, date_time};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A schema like the one `#[derive(CustomResource)]` with validation attributes produces.
    fn crd_schema() -> Value {
        json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["image", "ttl"],
                    "properties": {
                        "replicas": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 5, "default": 1},
                        "image": {"type": "string", "pattern": "^[a-z0-9./:-]+$", "maxLength": 20, "minLength": 3},
                        "ttl": {"type": "string", "format": "duration"},
                        "mode": {"type": "string", "enum": ["Fast", "Slow"]},
                        "ratio": {"type": "number", "multipleOf": 0.5, "exclusiveMaximum": true, "maximum": 10},
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}
                            }
                        },
                        "tags": {"type": "array", "maxItems": 3, "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 5}},
                        "target": {"x-kubernetes-int-or-string": true},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "template": {
                            "type": "object",
                            "x-kubernetes-embedded-resource": true,
                            "x-kubernetes-preserve-unknown-fields": true
                        },
                        "resources": {
                            "type": "object",
                            "default": {},
                            "properties": {
                                "cpu": {"type": "string", "default": "100m"},
                                "memory": {"type": "string", "nullable": true}
                            }
                        },
                        "started": {"type": "string", "format": "date-time"}
                    }
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        })
    }

    fn errors(obj: Value) -> Vec<String> {
        let schema = crd_schema();
        let defs = Map::new();
        validate(&obj, SchemaRef::new(&schema, &defs)).iter().map(ToString::to_string).collect()
    }

    fn cr(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
    }

    #[test]
    fn valid_object_has_no_errors() {
        let errs = errors(cr(json!({
            "image": "nginx:1.25", "ttl": "1h30m", "replicas": 5, "mode": "Fast", "ratio": 2.5,
            "ports": [{"name": "http", "port": 80}, {"name": "https"}], "tags": ["a", "b"],
            "labels": {"a": "b"}, "target": "50%", "extra": {"anything": [1, {"x": null}]},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
            "started": "2024-01-02T03:04:05Z"
        })));
        assert!(errs.is_empty(), "{errs:?}");
        // An integer written as 5.0 is accepted for type integer, as in Go.
        assert!(errors(cr(json!({"image": "nginx", "ttl": "5m", "replicas": 5.0}))).is_empty());
        assert!(errors(cr(json!({"image": "nginx", "ttl": "5m", "target": 3}))).is_empty());
    }

    #[test]
    fn scalar_errors_match_the_apiserver() {
        let errs = errors(cr(json!({"image": "Nginx!", "replicas": 6, "mode": "x"})));
        assert_eq!(
            errs,
            vec![
                "spec.replicas: Invalid value: 6: spec.replicas in body should be less than or equal to 5",
                "spec.image: Invalid value: \"Nginx!\": spec.image in body should match '^[a-z0-9./:-]+$'",
                "spec.mode: Unsupported value: \"x\": supported values: \"Fast\", \"Slow\"",
                "spec.ttl: Required value",
            ]
        );
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "5m", "replicas": "three"}))),
            vec!["spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""]
        );
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "5m", "replicas": 0}))),
            vec!["spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"]
        );
        assert_eq!(
            errors(cr(json!({"image": "averyveryverylongimagename", "ttl": "5m"}))),
            vec!["spec.image: Too long: may not be more than 20 bytes"]
        );
        assert_eq!(
            errors(cr(json!({"image": "ab", "ttl": "5m"}))),
            vec!["spec.image: Invalid value: \"ab\": spec.image in body should be at least 3 chars long"]
        );
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "soon"}))),
            vec!["spec.ttl: Invalid value: \"soon\": spec.ttl in body must be of type duration: \"soon\""]
        );
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "5m", "target": true}))),
            vec![
                "spec.target: Invalid value: \"boolean\": spec.target in body must be of type integer,string: \"boolean\""
            ]
        );
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "5m", "ratio": 10.25}))),
            vec![
                "spec.ratio: Invalid value: 10.25: spec.ratio in body should be a multiple of 0.5",
                "spec.ratio: Invalid value: 10.25: spec.ratio in body should be less than 10",
            ]
        );
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "5m", "started": "yesterday"}))),
            vec![
                "spec.started: Invalid value: \"yesterday\": spec.started in body must be of type date-time: \"yesterday\""
            ]
        );
        assert_eq!(
            errors(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})),
            vec!["spec: Required value"]
        );
    }

    #[test]
    fn collections_and_maps() {
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "5m", "tags": ["a", "a", "b", "c"]}))),
            vec!["spec.tags: Too many: 4: must have at most 3 items", "spec.tags[1]: Duplicate value: \"a\""]
        );
        let errs =
            errors(cr(json!({"image": "nginx", "ttl": "5m", "ports": [{"name": "a"}, {"name": "a", "port": 1}, {}]})));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!(errs.first().map(String::as_str), Some("spec.ports[2].name: Required value"));
        assert!(errs.get(1).is_some_and(|e| e.starts_with("spec.ports[1]: Duplicate value: ")), "{errs:?}");
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "5m", "labels": {"k": "toolong"}}))),
            vec!["spec.labels.k: Too long: may not be more than 5 bytes"]
        );
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "5m", "labels": "x"}))),
            vec!["spec.labels: Invalid value: \"string\": spec.labels in body must be of type object: \"string\""]
        );
    }

    #[test]
    fn embedded_resources_need_type_meta_and_valid_metadata() {
        assert_eq!(
            errors(cr(json!({"image": "nginx", "ttl": "5m", "template": {"metadata": {"name": "a/b"}}}))),
            vec![
                "spec.template.apiVersion: Required value",
                "spec.template.kind: Required value",
                "spec.template.metadata.name: Invalid value: \"a/b\": may not contain '/'",
            ]
        );
        let errs = errors(cr(json!({"image": "nginx", "ttl": "5m",
            "template": {"apiVersion": "v1", "kind": "Pod_", "metadata": {"labels": {"a": "-x"}}}})));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs.iter().any(|e| e.starts_with("spec.template.kind: Invalid value: \"Pod_\": may have mixed case, but should otherwise match: a DNS-1035 label")));
        assert!(errs.iter().any(|e| e.starts_with(
            "spec.template.metadata.labels: Invalid value: \"-x\": a valid label must be an empty string"
        )));
    }

    #[test]
    fn composite_errors_are_reported_at_nil() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}}});
        let defs = Map::new();
        let errs: Vec<String> =
            validate(&json!({"spec": {}}), SchemaRef::new(&schema, &defs)).iter().map(ToString::to_string).collect();
        assert_eq!(
            errs,
            vec![
                "<nil>: Invalid value: \"\": \"spec\" must validate one and only one schema (oneOf). Found none valid",
                "spec.a: Required value",
            ]
        );
    }

    #[test]
    fn ratcheting_ignores_unchanged_invalid_fields() {
        let schema = crd_schema();
        let defs = Map::new();
        let s = SchemaRef::new(&schema, &defs);
        let old = cr(json!({"image": "Bad!", "ttl": "5m"}));
        let new = cr(json!({"image": "Bad!", "ttl": "10m"}));
        assert!(validate_update(&new, &old, s).is_empty());
        let changed = cr(json!({"image": "Worse!", "ttl": "10m"}));
        assert_eq!(validate_update(&changed, &old, s).len(), 1);
    }

    #[test]
    fn prune_reports_paths_like_the_server() {
        let schema = crd_schema();
        let defs = Map::new();
        let mut obj = json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "whatever": 1},
            "spec": {"image": "x", "bogus": 1, "ports": [{"name": "a", "extra": true}],
                     "extra": {"kept": {"deep": 1}}, "replicas": null, "resources": {"memory": null},
                     "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1, "labels": {}},
                                  "spec": {"containers": []}}},
            "status": {"ready": true, "phase": "x"},
            "top": 1
        });
        let pruned = prune(&mut obj, SchemaRef::new(&schema, &defs));
        assert_eq!(
            pruned,
            vec!["spec.bogus", "spec.ports[0].extra", "status.phase", "top", "spec.template.metadata.junk"]
        );
        assert_eq!(
            obj,
            json!({
                "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "whatever": 1},
                "spec": {"image": "x", "ports": [{"name": "a"}], "extra": {"kept": {"deep": 1}},
                         "replicas": null, "resources": {"memory": null},
                         "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                      "spec": {"containers": []}}},
                "status": {"ready": true}
            })
        );
    }

    #[test]
    fn prune_drops_non_nullable_nulls_without_defaults() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "string", "nullable": true}, "c": {"type": "string", "default": "x"}}}}});
        let defs = Map::new();
        let mut obj = json!({"spec": {"a": null, "b": null, "c": null}});
        assert!(prune(&mut obj, SchemaRef::new(&schema, &defs)).is_empty());
        assert_eq!(obj, json!({"spec": {"b": null, "c": null}}));
        apply_defaults(&mut obj, SchemaRef::new(&schema, &defs));
        assert_eq!(obj, json!({"spec": {"b": null, "c": "x"}}));
    }

    #[test]
    fn defaults_apply_to_absent_fields_and_nest() {
        let schema = crd_schema();
        let defs = Map::new();
        let mut obj = cr(json!({"image": "x", "ttl": "1m"}));
        apply_defaults(&mut obj, SchemaRef::new(&schema, &defs));
        assert_eq!(obj.pointer("/spec/replicas"), Some(&json!(1)));
        assert_eq!(obj.pointer("/spec/resources"), Some(&json!({"cpu": "100m"})));
        let mut obj = cr(json!({"image": "x", "ttl": "1m", "replicas": 3, "resources": {"cpu": "1"}}));
        apply_defaults(&mut obj, SchemaRef::new(&schema, &defs));
        assert_eq!(obj.pointer("/spec/replicas"), Some(&json!(3)));
        assert_eq!(obj.pointer("/spec/resources"), Some(&json!({"cpu": "1"})));
    }

    fn schema_errors(schema: Value) -> Vec<String> {
        let base = Path::new("spec").child("versions").index(0).child("schema").child("openAPIV3Schema");
        validate_schema(&schema, &base).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_derive_schema_is_acceptable() {
        assert_eq!(schema_errors(crd_schema()), Vec::<String>::new());
    }

    #[test]
    fn schema_errors_match_the_crd_validation() {
        let p = "spec.versions[0].schema.openAPIV3Schema";
        assert_eq!(
            schema_errors(json!({"type": "object", "properties": {"spec": {"type": "object",
                "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}}})),
            vec![format!(
                "{p}.properties[spec].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
            )]
        );
        assert_eq!(
            schema_errors(json!({"type": "object", "properties": {"spec": {"properties": {"x": {}}}}})),
            vec![
                format!(
                    "{p}.properties[spec].properties[x].type: Required value: must not be empty for specified object fields"
                ),
                format!("{p}.properties[spec].type: Required value: must not be empty for specified object fields"),
            ]
        );
        assert_eq!(
            schema_errors(json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "default": "two"}}}}})),
            vec![format!(
                "{p}.properties[spec].properties[replicas].default: Invalid value: \"string\":  in body must be of type integer: \"string\""
            )]
        );
        assert_eq!(
            schema_errors(json!({"type": "object", "properties": {"spec": {"type": "object", "default": {"bogus": 1},
                "properties": {"a": {"type": "string"}}}}})),
            vec![format!(
                "{p}.properties[spec].default: Invalid value: map[string]interface {{}}{{...}}: must not have unknown fields"
            )]
        );
        assert_eq!(
            schema_errors(json!({"type": "object", "properties": {"metadata": {"type": "object",
                "properties": {"name": {"type": "string"}, "labels": {"type": "object"}}}}})),
            vec![format!(
                "{p}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
            )]
        );
        assert_eq!(
            schema_errors(
                json!({"type": "object", "properties": {"list": {"type": "array", "x-kubernetes-list-type": "map",
                "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}})
            ),
            vec![format!(
                "{p}.properties[list].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
            )]
        );
        assert_eq!(
            schema_errors(json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "(a"},
                "u": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}}})),
            vec![
                format!(
                    "{p}.properties[s].pattern: Invalid value: \"(a\": must be a valid regular expression, but isn't: error parsing regexp: missing closing ): `(a`"
                ),
                format!(
                    "{p}.properties[u].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
                ),
            ]
        );
        assert_eq!(
            schema_errors(json!({"type": "object", "properties": {"spec": {"type": "object",
                "x-kubernetes-validations": [{"rule": " "}, {"rule": "self.a", "reason": "Nope"}]}}})),
            vec![
                format!("{p}.properties[spec].x-kubernetes-validations[0].rule: Required value: rule is not specified"),
                format!(
                    "{p}.properties[spec].x-kubernetes-validations[1].reason: Unsupported value: \"Nope\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
                ),
            ]
        );
    }

    #[test]
    fn go_number_formatting() {
        assert_eq!(go_float(5.0), "5");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-2.5e-7), "-2.5e-07");
        assert_eq!(go_json(&json!({"b": 1.5, "a": [1e21, 0.000001]})), "{\"a\":[1e+21,0.000001],\"b\":1.5}");
    }

    #[test]
    fn go_regex_semantics() {
        let re = go_regex(r"^\d+$").ok();
        assert!(re.as_ref().is_some_and(|r| r.is_match("123")));
        assert!(re.as_ref().is_some_and(|r| !r.is_match("١٢٣")));
        assert!(go_regex(r"^[\w.-]+\b$").is_ok());
        assert!(go_regex("a{2,1}").is_err());
    }

    #[test]
    fn field_paths_of_rules() {
        let schema = crd_schema();
        let defs = Map::new();
        let s = SchemaRef::new(&schema, &defs);
        assert_eq!(valid_field_path(".spec.image", s).map(String::from), Ok("spec.image".to_string()));
        assert_eq!(valid_field_path(".spec.labels['a.b']", s).map(String::from), Ok("spec.labels[a.b]".to_string()));
        assert!(valid_field_path(".spec.nope", s).is_err());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)),
            "[a-zA-Z0-9 ._/-]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            let keys = prop_oneof![
                Just("spec".to_string()),
                Just("image".to_string()),
                Just("replicas".to_string()),
                Just("ports".to_string()),
                Just("name".to_string()),
                Just("template".to_string()),
                Just("metadata".to_string()),
                Just("labels".to_string()),
                Just("tags".to_string()),
                "[a-z]{1,4}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((keys, inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn validate_prune_default_never_panic(spec in arb_json(), other in arb_json()) {
            let schema = crd_schema();
            let defs = Map::new();
            let s = SchemaRef::new(&schema, &defs);
            let mut obj = json!({"apiVersion": "a/v1", "kind": "K", "spec": spec, "status": other.clone()});
            let _ = validate(&obj, s);
            let _ = validate_update(&obj, &other, s);
            let _ = prune(&mut obj, s);
            apply_defaults(&mut obj, s);
            let _ = validate(&obj, s);
        }

        #[test]
        fn validate_schema_never_panics(schema in arb_json()) {
            let _ = validate_schema(&schema, &Path::new("x"));
            let wrapped = json!({"type": "object", "properties": {"spec": schema}});
            let _ = validate_schema(&wrapped, &Path::new("x"));
        }
    }
}
