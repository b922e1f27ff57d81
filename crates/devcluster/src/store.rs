//! The object store: every object as JSON, keyed by storage group-resource, namespace and name;
//! one resourceVersion counter for the whole cluster; an event log of recent changes that feeds
//! every watch; and, with a data directory, a write-ahead log that makes every acknowledged write
//! survive a crash.
//!
//! Writes are compare-and-swap on the object's resourceVersion (like the apiserver's
//! GuaranteedUpdate on etcd): callers read, compute, and commit with the version they read.

use crate::registry::GroupResource;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
    fn code(self) -> &'static str {
        match self {
            EventType::Added => "A",
            EventType::Modified => "M",
            EventType::Deleted => "D",
        }
    }
}

/// One change, as the event log keeps it.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub gr: GroupResource,
    pub namespace: String,
    pub name: String,
    pub kind: EventType,
    /// The object after the change (for a delete: its last state, at the deletion's version).
    pub object: Arc<Value>,
    /// The object before the change (None for an add).
    pub prev: Option<Arc<Value>>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("already exists")]
    AlreadyExists,
    /// The object's current version is not the one the write was computed from.
    #[error("conflict: object is at resourceVersion {current}")]
    Conflict { current: u64 },
    #[error("resource version {requested} is too old; the oldest available is {oldest}")]
    Gone { requested: u64, oldest: u64 },
    #[error("storage: {0}")]
    Io(String),
}

type Objects = BTreeMap<(String, String), Arc<Value>>;

#[derive(Debug, Default)]
struct State {
    rv: u64,
    objects: HashMap<GroupResource, Objects>,
    log: VecDeque<Arc<Change>>,
    /// Changes with rv <= this are no longer in the log.
    compacted: u64,
    wal: Option<Wal>,
}

/// Options of a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How many changes the event log keeps for watches that resume from an older version.
    pub history: usize,
    /// Persist to this directory (write-ahead log plus snapshots).
    pub data_dir: Option<PathBuf>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { history: 100_000, data_dir: None }
    }
}

pub struct Store {
    state: Mutex<State>,
    notify: watch::Sender<u64>,
    history: usize,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("rv", &self.current_rv()).finish()
    }
}

/// Read the numeric resourceVersion of a stored object.
pub fn object_rv(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        let had = meta.contains_key("resourceVersion");
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        if !had {
            // Keep ObjectMeta's field order: resourceVersion right after uid.
            crate::meta::canonicalize_meta(meta);
        }
    }
}

impl Store {
    /// Open a store; with a data directory, load what it holds.
    pub fn open(opts: StoreOptions) -> Result<Store, StoreError> {
        let history = opts.history.max(1);
        let mut state = State::default();
        if let Some(dir) = &opts.data_dir {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(format!("creating {}: {e}", dir.display())))?;
            load(dir, &mut state, history)?;
            state.wal = Some(Wal::open(dir)?);
        }
        let (notify, _) = watch::channel(state.rv);
        Ok(Store { state: Mutex::new(state), notify, history })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Subscribe to "the log grew" notifications (the value is the newest resourceVersion).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    pub fn get(&self, gr: &GroupResource, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.lock().objects.get(gr)?.get(&(namespace.to_string(), name.to_string())).cloned()
    }

    /// Every object of a resource (in one namespace, or all when `namespace` is None), ordered by
    /// namespace and name, and the resourceVersion the list is consistent with.
    pub fn list(&self, gr: &GroupResource, namespace: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let st = self.lock();
        let items = match st.objects.get(gr) {
            None => vec![],
            Some(objs) => match namespace {
                None => objs.values().cloned().collect(),
                Some(ns) => objs
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
            },
        };
        (items, st.rv)
    }

    /// Like `list`, starting after (namespace, name), at most `limit` items, plus whether more remain.
    pub fn list_page(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        after: Option<(&str, &str)>,
        limit: usize,
        keep: &dyn Fn(&Value) -> bool,
    ) -> (Vec<Arc<Value>>, bool, u64) {
        let st = self.lock();
        let mut out = Vec::new();
        let Some(objs) = st.objects.get(gr) else { return (out, false, st.rv) };
        let start = match (after, namespace) {
            (Some((ns, name)), _) => std::ops::Bound::Excluded((ns.to_string(), name.to_string())),
            (None, Some(ns)) => std::ops::Bound::Included((ns.to_string(), String::new())),
            (None, None) => std::ops::Bound::Unbounded,
        };
        let mut more = false;
        for ((ns, _), v) in objs.range((start, std::ops::Bound::Unbounded)) {
            if let Some(want) = namespace
                && ns != want
            {
                break;
            }
            if !keep(v) {
                continue;
            }
            if out.len() == limit {
                more = true;
                break;
            }
            out.push(v.clone());
        }
        (out, more, st.rv)
    }

    /// Count of objects of a resource (all namespaces).
    pub fn count(&self, gr: &GroupResource) -> usize {
        self.lock().objects.get(gr).map_or(0, BTreeMap::len)
    }

    /// Create an object; it gets the next resourceVersion.
    pub fn create(
        &self,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.commit(gr, namespace, name, None, Some(obj)).map(|(o, _)| o)
    }

    /// Replace an object, provided it is still at `expected_rv`.
    pub fn update(
        &self,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        expected_rv: u64,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.commit(gr, namespace, name, Some(expected_rv), Some(obj)).map(|(o, _)| o)
    }

    /// Remove an object, provided it is still at `expected_rv` (when given). Returns its last
    /// state, stamped with the deletion's resourceVersion.
    pub fn delete(
        &self,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        expected_rv: Option<u64>,
    ) -> Result<Arc<Value>, StoreError> {
        self.commit(gr, namespace, name, expected_rv.or(Some(u64::MAX)), None).map(|(o, _)| o)
    }

    /// `expected`: None = must not exist (create); Some(u64::MAX) = any version; Some(rv) = that
    /// version. `new`: None = delete.
    fn commit(
        &self,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        expected: Option<u64>,
        new: Option<Value>,
    ) -> Result<(Arc<Value>, u64), StoreError> {
        let mut st = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let current = st.objects.get(gr).and_then(|m| m.get(&key)).cloned();
        match (&current, expected) {
            (Some(_), None) => return Err(StoreError::AlreadyExists),
            (None, Some(_)) => return Err(StoreError::NotFound),
            (Some(cur), Some(want)) if want != u64::MAX && object_rv(cur) != want => {
                return Err(StoreError::Conflict { current: object_rv(cur) });
            }
            _ => {}
        }
        let rv = st.rv + 1;
        let (kind, mut obj) = match new {
            Some(o) => (if current.is_some() { EventType::Modified } else { EventType::Added }, o),
            None => (EventType::Deleted, current.as_deref().cloned().unwrap_or(Value::Null)),
        };
        set_rv(&mut obj, rv);
        if let Some(wal) = &mut st.wal {
            wal.append(rv, gr, namespace, name, kind, &obj)?;
        }
        st.rv = rv;
        let obj = Arc::new(obj);
        let objs = st.objects.entry(gr.clone()).or_default();
        if kind == EventType::Deleted {
            objs.remove(&key);
        } else {
            objs.insert(key, obj.clone());
        }
        push_log(
            &mut st,
            self.history,
            Change {
                rv,
                gr: gr.clone(),
                namespace: namespace.to_string(),
                name: name.to_string(),
                kind,
                object: obj.clone(),
                prev: current,
            },
        );
        drop(st);
        self.notify.send_replace(rv);
        Ok((obj, rv))
    }

    /// The changes after `since` (exclusive), at most `max`, in order. `Gone` when `since` is older
    /// than the retained history.
    pub fn changes_since(&self, since: u64, max: usize) -> Result<Vec<Arc<Change>>, StoreError> {
        let st = self.lock();
        if since < st.compacted {
            return Err(StoreError::Gone { requested: since, oldest: st.compacted });
        }
        let start = st.log.partition_point(|c| c.rv <= since);
        Ok(st.log.range(start..).take(max).cloned().collect())
    }

    /// The oldest resourceVersion a watch may still start from.
    pub fn oldest_watchable(&self) -> u64 {
        self.lock().compacted
    }

    /// Drop the event log up to the current version, as etcd compaction does: a later watch from
    /// an older version gets 410 Gone. Used by tests and `--history`.
    pub fn compact(&self) {
        let mut st = self.lock();
        st.log.clear();
        st.compacted = st.rv;
    }
}

fn push_log(st: &mut State, history: usize, change: Change) {
    st.log.push_back(Arc::new(change));
    while st.log.len() > history {
        if let Some(old) = st.log.pop_front() {
            st.compacted = old.rv;
        }
    }
}

// ---- persistence ----------------------------------------------------------------------------

const WAL_FILE: &str = "wal.jsonl";
const SNAPSHOT_FILE: &str = "snapshot.json";
/// Rewrite the snapshot when the log grows past this size.
const WAL_COMPACT_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug)]
struct Wal {
    dir: PathBuf,
    file: File,
    bytes: u64,
}

impl Wal {
    fn open(dir: &Path) -> Result<Wal, StoreError> {
        let path = dir.join(WAL_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::Io(format!("opening {}: {e}", path.display())))?;
        let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Wal { dir: dir.to_path_buf(), file, bytes })
    }

    fn append(
        &mut self,
        rv: u64,
        gr: &GroupResource,
        ns: &str,
        name: &str,
        kind: EventType,
        obj: &Value,
    ) -> Result<(), StoreError> {
        let mut rec = Map::new();
        rec.insert("rv".into(), rv.into());
        rec.insert("g".into(), gr.group.clone().into());
        rec.insert("r".into(), gr.resource.clone().into());
        rec.insert("ns".into(), ns.into());
        rec.insert("n".into(), name.into());
        rec.insert("t".into(), kind.code().into());
        rec.insert("o".into(), obj.clone());
        let mut line = serde_json::to_vec(&Value::Object(rec)).map_err(|e| StoreError::Io(e.to_string()))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.sync_data())
            .map_err(|e| StoreError::Io(format!("writing {}: {e}", self.dir.join(WAL_FILE).display())))?;
        self.bytes += line.len() as u64;
        Ok(())
    }
}

/// Load snapshot + write-ahead log from `dir` into `st`; rewrite the snapshot when the log is large.
fn load(dir: &Path, st: &mut State, history: usize) -> Result<(), StoreError> {
    let snap_path = dir.join(SNAPSHOT_FILE);
    if snap_path.exists() {
        let data =
            std::fs::read(&snap_path).map_err(|e| StoreError::Io(format!("reading {}: {e}", snap_path.display())))?;
        let snap: Value = serde_json::from_slice(&data)
            .map_err(|e| StoreError::Io(format!("{} is corrupt: {e}", snap_path.display())))?;
        st.rv = snap.get("rv").and_then(Value::as_u64).unwrap_or(0);
        for rec in snap.get("objects").and_then(Value::as_array).into_iter().flatten() {
            let (Some(g), Some(r), Some(ns), Some(n), Some(o)) = (
                rec.get("g").and_then(Value::as_str),
                rec.get("r").and_then(Value::as_str),
                rec.get("ns").and_then(Value::as_str),
                rec.get("n").and_then(Value::as_str),
                rec.get("o"),
            ) else {
                continue;
            };
            st.objects
                .entry(GroupResource::new(g, r))
                .or_default()
                .insert((ns.to_string(), n.to_string()), Arc::new(o.clone()));
        }
    }
    st.compacted = st.rv;
    let wal_path = dir.join(WAL_FILE);
    let mut valid_len: u64 = 0;
    let mut wal_len: u64 = 0;
    if wal_path.exists() {
        let f = File::open(&wal_path).map_err(|e| StoreError::Io(format!("reading {}: {e}", wal_path.display())))?;
        wal_len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let mut reader = BufReader::new(f);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).map_err(|e| StoreError::Io(e.to_string()))?;
            if n == 0 || line.last() != Some(&b'\n') {
                // End, or a torn last record from a crash mid-write: it was never acknowledged.
                break;
            }
            let Ok(rec) = serde_json::from_slice::<Value>(&line) else { break };
            let (Some(rv), Some(g), Some(r), Some(ns), Some(name), Some(t), Some(o)) = (
                rec.get("rv").and_then(Value::as_u64),
                rec.get("g").and_then(Value::as_str),
                rec.get("r").and_then(Value::as_str),
                rec.get("ns").and_then(Value::as_str),
                rec.get("n").and_then(Value::as_str),
                rec.get("t").and_then(Value::as_str),
                rec.get("o"),
            ) else {
                break;
            };
            valid_len += n as u64;
            if rv <= st.rv {
                continue; // already in the snapshot
            }
            let gr = GroupResource::new(g, r);
            let key = (ns.to_string(), name.to_string());
            let obj = Arc::new(o.clone());
            let objs = st.objects.entry(gr.clone()).or_default();
            let prev = objs.get(&key).cloned();
            let kind = match t {
                "D" => {
                    objs.remove(&key);
                    EventType::Deleted
                }
                _ => {
                    objs.insert(key, obj.clone());
                    if prev.is_some() { EventType::Modified } else { EventType::Added }
                }
            };
            st.rv = rv;
            push_log(
                st,
                history,
                Change { rv, gr, namespace: ns.to_string(), name: name.to_string(), kind, object: obj, prev },
            );
        }
    }
    if valid_len < wal_len {
        // Cut the torn tail so new records do not follow garbage.
        let f = OpenOptions::new()
            .write(true)
            .open(&wal_path)
            .map_err(|e| StoreError::Io(format!("repairing {}: {e}", wal_path.display())))?;
        f.set_len(valid_len).and_then(|_| f.sync_all()).map_err(|e| StoreError::Io(e.to_string()))?;
    }
    if valid_len > WAL_COMPACT_BYTES {
        write_snapshot(dir, st)?;
    }
    Ok(())
}

/// Write every object to a new snapshot (atomically) and empty the write-ahead log.
fn write_snapshot(dir: &Path, st: &State) -> Result<(), StoreError> {
    let io = |e: std::io::Error| StoreError::Io(format!("writing snapshot in {}: {e}", dir.display()));
    let mut objects = Vec::new();
    for (gr, objs) in &st.objects {
        for ((ns, n), o) in objs {
            let mut rec = Map::new();
            rec.insert("g".into(), gr.group.clone().into());
            rec.insert("r".into(), gr.resource.clone().into());
            rec.insert("ns".into(), ns.clone().into());
            rec.insert("n".into(), n.clone().into());
            rec.insert("o".into(), (**o).clone());
            objects.push(Value::Object(rec));
        }
    }
    let mut snap = Map::new();
    snap.insert("rv".into(), st.rv.into());
    snap.insert("objects".into(), Value::Array(objects));
    let tmp = dir.join(format!("{SNAPSHOT_FILE}.tmp"));
    {
        let mut f = File::create(&tmp).map_err(io)?;
        serde_json::to_writer(&mut f, &Value::Object(snap)).map_err(|e| StoreError::Io(e.to_string()))?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, dir.join(SNAPSHOT_FILE)).map_err(io)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    let wal = OpenOptions::new().write(true).create(true).truncate(true).open(dir.join(WAL_FILE)).map_err(io)?;
    wal.sync_all().map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}})
    }

    #[test]
    fn compare_and_swap_and_log() {
        let s = Store::open(StoreOptions::default()).unwrap();
        let gr = GroupResource::new("", "configmaps");
        let a = s.create(&gr, "default", "a", cm("a")).unwrap();
        assert_eq!(object_rv(&a), 1);
        assert_eq!(s.create(&gr, "default", "a", cm("a")), Err(StoreError::AlreadyExists));
        assert_eq!(s.update(&gr, "default", "a", 7, cm("a")), Err(StoreError::Conflict { current: 1 }));
        let a2 = s.update(&gr, "default", "a", 1, cm("a")).unwrap();
        assert_eq!(object_rv(&a2), 2);
        let d = s.delete(&gr, "default", "a", None).unwrap();
        assert_eq!(object_rv(&d), 3);
        let ch = s.changes_since(1, 10).unwrap();
        assert_eq!(ch.iter().map(|c| c.kind).collect::<Vec<_>>(), vec![EventType::Modified, EventType::Deleted]);
        s.compact();
        assert!(matches!(s.changes_since(1, 10), Err(StoreError::Gone { .. })));
        assert!(s.changes_since(3, 10).unwrap().is_empty());
    }

    #[test]
    fn survives_reopen_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let gr = GroupResource::new("", "configmaps");
        let opts = StoreOptions { history: 100, data_dir: Some(dir.path().to_path_buf()) };
        {
            let s = Store::open(opts.clone()).unwrap();
            s.create(&gr, "default", "a", cm("a")).unwrap();
            s.create(&gr, "default", "b", cm("b")).unwrap();
            s.delete(&gr, "default", "a", None).unwrap();
        }
        // A crash in the middle of a record.
        let mut f = OpenOptions::new().append(true).open(dir.path().join(WAL_FILE)).unwrap();
        f.write_all(b"{\"rv\":4,\"g\":\"\",\"r\":\"configm").unwrap();
        drop(f);
        let s = Store::open(opts.clone()).unwrap();
        assert_eq!(s.current_rv(), 3);
        assert!(s.get(&gr, "default", "a").is_none());
        assert!(s.get(&gr, "default", "b").is_some());
        // History survives too: a watch from rv 1 sees b's add and a's delete.
        assert_eq!(s.changes_since(1, 10).unwrap().len(), 2);
        let c = s.create(&gr, "default", "c", cm("c")).unwrap();
        assert_eq!(object_rv(&c), 4);
        drop(s);
        let s = Store::open(opts).unwrap();
        assert_eq!(s.current_rv(), 4);
        assert!(s.get(&gr, "default", "c").is_some());
    }
}
