//! The plugin's client against a fake mite over real HTTP: order, retries, the token, rejections
//! and the buffer's drop policy; and the double's builds sent through it.

mod support;

use std::time::Duration;
use support::{FakeMite, Scripted, kinds_per_build};
use varroa_jenkins_double::builds::{self, JobConfig, TestsConfig};
use varroa_jenkins_double::plugin::{PluginClient, PluginConfig};
use varroa_jenkins_double::{JenkinsDouble, Options};
use varroa_link::builds::{BuildEvent, EventBody};

const TOKEN: &str = "0123456789abcdef";

struct Setup {
    _dir: tempfile::TempDir,
    token_file: std::path::PathBuf,
}

fn token_dir(token: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    Setup { _dir: dir, token_file }
}

fn fast(url: &str, token_file: &std::path::Path) -> PluginConfig {
    PluginConfig {
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        request_timeout: Duration::from_secs(5),
        ..PluginConfig::new(url, token_file)
    }
}

/// The events of `n` builds of a job, as the double plans them.
fn events(job: &JobConfig, builds: std::ops::RangeInclusive<u64>) -> Vec<BuildEvent> {
    let t0 = "2026-12-03T08:00:00Z".parse().unwrap();
    builds.flat_map(|n| builds::plan(job, n, t0).into_iter().map(|s| s.event)).collect()
}

fn ids(events: &[BuildEvent]) -> Vec<String> {
    events.iter().map(|e| e.id.clone()).collect()
}

async fn flushed(client: &PluginClient) {
    assert!(client.flush(support::WAIT).await, "not flushed: {:?}", client.counters());
}

#[tokio::test]
async fn the_doubles_builds_arrive_in_order_and_complete_per_build() {
    let mite = FakeMite::start(TOKEN).await;
    let s = token_dir(TOKEN);
    let app = JobConfig {
        tests: Some(TestsConfig { total: 5, failed: 0, skipped: 1, duration_ms: None }),
        ..JobConfig::simple("team-a/app", 3, 40)
    };
    let double = JenkinsDouble::start(Options {
        build_jobs: vec![app, JobConfig::simple("other", 1, 10)],
        plugin: Some(fast(&mite.url(), &s.token_file)),
        time_scale: 0.0,
        ..Default::default()
    })
    .await
    .unwrap();
    let c = support::client();
    let post = |job: &str, count: u32| {
        c.post(format!("{}/__double/builds", double.url()))
            .json(&serde_json::json!({"job": job, "count": count}))
            .send()
    };
    let (a, b) = tokio::join!(post("team-a/app", 5), post("other", 3));
    let a: serde_json::Value = a.unwrap().json().await.unwrap();
    assert_eq!(a["builds"], serde_json::json!([1, 2, 3, 4, 5]));
    assert_eq!(b.unwrap().status(), 200);
    let total = 5 * (2 * 3 + 4) + 3 * (2 + 3);
    mite.wait_stored(total).await;

    let stored = mite.stored();
    let per_build = kinds_per_build(&stored);
    assert_eq!(per_build.len(), 8);
    for ((job, n), kinds) in &per_build {
        let mut want = vec!["queued", "started"];
        let stages = if job == "other" { 1 } else { 3 };
        for _ in 0..stages {
            want.extend(["stage_started", "stage_finished"]);
        }
        if job == "team-a/app" {
            want.push("test_summary");
        }
        want.push("finished");
        assert_eq!(kinds, &want, "{job} #{n}");
    }
    // Ids are deterministic and unique, times never go back within a build.
    let mut seen = std::collections::BTreeSet::new();
    for e in &stored {
        assert!(seen.insert(e.id.clone()), "{} twice", e.id);
        assert!(e.id.starts_with(&format!("{}#{}:{}", e.job, e.build_number(), e.body.kind())), "{}", e.id);
    }
    for n in 1..=5u64 {
        let times: Vec<_> =
            stored.iter().filter(|e| e.job == "team-a/app" && e.build == Some(n)).map(|e| e.time).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        let fin = stored.iter().find(|e| e.id == format!("team-a/app#{n}:finished")).unwrap();
        assert_eq!(
            fin.body,
            EventBody::Finished { result: varroa_link::builds::BuildResult::Success, duration_ms: 120 }
        );
    }
    // The fake stores before it answers: wait for the client to have its answer.
    flushed(double.plugin().unwrap()).await;
    let counters = double.plugin_counters().unwrap();
    assert_eq!((counters.sent, counters.pending, counters.dropped, counters.rejected), (total as u64, 0, 0, 0));
    let v: serde_json::Value =
        c.get(format!("{}/__double/plugin", double.url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["enabled"], true);
    assert_eq!(v["sent"], total);
    assert_eq!(v["pending"], 0);
    assert_eq!(v["url"], mite.url());
}

#[tokio::test]
async fn a_503_with_retry_after_is_honoured_and_nothing_is_lost() {
    let mite = FakeMite::start(TOKEN).await;
    mite.script(Scripted::Unavailable(Some(1)));
    mite.script(Scripted::Unavailable(None));
    let s = token_dir(TOKEN);
    let client = PluginClient::start(fast(&mite.url(), &s.token_file)).unwrap();
    let want = events(&JobConfig::simple("app", 2, 5), 1..=3);
    for e in &want {
        client.submit(e).unwrap();
    }
    flushed(&client).await;
    assert_eq!(ids(&mite.stored()), ids(&want), "every event, once, in order");
    let r = mite.requests();
    assert_eq!(r[0].status, 503);
    assert_eq!(r[1].status, 503);
    let after_retry_after = r[1].at - r[0].at;
    assert!(after_retry_after >= Duration::from_millis(990), "Retry-After: 1 not honoured: {after_retry_after:?}");
    let after_backoff = r[2].at - r[1].at;
    assert!(after_backoff >= Duration::from_millis(38), "second failure: 2 x 20 ms back-off, got {after_backoff:?}");
    assert_eq!(r[2].ids[0], want[0].id, "the oldest first");
    let c = client.counters();
    assert_eq!((c.sent, c.failures, c.dropped, c.rejected, c.pending), (want.len() as u64, 2, 0, 0, 0));
    assert!(c.last_error.is_none());
}

#[tokio::test]
async fn refused_connections_and_timeouts_keep_the_events() {
    // Nothing listens on the port at first: connection refused, retried with back-off.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let s = token_dir(TOKEN);
    let config =
        PluginConfig { request_timeout: Duration::from_millis(300), ..fast(&format!("http://{port}"), &s.token_file) };
    let client = PluginClient::start(config).unwrap();
    let want = events(&JobConfig::simple("app", 1, 5), 1..=2);
    for e in &want[..3] {
        client.submit(e).unwrap();
    }
    let mut rx = client.watch();
    tokio::time::timeout(support::WAIT, rx.wait_for(|c| c.failures >= 2)).await.unwrap().unwrap();
    assert_eq!(client.counters().pending, 3);
    assert!(client.counters().last_error.unwrap().contains("onnect"), "{:?}", client.counters());
    // The mite comes up on that port, and its first answer never comes: a timeout, retried.
    let listener = tokio::net::TcpListener::bind(port).await.expect("the port is still free");
    let mite = FakeMite::serve(listener, TOKEN);
    mite.script(Scripted::Hang);
    for e in &want[3..] {
        client.submit(e).unwrap();
    }
    flushed(&client).await;
    assert_eq!(ids(&mite.stored()), ids(&want));
    let r = mite.requests();
    assert_eq!(r[0].status, 0, "held");
    assert!(r[1].at - r[0].at >= Duration::from_millis(300), "resent after the timeout");
    assert!(r[1].ids.starts_with(&r[0].ids), "the held batch is resent first");
}

#[tokio::test]
async fn a_401_rereads_the_token_file() {
    let mite = FakeMite::start("one").await;
    let s = token_dir("one");
    let client = PluginClient::start(fast(&mite.url(), &s.token_file)).unwrap();
    assert_eq!(client.counters().token_reads, 1, "read at start");
    let job = JobConfig::simple("app", 1, 5);
    let first = events(&job, 1..=1);
    for e in &first {
        client.submit(e).unwrap();
    }
    flushed(&client).await;

    // A restarted mite wrote a new token: one 401, the file is read again, the batch resent.
    mite.set_token("two");
    std::fs::write(&s.token_file, "two").unwrap();
    let second = events(&job, 2..=2);
    for e in &second {
        client.submit(e).unwrap();
    }
    flushed(&client).await;
    let r = mite.requests();
    let n = r.iter().position(|x| x.status == 401).expect("a 401");
    assert_eq!(r[n].token.as_deref(), Some("one"));
    assert_eq!((r[n + 1].status, r[n + 1].token.as_deref()), (200, Some("two")));
    assert_eq!(r[n + 1].ids, r[n].ids, "the same batch again");
    assert_eq!(client.counters().token_reads, 2);

    // The mite's new token is not in the file yet: the client backs off, reading it each time,
    // until it is.
    mite.set_token("three");
    let third = events(&job, 3..=3);
    for e in &third {
        client.submit(e).unwrap();
    }
    mite.wait_for("three 401s", |i| i.requests.iter().filter(|x| x.status == 401).count() >= 3).await;
    std::fs::write(&s.token_file, "three\n").unwrap();
    flushed(&client).await;
    let all: Vec<BuildEvent> = [first, second, third].concat();
    assert_eq!(ids(&mite.stored()), ids(&all), "nothing lost");
    let c = client.counters();
    assert!(c.token_reads >= 4, "{c:?}");
    assert_eq!((c.sent, c.dropped, c.rejected), (all.len() as u64, 0, 0));
}

#[tokio::test]
async fn rejected_events_are_not_sent_again() {
    let mite = FakeMite::start(TOKEN).await;
    mite.reject(|e| matches!(e.body, EventBody::StageStarted { .. }).then(|| "stage.name: not liked".to_owned()));
    let s = token_dir(TOKEN);
    let client = PluginClient::start(PluginConfig { batch_size: 3, ..fast(&mite.url(), &s.token_file) }).unwrap();
    let want = events(&JobConfig::simple("app", 2, 5), 1..=2);
    for e in &want {
        client.submit(e).unwrap();
    }
    flushed(&client).await;
    // Later batches fail once: what was rejected before is not in them.
    mite.script(Scripted::Unavailable(Some(0)));
    let more = events(&JobConfig::simple("app", 2, 5), 3..=3);
    for e in &more {
        client.submit(e).unwrap();
    }
    flushed(&client).await;
    let requests = mite.requests();
    let all: Vec<BuildEvent> = [want, more].concat();
    let rejected: Vec<&BuildEvent> = all.iter().filter(|e| matches!(e.body, EventBody::StageStarted { .. })).collect();
    assert_eq!(rejected.len(), 6);
    for e in &rejected {
        let times = requests.iter().filter(|r| r.status == 200).flat_map(|r| &r.ids).filter(|i| **i == e.id).count();
        assert_eq!(times, 1, "{} sent {times} times", e.id);
    }
    assert!(requests.iter().all(|r| r.ids.len() <= 3), "batch size kept");
    let c = client.counters();
    assert_eq!((c.rejected, c.sent, c.pending), (6, (all.len() - 6) as u64, 0));
    assert_eq!(c.submitted, c.sent + c.pending + c.rejected + c.dropped);
    assert_eq!(mite.stored().len(), all.len() - 6);
}

/// On a current-thread runtime nothing runs between the synchronous submits, so the buffer's
/// content before the first request is exact.
#[tokio::test(flavor = "current_thread")]
async fn a_full_buffer_drops_stage_events_first_and_keeps_finished() {
    let mite = FakeMite::start(TOKEN).await;
    let s = token_dir(TOKEN);
    let client = PluginClient::start(PluginConfig { max_events: 10, ..fast(&mite.url(), &s.token_file) }).unwrap();
    // Two builds of three stages: 12 stage events and 8 others, into room for 10.
    let job = JobConfig {
        tests: Some(TestsConfig { total: 1, failed: 0, skipped: 0, duration_ms: None }),
        ..JobConfig::simple("app", 3, 5)
    };
    let all = events(&job, 1..=2);
    assert_eq!(all.len(), 20);
    for e in &all {
        client.submit(e).unwrap();
    }
    assert_eq!((client.counters().dropped, client.counters().pending), (10, 10));
    flushed(&client).await;
    let stage = |e: &BuildEvent| matches!(e.body, EventBody::StageStarted { .. } | EventBody::StageFinished { .. });
    let stages: Vec<&BuildEvent> = all.iter().filter(|e| stage(e)).collect();
    let want: Vec<String> =
        all.iter().filter(|e| !stage(e) || stages[10..].iter().any(|s| s.id == e.id)).map(|e| e.id.clone()).collect();
    assert_eq!(ids(&mite.stored()), want, "the ten oldest stage events went, in order otherwise");

    // No stage events left to drop: the oldest others go, `finished` last.
    let client = PluginClient::start(PluginConfig { max_events: 3, ..fast(&mite.url(), &s.token_file) }).unwrap();
    let all = events(&JobConfig::simple("lean", 0, 0), 1..=2);
    for e in &all {
        client.submit(e).unwrap();
    }
    flushed(&client).await;
    let got: Vec<String> = mite.stored().iter().filter(|e| e.job == "lean").map(|e| e.id.clone()).collect();
    assert_eq!(got, ["lean#1:finished", "lean#2:started", "lean#2:finished"]);
    let c = client.counters();
    assert_eq!((c.dropped, c.sent), (3, 3));
    assert_eq!(c.submitted, c.sent + c.pending + c.rejected + c.dropped);
}

#[tokio::test]
async fn without_a_plugin_url_builds_run_and_send_nothing() {
    let double = JenkinsDouble::start(Options {
        build_jobs: vec![JobConfig::simple("app", 1, 0)],
        time_scale: 0.0,
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(double.run_builds("app", 2).await.unwrap(), [1, 2]);
    double.builds().wait_finished("app", 2).await;
    assert!(double.plugin_counters().is_none());
    let c = support::client();
    let v: serde_json::Value =
        c.get(format!("{}/__double/plugin", double.url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(v, serde_json::json!({"enabled": false}));
    let r = c
        .post(format!("{}/__double/builds", double.url()))
        .json(&serde_json::json!({"job": "nope"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("app"), "names the configured jobs");
}
