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
//! - [`PhaseGauge`]: objects by phase, a gauge recomputed from the phases of the objects that
//!   exist (entries are dropped when an object goes, by [`PhaseGauge::set`] with `None` or
//!   [`PhaseGauge::retain`]).
//! - [`Pass::run`]: one reconcile in a tracing span (`reconcile`, with the kind and the object),
//!   timed, within its limit, its result counted, its backoff reset on success, its failure
//!   logged once (`reconcile failed`, target `opkit::reconcile`, with `kind`, `object` and
//!   `error`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::Mutex;
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

/// Objects by phase: one gauge per phase of `all`, recomputed from the phase of every object
/// recorded (by UID) whenever one changes.
#[derive(Debug)]
pub struct PhaseGauge<P> {
    all: Vec<P>,
    family: Family<PhaseLabels, Gauge>,
    phases: Mutex<HashMap<String, P>>,
}

impl<P: Copy + Eq + Display> PhaseGauge<P> {
    /// A gauge over the phases `all` (each is exported, 0 when no object has it).
    pub fn new(all: impl IntoIterator<Item = P>) -> PhaseGauge<P> {
        PhaseGauge { all: all.into_iter().collect(), family: Family::default(), phases: Mutex::new(HashMap::new()) }
    }

    /// The gauge family, to register.
    pub fn family(&self) -> Family<PhaseLabels, Gauge> {
        self.family.clone()
    }

    /// Record the phase of the object `uid`; `None` drops it (the object is gone).
    pub fn set(&self, uid: &str, phase: Option<P>) {
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        match phase {
            Some(p) => {
                phases.insert(uid.to_owned(), p);
            }
            None => {
                phases.remove(uid);
            }
        }
        self.refresh(&phases);
    }

    /// Keep only the objects `keep` selects (by UID).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        phases.retain(|uid, _| keep(uid));
        if phases.capacity() > 4 * phases.len().max(16) {
            phases.shrink_to_fit();
        }
        self.refresh(&phases);
    }

    /// How many objects have a phase recorded.
    pub fn len(&self) -> usize {
        self.phases.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none has.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn refresh(&self, phases: &HashMap<String, P>) {
        for p in &self.all {
            let n = phases.values().filter(|x| *x == p).count();
            self.family.get_or_create(&PhaseLabels { phase: p.to_string() }).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
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
    fn the_phase_gauge_counts_the_objects_that_exist() {
        let g = PhaseGauge::new(["Pending", "Ready"]);
        g.set("u1", Some("Pending"));
        g.set("u2", Some("Ready"));
        g.set("u1", Some("Ready"));
        let count = |p: &str| g.family().get_or_create(&PhaseLabels { phase: p.into() }).get();
        assert_eq!((count("Pending"), count("Ready")), (0, 2));
        g.set("u2", None);
        assert_eq!((count("Ready"), g.len()), (1, 1));
        g.retain(|_| false);
        assert_eq!((count("Ready"), g.len()), (0, 0));
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
