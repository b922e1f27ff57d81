//! Issue 10, item 4 (processes that die honestly), with the real `varroa-operator` binary on a
//! devcluster, as one replica of deploy/varroa/operator.yaml would run (leader election on):
//!
//! 1. its controller cannot start (the start-up list of Controllers is refused: a
//!    ServiceAccount that may use the Lease but not list Controllers): the process logs why,
//!    releases the Lease (holderIdentity empty) and exits non-zero, so the next replica takes
//!    the Lease at its first try instead of after the Lease expires;
//! 2. that replica leads and reconciles; when the test writes another holder into the Lease
//!    (the Lease is lost), it stops at once and exits non-zero;
//! 3. a third replica takes over and reconciles; SIGTERM makes it exit 0 with the Lease
//!    released.

mod support;

use optest::lease::{holder, lease_only_account};
use optest::metrics::sample;
use optest::process::{Proc, Spawn};
use optest::replicas::Replicas;
use std::path::Path;
use std::time::Duration;
use support::{Env, WAIT, apply_yaml};
use varroa_api::ControllerPhase;

const NS: &str = "varroa-system";
const LEASE: &str = "varroa-operator";
const ARGS: &[&str] = &["--leader-elect=true", "--leader-election-namespace=varroa-system"];

/// Start `varroa-operator` with `args` (plus a free loopback health port), as `pod_name`, with
/// only what a pod would have in its environment.
fn spawn(pod_name: &str, args: &[&str], kubeconfig: &Path) -> Proc {
    Spawn::new(env!("CARGO_BIN_EXE_varroa-operator"), pod_name)
        .clear_env("VARROA_")
        .env("POD_NAME", pod_name)
        .kubeconfig(kubeconfig)
        .arg("--health-addr=127.0.0.1:0")
        .args(args.iter().copied())
        .spawn()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_controller_or_lost_lease_exits_non_zero_and_sigterm_exits_zero_releasing_the_lease() {
    let env = Env::cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // A ServiceAccount that may use the leader Lease and nothing else.
    apply_yaml(&env.admin, &lease_only_account(NS, "lease-only")).await;
    let (lease_only, operator) = (dir.path().join("lease-only.kubeconfig"), dir.path().join("operator.kubeconfig"));
    optest::service_account::write_kubeconfig(&env.dc, NS, "lease-only", &lease_only).await;
    optest::service_account::write_kubeconfig(&env.dc, NS, "varroa-operator", &operator).await;

    // 1. The start-up list is refused: the process says why, releases the Lease, exits 1.
    // 2. The next replica takes it at once (well before the 15 s a held Lease takes to expire),
    //    is ready and brings a Controller to Running; someone else holds the Lease now: op-b
    //    stops at once and exits 1.
    let replicas = Replicas::new(env.admin.clone(), NS, LEASE, "varroa_reconciles_total");
    let a = spawn("op-a", ARGS, &lease_only);
    replicas
        .cannot_start_then_lost_lease(
            a,
            |log| log.contains("cannot list Controllers"),
            || spawn("op-b", ARGS, &operator),
            async |b| {
                env.create("ci", serde_json::json!({})).await;
                env.wait_phase("ci", ControllerPhase::Running).await;
                let (code, _) = b.get("/readyz").await;
                assert_eq!(code, 200, "the leader is ready");
            },
        )
        .await;

    // 3. A third replica takes over and reconciles; SIGTERM: exit 0, the Lease released.
    let mut c = spawn("op-c", ARGS, &operator);
    replicas.wait_holder("taken by op-c", &[&c], |h| h.starts_with("op-c_")).await;
    env.touch("ci").await;
    let reconciled = optest::wait::poll(WAIT, Duration::from_millis(100), || async {
        (sample(&c.metrics().await, "varroa_reconciles_total") > 0.0).then_some(())
    })
    .await;
    assert!(reconciled.is_some(), "op-c never reconciled:\n{}", c.log_text());
    c.terminate();
    let status = c.wait_exit(Duration::from_secs(35)).await;
    let log = c.log_text();
    assert!(status.success(), "SIGTERM ends the process with 0: {status}\n{log}");
    assert!(log.contains("released the lease"), "{log}");
    let lease = replicas.lease().await;
    assert_eq!(holder(&lease), "", "SIGTERM releases the Lease: {lease:#?}");
    assert!(!c.running());
}
