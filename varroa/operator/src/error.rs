//! The operator's errors: [`Error`] ends a reconcile pass (each variant has a metric label);
//! [`Blocker`] says why a Controller is Blocked; [`CaError`] and [`LinkError`] are what reading
//! the gateway CA and handing the configuration to the mites can fail with. Every message says
//! what the operator was doing and the fix.

/// What can end a reconcile pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot be resolved or the installation is incomplete: the controller is
    /// Blocked until it is fixed.
    #[error(transparent)]
    Blocked(#[from] Blocker),
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
    Link(#[from] LinkError),
}

/// Why a Controller is Blocked (condition `ReconcileBlocked`): what it names or the installation
/// lacks; nothing is written until it is fixed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Blocker {
    /// The configuration does not resolve or render.
    #[error(transparent)]
    Render(#[from] varroa_config::RenderError),
    /// The settings name an UpdateCenter that does not exist.
    #[error("UpdateCenter {name} does not exist: create it, or remove updateCenter from the settings")]
    UnknownUpdateCenter {
        /// The UpdateCenter's name.
        name: String,
    },
    /// The gateway CA cannot be read.
    #[error(transparent)]
    GatewayCa(#[from] CaError),
    /// The gateway CA refused to issue the mite's certificate.
    #[error("issuing the mite certificate of {namespace}/{name}: {message}")]
    MiteCertificate {
        /// The Controller's namespace.
        namespace: String,
        /// The Controller.
        name: String,
        /// The CA's error.
        message: String,
    },
    /// The system's random number generator failed.
    #[error("the system's random number generator failed; cannot make the mite's token")]
    Random,
}

/// Why the gateway CA Secret cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CaError {
    /// It does not exist.
    #[error(
        "the gateway CA Secret {namespace}/{name} does not exist: create it with the CA's tls.crt and tls.key (see docs/varroa/operator.md), or point --gateway-ca-secret at yours"
    )]
    Missing { namespace: String, name: String },
    /// Reading it failed.
    #[error("reading the gateway CA Secret {namespace}/{name}: {message}")]
    Unreadable { namespace: String, name: String, message: String },
    /// It lacks a key.
    #[error(
        "the gateway CA Secret {namespace}/{name} lacks tls.crt or tls.key: store the CA certificate and key under those keys"
    )]
    Incomplete { namespace: String, name: String },
    /// Its certificate or key is not a usable CA.
    #[error("the gateway CA Secret {namespace}/{name}: {message}")]
    Invalid { namespace: String, name: String, message: String },
}

/// Why the desired configuration did not reach the `varroa_desired` bucket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The Controller's name is not a bucket key (its message).
    #[error("{0}")]
    Key(String),
    /// The bucket has not been reachable for the wait.
    #[error("the {bucket} bucket is not reachable (is NATS up?)")]
    Unreachable {
        /// The bucket.
        bucket: &'static str,
    },
    /// The write failed.
    #[error("writing the desired configuration of {namespace}/{name} to {bucket}: {message}")]
    Write {
        /// The Controller's namespace.
        namespace: String,
        /// The Controller.
        name: String,
        /// The bucket.
        bucket: &'static str,
        /// NATS' error.
        message: String,
    },
}

impl Error {
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube { action: action.into(), source }
    }

    /// A direct request of the kit (a status write, a deletion): an API error keeps its action
    /// and the label `kube`, as the operator's own requests have.
    pub fn from_kit(e: opkit::Error) -> Self {
        match e {
            opkit::Error::Kube { action, source } => Error::Kube { action, source },
            other => Error::Apply(other),
        }
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
