//! The trigger inventory end to end: the Jenkins double serves its jobs' schedules at
//! `GET /varroa/inventory` (as the Varroa plugin does), the mite polls it and sends the changes
//! as `job_schedule` events over its real gRPC stream to the real gateway, which stores them in a
//! real nats-server's `varroa_builds` stream; the tests read them back with a JetStream consumer,
//! or let the real recorder store them in a real PostgreSQL's `job_schedules` table.

mod common;

use common::*;
use std::net::SocketAddr;
use std::time::Duration;
use varroa_jenkins_double::builds::{JobConfig, parse_jobs};
use varroa_link::builds::{EventBody, Schedule};
use varroa_mite::inventory::InventorySettings;
use varroa_mite::link::{self, MiteHandle};
use varroa_mite::settings::ClaimSettings;

async fn start(w: &World) -> MiteHandle {
    let inventory = InventorySettings { interval: Duration::from_millis(100) };
    let mite = link::start_full(w.settings("mite"), ClaimSettings::default(), inventory).await.unwrap();
    eventually("the mite's stream is up", || async { mite.status().connected.then_some(()) }).await;
    mite
}

/// The `job_schedule` events in the stream, in stream order: (job, schedules).
async fn schedules(w: &World) -> Vec<(String, Vec<Schedule>)> {
    stored_events(&w.js)
        .await
        .into_iter()
        .filter_map(|s| match s.record.event.body {
            EventBody::JobSchedule { schedules } => {
                assert_eq!(s.record.event.build, None);
                assert!(s.record.event.id.starts_with("schedule:"), "{}", s.record.event.id);
                Some((s.record.event.job, schedules))
            }
            _ => None,
        })
        .collect()
}

async fn until_count(w: &World, n: usize) -> Vec<(String, Vec<Schedule>)> {
    eventually(&format!("{n} job_schedule events are stored"), || async {
        let s = schedules(w).await;
        (s.len() >= n).then_some(s)
    })
    .await
}

/// Waits until `more` further polls with `outcome` have completed.
async fn polls(health: SocketAddr, outcome: &str, more: u64) {
    let line = format!("varroa_mite_inventory_polls_total{{outcome=\"{outcome}\"}}");
    let from = metric(health, &line).await;
    eventually(&format!("{more} more {outcome} polls"), || async {
        (metric(health, &line).await >= from + more).then_some(())
    })
    .await;
}

fn cron(spec: &str) -> Schedule {
    Schedule { trigger: "cron".into(), spec: spec.into(), next: None }
}

fn with_schedules(name: &str, schedules: Vec<Schedule>) -> JobConfig {
    JobConfig { schedules, ..JobConfig::simple(name, 1, 1) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_reach_varroa_builds_once_per_change_and_a_removed_job_sends_none() {
    let w = World::start().await;
    let jobs = parse_jobs(
        "- name: team/app\n  schedules: [{trigger: cron, spec: \"H/15 * * * *\", next: \"2026-12-03T08:15:00Z\"}]\n\
         - name: nightly\n  schedules: [{trigger: scm, spec: \"H H * * *\"}]\n- name: manual\n",
    )
    .unwrap();
    w.jenkins.builds().define(jobs).unwrap();
    let mite = start(&w).await;
    let health = mite.health_addr.unwrap();

    let mut first = until_count(&w, 2).await;
    first.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(first.len(), 2, "every job with a schedule once, no job without: {first:?}");
    assert_eq!(first[0].0, "nightly");
    assert_eq!(first[0].1, vec![Schedule { trigger: "scm".into(), spec: "H H * * *".into(), next: None }]);
    assert_eq!(first[1].0, "team/app");
    assert_eq!(first[1].1.len(), 1);
    assert_eq!(first[1].1[0].spec, "H/15 * * * *");
    assert_eq!(first[1].1[0].next.map(|t| t.to_string()).as_deref(), Some("2026-12-03T08:15:00Z"));

    // Unchanged: nothing more, however many polls.
    polls(health, "ok", 3).await;
    assert_eq!(schedules(&w).await.len(), 2, "unchanged schedules are not sent again");

    // Changed: sent again, with the new spec.
    w.jenkins.builds().define(vec![with_schedules("team/app", vec![cron("H/5 * * * *")])]).unwrap();
    let s = until_count(&w, 3).await;
    assert_eq!(s[2], ("team/app".to_owned(), vec![cron("H/5 * * * *")]));

    // No schedule any more: `schedules: []`, once.
    w.jenkins.builds().define(vec![with_schedules("nightly", Vec::new())]).unwrap();
    let s = until_count(&w, 4).await;
    assert_eq!(s[3], ("nightly".to_owned(), Vec::new()));
    polls(health, "ok", 3).await;
    assert_eq!(schedules(&w).await.len(), 4, "nothing after the last change");
    assert_eq!(metric(health, "varroa_mite_inventory_events_total{outcome=\"accepted\"}").await, 4);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jenkins_without_the_inventory_sends_nothing_and_the_mite_stays_healthy() {
    let w = World::start().await;
    w.jenkins.builds().define(vec![with_schedules("team/app", vec![cron("H/15 * * * *")])]).unwrap();
    w.jenkins.set_no_inventory(true);
    let mite = start(&w).await;
    let health = mite.health_addr.unwrap();
    polls(health, "not_served", 3).await;
    assert!(schedules(&w).await.is_empty(), "no inventory, no job_schedule events");
    assert!(mite.status().connected, "the stream stays up");
    let ready = reqwest::get(format!("http://{health}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 200, "the mite stays ready");

    // A plugin that starts serving the inventory (upgraded): its schedules arrive.
    w.jenkins.set_no_inventory(false);
    let s = until_count(&w, 1).await;
    assert_eq!(s, vec![("team/app".to_owned(), vec![cron("H/15 * * * *")])]);
    mite.shutdown().await;
}

/// A real PostgreSQL with the real recorder draining the world's NATS into it.
struct Records {
    _pg: varroa_recorder::testing::PgServer,
    client: tokio_postgres::Client,
    recorder: varroa_recorder::RunningRecorder,
}

impl Records {
    async fn start(w: &World) -> Records {
        let pg = varroa_recorder::testing::PgServer::start().expect("PostgreSQL starts (make deps installs it)");
        let url = pg.create_database("records").await.expect("a database");
        let recorder = varroa_recorder::start(varroa_recorder::RecorderConfig {
            database: varroa_recorder::DbSettings {
                url,
                password_file: None,
                application_name: "varroa-recorder inventory test".into(),
            },
            nats: varroa_link::nats::ConnectSettings {
                url: w.nats_url.clone(),
                credentials_file: None,
                name: "varroa-recorder/test".into(),
                max_reconnect_delay: Duration::from_millis(250),
            },
            health_listen: "127.0.0.1:0".parse().unwrap(),
            consumers: varroa_recorder::ConsumerSettings {
                batch_size: 64,
                ack_wait: Duration::from_secs(30),
                stream_replicas: 1,
            },
            retention: Default::default(),
        })
        .await
        .expect("the recorder starts");
        let ready = recorder.readiness.clone();
        eventually("the recorder is ready", || {
            let ready = ready.clone();
            async move { ready.is_ready().then_some(()) }
        })
        .await;
        let (client, conn) = tokio_postgres::connect(&pg.config("records"), tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        Records { _pg: pg, client, recorder }
    }

    /// `job_schedules` of the test controller: (job, schedules as JSON text), by job.
    async fn rows(&self) -> Vec<(String, serde_json::Value)> {
        let rows = self
            .client
            .query(
                "SELECT job, schedules FROM job_schedules WHERE cluster = 'test' AND namespace = $1 AND controller = $2 ORDER BY job",
                &[&NS, &CTRL],
            )
            .await
            .unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    }

    async fn until(
        &self,
        what: &str,
        want: impl Fn(&[(String, serde_json::Value)]) -> bool,
    ) -> Vec<(String, serde_json::Value)> {
        eventually(what, || async {
            let rows = self.rows().await;
            want(&rows).then_some(rows)
        })
        .await
    }
}

/// The whole path of a job's schedules: the plugin's inventory (the double), the mite's poll, its
/// gRPC stream, the gateway, `varroa_builds`, the recorder, PostgreSQL. The table holds each
/// job's current schedules: a change replaces them, a job whose triggers were removed keeps a row
/// with `[]` (which `varroa schedules` leaves out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_land_in_the_job_schedules_table_and_follow_each_change() {
    let w = World::start().await;
    let records = Records::start(&w).await;
    w.jenkins
        .builds()
        .define(vec![
            with_schedules("team/app", vec![cron("H/15 * * * *")]),
            with_schedules("nightly", vec![Schedule { trigger: "scm".into(), spec: "H H * * *".into(), next: None }]),
            JobConfig::simple("manual", 1, 1),
        ])
        .unwrap();
    let mite = start(&w).await;

    let rows = records.until("both scheduled jobs are in job_schedules", |r| r.len() == 2).await;
    assert_eq!(rows[0].0, "nightly");
    assert_eq!(rows[0].1, serde_json::json!([{"trigger": "scm", "spec": "H H * * *"}]));
    assert_eq!(rows[1].0, "team/app", "a job without a schedule has no row: {rows:?}");
    assert_eq!(rows[1].1, serde_json::json!([{"trigger": "cron", "spec": "H/15 * * * *"}]));

    // A changed spec replaces the row's schedules; a removed trigger leaves `[]`.
    w.jenkins.builds().define(vec![with_schedules("team/app", vec![cron("H/5 * * * *"), cron("@midnight")])]).unwrap();
    w.jenkins.builds().define(vec![with_schedules("nightly", Vec::new())]).unwrap();
    let rows = records
        .until("the changes are in job_schedules", |r| {
            r.len() == 2 && r[0].1 == serde_json::json!([]) && r[1].1.as_array().is_some_and(|a| a.len() == 2)
        })
        .await;
    assert_eq!(
        rows[1].1,
        serde_json::json!([{"trigger": "cron", "spec": "H/5 * * * *"}, {"trigger": "cron", "spec": "@midnight"}])
    );
    mite.shutdown().await;
    records.recorder.shutdown().await;
}

/// A schedule change the gateway could not take (it is down) is sent again, with the same event
/// id, once the stream is back: it reaches the stream once, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_while_the_gateway_is_away_arrives_once_it_is_back() {
    let mut w = World::start().await;
    w.jenkins.builds().define(vec![with_schedules("team/app", vec![cron("H/15 * * * *")])]).unwrap();
    let mite = start(&w).await;
    let health = mite.health_addr.unwrap();
    until_count(&w, 1).await;

    w.gw.take().unwrap().shutdown().await;
    eventually("the mite sees its stream gone", || async { (!mite.status().connected).then_some(()) }).await;
    w.jenkins.builds().define(vec![with_schedules("team/app", vec![cron("H/5 * * * *")])]).unwrap();
    // Polls go on while the stream is down; the change cannot be sent and is kept.
    polls(health, "ok", 2).await;
    assert_eq!(schedules(&w).await.len(), 1, "nothing reached the stream while the gateway was away");

    w.start_gateway().await;
    let s = until_count(&w, 2).await;
    assert_eq!(s[1], ("team/app".to_owned(), vec![cron("H/5 * * * *")]));
    // Sent once more than it needs (never acknowledged) is still one event in the stream.
    polls(health, "ok", 3).await;
    assert_eq!(schedules(&w).await.len(), 2, "the change is stored once");
    mite.shutdown().await;
}
