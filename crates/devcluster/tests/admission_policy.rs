//! ValidatingAdmissionPolicy and its bindings, enforced as the apiserver enforces them, driven by
//! the real kubectl and by kube::Client.

mod support;

use devcluster::DevCluster;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use support::kubectl::Kubectl;

async fn cluster() -> (DevCluster, Kubectl) {
    let dc = DevCluster::start().await.unwrap();
    let k = Kubectl::new(&dc);
    (dc, k)
}

fn cm(name: &str, data: &[(&str, &str)], labels: &[(&str, &str)]) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.data = Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    if !labels.is_empty() {
        c.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    }
    c
}

/// The status of a refused request.
fn api_err<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

const LIMITS: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: cm-limits
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: "!has(object.data) || !('forbidden' in object.data)"
    message: the key forbidden is not allowed
    reason: Forbidden
  - expression: "object.metadata.name != 'bad-name'"
  - expression: "!has(object.data) || size(object.data) <= 3"
    message: at most three keys
    messageExpression: "'too many keys: ' + string(size(object.data))"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: cm-limits-binding
spec:
  policyName: cm-limits
  validationActions: [Deny]
"#;

#[tokio::test]
async fn a_bound_policy_denies_matching_writes_with_the_upstream_message() {
    let (dc, k) = cluster().await;
    let f = k.write("limits.yaml", LIMITS);
    k.ok(&["apply", "-f", &f]);
    // Served as the real kinds: defaults, list, get.
    let out = k.ok(&["get", "validatingadmissionpolicies", "cm-limits", "-o", "jsonpath={.spec.failurePolicy} {.spec.matchConstraints.matchPolicy} {.spec.matchConstraints.resourceRules[0].scope}"]);
    assert_eq!(out, "Fail Equivalent *");
    let out = k.ok(&["get", "validatingadmissionpolicybindings"]);
    assert!(out.contains("cm-limits-binding"), "{out}");

    k.ok(&["create", "configmap", "fine", "--from-literal=a=1"]);
    // kubectl prints the Invalid status as upstream's documentation shows it.
    let bad = k.write("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad-name\n");
    let err = k.fails(&["create", "-f", &bad]);
    assert!(
        err.contains("The configmaps \"bad-name\" is invalid: : ValidatingAdmissionPolicy 'cm-limits' with binding 'cm-limits-binding' denied request: failed expression: object.metadata.name != 'bad-name'"),
        "{err}"
    );
    // Server-side dry runs are checked too.
    let err = k.fails(&["create", "configmap", "bad-name", "--dry-run=server"]);
    assert!(err.contains("denied request: failed expression"), "{err}");

    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    // reason Forbidden: 403; the message names the resource and the object.
    let (code, reason, msg) = api_err(api.create(&PostParams::default(), &cm("x", &[("forbidden", "1")], &[])).await);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        msg,
        "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'cm-limits' with binding 'cm-limits-binding' denied request: the key forbidden is not allowed"
    );
    // No reason: 422 Invalid; messageExpression wins over message.
    let many = cm("many", &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")], &[]);
    let (code, reason, msg) = api_err(api.create(&PostParams::default(), &many).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(msg.ends_with("denied request: too many keys: 4"), "{msg}");
    // Updates (a merge patch) are checked.
    let patch = serde_json::json!({"data": {"forbidden": "yes"}});
    let (code, _, _) = api_err(api.patch("fine", &PatchParams::default(), &Patch::Merge(&patch)).await);
    assert_eq!(code, 403);
    assert_eq!(api.get("fine").await.unwrap().data.unwrap().len(), 1);
    // Deletes are not matched (operations CREATE, UPDATE) and status writes of other kinds pass.
    api.delete("fine", &DeleteParams::default()).await.unwrap();

    // Deleting the binding stops enforcement.
    k.ok(&["delete", "validatingadmissionpolicybinding", "cm-limits-binding"]);
    k.ok(&["create", "configmap", "bad-name"]);
    api.create(&PostParams::default(), &many).await.unwrap();
}

#[tokio::test]
async fn warn_only_warns() {
    let (_dc, k) = cluster().await;
    let f = k.write("warn.yaml", &LIMITS.replace("[Deny]", "[Warn, Audit]"));
    k.ok(&["apply", "-f", &f]);
    let (_, err) = k.ok2(&["create", "configmap", "bad-name"]);
    assert!(
        err.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'cm-limits' with binding 'cm-limits-binding': failed expression: object.metadata.name != 'bad-name'"),
        "{err}"
    );
    k.ok(&["get", "configmap", "bad-name"]);
}

const SCOPED: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: frozen
spec:
  failurePolicy: Fail
  matchConstraints:
    namespaceSelector:
      matchLabels: {env: prod}
    resourceRules:
    - apiGroups: ["*"]
      apiVersions: ["*"]
      operations: ["CREATE"]
      resources: ["*"]
    excludeResourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["*"]
      resources: ["secrets"]
  validations:
  - expression: "false"
    message: prod is frozen
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: frozen
spec:
  policyName: frozen
  validationActions: [Deny]
  matchResources:
    objectSelector:
      matchExpressions:
      - {key: exempt, operator: DoesNotExist}
"#;

#[tokio::test]
async fn namespace_selector_object_selector_operations_and_exclusions_scope_a_policy() {
    let (_dc, k) = cluster().await;
    k.ok(&["create", "namespace", "prod"]);
    k.ok(&["label", "namespace", "prod", "env=prod"]);
    k.ok(&["create", "namespace", "dev"]);
    let f = k.write("scoped.yaml", SCOPED);
    k.ok(&["apply", "-f", &f]);

    k.ok(&["-n", "dev", "create", "configmap", "a"]);
    let err = k.fails(&["-n", "prod", "create", "configmap", "a"]);
    assert!(
        err.contains("ValidatingAdmissionPolicy 'frozen' with binding 'frozen' denied request: prod is frozen"),
        "{err}"
    );
    // Excluded resource.
    k.ok(&["-n", "prod", "create", "secret", "generic", "s", "--from-literal=a=b"]);
    // The binding's objectSelector: an exempt object passes; matched on the new or the old object.
    let exempt = k.write(
        "exempt.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\n  namespace: prod\n  labels: {exempt: \"yes\"}\n",
    );
    k.ok(&["create", "-f", &exempt]);
    // Only CREATE is matched: updating and deleting pass.
    k.ok(&["-n", "prod", "label", "configmap", "e", "exempt-"]);
    k.ok(&["-n", "prod", "delete", "configmap", "e"]);
    // Namespaces are cluster-scoped but matched by the namespaceSelector on their own labels.
    let ns = k.write("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: prod2\n  labels: {env: prod}\n");
    let err = k.fails(&["create", "-f", &ns]);
    assert!(err.contains("prod is frozen"), "{err}");
    // Relabelling the namespace lifts the policy for it.
    k.ok(&["label", "namespace", "prod", "env=staging", "--overwrite"]);
    k.ok(&["-n", "prod", "create", "configmap", "a"]);
}

const TEAMS: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: teams
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["*"]
      resources: ["configmaps"]
  matchConditions:
  - name: labelled-by-a-team
    expression: "object != null && has(object.metadata.labels) && 'team' in object.metadata.labels"
  - name: not-the-admin
    expression: "request.userInfo.username != 'admin-exempt'"
  variables:
  - name: team
    expression: "object.metadata.labels['team']"
  - name: owner
    expression: "has(namespaceObject.metadata.labels) && 'team' in namespaceObject.metadata.labels ? namespaceObject.metadata.labels['team'] : ''"
  validations:
  - expression: "variables.team == variables.owner"
    messageExpression: "'team ' + variables.team + ' may not write in ' + request.namespace + ' (' + request.operation + ' by ' + request.userInfo.username + ')'"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: teams
spec:
  policyName: teams
  validationActions: [Deny]
"#;

#[tokio::test]
async fn match_conditions_variables_request_and_namespace_object() {
    let (_dc, k) = cluster().await;
    k.ok(&["create", "namespace", "blue"]);
    k.ok(&["label", "namespace", "blue", "team=blue"]);
    let f = k.write("teams.yaml", TEAMS);
    k.ok(&["apply", "-f", &f]);
    // matchConditions false: not evaluated.
    k.ok(&["-n", "blue", "create", "configmap", "unlabelled"]);
    let m = |name: &str, team: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: blue\n  labels: {{team: {team}}}\n"
        )
    };
    let ok = k.write("ok.yaml", &m("mine", "blue"));
    k.ok(&["create", "-f", &ok]);
    let bad = k.write("bad.yaml", &m("theirs", "red"));
    let err = k.fails(&["create", "-f", &bad]);
    assert!(err.contains("denied request: team red may not write in blue (CREATE by "), "{err}");
    // A user who matches the second condition's exemption (impersonated, in system:masters).
    let (_, _) = k.ok2(&["create", "-f", &bad, "--as=admin-exempt", "--as-group=system:masters"]);
    // The request's user as the policy sees it.
    let err = k.fails(&[
        "label",
        "-n",
        "blue",
        "configmap",
        "mine",
        "team=green",
        "--overwrite",
        "--as=jane",
        "--as-group=system:masters",
    ]);
    assert!(err.contains("team green may not write in blue (UPDATE by jane)"), "{err}");
}

#[tokio::test]
async fn delete_sees_old_object_and_failure_policy_decides_on_errors() {
    let (dc, k) = cluster().await;
    let policy = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: keep
spec:
  failurePolicy: FAILURE
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["DELETE", "UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: "request.operation != 'DELETE' || object == null && !('protected' in oldObject.data)"
    message: protected
  - expression: "request.operation != 'UPDATE' || oldObject.data.missing == 'x'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: keep
spec:
  policyName: keep
  validationActions: [Deny]
"#;
    k.ok(&["create", "configmap", "p", "--from-literal=protected=1"]);
    let f = k.write("keep.yaml", &policy.replace("FAILURE", "Fail"));
    k.ok(&["apply", "-f", &f]);
    let err = k.fails(&["delete", "configmap", "p"]);
    assert!(err.contains("ValidatingAdmissionPolicy 'keep' with binding 'keep' denied request: protected"), "{err}");
    // A runtime error denies under failurePolicy Fail...
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let patch = serde_json::json!({"data": {"b": "2"}});
    let (code, reason, msg) = api_err(api.patch("p", &PatchParams::default(), &Patch::Merge(&patch)).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(
        msg.ends_with("denied request: expression 'request.operation != 'UPDATE' || oldObject.data.missing == 'x'' resulted in error: no such key: missing"),
        "{msg}"
    );
    // ... and is ignored under Ignore.
    let f = k.write("keep.yaml", &policy.replace("FAILURE", "Ignore"));
    k.ok(&["apply", "-f", &f]);
    api.patch("p", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let err = k.fails(&["delete", "configmap", "p"]);
    assert!(err.contains("denied request: protected"), "{err}");
    k.ok(&["delete", "validatingadmissionpolicy", "keep"]);
    // A binding whose policy is gone enforces nothing.
    k.ok(&["delete", "configmap", "p"]);
}

#[tokio::test]
async fn invalid_policies_are_refused_when_written() {
    let (_dc, k) = cluster().await;
    let bad = LIMITS.replace("\"object.metadata.name != 'bad-name'\"", "\"object.metadata.name != \"");
    let f = k.write("bad.yaml", &bad);
    let err = k.fails(&["apply", "-f", &f]);
    assert!(err.contains("spec.validations[1].expression: Invalid value: \"object.metadata.name != \": compilation failed: ERROR: <input>:1:"), "{err}");
    let undeclared = LIMITS.replace("object.metadata.name != 'bad-name'", "params.name != 'bad-name'");
    let f = k.write("undeclared.yaml", &undeclared);
    let err = k.fails(&["apply", "-f", &f]);
    assert!(
        err.contains("spec.validations[1].expression: Invalid value: \"params.name != 'bad-name'\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')"),
        "{err}"
    );
    let f = k.write(
        "param.yaml",
        &LIMITS.replace("  matchConstraints:", "  paramKind: {apiVersion: v1, kind: ConfigMap}\n  matchConstraints:"),
    );
    let err = k.fails(&["apply", "-f", &f]);
    assert!(err.contains("spec.paramKind: Forbidden: devcluster does not support parameter resources"), "{err}");
    let f = k.write("binding.yaml", &LIMITS.replace("[Deny]", "[Deny, Warn, Block]"));
    let err = k.fails(&["apply", "-f", &f]);
    assert!(err.contains("spec.validationActions[2]: Unsupported value: \"Block\""), "{err}");
    assert!(err.contains("must not contain both Deny and Warn"), "{err}");
    let f = k.write("norules.yaml", &LIMITS.replace("    resourceRules:\n    - apiGroups: [\"\"]\n      apiVersions: [\"v1\"]\n      operations: [\"CREATE\", \"UPDATE\"]\n      resources: [\"configmaps\"]\n", "    resourceRules: []\n"));
    let err = k.fails(&["apply", "-f", &f]);
    assert!(err.contains("spec.matchConstraints.resourceRules: Required value"), "{err}");
    let f = k.write("overlap.yaml", &LIMITS.replace("resources: [\"configmaps\"]", "resources: [\"*\", \"*/*\"]"));
    let err = k.fails(&["apply", "-f", &f]);
    assert!(err.contains("if '*/*' is present, must not specify other resources"), "{err}");
}

#[tokio::test]
async fn status_subresources_need_their_own_rules() {
    let (dc, k) = cluster().await;
    let policy = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: no-status
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["UPDATE"]
      resources: ["namespaces/status"]
  validations:
  - expression: "request.subResource != 'status'"
    message: no status writes
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: no-status
spec:
  policyName: no-status
  validationActions: [Deny]
"#;
    k.ok(&["create", "namespace", "s"]);
    let f = k.write("status.yaml", policy);
    k.ok(&["apply", "-f", &f]);
    // The main resource is not matched by `namespaces/status`.
    k.ok(&["label", "namespace", "s", "a=b"]);
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(dc.client());
    let patch = serde_json::json!({"status": {"conditions": []}});
    let (code, _, msg) = api_err(api.patch_status("s", &PatchParams::default(), &Patch::Merge(&patch)).await);
    assert_eq!(code, 422, "{msg}");
    assert!(msg.ends_with("denied request: no status writes"), "{msg}");
}
