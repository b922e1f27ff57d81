//! `schedules CONTROLLER [--job JOB] [--limit N] [-o wide|json|yaml]`: a controller's job
//! schedules from the store's `job_schedules` table, which the recorder fills from the
//! `job_schedule` events the mite sends when it sees a job's triggers change in the plugin's
//! trigger inventory (docs/varroa/mite.md, "Trigger inventory").
//!
//! The table: JOB, TRIGGER (`cron`, `scm`), SPEC (as Jenkins has it), NEXT (when it fires next:
//! `in 4m`; `12m ago` when the time Jenkins gave has passed and no newer report came, which says
//! the schedule's report is stale, not that it did not fire), by job name, one row per schedule.
//! `-o wide` shows NEXT in RFC 3339 and adds CLUSTER and REPORTED (when Jenkins reported the
//! schedules). Jobs without a schedule are left out. `-o json|yaml` prints one record per job in
//! a `v1` List.

use crate::cli::{ListOutput, SchedulesArgs};
use crate::error::{Error, Result};
use crate::records::{JobSchedules, rfc3339};
use crate::store::{SchedulesQuery, Store};

use clikit::cli::GlobalArgs;
use clikit::output::{self, Format};
use clikit::table::Table;
use clikit::timefmt;
use jiff::Timestamp;

/// Run `schedules`.
pub async fn run(g: &GlobalArgs, args: SchedulesArgs) -> Result<()> {
    let namespace = super::record_scope(
        g,
        &args.controller,
        args.job.as_deref().map(|j| ("--job", j)),
        args.store.cluster.as_deref(),
    )?;
    let store = Store::connect(&args.store).await?;
    let q = SchedulesQuery {
        namespace: &namespace,
        controller: &args.controller,
        job: args.job.as_deref(),
        cluster: args.store.cluster.as_deref(),
        // One more than shown, to know whether there are more.
        limit: args.limit + 1,
    };
    let mut jobs = store.schedules(&q).await?;
    let more = jobs.len() > args.limit as usize;
    jobs.truncate(args.limit as usize);
    let now = Timestamp::now();
    match args.output {
        None | Some(ListOutput::Wide) => {
            if jobs.is_empty() {
                eprintln!("No job schedules found {}.", describe_query(&q));
                return Ok(());
            }
            out!("{}", table(&jobs, args.output == Some(ListOutput::Wide), now).render(""));
            if more {
                eprintln!("(the first {} jobs shown; --limit shows more)", args.limit);
            }
        }
        Some(ListOutput::Json) => out!("{}", print(&jobs, Format::Json)?),
        Some(ListOutput::Yaml) => out!("{}", print(&jobs, Format::Yaml)?),
    }
    Ok(())
}

/// `for controller team-a/ci (job team/app, cluster eu)`.
fn describe_query(q: &SchedulesQuery) -> String {
    let mut s = format!("for controller {}/{}", q.namespace, q.controller);
    let filters: Vec<String> =
        [q.job.map(|j| format!("job {j}")), q.cluster.map(|c| format!("cluster {c}"))].into_iter().flatten().collect();
    if !filters.is_empty() {
        s.push_str(&format!(" ({})", filters.join(", ")));
    }
    s
}

fn print(items: &[JobSchedules], format: Format) -> Result<String> {
    output::print(items, false, "job schedules", format).map_err(|e| Error::Failed(e.to_string()))
}

/// NEXT: `in 4m`, `12m ago`, or nothing when Jenkins gave no time.
fn next(now: Timestamp, at: Option<Timestamp>, wide: bool) -> String {
    match at {
        None => String::new(),
        Some(t) if wide => rfc3339(t),
        Some(t) if t >= now => format!("in {}", timefmt::until(timefmt::since(t, now))),
        Some(t) => format!("{} ago", timefmt::age(timefmt::since(now, t))),
    }
}

/// The schedules table (`wide`: `-o wide`).
pub fn table(jobs: &[JobSchedules], wide: bool, now: Timestamp) -> Table {
    let mut headers = vec!["JOB", "TRIGGER", "SPEC", "NEXT"];
    if wide {
        headers.extend(["CLUSTER", "REPORTED"]);
    }
    let mut t = Table::new(headers);
    for j in jobs {
        for s in &j.schedules {
            let mut row = vec![j.job.clone(), s.trigger.clone(), s.spec.replace('\n', " "), next(now, s.next, wide)];
            if wide {
                row.extend([j.cluster.clone(), rfc3339(j.reported_at)]);
            }
            t.row(row);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Schedule;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn job(name: &str, schedules: Vec<Schedule>) -> JobSchedules {
        JobSchedules {
            cluster: "eu".into(),
            namespace: "team-a".into(),
            controller: "ci".into(),
            job: name.into(),
            schedules,
            reported_at: ts("2026-05-01T12:00:00Z"),
        }
    }

    fn sched(trigger: &str, spec: &str, next: Option<&str>) -> Schedule {
        Schedule { trigger: trigger.into(), spec: spec.into(), next: next.map(ts) }
    }

    #[test]
    fn each_schedule_is_a_row_with_when_it_fires_next() {
        let now = ts("2026-05-01T12:10:00Z");
        let jobs = vec![
            job(
                "team/app",
                vec![
                    sched("cron", "H/15 * * * *", Some("2026-05-01T12:14:00Z")),
                    sched("scm", "H/5 * * * *", Some("2026-05-01T11:58:00Z")),
                ],
            ),
            job("team/nightly", vec![sched("cron", "@midnight", None)]),
        ];
        assert_eq!(
            table(&jobs, false, now).render(""),
            "JOB            TRIGGER   SPEC           NEXT\n\
             team/app       cron      H/15 * * * *   in 4m\n\
             team/app       scm       H/5 * * * *    12m ago\n\
             team/nightly   cron      @midnight\n"
        );
        let wide = table(&jobs, true, now).render("");
        let first: Vec<&str> = wide.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            first,
            ["team/app", "cron", "H/15", "*", "*", "*", "*", "2026-05-01T12:14:00Z", "eu", "2026-05-01T12:00:00Z"]
        );
    }

    #[test]
    fn the_empty_message_names_the_filters() {
        let q = SchedulesQuery { namespace: "team-a", controller: "ci", job: Some("app"), cluster: None, limit: 1 };
        assert_eq!(describe_query(&q), "for controller team-a/ci (job app)");
    }
}
