//! varroa-mite: the sidecar next to each Jenkins controller. It observes and configures Jenkins
//! through Jenkins' documented HTTP API on localhost and keeps one gRPC stream to the gateway.
//!
//! - [`jenkins`]: the client for the Jenkins endpoints the mite uses (API token from a file,
//!   CSRF crumbs, timeouts, bounded answers) and [`jenkins::Observation`]s with their deltas.
//! - [`apply`]: applying a desired configuration the way JCasC expects (write, check, reload,
//!   export and compare), never twice for the same digest unless Jenkins drifted.
//! - [`link`]: `varroa-mite run`, the one stream to the gateway (hello, observation deltas, apply
//!   results, heartbeats; reconnecting forever with capped, jittered back-off).
//! - [`plugin`]: the plugin listener on the pod's loopback (docs/varroa/plugin-protocol.md): the
//!   token file, `POST /v1/events` forwarded over the stream and answered once JetStream has the
//!   events, `POST /v1/logs/...` answered once the log store has the chunk, and `POST /v1/claims`
//!   answered with the ledger's decision within the claim's budget.
//! - [`inventory`]: the trigger inventory: the plugin's job schedules, polled from Jenkins and
//!   sent as `job_schedule` events through the plugin listener's forwarding.
//! - [`settings`]: `run`'s flags and environment, validated at start-up.
//! - [`plugins`]: `varroa-mite install-plugins`, the `plugins-init` step: locked, verified,
//!   all-or-nothing plugin installation from an update site.
//!
//! Jenkins cannot run on our machines; every test here runs against varroa-jenkins-double over
//! real HTTP. docs/varroa/jenkins-double.md lists the endpoints and the Jenkins sources they follow.

pub mod apply;
pub mod inventory;
pub mod jenkins;
pub mod link;
pub mod plugin;
pub mod plugins;
pub mod settings;

/// Lowercase hex of bytes (digests).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
