//! Compare, then write, and restore everything: the objects a controller owns end equal to what
//! it builds plus the API server's own defaults, and are written only when they are not.
//!
//! # The rule
//!
//! An owned object's content (every top-level field but `metadata` and `status`) is the
//! operator's alone: a field anyone else adds or changes is removed or put back by the next
//! reconcile. Of the metadata, the operator owns its `ownerReferences`, the labels and annotations
//! it sets, every label or annotation under a prefix it uses (`vesper.eventide.dev/...`,
//! `pod-security.kubernetes.io/...`), and, for an Ingress, all annotations (they configure the
//! ingress controller, see [`owns_all_annotations`]). Other labels and annotations, and other
//! finalizers, belong to whoever added them and are left alone.
//!
//! # How a server default is told from a hand edit
//!
//! Not by a list of defaults kept here (it would drift from the server), but by asking the server
//! (ADR docs/vesper/adr/0008-restore-with-server-dry-run.md):
//!
//! 1. The live object is read (as a `DynamicObject`, so fields newer than our client types are
//!    seen too).
//! 2. If this process verified the same object (UID and `resourceVersion`) against the same
//!    desired object (a digest of it) before, it is up to date: nothing more is sent.
//! 3. Otherwise the **replacement** is built: the desired object, with the live object's foreign
//!    labels, annotations and finalizers, and its UID as a precondition (no `resourceVersion`:
//!    the write is unconditional, see [`replacement`]).
//! 4. The replacement is sent as a **server-side dry run** (`PUT ?dryRun=All`): the answer is the
//!    object as it would be with exactly what the operator builds, defaulted by the server (and
//!    keeping what the server allocated, such as a Service's cluster IP). When it equals the live
//!    object ([`first_change`]), nothing is written and the pair is remembered for step 2;
//!    otherwise the replacement is written (`PUT`), which puts back what was changed and removes
//!    what was added, and the first difference says what.
//!
//! A reconcile that changes nothing therefore sends one read (and, the first time this process
//! sees an object or after someone else wrote it, one dry run); the object's `resourceVersion`
//! stays put. With a watch cache of the object ([`ensure_cached`]), step 2 is answered from the
//! cached metadata and such a reconcile sends nothing at all. New objects are created with server-side apply (`PATCH` with
//! `application/apply-patch+yaml`, `force=true`, the caller's field manager).
//!
//! A write that undoes someone else's change is [`Outcome::Restored`], with the first field that
//! differed and the field manager that last wrote the object (from `metadata.managedFields`), so
//! that the operator can record an Event saying what it restored.
//!
//! What the comparison cannot see: values the server rewrites into another spelling (a quantity
//! `1000m` is stored as `1`): write them in canonical form, or every reconcile writes.
//!
//! [`WriteCounter`] counts outcomes (and exports them as a Prometheus counter) so that tests can
//! prove that a reconcile of an up-to-date object writes nothing, and holds the verified pairs of
//! step 2 ([`Verified`]); callers drop them with [`Verified::forget_namespace`] or
//! [`Verified::forget`] when the objects go.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// A kind the compare-then-write handles: a typed Kubernetes resource that serializes both ways.
pub trait Object: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned {}
impl<T> Object for T where T: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned {}

/// An [`Object`] that lives in a namespace (what an operator makes for its owner).
pub trait NamespacedObject: Object + Resource<Scope = kube::core::NamespaceResourceScope> {}
impl<T> NamespacedObject for T where T: Object + Resource<Scope = kube::core::NamespaceResourceScope> {}

/// What [`ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The object did not exist and was created.
    Created,
    /// The object differed from a new desired state and was written.
    Updated,
    /// Someone else had changed the object; it was written back to the desired state.
    Restored,
    /// The object already matched: nothing was written.
    Unchanged,
    /// The object was deleted (recorded by callers that delete; [`ensure`] never deletes).
    Deleted,
}

impl Outcome {
    /// `created`, `updated`, `restored`, `unchanged` or `deleted` (the metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Restored => "restored",
            Outcome::Unchanged => "unchanged",
            Outcome::Deleted => "deleted",
        }
    }

    /// Whether a write was sent.
    pub fn wrote(self) -> bool {
        self != Outcome::Unchanged
    }
}

/// What [`ensure_with`] did, and what it found.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    pub outcome: Outcome,
    /// `Kind namespace/name` of the object.
    pub object: String,
    /// The object (apiVersion, kind, namespace, name, and its UID when it exists), for an Event's
    /// `related` field.
    pub reference: k8s_openapi::api::core::v1::ObjectReference,
    /// For a write to an existing object: the first field that differed and how
    /// (`.spec.externalIPs was added`).
    pub detail: Option<String>,
    /// For [`Outcome::Restored`]: the field manager that last wrote the object before the
    /// restore, when the server recorded one (`kubectl-edit`).
    pub changed_by: Option<String>,
    /// The live object was deleted first because [`Guard::recreate`] said a field that cannot be
    /// changed must (the outcome is then [`Outcome::Created`]).
    pub recreated: bool,
}

/// What [`ensure_guarded`] checks on the live object it reads, before writing over it.
pub struct Guard<'a> {
    /// Whether an existing object of the desired name is the caller's (its labels, its owner
    /// references). One that is not is left untouched: [`Error::NotOwned`].
    pub is_ours: &'a (dyn Fn(&kube::api::ObjectMeta) -> bool + Send + Sync),
    /// Whether the live object must be deleted and created again because a field that cannot be
    /// changed differs (a RoleBinding's `roleRef`). The deletion has the live UID as a
    /// precondition.
    pub recreate: &'a (dyn Fn(&DynamicObject) -> bool + Send + Sync),
}

impl Guard<'_> {
    /// Any existing object may be written over, and nothing is recreated.
    pub const ANY: Guard<'static> = Guard { is_ours: &|_| true, recreate: &|_| false };
}

impl Applied {
    /// An Event note for a restore: `Service ns/app: .spec.externalIPs was added (by kubectl-edit); restored`.
    /// `None` for any other outcome.
    pub fn restore_note(&self) -> Option<String> {
        if self.outcome != Outcome::Restored {
            return None;
        }
        let detail = self.detail.as_deref().unwrap_or("it differed");
        let by = self.changed_by.as_deref().map(|m| format!(" (by {m})")).unwrap_or_default();
        Some(format!("{}: {detail}{by}; restored to what the operator builds", self.object))
    }
}

/// Metadata fields the server sets; never compared, never applied.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// The metadata fields an owned object's comparison covers; the rest is the server's.
const COMPARED_METADATA: &[&str] = &["labels", "annotations", "ownerReferences", "finalizers"];

/// Whether every annotation of this kind is the operator's: an Ingress's annotations configure
/// the ingress controller (`nginx.ingress.kubernetes.io/server-snippet` runs configuration
/// there), so none may be added by hand.
pub fn owns_all_annotations(api_version: &str, kind: &str) -> bool {
    kind == "Ingress" && api_version.starts_with("networking.k8s.io/")
}

/// The desired objects this process has seen the live object match, by object: the UID and
/// `resourceVersion` it had and the digest of the desired object. Clones share the map.
///
/// While the live object keeps that `resourceVersion` and the desired object that digest,
/// [`ensure_with`] needs no dry run. Entries are dropped by [`Verified::forget_namespace`] and
/// [`Verified::forget`] (callers do so when the owner goes); a stale entry costs nothing but
/// memory, since a recreated object has another UID.
#[derive(Clone, Debug, Default)]
pub struct Verified {
    map: Arc<Mutex<HashMap<ObjectKey, Stamp>>>,
}

/// An object's identity in [`Verified`]: kind, namespace (empty for cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) uid: String,
    pub(crate) resource_version: String,
    pub(crate) digest: u64,
    /// `metadata.generation`, and a digest of the compared metadata (labels, annotations, owner
    /// references, finalizers): for the kinds of [`TRACKS_GENERATION`], a new resourceVersion
    /// with these unchanged is a status update, which leaves what the operator owns alone.
    pub(crate) generation: Option<i64>,
    pub(crate) meta_digest: u64,
    /// [`content_digest`] of the object, when known: a cache that holds the whole object (its
    /// status trimmed) tells a status-only update from a change by it.
    pub(crate) content: Option<u64>,
}

/// Kinds whose `metadata.generation` moves on every change but to metadata and status (their
/// status is written by a workload controller many times per rollout): a verified object of
/// these kinds stays verified across status updates.
pub const TRACKS_GENERATION: &[&str] = &["Deployment", "StatefulSet"];

impl Stamp {
    /// Whether `other` (the same object later, or in a cache) still holds what this stamp
    /// verified: the same UID and resourceVersion, or for a kind of [`TRACKS_GENERATION`] the
    /// same generation and compared metadata.
    /// Or, when both know the content (a cache of whole objects), the same content and
    /// compared metadata: only the status moved.
    fn still_holds(&self, other: &Stamp, kind: &str) -> bool {
        self.uid == other.uid
            && (self.resource_version == other.resource_version
                || (TRACKS_GENERATION.contains(&kind)
                    && self.generation.is_some()
                    && self.generation == other.generation
                    && self.meta_digest == other.meta_digest)
                || (self.content.is_some() && self.content == other.content && self.meta_digest == other.meta_digest))
    }
}

impl Verified {
    fn get(&self, key: &ObjectKey) -> Option<Stamp> {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    fn set(&self, key: ObjectKey, stamp: Stamp) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).insert(key, stamp);
    }

    /// Every remembered object and its stamp, sorted by object (for [`crate::checkpoint`]).
    pub(crate) fn entries(&self) -> Vec<(ObjectKey, Stamp)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<(ObjectKey, Stamp)> = map.iter().map(|(k, s)| (k.clone(), s.clone())).collect();
        drop(map);
        all.sort_by(|a, b| (&a.0.kind, &a.0.namespace, &a.0.name).cmp(&(&b.0.kind, &b.0.namespace, &b.0.name)));
        all
    }

    /// Remember `stamp` for `key` unless a stamp is remembered already (what this process
    /// verified itself is at least as new). Whether it was taken.
    pub(crate) fn insert_missing(&self, key: ObjectKey, stamp: Stamp) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(stamp);
                true
            }
        }
    }

    /// Whether `meta` (a cached or freshly read object) is the version of `key` this process
    /// last wrote or verified, whatever the desired object was: same UID and `resourceVersion`,
    /// or for a kind of [`TRACKS_GENERATION`] only its status changed since.
    pub fn is_current(&self, key: &ObjectKey, meta: &kube::api::ObjectMeta) -> bool {
        let Some(seen) = stamp_of(meta, 0) else { return false };
        self.get(key).is_some_and(|s| s.still_holds(&seen, &key.kind))
    }

    /// Forget every object in `namespace`, and the Namespace object of that name.
    pub fn forget_namespace(&self, namespace: &str) {
        self.forget(|k| k.namespace == namespace || (k.kind == "Namespace" && k.name == namespace));
    }

    /// Forget the objects `which` selects.
    pub fn forget(&self, which: impl Fn(&ObjectKey) -> bool) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|k, _| !which(k));
        if map.capacity() > 4 * map.len().max(16) {
            map.shrink_to_fit();
        }
    }

    /// How many objects are remembered.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the caller knows of the live object before [`ensure_cached`] looks.
#[derive(Clone, Copy, Debug, Default)]
pub enum Hint<'a> {
    /// Nothing: the live object is read.
    #[default]
    Unknown,
    /// Its metadata as a watch cache holds it: when it is the version verified before, nothing
    /// is sent; otherwise the live object is read.
    Cached(&'a kube::api::ObjectMeta),
    /// The whole object as a watch cache holds it (its status may be trimmed): its metadata and
    /// [`content_digest`]. Besides what [`Hint::Cached`] allows, a version whose content and
    /// compared metadata are those verified (only its status moved) needs no request either.
    Whole(&'a kube::api::ObjectMeta, u64),
    /// It cannot exist: its namespace was created by this very pass, so no one else has had
    /// the chance to make an object there (a watch cache's "not there" is no such proof: it may
    /// lag). It is created without a read first; should one exist after all, the write fails
    /// with a conflict and the next attempt reads it, as always.
    New,
}

impl<'a> From<Option<&'a kube::api::ObjectMeta>> for Hint<'a> {
    fn from(meta: Option<&'a kube::api::ObjectMeta>) -> Self {
        meta.map_or(Hint::Unknown, Hint::Cached)
    }
}

/// Make sure the live object matches `desired` (see the [module documentation](self)), with no
/// memory of earlier checks: a dry run is sent whenever the fields `desired` sets all match.
pub async fn ensure<K>(api: &Api<K>, desired: &K, field_manager: &str) -> Result<Outcome>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    Ok(ensure_with(api, desired, field_manager, &Verified::default()).await?.outcome)
}

/// Make sure the live object matches `desired`, writing it (as `field_manager`) only when it does
/// not, and remembering verified objects in `verified`. See the [module documentation](self).
/// `desired` needs `metadata.name`; its namespace is the `api`'s.
pub async fn ensure_with<K>(api: &Api<K>, desired: &K, field_manager: &str, verified: &Verified) -> Result<Applied>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    ensure_guarded(api, desired, field_manager, verified, &Guard::ANY).await
}

/// [`ensure_with`], checking the live object it reads with `guard` first: the ownership check
/// and the compare-then-write share one read (an owner check of its own would read the object
/// a second time).
pub async fn ensure_guarded<K>(
    api: &Api<K>,
    desired: &K,
    field_manager: &str,
    verified: &Verified,
    guard: &Guard<'_>,
) -> Result<Applied>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    ensure_cached(api, desired, field_manager, verified, guard, Hint::Unknown).await
}

/// [`ensure_guarded`], with what a watch cache holds of the live object (its metadata) as a hint:
/// when the cached object is the caller's and has the UID and `resourceVersion` this process
/// verified against the same desired object, it is [`Outcome::Unchanged`] and **no request** is
/// sent. Otherwise (no hint, another version, another desired object) the live object is read as
/// [`ensure_guarded`] reads it.
///
/// A cache is behind the API server, never ahead: a change it has not seen yet makes this answer
/// "unchanged" once more, and the watch event that brings the change to the cache is what
/// triggers the reconcile that restores it.
pub async fn ensure_cached<K>(
    api: &Api<K>,
    desired: &K,
    field_manager: &str,
    verified: &Verified,
    guard: &Guard<'_>,
    hint: Hint<'_>,
) -> Result<Applied>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let (cached, content) = match hint {
        Hint::Cached(meta) => (Some(meta), None),
        Hint::Whole(meta, content) => (Some(meta), Some(content)),
        _ => (None, None),
    };
    let body = apply_body(desired)?;
    let name = desired
        .meta()
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::invalid("metadata.name", "the desired object needs a name"))?;
    let kind = K::kind(&()).into_owned();
    let api_version = K::api_version(&()).into_owned();
    let namespace = api.namespace().unwrap_or_default().to_string();
    let what = if namespace.is_empty() { format!("{kind} {name}") } else { format!("{kind} {namespace}/{name}") };
    if field_manager.is_empty() {
        return Err(Error::invalid("field manager", "must not be empty: use the controller's name"));
    }
    let key = ObjectKey { kind: kind.clone(), namespace: namespace.clone(), name: name.to_string() };
    let digest = digest_of(&body);
    if let Some(meta) = cached
        && (guard.is_ours)(meta)
        && let Some(stamp) = stamp_of(meta, digest).map(|s| Stamp { content, ..s })
        && verified.get(&key).is_some_and(|v| v.digest == digest && v.still_holds(&stamp, &kind))
    {
        tracing::trace!(object = %what, "the cached object is the one verified: no request");
        return Ok(Applied {
            outcome: Outcome::Unchanged,
            object: what,
            reference: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(api_version),
                kind: Some(kind),
                namespace: Some(namespace).filter(|n| !n.is_empty()),
                name: Some(name.to_string()),
                uid: Some(stamp.uid),
                ..Default::default()
            },
            detail: None,
            changed_by: None,
            recreated: false,
        });
    }

    let ar = ApiResource::erase::<K>(&());
    let client: Client = api.clone().into();
    let dynamic: Api<DynamicObject> =
        if namespace.is_empty() { Api::all_with(client, &ar) } else { Api::namespaced_with(client, &namespace, &ar) };
    let target = Target { api, dynamic: &dynamic, name, what: &what, field_manager, key, digest };
    // Another writer (a workload controller updating status, moving the resourceVersion between
    // the read and the write) makes the write fail with a conflict: read again and redo, as
    // client-go's RetryOnConflict does.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let absent = attempt == 1 && matches!(hint, Hint::New);
        match ensure_once(&target, &body, &api_version, &kind, verified, guard, absent).await {
            Err(Error::Kube { source: kube::Error::Api(s), .. }) if s.code == 409 && attempt < CONFLICT_ATTEMPTS => {
                tracing::debug!(object = %what, attempt, "conflict: reading again");
            }
            other => return other,
        }
    }
}

/// How many times [`ensure_with`] reads and tries again after a write conflict.
const CONFLICT_ATTEMPTS: u32 = 5;

/// What one [`ensure_with`] attempt works on.
struct Target<'a, K> {
    api: &'a Api<K>,
    dynamic: &'a Api<DynamicObject>,
    name: &'a str,
    what: &'a str,
    field_manager: &'a str,
    key: ObjectKey,
    digest: u64,
}

async fn ensure_once<K>(
    t: &Target<'_, K>,
    body: &Value,
    api_version: &str,
    kind: &str,
    verified: &Verified,
    guard: &Guard<'_>,
    absent: bool,
) -> Result<Applied>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let Target { api, dynamic, name, what, field_manager, digest, .. } = *t;
    let key = t.key.clone();
    let reference = |uid: Option<&String>| k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(api_version.to_string()),
        kind: Some(kind.to_string()),
        namespace: Some(t.key.namespace.clone()).filter(|n| !n.is_empty()),
        name: Some(name.to_string()),
        uid: uid.cloned(),
        ..Default::default()
    };
    let applied = |outcome, detail, changed_by, uid: Option<&String>| Applied {
        outcome,
        object: what.to_string(),
        reference: reference(uid),
        detail,
        changed_by,
        recreated: false,
    };
    let mut live =
        if absent { None } else { dynamic.get_opt(name).await.map_err(|e| Error::kube(format!("get {what}"), e))? };
    let mut recreated = false;
    if let Some(l) = &live {
        if !(guard.is_ours)(&l.metadata) {
            return Err(Error::NotOwned { object: what.to_string() });
        }
        if (guard.recreate)(l) {
            let dp = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions { uid: l.metadata.uid.clone(), resource_version: None }),
                ..Default::default()
            };
            tracing::info!(object = %what, field_manager, "a field that cannot be changed differs: deleting to create it again");
            match dynamic.delete(name, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(Error::kube(format!("delete {what}"), e)),
            }
            live = None;
            recreated = true;
        }
    }
    let Some(live) = live else {
        tracing::info!(object = %what, field_manager, "absent: creating");
        let created = if absent {
            // Not read first: a create, which fails (409, read on the next attempt) where an
            // apply would take over an object that exists after all.
            let object: DynamicObject = serde_json::from_value(body.clone())
                .map_err(|source| Error::Json { action: format!("building {what}"), source })?;
            let params = PostParams { dry_run: false, field_manager: Some(field_manager.to_string()) };
            let created =
                dynamic.create(&params, &object).await.map_err(|e| Error::kube(format!("create {what}"), e))?;
            serde_json::to_value(&created)
        } else {
            let params = PatchParams::apply(field_manager).force();
            let created = api
                .patch(name, &params, &Patch::Apply(body))
                .await
                .map_err(|e| Error::kube(format!("apply {what}"), e))?;
            serde_json::to_value(&created)
        }
        .map_err(|source| Error::Json { action: format!("serializing the created {what}"), source })?;
        let stamp = stamp_with_content(&created, digest);
        let uid = stamp.as_ref().map(|s| s.uid.clone());
        if let Some(stamp) = stamp {
            verified.set(key, stamp);
        }
        return Ok(Applied { recreated, ..applied(Outcome::Created, None, None, uid.as_ref()) });
    };
    let live_json = serde_json::to_value(&live)
        .map_err(|source| Error::Json { action: format!("serializing live {what}"), source })?;
    let Some(live_stamp) = stamp_with_content(&live_json, digest) else {
        return Err(Error::invalid("live object", format!("{what} has no uid or resourceVersion")));
    };
    let prior = verified.get(&key);
    if let Some(p) = prior.as_ref().filter(|p| p.digest == digest && p.still_holds(&live_stamp, kind)) {
        tracing::debug!(object = %what, "verified before, not written");
        if p.resource_version != live_stamp.resource_version {
            // Only its status moved: the newer version is the verified one now.
            verified.set(key.clone(), live_stamp.clone());
        }
        return Ok(applied(Outcome::Unchanged, None, None, Some(&live_stamp.uid)));
    }
    let replacement = replacement(body, &live_json, owns_all_annotations(api_version, kind));
    let replacement: DynamicObject = serde_json::from_value(replacement)
        .map_err(|source| Error::Json { action: format!("building the replacement of {what}"), source })?;

    let params = PostParams { dry_run: true, field_manager: Some(field_manager.to_string()) };
    let dry = dynamic
        .replace(name, &params, &replacement)
        .await
        .map_err(|e| Error::kube(format!("dry-run update of {what}"), e))?;
    let dry = serde_json::to_value(&dry)
        .map_err(|source| Error::Json { action: format!("serializing the dry run of {what}"), source })?;
    let Some(detail) = first_change(&dry, &live_json) else {
        tracing::debug!(object = %what, "matches its server-side dry run, not written");
        let uid = live_stamp.uid.clone();
        verified.set(key, live_stamp);
        return Ok(applied(Outcome::Unchanged, None, None, Some(&uid)));
    };
    // Whose change is it? The operator's own when the desired object changed since this process
    // last wrote or verified it. Without that memory (after a restart): someone else's when every
    // field the operator sets still matches and the live object has more, unless it is a field
    // the operator applied before and no longer sets (managedFields); unknown otherwise.
    let restored = match &prior {
        Some(p) if p.uid == live_stamp.uid => p.digest == digest,
        _ => {
            first_difference(body, &live_json).is_none()
                && first_owned_not_desired(&live_json, field_manager, body).is_none()
        }
    };
    let outcome = if restored { Outcome::Restored } else { Outcome::Updated };
    let first_path = detail.split(" was ").next().unwrap_or_default();
    let changed_by = if restored { last_writer(&live_json, field_manager, first_path) } else { None };
    tracing::info!(object = %what, field_manager, outcome = outcome.as_str(), "{detail}: writing");
    let params = PostParams { dry_run: false, field_manager: Some(field_manager.to_string()) };
    let written =
        dynamic.replace(name, &params, &replacement).await.map_err(|e| Error::kube(format!("update {what}"), e))?;
    let written = serde_json::to_value(&written)
        .map_err(|source| Error::Json { action: format!("serializing the written {what}"), source })?;
    let stamp = stamp_with_content(&written, digest);
    let uid = stamp.as_ref().map(|s| s.uid.clone());
    if let Some(stamp) = stamp {
        verified.set(key, stamp);
    }
    Ok(applied(outcome, Some(detail), changed_by, uid.as_ref()))
}

fn stamp_of(meta: &kube::api::ObjectMeta, digest: u64) -> Option<Stamp> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&meta.labels, &meta.annotations, &meta.finalizers).hash(&mut h);
    for o in meta.owner_references.iter().flatten() {
        (&o.api_version, &o.kind, &o.name, &o.uid, o.controller, o.block_owner_deletion).hash(&mut h);
    }
    Some(Stamp {
        uid: meta.uid.clone()?,
        resource_version: meta.resource_version.clone()?,
        digest,
        generation: meta.generation,
        meta_digest: h.finish(),
        content: None,
    })
}

/// A digest of an object's content as JSON: everything but `metadata` and `status`, keys in
/// sorted order (the same object typed or dynamic, in whatever key order, digests the same).
/// Stable within a process. A watch cache of whole objects passes it with [`Hint::Whole`].
pub fn content_digest(object: &Value) -> u64 {
    fn feed(v: &Value, h: &mut std::collections::hash_map::DefaultHasher) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                '{'.hash(h);
                for k in keys {
                    k.hash(h);
                    feed(&m[k], h);
                }
                '}'.hash(h);
            }
            Value::Array(a) => {
                '['.hash(h);
                a.iter().for_each(|x| feed(x, h));
                ']'.hash(h);
            }
            other => other.to_string().hash(h),
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if let Value::Object(m) = object {
        let mut keys: Vec<&String> = m.keys().filter(|k| *k != "metadata" && *k != "status").collect();
        keys.sort();
        for k in keys {
            k.hash(&mut h);
            feed(&m[k], &mut h);
        }
    }
    h.finish()
}

/// The stamp of a live object read, written or created, with its content.
fn stamp_with_content(object: &Value, digest: u64) -> Option<Stamp> {
    let meta: kube::api::ObjectMeta = serde_json::from_value(object.get("metadata")?.clone()).ok()?;
    Some(Stamp { content: Some(content_digest(object)), ..stamp_of(&meta, digest)? })
}

/// A digest of the desired object, stable within a process.
fn digest_of(body: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.to_string().hash(&mut h);
    h.finish()
}

/// The object to write over `live`: `body` (what the operator builds), plus the live object's
/// labels, annotations and finalizers that are not the operator's, with the live UID as a
/// precondition. No `resourceVersion`: the write is unconditional, since what it writes does not
/// depend on the fields others change meanwhile (a workload controller writes status many times
/// during a rollout, and a precondition on it would conflict again and again).
pub fn replacement(body: &Value, live: &Value, all_annotations_owned: bool) -> Value {
    let mut out = body.clone();
    let Some(meta) = out.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| Value::Object(Map::new())))
    else {
        return out;
    };
    let Some(meta) = meta.as_object_mut() else { return out };
    if let Some(v) = live.pointer("/metadata/uid") {
        meta.insert("uid".into(), v.clone());
    }
    let foreign_labels = foreign(meta.get("labels"), live.pointer("/metadata/labels"));
    merge_into(meta, "labels", foreign_labels);
    if !all_annotations_owned {
        let foreign_annotations = foreign(meta.get("annotations"), live.pointer("/metadata/annotations"));
        merge_into(meta, "annotations", foreign_annotations);
    }
    let mut finalizers: Vec<Value> =
        live.pointer("/metadata/finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
    for f in meta.get("finalizers").and_then(Value::as_array).into_iter().flatten() {
        if !finalizers.contains(f) {
            finalizers.push(f.clone());
        }
    }
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    out
}

/// The live labels (or annotations) that are not the operator's: not set by it and not under a
/// prefix (`example.com/` of `example.com/key`) it uses.
fn foreign(desired: Option<&Value>, live: Option<&Value>) -> Map<String, Value> {
    let desired = desired.and_then(Value::as_object);
    let prefixes: Vec<&str> =
        desired.into_iter().flat_map(|m| m.keys()).filter_map(|k| k.split_once('/').map(|(p, _)| p)).collect();
    let mut out = Map::new();
    for (k, v) in live.and_then(Value::as_object).into_iter().flatten() {
        let ours =
            desired.is_some_and(|d| d.contains_key(k)) || k.split_once('/').is_some_and(|(p, _)| prefixes.contains(&p));
        if !ours {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

fn merge_into(meta: &mut Map<String, Value>, field: &str, extra: Map<String, Value>) {
    if extra.is_empty() {
        return;
    }
    let entry = meta.entry(field).or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    if let Some(m) = entry.as_object_mut() {
        for (k, v) in extra {
            m.entry(k).or_insert(v);
        }
    }
}

/// The differences between what the server would make of the desired object (`expected`, a dry
/// run) and the `live` object, over the content and the compared metadata, said the way an Event
/// says it (`.spec.externalIPs was added`; the first three, then `and N more`), or `None` when
/// they are equal.
pub fn first_change(expected: &Value, live: &Value) -> Option<String> {
    let mut found = Vec::new();
    let total = changes(expected, live, &mut found);
    if found.is_empty() {
        return None;
    }
    let mut text = found.join(", ");
    if total > found.len() {
        text.push_str(&format!(" and {} more", total - found.len()));
    }
    Some(text)
}

/// How many differences [`first_change`] names at most.
const NAMED_CHANGES: usize = 3;

/// Collect the first [`NAMED_CHANGES`] differences into `found`; returns how many there are.
fn changes(expected: &Value, live: &Value, found: &mut Vec<String>) -> usize {
    let empty = Map::new();
    let e = expected.as_object().unwrap_or(&empty);
    let l = live.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = e.keys().chain(l.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut total = 0;
    for k in keys {
        if matches!(k.as_str(), "apiVersion" | "kind" | "status") {
            continue;
        }
        if k == "metadata" {
            for m in COMPARED_METADATA {
                let ev = e.get("metadata").and_then(|v| v.get(*m));
                let lv = l.get("metadata").and_then(|v| v.get(*m));
                total += change_at(&format!(".metadata.{m}"), ev, lv, found);
            }
            continue;
        }
        total += change_at(&format!(".{k}"), e.get(k), l.get(k), found);
    }
    total
}

/// Record the differences under `path` (up to [`NAMED_CHANGES`] in all); returns their count.
fn change_at(path: &str, expected: Option<&Value>, live: Option<&Value>, found: &mut Vec<String>) -> usize {
    let present = |v: &&Value| !is_empty_value(v) || matches!(v, Value::Bool(_) | Value::Number(_));
    let mut note = |what: String| {
        if found.len() < NAMED_CHANGES {
            found.push(what);
        }
        1
    };
    match (expected.filter(present), live.filter(present)) {
        (None, None) => 0,
        (None, Some(_)) => note(format!("{path} was added")),
        (Some(_), None) => note(format!("{path} was removed")),
        (Some(Value::Object(e)), Some(Value::Object(l))) => {
            let mut keys: Vec<&String> = e.keys().chain(l.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().map(|k| change_at(&format!("{path}.{k}"), e.get(k), l.get(k), found)).sum()
        }
        (Some(Value::Array(e)), Some(Value::Array(l))) => {
            let mut n: usize = e
                .iter()
                .zip(l)
                .enumerate()
                .map(|(i, (ev, lv))| change_at(&format!("{path}[{i}]"), Some(ev), Some(lv), found))
                .sum();
            for i in e.len()..l.len() {
                n += change_at(&format!("{path}[{i}]"), None, l.get(i), found);
            }
            for i in l.len()..e.len() {
                n += change_at(&format!("{path}[{i}]"), e.get(i), None, found);
            }
            n
        }
        (Some(Value::Number(a)), Some(Value::Number(b))) if a.as_f64() == b.as_f64() => 0,
        (Some(e), Some(l)) if e == l => 0,
        (Some(_), Some(_)) => note(format!("{path} was changed")),
    }
}

/// The field manager, other than `ours`, that wrote the field at `path` (the first difference,
/// `.spec.template.spec.hostNetwork`): of the `managedFields` entries of the main resource, the
/// one that owns the longest leading part of the path, the newest among equals. Another
/// controller that wrote elsewhere meanwhile (a Deployment's revision annotation) is not named.
fn last_writer(live: &Value, ours: &str, path: &str) -> Option<String> {
    let segments: Vec<&str> =
        path.split('.').filter(|s| !s.is_empty()).map(|s| s.split('[').next().unwrap_or(s)).collect();
    let owned_depth = |fields: Option<&Value>| {
        let mut node = fields;
        let mut depth = 0;
        for seg in &segments {
            match node.and_then(|n| n.get(format!("f:{seg}"))) {
                Some(next) => {
                    depth += 1;
                    node = Some(next);
                }
                None => break,
            }
        }
        depth
    };
    live.pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .filter(|e| e.get("manager").and_then(Value::as_str).is_some_and(|m| m != ours))
        .filter(|e| e.get("subresource").and_then(Value::as_str).is_none_or(str::is_empty))
        .max_by_key(|e| {
            (owned_depth(e.get("fieldsV1")), e.get("time").and_then(Value::as_str).unwrap_or("").to_string())
        })
        .and_then(|e| e.get("manager").and_then(Value::as_str))
        .map(str::to_string)
}

/// The JSON written by [`ensure`]: `desired` without `status` and server-set metadata.
pub fn apply_body<K: Serialize>(desired: &K) -> Result<Value> {
    let mut v = serde_json::to_value(desired)
        .map_err(|source| Error::Json { action: "serializing the desired object".into(), source })?;
    let Some(obj) = v.as_object_mut() else {
        return Err(Error::invalid("desired object", "does not serialize to a JSON object"));
    };
    for field in ["apiVersion", "kind"] {
        if obj.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(Error::invalid(field, "server-side apply needs apiVersion and kind: set the type meta"));
        }
    }
    obj.remove("status");
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SERVER_METADATA {
            meta.remove(*f);
        }
    }
    Ok(v)
}

/// The first JSON path (`.spec.template.spec.containers[0].image`) where `desired` is not a
/// subset of `live`, or `None` when it is. See the [module documentation](self).
pub fn first_difference(desired: &Value, live: &Value) -> Option<String> {
    let mut path = String::new();
    if subset(desired, Some(live), &mut path) { None } else { Some(path_or_root(path)) }
}

fn path_or_root(p: String) -> String {
    if p.is_empty() { ".".to_string() } else { p }
}

/// Whether `d` is a subset of `l`; on `false`, `path` is where they differ.
fn subset(d: &Value, l: Option<&Value>, path: &mut String) -> bool {
    let l = match l {
        None | Some(Value::Null) => return is_empty_value(d),
        Some(l) => l,
    };
    match (d, l) {
        (Value::Object(dm), Value::Object(lm)) => {
            for (k, dv) in dm {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                if !subset(dv, lm.get(k), path) {
                    return false;
                }
                path.truncate(len);
            }
            true
        }
        (Value::Array(da), Value::Array(la)) => {
            if da.len() != la.len() {
                return false;
            }
            for (i, (dv, lv)) in da.iter().zip(la).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                if !subset(dv, Some(lv), path) {
                    return false;
                }
                path.truncate(len);
            }
            true
        }
        (Value::Number(dn), Value::Number(ln)) => match (dn.as_i64(), ln.as_i64()) {
            (Some(a), Some(b)) => a == b,
            _ => dn.as_f64().is_some_and(|a| ln.as_f64() == Some(a)),
        },
        (Value::Null, _) => false,
        _ => d == l,
    }
}

/// What Go's `omitempty` leaves out of the server's answer.
fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// The first field that `field_manager` owns through server-side apply (its `Apply` entry in the
/// live object's `metadata.managedFields`, main resource only) but `desired` no longer sets, or
/// `None`. Such a field would be removed by the next apply.
pub fn first_owned_not_desired(live: &Value, field_manager: &str, desired: &Value) -> Option<String> {
    let entries = live.pointer("/metadata/managedFields")?.as_array()?;
    for e in entries {
        let mine = e.get("manager").and_then(Value::as_str) == Some(field_manager)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
            && e.get("subresource").and_then(Value::as_str).is_none_or(str::is_empty);
        if !mine {
            continue;
        }
        if let Some(fields) = e.get("fieldsV1").and_then(Value::as_object) {
            let mut path = String::new();
            if !owned_covered(fields, desired, &mut path) {
                return Some(path_or_root(path));
            }
        }
    }
    None
}

/// Whether every field in the `fieldsV1` set `fields` is set in `desired`.
fn owned_covered(fields: &Map<String, Value>, desired: &Value, path: &mut String) -> bool {
    for (key, sub) in fields {
        let len = path.len();
        let child = if let Some(name) = key.strip_prefix("f:") {
            path.push('.');
            path.push_str(name);
            desired.as_object().and_then(|m| m.get(name)).filter(|v| !v.is_null())
        } else if let Some(k) = key.strip_prefix("k:") {
            path.push_str(&format!("[{k}]"));
            let Ok(Value::Object(want)) = serde_json::from_str::<Value>(k) else { continue };
            desired.as_array().and_then(|items| items.iter().find(|item| key_matches(item, &want)))
        } else if let Some(v) = key.strip_prefix("v:") {
            path.push_str(&format!("[{v}]"));
            let Ok(want) = serde_json::from_str::<Value>(v) else { continue };
            desired.as_array().and_then(|items| items.iter().find(|item| **item == want))
        } else if let Some(i) = key.strip_prefix("i:") {
            path.push_str(&format!("[{i}]"));
            let Ok(i) = i.parse::<usize>() else { continue };
            desired.as_array().and_then(|items| items.get(i))
        } else {
            // "." (the node itself) and anything this version does not know.
            continue;
        };
        let Some(child) = child else { return false };
        if let Some(sub) = sub.as_object()
            && !owned_covered(sub, child, path)
        {
            return false;
        }
        path.truncate(len);
    }
    true
}

/// A list item matches a `k:{...}` key when no key field it sets differs and at least one matches.
fn key_matches(item: &Value, want: &Map<String, Value>) -> bool {
    let Some(item) = item.as_object() else { return false };
    let mut matched = false;
    for (k, v) in want {
        match item.get(k) {
            Some(iv) if iv == v => matched = true,
            Some(_) => return false,
            None => {}
        }
    }
    matched
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    kind: String,
    outcome: String,
}

/// Counts [`ensure`] outcomes; clones share the counts and the [`Verified`] objects. Export the
/// counts with [`WriteCounter::register`] as `<prefix>_apply_total{kind, outcome}`.
#[derive(Clone, Debug, Default)]
pub struct WriteCounter {
    totals: Arc<[AtomicU64; 5]>,
    family: Family<WriteLabels, Counter>,
    verified: Verified,
}

impl WriteCounter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register the counter as `apply` (exported as `apply_total`) in `registry`; use
    /// `registry.sub_registry_with_prefix("vesper")` for a prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apply",
            "Writes to the API and the compare-then-write checks that needed none, by kind and outcome (created, updated, restored, deleted, unchanged)",
            self.family.clone(),
        );
    }

    /// Count one outcome for `kind`.
    pub fn record(&self, kind: &str, outcome: Outcome) {
        self.totals[index(outcome)].fetch_add(1, Ordering::Relaxed);
        self.family.get_or_create(&WriteLabels { kind: kind.to_string(), outcome: outcome.as_str().to_string() }).inc();
    }

    /// How many times `outcome` happened, over all kinds.
    pub fn get(&self, outcome: Outcome) -> u64 {
        self.totals[index(outcome)].load(Ordering::Relaxed)
    }

    /// Writes sent: created, updated, restored and deleted.
    pub fn writes(&self) -> u64 {
        self.get(Outcome::Created)
            + self.get(Outcome::Updated)
            + self.get(Outcome::Restored)
            + self.get(Outcome::Deleted)
    }

    /// The objects verified so far; forget them when their owner goes.
    pub fn verified(&self) -> &Verified {
        &self.verified
    }

    /// [`ensure_with`] on this counter's [`Verified`] objects, counted; the outcome only.
    pub async fn ensure<K>(&self, api: &Api<K>, desired: &K, field_manager: &str) -> Result<Outcome>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    {
        Ok(self.ensure_detailed(api, desired, field_manager).await?.outcome)
    }

    /// [`ensure_with`] on this counter's [`Verified`] objects, counted.
    pub async fn ensure_detailed<K>(&self, api: &Api<K>, desired: &K, field_manager: &str) -> Result<Applied>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    {
        self.ensure_guarded(api, desired, field_manager, &Guard::ANY).await
    }

    /// [`ensure_guarded`] on this counter's [`Verified`] objects, counted (a recreation counts
    /// as a deletion and a creation).
    pub async fn ensure_guarded<K>(
        &self,
        api: &Api<K>,
        desired: &K,
        field_manager: &str,
        guard: &Guard<'_>,
    ) -> Result<Applied>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    {
        self.ensure_cached(api, desired, field_manager, guard, Hint::Unknown).await
    }

    /// [`ensure_cached`], counted.
    pub async fn ensure_cached<K>(
        &self,
        api: &Api<K>,
        desired: &K,
        field_manager: &str,
        guard: &Guard<'_>,
        hint: Hint<'_>,
    ) -> Result<Applied>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    {
        let applied = ensure_cached(api, desired, field_manager, &self.verified, guard, hint).await?;
        if applied.recreated {
            self.record(&K::kind(&()), Outcome::Deleted);
        }
        self.record(&K::kind(&()), applied.outcome);
        Ok(applied)
    }
}

fn index(o: Outcome) -> usize {
    match o {
        Outcome::Created => 0,
        Outcome::Updated => 1,
        Outcome::Unchanged => 2,
        Outcome::Deleted => 3,
        Outcome::Restored => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_content_digest_ignores_key_order_metadata_and_status_only() {
        let typed = k8s_openapi::api::core::v1::ResourceQuota {
            metadata: kube::api::ObjectMeta {
                name: Some("q".into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::ResourceQuotaSpec {
                hard: Some(
                    [("pods".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("3".into()))].into(),
                ),
                ..Default::default()
            }),
            status: None,
        };
        let dynamic = json!({"status": {"used": {"pods": "2"}}, "spec": {"hard": {"pods": "3"}}, "kind": "ResourceQuota",
            "metadata": {"name": "q", "resourceVersion": "9"}, "apiVersion": "v1"});
        let typed = serde_json::to_value(&typed).expect("json");
        assert_eq!(content_digest(&typed), content_digest(&dynamic));
        let edited = json!({"apiVersion": "v1", "kind": "ResourceQuota", "spec": {"hard": {"pods": "30"}}});
        assert_ne!(content_digest(&edited), content_digest(&dynamic));
        // A verified content stays verified across status-only versions, and no further.
        let stamp = |rv: &str, content: u64| Stamp {
            content: Some(content),
            ..stamp_of(
                &kube::api::ObjectMeta {
                    uid: Some("u".into()),
                    resource_version: Some(rv.into()),
                    ..Default::default()
                },
                1,
            )
            .expect("a stamp")
        };
        let verified = stamp("1", content_digest(&typed));
        assert!(verified.still_holds(&stamp("9", content_digest(&dynamic)), "ResourceQuota"));
        assert!(!verified.still_holds(&stamp("10", content_digest(&edited)), "ResourceQuota"));
        let unknown = Stamp { content: None, ..stamp("11", 0) };
        assert!(!verified.still_holds(&unknown, "ResourceQuota"), "no content, no shortcut");
    }

    #[test]
    fn a_verified_workload_stays_verified_across_status_updates_only() {
        let meta = |rv: &str, generation: i64, label: &str| kube::api::ObjectMeta {
            uid: Some("u".into()),
            resource_version: Some(rv.into()),
            generation: Some(generation),
            labels: Some([("app".to_string(), label.to_string())].into()),
            ..Default::default()
        };
        let v = Verified::default();
        let key = |kind: &str| ObjectKey { kind: kind.into(), namespace: "a".into(), name: "app".into() };
        for kind in ["Deployment", "Service"] {
            v.set(key(kind), stamp_of(&meta("5", 2, "x"), 1).expect("a stamp"));
            assert!(v.is_current(&key(kind), &meta("5", 2, "x")), "{kind}: the same version");
        }
        // A status update: a new resourceVersion, the same generation and metadata.
        assert!(v.is_current(&key("Deployment"), &meta("9", 2, "x")));
        assert!(!v.is_current(&key("Service"), &meta("9", 2, "x")), "a Service's generation says nothing");
        // A spec change (generation), or a label changed by hand.
        assert!(!v.is_current(&key("Deployment"), &meta("9", 3, "x")));
        assert!(!v.is_current(&key("Deployment"), &meta("9", 2, "y")));
        // Another object of that name.
        let mut other = meta("5", 2, "x");
        other.uid = Some("w".into());
        assert!(!v.is_current(&key("Deployment"), &other));
    }

    #[test]
    fn subset_ignores_what_only_the_live_object_has() {
        let d = json!({"metadata": {"name": "a", "labels": {"app": "x"}}, "spec": {"replicas": 2}});
        let l = json!({"metadata": {"name": "a", "uid": "u", "labels": {"app": "x", "team": "y"}},
                       "spec": {"replicas": 2, "strategy": {"type": "RollingUpdate"}}, "status": {}});
        assert_eq!(first_difference(&d, &l), None);
    }

    #[test]
    fn subset_reports_the_first_differing_path() {
        let l = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y"}]}});
        let d = json!({"spec": {"containers": [{"name": "a", "image": "x:2"}, {"name": "b"}]}});
        assert_eq!(first_difference(&d, &l).as_deref(), Some(".spec.containers[0].image"));
        let d = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(first_difference(&d, &l).as_deref(), Some(".spec.containers"), "length differs");
        let d = json!({"spec": {"containers": [{"name": "b"}, {"name": "a"}]}});
        assert_eq!(first_difference(&d, &l).as_deref(), Some(".spec.containers[0].name"), "order matters");
        assert_eq!(first_difference(&json!({"data": {"k": "v"}}), &json!({})).as_deref(), Some(".data"));
        assert_eq!(first_difference(&json!(1), &json!("1")).as_deref(), Some("."));
    }

    #[test]
    fn numbers_match_by_value_and_empty_values_match_absent_ones() {
        assert_eq!(first_difference(&json!({"a": 1}), &json!({"a": 1.0})), None);
        assert!(first_difference(&json!({"a": 1}), &json!({"a": 2})).is_some());
        let d = json!({"a": {}, "b": [], "c": "", "d": false, "e": 0, "f": null});
        assert_eq!(first_difference(&d, &json!({})), None);
        assert!(first_difference(&json!({"f": null}), &json!({"f": 1})).is_some(), "null means unset");
        assert!(first_difference(&json!({"d": true}), &json!({})).is_some());
    }

    #[test]
    fn apply_body_drops_server_fields_and_needs_type_meta() {
        let cm = k8s_openapi::api::core::v1::ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("a".into()),
                uid: Some("u".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let b = apply_body(&cm).unwrap();
        assert_eq!(b, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}));
        let untyped = kube::api::DynamicObject { types: None, metadata: Default::default(), data: json!({}) };
        assert!(matches!(apply_body(&untyped), Err(Error::Invalid { .. })));
    }

    #[test]
    fn owned_fields_must_still_be_desired() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "other", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}},
            {"manager": "op", "operation": "Update", "fieldsV1": {"f:data": {"f:old": {}}}},
            {"manager": "op", "operation": "Apply", "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}},
                           "f:finalizers": {"v:\"a\"": {}}}}}
        ]}});
        let desired = json!({"metadata": {"labels": {"app": "x"}},
                             "spec": {"ports": [{"port": 80}], "finalizers": ["a"]}});
        assert_eq!(first_owned_not_desired(&live, "op", &desired), None, "defaulted key field protocol");
        let desired = json!({"metadata": {"labels": {}}, "spec": {"ports": [{"port": 80}], "finalizers": ["a"]}});
        assert_eq!(first_owned_not_desired(&live, "op", &desired).as_deref(), Some(".metadata.labels.app"));
        let desired =
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"ports": [{"port": 81}], "finalizers": ["a"]}});
        assert_eq!(
            first_owned_not_desired(&live, "op", &desired).as_deref(),
            Some(".spec.ports[{\"port\":80,\"protocol\":\"TCP\"}]")
        );
        let desired =
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"ports": [{"port": 80}], "finalizers": []}});
        assert_eq!(first_owned_not_desired(&live, "op", &desired).as_deref(), Some(".spec.finalizers[\"a\"]"));
        assert_eq!(first_owned_not_desired(&live, "nobody", &json!({})), None);
    }

    #[test]
    fn replacement_keeps_foreign_metadata_but_not_under_our_prefixes() {
        let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "app",
            "labels": {"vesper.eventide.dev/preview": "p", "app": "x"},
            "annotations": {"vesper.eventide.dev/note": "n"}},
            "spec": {"ports": [{"port": 80}]}});
        let live = json!({"metadata": {"name": "app", "uid": "u1", "resourceVersion": "9",
            "labels": {"vesper.eventide.dev/preview": "p", "vesper.eventide.dev/extra": "evil", "app": "y", "team": "t"},
            "annotations": {"note": "keep", "vesper.eventide.dev/note": "changed"},
            "finalizers": ["example.com/hold"]},
            "spec": {"ports": [{"port": 80}], "externalIPs": ["1.2.3.4"]}});
        let r = replacement(&body, &live, false);
        assert_eq!(r["metadata"]["uid"], "u1");
        assert_eq!(r["metadata"].get("resourceVersion"), None, "an unconditional write");
        assert_eq!(r["metadata"]["labels"], json!({"vesper.eventide.dev/preview": "p", "app": "x", "team": "t"}));
        assert_eq!(r["metadata"]["annotations"], json!({"vesper.eventide.dev/note": "n", "note": "keep"}));
        assert_eq!(r["metadata"]["finalizers"], json!(["example.com/hold"]));
        assert_eq!(r["spec"], json!({"ports": [{"port": 80}]}), "the content is the operator's alone");
        let r = replacement(&body, &live, true);
        assert_eq!(r["metadata"]["annotations"], json!({"vesper.eventide.dev/note": "n"}), "all annotations owned");
        assert!(owns_all_annotations("networking.k8s.io/v1", "Ingress"));
        assert!(!owns_all_annotations("v1", "Service"));
    }

    #[test]
    fn first_change_names_what_was_added_changed_or_removed() {
        let dry = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "resourceVersion": "1",
            "labels": {"app": "x"}}, "spec": {"type": "ClusterIP", "ports": [{"port": 80}]}, "status": {}});
        let mut live = dry.clone();
        live["metadata"]["resourceVersion"] = json!("7");
        live["metadata"]["managedFields"] = json!([{"manager": "kubectl-edit"}]);
        live["status"] = json!({"loadBalancer": {"ingress": [{"ip": "1.1.1.1"}]}});
        assert_eq!(first_change(&dry, &live), None, "server metadata and status are not compared");
        live["spec"]["externalIPs"] = json!(["1.2.3.4"]);
        assert_eq!(first_change(&dry, &live).as_deref(), Some(".spec.externalIPs was added"));
        let mut live = dry.clone();
        live["spec"]["type"] = json!("LoadBalancer");
        assert_eq!(first_change(&dry, &live).as_deref(), Some(".spec.type was changed"));
        let mut live = dry.clone();
        live["spec"]["ports"] = json!([{"port": 80}, {"port": 22}]);
        assert_eq!(first_change(&dry, &live).as_deref(), Some(".spec.ports[1] was added"));
        let mut live = dry.clone();
        live["metadata"]["labels"] = json!({"other": "y"});
        assert_eq!(
            first_change(&dry, &live).as_deref(),
            Some(".metadata.labels.app was removed, .metadata.labels.other was added")
        );
        live["metadata"]["labels"] = json!({});
        assert_eq!(first_change(&dry, &live).as_deref(), Some(".metadata.labels was removed"));
        let mut live = dry.clone();
        live["spec"]["type"] = json!("NodePort");
        live["spec"]["externalTrafficPolicy"] = json!("Cluster");
        live["spec"]["ports"] = json!([{"port": 80, "nodePort": 30001}]);
        live["spec"]["externalIPs"] = json!(["1.2.3.4"]);
        assert_eq!(
            first_change(&dry, &live).as_deref(),
            Some(
                ".spec.externalIPs was added, .spec.externalTrafficPolicy was added, .spec.ports[0].nodePort was added and 1 more"
            )
        );
        let mut live = dry.clone();
        live["metadata"]["ownerReferences"] = json!([{"uid": "x"}]);
        assert_eq!(first_change(&dry, &live).as_deref(), Some(".metadata.ownerReferences was added"));
    }

    #[test]
    fn last_writer_is_the_other_manager_that_owns_the_field() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "op", "operation": "Apply", "time": "2026-01-01T00:00:09Z",
             "fieldsV1": {"f:spec": {"f:template": {}}}},
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-01-01T00:00:05Z",
             "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:hostNetwork": {}}}}}},
            {"manager": "deployment-controller", "operation": "Update", "time": "2026-01-01T00:00:07Z",
             "fieldsV1": {"f:metadata": {"f:annotations": {}}}},
            {"manager": "kubelet", "operation": "Update", "subresource": "status", "time": "2026-01-01T00:00:08Z"},
            {"manager": "helm", "operation": "Update", "time": "2026-01-01T00:00:02Z"}]}});
        assert_eq!(
            last_writer(&live, "op", ".spec.template.spec.hostNetwork").as_deref(),
            Some("kubectl-edit"),
            "the owner of the field, not the newest writer"
        );
        assert_eq!(last_writer(&live, "op", ".metadata.annotations.x").as_deref(), Some("deployment-controller"));
        assert_eq!(
            last_writer(&live, "op", ".data.y").as_deref(),
            Some("deployment-controller"),
            "newest when none owns it"
        );
        assert_eq!(last_writer(&json!({}), "op", ".spec"), None);
    }

    #[test]
    fn counter_counts_per_outcome_and_exports() {
        let c = WriteCounter::new();
        let mut reg = Registry::with_prefix("t");
        c.register(&mut reg);
        c.record("ConfigMap", Outcome::Created);
        c.clone().record("ConfigMap", Outcome::Unchanged);
        c.record("Service", Outcome::Unchanged);
        assert_eq!((c.get(Outcome::Created), c.get(Outcome::Updated), c.get(Outcome::Unchanged)), (1, 0, 2));
        assert_eq!(c.writes(), 1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(text.contains("t_apply_total{kind=\"ConfigMap\",outcome=\"unchanged\"} 1"), "{text}");
        assert!(text.contains("t_apply_total{kind=\"Service\",outcome=\"unchanged\"} 1"), "{text}");
    }
}
