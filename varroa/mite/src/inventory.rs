//! The trigger inventory (docs/varroa/plugin-protocol.md, "Trigger inventory"): every
//! [`InventorySettings::interval`] the mite asks the Varroa plugin for the job schedules,
//! `GET {jenkins}/varroa/inventory` with its Jenkins user and token, and sends each job whose
//! schedules changed since what the gateway acknowledged as a `job_schedule` build event, through
//! the plugin listener's forwarding ([`crate::plugin::forward_events`]): the same batches over the
//! same stream, answered by the same `EventsAck`.
//!
//! - **What is sent.** On start, every job with a schedule once. Then a job whose schedules
//!   differ from what was acknowledged, and a job that was acknowledged with schedules and is no
//!   longer listed with any (`schedules: []`). An unchanged job is not sent again.
//! - **Ids.** `schedule:<job>:<digest>:<t>`: the job (or `@` and a digest of its name when it does
//!   not fit an id), 16 hex digits of the SHA-256 of the schedules' JSON, and the Unix time in
//!   milliseconds the mite first saw this state, which is also the event's `time` (to the
//!   millisecond: the records keep the latest time's schedules, so two states of a job seen within
//!   one second must not share a time). A change not acknowledged yet
//!   keeps its id and time on every later poll (JetStream and the recorder drop the repeats); a
//!   job that changes back to an earlier state gets a new id.
//! - **Not acknowledged** (no stream, the gateway says retry, no ack in time): the changes stay
//!   pending and go again at the next poll. Rejected by the gateway, or malformed here: logged and
//!   not sent again until the job changes.
//! - **Bounds.** At most [`MAX_JOBS`] jobs and [`MAX_BODY`] bytes; an inventory beyond either, not
//!   JSON, or of another `v` is refused whole for that poll (a warning; nothing is sent and
//!   nothing is forgotten).
//! - **404** (no plugin, or one older than the inventory): no inventory. Logged once; the mite
//!   keeps polling quietly and sends nothing, and logs again when the inventory appears.

use crate::jenkins::JenkinsClient;
use crate::plugin::{BatchSlot, forward_events};
use http::{Method, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use varroa_link::builds::{MAX_EVENTS_PER_BATCH, MAX_ID, Schedule, parse_event, valid_id};

/// The plugin's endpoint on Jenkins.
pub const PATH: &str = "/varroa/inventory";
/// The most jobs of one inventory.
pub const MAX_JOBS: usize = 10_000;
/// The largest inventory read.
pub const MAX_BODY: usize = 8 << 20;
/// The inventory version this mite reads.
pub const VERSION: u32 = 1;

/// `--inventory-interval`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventorySettings {
    /// How often the inventory is asked for.
    pub interval: Duration,
}

impl Default for InventorySettings {
    fn default() -> Self {
        InventorySettings { interval: Duration::from_secs(60) }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

/// The inventory's metrics.
#[derive(Default)]
pub(crate) struct InventoryMetrics {
    polls: Family<Outcome, Counter>,
    events: Family<Outcome, Counter>,
}

impl InventoryMetrics {
    pub(crate) fn register(self: &Arc<Self>, r: &mut Registry) {
        r.register(
            "varroa_mite_inventory_polls",
            "Trigger inventory polls by outcome (ok, not_served: 404, failed)",
            self.polls.clone(),
        );
        r.register(
            "varroa_mite_inventory_events",
            "job_schedule events from the trigger inventory by outcome (accepted, rejected, retry)",
            self.events.clone(),
        );
    }
    fn poll(&self, outcome: &'static str) {
        self.polls.get_or_create(&Outcome { outcome }).inc();
    }
    fn events(&self, outcome: &'static str, n: usize) {
        if n > 0 {
            self.events.get_or_create(&Outcome { outcome }).inc_by(n as u64);
        }
    }
}

#[derive(Deserialize)]
struct Doc {
    v: u32,
    jobs: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    job: String,
    #[serde(default)]
    schedules: Vec<Schedule>,
}

/// Parses an inventory: the jobs and their schedules (a job listed twice: the last).
pub(crate) fn parse(body: &[u8]) -> Result<BTreeMap<String, Vec<Schedule>>, String> {
    let doc: Doc = serde_json::from_slice(body)
        .map_err(|e| format!("not the inventory's JSON ({e}); expected {{\"v\": 1, \"jobs\": [...]}}"))?;
    if doc.v != VERSION {
        return Err(format!("inventory version {} (this mite reads {VERSION})", doc.v));
    }
    if doc.jobs.len() > MAX_JOBS {
        return Err(format!("{} jobs; at most {MAX_JOBS}", doc.jobs.len()));
    }
    Ok(doc.jobs.into_iter().map(|e| (e.job, e.schedules)).collect())
}

fn short_digest(bytes: &[u8]) -> String {
    crate::hex(&Sha256::digest(bytes)[..8])
}

/// The event id of `job`'s `schedules` first seen at `t` (Unix milliseconds).
pub(crate) fn event_id(job: &str, schedules: &[Schedule], t: u64) -> String {
    let digest = short_digest(&serde_json::to_vec(schedules).unwrap_or_default());
    let id = format!("schedule:{job}:{digest}:{t}");
    if id.len() <= MAX_ID && valid_id(&id) {
        return id;
    }
    format!("schedule:@{}:{digest}:{t}", short_digest(job.as_bytes()))
}

/// RFC 3339 of Unix milliseconds (UTC), to the millisecond.
fn rfc3339(millis: u64) -> String {
    let (secs, ms) = (millis / 1000, millis % 1000);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// A change not acknowledged yet.
#[derive(Debug, Clone)]
struct Pending {
    schedules: Vec<Schedule>,
    since: u64,
}

/// What was acknowledged and what is pending.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    /// The jobs the records have schedules of, as acknowledged.
    sent: BTreeMap<String, Vec<Schedule>>,
    pending: BTreeMap<String, Pending>,
}

impl Tracker {
    /// Takes an inventory seen at `now` (Unix milliseconds): what differs from the acknowledged becomes
    /// pending (keeping its first time while unchanged).
    pub(crate) fn observe(&mut self, inventory: &BTreeMap<String, Vec<Schedule>>, now: u64) {
        let jobs: BTreeSet<String> =
            inventory.keys().chain(self.sent.keys()).chain(self.pending.keys()).cloned().collect();
        for job in jobs {
            let want = inventory.get(&job).cloned().unwrap_or_default();
            let have = self.sent.get(&job).map(Vec::as_slice).unwrap_or_default();
            if want == have {
                self.pending.remove(&job);
                continue;
            }
            match self.pending.get(&job) {
                Some(p) if p.schedules == want => {}
                _ => {
                    self.pending.insert(job, Pending { schedules: want, since: now });
                }
            }
        }
    }

    /// The pending changes as events: (job, id, JSON); a malformed one is dropped here (logged)
    /// and counted as sent.
    fn events(&mut self) -> Vec<(String, String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut bad = Vec::new();
        for (job, p) in &self.pending {
            let id = event_id(job, &p.schedules, p.since);
            let v = json!({
                "v": varroa_link::builds::VERSION, "id": id, "time": rfc3339(p.since), "job": job,
                "kind": "job_schedule", "schedules": p.schedules,
            });
            match parse_event(&v) {
                Ok(_) => out.push((job.clone(), id, serde_json::to_vec(&v).unwrap_or_default())),
                Err(e) => {
                    tracing::warn!(job = %varroa_link::kv::bounded(job, 128), error = %e,
                        "a job's schedules in the trigger inventory are not a valid job_schedule event; not sent");
                    bad.push(job.clone());
                }
            }
        }
        for job in bad {
            self.acknowledged(&job);
        }
        out
    }

    fn acknowledged(&mut self, job: &str) {
        if let Some(p) = self.pending.remove(job) {
            if p.schedules.is_empty() {
                self.sent.remove(job);
            } else {
                self.sent.insert(job.to_owned(), p.schedules);
            }
        }
    }

    /// Whether a change waits for its acknowledgement.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Sends the pending changes, batch by batch, until one is not acknowledged.
async fn send(tracker: &mut Tracker, slot: &BatchSlot, metrics: &InventoryMetrics) {
    let events = tracker.events();
    for batch in events.chunks(MAX_EVENTS_PER_BATCH) {
        let n = batch.len();
        let bytes = batch.iter().map(|(_, _, b)| b.clone()).collect();
        match forward_events(slot, bytes).await {
            Ok(ack) if ack.retry_after_ms > 0 => {
                metrics.events("retry", n);
                tracing::debug!("the gateway cannot store job schedules now; sent again at the next poll");
                return;
            }
            Ok(ack) => {
                let rejected: BTreeSet<&str> = ack.rejected.iter().map(|r| r.id.as_str()).collect();
                if let Some(r) = ack.rejected.first() {
                    tracing::warn!(rejected = ack.rejected.len(), first_id = %r.id, first_error = %r.error,
                        "the gateway rejected job_schedule events; not sent again until the job changes");
                }
                metrics.events("rejected", rejected.len());
                metrics.events("accepted", n.saturating_sub(rejected.len()));
                for (job, _, _) in batch {
                    tracker.acknowledged(job);
                }
            }
            Err(e) => {
                metrics.events("retry", n);
                tracing::debug!(reason = %e, "job schedules not acknowledged; sent again at the next poll");
                return;
            }
        }
    }
}

fn now_millis() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

/// Polls the inventory until `stop`.
pub(crate) async fn run(
    client: Arc<JenkinsClient>,
    settings: InventorySettings,
    slot: BatchSlot,
    metrics: Arc<InventoryMetrics>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tracker = Tracker::default();
    // What was logged last: "ok", "not_served", or "failed" (each logged once per change).
    let mut last = "";
    loop {
        let polled = tokio::select! {
            a = client.send(Method::GET, PATH, None, &[]) => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let outcome = match polled {
            Ok(a) if a.status == StatusCode::NOT_FOUND => {
                if last != "not_served" {
                    tracing::info!(url = %format!("{}{PATH}", client.config().url),
                        "Jenkins serves no trigger inventory (404: no Varroa plugin, or an older one); no job schedules are sent, the mite keeps asking");
                }
                "not_served"
            }
            Ok(a) if a.status == StatusCode::OK => match parse(&a.body) {
                Ok(inventory) => {
                    if last != "ok" {
                        tracing::info!(jobs = inventory.len(), "trigger inventory read");
                    }
                    tracker.observe(&inventory, now_millis());
                    "ok"
                }
                Err(e) => {
                    if last != "failed" {
                        tracing::warn!(error = %e, "the trigger inventory is refused for this poll; nothing is sent");
                    }
                    "failed"
                }
            },
            Ok(a) => {
                if last != "failed" {
                    tracing::warn!(
                        status = a.status.as_u16(),
                        "Jenkins did not serve the trigger inventory; asking again at the next poll"
                    );
                }
                "failed"
            }
            Err(e) => {
                if last != "failed" {
                    tracing::warn!(error = %e, "cannot read the trigger inventory; asking again at the next poll");
                }
                "failed"
            }
        };
        metrics.poll(outcome);
        last = outcome;
        if tracker.has_pending() {
            send(&mut tracker, &slot, &metrics).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(settings.interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(spec: &str) -> Schedule {
        Schedule { trigger: "cron".into(), spec: spec.into(), next: None }
    }

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_285_700_000), "2026-12-03T08:15:00.000Z");
        assert_eq!(rfc3339(951_782_400_042), "2000-02-29T00:00:00.042Z");
    }

    #[test]
    fn ids_are_deterministic_and_valid() {
        let a = event_id("team/app", &[s("H/15 * * * *")], 7);
        assert_eq!(a, event_id("team/app", &[s("H/15 * * * *")], 7));
        assert!(a.starts_with("schedule:team/app:") && a.ends_with(":7") && valid_id(&a), "{a}");
        assert_ne!(a, event_id("team/app", &[s("H * * * *")], 7));
        let odd = event_id("my app", &[], 7);
        assert!(odd.starts_with("schedule:@") && valid_id(&odd), "{odd}");
        assert!(valid_id(&event_id(&"x".repeat(512), &[], 7)));
    }

    #[test]
    fn only_changes_are_pending_and_a_vanished_job_is_empty() {
        let mut t = Tracker::default();
        let inv = BTreeMap::from([("a".to_owned(), vec![s("1")]), ("b".to_owned(), vec![s("2")])]);
        t.observe(&inv, 10);
        let first = t.events();
        assert_eq!(first.len(), 2);
        t.observe(&inv, 20);
        assert_eq!(
            t.events().iter().map(|e| e.1.clone()).collect::<Vec<_>>(),
            first.iter().map(|e| e.1.clone()).collect::<Vec<_>>(),
            "unacknowledged: the same ids again"
        );
        t.acknowledged("a");
        t.acknowledged("b");
        t.observe(&inv, 30);
        assert!(!t.has_pending(), "unchanged: nothing");
        let inv2 = BTreeMap::from([("a".to_owned(), vec![s("3")])]);
        t.observe(&inv2, 40);
        let e = t.events();
        assert_eq!(e.len(), 2);
        let b: serde_json::Value = serde_json::from_slice(&e.iter().find(|e| e.0 == "b").unwrap().2).unwrap();
        assert_eq!(b["schedules"], json!([]));
        assert_eq!(b["time"], "1970-01-01T00:00:00.040Z");
        assert!(parse(br#"{"v": 2, "jobs": []}"#).is_err());
        assert!(parse(br#"{"jobs": []}"#).is_err());
    }
}
