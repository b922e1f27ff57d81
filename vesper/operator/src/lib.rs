//! The Vesper operator: every PreviewEnvironment gets a namespace of its own with a quota,
//! limits and network isolation, a Deployment of its image, a Service and (with a preview
//! domain) an Ingress; it is deleted, namespace and all, when its TTL passes.
//!
//! Where to read the code (the seed's table, with this project's files):
//!
//! | Concern | File |
//! |---|---|
//! | The API types and their validation | vesper/api/src/lib.rs, ttl.rs |
//! | The reconciliation (a pipeline in the flowchart's order), the watches | controller.rs |
//! | Its steps: the reads, every object built (pure), the writes, the status (pure) | dereference.rs, desired.rs, apply.rs, status.rs |
//! | What reconciles share (client, caches, metrics, per-preview state) | context.rs |
//! | The watch caches reconciles read from | cache.rs |
//! | Names of namespaces and hosts | naming.rs |
//! | The namespace | namespace.rs |
//! | Quota and limits | quota.rs (quantities: the k8s-quantity crate) |
//! | Network isolation | networkpolicy.rs, hostaddresses.rs, cidr.rs |
//! | Deployment, Service, Ingress | deployment.rs, service.rs, ingress.rs |
//! | TTL and deletion | ttl.rs, finalizer.rs |
//! | Status, conditions and events | status.rs |
//! | Metrics | metrics.rs |
//! | The operator flags | config.rs, main.rs |

pub mod apply;
pub mod cache;
pub mod cidr;
pub mod config;
pub mod context;
pub mod controller;
pub mod deployment;
pub mod dereference;
pub mod desired;
pub mod error;
pub mod finalizer;
pub mod hostaddresses;
pub mod ingress;
pub mod meta;
pub mod metrics;
pub mod namespace;
pub mod naming;
pub mod networkpolicy;
pub mod quota;
pub mod service;
pub mod status;
pub mod ttl;

pub use config::Config;
/// The clock the operator reads (opkit's: tests move it forward).
pub use opkit::clock;

use std::sync::Arc;

/// The ConfigMap (in the operator's namespace, the Lease's) that carries what one process
/// verified over to the next (opkit::checkpoint).
pub const CHECKPOINT: &str = "vesper-operator-verified";

/// Run the operator's controller with a client until `shutdown` resolves (the library entry
/// point the binary and the tests use). Metrics are recorded into `metrics`.
pub async fn run(
    client: kube::Client,
    config: Config,
    metrics: Arc<metrics::Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    run_with_clock(client, config, metrics, clock::Clock::default(), shutdown).await
}

/// [`run`] with a clock tests can move forward.
pub async fn run_with_clock(
    client: kube::Client,
    config: Config,
    metrics: Arc<metrics::Metrics>,
    clock: clock::Clock,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    // Fail early, with the fix, when the CRD is not installed.
    let api: kube::Api<vesper_api::PreviewEnvironment> = kube::Api::all(client.clone());
    if let Err(e) = api.list(&kube::api::ListParams::default().limit(1)).await {
        anyhow::bail!(
            "cannot list PreviewEnvironments ({e}): install the CRD first (kubectl apply -f deploy/vesper/crd.yaml) and check the operator's RBAC"
        );
    }
    let (hosts, changes) = hostaddresses::HostAddresses::start(client.clone())
        .await
        .map_err(|e| anyhow::anyhow!("reading the cluster's node and API server addresses: {e}"))?;
    // What the last process verified, so that a restart does not verify every object again.
    let (namespace, verified) = (config.leader_election_namespace.clone(), metrics.writes.verified().clone());
    let checkpoint = opkit::checkpoint::Checkpoint::new(client.clone(), &namespace, CHECKPOINT, context::MANAGER);
    let (caches, writers) = cache::Caches::new();
    let ctx = Arc::new(context::Context::new(client, config, hosts, metrics, clock, caches));
    opkit::checkpoint::around(&checkpoint, &verified, controller::run(ctx, writers, changes, shutdown)).await;
    Ok(())
}
