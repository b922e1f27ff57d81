//! PATCH: turning a patch document and the current object into the object to write, for the four
//! patch types the apiserver accepts.

use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult, Cause};
use crate::meta;
use crate::opts::{FieldValidation, WriteOpts};
use crate::patch::apply::{ApplyError, ApplyParams, apply_with, conflict_causes, conflict_message};
use crate::registry::ResourceDef;
use crate::request::BodyFormat;
use crate::schema::{Defs, SchemaRef};
use crate::store::object_rv;
use serde_json::{Map, Value};
use std::sync::OnceLock;

fn empty_schema() -> (&'static Value, &'static Defs) {
    static EMPTY: OnceLock<(Value, Defs)> = OnceLock::new();
    let (v, d) = EMPTY.get_or_init(|| (Value::Object(Map::new()), Map::new()));
    (v, d)
}

/// The schema patches and apply work with (an empty one when the kind has none).
pub fn schema_of(def: &ResourceDef) -> SchemaRef<'_> {
    match &def.schema {
        Some(k) => k.schema(),
        None => {
            let (v, d) = empty_schema();
            SchemaRef::new(v, d)
        }
    }
}

fn pinned_rv(doc: &Value) -> Option<&str> {
    doc.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The new object (served form) and whether the client pinned a resourceVersion.
pub fn apply_patch(
    _cl: &Cluster,
    def: &ResourceDef,
    name: &str,
    format: BodyFormat,
    doc: &Value,
    cur: Option<&Value>,
    opts: &WriteOpts,
) -> ApiResult<(Value, bool)> {
    if format == BodyFormat::ApplyPatch {
        return apply(def, name, doc, cur, opts);
    }
    let Some(cur) = cur else { return Err(ApiError::not_found(&def.group, &def.plural, name)) };
    if let Some(rv) = pinned_rv(doc)
        && rv != object_rv(cur).to_string()
    {
        return Err(ApiError::stale(&def.group, &def.plural, name));
    }
    let pinned = pinned_rv(doc).is_some();
    let out = match format {
        BodyFormat::MergePatch => crate::patch::apply_merge_patch(cur, doc).map_err(patch_error)?,
        BodyFormat::JsonPatch => {
            if opts.field_validation != FieldValidation::Ignore
                && let Some(e) = crate::patch::json_patch_strict_decode_error(doc)
            {
                return Err(patch_error(e));
            }
            crate::patch::json_patch(cur, doc).map_err(patch_error)?
        }
        BodyFormat::StrategicMergePatch => {
            if !doc.is_object() {
                return Err(ApiError::bad_request("strategic merge patch must be a JSON object"));
            }
            crate::patch::strategic::strategic_merge_patch(cur, doc, schema_of(def)).map_err(patch_error)?
        }
        _ => return Err(ApiError::unsupported_media_type("unsupported patch type")),
    };
    if !out.is_object() {
        return Err(ApiError::bad_request("the patch turned the object into something that is not an object"));
    }
    Ok((out, pinned))
}

fn patch_error(e: crate::patch::PatchError) -> ApiError {
    ApiError::raw(e.status_code(), e.reason(), e.message())
}

/// Server-side apply.
fn apply(
    def: &ResourceDef,
    name: &str,
    doc: &Value,
    cur: Option<&Value>,
    opts: &WriteOpts,
) -> ApiResult<(Value, bool)> {
    if opts.field_manager.is_empty() {
        return Err(ApiError::bad_request("PATCH, fieldManager is required for apply requests"));
    }
    if !doc.is_object() {
        return Err(ApiError::bad_request("apply configuration must be an object"));
    }
    let av = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    if av.is_empty() || kind.is_empty() {
        return Err(ApiError::bad_request(
            "apply configuration must set apiVersion and kind (the object's full intended state)",
        ));
    }
    if av != def.api_version() || kind != def.kind {
        return Err(ApiError::bad_request(format!(
            "the API version and kind in the data ({av}, {kind}) do not match the expected ({}, {})",
            def.api_version(),
            def.kind
        )));
    }
    let doc_name = meta::name(doc);
    if !doc_name.is_empty() && doc_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({doc_name}) does not match the name on the URL ({name})"
        )));
    }
    let mut applied = doc.clone();
    if let Some(m) = meta::meta_mut(&mut applied) {
        m.insert("name".into(), name.into());
    }
    let pinned = pinned_rv(doc).is_some();
    if let (Some(rv), Some(c)) = (pinned_rv(doc), cur)
        && rv != object_rv(c).to_string()
    {
        return Err(ApiError::stale(&def.group, &def.plural, name));
    }
    // What the kind's strategy resets is not the applier's to set: status through the main
    // resource, everything but status through /status.
    if let Some(m) = applied.as_object_mut() {
        match opts.subresource.as_deref() {
            Some("status") => m.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")),
            _ if def.status => {
                m.remove("status");
            }
            _ => {}
        }
    }
    let now = meta::now();
    let api_version = def.api_version();
    let params = ApplyParams {
        live: cur,
        applied: &applied,
        manager: &opts.field_manager,
        subresource: opts.subresource.as_deref(),
        force: opts.force,
        schema: schema_of(def),
        api_version: &api_version,
        now: &now,
    };
    match apply_with(&params) {
        Ok(mut obj) => {
            drop_nulls(&mut obj);
            Ok((obj, pinned))
        }
        Err(ApplyError::Conflicts(conflicts)) => {
            let causes = conflict_causes(&conflicts)
                .into_iter()
                .map(|(reason, message, field)| Cause { reason: reason.to_string(), message, field })
                .collect();
            Err(ApiError::conflict_raw(conflict_message(&conflicts), causes, &def.group, &def.plural, name))
        }
        Err(ApplyError::BadRequest(m)) => Err(ApiError::bad_request(m)),
        Err(ApplyError::Internal(m)) => Err(ApiError::raw(500, "", m)),
    }
}

/// Remove `null` map values, as decoding into the kind's type does.
pub fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}
