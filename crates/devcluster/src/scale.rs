//! The scale subresource: an `autoscaling/v1` Scale view of a Deployment, StatefulSet,
//! ReplicaSet or custom resource, whose writes change the parent's replica count. Its own
//! storage over the parent's, as upstream's ScaleREST: `api` routes `.../scale` here, and
//! reads and writes go to the parent through `ops`.

use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult};
use crate::ops::{self, WriteOpts, Written};
use crate::registry::ResourceDef;
use crate::request::BodyFormat;
use serde_json::{Map, Value, json};

fn path_get<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in dotted.trim_start_matches('.').split('.') {
        cur = cur.get(seg)?;
    }
    Some(cur)
}

fn path_set(obj: &mut Value, dotted: &str, v: Value) {
    let segs: Vec<&str> = dotted.trim_start_matches('.').split('.').collect();
    let mut cur = obj;
    for (i, seg) in segs.iter().enumerate() {
        let Some(m) = cur.as_object_mut() else { return };
        if i == segs.len() - 1 {
            m.insert(seg.to_string(), v);
            return;
        }
        cur = m.entry(seg.to_string()).or_insert_with(|| json!({}));
    }
}

/// `matchLabels`/`matchExpressions` as the selector string a Scale carries.
fn selector_string(sel: &Value) -> String {
    match crate::selector::LabelSelector::from_label_selector(sel) {
        Ok(s) => s.to_string(),
        Err(_) => String::new(),
    }
}

/// The Scale of an object (served form).
pub fn scale_of(def: &ResourceDef, obj: &Value) -> Value {
    let sd = def.scale.clone().unwrap_or_else(|| crate::registry::ScaleDef {
        spec_replicas_path: ".spec.replicas".into(),
        status_replicas_path: ".status.replicas".into(),
        label_selector_path: None,
    });
    let spec_replicas = path_get(obj, &sd.spec_replicas_path).and_then(Value::as_i64).unwrap_or(0);
    let status_replicas = path_get(obj, &sd.status_replicas_path).and_then(Value::as_i64).unwrap_or(0);
    let selector = if def.is_custom() {
        sd.label_selector_path
            .as_deref()
            .and_then(|p| path_get(obj, p))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    } else {
        match obj.pointer("/spec/selector") {
            // A ReplicationController's selector is a plain label map.
            Some(sel) if def.kind == "ReplicationController" => selector_string(&json!({"matchLabels": sel})),
            Some(sel) => selector_string(sel),
            None => String::new(),
        }
    };
    let m = obj.get("metadata").cloned().unwrap_or_default();
    let mut md = Map::new();
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = m.get(k) {
            md.insert(k.into(), v.clone());
        }
    }
    let mut status = Map::new();
    status.insert("replicas".into(), status_replicas.into());
    if !selector.is_empty() {
        status.insert("selector".into(), selector.into());
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": Value::Object(md),
        "spec": {"replicas": spec_replicas},
        "status": Value::Object(status),
    })
}

pub fn get(cl: &Cluster, def: &ResourceDef, ns: &str, name: &str) -> ApiResult<Value> {
    let obj = ops::get(cl, def, ns, name)?;
    Ok(scale_of(def, &obj))
}

fn write_replicas(
    cl: &Cluster,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    scale: &Value,
    opts: &WriteOpts,
) -> ApiResult<Written> {
    // Scale.spec.replicas is omitempty: absent means 0 (protobuf bodies omit it).
    let replicas = scale.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
    if replicas < 0 {
        return Err(ApiError::invalid(
            "autoscaling",
            "Scale",
            name,
            &[crate::field::FieldError::invalid("spec.replicas", replicas, "must be greater than or equal to 0")],
        ));
    }
    // The new replica count goes to the parent as a merge patch, pinned to a resourceVersion
    // only when the Scale carried one (so it does not race the controllers' status writes).
    let path = def.scale.as_ref().map(|s| s.spec_replicas_path.clone()).unwrap_or_else(|| ".spec.replicas".into());
    let mut patch = json!({});
    path_set(&mut patch, &path, replicas.into());
    if let Some(rv) = scale.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|s| !s.is_empty())
        && let Some(m) = patch.as_object_mut()
    {
        m.insert("metadata".into(), json!({"resourceVersion": rv}));
    }
    let body = serde_json::to_vec(&patch).unwrap_or_default();
    let parent_opts = WriteOpts { subresource: None, ..opts.clone() };
    let w = ops::patch(cl, def, ns, name, BodyFormat::MergePatch, &body, &parent_opts)?;
    Ok(Written { object: scale_of(def, &w.object), ..w })
}

pub fn update(
    cl: &Cluster,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    body: Value,
    opts: &WriteOpts,
) -> ApiResult<Written> {
    write_replicas(cl, def, ns, name, &body, opts)
}

pub fn patch(
    cl: &Cluster,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    format: BodyFormat,
    body: &[u8],
    opts: &WriteOpts,
) -> ApiResult<Written> {
    let cur = get(cl, def, ns, name)?;
    let doc: Value = crate::request::decode_body(body, format == BodyFormat::ApplyPatch)?;
    let patched = match format {
        BodyFormat::JsonPatch => {
            crate::patch::json_patch(&cur, &doc).map_err(|e| ApiError::raw(e.status_code(), e.reason(), e.message()))?
        }
        _ => crate::patch::apply_merge_patch(&cur, &doc)
            .map_err(|e| ApiError::raw(e.status_code(), e.reason(), e.message()))?,
    };
    // The version read here is not a precondition: only one the patch itself sets is.
    let mut patched = patched;
    let pinned = patched.pointer("/metadata/resourceVersion") != cur.pointer("/metadata/resourceVersion");
    if !pinned && let Some(m) = patched.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    write_replicas(cl, def, ns, name, &patched, opts)
}
