//! The gateway's Prometheus metrics (served on `/metrics` of the health port).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Decision {
    decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Why {
    why: &'static str,
}

/// The gateway's metrics. Label values come from fixed sets (never from client input).
pub struct Metrics {
    streams: Gauge,
    refused: Family<Reason, Counter>,
    messages: Family<Kind, Counter>,
    desired_pushed: Counter,
    kv_write_errors: Counter,
    tls_reloads: Family<Reason, Counter>,
    build_events: Family<Outcome, Counter>,
    build_batches: Family<Outcome, Counter>,
    log_chunks: Family<Outcome, Counter>,
    log_bytes: Counter,
    artifact_requests: Family<Outcome, Counter>,
    artifact_urls: Counter,
    claims: Family<Decision, Counter>,
    claims_ledger_down: Family<Why, Counter>,
    claim_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            streams: Gauge::default(),
            refused: Family::default(),
            messages: Family::default(),
            desired_pushed: Counter::default(),
            kv_write_errors: Counter::default(),
            tls_reloads: Family::default(),
            build_events: Family::default(),
            build_batches: Family::default(),
            log_chunks: Family::default(),
            log_bytes: Counter::default(),
            artifact_requests: Family::default(),
            artifact_urls: Counter::default(),
            claims: Family::default(),
            claims_ledger_down: Family::default(),
            // 1 ms to about 33 s: a claim's budget is at most 30 s.
            claim_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
        }
    }
}

impl Metrics {
    /// Registers every metric in `registry` under the `varroa_gateway_` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("varroa_gateway");
        r.register("streams", "Mite streams open on this replica", self.streams.clone());
        r.register("refused", "Connections and streams refused, by reason", self.refused.clone());
        r.register("messages", "Messages received from mites, by kind", self.messages.clone());
        r.register("desired_pushed", "Desired configurations sent down to mites", self.desired_pushed.clone());
        r.register(
            "kv_write_errors",
            "Failed writes to the varroa_mites bucket (retried)",
            self.kv_write_errors.clone(),
        );
        r.register("tls_reloads", "TLS file changes, by result (ok, failed)", self.tls_reloads.clone());
        r.register(
            "build_events",
            "Build events received from mites, by outcome (stored, duplicate, rejected, retry)",
            self.build_events.clone(),
        );
        r.register(
            "build_batches",
            "BuildEvents batches, by outcome (stored, rejected, oversized, retry, busy, not_ready)",
            self.build_batches.clone(),
        );
        r.register(
            "log_chunks",
            "Console log chunks received from mites, by outcome (stored, duplicate, conflict, refused, retry, busy, no_store)",
            self.log_chunks.clone(),
        );
        r.register("log_bytes", "Console log bytes written to the log store", self.log_bytes.clone());
        r.register(
            "artifact_requests",
            "Artifact upload requests answered, by outcome (signed, refused, unsupported, retry, busy)",
            self.artifact_requests.clone(),
        );
        r.register("artifact_urls", "Presigned artifact upload URLs handed out", self.artifact_urls.clone());
        r.register(
            "claims",
            "Build claims answered, by decision (granted, refused, retry, rejected, ledger_down)",
            self.claims.clone(),
        );
        r.register(
            "claims_ledger_down",
            "Build claims answered LEDGER_DOWN, by why (no_responders, timeout, nats_down, bad_reply, busy, budget)",
            self.claims_ledger_down.clone(),
        );
        r.register(
            "claim_seconds",
            "How long the gateway took to answer a build claim (asking the ledger included)",
            self.claim_seconds.clone(),
        );
    }
    /// Counts a claim answered with `decision` after `seconds`.
    pub fn claim(&self, decision: &'static str, seconds: f64) {
        self.claims.get_or_create(&Decision { decision }).inc();
        self.claim_seconds.observe(seconds);
    }
    /// Counts why a claim was answered LEDGER_DOWN.
    pub fn claim_ledger_down(&self, why: &'static str) {
        self.claims_ledger_down.get_or_create(&Why { why }).inc();
    }
    /// Counts a log chunk with `outcome`, and the bytes it wrote.
    pub fn log_chunk(&self, outcome: &'static str, bytes: usize) {
        self.log_chunks.get_or_create(&Outcome { outcome }).inc();
        self.log_bytes.inc_by(bytes as u64);
    }
    /// Counts an artifact request answered with `outcome`, and the URLs it was given.
    pub fn artifact_request(&self, outcome: &'static str, urls: usize) {
        self.artifact_requests.get_or_create(&Outcome { outcome }).inc();
        self.artifact_urls.inc_by(urls as u64);
    }
    /// Counts `n` build events with `outcome`.
    pub fn build_events(&self, outcome: &'static str, n: usize) {
        if n > 0 {
            self.build_events.get_or_create(&Outcome { outcome }).inc_by(n as u64);
        }
    }
    /// Counts a batch with `outcome`.
    pub fn build_batch(&self, outcome: &'static str) {
        self.build_batches.get_or_create(&Outcome { outcome }).inc();
    }
    /// Counts a refusal.
    pub fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&Reason { reason: reason.into() }).inc();
    }
    /// Counts a received message.
    pub fn message(&self, kind: &'static str) {
        self.messages.get_or_create(&Kind { kind: kind.into() }).inc();
    }
    /// A stream opened (+1) or closed (-1).
    pub fn stream(&self, delta: i64) {
        self.streams.inc_by(delta);
    }
    /// Counts a pushed desired configuration.
    pub fn desired_pushed(&self) {
        self.desired_pushed.inc();
    }
    /// Counts a failed KV write.
    pub fn kv_write_error(&self) {
        self.kv_write_errors.inc();
    }
    /// Counts a TLS reload.
    pub fn tls_reload(&self, ok: bool) {
        self.tls_reloads.get_or_create(&Reason { reason: if ok { "ok" } else { "failed" }.into() }).inc();
    }
}
