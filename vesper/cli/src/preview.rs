//! What the commands read off a preview: its phase, its Ready condition, its expiry; and the
//! requests every command makes (get, with a clear "not found").

use crate::client::{Previews, Target};
use crate::error::{Error, Result};
use clikit::apierror::status;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use vesper_api::{Phase, PreviewEnvironment};

/// The field manager of every write vesperctl makes.
pub const MANAGER: &str = "vesperctl";

/// `previewenvironment.vesper.eventide.dev/NAME`, as kubectl names objects (`-o name`).
pub fn resource_name(name: &str) -> String {
    format!("previewenvironment.{}/{name}", vesper_api::GROUP)
}

pub fn phase(pe: &PreviewEnvironment) -> Option<Phase> {
    pe.status.as_ref().and_then(|s| s.phase)
}

pub fn condition<'a>(pe: &'a PreviewEnvironment, type_: &str) -> Option<&'a Condition> {
    pe.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

/// The status describes the current spec (the operator has seen the latest generation).
pub fn observed(pe: &PreviewEnvironment) -> bool {
    let observed = pe.status.as_ref().and_then(|s| s.observed_generation).unwrap_or(0);
    observed >= pe.metadata.generation.unwrap_or(0)
}

/// When the preview expires: the operator's `status.expiresAt`, else creation time plus TTL.
pub fn expires_at(pe: &PreviewEnvironment) -> Option<Timestamp> {
    if let Some(t) = pe.status.as_ref().and_then(|s| s.expires_at.as_ref()).filter(|_| observed(pe)) {
        return Some(t.0);
    }
    let created = pe.metadata.creation_timestamp.as_ref()?.0;
    let ttl = pe.ttl().ok()?;
    created.checked_add(SignedDuration::try_from(ttl.duration()).ok()?).ok()
}

/// "Pending: RollingOut: rolling out x: 0 of 1 pods ready": the phase and what the Ready
/// condition says.
pub fn summary(pe: &PreviewEnvironment) -> String {
    let phase = phase(pe).map(|p| p.to_string()).unwrap_or_else(|| "no status yet (waiting for the operator)".into());
    let deleting = if pe.metadata.deletion_timestamp.is_some() { ", being deleted" } else { "" };
    match condition(pe, "Ready") {
        Some(c) if !c.reason.is_empty() || !c.message.is_empty() => {
            format!("{phase}{deleting}: {}: {}", c.reason, c.message)
        }
        _ => format!("{phase}{deleting}"),
    }
}

/// The preview, or a failure saying it does not exist in the namespace.
pub async fn get(t: &Target, name: &str) -> Result<PreviewEnvironment> {
    match t.previews().get(name).await {
        Ok(pe) => Ok(pe),
        Err(e) => Err(request_error(t, name, "reading", e)),
    }
}

/// An error of a request about one preview: "not found" and "no such kind" said plainly.
pub fn request_error(t: &Target, name: &str, doing: &str, e: kube::Error) -> Error {
    match status(&e) {
        Some(s) if s.code == 404 => missing(t, name, s),
        _ => Error::kube(format!("{doing} preview {name:?} in namespace {}", t.namespace))(e),
    }
}

/// What a 404 means: the preview, its namespace, or the kind itself is missing.
pub fn missing(t: &Target, name: &str, s: &kube::core::Status) -> Error {
    match s.details.as_ref() {
        Some(d) if d.kind == "namespaces" => Error::Failed(format!(
            "namespace {:?} does not exist (pick another with -n, or create it with `kubectl create namespace {}`)",
            d.name, d.name
        )),
        Some(d) if !d.name.is_empty() && d.name == name => not_found(t, name),
        _ => crd_missing(t),
    }
}

/// The API server does not serve the kind.
pub fn crd_missing(t: &Target) -> Error {
    Error::Failed(format!(
        "the API server at {} does not serve previewenvironments.{}: install Vesper's CRD first (kubectl apply -f deploy/vesper/crd.yaml)",
        t.server,
        vesper_api::GROUP
    ))
}

pub fn not_found(t: &Target, name: &str) -> Error {
    Error::Failed(format!(
        "preview {name:?} not found in namespace {} (list them with `vesperctl list`, or pick another namespace with -n)",
        t.namespace
    ))
}
