//! The operator's errors. Each says what a user can do about it; `metric_label` feeds the
//! errors metric.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Ttl(#[from] vesper_api::TtlError),
    #[error("{0}")]
    Quantity(#[from] InvalidQuantity),
    /// An object with a name Vesper uses exists but was not made by Vesper for this preview.
    #[error(
        "{kind} {name:?} in namespace {namespace:?} exists and was not created by Vesper for this preview; Vesper does not touch it: delete or rename it"
    )]
    Conflict { kind: String, namespace: String, name: String },
    /// The compare-then-write of an owned object (reading it, or writing it).
    #[error("{0}")]
    Apply(opkit::Error),
    /// A direct write through the kit: the status, a deletion.
    #[error("{0}")]
    Write(opkit::Error),
    #[error("serializing {0}: {1}")]
    Serialize(&'static str, serde_json::Error),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Ttl(_) => "invalid_ttl",
            Error::Quantity(_) => "invalid_quantity",
            Error::Conflict { .. } => "conflict",
            Error::Apply(_) => "apply",
            Error::Write(_) => "kube",
            Error::Serialize(..) => "serialize",
        }
    }
}

/// A quantity of a preview's spec that Kubernetes would not parse: the spec is wrong, and no
/// retry fixes it (status.rs reports it as `InvalidSpec`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "{field}: {value:?} is not a valid Kubernetes quantity ({reason}); fix the preview's spec, e.g. 500m, 2, 128Mi, 1.5Gi"
)]
pub struct InvalidQuantity {
    /// The field, e.g. `spec.resources.limits.memory`.
    pub field: String,
    pub value: String,
    pub reason: String,
}

impl Error {
    /// Whether the error is in the preview's spec (a user fixes it; retrying does not).
    pub fn is_invalid_spec(&self) -> bool {
        matches!(self, Error::Quantity(_) | Error::Ttl(_))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
