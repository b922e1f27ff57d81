//! Vesper benchmark (`cargo bench -p vesper-operator`): time from create to Ready for 1 and 200
//! previews at once, API writes per preview, and the operator's memory with 1,000 previews.
//!
//! The operator runs as its own process (the release binary), against an in-process devcluster
//! with 3 nodes, exactly as `make demo` runs it. The floor is the same objects (built by the
//! operator's own builders) created directly by a client with no operator, timed until their
//! Deployments are Available. Prints a Markdown table for docs/benchmarks.md.

use devcluster::{DevCluster, Options};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use kube::{Client, CustomResourceExt, ResourceExt};
use optest::process::{Proc, Spawn};
use optest::secs;
use std::time::{Duration, Instant};
use vesper_api::{Phase, PreviewEnvironment};
use vesper_operator::Config;

const CONCURRENCY: usize = 32;
const DOMAIN: &str = "preview.example.com";
const TIMEOUT: Duration = Duration::from_secs(900);

fn preview(i: usize) -> PreviewEnvironment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "vesper.eventide.dev/v1alpha1",
        "kind": "PreviewEnvironment",
        "metadata": {"name": format!("pr-{i}"), "namespace": "team-a"},
        "spec": {"image": format!("registry.example.com/shop:pr-{i}"), "ttl": "24h"},
    }))
    .expect("a valid preview")
}

async fn cluster() -> DevCluster {
    let dc = optest::cluster::start(Options { nodes: 3, ..Default::default() }).await;
    let client = dc.client();
    optest::cluster::install_crds(&client, &[PreviewEnvironment::crd()]).await;
    optest::cluster::create_namespaces(&client, &["team-a", "ingress-nginx"]).await;
    dc
}

/// The operator binary as a child process (the admin's kubeconfig), ready; killed on drop.
async fn start_operator(dc: &DevCluster) -> Proc {
    Spawn::new(env!("CARGO_BIN_EXE_vesper-operator"), "vesper-operator")
        .args(["--preview-domain", DOMAIN, "--ingress-class", "nginx"])
        .listen(&["--metrics-addr", "--health-addr"])
        .kubeconfig(&dc.kubeconfig_path())
        .warnings_to_terminal()
        .spawn_ready(Duration::from_secs(30))
        .await
}

/// API writes the operator made: the sum of `vesper_apply_total` over all outcomes but
/// `unchanged`.
async fn writes(op: &Proc) -> u64 {
    let s = op.scrape().await;
    (s.sum("vesper_apply_total", &[]) - s.sum("vesper_apply_total", &["outcome=\"unchanged\""])) as u64
}

/// Requests the operator sent (`vesper_api_requests_total`), by verb, and reconciles.
async fn requests(op: &Proc) -> Requests {
    let s = op.scrape().await;
    let verb = |v: &str| s.sum("vesper_api_requests_total", &[&format!("verb=\"{v}\"")]);
    Requests {
        gets: verb("get"),
        lists: verb("list"),
        writes: ["create", "update", "patch", "delete"].iter().map(|v| verb(v)).sum(),
        reconciles: s.sum("vesper_reconciles_total", &[]),
    }
}

/// What the operator sent, from its metrics.
#[derive(Clone, Copy, Default)]
struct Requests {
    gets: f64,
    lists: f64,
    /// create, update (dry runs included), patch, delete.
    writes: f64,
    reconciles: f64,
}

impl Requests {
    fn since(self, before: Requests) -> Requests {
        Requests {
            gets: self.gets - before.gets,
            lists: self.lists - before.lists,
            writes: self.writes - before.writes,
            reconciles: self.reconciles - before.reconciles,
        }
    }

    fn per_reconcile(self) -> String {
        let r = self.reconciles.max(1.0);
        format!(
            "{:.2} GET, {:.2} LIST, {:.2} writes and dry runs per reconcile ({} reconciles)",
            self.gets / r,
            self.lists / r,
            self.writes / r,
            self.reconciles
        )
    }
}

/// Wait until `n` previews are Ready; returns when the last one is.
async fn all_ready(client: Client, n: usize) {
    let api: Api<PreviewEnvironment> = Api::all(client);
    let ready = |pe: &PreviewEnvironment| pe.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready);
    optest::wait::until_count(api, watcher::Config::default(), n, TIMEOUT, "previews Ready", ready).await;
}

/// Wait until `n` Deployments are Available.
async fn all_available(client: Client, n: usize) {
    let api: Api<Deployment> = Api::all(client);
    let available = |d: &Deployment| {
        d.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Available" && c.status == "True"))
    };
    let cfg = watcher::Config::default().labels("app.kubernetes.io/managed-by=vesper");
    optest::wait::until_count(api, cfg, n, TIMEOUT, "Deployments Available", available).await;
}

/// Create `n` previews, at most CONCURRENCY at a time (a burst of CI jobs).
async fn create_previews(client: &Client, range: std::ops::Range<usize>) {
    let api: Api<PreviewEnvironment> = Api::namespaced(client.clone(), "team-a");
    futures::stream::iter(range)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &preview(i)).await.map(|_| ()) }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("previews created");
}

/// The floor: the objects the operator would create for preview `i`, created directly.
async fn create_directly(
    client: &Client,
    cfg: &Config,
    hosts: &vesper_operator::hostaddresses::ClusterAddresses,
    i: usize,
) -> kube::Result<()> {
    let mut pe = preview(i);
    pe.metadata.uid = Some(format!("00000000-0000-4000-8000-{i:012}"));
    let ns = vesper_operator::naming::namespace_name("team-a", &pe.name_any());
    let pp = PostParams::default();
    Api::<Namespace>::all(client.clone()).create(&pp, &vesper_operator::namespace::namespace(&pe, &ns)).await?;
    let quota = vesper_operator::quota::resource_quota(&pe, cfg, &ns).expect("quota");
    Api::<ResourceQuota>::namespaced(client.clone(), &ns).create(&pp, &quota).await?;
    Api::<LimitRange>::namespaced(client.clone(), &ns)
        .create(&pp, &vesper_operator::quota::limit_range(&pe, cfg, &ns))
        .await?;
    let np = vesper_operator::networkpolicy::network_policy(&pe, cfg, &ns, hosts);
    Api::<NetworkPolicy>::namespaced(client.clone(), &ns).create(&pp, &np).await?;
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(&pp, &vesper_operator::deployment::deployment(&pe, cfg, &ns))
        .await?;
    Api::<Service>::namespaced(client.clone(), &ns).create(&pp, &vesper_operator::service::service(&pe, &ns)).await?;
    let host = vesper_operator::ingress::host(&pe, cfg).expect("a host with a preview domain");
    Api::<Ingress>::namespaced(client.clone(), &ns)
        .create(&pp, &vesper_operator::ingress::ingress(&pe, cfg, &ns, &host))
        .await?;
    Ok(())
}

fn config() -> Config {
    Config { preview_domain: Some(DOMAIN.into()), ingress_class: Some("nginx".into()), ..Config::default() }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut rows: Vec<(String, String, String)> = vec![];
    let cfg = config();

    for n in [1usize, 200] {
        // Floor: the same objects, created directly.
        let dc = cluster().await;
        let client = dc.client();
        let hosts =
            vesper_operator::hostaddresses::HostAddresses::start(client.clone()).await.expect("addresses").0.get();
        let rv0 = dc.cluster().store.current_rv();
        let t = Instant::now();
        let waiter = tokio::spawn(all_available(client.clone(), n));
        futures::stream::iter(0..n)
            .map(|i| create_directly(&client, &cfg, &hosts, i))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await
            .expect("objects created");
        waiter.await.expect("waiter");
        let floor = t.elapsed();
        let floor_writes = (dc.cluster().store.current_rv() - rv0) as f64 / n as f64;
        dc.shutdown();

        // Through the operator.
        let dc = cluster().await;
        let client = dc.client();
        let op = start_operator(&dc).await;
        let rv0 = dc.cluster().store.current_rv();
        let t = Instant::now();
        let waiter = tokio::spawn(all_ready(client.clone(), n));
        create_previews(&client, 0..n).await;
        waiter.await.expect("waiter");
        let through = t.elapsed();
        let total_writes = (dc.cluster().store.current_rv() - rv0) as f64 / n as f64;
        let op_writes = writes(&op).await as f64 / n as f64;
        let provisioning = requests(&op).await;
        // Reconcile every preview again with nothing to change (an annotation on each wakes it):
        // what an unchanged preview costs.
        let before = requests(&op).await;
        let pes: Api<PreviewEnvironment> = Api::namespaced(client.clone(), "team-a");
        let touch = kube::api::Patch::Merge(serde_json::json!({"metadata": {"annotations": {"bench/touch": "1"}}}));
        futures::stream::iter(0..n)
            .map(|i| {
                let (pes, touch) = (pes.clone(), &touch);
                async move { pes.patch(&format!("pr-{i}"), &Default::default(), touch).await.map(|_| ()) }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await
            .expect("previews annotated");
        let steady = optest::wait::poll(Duration::from_secs(60), Duration::from_millis(50), || async {
            let now = requests(&op).await.since(before);
            (now.reconciles >= n as f64).then_some(now)
        })
        .await
        .expect("the previews were reconciled again within 60s");
        drop(op);
        dc.shutdown();

        let what = if n == 1 { "1 preview".to_string() } else { format!("{n} previews at once") };
        rows.push((
            format!("create to Ready, {what}"),
            secs(through),
            format!("{} (Deployments Available)", secs(floor)),
        ));
        rows.push((
            format!("API writes per preview, {what}: by the operator (all, cluster-wide)"),
            format!("{op_writes:.1} ({total_writes:.1})"),
            format!("7 by the client ({floor_writes:.1})"),
        ));
        rows.push((format!("requests while provisioning, {what}"), provisioning.per_reconcile(), "-".into()));
        rows.push((
            format!("requests of a reconcile that changes nothing, {what}"),
            steady.per_reconcile(),
            "-".into(),
        ));
    }

    // Memory with 1,000 previews.
    let dc = cluster().await;
    let client = dc.client();
    let op = start_operator(&dc).await;
    let (idle, _) = op.memory().mib();
    let waiter = tokio::spawn(all_ready(client.clone(), 1000));
    let t = Instant::now();
    create_previews(&client, 0..1000).await;
    waiter.await.expect("waiter");
    let took = t.elapsed();
    let (rss, peak) = op.memory().mib();
    rows.push(("operator RSS, idle (no previews)".into(), format!("{idle:.1} MiB"), "-".into()));
    rows.push((
        format!("operator RSS with 1,000 Ready previews (peak), all Ready in {}", secs(took)),
        format!("{rss:.1} MiB ({peak:.1} MiB)"),
        "-".into(),
    ));
    drop(op);
    dc.shutdown();

    println!("| Vesper | result | floor |");
    println!("|---|---|---|");
    for (a, b, c) in rows {
        println!("| {a} | {b} | {c} |");
    }
}
