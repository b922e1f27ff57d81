//! The leader election Lease, as the tests of two replicas read and take it.

use crate::process::{Proc, logs};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};

/// The Lease's holder (`""` when released).
pub fn holder(l: &Lease) -> String {
    l.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default()
}

/// The Lease's `leaseTransitions`.
pub fn transitions(l: &Lease) -> i32 {
    l.spec.as_ref().and_then(|s| s.lease_transitions).unwrap_or(0)
}

/// Wait until the Lease `name` exists and its holder satisfies `ok`; on timeout, fail with the
/// Lease and the logs of `procs`.
pub async fn wait_holder(
    leases: &Api<Lease>,
    name: &str,
    what: &str,
    procs: &[&Proc],
    ok: impl Fn(&str) -> bool,
) -> Lease {
    let cond = move |l: Option<&Lease>| l.is_some_and(|l| ok(&holder(l)));
    crate::wait::wait_for_explained(leases.clone(), name, &format!("the Lease {what}"), cond, |now| {
        format!("the Lease: {now:#?}\n{}", logs(procs))
    })
    .await
}

/// Someone else holds the Lease now (`holder`, renewed now, for one second), as when another
/// replica took it while this one could not renew.
pub async fn take_over(leases: &Api<Lease>, name: &str, holder: &str) {
    let mut lease = leases.get(name).await.unwrap_or_else(|e| panic!("get the Lease {name}: {e}"));
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(holder.into());
    spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    spec.lease_duration_seconds = Some(1);
    leases
        .replace(name, &PostParams::default(), &lease)
        .await
        .unwrap_or_else(|e| panic!("write another holder into the Lease {name}: {e}"));
}

/// A ServiceAccount `namespace/name` that may use the leader Leases of `namespace` and nothing
/// else (its Role and RoleBinding), as YAML: a replica with it leads but cannot start its
/// controller.
pub fn lease_only_account(namespace: &str, name: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {name}, namespace: {namespace}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {name}, namespace: {namespace}}}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}
subjects:
- {{kind: ServiceAccount, name: {name}, namespace: {namespace}}}
"#
    )
}
