//! Two replicas of an operator with leader election, as its Deployment runs them: the scenarios
//! both operators' install tests play (client-go's `leaderelection` behaviour, which opkit's
//! `leader` follows). What each operator serves (a preview, a Controller) is the test's: it
//! passes a `serve` step, given the replicas whose logs explain a failure.

use crate::WAIT;
use crate::kubectl::Kubectl;
use crate::lease::{holder, take_over, transitions};
use crate::process::{Proc, logs};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use std::time::{Duration, Instant};

/// When [`Replicas::elect_and_fail_over`] asks the test to serve something.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// The first leader serves.
    Leader,
    /// The standby has taken over (what the first leader served must stay served).
    AfterTakeover,
}

/// An operator's leader election in one namespace.
pub struct Replicas {
    client: Client,
    namespace: String,
    lease: String,
    reconciles: String,
}

impl Replicas {
    /// The Lease `lease` in `namespace`, read with `client` (the admin's); `reconciles` is the
    /// operator's reconcile counter on /metrics (`vesper_reconciles_total`).
    pub fn new(client: Client, namespace: &str, lease: &str, reconciles: &str) -> Replicas {
        Replicas {
            client,
            namespace: namespace.to_string(),
            lease: lease.to_string(),
            reconciles: reconciles.to_string(),
        }
    }

    pub fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The Lease as it is.
    pub async fn lease(&self) -> Lease {
        self.leases().get(&self.lease).await.unwrap_or_else(|e| panic!("get the Lease {}: {e}", self.lease))
    }

    /// Wait until the Lease's holder satisfies `ok`; on timeout, fail with the Lease and the
    /// logs of `procs`.
    pub async fn wait_holder(&self, what: &str, procs: &[&Proc], ok: impl Fn(&str) -> bool) -> Lease {
        crate::lease::wait_holder(&self.leases(), &self.lease, what, procs, ok).await
    }

    async fn reconciled(&self, p: &Proc) -> f64 {
        crate::metrics::sample(&p.metrics().await, &self.reconciles)
    }

    /// Two replicas `a` and `b` (started with leader election on, named as pods are: the Lease
    /// names its holder `<name>_<suffix>`): one leads and serves (`serve(Turn::Leader)`); only it
    /// reconciles, both are live and ready, the other waits. SIGTERM to the leader: it exits 0 and
    /// releases the Lease, the standby takes over at once (`leaseTransitions` counts it) and
    /// serves (`serve(Turn::AfterTakeover)`).
    pub async fn elect_and_fail_over(&self, a: Proc, b: Proc, serve: impl AsyncFn(Turn, &[&Proc])) {
        let (pa, pb) = (format!("{}_", a.name), format!("{}_", b.name));
        let lease = self
            .wait_holder("held by one of the replicas", &[&a, &b], |h| h.starts_with(&pa) || h.starts_with(&pb))
            .await;
        let (mut leader, follower) = if holder(&lease).starts_with(&pa) { (a, b) } else { (b, a) };
        serve(Turn::Leader, &[&leader, &follower]).await;

        // Only one leads: the Lease names it, it alone reconciled; the standby is ready but idle.
        let lease = self.lease().await;
        assert!(holder(&lease).starts_with(&format!("{}_", leader.name)), "the Lease moved: {lease:#?}");
        for p in [&leader, &follower] {
            assert_eq!(p.get("/readyz").await.0, 200, "{} is ready (a standby too)", p.name);
            assert_eq!(p.get("/healthz").await.0, 200, "{} is live", p.name);
        }
        let n = self.reconciled(&leader).await;
        assert!(n > 0.0, "the leader reconciled: {n}\n{}", logs(&[&leader]));
        let n = self.reconciled(&follower).await;
        assert_eq!(n, 0.0, "the standby reconciled:\n{}", logs(&[&follower]));
        let (leader_log, follower_log) = (leader.log_text(), follower.log_text());
        assert!(leader_log.contains("successfully acquired lease"), "{}", logs(&[&leader]));
        assert!(follower_log.contains("waiting for the leader lease"), "{}", logs(&[&follower]));
        assert!(!follower_log.contains("successfully acquired lease"), "two leaders:\n{}", logs(&[&leader, &follower]));

        // Stop the leader as the kubelet does: it stops, releases the Lease, exits 0; the standby
        // takes over and serves.
        let before = transitions(&lease);
        leader.terminate();
        let status = leader.wait_exit(WAIT).await;
        assert!(status.success(), "the leader exits 0 on SIGTERM: {status}\n{}", logs(&[&leader]));
        assert!(
            leader.log_text().contains("released the lease"),
            "the leader releases the Lease on SIGTERM:\n{}",
            logs(&[&leader])
        );
        let prefix = format!("{}_", follower.name);
        let lease =
            self.wait_holder("taken over by the standby", &[&leader, &follower], |h| h.starts_with(&prefix)).await;
        let now = transitions(&lease);
        assert!(now > before, "leaseTransitions counts the takeover: {before} then {now}");
        serve(Turn::AfterTakeover, &[&leader, &follower]).await;
        assert!(follower.log_text().contains("successfully acquired lease"), "{}", logs(&[&follower]));
        let n = self.reconciled(&follower).await;
        assert!(n > 0.0, "the new leader reconciles: {n}\n{}", logs(&[&follower]));
    }

    /// The operator's Deployment runs in the cluster (devcluster's process runtime): its two pods
    /// (label `app.kubernetes.io/name=<app>`) are there, one of them leads (POD_NAME comes from the
    /// downward API), it serves (`serve`), and `kubectl logs` of the pods shows that it led.
    pub async fn a_pod_leads(&self, kubectl: &Kubectl, app: &str, serve: impl AsyncFn()) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let listed = pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={app}")))
            .await
            .unwrap_or_else(|e| panic!("list the pods of {app}: {e}"));
        let names: Vec<String> = listed.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
        assert_eq!(names.len(), 2, "two replicas: {names:?}");
        self.wait_holder("held by a pod of the Deployment", &[], |h| {
            names.iter().any(|n| h.starts_with(&format!("{n}_")))
        })
        .await;
        serve().await;
        // What the operator said, as a user reads it.
        let mut said = vec![];
        for n in &names {
            said.push(kubectl.ok(&["logs", "-n", &self.namespace, n]).await.stdout);
        }
        let said = said.join("\n");
        assert!(said.contains("successfully acquired lease"), "kubectl logs of the operator pods:\n{said}");
    }

    /// Processes that die honestly (issue 10, item 4). `a` runs as a ServiceAccount that may use
    /// the Lease and nothing else (see [`crate::lease::lease_only_account`]): it leads, its
    /// controller cannot start (the start-up list is refused: its log `says_why`), it releases the
    /// Lease and exits non-zero. The next replica (`start_next`, with the operator's rights) takes
    /// the Lease at once (well within the 15 s a held Lease takes to expire) and serves
    /// (`serve`); when someone else writes the Lease (it is lost) it stops at once, non-zero.
    pub async fn cannot_start_then_lost_lease(
        &self,
        mut a: Proc,
        says_why: impl Fn(&str) -> bool,
        start_next: impl FnOnce() -> Proc,
        serve: impl AsyncFn(&Proc),
    ) {
        let status = a.wait_exit(WAIT).await;
        let log = a.log_text();
        assert!(!status.success(), "a controller that cannot start ends the process with an error: {status}\n{log}");
        assert!(log.contains("successfully acquired lease"), "it led first:\n{log}");
        assert!(says_why(&log), "it says why:\n{log}");
        assert!(log.contains("released the lease"), "it released the Lease:\n{log}");
        let lease = self.lease().await;
        assert_eq!(holder(&lease), "", "the Lease is released, not left to expire: {lease:#?}");

        let started = Instant::now();
        let mut b = start_next();
        let prefix = format!("{}_", b.name);
        self.wait_holder(&format!("taken by {}", b.name), &[&b], |h| h.starts_with(&prefix)).await;
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
        serve(&b).await;

        // Someone else holds the Lease now: b stops at once and exits 1.
        take_over(&self.leases(), &self.lease, "intruder").await;
        let lost_at = Instant::now();
        let status = b.wait_exit(Duration::from_secs(20)).await;
        let log = b.log_text();
        assert!(!status.success(), "a lost Lease ends the process with an error: {status}\n{log}");
        assert!(lost_at.elapsed() < Duration::from_secs(10), "promptly: {:?}\n{log}", lost_at.elapsed());
        assert!(log.contains("lost the leader lease"), "it says why:\n{log}");
    }
}
