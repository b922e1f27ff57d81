//! What a process verified, carried over to the next one.
//!
//! [`Verified`] remembers, for each owned object, the version (UID and `resourceVersion`) that
//! this process saw match a desired object (by digest). A new process knows none of it: before
//! the checkpoint, its first look at each object cost a read and a server-side dry run
//! (ADR-0008), 3,125 of each for 500 Varroa Controllers, nine times the time of the watch lists.
//!
//! On a requested stop (SIGTERM), once the last reconcile has ended and before the Lease is
//! released, the leader writes its stamps to ConfigMaps in its own namespace ([`Checkpoint::save`]);
//! the next leader reads them before its first reconcile ([`Checkpoint::load`]).
//!
//! # Why a stamp cannot be forged by editing the object
//!
//! A stamp says "object X at resourceVersion R matched the desired object of digest D". The API
//! server assigns resourceVersions: whoever changes X (by hand, another controller) moves R, and
//! X is verified again as before, with a read and a dry run; a different desired object has
//! another D. Nothing on the object itself (an annotation, `managedFields`) is trusted. Only who
//! can write ConfigMaps in the operator's own namespace could write a false stamp, and they can
//! already change the operator's Deployment.
//!
//! # When the checkpoint is not used
//!
//! - A process that ends without being asked to (a crash, a lost Lease, a stop that outlasted
//!   the grace period) writes nothing. Its successor reads the last checkpoint written; a stamp
//!   in it is stale only for an object that changed since, which is verified again. Slower,
//!   never wrong.
//! - Digests are computed by the process that wrote them; a stamp whose digest another build
//!   computes differently matches nothing and costs the usual dry run.
//! - After restoring etcd from a backup, resourceVersions may be reused: delete the checkpoint
//!   ConfigMaps (`kubectl -n <operator namespace> delete configmap -l
//!   app.kubernetes.io/component=verified-checkpoint`) before starting the operator again, as
//!   one restarts every controller after such a restore.
//!
//! # Format
//!
//! ConfigMap `<name>` holds `format` (`1`), `shards` (how many ConfigMaps in all) and the first
//! `stamps`; `<name>-1`, `<name>-2`, ... hold the rest, each at most [`SHARD_BYTES`]. One line
//! per object: `kind namespace name uid resourceVersion digest generation metadata content`,
//! `-` for an empty namespace or an unknown value, digests in hexadecimal.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use crate::apply::{ObjectKey, Stamp, Verified};
use crate::error::{Error, Result};

/// The most bytes of stamps one ConfigMap holds (a ConfigMap may hold 1 MiB).
pub const SHARD_BYTES: usize = 512 * 1024;

/// The most ConfigMaps a checkpoint spreads over (32 MiB of stamps, about 200,000 objects).
pub const MAX_SHARDS: usize = 64;

const FORMAT: &str = "1";
const COMPONENT: &str = "verified-checkpoint";

/// The checkpoint of one operator: ConfigMaps named after it in its namespace.
#[derive(Clone)]
pub struct Checkpoint {
    api: Api<ConfigMap>,
    name: String,
    field_manager: String,
    shard_bytes: usize,
}

/// What [`Checkpoint::load`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Stamps taken over.
    pub stamps: usize,
    /// Lines that were not stamps (skipped).
    pub skipped: usize,
    /// ConfigMaps read.
    pub shards: usize,
}

impl Checkpoint {
    /// The checkpoint `name` (a ConfigMap name) in `namespace`, written as `field_manager`.
    pub fn new(client: Client, namespace: &str, name: &str, field_manager: &str) -> Checkpoint {
        Checkpoint {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            field_manager: field_manager.to_string(),
            shard_bytes: SHARD_BYTES,
        }
    }

    /// At most `bytes` of stamps per ConfigMap instead of [`SHARD_BYTES`] (tests use a small
    /// size to spread a few stamps over several ConfigMaps).
    pub fn shard_bytes(mut self, bytes: usize) -> Checkpoint {
        self.shard_bytes = bytes.clamp(1, SHARD_BYTES);
        self
    }

    fn shard_name(&self, i: usize) -> String {
        if i == 0 { self.name.clone() } else { format!("{}-{i}", self.name) }
    }

    /// Take over the stamps of the last checkpoint into `verified` (an object `verified` already
    /// holds keeps its own stamp). No checkpoint is no error: 0 stamps.
    pub async fn load(&self, verified: &Verified) -> Result<Loaded> {
        let mut loaded = Loaded::default();
        let what = |i| format!("read checkpoint ConfigMap {}/{}", self.api_namespace(), self.shard_name(i));
        let Some(first) = self.api.get_opt(&self.name).await.map_err(|e| Error::kube(what(0), e))? else {
            return Ok(loaded);
        };
        let data = first.data.unwrap_or_default();
        if data.get("format").map(String::as_str) != Some(FORMAT) {
            tracing::warn!(
                checkpoint = %self.name,
                format = data.get("format").map(String::as_str).unwrap_or("none"),
                "the checkpoint has a format this build does not read: ignored (every object is verified again)"
            );
            return Ok(loaded);
        }
        let shards = data.get("shards").and_then(|s| s.parse::<usize>().ok()).unwrap_or(1).clamp(1, MAX_SHARDS);
        let take = |text: Option<&String>, loaded: &mut Loaded| {
            loaded.shards += 1;
            for line in text.map(String::as_str).unwrap_or_default().lines().filter(|l| !l.is_empty()) {
                match decode(line) {
                    Some((key, stamp)) => {
                        if verified.insert_missing(key, stamp) {
                            loaded.stamps += 1;
                        }
                    }
                    None => loaded.skipped += 1,
                }
            }
        };
        take(data.get("stamps"), &mut loaded);
        for i in 1..shards {
            match self.api.get_opt(&self.shard_name(i)).await.map_err(|e| Error::kube(what(i), e))? {
                Some(cm) => take(cm.data.as_ref().and_then(|d| d.get("stamps")), &mut loaded),
                None => {
                    tracing::warn!(checkpoint = %self.shard_name(i), "a part of the checkpoint is missing: its objects are verified again")
                }
            }
        }
        if loaded.skipped > 0 {
            tracing::warn!(checkpoint = %self.name, skipped = loaded.skipped, "lines of the checkpoint that are not stamps were skipped");
        }
        Ok(loaded)
    }

    /// Write every stamp of `verified` (one server-side apply per ConfigMap), and delete the
    /// ConfigMaps of an earlier, larger checkpoint. Returns how many stamps were written.
    pub async fn save(&self, verified: &Verified) -> Result<usize> {
        let lines: Vec<String> = verified.entries().iter().map(|(k, s)| encode(k, s)).collect();
        let mut shards: Vec<String> = vec![String::new()];
        let mut written = 0;
        for line in &lines {
            let last = shards.last_mut().expect("one shard at least");
            if !last.is_empty() && last.len() + line.len() + 1 > self.shard_bytes {
                if shards.len() == MAX_SHARDS {
                    tracing::warn!(
                        checkpoint = %self.name,
                        left_out = lines.len() - written,
                        "the checkpoint is full: the objects left out are verified again after a restart"
                    );
                    break;
                }
                shards.push(String::new());
            }
            let last = shards.last_mut().expect("one shard at least");
            last.push_str(line);
            last.push('\n');
            written += 1;
        }
        let params = PatchParams::apply(&self.field_manager).force();
        for (i, stamps) in shards.iter().enumerate() {
            let name = self.shard_name(i);
            let mut data = BTreeMap::from([("stamps".to_string(), stamps.clone())]);
            if i == 0 {
                data.insert("format".into(), FORMAT.into());
                data.insert("shards".into(), shards.len().to_string());
            }
            let body = serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "labels": {
                        "app.kubernetes.io/component": COMPONENT,
                        "app.kubernetes.io/managed-by": self.field_manager,
                    },
                },
                "data": data,
            });
            self.api
                .patch(&name, &params, &Patch::Apply(&body))
                .await
                .map_err(|e| Error::kube(format!("write checkpoint ConfigMap {}/{name}", self.api_namespace()), e))?;
        }
        // The parts of an earlier, larger checkpoint.
        for i in shards.len()..MAX_SHARDS {
            let name = self.shard_name(i);
            match self.api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => break,
                Err(e) => {
                    return Err(Error::kube(format!("delete checkpoint ConfigMap {}/{name}", self.api_namespace()), e));
                }
            }
        }
        Ok(written)
    }

    fn api_namespace(&self) -> String {
        self.api.namespace().unwrap_or_default().to_string()
    }
}

/// How long writing the checkpoint may take at a stop.
pub const SAVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Run `controller` with `checkpoint`: its stamps are taken into `verified` first, and written
/// back once `controller` has ended (a stop that was asked for; a controller dropped for a lost
/// Lease never gets there). The checkpoint only saves requests: a failure to read or write it is
/// logged and changes nothing else.
pub async fn around<F: std::future::Future>(checkpoint: &Checkpoint, verified: &Verified, controller: F) -> F::Output {
    match checkpoint.load(verified).await {
        Ok(l) if l.shards == 0 => {
            tracing::info!(checkpoint = %checkpoint.name, "no checkpoint: every owned object is verified once (a read and a dry run)")
        }
        Ok(l) => tracing::info!(
            checkpoint = %checkpoint.name,
            stamps = l.stamps,
            configmaps = l.shards,
            "checkpoint read: objects unchanged since the last stop are not verified again"
        ),
        Err(e) => tracing::warn!(error = %e, "the checkpoint could not be read: every owned object is verified once"),
    }
    let out = controller.await;
    match tokio::time::timeout(SAVE_TIMEOUT, checkpoint.save(verified)).await {
        Ok(Ok(n)) => tracing::info!(checkpoint = %checkpoint.name, stamps = n, "checkpoint written"),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the checkpoint could not be written: the next process verifies every owned object once")
        }
        Err(_) => tracing::warn!(
            seconds = SAVE_TIMEOUT.as_secs(),
            "writing the checkpoint took too long: the next process verifies every owned object once"
        ),
    }
    out
}

/// One stamp as a line (see the module documentation).
fn encode(key: &ObjectKey, s: &Stamp) -> String {
    let dash = |v: &str| if v.is_empty() { "-".to_string() } else { v.to_string() };
    format!(
        "{} {} {} {} {} {:016x} {} {:016x} {}",
        key.kind,
        dash(&key.namespace),
        key.name,
        s.uid,
        s.resource_version,
        s.digest,
        s.generation.map_or("-".to_string(), |g| g.to_string()),
        s.meta_digest,
        s.content.map_or("-".to_string(), |c| format!("{c:016x}")),
    )
}

/// A line back into a stamp; `None` for anything else (a line is never trusted to be well formed).
fn decode(line: &str) -> Option<(ObjectKey, Stamp)> {
    let f: Vec<&str> = line.split(' ').collect();
    let [kind, namespace, name, uid, rv, digest, generation, meta, content] = f[..] else { return None };
    let word = |v: &str| !v.is_empty() && v.len() <= 253 && v.bytes().all(|b| b.is_ascii_graphic());
    if ![kind, namespace, name, uid, rv].into_iter().all(word) {
        return None;
    }
    let hex = |v: &str| (v.len() == 16).then(|| u64::from_str_radix(v, 16).ok()).flatten();
    let key = ObjectKey {
        kind: kind.to_string(),
        namespace: if namespace == "-" { String::new() } else { namespace.to_string() },
        name: name.to_string(),
    };
    let stamp = Stamp {
        uid: uid.to_string(),
        resource_version: rv.to_string(),
        digest: hex(digest)?,
        generation: if generation == "-" { None } else { Some(generation.parse().ok()?) },
        meta_digest: hex(meta)?,
        content: if content == "-" { None } else { Some(hex(content)?) },
    };
    Some((key, stamp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(generation: Option<i64>, content: Option<u64>) -> Stamp {
        Stamp {
            uid: "0b5b3c52-6f0e-4f53-9d1e-2a3c4d5e6f70".into(),
            resource_version: "1234".into(),
            digest: 0xdead_beef_0000_0001,
            generation,
            meta_digest: 7,
            content,
        }
    }

    #[test]
    fn a_stamp_reads_back_as_it_was_written() {
        for (namespace, generation, content) in
            [("team-a", Some(3), Some(u64::MAX)), ("", None, None), ("ns", Some(-1), None)]
        {
            let key = ObjectKey { kind: "StatefulSet".into(), namespace: namespace.into(), name: "jenkins".into() };
            let s = stamp(generation, content);
            let line = encode(&key, &s);
            assert_eq!(decode(&line), Some((key, s)), "{line}");
        }
    }

    #[test]
    fn anything_but_a_stamp_is_refused() {
        let good =
            encode(&ObjectKey { kind: "Service".into(), namespace: "a".into(), name: "b".into() }, &stamp(None, None));
        assert!(decode(&good).is_some());
        for bad in [
            "",
            "Service a b",
            &good.replace(" 1234 ", "  "),
            &good.replacen("deadbeef00000001", "deadbeef0001", 1),
            &good.replacen("deadbeef00000001", "zzzzzzzzzzzzzzzz", 1),
            &format!("{good} extra"),
            &good.replacen("Service", "Ser\u{7f}vice", 1),
            &good.replacen(" - ", " x ", 1),
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
