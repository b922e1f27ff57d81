//! OpenAPI v3 as the apiserver publishes it: `/openapi/v3` lists one document per group-version,
//! each with the paths of its resources (operations tagged with `x-kubernetes-group-version-kind`
//! and the `fieldValidation` parameter, which kubectl checks before it trusts the server to
//! validate) and the schemas of its kinds (what `kubectl explain` reads).

use crate::errors::{ApiError, ApiResult};
use crate::registry::{Registry, ResourceDef, builtin_schemas};
use crate::schema::Defs;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::sync::OnceLock;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

fn salt() -> &'static str {
    static SALT: OnceLock<String> = OnceLock::new();
    SALT.get_or_init(|| crate::tls::random_token()[..8].to_string())
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// `/openapi/v3`
pub fn index(reg: &Registry) -> Value {
    let mut gvs: BTreeSet<(String, String)> = BTreeSet::new();
    for d in reg.all() {
        gvs.insert((d.group.clone(), d.version.clone()));
    }
    let generation = reg.generation();
    let mut paths = Map::new();
    for (g, v) in gvs {
        let p = gv_path(&g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}{generation:08X}", salt())}),
        );
    }
    json!({"paths": paths})
}

fn collect_refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref")
                && let Some(name) = r.strip_prefix("#/components/schemas/")
            {
                out.insert(name.to_string());
            }
            for x in m.values() {
                collect_refs(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

/// Add `name` and everything it references (from `defs`) into `into`.
fn add_closure(name: &str, defs: &Defs, into: &mut Map<String, Value>) {
    let mut todo = vec![name.to_string()];
    while let Some(n) = todo.pop() {
        if into.contains_key(&n) {
            continue;
        }
        let Some(d) = defs.get(&n) else { continue };
        into.insert(n.clone(), d.clone());
        let mut refs = BTreeSet::new();
        collect_refs(d, &mut refs);
        todo.extend(refs.into_iter().filter(|r| !into.contains_key(r)));
    }
}

/// The component schema of a custom resource: its openAPIV3Schema with apiVersion, kind and
/// metadata added, as the apiserver publishes it.
fn cr_schema(d: &ResourceDef) -> Value {
    let mut root = d.schema.as_ref().map(|k| k.root.clone()).unwrap_or_else(|| json!({"type": "object"}));
    if let Some(m) = root.as_object_mut() {
        let props = m.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            p.insert("apiVersion".into(), json!({"description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"}));
            p.insert("kind".into(), json!({"description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"}));
            p.insert("metadata".into(), json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}));
        }
        m.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": d.group, "kind": d.kind, "version": d.version}]),
        );
    }
    root
}

const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

fn list_meta_schema() -> Value {
    json!({
        "description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects. A resource may have only one of {ObjectMeta, ListMeta}.",
        "type": "object",
        "properties": {
            "continue": {"description": "continue may be set if the user set a limit on the number of items returned, and indicates that the server has more data available.", "type": "string"},
            "remainingItemCount": {"description": "remainingItemCount is the number of subsequent items in the list which are not included in this list response.", "type": "integer", "format": "int64"},
            "resourceVersion": {"description": "String that identifies the server's internal version of this object that can be used by clients to determine when objects have changed.", "type": "string"},
            "selfLink": {"description": "Deprecated: selfLink is a legacy read-only field that is no longer populated by the system.", "type": "string"}
        }
    })
}

/// The `<Kind>List` schema the apiserver publishes next to a custom resource's.
fn cr_list_schema(d: &ResourceDef, item: &str) -> Value {
    json!({
        "description": format!("{} is a list of {}", d.list_kind, d.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"},
            "items": {"description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md", d.plural), "type": "array", "items": {"$ref": format!("#/components/schemas/{item}")}},
            "kind": {"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"},
            "metadata": {"allOf": [{"$ref": format!("#/components/schemas/{LIST_META}")}], "description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects."}
        },
        "x-kubernetes-group-version-kind": [{"group": d.group, "kind": d.list_kind, "version": d.version}]
    })
}

fn param(name: &str, desc: &str, ty: &str) -> Value {
    json!({"name": name, "in": "query", "description": desc, "schema": {"type": ty, "uniqueItems": true}})
}

fn gvk(d: &ResourceDef) -> Value {
    json!({"group": d.group, "kind": d.kind, "version": d.version})
}

fn op(d: &ResourceDef, action: &str, verb_desc: &str, schema_ref: &Value, params: Vec<Value>, body: bool) -> Value {
    let mut o = json!({
        "tags": [format!("{}_{}", if d.group.is_empty() { "core" } else { &d.group }, d.version)],
        "description": format!("{verb_desc} {}", d.kind),
        "operationId": format!("{action}{}{}", d.kind, d.version),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": schema_ref}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(d),
    });
    if body {
        let content = if action == "patch" {
            // kubectl apply uses strategic merge patch exactly when this list offers it, so it is
            // offered for built-in kinds only (custom resources answer it with 415, like upstream).
            let patch_schema =
                json!({"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}});
            let mut types =
                vec!["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"];
            if !d.is_custom() {
                types.push("application/strategic-merge-patch+json");
            }
            Value::Object(types.into_iter().map(|t| (t.to_string(), patch_schema.clone())).collect())
        } else {
            json!({"*/*": {"schema": schema_ref}})
        };
        o["requestBody"] = json!({"content": content, "required": true});
    }
    o
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut p = vec![
        param("dryRun", "When present, indicates that modifications should not be persisted.", "string"),
        param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
            "string",
        ),
        param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn (the default) - Strict",
            "string",
        ),
    ];
    if patch {
        p.push(param("force", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people.", "boolean"));
    }
    p
}

fn paths_for(d: &ResourceDef, schema_ref: &Value, paths: &mut Map<String, Value>) {
    let prefix =
        if d.group.is_empty() { format!("/api/{}", d.version) } else { format!("/apis/{}/{}", d.group, d.version) };
    let coll = if d.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", d.plural)
    } else {
        format!("{prefix}/{}", d.plural)
    };
    let list_ref = json!({"type": "object"});
    let mut path_params = vec![];
    if d.namespaced {
        path_params.push(json!({"name": "namespace", "in": "path", "description": "object name and auth scope, such as for teams and projects", "required": true, "schema": {"type": "string", "uniqueItems": true}}));
    }
    paths.insert(
        coll.clone(),
        json!({
            "get": op(d, "list", "list or watch objects of kind", &list_ref, vec![], false),
            "post": op(d, "post", "create a", schema_ref, write_params(false), true),
            "delete": op(d, "deletecollection", "delete collection of", &json!({"type": "object"}), vec![], false),
            "parameters": path_params.clone(),
        }),
    );
    let mut item_params = vec![
        json!({"name": "name", "in": "path", "description": format!("name of the {}", d.kind), "required": true, "schema": {"type": "string", "uniqueItems": true}}),
    ];
    item_params.extend(path_params);
    let item = json!({
        "get": op(d, "get", "read the specified", schema_ref, vec![], false),
        "put": op(d, "put", "replace the specified", schema_ref, write_params(false), true),
        "patch": op(d, "patch", "partially update the specified", schema_ref, write_params(true), true),
        "delete": op(d, "delete", "delete a", &json!({"type": "object"}), vec![], false),
        "parameters": item_params.clone(),
    });
    paths.insert(format!("{coll}/{{name}}"), item);
    if d.status {
        paths.insert(
            format!("{coll}/{{name}}/status"),
            json!({
                "get": op(d, "get", "read status of the specified", schema_ref, vec![], false),
                "put": op(d, "put", "replace status of the specified", schema_ref, write_params(false), true),
                "patch": op(d, "patch", "partially update status of the specified", schema_ref, write_params(true), true),
                "parameters": item_params,
            }),
        );
    }
    if d.namespaced {
        paths.insert(
            format!("{prefix}/{}", d.plural),
            json!({"get": op(d, "list", "list or watch objects of kind", &list_ref, vec![], false)}),
        );
    }
}

/// `/openapi/v3/api/v1`, `/openapi/v3/apis/{group}/{version}`
pub fn document(reg: &Registry, gv: &str) -> ApiResult<Value> {
    let (group, version) = match gv.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return Err(ApiError::not_found_path()),
    };
    let defs = reg.group_version(group, version);
    if defs.is_empty() {
        return Err(ApiError::not_found_path());
    }
    let (builtin_defs, _) = builtin_schemas();
    let mut schemas = Map::new();
    let mut paths = Map::new();
    add_closure("io.k8s.apimachinery.pkg.apis.meta.v1.Patch", builtin_defs, &mut schemas);
    schemas.entry("io.k8s.apimachinery.pkg.apis.meta.v1.Patch").or_insert_with(|| {
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"})
    });
    for d in &defs {
        let Some(ks) = &d.schema else { continue };
        let schema_ref = json!({"$ref": format!("#/components/schemas/{}", ks.name)});
        if d.is_custom() {
            schemas.insert(ks.name.clone(), cr_schema(d));
            schemas.insert(format!("{}List", ks.name), cr_list_schema(d, &ks.name));
            add_closure(OBJECT_META, builtin_defs, &mut schemas);
            schemas.entry(LIST_META).or_insert_with(list_meta_schema);
        } else {
            add_closure(&ks.name, &ks.defs, &mut schemas);
        }
        paths_for(d, &schema_ref, &mut paths);
    }
    Ok(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
