//! `varroa builds`, `varroa build` and `varroa activity` against a real PostgreSQL (each test its
//! own, varroa-recorder's `PgServer`), with the recorder's schema (`migrate::migrate`) and rows
//! inserted with SQL as the recorder writes them; the built `varroa` binary run as a user runs it,
//! with `VARROA_DATABASE_URL` and no cluster at all.

mod common;

use common::{rows, run_command};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;
use tokio_postgres::NoTls;
use varroa_recorder::migrate;
use varroa_recorder::testing::PgServer;

struct Store {
    pg: PgServer,
    url: String,
    client: tokio_postgres::Client,
    /// A kubeconfig-free home: the commands must not need a cluster.
    dir: tempfile::TempDir,
}

impl Store {
    /// A PostgreSQL with the recorder's schema in database `records`.
    async fn start() -> Store {
        let pg = PgServer::start().expect("PostgreSQL");
        let url = pg.create_database("records").await.expect("create database");
        let (mut client, conn) = tokio_postgres::connect(&pg.config("records"), NoTls).await.expect("connect");
        tokio::spawn(conn);
        migrate::migrate(&mut client).await.expect("migrate");
        Store { pg, url, client, dir: tempfile::tempdir().expect("temp dir") }
    }

    async fn sql(&self, sql: &str) {
        self.client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(common::bin());
        cmd.args(args)
            .env("VARROA_DATABASE_URL", &self.url)
            .env("KUBECONFIG", self.dir.path().join("no-kubeconfig"))
            .env_remove("VARROA_DATABASE_PASSWORD_FILE")
            .env_remove("HOME");
        cmd
    }

    async fn varroa(&self, args: &[&str]) -> common::Run {
        run_command(self.command(args)).await
    }
}

/// A finished build, `ago` and `ms` as SQL (`'1 hour'`, 65000).
fn finished(ctrl: &str, job: &str, n: i64, result: &str, started_ago: &str, ms: i64, cell: i32) -> String {
    let (ns, ctrl) = ctrl.split_once('/').unwrap();
    format!(
        "INSERT INTO runs (cluster, namespace, controller, job, build, cell, trigger, cause, node, queued_at, started_at, finished_at, result, duration_ms) \
         VALUES ('eu', '{ns}', '{ctrl}', '{job}', {n}, {cell}, 'scm', 'Started by an SCM change', 'linux-1', \
                 now() - interval '{started_ago}' - interval '2 seconds', now() - interval '{started_ago}', \
                 now() - interval '{started_ago}' + {ms} * interval '1 millisecond', '{result}', {ms});"
    )
}

fn squeeze_row(row: &BTreeMap<String, String>, columns: &[&str]) -> Vec<String> {
    columns.iter().map(|c| row[*c].clone()).collect()
}

const BUILD_COLUMNS: [&str; 5] = ["JOB", "NUMBER", "RESULT", "DURATION", "CELL"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_lists_finished_running_and_queued_newest_first() {
    let s = Store::start().await;
    s.sql(&finished("team-a/ci", "team/app", 5, "SUCCESS", "1 hour", 65_000, 0)).await;
    s.sql(&finished("team-a/ci", "team/app", 6, "FAILURE", "30 minutes", 130_000, 1)).await;
    s.sql(&finished("team-a/ci", "other/lib", 3, "SUCCESS", "20 minutes", 850, 0)).await;
    s.sql(
        "INSERT INTO runs (cluster, namespace, controller, job, build, cell, trigger, queued_at, started_at, node) VALUES
           ('eu', 'team-a', 'ci', 'team/app', 7, 0, 'timer', now() - interval '70 seconds', now() - interval '65 seconds', 'linux-2');
         INSERT INTO runs (cluster, namespace, controller, job, build, cell, trigger, queued_at) VALUES
           ('eu', 'team-a', 'ci', 'team/app', 8, 1, 'user:alice', now() - interval '5 seconds');
         -- Another cluster's controller of the same name, another controller, another namespace.
         INSERT INTO runs (cluster, namespace, controller, job, build, cell, started_at, finished_at, result, duration_ms) VALUES
           ('us', 'team-a', 'ci', 'team/app', 2, 0, now() - interval '2 hours', now() - interval '119 minutes', 'ABORTED', 60000),
           ('eu', 'team-a', 'other', 'team/app', 1, 0, now() - interval '1 minute', now(), 'SUCCESS', 1000),
           ('eu', 'team-b', 'ci', 'team/app', 1, 0, now() - interval '1 minute', now(), 'SUCCESS', 1000);",
    )
    .await;

    let r = s.varroa(&["builds", "ci", "-n", "team-a"]).await.expect(0);
    let header: Vec<&str> = r.stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["JOB", "NUMBER", "RESULT", "DURATION", "CELL", "STARTED"], "{}", r.stdout);
    let table = rows(&r.stdout);
    let got: Vec<Vec<String>> = table.iter().map(|row| squeeze_row(row, &BUILD_COLUMNS)).collect();
    let want = [
        ["team/app", "8", "QUEUED", "", "1"],
        ["team/app", "7", "RUNNING", "<so far>", "0"],
        ["other/lib", "3", "SUCCESS", "850ms", "0"],
        ["team/app", "6", "FAILURE", "2m10s", "1"],
        ["team/app", "5", "SUCCESS", "1m05s", "0"],
        ["team/app", "2", "ABORTED", "1m00s", "0"],
    ];
    assert_eq!(got.len(), want.len(), "{}", r.stdout);
    for (g, w) in got.iter().zip(want) {
        if w[3] == "<so far>" {
            // Running: how long it has run so far (65 s when inserted).
            assert!(g[3].starts_with("1m0"), "{}", r.stdout);
            assert_eq!((&g[..3], &g[4]), (&w.map(String::from)[..3], &w[4].to_string()), "{}", r.stdout);
        } else {
            assert_eq!(g, &w.map(String::from), "{}", r.stdout);
        }
    }
    let started: Vec<&str> = table.iter().map(|row| row["STARTED"].as_str()).collect();
    assert_eq!(started[0], "", "a queued build has not started");
    assert!(started[1].ends_with('s'), "{started:?}");
    assert_eq!(&started[2..], ["20m", "30m", "60m", "120m"], "{}", r.stdout);
    assert_eq!(r.stderr, "");

    // --job, --cluster, --limit.
    let r = s.varroa(&["builds", "ci", "-n", "team-a", "--job", "team/app", "--cluster", "eu"]).await.expect(0);
    let numbers: Vec<String> = rows(&r.stdout).iter().map(|row| row["NUMBER"].clone()).collect();
    assert_eq!(numbers, ["8", "7", "6", "5"], "{}", r.stdout);
    assert!(rows(&r.stdout).iter().all(|row| row["JOB"] == "team/app"));
    let r = s.varroa(&["builds", "ci", "-n", "team-a", "--limit", "2"]).await.expect(0);
    let numbers: Vec<String> = rows(&r.stdout).iter().map(|row| row["NUMBER"].clone()).collect();
    assert_eq!(numbers, ["8", "7"], "{}", r.stdout);
    assert_eq!(r.stderr, "(the newest 2 shown; --limit shows more)\n");
    let r = s.varroa(&["builds", "ci", "-n", "team-a", "--limit", "6"]).await.expect(0);
    assert_eq!((rows(&r.stdout).len(), r.stderr.as_str()), (6, ""), "exactly as many as there are: no notice");

    // -o wide: RFC 3339 and the cluster, trigger, node and cause.
    let r = s.varroa(&["builds", "ci", "-n", "team-a", "-o", "wide"]).await.expect(0);
    let wide = rows(&r.stdout);
    assert_eq!(
        squeeze_row(&wide[3], &["CLUSTER", "TRIGGER", "NODE", "CAUSE"]),
        ["eu", "scm", "linux-1", "Started by an SCM change"]
    );
    assert_eq!((wide[1]["TRIGGER"].as_str(), wide[0]["TRIGGER"].as_str()), ("timer", "user:alice"));
    assert_eq!(wide[5]["CLUSTER"], "us");
    let started = &wide[3]["STARTED"];
    assert!(started.parse::<jiff::Timestamp>().is_ok() && started.ends_with('Z'), "{}", r.stdout);

    // -o json / yaml: the records in a List.
    let r = s.varroa(&["builds", "ci", "-n", "team-a", "--job", "team/app", "-o", "json"]).await.expect(0);
    let list: Value = serde_json::from_str(&r.stdout).expect("JSON");
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 5);
    assert_eq!(
        (items[0]["number"].as_i64(), items[0]["status"].as_str(), items[0].get("result")),
        (Some(8), Some("queued"), None)
    );
    assert_eq!(items[1]["status"], "running");
    assert_eq!(
        (items[2]["result"].as_str(), items[2]["durationMs"].as_i64(), items[2]["cell"].as_i64()),
        (Some("FAILURE"), Some(130_000), Some(1))
    );
    assert!(items[2]["startedAt"].as_str().unwrap().parse::<jiff::Timestamp>().is_ok());
    assert_eq!((items[2]["namespace"].as_str(), items[2]["controller"].as_str()), (Some("team-a"), Some("ci")));
    let r = s.varroa(&["builds", "ci", "-n", "team-a", "-o", "yaml"]).await.expect(0);
    assert!(r.stdout.contains("kind: List") && r.stdout.contains("job: other/lib"), "{}", r.stdout);

    // The namespace from the kubeconfig's context, as kubectl picks it.
    let kubeconfig = s.dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: u, namespace: team-a}\n\
         clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n- name: u\n  user: {token: t}\n",
    )
    .unwrap();
    let mut cmd = s.command(&["builds", "ci", "--cluster", "us"]);
    cmd.env("KUBECONFIG", &kubeconfig);
    let r = run_command(cmd).await.expect(0);
    assert_eq!(squeeze_row(&rows(&r.stdout)[0], &["JOB", "NUMBER", "RESULT"]), ["team/app", "2", "ABORTED"]);
    // Without one: `default`.
    let r = s.varroa(&["builds", "ci"]).await.expect(0);
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", "No builds found for controller default/ci.\n"));

    // Nothing there; a name that cannot exist.
    let r = s.varroa(&["builds", "ci", "-n", "team-a", "--job", "nope", "--cluster", "eu"]).await.expect(0);
    assert_eq!(r.stderr, "No builds found for controller team-a/ci (job nope, cluster eu).\n");
    let r = s.varroa(&["builds", "ci", "-n", "team-a", "--job", "nope", "-o", "json"]).await.expect(0);
    assert_eq!(serde_json::from_str::<Value>(&r.stdout).unwrap()["items"], serde_json::json!([]));
    let r = s.varroa(&["builds", "CI", "-n", "team-a"]).await.expect(1);
    assert!(r.stderr.starts_with("error: invalid controller name \"CI\": only lowercase"), "{}", r.stderr);
    let r = s.varroa(&["builds", "ci", "-n", "Team_A"]).await.expect(1);
    assert!(r.stderr.starts_with("error: invalid namespace \"Team_A\" (-n)"), "{}", r.stderr);
    let r = s.varroa(&["builds", "ci", "-n", "team-a", "--job", "/app"]).await.expect(1);
    assert!(r.stderr.contains("invalid job name \"/app\" (--job)"), "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_shows_the_run_its_stages_in_start_order_and_tests() {
    let s = Store::start().await;
    s.sql(&finished("team-a/ci", "team/app", 7, "UNSTABLE", "10 minutes", 65_000, 1)).await;
    // Stages as stage_started / stage_finished write them; ids are flow node ids ("12" after "3"),
    // inserted out of order; "Deploy" started, never finished.
    s.sql(
        "INSERT INTO stages (cluster, namespace, controller, job, build, stage_id, name, started_at, result, duration_ms) VALUES
           ('eu', 'team-a', 'ci', 'team/app', 7, '27', 'Deploy', now() - interval '10 minutes' + interval '50 seconds', NULL, NULL),
           ('eu', 'team-a', 'ci', 'team/app', 7, '12', 'Test', now() - interval '10 minutes' + interval '5 seconds', 'UNSTABLE', 42000),
           ('eu', 'team-a', 'ci', 'team/app', 7, '3', 'Checkout', now() - interval '10 minutes', 'SUCCESS', 3200),
           ('eu', 'team-a', 'ci', 'team/app', 7, '9', 'Build', now() - interval '10 minutes' + interval '5 seconds', 'SUCCESS', 850);
         INSERT INTO test_summaries (cluster, namespace, controller, job, build, total, failed, skipped, duration_ms, event_time) VALUES
           ('eu', 'team-a', 'ci', 'team/app', 7, 120, 2, 5, 41000, now());",
    )
    .await;

    let r = s.varroa(&["build", "ci", "team/app", "7", "-n", "team-a"]).await.expect(0);
    let text = r.stdout;
    for line in [
        "Controller:   team-a/ci\n",
        "Cluster:      eu\n",
        "Job:          team/app\n",
        "Build:        #7\n",
        "Result:       UNSTABLE\n",
        "Duration:     1m05s\n",
        "Cell:         1\n",
        "Trigger:      scm\n",
        "Cause:        Started by an SCM change\n",
        "Node:         linux-1\n",
        "Tests:        120 total, 113 passed, 2 failed, 5 skipped (took 41s)\n",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    assert!(text.contains("Started:      ") && text.contains(" UTC (10m ago)\n"), "{text}");
    let stages = text.split_once("Stages:\n").unwrap().1;
    let stage_lines: Vec<String> = stages.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(
        stage_lines,
        [
            "NAME RESULT DURATION STARTED",
            "Checkout SUCCESS 3s +0s",
            "Build SUCCESS 850ms +5s",
            "Test UNSTABLE 42s +5s",
            "Deploy <unknown> +50s",
        ],
        "{text}"
    );

    // -o json: the run, its stages in the same order, its tests.
    let r = s.varroa(&["build", "ci", "team/app", "#7", "-n", "team-a", "-o", "json"]).await.expect(0);
    let b: Value = serde_json::from_str(&r.stdout).expect("JSON");
    assert_eq!(
        (b["job"].as_str(), b["number"].as_i64(), b["result"].as_str()),
        (Some("team/app"), Some(7), Some("UNSTABLE"))
    );
    let ids: Vec<&str> = b["stages"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["3", "9", "12", "27"]);
    assert_eq!(b["tests"], serde_json::json!({"total": 120, "failed": 2, "skipped": 5, "durationMs": 41000}));
    let r = s.varroa(&["build", "ci", "team/app", "7", "-n", "team-a", "-o", "yaml"]).await.expect(0);
    assert!(r.stdout.contains("name: Checkout") && r.stdout.contains("total: 120"), "{}", r.stdout);

    // A running build without stages or tests.
    s.sql(
        "INSERT INTO runs (cluster, namespace, controller, job, build, cell, started_at) VALUES
           ('eu', 'team-a', 'ci', 'team/app', 8, 0, now() - interval '30 seconds')",
    )
    .await;
    let r = s.varroa(&["build", "ci", "team/app", "8", "-n", "team-a"]).await.expect(0);
    assert!(r.stdout.contains("Result:       RUNNING\n") && r.stdout.contains("s so far\n"), "{}", r.stdout);
    assert!(r.stdout.contains("Tests:        <none>\n") && r.stdout.ends_with("Stages:\n  <none>\n"), "{}", r.stdout);

    // A build that does not exist.
    let r = s.varroa(&["build", "ci", "app", "7", "-n", "team-a"]).await.expect(1);
    assert_eq!(
        r.stderr,
        "error: no build app #7 of controller team-a/ci (`varroa builds ci -n team-a --job app` lists its builds)\n"
    );
    let r = s.varroa(&["build", "ci", "team/app", "7", "-n", "team-a", "--cluster", "us"]).await.expect(1);
    assert!(r.stderr.starts_with("error: no build team/app #7 of controller team-a/ci in cluster us"), "{}", r.stderr);

    // The same controller name in two clusters: pick one.
    s.sql(&finished("team-a/ci", "team/app", 7, "SUCCESS", "1 day", 1000, 0).replace("'eu'", "'us'")).await;
    let r = s.varroa(&["build", "ci", "team/app", "7", "-n", "team-a"]).await.expect(1);
    assert_eq!(
        r.stderr,
        "error: build team/app #7 of controller team-a/ci is in several clusters (eu, us): pick one with --cluster\n"
    );
    let r = s.varroa(&["build", "ci", "team/app", "7", "-n", "team-a", "--cluster", "us"]).await.expect(0);
    assert!(r.stdout.contains("Result:       SUCCESS\n") && r.stdout.contains("Cluster:      us\n"), "{}", r.stdout);

    // Usage errors: exit 2, naming the argument.
    let r = s.varroa(&["build", "ci", "team/app", "seven", "-n", "team-a"]).await.expect(2);
    assert!(r.stderr.contains("\"seven\" is not a build number"), "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_filters_by_controller_and_since_newest_last() {
    let s = Store::start().await;
    s.sql(
        "INSERT INTO activity (id, time, cluster, namespace, controller, cell, source, kind, message) VALUES
           ('a1', now() - interval '3 hours', 'eu', 'team-a', 'ci', 0, 'mite', 'MiteConnected', 'cell 0 connected'),
           ('a2', now() - interval '50 minutes', 'eu', 'team-a', 'ci', 0, 'mite', 'ApplySucceeded', 'configuration sha256:ab applied'),
           ('a3', now() - interval '14 minutes', 'eu', 'team-a', 'ci', NULL, 'user', 'Stopped', 'alice stopped the controller'),
           ('a4', now() - interval '10 minutes', 'us', 'team-a', 'ci', 1, 'mite', 'MiteDisconnected', 'cell 1 stream lost'),
           ('b1', now() - interval '13 minutes', 'eu', 'team-a', 'other', 0, 'operator', 'Provisioned', 'created StatefulSet other'),
           ('c1', now() - interval '11 minutes', 'eu', 'team-b', 'x', 0, 'mite', 'MiteConnected', 'cell 0 connected');
         INSERT INTO activity (id, time, cluster, source, kind, message) VALUES
           ('g1', now() - interval '12 minutes', 'eu', 'gateway', 'GatewayStarted', 'the gateway is up');",
    )
    .await;

    // A namespace, oldest first; nothing of other namespaces, nothing cluster-wide.
    let r = s.varroa(&["activity", "-n", "team-a"]).await.expect(0);
    let header: Vec<&str> = r.stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["TIME", "CONTROLLER", "CELL", "SOURCE", "KIND", "MESSAGE"], "{}", r.stdout);
    let got: Vec<Vec<String>> = rows(&r.stdout)
        .iter()
        .map(|row| squeeze_row(row, &["TIME", "CONTROLLER", "CELL", "SOURCE", "KIND", "MESSAGE"]))
        .collect();
    let want = [
        ["3h", "ci", "0", "mite", "MiteConnected", "cell 0 connected"],
        ["50m", "ci", "0", "mite", "ApplySucceeded", "configuration sha256:ab applied"],
        ["14m", "ci", "", "user", "Stopped", "alice stopped the controller"],
        ["13m", "other", "0", "operator", "Provisioned", "created StatefulSet other"],
        ["10m", "ci", "1", "mite", "MiteDisconnected", "cell 1 stream lost"],
    ];
    assert_eq!(got, want.map(|r| r.map(String::from)), "{}", r.stdout);
    assert_eq!(r.stderr, "");

    // --since, a controller, a cluster, --limit.
    let kinds = |out: &str| rows(out).iter().map(|row| row["KIND"].clone()).collect::<Vec<_>>();
    let r = s.varroa(&["activity", "-n", "team-a", "--since", "1h"]).await.expect(0);
    assert_eq!(kinds(&r.stdout), ["ApplySucceeded", "Stopped", "Provisioned", "MiteDisconnected"]);
    let r = s.varroa(&["activity", "ci", "-n", "team-a", "--since", "15m"]).await.expect(0);
    assert_eq!(kinds(&r.stdout), ["Stopped", "MiteDisconnected"]);
    let r = s.varroa(&["activity", "ci", "-n", "team-a", "--since", "2d", "--cluster", "eu"]).await.expect(0);
    assert_eq!(kinds(&r.stdout), ["MiteConnected", "ApplySucceeded", "Stopped"]);
    let r = s.varroa(&["activity", "-n", "team-a", "--since", "30s"]).await.expect(0);
    assert_eq!(
        (r.stdout.as_str(), r.stderr.as_str()),
        ("", "No activity found in namespace team-a in the last 30s.\n")
    );
    let r = s.varroa(&["activity", "-n", "team-a", "--limit", "2"]).await.expect(0);
    assert_eq!(kinds(&r.stdout), ["Provisioned", "MiteDisconnected"], "the newest two, newest last");
    assert_eq!(r.stderr, "(the newest 2 shown; --limit or --since shows more)\n");

    // -A: every namespace and cluster-wide entries, NAMESPACE first; -o wide: RFC 3339, CLUSTER.
    let r = s.varroa(&["activity", "-A", "--since", "15m", "-o", "wide"]).await.expect(0);
    let header: Vec<&str> = r.stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAMESPACE", "TIME", "CONTROLLER", "CELL", "SOURCE", "KIND", "CLUSTER", "MESSAGE"]);
    let all = rows(&r.stdout);
    let got: Vec<Vec<String>> =
        all.iter().map(|row| squeeze_row(row, &["NAMESPACE", "CONTROLLER", "KIND", "CLUSTER"])).collect();
    assert_eq!(
        got,
        [
            ["team-a", "ci", "Stopped", "eu"],
            ["team-a", "other", "Provisioned", "eu"],
            ["", "", "GatewayStarted", "eu"],
            ["team-b", "x", "MiteConnected", "eu"],
            ["team-a", "ci", "MiteDisconnected", "us"],
        ]
        .map(|r| r.map(String::from)),
        "{}",
        r.stdout
    );
    assert!(all[0]["TIME"].parse::<jiff::Timestamp>().is_ok(), "{}", r.stdout);

    // -o json parses, in the table's order.
    let r = s.varroa(&["activity", "ci", "-n", "team-a", "-o", "json"]).await.expect(0);
    let list: Value = serde_json::from_str(&r.stdout).expect("JSON");
    let ids: Vec<&str> = list["items"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a1", "a2", "a3", "a4"]);
    assert_eq!(list["items"][2].get("cell"), None);
    assert_eq!(list["items"][3]["cell"], 1);
    assert!(list["items"][0]["time"].as_str().unwrap().parse::<jiff::Timestamp>().is_ok());

    // A bad --since is a usage error naming the flag and the forms accepted.
    for bad in ["soon", "1w", "-1h", "15", ""] {
        let r = s.varroa(&["activity", &format!("--since={bad}")]).await.expect(2);
        assert!(
            r.stderr.contains("--since <DURATION>") && r.stderr.contains("use e.g. 90s, 5m, 1h30m, 2d"),
            "{bad}: {}",
            r.stderr
        );
    }
    let r = s.varroa(&["activity", "ci", "-A"]).await.expect(2);
    assert!(r.stderr.contains("cannot be used with"), "{}", r.stderr);
}

/// `varroa schedules`: a controller's jobs with schedules (rows as the recorder writes them from
/// `job_schedule` events), one row per schedule, by job; jobs whose schedules are `[]` and other
/// controllers' jobs left out; filters, wide and JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_lists_each_jobs_triggers_and_when_they_fire_next() {
    let s = Store::start().await;
    s.sql(
        r#"INSERT INTO job_schedules (cluster, namespace, controller, job, schedules, event_time) VALUES
           ('eu', 'team-a', 'ci', 'team/app', jsonb_build_array(
                jsonb_build_object('trigger', 'cron', 'spec', 'H/15 * * * *', 'next', to_char((now() + interval '4 minutes 30 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
                jsonb_build_object('trigger', 'scm', 'spec', 'H/5 * * * *')), now() - interval '1 hour'),
           ('eu', 'team-a', 'ci', 'nightly', '[{"trigger": "cron", "spec": "@midnight"}]', now() - interval '2 hours'),
           ('eu', 'team-a', 'ci', 'retired', '[]', now() - interval '1 hour'),
           ('us', 'team-a', 'ci', 'team/app', '[{"trigger": "cron", "spec": "H 4 * * *"}]', now() - interval '1 hour'),
           ('eu', 'team-a', 'other', 'x', '[{"trigger": "cron", "spec": "@hourly"}]', now()),
           ('eu', 'team-b', 'ci', 'y', '[{"trigger": "cron", "spec": "@hourly"}]', now());"#,
    )
    .await;
    let r = s.varroa(&["schedules", "ci", "-n", "team-a"]).await.expect(0);
    let header: Vec<&str> = r.stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["JOB", "TRIGGER", "SPEC", "NEXT"], "{}", r.stdout);
    let got: Vec<Vec<String>> =
        rows(&r.stdout).iter().map(|row| squeeze_row(row, &["JOB", "TRIGGER", "SPEC", "NEXT"])).collect();
    assert_eq!(
        got,
        [
            ["nightly", "cron", "@midnight", ""],
            ["team/app", "cron", "H/15 * * * *", "in 4m"],
            ["team/app", "scm", "H/5 * * * *", ""],
            ["team/app", "cron", "H 4 * * *", ""],
        ]
        .map(|r| r.map(String::from)),
        "by job, the retired job and other controllers left out:\n{}",
        r.stdout
    );
    assert_eq!(r.stderr, "");

    // A job, a cluster, wide.
    let r = s
        .varroa(&["schedules", "ci", "-n", "team-a", "--job", "team/app", "--cluster", "us", "-o", "wide"])
        .await
        .expect(0);
    let all = rows(&r.stdout);
    assert_eq!(all.len(), 1, "{}", r.stdout);
    assert_eq!(squeeze_row(&all[0], &["JOB", "SPEC", "CLUSTER"]), ["team/app", "H 4 * * *", "us"]);
    assert!(all[0]["REPORTED"].parse::<jiff::Timestamp>().is_ok(), "{}", r.stdout);

    // JSON: one record per job.
    let r = s
        .varroa(&["schedules", "ci", "-n", "team-a", "--job", "team/app", "--cluster", "eu", "-o", "json"])
        .await
        .expect(0);
    let list: Value = serde_json::from_str(&r.stdout).expect("JSON");
    let item = &list["items"][0];
    assert_eq!(item["job"], "team/app");
    assert_eq!(item["schedules"][1], serde_json::json!({"trigger": "scm", "spec": "H/5 * * * *"}));
    assert!(item["schedules"][0]["next"].as_str().unwrap().parse::<jiff::Timestamp>().is_ok(), "{item}");
    assert!(item["reportedAt"].as_str().unwrap().parse::<jiff::Timestamp>().is_ok(), "{item}");

    // Nothing scheduled: said on stderr, naming the filters; --limit counts jobs.
    let r = s.varroa(&["schedules", "ci", "-n", "team-a", "--job", "retired"]).await.expect(0);
    assert_eq!(
        (r.stdout.as_str(), r.stderr.as_str()),
        ("", "No job schedules found for controller team-a/ci (job retired).\n")
    );
    let r = s.varroa(&["schedules", "ci", "-n", "team-a", "--limit", "1"]).await.expect(0);
    assert_eq!(rows(&r.stdout).len(), 1, "{}", r.stdout);
    assert_eq!(r.stderr, "(the first 1 jobs shown; --limit shows more)\n");

    // A row this CLI cannot read is an error naming the job, not a crash.
    s.sql(r#"UPDATE job_schedules SET schedules = '[{"trigger": 7}]' WHERE job = 'nightly'"#).await;
    let r = s.varroa(&["schedules", "ci", "-n", "team-a"]).await.expect(1);
    assert!(r.stderr.contains("reading the schedules of job nightly of controller team-a/ci"), "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_errors_say_what_to_set_or_fix() {
    let mut s = Store::start().await;

    // No database URL.
    for args in [&["builds", "ci"][..], &["build", "ci", "app", "1"], &["activity"]] {
        let mut cmd = s.command(args);
        cmd.env_remove("VARROA_DATABASE_URL");
        let r = run_command(cmd).await.expect(1);
        assert!(
            r.stderr.starts_with("error: no build record store to read: set --database-url or VARROA_DATABASE_URL"),
            "{args:?}: {}",
            r.stderr
        );
    }
    // A URL that does not parse.
    let r = s.varroa(&["builds", "ci", "--database-url", "postgres://u@h:port/db"]).await.expect(1);
    assert!(r.stderr.starts_with("error: invalid --database-url: "), "{}", r.stderr);
    // A database that does not exist: PostgreSQL's refusal, with the address.
    let port = s.pg.port();
    let r = s
        .varroa(&["builds", "ci", "--database-url", &format!("postgres://postgres:secret@127.0.0.1:{port}/nope")])
        .await
        .expect(1);
    assert!(
        r.stderr.starts_with(&format!("error: the build record store at 127.0.0.1:{port} refused the connection: "))
            && r.stderr.contains("check the database name in --database-url"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("secret"), "the URL's password is never printed: {}", r.stderr);
    // A database without the recorder's schema.
    s.pg.create_database("empty").await.unwrap();
    let r = s.varroa(&["activity", "--database-url", &s.pg.url("empty")]).await.expect(1);
    assert!(
        r.stderr.starts_with(&format!("error: the database at 127.0.0.1:{port} holds no build records"))
            && r.stderr.contains("varroa-recorder migrate"),
        "{}",
        r.stderr
    );
    // A user without SELECT on the tables.
    s.sql("CREATE ROLE reader LOGIN; REVOKE ALL ON runs FROM PUBLIC").await;
    let r = s
        .varroa(&[
            "builds",
            "ci",
            "-n",
            "team-a",
            "--database-url",
            &format!("postgres://reader@127.0.0.1:{port}/records"),
        ])
        .await
        .expect(1);
    assert!(
        r.stderr.starts_with(&format!("error: reading the builds of controller team-a/ci in the build record store at 127.0.0.1:{port}: permission denied for table runs: the database user needs SELECT on runs"))
            && r.stderr.contains("GRANT SELECT ON runs, stages, test_summaries, job_schedules, activity TO"),
        "{}",
        r.stderr
    );
    // A password file that cannot be read.
    let mut cmd = s.command(&["builds", "ci"]);
    cmd.env("VARROA_DATABASE_PASSWORD_FILE", s.dir.path().join("no-password"));
    let r = run_command(cmd).await.expect(1);
    assert!(r.stderr.starts_with("error: cannot read --database-password-file "), "{}", r.stderr);

    // The server down: unreachable, with host:port.
    s.pg.stop();
    let r = s.varroa(&["build", "ci", "app", "7", "-n", "team-a"]).await.expect(1);
    assert!(
        r.stderr.starts_with(&format!("error: cannot reach the build record store at 127.0.0.1:{port}: "))
            && r.stderr.contains("check --database-url (VARROA_DATABASE_URL)"),
        "{}",
        r.stderr
    );
}

/// The queries use the schema's indexes (the planner is kept off sequential scans, which it would
/// pick for tables this small): a controller's builds by `runs_by_controller`, one build's
/// stages and tests by their primary keys, a controller's schedules by `job_schedules_by_controller`,
/// activity by `activity_by_controller` or `activity_by_time`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queries_use_the_schemas_indexes() {
    use varroa_cli::store::{ACTIVITY_SQL, BUILDS_SQL, RUN_SQL, SCHEDULES_SQL, STAGES_SQL, TESTS_SQL};
    let s = Store::start().await;
    s.sql("SET enable_seqscan = off").await;
    type Params = Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>>;
    let plan = |sql: &'static str, params: Params| {
        let client = &s.client;
        async move {
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                params.iter().map(|p| p.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
            let rows = client.query(&format!("EXPLAIN {sql}"), &refs).await.expect("EXPLAIN");
            rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
        }
    };
    let none: Option<&str> = None;
    let since: Option<jiff::Timestamp> = Some(jiff::Timestamp::now());
    let cases: Vec<(&str, &'static str, Params)> = vec![
        (
            "runs_by_controller",
            BUILDS_SQL,
            vec![Box::new("team-a"), Box::new("ci"), Box::new(none), Box::new(none), Box::new(51i64)],
        ),
        (
            "runs_by_controller",
            BUILDS_SQL,
            vec![Box::new("team-a"), Box::new("ci"), Box::new(Some("team/app")), Box::new(Some("eu")), Box::new(51i64)],
        ),
        (
            "runs_",
            RUN_SQL,
            vec![Box::new("team-a"), Box::new("ci"), Box::new("app"), Box::new(7i64), Box::new(none), Box::new(20i64)],
        ),
        (
            "stages_pkey",
            STAGES_SQL,
            vec![
                Box::new("eu"),
                Box::new("team-a"),
                Box::new("ci"),
                Box::new("app"),
                Box::new(7i64),
                Box::new(1001i64),
            ],
        ),
        (
            "test_summaries_pkey",
            TESTS_SQL,
            vec![Box::new("eu"), Box::new("team-a"), Box::new("ci"), Box::new("app"), Box::new(7i64)],
        ),
        (
            "activity_by_controller",
            ACTIVITY_SQL,
            vec![Box::new(Some("team-a")), Box::new(Some("ci")), Box::new(since), Box::new(none), Box::new(51i64)],
        ),
        (
            "activity_by_time",
            ACTIVITY_SQL,
            vec![Box::new(none), Box::new(none), Box::new(since), Box::new(none), Box::new(51i64)],
        ),
        (
            "job_schedules_by_controller",
            SCHEDULES_SQL,
            vec![Box::new("team-a"), Box::new("ci"), Box::new(none), Box::new(none), Box::new(201i64)],
        ),
    ];
    for (index, sql, params) in cases {
        let p = plan(sql, params).await;
        assert!(p.contains(index), "{index} in the plan of {sql}:\n{p}");
        assert!(!p.contains("Seq Scan"), "{sql}:\n{p}");
    }
}
