//! The verbs and their semantics, independent of HTTP: what get, list, create, update, patch and
//! delete do to the store, as the apiserver's generic registry does them. The HTTP layer
//! (`api.rs`) and the cluster's own controllers both call these.

use crate::cluster::Cluster;
use crate::convert;
use crate::errors::{ApiError, ApiResult};
use crate::field::FieldError;
use crate::meta;
pub use crate::opts::{DeleteOpts, FieldValidation, ListOpts, WriteOpts};
use crate::registry::ResourceDef;
use crate::request::BodyFormat;
use crate::store::{StoreError, object_rv};
use base64::Engine;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The result of a write: the object as served, warnings for the `Warning` header, and whether it
/// was created.
#[derive(Debug, Clone)]
pub struct Written {
    pub object: Value,
    pub warnings: Vec<String>,
    pub created: bool,
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct ListResult {
    pub items: Vec<Value>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

fn store_err(def: &ResourceDef, name: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::not_found(&def.group, &def.plural, name),
        StoreError::AlreadyExists => ApiError::already_exists(&def.group, &def.plural, name),
        StoreError::Conflict { .. } => ApiError::stale(&def.group, &def.plural, name),
        StoreError::Gone { requested, oldest } => {
            ApiError::gone(format!("too old resource version: {requested} ({oldest})"))
        }
        StoreError::Io(msg) => ApiError::internal(msg),
    }
}

/// The namespace a request acts in: "" for cluster-scoped kinds.
pub fn scope_namespace<'a>(def: &ResourceDef, ns: Option<&'a str>) -> &'a str {
    if def.namespaced { ns.unwrap_or("") } else { "" }
}

pub fn get(cl: &Cluster, def: &ResourceDef, ns: &str, name: &str) -> ApiResult<Value> {
    cl.store
        .get(&def.storage, ns, name)
        .map(|o| convert::from_storage(def, &o))
        .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    ns: String,
    name: String,
}

pub fn list(cl: &Cluster, def: &ResourceDef, ns: Option<&str>, opts: &ListOpts) -> ApiResult<ListResult> {
    let raw = list_stored(cl, def, ns, opts)?;
    let items = raw.items.iter().map(|o| convert::from_storage(def, o)).collect();
    Ok(ListResult {
        items,
        resource_version: raw.resource_version,
        continue_token: raw.continue_token,
        remaining: None,
    })
}

/// A page of stored objects (not converted to the served version).
pub struct StoredPage {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
}

pub fn list_stored(cl: &Cluster, def: &ResourceDef, ns: Option<&str>, opts: &ListOpts) -> ApiResult<StoredPage> {
    let after = match &opts.continue_token {
        Some(t) => {
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(t)
                .ok()
                .and_then(|b| serde_json::from_slice::<ContinueToken>(&b).ok())
                .ok_or_else(|| ApiError::bad_request("continue key is not valid: illegal base64 data or JSON"))?;
            Some(bytes)
        }
        None => None,
    };
    let keep = |o: &Value| opts.matches(def, o);
    let limit = opts.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let (items, more, rv) =
        cl.store.list_page(&def.storage, ns, after.as_ref().map(|t| (t.ns.as_str(), t.name.as_str())), limit, &keep);
    let rv = after.as_ref().map_or(rv, |t| t.rv);
    let continue_token = if more {
        items.last().map(|last| {
            let t = ContinueToken { rv, ns: meta::namespace(last).to_string(), name: meta::name(last).to_string() };
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(&t).unwrap_or_default())
        })
    } else {
        None
    };
    Ok(StoredPage { items, resource_version: rv, continue_token })
}

/// A list answered straight from the stored objects, without copying them, when they are served
/// as stored (no conversion): the JSON of the list object as the server writes it.
pub fn list_json(def: &ResourceDef, page: &StoredPage) -> Option<Vec<u8>> {
    if !convert::served_as_stored(def) {
        return None;
    }
    struct Item<'a>(&'a Value, bool);
    impl serde::Serialize for Item<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            let Some(m) = self.0.as_object() else { return self.0.serialize(s) };
            let mut map = s.serialize_map(None)?;
            for (k, v) in m {
                // Items of built-in lists carry no kind and apiVersion, as the server's.
                if self.1 && (k == "kind" || k == "apiVersion") {
                    continue;
                }
                map.serialize_entry(k, v)?;
            }
            map.end()
        }
    }
    let mut head = list_object(
        def,
        ListResult {
            items: vec![],
            resource_version: page.resource_version,
            continue_token: page.continue_token.clone(),
            remaining: None,
        },
    );
    if let Some(m) = head.as_object_mut() {
        m.remove("items");
    }
    let mut out = serde_json::to_vec(&head).ok()?;
    out.pop(); // the closing brace
    out.extend_from_slice(b",\"items\":[");
    let strip = !def.is_custom();
    for (i, o) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &Item(o, strip)).ok()?;
    }
    out.extend_from_slice(b"]}");
    Some(out)
}

/// Check the body is an object of the endpoint's kind; fill in apiVersion/kind when absent.
fn check_type(def: &ResourceDef, body: Value, expect_kind: &str) -> ApiResult<Value> {
    let Value::Object(mut m) = body else {
        return Err(ApiError::bad_request(format!(
            "the body of the request must be a JSON or YAML object of kind {expect_kind}"
        )));
    };
    let want_av = if expect_kind == "Scale" { "autoscaling/v1".to_string() } else { def.api_version() };
    match m.get("apiVersion") {
        None | Some(Value::Null) => {
            m.insert("apiVersion".into(), want_av.clone().into());
        }
        Some(Value::String(av)) if *av == want_av => {}
        Some(Value::String(av)) if av.is_empty() => {
            m.insert("apiVersion".into(), want_av.clone().into());
        }
        Some(other) => {
            let av = other.as_str().map(str::to_string).unwrap_or_else(|| other.to_string());
            let kind = m.get("kind").and_then(Value::as_str).unwrap_or(expect_kind).to_string();
            return Err(mismatch(def, &av, &kind, expect_kind, &want_av));
        }
    }
    match m.get("kind") {
        None | Some(Value::Null) => {
            m.insert("kind".into(), expect_kind.into());
        }
        Some(Value::String(k)) if k == expect_kind => {}
        Some(Value::String(k)) if k.is_empty() => {
            m.insert("kind".into(), expect_kind.into());
        }
        Some(other) => {
            let kind = other.as_str().map(str::to_string).unwrap_or_else(|| other.to_string());
            let av = m.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
            return Err(mismatch(def, &av, &kind, expect_kind, &want_av));
        }
    }
    match m.get("metadata") {
        None | Some(Value::Null) => {
            m.insert("metadata".into(), json!({}));
        }
        Some(Value::Object(_)) => {}
        Some(_) => return Err(ApiError::bad_request("metadata: must be an object")),
    }
    Ok(Value::Object(m))
}

/// A body of another kind or version than the endpoint serves. Built-in kinds fail in the
/// decoder (`X in version "v" cannot be handled as a Y: ...`); custom resources in the handler.
fn mismatch(def: &ResourceDef, av: &str, kind: &str, expect_kind: &str, want_av: &str) -> ApiError {
    let detail =
        format!("the object's apiVersion and kind ({av}, {kind}) do not match the endpoint ({want_av}, {expect_kind})");
    if def.is_custom() {
        if kind != expect_kind {
            return ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({expect_kind})"
            ));
        }
        return ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({want_av})"
        ));
    }
    ApiError::bad_request(format!("{kind} in version {av:?} cannot be handled as a {expect_kind}: {detail}"))
}

/// Admission of the namespace: it must exist and not be terminating (NamespaceLifecycle).
pub(crate) fn admit_namespace(cl: &Cluster, def: &ResourceDef, ns: &str, name: &str) -> ApiResult<()> {
    if !def.namespaced {
        return Ok(());
    }
    let Some(nsobj) = cl.store.get(&crate::registry::GroupResource::new("", "namespaces"), "", ns) else {
        return Err(ApiError::not_found("", "namespaces", ns));
    };
    if meta::is_deleting(&nsobj) || nsobj.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") {
        let mut e = ApiError::forbidden(
            &def.group,
            &def.plural,
            name,
            &format!("unable to create new content in namespace {ns} because it is being terminated"),
        );
        if let Some(d) = &mut e.details {
            d.causes.push(crate::errors::Cause {
                reason: "NamespaceTerminating".into(),
                message: format!("namespace {ns} is being terminated"),
                field: "metadata.namespace".into(),
            });
        }
        return Err(e);
    }
    Ok(())
}

/// Prune unknown fields, default, validate: what happens to every object written.
fn normalize(
    cl: &Cluster,
    def: &ResourceDef,
    obj: &mut Value,
    old: Option<&Value>,
    opts: &WriteOpts,
) -> ApiResult<Vec<String>> {
    let mut warnings = vec![];
    // The cluster's own writes carry only the kind's fields: nothing to prune.
    let unknown = if opts.trusted { vec![] } else { crate::hooks::prune(def, obj) };
    if !unknown.is_empty() {
        match opts.field_validation {
            FieldValidation::Strict => {
                let parts: Vec<String> = unknown.iter().map(|p| format!("unknown field {p:?}")).collect();
                return Err(ApiError::bad_request(format!(
                    "{kind} in version {v:?} cannot be handled as a {kind}: strict decoding error: {}",
                    parts.join(", "),
                    kind = def.kind,
                    v = def.version
                )));
            }
            FieldValidation::Warn => warnings.extend(unknown.iter().map(|p| format!("unknown field {p:?}"))),
            FieldValidation::Ignore => {}
        }
    }
    if !opts.trusted {
        crate::hooks::decode_check(def, obj).map_err(ApiError::bad_request)?;
    }
    crate::hooks::default(def, obj);
    if old.is_some() {
        // As the Go structs the apiserver decodes into: the stored object has its zero fields,
        // and an update that does not send them changes nothing there (update validation,
        // generation and field ownership compare like with like). A create gets them after
        // its field ownership is recorded.
        go_zero_fields(def, obj, false);
    }
    crate::admission::mutate(cl, def, obj, old, opts.subresource.as_deref())?;
    let errs: Vec<FieldError> = crate::hooks::validate(cl, def, obj, old);
    if !errs.is_empty() {
        return Err(ApiError::invalid(&def.group, &def.kind, meta::name(obj), &errs));
    }
    warnings.extend(crate::admission::validate(
        cl,
        def,
        obj,
        old,
        opts.subresource.as_deref(),
        opts.dry_run,
        update_status,
    )?);
    let attrs = crate::admission::policy::Attributes {
        operation: if old.is_some() { "UPDATE" } else { "CREATE" },
        def,
        namespace: meta::namespace(obj),
        name: meta::name(obj),
        subresource: opts.subresource.as_deref().unwrap_or(""),
        object: Some(obj),
        old,
        user: opts.user.as_ref(),
        field_manager: &opts.field_manager,
        dry_run: opts.dry_run,
    };
    warnings.extend(crate::admission::policy::admit(cl, &attrs)?);
    Ok(warnings)
}

/// A status update by a component of the write path itself (`admission::UpdateStatus`: quota
/// admission charging a ResourceQuota).
fn update_status(cl: &Cluster, def: &ResourceDef, ns: &str, name: &str, obj: Value, manager: &str) -> ApiResult<()> {
    let opts = WriteOpts { subresource: Some("status".into()), ..WriteOpts::system(manager) };
    update(cl, def, ns, name, obj, &opts).map(|_| ())
}

/// A built-in object as the apiserver's Go structs encode it: the fields without `omitempty`
/// are present with their zero values (see `builtin::zero`). `stored`: `obj` is in storage
/// form (events.k8s.io Events are stored as core/v1 Events), else as `def` serves it.
fn go_zero_fields(def: &ResourceDef, obj: &mut Value, stored: bool) {
    if def.is_custom() {
        return;
    }
    let Some(schema) = &def.schema else { return };
    let name = match def.conversion {
        crate::registry::Conversion::EventsV1 if stored => "io.k8s.api.core.v1.Event",
        _ => schema.name.as_str(),
    };
    crate::builtin::zero::fill(name, obj, &schema.defs);
}

fn without_volatile(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        if let Some(Value::Array(mf)) = m.get_mut("managedFields") {
            for e in mf {
                if let Some(em) = e.as_object_mut() {
                    em.remove("time");
                }
            }
        }
    }
    o
}

/// The parts of an object whose change bumps `metadata.generation`.
fn spec_part(def: &ResourceDef, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if def.status {
            m.remove("status");
        }
    }
    o
}

/// No new custom resources of a CRD being deleted (apiextensions-apiserver
/// pkg/apiserver/customresource_handler.go: 405 once the CRD is `Terminating`).
fn refuse_create_while_terminating(cl: &Cluster, def: &ResourceDef) -> ApiResult<()> {
    let Some(crd_name) = &def.crd else { return Ok(()) };
    let crds = crate::registry::GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions");
    match cl.store.get(&crds, "", crd_name) {
        Some(crd) if crate::crd::is_terminating(&crd) => {
            let mut e =
                ApiError::method_not_allowed("create not allowed while custom resource definition is terminating");
            if let Some(d) = e.details.as_mut() {
                d.group = def.group.clone();
                d.kind = def.plural.clone();
            }
            Err(e)
        }
        _ => Ok(()),
    }
}

pub fn create(cl: &Cluster, def: &ResourceDef, ns: &str, body: Value, opts: &WriteOpts) -> ApiResult<Written> {
    refuse_create_while_terminating(cl, def)?;
    let mut obj = check_type(def, body, &def.kind)?;
    crate::hooks::on_create(def, &mut obj, opts.user.as_ref());
    let now = meta::now();
    {
        let Some(m) = meta::meta_mut(&mut obj) else { return Err(ApiError::bad_request("the body must be an object")) };
        match (def.namespaced, m.get("namespace").and_then(Value::as_str)) {
            (true, None | Some("")) => {
                m.insert("namespace".into(), ns.into());
            }
            (true, Some(n)) if n != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (false, _) => {
                m.remove("namespace");
            }
            _ => {}
        }
        let name = m.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty()
            && let Some(prefix) = m.get("generateName").and_then(Value::as_str).filter(|p| !p.is_empty())
        {
            let generated = meta::generate_name(prefix);
            m.insert("name".into(), generated.into());
        }
        m.insert("uid".into(), meta::new_uid().into());
        m.insert("creationTimestamp".into(), now.clone().into());
        for k in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
            m.remove(k);
        }
        if def.generation {
            m.insert("generation".into(), 1.into());
        } else {
            m.remove("generation");
        }
    }
    if def.status
        && opts.subresource.is_none()
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    let name = meta::name(&obj).to_string();
    admit_namespace(cl, def, ns, &name)?;
    if !def.is_custom() {
        crate::builtin::defaults::prepare_for_create(&def.group, &def.kind, &mut obj);
    }
    let warnings = normalize(cl, def, &mut obj, None, opts)?;
    crate::hooks::before_write(cl, def, &mut obj, None)?;
    if !opts.is_apply {
        // Field ownership covers what the client sent (decoded, defaulted, admitted), not the
        // status the create strategy sets: the apiserver's field manager runs before it.
        let mut owned = obj.clone();
        if def.status
            && let Some(m) = owned.as_object_mut()
        {
            m.remove("status");
        }
        let api_version = def.api_version();
        crate::patch::apply::record_update(
            None,
            &mut owned,
            &opts.field_manager,
            opts.subresource.as_deref(),
            crate::patching::schema_of(def),
            &api_version,
            &now,
        );
        if let (Some(mf), Some(m)) = (owned.pointer("/metadata/managedFields").cloned(), meta::meta_mut(&mut obj)) {
            m.insert("managedFields".into(), mf);
        }
    }
    let mut stored = convert::to_storage(def, obj);
    go_zero_fields(def, &mut stored, true);
    meta::canonicalize(&mut stored, def.is_custom());
    if opts.dry_run {
        if cl.store.get(&def.storage, ns, &name).is_some() {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        return Ok(Written { object: convert::from_storage(def, &stored), warnings, created: true });
    }
    let saved = cl.store.create(&def.storage, ns, &name, stored).map_err(|e| store_err(def, &name, e))?;
    crate::hooks::after_write(cl, def, &saved, None);
    Ok(Written { object: convert::from_storage(def, &saved), warnings, created: true })
}

/// Build the new stored object of an update from the current one and what the client sent.
fn prepare_update(def: &ResourceDef, cur: &Value, mut new: Value, subresource: Option<&str>) -> Value {
    if let Some(out) = crate::hooks::subresource_update(def, subresource, cur, &new) {
        return out;
    }
    match subresource {
        Some("finalize") => {
            // /finalize changes only spec.finalizers (namespaces).
            let mut out = cur.clone();
            let fins = new.pointer("/spec/finalizers").cloned().unwrap_or(Value::Array(vec![]));
            if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("finalizers".into(), fins);
            }
            return out;
        }
        Some("status") => {
            // /status changes only the status.
            let mut out = cur.clone();
            if let Some(m) = out.as_object_mut() {
                match new.get_mut("status").map(Value::take) {
                    Some(s) if !s.is_null() => {
                        m.insert("status".into(), s);
                    }
                    _ => {
                        m.remove("status");
                    }
                }
            }
            return out;
        }
        _ => {
            if def.status
                && let Some(m) = new.as_object_mut()
            {
                match cur.get("status") {
                    Some(s) => {
                        m.insert("status".into(), s.clone());
                    }
                    None => {
                        m.remove("status");
                    }
                }
            }
        }
    }
    // Fields the client cannot change.
    let cur_meta = cur.get("metadata").cloned().unwrap_or_default();
    if let Some(m) = meta::meta_mut(&mut new) {
        for k in
            ["creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "namespace", "name"]
        {
            match cur_meta.get(k) {
                Some(v) => {
                    m.insert(k.into(), v.clone());
                }
                None => {
                    m.remove(k);
                }
            }
        }
        m.remove("selfLink");
        // A missing uid is the current one; a different one is refused by validation.
        if m.get("uid").and_then(Value::as_str).is_none_or(str::is_empty)
            && let Some(u) = cur_meta.get("uid")
        {
            m.insert("uid".into(), u.clone());
        }
    }
    crate::hooks::preserve_on_update(def, cur, &mut new);
    new
}

/// Builds the object to write (and whether the client pinned a resourceVersion) from the current
/// one, or from nothing when the object does not exist.
type Compute<'a> = dyn Fn(Option<&Value>) -> ApiResult<(Value, bool)> + 'a;

/// The write shared by update and patch: `compute` builds the new served object from the current
/// served object; conflicts on the store's compare-and-swap are retried unless the client
/// pinned a resourceVersion.
fn guaranteed_update(
    cl: &Cluster,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    opts: &WriteOpts,
    compute: &Compute,
) -> ApiResult<Written> {
    for _ in 0..32 {
        let cur_stored = cl.store.get(&def.storage, ns, name);
        let cur = cur_stored.as_ref().map(|o| convert::from_storage(def, o));
        // A subresource (status, scale) is never created by a write: the real registries'
        // status and scale stores do not allow create on update, so an apply or PUT to the
        // status of a missing object is 404, not a new object made from the status alone.
        if cur.is_none() && opts.subresource.is_some() {
            return Err(ApiError::not_found(&def.group, &def.plural, name));
        }
        let (body, pinned) = compute(cur.as_ref())?;
        let Some(cur) = cur else {
            // Create on update (PUT of a missing object where the kind allows it, or apply).
            if let Some(denied) = &opts.create_denied {
                return Err(denied.clone());
            }
            let mut w = create(cl, def, ns, body, opts)?;
            w.created = true;
            return Ok(w);
        };
        let cur_rv = object_rv(&cur);
        // An apply computed the managed fields on the whole object; a subresource write keeps
        // only its part of the body, but the apply's managedFields record stands.
        let applied_managed = if opts.is_apply { body.pointer("/metadata/managedFields").cloned() } else { None };
        let mut new = prepare_update(def, &cur, body, opts.subresource.as_deref());
        if let (Some(mf), Some(m)) = (applied_managed, meta::meta_mut(&mut new)) {
            m.insert("managedFields".into(), mf);
        }
        let warnings = normalize(cl, def, &mut new, Some(&cur), opts)?;
        // No new finalizers on an object being deleted.
        if meta::is_deleting(&cur) {
            let old_f = meta::finalizers(&cur);
            let added: Vec<String> = meta::finalizers(&new).into_iter().filter(|f| !old_f.contains(f)).collect();
            if !added.is_empty() {
                let list = added.iter().map(|f| format!("{f:?}")).collect::<Vec<_>>().join(", ");
                return Err(ApiError::invalid(
                    &def.group,
                    &def.kind,
                    name,
                    &[FieldError::forbidden(
                        "metadata.finalizers",
                        format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
                        ),
                    )],
                ));
            }
        }
        if def.generation && spec_part(def, &cur) != spec_part(def, &new) {
            let g = cur.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            if let Some(m) = meta::meta_mut(&mut new) {
                m.insert("generation".into(), (g + 1).into());
            }
        }
        crate::hooks::before_write(cl, def, &mut new, Some(&cur))?;
        if !opts.is_apply {
            let api_version = def.api_version();
            crate::patch::apply::record_update(
                Some(&cur),
                &mut new,
                &opts.field_manager,
                opts.subresource.as_deref(),
                crate::patching::schema_of(def),
                &api_version,
                &meta::now(),
            );
        }
        let mut stored = convert::to_storage(def, new);
        go_zero_fields(def, &mut stored, true);
        meta::canonicalize(&mut stored, def.is_custom());
        let cur_stored = cur_stored.map(|a| (*a).clone()).unwrap_or_default();
        if without_volatile(&stored) == without_volatile(&cur_stored) {
            // Nothing changed: nothing is written and the resourceVersion stays.
            return Ok(Written { object: cur, warnings, created: false });
        }
        if opts.dry_run {
            return Ok(Written { object: convert::from_storage(def, &stored), warnings, created: false });
        }
        // Removing the last finalizer of an object being deleted deletes it.
        if meta::is_deleting(&stored) && !crate::hooks::deletion_blocked(def, &stored) {
            return match cl.store.delete(&def.storage, ns, name, Some(cur_rv)) {
                Ok(gone) => {
                    crate::hooks::after_delete(cl, def, &gone);
                    Ok(Written { object: convert::from_storage(def, &gone), warnings, created: false })
                }
                Err(StoreError::Conflict { .. }) if !pinned => continue,
                Err(e) => Err(store_err(def, name, e)),
            };
        }
        match cl.store.update(&def.storage, ns, name, cur_rv, stored) {
            Ok(saved) => {
                crate::hooks::after_write(cl, def, &saved, Some(&cur_stored));
                return Ok(Written { object: convert::from_storage(def, &saved), warnings, created: false });
            }
            Err(StoreError::Conflict { .. }) if !pinned => continue,
            Err(e) => return Err(store_err(def, name, e)),
        }
    }
    Err(ApiError::conflict(&def.group, &def.plural, name, "too many concurrent writes; try again"))
}

fn body_rv(body: &Value) -> Option<u64> {
    match body.pointer("/metadata/resourceVersion") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.parse().unwrap_or(u64::MAX)),
        _ => None,
    }
}

/// Bind a pod to a node (the `pods/binding` subresource the scheduler uses): sets
/// `spec.nodeName` and the PodScheduled condition; 409 when the pod is already bound.
pub fn bind(cl: &Cluster, def: &ResourceDef, ns: &str, name: &str, node: &str) -> ApiResult<Value> {
    for _ in 0..32 {
        let cur =
            cl.store.get(&def.storage, ns, name).ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
        if let Some(n) = cur.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!("pod {name} is already assigned to node {n:?}"),
            ));
        }
        if meta::is_deleting(&cur) {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        let mut next = (*cur).clone();
        if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("nodeName".into(), node.into());
        }
        let now = meta::now();
        let mut conds = crate::conditions::of(next.get("status"));
        crate::conditions::set(&mut conds, crate::conditions::Style::Pod, "PodScheduled", "True", "", "", &now);
        if let Some(m) = next.as_object_mut() {
            let status = m.entry("status").or_insert_with(|| json!({}));
            if let Some(sm) = status.as_object_mut() {
                sm.insert("conditions".into(), Value::Array(conds));
            }
        }
        meta::canonicalize(&mut next, false);
        match cl.store.update(&def.storage, ns, name, object_rv(&cur), next) {
            Ok(saved) => {
                crate::hooks::after_write(cl, def, &saved, Some(&cur));
                return Ok(convert::from_storage(def, &saved));
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(store_err(def, name, e)),
        }
    }
    Err(ApiError::conflict(&def.group, &def.plural, name, "too many concurrent writes; try again"))
}

/// PUT: replace the object (or its status) with the body.
pub fn update(
    cl: &Cluster,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    body: Value,
    opts: &WriteOpts,
) -> ApiResult<Written> {
    if opts.subresource.as_deref() == Some("binding") {
        let node = body.pointer("/target/name").and_then(Value::as_str).unwrap_or("");
        if node.is_empty() {
            return Err(ApiError::invalid("", "Binding", name, &[FieldError::required("target.name", "")]));
        }
        let object = bind(cl, def, ns, name, node)?;
        return Ok(Written { object, warnings: vec![], created: false });
    }
    let body = check_type(def, body, &def.kind)?;
    let body_name = meta::name(&body);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if def.namespaced {
        let body_ns = meta::namespace(&body);
        if !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let want_rv = body_rv(&body);
    let compute = |cur: Option<&Value>| -> ApiResult<(Value, bool)> {
        let mut b = body.clone();
        match cur {
            None => {
                if !def.create_on_update || opts.subresource.is_some() {
                    return Err(ApiError::not_found(&def.group, &def.plural, name));
                }
                if let Some(m) = meta::meta_mut(&mut b) {
                    m.insert("name".into(), name.into());
                    m.remove("resourceVersion");
                }
                Ok((b, true))
            }
            Some(cur) => {
                if let Some(rv) = want_rv
                    && rv != object_rv(cur)
                {
                    return Err(ApiError::stale(&def.group, &def.plural, name));
                }
                // The body's uid is a precondition (rest.defaultUpdatedObjectInfo).
                let body_uid = meta::uid(&b);
                if !body_uid.is_empty() && body_uid != meta::uid(cur) {
                    return Err(ApiError::conflict(
                        &def.group,
                        &def.plural,
                        name,
                        &format!(
                            "Precondition failed: UID in precondition: {body_uid}, UID in object meta: {}",
                            meta::uid(cur)
                        ),
                    ));
                }
                // An unconditional update (kinds allow it) is made against the current version.
                if want_rv.is_none()
                    && let Some(m) = meta::meta_mut(&mut b)
                {
                    m.insert("resourceVersion".into(), object_rv(cur).to_string().into());
                }
                Ok((b, want_rv.is_some()))
            }
        }
    };
    guaranteed_update(cl, def, ns, name, opts, &compute)
}

/// PATCH: apply a JSON patch, merge patch, strategic merge patch or server-side apply.
pub fn patch(
    cl: &Cluster,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    format: BodyFormat,
    body: &[u8],
    opts: &WriteOpts,
) -> ApiResult<Written> {
    let patch_doc: Value = match format {
        BodyFormat::ApplyPatch => crate::request::decode_body(body, true)?,
        BodyFormat::Json | BodyFormat::Yaml => {
            return Err(ApiError::unsupported_media_type(if format == BodyFormat::Json {
                "application/json"
            } else {
                "application/yaml"
            }));
        }
        _ => crate::request::decode_body(body, false)?,
    };
    if format == BodyFormat::StrategicMergePatch && def.is_custom() {
        return Err(ApiError::unsupported_media_type("application/strategic-merge-patch+json"));
    }
    let opts = &WriteOpts { is_apply: format == BodyFormat::ApplyPatch, ..opts.clone() };
    let compute = |cur: Option<&Value>| -> ApiResult<(Value, bool)> {
        crate::patching::apply_patch(cl, def, name, format, &patch_doc, cur, opts)
    };
    guaranteed_update(cl, def, ns, name, opts, &compute)
}

/// The HTTP code of a DELETE's answer (apiserver/pkg/endpoints/handlers/delete.go): 200, or
/// 202 when the object stays and the client sent `orphanDependents: false`.
pub fn delete_status_code(d: &Deleted, opts: &DeleteOpts) -> u16 {
    if !d.finished && opts.orphan_dependents == Some(false) { 202 } else { 200 }
}

/// The result of a delete: the object's last state, and whether it is gone (false: it waits for
/// finalizers, answered with 202).
#[derive(Debug, Clone)]
pub struct Deleted {
    pub object: Value,
    pub finished: bool,
    /// For the `Warning` header (admission policies with `Warn`).
    pub warnings: Vec<String>,
}

pub fn delete(cl: &Cluster, def: &ResourceDef, ns: &str, name: &str, opts: &DeleteOpts) -> ApiResult<Deleted> {
    if let Some(p) = &opts.propagation_policy
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            &[FieldError::not_supported("propagationPolicy", p.as_str(), &["Foreground", "Background", "Orphan"])],
        ));
    }
    let mut warnings: Option<Vec<String>> = None;
    for _ in 0..32 {
        let Some(cur) = cl.store.get(&def.storage, ns, name) else {
            return Err(ApiError::not_found(&def.group, &def.plural, name));
        };
        let cur_rv = object_rv(&cur);
        if let Some(uid) = &opts.precondition_uid
            && uid != meta::uid(&cur)
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.kind,
                name,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    meta::uid(&cur)
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && *rv != cur_rv.to_string()
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.kind,
                name,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({cur_rv}). The object might have been modified"
                ),
            ));
        }
        if warnings.is_none() {
            let attrs = crate::admission::policy::Attributes {
                operation: "DELETE",
                def,
                namespace: ns,
                name,
                subresource: "",
                object: None,
                old: Some(&cur),
                user: opts.user.as_ref(),
                field_manager: "",
                dry_run: opts.dry_run,
            };
            warnings = Some(crate::admission::policy::admit(cl, &attrs)?);
        }
        let warnings = warnings.clone().unwrap_or_default();
        let mut finalizers = meta::finalizers(&cur);
        let policy_finalizer = match opts.propagation_policy.as_deref() {
            Some("Orphan") => Some("orphan"),
            Some("Foreground") => Some("foregroundDeletion"),
            _ => crate::hooks::default_delete_finalizer(def),
        };
        let mut changed = false;
        if let Some(pf) = policy_finalizer
            && !finalizers.iter().any(|f| f == pf)
            && !meta::is_deleting(&cur)
        {
            finalizers.push(pf.to_string());
            changed = true;
        }
        let extra = crate::hooks::deletion_finalizers(def, &cur);
        for f in extra {
            if !finalizers.contains(&f) && !meta::is_deleting(&cur) {
                finalizers.push(f);
                changed = true;
            }
        }
        let mut marked = (*cur).clone();
        // Pods on a node are deleted gracefully: they stay, marked, until the kubelet has
        // stopped their containers and deletes them with a grace period of 0.
        let grace = crate::hooks::pod_grace(def, &cur, opts.grace_period_seconds);
        if let Some(m) = meta::meta_mut(&mut marked) {
            m.insert("finalizers".into(), finalizers.iter().map(|f| Value::from(f.as_str())).collect());
            if let Some(g) = grace {
                let current = m.get("deletionGracePeriodSeconds").and_then(Value::as_i64);
                if current.is_none_or(|c| g < c) {
                    m.insert("deletionGracePeriodSeconds".into(), g.into());
                    if meta::is_deleting(&cur) {
                        changed = true;
                    }
                }
            }
        }
        if !crate::hooks::deletion_blocked(def, &marked) {
            if opts.dry_run {
                return Ok(Deleted { object: convert::from_storage(def, &cur), finished: true, warnings });
            }
            match cl.store.delete(&def.storage, ns, name, Some(cur_rv)) {
                Ok(gone) => {
                    crate::hooks::after_delete(cl, def, &gone);
                    return Ok(Deleted { object: convert::from_storage(def, &gone), finished: true, warnings });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_err(def, name, e)),
            }
        }
        if meta::is_deleting(&cur) && !changed {
            return Ok(Deleted { object: convert::from_storage(def, &cur), finished: false, warnings });
        }
        // Graceful: mark it deleting; it goes when its finalizers are gone.
        let mut next = marked;
        if let Some(m) = meta::meta_mut(&mut next) {
            if !m.contains_key("deletionTimestamp") {
                let g = grace.unwrap_or(0);
                let at = jiff::Timestamp::now()
                    .checked_add(jiff::SignedDuration::from_secs(g))
                    .unwrap_or(jiff::Timestamp::now());
                m.insert("deletionTimestamp".into(), at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string().into());
                m.insert("deletionGracePeriodSeconds".into(), g.into());
                if def.generation {
                    let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
                    m.insert("generation".into(), (g + 1).into());
                }
            }
            if finalizers.is_empty() {
                m.remove("finalizers");
            }
        }
        crate::hooks::on_deleting(def, &mut next);
        meta::canonicalize(&mut next, def.is_custom());
        if opts.dry_run {
            return Ok(Deleted { object: convert::from_storage(def, &next), finished: false, warnings });
        }
        match cl.store.update(&def.storage, ns, name, cur_rv, next) {
            Ok(saved) => {
                crate::hooks::after_write(cl, def, &saved, Some(&cur));
                return Ok(Deleted { object: convert::from_storage(def, &saved), finished: false, warnings });
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(store_err(def, name, e)),
        }
    }
    Err(ApiError::conflict(&def.group, &def.plural, name, "too many concurrent writes; try again"))
}

/// DELETE on a collection: delete every object the selectors match; answers the list of them.
pub fn delete_collection(
    cl: &Cluster,
    def: &ResourceDef,
    ns: Option<&str>,
    list_opts: &ListOpts,
    opts: &DeleteOpts,
) -> ApiResult<ListResult> {
    let page = list(cl, def, ns, &ListOpts { limit: None, continue_token: None, ..list_opts.clone() })?;
    for o in &page.items {
        match delete(cl, def, meta::namespace(o), meta::name(o), opts) {
            Ok(_) => {}
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    // Store.DeleteCollection (apiserver/pkg/registry/generic/registry/store.go) answers the list
    // it deleted from, as listed: the items before their delete, the list's resourceVersion.
    Ok(ListResult { continue_token: None, remaining: None, ..page })
}

/// A list object as the server writes it (items without kind/apiVersion for built-in kinds).
pub fn list_object(def: &ResourceDef, r: ListResult) -> Value {
    let mut md = Map::new();
    md.insert("resourceVersion".into(), r.resource_version.to_string().into());
    if let Some(c) = r.continue_token {
        md.insert("continue".into(), c.into());
    }
    if let Some(rem) = r.remaining {
        md.insert("remainingItemCount".into(), rem.into());
    }
    let items: Vec<Value> = r
        .items
        .into_iter()
        .map(|mut o| {
            if !def.is_custom()
                && let Some(m) = o.as_object_mut()
            {
                m.remove("kind");
                m.remove("apiVersion");
            }
            o
        })
        .collect();
    let mut m = Map::new();
    let (first, second) = if def.is_custom() {
        (("apiVersion", def.api_version()), ("kind", def.list_kind.clone()))
    } else {
        (("kind", def.list_kind.clone()), ("apiVersion", def.api_version()))
    };
    m.insert(first.0.into(), first.1.into());
    m.insert(second.0.into(), second.1.into());
    m.insert("metadata".into(), Value::Object(md));
    m.insert("items".into(), Value::Array(items));
    Value::Object(m)
}

/// Shared handle type used by callers that keep a def across awaits.
pub type Def = Arc<ResourceDef>;
