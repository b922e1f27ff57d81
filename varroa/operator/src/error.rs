//! The operator's errors.

/// What can end a reconcile pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot be resolved or the installation is incomplete: the controller is
    /// Blocked until it is fixed.
    #[error("{0}")]
    Blocked(String),
    /// A request to the API server failed.
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// A compare-then-write failed.
    #[error(transparent)]
    Apply(#[from] opkit::Error),
    /// An object the operator would write exists and is not this Controller's (it lacks Varroa's
    /// label or an owner reference to the Controller's UID): it is left untouched and the
    /// Controller is Failed (reason `OwnershipConflict`).
    #[error(
        "{kind} {namespace}/{name} exists and is not this Controller's (it lacks the label app.kubernetes.io/managed-by=varroa-operator or an owner reference to this Controller){detail}: the operator leaves it untouched; rename the Controller, or delete or rename the {kind}"
    )]
    OwnershipConflict { kind: String, namespace: String, name: String, detail: String },
    /// An object could not be serialized.
    #[error("serializing {0}: {1}")]
    Serialize(&'static str, serde_json::Error),
    /// The control link (NATS JetStream) refused or could not take the desired configuration.
    #[error("handing the configuration to the mites: {0}")]
    Link(String),
}

impl Error {
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube { action: action.into(), source }
    }

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Blocked(_) => "blocked",
            Error::Kube { .. } => "kube",
            Error::Apply(_) => "apply",
            Error::Serialize(..) => "serialize",
            Error::OwnershipConflict { .. } => "ownership_conflict",
            Error::Link(_) => "link",
        }
    }

    /// The API server refused the object itself (not a transient failure): the controller is
    /// Failed until its dwell ends.
    pub fn refusal(&self) -> Option<String> {
        let code = match self {
            Error::Kube { source: kube::Error::Api(s), .. } => Some(s.code),
            Error::Apply(e) => e.api_code(),
            _ => None,
        }?;
        matches!(code, 400 | 403 | 422).then(|| self.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
