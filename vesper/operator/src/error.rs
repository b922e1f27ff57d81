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
    Quantity(#[from] crate::quantity::BadQuantity),
    /// An object with a name Vesper uses exists but was not made by Vesper for this preview.
    #[error(
        "{kind} {name:?} in namespace {namespace:?} exists and was not created by Vesper for this preview; Vesper does not touch it: delete or rename it"
    )]
    Conflict { kind: String, namespace: String, name: String },
    #[error("{0}")]
    Apply(#[from] opkit::Error),
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
            Error::Serialize(..) => "serialize",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
