//! The API server connection ([`clikit::client`]: the kubeconfig, context and namespace read as
//! kubectl reads them) and the previews it reaches.

pub use clikit::client::{Target, connect};
use kube::Api;
use vesper_api::PreviewEnvironment;

/// The previews of a [`Target`]'s namespace.
pub trait Previews {
    /// The previews of the namespace.
    fn previews(&self) -> Api<PreviewEnvironment>;
}

impl Previews for Target {
    fn previews(&self) -> Api<PreviewEnvironment> {
        self.namespaced()
    }
}
