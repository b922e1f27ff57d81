//! The schema half of validation, as apiextensions-apiserver implements it: structural schemas
//! (`structural`: pruning of unknown fields, defaulting, OpenAPI validation, and the checks of
//! a CRD's schemas) and CEL rules (`cel`: `x-kubernetes-validations`). Custom resources are
//! validated against their CRD's schema, built-in kinds against theirs; which of these checks,
//! and which of the apiserver's built-in rules, apply to a kind is decided per kind in `hooks`.
//! A leaf of the request path: it knows schemas and objects, nothing of the cluster.

pub mod cel;
pub mod structural;
