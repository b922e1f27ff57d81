//! Errors of requests to the API server, phrased for the person at the terminal: a refusal with
//! the field and rule behind each cause (a 422), a hint for 401 and 403, and the cause chain of a
//! connection that failed.

use kube::core::Status;

/// The API server's answer, if the error is one.
pub fn status(e: &kube::Error) -> Option<&Status> {
    match e {
        kube::Error::Api(s) => Some(s),
        _ => None,
    }
}

/// The HTTP code of an API server refusal.
pub fn code(e: &kube::Error) -> Option<u16> {
    status(e).map(|s| s.code)
}

/// A kube error as a person reads it: a refusal with its fields and rules (422), a hint for 401
/// and 403, the cause chain for transport errors. `rbac_resource` is what a 403 tells the user to
/// ask access to (`previewenvironments`, `controllers.varroa.dev`).
pub fn readable(e: &kube::Error, rbac_resource: &str) -> String {
    match e {
        kube::Error::Api(s) => readable_status(s, rbac_resource),
        other => unreachable_server(other),
    }
}

/// `cannot reach the API server: ` and the error with each of its sources not already said.
pub(crate) fn unreachable_server(e: &kube::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    format!("cannot reach the API server: {out}")
}

fn readable_status(s: &Status, rbac_resource: &str) -> String {
    let causes: Vec<String> = s
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| match (c.field.is_empty(), c.message.is_empty()) {
            (false, false) => format!("  {}: {}", c.field, c.message),
            (false, true) => format!("  {}: {}", c.field, c.reason),
            _ => format!("  {}", c.message),
        })
        .collect();
    let reason = if s.reason.is_empty() { String::new() } else { format!(" {}", s.reason) };
    match s.code {
        422 if !causes.is_empty() => {
            format!("the API server refused it (422{reason}):\n{}", causes.join("\n"))
        }
        401 => format!(
            "the API server does not know who you are (401{reason}): {}; check the credentials of your kubeconfig",
            s.message
        ),
        403 => {
            format!("the API server forbids it (403{reason}): {}; ask for RBAC access to {rbac_resource}", s.message)
        }
        code => {
            let mut out = format!("the API server answered {code}{reason}: {}", s.message);
            if !causes.is_empty() {
                out.push('\n');
                out.push_str(&causes.join("\n"));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn cause(field: &str, reason: &str, message: &str) -> StatusCause {
        StatusCause { reason: reason.into(), message: message.into(), field: field.into() }
    }

    fn api(code: u16, reason: &str, message: &str, causes: Vec<StatusCause>) -> kube::Error {
        let details = (!causes.is_empty()).then(|| StatusDetails {
            causes,
            name: "x".into(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        kube::Error::Api(Box::new(Status {
            code,
            reason: reason.into(),
            message: message.into(),
            details,
            ..Default::default()
        }))
    }

    #[test]
    fn a_422_shows_each_field_and_rule() {
        let e = api(
            422,
            "Invalid",
            "PreviewEnvironment.vesper.eventide.dev \"x\" is invalid: spec.image: Invalid value",
            vec![
                cause("spec.image", "FieldValueInvalid", "Invalid value: \"string\": image must be pinned"),
                cause("spec.ttl", "FieldValueRequired", ""),
                cause("", "", "a rule of the whole object"),
            ],
        );
        assert_eq!(
            readable(&e, "previewenvironments"),
            "the API server refused it (422 Invalid):\n  spec.image: Invalid value: \"string\": image must be pinned\n  \
             spec.ttl: FieldValueRequired\n  a rule of the whole object"
        );
        assert_eq!(code(&e), Some(422));
        assert_eq!(status(&e).map(|s| s.reason.as_str()), Some("Invalid"));
    }

    #[test]
    fn a_403_names_what_to_ask_access_to() {
        let e = api(403, "Forbidden", "controllers.varroa.dev \"x\" is forbidden: User \"bob\" cannot patch", vec![]);
        assert_eq!(
            readable(&e, "controllers.varroa.dev"),
            "the API server forbids it (403 Forbidden): controllers.varroa.dev \"x\" is forbidden: User \"bob\" \
             cannot patch; ask for RBAC access to controllers.varroa.dev"
        );
    }

    #[test]
    fn a_401_points_at_the_kubeconfig() {
        let e = api(401, "Unauthorized", "Unauthorized", vec![]);
        assert_eq!(
            readable(&e, "x"),
            "the API server does not know who you are (401 Unauthorized): Unauthorized; check the credentials of \
             your kubeconfig"
        );
    }

    #[test]
    fn other_refusals_keep_their_causes() {
        let e =
            api(409, "Conflict", "Apply failed with 1 conflict", vec![cause(".spec.image", "Conflict", "owned by ci")]);
        assert_eq!(
            readable(&e, "x"),
            "the API server answered 409 Conflict: Apply failed with 1 conflict\n  .spec.image: owned by ci"
        );
        let e = api(422, "", "invalid", vec![]);
        assert_eq!(readable(&e, "x"), "the API server answered 422: invalid");
    }

    #[test]
    fn a_transport_error_says_the_server_cannot_be_reached() {
        let e = kube::Error::Service("connection refused".into());
        assert_eq!(code(&e), None);
        assert!(readable(&e, "x").starts_with("cannot reach the API server: "), "{}", readable(&e, "x"));
        assert!(readable(&e, "x").contains("connection refused"), "{}", readable(&e, "x"));
    }
}
