//! Errors as the user reads them, and the exit code of each: 1 for a failure (the API server
//! refused, the preview failed, it does not exist), 3 for a timeout. Usage errors (2) are clap's.

use kube::core::Status;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Exit codes.
pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_TIMEOUT: u8 = 3;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Something the user must act on, already phrased for them.
    #[error("{0}")]
    Failed(String),
    /// A wait gave up.
    #[error("{0}")]
    Timeout(String),
    /// The kubeconfig could not be read or used.
    #[error("{0}")]
    Config(String),
    /// A request to the API server failed.
    #[error("{context}: {}", readable(source))]
    Kube { context: String, source: kube::Error },
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Timeout(_) => EXIT_TIMEOUT,
            _ => EXIT_FAILURE,
        }
    }

    /// Wrap a kube error with what was being done.
    pub fn kube(context: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let context = context.into();
        move |source| Error::Kube { context, source }
    }
}

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

/// A kube error as a person reads it: a refusal with its fields and rules (422), a hint for
/// 401/403/404, the cause chain for transport errors.
pub fn readable(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => readable_status(s),
        other => {
            let mut out = other.to_string();
            let mut source = std::error::Error::source(other);
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
    }
}

fn readable_status(s: &Status) -> String {
    let causes: Vec<String> = s
        .details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| match (c.field.is_empty(), c.message.is_empty()) {
                    (false, false) => format!("  {}: {}", c.field, c.message),
                    (false, true) => format!("  {}: {}", c.field, c.reason),
                    _ => format!("  {}", c.message),
                })
                .collect()
        })
        .unwrap_or_default();
    let reason = if s.reason.is_empty() { String::new() } else { format!(" {}", s.reason) };
    match s.code {
        422 if !causes.is_empty() => {
            format!("the API server refused it (422{reason}):\n{}", causes.join("\n"))
        }
        401 => format!(
            "the API server does not know who you are (401{reason}): {}; check the credentials of your kubeconfig",
            s.message
        ),
        403 => format!(
            "the API server forbids it (403{reason}): {}; ask for RBAC access to previewenvironments",
            s.message
        ),
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

    #[test]
    fn a_422_shows_each_field_and_rule() {
        let s = Status {
            code: 422,
            reason: "Invalid".into(),
            message: "PreviewEnvironment.vesper.eventide.dev \"x\" is invalid: spec.image: Invalid value".into(),
            details: Some(StatusDetails {
                causes: vec![StatusCause {
                    reason: "FieldValueInvalid".into(),
                    message: "Invalid value: \"string\": image must be pinned".into(),
                    field: "spec.image".into(),
                }],
                name: "x".into(),
                group: "vesper.eventide.dev".into(),
                kind: "PreviewEnvironment".into(),
                uid: String::new(),
                retry_after_seconds: 0,
            }),
            ..Default::default()
        };
        let e = Error::Kube { context: "creating preview \"x\"".into(), source: kube::Error::Api(Box::new(s)) };
        assert_eq!(
            e.to_string(),
            "creating preview \"x\": the API server refused it (422 Invalid):\n  spec.image: Invalid value: \"string\": image must be pinned"
        );
        assert_eq!(e.exit_code(), EXIT_FAILURE);
        assert_eq!(Error::Timeout("t".into()).exit_code(), EXIT_TIMEOUT);
    }
}
