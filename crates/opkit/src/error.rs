//! The error type of every opkit module.
//!
//! One `thiserror` enum, in the shape kube-rs/controller-rs uses: each variant says what opkit was
//! doing when it failed and carries the cause, and [`Error::metric_label`] gives a short, stable
//! label for failure metrics.

use std::net::SocketAddr;

/// Everything that can go wrong in opkit.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the Kubernetes API failed; `action` says which one ("get Lease ns/name").
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },

    /// The leader election timings break an invariant (see [`crate::leader::LeaseTiming`]).
    #[error("invalid leader election timing: {0}")]
    InvalidTiming(String),

    /// An argument is unusable; `field` names it and the message says how to fix it.
    #[error("invalid {field}: {message}")]
    Invalid { field: String, message: String },

    /// An object of the desired name exists and is not the caller's (see
    /// [`crate::apply::Guard::is_ours`]): it was left untouched.
    #[error("{object} exists and is not ours: left untouched")]
    NotOwned { object: String },

    /// An object could not be turned into JSON (or back).
    #[error("{action}: {source}")]
    Json {
        action: String,
        #[source]
        source: serde_json::Error,
    },

    /// The health server could not listen on its address.
    #[error("binding the health server to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    /// Any other I/O failure of the health server.
    #[error("health server: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// A short label for failure metrics (`kube`, `timing`, `invalid`, `not_owned`, `json`, `bind`, `io`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "kube",
            Error::InvalidTiming(_) => "timing",
            Error::Invalid { .. } => "invalid",
            Error::NotOwned { .. } => "not_owned",
            Error::Json { .. } => "json",
            Error::Bind { .. } => "bind",
            Error::Io(_) => "io",
        }
    }

    /// The HTTP status of the API server's answer, when this is an API error.
    pub fn api_code(&self) -> Option<u16> {
        match self {
            Error::Kube { source: kube::Error::Api(status), .. } => Some(status.code),
            _ => None,
        }
    }

    pub(crate) fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube { action: action.into(), source }
    }

    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid { field: field.into(), message: message.into() }
    }
}

/// `Result` with opkit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_messages_name_the_action() {
        let e = Error::invalid("reason", "must be CamelCase");
        assert_eq!(e.metric_label(), "invalid");
        assert_eq!(e.to_string(), "invalid reason: must be CamelCase");
        assert_eq!(e.api_code(), None);
        let status = kube::core::Status::failure("nope", "Conflict").with_code(409);
        let e = Error::kube("update Lease default/l", kube::Error::Api(status.boxed()));
        assert_eq!(e.metric_label(), "kube");
        assert_eq!(e.api_code(), Some(409));
        assert!(e.to_string().starts_with("update Lease default/l: "), "{e}");
    }
}
