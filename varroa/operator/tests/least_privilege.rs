//! Least privilege for the Varroa operator (issue 10, item 3), on devcluster with the real
//! kubectl:
//!
//! - `kubectl apply -f deploy/varroa/` installs the RBAC, the agents' ClusterRole and the
//!   admission policy; `kubectl auth can-i --as=system:serviceaccount:varroa-system:varroa-operator`
//!   shows that each right removed from the operator is gone (pods create, exec, logs, Roles,
//!   binding any ClusterRole but varroa-jenkins-agents, reading or listing Secrets, ...) and that
//!   what it needs is there;
//! - writes RBAC allows but the policy refuses are denied (a generic Secret, a RoleBinding to
//!   cluster-admin or to another ServiceAccount, objects without Varroa's label or owner, anything
//!   in kube-system, a StatefulSet mounting another Secret), while a well-formed object passes;
//! - the operator, as that ServiceAccount, still provisions a Controller end to end;
//! - ownership: a Controller named like a foreign ServiceAccount, ConfigMap, Service or Secret is
//!   Failed with reason OwnershipConflict and the foreign object keeps its resourceVersion;
//! - Ingress: annotations pass only through --ingress-annotation-allowlist, and a host another
//!   Controller's Ingress serves is refused with IngressHostConflict (no Ingress written).

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use optest::kubectl::Kubectl;
use serde_json::json;
use support::*;
use varroa_api::ControllerPhase;
use varroa_api::lifecycle::{REASON_OWNERSHIP_CONFLICT, condition};
use varroa_operator::Config;

const AS: &str = "--as=system:serviceaccount:varroa-system:varroa-operator";
/// The policy's name, as its denials cite it.
const POLICY: &str = "ValidatingAdmissionPolicy 'varroa-operator-scope'";

/// `kubectl auth can-i VERB RESOURCE [--subresource SUB] [-n NS] --as=<the operator>`, with
/// `resource` written `pods:exec` for a subresource (`pods/exec` would name a pod "exec").
async fn can_i(kubectl: &Kubectl, verb: &str, resource: &str, ns: Option<&str>) -> bool {
    let (resource, sub) = resource.split_once(':').map_or((resource, None), |(r, s)| (r, Some(s)));
    let sub = sub.map(|s| format!("--subresource={s}"));
    let mut args = vec!["auth", "can-i", verb, resource, AS];
    args.extend(sub.as_deref());
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    let out = kubectl.run(&args).await;
    let answer = out.stdout.trim();
    assert!(answer == "yes" || answer == "no", "{out}");
    assert_eq!(out.success(), answer == "yes", "kubectl auth can-i exits 0 exactly for yes");
    out.success()
}

/// Creates `yaml` as the operator with a server-side dry run; returns the error text or `None`.
async fn create_as_operator(kubectl: &Kubectl, yaml: &str) -> Option<String> {
    let out = kubectl.run_with_input(&["create", "--dry-run=server", "-f", "-", AS], Some(yaml)).await;
    if out.success() { None } else { Some(format!("{}{}", out.stdout, out.stderr)) }
}

/// Creating `yaml` as the operator is refused by the policy, saying `says`.
async fn denied(kubectl: &Kubectl, what: &str, yaml: &str, says: &str) {
    let err = create_as_operator(kubectl, yaml).await.unwrap_or_else(|| panic!("{what}: allowed"));
    assert!(err.contains(POLICY) && err.contains(says), "{what}: {err}");
}

/// Labels and an owner reference as the operator puts them on what it makes for Controller `ci`.
fn varroa_meta(name: &str, ns: &str) -> String {
    format!(
        r#"
  name: {name}
  namespace: {ns}
  labels:
    app.kubernetes.io/managed-by: varroa-operator
    varroa.dev/controller: ci
  ownerReferences:
  - apiVersion: varroa.dev/v1alpha1
    kind: Controller
    name: ci
    uid: 00000000-0000-0000-0000-000000000001
    controller: true"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_has_only_what_it_needs_and_still_provisions_a_controller() {
    let mut env = Env::cluster().await;
    let kubectl = Kubectl::new(env.dc.kubeconfig_path());
    // Install as a user does: every manifest of deploy/varroa/ (RBAC, the agents' ClusterRole,
    // the admission policy, the operator's Deployment and NetworkPolicy).
    let deploy = repo("deploy/varroa").display().to_string();
    let out = kubectl.run(&["apply", "-f", &deploy]).await;
    assert!(out.success(), "kubectl apply -f deploy/varroa/: {out}");
    let stdout = out.stdout;
    assert!(
        stdout.contains("validatingadmissionpolicy.admissionregistration.k8s.io/varroa-operator-scope"),
        "{stdout}"
    );
    assert!(stdout.contains("clusterrole.rbac.authorization.k8s.io/varroa-jenkins-agents"), "{stdout}");

    {
        // Rights removed: each answers no, in a tenant namespace and cluster-wide.
        let ns = Some(TEAM);
        for (verb, resource, where_) in [
            ("create", "pods", ns),
            ("create", "pods", None),
            ("create", "pods:exec", ns),
            ("get", "pods:exec", ns),
            ("get", "pods:log", ns),
            ("create", "pods:eviction", ns),
            ("patch", "pods", ns),
            ("list", "events", ns),
            ("create", "roles", ns),
            ("patch", "roles", ns),
            ("update", "roles", ns),
            ("list", "roles", ns),
            ("watch", "roles", None),
            ("create", "clusterroles", None),
            ("escalate", "clusterroles", None),
            ("bind", "clusterroles/cluster-admin", None),
            ("bind", "clusterroles/admin", None),
            ("bind", "clusterroles", None),
            ("bind", "roles", ns),
            ("create", "clusterrolebindings", None),
            ("get", "secrets", ns),
            ("list", "secrets", ns),
            ("watch", "secrets", ns),
            ("delete", "secrets", ns),
            ("list", "secrets", None),
            ("get", "secrets/default-token", Some("kube-system")),
            ("get", "secrets/other", Some("varroa-system")),
            ("create", "serviceaccounts:token", ns),
            ("impersonate", "users", None),
            ("delete", "namespaces", None),
            ("delete", "statefulsets", ns),
            ("*", "*", None),
        ] {
            assert!(
                !can_i(&kubectl, verb, resource, where_).await,
                "the operator can still {verb} {resource} in {}",
                where_.unwrap_or("every namespace")
            );
        }
        // What it needs stays.
        for (verb, resource, where_) in [
            ("bind", "clusterroles/varroa-jenkins-agents", None),
            ("create", "rolebindings", ns),
            ("update", "rolebindings", ns),
            ("get", "secrets/varroa-gateway-ca", Some("varroa-system")),
            ("watch", "secrets/varroa-gateway-ca", Some("varroa-system")),
            ("list", "secrets/varroa-gateway-ca", Some("varroa-system")),
            ("create", "secrets", ns),
            ("patch", "secrets", ns),
            ("update", "secrets", ns),
            ("delete", "pods", ns),
            ("watch", "pods", None),
            ("create", "statefulsets.apps", ns),
            ("update", "statefulsets.apps", ns),
            ("create", "ingresses.networking.k8s.io", ns),
            ("patch", "controllers.varroa.dev:status", ns),
            ("create", "events.events.k8s.io", ns),
            ("update", "leases.coordination.k8s.io", Some("varroa-system")),
        ] {
            assert!(can_i(&kubectl, verb, resource, where_).await, "the operator lost {verb} {resource}");
        }

        // Writes RBAC allows and the policy refuses.
        let out = kubectl
            .run(&["create", "secret", "generic", "x", "-n", TEAM, "--from-literal=a=b", "--dry-run=server", AS])
            .await;
        assert!(!out.success() && out.stderr.contains(POLICY), "kubectl create secret generic as the operator: {out}");
        let m = varroa_meta("ci-mite-tls", TEAM);
        denied(
            &kubectl,
            "an Opaque Secret of Varroa's name",
            &format!("apiVersion: v1\nkind: Secret\nmetadata:{m}\ntype: Opaque\n"),
            "kubernetes.io/tls",
        )
        .await;
        let m = varroa_meta("stolen", TEAM);
        denied(&kubectl,
            "a TLS Secret of another name",
            &format!(
                "apiVersion: v1\nkind: Secret\nmetadata:{m}\ntype: kubernetes.io/tls\nstringData: {{tls.crt: \"a\", tls.key: \"b\"}}\n"
            ),
            "<controller>-mite-tls",
        ).await;
        let binding = |name: &str, role: &str, sa: &str| {
            let m = varroa_meta(name, TEAM);
            format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:{m}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\nsubjects:\n- {{kind: ServiceAccount, name: {sa}, namespace: {TEAM}}}\n"
            )
        };
        denied(
            &kubectl,
            "a RoleBinding to cluster-admin",
            &binding("ci-agents", "cluster-admin", "ci"),
            "varroa-jenkins-agents",
        )
        .await;
        denied(
            &kubectl,
            "the agents' ClusterRole bound to another ServiceAccount",
            &binding("ci-agents", "varroa-jenkins-agents", "default"),
            "ServiceAccount of its Controller",
        )
        .await;
        denied(
            &kubectl,
            "a ConfigMap without Varroa's label",
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ci, namespace: {TEAM}}}\n"),
            "managed-by=varroa-operator",
        )
        .await;
        let m = varroa_meta("ci", "kube-system");
        denied(
            &kubectl,
            "a Varroa ConfigMap in kube-system",
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:{m}\n"),
            "only Events, its Lease and its checkpoint",
        )
        .await;
        let sts = |sa: &str, secret: &str| {
            let m = varroa_meta("ci", TEAM);
            format!(
                r#"apiVersion: apps/v1
kind: StatefulSet
metadata:{m}
spec:
  serviceName: ci-headless
  selector: {{matchLabels: {{varroa.dev/controller: ci}}}}
  template:
    metadata: {{labels: {{varroa.dev/controller: ci}}}}
    spec:
      serviceAccountName: {sa}
      containers:
      - {{name: jenkins, image: jenkins/jenkins:lts}}
      volumes:
      - {{name: tls, secret: {{secretName: {secret}}}}}
"#
            )
        };
        denied(&kubectl, "a StatefulSet mounting another Secret", &sts("ci", "db-password"), "no Secret but").await;
        denied(
            &kubectl,
            "a StatefulSet running as another ServiceAccount",
            &sts("admin", "ci-mite-tls"),
            "ServiceAccount",
        )
        .await;
        // The same objects, well formed, pass (the denials are the policy's rules, not a blanket).
        for (what, yaml) in [
            ("the agents' RoleBinding", binding("ci-agents", "varroa-jenkins-agents", "ci")),
            ("a Varroa ConfigMap", format!("apiVersion: v1\nkind: ConfigMap\nmetadata:{}\n", varroa_meta("ci", TEAM))),
            ("the StatefulSet", sts("ci", "ci-mite-tls")),
        ] {
            assert_eq!(create_as_operator(&kubectl, &yaml).await, None, "{what} is refused");
        }
    }

    // The operator, as that ServiceAccount, still provisions a Controller end to end.
    env.start_operator(config());
    env.create("ci", json!({"ingress": {"host": "ci.example.com"}})).await;
    let c = env.wait_phase("ci", ControllerPhase::Running).await;
    assert_eq!(condition(&c, condition::FAILED).map(|x| x.status.as_str()), Some("False"));
    let rb: RoleBinding = env.obj("ci-agents").await;
    assert_eq!(rb.role_ref.name, "varroa-jenkins-agents");
    let secret: Secret = env.obj("ci-mite-tls").await;
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let _: Ingress = env.obj("ci").await;
    // The Controller's ServiceAccount has the agents' rights through the binding.
    let as_jenkins = format!("--as=system:serviceaccount:{TEAM}:ci");
    {
        for (verb, resource, sub) in [("create", "pods", ""), ("create", "pods", "exec"), ("get", "pods", "log")] {
            let sub = format!("--subresource={sub}");
            let out = kubectl.run(&["auth", "can-i", verb, resource, &sub, "-n", TEAM, &as_jenkins]).await;
            assert!(out.success(), "Jenkins of ci cannot {verb} {resource}: {out}");
        }
        let out = kubectl.run(&["auth", "can-i", "create", "pods", "-n", "default", &as_jenkins]).await;
        assert!(!out.success(), "the agents' rights are confined to the Controller's namespace");
    }
    // Stopped, the operator wrote its checkpoint (varroa_operator::CHECKPOINT) in varroa-system:
    // the only ConfigMaps there the policy lets it write.
    env.stop_operator().await;
    let format = kubectl
        .ok(&["get", "configmap", "varroa-operator-verified", "-n", "varroa-system", "-o", "jsonpath={.data.format}"])
        .await;
    assert_eq!(format.stdout, "1");
    let checkpoint_part =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: varroa-operator-verified-3, namespace: varroa-system}\n";
    assert_eq!(create_as_operator(&kubectl, checkpoint_part).await, None, "a part of the checkpoint is refused");
    denied(
        &kubectl,
        "another ConfigMap in varroa-system",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: varroa-system}\n",
        "only Events, its Lease and its checkpoint",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_named_like_foreign_objects_is_failed_and_leaves_them_untouched() {
    let env = Env::start(config()).await;
    // Foreign objects, made by someone else: a ServiceAccount, a ConfigMap, a Service, a Secret.
    let admin = |_: ()| env.admin.clone();
    let pp = PostParams::default();
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "build", "namespace": TEAM}})).expect("sa");
    let sa = Api::<ServiceAccount>::namespaced(admin(()), TEAM).create(&pp, &sa).await.expect("create sa");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": TEAM,
                     // Varroa's label alone does not make it Varroa's: no owner reference.
                     "labels": {"app.kubernetes.io/managed-by": "varroa-operator"}},
        "data": {"app.conf": "mine"},
    }))
    .expect("cm");
    let cm = Api::<ConfigMap>::namespaced(admin(()), TEAM).create(&pp, &cm).await.expect("create cm");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "api", "namespace": TEAM},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "api"}},
    }))
    .expect("svc");
    let svc = Api::<Service>::namespaced(admin(()), TEAM).create(&pp, &svc).await.expect("create svc");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db-mite-tls", "namespace": TEAM},
        "type": "Opaque", "stringData": {"password": "hunter2"},
    }))
    .expect("secret");
    let secret = Api::<Secret>::namespaced(admin(()), TEAM).create(&pp, &secret).await.expect("create secret");

    for (controller, object) in [
        ("build", "ServiceAccount team-a/build"),
        ("web", "ConfigMap team-a/web"),
        ("api", "Service team-a/api"),
        ("db", "Secret team-a/db-mite-tls"),
    ] {
        env.create(controller, json!({})).await;
        let c = env.wait_phase(controller, ControllerPhase::Failed).await;
        let cond = condition(&c, condition::FAILED).expect("the Failed condition");
        assert_eq!((cond.status.as_str(), cond.reason.as_str()), ("True", REASON_OWNERSHIP_CONFLICT));
        assert!(
            cond.message.contains(object) && cond.message.contains("rename the Controller"),
            "{controller}: the message names {object} and the fix: {}",
            cond.message
        );
        assert_eq!(attention_of(&c).as_deref(), Some("Failed"));
    }
    // Nothing foreign was written: same resourceVersions, same content.
    assert_eq!(env.obj::<ServiceAccount>("build").await.resource_version(), sa.resource_version());
    let cm_now: ConfigMap = env.obj("web").await;
    assert_eq!(cm_now.resource_version(), cm.resource_version());
    assert_eq!(cm_now.data, cm.data);
    assert_eq!(env.obj::<Service>("api").await.resource_version(), svc.resource_version());
    assert_eq!(env.obj::<Secret>("db-mite-tls").await.resource_version(), secret.resource_version());
    // Nothing was made after the conflicting object either (the StatefulSet comes last).
    let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(env.admin.clone(), TEAM);
    for name in ["build", "web", "api", "db"] {
        assert!(sts.get_opt(name).await.expect("get").is_none(), "a StatefulSet was made for {name}");
    }
    let events = env.events_of("web").await;
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("Failed")
            && e.note.as_deref().is_some_and(|n| n.contains("ConfigMap team-a/web"))),
        "a Warning Event names the object: {events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_annotations_pass_the_allowlist_only_and_a_taken_host_is_refused() {
    let cfg = Config { ingress_annotation_allowlist: vec!["cert-manager.io/".into()], ..config() };
    let env = Env::start(cfg).await;
    env.create(
        "first",
        json!({"ingress": {"host": "jenkins.example.com", "annotations": {
            "cert-manager.io/cluster-issuer": "letsencrypt",
            "nginx.ingress.kubernetes.io/server-snippet": "location / { proxy_pass http://169.254.169.254; }",
        }}}),
    )
    .await;
    env.wait_phase("first", ControllerPhase::Running).await;
    let ing: Ingress = env.obj("first").await;
    let annotations = ing.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("cert-manager.io/cluster-issuer").map(String::as_str), Some("letsencrypt"));
    assert!(
        !annotations.contains_key("nginx.ingress.kubernetes.io/server-snippet"),
        "an annotation outside the allow-list reached the Ingress: {annotations:?}"
    );
    let rv = ing.resource_version();

    // A second Controller asks for the same host: refused, no Ingress.
    env.create("second", json!({"ingress": {"host": "jenkins.example.com"}})).await;
    let c = env
        .wait("second", "IngressHostConflict", |c| {
            condition(c, condition::INGRESS_HOST_CONFLICT).is_some_and(|x| x.status == "True")
        })
        .await;
    let cond = condition(&c, condition::INGRESS_HOST_CONFLICT).expect("condition");
    assert_eq!(cond.reason, "HostInUse");
    assert!(cond.message.contains("Ingress team-a/first"), "{}", cond.message);
    env.wait_phase("second", ControllerPhase::Running).await;
    env.settle("second").await;
    let ingresses: Api<Ingress> = Api::namespaced(env.admin.clone(), TEAM);
    assert!(ingresses.get_opt("second").await.expect("get").is_none(), "an Ingress was written for a taken host");
    assert_eq!(env.obj::<Ingress>("first").await.resource_version(), rv, "the first Ingress is untouched");
    let events = env.events_of("second").await;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("IngressHostConflict")), "{events:#?}");

    // Another host: the conflict clears and the Ingress is written.
    env.patch_spec("second", json!({"ingress": {"host": "second.example.com"}})).await;
    env.wait("second", "the conflict cleared", |c| {
        condition(c, condition::INGRESS_HOST_CONFLICT).is_some_and(|x| x.status == "False")
    })
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while ingresses.get_opt("second").await.expect("get").is_none() {
        assert!(tokio::time::Instant::now() < deadline, "no Ingress for the new host");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_binding_to_the_old_role_is_replaced_by_one_to_the_cluster_role() {
    // A Controller provisioned by an earlier version: its RoleBinding points at a Role of its own.
    let mut env = Env::cluster().await;
    let c = env.create("ci", json!({})).await;
    let uid = c.uid().expect("uid");
    let old: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "ci-agents", "namespace": TEAM,
                     "labels": {"app.kubernetes.io/managed-by": "varroa-operator", "varroa.dev/controller": "ci"},
                     "ownerReferences": [{"apiVersion": "varroa.dev/v1alpha1", "kind": "Controller", "name": "ci",
                                          "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ci-agents"},
        "subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": TEAM}],
    }))
    .expect("a RoleBinding");
    let bindings: Api<RoleBinding> = Api::namespaced(env.admin.clone(), TEAM);
    let old = bindings.create(&PostParams::default(), &old).await.expect("the old binding");
    env.start_operator(config());
    env.wait_phase("ci", ControllerPhase::Running).await;
    let rb: RoleBinding = env.obj("ci-agents").await;
    assert_eq!((rb.role_ref.kind.as_str(), rb.role_ref.name.as_str()), ("ClusterRole", "varroa-jenkins-agents"));
    assert_ne!(rb.uid(), old.uid(), "replaced (roleRef cannot change in place)");
}
