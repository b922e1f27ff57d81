//! CustomResourceDefinitions: validating them, deriving the registry entries of the resources they
//! serve, and the status the real server's controllers write (NamesAccepted, Established).

use crate::field::{FieldError, Path};
use crate::registry::{Conversion, GroupResource, KindSchema, NameRule, PrinterColumn, ResourceDef, ScaleDef};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Defaults the real server applies to a CRD (singular, listKind, conversion, printer column types).
pub fn apply_defaults(crd: &mut Value) {
    let kind = s(crd, "/spec/names/kind").to_string();
    if let Some(names) = crd.pointer_mut("/spec/names").and_then(Value::as_object_mut) {
        if names.get("singular").and_then(Value::as_str).unwrap_or("").is_empty() && !kind.is_empty() {
            names.insert("singular".into(), kind.to_ascii_lowercase().into());
        }
        if names.get("listKind").and_then(Value::as_str).unwrap_or("").is_empty() && !kind.is_empty() {
            names.insert("listKind".into(), format!("{kind}List").into());
        }
    }
    if let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut)
        && !spec.contains_key("conversion")
    {
        spec.insert("conversion".into(), json!({"strategy": "None"}));
    }
}

/// Validate a CRD as the real server does (the parts that matter to users).
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = vec![];
    let spec = Path::new("spec");
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    let kind = s(crd, "/spec/names/kind");
    let name = s(crd, "/metadata/name");
    if group.is_empty() {
        errs.push(FieldError::required(spec.child("group"), ""));
    } else if !group.contains('.') {
        errs.push(FieldError::invalid(spec.child("group"), group, "should be a domain with at least one dot"));
    }
    if plural.is_empty() {
        errs.push(FieldError::required(spec.child("names").child("plural"), ""));
    } else if !crate::names::is_dns1035_label(plural).is_empty() {
        let msgs = crate::names::is_dns1035_label(plural);
        errs.push(FieldError::invalid(spec.child("names").child("plural"), plural, msgs.join(",")));
    }
    if kind.is_empty() {
        errs.push(FieldError::required(spec.child("names").child("kind"), ""));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid("metadata.name", name, "must be spec.names.plural+\".\"+spec.group"));
    }
    match s(crd, "/spec/scope") {
        "Namespaced" | "Cluster" => {}
        "" => errs.push(FieldError::required(spec.child("scope"), "")),
        other => errs.push(FieldError::not_supported(spec.child("scope"), other, &["Cluster", "Namespaced"])),
    }
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::invalid(
            spec.child("versions"),
            json!([]),
            "must have exactly one version marked as storage version",
        ));
    }
    let storage_count = versions.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true)).count();
    if !versions.is_empty() && storage_count != 1 {
        errs.push(FieldError::invalid(
            spec.child("versions"),
            Value::String(format!("{storage_count}")),
            "must have exactly one version marked as storage version",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, v) in versions.iter().enumerate() {
        let vp = spec.child("versions").index(i);
        let vname = s(v, "/name");
        if vname.is_empty() {
            errs.push(FieldError::required(vp.child("name"), ""));
        } else if !crate::names::is_dns1035_label(vname).is_empty() {
            errs.push(FieldError::invalid(vp.child("name"), vname, "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character"));
        } else if !seen.insert(vname.to_string()) {
            errs.push(FieldError::duplicate(vp.child("name"), vname));
        }
        match v.pointer("/schema/openAPIV3Schema") {
            None | Some(Value::Null) => {
                errs.push(FieldError::required(vp.child("schema").child("openAPIV3Schema"), "schemas are required"));
            }
            Some(schema) => {
                let sp = vp.child("schema").child("openAPIV3Schema");
                // Rules are compiled only on a schema with no other errors, as upstream.
                let schema_errs = crate::validation::structural::validate_schema(schema, &sp);
                if schema_errs.is_empty() {
                    errs.extend(crate::validation::cel::check_rules(schema, &sp));
                }
                errs.extend(schema_errs);
            }
        }
        for (j, col) in v.get("additionalPrinterColumns").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let cp = vp.child("additionalPrinterColumns").index(j);
            if s(col, "/name").is_empty() {
                errs.push(FieldError::required(cp.child("name"), ""));
            }
            match s(col, "/type") {
                "integer" | "number" | "string" | "boolean" | "date" => {}
                "" => errs.push(FieldError::required(cp.child("type"), "")),
                other => errs.push(FieldError::not_supported(
                    cp.child("type"),
                    other,
                    &["integer", "number", "string", "boolean", "date"],
                )),
            }
            errs.extend(crate::jsonpath::printer_column_json_path_errors(s(col, "/jsonPath"), &cp.child("JSONPath")));
        }
    }
    if let Some(old) = old {
        for (ptr, field) in [("/spec/group", "group"), ("/spec/scope", "scope")] {
            if old.pointer(ptr) != crd.pointer(ptr) {
                errs.push(FieldError::invalid(
                    spec.child(field),
                    crd.pointer(ptr).cloned().unwrap_or(Value::Null),
                    "field is immutable",
                ));
            }
        }
    }
    errs
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, old: Option<&Value>) -> Value {
    // Keep lastTransitionTime when the status did not change.
    let prev = old
        .and_then(|o| o.pointer("/status/conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(type_)));
    let ltt = match prev {
        Some(p) if p.get("status").and_then(Value::as_str) == Some(status) => {
            p.get("lastTransitionTime").cloned().unwrap_or_else(|| crate::meta::now().into())
        }
        _ => crate::meta::now().into(),
    };
    json!({"type": type_, "status": status, "lastTransitionTime": ltt, "reason": reason, "message": message})
}

/// The names other CRDs of the group have been given (their accepted plural, singular and
/// short names; their kinds and list kinds), as the naming controller collects them.
fn names_in_use(cl: &crate::cluster::Cluster, group: &str, me: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (crds, _) = cl.store.list(&GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions"), None);
    let mut resources = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    for c in crds.iter().filter(|c| s(c, "/spec/group") == group && crate::meta::name(c) != me) {
        let an = c.pointer("/status/acceptedNames").cloned().unwrap_or(json!({}));
        for p in ["/plural", "/singular"] {
            if !s(&an, p).is_empty() {
                resources.insert(s(&an, p).to_string());
            }
        }
        resources.extend(str_list(an.get("shortNames")));
        for p in ["/kind", "/listKind"] {
            if !s(&an, p).is_empty() {
                kinds.insert(s(&an, p).to_string());
            }
        }
    }
    (resources, kinds)
}

/// `equalToAcceptedOrFresh`
fn fresh(requested: &str, accepted: &str, used: &BTreeSet<String>) -> Result<(), String> {
    if requested == accepted || !used.contains(requested) {
        Ok(())
    } else {
        Err(format!("{requested:?} is already in use"))
    }
}

/// The status the CRD controllers write: accepted names and NamesAccepted (naming controller,
/// which checks plural, singular, short names, kind and list kind in that order; the last
/// conflict found is the reason), Established (establishing controller), Terminating, and the
/// stored versions.
pub fn compute_status(cl: &crate::cluster::Cluster, crd: &mut Value, old: Option<&Value>) {
    let group = s(crd, "/spec/group").to_string();
    let my_name = s(crd, "/metadata/name").to_string();
    let (resources, kinds) = names_in_use(cl, &group, &my_name);
    let requested = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let accepted = old.and_then(|o| o.pointer("/status/acceptedNames")).cloned().unwrap_or(json!({}));
    let mut names = accepted.as_object().cloned().unwrap_or_default();
    let mut conflict: Option<(&str, String)> = None;
    for (field, reason) in [("plural", "PluralConflict"), ("singular", "SingularConflict")] {
        match fresh(s(&requested, &format!("/{field}")), s(&accepted, &format!("/{field}")), &resources) {
            Ok(()) => {
                names.insert(field.into(), requested.get(field).cloned().unwrap_or(json!("")));
            }
            Err(e) => conflict = Some((reason, e)),
        }
    }
    let want_short = str_list(requested.get("shortNames"));
    let have_short = str_list(accepted.get("shortNames"));
    if want_short != have_short {
        let errs: Vec<String> = want_short
            .iter()
            .filter(|n| !have_short.contains(n))
            .filter_map(|n| fresh(n, "", &resources).err())
            .collect();
        if errs.is_empty() {
            if want_short.is_empty() {
                names.remove("shortNames");
            } else {
                names.insert("shortNames".into(), json!(want_short));
            }
        } else {
            conflict = Some((
                "ShortNamesConflict",
                if errs.len() == 1 { errs[0].clone() } else { format!("[{}]", errs.join(", ")) },
            ));
        }
    }
    for (field, reason) in [("kind", "KindConflict"), ("listKind", "ListKindConflict")] {
        match fresh(s(&requested, &format!("/{field}")), s(&accepted, &format!("/{field}")), &kinds) {
            Ok(()) => {
                names.insert(field.into(), requested.get(field).cloned().unwrap_or(json!("")));
            }
            Err(e) => conflict = Some((reason, e)),
        }
    }
    match requested.get("categories") {
        Some(c) => {
            names.insert("categories".into(), c.clone());
        }
        None => {
            names.remove("categories");
        }
    }
    names.retain(|_, v| !v.is_null());
    names.entry("plural").or_insert(json!(""));
    names.entry("kind").or_insert(json!(""));
    let was_established = old.is_some_and(is_established);
    let mut conditions = vec![];
    match &conflict {
        Some((reason, msg)) => conditions.push(condition("NamesAccepted", "False", reason, msg, old)),
        None => conditions.push(condition("NamesAccepted", "True", "NoConflicts", "no conflicts found", old)),
    }
    if was_established || conflict.is_none() {
        conditions.push(condition(
            "Established",
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
            old,
        ));
    } else {
        conditions.push(condition("Established", "False", "NotAccepted", "not all names are accepted", old));
    }
    if crate::meta::is_deleting(crd) {
        conditions.push(condition(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            old,
        ));
    }
    let mut stored: Vec<String> =
        old.and_then(|o| o.pointer("/status/storedVersions")).map(|v| str_list(Some(v))).unwrap_or_default();
    for v in crd.pointer("/spec/versions").and_then(Value::as_array).into_iter().flatten() {
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            let n = s(v, "/name").to_string();
            if !stored.contains(&n) {
                stored.push(n);
            }
        }
    }
    let mut status = Map::new();
    status.insert("conditions".into(), Value::Array(conditions));
    status.insert("acceptedNames".into(), Value::Object(names));
    status.insert("storedVersions".into(), stored.into_iter().map(Value::from).collect());
    if let Some(m) = crd.as_object_mut() {
        m.insert("status".into(), Value::Object(status));
    }
}

pub fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
}

fn printer_columns(v: &Value) -> Vec<PrinterColumn> {
    let cols: Vec<PrinterColumn> = v
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| PrinterColumn {
            name: s(c, "/name").to_string(),
            type_: s(c, "/type").to_string(),
            format: s(c, "/format").to_string(),
            description: match s(c, "/description") {
                "" => format!("Custom resource definition column (in JSONPath format): {}", s(c, "/jsonPath")),
                d => d.to_string(),
            },
            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            json_path: s(c, "/jsonPath").to_string(),
        })
        .collect();
    if cols.is_empty() {
        vec![PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: "CreationTimestamp is a timestamp representing the server time when this object was created."
                .into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }]
    } else {
        cols
    }
}

/// The registry entries of an established CRD: one per served version.
pub fn resource_defs(crd: &Value) -> Vec<ResourceDef> {
    let crd_name = s(crd, "/metadata/name").to_string();
    let group = s(crd, "/spec/group").to_string();
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let kind = s(&names, "/kind").to_string();
    let plural = s(&names, "/plural").to_string();
    let singular = match s(&names, "/singular") {
        "" => kind.to_ascii_lowercase(),
        x => x.to_string(),
    };
    let list_kind = match s(&names, "/listKind") {
        "" => format!("{kind}List"),
        x => x.to_string(),
    };
    let namespaced = s(crd, "/spec/scope") != "Cluster";
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|v| s(v, "/name").to_string())
        .unwrap_or_default();
    let builtin_defs = crate::registry::builtin_schemas().0.clone();
    let kind_schema = |v: &Value| {
        let version = s(v, "/name").to_string();
        v.pointer("/schema/openAPIV3Schema").cloned().map(|mut root| {
            // The server grafts ObjectMeta into a CR's schema, so that apply treats
            // finalizers as a set and ownerReferences as keyed by uid.
            if let Some(props) = root.as_object_mut().map(|m| m.entry("properties").or_insert_with(|| json!({})))
                && let Some(p) = props.as_object_mut()
            {
                p.insert(
                    "metadata".into(),
                    json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}),
                );
            }
            KindSchema {
                root,
                defs: builtin_defs.clone(),
                name: format!("{}.{}.{}", reverse_domain(&group), version, kind),
            }
        })
    };
    let storage_schema = versions.iter().find(|v| s(v, "/name") == storage_version).and_then(kind_schema);
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .map(|v| {
            let version = s(v, "/name").to_string();
            let schema = kind_schema(v);
            let storage_schema = storage_schema
                .as_ref()
                .filter(|st| needs_storage_schema(&version, &storage_version, &st.root))
                .cloned();
            let scale = v.pointer("/subresources/scale").filter(|s| s.is_object()).map(|sc| ScaleDef {
                spec_replicas_path: s(sc, "/specReplicasPath").to_string(),
                status_replicas_path: s(sc, "/statusReplicasPath").to_string(),
                label_selector_path: sc.get("labelSelectorPath").and_then(Value::as_str).map(str::to_string),
            });
            let field_labels = v
                .get("selectableFields")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                .map(|p| {
                    let label = p.trim_start_matches('.').to_string();
                    (label.clone(), label)
                })
                .collect();
            ResourceDef {
                group: group.clone(),
                version,
                kind: kind.clone(),
                list_kind: list_kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced,
                short_names: str_list(names.get("shortNames")),
                categories: str_list(names.get("categories")),
                verbs: vec!["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"],
                status: v.pointer("/subresources/status").is_some_and(Value::is_object),
                scale,
                generation: true,
                name_rule: NameRule::Dns1123Subdomain,
                storage: GroupResource::new(&group, &plural),
                conversion: Conversion::None,
                schema,
                columns: printer_columns(v),
                crd: Some(crd_name.clone()),
                storage_version: storage_version.clone(),
                storage_schema,
                field_labels,
                return_deleted_object: false,
                create_on_update: false,
                review: false,
            }
        })
        .collect()
}

/// Whether reads or writes through `version` need the storage version's schema: another
/// version is stored (its schema prunes what is stored), or the stored version's schema has
/// defaults (applied to every object read).
pub fn needs_storage_schema(version: &str, storage_version: &str, storage_root: &Value) -> bool {
    fn has_default(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.contains_key("default") || m.values().any(has_default),
            Value::Array(a) => a.iter().any(has_default),
            _ => false,
        }
    }
    version != storage_version || has_default(storage_root)
}

/// A custom resource on its way to storage: pruned with the storage version's schema when it
/// was written through another version (apiextensions-apiserver
/// pkg/apiserver/customresource_handler.go: the storage codec's `schemaCoercingConverter` prunes
/// after converting to the storage version; with strategy `None` only apiVersion changes).
pub fn coerce_for_storage(def: &ResourceDef, obj: &mut Value) {
    if def.version == def.storage_version {
        return;
    }
    if let Some(st) = &def.storage_schema {
        crate::validation::structural::prune(obj, st.schema());
    }
}

/// A stored custom resource read through `def`: the storage version's defaults apply (the
/// storage codec's `unstructuredDefaulter` runs on the decoded, stored version), then it is
/// pruned with the schema of the version read (`schemaCoercingConverter` after the conversion).
/// Nothing is written back, as upstream.
pub fn coerce_for_read(def: &ResourceDef, obj: &mut Value) {
    let Some(st) = &def.storage_schema else { return };
    crate::validation::structural::apply_defaults(obj, st.schema());
    if def.version != def.storage_version
        && let Some(s) = &def.schema
    {
        crate::validation::structural::prune(obj, s.schema());
    }
}

/// Whether a CRD has the `Terminating` condition its cleanup controller sets (then no new
/// objects are created).
pub fn is_terminating(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Terminating" && c["status"] == "True"))
}

/// `vesper.eventide.dev` -> `dev.eventide.vesper`, as the apiserver names CR schemas.
pub fn reverse_domain(group: &str) -> String {
    let mut parts: Vec<&str> = group.split('.').collect();
    parts.reverse();
    parts.join(".")
}
