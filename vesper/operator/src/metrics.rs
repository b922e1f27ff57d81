//! Prometheus metrics of the operator: reconciles and their outcome, errors by kind, reconcile
//! duration, previews by phase, the time from creation to Ready, expirations, and the writes of
//! owned objects (compare-then-write outcomes).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::Mutex;
use vesper_api::Phase;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

#[derive(Debug)]
pub struct Metrics {
    pub reconciles: Family<ResultLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Histogram,
    pub previews: Family<PhaseLabels, Gauge>,
    pub time_to_ready: Histogram,
    pub expirations: Counter,
    pub writes: opkit::apply::WriteCounter,
    /// Entries the process keeps about previews (see `Context::tracked_objects`).
    pub tracked_objects: Gauge,
    phases: Mutex<HashMap<String, Phase>>,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
            previews: Family::default(),
            time_to_ready: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            expirations: Counter::default(),
            writes: opkit::apply::WriteCounter::new(),
            tracked_objects: Gauge::default(),
            phases: Mutex::new(HashMap::new()),
        }
    }

    /// Register under the prefix `vesper_`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("vesper");
        r.register("reconciles", "Reconciles of previews, by result (ok, error)", self.reconciles.clone());
        r.register("reconcile_errors", "Failed reconciles, by error kind", self.errors.clone());
        r.register("reconcile_duration_seconds", "How long a reconcile took", self.duration.clone());
        r.register("previews", "Previews by phase", self.previews.clone());
        r.register(
            "time_to_ready_seconds",
            "Time from a preview's creation to its first Ready",
            self.time_to_ready.clone(),
        );
        r.register("expirations", "Previews deleted because their TTL passed", self.expirations.clone());
        r.register(
            "tracked_objects",
            "Entries the operator keeps in memory about previews (backoff, phases, verified objects); back to 0 when they are gone",
            self.tracked_objects.clone(),
        );
        self.writes.register(r);
    }

    /// How many previews have a phase recorded.
    pub fn tracked_phases(&self) -> usize {
        self.phases.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Record a preview's phase (by uid) and refresh the per-phase gauge.
    pub fn set_phase(&self, uid: &str, phase: Option<Phase>) {
        let Ok(mut phases) = self.phases.lock() else { return };
        match phase {
            Some(p) => {
                phases.insert(uid.to_string(), p);
            }
            None => {
                phases.remove(uid);
            }
        }
        for p in [Phase::Pending, Phase::Ready, Phase::Failed, Phase::Expired] {
            let n = phases.values().filter(|x| **x == p).count() as i64;
            self.previews.get_or_create(&PhaseLabels { phase: p.to_string() }).set(n);
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
