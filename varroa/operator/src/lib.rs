//! The Varroa operator: every Controller gets a Jenkins StatefulSet with the mite sidecar, its
//! configuration, Services, volume and optional Ingress; its status says where it is in its
//! lifecycle and what needs attention.
//!
//! | Concern | File |
//! |---|---|
//! | The reconciliation (a pipeline, in order) and its watches | controller.rs |
//! | Its steps: the reads, every object built (pure), the writes, the status (pure) | dereference.rs, desired.rs, apply.rs, status.rs |
//! | What reconciles share (client, caches, kit, per-controller state) | context.rs |
//! | The caches of classes, profiles, bundles, ... and what a change reaches | world.rs |
//! | The objects made for a Controller | objects.rs |
//! | The mite's certificate and the gateway CA | certs.rs |
//! | Phase, conditions, attention, Events | status.rs |
//! | The source of mite connection state | mite.rs |
//! | Lifecycle activity on NATS | activity.rs |
//! | Flags, metrics | config.rs, metrics.rs |
//! | `varroa-operator render` | render_cmd.rs |
//! | `varroa-operator gateway-ca` | gateway_ca_cmd.rs |

pub mod activity;
pub mod apply;
pub mod cache;
pub mod certs;
pub mod config;
pub mod context;
pub mod controller;
pub mod dereference;
pub mod desired;
pub mod error;
pub mod fetch;
pub mod gateway_ca_cmd;
pub mod link;
pub mod metrics;
pub mod mite;
pub mod objects;
pub mod render_cmd;
pub mod status;
pub mod world;

pub use config::Config;

use std::sync::Arc;

/// The ConfigMap (in the operator's namespace, the Lease's) that carries what one process
/// verified over to the next (opkit::checkpoint).
pub const CHECKPOINT: &str = "varroa-operator-verified";

/// Runs the operator until `shutdown` resolves (the library entry point of the binary and the
/// tests).
pub async fn run(
    client: kube::Client,
    config: Config,
    metrics: Arc<metrics::Metrics>,
    mites: Arc<dyn mite::MiteSource>,
    activity: activity::Publisher,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let api: kube::Api<varroa_api::Controller> = kube::Api::all(client.clone());
    if let Err(e) = api.list(&kube::api::ListParams::default().limit(1)).await {
        anyhow::bail!(
            "cannot list Controllers ({e}): install the CRDs first (kubectl apply -f deploy/varroa/crds.yaml) and check the operator's RBAC"
        );
    }
    // What the last process verified, so that a restart does not verify every object again.
    let (namespace, verified) = (config.leader_election_namespace.clone(), metrics.writes.verified().clone());
    let checkpoint = opkit::checkpoint::Checkpoint::new(client.clone(), &namespace, CHECKPOINT, context::MANAGER);
    let controller = controller::run(client, config, metrics, mites, activity, shutdown);
    opkit::checkpoint::around(&checkpoint, &verified, controller).await;
    Ok(())
}
