//! Field sets of server-side apply (sigs.k8s.io/structured-merge-diff `fieldpath.Set`): which
//! fields a manager owns, and their `FieldsV1` JSON form stored in
//! `metadata.managedFields[].fieldsV1`.
//!
//! A path is a list of [`PathElement`]s: `f:<name>` (a field or map entry), `k:{"name":"x"}`
//! (an item of a list of type map, by its keys), `v:"x"` (an item of a list of type set) and
//! `i:<n>` (an index; not produced here because atomic lists are leaves). A set holds
//! *members* (owned paths) and *children* (sets below a path element). In `FieldsV1` a member
//! without children is `{}` and a member that also has children carries `".": {}`.
//!
//! `fields_of` computes the set an applied configuration claims, exactly as
//! `TypedValue.ToFieldSet` does: scalars, atomic lists/maps, `null`s and empty maps are leaves;
//! items of associative lists and entries of maps (not declared properties) are members
//! themselves too. The schema gives list types (`x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys`, or the strategic merge key on built-in kinds) and
//! `x-kubernetes-map-type`; fields without schema are "deduced" as upstream does for
//! `x-kubernetes-preserve-unknown-fields`: objects are granular maps, arrays atomic.

use crate::field::go_quote;
use crate::golike::{go_json, write_go_json_string};
use crate::schema::{ListType, SchemaRef};
use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One step of a field path.
#[derive(Debug, Clone)]
pub enum PathElement {
    /// `f:<name>`: a field of an object or an entry of a map.
    Field(String),
    /// `k:{...}`: the item of a list of type map whose key fields have these values (sorted by
    /// field name).
    Key(Vec<(String, Value)>),
    /// `v:<json>`: the item of a list of type set with this value.
    Value(Value),
    /// `i:<n>`: an index into an atomic list.
    Index(i64),
}

impl PathElement {
    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The `FieldsV1` key: `f:name`, `k:{"name":"x"}`, `v:"x"`, `i:3`.
    pub fn serialize(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut out = String::from("k:{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_go_json_string(&mut out, name);
                    out.push(':');
                    out.push_str(&go_json(value));
                }
                out.push('}');
                out
            }
            PathElement::Value(v) => format!("v:{}", go_json(v)),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `FieldsV1` key. `Ok(None)` for an unknown element type (upstream ignores those
    /// so that future versions can add types).
    pub fn parse(s: &str) -> Result<Option<PathElement>, String> {
        let b = s.as_bytes();
        if b.len() < 2 {
            return Err("key must be 2 characters long:".to_string());
        }
        if b.get(1) != Some(&b':') {
            return Err(format!("missing colon: {s}"));
        }
        let rest = s.get(2..).ok_or_else(|| format!("missing colon: {s}"))?;
        match b.first() {
            Some(b'f') => Ok(Some(PathElement::Field(rest.to_string()))),
            Some(b'v') => serde_json::from_str::<Value>(rest)
                .map(|v| Some(PathElement::Value(v)))
                .map_err(|e| format!("parsing key as path element: {e}")),
            Some(b'k') => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(m)) => {
                    let mut fields: Vec<(String, Value)> = m.into_iter().collect();
                    fields.sort_by(|a, b| a.0.cmp(&b.0));
                    Ok(Some(PathElement::Key(fields)))
                }
                Ok(_) => Err("parsing key as path element: ReadObjectCB: expect {".to_string()),
                Err(e) => Err(format!("parsing key as path element: {e}")),
            },
            Some(b'i') => {
                let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
                if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                    return Err(format!("strconv.Atoi: parsing {rest:?}: invalid syntax"));
                }
                rest.parse::<i64>()
                    .map(|i| Some(PathElement::Index(i)))
                    .map_err(|_| format!("strconv.Atoi: parsing {rest:?}: value out of range"))
            }
            _ => Ok(None),
        }
    }
}

impl fmt::Display for PathElement {
    /// As upstream prints paths in conflicts: `.name`, `[name="x",protocol="TCP"]`, `[="x"]`,
    /// `[3]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields.iter().map(|(n, v)| format!("{n}={}", value_to_string(v))).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={}]", value_to_string(v)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// smd `value.ToString`: strings quoted (Go `%q`), numbers and booleans bare.
fn value_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => go_quote(s),
        Value::Array(a) => format!("[{}]", a.iter().map(value_to_string).collect::<Vec<_>>().join(",")),
        Value::Object(m) => m.iter().map(|(k, v)| format!("{k}={}", value_to_string(v))).collect::<Vec<_>>().join(","),
    }
}

/// Prints a whole path as upstream does in conflict messages: `.spec.containers[name="x"].image`.
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for ((an, av), (bn, bv)) in a.iter().zip(b.iter()) {
                    let c = an.cmp(bn).then_with(|| value_compare(av, bv));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => value_compare(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

fn as_int(n: &serde_json::Number) -> Option<i64> {
    n.as_i64()
}

/// smd `value.Compare`: a total order over values (numbers, then strings, booleans, lists,
/// maps, null; integers and floats compare numerically).
pub(crate) fn value_compare(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (as_int(x), as_int(y)) {
            (Some(i), Some(j)) => i.cmp(&j),
            _ => {
                let (fx, fy) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                fx.partial_cmp(&fy).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y.iter()) {
                let c = value_compare(p, q);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for (i, k) in keys.into_iter().enumerate() {
                let c = if i == x.len() {
                    Ordering::Less
                } else if i == y.len() {
                    Ordering::Greater
                } else {
                    match (x.get(k), y.get(k)) {
                        (None, _) => Ordering::Greater,
                        (_, None) => Ordering::Less,
                        (Some(p), Some(q)) => value_compare(p, q),
                    }
                };
                if c != Ordering::Equal {
                    return c;
                }
            }
            Ordering::Equal
        }
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => rank(a).cmp(&rank(b)),
    }
}

/// smd `value.Equals`: deep equality where integers and floats compare numerically.
pub(crate) fn value_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (as_int(x), as_int(y)) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| value_equal(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| value_equal(v, w)))
        }
        _ => a == b,
    }
}

/// A set of field paths (`fieldpath.Set`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

/// A malformed `fieldsV1` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldsV1Error(pub String);

impl fmt::Display for FieldsV1Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FieldsV1Error {}

impl FieldSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// A set holding the given paths.
    pub fn from_paths<'p>(paths: impl IntoIterator<Item = &'p [PathElement]>) -> Self {
        let mut s = FieldSet::new();
        for p in paths {
            s.insert(p);
        }
        s
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds a path (the empty path is ignored).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// True when `path` is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// The set below `pe` (`Set.WithPrefix`), if any.
    pub fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    /// Every member path, in upstream's iteration order (a level's members, then its children).
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for m in &self.members {
            let mut p = prefix.clone();
            p.push(m.clone());
            out.push(p);
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    /// Members of `self` not members of `other`, level by level (`Set.Difference`: a member of
    /// `other` does not remove paths below it).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let diff = match other.children.get(pe) {
                Some(o) => child.difference(o),
                None => child.clone(),
            };
            if !diff.is_empty() {
                children.insert(pe.clone(), diff);
            }
        }
        FieldSet { members, children }
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if let Some(o) = other.children.get(pe) {
                let i = child.intersection(o);
                if !i.is_empty() {
                    children.insert(pe.clone(), i);
                }
            }
        }
        FieldSet { members, children }
    }

    /// Like [`FieldSet::difference`], but also drops everything below a member of `other`
    /// (`Set.RecursiveDifference`).
    #[cfg(test)]
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if other.members.contains(pe) {
                continue;
            }
            let diff = match other.children.get(pe) {
                Some(o) => child.recursive_difference(o),
                None => child.clone(),
            };
            if !diff.is_empty() {
                children.insert(pe.clone(), diff);
            }
        }
        FieldSet { members, children }
    }

    /// The `fieldsV1` JSON of this set, byte-compatible with what the apiserver stores.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.emit(false))
    }

    fn emit(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        // `".": {}` comes first, as structured-merge-diff's emitContentsV1 writes it.
        if include_self && !(self.members.is_empty() && self.children.is_empty()) {
            out.insert(".".to_string(), Value::Object(Map::new()));
        }
        let mut members = self.members.iter().peekable();
        let mut children = self.children.iter().peekable();
        loop {
            let (key, value) = match (members.peek(), children.peek()) {
                (None, None) => break,
                (Some(m), None) => {
                    let k = m.serialize();
                    members.next();
                    (k, Value::Object(Map::new()))
                }
                (None, Some((pe, child))) => {
                    let kv = (pe.serialize(), Value::Object(child.emit(false)));
                    children.next();
                    kv
                }
                (Some(m), Some((pe, child))) => match (*m).cmp(pe) {
                    Ordering::Less => {
                        let k = m.serialize();
                        members.next();
                        (k, Value::Object(Map::new()))
                    }
                    Ordering::Greater => {
                        let kv = (pe.serialize(), Value::Object(child.emit(false)));
                        children.next();
                        kv
                    }
                    Ordering::Equal => {
                        let kv = (pe.serialize(), Value::Object(child.emit(true)));
                        members.next();
                        children.next();
                        kv
                    }
                },
            };
            out.insert(key, value);
        }
        out
    }

    /// Parses a `fieldsV1` value (`null` is the empty set). Unknown path element types are
    /// ignored, as upstream does.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, FieldsV1Error> {
        Ok(read_v1(v)?.0.unwrap_or_default())
    }
}

fn read_v1(v: &Value) -> Result<(Option<FieldSet>, bool), FieldsV1Error> {
    let obj = match v {
        Value::Object(m) => m,
        Value::Null => return Ok((None, true)),
        other => {
            return Err(FieldsV1Error(format!(
                "ReadMapCB: expect {{ or n, but found {}",
                other.to_string().chars().next().unwrap_or(' ')
            )));
        }
    };
    let mut children: Option<FieldSet> = None;
    let mut is_member = false;
    for (key, val) in obj {
        if key == "." {
            is_member = true;
            continue;
        }
        let pe = match PathElement::parse(key) {
            Ok(Some(pe)) => pe,
            Ok(None) => continue,
            Err(e) => return Err(FieldsV1Error(format!("parsing key as path element: {e}"))),
        };
        let (grandchildren, child_is_member) = read_v1(val)?;
        if child_is_member {
            children.get_or_insert_default().members.insert(pe.clone());
        }
        if let Some(g) = grandchildren {
            children.get_or_insert_default().children.insert(pe, g);
        }
    }
    if children.is_none() {
        is_member = true;
    }
    Ok((children, is_member))
}

// ---------------------------------------------------------------------------------------------
// Schema walking shared by field sets and apply
// ---------------------------------------------------------------------------------------------

/// How a list's items are identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListKind {
    Atomic,
    Set,
    Keyed(Vec<String>),
}

/// What a value is for server-side apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Scalar,
    Map { atomic: bool },
    List(ListKind),
}

/// A (possibly absent) schema node, together with the unresolved property node that may carry
/// extensions on an `allOf` wrapper.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ty<'a> {
    pub(crate) schema: Option<SchemaRef<'a>>,
    raw: Option<&'a Value>,
}

impl<'a> Ty<'a> {
    pub(crate) fn root(s: SchemaRef<'a>) -> Self {
        Ty { schema: Some(s), raw: None }
    }

    fn ext(&self, name: &str) -> Option<&'a Value> {
        self.raw.and_then(|r| r.get(name)).or_else(|| self.schema.and_then(|s| s.get(name)))
    }

    /// No usable schema: values are deduced from their shape.
    fn untyped(&self) -> bool {
        match self.schema {
            None => true,
            Some(s) => {
                s.ty().is_none()
                    && !s.has_properties()
                    && s.items().is_none()
                    && s.additional_properties().is_none()
                    && !s.int_or_string()
            }
        }
    }

    pub(crate) fn kind(&self, v: &Value) -> Kind {
        match v {
            Value::Object(_) => Kind::Map {
                atomic: !self.untyped() && self.ext("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
            },
            Value::Array(_) => Kind::List(self.list_kind()),
            _ => Kind::Scalar,
        }
    }

    fn list_kind(&self) -> ListKind {
        let Some(s) = self.schema else { return ListKind::Atomic };
        if self.untyped() {
            return ListKind::Atomic;
        }
        let list_type = match self.ext("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(
                self.ext("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default(),
            ),
            Some(_) => ListType::Atomic,
            None => s.list_type(),
        };
        match list_type {
            ListType::Atomic => ListKind::Atomic,
            ListType::Set => ListKind::Set,
            ListType::Map(keys) if keys.is_empty() => ListKind::Atomic,
            ListType::Map(keys) => ListKind::Keyed(keys),
        }
    }

    /// The type of member `key`, and whether it is a declared property (a "named field").
    pub(crate) fn field(&self, key: &str) -> (Ty<'a>, bool) {
        if let Some(s) = self.schema {
            if let Some(p) = s.property(key) {
                return (Ty { schema: Some(p), raw: s.properties_map().and_then(|m| m.get(key)) }, true);
            }
            if let Some(ap) = s.additional_properties() {
                return (Ty { schema: Some(ap), raw: s.get("additionalProperties") }, false);
            }
        }
        (Ty::default(), false)
    }

    /// The type of the items of a list.
    pub(crate) fn items(&self) -> Ty<'a> {
        match self.schema {
            Some(s) => Ty { schema: s.items(), raw: s.get("items") },
            None => Ty::default(),
        }
    }

    /// The typed zero value of an object of this type, as the apiserver's empty Go struct
    /// converts to JSON: `metadata: {}` at the root, `{}` for struct fields the OpenAPI marks
    /// with `default: {}` (non-pointer structs), `null` for other required (non-omitempty)
    /// objects and lists. Used as the "old" object of creates, which decides where Update
    /// entries get `".": {}` markers.
    pub(crate) fn zero_object(&self, root: bool) -> Value {
        let mut out = Map::new();
        if root {
            out.insert("metadata".to_string(), Value::Object(Map::new()));
        }
        let Some(s) = self.schema else { return Value::Object(out) };
        let required: Vec<&str> = s.required().collect();
        for (name, _) in s.properties() {
            let (child, _) = self.field(name);
            let default_empty_object = child.ext("default").is_some_and(|d| d.as_object().is_some_and(Map::is_empty));
            let is_container = child.schema.is_some_and(|c| {
                matches!(c.ty(), Some("object" | "array")) || c.has_properties() || c.items().is_some()
            });
            if default_empty_object {
                let nested = child.zero_object(false);
                if !(root && name == "metadata") {
                    out.insert(name.to_string(), nested);
                }
            } else if required.contains(&name) && is_container {
                out.insert(name.to_string(), Value::Null);
            }
        }
        Value::Object(out)
    }
}

/// The path element of item `i` of a list (`listItemToPathElement`), or upstream's reason why
/// there is none.
pub(crate) fn list_item_pe(list_ty: &Ty, kind: &ListKind, i: usize, item: &Value) -> Result<PathElement, String> {
    match kind {
        ListKind::Atomic => Ok(PathElement::Index(i as i64)),
        ListKind::Keyed(keys) => {
            let m = match item {
                Value::Null => {
                    return Err("associative list with keys may not have a null element".to_string());
                }
                Value::Object(m) => m,
                _ => return Err("associative list with keys may not have non-map elements".to_string()),
            };
            let items = list_ty.items();
            let mut fields = Vec::with_capacity(keys.len());
            for key in keys {
                if let Some(v) = m.get(key) {
                    fields.push((key.clone(), v.clone()));
                } else if let Some(d) = items.field(key).0.schema.and_then(|s| s.default_value()) {
                    fields.push((key.clone(), d.clone()));
                } else {
                    return Err(format!(
                        "associative list with keys has an element that omits key field {} (and doesn't have default value)",
                        go_quote(key)
                    ));
                }
            }
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(PathElement::Key(fields))
        }
        ListKind::Set => match item {
            Value::Object(_) => Err("associative list without keys has an element that's a map type".to_string()),
            Value::Array(_) => Err("not supported: associative list with lists as elements".to_string()),
            Value::Null => Err("associative list without keys has an element that's an explicit null".to_string()),
            v => Ok(PathElement::Value(v.clone())),
        },
    }
}

/// The fields an object (typically an applied configuration) sets, as
/// `TypedValue.ToFieldSet` computes them with the object's schema.
#[cfg(test)]
pub fn fields_of(obj: &Value, schema: SchemaRef) -> FieldSet {
    let mut set = FieldSet::new();
    to_set(Ty::root(schema), obj, &mut Vec::new(), &mut set);
    set
}

/// [`fields_of`] without a schema (everything deduced).
#[cfg(test)]
pub fn fields_of_untyped(obj: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    to_set(Ty::default(), obj, &mut Vec::new(), &mut set);
    set
}

pub(crate) fn fields_of_ty(ty: Ty, obj: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    to_set(ty, obj, &mut Vec::new(), &mut set);
    set
}

fn to_set(ty: Ty, v: &Value, path: &mut Vec<PathElement>, set: &mut FieldSet) {
    match ty.kind(v) {
        Kind::Scalar | Kind::List(ListKind::Atomic) | Kind::Map { atomic: true } => set.insert(path),
        Kind::List(kind) => {
            let Value::Array(items) = v else { return };
            let item_ty = ty.items();
            for (i, item) in items.iter().enumerate() {
                let Ok(pe) = list_item_pe(&ty, &kind, i, item) else { continue };
                path.push(pe);
                to_set(item_ty, item, path, set);
                set.insert(path);
                path.pop();
            }
        }
        Kind::Map { atomic: false } => {
            let Value::Object(m) = v else { return };
            for (k, child) in m {
                let (child_ty, declared) = ty.field(k);
                path.push(PathElement::Field(k.clone()));
                to_set(child_ty, child, path, set);
                let empty_map = child.as_object().is_some_and(Map::is_empty);
                if child.is_null() || empty_map || !declared {
                    set.insert(path);
                }
                path.pop();
            }
        }
    }
}

/// smd's validation of an applied configuration: associative list items that have no path
/// element, and duplicate items. Returns `(path, message)` pairs in upstream's wording.
pub(crate) fn validate(ty: Ty, v: &Value, path: &str, errs: &mut Vec<(String, String)>) {
    match (ty.kind(v), v) {
        (Kind::List(kind), Value::Array(items)) => {
            let item_ty = ty.items();
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let pe = match list_item_pe(&ty, &kind, i, item) {
                    Ok(pe) => pe,
                    Err(e) => {
                        errs.push((path.to_string(), format!("element {i}: {e}")));
                        return;
                    }
                };
                if kind != ListKind::Atomic && !seen.insert(pe.clone()) {
                    errs.push((path.to_string(), format!("duplicate entries for key {pe}")));
                }
                validate(item_ty, item, &format!("{path}{pe}"), errs);
            }
        }
        (Kind::Map { .. }, Value::Object(m)) => {
            for (k, child) in m {
                validate(ty.field(k).0, child, &format!("{path}.{k}"), errs);
            }
        }
        _ => {}
    }
}

/// `Set.EnsureNamedFieldsAreMembers`: also owns declared struct fields that have owned
/// descendants (not map entries), so that pruning can remove a whole emptied struct.
pub(crate) fn ensure_named_fields_are_members(set: &FieldSet, ty: Ty) -> FieldSet {
    let mut out = FieldSet { members: set.members.clone(), children: BTreeMap::new() };
    for (pe, child) in &set.children {
        let child_ty = match pe {
            PathElement::Field(name) => {
                let (t, declared) = ty.field(name);
                if declared {
                    out.members.insert(pe.clone());
                }
                t
            }
            _ => ty.items(),
        };
        out.children.insert(pe.clone(), ensure_named_fields_are_members(child, child_ty));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::strategic::tests::pod_schema;
    use proptest::prelude::*;
    use serde_json::json;

    fn f(name: &str) -> PathElement {
        PathElement::Field(name.to_string())
    }

    fn k(name: &str, v: Value) -> PathElement {
        PathElement::Key(vec![(name.to_string(), v)])
    }

    #[test]
    fn fields_v1_format_matches_the_apiserver() {
        // The managedFields an `kubectl apply --server-side` of a Deployment-like object shows.
        let (root, defs) = pod_schema();
        let s = SchemaRef::new(&root, &defs);
        let applied = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "web"}, "finalizers": ["a/b"]},
            "spec": {
                "containers": [{"name": "web", "image": "nginx",
                    "ports": [{"containerPort": 80}],
                    "env": [{"name": "A", "value": "1"}]}],
                "nodeSelector": {"disk": "ssd"}
            }
        });
        let set = fields_of(&applied, s);
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:apiVersion": {},
                "f:kind": {},
                "f:metadata": {
                    "f:finalizers": {"v:\"a/b\"": {}},
                    "f:labels": {"f:app": {}},
                    "f:name": {}
                },
                "f:spec": {
                    "f:containers": {
                        "k:{\"name\":\"web\"}": {
                            ".": {},
                            "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
                            "f:image": {},
                            "f:name": {},
                            "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
                        }
                    },
                    "f:nodeSelector": {}
                }
            })
        );
        // Key order in the serialization is upstream's path-element order.
        let text = serde_json::to_string(&set.to_fields_v1()).unwrap();
        assert!(text.starts_with(r#"{"f:apiVersion":{},"f:kind":{},"f:metadata":{"f:finalizers""#), "{text}");
        assert_eq!(FieldSet::from_fields_v1(&set.to_fields_v1()).unwrap(), set);
    }

    #[test]
    fn parses_update_style_fields_v1() {
        let v = json!({"f:data": {".": {}, "f:foo": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                       "x:future": {"f:ignored": {}}});
        let set = FieldSet::from_fields_v1(&v).unwrap();
        assert!(set.has(&[f("data")]));
        assert!(set.has(&[f("data"), f("foo")]));
        assert!(set.has(&[f("metadata"), f("labels"), f("app")]));
        assert!(!set.has(&[f("metadata")]));
        let mut want = v.clone();
        want.as_object_mut().unwrap().remove("x:future");
        assert_eq!(set.to_fields_v1(), want);
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"k:{": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"z": {}})).is_err());
        assert_eq!(FieldSet::from_fields_v1(&Value::Null).unwrap(), FieldSet::new());
    }

    #[test]
    fn set_operations() {
        let a =
            FieldSet::from_paths([&[f("spec"), f("replicas")][..], &[f("spec"), f("paused")][..], &[f("data")][..]]);
        let b = FieldSet::from_paths([&[f("spec"), f("replicas")][..], &[f("spec")][..]]);
        assert_eq!(a.intersection(&b).paths(), vec![vec![f("spec"), f("replicas")]]);
        assert_eq!(a.difference(&b).paths(), vec![vec![f("data")], vec![f("spec"), f("paused")]]);
        assert_eq!(a.recursive_difference(&b).paths(), vec![vec![f("data")]]);
        assert_eq!(a.union(&b).paths().len(), 4);
        assert!(a.difference(&a).is_empty());
    }

    #[test]
    fn prints_paths_like_upstream() {
        let p = [f("spec"), f("containers"), k("name", json!("nginx")), f("image")];
        assert_eq!(path_string(&p), ".spec.containers[name=\"nginx\"].image");
        let p = [f("metadata"), f("finalizers"), PathElement::Value(json!("x"))];
        assert_eq!(path_string(&p), ".metadata.finalizers[=\"x\"]");
        let p = [
            f("ports"),
            PathElement::Key(vec![("containerPort".into(), json!(80)), ("protocol".into(), json!("TCP"))]),
        ];
        assert_eq!(path_string(&p), ".ports[containerPort=80,protocol=\"TCP\"]");
    }

    #[test]
    fn path_element_order_is_upstreams() {
        let mut v = [
            PathElement::Index(1),
            PathElement::Value(json!("b")),
            PathElement::Value(json!(2)),
            k("name", json!("a")),
            f("z"),
            f("a"),
        ];
        v.sort();
        assert_eq!(
            v.iter().map(PathElement::serialize).collect::<Vec<_>>(),
            vec!["f:a", "f:z", "k:{\"name\":\"a\"}", "v:2", "v:\"b\"", "i:1"]
        );
    }

    #[test]
    fn deduced_fields_for_unknown_schema() {
        let set = fields_of_untyped(&json!({"spec": {"a": {"b": 1}, "l": [1, 2], "e": {}}}));
        assert_eq!(set.to_fields_v1(), json!({"f:spec": {".": {}, "f:a": {".": {}, "f:b": {}}, "f:e": {}, "f:l": {}}}));
    }

    #[test]
    fn self_marker_is_written_first() {
        // Bytes as the apiserver stores them: `"."` before the children (Value equality would
        // not see the order).
        let set = fields_of_untyped(&json!({"spec": {"a": {"b": 1}, "e": {}}}));
        assert_eq!(set.to_fields_v1().to_string(), r#"{"f:spec":{".":{},"f:a":{".":{},"f:b":{}},"f:e":{}}}"#);
    }

    #[test]
    fn validation_messages() {
        let (root, defs) = pod_schema();
        let s = SchemaRef::new(&root, &defs);
        let mut errs = Vec::new();
        let applied = json!({"spec": {"containers": [{"name": "a"}, {"name": "a"}],
                                      "volumes": [{"emptyDir": {}}]},
                             "metadata": {"finalizers": ["x", {"y": 1}]}});
        validate(Ty::root(s), &applied, "", &mut errs);
        let msgs: Vec<String> = errs.iter().map(|(p, m)| format!("{p}: {m}")).collect();
        assert_eq!(
            msgs,
            vec![
                ".spec.containers: duplicate entries for key [name=\"a\"]",
                ".spec.volumes: element 0: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)",
                ".metadata.finalizers: element 1: associative list without keys has an element that's a map type",
            ]
        );
    }

    fn arb_pe() -> impl Strategy<Value = PathElement> {
        prop_oneof![
            "[a-z:.{}\"]{0,4}".prop_map(PathElement::Field),
            ("[a-z]{1,3}", "[a-z<&]{0,3}").prop_map(|(n, v)| PathElement::Key(vec![(n, Value::String(v))])),
            (-3i64..3).prop_map(|n| PathElement::Value(json!(n))),
            "[a-z]{0,3}".prop_map(|s| PathElement::Value(Value::String(s))),
        ]
    }

    fn arb_set() -> impl Strategy<Value = FieldSet> {
        prop::collection::vec(prop::collection::vec(arb_pe(), 1..4), 0..8).prop_map(|paths| {
            let mut s = FieldSet::new();
            for p in paths {
                s.insert(&p);
            }
            s
        })
    }

    proptest! {
        #[test]
        fn fields_v1_round_trips(s in arb_set()) {
            prop_assert_eq!(FieldSet::from_fields_v1(&s.to_fields_v1()).unwrap(), s);
        }

        #[test]
        fn set_algebra(a in arb_set(), b in arb_set()) {
            let u = a.union(&b);
            for p in a.paths().iter().chain(b.paths().iter()) {
                prop_assert!(u.has(p));
            }
            let d = a.difference(&b);
            for p in d.paths() {
                prop_assert!(a.has(&p) && !b.has(&p));
            }
            let i = a.intersection(&b);
            for p in i.paths() {
                prop_assert!(a.has(&p) && b.has(&p));
            }
            prop_assert_eq!(d.union(&i), a.clone());
        }

        #[test]
        fn parse_never_panics(v in "\\PC{0,12}") {
            let _ = PathElement::parse(&v);
            let _ = FieldSet::from_fields_v1(&json!({v.clone(): {}}));
        }
    }
}
