//! Where the operator learns about mite streams (which mites are connected and what their last
//! apply reported) and where it hands over the desired configuration. The real source is the
//! control link through NATS JetStream ([`crate::link::KvLink`]); without `--nats-url` the
//! operator runs with [`NoGateway`] (no mite ever connects: controllers stop at Running), and
//! tests drive [`StaticMites`], a double that also wakes the controllers it changes.

use futures::future::BoxFuture;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;
use varroa_api::ApplyResult;

/// The mite state of one controller.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MiteState {
    /// The stream is up now.
    pub connected: bool,
    /// A stream was up and is gone (as opposed to never connected).
    pub lost: bool,
    /// The last apply the mite reported.
    pub last_apply: Option<ApplyResult>,
    /// How long Jenkins has had no builds, no queue and no user activity (what the inactivity
    /// policy compares with `hibernation.idleAfter`); None when unknown.
    pub idle_for: Option<std::time::Duration>,
    /// A webhook, a cron trigger due soon or a user opening the controller asked to wake it.
    pub wake_requested: bool,
}

/// A source of mite connection state.
pub trait MiteSource: Send + Sync + 'static {
    /// The state for the controller `namespace/name`.
    fn state(&self, namespace: &str, name: &str) -> MiteState;
    /// Notifications of controllers (`namespace`, `name`) whose state changed.
    fn changes(&self) -> broadcast::Receiver<(String, String)>;
    /// Hand the controller's desired configuration to its mites (unless they have it already);
    /// whether it was written. Without a control link there is no one to hand it to.
    fn publish_desired<'a>(
        &'a self,
        _namespace: &'a str,
        _name: &'a str,
        _entry: varroa_link::kv::DesiredEntry,
    ) -> BoxFuture<'a, Result<bool, crate::error::LinkError>> {
        Box::pin(async { Ok(false) })
    }
    /// Resolves once the source holds its first complete copy of the mites' state (the control
    /// link's first read of `varroa_mites`); before it, a connected mite may look absent.
    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    /// Forget the controllers not in `live` (`namespace`, `name`).
    fn sweep(&self, _live: &HashSet<(String, String)>) {}
    /// Entries kept about controllers (for `varroa_tracked_objects`).
    fn tracked(&self) -> usize {
        0
    }
}

/// No gateway: no mite is ever connected.
pub struct NoGateway {
    tx: broadcast::Sender<(String, String)>,
}

impl Default for NoGateway {
    fn default() -> Self {
        NoGateway { tx: broadcast::channel(1).0 }
    }
}

impl MiteSource for NoGateway {
    fn state(&self, _: &str, _: &str) -> MiteState {
        MiteState::default()
    }
    fn changes(&self) -> broadcast::Receiver<(String, String)> {
        self.tx.subscribe()
    }
}

/// A test double: states set by hand, each change waking the controller.
#[derive(Clone)]
pub struct StaticMites {
    states: Arc<Mutex<HashMap<(String, String), MiteState>>>,
    tx: broadcast::Sender<(String, String)>,
}

impl Default for StaticMites {
    fn default() -> Self {
        StaticMites { states: Arc::default(), tx: broadcast::channel(1024).0 }
    }
}

impl StaticMites {
    /// Sets the state of `namespace/name` and wakes it.
    pub fn set(&self, namespace: &str, name: &str, state: MiteState) {
        if let Ok(mut s) = self.states.lock() {
            s.insert((namespace.to_string(), name.to_string()), state);
        }
        let _ = self.tx.send((namespace.to_string(), name.to_string()));
    }
}

impl MiteSource for StaticMites {
    fn state(&self, namespace: &str, name: &str) -> MiteState {
        self.states
            .lock()
            .ok()
            .and_then(|s| s.get(&(namespace.to_string(), name.to_string())).cloned())
            .unwrap_or_default()
    }
    fn changes(&self) -> broadcast::Receiver<(String, String)> {
        self.tx.subscribe()
    }
}
