//! Strategic merge patch, a port of k8s.io/apimachinery/pkg/util/strategicpatch's
//! `StrategicMergeMapPatch` (the server side: `MergeParallelList` and `IgnoreUnmatchedNulls`
//! on), reading patch metadata from OpenAPI the way `PatchMetaFromOpenAPIV3` does:
//! `x-kubernetes-patch-strategy` (`merge`, `replace`, `retainKeys`, `merge,retainKeys`) and
//! `x-kubernetes-patch-merge-key` on the property, element schemas through `items` and map
//! values through `additionalProperties`.
//!
//! Supported: lists merged by merge key, `merge` lists of scalars (merged as sets), the
//! `$patch: replace|delete|merge` directives in maps and list items, `$retainKeys`,
//! `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>`, `null` deleting a member,
//! and upstream's exact ordering of merged lists (new patch items go before server-only items
//! that cannot be placed relative to them; `$setElementOrder` wins when given).
//!
//! Fields without schema information (unknown fields, custom resources when the caller allows
//! it) merge like a JSON merge patch that still honours directives, which is what upstream does
//! with a schema that has no patch metadata.
//!
//! Deliberate difference: where upstream hands a value containing `null` members or `$patch`
//! keys straight to the typed decoder (a replaced list, a `$patch: replace` map, a new item of
//! a merged list), the decoder drops them; we drop them here, so they never reach storage.

use super::PatchError;
use crate::golike::{go_eq, go_s, go_type_name, go_v, go_v_lists, json_type_word, slice_stable};
use crate::schema::SchemaRef;
use serde_json::{Map, Value};

const DIRECTIVE_MARKER: &str = "$patch";
const DELETE_DIRECTIVE: &str = "delete";
const REPLACE_DIRECTIVE: &str = "replace";
const MERGE_DIRECTIVE: &str = "merge";
const RETAIN_KEYS_STRATEGY: &str = "retainKeys";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";

const ERR_BAD_PATCH_FORMAT_FOR_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_BAD_PATCH_FORMAT_FOR_SET_ELEMENT_ORDER_LIST: &str = "invalid patch format of setElementOrder list";
const ERR_NO_LIST_OF_LISTS: &str = "lists of lists are not supported";

type Obj = Map<String, Value>;
type R<T> = Result<T, PatchError>;

/// Applies a strategic merge patch to `original` (an object) using `schema` (the kind's root
/// schema) for patch strategies and merge keys. Errors carry the status the real apiserver
/// answers with (see [`PatchError`]).
pub fn strategic_merge_patch(original: &Value, patch: &Value, schema: SchemaRef) -> Result<Value, PatchError> {
    run(original, patch, Some(schema))
}

/// [`strategic_merge_patch`] without any schema: maps merge, lists are replaced, directives are
/// honoured (upstream's behaviour with empty patch metadata).
#[cfg(test)]
pub fn strategic_merge_patch_untyped(original: &Value, patch: &Value) -> Result<Value, PatchError> {
    run(original, patch, None)
}

fn run(original: &Value, patch: &Value, schema: Option<SchemaRef>) -> R<Value> {
    let original = match original {
        Value::Object(m) => m.clone(),
        _ => return Err(PatchError::StrategicBadRequest("invalid JSON document".to_string())),
    };
    let patch = match patch {
        Value::Object(m) => m.clone(),
        // The apiserver decodes the body into a map; `null` leaves it empty.
        Value::Null => Map::new(),
        other => {
            return Err(PatchError::StrategicBadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_type_word(other)
            )));
        }
    };
    merge_map(original, patch, schema).map(Value::Object)
}

fn internal(msg: impl Into<String>) -> PatchError {
    PatchError::StrategicInternal(msg.into())
}

/// `mergepatch.ErrBadArgType(expected, actual)`.
fn err_bad_arg_type(expected: &str, actual: &Value) -> PatchError {
    let actual = go_type_name(actual).unwrap_or("%!s(<nil>)");
    internal(format!("expected a {expected}, but received a {actual}"))
}

const MAP_TYPE: &str = "map[string]interface {}";
const SLICE_TYPE: &str = "[]interface {}";

/// `mergepatch.ErrNoMergeKey(m, k)`.
fn err_no_merge_key(m: &Obj, key: &str) -> PatchError {
    internal(format!("map: {} does not contain declared merge key: {key}", go_v(&Value::Object(m.clone()))))
}

/// `mergepatch.ErrBadPatchType(t, m)`.
fn err_bad_patch_type(t: &Value, m: &Obj) -> PatchError {
    internal(format!("unknown patch type: {} in map: {}", go_s(t), go_v(&Value::Object(m.clone()))))
}

// --------------------------------------------------------------------------------------------
// Patch metadata lookup
// --------------------------------------------------------------------------------------------

#[derive(Default)]
struct PatchMeta {
    strategies: Vec<String>,
    merge_key: String,
}

fn read_meta(raw: Option<&Value>, resolved: Option<SchemaRef>) -> PatchMeta {
    // The extensions sit on the property node, which may wrap a `$ref` in `allOf`; read the
    // unresolved node first, then the resolved one.
    let ext = |name: &str| -> Option<String> {
        raw.and_then(|r| r.get(name))
            .or_else(|| resolved.and_then(|s| s.get(name)))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    PatchMeta {
        strategies: ext("x-kubernetes-patch-strategy")
            .map(|s| s.split(',').map(str::to_string).collect())
            .unwrap_or_default(),
        merge_key: ext("x-kubernetes-patch-merge-key").unwrap_or_default(),
    }
}

/// `LookupPatchMetadataForStruct`: the schema of member `key` and its patch metadata.
fn lookup_struct<'a>(schema: Option<SchemaRef<'a>>, key: &str) -> (Option<SchemaRef<'a>>, PatchMeta) {
    let Some(s) = schema else { return (None, PatchMeta::default()) };
    if let Some(p) = s.property(key) {
        let raw = s.properties_map().and_then(|m| m.get(key));
        return (Some(p), read_meta(raw, Some(p)));
    }
    if let Some(ap) = s.additional_properties() {
        return (Some(ap), PatchMeta::default());
    }
    (None, PatchMeta::default())
}

/// `LookupPatchMetadataForSlice`: like [`lookup_struct`], descending into `items`.
fn lookup_slice<'a>(schema: Option<SchemaRef<'a>>, key: &str) -> (Option<SchemaRef<'a>>, PatchMeta) {
    let (sub, meta) = lookup_struct(schema, key);
    let sub = sub.map(|s| s.items().unwrap_or(s));
    (sub, meta)
}

/// `extractRetainKeysPatchStrategy`: (has retainKeys, the other strategy).
fn extract_retain_keys_patch_strategy(strategies: &[String]) -> R<(bool, String)> {
    let unexpected = || internal(format!("unexpected patch strategy: [{}]", strategies.join(" ")));
    match strategies {
        [] => Ok((false, String::new())),
        [one] if one == RETAIN_KEYS_STRATEGY => Ok((true, String::new())),
        [one] => Ok((false, one.clone())),
        [a, b] if a == RETAIN_KEYS_STRATEGY => Ok((true, b.clone())),
        [a, b] if b == RETAIN_KEYS_STRATEGY => Ok((true, a.clone())),
        _ => Err(unexpected()),
    }
}

// --------------------------------------------------------------------------------------------
// Helpers on decoded values
// --------------------------------------------------------------------------------------------

/// `removeDirectives`: drops maps carrying `$patch` (and the members/elements holding them).
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE_MARKER) {
                return None;
            }
            let mut out = Map::new();
            for (k, val) in m {
                if let Some(val) = remove_directives(val) {
                    out.insert(k, val);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(remove_directives).collect())),
        other => Some(other),
    }
}

/// `discardNullValuesFromPatch`: drops `null` members of maps, recursively.
fn discard_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, val| !val.is_null());
            for val in m.values_mut() {
                discard_nulls(val);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

/// What a value that goes to the typed decoder as-is looks like after decoding (see the module
/// documentation): no `null` members, no `$patch` maps, no leftover directive keys.
fn clean(mut v: Value) -> Option<Value> {
    discard_nulls(&mut v);
    drop_directive_keys(&mut v);
    remove_directives(v)
}

fn drop_directive_keys(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| {
                k != RETAIN_KEYS_DIRECTIVE
                    && !k.starts_with(SET_ELEMENT_ORDER_PREFIX)
                    && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
            });
            m.values_mut().for_each(drop_directive_keys);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_directive_keys),
        _ => {}
    }
}

fn clean_list(v: Vec<Value>) -> Vec<Value> {
    match clean(Value::Array(v)) {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    }
}

/// The reflect kind class of a decoded value, for `reflect.TypeOf` comparisons.
fn same_go_type(a: &Value, b: &Value) -> bool {
    go_type_name(a) == go_type_name(b)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ElemKind {
    Map,
    Scalar,
}

/// `sliceElementType`: the common element type of the given lists.
fn slice_element_type(lists: &[&[Value]]) -> R<ElemKind> {
    let mut prev: Option<&Value> = None;
    for list in lists {
        for v in list.iter() {
            match prev {
                None => {
                    match v {
                        Value::Array(_) => {
                            return Err(PatchError::StrategicUnprocessable(ERR_NO_LIST_OF_LISTS.to_string()));
                        }
                        // Go calls a method on the nil type here and panics.
                        Value::Null => {
                            return Err(internal("runtime error: invalid memory address or nil pointer dereference"));
                        }
                        _ => {}
                    }
                    prev = Some(v);
                }
                Some(p) => {
                    if !same_go_type(p, v) {
                        return Err(internal(format!("list element types are not identical: {}", go_v_lists(lists))));
                    }
                }
            }
        }
    }
    match prev {
        None => Err(internal("no elements in any of the given slices")),
        Some(Value::Object(_)) => Ok(ElemKind::Map),
        Some(_) => Ok(ElemKind::Scalar),
    }
}

/// `extractKey`: the field a `$deleteFromPrimitiveList/<f>` or `$setElementOrder/<f>` key names.
fn extract_key(s: &str, prefix: &str) -> R<String> {
    match s.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest.to_string()),
        _ => Err(PatchError::StrategicBadRequest(
            if prefix == DELETE_FROM_PRIMITIVE_LIST_PREFIX {
                ERR_BAD_PATCH_FORMAT_FOR_PRIMITIVE_LIST
            } else {
                ERR_BAD_PATCH_FORMAT_FOR_SET_ELEMENT_ORDER_LIST
            }
            .to_string(),
        )),
    }
}

// --------------------------------------------------------------------------------------------
// Maps
// --------------------------------------------------------------------------------------------

fn merge_map(mut original: Obj, mut patch: Obj, schema: Option<SchemaRef>) -> R<Obj> {
    if let Some(directive) = patch.get(DIRECTIVE_MARKER).cloned() {
        return handle_directive_in_merge_map(&directive, patch);
    }
    apply_retain_keys_directive(&mut original, &mut patch)?;
    merge_patch_into_original(&mut original, &mut patch, schema)?;

    for (key, patch_v) in patch {
        let (is_delete_list, k) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
            (true, extract_key(&key, DELETE_FROM_PRIMITIVE_LIST_PREFIX)?)
        } else {
            (false, key)
        };
        if patch_v.is_null() {
            original.shift_remove(&k);
            continue;
        }
        let Some(orig_v) = original.get(&k) else {
            if !is_delete_list && let Some(v) = clean(patch_v) {
                original.insert(k, v);
            }
            continue;
        };
        if !same_go_type(orig_v, &patch_v) {
            if !is_delete_list {
                match clean(patch_v) {
                    Some(v) => {
                        original.insert(k, v);
                    }
                    None => {
                        original.shift_remove(&k);
                    }
                }
            }
            continue;
        }
        let taken = original.get_mut(&k).map(Value::take);
        let merged = match (taken, patch_v) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                let (sub, meta) = lookup_struct(schema, &k);
                let (_, strategy) = extract_retain_keys_patch_strategy(&meta.strategies)?;
                if strategy == REPLACE_DIRECTIVE {
                    clean(Value::Object(p))
                } else {
                    Some(Value::Object(merge_map(o, p, sub)?))
                }
            }
            (Some(Value::Array(o)), Value::Array(p)) => {
                let (sub, meta) = lookup_slice(schema, &k);
                let (_, strategy) = extract_retain_keys_patch_strategy(&meta.strategies)?;
                Some(Value::Array(merge_slice_handler(o, p, sub, &strategy, &meta.merge_key, is_delete_list)?))
            }
            (_, p) => remove_directives(p),
        };
        match (merged, original.get_mut(&k)) {
            (Some(v), Some(slot)) => *slot = v,
            (Some(v), None) => {
                original.insert(k, v);
            }
            (None, _) => {
                original.shift_remove(&k);
            }
        }
    }
    Ok(original)
}

/// `handleDirectiveInMergeMap`: `$patch` in a map.
fn handle_directive_in_merge_map(directive: &Value, mut patch: Obj) -> R<Obj> {
    match directive.as_str() {
        Some(REPLACE_DIRECTIVE) => {
            patch.shift_remove(DIRECTIVE_MARKER);
            match clean(Value::Object(patch)) {
                Some(Value::Object(m)) => Ok(m),
                _ => Ok(Map::new()),
            }
        }
        Some(DELETE_DIRECTIVE) => Ok(Map::new()),
        _ => Err(err_bad_patch_type(directive, &patch)),
    }
}

/// `applyRetainKeysDirective`.
fn apply_retain_keys_directive(original: &mut Obj, patch: &mut Obj) -> R<()> {
    let Some(retain) = patch.shift_remove(RETAIN_KEYS_DIRECTIVE) else { return Ok(()) };
    let bad = || PatchError::StrategicBadRequest(ERR_BAD_PATCH_FORMAT_FOR_RETAIN_KEYS.to_string());
    let Value::Array(list) = retain else { return Err(bad()) };
    let retained = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null() || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) || k.starts_with(SET_ELEMENT_ORDER_PREFIX) {
            continue;
        }
        if !retained(k) {
            return Err(bad());
        }
    }
    original.retain(|k, _| retained(k));
    Ok(())
}

/// `mergePatchIntoOriginal`: processes `$setElementOrder/<field>` together with `<field>`.
fn merge_patch_into_original(original: &mut Obj, patch: &mut Obj, schema: Option<SchemaRef>) -> R<()> {
    let keys: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER_PREFIX)).cloned().collect();
    for key in keys {
        let Some(set_order_v) = patch.shift_remove(&key) else { continue };
        let Value::Array(set_order) = set_order_v else {
            return Err(err_bad_arg_type(SLICE_TYPE, &set_order_v));
        };
        let original_key = extract_key(&key, SET_ELEMENT_ORDER_PREFIX)?;
        let original_list = match original.get(&original_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => return Err(err_bad_arg_type(SLICE_TYPE, other)),
        };
        let patch_list = match patch.get(&original_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => return Err(err_bad_arg_type(SLICE_TYPE, other)),
        };
        let (sub, meta) = lookup_slice(schema, &original_key);
        let (_, strategy) = extract_retain_keys_patch_strategy(&meta.strategies)?;
        let merge_key = meta.merge_key.as_str();
        validate_patch_with_set_order_list(patch_list.as_deref().unwrap_or(&[]), &set_order, merge_key)?;

        let original_field_value = original_list.clone().unwrap_or_default();
        let patch_field_value = patch_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => clean_list(p),
            (Some(o), Some(p)) => merge_slice_handler(o, p, sub, &strategy, merge_key, false)?,
            (None, None) => continue,
        };
        let (patch_items, server_only) = if merge_key.is_empty() {
            partition_primitives_by_present_in_list(merged, &set_order)
        } else {
            partition_maps_by_present_in_list(merged, &set_order, merge_key)?
        };
        let kind = slice_element_type(&[&original_field_value, &patch_field_value])?;
        let both =
            normalize_element_order(patch_items, server_only, &set_order, &original_field_value, merge_key, kind)?;
        original.insert(original_key.clone(), Value::Array(both));
        patch.shift_remove(&original_key);
    }
    Ok(())
}

/// `validatePatchWithSetOrderList`: patch items must appear in `$setElementOrder`, in order.
fn validate_patch_with_set_order_list(patch_list: &[Value], set_order: &[Value], merge_key: &str) -> R<()> {
    if set_order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<Value> =
        if merge_key.is_empty() { patch_list.to_vec() } else { extract_to_delete_items(patch_list.to_vec())?.0 };
    let (mut pi, mut si) = (0usize, 0usize);
    while let (Some(item), Some(order_item)) = (non_delete.get(pi), set_order.get(si)) {
        if contains_directive_marker(item) {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(item, order_item, merge_key)? {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= set_order.len() {
        return Err(internal(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER_PREFIX} list:\n{}\n",
            go_v(&Value::Array(patch_list.to_vec())),
            go_v(&Value::Array(set_order.to_vec()))
        )));
    }
    Ok(())
}

fn contains_directive_marker(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
}

/// `mergeKeyValueEqual`.
fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> R<bool> {
    if merge_key.is_empty() {
        return Ok(go_eq(left, right));
    }
    let l = left.as_object().ok_or_else(|| err_bad_arg_type(MAP_TYPE, left))?;
    let r = right.as_object().ok_or_else(|| err_bad_arg_type(MAP_TYPE, right))?;
    let lk = l.get(merge_key).ok_or_else(|| err_no_merge_key(l, merge_key))?;
    let rk = r.get(merge_key).ok_or_else(|| err_no_merge_key(r, merge_key))?;
    Ok(go_eq(lk, rk))
}

/// `extractToDeleteItems`: (items to keep, items carrying `$patch: delete`).
fn extract_to_delete_items(list: Vec<Value>) -> R<(Vec<Value>, Vec<Value>)> {
    let mut non_delete = Vec::new();
    let mut to_delete = Vec::new();
    for v in list {
        let Some(m) = v.as_object() else { return Err(err_bad_arg_type(MAP_TYPE, &v)) };
        if m.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some(DELETE_DIRECTIVE) {
            to_delete.push(v);
        } else {
            non_delete.push(v);
        }
    }
    Ok((non_delete, to_delete))
}

// --------------------------------------------------------------------------------------------
// Lists
// --------------------------------------------------------------------------------------------

/// `mergeSliceHandler`.
fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: Option<SchemaRef>,
    strategy: &str,
    merge_key: &str,
    is_delete_list: bool,
) -> R<Vec<Value>> {
    if strategy == MERGE_DIRECTIVE || is_delete_list {
        merge_slice(original, patch, schema, merge_key, is_delete_list)
    } else {
        Ok(clean_list(patch))
    }
}

/// `mergeSlice`.
fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: Option<SchemaRef>,
    merge_key: &str,
    is_delete_list: bool,
) -> R<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = slice_element_type(&[&original, &patch])?;
    let (original, patch, merged) = if kind == ElemKind::Scalar {
        if is_delete_list {
            return Ok(delete_from_slice(original, &patch));
        }
        let mut both = original.clone();
        both.extend(patch.iter().cloned());
        (original, patch, deduplicate_scalars(both))
    } else {
        if merge_key.is_empty() {
            return Err(internal("cannot merge lists without merge key for struct"));
        }
        let (original, patch) = merge_slice_with_special_elements(original, patch, merge_key)?;
        let merged = merge_slice_without_special_elements(original.clone(), &patch, merge_key, schema)?;
        (original, patch, merged)
    };
    let (patch_items, server_only) = if merge_key.is_empty() {
        partition_primitives_by_present_in_list(merged, &patch)
    } else {
        partition_maps_by_present_in_list(merged, &patch, merge_key)?
    };
    normalize_element_order(patch_items, server_only, &patch, &original, merge_key, kind)
}

/// `mergeSliceWithSpecialElements`: applies `$patch` items; returns (original, plain patch items).
fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> R<(Vec<Value>, Vec<Value>)> {
    let mut plain = Vec::new();
    let mut replace = false;
    for v in patch {
        let Some(m) = v.as_object() else { return Err(err_bad_arg_type(MAP_TYPE, &v)) };
        match m.get(DIRECTIVE_MARKER) {
            None => plain.push(v),
            Some(directive) => match directive.as_str() {
                Some(DELETE_DIRECTIVE) => match m.get(merge_key) {
                    Some(key_value) => original = delete_matching_entries(original, merge_key, key_value)?,
                    None => return Err(err_no_merge_key(m, merge_key)),
                },
                Some(REPLACE_DIRECTIVE) => replace = true,
                Some(MERGE_DIRECTIVE) => {
                    return Err(internal("merging lists cannot yet be specified in the patch"));
                }
                _ => return Err(err_bad_patch_type(directive, m)),
            },
        }
    }
    if replace { Ok((plain, Vec::new())) } else { Ok((original, plain)) }
}

fn delete_matching_entries(mut original: Vec<Value>, merge_key: &str, value: &Value) -> R<Vec<Value>> {
    while let Some(i) = find_map_in_slice(&original, merge_key, value)? {
        original.remove(i);
    }
    Ok(original)
}

/// `findMapInSliceBasedOnKeyValue`: index of the first map whose `key` equals `value`.
fn find_map_in_slice(list: &[Value], key: &str, value: &Value) -> R<Option<usize>> {
    for (i, v) in list.iter().enumerate() {
        let Some(m) = v.as_object() else { return Err(internal(format!("value for key {i} is not a map"))) };
        if m.get(key).is_some_and(|x| go_eq(x, value)) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// `mergeSliceWithoutSpecialElements`: merges items with equal merge keys, appends new ones.
fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    schema: Option<SchemaRef>,
) -> R<Vec<Value>> {
    for v in patch {
        let Some(m) = v.as_object() else { return Err(err_bad_arg_type(MAP_TYPE, v)) };
        let key_value = m.get(merge_key).ok_or_else(|| err_no_merge_key(m, merge_key))?;
        match find_map_in_slice(&original, merge_key, key_value)? {
            Some(i) => {
                let orig = match original.get(i) {
                    Some(Value::Object(o)) => o.clone(),
                    _ => Map::new(),
                };
                let merged = merge_map(orig, m.clone(), schema)?;
                if let Some(slot) = original.get_mut(i) {
                    *slot = Value::Object(merged);
                }
            }
            None => {
                if let Some(item) = clean(v.clone()) {
                    original.push(item);
                }
            }
        }
    }
    Ok(original)
}

/// `deleteFromSlice`: removes every element equal to one in `to_delete`.
fn delete_from_slice(current: Vec<Value>, to_delete: &[Value]) -> Vec<Value> {
    current.into_iter().filter(|v| !to_delete.iter().any(|d| go_eq(d, v))).collect()
}

/// `deduplicateScalars`, with its order-changing "clever algorithm".
fn deduplicate_scalars(mut s: Vec<Value>) -> Vec<Value> {
    if s.is_empty() {
        return s;
    }
    let mut length = s.len() - 1;
    let mut i = 0;
    while i < length {
        let mut j = i + 1;
        while j <= length {
            if s.get(i).zip(s.get(j)).is_some_and(|(a, b)| go_eq(a, b)) {
                s.swap(j, length);
                s.truncate(length);
                length -= 1;
                continue;
            }
            j += 1;
        }
        i += 1;
    }
    s
}

fn partition_primitives_by_present_in_list(original: Vec<Value>, partition_by: &[Value]) -> (Vec<Value>, Vec<Value>) {
    original.into_iter().partition(|v| partition_by.iter().any(|p| go_eq(p, v)))
}

fn partition_maps_by_present_in_list(
    original: Vec<Value>,
    partition_by: &[Value],
    merge_key: &str,
) -> R<(Vec<Value>, Vec<Value>)> {
    let mut patch = Vec::new();
    let mut server_only = Vec::new();
    for v in original {
        let Some(m) = v.as_object() else { return Err(err_bad_arg_type(MAP_TYPE, &v)) };
        let key_value = m.get(merge_key).ok_or_else(|| err_no_merge_key(m, merge_key))?;
        if find_map_in_slice(partition_by, merge_key, key_value)?.is_some() {
            patch.push(v);
        } else {
            server_only.push(v);
        }
    }
    Ok((patch, server_only))
}

// --------------------------------------------------------------------------------------------
// Ordering
// --------------------------------------------------------------------------------------------

/// `index`: position of `item` in `list`, comparing merge key values for maps.
fn index_of(list: &[Value], item: &Value, merge_key: &str, kind: ElemKind) -> Option<usize> {
    let get = |v: &'_ Value| -> Option<Value> {
        match kind {
            ElemKind::Map => v.as_object().and_then(|m| m.get(merge_key)).cloned(),
            ElemKind::Scalar => Some(v.clone()),
        }
    };
    let needle = get(item);
    list.iter().position(|v| match (&needle, get(v)) {
        (None, None) => true,
        (Some(a), Some(b)) => go_eq(a, &b),
        _ => false,
    })
}

/// `normalizeElementOrder`: sorts patch items by the patch order and server-only items by the
/// server order, then interleaves them.
fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> R<Vec<Value>> {
    let patch = normalize_slice_order(patch, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    Ok(merge_sorted_slice(server_only, patch, server_order, merge_key, kind))
}

/// `normalizeSliceOrder`: stable sort by position in `order` (`$patch: delete` items last).
fn normalize_slice_order(to_sort: Vec<Value>, order: &[Value], merge_key: &str, kind: ElemKind) -> R<Vec<Value>> {
    let (mut to_sort, to_delete) = if kind == ElemKind::Map {
        validate_merge_key_in_lists(merge_key, &[&to_sort, order])?;
        extract_to_delete_items(to_sort)?
    } else {
        (to_sort, Vec::new())
    };
    let less = |a: &Value, b: &Value| -> bool {
        if let Some(ia) = index_of(order, a, merge_key, kind)
            && let Some(ib) = index_of(order, b, merge_key, kind)
        {
            return ia < ib;
        }
        true
    };
    slice_stable(&mut to_sort, &less);
    to_sort.extend(to_delete);
    Ok(to_sort)
}

fn validate_merge_key_in_lists(merge_key: &str, lists: &[&[Value]]) -> R<()> {
    for list in lists {
        for item in list.iter() {
            let Some(m) = item.as_object() else { return Err(err_bad_arg_type(MAP_TYPE, item)) };
            if !m.contains_key(merge_key) {
                return Err(err_no_merge_key(m, merge_key));
            }
        }
    }
    Ok(())
}

/// `mergeSortedSlice`: inserts server-only items (`left`) among patch items (`right`) using
/// the server order; an item that cannot be compared yields to the patch item.
fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (index_of(server_order, l, merge_key, kind), index_of(server_order, r, merge_key, kind)) {
                    (Some(li), Some(ri)) => li < ri,
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        if let Some(v) = next {
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::schema::Defs;
    use proptest::prelude::*;
    use serde_json::json;

    /// A Pod-like schema with the same patch annotations the real OpenAPI carries.
    pub(crate) fn pod_schema() -> (Value, Defs) {
        let defs: Defs = serde_json::from_value(json!({
            "ObjectMeta": {"type": "object", "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": {"type": "array", "items": {"type": "string"},
                    "x-kubernetes-patch-strategy": "merge", "x-kubernetes-list-type": "set"},
                "ownerReferences": {"type": "array", "items": {"$ref": "#/components/schemas/OwnerReference"},
                    "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"]}
            }},
            "OwnerReference": {"type": "object", "properties": {
                "uid": {"type": "string"}, "name": {"type": "string"}, "kind": {"type": "string"}
            }, "x-kubernetes-map-type": "atomic"},
            "Container": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"},
                "image": {"type": "string"},
                "args": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"},
                "env": {"type": "array", "items": {"$ref": "#/components/schemas/EnvVar"},
                    "x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
                "ports": {"type": "array", "items": {"$ref": "#/components/schemas/ContainerPort"},
                    "x-kubernetes-patch-merge-key": "containerPort", "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["containerPort", "protocol"]},
                "volumeMounts": {"type": "array", "items": {"$ref": "#/components/schemas/VolumeMount"},
                    "x-kubernetes-patch-merge-key": "mountPath", "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["mountPath"]},
                "resources": {"allOf": [{"$ref": "#/components/schemas/Resources"}], "default": {}}
            }},
            "Resources": {"type": "object", "properties": {
                "limits": {"type": "object", "additionalProperties": {"type": "string"}}
            }},
            "EnvVar": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"}, "value": {"type": "string"},
                "valueFrom": {"type": "object", "properties": {"fieldRef": {"type": "object", "properties": {
                    "fieldPath": {"type": "string"}}}}}
            }},
            "ContainerPort": {"type": "object", "required": ["containerPort"], "properties": {
                "containerPort": {"type": "integer"}, "name": {"type": "string"},
                "protocol": {"type": "string", "default": "TCP"}
            }},
            "VolumeMount": {"type": "object", "properties": {
                "mountPath": {"type": "string"}, "name": {"type": "string"}
            }},
            "Volume": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"},
                "emptyDir": {"type": "object", "properties": {"medium": {"type": "string"}}},
                "hostPath": {"type": "object", "properties": {"path": {"type": "string"}}},
                "configMap": {"type": "object", "properties": {"name": {"type": "string"}}}
            }},
            "Toleration": {"type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "string"}}},
            "PodSpec": {"type": "object", "required": ["containers"], "properties": {
                "containers": {"type": "array", "items": {"$ref": "#/components/schemas/Container"},
                    "x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
                "volumes": {"type": "array", "items": {"$ref": "#/components/schemas/Volume"},
                    "x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge,retainKeys",
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
                "tolerations": {"type": "array", "items": {"$ref": "#/components/schemas/Toleration"},
                    "x-kubernetes-list-type": "atomic"},
                "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"},
                    "x-kubernetes-map-type": "atomic"},
                "replicas": {"type": "integer"},
                "strategy": {"allOf": [{"$ref": "#/components/schemas/Strategy"}],
                    "x-kubernetes-patch-strategy": "retainKeys", "default": {}},
                "template": {"allOf": [{"$ref": "#/components/schemas/Template"}],
                    "x-kubernetes-patch-strategy": "replace"}
            }},
            "Strategy": {"type": "object", "properties": {
                "type": {"type": "string"},
                "rollingUpdate": {"type": "object", "properties": {"maxSurge": {"type": "string"}}}
            }},
            "Template": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
        }))
        .unwrap();
        let root = json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"allOf": [{"$ref": "#/components/schemas/ObjectMeta"}], "default": {}},
            "spec": {"allOf": [{"$ref": "#/components/schemas/PodSpec"}], "default": {}},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}, "default": {}}
        }});
        (root, defs)
    }

    fn smp(original: Value, patch: Value) -> Result<Value, PatchError> {
        let (root, defs) = pod_schema();
        strategic_merge_patch(&original, &patch, SchemaRef::new(&root, &defs))
    }

    #[test]
    fn merges_containers_by_name() {
        let original = json!({"spec": {"containers": [
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "proxy:1"}
        ]}});
        let patch = json!({"spec": {"containers": [{"name": "app", "image": "app:2"}]}});
        assert_eq!(
            smp(original, patch).unwrap(),
            json!({"spec": {"containers": [
                {"name": "app", "image": "app:2", "env": [{"name": "A", "value": "1"}]},
                {"name": "sidecar", "image": "proxy:1"}
            ]}})
        );
    }

    #[test]
    fn new_list_items_go_first_without_set_element_order() {
        // Upstream's mergeSortedSlice puts a patch item it cannot place before server items.
        let original = json!({"spec": {"containers": [{"name": "app", "image": "a"}]}});
        let patch = json!({"spec": {"containers": [{"name": "sidecar", "image": "s"}]}});
        assert_eq!(
            smp(original.clone(), patch).unwrap(),
            json!({"spec": {"containers": [{"name": "sidecar", "image": "s"}, {"name": "app", "image": "a"}]}})
        );
        // With $setElementOrder (what kubectl sends) the requested order wins.
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{"name": "sidecar", "image": "s"}]
        }});
        assert_eq!(
            smp(original, patch).unwrap(),
            json!({"spec": {"containers": [{"name": "app", "image": "a"}, {"name": "sidecar", "image": "s"}]}})
        );
    }

    #[test]
    fn deletes_env_var_with_patch_delete() {
        let original = json!({"spec": {"containers": [{"name": "app", "env": [
            {"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "A", "value": "dup"}
        ]}]}});
        let patch = json!({"spec": {"containers": [{"name": "app", "env": [{"name": "A", "$patch": "delete"}]}]}});
        assert_eq!(
            smp(original, patch).unwrap(),
            json!({"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "2"}]}]}})
        );
    }

    #[test]
    fn merges_primitive_finalizers_as_a_set() {
        let original = json!({"metadata": {"finalizers": ["a", "b"]}});
        assert_eq!(
            smp(original.clone(), json!({"metadata": {"finalizers": ["b", "c"]}})).unwrap(),
            json!({"metadata": {"finalizers": ["a", "b", "c"]}})
        );
        // A value the server order cannot place goes first (upstream mergeSortedSlice).
        assert_eq!(
            smp(original.clone(), json!({"metadata": {"finalizers": ["c"]}})).unwrap(),
            json!({"metadata": {"finalizers": ["c", "a", "b"]}})
        );
        assert_eq!(
            smp(original.clone(), json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})).unwrap(),
            json!({"metadata": {"finalizers": ["b"]}})
        );
        assert_eq!(
            smp(original, json!({"metadata": {"$setElementOrder/finalizers": ["a", "b", "c"], "finalizers": ["c"]}}))
                .unwrap(),
            json!({"metadata": {"finalizers": ["a", "b", "c"]}})
        );
    }

    #[test]
    fn retain_keys_clears_other_volume_sources() {
        let original = json!({"spec": {"volumes": [{"name": "data", "emptyDir": {}}]}});
        let patch = json!({"spec": {"volumes": [
            {"name": "data", "hostPath": {"path": "/tmp"}, "$retainKeys": ["hostPath", "name"]}
        ]}});
        assert_eq!(
            smp(original.clone(), patch).unwrap(),
            json!({"spec": {"volumes": [{"name": "data", "hostPath": {"path": "/tmp"}}]}})
        );
        // Without the directive the sources accumulate (what an old client gets).
        let patch = json!({"spec": {"volumes": [{"name": "data", "hostPath": {"path": "/tmp"}}]}});
        assert_eq!(
            smp(original.clone(), patch).unwrap(),
            json!({"spec": {"volumes": [{"name": "data", "emptyDir": {}, "hostPath": {"path": "/tmp"}}]}})
        );
        // Content outside the retained keys is a 400.
        let patch = json!({"spec": {"volumes": [{"name": "data", "hostPath": {}, "$retainKeys": ["name"]}]}});
        let e = smp(original.clone(), patch).unwrap_err();
        assert_eq!((e.status_code(), e.message().as_str()), (400, "invalid patch format of retainKeys"));
        let with_strategy =
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "1"}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": "type", "type": "Recreate"}}});
        assert_eq!(smp(with_strategy.clone(), patch).unwrap_err().status_code(), 400);
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        assert_eq!(smp(with_strategy, patch).unwrap(), json!({"spec": {"strategy": {"type": "Recreate"}}}));
        // Where nothing is merged, leftover directives do not reach the object.
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        assert_eq!(smp(original, patch).unwrap()["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn replace_directives_and_strategies() {
        let original = json!({"spec": {
            "containers": [{"name": "a"}, {"name": "b"}],
            "nodeSelector": {"x": "1"},
            "template": {"a": "1", "b": "2"},
            "tolerations": [{"key": "k"}]
        }});
        let patch = json!({"spec": {
            "containers": [{"name": "c"}, {"$patch": "replace"}],
            "nodeSelector": {"$patch": "replace", "y": "2"},
            "template": {"b": "3"},
            "tolerations": [{"key": "z", "value": null}]
        }});
        assert_eq!(
            smp(original, patch).unwrap(),
            json!({"spec": {
                "containers": [{"name": "c"}],
                "nodeSelector": {"y": "2"},
                "template": {"b": "3"},
                "tolerations": [{"key": "z"}]
            }})
        );
        assert_eq!(
            smp(json!({"metadata": {"labels": {"a": "1"}}}), json!({"metadata": {"labels": {"$patch": "delete"}}}))
                .unwrap(),
            json!({"metadata": {"labels": {}}})
        );
    }

    #[test]
    fn null_deletes_and_unknown_fields_merge() {
        let original = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "extra": {"x": 1, "y": [1]}});
        let patch = json!({"metadata": {"labels": {"a": null}}, "extra": {"x": null, "y": [2], "z": {"n": null}}});
        assert_eq!(
            smp(original, patch).unwrap(),
            json!({"metadata": {"labels": {"b": "2"}}, "extra": {"y": [2], "z": {}}})
        );
    }

    #[test]
    fn upstream_custom_cases() {
        // From strategicpatch/patch_test.go customStrategicMergePatchTestCaseData.
        let (root, defs) = pod_schema();
        let s = SchemaRef::new(&root, &defs);
        let spec = |v: Value| json!({"spec": v});
        let cases = [
            // preserve the order from the patch in a merging list
            (
                json!({"containers": [{"name": "1"}, {"name": "2", "image": "b"}, {"name": "3"}]}),
                json!({"containers": [{"name": "3", "image": "c"}, {"name": "1", "image": "a"}, {"name": "2", "args": ["x"]}]}),
                json!({"containers": [{"name": "3", "image": "c"}, {"name": "1", "image": "a"}, {"name": "2", "image": "b", "args": ["x"]}]}),
            ),
            // preserve the order from the patch in a merging list 2
            (
                json!({"containers": [{"name": "1"}, {"name": "2", "image": "b"}, {"name": "3"}]}),
                json!({"containers": [{"name": "3", "image": "c"}, {"name": "1", "image": "a"}]}),
                json!({"containers": [{"name": "2", "image": "b"}, {"name": "3", "image": "c"}, {"name": "1", "image": "a"}]}),
            ),
            // delete all duplicate entries in a merging list
            (
                json!({"containers": [{"name": "1"}, {"name": "1"}, {"name": "2", "image": "a"}, {"name": "3"}, {"name": "3"}]}),
                json!({"containers": [{"name": "1", "$patch": "delete"}, {"name": "3", "$patch": "delete"}]}),
                json!({"containers": [{"name": "2", "image": "a"}]}),
            ),
            // delete all items from merging list
            (
                json!({"containers": [{"name": "1"}, {"name": "2"}]}),
                json!({"containers": [{"$patch": "replace"}]}),
                json!({"containers": []}),
            ),
            // $setElementOrder contains item that is not present in the list to be merged
            (
                json!({"containers": [{"name": "1"}, {"name": "3"}]}),
                json!({"$setElementOrder/containers": [{"name": "3"}, {"name": "2"}, {"name": "1"}],
                       "containers": [{"name": "3", "image": "3"}, {"name": "1", "image": "1"}]}),
                json!({"containers": [{"name": "3", "image": "3"}, {"name": "1", "image": "1"}]}),
            ),
        ];
        for (original, patch, want) in cases {
            let got = strategic_merge_patch(&spec(original), &spec(patch.clone()), s).unwrap();
            assert_eq!(got, spec(want), "patch {patch}");
        }
        // nested patch merge with empty list: the delete of a missing item is dropped
        let got = strategic_merge_patch(
            &json!({"spec": {}}),
            &json!({"spec": {"containers": [{"name": "hello"}, {"$patch": "delete", "name": "doesntexist"}]}}),
            s,
        )
        .unwrap();
        assert_eq!(got, json!({"spec": {"containers": [{"name": "hello"}]}}));
    }

    #[test]
    fn malformed_directives_fail_like_upstream() {
        let original = json!({"spec": {"containers": [{"name": "a"}]}, "metadata": {"finalizers": ["x"]}});
        let e = smp(original.clone(), json!({"spec": {"containers": [{"image": "b"}]}})).unwrap_err();
        assert_eq!(e.status_code(), 500);
        assert_eq!(e.message(), "map: map[image:b] does not contain declared merge key: name");
        let e = smp(original.clone(), json!({"spec": {"containers": [{"name": "a", "$patch": "foo"}]}})).unwrap_err();
        assert_eq!(e.message(), "unknown patch type: foo in map: map[$patch:foo name:a]");
        let e = smp(original.clone(), json!({"spec": {"$patch": "merge"}})).unwrap_err();
        assert_eq!(e.message(), "unknown patch type: merge in map: map[$patch:merge]");
        let e = smp(original.clone(), json!({"spec": {"containers": [{"name": "a", "$patch": "merge"}]}})).unwrap_err();
        assert_eq!(e.message(), "merging lists cannot yet be specified in the patch");
        let e = smp(original.clone(), json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["x"]}})).unwrap_err();
        assert_eq!((e.status_code(), e.message().as_str()), (400, "invalid patch format of primitive list"));
        let e = smp(original.clone(), json!({"metadata": {"$setElementOrder": ["x"]}})).unwrap_err();
        assert_eq!((e.status_code(), e.message().as_str()), (400, "invalid patch format of setElementOrder list"));
        let e = smp(original.clone(), json!({"metadata": {"$setElementOrder/finalizers": "x"}})).unwrap_err();
        assert_eq!(e.message(), "expected a []interface {}, but received a string");
        let e = smp(json!({"metadata": {"finalizers": [["y"]]}}), json!({"metadata": {"finalizers": [["x"]]}}))
            .unwrap_err();
        assert_eq!((e.status_code(), e.message().as_str()), (422, crate::patch::GENERIC_UNPROCESSABLE_MESSAGE));
        assert_eq!(e.detail(), "lists of lists are not supported");
        let e = smp(original.clone(), json!({"metadata": {"finalizers": [1]}})).unwrap_err();
        assert_eq!(e.message(), "list element types are not identical: [[x] [1]]");
        let e = smp(
            original.clone(),
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}], "containers": [{"name": "a"}]}}),
        )
        .unwrap_err();
        assert!(e.message().contains("doesn't match $setElementOrder list"), "{}", e.message());
        let e = smp(original, json!([1])).unwrap_err();
        assert_eq!(
            (e.status_code(), e.message().as_str()),
            (400, "json: cannot unmarshal array into Go value of type map[string]interface {}")
        );
    }

    #[test]
    fn kubectl_three_way_patch_shapes() {
        // What `kubectl apply` (client side) sends after removing env B and adding port 8080.
        let original = json!({"spec": {"containers": [{"name": "app", "image": "a",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "args": ["x", "y", "z"]}]}});
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "app"}],
            "containers": [{
                "name": "app",
                "$setElementOrder/env": [{"name": "A"}],
                "env": [{"name": "B", "$patch": "delete"}],
                "$setElementOrder/ports": [{"containerPort": 80}, {"containerPort": 8080}],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "$deleteFromPrimitiveList/args": ["y"]
            }]
        }});
        assert_eq!(
            smp(original, patch).unwrap(),
            json!({"spec": {"containers": [{"name": "app", "image": "a",
                "env": [{"name": "A", "value": "1"}],
                "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 8080, "protocol": "TCP"}],
                "args": ["x", "z"]}]}})
        );
        // Deleting from a list that does not exist does not create it.
        assert_eq!(
            smp(json!({"metadata": {}}), json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})).unwrap(),
            json!({"metadata": {}})
        );
    }

    #[test]
    fn untyped_patch_replaces_lists() {
        let original = json!({"spec": {"items": [1, 2], "m": {"a": 1}}});
        let patch = json!({"spec": {"items": [3], "m": {"b": 2}}});
        assert_eq!(
            strategic_merge_patch_untyped(&original, &patch).unwrap(),
            json!({"spec": {"items": [3], "m": {"a": 1, "b": 2}}})
        );
    }

    #[test]
    fn dedup_keeps_go_order() {
        assert_eq!(
            deduplicate_scalars(vec![json!("a"), json!("a"), json!("b"), json!("c")]),
            vec![json!("a"), json!("c"), json!("b")]
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..3).prop_map(|n| json!(n)),
            prop_oneof![Just("a"), Just("b"), Just("delete"), Just("replace"), Just("merge"), Just("name")]
                .prop_map(|s| Value::String(s.to_string())),
        ];
        let key = prop_oneof![
            Just("name"),
            Just("image"),
            Just("containers"),
            Just("env"),
            Just("spec"),
            Just("metadata"),
            Just("finalizers"),
            Just("$patch"),
            Just("$retainKeys"),
            Just("$setElementOrder/containers"),
            Just("$deleteFromPrimitiveList/finalizers"),
            Just("$setElementOrder/finalizers"),
            Just("value"),
            Just("volumes"),
            Just("labels")
        ]
        .prop_map(str::to_string);
        leaf.prop_recursive(5, 48, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key.clone(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn never_panics(original in arb_json(), patch in arb_json()) {
            let (root, defs) = pod_schema();
            let s = SchemaRef::new(&root, &defs);
            let original = json!({"spec": original.clone(), "metadata": original});
            let _ = strategic_merge_patch(&original, &patch, s);
            let _ = strategic_merge_patch(&original, &json!({"spec": patch.clone(), "metadata": patch.clone()}), s);
            let _ = strategic_merge_patch_untyped(&original, &patch);
        }

        #[test]
        fn empty_patch_is_identity(original in arb_json()) {
            let (root, defs) = pod_schema();
            let s = SchemaRef::new(&root, &defs);
            let original = json!({"x": original});
            prop_assert_eq!(strategic_merge_patch(&original, &json!({}), s).unwrap(), original);
        }
    }
}
