//! The CRD reference, `docs/vesper/crd-reference.md`, rendered from the CRD the types generate
//! (`PreviewEnvironment::crd()`), so that the page cannot say something the API server does not
//! enforce.
//!
//! What it shows: the group, kind, names, short names, scope, versions and subresources; the
//! columns of `kubectl get`; and every field of the OpenAPI v3 schema, depth first in the order
//! the schema lists its properties, with its type, whether it is required, its default, its
//! bounds (length, range, items), pattern, enum, list type, the `x-kubernetes-validations` rules
//! with their messages, and its description (the doc comments of the types). A schema keyword
//! this module does not know is printed as it is, never dropped.
//!
//! `vesper/api/tests/reference.rs` fails when the checked-in page differs from this output, and
//! rewrites it with `UPDATE_CRDS=1`.

use kube::CustomResourceExt;
use serde_json::Value;
use std::fmt::Write;

use crate::PreviewEnvironment;

/// Where the page is checked in, from the repository root.
pub const PATH: &str = "docs/vesper/crd-reference.md";

/// Schema keywords rendered in a field's section (or, for `properties`, `items` and
/// `additionalProperties`, by walking into them). Anything else is printed raw.
const KNOWN: &[&str] = &[
    "type",
    "format",
    "description",
    "title",
    "default",
    "nullable",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// The reference page of the PreviewEnvironment CRD, in Markdown.
pub fn reference_markdown() -> String {
    let crd = serde_json::to_value(PreviewEnvironment::crd()).unwrap_or_default();
    render(&crd)
}

/// The reference page of any CustomResourceDefinition given as JSON.
pub fn render(crd: &Value) -> String {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let kind = str_of(&names["kind"]);
    let group = str_of(&spec["group"]);
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();

    let _ = writeln!(out, "# {kind} reference");
    out.push('\n');
    let _ = writeln!(
        out,
        "<!-- Generated from the types in vesper/api by vesper_api::reference::reference_markdown. Do not edit: \
         run `UPDATE_CRDS=1 cargo nextest run -p vesper-api --test reference` and commit the result. -->"
    );
    out.push('\n');
    let _ = writeln!(
        out,
        "Generated from the CRD (`{}`, checked in as `deploy/vesper/crd.yaml`). The API server \
         enforces every type, bound, pattern and rule below on every write, whether the operator \
         runs or not. `kubectl explain {}.spec` shows the same descriptions; the phases and \
         condition reasons the operator sets, and what to do about each, are in \
         [operating.md](operating.md#troubleshooting).",
        str_of(&crd["metadata"]["name"]),
        str_of(&names["singular"])
    );
    if let Some(root) = versions.first().map(|v| &v["schema"]["openAPIV3Schema"])
        && let Some(d) = root["description"].as_str()
    {
        out.push('\n');
        out.push_str(&paragraphs(d));
        out.push('\n');
    }

    out.push('\n');
    out.push_str("| | |\n|---|---|\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "| {k} | {} |", cell(&v));
    };
    row("API group", code(&group));
    row("Kind", code(&kind));
    if let Some(list_kind) = names["listKind"].as_str() {
        row("List kind", code(list_kind));
    }
    row("Resource (plural)", code(&str_of(&names["plural"])));
    row("Singular", code(&str_of(&names["singular"])));
    row("Short names", join_code(&names["shortNames"]));
    if names["categories"].is_array() {
        row("Categories", join_code(&names["categories"]));
    }
    row("Scope", str_of(&spec["scope"]));
    let version_text: Vec<String> = versions
        .iter()
        .map(|v| {
            let mut flags = vec![];
            if v["served"] == Value::Bool(true) {
                flags.push("served");
            }
            if v["storage"] == Value::Bool(true) {
                flags.push("storage");
            }
            if v["deprecated"] == Value::Bool(true) {
                flags.push("deprecated");
            }
            format!("{} ({})", code(&str_of(&v["name"])), flags.join(", "))
        })
        .collect();
    row("Versions", version_text.join("; "));
    row(
        "apiVersion",
        versions.iter().map(|v| code(&format!("{group}/{}", str_of(&v["name"])))).collect::<Vec<_>>().join(", "),
    );

    for v in &versions {
        version_section(&mut out, v, versions.len() > 1);
    }
    out
}

fn version_section(out: &mut String, v: &Value, several: bool) {
    let name = str_of(&v["name"]);
    let h = if several { "###" } else { "##" };
    if several {
        let _ = write!(out, "\n## Version {}\n", code(&name));
    }

    let subresources: Vec<String> =
        v["subresources"].as_object().map(|m| m.keys().map(|k| code(k)).collect()).unwrap_or_default();
    let _ = write!(out, "\n{h} Subresources\n\n");
    if subresources.is_empty() {
        out.push_str("None.\n");
    } else {
        let _ = writeln!(out, "{}.", subresources.join(", "));
        if v["subresources"]["status"].is_object() {
            out.push_str(
                "\n`status` is written through the status subresource only: a write to the main \
                 resource ignores `status`, and a write to `/status` ignores everything else.\n",
            );
        }
    }

    let _ = write!(out, "\n{h} Columns of `kubectl get`\n\n");
    match v["additionalPrinterColumns"].as_array().filter(|c| !c.is_empty()) {
        None => out.push_str("Only NAME and AGE.\n"),
        Some(columns) => {
            out.push_str("| Column | Type | JSONPath | Description |\n|---|---|---|---|\n");
            for c in columns {
                let mut ty = str_of(&c["type"]);
                if let Some(f) = c["format"].as_str() {
                    ty = format!("{ty}, {f}");
                }
                let mut desc = c["description"].as_str().map(paragraphs).unwrap_or_default();
                if let Some(p) = c["priority"].as_i64().filter(|p| *p > 0) {
                    desc = format!("{desc} (priority {p}: shown with `-o wide`)").trim().to_string();
                }
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    cell(&str_of(&c["name"])),
                    cell(&code(&ty)),
                    cell(&code(&str_of(&c["jsonPath"]))),
                    cell(&desc)
                );
            }
        }
    }

    let root = &v["schema"]["openAPIV3Schema"];
    let mut fields = vec![];
    collect(root, "", &mut fields);

    let _ = write!(out, "\n{h} Fields at a glance\n\n");
    out.push_str("| Field | Type | Required | Default |\n|---|---|---|---|\n");
    for f in &fields {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            cell(&code(&f.path)),
            cell(&type_of(f.schema)),
            if f.required { "yes" } else { "" },
            cell(&f.schema.get("default").map(|d| code(&json(d))).unwrap_or_default())
        );
    }

    let _ = write!(out, "\n{h} Fields\n");
    for f in &fields {
        field_section(out, f, if several { "####" } else { "###" });
    }
}

/// A field of the schema and where it is.
struct Field<'a> {
    path: String,
    schema: &'a Value,
    required: bool,
}

/// Every field under `schema`, depth first, in the order the schema lists them. Array items and
/// map values that are objects are walked into (`env[].name`, `labels.<key>.x`).
fn collect<'a>(schema: &'a Value, prefix: &str, out: &mut Vec<Field<'a>>) {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    if let Some(props) = schema["properties"].as_object() {
        for (name, sub) in props {
            let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
            out.push(Field { path: path.clone(), schema: sub, required: required.contains(&name.as_str()) });
            collect_children(sub, &path, out);
        }
    }
}

fn collect_children<'a>(schema: &'a Value, path: &str, out: &mut Vec<Field<'a>>) {
    collect(schema, path, out);
    if schema["items"].is_object() {
        collect(&schema["items"], &format!("{path}[]"), out);
    }
    if schema["additionalProperties"].is_object() {
        collect(&schema["additionalProperties"], &format!("{path}.<key>"), out);
    }
}

fn field_section(out: &mut String, f: &Field, h: &str) {
    let s = f.schema;
    let _ = write!(out, "\n{h} {}\n\n", code(&f.path));
    if let Some(d) = s["description"].as_str() {
        out.push_str(&paragraphs(d));
        out.push_str("\n\n");
    }
    let mut facts: Vec<String> = vec![];
    facts.push(format!("Type: {}", type_of(s)));
    facts.push(if f.required { "Required".into() } else { "Optional".into() });
    if let Some(d) = s.get("default") {
        facts.push(format!("Default: {}", code(&json(d))));
    }
    if s["nullable"] == Value::Bool(true) {
        facts.push("Nullable: `null` is accepted and means unset".into());
    }
    facts.extend(constraints(s));
    if let Some(item) = s["items"].as_object() {
        let item_value = Value::Object(item.clone());
        let mut about = vec![];
        if let Some(d) = item_value["description"].as_str() {
            about.push(first_paragraph(d));
        }
        for c in constraints(&item_value) {
            about.push(c);
        }
        if !about.is_empty() {
            facts.push(format!("Each item: {}", about.join("; ")));
        }
    }
    if let Some(value) = s["additionalProperties"].as_object() {
        let value = Value::Object(value.clone());
        let mut about = vec![];
        if let Some(d) = value["description"].as_str() {
            about.push(first_paragraph(d));
        }
        for c in constraints(&value) {
            about.push(c);
        }
        if !about.is_empty() {
            facts.push(format!("Each value: {}", about.join("; ")));
        }
    }
    if let Some(map) = s.as_object() {
        for (k, v) in map {
            if !KNOWN.contains(&k.as_str()) {
                facts.push(format!("{}: {}", code(k), code(&json(v))));
            }
        }
    }
    for fact in facts {
        let _ = writeln!(out, "- {fact}");
    }
    if let Some(rules) = s["x-kubernetes-validations"].as_array().filter(|r| !r.is_empty()) {
        out.push_str("\nValidation rules (CEL), checked by the API server:\n");
        for r in rules {
            let _ = write!(out, "\n```\n{}\n```\n\n", str_of(&r["rule"]));
            let mut said = vec![];
            if let Some(m) = r["message"].as_str() {
                said.push(format!("Message: {}", code(m)));
            }
            if let Some(m) = r["messageExpression"].as_str() {
                said.push(format!("Message expression: {}", code(m)));
            }
            if let Some(m) = r["reason"].as_str() {
                said.push(format!("Reason: {}", code(m)));
            }
            if let Some(m) = r["fieldPath"].as_str() {
                said.push(format!("Field path: {}", code(m)));
            }
            if r["optionalOldSelf"] == Value::Bool(true) {
                said.push("Also checked on create (`optionalOldSelf`)".into());
            }
            if said.is_empty() {
                said.push("No message: the API server names the rule".into());
            }
            let _ = writeln!(out, "{}", said.join(". "));
        }
    }
}

/// Bounds, pattern, enum, list and map types of a schema, one line each.
fn constraints(s: &Value) -> Vec<String> {
    let mut out = vec![];
    if let Some(b) = bounds(s, "minLength", "maxLength", "characters") {
        out.push(format!("Length: {b}"));
    }
    let (min, max) = (num(&s["minimum"]), num(&s["maximum"]));
    let excl_min = s["exclusiveMinimum"] == Value::Bool(true);
    let excl_max = s["exclusiveMaximum"] == Value::Bool(true);
    let low = min.as_ref().map(|m| if excl_min { format!("greater than {m}") } else { format!("at least {m}") });
    let high = max.as_ref().map(|m| if excl_max { format!("less than {m}") } else { format!("at most {m}") });
    match (min, max, excl_min || excl_max) {
        (Some(a), Some(b), false) => out.push(format!("Range: {a} to {b}")),
        _ => {
            let parts: Vec<String> = [low, high].into_iter().flatten().collect();
            if !parts.is_empty() {
                out.push(format!("Range: {}", parts.join(" and ")));
            }
        }
    }
    if let Some(m) = num(&s["multipleOf"]) {
        out.push(format!("Multiple of: {m}"));
    }
    if let Some(b) = bounds(s, "minItems", "maxItems", "items") {
        out.push(format!("Items: {b}"));
    }
    if s["uniqueItems"] == Value::Bool(true) {
        out.push("Items are unique".into());
    }
    if let Some(b) = bounds(s, "minProperties", "maxProperties", "entries") {
        out.push(format!("Entries: {b}"));
    }
    if let Some(p) = s["pattern"].as_str() {
        out.push(format!("Pattern: {}", code(p)));
    }
    if let Some(e) = s["enum"].as_array() {
        out.push(format!("One of: {}", e.iter().map(|v| code(&scalar(v))).collect::<Vec<_>>().join(", ")));
    }
    if let Some(t) = s["x-kubernetes-list-type"].as_str() {
        let keys: Vec<String> = s["x-kubernetes-list-map-keys"]
            .as_array()
            .map(|k| k.iter().map(|v| code(&scalar(v))).collect())
            .unwrap_or_default();
        if keys.is_empty() {
            out.push(format!("List type: {}", code(t)));
        } else {
            out.push(format!("List type: {}, one item per {}", code(t), keys.join(" and ")));
        }
    }
    if let Some(t) = s["x-kubernetes-map-type"].as_str() {
        out.push(format!("Map type: {}", code(t)));
    }
    if s["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) && s["type"] == "object" {
        out.push("Unknown fields are kept".into());
    }
    if s["x-kubernetes-embedded-resource"] == Value::Bool(true) {
        out.push("An embedded Kubernetes object (apiVersion, kind, metadata)".into());
    }
    out
}

fn bounds(s: &Value, min_key: &str, max_key: &str, unit: &str) -> Option<String> {
    match (num(&s[min_key]), num(&s[max_key])) {
        (Some(a), Some(b)) => Some(format!("{a} to {b} {unit}")),
        (Some(a), None) => Some(format!("at least {a} {unit}")),
        (None, Some(b)) => Some(format!("at most {b} {unit}")),
        (None, None) => None,
    }
}

/// The type of a schema in words: `string` (`date-time`), array of `string`, map of string to
/// integer or string.
fn type_of(s: &Value) -> String {
    if s["x-kubernetes-int-or-string"] == Value::Bool(true) {
        return "`integer` or `string`".into();
    }
    let base = match s["type"].as_str() {
        Some("array") => {
            if s["items"].is_object() {
                format!("array of {}", type_of(&s["items"]))
            } else {
                "`array`".into()
            }
        }
        Some("object") if s["additionalProperties"].is_object() => {
            format!("map of `string` to {}", type_of(&s["additionalProperties"]))
        }
        Some(t) => code(t),
        None => "any".into(),
    };
    match s["format"].as_str() {
        Some(f) => format!("{base} ({})", code(f)),
        None => base,
    }
}

/// A description with its hard line wraps undone: paragraphs kept, lines joined.
fn paragraphs(d: &str) -> String {
    d.split("\n\n").map(unwrap_lines).filter(|p| !p.is_empty()).collect::<Vec<_>>().join("\n\n")
}

fn first_paragraph(d: &str) -> String {
    d.split("\n\n").map(unwrap_lines).find(|p| !p.is_empty()).unwrap_or_default()
}

fn unwrap_lines(p: &str) -> String {
    p.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Inline code that survives backticks in the text.
fn code(s: &str) -> String {
    let mut ticks = 1;
    while s.contains(&"`".repeat(ticks)) {
        ticks += 1;
    }
    let fence = "`".repeat(ticks);
    if s.starts_with('`') || s.ends_with('`') { format!("{fence} {s} {fence}") } else { format!("{fence}{s}{fence}") }
}

/// A table cell: no pipe or line break may end it early.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => json(other),
    }
}

fn json(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if v.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => serde_json::to_string(v).unwrap_or_default(),
    }
}

/// A number as written by a person: `5`, not `5.0`.
fn num(v: &Value) -> Option<String> {
    v.is_number().then(|| json(v))
}

fn join_code(v: &Value) -> String {
    v.as_array().map(|a| a.iter().map(|x| code(&scalar(x))).collect::<Vec<_>>().join(", ")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_bounds_and_code_are_written_as_a_reader_expects() {
        assert_eq!(type_of(&json!({"type": "integer", "format": "int32"})), "`integer` (`int32`)");
        assert_eq!(type_of(&json!({"type": "array", "items": {"type": "string"}})), "array of `string`");
        assert_eq!(
            type_of(&json!({"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}})),
            "map of `string` to `integer` or `string`"
        );
        assert_eq!(constraints(&json!({"minimum": 0.0, "maximum": 5.0})), vec!["Range: 0 to 5"]);
        assert_eq!(constraints(&json!({"minimum": 1.0, "exclusiveMinimum": true})), vec!["Range: greater than 1"]);
        assert_eq!(constraints(&json!({"maxItems": 64})), vec!["Items: at most 64 items"]);
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(cell("a|b"), "a\\|b");
        assert_eq!(paragraphs("one\ntwo\n\nthree"), "one two\n\nthree");
    }

    #[test]
    fn an_unknown_keyword_is_printed_not_dropped() {
        let crd = json!({"metadata": {"name": "xs.example.com"}, "spec": {"group": "example.com",
            "names": {"kind": "X", "plural": "xs", "singular": "x"}, "scope": "Cluster",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"spec": {"type": "object", "properties": {
                    "n": {"type": "integer", "x-new-keyword": 3}}}}}}}]}});
        let page = render(&crd);
        assert!(page.contains("### `spec.n`"), "{page}");
        assert!(page.contains("- `x-new-keyword`: `3`"), "{page}");
    }
}
