//! The API server connection ([`clikit::client`]: the kubeconfig, context and namespace read as
//! kubectl reads them) and the controllers it reaches.

pub use clikit::client::{Target, connect};
use kube::Api;
use varroa_api::Controller;

/// The controllers of a [`Target`]'s namespace.
pub trait Controllers {
    /// The controllers of the namespace.
    fn controllers(&self) -> Api<Controller>;
}

impl Controllers for Target {
    fn controllers(&self) -> Api<Controller> {
        self.namespaced()
    }
}
