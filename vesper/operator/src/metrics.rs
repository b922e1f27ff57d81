//! Prometheus metrics of the operator (prefix `vesper_`): reconciles and their outcome, errors by
//! kind and reconcile duration (opkit's [`ReconcileMetrics`], as Varroa's operator has them),
//! previews by phase, the time from creation to Ready, expirations, and the writes of owned
//! objects (compare-then-write outcomes).

use opkit::reconcile::{PhaseGauge, ReconcileMetrics};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use vesper_api::{Phase, PreviewEnvironment};

#[derive(Debug)]
pub struct Metrics {
    /// `vesper_api_requests_total{verb, resource}`: every request the operator's client sends
    /// (counted when the binary builds its client with [`opkit::client::counted`]).
    pub requests: opkit::client::RequestCounter,
    pub reconcile: ReconcileMetrics,
    /// `vesper_previews{phase}`, counted from the operator's cache of previews.
    pub previews: Arc<PhaseGauge<PreviewEnvironment, Phase>>,
    pub time_to_ready: Histogram,
    pub expirations: Counter,
    pub writes: opkit::apply::WriteCounter,
    /// Entries the process keeps about previews (see `Context::tracked_objects`).
    pub tracked_objects: Gauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            requests: opkit::client::RequestCounter::new(),
            reconcile: ReconcileMetrics::default(),
            previews: Arc::new(PhaseGauge::new(
                "previews",
                "Previews by phase",
                [Phase::Pending, Phase::Ready, Phase::Failed, Phase::Expired],
                |pe: &PreviewEnvironment| pe.status.as_ref()?.phase,
            )),
            time_to_ready: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            expirations: Counter::default(),
            writes: opkit::apply::WriteCounter::new(),
            tracked_objects: Gauge::default(),
        }
    }

    /// Register under the prefix `vesper_`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("vesper");
        self.requests.register(r);
        self.reconcile.register(r, "previews");
        self.previews.register(r);
        r.register(
            "time_to_ready_seconds",
            "Time from a preview's creation to its first Ready",
            self.time_to_ready.clone(),
        );
        r.register("expirations", "Previews deleted because their TTL passed", self.expirations.clone());
        r.register(
            "tracked_objects",
            "Entries the operator keeps in memory about previews (backoff, verified objects, event series, status writes in flight); back to 0 when they are gone",
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
