//! Deletion through the finalizer `vesper.eventide.dev/cleanup`: when a preview is deleted (by a
//! user, or because its TTL passed), the API server keeps it until the operator has deleted the
//! preview's namespace (which deletes everything in it) and seen it gone. A preview is never
//! removed while its namespace remains. A namespace that is not Vesper's (no preview UID) is
//! never deleted.

use crate::context::Context;
use crate::error::{Error, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use opkit::apply::Outcome;
use opkit::events::Note;
use serde_json::json;
use std::time::Duration;
use vesper_api::{FINALIZER, PreviewEnvironment};

fn api(ctx: &Context, pe: &PreviewEnvironment) -> Api<PreviewEnvironment> {
    Api::namespaced(ctx.client.clone(), &pe.namespace().unwrap_or_default())
}

/// Add the finalizer when it is missing (a merge patch carrying the resourceVersion read, so a
/// concurrent change makes it fail with a conflict instead of being overwritten).
pub async fn ensure(pe: &PreviewEnvironment, ctx: &Context) -> Result<()> {
    if pe.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    let patch = json!({"metadata": {"finalizers": pe.finalizers().iter().cloned().chain([FINALIZER.to_string()]).collect::<Vec<_>>(),
        "resourceVersion": pe.resource_version()}});
    api(ctx, pe).patch(&pe.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    ctx.metrics.writes.record("PreviewEnvironment", Outcome::Updated);
    Ok(())
}

/// Release the finalizer: a JSON patch that tests the finalizers read and replaces them, so a
/// concurrent change of the list fails the patch, while the operator's own status writes (which
/// move the resourceVersion, and may not be in the cache yet) do not.
async fn remove(pe: &PreviewEnvironment, ctx: &Context) -> Result<()> {
    let all = pe.finalizers().to_vec();
    let rest: Vec<String> = all.iter().filter(|f| *f != FINALIZER).cloned().collect();
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": all},
        {"op": "replace", "path": "/metadata/finalizers", "value": rest},
    ]))
    .map_err(|e| Error::Serialize("finalizer patch", e))?;
    match api(ctx, pe).patch(&pe.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch)).await {
        Ok(_) => {
            ctx.metrics.writes.record("PreviewEnvironment", Outcome::Updated);
            ctx.forget(pe);
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {
            ctx.forget(pe);
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The deletion path: delete the namespace, wait until it is gone, then let the preview go.
pub async fn cleanup(pe: &PreviewEnvironment, ctx: &Context) -> Result<Action> {
    if !pe.finalizers().iter().any(|f| f == FINALIZER) {
        // Not ours to hold (deleted before we added it): nothing to clean but our memory.
        ctx.forget(pe);
        return Ok(Action::await_change());
    }
    let name = crate::naming::namespace_name(&pe.namespace().unwrap_or_default(), &pe.name_any());
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let ns = namespaces.get_opt(&name).await?;
    match &ns {
        Some(n) if crate::meta::is_ours(&n.metadata, pe) => {
            if n.metadata.deletion_timestamp.is_none() {
                tracing::info!(namespace = %name, preview = %pe.name_any(), "deleting the preview's namespace");
                ctx.kit.delete(&namespaces, &name, &DeleteParams::background()).await.map_err(Error::Write)?;
                let note = Note::normal("DeletingNamespace", format!("deleting namespace {name} and everything in it"));
                ctx.kit.events.note(&pe.object_ref(&()), None, "Cleanup", &note).await;
            }
            // Explain the wait in the preview's status; the namespace's changes wake us up.
            let status = crate::status::deleting(pe, Some(n), ctx.kit.clock.now());
            ctx.kit.write_status(pe, &status).await.map_err(Error::Write)?;
            Ok(Action::requeue(Duration::from_secs(30)))
        }
        _ => {
            // Gone, or never Vesper's: nothing of ours remains. `remove` forgets the preview
            // (every map and the phase gauge) once the finalizer is released.
            remove(pe, ctx).await?;
            Ok(Action::await_change())
        }
    }
}
