//! Discovery: `/api`, `/apis`, `/api/v1`, `/apis/{group}[/{version}]`, in the legacy form and as
//! aggregated discovery (`as=APIGroupDiscoveryList`, v2 and v2beta1) that kubectl 1.32 asks for.

use crate::errors::{ApiError, ApiResult};
use crate::registry::{Registry, ResourceDef};
use serde_json::{Value, json};
use std::sync::Arc;

/// A stable hash of the served names of a resource, like the real `storageVersionHash`.
fn storage_version_hash(d: &ResourceDef) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&d.group, &d.storage_version, &d.kind).hash(&mut h);
    let bytes = h.finish().to_be_bytes();
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes)[..11].to_string()
}

fn verbs(d: &ResourceDef) -> Value {
    let mut v: Vec<&str> = d.verbs.clone();
    v.sort();
    json!(v)
}

fn legacy_resources(defs: &[Arc<ResourceDef>]) -> Vec<Value> {
    let mut out = vec![];
    let mut defs: Vec<&Arc<ResourceDef>> = defs.iter().collect();
    defs.sort_by(|a, b| a.plural.cmp(&b.plural));
    for d in defs {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": verbs(d),
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        r["storageVersionHash"] = json!(storage_version_hash(d));
        out.push(r);
        if d.status {
            out.push(json!({"name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced, "kind": d.kind, "verbs": ["get", "patch", "update"]}));
        }
        if d.scale.is_some() {
            out.push(json!({"name": format!("{}/scale", d.plural), "singularName": "", "namespaced": d.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
        }
        if d.group.is_empty() && d.plural == "namespaces" {
            out.push(json!({"name": "namespaces/finalize", "singularName": "", "namespaced": false, "kind": "Namespace", "verbs": ["update"]}));
        }
        if !d.is_custom() {
            for x in crate::registry::extra_subresources(&d.group, &d.plural) {
                out.push(json!({"name": format!("{}/{}", d.plural, x.name), "singularName": "", "namespaced": d.namespaced, "kind": x.kind, "verbs": x.verbs}));
            }
        }
        if d.group.is_empty() && d.plural == "pods" {
            out.push(json!({"name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"]}));
            // Served by src/eviction.rs; kubectl drain evicts only when it finds this entry.
            out.push(json!({"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
            // Served by the process runtime (src/runtime/).
            out.push(json!({"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions", "verbs": ["create", "get"]}));
            out.push(
                json!({"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]}),
            );
            out.push(json!({"name": "pods/portforward", "singularName": "", "namespaced": true, "kind": "PodPortForwardOptions", "verbs": ["create", "get"]}));
        }
    }
    // The apiserver lists resources by path.
    out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    out
}

/// `/api`
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
    let preferred = versions.first().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}));
    json!({"name": name, "versions": vs, "preferredVersion": preferred})
}

/// `/apis`
pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg.groups().iter().map(|g| group_json(&g.name, &g.versions)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`
pub fn api_group(reg: &Registry, group: &str) -> ApiResult<Value> {
    let g = reg.groups().into_iter().find(|g| g.name == group).ok_or_else(ApiError::not_found_path)?;
    let mut v = group_json(&g.name, &g.versions);
    if let Some(m) = v.as_object_mut() {
        let mut out = serde_json::Map::new();
        out.insert("kind".into(), "APIGroup".into());
        out.insert("apiVersion".into(), "v1".into());
        out.append(m);
        return Ok(serde_json::Value::Object(out));
    }
    Ok(v)
}

/// `/api/v1` or `/apis/{group}/{version}`
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> ApiResult<Value> {
    let defs = reg.group_version(group, version);
    if defs.is_empty() {
        return Err(ApiError::not_found_path());
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Ok(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": legacy_resources(&defs),
    }))
}

fn aggregated_resource(d: &ResourceDef) -> Value {
    // Built-in resources leave group and version of their responseKind empty, as upstream does.
    let (g, v) = if d.is_custom() { (d.group.as_str(), d.version.as_str()) } else { ("", "") };
    let mut r = json!({
        "resource": d.plural,
        "responseKind": {"group": g, "version": v, "kind": d.kind},
        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": d.singular,
        "verbs": verbs(d),
    });
    if !d.short_names.is_empty() {
        r["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        r["categories"] = json!(d.categories);
    }
    let mut subs = vec![];
    if d.scale.is_some() {
        subs.push(json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "patch", "update"]}));
    }
    if d.status {
        subs.push(json!({"subresource": "status", "responseKind": {"group": g, "version": v, "kind": d.kind}, "verbs": ["get", "patch", "update"]}));
    }
    if d.group.is_empty() && d.plural == "namespaces" {
        subs.push(json!({"subresource": "finalize", "responseKind": {"group": "", "version": "v1", "kind": "Namespace"}, "verbs": ["update"]}));
    }
    if !d.is_custom() {
        for x in crate::registry::extra_subresources(&d.group, &d.plural) {
            subs.push(json!({"subresource": x.name, "responseKind": {"group": "", "version": "", "kind": x.kind}, "verbs": x.verbs}));
        }
    }
    if d.group.is_empty() && d.plural == "pods" {
        subs.push(json!({"subresource": "eviction", "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"}, "verbs": ["create"]}));
    }
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

/// Aggregated discovery for `/api` (core only) or `/apis` (every group).
pub fn aggregated(reg: &Registry, core: bool, v2beta1: bool) -> Value {
    let mut items = vec![];
    let groups: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        reg.groups().into_iter().map(|g| (g.name, g.versions)).collect()
    };
    for (name, versions) in groups {
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| {
                let mut defs = reg.group_version(&name, v);
                defs.sort_by(|a, b| a.plural.cmp(&b.plural));
                json!({
                    "version": v,
                    "resources": defs.iter().map(|d| aggregated_resource(d)).collect::<Vec<_>>(),
                    "freshness": "Current",
                })
            })
            .collect();
        items.push(json!({"metadata": {"name": name, "creationTimestamp": null}, "versions": vs}));
    }
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": if v2beta1 { "apidiscovery.k8s.io/v2beta1" } else { "apidiscovery.k8s.io/v2" },
        "metadata": {},
        "items": items,
    })
}

/// `/version`
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": concat!("v1.33.0+devcluster-", env!("CARGO_PKG_VERSION")),
        "gitCommit": "devcluster",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}
