//! Errors as the user reads them, and the exit code of each: 1 for a failure (the API server
//! refused, the controller does not exist), 3 for a timeout. Usage errors (2) are clap's.

use kube::core::Status;

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
    Config(String),
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

/// A kube error as a person reads it: a refusal with its fields (422), a hint for 401/403, the
/// cause chain for transport errors.
pub fn readable(e: &kube::Error) -> String {
    let s = match e {
        kube::Error::Api(s) => s,
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
            return format!("cannot reach the API server: {out}");
        }
    };
    let causes: Vec<String> = s
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| if c.field.is_empty() { format!("  {}", c.message) } else { format!("  {}: {}", c.field, c.message) })
        .collect();
    let reason = if s.reason.is_empty() { String::new() } else { format!(" {}", s.reason) };
    let head = match s.code {
        422 if !causes.is_empty() => format!("the API server refused it (422{reason})"),
        401 => format!(
            "the API server does not know who you are (401{reason}): {}; check the credentials of your kubeconfig",
            s.message
        ),
        403 => format!(
            "the API server forbids it (403{reason}): {}; ask for RBAC access to controllers.varroa.dev",
            s.message
        ),
        code => format!("the API server answered {code}{reason}: {}", s.message),
    };
    if causes.is_empty() { head } else { format!("{head}:\n{}", causes.join("\n")) }
}

#[cfg(test)]
mod tests {
    use super::*;

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
