//! Name and metadata validation, mirroring k8s.io/apimachinery:
//! `pkg/util/validation/validation.go` (the `Is*` string checks and their exact messages),
//! `pkg/api/validation/path/name.go` (path-segment names), `pkg/api/validation/generic.go`
//! (name functions, `maskTrailingDash`), `pkg/api/validation/objectmeta.go`
//! (`ValidateObjectMeta`, `ValidateObjectMetaUpdate`) and `pkg/apis/meta/v1/validation`
//! (labels, label selectors, managed fields).
//!
//! The checks work on the decoded JSON (`serde_json::Value`). Messages are those of
//! Kubernetes 1.33 (before the 1.34 move to `api/validate/content`, which renamed
//! "a qualified name" to "a valid label key" in one message). Where Go iterates a map (labels,
//! annotations) the order of errors is random upstream; here it follows the object's key order.

use crate::field::{FieldError, Path};
use serde_json::Value;

/// How the `metadata.name` of a kind is validated (upstream: the `ValidateNameFunc` a kind's
/// validation passes to `ValidateObjectMeta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain`: most kinds (Pod, ConfigMap, Deployment, ...).
    Dns1123Subdomain,
    /// `NameIsDNSLabel`: Namespace.
    Dns1123Label,
    /// `NameIsDNS1035Label`: Service.
    Dns1035Label,
    /// `path.ValidatePathSegmentName`: RBAC kinds and a few others (no `/`, `%`, `.`, `..`).
    PathSegment,
}

// ---------------------------------------------------------------------------------------------
// Message helpers (validation.go)
// ---------------------------------------------------------------------------------------------

/// `MaxLenError`: `must be no more than N characters`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `EmptyError`: `must be non-empty`.
pub fn empty_error() -> String {
    "must be non-empty".to_string()
}

/// `InclusiveRangeError`: `must be between LO and HI, inclusive`.
pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

/// `RegexError`: the message, the examples and the regex used for validation.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, ex) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(ex);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

// ---------------------------------------------------------------------------------------------
// Character-class matchers equivalent to the upstream regular expressions (anchored).
// ---------------------------------------------------------------------------------------------

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            is_lower_alnum(f) && is_lower_alnum(l) && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// `^label(\.label)*$`
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// `^[a-z]([-a-z0-9]*[a-z0-9])?$`
fn matches_dns1035_label(s: &str) -> bool {
    matches_dns1123_label(s) && s.as_bytes().first().is_some_and(|b| b.is_ascii_lowercase())
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR_MSG: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Max length of a DNS-1123 label, a DNS-1035 label, a qualified name's name part and a
/// label value.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Max length of a DNS-1123 subdomain (and of a ConfigMap key).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;

/// `IsDNS1123Label`.
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(DNS1123_LABEL_ERR_MSG, DNS1123_LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_ERR_MSG, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `IsDNS1035Label`.
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1035_label(value) {
        errs.push(regex_error(DNS1035_LABEL_ERR_MSG, DNS1035_LABEL_FMT, &["my-name", "abc-123"]));
    }
    errs
}

/// `IsWildcardDNS1123Subdomain`: `*.` followed by a DNS subdomain.
pub fn is_wildcard_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let ok = value.strip_prefix("*.").is_some_and(matches_dns1123_subdomain);
    if !ok {
        errs.push(regex_error(
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character",
            &format!("\\*\\.{DNS1123_SUBDOMAIN_FMT}"),
            &["*.example.com"],
        ));
    }
    errs
}

fn prefix_each(msgs: Vec<String>, prefix: &str) -> Vec<String> {
    msgs.into_iter().map(|m| format!("{prefix}{m}")).collect()
}

/// `IsQualifiedName`: label keys, annotation keys (lower-cased first), finalizers, condition
/// types: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                let msgs = is_dns1123_subdomain(prefix);
                if !msgs.is_empty() {
                    errs.extend(prefix_each(msgs, "prefix part "));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(format!("name part {}", max_len_error(DNS1123_LABEL_MAX_LENGTH)));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `IsValidLabelValue`: empty, or a qualified-name-like string of at most 63 characters.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !(value.is_empty() || matches_qualified_name_part(value)) {
        errs.push(regex_error(LABEL_VALUE_ERR_MSG, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errs
}

/// `path.IsValidPathSegmentName`: not `.` or `..`, no `/` or `%`.
pub fn is_valid_path_segment_name(name: &str) -> Vec<String> {
    for illegal in [".", ".."] {
        if name == illegal {
            return vec![format!("may not be '{illegal}'")];
        }
    }
    is_valid_path_segment_prefix(name)
}

/// `path.IsValidPathSegmentPrefix`: no `/` or `%` (used for `generateName`).
pub fn is_valid_path_segment_prefix(name: &str) -> Vec<String> {
    ["/", "%"]
        .iter()
        .filter(|illegal| name.contains(**illegal))
        .map(|illegal| format!("may not contain '{illegal}'"))
        .collect()
}

/// `IsCIdentifier`: `[A-Za-z_][A-Za-z0-9_]*`.
#[cfg(test)]
pub fn is_c_identifier(value: &str) -> Vec<String> {
    let b = value.as_bytes();
    let ok = b.first().is_some_and(|f| f.is_ascii_alphabetic() || *f == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
    if ok {
        Vec::new()
    } else {
        vec![regex_error(
            "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_'",
            "[A-Za-z_][A-Za-z0-9_]*",
            &["my_name", "MY_NAME", "MyName"],
        )]
    }
}

fn has_ch_dir_prefix(value: &str) -> Vec<String> {
    if value == "." {
        vec!["must not be '.'".to_string()]
    } else if value == ".." {
        vec!["must not be '..'".to_string()]
    } else if value.starts_with("..") {
        vec!["must not start with '..'".to_string()]
    } else {
        Vec::new()
    }
}

/// `IsEnvVarName` (the strict rule, used when the `RelaxedEnvironmentVariableValidation`
/// feature is off): `[-._a-zA-Z][-._a-zA-Z0-9]*`, and not `.`, `..` or `..*`.
#[cfg(test)]
pub fn is_env_var_name(value: &str) -> Vec<String> {
    let b = value.as_bytes();
    let ok = b.first().is_some_and(|f| f.is_ascii_alphabetic() || matches!(f, b'-' | b'.' | b'_'))
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    let mut errs = Vec::new();
    if !ok {
        errs.push(regex_error(
            "a valid environment variable name must consist of alphabetic characters, digits, '_', '-',  or '.', and must not start with a digit",
            "[-._a-zA-Z][-._a-zA-Z0-9]*",
            &["my.env-name", "MY_ENV.NAME", "MyEnvName1"],
        ));
    }
    errs.extend(has_ch_dir_prefix(value));
    errs
}

/// `IsRelaxedEnvVarName`: printable ASCII other than `=`. This is the rule Kubernetes 1.33
/// applies to container env names (`RelaxedEnvironmentVariableValidation` is beta, on).
pub fn is_relaxed_env_var_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.is_empty() {
        errs.push(format!("environment variable name {}", empty_error()));
    }
    if value.chars().any(|c| !c.is_ascii() || c.is_ascii_control() || c == '=') {
        errs.push(
            "a valid environment variable name must consist only of printable ASCII characters other than '='"
                .to_string(),
        );
    }
    errs
}

/// `IsConfigMapKey`: keys of ConfigMap `data`/`binaryData` and Secret `data`/`stringData`.
pub fn is_config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let ok = !value.is_empty() && value.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    if !ok {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    errs.extend(has_ch_dir_prefix(value));
    errs
}

/// `IsValidPortNum`: 1..=65535.
pub fn is_valid_port_num(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) { Vec::new() } else { vec![inclusive_range_error(1, 65535)] }
}

/// `IsValidPortName` (IANA_SVC_NAME): at most 15 characters of `[-a-z0-9]`, at least one
/// letter, no `--`, no leading or trailing `-`.
pub fn is_valid_port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push(max_len_error(15));
    }
    if port.is_empty() || !port.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string());
    }
    if !port.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// `IsValidPercent`: `[0-9]+%`.
pub fn is_valid_percent(percent: &str) -> Vec<String> {
    let ok = percent
        .strip_suffix('%')
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()));
    if ok {
        Vec::new()
    } else {
        vec![regex_error(
            "a valid percent string must be a numeric string followed by an ending '%'",
            "[0-9]+%",
            &["1%", "93%"],
        )]
    }
}

// ---------------------------------------------------------------------------------------------
// Name functions (generic.go)
// ---------------------------------------------------------------------------------------------

/// `maskTrailingDash`: a generateName may end with `-`. Upstream replaces the last *two*
/// characters with `a` (`name[:len(name)-2] + "a"`); a one-character `-` (which panics
/// upstream) is masked to `a` here.
fn mask_trailing_dash(name: &str) -> String {
    if name.ends_with('-') {
        let keep = name.len().saturating_sub(2);
        match name.get(..keep) {
            Some(head) => format!("{head}a"),
            None => "a".to_string(),
        }
    } else {
        name.to_string()
    }
}

/// Validate a name (or, with `prefix`, a `generateName`) by the kind's rule; returns the
/// messages of `field.Invalid` errors.
pub fn validate_name(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    match rule {
        NameRule::PathSegment => {
            if prefix {
                is_valid_path_segment_prefix(name)
            } else {
                is_valid_path_segment_name(name)
            }
        }
        _ => {
            let name = if prefix { mask_trailing_dash(name) } else { name.to_string() };
            match rule {
                NameRule::Dns1123Label => is_dns1123_label(&name),
                NameRule::Dns1035Label => is_dns1035_label(&name),
                _ => is_dns1123_subdomain(&name),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Field-level validators
// ---------------------------------------------------------------------------------------------

/// `FieldImmutableErrorMsg`.
pub const FIELD_IMMUTABLE_ERROR_MSG: &str = "field is immutable";
/// `IsNegativeErrorMsg`.
pub const IS_NEGATIVE_ERROR_MSG: &str = "must be greater than or equal to 0";
/// `TotalAnnotationSizeLimitB`: 256 KiB.
pub const TOTAL_ANNOTATION_SIZE_LIMIT_B: usize = 256 * 1024;

/// `ValidateImmutableField`: `Invalid value: <new>: field is immutable` when new != old. An
/// absent field is compared as `null`.
pub fn validate_immutable_field(new: Option<&Value>, old: Option<&Value>, path: &Path) -> Vec<FieldError> {
    let new_v = new.filter(|v| !v.is_null());
    let old_v = old.filter(|v| !v.is_null());
    if new_v == old_v {
        Vec::new()
    } else {
        vec![FieldError::invalid(path, new_v.cloned().unwrap_or(Value::Null), FIELD_IMMUTABLE_ERROR_MSG)]
    }
}

/// `ValidateNonnegativeField`.
pub fn validate_nonnegative_field(value: i64, path: &Path) -> Vec<FieldError> {
    if value < 0 { vec![FieldError::invalid(path, value, IS_NEGATIVE_ERROR_MSG)] } else { Vec::new() }
}

/// `ValidateLabelName`: a qualified name.
pub fn validate_label_name(name: &str, path: &Path) -> Vec<FieldError> {
    is_qualified_name(name).into_iter().map(|m| FieldError::invalid(path, name, m)).collect()
}

/// `ValidateLabels`: keys are qualified names, values label values. Errors are reported at the
/// map's path (`metadata.labels`), not per key, as upstream.
pub fn validate_labels(labels: Option<&Value>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(map) = labels.and_then(Value::as_object) else { return errs };
    for (k, v) in map {
        errs.extend(validate_label_name(k, path));
        let value = v.as_str().unwrap_or_default();
        for m in is_valid_label_value(value) {
            errs.push(FieldError::invalid(path, value, m));
        }
    }
    errs
}

/// `ValidateAnnotations`: keys are qualified names once lower-cased; keys plus values at most
/// 256 KiB in total (`Too long: may not be more than 262144 bytes`).
pub fn validate_annotations(annotations: Option<&Value>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(map) = annotations.and_then(Value::as_object) else { return errs };
    let mut total = 0usize;
    for (k, v) in map {
        for m in is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, k.as_str(), m));
        }
        total = total.saturating_add(k.len()).saturating_add(v.as_str().map_or(0, str::len));
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT_B));
    }
    errs
}

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// `ValidateOwnerReferences`: apiVersion has a version, kind/name/uid non-empty, Event may not
/// own, at most one controller reference. Errors are at `metadata.ownerReferences.<field>`
/// (upstream does not index them).
pub fn validate_owner_references(refs: Option<&Value>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(list) = refs.and_then(Value::as_array) else { return errs };
    let mut first_controller: Option<String> = None;
    for r in list {
        let api_version = str_field(r, "apiVersion");
        let kind = str_field(r, "kind");
        // schema.FromAPIVersionAndKind: "group/version" or "version".
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        if version.is_empty() {
            errs.push(FieldError::invalid(path.child("apiVersion"), api_version, "version must not be empty"));
        }
        if kind.is_empty() {
            errs.push(FieldError::invalid(path.child("kind"), kind, "must not be empty"));
        }
        let name = str_field(r, "name");
        if name.is_empty() {
            errs.push(FieldError::invalid(path.child("name"), name, "must not be empty"));
        }
        let uid = str_field(r, "uid");
        if uid.is_empty() {
            errs.push(FieldError::invalid(path.child("uid"), uid, "must not be empty"));
        }
        if group.is_empty() && version == "v1" && kind == "Event" {
            errs.push(FieldError::invalid(path, r.clone(), "/v1, Kind=Event is disallowed from being an owner"));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{kind}/{name}");
            match &first_controller {
                Some(first) => errs.push(FieldError::invalid(
                    path,
                    Value::Array(list.clone()),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
    errs
}

/// `ValidateFinalizers`: each a qualified name; `orphan` and `foregroundDeletion` exclusive.
pub fn validate_finalizers(finalizers: Option<&Value>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(list) = finalizers.and_then(Value::as_array) else { return errs };
    let names: Vec<&str> = list.iter().map(|f| f.as_str().unwrap_or_default()).collect();
    for f in &names {
        for m in is_qualified_name(f) {
            errs.push(FieldError::invalid(path, *f, m));
        }
    }
    if names.contains(&"orphan") && names.contains(&"foregroundDeletion") {
        errs.push(FieldError::invalid(
            path,
            Value::Array(list.clone()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    errs
}

/// `ValidateManagedFields`: operation `Apply`/`Update`, fieldsType `FieldsV1`, printable
/// manager of at most 128 characters, subresource at most 256.
pub fn validate_managed_fields(entries: Option<&Value>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(list) = entries.and_then(Value::as_array) else { return errs };
    for (i, e) in list.iter().enumerate() {
        let p = path.index(i);
        let op = str_field(e, "operation");
        if op != "Apply" && op != "Update" {
            errs.push(FieldError::invalid(p.child("operation"), op, "must be `Apply` or `Update`"));
        }
        let ft = str_field(e, "fieldsType");
        if !ft.is_empty() && ft != "FieldsV1" {
            errs.push(FieldError::invalid(p.child("fieldsType"), ft, "must be `FieldsV1`"));
        }
        let manager = str_field(e, "manager");
        if manager.chars().count() > 128 {
            errs.push(FieldError::too_long(p.child("manager"), 128));
        }
        for (pos, c) in manager.char_indices() {
            if c.is_control() {
                errs.push(FieldError::invalid(
                    p.child("manager"),
                    manager,
                    format!("invalid character U+{:04X} (at position {pos})", c as u32),
                ));
            }
        }
        if str_field(e, "subresource").len() > 256 {
            errs.push(FieldError::too_long(p.child("subresource"), 256));
        }
    }
    errs
}

/// `ValidateLabelSelector` (meta/v1 validation): matchLabels as labels, each expression's
/// operator, values and key.
pub fn validate_label_selector(selector: Option<&Value>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(sel) = selector.filter(|s| s.is_object()) else { return errs };
    errs.extend(validate_labels(sel.get("matchLabels"), &path.child("matchLabels")));
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for (i, e) in exprs.iter().enumerate() {
            let p = path.child("matchExpressions").index(i);
            let op = str_field(e, "operator");
            let nvalues = e.get("values").and_then(Value::as_array).map_or(0, Vec::len);
            match op {
                "In" | "NotIn" => {
                    if nvalues == 0 {
                        errs.push(FieldError::required(
                            p.child("values"),
                            "must be specified when `operator` is 'In' or 'NotIn'",
                        ));
                    }
                }
                "Exists" | "DoesNotExist" => {
                    if nvalues > 0 {
                        errs.push(FieldError::forbidden(
                            p.child("values"),
                            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                        ));
                    }
                }
                _ => errs.push(FieldError::invalid(p.child("operator"), op, "not a valid selector operator")),
            }
            errs.extend(validate_label_name(str_field(e, "key"), &p.child("key")));
        }
    }
    errs
}

fn int_field(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or(0)
}

/// `ValidateObjectMeta` (with the kind's name rule) for a create: name or generateName, the
/// name's format, namespace required (namespaced kinds, a DNS label) or forbidden (cluster
/// kinds), generation >= 0, labels, annotations, ownerReferences, finalizers, managedFields.
///
/// Upstream runs this after the name was generated from `generateName`. So that the order of
/// the two steps cannot matter here, an empty `name` with a non-empty `generateName` is not
/// reported as missing (the generated name is validated when it exists).
pub fn validate_object_meta(meta: &Value, namespaced: bool, name_rule: NameRule, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let generate_name = str_field(meta, "generateName");
    let name = str_field(meta, "name");
    if !generate_name.is_empty() {
        for m in validate_name(name_rule, generate_name, true) {
            errs.push(FieldError::invalid(path.child("generateName"), generate_name, m));
        }
    }
    if name.is_empty() {
        if generate_name.is_empty() {
            errs.push(FieldError::required(path.child("name"), "name or generateName is required"));
        }
    } else {
        for m in validate_name(name_rule, name, false) {
            errs.push(FieldError::invalid(path.child("name"), name, m));
        }
    }
    errs.extend(validate_object_meta_common(meta, namespaced, path));
    errs
}

fn validate_object_meta_common(meta: &Value, namespaced: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let namespace = str_field(meta, "namespace");
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required(path.child("namespace"), ""));
        } else {
            for m in validate_name(NameRule::Dns1123Label, namespace, false) {
                errs.push(FieldError::invalid(path.child("namespace"), namespace, m));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(path.child("namespace"), "not allowed on this type"));
    }
    errs.extend(validate_nonnegative_field(int_field(meta, "generation"), &path.child("generation")));
    errs.extend(validate_labels(meta.get("labels"), &path.child("labels")));
    errs.extend(validate_annotations(meta.get("annotations"), &path.child("annotations")));
    errs.extend(validate_owner_references(meta.get("ownerReferences"), &path.child("ownerReferences")));
    errs.extend(validate_finalizers(meta.get("finalizers"), &path.child("finalizers")));
    errs.extend(validate_managed_fields(meta.get("managedFields"), &path.child("managedFields")));
    errs
}

/// `ValidateObjectMetaUpdate`: no new finalizers once deletion started, resourceVersion given,
/// generation not decremented, name/namespace/uid/creationTimestamp/deletionTimestamp/
/// deletionGracePeriodSeconds immutable, then labels, annotations, ownerReferences and
/// managedFields of the new object.
///
/// The integrator usually copies uid/creationTimestamp from the stored object before
/// validating (as the real server's `BeforeUpdate` does); then those checks pass trivially.
pub fn validate_object_meta_update(new: &Value, old: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if old.get("deletionTimestamp").is_some_and(|v| !v.is_null()) {
        let old_f: Vec<&str> = old
            .get("finalizers")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut extra: Vec<&str> = new
            .get("finalizers")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).filter(|f| !old_f.contains(f)).collect())
            .unwrap_or_default();
        extra.sort_unstable();
        extra.dedup();
        if !extra.is_empty() {
            let quoted: Vec<String> = extra.iter().map(|f| crate::field::go_quote(f)).collect();
            errs.push(FieldError::forbidden(
                path.child("finalizers"),
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    quoted.join(", ")
                ),
            ));
        }
    }
    let rv = str_field(new, "resourceVersion");
    if rv.is_empty() {
        errs.push(FieldError::invalid(path.child("resourceVersion"), rv, "must be specified for an update"));
    }
    let new_gen = int_field(new, "generation");
    if new_gen < int_field(old, "generation") {
        errs.push(FieldError::invalid(path.child("generation"), new_gen, "must not be decremented"));
    }
    for f in ["name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        let (n, o) = (new.get(f), old.get(f));
        // Go compares the typed values: an empty string and an absent string are equal.
        let empty = |v: Option<&Value>| v.is_none_or(|v| v.is_null() || v.as_str() == Some(""));
        if empty(n) && empty(o) {
            continue;
        }
        if f == "name" || f == "namespace" || f == "uid" {
            let (ns, os) = (n.and_then(Value::as_str).unwrap_or(""), o.and_then(Value::as_str).unwrap_or(""));
            if ns != os {
                errs.push(FieldError::invalid(path.child(f), ns, FIELD_IMMUTABLE_ERROR_MSG));
            }
            continue;
        }
        errs.extend(validate_immutable_field(n, o, &path.child(f)));
    }
    errs.extend(validate_labels(new.get("labels"), &path.child("labels")));
    errs.extend(validate_annotations(new.get("annotations"), &path.child("annotations")));
    errs.extend(validate_owner_references(new.get("ownerReferences"), &path.child("ownerReferences")));
    errs.extend(validate_managed_fields(new.get("managedFields"), &path.child("managedFields")));
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn msgs(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn dns_names_and_their_messages() {
        assert!(is_dns1123_subdomain("example.com").is_empty());
        assert_eq!(
            is_dns1123_subdomain("Bad_Name"),
            vec![
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert_eq!(is_dns1123_subdomain(&"a".repeat(254))[0], "must be no more than 253 characters");
        assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(
            is_dns1123_label("-a"),
            vec![
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert!(is_dns1035_label("abc-1").is_empty());
        assert_eq!(
            is_dns1035_label("1abc"),
            vec![
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert!(is_dns1123_subdomain("").len() == 1);
        assert!(is_dns1123_subdomain("a..b").len() == 1);
    }

    #[test]
    fn qualified_names_and_label_values() {
        assert!(is_qualified_name("app.kubernetes.io/name").is_empty());
        assert!(is_qualified_name("MyName").is_empty());
        assert_eq!(is_qualified_name("/a"), vec!["prefix part must be non-empty"]);
        assert_eq!(
            is_qualified_name("a/b/c"),
            vec![
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ]
        );
        let e = is_qualified_name("Foo.com/");
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].starts_with("prefix part a lowercase RFC 1123 subdomain"));
        assert_eq!(e[1], "name part must be non-empty");
        assert!(e[2].starts_with("name part must consist of alphanumeric characters"));
        assert_eq!(is_qualified_name(&"a".repeat(64))[0], "name part must be no more than 63 characters");
        assert!(is_valid_label_value("").is_empty());
        assert!(is_valid_label_value("v1.2_3").is_empty());
        assert_eq!(
            is_valid_label_value("-x"),
            vec![
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ]
        );
    }

    #[test]
    fn path_segments_and_misc() {
        assert_eq!(is_valid_path_segment_name(".."), vec!["may not be '..'"]);
        assert_eq!(is_valid_path_segment_name("a/b%"), vec!["may not contain '/'", "may not contain '%'"]);
        assert!(is_valid_path_segment_name("system:controller:foo").is_empty());
        assert!(is_c_identifier("_a1").is_empty());
        assert_eq!(is_c_identifier("1a").len(), 1);
        assert_eq!(is_config_map_key("..a"), vec!["must not start with '..'"]);
        assert_eq!(is_config_map_key("a b").len(), 1);
        assert!(is_valid_port_name("http").is_empty());
        assert_eq!(
            is_valid_port_name("-80-"),
            vec!["must contain at least one letter (a-z)", "must not begin or end with a hyphen"]
        );
        assert_eq!(is_valid_port_num(0), vec!["must be between 1 and 65535, inclusive"]);
        assert!(is_relaxed_env_var_name("1FOO").is_empty());
        assert_eq!(is_relaxed_env_var_name("A=B").len(), 1);
        assert_eq!(is_env_var_name("1FOO").len(), 1);
        assert!(is_valid_percent("25%").is_empty());
        assert_eq!(mask_trailing_dash("abc-"), "aba");
        assert_eq!(mask_trailing_dash("-"), "a");
        assert!(validate_name(NameRule::Dns1123Subdomain, "web-", true).is_empty());
    }

    #[test]
    fn object_meta_on_create() {
        let p = Path::new("metadata");
        let errs = validate_object_meta(&json!({}), true, NameRule::Dns1123Subdomain, &p);
        assert_eq!(
            msgs(&errs),
            vec![
                "metadata.name: Required value: name or generateName is required",
                "metadata.namespace: Required value"
            ]
        );
        let errs = validate_object_meta(&json!({"name": "x", "namespace": "d"}), false, NameRule::Dns1123Label, &p);
        assert_eq!(msgs(&errs), vec!["metadata.namespace: Forbidden: not allowed on this type"]);
        let meta = json!({
            "name": "Web", "namespace": "default",
            "labels": {"app": "-bad"},
            "annotations": {"Example.com/Key": "ok", "a/b/c": "x"},
            "finalizers": ["orphan", "foregroundDeletion"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true},
                                {"apiVersion": "", "kind": "Event", "name": "", "uid": "u2", "controller": true}]
        });
        let errs = validate_object_meta(&meta, true, NameRule::Dns1123Subdomain, &p);
        let m = msgs(&errs);
        assert!(m[0].starts_with("metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 subdomain"), "{m:?}");
        assert!(m.iter().any(|e| e.starts_with("metadata.labels: Invalid value: \"-bad\": a valid label")));
        assert!(m.iter().any(|e| e.starts_with("metadata.annotations: Invalid value: \"a/b/c\": a qualified name")));
        assert!(!m.iter().any(|e| e.contains("Example.com")));
        assert!(m.contains(
            &"metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty".to_string()
        ));
        assert!(m.contains(&"metadata.ownerReferences.name: Invalid value: \"\": must not be empty".to_string()));
        assert!(m.iter().any(|e| e.contains("Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/r and Event/")));
        assert!(m.iter().any(|e| e.ends_with("finalizer orphan and foregroundDeletion cannot be both set")));
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B);
        let errs = validate_object_meta(
            &json!({"name": "a", "annotations": {"k": big}}),
            false,
            NameRule::Dns1123Subdomain,
            &p,
        );
        assert_eq!(msgs(&errs), vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]);
        // generateName alone is fine (name is generated later); a bad one is reported.
        assert!(
            validate_object_meta(&json!({"generateName": "web-"}), false, NameRule::Dns1123Subdomain, &p).is_empty()
        );
        let errs = validate_object_meta(&json!({"generateName": "Web-"}), false, NameRule::Dns1123Subdomain, &p);
        assert!(msgs(&errs)[0].starts_with("metadata.generateName: Invalid value: \"Web-\""));
        let errs = validate_object_meta(&json!({"name": "a:b"}), false, NameRule::PathSegment, &p);
        assert!(errs.is_empty());
    }

    #[test]
    fn object_meta_on_update() {
        let p = Path::new("metadata");
        let old = json!({"name": "a", "namespace": "d", "uid": "1", "resourceVersion": "5", "generation": 3,
                         "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["a/x"]});
        let new = json!({"name": "b", "namespace": "d", "uid": "1", "generation": 2,
                         "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["a/x", "b/y"]});
        let m = msgs(&validate_object_meta_update(&new, &old, &p));
        assert_eq!(
            m,
            vec![
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"b/y\"}",
                "metadata.resourceVersion: Invalid value: \"\": must be specified for an update",
                "metadata.generation: Invalid value: 2: must not be decremented",
                "metadata.name: Invalid value: \"b\": field is immutable",
            ]
        );
    }

    #[test]
    fn label_selector() {
        let sel = json!({"matchLabels": {"a": "b"}, "matchExpressions": [
            {"key": "k", "operator": "In"}, {"key": "k", "operator": "Exists", "values": ["x"]}, {"key": "k", "operator": "Foo"}]});
        let m = msgs(&validate_label_selector(Some(&sel), &Path::new("spec.selector")));
        assert_eq!(
            m,
            vec![
                "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                "spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                "spec.selector.matchExpressions[2].operator: Invalid value: \"Foo\": not a valid selector operator",
            ]
        );
    }

    proptest! {
        #[test]
        fn validators_never_panic(s in "\\PC{0,80}") {
            let _ = is_dns1123_label(&s);
            let _ = is_dns1123_subdomain(&s);
            let _ = is_dns1035_label(&s);
            let _ = is_qualified_name(&s);
            let _ = is_valid_label_value(&s);
            let _ = is_valid_path_segment_name(&s);
            let _ = is_config_map_key(&s);
            let _ = is_env_var_name(&s);
            let _ = is_valid_port_name(&s);
            for rule in [NameRule::Dns1123Label, NameRule::Dns1123Subdomain, NameRule::Dns1035Label, NameRule::PathSegment] {
                let _ = validate_name(rule, &s, true);
                let _ = validate_name(rule, &s, false);
            }
        }

        #[test]
        fn labels_roundtrip_regexlike(s in "[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?") {
            prop_assert!(is_dns1123_label(&s).is_empty());
            prop_assert!(is_qualified_name(&s).is_empty());
            prop_assert!(is_valid_label_value(&s).is_empty());
        }

        #[test]
        fn object_meta_never_panics(v in proptest::arbitrary::any::<(String, String, bool)>()) {
            let meta = json!({"name": v.0, "generateName": v1_or(&v.1), "labels": {v.0.clone(): v.1.clone()}});
            let _ = validate_object_meta(&meta, v.2, NameRule::Dns1123Subdomain, &Path::new("metadata"));
            let _ = validate_object_meta_update(&meta, &json!({"name": 1}), &Path::new("metadata"));
        }
    }

    fn v1_or(s: &str) -> Value {
        if s.len().is_multiple_of(2) { Value::String(s.to_string()) } else { Value::Null }
    }
}
