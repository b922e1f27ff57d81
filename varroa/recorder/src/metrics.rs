//! The recorder's Prometheus metrics (served on `/metrics` of the health port), all under the
//! `varroa_recorder_` prefix. Label values come from fixed sets, never from a message.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindOutcome {
    kind: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabel {
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Operation {
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Table {
    table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabel {
    stream: String,
}

/// The recorder's metrics.
pub struct Metrics {
    events: Family<KindOutcome, Counter>,
    batch_apply_seconds: Histogram,
    batches: Family<Outcome, Counter>,
    pg_errors: Family<Operation, Counter>,
    nats_errors: Family<Operation, Counter>,
    activity_rows: Family<Outcome, Counter>,
    pruned_rows: Family<Table, Counter>,
    retention_statements: Counter,
    consumer_pending: Family<StreamLabel, Gauge>,
    claims: Family<DecisionLabel, Counter>,
    claim_seconds: Histogram,
    log_deletions: Family<Outcome, Counter>,
    pruned_log_objects: Counter,
    pruned_artifact_objects: Counter,
    log_deletions_queued: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            events: Family::default(),
            // 1 ms to about 16 s.
            batch_apply_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            batches: Family::default(),
            pg_errors: Family::default(),
            nats_errors: Family::default(),
            activity_rows: Family::default(),
            pruned_rows: Family::default(),
            retention_statements: Counter::default(),
            consumer_pending: Family::default(),
            claims: Family::default(),
            // 0.25 ms to about 8 s.
            claim_seconds: Histogram::new(exponential_buckets(0.000_25, 2.0, 16)),
            log_deletions: Family::default(),
            pruned_log_objects: Counter::default(),
            pruned_artifact_objects: Counter::default(),
            log_deletions_queued: Gauge::default(),
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers every metric in `registry` under the `varroa_recorder_` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("varroa_recorder");
        r.register(
            "events",
            "Build events consumed from varroa_builds, by kind and outcome (applied, duplicate: already applied, malformed: terminated)",
            self.events.clone(),
        );
        r.register(
            "batch_apply_seconds",
            "Time to apply one batch of build events in PostgreSQL (one transaction)",
            self.batch_apply_seconds.clone(),
        );
        r.register(
            "batches",
            "Batches of build events, by outcome (committed, failed: not acknowledged, redelivered later)",
            self.batches.clone(),
        );
        r.register(
            "pg_errors",
            "PostgreSQL errors, by operation (connect, builds, activity, retention, log_retention, claims)",
            self.pg_errors.clone(),
        );
        r.register(
            "nats_errors",
            "NATS errors (opening the streams and consumers, fetching; claims: subscribing and answering), by operation",
            self.nats_errors.clone(),
        );
        r.register(
            "activity_rows",
            "Activity events consumed from varroa_activity, by outcome (inserted, duplicate, malformed)",
            self.activity_rows.clone(),
        );
        r.register("pruned_rows", "Rows deleted by retention, by table", self.pruned_rows.clone());
        r.register("retention_statements", "DELETE statements run by retention", self.retention_statements.clone());
        r.register(
            "consumer_pending",
            "Messages of a stream not yet acknowledged by the recorders (pending and in flight), by stream",
            self.consumer_pending.clone(),
        );
        r.register(
            "claims",
            "Build claims answered by the ledger, by decision (granted: a new number, repeated: granted again to the same claim id, refused: another claim holds the trigger, retry, rejected: malformed) and dropped (no reply subject)",
            self.claims.clone(),
        );
        r.register(
            "claim_seconds",
            "Time from a claim's arrival to its answer (decided or not)",
            self.claim_seconds.clone(),
        );
        r.register(
            "log_deletions",
            "Console logs of pruned runs handled by log retention, by outcome (deleted: its objects deleted from the log store, absent: nothing was stored, failed: the store failed and the build stays queued, invalid: the queued key names no log)",
            self.log_deletions.clone(),
        );
        r.register(
            "pruned_log_objects",
            "Objects (log chunks, completion markers) deleted from the log store by log retention",
            self.pruned_log_objects.clone(),
        );
        r.register(
            "pruned_artifact_objects",
            "Archived artifacts deleted from the store by retention, with their runs' logs",
            self.pruned_artifact_objects.clone(),
        );
        r.register(
            "log_deletions_queued",
            "Builds whose logs wait to be deleted from the log store (log_deletions rows), after the last round",
            self.log_deletions_queued.clone(),
        );
    }

    /// Counts `n` build events of `kind` with `outcome`.
    pub fn event(&self, kind: &str, outcome: &str, n: u64) {
        if n > 0 {
            self.events.get_or_create(&KindOutcome { kind: kind.into(), outcome: outcome.into() }).inc_by(n);
        }
    }

    /// How many build events of `kind` had `outcome`.
    pub fn events(&self, kind: &str, outcome: &str) -> u64 {
        self.events.get_or_create(&KindOutcome { kind: kind.into(), outcome: outcome.into() }).get()
    }

    /// How many build events of any kind had `outcome`.
    pub fn events_total(&self, outcome: &str) -> u64 {
        let mut kinds: Vec<&str> = varroa_link::builds::KINDS.to_vec();
        kinds.push(crate::ingest::UNKNOWN_KIND);
        kinds.iter().map(|k| self.events(k, outcome)).sum()
    }

    /// Observes one batch's apply time.
    pub fn batch_applied(&self, seconds: f64, committed: bool) {
        if committed {
            self.batch_apply_seconds.observe(seconds);
        }
        self.batches.get_or_create(&Outcome { outcome: if committed { "committed" } else { "failed" }.into() }).inc();
    }

    /// How many batches had `outcome` (`committed`, `failed`).
    pub fn batches(&self, outcome: &str) -> u64 {
        self.batches.get_or_create(&Outcome { outcome: outcome.into() }).get()
    }

    /// Counts a PostgreSQL error of `operation`.
    pub fn pg_error(&self, operation: &str) {
        self.pg_errors.get_or_create(&Operation { operation: operation.into() }).inc();
    }

    /// How many PostgreSQL errors `operation` met.
    pub fn pg_errors(&self, operation: &str) -> u64 {
        self.pg_errors.get_or_create(&Operation { operation: operation.into() }).get()
    }

    /// Counts a JetStream error of `operation`.
    pub fn nats_error(&self, operation: &str) {
        self.nats_errors.get_or_create(&Operation { operation: operation.into() }).inc();
    }

    /// How many JetStream errors `operation` met.
    pub fn nats_errors(&self, operation: &str) -> u64 {
        self.nats_errors.get_or_create(&Operation { operation: operation.into() }).get()
    }

    /// Counts `n` activity events with `outcome`.
    pub fn activity(&self, outcome: &str, n: u64) {
        if n > 0 {
            self.activity_rows.get_or_create(&Outcome { outcome: outcome.into() }).inc_by(n);
        }
    }

    /// How many activity events had `outcome`.
    pub fn activity_rows(&self, outcome: &str) -> u64 {
        self.activity_rows.get_or_create(&Outcome { outcome: outcome.into() }).get()
    }

    /// Counts one DELETE statement of retention.
    pub fn retention_statement(&self) {
        self.retention_statements.inc();
    }

    /// Counts rows retention deleted from `table`.
    pub fn pruned(&self, table: &str, rows: u64) {
        if rows > 0 {
            self.pruned_rows.get_or_create(&Table { table: table.into() }).inc_by(rows);
        }
    }

    /// How many rows retention deleted from `table`.
    pub fn pruned_rows(&self, table: &str) -> u64 {
        self.pruned_rows.get_or_create(&Table { table: table.into() }).get()
    }

    /// How many DELETE statements retention ran.
    pub fn retention_statements(&self) -> u64 {
        self.retention_statements.get()
    }

    /// Sets the backlog of `stream`'s consumer.
    pub fn set_pending(&self, stream: &str, pending: u64) {
        self.consumer_pending.get_or_create(&StreamLabel { stream: stream.into() }).set(pending as i64);
    }

    /// Counts a claim answered with `decision` (or `dropped`), and the time to answer it.
    pub fn claim(&self, decision: &str, seconds: Option<f64>) {
        self.claims.get_or_create(&DecisionLabel { decision: decision.into() }).inc();
        if let Some(s) = seconds {
            self.claim_seconds.observe(s);
        }
    }

    /// Counts a build's log handled by log retention with `outcome` (`deleted`, `absent`,
    /// `failed`, `invalid`).
    pub fn log_prune(&self, outcome: &str) {
        self.log_deletions.get_or_create(&Outcome { outcome: outcome.into() }).inc();
    }

    /// How many builds' logs log retention handled with `outcome`.
    pub fn log_deletions(&self, outcome: &str) -> u64 {
        self.log_deletions.get_or_create(&Outcome { outcome: outcome.into() }).get()
    }

    /// Counts objects deleted from the log store.
    pub fn pruned_log_objects(&self, n: u64) {
        self.pruned_log_objects.inc_by(n);
    }

    /// Archived artifacts retention deleted.
    pub fn pruned_artifact_objects(&self, n: u64) {
        self.pruned_artifact_objects.inc_by(n);
    }

    /// How many objects log retention deleted from the log store.
    pub fn log_objects_pruned(&self) -> u64 {
        self.pruned_log_objects.get()
    }

    /// Sets how many builds wait in `log_deletions`.
    pub fn set_log_deletions_queued(&self, n: i64) {
        self.log_deletions_queued.set(n);
    }

    /// How many builds waited in `log_deletions` after the last round.
    pub fn log_deletions_queued(&self) -> i64 {
        self.log_deletions_queued.get()
    }

    /// How many claims were answered with `decision`.
    pub fn claims(&self, decision: &str) -> u64 {
        self.claims.get_or_create(&DecisionLabel { decision: decision.into() }).get()
    }
}
