//! Issue 10, item 3b: deploy/vesper/admission-policy.yaml confines the operator's ServiceAccount
//! below what its RBAC allows, enforced by devcluster as the API server enforces a
//! ValidatingAdmissionPolicy:
//!
//! - with the policy applied (kubectl), the operator, running as
//!   `vesper-system/vesper-operator`, still makes a preview Ready (namespace, quota, Deployment,
//!   ... in its managed namespace; status and Events in the users' namespace; its Lease) and
//!   deletes it with its namespace;
//! - each write RBAC allows it but the policy forbids is denied, as that ServiceAccount
//!   (`kubectl --as=system:serviceaccount:vesper-system:vesper-operator`), dry runs too: a
//!   Deployment in `default` or in vesper-system, a namespace without the prefix or the label,
//!   relabelling a managed namespace out of Pod Security `restricted` or out of Vesper's hands,
//!   touching a namespace Vesper does not manage; the same writes by anyone else pass;
//! - the Helm chart renders the same policy for the release's ServiceAccount (with `helm` on
//!   PATH, as tests/deploy.rs does).

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use optest::kubectl::Kubectl;
use serde_json::{Value, json};
use std::process::Command;
use support::{Env, cluster_options, config};

const IMAGE: &str = "registry.example.com/app:pr-1";
const OPERATOR: &str = "system:serviceaccount:vesper-system:vesper-operator";
const POLICY: &str = "vesper-operator-scope";

/// As the operator: refused by the policy with `message` (the whole upstream wording).
async fn denied(k: &Kubectl, args: &[&str], message: &str) {
    let mut all = vec!["--as", OPERATOR];
    all.extend_from_slice(args);
    let out = k.run(&all).await;
    let want =
        format!("is forbidden: ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: {message}");
    assert!(!out.success() && out.stderr.contains(&want), "should be denied with\n  {want}\nbut: {out}");
}

/// As the operator, and allowed.
async fn allowed(k: &Kubectl, args: &[&str]) -> String {
    let mut all = vec!["--as", OPERATOR];
    all.extend_from_slice(args);
    k.ok(&all).await.stdout
}

fn namespace_yaml(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("    {k}: \"{v}\"\n")).collect();
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n{}", labels.concat())
}

const RESTRICTED: [(&str, &str); 6] = [
    ("pod-security.kubernetes.io/enforce", "restricted"),
    ("pod-security.kubernetes.io/enforce-version", "latest"),
    ("pod-security.kubernetes.io/audit", "restricted"),
    ("pod-security.kubernetes.io/audit-version", "latest"),
    ("pod-security.kubernetes.io/warn", "restricted"),
    ("pod-security.kubernetes.io/warn-version", "latest"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admission_policy_confines_the_operator_which_still_serves_previews() {
    let mut env = Env::cluster(cluster_options()).await;
    let k = Kubectl::new(env.dc.kubeconfig_path());
    let policy = optest::repo("deploy/vesper/admission-policy.yaml").display().to_string();
    k.ok(&["apply", "-f", &policy]).await;

    // The operator, as its ServiceAccount, under the policy: a preview becomes Ready (its status
    // and Events are written in team-a, its objects in its managed namespace).
    env.start_operator(config());
    env.create("shop", json!({"image": IMAGE})).await;
    env.wait_ready("shop").await;
    let ns = env.ns_of("shop");
    let d: Deployment = env.obj(&ns, "app").await;
    assert_eq!(d.labels().get("app.kubernetes.io/managed-by").map(String::as_str), Some("vesper"));
    assert!(!env.events_of("shop").await.is_empty(), "the operator's Events about the preview were written");

    // What RBAC allows and the policy refuses, as the operator's ServiceAccount.
    let outside = "only in the namespaces it manages (named vesper-* and labelled app.kubernetes.io/managed-by=vesper)";
    for target in ["default", "team-a", "vesper-system"] {
        let msg = format!("the Vesper operator may not CREATE deployments in namespace {target}: {outside}");
        denied(&k, &["create", "deployment", "x", "--image=nginx:1.27", "-n", target], &msg).await;
        denied(&k, &["create", "deployment", "x", "--image=nginx:1.27", "-n", target, "--dry-run=server"], &msg).await;
    }
    let svc = format!("the Vesper operator may not CREATE services in namespace default: {outside}");
    denied(&k, &["create", "service", "clusterip", "x", "--tcp=80:80", "-n", "default"], &svc).await;
    // A namespace with Vesper's label but not its prefix is not managed either.
    k.ok(&["create", "namespace", "lookalike"]).await;
    k.ok(&["label", "namespace", "lookalike", "app.kubernetes.io/managed-by=vesper"]).await;
    let msg = format!("the Vesper operator may not CREATE deployments in namespace lookalike: {outside}");
    denied(&k, &["create", "deployment", "x", "--image=nginx:1.27", "-n", "lookalike"], &msg).await;

    // Namespaces: only `vesper-*` with Vesper's label, before and after, at `restricted`/latest.
    let names =
        "only namespaces named vesper-* and labelled app.kubernetes.io/managed-by=vesper, before and after the write";
    let mut managed = vec![("app.kubernetes.io/managed-by", "vesper")];
    managed.extend(RESTRICTED);
    let f = k.write("evil.yaml", &namespace_yaml("evil", &managed));
    denied(&k, &["create", "-f", &f], &format!("the Vesper operator may not CREATE namespace evil: {names}")).await;
    let f = k.write("unlabelled.yaml", &namespace_yaml("vesper-unlabelled", &RESTRICTED));
    denied(
        &k,
        &["create", "-f", &f],
        &format!("the Vesper operator may not CREATE namespace vesper-unlabelled: {names}"),
    )
    .await;
    let psa = |name: &str, op: &str| {
        format!(
            "the Vesper operator may not {op} namespace {name} with a Pod Security level other than restricted at version latest"
        )
    };
    let mut privileged = managed.clone();
    privileged[1] = ("pod-security.kubernetes.io/enforce", "privileged");
    let f = k.write("privileged.yaml", &namespace_yaml("vesper-privileged", &privileged));
    denied(&k, &["create", "-f", &f], &psa("vesper-privileged", "CREATE")).await;
    let mut pinned = managed.clone();
    pinned[2] = ("pod-security.kubernetes.io/enforce-version", "v1.24");
    let f = k.write("pinned.yaml", &namespace_yaml("vesper-pinned", &pinned));
    denied(&k, &["create", "-f", &f], &psa("vesper-pinned", "CREATE")).await;
    let f = k.write("noenforce.yaml", &namespace_yaml("vesper-noenforce", &managed[..1]));
    denied(&k, &["create", "-f", &f], &psa("vesper-noenforce", "CREATE")).await;
    // Relabelling the preview's namespace: out of restricted, to a pinned version, audit or warn
    // lowered, the enforce label removed, or out of Vesper's hands.
    let lower = [
        "pod-security.kubernetes.io/enforce=privileged",
        "pod-security.kubernetes.io/enforce=baseline",
        "pod-security.kubernetes.io/enforce-version=v1.25",
        "pod-security.kubernetes.io/warn=privileged",
        "pod-security.kubernetes.io/audit-version=v1.25",
        "pod-security.kubernetes.io/enforce-",
    ];
    for change in lower {
        denied(&k, &["label", "namespace", &ns, change, "--overwrite"], &psa(&ns, "UPDATE")).await;
    }
    for change in ["app.kubernetes.io/managed-by-", "app.kubernetes.io/managed-by=someone-else"] {
        denied(
            &k,
            &["label", "namespace", &ns, change, "--overwrite"],
            &format!("the Vesper operator may not UPDATE namespace {ns}: {names}"),
        )
        .await;
    }
    // Namespaces Vesper does not manage: neither changed nor deleted, nor adopted.
    for target in ["default", "team-a", "vesper-system"] {
        let msg = format!("the Vesper operator may not UPDATE namespace {target}: {names}");
        denied(&k, &["label", "namespace", target, "owned=yes"], &msg).await;
        denied(&k, &["label", "namespace", target, "app.kubernetes.io/managed-by=vesper"], &msg).await;
        let msg = format!("the Vesper operator may not DELETE namespace {target}: {names}");
        denied(&k, &["delete", "namespace", target, "--wait=false"], &msg).await;
    }
    // The namespace is untouched.
    let labels = k.ok(&["get", "namespace", &ns, "-o", "jsonpath={.metadata.labels}"]).await.stdout;
    let labels: Value = serde_json::from_str(&labels).expect("labels as JSON");
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "vesper");

    // What it may do: in its managed namespace, a (dry-run) Deployment; its Lease; a compliant
    // managed namespace (dry run); harmless relabelling that keeps everything.
    allowed(&k, &["create", "deployment", "x", "--image=nginx:1.27", "-n", &ns, "--dry-run=server"]).await;
    let lease = k.write(
        "lease.yaml",
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: probe\n  namespace: vesper-system\nspec:\n  holderIdentity: probe\n",
    );
    allowed(&k, &["create", "-f", &lease]).await;
    let f = k.write("ok.yaml", &namespace_yaml("vesper-ok", &managed));
    allowed(&k, &["create", "-f", &f, "--dry-run=server"]).await;
    allowed(&k, &["label", "namespace", &ns, "pod-security.kubernetes.io/warn=restricted", "--overwrite"]).await;
    // The policy binds the operator only: the admin does all of the above.
    k.ok(&["create", "deployment", "x", "--image=nginx:1.27", "-n", "default"]).await;
    k.ok(&["label", "namespace", "lookalike", "pod-security.kubernetes.io/enforce=privileged"]).await;

    // Deleting the preview deletes its namespace (the operator's DELETE is allowed).
    env.previews().delete("shop", &Default::default()).await.expect("delete the preview");
    env.wait_pe_gone("shop").await;
    env.stop_operator().await;
    // Stopped, the operator wrote its checkpoint in its own namespace (vesper_operator::CHECKPOINT),
    // the one ConfigMap name there the policy lets it write.
    let stamps = k
        .ok(&["get", "configmap", "vesper-operator-verified", "-n", "vesper-system", "-o", "jsonpath={.data.format}"])
        .await;
    assert_eq!(stamps.stdout, "1");
    allowed(&k, &["create", "configmap", "vesper-operator-verified-7", "-n", "vesper-system", "--dry-run=server"])
        .await;
    denied(
        &k,
        &["create", "configmap", "other", "-n", "vesper-system", "--dry-run=server"],
        &format!("the Vesper operator may not CREATE configmaps in namespace vesper-system: {outside}"),
    )
    .await;
}

/// The chart renders deploy/vesper/admission-policy.yaml for the release's ServiceAccount and
/// Lease namespace.
#[test]
fn the_chart_renders_the_same_policy() {
    let plain: Vec<Value> = serde_saphyr::from_multiple(
        &std::fs::read_to_string(optest::repo("deploy/vesper/admission-policy.yaml")).expect("read the policy"),
    )
    .expect("YAML");
    let plain: Vec<Value> = plain.into_iter().filter(|d| !d.is_null()).collect();
    assert_eq!(plain.len(), 2, "the policy and its binding");
    let Some(helm) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("helm"))
        .find(|p| p.is_file())
    else {
        eprintln!("note: helm is not on PATH: skipping the rendering of templates/admission-policy.yaml");
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let render = |extra: &[&str]| -> Vec<Value> {
        let out = Command::new(&helm)
            .current_dir(optest::root())
            .env("HELM_CACHE_HOME", home.path().join("cache"))
            .env("HELM_CONFIG_HOME", home.path().join("config"))
            .env("HELM_DATA_HOME", home.path().join("data"))
            .args(["template", "vesper", "deploy/helm/vesper", "--show-only", "templates/admission-policy.yaml"])
            .args(extra)
            .output()
            .expect("helm runs");
        assert!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
        let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("YAML");
        docs.into_iter().filter(|d| !d.is_null()).collect()
    };
    let rendered = render(&["--namespace", "vesper-system"]);
    assert_eq!(rendered.len(), 2, "{rendered:?}");
    for (r, p) in rendered.iter().zip(&plain) {
        assert_eq!(r["kind"], p["kind"]);
        assert_eq!(r["metadata"]["name"], p["metadata"]["name"]);
        assert_eq!(r["spec"], p["spec"], "{} differs from deploy/vesper/admission-policy.yaml", p["kind"]);
    }
    // Another namespace, account and Lease namespace: the policy follows them.
    let other = render(&[
        "--namespace",
        "previews",
        "--set",
        "serviceAccount.name=pe-bot",
        "--set",
        "leaderElection.namespace=leases",
    ]);
    let text = serde_json::to_string(&other[0]["spec"]).expect("JSON");
    assert!(text.contains("system:serviceaccount:previews:pe-bot"), "{text}");
    assert!(text.contains("request.namespace == 'leases'"), "{text}");
    assert!(!text.contains("vesper-system"), "{text}");
}
