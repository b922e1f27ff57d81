//! Server-side apply and `metadata.managedFields` bookkeeping, ported from
//! sigs.k8s.io/structured-merge-diff (`merge.Updater`: merge, prune, conflicts) and the
//! apiserver's field manager chain (k8s.io/apimachinery/pkg/util/managedfields/internal), in
//! the order the real server runs it:
//!
//! - `lastAppliedUpdater` / `lastAppliedManager`: for field manager `kubectl`, conflicts on
//!   fields whose live value still equals the `kubectl.kubernetes.io/last-applied-configuration`
//!   annotation are forgiven (client-side to server-side apply upgrade), and that annotation is
//!   kept in sync with the applied configuration when present;
//! - `skipNonAppliedManager`: an update of an object without managed fields is not tracked;
//!   the first apply to such an object first gives its existing fields to `before-first-apply`;
//! - `capManagersManager`: more than 10 `Update` entries are merged into `ancient-changes`;
//! - `buildManagerInfoManager`: entries are identified by manager, operation, subresource and
//!   (for `Update` only) apiVersion;
//! - `managedFieldsUpdater`: an entry's time is set when its operation changed the object;
//! - `stripMetaManager`: apiVersion, kind, metadata.{name, namespace, uid, resourceVersion,
//!   generation, creationTimestamp, selfLink, clusterName, managedFields} are never owned.
//!
//! Deliberate differences: objects are not converted between API versions (entries recorded
//! at another apiVersion are compared in the request's version); fields reset by the
//! resource's strategy (status on the main resource, spec on `/status`) are not filtered here:
//! drop them from the applied configuration before calling [`apply_with`]; a map or list that
//! pruning empties is removed instead of being set to `null`; unknown fields in an applied
//! configuration are treated as schemaless ("deduced") instead of failing; `metadata` and the
//! identity fields are never pruned; duplicated items of a stored list survive applies that do
//! not name them (an applied item with the same key replaces all of them). The "old" object of
//! a create is the typed zero object derived from the schema (see `Ty::zero_object`), which
//! decides where `Update` entries carry `".": {}`.

use super::fieldset::{
    FieldSet, Kind, ListKind, PathElement, Ty, ensure_named_fields_are_members, fields_of_ty, list_item_pe,
    path_string, validate, value_equal,
};
use crate::field::go_quote;
use crate::golike::{go_json, rfc3339_unix, write_go_json_string};
use crate::schema::SchemaRef;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// The annotation kubectl's client-side apply stores the last applied configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Update entries beyond this many are merged into `ancient-changes`.
pub const MAX_UPDATE_MANAGERS: usize = 10;
const BEFORE_FIRST_APPLY: &str = "before-first-apply";
const ANCIENT_CHANGES: &str = "ancient-changes";
const CURRENT_OPERATION: &str = "current-operation";
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// `metadata.managedFields[].operation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedFieldsEntry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    /// RFC 3339, as the server writes it (`2024-01-02T03:04:05Z`).
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl ManagedFieldsEntry {
    /// The entry as the apiserver serializes it (`manager`, `operation`, `apiVersion`, `time`,
    /// `fieldsType: FieldsV1`, `fieldsV1`, `subresource`, in that order).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.manager.is_empty() {
            m.insert("manager".into(), Value::String(self.manager.clone()));
        }
        m.insert("operation".into(), Value::String(self.operation.as_str().into()));
        if !self.api_version.is_empty() {
            m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        }
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(s) = self.subresource.as_ref().filter(|s| !s.is_empty()) {
            m.insert("subresource".into(), Value::String(s.clone()));
        }
        Value::Object(m)
    }

    /// Decodes entry number `index` with upstream's `DecodeManagedFields` checks.
    pub fn from_json(v: &Value, index: usize) -> Result<Self, String> {
        let m = v.as_object().ok_or_else(|| format!("managed fields entry {index} is not an object"))?;
        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = match s("operation").as_str() {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return Err("operation must be `Apply` or `Update`".to_string()),
        };
        let api_version = s("apiVersion");
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".to_string());
        }
        match s("fieldsType").as_str() {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {index}")),
            other => {
                return Err(format!("invalid fieldsType {} in managed fields entry {index}", go_quote(other)));
            }
        }
        let fields = FieldSet::from_fields_v1(m.get("fieldsV1").unwrap_or(&Value::Null))
            .map_err(|e| format!("error decoding versioned set: error decoding set: {e}"))?;
        Ok(ManagedFieldsEntry {
            manager: s("manager"),
            operation,
            api_version,
            time: m.get("time").and_then(Value::as_str).map(str::to_string),
            subresource: Some(s("subresource")).filter(|x| !x.is_empty()),
            fields,
        })
    }

    /// Upstream's manager identifier (`BuildManagerIdentifier`): the entry without fields and
    /// time, and without apiVersion for appliers, as Go's `json.Marshal` writes it.
    fn identifier(&self) -> String {
        identifier(&self.manager, self.operation, &self.api_version, self.subresource.as_deref())
    }

    fn unix_time(&self) -> i64 {
        self.time.as_deref().and_then(rfc3339_unix).unwrap_or(0)
    }
}

fn identifier(manager: &str, op: Operation, api_version: &str, subresource: Option<&str>) -> String {
    let mut out = String::from("{");
    let mut first = true;
    let mut field = |out: &mut String, k: &str, v: &str| {
        if !first {
            out.push(',');
        }
        first = false;
        write_go_json_string(out, k);
        out.push(':');
        write_go_json_string(out, v);
    };
    if !manager.is_empty() {
        field(&mut out, "manager", manager);
    }
    field(&mut out, "operation", op.as_str());
    if op == Operation::Update && !api_version.is_empty() {
        field(&mut out, "apiVersion", api_version);
    }
    if let Some(s) = subresource.filter(|s| !s.is_empty()) {
        field(&mut out, "subresource", s);
    }
    out.push('}');
    out
}

fn describe_manager(manager: &str, op: Operation, api_version: &str, subresource: Option<&str>) -> String {
    let mut s = go_quote(manager);
    if let Some(sub) = subresource.filter(|s| !s.is_empty()) {
        s.push_str(&format!(" with subresource {}", go_quote(sub)));
    }
    if op == Operation::Update {
        s.push_str(&format!(" using {api_version}"));
    }
    s
}

/// Managers by identifier.
type Managers = BTreeMap<String, ManagedFieldsEntry>;

/// Decodes `metadata.managedFields` of an object (absent or `null`: no entries).
pub fn decode_managed_fields(obj: &Value) -> Result<Vec<ManagedFieldsEntry>, String> {
    match obj.get("metadata").and_then(|m| m.get("managedFields")) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => {
            items.iter().enumerate().map(|(i, v)| ManagedFieldsEntry::from_json(v, i)).collect()
        }
        Some(_) => Err("metadata.managedFields must be a list".to_string()),
    }
}

/// Encodes entries as `metadata.managedFields`, in the apiserver's order (operation, time,
/// manager, apiVersion, subresource).
pub fn encode_managed_fields(entries: &[ManagedFieldsEntry]) -> Value {
    let mut sorted: Vec<&ManagedFieldsEntry> = entries.iter().collect();
    sorted.sort_by(|p, q| {
        p.operation
            .as_str()
            .cmp(q.operation.as_str())
            .then_with(|| p.unix_time().cmp(&q.unix_time()))
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.as_deref().unwrap_or("").cmp(q.subresource.as_deref().unwrap_or("")))
    });
    Value::Array(sorted.into_iter().map(ManagedFieldsEntry::to_json).collect())
}

fn managers_from(entries: Vec<ManagedFieldsEntry>) -> Managers {
    entries.into_iter().map(|e| (e.identifier(), e)).collect()
}

fn set_managed_fields(obj: &mut Value, managers: &Managers) {
    let Value::Object(o) = obj else { return };
    let meta = o.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return };
    if managers.is_empty() {
        meta.shift_remove("managedFields");
    } else {
        let entries: Vec<ManagedFieldsEntry> = managers.values().cloned().collect();
        let encoded = encode_managed_fields(&entries);
        match meta.get_mut("managedFields") {
            Some(slot) => *slot = encoded,
            None => {
                meta.insert("managedFields".into(), encoded);
            }
        }
    }
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.shift_remove("managedFields");
    }
    out
}

/// The paths no manager ever owns (`stripMetaManager`).
fn strip_meta(set: &FieldSet) -> FieldSet {
    set.difference(&strip_set())
}

fn strip_set() -> FieldSet {
    let f = |s: &str| PathElement::Field(s.to_string());
    let mut strip = FieldSet::from_paths([&[f("apiVersion")][..], &[f("kind")][..], &[f("metadata")][..]]);
    for name in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        strip.insert(&[f("metadata"), f(name)]);
    }
    strip
}

/// The manager name the apiserver records when a request has no `fieldManager`
/// (`managerOrUserAgent`): the User-Agent up to its first `/`, printable characters only,
/// at most 128 bytes.
pub fn manager_or_user_agent(field_manager: &str, user_agent: &str) -> String {
    if !field_manager.is_empty() {
        return field_manager.to_string();
    }
    let prefix = user_agent.split('/').next().unwrap_or("");
    let mut out = String::new();
    for c in prefix.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > 128 {
            break;
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Conflicts
// ---------------------------------------------------------------------------------------------

/// A field that the applier would change while another manager owns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// The conflicting manager's name.
    pub manager: String,
    pub operation: Operation,
    /// The conflicting entry's apiVersion (printed for `Update` managers).
    pub api_version: String,
    pub subresource: Option<String>,
    /// The path as upstream prints it: `.spec.replicas`, `.spec.containers[name="x"].image`.
    pub field: String,
    pub path: Vec<PathElement>,
}

impl Conflict {
    fn identifier(&self) -> String {
        identifier(&self.manager, self.operation, &self.api_version, self.subresource.as_deref())
    }

    /// How the message names the manager: `"kubectl-client-side-apply" using v1`.
    pub fn manager_description(&self) -> String {
        describe_manager(&self.manager, self.operation, &self.api_version, self.subresource.as_deref())
    }
}

/// The message of the 409 the apiserver answers a conflicting apply with, e.g.
/// `Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.foo`;
/// with several, grouped by manager (sorted) with one `- <path>` line per field.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [one] = conflicts {
        return format!("Apply failed with 1 conflict: conflict with {}: {}", one.manager_description(), one.field);
    }
    let mut groups: BTreeMap<String, (String, Vec<&str>)> = BTreeMap::new();
    for c in conflicts {
        groups.entry(c.identifier()).or_insert_with(|| (c.manager_description(), Vec::new())).1.push(&c.field);
    }
    let mut lines = Vec::new();
    for (description, fields) in groups.values() {
        lines.push(format!("conflicts with {description}:"));
        lines.extend(fields.iter().map(|f| format!("- {f}")));
    }
    format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
}

/// The `details.causes` of that 409: `(reason, message, field)` per conflict, reason
/// `FieldManagerConflict`, message `conflict with "<manager>"[ using <apiVersion>]`.
pub fn conflict_causes(conflicts: &[Conflict]) -> Vec<(&'static str, String, String)> {
    conflicts
        .iter()
        .map(|c| ("FieldManagerConflict", format!("conflict with {}", c.manager_description()), c.field.clone()))
        .collect()
}

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ApplyError {
    /// 409 Conflict, message [`conflict_message`], causes [`conflict_causes`].
    Conflicts(Vec<Conflict>),
    /// 400 BadRequest (`metadata.managedFields must be nil`).
    BadRequest(String),
    /// 500 with an empty reason: the applied configuration is not a valid typed value
    /// (`failed to create typed patch object (ns/name; apps/v1, Kind=Deployment): .spec...:
    /// duplicate entries for key [name="x"]`), or stored managed fields do not decode.
    Internal(String),
}

impl ApplyError {
    /// HTTP status code of the real apiserver's answer.
    #[cfg(test)]
    pub fn status_code(&self) -> u16 {
        match self {
            ApplyError::Conflicts(_) => 409,
            ApplyError::BadRequest(_) => 400,
            ApplyError::Internal(_) => 500,
        }
    }

    #[cfg(test)]
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::Conflicts(_) => "Conflict",
            ApplyError::BadRequest(_) => "BadRequest",
            ApplyError::Internal(_) => "",
        }
    }

    pub fn message(&self) -> String {
        match self {
            ApplyError::Conflicts(c) => conflict_message(c),
            ApplyError::BadRequest(m) | ApplyError::Internal(m) => m.clone(),
        }
    }
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for ApplyError {}

// ---------------------------------------------------------------------------------------------
// Typed compare, merge and removal (structured-merge-diff `typed`)
// ---------------------------------------------------------------------------------------------

/// `typed.Comparison`.
#[derive(Debug, Default)]
struct Comparison {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

fn same_class(a: &Kind, b: &Kind) -> bool {
    matches!(
        (a, b),
        (Kind::Scalar, Kind::Scalar) | (Kind::Map { .. }, Kind::Map { .. }) | (Kind::List(_), Kind::List(_))
    )
}

/// The kind both sides are walked as: `null` takes the other side's kind (as a typed `null`
/// does upstream); `None` when the two sides have different shapes.
fn joint_kind(ty: &Ty, l: Option<&Value>, r: Option<&Value>) -> Option<Kind> {
    let kl = l.filter(|v| !v.is_null()).map(|v| ty.kind(v));
    let kr = r.filter(|v| !v.is_null()).map(|v| ty.kind(v));
    match (kl, kr) {
        (Some(a), Some(b)) if !same_class(&a, &b) => None,
        (_, Some(k)) | (Some(k), None) => Some(k),
        (None, None) => Some(Kind::Scalar),
    }
}

fn empty_container(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

/// The items of a list by path element, in list order; the first occurrence of a path
/// element wins and items without one are skipped (`indexListPathElements`).
struct Indexed<'v> {
    order: Vec<(PathElement, &'v Value)>,
    by_pe: BTreeMap<PathElement, &'v Value>,
    /// Later occurrences of duplicated path elements (possible in stored objects).
    duplicates: BTreeMap<PathElement, Vec<&'v Value>>,
}

impl<'v> Indexed<'v> {
    fn get(&self, i: usize) -> Option<(&PathElement, &'v Value)> {
        self.order.get(i).map(|(p, v)| (p, *v))
    }
    fn len(&self) -> usize {
        self.order.len()
    }
}

fn index_items<'v>(ty: &Ty, kind: &ListKind, list: Option<&'v Value>) -> Indexed<'v> {
    let mut out = Indexed { order: Vec::new(), by_pe: BTreeMap::new(), duplicates: BTreeMap::new() };
    if let Some(Value::Array(items)) = list {
        for (i, item) in items.iter().enumerate() {
            let Ok(pe) = list_item_pe(ty, kind, i, item) else { continue };
            if out.by_pe.contains_key(&pe) {
                out.duplicates.entry(pe).or_default().push(item);
            } else {
                out.by_pe.insert(pe.clone(), item);
                out.order.push((pe, item));
            }
        }
    }
    out
}

fn lookup<'v>(items: &Indexed<'v>, pe: &PathElement) -> Option<&'v Value> {
    items.by_pe.get(pe).copied()
}

fn compare(ty: Ty, l: &Value, r: &Value) -> Comparison {
    let mut c = Comparison::default();
    compare_at(ty, Some(l), Some(r), &mut Vec::new(), &mut c);
    c
}

fn compare_leaf(path: &[PathElement], l: Option<&Value>, r: Option<&Value>, c: &mut Comparison) {
    if path.is_empty() {
        return;
    }
    match (l, r) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        (Some(a), Some(b)) if !value_equal(a, b) => c.modified.insert(path),
        _ => {}
    }
}

fn compare_at(ty: Ty, l: Option<&Value>, r: Option<&Value>, path: &mut Vec<PathElement>, c: &mut Comparison) {
    if l.is_none() && r.is_none() {
        return;
    }
    let Some(kind) = joint_kind(&ty, l, r) else {
        // The value changed shape: a change of the field, and its old/new contents go away/come.
        compare_leaf(path, l, r, c);
        compare_children(ty, l, None, path, c);
        compare_children(ty, None, r, path, c);
        return;
    };
    match kind {
        Kind::Scalar | Kind::Map { atomic: true } | Kind::List(ListKind::Atomic) => compare_leaf(path, l, r, c),
        Kind::Map { .. } | Kind::List(_) => {
            if empty_container(l) && empty_container(r) {
                compare_leaf(path, l, r, c);
                return;
            }
            compare_children(ty, l, r, path, c);
            if !path.is_empty() {
                if l.is_none() {
                    c.added.insert(path);
                } else if r.is_none() {
                    c.removed.insert(path);
                }
            }
        }
    }
}

fn compare_children(ty: Ty, l: Option<&Value>, r: Option<&Value>, path: &mut Vec<PathElement>, c: &mut Comparison) {
    let shape = l.filter(|v| !v.is_null()).or(r.filter(|v| !v.is_null()));
    match shape.map(|v| ty.kind(v)) {
        Some(Kind::Map { atomic: false }) => {
            let lm = l.and_then(Value::as_object);
            let rm = r.and_then(Value::as_object);
            let mut keys: Vec<&String> = lm.map(|m| m.keys().collect()).unwrap_or_default();
            if let Some(rm) = rm {
                keys.extend(rm.keys().filter(|k| !lm.is_some_and(|m| m.contains_key(*k))));
            }
            for k in keys {
                let child_ty = ty.field(k).0;
                path.push(PathElement::Field(k.clone()));
                compare_at(child_ty, lm.and_then(|m| m.get(k)), rm.and_then(|m| m.get(k)), path, c);
                path.pop();
            }
        }
        Some(Kind::List(kind)) if kind != ListKind::Atomic => {
            let li = index_items(&ty, &kind, l.filter(|v| v.is_array()));
            let ri = index_items(&ty, &kind, r.filter(|v| v.is_array()));
            let item_ty = ty.items();
            let mut pes: Vec<&PathElement> = li.order.iter().map(|(p, _)| p).collect();
            pes.extend(ri.order.iter().map(|(p, _)| p).filter(|p| lookup(&li, p).is_none()));
            for pe in pes {
                path.push(pe.clone());
                compare_at(item_ty, lookup(&li, pe), lookup(&ri, pe), path, c);
                path.pop();
            }
        }
        _ => {}
    }
}

/// `TypedValue.Merge` (live with the applied configuration, the right side wins at leaves).
fn merge(ty: Ty, l: Option<&Value>, r: Option<&Value>) -> Option<Value> {
    let (lv, rv) = match (l, r) {
        (None, None) => return None,
        (Some(a), None) => return Some(a.clone()),
        (None, Some(b)) => return Some(b.clone()),
        (Some(a), Some(b)) => (a, b),
    };
    let Some(kind) = joint_kind(&ty, l, r) else { return Some(rv.clone()) };
    match kind {
        Kind::Scalar | Kind::Map { atomic: true } | Kind::List(ListKind::Atomic) => Some(rv.clone()),
        _ if empty_container(l) && empty_container(r) => Some(rv.clone()),
        Kind::Map { atomic: false } => {
            let empty = Map::new();
            let lm = lv.as_object().unwrap_or(&empty);
            let rm = rv.as_object().unwrap_or(&empty);
            let mut out = Map::new();
            for (k, v) in lm {
                if let Some(m) = merge(ty.field(k).0, Some(v), rm.get(k)) {
                    out.insert(k.clone(), m);
                }
            }
            for (k, v) in rm {
                if !lm.contains_key(k)
                    && let Some(m) = merge(ty.field(k).0, None, Some(v))
                {
                    out.insert(k.clone(), m);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Kind::List(kind) => {
            let out = merge_list(&ty, &kind, lv, rv);
            // A list the applied configuration sets stays, empty or not (a live list whose
            // items all went, or were not list items at all, is then `[]`, as a re-apply of the
            // same configuration leaves it).
            // An applied `null` over a live list whose items all went stays `null` (a
            // re-apply finds no live list and keeps the applied leaf).
            match () {
                _ if !out.is_empty() || rv.is_array() => Some(Value::Array(out)),
                _ if rv.is_null() => Some(Value::Null),
                _ => None,
            }
        }
    }
}

/// The item order of a merged associative list (smd `visitListItems`): applied items in their
/// order, live-only items kept where they were relative to the items they follow.
fn merge_list(ty: &Ty, kind: &ListKind, l: &Value, r: &Value) -> Vec<Value> {
    let li = index_items(ty, kind, Some(l).filter(|v| v.is_array()));
    let ri = index_items(ty, kind, Some(r).filter(|v| v.is_array()));
    let item_ty = ty.items();
    let mut shared: std::collections::VecDeque<&PathElement> =
        ri.order.iter().map(|(p, _)| p).filter(|p| lookup(&li, p).is_some()).collect();
    let mut next_shared = shared.pop_front();
    let mut out = Vec::with_capacity(li.len().max(ri.len()));
    let merge_item = |lc: Option<&Value>, rc: Option<&Value>, out: &mut Vec<Value>| {
        if let Some(v) = merge(item_ty, lc, rc) {
            out.push(v);
        }
    };
    let (mut lx, mut rx) = (0usize, 0usize);
    while lx < li.len() || rx < ri.len() {
        let before = (lx, rx);
        if let (Some((lpe, lv)), Some((rpe, rv))) = (li.get(lx), ri.get(rx)) {
            if lpe == rpe {
                // Duplicated live items are replaced by the applied one, not merged with it.
                let lv = if li.duplicates.contains_key(lpe) { None } else { Some(lv) };
                merge_item(lv, Some(rv), &mut out);
                lx += 1;
                rx += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if lookup(&ri, lpe).is_some() && next_shared.is_some_and(|n| n != lpe) {
                lx += 1;
                continue;
            }
        }
        if let Some((lpe, lv)) = li.get(lx)
            && lookup(&ri, lpe).is_none()
        {
            merge_item(Some(lv), None, &mut out);
            for dup in li.duplicates.get(lpe).into_iter().flatten() {
                out.push((*dup).clone());
            }
            lx += 1;
            continue;
        }
        if let Some((rpe, rv)) = ri.get(rx) {
            let lv = if li.duplicates.contains_key(rpe) { None } else { lookup(&li, rpe) };
            merge_item(lv, Some(rv), &mut out);
            rx += 1;
            if next_shared == Some(rpe) {
                next_shared = shared.pop_front();
            }
        }
        if (lx, rx) == before {
            // Cannot happen with unique path elements; never loop forever.
            lx += 1;
        }
    }
    out
}

/// `TypedValue.RemoveItems`: removes every member path of `set` (whole subtrees).
fn remove_items(ty: Ty, v: &Value, set: &FieldSet) -> Option<Value> {
    match (ty.kind(v), v) {
        (Kind::List(kind), Value::Array(items)) => {
            if items.is_empty() || kind == ListKind::Atomic {
                return None;
            }
            let item_ty = ty.items();
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let Ok(pe) = list_item_pe(&ty, &kind, i, item) else {
                    out.push(item.clone());
                    continue;
                };
                if set.has(std::slice::from_ref(&pe)) {
                    continue;
                }
                match set.child(&pe) {
                    Some(sub) => out.extend(remove_items(item_ty, item, sub)),
                    None => out.push(item.clone()),
                }
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        (Kind::Map { atomic }, Value::Object(m)) => {
            if m.is_empty() || atomic {
                return None;
            }
            let mut out = Map::new();
            for (k, val) in m {
                let pe = PathElement::Field(k.clone());
                if set.has(std::slice::from_ref(&pe)) {
                    continue;
                }
                match set.child(&pe) {
                    Some(sub) => {
                        if let Some(x) = remove_items(ty.field(k).0, val, sub) {
                            out.insert(k.clone(), x);
                        }
                    }
                    None => {
                        out.insert(k.clone(), val.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        _ => Some(v.clone()),
    }
}

/// `Updater.update`: takes changed fields away from other managers (or reports conflicts).
fn update_managers(
    ty: Ty,
    old: &Value,
    new: &Value,
    managers: &mut Managers,
    workflow: &str,
    force: bool,
) -> Result<Comparison, Vec<Conflict>> {
    let c = compare(ty, old, new);
    let changed = c.modified.union(&c.added);
    let mut conflicts: Vec<(String, FieldSet)> = Vec::new();
    for (key, e) in managers.iter() {
        if key == workflow {
            continue;
        }
        let cs = e.fields.intersection(&changed);
        if !cs.is_empty() {
            conflicts.push((key.clone(), cs));
        }
    }
    if !force && !conflicts.is_empty() {
        let mut out = Vec::new();
        for (key, cs) in &conflicts {
            let Some(e) = managers.get(key) else { continue };
            for path in cs.paths() {
                out.push(Conflict {
                    manager: e.manager.clone(),
                    operation: e.operation,
                    api_version: e.api_version.clone(),
                    subresource: e.subresource.clone(),
                    field: path_string(&path),
                    path,
                });
            }
        }
        return Err(out);
    }
    for (key, cs) in &conflicts {
        if let Some(e) = managers.get_mut(key) {
            e.fields = e.fields.difference(cs);
        }
    }
    if !c.removed.is_empty() {
        for (key, e) in managers.iter_mut() {
            if key != workflow {
                e.fields = e.fields.difference(&c.removed);
            }
        }
    }
    managers.retain(|_, e| !e.fields.is_empty());
    Ok(c)
}

/// Records a non-apply write for `manager` into `managers` (the Update path of the chain,
/// below `skipNonApplied`).
#[allow(clippy::too_many_arguments)]
fn update_entries(
    ty: Ty,
    managers: &mut Managers,
    old: &Value,
    new: &Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    now: &str,
) {
    let name = if manager.is_empty() { "unknown" } else { manager };
    let key = identifier(name, Operation::Update, api_version, subresource);
    let Ok(c) = update_managers(ty, old, new, managers, CURRENT_OPERATION, true) else { return };
    let current = strip_meta(&c.modified.union(&c.added));
    if !current.is_empty() {
        let fields = match managers.remove(&key) {
            Some(prev) => current.union(&prev.fields),
            None => current,
        };
        managers.insert(
            key,
            ManagedFieldsEntry {
                manager: name.to_string(),
                operation: Operation::Update,
                api_version: api_version.to_string(),
                time: Some(now.to_string()),
                subresource: subresource.filter(|s| !s.is_empty()).map(str::to_string),
                fields,
            },
        );
    }
    cap_update_managers(managers, MAX_UPDATE_MANAGERS);
}

/// `capManagersManager`: merges the oldest Update entries into per-version `ancient-changes`.
fn cap_update_managers(managers: &mut Managers, max: usize) {
    let mut updaters: Vec<String> =
        managers.iter().filter(|(_, e)| e.operation == Operation::Update).map(|(k, _)| k.clone()).collect();
    if updaters.len() <= max {
        return;
    }
    let time_of = |m: &Managers, k: &str| m.get(k).map(ManagedFieldsEntry::unix_time).unwrap_or(0);
    updaters.sort_by(|a, b| time_of(managers, a).cmp(&time_of(managers, b)).then_with(|| a.cmp(b)));
    let mut first_for_version: BTreeMap<String, String> = BTreeMap::new();
    let mut length = updaters.len();
    for key in &updaters {
        if length <= max {
            break;
        }
        let Some(entry) = managers.get(key).cloned() else { continue };
        let version = entry.api_version.clone();
        let bucket = identifier(ANCIENT_CHANGES, Operation::Update, &version, None);
        match first_for_version.get(&version) {
            Some(first) => {
                if !managers.contains_key(&bucket)
                    && let Some(moved) = managers.remove(first)
                {
                    managers.insert(
                        bucket.clone(),
                        ManagedFieldsEntry {
                            manager: ANCIENT_CHANGES.to_string(),
                            operation: Operation::Update,
                            api_version: version.clone(),
                            time: moved.time.clone(),
                            subresource: None,
                            fields: moved.fields,
                        },
                    );
                }
                if let Some(b) = managers.get_mut(&bucket) {
                    b.fields = entry.fields.union(&b.fields);
                    b.api_version = entry.api_version.clone();
                    b.time = entry.time.clone();
                }
                if *key != bucket {
                    managers.remove(key);
                }
                length -= 1;
            }
            None => {
                first_for_version.insert(version, key.clone());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------------------------

/// Everything [`apply_with`] needs.
#[derive(Debug, Clone, Copy)]
pub struct ApplyParams<'a> {
    /// The stored object, `None` when the apply creates it.
    pub live: Option<&'a Value>,
    /// The applied configuration, already decoded from YAML/JSON.
    pub applied: &'a Value,
    /// `fieldManager` (required by the API for apply; `""` is recorded as `unknown`).
    pub manager: &'a str,
    /// `Some("status")` etc. for an apply to a subresource.
    pub subresource: Option<&'a str>,
    pub force: bool,
    /// The kind's root schema.
    pub schema: SchemaRef<'a>,
    /// The request's group/version, e.g. `apps/v1`.
    pub api_version: &'a str,
    /// The current time, RFC 3339 with seconds precision.
    pub now: &'a str,
}

/// Server-side apply of `applied` onto `live` on behalf of `manager`; returns the new object
/// including its updated `metadata.managedFields`, or the conflicts (409).
///
/// This is the lenient form of [`apply_with`], kept for callers that only handle conflicts:
/// `metadata.managedFields` in the configuration is ignored instead of a 400, an invalid
/// configuration (duplicate or keyless list items) is applied as far as possible instead of a
/// 500, and undecodable stored managed fields count as none. Prefer [`apply_with`].
#[allow(clippy::too_many_arguments)]
#[cfg(test)]
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    schema: SchemaRef,
    api_version: &str,
    now: &str,
) -> Result<Value, Vec<Conflict>> {
    let p = ApplyParams { live, applied, manager, subresource: None, force, schema, api_version, now };
    let mut cleaned = applied.clone();
    if let Some(meta) = cleaned.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.shift_remove("managedFields");
    }
    let managers = live.and_then(|l| decode_managed_fields(l).ok()).map(managers_from).unwrap_or_default();
    apply_checked(&p, Ty::root(schema), &cleaned, managers)
}

/// Server-side apply: merges the configuration into the live object (maps and associative
/// lists by key, atomic lists and maps replaced), removes what the manager applied last time
/// and no longer applies unless another manager owns it, reports fields owned by other managers
/// whose value would change as conflicts (unless `force`, which takes them over), and shares
/// ownership of fields applied with their current value. A no-op apply still updates ownership
/// but not the entry's time. Returns the new object with its `metadata.managedFields`.
///
/// Checking apiVersion/kind/name against the request is the caller's job, as is the 422
/// validation of the result.
pub fn apply_with(p: &ApplyParams) -> Result<Value, ApplyError> {
    if let Some(Value::Array(_)) = p.applied.get("metadata").and_then(|m| m.get("managedFields")) {
        return Err(ApplyError::BadRequest("metadata.managedFields must be nil".to_string()));
    }
    let ty = Ty::root(p.schema);
    if !p.applied.is_object() {
        return Err(ApplyError::Internal(format!(
            "failed to create typed patch object ({}): expected map, got {}",
            gvknn(p.applied),
            go_json(p.applied)
        )));
    }
    let mut errs = Vec::new();
    validate(ty, p.applied, "", &mut errs);
    if !errs.is_empty() {
        return Err(ApplyError::Internal(format!(
            "failed to create typed patch object ({}): {}",
            gvknn(p.applied),
            validation_errors(&errs)
        )));
    }
    let managers = match p.live {
        Some(l) => managers_from(
            decode_managed_fields(l)
                .map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))?,
        ),
        None => Managers::new(),
    };
    apply_checked(p, ty, p.applied, managers).map_err(ApplyError::Conflicts)
}

/// The apply chain from `lastAppliedUpdater` down, on a configuration already checked.
fn apply_checked(p: &ApplyParams, ty: Ty, applied: &Value, managers: Managers) -> Result<Value, Vec<Conflict>> {
    let mut result = match apply_inner(p, ty, applied, managers.clone(), p.force) {
        Err(conflicts) if p.manager == "kubectl" => {
            // lastAppliedManager: forgive conflicts client-side apply already agreed with.
            let Some(allowed) = p.live.and_then(|l| allowed_from_last_applied(l, ty, p.api_version)) else {
                return Err(conflicts);
            };
            let remaining: Vec<Conflict> = conflicts.iter().filter(|c| !allowed.has(&c.path)).cloned().collect();
            if !remaining.is_empty() {
                return Err(remaining);
            }
            apply_inner(p, ty, applied, managers, true)?
        }
        other => other?,
    };

    // lastAppliedUpdater: keep client-side apply's annotation in sync.
    if p.manager == "kubectl" && has_last_applied(&result) {
        let value = build_last_applied(applied);
        set_last_applied(&mut result, value);
    }
    Ok(result)
}

fn apply_inner(
    p: &ApplyParams,
    ty: Ty,
    applied: &Value,
    mut managers: Managers,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let live_clean = p.live.map(without_managed_fields);
    if managers.is_empty()
        && let Some(live) = &live_clean
    {
        // skipNonAppliedManager: existing fields belong to "before-first-apply".
        let zero = ty.zero_object(true);
        update_entries(ty, &mut managers, &zero, live, BEFORE_FIRST_APPLY, p.subresource, p.api_version, p.now);
    }
    let live_clean = live_clean.unwrap_or_else(|| Value::Object(Map::new()));
    let name = if p.manager.is_empty() { "unknown" } else { p.manager };
    let key = identifier(name, Operation::Apply, p.api_version, p.subresource);

    let merged = merge(ty, Some(&live_clean), Some(applied)).unwrap_or_else(|| Value::Object(Map::new()));
    let last = managers.remove(&key);
    let new_set = fields_of_ty(ty, applied);
    managers.insert(
        key.clone(),
        ManagedFieldsEntry {
            manager: name.to_string(),
            operation: Operation::Apply,
            api_version: p.api_version.to_string(),
            time: last.as_ref().and_then(|l| l.time.clone()),
            subresource: p.subresource.filter(|s| !s.is_empty()).map(str::to_string),
            fields: new_set,
        },
    );
    let merged = match &last {
        Some(last) if !last.fields.is_empty() => prune(ty, merged, &managers, &last.fields),
        _ => merged,
    };
    update_managers(ty, &live_clean, &merged, &mut managers, &key, force)?;

    if let Some(e) = managers.get_mut(&key) {
        e.fields = strip_meta(&e.fields);
        if e.fields.is_empty() {
            managers.remove(&key);
        }
    }
    let changed = !value_equal(&live_clean, &merged);
    if changed && let Some(e) = managers.get_mut(&key) {
        e.time = Some(p.now.to_string());
    }
    let mut out = merged;
    set_managed_fields(&mut out, &managers);
    Ok(out)
}

/// `Updater.prune`: removes what the applier owned last time, no longer applies, and nobody
/// else (including its new configuration) owns; emptied named struct fields go with them.
fn prune(ty: Ty, merged: Value, managers: &Managers, last: &FieldSet) -> Value {
    let last = ensure_named_fields_are_members(last, ty);
    let owned = managers.values().fold(FieldSet::new(), |acc, e| acc.union(&e.fields));
    let owned = ensure_named_fields_are_members(&owned, ty);
    // Deliberate: never prune `metadata` itself or the fields nobody can own (upstream would
    // drop them when a configuration stops sending `metadata.name`, and then fail).
    let to_remove = last.difference(&owned).difference(&strip_set());
    if to_remove.is_empty() {
        return merged;
    }
    remove_items(ty, &merged, &to_remove).unwrap_or_else(|| Value::Object(Map::new()))
}

/// Records ownership for a non-apply write (create, update, patch): fields the write added or
/// changed move to `manager` (operation `Update`, this apiVersion and subresource) and are
/// taken from every other manager; removed fields are dropped from all entries; empty entries
/// disappear; only an entry whose write changed something gets a new time.
///
/// Like the apiserver, it first takes the `managedFields` the request carries (an empty list, or
/// a list with one empty entry, clears them; undecodable or absent ones fall back to the stored
/// object's; requests to a subresource always use the stored object's), and it does not start
/// tracking an existing object that has no managed fields. `old` is `None` for a create.
#[allow(clippy::too_many_arguments)]
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    schema: SchemaRef,
    api_version: &str,
    now: &str,
) {
    let ty = Ty::root(schema);
    let decode_or_empty = |obj: Option<&Value>| -> Managers {
        obj.and_then(|o| decode_managed_fields(o).ok()).map(managers_from).unwrap_or_default()
    };
    let mut managers = if subresource.is_some_and(|s| !s.is_empty()) {
        decode_or_empty(old)
    } else {
        let requested = new.get("metadata").and_then(|m| m.get("managedFields"));
        if requested.is_some_and(is_reset_managed_fields) {
            Managers::new()
        } else {
            match decode_managed_fields(new) {
                Ok(entries) if !entries.is_empty() => managers_from(entries),
                _ => decode_or_empty(old),
            }
        }
    };
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.shift_remove("managedFields");
    }
    if managers.is_empty() && old.is_some() {
        return;
    }
    let old_clean = old.map(without_managed_fields).unwrap_or_else(|| ty.zero_object(true));
    let new_clean = new.clone();
    update_entries(ty, &mut managers, &old_clean, &new_clean, manager, subresource, api_version, now);
    set_managed_fields(new, &managers);
}

/// `isResetManagedFields`: `[]` or `[{}]`.
fn is_reset_managed_fields(v: &Value) -> bool {
    match v {
        Value::Array(a) if a.is_empty() => true,
        Value::Array(a) if a.len() == 1 => a.first().and_then(Value::as_object).is_some_and(|m| {
            ["manager", "operation", "apiVersion", "time", "fieldsType", "subresource"].iter().all(|k| {
                matches!(m.get(*k), None | Some(Value::Null)) || m.get(*k) == Some(&Value::String(String::new()))
            }) && matches!(m.get("fieldsV1"), None | Some(Value::Null))
        }),
        _ => false,
    }
}

fn validation_errors(errs: &[(String, String)]) -> String {
    let lines: Vec<String> = errs.iter().map(|(p, m)| format!("{p}: {m}")).collect();
    match lines.as_slice() {
        [one] => one.clone(),
        many => format!("errors:\n  {}", many.join("\n  ")),
    }
}

/// `objectGVKNN`: `namespace/name; group/version, Kind=Kind`.
fn gvknn(obj: &Value) -> String {
    let s = |ptr: &str| obj.pointer(ptr).and_then(Value::as_str).unwrap_or("").to_string();
    let api_version = s("/apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version.as_str()));
    format!("{}/{}; {group}/{version}, Kind={}", s("/metadata/namespace"), s("/metadata/name"), s("/kind"))
}

fn last_applied_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED_ANNOTATION))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn has_last_applied(obj: &Value) -> bool {
    last_applied_of(obj).is_some()
}

/// `allowedConflictsFromLastApplied`: fields of the last-applied configuration whose live
/// value still matches it.
fn allowed_from_last_applied(live: &Value, ty: Ty, api_version: &str) -> Option<FieldSet> {
    let last_applied: Value = serde_json::from_str(last_applied_of(live)?).ok()?;
    if !last_applied.is_object() || last_applied.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return None;
    }
    let mut errs = Vec::new();
    validate(ty, &last_applied, "", &mut errs);
    if !errs.is_empty() {
        return None;
    }
    let set = fields_of_ty(ty, &last_applied);
    let c = compare(ty, &last_applied, &without_managed_fields(live));
    Some(set.difference(&c.modified).difference(&c.added).difference(&c.removed))
}

/// `buildLastApplied`: the applied configuration without the annotation, as Go encodes it.
fn build_last_applied(applied: &Value) -> String {
    let mut obj = applied.clone();
    if let Some(a) = obj.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        a.shift_remove(LAST_APPLIED_ANNOTATION);
    }
    format!("{}\n", go_json(&obj))
}

/// `SetLastApplied`: sets the annotation unless the annotations would exceed 256 KiB.
fn set_last_applied(obj: &mut Value, value: String) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let annotations = meta.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(a) = annotations else { return };
    a.insert(LAST_APPLIED_ANNOTATION.to_string(), Value::String(value));
    let total: usize = a.iter().map(|(k, v)| k.len() + v.as_str().map_or(0, str::len)).sum();
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        a.shift_remove(LAST_APPLIED_ANNOTATION);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::strategic::tests::pod_schema;
    use proptest::prelude::*;
    use serde_json::json;

    const T1: &str = "2024-01-01T00:00:00Z";
    const T2: &str = "2024-01-01T00:01:00Z";
    const T3: &str = "2024-01-01T00:02:00Z";

    struct Fixture {
        root: Value,
        defs: crate::schema::Defs,
    }

    impl Fixture {
        fn new() -> Self {
            let (root, defs) = pod_schema();
            Fixture { root, defs }
        }
        fn s(&self) -> SchemaRef<'_> {
            SchemaRef::new(&self.root, &self.defs)
        }
        fn apply(
            &self,
            live: Option<&Value>,
            applied: &Value,
            manager: &str,
            force: bool,
            now: &str,
        ) -> Result<Value, ApplyError> {
            let s = self.s();
            apply_with(&ApplyParams {
                live,
                applied,
                manager,
                subresource: None,
                force,
                schema: s,
                api_version: "v1",
                now,
            })
        }
        fn update(&self, old: Option<&Value>, new: &Value, manager: &str, now: &str) -> Value {
            let mut new = new.clone();
            record_update(old, &mut new, manager, None, self.s(), "v1", now);
            new
        }
    }

    fn managed(obj: &Value) -> Vec<Value> {
        obj.pointer("/metadata/managedFields").and_then(Value::as_array).cloned().unwrap_or_default()
    }

    fn entry(obj: &Value, manager: &str) -> Option<Value> {
        managed(obj).into_iter().find(|e| e["manager"] == manager)
    }

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
    }

    #[test]
    fn create_by_apply_records_the_applied_fields() {
        let fx = Fixture::new();
        let cfg = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let obj = fx.apply(None, &cfg, "kubectl", false, T1).unwrap();
        assert_eq!(obj["spec"], cfg["spec"]);
        assert_eq!(
            managed(&obj),
            vec![json!({
                "manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}},
                             "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}}
            })]
        );
    }

    #[test]
    fn reapply_without_a_field_removes_it() {
        let fx = Fixture::new();
        let cfg1 = pod(
            json!({"replicas": 2, "containers": [{"name": "c", "image": "a", "env": [{"name": "X", "value": "1"}]}, {"name": "d"}]}),
        );
        let obj = fx.apply(None, &cfg1, "mgr", false, T1).unwrap();
        let cfg2 = pod(json!({"containers": [{"name": "c", "image": "a"}]}));
        let obj = fx.apply(Some(&obj), &cfg2, "mgr", false, T2).unwrap();
        assert_eq!(obj["spec"], json!({"containers": [{"name": "c", "image": "a"}]}));
        assert_eq!(entry(&obj, "mgr").unwrap()["time"], T2);
    }

    #[test]
    fn fields_owned_by_others_survive_reapply() {
        let fx = Fixture::new();
        let obj = fx.apply(None, &pod(json!({"replicas": 2, "containers": [{"name": "c"}]})), "a", false, T1).unwrap();
        // "b" applies the same replicas: shared ownership, no conflict.
        let obj = fx.apply(Some(&obj), &pod(json!({"replicas": 2})), "b", false, T2).unwrap();
        assert!(entry(&obj, "b").unwrap()["fieldsV1"]["f:spec"].get("f:replicas").is_some());
        // "a" stops applying replicas: still owned by "b", so it stays.
        let obj = fx.apply(Some(&obj), &pod(json!({"containers": [{"name": "c"}]})), "a", false, T3).unwrap();
        assert_eq!(obj["spec"]["replicas"], 2);
        assert!(entry(&obj, "a").unwrap()["fieldsV1"]["f:spec"].get("f:replicas").is_none());
    }

    #[test]
    fn conflict_then_force() {
        let fx = Fixture::new();
        let obj = fx.apply(None, &pod(json!({"replicas": 2})), "a", false, T1).unwrap();
        let err = fx.apply(Some(&obj), &pod(json!({"replicas": 3})), "b", false, T2).unwrap_err();
        let ApplyError::Conflicts(conflicts) = &err else { panic!("{err:?}") };
        assert_eq!(err.status_code(), 409);
        assert_eq!(err.reason(), "Conflict");
        assert_eq!(err.message(), "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas");
        assert_eq!(
            conflict_causes(conflicts),
            vec![("FieldManagerConflict", "conflict with \"a\"".to_string(), ".spec.replicas".to_string())]
        );
        let obj = fx.apply(Some(&obj), &pod(json!({"replicas": 3})), "b", true, T2).unwrap();
        assert_eq!(obj["spec"]["replicas"], 3);
        // "a" lost the field (and its now-empty entry).
        assert!(entry(&obj, "a").is_none());
        assert!(entry(&obj, "b").is_some());
    }

    #[test]
    fn update_manager_conflicts_print_the_api_version() {
        let fx = Fixture::new();
        let created = fx.update(
            None,
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"x": "1"}},
                    "spec": {"replicas": 1, "containers": [{"name": "c", "image": "a"}]}}),
            "kubectl-client-side-apply",
            T1,
        );
        let err = fx
            .apply(
                Some(&created),
                &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"x": "2"}},
                        "spec": {"replicas": 2, "containers": [{"name": "c", "image": "b"}]}}),
                "other",
                false,
                T2,
            )
            .unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 3 conflicts: conflicts with \"kubectl-client-side-apply\" using v1:\n\
             - .metadata.labels.x\n\
             - .spec.replicas\n\
             - .spec.containers[name=\"c\"].image"
        );
    }

    #[test]
    fn multiple_managers_are_grouped_and_sorted() {
        let c = |m: &str, op: Operation, f: &str| Conflict {
            manager: m.into(),
            operation: op,
            api_version: "v1".into(),
            subresource: None,
            field: f.into(),
            path: vec![],
        };
        let msg = conflict_message(&[
            c("foo", Operation::Update, ".spec.replicas"),
            c("bar", Operation::Apply, ".metadata.labels.app"),
        ]);
        assert_eq!(
            msg,
            "Apply failed with 2 conflicts: conflicts with \"bar\":\n- .metadata.labels.app\nconflicts with \"foo\" using v1:\n- .spec.replicas"
        );
        let mut sub = c("foo", Operation::Update, ".spec.replicas");
        sub.subresource = Some("scale".into());
        assert_eq!(
            conflict_message(&[sub]),
            "Apply failed with 1 conflict: conflict with \"foo\" with subresource \"scale\" using v1: .spec.replicas"
        );
    }

    #[test]
    fn update_records_changed_fields_with_dot_markers() {
        let fx = Fixture::new();
        let created = fx.update(
            None,
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "a"}], "strategy": {"rollingUpdate": {"maxSurge": "1"}}}}),
            "kubectl-create",
            T1,
        );
        assert_eq!(
            managed(&created),
            vec![json!({
                "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {
                        "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}},
                        "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}}}
                    }
                }
            })]
        );
        // A controller changes the image: it takes the field, time only on its entry.
        let mut changed = created.clone();
        changed["spec"]["containers"][0]["image"] = json!("b");
        let updated = fx.update(Some(&created), &changed, "controller", T2);
        assert_eq!(entry(&updated, "kubectl-create").unwrap()["time"], T1);
        assert_eq!(
            entry(&updated, "controller").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {"f:image": {}}}}})
        );
        assert!(
            entry(&updated, "kubectl-create").unwrap()["fieldsV1"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]
                .get("f:image")
                .is_none()
        );
        // A write that changes nothing leaves managedFields untouched.
        let again = fx.update(Some(&updated), &updated, "someone", T3);
        assert_eq!(managed(&again), managed(&updated));
    }

    #[test]
    fn update_of_untracked_object_is_not_tracked_and_reset_clears() {
        let fx = Fixture::new();
        let untracked = pod(json!({"replicas": 1}));
        let mut next = untracked.clone();
        next["spec"]["replicas"] = json!(2);
        assert!(managed(&fx.update(Some(&untracked), &next, "m", T1)).is_empty());

        let tracked = fx.update(None, &untracked, "m", T1);
        assert_eq!(managed(&tracked).len(), 1);
        let mut reset = tracked.clone();
        reset["metadata"]["managedFields"] = json!([]);
        let out = fx.update(Some(&tracked), &reset, "m", T2);
        assert!(out["metadata"].get("managedFields").is_none());
        // Garbage in the request falls back to the stored entries.
        let mut garbage = tracked.clone();
        garbage["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Bogus"}]);
        assert_eq!(managed(&fx.update(Some(&tracked), &garbage, "m", T2)), managed(&tracked));
    }

    #[test]
    fn first_apply_to_untracked_object_creates_before_first_apply() {
        let fx = Fixture::new();
        let live = pod(json!({"replicas": 1, "containers": [{"name": "c"}]}));
        let err = fx.apply(Some(&live), &pod(json!({"replicas": 5})), "mgr", false, T1).unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .spec.replicas"
        );
        let ok = fx.apply(Some(&live), &pod(json!({"replicas": 1})), "mgr", false, T1).unwrap();
        assert!(entry(&ok, "before-first-apply").is_some());
        assert!(entry(&ok, "mgr").is_some());
    }

    #[test]
    fn apply_merges_map_lists_and_replaces_atomic_lists() {
        let fx = Fixture::new();
        let live = fx.update(
            None,
            &pod(json!({"containers": [{"name": "a", "image": "1", "args": ["x", "y"]}, {"name": "b", "image": "2"}],
                        "tolerations": [{"key": "t1"}, {"key": "t2"}]})),
            "creator",
            T1,
        );
        let cfg = pod(json!({"containers": [{"name": "b", "image": "2"}, {"name": "new", "image": "3"}],
                             "tolerations": [{"key": "t2"}]}));
        let err = fx.apply(Some(&live), &cfg, "applier", false, T2).unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 1 conflict: conflict with \"creator\" using v1: .spec.tolerations"
        );
        let obj = fx.apply(Some(&live), &cfg, "applier", true, T2).unwrap();
        assert_eq!(
            obj["spec"],
            json!({"containers": [{"name": "a", "image": "1", "args": ["x", "y"]}, {"name": "b", "image": "2"}, {"name": "new", "image": "3"}],
                   "tolerations": [{"key": "t2"}]})
        );
    }

    #[test]
    fn finalizers_and_owner_references_are_tracked_by_item() {
        let fx = Fixture::new();
        let cfg = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p",
            "finalizers": ["a.io/x"], "ownerReferences": [{"uid": "u1", "name": "o", "kind": "K"}]}});
        let obj = fx.apply(None, &cfg, "m", false, T1).unwrap();
        assert_eq!(
            entry(&obj, "m").unwrap()["fieldsV1"],
            json!({"f:metadata": {"f:finalizers": {"v:\"a.io/x\"": {}}, "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}}})
        );
        // Another manager adds a finalizer with an update; the applier drops its own.
        let mut with_other = obj.clone();
        with_other["metadata"]["finalizers"] = json!(["a.io/x", "b.io/y"]);
        let obj = fx.update(Some(&obj), &with_other, "ctrl", T2);
        let cfg2 = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let obj = fx.apply(Some(&obj), &cfg2, "m", false, T3).unwrap();
        assert_eq!(obj["metadata"]["finalizers"], json!(["b.io/y"]));
        assert!(obj["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn noop_apply_keeps_time_but_updates_ownership() {
        let fx = Fixture::new();
        let obj = fx.apply(None, &pod(json!({"replicas": 1})), "a", false, T1).unwrap();
        let again = fx.apply(Some(&obj), &pod(json!({"replicas": 1})), "a", false, T2).unwrap();
        assert_eq!(entry(&again, "a").unwrap()["time"], T1);
        let shared = fx.apply(Some(&obj), &pod(json!({"replicas": 1})), "b", false, T2).unwrap();
        assert!(entry(&shared, "b").unwrap().get("time").is_none());
    }

    #[test]
    fn apply_errors() {
        let fx = Fixture::new();
        let mut cfg = pod(json!({}));
        cfg["metadata"]["managedFields"] = json!([]);
        let e = fx.apply(None, &cfg, "m", false, T1).unwrap_err();
        assert_eq!((e.status_code(), e.message().as_str()), (400, "metadata.managedFields must be nil"));
        let cfg = pod(json!({"containers": [{"name": "a"}, {"name": "a"}]}));
        let e = fx.apply(None, &cfg, "m", false, T1).unwrap_err();
        assert_eq!(e.status_code(), 500);
        assert_eq!(
            e.message(),
            "failed to create typed patch object (ns/p; /v1, Kind=Pod): .spec.containers: duplicate entries for key [name=\"a\"]"
        );
    }

    #[test]
    fn lenient_apply_only_fails_on_conflicts() {
        let fx = Fixture::new();
        let mut cfg = pod(json!({"replicas": 2, "containers": [{"name": "a"}, {"name": "a", "image": "x"}]}));
        cfg["metadata"]["managedFields"] = json!([]);
        let obj = apply(None, &cfg, "m", false, fx.s(), "v1", T1).unwrap();
        assert_eq!(obj["spec"]["replicas"], 2);
        assert!(obj["metadata"]["managedFields"].is_array());
        let conflicts = apply(Some(&obj), &pod(json!({"replicas": 3})), "n", false, fx.s(), "v1", T2).unwrap_err();
        assert_eq!(conflict_message(&conflicts), "Apply failed with 1 conflict: conflict with \"m\": .spec.replicas");
    }

    #[test]
    fn kubectl_upgrade_from_client_side_apply() {
        let fx = Fixture::new();
        let last = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"},"spec":{"replicas":1}}"#;
        let mut obj = pod(json!({"replicas": 1}));
        obj["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: last});
        let obj = fx.update(None, &obj, "kubectl-client-side-apply", T1);
        // The same value re-applied server side by "kubectl": no conflict.
        let out = fx.apply(Some(&obj), &pod(json!({"replicas": 3})), "kubectl", false, T2).unwrap();
        assert_eq!(out["spec"]["replicas"], 3);
        let synced = out["metadata"]["annotations"][LAST_APPLIED_ANNOTATION].as_str().unwrap();
        assert_eq!(
            synced,
            "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\"},\"spec\":{\"replicas\":3}}\n"
        );
        // Another manager gets the conflict.
        assert!(fx.apply(Some(&obj), &pod(json!({"replicas": 3})), "other", false, T2).is_err());
    }

    #[test]
    fn update_managers_are_capped() {
        let fx = Fixture::new();
        let mut base = pod(json!({}));
        base["metadata"]["labels"] = json!({"base": "x"});
        let mut obj = fx.update(None, &base, "creator", "2024-01-01T00:00:00Z");
        for i in 0..12 {
            let mut next = obj.clone();
            next["metadata"]["labels"][format!("l{i}")] = json!("x");
            let old = obj.clone();
            obj = fx.update(Some(&old), &next, &format!("m{i:02}"), &format!("2024-01-01T00:{:02}:00Z", i + 1));
        }
        let entries = managed(&obj);
        let names: Vec<&str> = entries.iter().filter_map(|e| e["manager"].as_str()).collect();
        // 13 updaters (creator + m00..m11) capped at 10: the four oldest share one bucket.
        assert_eq!(names.len(), MAX_UPDATE_MANAGERS, "{names:?}");
        assert_eq!(names.first().copied(), Some("ancient-changes"), "{names:?}");
        let bucket = &entries[0]["fieldsV1"]["f:metadata"]["f:labels"];
        assert!(bucket.get("f:l0").is_some() && bucket.get("f:l2").is_some(), "{bucket}");
        assert_eq!(entries[0]["time"], "2024-01-01T00:03:00Z");
    }

    #[test]
    fn dropping_the_last_label_removes_the_map_but_never_identity() {
        let fx = Fixture::new();
        let mut cfg = pod(json!({"replicas": 1}));
        cfg["metadata"]["labels"] = json!({"app": "x"});
        let obj = fx.apply(None, &cfg, "m", false, T1).unwrap();
        assert_eq!(obj["metadata"]["labels"], json!({"app": "x"}));
        let obj = fx.apply(Some(&obj), &pod(json!({"replicas": 1})), "m", false, T2).unwrap();
        assert!(obj["metadata"].get("labels").is_none(), "{obj}");
        assert_eq!(obj["metadata"]["name"], "p");
        // A configuration without metadata at all keeps the object's identity.
        let mut cfg = pod(json!({"replicas": 1}));
        cfg["metadata"]["labels"] = json!({"app": "x"});
        let obj = fx.apply(Some(&obj), &cfg, "m", false, T2).unwrap();
        let bare = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"replicas": 1}});
        let obj = fx.apply(Some(&obj), &bare, "m", false, T3).unwrap();
        assert_eq!(obj["metadata"]["name"], "p");
        assert_eq!(obj["metadata"]["namespace"], "ns");
        assert!(obj["metadata"].get("labels").is_none());
    }

    #[test]
    fn subresource_writes_get_their_own_entries() {
        let fx = Fixture::new();
        let obj = fx.apply(None, &pod(json!({"replicas": 1})), "m", false, T1).unwrap();
        let mut with_status = obj.clone();
        with_status["status"] = json!({"phase": "Running"});
        // The request's managedFields are ignored on subresources.
        with_status["metadata"]["managedFields"] = json!([]);
        record_update(Some(&obj), &mut with_status, "kubelet", Some("status"), fx.s(), "v1", T2);
        let e = entry(&with_status, "kubelet").unwrap();
        assert_eq!(e["subresource"], "status");
        assert_eq!(e["fieldsV1"], json!({"f:status": {".": {}, "f:phase": {}}}));
        assert!(entry(&with_status, "m").is_some());
    }

    #[test]
    fn manager_defaults_to_user_agent_prefix() {
        assert_eq!(manager_or_user_agent("mine", "kubectl/v1.33"), "mine");
        assert_eq!(manager_or_user_agent("", "kubectl/v1.33.0 (linux/amd64) kubernetes/abc"), "kubectl");
        assert_eq!(manager_or_user_agent("", &"x".repeat(200)).len(), 128);
    }

    #[test]
    fn managed_fields_entries_round_trip_and_sort() {
        let entries = vec![
            ManagedFieldsEntry {
                manager: "b".into(),
                operation: Operation::Update,
                api_version: "v1".into(),
                time: Some(T2.into()),
                subresource: Some("status".into()),
                fields: FieldSet::new(),
            },
            ManagedFieldsEntry {
                manager: "z".into(),
                operation: Operation::Apply,
                api_version: "v1".into(),
                time: Some(T3.into()),
                subresource: None,
                fields: FieldSet::new(),
            },
        ];
        let json = encode_managed_fields(&entries);
        assert_eq!(json[0]["manager"], "z");
        assert_eq!(json[1]["subresource"], "status");
        let decoded = decode_managed_fields(&json!({"metadata": {"managedFields": json}})).unwrap();
        assert_eq!(decoded.len(), 2);
        assert!(decoded.contains(&entries[0]));
        let bad = json!({"metadata": {"managedFields": [{"manager": "x", "operation": "Update", "apiVersion": "v1"}]}});
        assert_eq!(decode_managed_fields(&bad).unwrap_err(), "missing fieldsType in managed fields entry 0");
        assert_eq!(
            entries[0].identifier(),
            r#"{"manager":"b","operation":"Update","apiVersion":"v1","subresource":"status"}"#
        );
    }

    #[test]
    fn duplicated_live_items_survive_applies_that_do_not_touch_them() {
        let fx = Fixture::new();
        let dup_env = json!([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}, {"name": "B"}]);
        let live =
            fx.update(None, &pod(json!({"replicas": 1, "containers": [{"name": "c", "env": dup_env}]})), "creator", T1);
        let obj = fx.apply(Some(&live), &pod(json!({"replicas": 1})), "m", false, T2).unwrap();
        assert_eq!(obj["spec"]["containers"][0]["env"], dup_env);
    }

    #[test]
    fn merge_order_follows_upstream() {
        let fx = Fixture::new();
        let ty = Ty::root(fx.s());
        let spec_ty = ty.field("spec").0.field("containers").0;
        let l = json!([{"name": "A"}, {"name": "B"}]);
        let r = json!([{"name": "C"}, {"name": "B"}, {"name": "A"}]);
        let out = merge(spec_ty, Some(&l), Some(&r)).unwrap();
        assert_eq!(out, json!([{"name": "C"}, {"name": "B"}, {"name": "A"}]));
        let l = json!([{"name": "X"}, {"name": "A"}]);
        let r = json!([{"name": "A"}, {"name": "Y"}]);
        assert_eq!(merge(spec_ty, Some(&l), Some(&r)).unwrap(), json!([{"name": "X"}, {"name": "A"}, {"name": "Y"}]));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-2i64..3).prop_map(|n| json!(n)),
            prop_oneof![Just("a"), Just("b"), Just("c")].prop_map(|s| Value::String(s.to_string())),
        ];
        let key = prop_oneof![
            Just("name"),
            Just("image"),
            Just("containers"),
            Just("env"),
            Just("replicas"),
            Just("value"),
            Just("finalizers"),
            Just("labels"),
            Just("tolerations"),
            Just("ports"),
            Just("containerPort"),
            Just("nodeSelector"),
            Just("x")
        ]
        .prop_map(str::to_string);
        leaf.prop_recursive(5, 40, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key.clone(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Found by apply_and_update_never_panic: a live list whose only item is not a list item
    /// (null), applied as `[]`, lost the field on the first apply and got it back on the second.
    #[test]
    fn an_applied_empty_list_stays_over_a_live_list_of_invalid_items() {
        let fx = Fixture::new();
        let live =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [null]}});
        let cfg = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}});
        let tracked = fx.update(None, &live, "creator", T1);
        let out = fx.apply(Some(&tracked), &cfg, "m", false, T2).expect("applies");
        assert_eq!(out["spec"], json!({"containers": []}));
        let again = fx.apply(Some(&out), &cfg, "m", false, T3).expect("applies again");
        assert_eq!(again["spec"], out["spec"]);
    }

    /// Found by apply_and_update_never_panic: the same live list applied as `null` lost the
    /// field on the first apply and set it to `null` on the second.
    #[test]
    fn an_applied_null_stays_over_a_live_list_of_invalid_items() {
        let fx = Fixture::new();
        let live =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [null]}});
        let cfg = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": null}});
        let tracked = fx.update(None, &live, "creator", T1);
        let out = fx.apply(Some(&tracked), &cfg, "m", false, T2).expect("applies");
        let again = fx.apply(Some(&out), &cfg, "m", false, T3).expect("applies again");
        assert_eq!(again["spec"], out["spec"]);
    }

    proptest! {
        #[test]
        fn apply_and_update_never_panic(live in arb_json(), cfg in arb_json(), force in any::<bool>()) {
            let fx = Fixture::new();
            let live = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": live.clone()}, "spec": live});
            let cfg = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": cfg});
            let tracked = fx.update(None, &live, "creator", T1);
            let _ = fx.apply(Some(&live), &cfg, "kubectl", force, T2);
            if let Ok(out) = fx.apply(Some(&tracked), &cfg, "m", force, T2) {
                // Re-applying the same configuration is stable.
                let again = fx.apply(Some(&out), &cfg, "m", false, T3);
                prop_assert!(again.is_ok(), "{:?}", again);
                let again = again.unwrap();
                prop_assert_eq!(&again["spec"], &out["spec"]);
            }
            let mut next = tracked.clone();
            next["spec"] = cfg["spec"].clone();
            let _ = fx.update(Some(&tracked), &next, "m", T2);
        }

        #[test]
        fn applied_fields_are_owned(cfg in arb_json()) {
            let fx = Fixture::new();
            let cfg = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": cfg}});
            if let Ok(out) = fx.apply(None, &cfg, "m", false, T1) {
                let entries = decode_managed_fields(&out).unwrap();
                let owned = entries.iter().fold(FieldSet::new(), |a, e| a.union(&e.fields));
                prop_assert_eq!(owned, strip_meta(&super::super::fieldset::fields_of(&cfg, fx.s())));
            }
        }
    }
}
