//! `builds CONTROLLER [--job JOB] [--limit N] [-o wide|json|yaml]` and `build CONTROLLER JOB
//! NUMBER [-o json|yaml]`: a controller's builds from the build record store, and one build with
//! its stages and test summary.
//!
//! The table: JOB, NUMBER, RESULT (Jenkins' result, or `RUNNING`, or `QUEUED`), DURATION (how
//! long it ran; a running build's so far), CELL, STARTED (its age); newest first: queued builds,
//! then by start time. `-o wide` shows STARTED in RFC 3339 and adds CLUSTER, TRIGGER, NODE and
//! CAUSE. `-o json|yaml` prints the records in a `v1` List (see [`crate::records`]).

use crate::cli::{BuildArgs, BuildsArgs, ListOutput, RecordOutput};
use crate::error::{Error, Result};
use crate::records::{self, BuildDetail, Run, Stage, TestSummary, duration, rfc3339};
use crate::store::{BuildQuery, BuildsQuery, Store};

use clikit::cli::GlobalArgs;
use clikit::output::{self, Format};
use clikit::table::Table;
use clikit::timefmt;
use jiff::Timestamp;
use serde::Serialize;

/// The most stages `build` shows.
pub const MAX_STAGES: i64 = 1000;

/// Run `builds`.
pub async fn list(g: &GlobalArgs, args: BuildsArgs) -> Result<()> {
    let namespace = super::record_scope(
        g,
        &args.controller,
        args.job.as_deref().map(|j| ("--job", j)),
        args.store.cluster.as_deref(),
    )?;
    let store = Store::connect(&args.store).await?;
    let q = BuildsQuery {
        namespace: &namespace,
        controller: &args.controller,
        job: args.job.as_deref(),
        cluster: args.store.cluster.as_deref(),
        // One more than shown, to know whether there are more.
        limit: args.limit + 1,
    };
    let mut runs = store.builds(&q).await?;
    let more = runs.len() > args.limit as usize;
    runs.truncate(args.limit as usize);
    let now = Timestamp::now();
    match args.output {
        None | Some(ListOutput::Wide) => {
            if runs.is_empty() {
                eprintln!("No builds found {}.", describe_query(&q));
                return Ok(());
            }
            out!("{}", table(&runs, args.output == Some(ListOutput::Wide), now).render(""));
            if more {
                eprintln!("(the newest {} shown; --limit shows more)", args.limit);
            }
        }
        Some(ListOutput::Json) => out!("{}", print(&runs, false, Format::Json)?),
        Some(ListOutput::Yaml) => out!("{}", print(&runs, false, Format::Yaml)?),
    }
    Ok(())
}

/// `for controller team-a/ci (job team/app, cluster eu)`.
fn describe_query(q: &BuildsQuery) -> String {
    let mut s = format!("for controller {}/{}", q.namespace, q.controller);
    let filters: Vec<String> =
        [q.job.map(|j| format!("job {j}")), q.cluster.map(|c| format!("cluster {c}"))].into_iter().flatten().collect();
    if !filters.is_empty() {
        s.push_str(&format!(" ({})", filters.join(", ")));
    }
    s
}

fn print<T: Serialize>(items: &[T], single: bool, format: Format) -> Result<String> {
    output::print(items, single, "build", format).map_err(|e| Error::Failed(e.to_string()))
}

fn cell(value: &Option<String>) -> String {
    value.clone().unwrap_or_default()
}

/// The builds table (`wide`: `-o wide`).
pub fn table(runs: &[Run], wide: bool, now: Timestamp) -> Table {
    let mut headers = vec!["JOB", "NUMBER", "RESULT", "DURATION", "CELL", "STARTED"];
    if wide {
        headers.extend(["CLUSTER", "TRIGGER", "NODE", "CAUSE"]);
    }
    let mut t = Table::new(headers);
    for r in runs {
        let started = match (r.started_at, wide) {
            (None, _) => String::new(),
            (Some(s), true) => rfc3339(s),
            (Some(s), false) => timefmt::age(timefmt::since(now, s)),
        };
        let mut row = vec![
            r.job.clone(),
            r.number.to_string(),
            r.result_word().to_string(),
            r.duration(now).map(duration).unwrap_or_default(),
            r.cell.to_string(),
            started,
        ];
        if wide {
            row.extend([r.cluster.clone(), cell(&r.trigger), cell(&r.node), cell(&r.cause).replace('\n', " ")]);
        }
        t.row(row);
    }
    t
}

/// Run `build`.
pub async fn show(g: &GlobalArgs, args: BuildArgs) -> Result<()> {
    let namespace = super::record_scope(g, &args.controller, Some(("JOB", &args.job)), args.store.cluster.as_deref())?;
    let store = Store::connect(&args.store).await?;
    let q = BuildQuery {
        namespace: &namespace,
        controller: &args.controller,
        job: &args.job,
        number: args.number,
        cluster: args.store.cluster.as_deref(),
    };
    let runs = store.runs(&q).await?;
    let run = match runs.as_slice() {
        [] => return Err(not_found(&q)),
        [one] => one,
        several => {
            let clusters: Vec<&str> = several.iter().map(|r| r.cluster.as_str()).collect();
            return Err(Error::Failed(format!(
                "build {} #{} of controller {}/{} is in several clusters ({}): pick one with --cluster",
                q.job,
                q.number,
                q.namespace,
                q.controller,
                clusters.join(", ")
            )));
        }
    };
    let mut stages = store.stages(run, MAX_STAGES + 1).await?;
    let more = stages.len() as i64 > MAX_STAGES;
    stages.truncate(MAX_STAGES as usize);
    let tests = store.tests(run).await?;
    let detail = BuildDetail { run, stages: &stages, tests: tests.as_ref() };
    match args.output {
        None => out!("{}", describe(run, &stages, more, tests.as_ref(), Timestamp::now())),
        Some(RecordOutput::Json) => out!("{}", print(&[detail], true, Format::Json)?),
        Some(RecordOutput::Yaml) => out!("{}", print(&[detail], true, Format::Yaml)?),
    }
    Ok(())
}

/// `no build app #7 of controller team-a/ci`, and how to list the ones there are.
pub fn not_found(q: &BuildQuery) -> Error {
    let cluster = q.cluster.map(|c| format!(" in cluster {c}")).unwrap_or_default();
    Error::Failed(format!(
        "no build {} #{} of controller {}/{}{cluster} (`varroa builds {} -n {} --job {}` lists its builds)",
        q.job,
        q.number,
        q.namespace,
        q.controller,
        q.controller,
        q.namespace,
        shell_word(q.job)
    ))
}

/// A word as a shell reads it back: quoted when it holds anything but safe characters.
pub(crate) fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn none() -> String {
    "<none>".into()
}

/// `build`'s description: the run, its test summary, its stages. `more`: stages were cut at
/// [`MAX_STAGES`].
pub fn describe(run: &Run, stages: &[Stage], more: bool, tests: Option<&TestSummary>, now: Timestamp) -> String {
    let at = |t: Option<Timestamp>| {
        t.map(|t| format!("{} ({} ago)", timefmt::moment(t), timefmt::age(timefmt::since(now, t)))).unwrap_or_else(none)
    };
    let text = |v: &Option<String>| v.clone().unwrap_or_else(none);
    let mut t = Table::new(["Controller:".to_string(), format!("{}/{}", run.namespace, run.controller)]);
    t.row(["Cluster:".to_string(), run.cluster.clone()]);
    t.row(["Job:".to_string(), run.job.clone()]);
    t.row(["Build:".to_string(), format!("#{}", run.number)]);
    t.row(["Result:".to_string(), run.result_word().to_string()]);
    let took = match (run.duration(now), run.status) {
        (None, _) => none(),
        (Some(d), records::RunStatus::Running) => format!("{} so far", duration(d)),
        (Some(d), _) => duration(d),
    };
    t.row(["Duration:".to_string(), took]);
    t.row(["Cell:".to_string(), run.cell.to_string()]);
    t.row(["Trigger:".to_string(), text(&run.trigger)]);
    t.row(["Cause:".to_string(), text(&run.cause).replace('\n', " ")]);
    t.row(["Node:".to_string(), text(&run.node)]);
    t.row(["Queued:".to_string(), at(run.queued_at)]);
    t.row(["Started:".to_string(), at(run.started_at)]);
    t.row(["Finished:".to_string(), at(run.finished_at)]);
    t.row(["Tests:".to_string(), tests.map(TestSummary::line).unwrap_or_else(none)]);
    let mut out = t.render("");
    out.push_str("Stages:\n");
    if stages.is_empty() {
        out.push_str("  <none>\n");
        return out;
    }
    let mut st = Table::new(["NAME", "RESULT", "DURATION", "STARTED"]);
    for s in stages {
        let started = match (s.started_at, run.started_at) {
            (None, _) => String::new(),
            // Seconds after the build started (a stage's start is no finer than that).
            (Some(s), Some(build)) => match timefmt::since(s, build) {
                d if d.as_secs() == 0 => "+0s".to_string(),
                d => format!("+{}", duration(d)),
            },
            (Some(s), None) => format!("{} ago", timefmt::age(timefmt::since(now, s))),
        };
        st.row([
            s.name.replace('\n', " "),
            s.result_word(run.status).to_string(),
            s.duration(run.status, now).map(duration).unwrap_or_default(),
            started,
        ]);
    }
    out.push_str(&st.render("  "));
    if more {
        out.push_str(&format!("  (the first {MAX_STAGES} stages shown)\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RunStatus;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn run(job: &str, number: i64, status: RunStatus) -> Run {
        Run {
            cluster: "eu".into(),
            namespace: "team-a".into(),
            controller: "ci".into(),
            job: job.into(),
            number,
            status,
            result: None,
            cell: 0,
            trigger: None,
            cause: None,
            node: None,
            queued_at: None,
            started_at: None,
            finished_at: None,
            duration_ms: None,
        }
    }

    #[test]
    fn the_table_shows_results_durations_and_ages() {
        let now = ts("2026-05-01T12:10:00Z");
        let runs = vec![
            Run { queued_at: Some(ts("2026-05-01T12:09:50Z")), ..run("team/app", 9, RunStatus::Queued) },
            Run { started_at: Some(ts("2026-05-01T12:09:00Z")), cell: 1, ..run("team/app", 8, RunStatus::Running) },
            Run {
                result: Some("SUCCESS".into()),
                started_at: Some(ts("2026-05-01T12:00:00Z")),
                finished_at: Some(ts("2026-05-01T12:01:05Z")),
                duration_ms: Some(65_000),
                trigger: Some("scm".into()),
                node: Some("linux-1".into()),
                cause: Some("Started by an SCM change".into()),
                ..run("team/app", 7, RunStatus::Finished)
            },
        ];
        assert_eq!(
            table(&runs, false, now).render(""),
            "JOB        NUMBER   RESULT    DURATION   CELL   STARTED\n\
             team/app   9        QUEUED               0\n\
             team/app   8        RUNNING   1m00s      1      60s\n\
             team/app   7        SUCCESS   1m05s      0      10m\n"
        );
        let wide = table(&runs, true, now).render("");
        let last: Vec<&str> = wide.lines().nth(3).unwrap().split_whitespace().collect();
        assert_eq!(
            last,
            [
                "team/app",
                "7",
                "SUCCESS",
                "1m05s",
                "0",
                "2026-05-01T12:00:00Z",
                "eu",
                "scm",
                "linux-1",
                "Started",
                "by",
                "an",
                "SCM",
                "change"
            ]
        );
    }

    #[test]
    fn a_build_is_described_with_stages_in_start_order_and_tests() {
        let now = ts("2026-05-01T12:10:00Z");
        let r = Run {
            result: Some("UNSTABLE".into()),
            queued_at: Some(ts("2026-05-01T12:00:00Z")),
            started_at: Some(ts("2026-05-01T12:00:02Z")),
            finished_at: Some(ts("2026-05-01T12:01:07Z")),
            duration_ms: Some(65_000),
            ..run("team/app", 7, RunStatus::Finished)
        };
        let stages = vec![
            Stage {
                id: "3".into(),
                name: "Checkout".into(),
                started_at: Some(ts("2026-05-01T12:00:02Z")),
                result: Some("SUCCESS".into()),
                duration_ms: Some(3_200),
            },
            Stage {
                id: "12".into(),
                name: "Test".into(),
                started_at: Some(ts("2026-05-01T12:00:05Z")),
                result: None,
                duration_ms: None,
            },
        ];
        let tests = TestSummary { total: 10, failed: 1, skipped: 0, duration_ms: None };
        let text = describe(&r, &stages, false, Some(&tests), now);
        assert_eq!(
            text,
            "Controller:   team-a/ci\n\
             Cluster:      eu\n\
             Job:          team/app\n\
             Build:        #7\n\
             Result:       UNSTABLE\n\
             Duration:     1m05s\n\
             Cell:         0\n\
             Trigger:      <none>\n\
             Cause:        <none>\n\
             Node:         <none>\n\
             Queued:       2026-05-01 12:00:00 UTC (10m ago)\n\
             Started:      2026-05-01 12:00:02 UTC (9m58s ago)\n\
             Finished:     2026-05-01 12:01:07 UTC (8m53s ago)\n\
             Tests:        10 total, 9 passed, 1 failed, 0 skipped\n\
             Stages:\n  \
               NAME       RESULT      DURATION   STARTED\n  \
               Checkout   SUCCESS     3s         +0s\n  \
               Test       <unknown>              +3s\n"
        );
        let running = Run { status: RunStatus::Running, result: None, finished_at: None, duration_ms: None, ..r };
        let text = describe(&running, &stages[1..], true, None, now);
        assert!(text.contains("Result:       RUNNING\n"), "{text}");
        assert!(text.contains("Duration:     9m58s so far\n"), "{text}");
        assert!(text.contains("Tests:        <none>\n"), "{text}");
        assert!(text.contains("  Test   RUNNING   9m55s      +3s\n"), "{text}");
        assert!(text.ends_with("  (the first 1000 stages shown)\n"), "{text}");
    }

    #[test]
    fn a_missing_build_is_named_with_how_to_list_them() {
        let q = BuildQuery { namespace: "team-a", controller: "ci", job: "app", number: 7, cluster: None };
        assert_eq!(
            not_found(&q).to_string(),
            "no build app #7 of controller team-a/ci (`varroa builds ci -n team-a --job app` lists its builds)"
        );
        let q = BuildQuery { job: "team/my app", cluster: Some("eu"), ..q };
        assert_eq!(
            not_found(&q).to_string(),
            "no build team/my app #7 of controller team-a/ci in cluster eu (`varroa builds ci -n team-a --job 'team/my app'` lists its builds)"
        );
    }
}
