//! The options of the verbs, as the API front parses them from a request and the cluster's own
//! components set them (metav1's CreateOptions, UpdateOptions and PatchOptions as `WriteOpts`,
//! DeleteOptions, ListOptions): plain data below `ops`, which re-exports them, so the steps of
//! a write (`patching`) read them without calling back into `ops`.

use crate::errors::{ApiError, ApiResult};
use crate::meta;
use crate::registry::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use serde_json::Value;

/// `fieldValidation`: what to do with fields the schema does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(v: Option<&str>) -> ApiResult<Self> {
        match v {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other:?}; supported values: \"Ignore\", \"Warn\", \"Strict\""
            ))),
        }
    }
}

/// Options of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    pub dry_run: bool,
    pub field_manager: String,
    pub field_validation: FieldValidation,
    pub subresource: Option<String>,
    /// Server-side apply: take ownership of conflicting fields.
    pub force: bool,
    /// This write is a server-side apply (which records field ownership itself).
    pub is_apply: bool,
    /// Written by the cluster itself (controllers, bootstrap): well-formed JSON of the kind's
    /// types, so the decoder's type checks are skipped.
    pub trusted: bool,
    /// For an update or patch whose caller may not `create`: the 403 to answer should the write
    /// create the object.
    pub create_denied: Option<ApiError>,
    /// Who writes (admission policies see it); `None` for the cluster's own writes.
    pub user: Option<crate::auth::rbac::UserInfo>,
}

impl WriteOpts {
    pub fn system(manager: &str) -> Self {
        WriteOpts { field_manager: manager.to_string(), trusted: true, ..Default::default() }
    }
}

/// Selectors and paging of a list or watch.
#[derive(Debug, Clone, Default)]
pub struct ListOpts {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

impl ListOpts {
    /// Parse the selectors, rejecting field labels the kind does not support.
    pub fn parse(def: &ResourceDef, label_selector: Option<&str>, field_selector: Option<&str>) -> ApiResult<Self> {
        let labels = match label_selector {
            Some(s) => LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?,
            None => LabelSelector::everything(),
        };
        let fields = match field_selector {
            Some(s) => FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?,
            None => FieldSelector::default(),
        };
        for r in fields.requirements() {
            if def.field_label_path(&r.field).is_none() {
                return Err(ApiError::bad_request(def.unsupported_field_label(&r.field)));
            }
        }
        Ok(ListOpts { labels, fields, limit: None, continue_token: None })
    }

    /// Does a stored object match the selectors?
    pub fn matches(&self, def: &ResourceDef, stored: &Value) -> bool {
        if !self.labels.matches(meta::labels(stored)) {
            return false;
        }
        if self.fields.requirements().is_empty() {
            return true;
        }
        self.fields.matches(&|label: &str| {
            let path = def.field_label_path(label)?;
            if def.is_custom() {
                return meta::field_string(stored, &path);
            }
            // Built-in kinds render every field label, unset ones as their Go zero value.
            let (read_at, zero) = crate::selector::field_label_zero(&def.group, &def.plural, label);
            Some(meta::field_string(stored, read_at.unwrap_or(&path)).unwrap_or_else(|| zero.to_string()))
        })
    }
}

/// The body of a DELETE (`DeleteOptions`).
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    pub propagation_policy: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub grace_period_seconds: Option<i64>,
    pub dry_run: bool,
    /// The deprecated `orphanDependents`, as sent: `false` makes a delete that waits answer 202.
    pub orphan_dependents: Option<bool>,
    /// Who deletes (admission policies see it); `None` for the cluster's own deletes.
    pub user: Option<crate::auth::rbac::UserInfo>,
}

impl DeleteOpts {
    pub fn from_body(body: Option<&Value>) -> ApiResult<Self> {
        let mut o = DeleteOpts::default();
        let Some(b) = body else { return Ok(o) };
        if !b.is_object() {
            return Err(ApiError::bad_request("the body of a delete must be a DeleteOptions object"));
        }
        o.propagation_policy = b.get("propagationPolicy").and_then(Value::as_str).map(str::to_string);
        o.orphan_dependents = b.get("orphanDependents").and_then(Value::as_bool);
        if o.propagation_policy.is_none()
            && let Some(orphan) = o.orphan_dependents
        {
            o.propagation_policy = Some(if orphan { "Orphan" } else { "Background" }.to_string());
        }
        o.precondition_uid = b.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string);
        o.precondition_rv = b.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_string);
        o.grace_period_seconds = b.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.dry_run = b.get("dryRun").and_then(Value::as_array).is_some_and(|a| a.iter().any(|v| v == "All"));
        Ok(o)
    }
}
