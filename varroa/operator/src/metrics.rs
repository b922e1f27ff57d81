//! Prometheus metrics of the operator (prefix `varroa_`): reconciles by result, errors by kind,
//! reconcile duration, controllers by phase, and the writes of owned objects.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::Mutex;
use varroa_api::ControllerPhase;

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
    pub controllers: Family<PhaseLabels, Gauge>,
    pub writes: opkit::apply::WriteCounter,
    /// Entries the process keeps about controllers (see `Context::tracked_objects`).
    pub tracked_objects: Gauge,
    phases: Mutex<HashMap<String, ControllerPhase>>,
}

const PHASES: [ControllerPhase; 7] = [
    ControllerPhase::Pending,
    ControllerPhase::Provisioning,
    ControllerPhase::Running,
    ControllerPhase::Connected,
    ControllerPhase::Stopped,
    ControllerPhase::Hibernated,
    ControllerPhase::Failed,
];

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
            controllers: Family::default(),
            writes: opkit::apply::WriteCounter::new(),
            tracked_objects: Gauge::default(),
            phases: Mutex::new(HashMap::new()),
        }
    }

    /// Register under the prefix `varroa_`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("varroa");
        r.register("reconciles", "Reconciles of controllers, by result (ok, error)", self.reconciles.clone());
        r.register("reconcile_errors", "Failed reconciles, by error kind", self.errors.clone());
        r.register("reconcile_duration_seconds", "How long a reconcile took", self.duration.clone());
        r.register("controllers", "Controllers by phase", self.controllers.clone());
        r.register(
            "tracked_objects",
            "Entries the operator keeps in memory about controllers (backoff, dwell, statuses written, phases, verified objects); back to 0 when they are gone",
            self.tracked_objects.clone(),
        );
        self.writes.register(r);
    }

    /// How many controllers have a phase recorded.
    pub fn tracked_phases(&self) -> usize {
        self.phases.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Keep the phases of the controllers (by uid) `keep` selects, and refresh the gauge.
    pub fn retain_phases(&self, keep: impl Fn(&str) -> bool) {
        let Ok(mut phases) = self.phases.lock() else { return };
        phases.retain(|uid, _| keep(uid));
        self.refresh(&phases);
    }

    fn refresh(&self, phases: &HashMap<String, ControllerPhase>) {
        for p in PHASES {
            let n = phases.values().filter(|x| **x == p).count() as i64;
            self.controllers.get_or_create(&PhaseLabels { phase: p.to_string() }).set(n);
        }
    }

    /// Record a controller's phase (by uid) and refresh the per-phase gauge.
    pub fn set_phase(&self, uid: &str, phase: Option<ControllerPhase>) {
        let Ok(mut phases) = self.phases.lock() else { return };
        match phase {
            Some(p) => {
                phases.insert(uid.to_string(), p);
            }
            None => {
                phases.remove(uid);
            }
        }
        self.refresh(&phases);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
