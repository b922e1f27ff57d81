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

mod binary;
mod support;

use binary::{Proc, blocking, holder, http_get, sample, service_account_kubeconfig, spawn};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};
use support::{Env, WAIT, apply_yaml};
use varroa_api::ControllerPhase;

const NS: &str = "varroa-system";
const LEASE: &str = "varroa-operator";
const ARGS: &[&str] = &["--leader-elect=true", "--leader-election-namespace=varroa-system"];

/// A ServiceAccount that may use the leader Lease and nothing else.
const LEASE_ONLY: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: lease-only, namespace: varroa-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: lease-only, namespace: varroa-system}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lease-only, namespace: varroa-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: lease-only}
subjects:
- {kind: ServiceAccount, name: lease-only, namespace: varroa-system}
"#;

async fn wait_holder(leases: &Api<Lease>, what: &str, procs: &[&Proc], ok: impl Fn(&str) -> bool) -> Lease {
    let deadline = Instant::now() + WAIT;
    loop {
        let l = leases.get_opt(LEASE).await.expect("get the Lease");
        if let Some(l) = l.filter(|l| ok(&holder(l))) {
            return l;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = procs.iter().map(|p| format!("--- {} ---\n{}", p.name, p.log_text())).collect();
            panic!("the Lease: {what}: {:#?}\n{}", leases.get_opt(LEASE).await, logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_controller_or_lost_lease_exits_non_zero_and_sigterm_exits_zero_releasing_the_lease() {
    let env = Env::cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    apply_yaml(&env.admin, LEASE_ONLY).await;
    let (lease_only, operator) = (dir.path().join("lease-only.kubeconfig"), dir.path().join("operator.kubeconfig"));
    service_account_kubeconfig(&env.dc, NS, "lease-only", &lease_only).await;
    service_account_kubeconfig(&env.dc, NS, "varroa-operator", &operator).await;
    let leases: Api<Lease> = Api::namespaced(env.admin.clone(), NS);

    // 1. The start-up list is refused: the process says why, releases the Lease, exits 1.
    let mut a = spawn("op-a", ARGS, &lease_only, dir.path());
    let status = blocking(|| a.wait_exit(WAIT));
    let log = a.log_text();
    assert!(!status.success(), "a controller that cannot start ends the process with an error: {status}\n{log}");
    assert!(log.contains("successfully acquired lease"), "it led first:\n{log}");
    assert!(log.contains("cannot list Controllers"), "it says why:\n{log}");
    assert!(log.contains("released the lease"), "it released the Lease:\n{log}");
    let lease = leases.get(LEASE).await.expect("the Lease");
    assert_eq!(holder(&lease), "", "the Lease is released, not left to expire: {lease:#?}");

    // 2. The next replica takes it at once (well before the 15 s a held Lease takes to expire).
    let started = Instant::now();
    let mut b = spawn("op-b", ARGS, &operator, dir.path());
    wait_holder(&leases, "taken by op-b", &[&b], |h| h.starts_with("op-b_")).await;
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    env.create("ci", serde_json::json!({})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    let addr = blocking(|| b.health_addr(WAIT));
    let (code, _) = blocking(|| http_get(&addr, "/readyz"));
    assert_eq!(code, 200, "the leader is ready");

    // Someone else holds the Lease now: op-b stops at once and exits 1.
    let mut lease = leases.get(LEASE).await.expect("the Lease");
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    spec.lease_duration_seconds = Some(1);
    leases.replace(LEASE, &PostParams::default(), &lease).await.expect("write another holder");
    let lost_at = Instant::now();
    let status = blocking(|| b.wait_exit(Duration::from_secs(20)));
    let log = b.log_text();
    assert!(!status.success(), "a lost Lease ends the process with an error: {status}\n{log}");
    assert!(lost_at.elapsed() < Duration::from_secs(10), "promptly: {:?}\n{log}", lost_at.elapsed());
    assert!(log.contains("lost the leader lease"), "it says why:\n{log}");

    // 3. A third replica takes over and reconciles; SIGTERM: exit 0, the Lease released.
    let mut c = spawn("op-c", ARGS, &operator, dir.path());
    wait_holder(&leases, "taken by op-c", &[&c], |h| h.starts_with("op-c_")).await;
    let addr = blocking(|| c.health_addr(WAIT));
    env.touch("ci").await;
    let deadline = Instant::now() + WAIT;
    while sample(&blocking(|| http_get(&addr, "/metrics")).1, "varroa_reconciles_total") == 0.0 {
        assert!(Instant::now() < deadline, "op-c never reconciled:\n{}", c.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.terminate();
    let status = blocking(|| c.wait_exit(Duration::from_secs(35)));
    let log = c.log_text();
    assert!(status.success(), "SIGTERM ends the process with 0: {status}\n{log}");
    assert!(log.contains("released the lease"), "{log}");
    let lease = leases.get(LEASE).await.expect("the Lease");
    assert_eq!(holder(&lease), "", "SIGTERM releases the Lease: {lease:#?}");
    assert!(!c.running());
}
