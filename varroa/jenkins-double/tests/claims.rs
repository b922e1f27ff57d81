//! The plugin's build claims against a test mite over real HTTP: what the double asks, and what it
//! does with each answer; and two cells sharing one ledger.

mod support;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;
use support::mite::{Ledger, Script, TestMite};
use varroa_jenkins_double::builds::{ItemState, JobConfig};
use varroa_jenkins_double::plugin::PluginConfig;
use varroa_jenkins_double::{ClaimsOptions, JenkinsDouble, LogsOptions, Options};
use varroa_link::builds::EventBody;

const TOKEN: &str = "c1a1m5c1a1m5c1a1m5";

struct Cell {
    _dir: tempfile::TempDir,
    mite: TestMite,
    double: JenkinsDouble,
}

fn fast_claims() -> ClaimsOptions {
    ClaimsOptions {
        budget: Duration::from_secs(2),
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        ..Default::default()
    }
}

async fn cell(n: u32, ledger: std::sync::Arc<std::sync::Mutex<Ledger>>, claims: ClaimsOptions) -> Cell {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let mite = TestMite::start(TOKEN, n, ledger).await;
    let double = JenkinsDouble::start(Options {
        build_jobs: vec![JobConfig::simple("app", 2, 10), JobConfig::simple("team/web", 1, 0)],
        plugin: Some(PluginConfig {
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_millis(100),
            ..PluginConfig::new(mite.url(), &token_file)
        }),
        claims: Some(claims),
        logs: Some(LogsOptions { backoff_initial: Duration::from_millis(20), ..Default::default() }),
        time_scale: 0.0,
        ..Default::default()
    })
    .await
    .unwrap();
    Cell { _dir: dir, mite, double }
}

async fn post_builds(double: &JenkinsDouble, body: Value) -> Value {
    let r = support::client().post(format!("{}/__double/builds", double.url())).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_claim_carries_a_stable_id_and_the_trigger_and_retry_then_granted_runs_with_that_number() {
    let c = cell(0, Ledger::shared(), fast_claims()).await;
    c.mite.script_claims([
        Script::Answer(json!({"decision": "retry", "after_ms": 100, "reason": "the ledger's database is away"})),
        Script::Status(503, Some(0)),
        Script::Status(401, None),
        Script::Answer(json!({"decision": "granted", "build": 42})),
    ]);
    let v = post_builds(&c.double, json!({"job": "app", "trigger": "timer:batch-7"})).await;
    assert_eq!(v["builds"], json!([42]), "{v}");
    let item = &v["items"][0];
    assert_eq!((&item["trigger"], &item["granted"]), (&json!("timer:batch-7:1"), &json!(true)));
    c.double.builds().wait_finished("app", 42).await;

    let claims = c.mite.claims();
    assert_eq!(claims.iter().map(|s| s.status).collect::<Vec<_>>(), [200, 503, 401, 200]);
    let id = claims[0].body["id"].as_str().unwrap().to_owned();
    assert_eq!(id, item["claimId"].as_str().unwrap());
    assert!(id.starts_with("q-") && id.ends_with("-1"), "{id}");
    for s in &claims {
        assert_eq!(s.body, json!({"v": 1, "id": id, "job": "app", "trigger": "timer:batch-7:1", "budget_ms": 2000}));
        assert_eq!(s.token.as_deref(), Some(TOKEN));
    }
    // Jenkins numbers on from the granted number.
    assert_eq!(c.double.builds().next_number("app"), 43);
    let counters = c.double.claim_counters().unwrap();
    assert_eq!((counters.granted, counters.retries, counters.waiting), (1, 1, 0));
    assert!(counters.failures >= 2, "{counters:?}");

    // Its events carry the granted number, and the queued event the trigger.
    c.mite.wait_for("the finished event", |st| st.events.iter().any(|e| e.body.kind() == "finished")).await;
    let events = c.mite.events();
    assert!(events.iter().all(|e| e.build == Some(42)), "{events:?}");
    assert_eq!(events[0].body, EventBody::Queued { trigger: Some("timer:batch-7:1".into()) });
    let console = support::client().get(format!("{}/job/app/42/consoleText", c.double.url())).send().await.unwrap();
    assert!(console.text().await.unwrap().ends_with("Finished: SUCCESS\n"));
}

#[tokio::test]
async fn a_refused_claim_drops_the_build_without_events_and_the_item_says_so() {
    let c = cell(1, Ledger::shared(), fast_claims()).await;
    c.mite.script_claims([Script::Answer(json!({"decision": "refused", "holder": 0}))]);
    let v = post_builds(&c.double, json!({"job": "app", "triggers": ["scm:abc", "scm:def"], "wait": true})).await;
    assert_eq!(v["builds"], json!([1]), "{v}");
    assert_eq!(v["refused"], 1);
    assert_eq!(v["items"][0]["state"], "refused");
    assert_eq!(v["items"][0]["holder"], 0);
    assert!(v["items"][0].get("build").is_none());
    assert_eq!((&v["items"][1]["state"], &v["items"][1]["build"]), (&json!("finished"), &json!(1)));
    c.mite.wait_for("build 1's finished event", |st| st.events.iter().any(|e| e.id == "app#1:finished")).await;
    // Events only for the build that ran; none carries the refused trigger.
    let events = c.mite.events();
    assert!(events.iter().all(|e| e.build == Some(1)));
    assert!(!events.iter().any(|e| e.body == EventBody::Queued { trigger: Some("scm:abc".into()) }));
    let p: Value = support::client()
        .get(format!("{}/__double/plugin", c.double.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!((&p["claims"]["refused"], &p["claims"]["itemsRefused"]), (&json!(1), &json!(1)), "{p}");
    let items: Value = support::client()
        .get(format!("{}/__double/items?job=app", c.double.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(items["items"].as_array().unwrap().len(), 2);
    assert_eq!(items["refused"], 1);
}

#[tokio::test]
async fn ungated_404_and_501_run_with_jenkins_numbers() {
    let c = cell(0, Ledger::shared(), fast_claims()).await;
    c.mite.script_claims([
        Script::Answer(json!({"decision": "ungated", "reason": "the gate is off"})),
        Script::Status(501, None),
        Script::Status(404, None),
    ]);
    let mut numbers = Vec::new();
    for _ in 0..3 {
        let v = post_builds(&c.double, json!({"job": "team/web"})).await;
        assert_eq!(v["items"][0]["granted"], false, "{v}");
        assert!(v["items"][0]["trigger"].as_str().unwrap().starts_with("user:admin:"), "{v}");
        numbers.extend(v["builds"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()));
    }
    assert_eq!(numbers, [1, 2, 3]);
    assert_eq!(c.double.claim_counters().unwrap().ungated, 3);
    assert_eq!(c.mite.claims().len(), 3, "one claim each: nothing asked again");
}

#[tokio::test]
async fn a_malformed_claim_and_one_that_waits_too_long_are_dropped() {
    let claims = ClaimsOptions { wait_limit: Duration::from_millis(400), ..fast_claims() };
    let c = cell(0, Ledger::shared(), claims).await;
    c.mite.script_claims([Script::Status(400, None)]);
    c.mite.script_claims(
        (0..50).map(|_| Script::Answer(json!({"decision": "retry", "after_ms": 100, "reason": "the ledger is away"}))),
    );
    let v = post_builds(&c.double, json!({"job": "app"})).await;
    assert_eq!((&v["builds"], &v["dropped"]), (&json!([]), &json!(1)), "{v}");
    assert!(v["items"][0]["reason"].as_str().unwrap().contains("400"), "{v}");
    let v = post_builds(&c.double, json!({"job": "app"})).await;
    assert_eq!((&v["builds"], &v["items"][0]["state"]), (&json!([]), &json!("dropped")), "{v}");
    assert!(v["items"][0]["reason"].as_str().unwrap().contains("longer than"), "{v}");
    let counters = c.double.claim_counters().unwrap();
    assert_eq!((counters.rejected, counters.expired), (1, 1), "{counters:?}");
    // The retries asked with one id; no events were sent for either.
    let ids: BTreeSet<String> =
        c.mite.claims()[1..].iter().map(|s| s.body["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 1);
    assert!(c.mite.events().is_empty());
    assert_eq!(c.double.builds().next_number("app"), 1);
}

#[tokio::test]
async fn two_cells_sharing_one_ledger_run_each_trigger_once_numbered_from_1() {
    let ledger = Ledger::shared();
    let (a, b) = tokio::join!(cell(0, ledger.clone(), fast_claims()), cell(1, ledger.clone(), fast_claims()));
    let ask = json!({"job": "app", "count": 100, "trigger": "timer:batch-7", "wait": true});
    let (va, vb) = tokio::join!(post_builds(&a.double, ask.clone()), post_builds(&b.double, ask.clone()));
    let mut ran: Vec<(String, u64)> = Vec::new();
    for v in [&va, &vb] {
        for item in v["items"].as_array().unwrap() {
            match item["state"].as_str().unwrap() {
                "finished" => ran.push((item["trigger"].as_str().unwrap().into(), item["build"].as_u64().unwrap())),
                "refused" => {}
                other => panic!("{other}: {item}"),
            }
        }
    }
    assert_eq!(ran.len(), 100, "exactly one cell ran each trigger");
    let triggers: BTreeSet<&str> = ran.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        triggers,
        (1..=100).map(|n| format!("timer:batch-7:{n}")).collect::<BTreeSet<_>>().iter().map(String::as_str).collect()
    );
    let mut numbers: Vec<u64> = ran.iter().map(|(_, n)| *n).collect();
    numbers.sort();
    assert_eq!(numbers, (1..=100).collect::<Vec<_>>());
    assert_eq!(va["refused"].as_u64().unwrap() + vb["refused"].as_u64().unwrap(), 100);
    // Each cell sent events for the builds it ran, and only those.
    for (c, v) in [(&a, &va), (&b, &vb)] {
        let mine: BTreeSet<u64> = v["builds"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
        let n = mine.len();
        c.mite
            .wait_for("every finished event", |st| {
                st.events.iter().filter(|e| e.body.kind() == "finished").count() == n
            })
            .await;
        let sent: BTreeSet<u64> = c.mite.events().iter().map(|e| e.build_number()).collect();
        assert_eq!(sent, mine);
        let states = c.double.builds().queue_items_of(Some("app"));
        assert!(states.iter().all(|i| matches!(i.state, ItemState::Finished | ItemState::Refused)));
    }
}
