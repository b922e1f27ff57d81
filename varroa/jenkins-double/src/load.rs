//! The load generator (`varroa-jenkins-double load`): builds at full speed through the plugin's
//! client against a mite, and what it took.
//!
//! `jobs` jobs (`load-1` ...) of `stages` stages each, with a test summary, run `builds` builds
//! each, at most `concurrency` at a time, every duration 0. Events go through the same
//! [`PluginClient`] the double uses, with one difference: a full buffer makes the generator wait
//! instead of dropping (it measures the mite, not the drop policy). It ends once the mite has
//! answered for every event, or after the flush timeout.
//!
//! Two more kinds of plugin traffic, each off unless asked for:
//!
//! - **Claims** (`--claims`): every build is queued with a trigger of its own and asks its claim
//!   (`POST /v1/claims`) before it runs, through the same [`ClaimsClient`] the double uses with
//!   `--claims`; its number is the ledger's. The run is complete when every claim was granted.
//! - **Console logs** (`--console-lines N`): every stage prints N lines of 80 bytes, sent
//!   (`POST /v1/logs/...`) through the same [`LogsClient`] as the double's `--console-logs`, one
//!   chunk per stage. The run is complete when the mite answered every build's log complete.

use crate::builds::{BuildNumbers, Builds, BuildsOptions, JobConfig, TestsConfig};
use crate::claims::{ClaimCounters, ClaimsClient, ClaimsConfig};
use crate::logs::{LogCounters, LogsClient, LogsConfig};
use crate::plugin::{Counters, PluginClient, PluginConfig, PluginError};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The plugin client's settings (the mite's URL, the token file, the buffer).
    pub plugin: PluginConfig,
    /// Jobs.
    pub jobs: usize,
    /// Builds per job.
    pub builds: usize,
    /// Builds running at once.
    pub concurrency: usize,
    /// Stages per build.
    pub stages: usize,
    /// How long to wait, after the last build, for the mite to answer for every event.
    pub flush_timeout: Duration,
    /// Ask a build claim for every build (`--claims`).
    pub claims: bool,
    /// Console lines per stage, sent as the build's log (`--console-lines`; 0: no logs).
    pub console_lines: usize,
}

/// What it took.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadReport {
    /// Jobs.
    pub jobs: usize,
    /// Builds run.
    pub builds: u64,
    /// Stages per build.
    pub stages: usize,
    /// Builds running at once.
    pub concurrency: usize,
    /// Events produced (each build: 2 x stages + 4).
    pub events: u64,
    /// The plugin client's counters at the end.
    pub counters: Counters,
    /// From the first build to the mite's last answer (or the flush timeout).
    pub seconds: f64,
    /// Events the mite accepted per second.
    pub events_per_second: f64,
    /// Builds per second.
    pub builds_per_second: f64,
    /// The claims client's counters, with `--claims`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claims: Option<ClaimCounters>,
    /// The logs client's counters, with `--console-lines`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<LogCounters>,
    /// Console log bytes the mite acknowledged per second, with `--console-lines`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_bytes_per_second: Option<f64>,
    /// Every event was accepted (none dropped, rejected or still pending), and with `--claims`
    /// every claim granted, with `--console-lines` every log complete.
    pub complete: bool,
}

/// Why a load run did not run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The plugin client cannot start.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// A count is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

/// The bytes of one console line of a load build (79 characters and the newline).
pub const CONSOLE_LINE_BYTES: usize = 80;

/// The job a load run uses: `stages` stages of 0 ms, each printing `console_lines` lines of
/// [`CONSOLE_LINE_BYTES`] (its first line names the stage), and ten passing tests.
pub fn load_job(name: &str, stages: usize, console_lines: usize) -> JobConfig {
    let mut job = JobConfig {
        tests: Some(TestsConfig { total: 10, failed: 0, skipped: 0, duration_ms: None }),
        ..JobConfig::simple(name, stages, 0)
    };
    for (i, stage) in job.stages.iter_mut().enumerate() {
        stage.console = (0..console_lines).map(|l| format!("{:<79}", format!("stage {} line {l}", i + 1))).collect();
    }
    job
}

/// How often the run looks whether every log is complete.
const LOG_POLL: Duration = Duration::from_millis(20);

/// Runs the load and reports.
pub async fn run(opts: LoadOptions) -> Result<LoadReport, LoadError> {
    for (name, v) in [("--jobs", opts.jobs), ("--builds", opts.builds), ("--concurrency", opts.concurrency)] {
        if v == 0 {
            return Err(LoadError::Zero(name));
        }
    }
    let plugin = Arc::new(PluginClient::start(opts.plugin.clone())?);
    let claims = match opts.claims {
        true => Some(ClaimsClient::new(ClaimsConfig::new(&opts.plugin.url, &opts.plugin.token_file))?),
        false => None,
    };
    let logs = match opts.console_lines {
        0 => None,
        _ => Some(Arc::new(LogsClient::new(LogsConfig {
            // A chunk per stage: what a stage prints is appended at once and sent at once.
            chunk_interval: Duration::ZERO,
            ..LogsConfig::new(&opts.plugin.url, &opts.plugin.token_file)
        })?)),
    };
    let names: Vec<String> = (1..=opts.jobs).map(|n| format!("load-{n}")).collect();
    let mut builds_opts = BuildsOptions {
        jobs: names.iter().map(|n| load_job(n, opts.stages, opts.console_lines)).collect(),
        time_scale: 0.0,
        plugin: Some(plugin.clone()),
        logs: logs.clone(),
        wait_for_room: true,
        keep_builds: 1,
        // The whole log is kept (and sent): the stages' lines and Jenkins' own few.
        max_console_bytes: (opts.stages * opts.console_lines * CONSOLE_LINE_BYTES + 4096).min(64 << 20),
        ..Default::default()
    };
    if let Some(c) = &claims {
        builds_opts.numbers = c.clone() as Arc<dyn BuildNumbers>;
    }
    let builds = Builds::new(builds_opts);
    let total = (opts.jobs as u64).saturating_mul(opts.builds as u64);
    let next = Arc::new(AtomicU64::new(0));
    let names = Arc::new(names);
    let began = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..opts.concurrency.min(total as usize) {
        let (builds, next, names) = (builds.clone(), next.clone(), names.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let job = &names[(i % names.len() as u64) as usize];
                if let Err(e) = builds.run(job).await {
                    tracing::error!(error = %e, "a load build did not run");
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    let deadline = Instant::now() + opts.flush_timeout;
    let flushed = plugin.flush(opts.flush_timeout).await;
    let logs_done = match &logs {
        None => true,
        Some(l) => logs_settled(l, total, deadline).await,
    };
    let seconds = began.elapsed().as_secs_f64().max(1e-9);
    let counters = plugin.counters();
    if !flushed {
        tracing::warn!(pending = counters.pending, timeout = ?opts.flush_timeout, "the mite did not answer for every event in time");
    }
    let events = builds.events_produced();
    let claim_counters = claims.as_ref().map(|c| c.counters());
    let log_counters = logs.as_ref().map(|l| l.counters());
    let events_complete = flushed && counters.sent == events && counters.dropped == 0 && counters.rejected == 0;
    let claims_complete = claim_counters.as_ref().is_none_or(|c| c.granted == total);
    let logs_complete = logs_done && log_counters.as_ref().is_none_or(|l| l.complete == total && l.cut == 0);
    Ok(LoadReport {
        jobs: opts.jobs,
        builds: total,
        stages: opts.stages,
        concurrency: opts.concurrency,
        events,
        complete: events_complete && claims_complete && logs_complete,
        events_per_second: counters.sent as f64 / seconds,
        builds_per_second: total as f64 / seconds,
        log_bytes_per_second: log_counters.as_ref().map(|l| l.bytes as f64 / seconds),
        seconds,
        counters,
        claims: claim_counters,
        logs: log_counters,
    })
}

/// Waits until the mite has answered `total` logs complete, or a log was given up (cut,
/// abandoned, rejected), or `deadline`; true when every log is complete.
async fn logs_settled(logs: &LogsClient, total: u64, deadline: Instant) -> bool {
    loop {
        let c = logs.counters();
        if c.complete >= total {
            return true;
        }
        if c.cut + c.abandoned + c.rejected > 0 || Instant::now() >= deadline {
            tracing::warn!(
                complete = c.complete,
                total,
                cut = c.cut,
                abandoned = c.abandoned,
                rejected = c.rejected,
                "not every build's console log was answered complete"
            );
            return false;
        }
        tokio::time::sleep(LOG_POLL).await;
    }
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.counters;
        writeln!(
            f,
            "builds:    {} ({} jobs, {} stages each, {} at a time)",
            self.builds, self.jobs, self.stages, self.concurrency
        )?;
        writeln!(
            f,
            "events:    {} produced, {} sent, {} rejected, {} dropped, {} pending",
            self.events, c.sent, c.rejected, c.dropped, c.pending
        )?;
        writeln!(f, "requests:  {} ({} failed and retried)", c.requests, c.failures)?;
        if let Some(k) = &self.claims {
            writeln!(
                f,
                "claims:    {} granted, {} refused, {} retried, {} ungated, {} rejected, {} expired, {} failed attempts",
                k.granted, k.refused, k.retries, k.ungated, k.rejected, k.expired, k.failures
            )?;
        }
        if let Some(l) = &self.logs {
            writeln!(
                f,
                "logs:      {} of {} complete, {} bytes in {} chunks, {} retried, {} conflicts, {} cut",
                l.complete, l.opened, l.bytes, l.chunks, l.retries, l.conflicts, l.cut
            )?;
        }
        writeln!(f, "elapsed:   {:.3} s", self.seconds)?;
        writeln!(f, "events/s:  {:.0}", self.events_per_second)?;
        writeln!(f, "builds/s:  {:.0}", self.builds_per_second)?;
        if let Some(b) = self.log_bytes_per_second {
            writeln!(f, "log MB/s:  {:.1}", b / 1e6)?;
        }
        write!(
            f,
            "complete:  {}",
            if self.complete { "yes" } else { "NO: not every event was accepted, claim granted or log complete" }
        )
    }
}
