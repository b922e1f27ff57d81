//! The load generator (`varroa-jenkins-double load`): builds at full speed through the plugin's
//! client against a mite, and what it took.
//!
//! `jobs` jobs (`load-1` ...) of `stages` stages each, with a test summary, run `builds` builds
//! each, at most `concurrency` at a time, every duration 0. Events go through the same
//! [`PluginClient`] the double uses, with one difference: a full buffer makes the generator wait
//! instead of dropping (it measures the mite, not the drop policy). It ends once the mite has
//! answered for every event, or after the flush timeout.

use crate::builds::{Builds, BuildsOptions, JobConfig, TestsConfig};
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
    /// Every event was accepted: none dropped, rejected or still pending.
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

/// The job a load run uses: `stages` stages of 0 ms and ten passing tests.
pub fn load_job(name: &str, stages: usize) -> JobConfig {
    JobConfig {
        tests: Some(TestsConfig { total: 10, failed: 0, skipped: 0, duration_ms: None }),
        ..JobConfig::simple(name, stages, 0)
    }
}

/// Runs the load and reports.
pub async fn run(opts: LoadOptions) -> Result<LoadReport, LoadError> {
    for (name, v) in [("--jobs", opts.jobs), ("--builds", opts.builds), ("--concurrency", opts.concurrency)] {
        if v == 0 {
            return Err(LoadError::Zero(name));
        }
    }
    let plugin = Arc::new(PluginClient::start(opts.plugin.clone())?);
    let names: Vec<String> = (1..=opts.jobs).map(|n| format!("load-{n}")).collect();
    let builds = Builds::new(BuildsOptions {
        jobs: names.iter().map(|n| load_job(n, opts.stages)).collect(),
        time_scale: 0.0,
        plugin: Some(plugin.clone()),
        wait_for_room: true,
        keep_builds: 1,
        max_console_bytes: 4096,
        ..Default::default()
    });
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
    let flushed = plugin.flush(opts.flush_timeout).await;
    let seconds = began.elapsed().as_secs_f64().max(1e-9);
    let counters = plugin.counters();
    if !flushed {
        tracing::warn!(pending = counters.pending, timeout = ?opts.flush_timeout, "the mite did not answer for every event in time");
    }
    let events = builds.events_produced();
    Ok(LoadReport {
        jobs: opts.jobs,
        builds: total,
        stages: opts.stages,
        concurrency: opts.concurrency,
        events,
        complete: flushed && counters.sent == events && counters.dropped == 0 && counters.rejected == 0,
        events_per_second: counters.sent as f64 / seconds,
        builds_per_second: total as f64 / seconds,
        seconds,
        counters,
    })
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
        writeln!(f, "elapsed:   {:.3} s", self.seconds)?;
        writeln!(f, "events/s:  {:.0}", self.events_per_second)?;
        writeln!(f, "builds/s:  {:.0}", self.builds_per_second)?;
        write!(f, "complete:  {}", if self.complete { "yes" } else { "NO: not every event was accepted" })
    }
}
