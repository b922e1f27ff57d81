//! The desired configurations, mirrored from the `varroa_desired` bucket.
//!
//! One task watches the whole bucket (`LastPerSubject`: the current value of every key first, then
//! each change) and keeps a `tokio::sync::watch` channel per controller; each mite stream of that
//! controller holds a receiver, so a new entry reaches every connected cell at once, and a stream
//! that opens reads the current one. The watch is re-opened after an error (NATS restarted), and
//! re-delivers the current values; streams only send a digest they have not sent yet.
//!
//! Channels are removed when their controller's entry is deleted and no stream holds them, so the
//! map does not grow with controllers that are gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv::{Operation, Store};
use futures::StreamExt;
use tokio::sync::watch;
use varroa_link::kv::{self, ControllerKey, DesiredEntry};

/// The current desired entry of a controller (`None`: none written, or deleted).
pub type Current = Option<Arc<DesiredEntry>>;

/// The mirror of `varroa_desired`.
#[derive(Default)]
pub struct DesiredCache {
    channels: Mutex<HashMap<ControllerKey, watch::Sender<Current>>>,
}

impl DesiredCache {
    /// A receiver of `key`'s entry (its current value is there at once).
    pub fn subscribe(&self, key: &ControllerKey) -> watch::Receiver<Current> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(key.clone()).or_insert_with(|| watch::channel(None).0).subscribe()
    }

    /// The current entry of `key`.
    pub fn current(&self, key: &ControllerKey) -> Current {
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).and_then(|tx| tx.borrow().clone())
    }

    /// Sets `key`'s entry, waking its streams when it changed.
    pub fn set(&self, key: ControllerKey, value: Current) {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if value.is_none() {
            if let Some(tx) = map.get(&key) {
                tx.send_replace(None);
                if tx.receiver_count() == 0 {
                    map.remove(&key);
                }
            }
            return;
        }
        let tx = map.entry(key).or_insert_with(|| watch::channel(None).0);
        tx.send_if_modified(|cur| {
            if *cur != value {
                *cur = value;
                true
            } else {
                false
            }
        });
    }

    /// Drops `key`'s channel when it has no value and no stream holds it (called as a stream ends).
    pub fn release(&self, key: &ControllerKey) {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(key).is_some_and(|tx| tx.borrow().is_none() && tx.receiver_count() == 0) {
            map.remove(key);
        }
    }

    /// How many controllers are mirrored (for tests of the cleanup).
    pub fn len(&self) -> usize {
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Watches `store` forever, feeding `cache`; the watch is opened again after an error and after
/// each NATS reconnect (`connects` changes). Returns only when `cache` is the last owner.
pub async fn watch_desired(store: Store, cache: Arc<DesiredCache>, mut connects: watch::Receiver<u64>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        connects.borrow_and_update();
        match store.watch_with_history(">").await {
            Ok(mut watch) => loop {
                let next = tokio::select! {
                    next = watch.next() => next,
                    changed = connects.changed() => {
                        if changed.is_ok() {
                            tracing::info!("NATS reconnected; watching varroa_desired again");
                            backoff = Duration::ZERO;
                        }
                        break;
                    }
                };
                let Some(next) = next else { break };
                let entry = match next {
                    Ok(e) => e,
                    Err(e) => {
                        tracing::warn!(error = %e, "varroa_desired watch failed; watching again");
                        break;
                    }
                };
                backoff = Duration::from_millis(100);
                let key = match entry.key.parse::<ControllerKey>() {
                    Ok(k) => k,
                    Err(e) => {
                        tracing::warn!(error = %e, "ignoring an entry of varroa_desired");
                        continue;
                    }
                };
                match entry.operation {
                    Operation::Put => match kv::decode_desired(&entry.key, &entry.value) {
                        Ok(d) => cache.set(key, Some(Arc::new(d))),
                        Err(e) => tracing::warn!(error = %e, "ignoring an entry of varroa_desired"),
                    },
                    Operation::Delete | Operation::Purge => cache.set(key, None),
                }
            },
            Err(e) => tracing::warn!(error = %e, "cannot watch varroa_desired; retrying"),
        }
        if Arc::strong_count(&cache) == 1 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).clamp(Duration::from_millis(100), Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(digest: &str) -> Current {
        Some(Arc::new(DesiredEntry { digest: digest.into(), ..Default::default() }))
    }

    #[test]
    fn subscribers_see_changes_and_channels_go_with_their_controller() {
        let cache = DesiredCache::default();
        let key = ControllerKey::new("team-a", "ci").unwrap();
        let mut rx = cache.subscribe(&key);
        assert!(rx.borrow_and_update().is_none());
        cache.set(key.clone(), entry("d1"));
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().as_ref().unwrap().digest, "d1");
        cache.set(key.clone(), entry("d1"));
        assert!(!rx.has_changed().unwrap(), "the same entry again wakes nobody");
        assert_eq!(cache.current(&key).unwrap().digest, "d1");

        cache.set(key.clone(), None);
        assert_eq!(cache.len(), 1, "kept while a stream holds it");
        drop(rx);
        cache.release(&key);
        assert!(cache.is_empty(), "a deleted controller with no stream leaves nothing behind");
        let other = ControllerKey::new("team-b", "ci").unwrap();
        cache.set(other.clone(), entry("x"));
        cache.set(other, None);
        assert!(cache.is_empty());
    }
}
