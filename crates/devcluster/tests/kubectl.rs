//! The real `/usr/bin/kubectl` against devcluster: every command a user runs, with its output
//! checked.

mod support;

use devcluster::DevCluster;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;
use support::kubectl::Kubectl;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, shortNames: [wd]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        description: A widget, for tests.
        properties:
          spec:
            type: object
            description: What the widget should be.
            required: [size]
            properties:
              size: {type: integer, minimum: 1, maximum: 10, description: How big the widget is.}
              color: {type: string, enum: [red, blue], default: red, description: Its color.}
          status:
            type: object
            properties:
              phase: {type: string}
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"#;

fn widget(size: u32) -> String {
    format!("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: {size}\n")
}

async fn cluster() -> (DevCluster, Kubectl) {
    let dc = DevCluster::start().await.unwrap();
    let k = Kubectl::new(&dc);
    (dc, k)
}

#[tokio::test]
async fn api_resources_lists_builtin_and_custom_kinds() {
    let (_dc, k) = cluster().await;
    let out = k.ok(&["api-resources"]);
    for line in ["configmaps", "deployments", "customresourcedefinitions", "leases", "networkpolicies"] {
        assert!(out.lines().any(|l| l.starts_with(line)), "{line} missing:\n{out}");
    }
    let crd = k.write("crd.yaml", CRD);
    k.ok(&["apply", "-f", &crd]);
    k.ok(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=10s"]);
    let out = k.ok(&["api-resources", "--api-group=example.com"]);
    let line = out.lines().find(|l| l.starts_with("widgets")).unwrap_or_else(|| panic!("{out}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols, vec!["widgets", "wd", "example.com/v1", "true", "Widget"]);
}

#[tokio::test]
async fn custom_resource_lifecycle() {
    let (_dc, k) = cluster().await;
    let crd = k.write("crd.yaml", CRD);
    assert_eq!(
        k.ok(&["apply", "-f", &crd]).trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"
    );
    k.ok(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=10s"]);

    let w = k.write("w.yaml", &widget(3));
    assert_eq!(k.ok(&["apply", "-f", &w]).trim(), "widget.example.com/w1 created");
    // A second apply that changes it.
    let w = k.write("w.yaml", &widget(4));
    assert_eq!(k.ok(&["apply", "-f", &w]).trim(), "widget.example.com/w1 configured");
    assert_eq!(k.ok(&["apply", "-f", &w]).trim(), "widget.example.com/w1 unchanged");

    // Table with printer columns; the default was applied.
    let table = k.ok(&["get", "widgets"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "SIZE", "PHASE"]);
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row, vec!["w1", "4"]);
    let yaml = k.ok(&["get", "wd", "w1", "-o", "yaml"]);
    assert!(yaml.starts_with("apiVersion: example.com/v1\nkind: Widget\n"), "{yaml}");
    assert!(yaml.contains("  color: red\n") && yaml.contains("  size: 4\n"), "{yaml}");
    assert_eq!(k.ok(&["get", "wd", "w1", "-o", "jsonpath={.spec.size} {.spec.color}"]), "4 red");

    // label, merge patch, status patch, wait for a condition.
    assert_eq!(k.ok(&["label", "wd", "w1", "team=a"]).trim(), "widget.example.com/w1 labeled");
    assert_eq!(k.ok(&["get", "wd", "-l", "team=a", "-o", "name"]).trim(), "widget.example.com/w1");
    k.ok(&["patch", "wd", "w1", "--type", "merge", "-p", r#"{"spec":{"color":"blue"}}"#]);
    assert_eq!(k.ok(&["get", "wd", "w1", "-o", "jsonpath={.spec.color}"]), "blue");
    let err = k.fails(&["patch", "wd", "w1", "--type", "merge", "-p", r#"{"spec":{"size":11}}"#]);
    assert!(
        err.contains("spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"),
        "{err}"
    );
    let err = k.fails(&["patch", "wd", "w1", "--type", "strategic", "-p", r#"{"spec":{"size":2}}"#]);
    assert!(err.contains("UnsupportedMediaType") || err.contains("415") || err.contains("not supported"), "{err}");
    k.ok(&[
        "patch",
        "wd",
        "w1",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"phase":"Ready","conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    assert_eq!(
        k.ok(&["wait", "--for=condition=Ready", "wd/w1", "--timeout=10s"]).trim(),
        "widget.example.com/w1 condition met"
    );
    let row = k.ok(&["get", "wd", "w1", "--no-headers"]);
    assert_eq!(row.split_whitespace().collect::<Vec<_>>(), vec!["w1", "4", "Ready"]);

    // explain reads the published schema.
    let explain = k.ok(&["explain", "widget.spec"]);
    assert!(explain.contains("What the widget should be."), "{explain}");
    assert!(explain.contains("size") && explain.contains("How big the widget is."), "{explain}");

    // delete --wait, then the CRD with it.
    assert_eq!(k.ok(&["delete", "wd", "w1", "--wait"]).trim(), "widget.example.com \"w1\" deleted");
    k.ok(&["delete", "-f", &crd, "--wait"]);
    let out = k.run(&["get", "crd", "widgets.example.com"]);
    assert!(!out.status.success());
}

#[tokio::test]
async fn server_side_apply_and_strategic_patch_on_builtin_kinds() {
    let (_dc, k) = cluster().await;
    let deploy = k.write(
        "d.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n        env:\n        - {name: A, value: \"1\"}\n",
    );
    assert_eq!(k.ok(&["apply", "--server-side", "-f", &deploy]).trim(), "deployment.apps/web serverside-applied");
    // Defaults the real server applies.
    assert_eq!(
        k.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.strategy.type} {.spec.revisionHistoryLimit} {.spec.progressDeadlineSeconds} {.spec.template.spec.containers[0].imagePullPolicy}"]),
        "RollingUpdate 10 600 IfNotPresent"
    );
    // Strategic merge: env is merged by name, not replaced (new items first, as upstream does
    // without $setElementOrder).
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","env":[{"name":"B","value":"2"}]}]}}}}"#,
    ]);
    assert_eq!(
        k.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].env[*].name}"]),
        "B A"
    );
    // A second applier that disagrees conflicts; --force-conflicts takes over.
    let scaled =
        k.write("d2.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 5\n");
    let err = k.fails(&["apply", "--server-side", "--field-manager", "other", "-f", &scaled]);
    assert!(err.contains("conflict") && err.contains(".spec.replicas"), "{err}");
    k.ok(&["apply", "--server-side", "--field-manager", "other", "--force-conflicts", "-f", &scaled]);
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]), "5");
}

#[tokio::test]
async fn get_watch_prints_a_change() {
    let (_dc, k) = cluster().await;
    let mut child = k
        .cmd(&["get", "configmaps", "-w", "--request-timeout=20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The initial listing first.
    let first = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(first.starts_with("NAME"), "{first}");
    let second = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(second.starts_with("kube-root-ca.crt"), "{second}");
    k.ok(&["create", "configmap", "watched", "--from-literal=a=b", "--save-config=false"]);
    let line = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(line.starts_with("watched "), "{line}");
    let _ = child.kill();
    let _ = child.wait();
}
