//! Errors as the user reads them, and the exit code of each: 1 for a failure (the API server
//! refused, the preview failed, it does not exist), 3 for a timeout. Usage errors (2) are clap's.

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
    Config(#[from] clikit::client::ConnectError),
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

/// What a 403 tells the user to ask RBAC access to.
const RBAC_RESOURCE: &str = "previewenvironments";

/// A kube error as a person reads it ([`clikit::apierror::readable`]), a 403 asking for access
/// to previewenvironments.
pub fn readable(e: &kube::Error) -> String {
    clikit::apierror::readable(e, RBAC_RESOURCE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
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
