//! The devcluster fixture: a cluster, and the YAML, CRDs and namespaces a test installs on it.

use devcluster::DevCluster;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::wait::conditions;
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::HashMap;

/// The field manager of what the tests apply.
pub const FIELD_MANAGER: &str = "e2e";

/// A devcluster with these options; panics when it does not start.
pub async fn start(options: devcluster::Options) -> DevCluster {
    DevCluster::start_with(options).await.unwrap_or_else(|e| panic!("devcluster starts: {e:#}"))
}

/// How [`write_yaml`] writes each object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Server-side apply, forced, as [`FIELD_MANAGER`] (`kubectl apply --server-side
    /// --force-conflicts`): idempotent.
    Apply,
    /// Create (`kubectl create -f`): an object that already exists fails the test.
    Create,
}

/// Writes every document of a YAML stream (empty documents left out) with `client`, in order;
/// returns how many it wrote. Each kind's resource comes from the API server's discovery, so
/// custom resources need no plural spelled out.
pub async fn write_yaml(client: &Client, text: &str, how: Write) -> usize {
    let mut resources: HashMap<GroupVersionKind, ApiResource> = HashMap::new();
    let docs = crate::manifests::yaml_docs("the YAML to write", text);
    for doc in &docs {
        let obj: DynamicObject =
            serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("not an object: {e}\n{doc:#}"));
        let tm = obj.types.clone().unwrap_or_else(|| panic!("a document without apiVersion and kind:\n{doc:#}"));
        let (group, version) = tm.api_version.rsplit_once('/').unwrap_or(("", tm.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &tm.kind);
        let ar = match resources.get(&gvk) {
            Some(ar) => ar.clone(),
            None => {
                let (ar, _) = kube::discovery::pinned_kind(client, &gvk)
                    .await
                    .unwrap_or_else(|e| panic!("the API server does not serve {} {}: {e}", tm.api_version, tm.kind));
                resources.insert(gvk, ar.clone());
                ar
            }
        };
        let api: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), &ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let name = obj.name_any();
        let written = match how {
            Write::Apply => api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&obj)).await,
            Write::Create => api.create(&PostParams::default(), &obj).await,
        };
        written.unwrap_or_else(|e| panic!("{how:?} {} {name}: {e}", tm.kind));
    }
    docs.len()
}

/// [`write_yaml`] with server-side apply.
pub async fn apply_yaml(client: &Client, text: &str) -> usize {
    write_yaml(client, text, Write::Apply).await
}

/// [`write_yaml`] with server-side apply, of a file of the workspace (`deploy/varroa/operator-rbac.yaml`).
pub async fn apply_file(client: &Client, rel: &str) -> usize {
    apply_yaml(client, &crate::read(rel)).await
}

/// Wait until each CustomResourceDefinition named is Established (its kind is served).
pub async fn wait_established(client: &Client, names: &[&str]) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        crate::wait_for(crds.clone(), name, "Established", conditions::is_crd_established()).await;
    }
}

/// Create these CustomResourceDefinitions and wait until they are Established.
pub async fn install_crds(client: &Client, crds: &[CustomResourceDefinition]) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        api.create(&PostParams::default(), crd).await.unwrap_or_else(|e| panic!("create CRD {}: {e}", crd.name_any()));
    }
    let names: Vec<String> = crds.iter().map(|c| c.name_any()).collect();
    wait_established(client, &names.iter().map(String::as_str).collect::<Vec<_>>()).await;
}

/// Create these namespaces (plain: no labels).
pub async fn create_namespaces(client: &Client, names: &[&str]) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in names {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("a Namespace");
        namespaces.create(&PostParams::default(), &n).await.unwrap_or_else(|e| panic!("create namespace {ns}: {e}"));
    }
}
