//! Field errors, formatted exactly as the Kubernetes apiserver formats them
//! (k8s.io/apimachinery/pkg/util/validation/field).
//!
//! A rejected write is a list of these; `errors::ApiError::invalid` turns the list into the
//! `422 Invalid` Status whose `details.causes` name every bad field path.

use serde_json::Value;
use std::fmt;

/// The kind of a field error. `as_str` is the text the real server prints, `reason` is the
/// `StatusCause.reason` it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
    TypeInvalid,
}

impl ErrorType {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Internal => "Internal error",
            ErrorType::TypeInvalid => "Invalid value",
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Internal => "InternalError",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }
}

/// One invalid field: its path (`spec.containers[0].image`, `metadata.labels[app]`), the kind
/// of error, the offending value when there is one, and a detail a user can act on.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: ErrorType,
    pub field: String,
    pub bad_value: Option<Value>,
    pub detail: String,
}

impl FieldError {
    pub fn new(kind: ErrorType, field: impl Into<String>, bad_value: Option<Value>, detail: impl Into<String>) -> Self {
        FieldError { kind, field: field.into(), bad_value, detail: detail.into() }
    }
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, field, None, detail)
    }
    pub fn invalid(field: impl Into<String>, value: impl Into<Value>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Invalid, field, Some(value.into()), detail)
    }
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, field, None, detail)
    }
    pub fn duplicate(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::Duplicate, field, Some(value.into()), "")
    }
    pub fn not_found(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::NotFound, field, Some(value.into()), "")
    }
    /// `Unsupported value: "x": supported values: "a", "b"`
    pub fn not_supported(field: impl Into<String>, value: impl Into<Value>, valid: &[&str]) -> Self {
        let detail = if valid.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = valid.iter().map(|v| format!("{v:?}")).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, field, Some(value.into()), detail)
    }
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self::new(ErrorType::TooLong, field, None, format!("may not be more than {max} bytes"))
    }
    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Self {
        Self::new(ErrorType::TooMany, field, Some(Value::from(actual)), format!("must have at most {max} items"))
    }
    pub fn type_invalid(field: impl Into<String>, value: impl Into<Value>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::TypeInvalid, field, Some(value.into()), detail)
    }
    pub fn internal(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Internal, field, None, detail)
    }

    /// What follows `field: ` in the message, as Go's `(*field.Error).ErrorBody()` prints it.
    pub fn body(&self) -> String {
        let mut s = match (&self.kind, &self.bad_value) {
            (ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong | ErrorType::Internal, _) => {
                self.kind.as_str().to_string()
            }
            (_, None) => self.kind.as_str().to_string(),
            (_, Some(v)) => format!("{}: {}", self.kind.as_str(), go_value(v)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Print a value the way Go's `%q`/`%v`/`%#v` print the decoded JSON value in field errors.
pub fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_string(),
        Value::Array(a) if a.iter().all(Value::is_string) => {
            let items: Vec<String> = a.iter().filter_map(Value::as_str).map(go_quote).collect();
            format!("[]string{{{}}}", items.join(", "))
        }
        Value::Object(m) if m.values().all(Value::is_string) => {
            // Go prints maps sorted by key.
            let mut items: Vec<(&String, &str)> = m.iter().filter_map(|(k, v)| Some((k, v.as_str()?))).collect();
            items.sort();
            let parts: Vec<String> = items.iter().map(|(k, v)| format!("{}:{}", go_quote(k), go_quote(v))).collect();
            format!("map[string]string{{{}}}", parts.join(", "))
        }
        Value::Array(_) => "[]interface {}{...}".to_string(),
        Value::Object(_) => "map[string]interface {}{...}".to_string(),
    }
}

/// Go's `%q` for a string: double quotes with Go escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A path to a field, built the way apiserver builds `field.Path`: `.child(name)`, `.index(i)`,
/// `.key(k)` give `spec.containers[0].env[FOO]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    pub fn root() -> Self {
        Path(String::new())
    }
    pub fn new(name: &str) -> Self {
        Path(name.to_string())
    }
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() { Path(name.to_string()) } else { Path(format!("{}.{}", self.0, name)) }
    }
    pub fn index(&self, i: usize) -> Self {
        Path(format!("{}[{}]", self.0, i))
    }
    pub fn key(&self, k: &str) -> Self {
        Path(format!("{}[{}]", self.0, k))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Path> for String {
    fn from(p: Path) -> String {
        p.0
    }
}

impl From<&Path> for String {
    fn from(p: &Path) -> String {
        p.0.clone()
    }
}

/// `[a, b]` when there are several errors, the single error otherwise, as
/// `utilerrors.NewAggregate(errs).Error()` prints them.
pub fn aggregate(errs: &[FieldError]) -> String {
    match errs {
        [one] => one.to_string(),
        many => {
            let parts: Vec<String> = many.iter().map(|e| e.to_string()).collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn formats_like_the_apiserver() {
        let e = FieldError::invalid(
            "metadata.name",
            "Bad_Name",
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters",
        );
        assert_eq!(
            e.to_string(),
            "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
        );
        assert_eq!(FieldError::required("spec.image", "").to_string(), "spec.image: Required value");
        assert_eq!(
            FieldError::not_supported("spec.type", "Foo", &["ClusterIP", "NodePort"]).to_string(),
            "spec.type: Unsupported value: \"Foo\": supported values: \"ClusterIP\", \"NodePort\""
        );
        assert_eq!(
            FieldError::invalid("spec.replicas", json!(6), "must be less than or equal to 5").to_string(),
            "spec.replicas: Invalid value: 6: must be less than or equal to 5"
        );
        let p = Path::new("spec").child("containers").index(0).child("env").key("FOO");
        assert_eq!(p.as_str(), "spec.containers[0].env[FOO]");
        assert_eq!(
            aggregate(&[FieldError::required("a", ""), FieldError::required("b", "")]),
            "[a: Required value, b: Required value]"
        );
    }
}
