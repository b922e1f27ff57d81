//! Errors as the user reads them, and the exit code of each: 1 for a failure (the API server
//! refused, the controller or build does not exist, the build record store cannot be read), 3
//! for a timeout. Usage errors (2) are clap's.

/// A result of a command.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Exit code of a failure.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a usage error (clap's).
pub const EXIT_USAGE: u8 = 2;
/// Exit code of a wait that gave up.
pub const EXIT_TIMEOUT: u8 = 3;

/// What went wrong, phrased for the user.
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
    /// The build record store could not be read.
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    /// A request to the API server failed.
    #[error("{context}: {}", readable(source))]
    Kube {
        /// What was being done (`reading controller "x" in namespace default`).
        context: String,
        /// The client's error.
        source: kube::Error,
    },
}

impl Error {
    /// The process exit code for this error.
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
const RBAC_RESOURCE: &str = "controllers.varroa.dev";

/// A kube error as a person reads it ([`clikit::apierror::readable`]), a 403 asking for access
/// to controllers.varroa.dev.
pub fn readable(e: &kube::Error) -> String {
    clikit::apierror::readable(e, RBAC_RESOURCE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn refusals_read_well_and_map_to_exit_codes() {
        let s = Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "controllers.varroa.dev \"x\" is forbidden: User \"bob\" cannot patch".into(),
            ..Default::default()
        };
        let e = Error::Kube { context: "stopping controller \"x\"".into(), source: kube::Error::Api(Box::new(s)) };
        assert_eq!(
            e.to_string(),
            "stopping controller \"x\": the API server forbids it (403 Forbidden): controllers.varroa.dev \"x\" is \
             forbidden: User \"bob\" cannot patch; ask for RBAC access to controllers.varroa.dev"
        );
        assert_eq!(e.exit_code(), EXIT_FAILURE);
        assert_eq!(Error::Timeout("t".into()).exit_code(), EXIT_TIMEOUT);
    }
}
