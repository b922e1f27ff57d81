//! Prometheus metrics of the operator (prefix `varroa_`): reconciles by result, errors by kind
//! and reconcile duration (opkit's [`ReconcileMetrics`], as Vesper's operator has them),
//! controllers by phase, and the writes of owned objects.

use opkit::reconcile::{PhaseGauge, ReconcileMetrics};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use varroa_api::{Controller, ControllerPhase};

#[derive(Debug)]
pub struct Metrics {
    /// `varroa_api_requests_total{verb, resource}`: every request the operator's client sends
    /// (counted when the binary builds its client with [`opkit::client::counted`]).
    pub requests: opkit::client::RequestCounter,
    pub reconcile: ReconcileMetrics,
    /// `varroa_controllers{phase}`, counted from the operator's cache of Controllers.
    pub controllers: Arc<PhaseGauge<Controller, ControllerPhase>>,
    pub writes: opkit::apply::WriteCounter,
    /// Entries the process keeps about controllers (see `Context::tracked_objects`).
    pub tracked_objects: Gauge,
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
            requests: opkit::client::RequestCounter::new(),
            reconcile: ReconcileMetrics::default(),
            controllers: Arc::new(PhaseGauge::new("controllers", "Controllers by phase", PHASES, |c: &Controller| {
                c.status.as_ref()?.phase
            })),
            writes: opkit::apply::WriteCounter::new(),
            tracked_objects: Gauge::default(),
        }
    }

    /// Register under the prefix `varroa_`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("varroa");
        self.requests.register(r);
        self.reconcile.register(r, "controllers");
        self.controllers.register(r);
        r.register(
            "tracked_objects",
            "Entries the operator keeps in memory about controllers (backoff, dwell, status writes in flight, verified objects, event series, mite state); back to 0 when they are gone",
            self.tracked_objects.clone(),
        );
        self.writes.register(r);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
