//! API errors, answered as `Status` objects with the codes, reasons and field order of the real
//! apiserver (k8s.io/apimachinery/pkg/api/errors).

use crate::field::{self, FieldError};
use serde_json::{Map, Value, json};

/// A failed request, ready to be answered as a `Status`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Box<Details>>,
    /// Extra headers (e.g. `Retry-After`).
    pub retry_after: Option<u32>,
}

/// `StatusDetails`: which object the error is about, and the causes of an Invalid error.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Details {
    pub name: String,
    pub group: String,
    pub kind: String,
    pub uid: String,
    pub causes: Vec<Cause>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

pub type ApiResult<T> = Result<T, ApiError>;

/// "configmaps" with group "" prints as `configmaps`, "deployments" in "apps" as
/// `deployments.apps`, like `schema.GroupResource.String()`.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason, message: message.into(), details: None, retry_after: None }
    }

    fn with_details(mut self, name: &str, group: &str, kind: &str) -> Self {
        self.details = Some(Box::new(Details {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            ..Default::default()
        }));
        self
    }

    /// `configmaps "x" not found`
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} {:?} not found", qualified(group, resource), name))
            .with_details(name, group, resource)
    }

    /// 404 for a path the server does not serve.
    pub fn not_found_path() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource")
            .with_details("", "", "")
            .without_empty_details()
    }

    fn without_empty_details(mut self) -> Self {
        if let Some(d) = &self.details
            && d.name.is_empty()
            && d.group.is_empty()
            && d.kind.is_empty()
            && d.causes.is_empty()
        {
            self.details = Some(Box::default());
        }
        self
    }

    /// `configmaps "x" already exists`
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} {:?} already exists", qualified(group, resource), name))
            .with_details(name, group, resource)
    }

    /// `Operation cannot be fulfilled on configmaps "x": <msg>`
    pub fn conflict(group: &str, resource: &str, name: &str, msg: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} {:?}: {}", qualified(group, resource), name, msg),
        )
        .with_details(name, group, resource)
    }

    /// The optimistic-concurrency conflict of an update with a stale resourceVersion.
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// A 409 with a free-form message (server-side apply conflicts).
    pub fn conflict_raw(message: impl Into<String>, causes: Vec<Cause>, group: &str, kind: &str, name: &str) -> Self {
        let mut e = Self::new(409, "Conflict", message).with_details(name, group, kind);
        if let Some(d) = &mut e.details {
            d.causes = causes;
        }
        e
    }

    /// `Kind.group "name" is invalid: [causes]` with one cause per field error.
    pub fn invalid(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> Self {
        let qualified_kind = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let message = if errs.is_empty() {
            format!("{qualified_kind} {name:?} is invalid")
        } else {
            format!("{qualified_kind} {name:?} is invalid: {}", field::aggregate(errs))
        };
        let mut e = Self::new(422, "Invalid", message).with_details(name, group, kind);
        if let Some(d) = &mut e.details {
            d.causes = errs
                .iter()
                .map(|fe| Cause { reason: fe.kind.reason().to_string(), message: fe.body(), field: fe.field.clone() })
                .collect();
        }
        e
    }

    /// An error with any code and reason (patch errors that upstream answers with 413 or 500).
    pub fn raw(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(code, reason, message)
    }

    /// Replace the message, keeping code, reason and details.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// A 403 with the authorizer's whole message (details carry name, group, kind).
    pub fn forbidden_message(group: &str, resource: &str, name: &str, message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message).with_details(name, group, resource)
    }

    /// `configmaps "x" is forbidden: <msg>` (details carry name, group, kind).
    pub fn forbidden(group: &str, resource: &str, name: &str, msg: &str) -> Self {
        let target = if name.is_empty() {
            qualified(group, resource)
        } else {
            format!("{} {:?}", qualified(group, resource), name)
        };
        Self::new(403, "Forbidden", format!("{target} is forbidden: {msg}")).with_details(name, group, resource)
    }

    pub fn method_not_allowed(msg: impl Into<String>) -> Self {
        let mut e = Self::new(405, "MethodNotAllowed", msg);
        e.details = Some(Box::default());
        e
    }

    /// 410 Gone for a watch or list from a compacted resourceVersion.
    pub fn gone(msg: impl Into<String>) -> Self {
        Self::new(410, "Expired", msg)
    }

    pub fn too_large() -> Self {
        Self::new(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
    }

    /// 415, with upstream's message (the offending type is not repeated, as upstream).
    pub fn unsupported_media_type(_content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )
    }

    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml, application/json;stream=watch; got {accept:?}"
            ),
        )
    }

    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(500, "InternalError", format!("Internal error occurred: {}", msg.into()))
    }

    pub fn timeout(msg: impl Into<String>) -> Self {
        Self::new(504, "Timeout", msg)
    }

    pub fn service_unavailable(msg: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", msg)
    }

    /// The `Status` object, fields in the order the apiserver writes them.
    pub fn to_status(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), "Status".into());
        m.insert("apiVersion".into(), "v1".into());
        m.insert("metadata".into(), json!({}));
        m.insert("status".into(), "Failure".into());
        m.insert("message".into(), self.message.clone().into());
        m.insert("reason".into(), self.reason.into());
        if let Some(d) = &self.details {
            m.insert("details".into(), details_json(d, self.retry_after));
        }
        m.insert("code".into(), self.code.into());
        Value::Object(m)
    }
}

fn details_json(d: &Details, retry_after: Option<u32>) -> Value {
    let mut m = Map::new();
    if !d.name.is_empty() {
        m.insert("name".into(), d.name.clone().into());
    }
    if !d.group.is_empty() {
        m.insert("group".into(), d.group.clone().into());
    }
    if !d.kind.is_empty() {
        m.insert("kind".into(), d.kind.clone().into());
    }
    if !d.uid.is_empty() {
        m.insert("uid".into(), d.uid.clone().into());
    }
    if !d.causes.is_empty() {
        let causes = d
            .causes
            .iter()
            .map(|c| {
                let mut cm = Map::new();
                cm.insert("reason".into(), c.reason.clone().into());
                cm.insert("message".into(), c.message.clone().into());
                if !c.field.is_empty() {
                    cm.insert("field".into(), c.field.clone().into());
                }
                Value::Object(cm)
            })
            .collect();
        m.insert("causes".into(), Value::Array(causes));
    }
    if let Some(r) = retry_after {
        m.insert("retryAfterSeconds".into(), r.into());
    }
    Value::Object(m)
}

/// The `Status` of a successful delete: `{"status":"Success","details":{name, group, kind, uid}}`.
pub fn success_status(name: &str, group: &str, kind: &str, uid: &str) -> Value {
    let mut m = Map::new();
    m.insert("kind".into(), "Status".into());
    m.insert("apiVersion".into(), "v1".into());
    m.insert("metadata".into(), json!({}));
    m.insert("status".into(), "Success".into());
    let d = Details {
        name: name.to_string(),
        group: group.to_string(),
        kind: kind.to_string(),
        uid: uid.to_string(),
        causes: vec![],
    };
    m.insert("details".into(), details_json(&d, None));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_status_has_the_real_field_order() {
        let s = ApiError::not_found("", "configmaps", "x").to_status();
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"configmaps"},"code":404}"#
        );
    }

    #[test]
    fn invalid_lists_every_cause() {
        let e = ApiError::invalid(
            "vesper.eventide.dev",
            "PreviewEnvironment",
            "pr-1",
            &[FieldError::required("spec.image", ""), FieldError::invalid("spec.replicas", 6, "too many")],
        );
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "PreviewEnvironment.vesper.eventide.dev \"pr-1\" is invalid: [spec.image: Required value, spec.replicas: Invalid value: 6: too many]"
        );
        let s = e.to_status();
        assert_eq!(s["details"]["causes"][1]["field"], "spec.replicas");
        assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueRequired");
    }
}
