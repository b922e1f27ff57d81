//! The typed status writer: a controller's status written the way the API conventions want it,
//! and only when it changed.
//!
//! - The write is a server-side apply of `{apiVersion, kind, status}` on the `/status`
//!   subresource, as the controller's field manager, forced (the status is the controller's
//!   alone), so a field the controller stops setting is removed.
//! - A status equal to the stored one is not written: a reconcile that changes nothing writes
//!   nothing (tests count writes to prove it).
//! - The object a reconcile sees comes from a watch cache, which may not have delivered the
//!   controller's own last status write yet. The writer remembers, per object (by UID), the
//!   status it last wrote and the `resourceVersion` it wrote over: a pass on that same version
//!   compares with what was written, not with the stale copy, so it does not write the same
//!   status twice (nor record its Events twice). The entry is dropped as soon as the cache shows
//!   a later version, so the map holds only the writes in flight, never one entry per object.
//! - An object deleted since it was read has no status left to write: not an error.
//!
//! Each write is counted as `<Kind>Status` `updated` in the [`WriteCounter`].

use crate::apply::{Outcome, WriteCounter};
use crate::error::{Error, Result};
use kube::api::{Api, Patch, PatchParams};
use kube::core::object::HasStatus;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;

/// What [`StatusWriter::write`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Written<S> {
    /// Nothing: the stored status (or the one this writer wrote over the same version) already
    /// says that, or the object is gone.
    Unchanged,
    /// The status was written; this is the one it replaced (`None`: the object had none).
    Replaced(Option<S>),
}

impl<S> Written<S> {
    /// Whether a write was sent.
    pub fn wrote(&self) -> bool {
        matches!(self, Written::Replaced(_))
    }
}

/// Writes the status of objects of kind `K` (see the [module documentation](self)).
pub struct StatusWriter<K: HasStatus> {
    client: Client,
    field_manager: &'static str,
    writes: WriteCounter,
    /// Whether two statuses say the same, for the "already written over this version" check:
    /// equality, or looser (Varroa ignores its own lastReconciledAt stamp there).
    same: fn(&K::Status, &K::Status) -> bool,
    /// By UID: the `resourceVersion` the last write went over, and the status it wrote.
    in_flight: Mutex<HashMap<String, (String, K::Status)>>,
}

impl<K> StatusWriter<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + HasStatus
        + Clone
        + Debug
        + DeserializeOwned,
    K::Status: Clone + PartialEq + Serialize,
{
    /// A writer for `field_manager`, counting its writes into `writes`.
    pub fn new(client: Client, field_manager: &'static str, writes: WriteCounter) -> Self {
        StatusWriter { client, field_manager, writes, same: |a, b| a == b, in_flight: Mutex::new(HashMap::new()) }
    }

    /// Treat two statuses as the same for the in-flight check when `same` says so (the check
    /// that a pass on a stale copy does not repeat the last write).
    pub fn comparing_with(mut self, same: fn(&K::Status, &K::Status) -> bool) -> Self {
        self.same = same;
        self
    }

    /// The status `obj` really has: its own, unless this writer wrote over this very version and
    /// the copy predates that write.
    pub fn current(&self, obj: &K) -> Option<K::Status> {
        let uid = obj.uid().unwrap_or_default();
        let rv = obj.resource_version().unwrap_or_default();
        let in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        match in_flight.get(&uid) {
            Some((over, written)) if *over == rv => Some(written.clone()),
            _ => obj.status().cloned(),
        }
    }

    /// Write `status` unless `obj` already has it (see the [module documentation](self)).
    pub async fn write(&self, obj: &K, status: &K::Status) -> Result<Written<K::Status>> {
        if obj.status() == Some(status) {
            self.settled(obj);
            return Ok(Written::Unchanged);
        }
        let uid = obj.uid().unwrap_or_default();
        let rv = obj.resource_version().unwrap_or_default();
        let mut stored = obj.status().cloned();
        {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            match in_flight.get(&uid) {
                Some((over, written)) if *over == rv => {
                    if (self.same)(written, status) {
                        return Ok(Written::Unchanged);
                    }
                    stored = Some(written.clone());
                }
                // The cache has moved past the last write: forget it.
                Some(_) => {
                    in_flight.remove(&uid);
                }
                None => {}
            }
        }
        let kind = K::kind(&());
        let what = format!("{kind} {}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
        let api: Api<K> = Api::namespaced(self.client.clone(), &obj.namespace().unwrap_or_default());
        let body = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": kind,
            "status": serde_json::to_value(status)
                .map_err(|source| Error::Json { action: format!("serializing the status of {what}"), source })?,
        });
        match api
            .patch_status(&obj.name_any(), &PatchParams::apply(self.field_manager).force(), &Patch::Apply(&body))
            .await
        {
            Ok(_) => {}
            // Deleted since this pass read it: there is no status left to write.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Written::Unchanged),
            Err(e) => return Err(Error::kube(format!("writing the status of {what}"), e)),
        }
        self.writes.record(&format!("{kind}Status"), Outcome::Updated);
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(uid, (rv, status.clone()));
        Ok(Written::Replaced(stored))
    }

    /// `obj` is at least as new as any write of this writer's: drop what was kept about it.
    fn settled(&self, obj: &K) {
        let uid = obj.uid().unwrap_or_default();
        let rv = obj.resource_version().unwrap_or_default();
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if in_flight.get(&uid).is_some_and(|(over, _)| *over != rv) {
            in_flight.remove(&uid);
        }
    }

    /// Forget the object with `uid` (it is gone).
    pub fn forget(&self, uid: &str) {
        self.retain(|u| u != uid);
    }

    /// Keep only the objects whose UID `keep` accepts (a sweep against the cache of live ones).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        in_flight.retain(|uid, _| keep(uid));
        if in_flight.capacity() > 4 * in_flight.len().max(16) {
            in_flight.shrink_to_fit();
        }
    }

    /// How many writes are kept (those the cache has not shown back yet).
    pub fn len(&self) -> usize {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
