//! The wrapper around every reconcile, shared by both operators so that they cannot drift:
//!
//! - [`within`]: a time limit, as controller-runtime's `ReconcileTimeout` gives one: a reconcile
//!   that does not finish in time is dropped (its requests cancelled) and counts as an error, so
//!   the controller's error policy retries it with backoff. Without it, one request that never
//!   completes holds that object's reconcile (and a slot of the controller) forever.
//! - [`Backoff`]: the per-object retry delay (doubling from a first delay to a cap), reset by a
//!   pass that succeeds and forgotten when the object goes, so it never only grows.
//! - [`ReconcileMetrics`]: reconciles by result, failures by error kind, and their duration, under
//!   the operator's prefix (`vesper_reconciles_total`, `varroa_reconcile_errors_total`, ...).
//! - [`PhaseGauge`]: objects by phase, counted at each scrape from the controller's watch cache
//!   (nothing is kept per object, so there is nothing to forget when one goes).
//! - [`Kit`]: what every reconcile writes with: the compare-then-write of owned objects (with
//!   the ownership check and the `Restored` Event), deletions, the typed status writer, event
//!   notes and the clock.
//! - [`Pass::run`]: one reconcile in a tracing span (`reconcile`, with the kind and the object),
//!   timed, within its limit, its result counted, its backoff reset on success, its failure
//!   logged once (`reconcile failed`, target `opkit::reconcile`, with `kind`, `object` and
//!   `error`).
//! - After a burst of reconciles (a restart's reconcile-all, a rotation that touches every
//!   object), once none is left running, the memory the burst freed is given back to the system
//!   ([`crate::process::release_freed_memory`]): glibc keeps it mapped otherwise, and a restarted
//!   operator would stay at the size of its start-up lists.

use crate::apply::{Applied, Guard, Hint, Outcome, WriteCounter};
use crate::clock::Clock;
use crate::events::{EventPublisher, Note};
use crate::status::{StatusWriter, Written};
use kube::api::{Api, DeleteParams};
use kube::core::object::HasStatus;
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use std::time::Instant;
use tracing::Instrument;

/// How a reconcile with a time limit failed: its own error, or the limit.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError<E> {
    /// The reconcile ran longer than the limit and was stopped.
    #[error("the reconcile did not finish within {}s and was stopped; it is retried", .0.as_secs_f64())]
    TimedOut(Duration),
    /// The reconcile failed.
    #[error(transparent)]
    Failed(E),
}

impl<E> ReconcileError<E> {
    /// The reconcile's own error, if that is what ended it.
    pub fn failed(&self) -> Option<&E> {
        match self {
            ReconcileError::Failed(e) => Some(e),
            ReconcileError::TimedOut(_) => None,
        }
    }

    /// `timeout` for a time-out, `label(e)` for the reconcile's own error.
    pub fn metric_label(&self, label: impl FnOnce(&E) -> &'static str) -> &'static str {
        match self {
            ReconcileError::Failed(e) => label(e),
            ReconcileError::TimedOut(_) => "timeout",
        }
    }
}

/// Run `reconcile`, stopping it after `limit`.
pub async fn within<T, E>(
    limit: Duration,
    reconcile: impl Future<Output = Result<T, E>>,
) -> Result<T, ReconcileError<E>> {
    match tokio::time::timeout(limit, reconcile).await {
        Ok(r) => r.map_err(ReconcileError::Failed),
        Err(_) => Err(ReconcileError::TimedOut(limit)),
    }
}

/// The per-object retry delay: `first` after the first failure, doubling with each failure that
/// follows, at most `max`; [`Backoff::reset`] when a pass succeeds, [`Backoff::retain`] to drop
/// the objects that are gone.
#[derive(Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// A backoff of `first`, doubling to `max`.
    pub fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max, failures: Mutex::new(HashMap::new()) }
    }

    /// The delay before the next try of `key`, counting this failure.
    pub fn next(&self, key: &str) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = f.entry(key.to_owned()).or_insert(0);
        let delay = self.first.saturating_mul(1u32 << (*n).min(20)).min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    /// `key` succeeded (or is gone): its next failure starts again at the first delay.
    pub fn reset(&self, key: &str) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    /// Keep only the keys `keep` selects (the objects that still exist).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.retain(|k, _| keep(k));
        if f.capacity() > 4 * f.len().max(16) {
            f.shrink_to_fit();
        }
    }

    /// How many objects have failures counted.
    pub fn len(&self) -> usize {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none has.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The label of `<prefix>_reconciles_total`: `ok` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

/// The label of `<prefix>_reconcile_errors_total`: the error's kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub error: String,
}

/// The label of a [`PhaseGauge`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

/// Reconciles by result, failures by kind, and how long reconciles take.
#[derive(Debug)]
pub struct ReconcileMetrics {
    pub reconciles: Family<ResultLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Histogram,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        ReconcileMetrics {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
        }
    }
}

impl ReconcileMetrics {
    /// Register as `reconciles`, `reconcile_errors` and `reconcile_duration_seconds` in `r` (the
    /// operator's prefixed registry); `objects` names what is reconciled, for the help text.
    pub fn register(&self, r: &mut Registry, objects: &str) {
        r.register("reconciles", format!("Reconciles of {objects}, by result (ok, error)"), self.reconciles.clone());
        r.register("reconcile_errors", "Failed reconciles, by error kind", self.errors.clone());
        r.register("reconcile_duration_seconds", "How long a reconcile took", self.duration.clone());
    }

    /// How many reconciles ended with `result` (`ok` or `error`).
    pub fn count(&self, result: &str) -> u64 {
        self.reconciles.get_or_create(&ResultLabels { result: result.into() }).get()
    }
}

/// Objects by phase, computed at each scrape from the controller's watch cache of the objects
/// (a reflector store): nothing is kept per object, so nothing needs forgetting when one goes.
/// Every phase of `all` is exported, 0 when no object has it; an object whose phase is not set
/// yet, or that is being deleted, is not counted. Until [`PhaseGauge::attach`] gives it the store, every phase is 0.
///
/// Register it with [`PhaseGauge::register`] (a Prometheus collector, under the registry's
/// prefix: `vesper_previews{phase="Ready"}`).
pub struct PhaseGauge<K: Resource<DynamicType = ()> + Clone + 'static, P> {
    name: &'static str,
    help: &'static str,
    all: Vec<P>,
    phase: fn(&K) -> Option<P>,
    store: OnceLock<Store<K>>,
}

impl<K, P> std::fmt::Debug for PhaseGauge<K, P>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhaseGauge").field("name", &self.name).finish()
    }
}

impl<K, P> PhaseGauge<K, P>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    P: Copy + Eq + Display + Send + Sync + 'static,
{
    /// The gauge `name` (`previews`), over the phases `all`, reading an object's phase with
    /// `phase` (from its status).
    pub fn new(
        name: &'static str,
        help: &'static str,
        all: impl IntoIterator<Item = P>,
        phase: fn(&K) -> Option<P>,
    ) -> Self {
        PhaseGauge { name, help, all: all.into_iter().collect(), phase, store: OnceLock::new() }
    }

    /// Count from `store` (the controller's cache of the objects) from now on; a second store is
    /// ignored.
    pub fn attach(&self, store: Store<K>) {
        let _ = self.store.set(store);
    }

    /// How many objects of the cache are in `phase`.
    pub fn count(&self, phase: P) -> usize {
        self.store.get().map_or(0, |s| s.state().iter().filter(|o| self.phase_of(o) == Some(phase)).count())
    }

    /// The phase `o` is counted in: none while it is being deleted (it is leaving; the cache
    /// may hold it a moment after the controller let it go).
    fn phase_of(&self, o: &K) -> Option<P> {
        if o.meta().deletion_timestamp.is_some() {
            return None;
        }
        (self.phase)(o)
    }

    /// Register in `r` (the operator's prefixed registry).
    pub fn register(self: &std::sync::Arc<Self>, r: &mut Registry) {
        r.register_collector(Box::new(self.clone()));
    }
}

impl<K, P> Collector for PhaseGauge<K, P>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    P: Copy + Eq + Display + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut counts: Vec<(P, i64)> = self.all.iter().map(|p| (*p, 0)).collect();
        if let Some(store) = self.store.get() {
            for o in store.state() {
                if let Some(p) = self.phase_of(&o)
                    && let Some(c) = counts.iter_mut().find(|(q, _)| *q == p)
                {
                    c.1 += 1;
                }
            }
        }
        let mut metric = encoder.encode_descriptor(self.name, self.help, None, MetricType::Gauge)?;
        for (p, n) in counts {
            let labels = PhaseLabels { phase: p.to_string() };
            ConstGauge::new(n).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// One reconcile of one object, as [`Pass::run`] runs it.
pub struct Pass<'a> {
    /// The object's kind (`PreviewEnvironment`, `Controller`), for the span and the log.
    pub kind: &'static str,
    /// The object, `namespace/name`: the key of its backoff.
    pub key: &'a str,
    /// `--reconcile-timeout`.
    pub limit: Duration,
    pub metrics: &'a ReconcileMetrics,
    pub backoff: &'a Backoff,
}

impl Pass<'_> {
    /// Run `reconcile` in a span, within the limit: its duration observed, its result counted
    /// (`ok` resets the backoff; `error` counts the kind `label` gives and logs the failure).
    pub async fn run<T, E: Display>(
        self,
        label: impl FnOnce(&E) -> &'static str,
        reconcile: impl Future<Output = Result<T, E>>,
    ) -> Result<T, ReconcileError<E>> {
        let span = tracing::info_span!("reconcile", kind = self.kind, object = %self.key);
        let _burst = Burst::enter();
        let started = Instant::now();
        let result = within(self.limit, reconcile).instrument(span.clone()).await;
        self.metrics.duration.observe(started.elapsed().as_secs_f64());
        match &result {
            Ok(_) => {
                self.backoff.reset(self.key);
                self.metrics.reconciles.get_or_create(&ResultLabels { result: "ok".into() }).inc();
            }
            Err(e) => {
                self.metrics.reconciles.get_or_create(&ResultLabels { result: "error".into() }).inc();
                self.metrics.errors.get_or_create(&ErrorLabels { error: e.metric_label(label).into() }).inc();
                span.in_scope(|| tracing::warn!(kind = self.kind, object = %self.key, error = %e, "reconcile failed"));
            }
        }
        result
    }
}

/// How many reconciles make a burst worth giving memory back after.
const BURST: usize = 64;
/// How long no reconcile may start after a burst before its memory is given back. Giving it back
/// while reconciles keep coming costs them page faults to map it again: trimming whenever none
/// ran for an instant made 200 Vesper previews at once 1.3x slower (docs/benchmarks.md).
const SETTLE: Duration = Duration::from_secs(1);

/// Reconciles started and running, and finished since freed memory was last given back. One per
/// process ([`BURSTS`]: the allocator is the process's), a value of its own in tests.
struct Bursts {
    started: AtomicU64,
    running: AtomicUsize,
    finished_since_release: AtomicUsize,
    /// A release is pending (waiting [`SETTLE`]): at most one at a time.
    armed: AtomicBool,
    releases: AtomicUsize,
}

static BURSTS: Bursts = Bursts::new();

impl Bursts {
    const fn new() -> Bursts {
        Bursts {
            started: AtomicU64::new(0),
            running: AtomicUsize::new(0),
            finished_since_release: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
            releases: AtomicUsize::new(0),
        }
    }

    fn enter(&self) {
        self.started.fetch_add(1, Ordering::AcqRel);
        self.running.fetch_add(1, Ordering::AcqRel);
    }

    /// One reconcile ended. When it was the last one running of a burst of at least [`BURST`],
    /// and no release is pending: how many had started, for [`Bursts::settle`] after [`SETTLE`].
    fn leave(&self) -> Option<u64> {
        let running = self.running.fetch_sub(1, Ordering::AcqRel) - 1;
        let finished = self.finished_since_release.fetch_add(1, Ordering::AcqRel) + 1;
        (running == 0 && finished >= BURST && !self.armed.swap(true, Ordering::AcqRel))
            .then(|| self.started.load(Ordering::Acquire))
    }

    /// After [`SETTLE`] from [`Bursts::leave`] (or from the last `settle`) with how many had
    /// started then: release now when none started since; wait again when some did and none
    /// runs now; otherwise none (the last one running arms a release again when it ends).
    fn settle(&self, started: u64) -> Settle {
        self.armed.store(false, Ordering::Release);
        let now = self.started.load(Ordering::Acquire);
        if self.running.load(Ordering::Acquire) != 0 {
            return Settle::Busy;
        }
        if self.armed.swap(true, Ordering::AcqRel) {
            // A reconcile that ended meanwhile armed its own release.
            return Settle::Busy;
        }
        if now != started {
            return Settle::Wait(now);
        }
        self.armed.store(false, Ordering::Release);
        self.finished_since_release.store(0, Ordering::Release);
        self.releases.fetch_add(1, Ordering::Relaxed);
        Settle::Release
    }
}

/// What [`Bursts::settle`] decided.
#[derive(Debug, PartialEq, Eq)]
enum Settle {
    /// Give memory back now.
    Release,
    /// Reconciles started meanwhile and all ended: wait [`SETTLE`] again, with this count.
    Wait(u64),
    /// Reconciles run (or another release is pending): nothing to do here.
    Busy,
}

/// One running reconcile, counted in [`BURSTS`] until dropped (also when the reconcile is
/// cancelled). The last one of a burst to finish gives the freed memory back once no reconcile
/// started for [`SETTLE`], off the runtime's worker threads.
struct Burst;

impl Burst {
    fn enter() -> Burst {
        BURSTS.enter();
        Burst
    }
}

impl Drop for Burst {
    fn drop(&mut self) {
        let Some(started) = BURSTS.leave() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let mut started = started;
                    loop {
                        tokio::time::sleep(SETTLE).await;
                        match BURSTS.settle(started) {
                            Settle::Release => {
                                let _ = tokio::task::spawn_blocking(crate::process::release_freed_memory).await;
                                return;
                            }
                            Settle::Wait(now) => started = now,
                            Settle::Busy => return,
                        }
                    }
                });
            }
            Err(_) => BURSTS.armed.store(false, Ordering::Release),
        }
    }
}

/// What every reconcile of one operator writes with, for its objects of kind `K` (a
/// PreviewEnvironment, a Controller): one per operator, in its context, so that both operators
/// write, restore, delete, record Events and write their status the same way.
///
/// - [`Kit::ensure`]: the ownership-checked compare-then-write of an owned object
///   ([`crate::apply::ensure_cached`]), counted, with a `Restored` Warning Event on the owner
///   when it put back someone else's change;
/// - [`Kit::delete`]: a deletion, counted, where "already gone" is success;
/// - [`Kit::write_status`]: the typed status writer ([`StatusWriter`]);
/// - [`Kit::note`]: an Event about the owner ([`Note`]), counted;
/// - `clock`: the time every step of a pass reads.
pub struct Kit<K: HasStatus> {
    pub client: Client,
    pub field_manager: &'static str,
    pub clock: Clock,
    pub writes: WriteCounter,
    pub events: EventPublisher,
    pub status: StatusWriter<K>,
}

impl<K> Kit<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + HasStatus
        + Clone
        + Debug
        + DeserializeOwned,
    K::Status: Clone + PartialEq + Serialize,
{
    /// The kit of the controller `field_manager` (also the Events' reporting controller; the
    /// reporting instance is `$POD_NAME` when set), counting its writes in `writes`.
    pub fn new(client: Client, field_manager: &'static str, writes: WriteCounter, clock: Clock) -> Self {
        let events =
            EventPublisher::new(client.clone(), field_manager, std::env::var("POD_NAME").ok()).counting(writes.clone());
        let status = StatusWriter::new(client.clone(), field_manager, writes.clone());
        Kit { client, field_manager, clock, writes, events, status }
    }

    /// Compare statuses with `same` when deciding whether a pass on a stale copy would repeat the
    /// last status write (see [`StatusWriter::comparing_with`]).
    pub fn comparing_status_with(mut self, same: fn(&K::Status, &K::Status) -> bool) -> Self {
        self.status = self.status.comparing_with(same);
        self
    }

    /// Make sure `desired` (an object of `owner`'s, reached through `api`) is what it should be:
    /// [`crate::apply::ensure_cached`] with the `guard` and the `hint`, counted; a
    /// change someone else made is put back and recorded as a `Restored` Warning Event on the
    /// owner. An object of that name that the guard says is not the owner's is left alone
    /// ([`crate::Error::NotOwned`]).
    pub async fn ensure<D>(
        &self,
        owner: &K,
        api: &Api<D>,
        desired: &D,
        guard: &Guard<'_>,
        hint: Hint<'_>,
    ) -> crate::Result<Applied>
    where
        D: crate::apply::Object,
    {
        let applied = self.writes.ensure_cached(api, desired, self.field_manager, guard, hint).await?;
        self.events.restored(&owner.object_ref(&()), &applied).await;
        Ok(applied)
    }

    /// Delete `name` through `api`, counted; `Ok(false)` when it was already gone.
    pub async fn delete<D>(&self, api: &Api<D>, name: &str, params: &DeleteParams) -> crate::Result<bool>
    where
        D: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
    {
        match api.delete(name, params).await {
            Ok(_) => {
                self.writes.record(&D::kind(&()), Outcome::Deleted);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => {
                let ns = api.namespace().map(|n| format!("{n}/")).unwrap_or_default();
                Err(crate::Error::Kube { action: format!("deleting {} {ns}{name}", D::kind(&())), source: e })
            }
        }
    }

    /// Write `owner`'s status (see [`StatusWriter::write`]).
    pub async fn write_status(&self, owner: &K, status: &K::Status) -> crate::Result<Written<K::Status>> {
        self.status.write(owner, status).await
    }

    /// Record `note` about `owner` (action `Reconcile`).
    pub async fn note(&self, owner: &K, note: &Note) {
        self.events.note(&owner.object_ref(&()), None, "Reconcile", note).await
    }

    /// Forget what the kit keeps about the object with `uid` (it is gone): its Event series and
    /// its status write in flight.
    pub fn forget(&self, uid: &str) {
        self.events.forget(uid);
        self.status.forget(uid);
    }

    /// Keep only what is kept about the objects whose UID `keep` accepts.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.events.retain_objects(&keep);
        self.status.retain(&keep);
    }

    /// How many entries the kit keeps about objects: Event series, status writes in flight,
    /// verified objects.
    pub fn tracked(&self) -> usize {
        self.events.tracked_series() + self.status.len() + self.writes.verified().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slow_reconcile_times_out_and_a_quick_one_does_not() {
        let slow = within(Duration::from_millis(50), async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, std::io::Error>(())
        })
        .await;
        assert!(matches!(slow, Err(ReconcileError::TimedOut(d)) if d == Duration::from_millis(50)));
        assert_eq!(slow.unwrap_err().metric_label(|_| "io"), "timeout");
        let failed = within(Duration::from_secs(60), async { Err::<(), _>(std::io::Error::other("boom")) }).await;
        let e = failed.unwrap_err();
        assert_eq!((e.metric_label(|_| "io"), e.to_string()), ("io", "boom".to_string()));
        assert!(within(Duration::from_secs(1), async { Ok::<_, std::io::Error>(7) }).await.is_ok_and(|v| v == 7));
    }

    #[test]
    fn memory_is_given_back_once_reconciles_stop_after_a_burst() {
        let b = Bursts::new();
        let releases = || b.releases.load(Ordering::Relaxed);
        // Fewer than a burst, one after the other: nothing to give back.
        for _ in 0..BURST - 1 {
            b.enter();
            assert_eq!(b.leave(), None);
        }
        // The burst is complete, but one reconcile still runs: not yet.
        b.enter();
        b.enter();
        assert_eq!(b.leave(), None, "a reconcile still runs");
        let started = b.leave().expect("the last one of the burst arms a release");
        assert_eq!(started, BURST as u64 + 1);
        // Armed once: another burst end while it waits arms nothing more.
        b.enter();
        assert_eq!(b.leave(), None, "a release is already pending");
        // A reconcile started and ended while it waited: wait again, with the new count.
        let again = b.settle(started);
        assert_eq!(again, Settle::Wait(started + 1));
        // One starts and is still running at the next look: nothing pending any more, and the
        // running one arms a release when it ends.
        b.enter();
        assert_eq!(b.settle(started + 1), Settle::Busy);
        assert_eq!(releases(), 0);
        let started = b.leave().expect("the last one running arms again");
        // Nothing starts before it settles: released, and the count starts again.
        assert_eq!(b.settle(started), Settle::Release);
        assert_eq!(releases(), 1);
        b.enter();
        assert_eq!(b.leave(), None, "a new burst counts from zero");
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_per_object_and_starts_again_after_a_success() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
        let delays: Vec<u64> = (0..11).map(|_| b.next("ns/a").as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(b.next("ns/b"), Duration::from_secs(1), "each object has its own count");
        b.reset("ns/a");
        assert_eq!(b.next("ns/a"), Duration::from_secs(1));
        for _ in 0..100 {
            b.next("ns/a");
        }
        assert_eq!(b.next("ns/a"), Duration::from_secs(300), "no overflow after many failures");
        b.retain(|k| k == "ns/b");
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn the_phase_gauge_counts_the_objects_of_the_cache_at_each_scrape() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::watcher::Event;
        fn phase(c: &ConfigMap) -> Option<&'static str> {
            match c.data.as_ref()?.get("phase")?.as_str() {
                "Pending" => Some("Pending"),
                "Ready" => Some("Ready"),
                _ => None,
            }
        }
        let cm = |name: &str, p: &str| ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            data: Some([("phase".to_string(), p.to_string())].into()),
            ..Default::default()
        };
        let gauge = std::sync::Arc::new(PhaseGauge::new("things", "Things by phase", ["Pending", "Ready"], phase));
        let mut registry = Registry::with_prefix("kit");
        gauge.register(&mut registry);
        let scrape = || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
            text.lines().filter(|l| l.starts_with("kit_things{")).map(str::to_string).collect::<Vec<_>>()
        };
        assert_eq!(scrape(), ["kit_things{phase=\"Pending\"} 0", "kit_things{phase=\"Ready\"} 0"], "no store yet");
        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        gauge.attach(store);
        writer.apply_watcher_event(&Event::Apply(cm("a", "Pending")));
        writer.apply_watcher_event(&Event::Apply(cm("b", "Ready")));
        writer.apply_watcher_event(&Event::Apply(cm("c", "Ready")));
        writer.apply_watcher_event(&Event::Apply(cm("d", "Unset")));
        assert_eq!(scrape(), ["kit_things{phase=\"Pending\"} 1", "kit_things{phase=\"Ready\"} 2"]);
        writer.apply_watcher_event(&Event::Apply(cm("a", "Ready")));
        writer.apply_watcher_event(&Event::Delete(cm("b", "Ready")));
        assert_eq!((gauge.count("Pending"), gauge.count("Ready")), (0, 2), "a deleted object is no longer counted");
        let mut leaving = cm("a", "Ready");
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        writer.apply_watcher_event(&Event::Apply(leaving));
        assert_eq!(gauge.count("Ready"), 1, "an object being deleted is not counted");
    }

    #[tokio::test]
    async fn a_pass_counts_its_result_and_resets_the_backoff_only_on_success() {
        let (metrics, backoff) =
            (ReconcileMetrics::default(), Backoff::new(Duration::from_secs(1), Duration::from_secs(8)));
        let pass =
            || Pass { kind: "Thing", key: "ns/a", limit: Duration::from_secs(5), metrics: &metrics, backoff: &backoff };
        let failed = pass().run(|_| "io", async { Err::<(), _>(std::io::Error::other("boom")) }).await;
        assert!(failed.is_err());
        backoff.next("ns/a");
        assert_eq!(backoff.len(), 1);
        let label = |l: &str| metrics.errors.get_or_create(&ErrorLabels { error: l.into() }).get();
        assert_eq!((metrics.count("error"), label("io")), (1, 1));
        pass().run(|_: &std::io::Error| "io", async { Ok(()) }).await.expect("ok");
        assert_eq!((metrics.count("ok"), backoff.len()), (1, 0));
    }
}
