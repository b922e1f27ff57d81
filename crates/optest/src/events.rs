//! Events (`events.k8s.io/v1`) about an object, as `kubectl events --for` lists them.

use crate::WAIT;
use futures::TryStreamExt;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

fn regards(e: &Event, kind: &str, name: &str) -> bool {
    let r = e.regarding.as_ref();
    r.and_then(|r| r.name.as_deref()) == Some(name) && r.and_then(|r| r.kind.as_deref()) == Some(kind)
}

/// The Events in `namespace` regarding the object `kind`/`name`.
pub async fn about(client: &Client, namespace: &str, kind: &str, name: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    api.list(&Default::default())
        .await
        .unwrap_or_else(|e| panic!("list Events in {namespace}: {e}"))
        .items
        .into_iter()
        .filter(|e| regards(e, kind, name))
        .collect()
}

/// Wait (a watch) for an Event regarding `kind`/`name` that `matches`; on timeout, fail listing
/// the Events about it (type, reason, note).
pub async fn wait_for(
    client: &Client,
    namespace: &str,
    kind: &str,
    name: &str,
    what: &str,
    matches: impl Fn(&Event) -> bool,
) -> Event {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let stream = watcher(api, watcher::Config::default()).applied_objects();
    let found = tokio::time::timeout(WAIT, async {
        let mut s = std::pin::pin!(stream);
        while let Some(e) = s.try_next().await.unwrap_or_else(|e| panic!("watch Events in {namespace}: {e}")) {
            if regards(&e, kind, name) && matches(&e) {
                return e;
            }
        }
        panic!("the Event watch ended")
    })
    .await;
    match found {
        Ok(e) => e,
        Err(_) => {
            let seen: Vec<(Option<String>, Option<String>, Option<String>)> =
                about(client, namespace, kind, name).await.into_iter().map(|e| (e.type_, e.reason, e.note)).collect();
            panic!("no Event {what} about {kind} {namespace}/{name}; its Events: {seen:#?}")
        }
    }
}
