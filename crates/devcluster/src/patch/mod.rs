//! The patch machinery of the apiserver, on `serde_json::Value`s:
//!
//! - [`json_patch`], RFC 6902 JSON patch (`application/json-patch+json`) with the semantics of
//!   the library the real apiserver uses (gopkg.in/evanphx/json-patch.v4), quirks included.
//! - `merge_patch` (pure RFC 7386) and [`apply_merge_patch`] (`application/merge-patch+json`
//!   as the apiserver applies it, with its error for bodies that are not patches).
//! - [`strategic::strategic_merge_patch`], for `application/strategic-merge-patch+json`
//!   (k8s.io/apimachinery/pkg/util/strategicpatch), driven by the OpenAPI patch extensions.
//! - [`fieldset`] and [`mod@apply`], server-side apply (`application/apply-patch+yaml`) and the
//!   `metadata.managedFields` bookkeeping of every write (sigs.k8s.io/structured-merge-diff
//!   plus k8s.io/apimachinery/pkg/util/managedfields).
//!
//! Everything is pure: no I/O, no clock (callers pass `now`).

use serde_json::{Map, Value};
use std::fmt;

pub mod apply;
pub mod fieldset;
use crate::golike;
pub mod strategic;

/// The apiserver refuses JSON patches with more operations than this (413).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10000;

/// The message of every 422 the apiserver builds with `NewGenericServerResponse`: the reason
/// of the failure is *not* sent to the client (kubectl prints "The request is invalid: ...").
pub const GENERIC_UNPROCESSABLE_MESSAGE: &str = "the server rejected our request due to an error in our request";

/// Why a patch could not be applied. [`PatchError::code`], [`PatchError::reason`] and
/// [`PatchError::message`] give the `Status` the real apiserver answers with; `Display` is the
/// message. Variants whose real `Status` hides the cause keep it for logs (`PatchError::detail`).
#[derive(Debug, Clone, PartialEq)]
pub enum PatchError {
    /// 400 BadRequest: the JSON patch body does not decode as a list of operations. The message
    /// is Go's decoder error, e.g. `json: cannot unmarshal object into Go value of type
    /// jsonpatch.Patch`.
    JsonPatchDecode(String),
    /// 413 RequestEntityTooLarge: more than [`MAX_JSON_PATCH_OPERATIONS`] operations.
    JsonPatchTooManyOperations(usize),
    /// 422 Invalid with the generic message: a `test` operation did not match.
    JsonPatchTestFailed { path: String, detail: String },
    /// 422 Invalid with the generic message: an operation's path (or `from`) does not exist.
    JsonPatchMissingPath { op: String, path: String, detail: String },
    /// 422 Invalid with the generic message: any other failing operation (unknown `op`, bad
    /// array index, missing `path`/`from` member).
    JsonPatchInvalidOperation(String),
    /// 400 BadRequest `Invalid JSON Patch`: a merge patch body that is `null` or a scalar.
    MergePatchInvalid,
    /// 400 BadRequest: a strategic merge patch that is not an object, or a malformed
    /// `$retainKeys` / `$deleteFromPrimitiveList` / `$setElementOrder` directive. The message is
    /// upstream's, e.g. `invalid patch format of retainKeys`.
    StrategicBadRequest(String),
    /// 422 Invalid with the generic message: lists of lists, or content not matching
    /// `$retainKeys` (the cause is kept in the variant).
    StrategicUnprocessable(String),
    /// 500 with an empty reason and upstream's error text as message: every other strategic
    /// merge failure (unknown `$patch` value, missing merge key, mixed list element types, ...),
    /// because the real apiserver passes those errors through unconverted.
    StrategicInternal(String),
}

impl PatchError {
    /// HTTP status code of the real apiserver's answer.
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::JsonPatchDecode(_) | PatchError::MergePatchInvalid | PatchError::StrategicBadRequest(_) => 400,
            PatchError::JsonPatchTooManyOperations(_) => 413,
            PatchError::JsonPatchTestFailed { .. }
            | PatchError::JsonPatchMissingPath { .. }
            | PatchError::JsonPatchInvalidOperation(_)
            | PatchError::StrategicUnprocessable(_) => 422,
            PatchError::StrategicInternal(_) => 500,
        }
    }

    /// `Status.reason` (empty for the 500s, which upstream sends as `StatusReasonUnknown`).
    pub fn reason(&self) -> &'static str {
        match self.status_code() {
            400 => "BadRequest",
            413 => "RequestEntityTooLarge",
            422 => "Invalid",
            _ => "",
        }
    }

    /// `Status.message` exactly as the real apiserver sends it.
    pub fn message(&self) -> String {
        match self {
            PatchError::JsonPatchDecode(m) | PatchError::StrategicBadRequest(m) | PatchError::StrategicInternal(m) => {
                m.clone()
            }
            PatchError::JsonPatchTooManyOperations(n) => format!(
                "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {n}"
            ),
            PatchError::MergePatchInvalid => "Invalid JSON Patch".to_string(),
            PatchError::JsonPatchTestFailed { .. }
            | PatchError::JsonPatchMissingPath { .. }
            | PatchError::JsonPatchInvalidOperation(_)
            | PatchError::StrategicUnprocessable(_) => GENERIC_UNPROCESSABLE_MESSAGE.to_string(),
        }
    }

    /// The underlying cause, worded like the Go library's error (useful in logs; for the 422s
    /// the real server does not send it to clients).
    #[cfg(test)]
    pub fn detail(&self) -> String {
        match self {
            PatchError::JsonPatchTestFailed { detail, .. } | PatchError::JsonPatchMissingPath { detail, .. } => {
                detail.clone()
            }
            PatchError::JsonPatchInvalidOperation(d) | PatchError::StrategicUnprocessable(d) => d.clone(),
            _ => self.message(),
        }
    }
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for PatchError {}

// ---------------------------------------------------------------------------------------------
// JSON patch (RFC 6902), evanphx/json-patch v4 semantics
// ---------------------------------------------------------------------------------------------

/// Applies a JSON patch to `doc` the way the apiserver does (evanphx/json-patch v4), including
/// its departures from RFC 6902, which clients can observe:
///
/// - a `null` patch body is an empty patch; `null` operations fail as `Unexpected kind`;
/// - `replace` of a missing object member adds it; `add`/`replace` without `value` use `null`;
/// - `test` of a missing member passes when `value` is `null`; objects are compared one way
///   (every member of the document's value must be in the patch's value);
/// - negative array indices count from the end for `add` and `remove`;
/// - the root path `""` is not supported (operations on it fail).
///
/// Deliberate difference: scalars in `test` are compared as decoded values (Go compares the raw
/// bytes the client sent, so `1.0` does not equal a stored `1` there).
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops = decode_json_patch(patch)?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::JsonPatchTooManyOperations(ops.len()));
    }
    let mut doc = doc.clone();
    for op in ops {
        apply_op(&mut doc, op)?;
    }
    Ok(doc)
}

/// With `fieldValidation=Strict` or `Warn` (kubectl's default is Strict) the apiserver first
/// decodes a JSON patch into its own operation struct, which fails earlier and with another
/// message than [`json_patch`]'s decoding: 400 `error decoding patch: json: cannot unmarshal
/// object into Go value of type []handlers.jsonPatchOp`. Returns that error when it applies;
/// call it before [`json_patch`] for strict/warn requests. (Unknown members in operations are
/// strict-decoding *warnings/errors* on the result, which this helper does not report.)
pub fn json_patch_strict_decode_error(patch: &Value) -> Option<PatchError> {
    let bad = |what: String| Some(PatchError::JsonPatchDecode(format!("error decoding patch: {what}")));
    let items = match patch {
        Value::Null => return None,
        Value::Array(items) => items,
        other => {
            return bad(format!(
                "json: cannot unmarshal {} into Go value of type []handlers.jsonPatchOp",
                golike::json_type_word(other)
            ));
        }
    };
    for item in items {
        match item {
            Value::Null => {}
            Value::Object(m) => {
                for field in ["op", "path", "from"] {
                    match m.get(field) {
                        None | Some(Value::Null) | Some(Value::String(_)) => {}
                        Some(other) => {
                            return bad(format!(
                                "json: cannot unmarshal {} into Go struct field jsonPatchOp.{field} of type string",
                                golike::json_type_word(other)
                            ));
                        }
                    }
                }
            }
            other => {
                return bad(format!(
                    "json: cannot unmarshal {} into Go value of type handlers.jsonPatchOp",
                    golike::json_type_word(other)
                ));
            }
        }
    }
    None
}

/// `jsonpatch.DecodePatch`: the body must be a JSON array of objects (or `null`s).
fn decode_json_patch(patch: &Value) -> Result<Vec<Option<&Map<String, Value>>>, PatchError> {
    match patch {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::Object(m) => Ok(Some(m)),
                Value::Null => Ok(None),
                other => Err(PatchError::JsonPatchDecode(format!(
                    "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                    golike::json_type_word(other)
                ))),
            })
            .collect(),
        other => Err(PatchError::JsonPatchDecode(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
            golike::json_type_word(other)
        ))),
    }
}

fn op_string(op: Option<&Map<String, Value>>, field: &str) -> Option<String> {
    op.and_then(|m| m.get(field)).and_then(Value::as_str).map(str::to_string)
}

fn apply_op(doc: &mut Value, op: Option<&Map<String, Value>>) -> Result<(), PatchError> {
    let kind = op_string(op, "op").unwrap_or_else(|| "unknown".to_string());
    let value = || op.and_then(|m| m.get("value")).cloned().unwrap_or(Value::Null);
    let path = |what: &str| -> Result<String, PatchError> {
        op_string(op, "path").ok_or_else(|| {
            PatchError::JsonPatchInvalidOperation(format!("{what} operation failed to decode path: missing value"))
        })
    };
    let from = |what: &str| -> Result<String, PatchError> {
        op_string(op, "from").ok_or_else(|| {
            PatchError::JsonPatchInvalidOperation(format!(
                "{what} operation failed to decode from: operation, missing from field: missing value"
            ))
        })
    };
    let missing = |op: &str, path: &str, detail: String| PatchError::JsonPatchMissingPath {
        op: op.to_string(),
        path: path.to_string(),
        detail,
    };
    match kind.as_str() {
        "add" => {
            let p = path("add")?;
            let (parent, key) = find_object(doc, &p).ok_or_else(|| {
                missing("add", &p, format!("add operation does not apply: doc is missing path: \"{p}\": missing value"))
            })?;
            container_add(parent, &key, value())
                .map_err(|e| PatchError::JsonPatchInvalidOperation(format!("error in add for path: '{p}': {e}")))
        }
        "remove" => {
            let p = path("remove")?;
            let (parent, key) = find_object(doc, &p).ok_or_else(|| {
                missing(
                    "remove",
                    &p,
                    format!("remove operation does not apply: doc is missing path: \"{p}\": missing value"),
                )
            })?;
            container_remove(parent, &key)
                .map(|_| ())
                .map_err(|e| missing("remove", &p, format!("error in remove for path: '{p}': {e}")))
        }
        "replace" => {
            let p = path("replace")?;
            let (parent, key) = find_object(doc, &p).ok_or_else(|| {
                missing(
                    "replace",
                    &p,
                    format!("replace operation does not apply: doc is missing path: {p}: missing value"),
                )
            })?;
            container_get(parent, &key).map_err(|_| {
                missing(
                    "replace",
                    &p,
                    format!("replace operation does not apply: doc is missing key: {p}: missing value"),
                )
            })?;
            container_set(parent, &key, value())
                .map_err(|e| PatchError::JsonPatchInvalidOperation(format!("error in remove for path: '{p}': {e}")))
        }
        "move" => {
            let f = from("move")?;
            let (parent, key) = find_object(doc, &f).ok_or_else(|| {
                missing(
                    "move",
                    &f,
                    format!("move operation does not apply: doc is missing from path: {f}: missing value"),
                )
            })?;
            container_get(parent, &key)
                .map_err(|e| PatchError::JsonPatchInvalidOperation(format!("error in move for path: '{key}': {e}")))?;
            let val = container_remove(parent, &key)
                .map_err(|e| missing("move", &f, format!("error in move for path: '{key}': {e}")))?;
            let p = path("move")?;
            let (parent, key) = find_object(doc, &p).ok_or_else(|| {
                missing(
                    "move",
                    &p,
                    format!("move operation does not apply: doc is missing destination path: {p}: missing value"),
                )
            })?;
            container_add(parent, &key, val)
                .map_err(|e| PatchError::JsonPatchInvalidOperation(format!("error in move for path: '{p}': {e}")))
        }
        "copy" => {
            let f = from("copy")?;
            let (parent, key) = find_object(doc, &f).ok_or_else(|| {
                missing(
                    "copy",
                    &f,
                    format!("copy operation does not apply: doc is missing from path: {f}: missing value"),
                )
            })?;
            let val = container_get(parent, &key)
                .map_err(|e| PatchError::JsonPatchInvalidOperation(format!("error in copy for from: '{f}': {e}")))?
                .cloned()
                .unwrap_or(Value::Null);
            let p = path("copy")?;
            let (parent, key) = find_object(doc, &p).ok_or_else(|| {
                missing(
                    "copy",
                    &p,
                    format!("copy operation does not apply: doc is missing destination path: {p}: missing value"),
                )
            })?;
            container_add(parent, &key, val).map_err(|e| {
                PatchError::JsonPatchInvalidOperation(format!("error while adding value during copy: {e}"))
            })
        }
        "test" => {
            let p = path("test")?;
            let failed = || PatchError::JsonPatchTestFailed {
                path: p.clone(),
                detail: format!("testing value {p} failed: test failed"),
            };
            let (parent, key) = find_object(doc, &p).ok_or_else(|| {
                missing("test", &p, format!("test operation does not apply: is missing path: {p}: missing value"))
            })?;
            let current = container_get(parent, &key)
                .map_err(|e| PatchError::JsonPatchInvalidOperation(format!("error in test for path: '{p}': {e}")))?;
            let expected = op.and_then(|m| m.get("value"));
            match (current.filter(|v| !v.is_null()), expected) {
                (None, Some(Value::Null)) => Ok(()),
                (None, _) | (Some(_), None) => Err(failed()),
                (Some(cur), Some(exp)) => {
                    if evanphx_equal(cur, exp) {
                        Ok(())
                    } else {
                        Err(failed())
                    }
                }
            }
        }
        other => Err(PatchError::JsonPatchInvalidOperation(format!("Unexpected kind: {other}"))),
    }
}

/// RFC 6901 unescaping of one reference token.
fn decode_patch_key(s: &str) -> String {
    s.replace("~1", "/").replace("~0", "~")
}

/// evanphx `findObject`: the container holding the last token of `path`, and that token.
fn find_object<'a>(doc: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let split: Vec<&str> = path.split('/').collect();
    if split.len() < 2 {
        return None;
    }
    let (last, parts) = split.split_last()?;
    let mut cur = doc;
    for part in parts.iter().skip(1) {
        let key = decode_patch_key(part);
        let next = match cur {
            Value::Object(m) => m.get_mut(&key)?,
            Value::Array(a) => {
                let idx = go_atoi(&key)?;
                let idx = usize::try_from(idx).ok()?;
                a.get_mut(idx)?
            }
            _ => return None,
        };
        if !matches!(next, Value::Object(_) | Value::Array(_)) {
            return None;
        }
        cur = next;
    }
    if !matches!(cur, Value::Object(_) | Value::Array(_)) {
        return None;
    }
    Some((cur, decode_patch_key(last)))
}

/// Go's `strconv.Atoi`: optional sign, decimal digits, no spaces.
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok()
}

const INVALID_INDEX: &str = "invalid index referenced";

fn container_get<'a>(c: &'a Value, key: &str) -> Result<Option<&'a Value>, String> {
    match c {
        Value::Object(m) => Ok(m.get(key)),
        Value::Array(a) => {
            let idx = go_atoi(key).ok_or_else(|| format!("strconv.Atoi: parsing {key:?}: invalid syntax"))?;
            let idx =
                usize::try_from(idx).map_err(|_| format!("Unable to access invalid index: {idx}: {INVALID_INDEX}"))?;
            a.get(idx).map(Some).ok_or_else(|| format!("Unable to access invalid index: {idx}: {INVALID_INDEX}"))
        }
        _ => Err("unknown object type".to_string()),
    }
}

fn container_set(c: &mut Value, key: &str, val: Value) -> Result<(), String> {
    match c {
        Value::Object(m) => {
            m.insert(key.to_string(), val);
            Ok(())
        }
        Value::Array(a) => {
            let idx = go_atoi(key).ok_or_else(|| format!("strconv.Atoi: parsing {key:?}: invalid syntax"))?;
            let slot = usize::try_from(idx).ok().and_then(|i| a.get_mut(i));
            match slot {
                Some(slot) => {
                    *slot = val;
                    Ok(())
                }
                None => Err(format!("Unable to access invalid index: {idx}: {INVALID_INDEX}")),
            }
        }
        _ => Err("unknown object type".to_string()),
    }
}

fn container_add(c: &mut Value, key: &str, val: Value) -> Result<(), String> {
    match c {
        Value::Object(m) => {
            m.insert(key.to_string(), val);
            Ok(())
        }
        Value::Array(a) => {
            if key == "-" {
                a.push(val);
                return Ok(());
            }
            let idx = go_atoi(key).ok_or_else(|| {
                format!("value was not a proper array index: '{key}': strconv.Atoi: parsing {key:?}: invalid syntax")
            })?;
            let size = a.len() as i64 + 1;
            if idx >= size || idx < -size {
                return Err(format!("Unable to access invalid index: {idx}: {INVALID_INDEX}"));
            }
            let idx = if idx < 0 { idx + size } else { idx };
            let idx = usize::try_from(idx).map_err(|_| INVALID_INDEX.to_string())?;
            a.insert(idx.min(a.len()), val);
            Ok(())
        }
        _ => Err("unknown object type".to_string()),
    }
}

fn container_remove(c: &mut Value, key: &str) -> Result<Value, String> {
    match c {
        Value::Object(m) => {
            m.shift_remove(key).ok_or_else(|| format!("Unable to remove nonexistent key: {key}: missing value"))
        }
        Value::Array(a) => {
            let idx = go_atoi(key).ok_or_else(|| format!("strconv.Atoi: parsing {key:?}: invalid syntax"))?;
            let len = a.len() as i64;
            if idx >= len || idx < -len {
                return Err(format!("Unable to access invalid index: {idx}: {INVALID_INDEX}"));
            }
            let idx = if idx < 0 { idx + len } else { idx };
            let idx = usize::try_from(idx).map_err(|_| INVALID_INDEX.to_string())?;
            if idx < a.len() { Ok(a.remove(idx)) } else { Err(INVALID_INDEX.to_string()) }
        }
        _ => Err("unknown object type".to_string()),
    }
}

/// evanphx `lazyNode.equal(doc value, patch value)`.
fn evanphx_equal(cur: &Value, exp: &Value) -> bool {
    match (cur, exp) {
        (Value::Object(a), Value::Object(b)) => a.iter().all(|(k, v)| match b.get(k) {
            None => false,
            Some(ov) => (v.is_null() && ov.is_null()) || (!v.is_null() && !ov.is_null() && evanphx_equal(v, ov)),
        }),
        (Value::Object(_), _) => false,
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| evanphx_equal(x, y)),
        (Value::Array(_), _) => false,
        (a, b) => golike::go_json(a) == golike::go_json(b),
    }
}

// ---------------------------------------------------------------------------------------------
// JSON merge patch (RFC 7386)
// ---------------------------------------------------------------------------------------------

/// RFC 7386 JSON merge patch, exactly as specified: objects merge recursively, `null` deletes
/// a member, anything else replaces the target.
#[cfg(test)]
pub fn merge_patch(doc: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut target = match doc {
                Value::Object(m) => m.clone(),
                _ => Map::new(),
            };
            for (k, v) in p {
                if v.is_null() {
                    target.shift_remove(k);
                } else {
                    let merged = merge_patch(target.get(k).unwrap_or(&Value::Null), v);
                    target.insert(k.clone(), merged);
                }
            }
            Value::Object(target)
        }
        other => other.clone(),
    }
}

/// `application/merge-patch+json` as the apiserver applies it (evanphx/json-patch v4
/// `MergePatch`): a `null` or scalar body is 400 `Invalid JSON Patch`; an array body becomes
/// the result (the apiserver then fails to decode it, which is the caller's 422); a value that
/// lands where there was nothing (or where the target was not an object) has its `null`
/// members removed recursively, unlike pure RFC 7386 (`merge_patch`).
pub fn apply_merge_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    match patch {
        Value::Object(p) => match doc {
            Value::Object(d) => {
                let mut d = d.clone();
                merge_docs(&mut d, p);
                Ok(Value::Object(d))
            }
            _ => {
                let mut out = patch.clone();
                prune_nulls(&mut out);
                Ok(out)
            }
        },
        Value::Array(a) => {
            let mut out = a.clone();
            for item in out.iter_mut().filter(|v| !v.is_null()) {
                prune_nulls(item);
            }
            Ok(Value::Array(out))
        }
        _ => Err(PatchError::MergePatchInvalid),
    }
}

fn merge_docs(doc: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (k, v) in patch {
        if v.is_null() {
            doc.shift_remove(k);
            continue;
        }
        match doc.get_mut(k) {
            Some(cur) if !cur.is_null() => match (cur, v) {
                (Value::Object(c), Value::Object(pv)) => merge_docs(c, pv),
                (cur @ Value::Object(_), _) => *cur = v.clone(),
                (cur, _) => {
                    let mut nv = v.clone();
                    prune_nulls(&mut nv);
                    *cur = nv;
                }
            },
            _ => {
                let mut nv = v.clone();
                prune_nulls(&mut nv);
                doc.insert(k.clone(), nv);
            }
        }
    }
}

/// evanphx `pruneNulls`: drops `null` members of objects, recursively (also inside arrays,
/// whose own `null` elements are kept).
fn prune_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, val| !val.is_null());
            for val in m.values_mut() {
                prune_nulls(val);
            }
        }
        Value::Array(a) => {
            for val in a.iter_mut().filter(|v| !v.is_null()) {
                prune_nulls(val);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn status(e: &PatchError) -> (u16, &'static str, String) {
        (e.status_code(), e.reason(), e.message())
    }

    #[test]
    fn json_patch_applies_operations() {
        let doc = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"ports": [1, 2]}});
        let patch = json!([
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "remove", "path": "/metadata/labels/a"},
            {"op": "add", "path": "/spec/ports/-", "value": 3},
            {"op": "add", "path": "/spec/ports/0", "value": 0},
            {"op": "replace", "path": "/spec/ports/1", "value": 10},
            {"op": "copy", "from": "/metadata/labels", "path": "/spec/copied"},
            {"op": "move", "from": "/spec/copied/b", "path": "/spec/moved"},
            {"op": "test", "path": "/spec/moved", "value": "2"},
            {"op": "add", "path": "/metadata/labels/x~1y", "value": "slash"}
        ]);
        assert_eq!(
            json_patch(&doc, &patch).unwrap(),
            json!({"metadata": {"labels": {"b": "2", "x/y": "slash"}},
                   "spec": {"ports": [0, 10, 2, 3], "copied": {}, "moved": "2"}})
        );
    }

    #[test]
    fn json_patch_failures_are_generic_422s() {
        let doc = json!({"metadata": {"name": "x"}});
        let e = json_patch(&doc, &json!([{"op": "test", "path": "/metadata/name", "value": "y"}])).unwrap_err();
        assert!(matches!(e, PatchError::JsonPatchTestFailed { .. }));
        assert_eq!(status(&e), (422, "Invalid", GENERIC_UNPROCESSABLE_MESSAGE.to_string()));
        assert_eq!(e.detail(), "testing value /metadata/name failed: test failed");

        let e = json_patch(&doc, &json!([{"op": "add", "path": "/spec/replicas", "value": 1}])).unwrap_err();
        assert!(matches!(e, PatchError::JsonPatchMissingPath { .. }));
        assert_eq!(e.status_code(), 422);
        assert_eq!(e.detail(), "add operation does not apply: doc is missing path: \"/spec/replicas\": missing value");

        let e = json_patch(&doc, &json!([{"op": "remove", "path": "/metadata/labels"}])).unwrap_err();
        assert_eq!(e.status_code(), 422);
        let e = json_patch(&doc, &json!([{"op": "frobnicate", "path": "/a"}])).unwrap_err();
        assert_eq!(e.detail(), "Unexpected kind: frobnicate");
        let e = json_patch(&doc, &json!([null])).unwrap_err();
        assert_eq!(e.detail(), "Unexpected kind: unknown");
    }

    #[test]
    fn json_patch_decode_errors_are_400s() {
        let e = json_patch(&json!({}), &json!({"op": "add"})).unwrap_err();
        assert_eq!(
            status(&e),
            (400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch".to_string())
        );
        let e = json_patch(&json!({}), &json!([1])).unwrap_err();
        assert_eq!(e.message(), "json: cannot unmarshal number into Go value of type jsonpatch.Operation");
        assert_eq!(json_patch(&json!({"a": 1}), &Value::Null).unwrap(), json!({"a": 1}));
        assert_eq!(
            json_patch_strict_decode_error(&json!({})).unwrap().message(),
            "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp"
        );
        assert!(json_patch_strict_decode_error(&json!([{"op": "add", "path": "/a"}])).is_none());
    }

    #[test]
    fn json_patch_too_many_operations_is_413() {
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS).map(|_| json!({"op": "test", "path": "/a"})).collect();
        let e = json_patch(&json!({}), &Value::Array(ops)).unwrap_err();
        assert_eq!(
            status(&e),
            (
                413,
                "RequestEntityTooLarge",
                "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
                    .to_string()
            )
        );
    }

    #[test]
    fn json_patch_keeps_evanphx_quirks() {
        // replace of a missing member adds it
        assert_eq!(
            json_patch(&json!({"a": {}}), &json!([{"op": "replace", "path": "/a/b", "value": 1}])).unwrap(),
            json!({"a": {"b": 1}})
        );
        // negative indices
        assert_eq!(
            json_patch(&json!({"l": [1, 2, 3]}), &json!([{"op": "remove", "path": "/l/-1"}])).unwrap(),
            json!({"l": [1, 2]})
        );
        // test of a missing member against null passes
        assert!(json_patch(&json!({}), &json!([{"op": "test", "path": "/nope", "value": null}])).is_ok());
        // add without value adds null
        assert_eq!(json_patch(&json!({}), &json!([{"op": "add", "path": "/a"}])).unwrap(), json!({"a": null}));
        // root path unsupported
        assert!(json_patch(&json!({}), &json!([{"op": "add", "path": "", "value": {}}])).is_err());
    }

    #[test]
    fn merge_patch_follows_rfc7386_examples() {
        // RFC 7386 appendix A
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "b"}), json!({"b": "c"}), json!({"a": "b", "b": "c"})),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (json!({"a": "b", "b": "c"}), json!({"a": null}), json!({"b": "c"})),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (json!({"a": {"b": "c"}}), json!({"a": {"b": "d", "c": null}}), json!({"a": {"b": "d"}})),
            (json!({"a": [{"b": "c"}]}), json!({"a": [1]}), json!({"a": [1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (json!({"e": null}), json!({"a": 1}), json!({"e": null, "a": 1})),
            (json!([1, 2]), json!({"a": "b", "c": null}), json!({"a": "b"})),
            (json!({}), json!({"a": {"bb": {"ccc": null}}}), json!({"a": {"bb": {}}})),
        ];
        for (doc, patch, want) in cases {
            assert_eq!(merge_patch(&doc, &patch), want, "{doc} + {patch}");
        }
    }

    #[test]
    fn apiserver_merge_patch_rejects_non_patches() {
        let e = apply_merge_patch(&json!({}), &Value::Null).unwrap_err();
        assert_eq!(status(&e), (400, "BadRequest", "Invalid JSON Patch".to_string()));
        assert!(apply_merge_patch(&json!({}), &json!(3)).is_err());
        // evanphx prunes nulls inside newly added values
        assert_eq!(
            apply_merge_patch(&json!({}), &json!({"a": [{"b": null, "c": 1}]})).unwrap(),
            json!({"a": [{"c": 1}]})
        );
        assert_eq!(
            apply_merge_patch(
                &json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
                &json!({"metadata": {"labels": {"a": null}}})
            )
            .unwrap(),
            json!({"metadata": {"labels": {"b": "2"}}})
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..5).prop_map(|n| json!(n)),
            "[a-c~/0-1]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_op() -> impl Strategy<Value = Value> {
        let path = prop::collection::vec(prop_oneof!["[a-c]", "-?[0-3]", Just("-".to_string())], 0..4)
            .prop_map(|parts| parts.iter().map(|p| format!("/{p}")).collect::<String>());
        (
            prop_oneof![
                Just("add"),
                Just("remove"),
                Just("replace"),
                Just("move"),
                Just("copy"),
                Just("test"),
                Just("x")
            ],
            path.clone(),
            path,
            arb_json(),
        )
            .prop_map(|(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}))
    }

    /// A merge patch that turns `a` into `b` (nulls for removed members).
    fn merge_diff(a: &Value, b: &Value) -> Value {
        match (a, b) {
            (Value::Object(am), Value::Object(bm)) => {
                let mut out = Map::new();
                for k in am.keys() {
                    if !bm.contains_key(k) {
                        out.insert(k.clone(), Value::Null);
                    }
                }
                for (k, bv) in bm {
                    match am.get(k) {
                        Some(av) if av == bv => {}
                        Some(av) => {
                            out.insert(k.clone(), merge_diff(av, bv));
                        }
                        None => {
                            out.insert(k.clone(), bv.clone());
                        }
                    }
                }
                Value::Object(out)
            }
            (_, b) => b.clone(),
        }
    }

    fn has_null_member(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.values().any(|x| x.is_null() || has_null_member(x)),
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn json_patch_never_panics(doc in arb_json(), ops in prop::collection::vec(arb_op(), 0..6)) {
            let _ = json_patch(&doc, &Value::Array(ops));
        }

        #[test]
        fn json_patch_never_panics_on_any_body(doc in arb_json(), patch in arb_json()) {
            let _ = json_patch(&doc, &patch);
            let _ = json_patch_strict_decode_error(&patch);
            let _ = apply_merge_patch(&doc, &patch);
        }

        #[test]
        fn merge_patch_of_diff_yields_target(a in arb_json(), b in arb_json()) {
            // Holds whenever the target has no null members (nulls cannot be expressed).
            prop_assume!(b.is_object() && !has_null_member(&b));
            prop_assert_eq!(merge_patch(&a, &merge_diff(&a, &b)), b);
        }

        #[test]
        fn merge_patch_is_idempotent(a in arb_json(), p in arb_json()) {
            let once = merge_patch(&a, &p);
            prop_assert_eq!(merge_patch(&once, &p), once);
        }

        #[test]
        fn empty_merge_patch_is_identity(a in arb_json()) {
            prop_assume!(a.is_object());
            prop_assert_eq!(merge_patch(&a, &json!({})), a.clone());
            prop_assert_eq!(apply_merge_patch(&a, &json!({})).unwrap(), a);
        }
    }
}
