//! The PreviewEnvironment CRD: checked in without drift, and validating writes on a real API
//! server (devcluster) with the messages users see, through kube and through kubectl.

use devcluster::DevCluster;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use vesper_api::PreviewEnvironment;

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/vesper/crd.yaml")
}

/// The generated CRD and deploy/vesper/crd.yaml agree. `UPDATE_CRDS=1 cargo test` rewrites it.
#[test]
fn checked_in_crd_has_not_drifted() {
    let generated = vesper_api::crd_yaml();
    if std::env::var("UPDATE_CRDS").is_ok_and(|v| v == "1") {
        std::fs::write(checked_in(), &generated).expect("write deploy/vesper/crd.yaml");
    }
    let on_disk = std::fs::read_to_string(checked_in()).unwrap_or_default();
    assert!(
        on_disk == generated,
        "deploy/vesper/crd.yaml differs from the types in vesper/api: run `UPDATE_CRDS=1 cargo test -p vesper-api --test crd` and commit the result"
    );
}

async fn install(dc: &DevCluster) {
    let crds: Api<CustomResourceDefinition> = Api::all(dc.client());
    crds.create(&PostParams::default(), &PreviewEnvironment::crd()).await.expect("the CRD is accepted");
    tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(crds, "previewenvironments.vesper.eventide.dev", conditions::is_crd_established()),
    )
    .await
    .expect("established in time")
    .expect("watch");
}

fn preview(name: &str, spec: serde_json::Value) -> PreviewEnvironment {
    serde_json::from_value(json!({
        "apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("a PreviewEnvironment")
}

async fn rejected(api: &Api<PreviewEnvironment>, name: &str, spec: serde_json::Value) -> kube::core::Status {
    match api.create(&PostParams::default(), &preview(name, spec)).await {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("{name}: expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn the_api_server_refuses_what_the_schema_forbids() {
    let dc = DevCluster::start().await.expect("devcluster");
    install(&dc).await;
    let api: Api<PreviewEnvironment> = Api::default_namespaced(dc.client());

    // A valid one, with the defaults filled in by the server.
    let ok = api
        .create(&PostParams::default(), &preview("pr-1", json!({"image": "registry.example.com/app:pr-1"})))
        .await
        .expect("a valid preview");
    assert_eq!((ok.spec.ttl.as_str(), ok.spec.replicas, ok.spec.port), ("24h", 1, 8080));
    for image in [
        "app:pr-1",
        "localhost:5000/team/app:v1.2.3",
        &format!("ghcr.io/org/app@sha256:{}", "a".repeat(64)),
        &format!("app:v1@sha256:{}", "b".repeat(64)),
    ] {
        let name = format!("ok-{}", image.len());
        api.create(&PostParams::default(), &preview(&name, json!({"image": image, "ttl": "7d", "replicas": 5})))
            .await
            .unwrap_or_else(|e| panic!("{image} should be accepted: {e}"));
    }

    let s = rejected(&api, "bare", json!({"image": "nginx"})).await;
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        format!(
            "PreviewEnvironment.vesper.eventide.dev \"bare\" is invalid: spec.image: Invalid value: \"string\": {}",
            vesper_api::IMAGE_MESSAGE
        )
    );
    let s = rejected(&api, "latest", json!({"image": "nginx:latest"})).await;
    assert!(s.message.contains(vesper_api::IMAGE_MESSAGE), "{}", s.message);
    let s = rejected(&api, "short", json!({"image": "app:v1", "ttl": "30s"})).await;
    assert_eq!(
        s.message,
        format!(
            "PreviewEnvironment.vesper.eventide.dev \"short\" is invalid: spec.ttl: Invalid value: \"string\": {}",
            vesper_api::TTL_MESSAGE
        )
    );
    let s = rejected(&api, "long", json!({"image": "app:v1", "ttl": "8d"})).await;
    assert!(s.message.contains(vesper_api::TTL_MESSAGE), "{}", s.message);
    let s = rejected(&api, "many", json!({"image": "app:v1", "replicas": 6})).await;
    assert_eq!(
        s.message,
        "PreviewEnvironment.vesper.eventide.dev \"many\" is invalid: spec.replicas: Invalid value: 6: spec.replicas in body should be less than or equal to 5"
    );
    let s = rejected(
        &api,
        "dup",
        json!({"image": "app:v1", "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}),
    )
    .await;
    assert!(s.message.contains("env names must be unique"), "{}", s.message);
}

#[tokio::test]
async fn kubectl_shows_the_schema_messages_and_documents_the_fields() {
    let dc = DevCluster::start().await.expect("devcluster");
    install(&dc).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubectl = |args: &[&str], stdin: Option<&str>| {
        let mut c = Command::new("kubectl");
        c.env("KUBECONFIG", dc.kubeconfig_path())
            .env("HOME", dir.path())
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .args(args);
        if let Some(input) = stdin {
            let path = dir.path().join("in.yaml");
            std::fs::write(&path, input).expect("write manifest");
            c.arg("-f").arg(path);
        }
        c.output().expect("kubectl runs")
    };
    let manifest = |name: &str, spec: &str| {
        format!(
            "apiVersion: vesper.eventide.dev/v1alpha1\nkind: PreviewEnvironment\nmetadata:\n  name: {name}\nspec:\n{spec}\n"
        )
    };
    for (name, spec, want) in [
        ("no-tag", "  image: nginx", vesper_api::IMAGE_MESSAGE),
        ("ttl-30s", "  image: app:v1\n  ttl: 30s", vesper_api::TTL_MESSAGE),
        ("ttl-8d", "  image: app:v1\n  ttl: 8d", vesper_api::TTL_MESSAGE),
        ("six", "  image: app:v1\n  replicas: 6", "spec.replicas in body should be less than or equal to 5"),
    ] {
        let out = kubectl(&["apply"], Some(&manifest(name, spec)));
        assert!(!out.status.success(), "{name} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{name}: {err}");
    }
    let out = kubectl(&["apply"], Some(&manifest("good", "  image: app:v1\n  ttl: 90m")));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let explain = kubectl(&["explain", "previewenvironment.spec"], None);
    let text = String::from_utf8_lossy(&explain.stdout);
    for field in ["image", "ttl", "replicas", "port", "env", "args", "resources", "readinessPath"] {
        assert!(text.contains(field), "explain lacks {field}:\n{text}");
    }
    assert!(text.contains("pinned by a tag or a digest"), "{text}");
    let short = kubectl(&["get", "pe"], None);
    let table = String::from_utf8_lossy(&short.stdout);
    let header: Vec<&str> = table.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "PHASE", "URL", "EXPIRES", "AGE"]);
}
