//! `activity [CONTROLLER] [-A] [--since D] [--limit N] [-o wide|json|yaml]`: what happened to
//! controllers (lifecycle changes, user actions, what the mites saw), from the store's
//! `activity` table, newest last like `kubectl get events`.
//!
//! The table: TIME (the age), CONTROLLER, CELL, SOURCE, KIND, MESSAGE; `-A` adds NAMESPACE
//! first and includes cluster-wide entries (no namespace, no controller). `-o wide` shows TIME in
//! RFC 3339 and adds CLUSTER. `--limit` keeps the newest N; `--since` only what happened in that
//! last stretch of time.

use crate::cli::{ActivityArgs, ListOutput};
use crate::error::{Error, Result};
use crate::records::{Activity, rfc3339};
use crate::store::{ActivityQuery, Store};
use crate::{client, names};
use clikit::cli::GlobalArgs;
use clikit::output::{self, Format};
use clikit::table::Table;
use clikit::timefmt;
use jiff::{SignedDuration, Timestamp};
use std::time::Duration;

/// Run `activity`.
pub async fn run(g: &GlobalArgs, args: ActivityArgs) -> Result<()> {
    let namespace = if args.all_namespaces { None } else { Some(client::namespace(g)?) };
    if let Some(ns) = &namespace {
        names::namespace(ns)?;
    }
    if let Some(c) = &args.controller {
        names::controller(c)?;
    }
    if let Some(cluster) = &args.store.cluster {
        names::cluster(cluster)?;
    }
    let store = Store::connect(&args.store).await?;
    let now = Timestamp::now();
    let q = ActivityQuery {
        namespace: namespace.as_deref(),
        controller: args.controller.as_deref(),
        since: args.since.and_then(|d| since(now, d)),
        cluster: args.store.cluster.as_deref(),
        limit: args.limit + 1,
    };
    // Newest first from the store; the newest --limit, shown oldest first.
    let mut items = store.activity(&q).await?;
    let more = items.len() > args.limit as usize;
    items.truncate(args.limit as usize);
    items.reverse();
    match args.output {
        None | Some(ListOutput::Wide) => {
            if items.is_empty() {
                eprintln!("No activity found {}.", describe_query(&q, args.since));
                return Ok(());
            }
            out!("{}", table(&items, args.output == Some(ListOutput::Wide), args.all_namespaces, now).render(""));
            if more {
                eprintln!("(the newest {} shown; --limit or --since shows more)", args.limit);
            }
        }
        Some(ListOutput::Json) => out!("{}", print(&items, Format::Json)?),
        Some(ListOutput::Yaml) => out!("{}", print(&items, Format::Yaml)?),
    }
    Ok(())
}

/// The moment `d` before `now`; `None` (no bound) when that is before any time there is.
pub fn since(now: Timestamp, d: Duration) -> Option<Timestamp> {
    SignedDuration::try_from(d).ok().and_then(|d| now.checked_sub(d).ok())
}

/// `for controller team-a/ci in the last 1h (cluster eu)`.
fn describe_query(q: &ActivityQuery, since: Option<Duration>) -> String {
    let mut s = match (q.namespace, q.controller) {
        (Some(ns), Some(c)) => format!("for controller {ns}/{c}"),
        (Some(ns), None) => format!("in namespace {ns}"),
        (None, _) => "in any namespace".to_string(),
    };
    if let Some(d) = since {
        s.push_str(&format!(" in the last {}", timefmt::exact(d)));
    }
    if let Some(c) = q.cluster {
        s.push_str(&format!(" (cluster {c})"));
    }
    s
}

fn print(items: &[Activity], format: Format) -> Result<String> {
    output::print(items, false, "activity", format).map_err(|e| Error::Failed(e.to_string()))
}

/// The activity table (`wide`: `-o wide`; `all_namespaces`: a NAMESPACE column first).
pub fn table(items: &[Activity], wide: bool, all_namespaces: bool, now: Timestamp) -> Table {
    let mut headers = vec![];
    if all_namespaces {
        headers.push("NAMESPACE");
    }
    headers.extend(["TIME", "CONTROLLER", "CELL", "SOURCE", "KIND"]);
    if wide {
        headers.push("CLUSTER");
    }
    headers.push("MESSAGE");
    let mut t = Table::new(headers);
    for a in items {
        let mut row = vec![];
        if all_namespaces {
            row.push(a.namespace.clone());
        }
        row.push(if wide { rfc3339(a.time) } else { timefmt::age(timefmt::since(now, a.time)) });
        row.extend([
            a.controller.clone(),
            a.cell.map(|c| c.to_string()).unwrap_or_default(),
            a.source.clone(),
            a.kind.clone(),
        ]);
        if wide {
            row.push(a.cluster.clone());
        }
        row.push(a.message.replace('\n', " "));
        t.row(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn entry(ns: &str, controller: &str, time: &str, kind: &str, message: &str) -> Activity {
        Activity {
            id: format!("{controller}-{kind}"),
            time: ts(time),
            cluster: "eu".into(),
            namespace: ns.into(),
            controller: controller.into(),
            cell: if controller.is_empty() { None } else { Some(0) },
            source: "mite".into(),
            kind: kind.into(),
            message: message.into(),
        }
    }

    #[test]
    fn the_table_reads_like_kubectl_get_events() {
        let now = ts("2026-05-01T12:10:00Z");
        let items = vec![
            entry("", "", "2026-05-01T11:00:00Z", "GatewayStarted", "gateway up"),
            entry("team-a", "ci", "2026-05-01T12:09:30Z", "MiteConnected", "cell 0 connected\nagain"),
        ];
        assert_eq!(
            table(&items, false, false, now).render(""),
            "TIME   CONTROLLER   CELL   SOURCE   KIND             MESSAGE\n\
             70m                        mite     GatewayStarted   gateway up\n\
             30s    ci           0      mite     MiteConnected    cell 0 connected again\n"
        );
        let wide = table(&items, true, true, now).render("");
        assert!(wide.starts_with("NAMESPACE   TIME                   CONTROLLER   CELL   SOURCE   KIND"), "{wide}");
        assert!(
            wide.contains("team-a      2026-05-01T12:09:30Z   ci           0      mite     MiteConnected    eu"),
            "{wide}"
        );
    }

    #[test]
    fn since_is_a_moment_before_now_or_no_bound() {
        let now = ts("2026-05-01T12:00:00Z");
        assert_eq!(since(now, Duration::from_secs(3600)), Some(ts("2026-05-01T11:00:00Z")));
        assert_eq!(since(now, Duration::from_secs(u64::MAX)), None);
        assert_eq!(since(now, Duration::from_secs(2_000_000 * 86400 * 365)), None);
    }
}
