//! Waiting on watches (kube's `await_condition`, or a watcher over a list) under a timeout:
//! no fixed sleeps.

use futures::{StreamExt, TryStreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

/// How long any one wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// An object as JSON, cut short, for failure messages.
pub fn dump<T: Serialize>(o: &T) -> String {
    let s = serde_json::to_string(o).unwrap_or_else(|e| format!("<unserializable: {e}>"));
    if s.len() > 6000 { format!("{}...", &s[..6000]) } else { s }
}

/// Wait until the named object exists and satisfies `cond`; return it.
pub async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, cond: impl Fn(&K) -> bool) -> K
where
    K: Clone + Debug + Send + DeserializeOwned + Serialize + Resource + 'static,
{
    let c = move |o: Option<&K>| o.is_some_and(&cond);
    match tokio::time::timeout(WAIT, await_condition(api.clone(), name, c)).await {
        Ok(Ok(Some(o))) => o,
        Ok(Ok(None)) => panic!("{what}: {name} is gone"),
        Ok(Err(e)) => panic!("{what}: the watch failed: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out waiting for {what}; {name} is now {}", dump(&now))
        }
    }
}

/// Wait until the named object (of that uid) is gone.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, uid: &str, what: &str)
where
    K: Clone + Debug + Send + DeserializeOwned + Serialize + Resource + 'static,
{
    match tokio::time::timeout(WAIT, await_condition(api.clone(), name, conditions::is_deleted(uid))).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("{what}: the watch failed: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out waiting for {what}; {name} is now {}", dump(&now))
        }
    }
}

/// Wait until `pred` holds for the whole list `cfg` selects; return the list.
pub async fn wait_list<K>(api: &Api<K>, cfg: watcher::Config, what: &str, pred: impl Fn(&[K]) -> bool) -> Vec<K>
where
    K: Clone + Debug + Send + DeserializeOwned + Serialize + Resource + 'static,
{
    let key = |o: &K| {
        format!("{}/{}", o.meta().namespace.clone().unwrap_or_default(), o.meta().name.clone().unwrap_or_default())
    };
    let mut last: Vec<K> = vec![];
    let run = async {
        let mut stream = watcher(api.clone(), cfg).boxed();
        let mut init: BTreeMap<String, K> = BTreeMap::new();
        let mut cur: BTreeMap<String, K> = BTreeMap::new();
        let mut synced = false;
        while let Some(ev) = stream.try_next().await.expect("the watcher runs") {
            match ev {
                watcher::Event::Init => init.clear(),
                watcher::Event::InitApply(o) => {
                    init.insert(key(&o), o);
                }
                watcher::Event::InitDone => {
                    cur = std::mem::take(&mut init);
                    synced = true;
                }
                watcher::Event::Apply(o) => {
                    cur.insert(key(&o), o);
                }
                watcher::Event::Delete(o) => {
                    cur.remove(&key(&o));
                }
            }
            if synced {
                last = cur.values().cloned().collect();
                if pred(&last) {
                    return;
                }
            }
        }
    };
    if tokio::time::timeout(WAIT, run).await.is_err() {
        panic!("timed out waiting for {what}; the list is now {}", dump(&last));
    }
    last
}
