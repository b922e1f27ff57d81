//! `create` and `apply`.
//!
//! `create` POSTs a new preview and fails if one of that name exists. `apply` is server-side
//! apply with field manager `vesperctl`: it creates the preview, or changes only the fields given
//! on the command line (what CI runs on every push, usually with just `--image`).
//!
//! Server-side apply removes the fields a manager applied before and leaves out now, so `apply`
//! first reads which spec fields `vesperctl` applied before (its `managedFields` entry) and sends
//! their current values again: `apply --image B` after `apply --image A --env K=V` keeps the env.
//! It applies with `force`: the pipeline is the source of truth for the fields it sets, even if
//! someone changed them by hand since.

use crate::cli::SpecArgs;
use crate::client::{Previews, Target};
use crate::cmd::wait;
use crate::error::{Error, Result};
use crate::preview::{self, MANAGER, resource_name};
use clikit::apierror::code;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Map, Value, json};
use vesper_api::PreviewEnvironment;

/// The spec fields given on the command line, as JSON (only those).
pub fn given_spec(args: &SpecArgs) -> Map<String, Value> {
    let mut spec = Map::new();
    if let Some(image) = &args.image {
        spec.insert("image".into(), json!(image));
    }
    if let Some(ttl) = &args.ttl {
        spec.insert("ttl".into(), json!(ttl));
    }
    if let Some(replicas) = args.replicas {
        spec.insert("replicas".into(), json!(replicas));
    }
    if let Some(port) = args.port {
        spec.insert("port".into(), json!(port));
    }
    if !args.env.is_empty() {
        spec.insert("env".into(), json!(args.env));
    }
    if !args.args.is_empty() {
        spec.insert("args".into(), json!(args.args));
    }
    if let Some(path) = &args.readiness_path {
        spec.insert("readinessPath".into(), json!(path));
    }
    spec
}

fn body(name: &str, spec: Map<String, Value>) -> Value {
    json!({
        "apiVersion": format!("{}/v1alpha1", vesper_api::GROUP),
        "kind": "PreviewEnvironment",
        "metadata": {"name": name},
        "spec": spec,
    })
}

pub async fn create(t: &Target, args: SpecArgs) -> Result<()> {
    let name = args.name.clone();
    let pe: PreviewEnvironment = serde_json::from_value(body(&name, given_spec(&args)))
        .map_err(|e| Error::Failed(format!("building preview {name:?}: {e}")))?;
    let pp = PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    match t.previews().create(&pp, &pe).await {
        Ok(_) => {}
        Err(e) if code(&e) == Some(409) => {
            return Err(Error::Failed(format!(
                "preview {name:?} already exists in namespace {}: change it with `vesperctl apply {name} --image ...`, or delete it first",
                t.namespace
            )));
        }
        Err(e) => return Err(preview::request_error(t, &name, "creating", e)),
    }
    outln!("{} created", resource_name(&name));
    finish(t, &name, &args).await
}

/// The spec fields (`image`, `env`, ...) that `manager` set by server-side apply.
pub fn applied_fields(entries: &[ManagedFieldsEntry], manager: &str) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some("Apply"))
        .filter_map(|e| e.fields_v1.as_ref()?.0.get("f:spec")?.as_object())
        .flat_map(|spec| spec.keys().filter_map(|k| k.strip_prefix("f:")).map(str::to_string))
        .collect()
}

pub async fn apply(t: &Target, args: SpecArgs) -> Result<()> {
    let name = args.name.clone();
    let api = t.previews();
    let live = api.get_opt(&name).await.map_err(|e| preview::request_error(t, &name, "reading", e))?;
    let mut spec = given_spec(&args);
    if let Some(live) = &live {
        if live.metadata.deletion_timestamp.is_some() {
            return Err(Error::Failed(format!(
                "preview {name:?} is being deleted ({}); wait until it is gone (`vesperctl wait {name} --for deleted`) and apply again",
                preview::summary(live)
            )));
        }
        let live_spec = serde_json::to_value(&live.spec).unwrap_or_default();
        for field in applied_fields(live.metadata.managed_fields.as_deref().unwrap_or_default(), MANAGER) {
            if !spec.contains_key(&field)
                && let Some(v) = live_spec.get(&field)
            {
                spec.insert(field, v.clone());
            }
        }
    }
    let pp = PatchParams::apply(MANAGER).force();
    let after = api
        .patch(&name, &pp, &Patch::Apply(body(&name, spec)))
        .await
        .map_err(|e| preview::request_error(t, &name, "applying", e))?;
    let verb = match &live {
        None => "created",
        Some(before) if before.metadata.resource_version == after.metadata.resource_version => "unchanged",
        Some(_) => "configured",
    };
    outln!("{} {verb}", resource_name(&name));
    if let Some(before) = &live
        && let (Ok(old), Ok(new)) = (before.ttl(), after.ttl())
        && new < old
    {
        // Shortening is allowed here (extend never shortens), and said, on stderr: the expiry
        // moved earlier, perhaps into the past, when the operator deletes the preview.
        let expiry = preview::expires_at(&after)
            .map(|at| {
                let now = jiff::Timestamp::now();
                if at <= now {
                    format!("it expired at {}: the operator deletes it", clikit::timefmt::moment(at))
                } else {
                    format!("it expires at {}", clikit::timefmt::moment(at))
                }
            })
            .unwrap_or_default();
        eprintln!("note: the ttl of preview {name:?} was shortened from {old} to {new}; {expiry}");
    }
    finish(t, &name, &args).await
}

async fn finish(t: &Target, name: &str, args: &SpecArgs) -> Result<()> {
    if args.wait.wait {
        let pe = wait::ready(t, name, args.wait.timeout).await?;
        outln!("{}", wait::ready_line(&pe));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;

    #[test]
    fn reads_the_fields_vesperctl_applied() {
        let entry = |manager: &str, op: &str, fields: Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(op.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        };
        let entries = vec![
            entry("vesperctl", "Apply", json!({"f:spec": {"f:image": {}, "f:env": {}}})),
            entry("vesperctl", "Update", json!({"f:spec": {"f:ttl": {}}})),
            entry("kubectl", "Apply", json!({"f:spec": {"f:replicas": {}}})),
            entry("vesper-operator", "Apply", json!({"f:status": {"f:phase": {}}})),
        ];
        assert_eq!(applied_fields(&entries, "vesperctl"), vec!["image".to_string(), "env".to_string()]);
    }
}
