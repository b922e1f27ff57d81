//! Acting as a ServiceAccount, as a pod does: a bound token from the TokenRequest API (what
//! `devcluster token <namespace>/<name>` prints), in a kubeconfig naming the cluster's server and
//! CA, so that a missing permission shows in the test as it would in the cluster.

use devcluster::DevCluster;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::path::Path;

/// How long the tokens last: longer than any test or benchmark.
pub const TOKEN_SECONDS: i64 = 24 * 3600;

/// A token of the ServiceAccount `namespace/name`, requested by `admin`.
pub async fn token(admin: &Client, namespace: &str, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let tr = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(TOKEN_SECONDS), ..Default::default() },
        ..Default::default()
    };
    sas.create_token_request(name, &PostParams::default(), &tr)
        .await
        .unwrap_or_else(|e| panic!("a token for {namespace}/{name}: {e}"))
        .status
        .unwrap_or_else(|| panic!("the TokenRequest for {namespace}/{name} has no status"))
        .token
}

/// A kubeconfig (JSON, which is YAML) acting as the ServiceAccount `namespace/name` on the
/// cluster: the admin kubeconfig's server and CA, the account's token as the user `name`.
pub async fn kubeconfig(dc: &DevCluster, namespace: &str, name: &str) -> String {
    let token = token(&dc.client(), namespace, name).await;
    let kc = kube::config::Kubeconfig::from_yaml(dc.kubeconfig_yaml()).expect("the admin kubeconfig parses");
    let mut v = serde_json::to_value(&kc).expect("a kubeconfig as JSON");
    v["users"] = json!([{"name": name, "user": {"token": token}}]);
    v["contexts"][0]["context"]["user"] = json!(name);
    v.to_string()
}

/// [`kubeconfig`], written to `path` (for `KUBECONFIG=path`).
pub async fn write_kubeconfig(dc: &DevCluster, namespace: &str, name: &str, path: &Path) {
    let text = kubeconfig(dc, namespace, name).await;
    std::fs::write(path, text)
        .unwrap_or_else(|e| panic!("write the kubeconfig of {namespace}/{name} to {}: {e}", path.display()));
}

/// The client configuration acting as the ServiceAccount (to build a client of one's own, e.g.
/// one counting its requests).
pub async fn config(dc: &DevCluster, namespace: &str, name: &str) -> kube::Config {
    let text = kubeconfig(dc, namespace, name).await;
    let kc = kube::config::Kubeconfig::from_yaml(&text).expect("the ServiceAccount's kubeconfig parses");
    kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("a client configuration for {namespace}/{name}: {e}"))
}

/// A client acting as the ServiceAccount.
pub async fn client(dc: &DevCluster, namespace: &str, name: &str) -> Client {
    Client::try_from(config(dc, namespace, name).await)
        .unwrap_or_else(|e| panic!("a client for {namespace}/{name}: {e}"))
}
