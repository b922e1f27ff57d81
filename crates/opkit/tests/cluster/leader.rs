//! Leader election on a real Lease: one leader, hand-over on release and on expiry, fencing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Api;
use kube::api::PostParams;
use opkit::leader::{Attempt, LeaderElector, LeaseTiming};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::{cluster, eventually};

const NS: &str = "default";
const LEASE: &str = "opkit-test";

/// Millisecond retries; a lease of two seconds (the API counts whole seconds) leaves room for a
/// loaded CI machine without making expiry tests slow.
fn fast() -> LeaseTiming {
    LeaseTiming {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(800),
        retry_period: Duration::from_millis(20),
    }
}

struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<LeaderElector>,
    leading: watch::Receiver<bool>,
}

fn start(mut elector: LeaderElector) -> Running {
    let leading = elector.subscribe();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        elector
            .run(async {
                let _ = stopped.await;
            })
            .await;
        elector
    });
    Running { stop, task, leading }
}

impl Running {
    fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    async fn stop(self) -> anyhow::Result<LeaderElector> {
        let _ = self.stop.send(());
        Ok(self.task.await?)
    }
}

async fn spec(api: &Api<Lease>) -> anyhow::Result<LeaseSpec> {
    api.get(LEASE).await?.spec.context("lease without spec")
}

/// Which of the two leads, once exactly one does.
async fn one_leader(a: &Running, b: &Running, within: Duration) -> anyhow::Result<usize> {
    eventually(within, "a leader", || async {
        match (a.is_leader(), b.is_leader()) {
            (true, false) => Some(0),
            (false, true) => Some(1),
            _ => None,
        }
    })
    .await
}

/// Watches both flags and counts every moment at which both said "leader".
fn monitor(mut a: watch::Receiver<bool>, mut b: watch::Receiver<bool>) -> (Arc<AtomicUsize>, Arc<AtomicBool>) {
    let both = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (both2, done2) = (both.clone(), done.clone());
    tokio::spawn(async move {
        while !done2.load(Ordering::SeqCst) {
            tokio::select! {
                r = a.changed() => if r.is_err() { break },
                r = b.changed() => if r.is_err() { break },
            }
            if *a.borrow() && *b.borrow() {
                both2.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (both, done)
}

#[tokio::test]
async fn exactly_one_of_two_leads_and_release_hands_over() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let leases: Api<Lease> = Api::namespaced(dc.client(), NS);
    let a = start(LeaderElector::new(dc.client(), NS, LEASE, "a", fast())?);
    let b = start(LeaderElector::new(dc.client(), NS, LEASE, "b", fast())?);
    let first = one_leader(&a, &b, Duration::from_secs(5)).await?;
    let ids = ["a", "b"];

    // The record is client-go's.
    let s = spec(&leases).await?;
    assert_eq!(s.holder_identity.as_deref(), Some(ids[first]));
    assert_eq!(s.lease_duration_seconds, Some(2));
    assert_eq!(s.lease_transitions, Some(0), "created by the first leader");
    assert!(s.acquire_time.is_some());
    let renewed = s.renew_time.clone().context("renewTime")?;

    // For a while (many renewals), still exactly one leader, and it renews.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!(a.is_leader() && b.is_leader()), "never both leaders");
        assert!(a.is_leader() || b.is_leader(), "a healthy leader keeps leading");
    }
    let s2 = spec(&leases).await?;
    assert!(s2.renew_time.context("renewTime")? > renewed, "the leader renews");
    assert_eq!(s2.acquire_time, s.acquire_time, "renewing keeps acquireTime");

    // Stop the leader: it releases, the other takes over well before the lease could expire.
    let (leader, other) = if first == 0 { (a, b) } else { (b, a) };
    let stopped_at = tokio::time::Instant::now();
    let old = leader.stop().await?;
    assert!(!old.is_leader());
    eventually(Duration::from_secs(5), "the other to lead", || async { other.is_leader().then_some(()) }).await?;
    assert!(stopped_at.elapsed() < Duration::from_millis(1500), "took over after release, not expiry");
    let s3 = spec(&leases).await?;
    assert_eq!(s3.holder_identity.as_deref(), Some(ids[1 - first]));
    assert_eq!(s3.lease_transitions, Some(1));

    // The last one releases too: the holder is cleared.
    let last = other.stop().await?;
    assert!(!last.is_leader());
    let s4 = spec(&leases).await?;
    assert_eq!(s4.holder_identity.as_deref(), Some(""));
    assert_eq!(s4.lease_transitions, Some(1), "release keeps the count");
    Ok(())
}

#[tokio::test]
async fn a_crashed_leaders_lease_expires_and_is_taken_over() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let leases: Api<Lease> = Api::namespaced(dc.client(), NS);
    let a = start(LeaderElector::new(dc.client(), NS, LEASE, "a", fast())?);
    eventually(Duration::from_secs(5), "a to lead", || async { a.is_leader().then_some(()) }).await?;
    let b = start(LeaderElector::new(dc.client(), NS, LEASE, "b", fast())?);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!b.is_leader(), "b waits while a renews");

    // "Crash" a: its task dies mid-flight, nothing is released.
    let a_flag = a.leading.clone();
    a.task.abort();
    let crashed_at = tokio::time::Instant::now();
    eventually(Duration::from_secs(1), "a's flag to drop", || async { (!*a_flag.borrow()).then_some(()) }).await?;
    assert_eq!(spec(&leases).await?.holder_identity.as_deref(), Some("a"), "not released");

    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!b.is_leader(), "b respects the two-second lease");
    eventually(Duration::from_secs(5), "b to take over", || async { b.is_leader().then_some(()) }).await?;
    assert!(crashed_at.elapsed() >= Duration::from_millis(1900), "only after expiry: {:?}", crashed_at.elapsed());
    let s = spec(&leases).await?;
    assert_eq!(s.holder_identity.as_deref(), Some("b"));
    assert_eq!(s.lease_transitions, Some(1));
    b.stop().await?;
    Ok(())
}

#[tokio::test]
async fn never_two_leaders_over_many_hand_overs() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let leases: Api<Lease> = Api::namespaced(dc.client(), NS);
    let mut timing = fast();
    timing.retry_period = Duration::from_millis(10);
    timing.renew_deadline = Duration::from_millis(200);
    let a = LeaderElector::new(dc.client(), NS, LEASE, "a", timing)?;
    let b = LeaderElector::new(dc.client(), NS, LEASE, "b", timing)?;
    let (both, done) = monitor(a.subscribe(), b.subscribe());
    let mut running = [start(a), start(b)];

    let rounds = 20;
    let mut leader = one_leader(&running[0], &running[1], Duration::from_secs(5)).await?;
    for round in 0..rounds {
        // Stop the leader, wait for the other to lead, restart the old one as a candidate.
        let [r0, r1] = running;
        let (stopping, staying) = if leader == 0 { (r0, r1) } else { (r1, r0) };
        let elector = stopping.stop().await?;
        eventually(Duration::from_secs(5), "hand-over", || async { staying.is_leader().then_some(()) })
            .await
            .with_context(|| format!("round {round}"))?;
        let restarted = start(elector);
        running = if leader == 0 { [restarted, staying] } else { [staying, restarted] };
        leader = 1 - leader;
    }
    let s = spec(&leases).await?;
    assert_eq!(s.holder_identity.as_deref(), Some(["a", "b"][leader]));
    assert_eq!(s.lease_transitions, Some(rounds), "one transition per hand-over, no extra acquisitions");
    done.store(true, Ordering::SeqCst);
    let [r0, r1] = running;
    r0.stop().await?;
    r1.stop().await?;
    assert_eq!(both.load(Ordering::SeqCst), 0, "never both leaders");
    Ok(())
}

#[tokio::test]
async fn concurrent_attempts_are_fenced_by_resource_version() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let leases: Api<Lease> = Api::namespaced(dc.client(), NS);
    let mut a = LeaderElector::new(dc.client(), NS, LEASE, "a", fast())?;
    let mut b = LeaderElector::new(dc.client(), NS, LEASE, "b", fast())?;
    let rounds = 30;
    let mut conflicts = 0;
    for round in 0..rounds {
        // Both read the free (or absent) Lease, then both write: the server takes one.
        let (ra, rb) = tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew());
        let (ra, rb) = (ra?, rb?);
        assert!(ra.is_leader() != rb.is_leader(), "round {round}: exactly one wins: {ra:?} {rb:?}");
        conflicts += [&ra, &rb].iter().filter(|r| ***r == Attempt::Conflict).count();
        let winner = if ra.is_leader() { &mut a } else { &mut b };
        assert!(winner.release().await?, "round {round}: the winner releases");
    }
    assert!(conflicts > 0, "the two writes raced at least once");
    let s = spec(&leases).await?;
    assert_eq!(s.holder_identity.as_deref(), Some(""));
    assert_eq!(s.lease_transitions, Some(rounds - 1), "exactly one acquisition per round");
    Ok(())
}

#[tokio::test]
async fn a_leader_whose_lease_is_taken_steps_down_then_campaigns_again() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let leases: Api<Lease> = Api::namespaced(dc.client(), NS);
    let a = start(LeaderElector::new(dc.client(), NS, LEASE, "a", fast())?);
    eventually(Duration::from_secs(5), "a to lead", || async { a.is_leader().then_some(()) }).await?;

    // Someone else writes the Lease over a's head (as an admin or a split brain would).
    let mut lease = leases.get(LEASE).await?;
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some("intruder".into());
    spec.lease_transitions = spec.lease_transitions.map(|t| t + 1);
    leases.replace(LEASE, &PostParams::default(), &lease).await?;

    let taken_at = tokio::time::Instant::now();
    eventually(Duration::from_secs(1), "a to step down", || async { (!a.is_leader()).then_some(()) }).await?;
    assert!(taken_at.elapsed() < Duration::from_millis(800), "at its next renewal, within renew_deadline");

    // The intruder never renews: once its lease (a's two seconds) expires, a leads again.
    eventually(Duration::from_secs(5), "a to lead again", || async { a.is_leader().then_some(()) }).await?;
    let s = leases.get(LEASE).await?.spec.context("spec")?;
    assert_eq!(s.holder_identity.as_deref(), Some("a"));
    assert_eq!(s.lease_transitions, Some(2));
    a.stop().await?;
    Ok(())
}

#[tokio::test]
async fn works_with_a_service_account_holding_only_the_documented_rbac() -> anyhow::Result<()> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    use kube::api::ObjectMeta;

    let dc = cluster().await?;
    let admin = dc.client();
    let meta = |name: &str| ObjectMeta { name: Some(name.into()), namespace: Some(NS.into()), ..Default::default() };
    let pp = PostParams::default();
    Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .create(&pp, &ServiceAccount { metadata: meta("operator"), ..Default::default() })
        .await?;
    let rules = |verbs: &[&str]| {
        Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leases".into()]),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        }])
    };
    let roles = Api::<Role>::namespaced(admin.clone(), NS);
    roles.create(&pp, &Role { metadata: meta("leader-election"), rules: rules(&["get", "create"]) }).await?;
    Api::<RoleBinding>::namespaced(admin.clone(), NS)
        .create(
            &pp,
            &RoleBinding {
                metadata: meta("leader-election"),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: "leader-election".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "operator".into(),
                    namespace: Some(NS.into()),
                    ..Default::default()
                }]),
            },
        )
        .await?;
    let tr: TokenRequest = Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .create_subresource(
            "token",
            "operator",
            &pp,
            &TokenRequest {
                metadata: Default::default(),
                spec: TokenRequestSpec { audiences: vec![], ..Default::default() },
                status: None,
            },
        )
        .await?;
    let token = tr.status.context("token status")?.token;
    let kubeconfig: String = dc
        .kubeconfig_yaml()
        .lines()
        .map(|l| if l.trim_start().starts_with("token:") { format!("    token: {token}\n") } else { format!("{l}\n") })
        .collect();
    let sa = devcluster::client_for(&kubeconfig).await?;

    // get + create: the first acquisition (a create) works, the renewal (an update) is forbidden.
    let mut e = LeaderElector::new(sa.clone(), NS, LEASE, "sa", fast())?;
    assert_eq!(e.try_acquire_or_renew().await?, Attempt::Acquired);
    let err = e.try_acquire_or_renew().await.expect_err("update is not granted");
    assert_eq!(err.api_code(), Some(403), "{err}");

    // With update as well, as the module documents, it renews.
    let mut role = roles.get("leader-election").await?;
    role.rules = rules(&["get", "create", "update"]);
    roles.replace("leader-election", &pp, &role).await?;
    assert_eq!(e.try_acquire_or_renew().await?, Attempt::Renewed);
    assert!(e.release().await?);
    Ok(())
}
