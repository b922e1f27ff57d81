//! Validation and normalization of every object written: pruning of unknown fields, defaulting,
//! and validation, for built-in kinds (their schemas and the apiserver's rules) and custom
//! resources (their CRD's schema and CEL rules).

pub mod cel;
pub mod structural;

use crate::names;

use crate::cluster::Cluster;
use crate::field::{FieldError, Path};
use crate::registry::ResourceDef;
use serde_json::Value;

/// Drop fields the kind's schema does not declare; return their paths (for `fieldValidation`).
pub fn prune(def: &ResourceDef, obj: &mut Value) -> Vec<String> {
    match &def.schema {
        Some(s) => structural::prune(obj, s.schema()),
        None => vec![],
    }
}

/// Apply the kind's defaults.
pub fn default(def: &ResourceDef, obj: &mut Value) {
    if def.is_custom() {
        if let Some(s) = &def.schema {
            structural::apply_defaults(obj, s.schema());
        }
    } else {
        crate::builtin::defaults::apply_defaults(&def.group, &def.kind, obj);
        if def.group == "apiextensions.k8s.io" && def.kind == "CustomResourceDefinition" {
            crate::crd::apply_defaults(obj);
        }
    }
}

/// What the real server rejects while decoding a built-in object (bad quantities, bad base64,
/// values of the wrong type): a 400 with the decoder's message.
pub fn decode_check(def: &ResourceDef, obj: &Value) -> Result<(), String> {
    if def.is_custom() {
        return Ok(());
    }
    crate::builtin::validate::decode_check(&def.group, &def.kind, obj)?;
    if let Some(s) = &def.schema {
        let type_errors: Vec<String> = structural::validate(obj, s.schema())
            .into_iter()
            .filter(|e| e.detail.contains(" must be of type "))
            .map(|e| e.detail)
            .collect();
        if !type_errors.is_empty() {
            return Err(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: {}",
                type_errors.join(", "),
                kind = def.kind,
                v = def.version
            ));
        }
    }
    Ok(())
}

/// Every validation error of an object about to be written (`old` on update).
pub fn validate(_cl: &Cluster, def: &ResourceDef, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let meta_path = Path::new("metadata");
    let empty = Value::Object(Default::default());
    let meta = obj.get("metadata").unwrap_or(&empty);
    let mut errs = vec![];
    if def.is_custom() {
        errs.extend(names::validate_object_meta(meta, def.namespaced, def.name_rule, &meta_path));
        if let Some(old) = old {
            let old_meta = old.get("metadata").unwrap_or(&empty);
            errs.extend(names::validate_object_meta_update(meta, old_meta, &meta_path));
        }
        if let Some(s) = &def.schema {
            match old {
                Some(old) => errs.extend(structural::validate_update(obj, old, s.schema())),
                None => errs.extend(structural::validate(obj, s.schema())),
            }
            // CEL rules run unless an error makes their input meaningless, as upstream.
            match cel::blocking_error(&errs) {
                Some(e) => errs.push(e),
                None => errs.extend(cel::validate(obj, old, s.schema())),
            }
        }
    } else {
        // The built-in validation includes the object meta checks with the kind's name rule.
        errs.extend(crate::builtin::validate::validate(&def.group, &def.kind, obj, old));
        // The admission policy kinds' own checks compile their CEL, so they live with the
        // policy evaluator rather than among the built-in rules.
        match (def.group.as_str(), def.kind.as_str()) {
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
                errs.extend(crate::admission::policy::validate_policy(obj))
            }
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
                errs.extend(crate::admission::policy::validate_binding(obj))
            }
            _ => {}
        }
        if def.group == "apiextensions.k8s.io" && def.kind == "CustomResourceDefinition" {
            errs.extend(crate::crd::validate(obj, old));
        }
    }
    errs
}
