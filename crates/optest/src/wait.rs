//! Waiting: on a watch where the API server has one; polling only for what has none (in-process
//! counters, a log file, an HTTP endpoint).

use crate::WAIT;
use futures::{StreamExt, TryStreamExt};
use kube::Resource;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Wait (polling every 20 ms, for in-process state that has no watch) until `f` holds.
pub async fn eventually(what: &str, f: impl Fn() -> bool) {
    let held = poll(WAIT, Duration::from_millis(20), || std::future::ready(f().then_some(()))).await;
    assert!(held.is_some(), "timed out waiting until {what}");
}

/// Ask `f` every `every` until it gives a value, for at most `within`; `None` when it never did
/// (the caller says what it waited for and what it saw).
pub async fn poll<T, Fut>(within: Duration, every: Duration, mut f: impl FnMut() -> Fut) -> Option<T>
where
    Fut: Future<Output = Option<T>>,
{
    let asking = async {
        loop {
            if let Some(v) = f().await {
                return v;
            }
            tokio::time::sleep(every).await;
        }
    };
    tokio::time::timeout(within, asking).await.ok()
}

/// Wait until an object satisfies a condition; on timeout, fail with what it is.
pub async fn wait_for<K>(api: Api<K>, name: &str, what: &str, cond: impl Condition<K>) -> K
where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
{
    wait_for_explained(api, name, what, cond, |now| format!("it is: {now:#?}")).await
}

/// [`wait_for`], failing with `explain(the object as it is now)` (its status, the operators'
/// logs, ...).
pub async fn wait_for_explained<K>(
    api: Api<K>,
    name: &str,
    what: &str,
    cond: impl Condition<K>,
    explain: impl FnOnce(Option<K>) -> String,
) -> K
where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
{
    match tokio::time::timeout(WAIT, await_condition(api.clone(), name, cond)).await {
        Ok(Ok(Some(o))) => o,
        Ok(Ok(None)) => panic!("{name} is gone while waiting for: {what}"),
        Ok(Err(e)) => panic!("watching {name}: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out waiting for {name}: {what}\n{}", explain(now))
        }
    }
}

/// Wait until the object with this uid is deleted.
pub async fn wait_deleted<K>(api: Api<K>, name: &str, uid: &str)
where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
{
    let r = tokio::time::timeout(WAIT, await_condition(api.clone(), name, conditions::is_deleted(uid))).await;
    match r {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("watching {name}: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out waiting for {name} to be deleted; it is: {now:#?}")
        }
    }
}

/// Wait (a watch with `config`) until `n` distinct objects (by namespace and name) have
/// satisfied `ok`, for at most `within`: the end of a burst of creations.
pub async fn until_count<K>(
    api: Api<K>,
    config: watcher::Config,
    n: usize,
    within: Duration,
    what: &str,
    ok: impl Fn(&K) -> bool,
) where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut seen = BTreeSet::new();
    let mut stream = watcher(api, config).applied_objects().boxed();
    let wait = async {
        while let Some(o) = stream.try_next().await.unwrap_or_else(|e| panic!("watching for {what}: {e}")) {
            if ok(&o) {
                seen.insert((o.namespace().unwrap_or_default(), o.name_any()));
                if seen.len() >= n {
                    return;
                }
            }
        }
        panic!("the watch for {what} ended")
    };
    if tokio::time::timeout(within, wait).await.is_err() {
        panic!("timed out after {within:?} waiting for {n} {what}")
    }
}

/// Watches a kind and keeps every version seen, until dropped.
pub struct Recorder<K> {
    pub seen: Arc<Mutex<Vec<K>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Recorder<K>
where
    K: Clone + Debug + Send + Sync + DeserializeOwned + Resource + 'static,
    K::DynamicType: Default,
{
    /// Start watching; returns once the watch has listed what exists.
    pub async fn start(api: Api<K>, cfg: watcher::Config) -> Recorder<K> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let s2 = seen.clone();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut stream = std::pin::pin!(watcher(api, cfg));
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        s2.lock().expect("the recorder's lock").push(o)
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                    }
                    _ => {}
                }
            }
        });
        let _ = tokio::time::timeout(WAIT, ready_rx).await;
        Recorder { seen, task }
    }

    /// Every version seen so far, in order.
    pub fn all(&self) -> Vec<K> {
        self.seen.lock().expect("the recorder's lock").clone()
    }
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
