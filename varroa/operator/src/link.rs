//! The control link from the operator's side: what the gateway writes about the mites
//! (`varroa_mites`), and the desired configuration the operator hands to them
//! (`varroa_desired`), both JetStream key-value buckets (see `varroa_link::kv`).
//!
//! [`KvLink`] keeps a copy of `varroa_mites` in memory, fed by a watch of the whole bucket (its
//! current values first, then every change), and answers [`MiteSource::state`] from it without a
//! request. A change of a controller's cells wakes that controller.
//!
//! **Connected, lost, never connected.** A cell is *fresh* when its entry says `connected` and
//! its `lastHeartbeat` (or, before the first heartbeat, `since`) is younger than the heartbeat
//! timeout. A controller is connected when one of its cells is fresh. An entry that is not fresh
//! (the stream closed, or the gateway replica holding it died and stopped writing heartbeats) is
//! a lost stream; no entry at all is a mite that never connected. A timer re-checks freshness
//! every quarter of the timeout, so a controller whose gateway died shows `Mite unreachable`
//! within the timeout and a quarter, without any write.
//!
//! **Desired configuration.** [`KvLink::publish_desired`] writes a controller's rendered JCasC
//! (its digest, the files and the cell count) when it differs from what the bucket holds: the
//! bucket is watched too, so a restarted operator does not rewrite what is there. The sweep
//! deletes the entries of controllers that are gone.
//!
//! **Ready.** [`MiteSource::ready`] resolves once both watches have replayed the buckets once
//! (their last current value, or at once for an empty bucket): the operator's first reconciles
//! wait for it (bounded), so a restarted operator does not take a connected mite for an absent
//! one. The same NATS connection publishes the operator's lifecycle activity
//! ([`KvLink::client`], crate::activity).
//!
//! **NATS down.** The watches reconnect by themselves (`varroa_link::nats::connect` re-reads the
//! credential each time); while NATS is away the copy keeps its last state and freshness runs
//! out, so controllers go `Mite unreachable` rather than pretending. A desired write that fails is
//! a reconcile error (retried with back-off); the Kubernetes objects are written before it.

use crate::error::LinkError;
use crate::mite::{MiteSource, MiteState};
use async_nats::jetstream::kv::{Operation, Store};
use futures::StreamExt;
use futures::future::BoxFuture;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use varroa_api::ApplyResult;
use varroa_link::kv::{self, ControllerKey, DesiredEntry, MiteEntry, MiteKey};

type Key = (String, String);

/// Settings of the link.
#[derive(Debug, Clone)]
pub struct LinkSettings {
    /// How to reach NATS.
    pub nats: varroa_link::nats::ConnectSettings,
    /// A cell whose last heartbeat is older than this is not connected.
    pub heartbeat_timeout: Duration,
    /// JetStream replicas of the buckets when the operator creates them.
    pub replicas: usize,
}

/// The mites' state and the desired configuration, through NATS JetStream.
pub struct KvLink {
    cells: Mutex<HashMap<Key, BTreeMap<u32, MiteEntry>>>,
    /// What was last reported connected per controller, to notice freshness running out.
    connected: Mutex<HashMap<Key, bool>>,
    /// The (digest, cells) of every entry in `varroa_desired`.
    desired: Mutex<HashMap<Key, (String, Option<u32>)>>,
    desired_store: watch::Receiver<Option<Store>>,
    tx: broadcast::Sender<Key>,
    heartbeat_timeout: Duration,
    client: async_nats::Client,
    /// Whether each watch (mites, desired) has replayed its bucket once.
    ready: watch::Receiver<(bool, bool)>,
}

impl KvLink {
    /// Connects to NATS and starts the watches (in the background: returns at once, and keeps
    /// retrying while NATS is away).
    pub async fn start(settings: LinkSettings) -> Result<Arc<KvLink>, varroa_link::nats::NatsError> {
        let client = varroa_link::nats::connect(&settings.nats).await?;
        let js = async_nats::jetstream::new(client.clone());
        let (store_tx, store_rx) = watch::channel(None);
        let (ready_tx, ready) = watch::channel((false, false));
        let link = Arc::new(KvLink {
            cells: Mutex::default(),
            connected: Mutex::default(),
            desired: Mutex::default(),
            desired_store: store_rx,
            tx: broadcast::channel(4096).0,
            heartbeat_timeout: settings.heartbeat_timeout.max(Duration::from_secs(1)),
            client,
            ready,
        });
        let ready_tx = Arc::new(ready_tx);
        tokio::spawn(watch_mites(Arc::downgrade(&link), js.clone(), settings.replicas, ready_tx.clone()));
        tokio::spawn(watch_desired(Arc::downgrade(&link), js, settings.replicas, store_tx, ready_tx));
        tokio::spawn(freshness(Arc::downgrade(&link)));
        Ok(link)
    }

    /// The NATS connection (for the operator's activity: core NATS publishes).
    pub fn client(&self) -> async_nats::Client {
        self.client.clone()
    }

    /// Resolves once both buckets have been read once (see the module docs).
    pub async fn wait_ready(&self) {
        let mut rx = self.ready.clone();
        let _ = rx.wait_for(|(m, d)| *m && *d).await;
    }

    fn notify(&self, key: &Key) {
        let _ = self.tx.send(key.clone());
    }

    fn compute(&self, key: &Key) -> MiteState {
        let cells = self.cells.lock().map(|c| c.get(key).cloned()).unwrap_or_default();
        state_of(cells.as_ref(), jiff::Timestamp::now(), self.heartbeat_timeout)
    }

    /// Writes the controller's desired configuration unless the bucket holds it already.
    /// Returns whether it wrote.
    pub async fn publish_desired(&self, namespace: &str, name: &str, entry: DesiredEntry) -> Result<bool, LinkError> {
        let key = (namespace.to_string(), name.to_string());
        let same =
            self.desired.lock().map(|d| d.get(&key) == Some(&(entry.digest.clone(), entry.cells))).unwrap_or(false);
        if same {
            return Ok(false);
        }
        let ck = ControllerKey::new(namespace, name).map_err(|e| LinkError::Key(e.to_string()))?;
        let store = self.store().await?;
        store.put(ck.to_string(), kv::encode(&entry)).await.map_err(|e| LinkError::Write {
            namespace: namespace.to_string(),
            name: name.to_string(),
            bucket: kv::DESIRED_BUCKET,
            message: e.to_string(),
        })?;
        if let Ok(mut d) = self.desired.lock() {
            d.insert(key, (entry.digest, entry.cells));
        }
        Ok(true)
    }

    async fn store(&self) -> Result<Store, LinkError> {
        let mut rx = self.desired_store.clone();
        let wait = rx.wait_for(Option::is_some);
        let unreachable = LinkError::Unreachable { bucket: kv::DESIRED_BUCKET };
        match tokio::time::timeout(Duration::from_secs(10), wait).await {
            Ok(Ok(s)) => s.clone().ok_or(unreachable),
            _ => Err(unreachable),
        }
    }

    /// Drops what is kept about controllers not in `live` and deletes their desired entries (the
    /// watch of the bucket then forgets them).
    pub fn sweep(&self, live: &HashSet<Key>) {
        if let Ok(mut c) = self.cells.lock() {
            c.retain(|k, _| live.contains(k));
        }
        if let Ok(mut c) = self.connected.lock() {
            c.retain(|k, _| live.contains(k));
        }
        let gone: Vec<Key> =
            self.desired.lock().map(|d| d.keys().filter(|k| !live.contains(*k)).cloned().collect()).unwrap_or_default();
        let Some(store) = self.desired_store.borrow().clone() else { return };
        if gone.is_empty() {
            return;
        }
        tokio::spawn(async move {
            for (ns, name) in gone {
                let Ok(ck) = ControllerKey::new(&ns, &name) else { continue };
                if let Err(e) = store.delete(ck.to_string()).await {
                    tracing::warn!(key = %ck, error = %e, "could not delete a desired entry; retrying at the next sweep");
                }
            }
        });
    }

    /// Entries kept (for the tracked-objects gauge).
    pub fn tracked(&self) -> usize {
        self.cells.lock().map(|c| c.len()).unwrap_or(0) + self.connected.lock().map(|c| c.len()).unwrap_or(0)
    }
}

impl MiteSource for KvLink {
    fn state(&self, namespace: &str, name: &str) -> MiteState {
        let key = (namespace.to_string(), name.to_string());
        let s = self.compute(&key);
        if let Ok(mut c) = self.connected.lock() {
            c.insert(key, s.connected);
        }
        s
    }
    fn changes(&self) -> broadcast::Receiver<(String, String)> {
        self.tx.subscribe()
    }
    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.wait_ready())
    }
    fn publish_desired<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        entry: DesiredEntry,
    ) -> BoxFuture<'a, Result<bool, LinkError>> {
        Box::pin(KvLink::publish_desired(self, namespace, name, entry))
    }
    fn sweep(&self, live: &HashSet<Key>) {
        KvLink::sweep(self, live);
    }
    fn tracked(&self) -> usize {
        KvLink::tracked(self)
    }
}

/// The state of one controller from its cells' entries (see the module docs).
pub fn state_of(cells: Option<&BTreeMap<u32, MiteEntry>>, now: jiff::Timestamp, timeout: Duration) -> MiteState {
    let Some(cells) = cells.filter(|c| !c.is_empty()) else { return MiteState::default() };
    let timeout = jiff::SignedDuration::try_from(timeout).unwrap_or(jiff::SignedDuration::MAX);
    let fresh =
        |e: &MiteEntry| e.connected && e.last_heartbeat.or(e.since).is_some_and(|t| now.duration_since(t) < timeout);
    let connected = cells.values().any(fresh);
    // The latest result; a failure of the same digest in another cell wins over a success.
    let results: Vec<&kv::ApplyResultRecord> = cells.values().filter_map(|e| e.last_apply_result.as_ref()).collect();
    let latest = results.iter().max_by_key(|r| r.finished_at).copied();
    let chosen = latest.map(|l| results.iter().copied().find(|r| r.digest == l.digest && !r.succeeded).unwrap_or(l));
    let last_apply = chosen.map(|r| ApplyResult {
        succeeded: r.succeeded,
        message: r.message.clone(),
        digest: r.digest.clone(),
        time: r.finished_at.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
    });
    // Idle only when every connected cell says so: the least idle one counts.
    let idle: Vec<Option<u64>> = cells.values().filter(|e| fresh(e)).map(|e| e.observation.idle_for_seconds).collect();
    let idle_for = if connected && idle.iter().all(Option::is_some) {
        idle.iter().flatten().min().map(|s| Duration::from_secs(*s))
    } else {
        None
    };
    MiteState { connected, lost: !connected, last_apply, idle_for, wake_requested: false }
}

/// Re-checks freshness: a controller whose cells stopped sending heartbeats is woken.
async fn freshness(link: std::sync::Weak<KvLink>) {
    loop {
        let Some(l) = link.upgrade() else { return };
        let period = (l.heartbeat_timeout / 4).max(Duration::from_millis(250));
        let keys: Vec<(Key, bool)> =
            l.connected.lock().map(|c| c.iter().map(|(k, v)| (k.clone(), *v)).collect()).unwrap_or_default();
        for (key, was) in keys {
            if l.compute(&key).connected != was {
                l.notify(&key);
            }
        }
        drop(l);
        tokio::time::sleep(period).await;
    }
}

/// Back-off between attempts to (re)open a watch.
fn retry_delay(attempt: u32) -> Duration {
    Duration::from_millis(200u64.saturating_mul(1 << attempt.min(6))).min(Duration::from_secs(10))
}

/// Opens `bucket` (creating it if needed) and watches every key, its current values first
/// (history 1: one per key) and then every change; retries with back-off until it can.
async fn open_and_watch(
    js: &async_nats::jetstream::Context,
    bucket: &'static str,
    replicas: usize,
) -> (Store, async_nats::jetstream::kv::Watch) {
    let mut attempt = 0;
    loop {
        let opened = match bucket {
            kv::DESIRED_BUCKET => kv::open_desired(js, replicas).await,
            _ => kv::open_mites(js, replicas).await,
        };
        let failure = match opened {
            Ok(store) => match store.watch_with_history(">").await {
                Ok(watch) => {
                    tracing::info!(bucket, "watching");
                    return (store, watch);
                }
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        tracing::warn!(bucket, error = %failure, "cannot open or watch the bucket; retrying");
        tokio::time::sleep(retry_delay(attempt)).await;
        attempt += 1;
    }
}

type ReadyTx = Arc<watch::Sender<(bool, bool)>>;

async fn watch_mites(
    link: std::sync::Weak<KvLink>,
    js: async_nats::jetstream::Context,
    replicas: usize,
    ready: ReadyTx,
) {
    loop {
        let (store, mut watch) = open_and_watch(&js, kv::MITES_BUCKET, replicas).await;
        // A (re)opened watch replays every current value: cells it does not replay were deleted
        // while it was away and are dropped once the replay ends (an entry with no more pending,
        // or at once for an empty bucket).
        let mut replayed: Option<HashSet<(Key, u32)>> = Some(HashSet::new());
        if store.status().await.is_ok_and(|s| s.values() == 0) {
            drop_unreplayed(&link, &HashSet::new());
            replayed = None;
            ready.send_modify(|r| r.0 = true);
        }
        while let Some(entry) = watch.next().await {
            let Some(l) = link.upgrade() else { return };
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(error = %e, "the mites watch failed; reopening");
                    break;
                }
            };
            let replay_done = entry.delta == 0;
            let parsed = entry.key.parse::<MiteKey>().ok();
            if parsed.is_none() {
                tracing::warn!(key = %entry.key, "an entry in {} with a key that is not <ns>.<controller>.<cell>; ignored", kv::MITES_BUCKET);
            }
            let key = parsed
                .as_ref()
                .map(|mk| (mk.controller.namespace().to_string(), mk.controller.controller().to_string()));
            if let (Some(seen), Some(key), Some(mk)) = (replayed.as_mut(), &key, &parsed) {
                seen.insert((key.clone(), mk.cell));
            }
            if replay_done && let Some(seen) = replayed.take() {
                drop_unreplayed(&link, &seen);
            }
            if let (Some(mk), Some(key)) = (parsed, key) {
                apply_mite_entry(&l, &entry, mk.cell, key);
            }
            if replay_done {
                ready.send_modify(|r| r.0 = true);
            }
        }
        // The watch ended (NATS went away): open it again, which re-reads every value.
        tokio::time::sleep(retry_delay(0)).await;
    }
}

/// Puts (or removes) one cell's entry into the copy and wakes its controller.
fn apply_mite_entry(l: &KvLink, entry: &async_nats::jetstream::kv::Entry, cell: u32, key: Key) {
    let value = match entry.operation {
        Operation::Put => match kv::decode_mite(&entry.key, &entry.value) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(error = %e, "ignored");
                return;
            }
        },
        Operation::Delete | Operation::Purge => None,
    };
    if let Ok(mut cells) = l.cells.lock() {
        let c = cells.entry(key.clone()).or_default();
        match value {
            Some(v) => {
                c.insert(cell, v);
            }
            None => {
                c.remove(&cell);
            }
        }
        if c.is_empty() {
            cells.remove(&key);
        }
    }
    l.notify(&key);
}

/// Drops the cells a replay did not bring back (deleted while the watch was away), waking their
/// controllers.
fn drop_unreplayed(link: &std::sync::Weak<KvLink>, seen: &HashSet<(Key, u32)>) {
    let Some(l) = link.upgrade() else { return };
    let mut woken = vec![];
    if let Ok(mut cells) = l.cells.lock() {
        for (key, c) in cells.iter_mut() {
            let before = c.len();
            c.retain(|cell, _| seen.contains(&(key.clone(), *cell)));
            if c.len() != before {
                woken.push(key.clone());
            }
        }
        cells.retain(|_, c| !c.is_empty());
    }
    for key in woken {
        l.notify(&key);
    }
}

async fn watch_desired(
    link: std::sync::Weak<KvLink>,
    js: async_nats::jetstream::Context,
    replicas: usize,
    store_tx: watch::Sender<Option<Store>>,
    ready: ReadyTx,
) {
    loop {
        let (store, mut watch) = open_and_watch(&js, kv::DESIRED_BUCKET, replicas).await;
        if store.status().await.is_ok_and(|s| s.values() == 0) {
            ready.send_modify(|r| r.1 = true);
        }
        store_tx.send_replace(Some(store));
        while let Some(entry) = watch.next().await {
            let Some(l) = link.upgrade() else { return };
            let Ok(entry) = entry else { break };
            let replay_done = entry.delta == 0;
            if let Ok(ck) = entry.key.parse::<ControllerKey>()
                && let Ok(mut d) = l.desired.lock()
            {
                let key = (ck.namespace().to_string(), ck.controller().to_string());
                match entry.operation {
                    Operation::Put => match kv::decode_desired(&entry.key, &entry.value) {
                        Ok(v) => {
                            d.insert(key, (v.digest, v.cells));
                        }
                        Err(_) => {
                            d.remove(&key);
                        }
                    },
                    Operation::Delete | Operation::Purge => {
                        d.remove(&key);
                    }
                }
            }
            if replay_done {
                ready.send_modify(|r| r.1 = true);
            }
        }
        // The watch ended (NATS went away): open it again, which re-reads every value.
        tokio::time::sleep(retry_delay(0)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(connected: bool, heartbeat_secs_ago: i64, now: jiff::Timestamp) -> MiteEntry {
        MiteEntry {
            connected,
            last_heartbeat: Some(now - jiff::SignedDuration::from_secs(heartbeat_secs_ago)),
            ..Default::default()
        }
    }

    #[test]
    fn connected_lost_and_never_connected() {
        let now = jiff::Timestamp::now();
        let t = Duration::from_secs(30);
        assert_eq!(state_of(None, now, t), MiteState::default(), "never connected");
        let one = |e| BTreeMap::from([(0, e)]);
        let s = state_of(Some(&one(entry(true, 5, now))), now, t);
        assert!(s.connected && !s.lost);
        let s = state_of(Some(&one(entry(true, 45, now))), now, t);
        assert!(!s.connected && s.lost, "a stale heartbeat is a lost stream: {s:?}");
        let s = state_of(Some(&one(entry(false, 1, now))), now, t);
        assert!(!s.connected && s.lost, "a closed stream");
        // Two cells: one fresh is enough to be connected.
        let two = BTreeMap::from([(0, entry(false, 100, now)), (1, entry(true, 1, now))]);
        assert!(state_of(Some(&two), now, t).connected);
    }

    #[test]
    fn a_failure_in_one_cell_is_not_hidden_by_a_success_in_another() {
        let now = jiff::Timestamp::now();
        let result = |ok: bool, secs_ago: i64, digest: &str| kv::ApplyResultRecord {
            digest: digest.into(),
            succeeded: ok,
            message: if ok { String::new() } else { "unknown root key".into() },
            drift_paths: vec![],
            finished_at: Some(now - jiff::SignedDuration::from_secs(secs_ago)),
        };
        let mut a = entry(true, 1, now);
        a.last_apply_result = Some(result(false, 10, "sha256:b"));
        let mut b = entry(true, 1, now);
        b.last_apply_result = Some(result(true, 5, "sha256:b"));
        let s = state_of(Some(&BTreeMap::from([(0, a), (1, b.clone())])), now, Duration::from_secs(30));
        let r = s.last_apply.expect("a result");
        assert!(!r.succeeded && r.message == "unknown root key", "{r:?}");
        // A newer digest that succeeded everywhere replaces an older failure.
        let mut a = entry(true, 1, now);
        a.last_apply_result = Some(result(false, 60, "sha256:a"));
        let s = state_of(Some(&BTreeMap::from([(0, a), (1, b)])), now, Duration::from_secs(30));
        assert!(s.last_apply.is_some_and(|r| r.succeeded && r.digest == "sha256:b"));
    }

    #[test]
    fn idle_only_when_every_connected_cell_is() {
        let now = jiff::Timestamp::now();
        let mut a = entry(true, 1, now);
        a.observation.idle_for_seconds = Some(600);
        let mut b = entry(true, 1, now);
        b.observation.idle_for_seconds = Some(60);
        let s = state_of(Some(&BTreeMap::from([(0, a.clone()), (1, b)])), now, Duration::from_secs(30));
        assert_eq!(s.idle_for, Some(Duration::from_secs(60)));
        let c = entry(true, 1, now);
        let s = state_of(Some(&BTreeMap::from([(0, a), (1, c)])), now, Duration::from_secs(30));
        assert_eq!(s.idle_for, None, "a cell that has not said is not idle");
    }
}
