//! Watches: the initial state when asked for, then every change after a resourceVersion, in
//! order, filtered by namespace and selectors, with bookmarks and timeouts as the real server
//! sends them. Every watch reads the store's single event log.

use crate::cluster::Cluster;
use crate::errors::ApiError;
use crate::ops::ListOpts;
use crate::registry::ResourceDef;
use crate::request::Output;
use crate::store::{EventType, StoreError};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// No resourceVersion or "0": the current state as ADDED events, then changes.
    InitialState,
    /// After this resourceVersion: only the changes since.
    After(u64),
}

#[derive(Debug, Clone)]
pub struct WatchParams {
    pub start: Start,
    /// `sendInitialEvents=true`: end the initial state with a bookmark annotated
    /// `k8s.io/initial-events-end`.
    pub send_initial_events: bool,
    pub allow_bookmarks: bool,
    pub timeout: Duration,
    pub namespace: Option<String>,
    pub list_opts: ListOpts,
    pub output: Output,
}

/// A stream of JSON lines, one watch event each.
pub type EventStream = mpsc::Receiver<Bytes>;

fn line(kind: &str, object: Value) -> Bytes {
    let mut m = Map::new();
    m.insert("type".into(), kind.into());
    m.insert("object".into(), object);
    let mut v = serde_json::to_vec(&Value::Object(m)).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn bookmark(def: &ResourceDef, rv: u64, initial_end: bool) -> Value {
    let mut md = Map::new();
    md.insert("resourceVersion".into(), rv.to_string().into());
    md.insert("creationTimestamp".into(), Value::Null);
    if initial_end {
        md.insert("annotations".into(), json!({"k8s.io/initial-events-end": "true"}));
    }
    let mut m = Map::new();
    if def.is_custom() {
        m.insert("apiVersion".into(), def.api_version().into());
        m.insert("kind".into(), def.kind.clone().into());
    } else {
        m.insert("kind".into(), def.kind.clone().into());
        m.insert("apiVersion".into(), def.api_version().into());
    }
    m.insert("metadata".into(), Value::Object(md));
    Value::Object(m)
}

struct Watcher {
    cl: Arc<Cluster>,
    def: Arc<ResourceDef>,
    p: WatchParams,
    tx: mpsc::Sender<Bytes>,
    sent_table_header: bool,
}

impl Watcher {
    fn render(&mut self, stored: &Value) -> Value {
        let obj = crate::convert::from_storage(&self.def, stored);
        match self.p.output {
            Output::Table => {
                let with_columns = !self.sent_table_header;
                self.sent_table_header = true;
                crate::table::to_table(&self.def, std::slice::from_ref(&obj), with_columns, None)
            }
            Output::PartialObjectMetadata | Output::PartialObjectMetadataList => crate::table::partial_metadata(&obj),
            _ => obj,
        }
    }

    async fn send(&self, b: Bytes) -> bool {
        self.tx.send(b).await.is_ok()
    }

    fn in_scope(&self, namespace: &str) -> bool {
        self.p.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    async fn run(mut self) {
        let mut notify = self.cl.store.subscribe();
        let deadline = tokio::time::Instant::now() + self.p.timeout;
        let mut cursor = match self.p.start {
            Start::After(rv) => rv,
            Start::InitialState => {
                let (items, rv) = self.cl.store.list(&self.def.storage, self.p.namespace.as_deref());
                for o in items {
                    if !self.p.list_opts.matches(&self.def, &o) {
                        continue;
                    }
                    let rendered = self.render(&o);
                    if !self.send(line("ADDED", rendered)).await {
                        return;
                    }
                }
                if self.p.send_initial_events {
                    let bm = bookmark(&self.def, rv, true);
                    if !self.send(line("BOOKMARK", bm)).await {
                        return;
                    }
                }
                rv
            }
        };
        let mut bookmark_timer = tokio::time::interval(self.cl.options.bookmark_interval);
        bookmark_timer.tick().await;
        loop {
            // Drain everything after the cursor.
            loop {
                let changes = match self.cl.store.changes_since(cursor, 512) {
                    Ok(c) => c,
                    Err(StoreError::Gone { requested, oldest }) => {
                        let status =
                            ApiError::gone(format!("too old resource version: {requested} ({oldest})")).to_status();
                        let _ = self.send(line("ERROR", status)).await;
                        return;
                    }
                    Err(e) => {
                        let _ = self.send(line("ERROR", ApiError::internal(e.to_string()).to_status())).await;
                        return;
                    }
                };
                if changes.is_empty() {
                    break;
                }
                for c in changes {
                    cursor = c.rv;
                    if c.gr != self.def.storage || !self.in_scope(&c.namespace) {
                        continue;
                    }
                    let now_matches = c.kind != EventType::Deleted && self.p.list_opts.matches(&self.def, &c.object);
                    let was_matching = c.prev.as_ref().is_some_and(|p| self.p.list_opts.matches(&self.def, p));
                    let kind = match c.kind {
                        EventType::Deleted if self.p.list_opts.matches(&self.def, &c.object) => "DELETED",
                        EventType::Deleted => continue,
                        _ if now_matches && was_matching => "MODIFIED",
                        _ if now_matches => "ADDED",
                        // It stopped matching the selector: for this watch it is gone.
                        _ if was_matching => "DELETED",
                        _ => continue,
                    };
                    // An object leaving the selector is sent as it was, at the new version.
                    let leaving = kind == "DELETED" && c.kind != EventType::Deleted;
                    let rendered = match (&c.prev, leaving) {
                        (Some(prev), true) => {
                            let mut p = (**prev).clone();
                            if let Some(m) = p.get_mut("metadata").and_then(serde_json::Value::as_object_mut) {
                                m.insert("resourceVersion".into(), c.rv.to_string().into());
                            }
                            self.render(&p)
                        }
                        _ => self.render(&c.object),
                    };
                    if !self.send(line(kind, rendered)).await {
                        return;
                    }
                }
            }
            tokio::select! {
                changed = notify.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
                _ = bookmark_timer.tick(), if self.p.allow_bookmarks => {
                    let bm = bookmark(&self.def, cursor.max(self.cl.store.oldest_watchable()), false);
                    if !self.send(line("BOOKMARK", bm)).await {
                        return;
                    }
                }
                _ = self.tx.closed() => return,
            }
        }
    }
}

/// Start a watch; its events arrive on the returned channel, which closes when the watch ends.
pub fn start(cl: Arc<Cluster>, def: Arc<ResourceDef>, p: WatchParams) -> EventStream {
    let (tx, rx) = mpsc::channel(256);
    let w = Watcher { cl, def, p, tx, sent_table_header: false };
    tokio::spawn(w.run());
    rx
}
