//! Console logs in the blob store: the object layout, the chunk write with its offset
//! semantics (the gateway's [`LogWriter`]), reading a log, and following one as it grows.
//!
//! # Layout
//!
//! A build's log is the objects under
//!
//! ```text
//! logs/<cluster>/<namespace>/<controller>/<job>/<build>/
//!     00000000000000000000        the chunk starting at byte 0
//!     00000000000000004096        the chunk starting at byte 4096
//!     ...
//!     complete                    the completion marker: {"v":1,"length":N,"chunks":K}
//! ```
//!
//! - `cluster` is the gateway's `--cluster`; `namespace` and `controller` come from the mite's
//!   certificate, never from anything the plugin sends ([`LogKey`] is built by the gateway).
//! - `job` is the job's full name encoded as one path segment ([`encode_job`]): every byte but
//!   `A-Z a-z 0-9 - _ .` as `%XX` (so `team/app` is `team%2Fapp`), a leading `.` too; a name
//!   whose encoding is longer than [`MAX_JOB_SEGMENT`] bytes is cut and ends in `~` and 32 hex
//!   digits of its SHA-256, so every key stays far below S3's 1,024 bytes and a file name's 255.
//! - A chunk is named by its start offset, 20 decimal digits: names sort as offsets do, so a
//!   follower lists only what comes after the last chunk it read (S3's `start-after`).
//! - The marker is written once the final chunk landed; it sorts after every chunk.
//!
//! # Writing a chunk ([`LogWriter::write_chunk`])
//!
//! A chunk is at most [`MAX_CHUNK_BYTES`] and starts at `offset` of the log. With the stored end
//! `E` (the end of the chunks contiguous from 0):
//!
//! - `offset == E`: written with a conditional create (`If-None-Match: *`, a hard link on a
//!   local directory). Answer: stored, `next = E + len`. With `final`, the marker follows.
//! - `offset < E` and a chunk of the same length starts at `offset`: a retry of a chunk already
//!   stored; nothing is written, and the answer is the same as the first time (stored,
//!   `next = offset + len`; with `final`, the marker is written if it is missing).
//! - Anything else (`offset > E`, an offset inside a chunk, a chunk of another length, data after
//!   the final chunk): a conflict, `next = E`: the plugin sends again from there.
//! - A chunk is never empty, except a final one (it only marks the end).
//!
//! The writer keeps each build's `E` (and whether it is complete) in a bounded cache
//! ([`CACHE_MAX`] builds, least recently used out, a completed log out at once), filled by one
//! listing on a miss and listed again whenever a chunk does not start at the cached end (another
//! gateway replica may have written on). Writes of one build are serialized within a replica;
//! across replicas the conditional create decides: a chunk is never written twice.
//!
//! # Reading and following
//!
//! [`Logs::state`] lists a build's chunks; [`Logs::read_chunk`] reads one. A [`Follower`] keeps
//! its byte position and the last chunk it read, and each [`Follower::poll`] lists only the
//! chunks after it; [`follow`] polls whenever a wake-up arrives (the gateway's [`Notice`] on core
//! NATS, [`notice_subject`]) and at least every `poll_every`, and ends once the marker says the
//! log is complete and every byte was read.
//!
//! # Deleting
//!
//! [`Logs::delete`] deletes every object under a build's prefix (the recorder's retention calls
//! it for the builds whose run rows it pruned: docs/varroa/data-plane.md, "Retention").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use object_store::path::{Path, PathPart};
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::store::{BlobError, BlobStore, Created};

/// The largest chunk.
pub const MAX_CHUNK_BYTES: usize = 1024 * 1024;
/// The highest offset (and log length): offsets travel as JSON numbers, exact up to 2^53.
pub const MAX_OFFSET: u64 = 1 << 53;
/// The first part of every log object's path.
pub const LOGS: &str = "logs";
/// The completion marker's name.
pub const MARKER: &str = "complete";
/// The digits of a chunk's name.
pub const OFFSET_DIGITS: usize = 20;
/// The longest encoded job segment before it is cut and hashed.
pub const MAX_JOB_SEGMENT: usize = 180;
/// The most builds whose end the writer remembers.
pub const CACHE_MAX: usize = 10_000;
/// The subjects of the live-tail notices: `varroa.logs.<cluster>.<namespace>.<controller>`.
pub const SUBJECT_PREFIX: &str = "varroa.logs";

/// A key part that cannot name a log.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The cluster, namespace or controller is not a DNS-1123 label.
    #[error(transparent)]
    Name(#[from] varroa_link::kv::KvError),
    /// The job name is not one the plugin protocol allows.
    #[error("job: {0}")]
    Job(String),
    /// The build number is out of range.
    #[error("build: {0} is not a build number (1 to 2^53)")]
    Build(u64),
}

/// Whose log: a build of a job of a controller in a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogKey {
    cluster: String,
    controller: varroa_link::kv::ControllerKey,
    job: String,
    build: u64,
}

/// What is wrong with a job name, if anything: the rule of the plugin protocol's `job` (1 to
/// [`varroa_link::builds::MAX_JOB`] characters, no control characters).
pub fn job_problem(job: &str) -> Option<String> {
    if job.is_empty() {
        return Some("must not be empty".into());
    }
    if job.chars().count() > varroa_link::builds::MAX_JOB {
        return Some(format!("longer than {} characters", varroa_link::builds::MAX_JOB));
    }
    if job.chars().any(char::is_control) {
        return Some("must not contain control characters".into());
    }
    None
}

impl LogKey {
    /// Checks every part: the cluster, namespace and controller are DNS-1123 labels, the job a
    /// plugin job name, the build 1 to 2^53.
    pub fn new(cluster: &str, namespace: &str, controller: &str, job: &str, build: u64) -> Result<LogKey, KeyError> {
        varroa_link::activity::global_subject(cluster)?;
        let controller = varroa_link::kv::ControllerKey::new(namespace, controller)?;
        if let Some(why) = job_problem(job) {
            return Err(KeyError::Job(why));
        }
        if build == 0 || build > varroa_link::builds::MAX_BUILD {
            return Err(KeyError::Build(build));
        }
        Ok(LogKey { cluster: cluster.to_owned(), controller, job: job.to_owned(), build })
    }

    /// The cluster.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }
    /// The namespace.
    pub fn namespace(&self) -> &str {
        self.controller.namespace()
    }
    /// The controller.
    pub fn controller(&self) -> &str {
        self.controller.controller()
    }
    /// The job's full name.
    pub fn job(&self) -> &str {
        &self.job
    }
    /// The build number.
    pub fn build(&self) -> u64 {
        self.build
    }

    /// `logs/<cluster>/<ns>/<ctrl>/<job>/<build>`, relative to the store's root.
    pub fn prefix(&self) -> String {
        format!(
            "{LOGS}/{}/{}/{}/{}/{}",
            self.cluster,
            self.namespace(),
            self.controller(),
            encode_job(&self.job),
            self.build
        )
    }

    /// `<job> #<build> of controller <ns>/<ctrl>` (in cluster `c`), as messages name a log.
    pub fn describe(&self) -> String {
        format!("{} #{} of controller {}/{}", self.job, self.build, self.namespace(), self.controller())
    }
}

/// The job's name as one path segment (see the module docs).
pub fn encode_job(job: &str) -> String {
    let mut out = String::with_capacity(job.len());
    for (i, b) in job.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0);
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() <= MAX_JOB_SEGMENT {
        return out;
    }
    // Cut at a character boundary of the encoding (never inside a %XX), then the hash.
    let mut cut = MAX_JOB_SEGMENT - 33;
    let bytes = out.as_bytes();
    if bytes[cut - 1] == b'%' {
        cut -= 1;
    } else if bytes[cut - 2] == b'%' {
        cut -= 2;
    }
    let hash = sha2::Sha256::digest(job.as_bytes());
    let hex: String = hash.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{}~{hex}", &out[..cut])
}

/// The name of the chunk that starts at `offset`.
pub fn chunk_name(offset: u64) -> String {
    format!("{offset:0width$}", width = OFFSET_DIGITS)
}

/// The offset a chunk name stands for, if it is one.
pub fn parse_chunk_name(name: &str) -> Option<u64> {
    (name.len() == OFFSET_DIGITS && name.bytes().all(|b| b.is_ascii_digit())).then(|| name.parse().ok()).flatten()
}

/// `varroa.logs.<cluster>.<namespace>.<controller>`: where the gateway announces landed chunks.
pub fn notice_subject(cluster: &str, namespace: &str, controller: &str) -> String {
    format!("{SUBJECT_PREFIX}.{cluster}.{namespace}.{controller}")
}

/// What the gateway publishes on core NATS after each landed chunk (at most once: a reader that
/// misses one still polls the store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// The job's full name.
    pub job: String,
    /// The build.
    pub build: u64,
    /// The stored end of the log now.
    pub next: u64,
    /// Whether the log is complete.
    #[serde(rename = "final")]
    pub last: bool,
}

/// The completion marker's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The marker version (1).
    pub v: u32,
    /// The log's length in bytes.
    pub length: u64,
    /// How many chunks hold it.
    pub chunks: u64,
}

/// One stored chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Where it starts.
    pub offset: u64,
    /// Its length.
    pub size: u64,
}

/// A build's log as the store has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogState {
    /// The chunks contiguous from byte 0, in order.
    pub chunks: Vec<Chunk>,
    /// Where they end.
    pub end: u64,
    /// The marker's length, when the log is complete.
    pub complete: Option<u64>,
    /// Objects that are neither a chunk of the log nor the marker (chunks after a gap), ignored.
    pub stray: usize,
}

impl LogState {
    /// Whether anything of the log is stored.
    pub fn exists(&self) -> bool {
        !self.chunks.is_empty() || self.complete.is_some()
    }
}

/// Reading the logs of one store (cheap to clone).
#[derive(Debug, Clone)]
pub struct Logs {
    store: BlobStore,
}

fn part(s: &str) -> PathPart<'_> {
    // Every part here is a label, digits or an encoded job: always valid.
    PathPart::parse(s).unwrap_or_else(|_| PathPart::from(s))
}

impl Logs {
    /// The logs in `store`.
    pub fn new(store: BlobStore) -> Logs {
        Logs { store }
    }

    /// The store.
    pub fn store(&self) -> &BlobStore {
        &self.store
    }

    fn dir(&self, key: &LogKey) -> Path {
        let prefix = key.prefix();
        prefix.split('/').fold(self.store.root().clone(), |p, s| p.join(part(s)))
    }

    fn chunk_path(&self, key: &LogKey, offset: u64) -> Path {
        self.dir(key).join(part(&chunk_name(offset)))
    }

    fn marker_path(&self, key: &LogKey) -> Path {
        self.dir(key).join(part(MARKER))
    }

    /// Lists the build's objects: its chunks, where they end, the marker.
    pub async fn state(&self, key: &LogKey) -> Result<LogState, BlobError> {
        let dir = self.dir(key);
        let objects = self.store.list(&dir, None).await?;
        let mut chunks = Vec::new();
        let mut marker = false;
        let mut stray = 0;
        for m in &objects {
            // Only the build's own directory (a prefix also matches deeper paths).
            if m.location.parts().count() != dir.parts().count() + 1 {
                stray += 1;
                continue;
            }
            match BlobStore::name_in(&m.location) {
                Some(n) if n == MARKER => marker = true,
                Some(n) => match parse_chunk_name(&n) {
                    Some(offset) if m.size > 0 => chunks.push(Chunk { offset, size: m.size }),
                    _ => stray += 1,
                },
                None => stray += 1,
            }
        }
        chunks.sort_by_key(|c| c.offset);
        let mut end = 0;
        let mut contiguous = Vec::with_capacity(chunks.len());
        for c in chunks {
            if c.offset == end {
                end += c.size;
                contiguous.push(c);
            } else {
                stray += 1;
            }
        }
        let complete = if marker { Some(self.marker(key).await?.map_or(end, |m| m.length)) } else { None };
        if stray > 0 {
            tracing::warn!(log = %key.prefix(), stray, "objects that are not chunks of the log, ignored");
        }
        Ok(LogState { chunks: contiguous, end, complete, stray })
    }

    async fn marker(&self, key: &LogKey) -> Result<Option<Marker>, BlobError> {
        let Some(bytes) = self.store.read(&self.marker_path(key), 0).await? else { return Ok(None) };
        match serde_json::from_slice::<Marker>(&bytes) {
            Ok(m) => Ok(Some(m)),
            Err(e) => {
                tracing::warn!(log = %key.prefix(), error = %e, "an unreadable completion marker: taking the stored end");
                Ok(None)
            }
        }
    }

    /// The bytes of the chunk at `chunk` from byte `skip` of it on.
    pub async fn read_chunk(&self, key: &LogKey, chunk: Chunk, skip: u64) -> Result<Bytes, BlobError> {
        let path = self.chunk_path(key, chunk.offset);
        self.store.read(&path, skip).await?.ok_or_else(|| BlobError {
            op: "read",
            path: path.to_string(),
            store: self.store.url().to_owned(),
            message: "the chunk is gone".into(),
        })
    }

    /// Deletes the build's whole log: every object under its prefix (the chunks, the marker and
    /// anything else there), and then, on a `file://` store, the build's directory and its job's
    /// if they are left empty. Idempotent: a log that is already gone, in part or whole, is not
    /// an error (deleting twice is harmless). Every store request is bounded as any other
    /// ([`crate::store`]); an error leaves what was not deleted yet for the next call. The prefix
    /// is listed again afterwards: an object that appeared meanwhile (a gateway still writing the
    /// log) is an error, so the caller tries again later.
    pub async fn delete(&self, key: &LogKey) -> Result<Deleted, BlobError> {
        let dir = self.dir(key);
        let mut objects = 0;
        let listed = self.store.list(&dir, None).await?;
        if !listed.is_empty() {
            // The marker first: a log being deleted reads as unfinished, never as complete with
            // chunks missing.
            let (marker, rest): (Vec<Path>, Vec<Path>) =
                listed.into_iter().map(|m| m.location).partition(|p| *p == self.marker_path(key));
            objects += self.store.delete_all(marker).await?;
            objects += self.store.delete_all(rest).await?;
            let left = self.store.list(&dir, None).await?;
            if !left.is_empty() {
                return Err(BlobError {
                    op: "delete",
                    path: dir.to_string(),
                    store: self.store.url().to_owned(),
                    message: format!(
                        "{} objects appeared while the log was deleted (is a gateway still writing {}?)",
                        left.len(),
                        key.describe()
                    ),
                });
            }
        }
        self.store.remove_empty_dirs(&dir, 2);
        Ok(Deleted { objects })
    }

    /// The clusters whose store holds a log of `job #build` of `namespace/controller`.
    pub async fn clusters_with(
        &self,
        namespace: &str,
        controller: &str,
        job: &str,
        build: u64,
    ) -> Result<Vec<String>, BlobError> {
        let mut found = Vec::new();
        let root = self.store.root().clone().join(part(LOGS));
        for cluster in self.store.dirs(&root).await? {
            let Ok(key) = LogKey::new(&cluster, namespace, controller, job, build) else { continue };
            if !self.store.list(&self.dir(&key), None).await?.is_empty() {
                found.push(cluster);
            }
        }
        found.sort();
        Ok(found)
    }
}

/// What [`Logs::delete`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    /// The objects deleted (0: nothing of the log was stored, or it was deleted before).
    pub objects: u64,
}

/// What became of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkOutcome {
    /// The chunk is stored (by this write, or by an earlier one: `duplicate`); send on from
    /// `next`.
    Stored {
        /// The offset to send next.
        next: u64,
        /// It was stored already: nothing was written.
        duplicate: bool,
        /// The log is complete (the marker is written).
        complete: bool,
    },
    /// Not stored: the log is stored up to `next`; send from there (nothing, if `complete`).
    Conflict {
        /// The stored end.
        next: u64,
        /// The log is complete.
        complete: bool,
    },
}

/// Why a chunk was not handled.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    /// A chunk no store takes (too large, empty and not final, beyond 2^53): not to be retried.
    #[error("{0}")]
    Invalid(String),
    /// The store failed: retry later.
    #[error(transparent)]
    Store(#[from] BlobError),
}

#[derive(Debug, Clone, Copy, Default)]
struct Known {
    end: u64,
    complete: bool,
}

struct Slot {
    state: Arc<tokio::sync::Mutex<Option<Known>>>,
    used: u64,
}

/// The gateway's chunk writer (see the module docs).
pub struct LogWriter {
    logs: Logs,
    cache: Mutex<HashMap<LogKey, Slot>>,
    tick: AtomicU64,
}

impl LogWriter {
    /// A writer into `logs`.
    pub fn new(logs: Logs) -> LogWriter {
        LogWriter { logs, cache: Mutex::new(HashMap::new()), tick: AtomicU64::new(0) }
    }

    /// The logs written.
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    /// How many builds' ends are cached.
    pub fn cached(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn slot(&self, key: &LogKey) -> Arc<tokio::sync::Mutex<Option<Known>>> {
        let used = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let slot = cache.entry(key.clone()).or_insert_with(|| Slot { state: Arc::default(), used });
        slot.used = used;
        let state = slot.state.clone();
        if cache.len() > CACHE_MAX {
            // Out with the least recently used that nobody is writing now.
            let mut idle: Vec<(u64, LogKey)> = cache
                .iter()
                .filter(|(_, s)| Arc::strong_count(&s.state) == 1)
                .map(|(k, s)| (s.used, k.clone()))
                .collect();
            idle.sort_by_key(|(u, _)| *u);
            let excess = cache.len() - CACHE_MAX;
            for (_, k) in idle.into_iter().take(excess) {
                cache.remove(&k);
            }
        }
        state
    }

    fn forget(&self, key: &LogKey) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    async fn scan(&self, key: &LogKey) -> Result<Known, BlobError> {
        let s = self.logs.state(key).await?;
        Ok(Known { end: s.complete.unwrap_or(s.end).max(s.end), complete: s.complete.is_some() })
    }

    async fn mark_complete(&self, key: &LogKey, length: u64) -> Result<(), BlobError> {
        let chunks = self.logs.state(key).await?.chunks.len() as u64;
        let marker = Marker { v: 1, length, chunks };
        let bytes = Bytes::from(serde_json::to_vec(&marker).unwrap_or_default());
        self.logs.store.overwrite(&self.logs.marker_path(key), bytes).await
    }

    /// Writes the chunk `data` at `offset` of `key`'s log (`last`: the final chunk); see the
    /// module docs for the outcomes.
    pub async fn write_chunk(
        &self,
        key: &LogKey,
        offset: u64,
        data: Bytes,
        last: bool,
    ) -> Result<ChunkOutcome, ChunkError> {
        let len = data.len() as u64;
        if data.len() > MAX_CHUNK_BYTES {
            return Err(ChunkError::Invalid(format!(
                "the chunk is {len} bytes, at most {MAX_CHUNK_BYTES}: send smaller chunks"
            )));
        }
        if len == 0 && !last {
            return Err(ChunkError::Invalid("an empty chunk: only the final chunk may be empty".into()));
        }
        if offset.checked_add(len).is_none_or(|end| end > MAX_OFFSET) {
            return Err(ChunkError::Invalid(format!("offset {offset} + {len} bytes is beyond 2^53")));
        }
        let slot = self.slot(key);
        let mut cached = slot.lock().await;
        let mut known = match *cached {
            Some(k) => k,
            None => self.scan(key).await?,
        };
        if offset != known.end || known.complete {
            // A retry, a gap, or another replica wrote on: look again before answering.
            known = self.scan(key).await?;
        }
        *cached = Some(known);
        let outcome = self.decide(key, offset, data, last, &mut known).await;
        *cached = Some(known);
        drop(cached);
        if known.complete {
            self.forget(key);
        }
        outcome
    }

    async fn decide(
        &self,
        key: &LogKey,
        offset: u64,
        data: Bytes,
        last: bool,
        known: &mut Known,
    ) -> Result<ChunkOutcome, ChunkError> {
        let len = data.len() as u64;
        let conflict = |k: &Known| Ok(ChunkOutcome::Conflict { next: k.end, complete: k.complete });
        if offset == known.end && !known.complete {
            let mut duplicate = false;
            if len > 0 {
                match self.logs.store.create(&self.logs.chunk_path(key, offset), data).await? {
                    Created::Created => {}
                    Created::AlreadyExists => {
                        // Written meanwhile (another replica, or a retry that raced this one).
                        if self.logs.store.size(&self.logs.chunk_path(key, offset)).await? != Some(len) {
                            *known = self.scan(key).await?;
                            return conflict(known);
                        }
                        duplicate = true;
                    }
                }
                known.end = offset + len;
            }
            if last {
                self.mark_complete(key, known.end).await?;
                known.complete = true;
            }
            return Ok(ChunkOutcome::Stored { next: known.end, duplicate, complete: known.complete });
        }
        if len == 0 {
            // An empty final chunk again, at the end of a complete log: the same answer.
            return if last && known.complete && offset == known.end {
                Ok(ChunkOutcome::Stored { next: offset, duplicate: true, complete: true })
            } else {
                conflict(known)
            };
        }
        if offset < known.end {
            let same = self.logs.store.size(&self.logs.chunk_path(key, offset)).await? == Some(len);
            let fits = !last || offset + len == known.end;
            if same && fits {
                if last && !known.complete {
                    self.mark_complete(key, known.end).await?;
                    known.complete = true;
                }
                return Ok(ChunkOutcome::Stored { next: offset + len, duplicate: true, complete: known.complete });
            }
        }
        conflict(known)
    }
}

/// Why following stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] BlobError),
    /// Writing the bytes out failed (a closed pipe, say).
    #[error("writing the log: {0}")]
    Out(#[from] std::io::Error),
}

/// Reads a log from a position on as it grows (see the module docs).
pub struct Follower {
    logs: Logs,
    key: LogKey,
    pos: u64,
    last: Option<Path>,
    complete: Option<u64>,
}

impl Follower {
    /// Follows `key`'s log from byte `from`.
    pub fn new(logs: Logs, key: LogKey, from: u64) -> Follower {
        Follower { logs, key, pos: from, last: None, complete: None }
    }

    /// The bytes read so far (the position).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Whether the marker was seen and every byte read.
    pub fn done(&self) -> bool {
        self.complete.is_some_and(|len| self.pos >= len)
    }

    /// Reads what was appended since the last poll into `out`; true once the log is complete and
    /// read to its end.
    pub async fn poll(&mut self, out: &mut impl FnMut(&[u8]) -> std::io::Result<()>) -> Result<bool, FollowError> {
        let dir = self.logs.dir(&self.key);
        let depth = dir.parts().count() + 1;
        let listed = self.logs.store.list(&dir, self.last.as_ref()).await?;
        let mut chunks: Vec<(Chunk, Path)> = Vec::new();
        for m in listed {
            if m.location.parts().count() != depth {
                continue;
            }
            match BlobStore::name_in(&m.location).as_deref() {
                Some(MARKER) if self.complete.is_none() => {
                    self.complete = Some(match self.logs.marker(&self.key).await? {
                        Some(mk) => mk.length,
                        None => u64::MAX,
                    });
                }
                Some(n) => {
                    if let Some(offset) = parse_chunk_name(n).filter(|_| m.size > 0) {
                        chunks.push((Chunk { offset, size: m.size }, m.location));
                    }
                }
                None => {}
            }
        }
        chunks.sort_by_key(|(c, _)| c.offset);
        for (c, path) in chunks {
            if c.offset + c.size <= self.pos {
                self.last = Some(path);
                continue;
            }
            if c.offset > self.pos {
                break; // not contiguous (yet): wait
            }
            let bytes = self.logs.read_chunk(&self.key, c, self.pos - c.offset).await?;
            out(&bytes)?;
            self.pos = c.offset + c.size;
            self.last = Some(path);
        }
        if self.complete == Some(u64::MAX) {
            // An unreadable marker: the log ends where its chunks end.
            self.complete = Some(self.pos);
        }
        Ok(self.done())
    }
}

/// Follows until the log is complete: a poll at once, then at every wake-up from `wakes` and at
/// least every `poll_every` (`wakes` ending falls back to polling only). Returns the length read.
pub async fn follow<S>(
    mut follower: Follower,
    wakes: Option<S>,
    poll_every: Duration,
    mut out: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<u64, FollowError>
where
    S: Stream<Item = ()> + Unpin,
{
    let mut wakes = wakes;
    loop {
        if follower.poll(&mut out).await? {
            return Ok(follower.position());
        }
        let sleep = tokio::time::sleep(poll_every);
        match wakes.as_mut() {
            Some(w) => tokio::select! {
                woke = w.next() => if woke.is_none() { wakes = None },
                () = sleep => {}
            },
            None => sleep.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_and_jobs_encoded_as_one_segment() {
        let k = LogKey::new("eu", "team-a", "ci", "team/my app", 42).unwrap();
        assert_eq!(k.prefix(), "logs/eu/team-a/ci/team%2Fmy%20app/42");
        assert_eq!(encode_job(".hidden/.x"), "%2Ehidden%2F.x");
        assert_eq!(encode_job("ünï"), "%C3%BCn%C3%AF");
        assert_eq!(encode_job("a~b%c"), "a%7Eb%25c");
        let long = "é".repeat(500);
        let e = encode_job(&long);
        assert!(e.len() <= MAX_JOB_SEGMENT, "{}", e.len());
        assert_eq!(e.split_once('~').unwrap().1.len(), 32);
        assert!(!e.split_once('~').unwrap().0.ends_with('%'));
        assert_ne!(encode_job(&long), encode_job(&"é".repeat(499)), "the hash tells long names apart");
        for (bad, why) in [
            (LogKey::new("EU", "team-a", "ci", "app", 1), "cluster"),
            (LogKey::new("eu", "team_a", "ci", "app", 1), "namespace"),
            (LogKey::new("eu", "team-a", "", "app", 1), "controller"),
            (LogKey::new("eu", "team-a", "ci", "", 1), "job: must not be empty"),
            (LogKey::new("eu", "team-a", "ci", "a\nb", 1), "control characters"),
            (LogKey::new("eu", "team-a", "ci", &"x".repeat(513), 1), "longer than 512"),
            (LogKey::new("eu", "team-a", "ci", "app", 0), "build: 0"),
            (LogKey::new("eu", "team-a", "ci", "app", (1 << 53) + 1), "build"),
        ] {
            let e = bad.unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn chunk_names_sort_as_offsets() {
        assert_eq!(chunk_name(4096), "00000000000000004096");
        assert_eq!(parse_chunk_name("00000000000000004096"), Some(4096));
        assert_eq!(parse_chunk_name("4096"), None);
        assert_eq!(parse_chunk_name(MARKER), None);
        assert!(chunk_name(9) < chunk_name(10) && chunk_name(u64::MAX).as_str() < MARKER);
        let n = Notice { job: "a/b".into(), build: 3, next: 10, last: true };
        assert_eq!(
            serde_json::to_value(&n).unwrap(),
            serde_json::json!({"job": "a/b", "build": 3, "next": 10, "final": true})
        );
        assert_eq!(notice_subject("eu", "team-a", "ci"), "varroa.logs.eu.team-a.ci");
    }
}
