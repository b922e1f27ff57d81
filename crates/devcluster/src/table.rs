//! Server-side printing: `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` answers a Table
//! whose columns are the kind's printer columns (a CRD's `additionalPrinterColumns`, or the
//! apiserver's built-in printers, or Name and Created At for kinds without one), and
//! `as=PartialObjectMetadata` answers metadata only.

use crate::builtin::printers;
use crate::registry::ResourceDef;
use serde_json::{Map, Value, json};

/// `PartialObjectMetadata` of an object.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A `PartialObjectMetadataList` of a list result.
pub fn partial_metadata_list(items: &[Value], list_meta: Value) -> Value {
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
    })
}

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

fn column_json(name: &str, type_: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({"name": name, "type": type_, "format": format, "description": description, "priority": priority})
}

fn column_defs(def: &ResourceDef) -> Vec<Value> {
    if def.is_custom() {
        let mut cols = vec![column_json("Name", "string", "name", NAME_DESCRIPTION, 0)];
        cols.extend(def.columns.iter().map(|c| column_json(&c.name, &c.type_, &c.format, &c.description, c.priority)));
        return cols;
    }
    printers::columns(&def.group, &def.kind)
        .unwrap_or_else(printers::default_columns)
        .into_iter()
        .map(|c| column_json(c.name, c.type_, c.format, c.description, c.priority))
        .collect()
}

fn cells(def: &ResourceDef, obj: &Value, now: i64) -> Vec<Value> {
    if !def.is_custom() {
        return printers::cells(&def.group, &def.kind, obj, now).unwrap_or_else(|| printers::default_cells(obj));
    }
    let mut out = vec![Value::from(crate::meta::name(obj))];
    for c in &def.columns {
        // A column whose path does not parse prints nothing, as upstream.
        out.push(match crate::jsonpath::parse(&c.json_path) {
            Ok(p) => p.printer_cell(obj, &c.type_, now),
            Err(_) => Value::Null,
        });
    }
    out
}

/// A Table of objects (served form). `list_meta` is the list's metadata (resourceVersion,
/// continue) when the table answers a list.
pub fn to_table(def: &ResourceDef, objs: &[Value], with_columns: bool, list_meta: Option<Value>) -> Value {
    let now = jiff::Timestamp::now().as_second();
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells(def, o, now)));
            if !def.is_custom()
                && let Some(c) = printers::row_conditions(&def.group, &def.kind, o)
            {
                row.insert("conditions".into(), c);
            }
            row.insert("object".into(), partial_metadata(o));
            Value::Object(row)
        })
        .collect();
    let mut m = Map::new();
    m.insert("kind".into(), "Table".into());
    m.insert("apiVersion".into(), "meta.k8s.io/v1".into());
    m.insert("metadata".into(), list_meta.unwrap_or_else(|| json!({})));
    m.insert("columnDefinitions".into(), if with_columns { Value::Array(column_defs(def)) } else { Value::Null });
    m.insert("rows".into(), Value::Array(rows));
    Value::Object(m)
}
