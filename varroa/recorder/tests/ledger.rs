//! The build claims ledger against a real PostgreSQL and a real nats-server (each test its own):
//! a NATS request with a JSON `LedgerRequest` plays the gateway.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use varroa_link::claims::{self, LedgerAnswer, LedgerRequest};
use varroa_recorder::RunningRecorder;

const SUBJECT: &str = "varroa.claims.prod.team-a.ci";

fn claim(cell: u32, id: &str, job: &str, trigger: &str) -> LedgerRequest {
    LedgerRequest {
        cluster: "prod".into(),
        namespace: "team-a".into(),
        controller: "ci".into(),
        cell,
        id: id.into(),
        job: job.into(),
        trigger: trigger.into(),
        budget_ms: 4000,
    }
}

/// Sends raw bytes on `subject` and reads the answer.
async fn ask_raw(nc: &async_nats::Client, subject: &str, body: Vec<u8>) -> LedgerAnswer {
    let msg = tokio::time::timeout(Duration::from_secs(20), nc.request(subject.to_owned(), body.into()))
        .await
        .expect("the ledger answers in time")
        .expect("a responder answers");
    serde_json::from_slice(&msg.payload).expect("a LedgerAnswer")
}

/// One request, one answer.
async fn ask(nc: &async_nats::Client, req: &LedgerRequest) -> LedgerAnswer {
    ask_raw(nc, SUBJECT, serde_json::to_vec(req).unwrap()).await
}

/// Asks until the answer is not `retry`, waiting `after_ms` between, as the plugin does.
async fn decided(nc: &async_nats::Client, req: &LedgerRequest) -> LedgerAnswer {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match ask(nc, req).await {
            LedgerAnswer::Retry { after_ms, reason } => {
                assert!(Instant::now() < deadline, "still retry: {reason}");
                assert!((100..=30_000).contains(&after_ms), "{after_ms}");
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
            }
            a => return a,
        }
    }
}

async fn granted(nc: &async_nats::Client, req: &LedgerRequest) -> u64 {
    match decided(nc, req).await {
        LedgerAnswer::Granted { build } => build,
        a => panic!("{req:?}: {a:?}"),
    }
}

/// The builds of `job` in `claims`, in order.
async fn builds_of(h: &Harness, job: &str) -> Vec<i64> {
    let c = h.db().await.unwrap();
    c.query("SELECT build FROM claims WHERE job = $1 ORDER BY build", &[&job])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn one_to(n: i64) -> Vec<i64> {
    (1..=n).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn numbers_are_gap_free_per_job_over_many_claims_from_two_cells() {
    let h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    let limit = Arc::new(tokio::sync::Semaphore::new(20));
    let mut tasks = Vec::new();
    for i in 0..300u32 {
        let (nc, limit) = (h.nc.clone(), limit.clone());
        let job = if i % 3 == 0 { "team/lib" } else { "team/app" };
        let req = claim(i % 2, &format!("q-{i}"), job, &format!("scm:{i}"));
        tasks.push(tokio::spawn(async move {
            let _p = limit.acquire().await.unwrap();
            (req.job.clone(), granted(&nc, &req).await)
        }));
    }
    let mut got: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for t in tasks {
        let (job, b) = t.await.unwrap();
        got.entry(job).or_default().push(b as i64);
    }
    for v in got.values_mut() {
        v.sort();
    }
    assert_eq!(got["team/app"], one_to(200), "team/app: 1..200, no gap, no double");
    assert_eq!(got["team/lib"], one_to(100), "team/lib: a sequence of its own");
    assert_eq!(builds_of(&h, "team/app").await, one_to(200));
    assert_eq!(r.metrics.claims("granted"), 300);
    let c = h.db().await.unwrap();
    let last: i64 =
        c.query_one("SELECT last_build FROM claim_sequences WHERE job = 'team/app'", &[]).await.unwrap().get(0);
    assert_eq!(last, 200);
    let text = metrics_text(r.health_addr).await;
    assert_eq!(sample(&text, r#"varroa_recorder_claims_total{decision="granted"}"#), 300.0, "{text}");
    assert!(sample(&text, "varroa_recorder_claim_seconds_count") >= 300.0);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_claim_asked_again_gets_the_same_answer_even_after_a_restart() {
    let h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    let first = claim(0, "q-1", "app", "timer:08:00");
    assert_eq!(decided(&h.nc, &first).await, LedgerAnswer::Granted { build: 1 });
    assert_eq!(decided(&h.nc, &first).await, LedgerAnswer::Granted { build: 1 }, "asked twice: the same number");
    // Another cell's claim of that trigger is refused with the holder, again and again.
    let other = claim(1, "q-1-cell1", "app", "timer:08:00");
    assert_eq!(decided(&h.nc, &other).await, LedgerAnswer::Refused { holder: 0 });
    assert_eq!(decided(&h.nc, &other).await, LedgerAnswer::Refused { holder: 0 });
    // A second claim of the same cell for the trigger: a trigger runs once.
    let again = claim(0, "q-2", "app", "timer:08:00");
    assert_eq!(decided(&h.nc, &again).await, LedgerAnswer::Refused { holder: 0 });
    // The same id from another cell: not a second grant.
    assert_eq!(decided(&h.nc, &claim(1, "q-1", "app", "timer:08:00")).await, LedgerAnswer::Refused { holder: 0 });
    // The id already granted, for another trigger: rejected naming the id.
    match decided(&h.nc, &claim(0, "q-1", "app", "timer:09:00")).await {
        LedgerAnswer::Rejected { error } => assert!(error.starts_with("id:"), "{error}"),
        a => panic!("{a:?}"),
    }
    assert_eq!(r.metrics.claims("granted"), 1);
    assert_eq!(r.metrics.claims("repeated"), 1);
    assert_eq!(r.metrics.claims("refused"), 4);
    r.shutdown().await;

    let r = h.recorder(|_| {}).await;
    assert_eq!(decided(&h.nc, &first).await, LedgerAnswer::Granted { build: 1 }, "after a restart: the same");
    assert_eq!(decided(&h.nc, &other).await, LedgerAnswer::Refused { holder: 0 });
    assert_eq!(granted(&h.nc, &claim(1, "q-3", "app", "timer:09:00")).await, 2, "the next number, no gap");
    assert_eq!(builds_of(&h, "app").await, one_to(2));
    r.shutdown().await;
}

/// Both cells claim each of the triggers 1..=n at the same moment, `parallel` triggers at a time;
/// exactly one grant per trigger, the other refused naming the winner, and the numbers 1..=n.
async fn race(h: &Harness, n: u32, parallel: usize) {
    let limit = Arc::new(tokio::sync::Semaphore::new(parallel));
    let mut tasks = Vec::new();
    for t in 1..=n {
        let (nc, limit) = (h.nc.clone(), limit.clone());
        tasks.push(tokio::spawn(async move {
            let _p = limit.acquire().await.unwrap();
            let a = claim(0, &format!("cell0-{t}"), "team/race", &format!("timer:{t}"));
            let b = claim(1, &format!("cell1-{t}"), "team/race", &format!("timer:{t}"));
            let (x, y) = tokio::join!(decided(&nc, &a), decided(&nc, &b));
            (t, x, y)
        }));
    }
    let mut numbers = Vec::new();
    for task in tasks {
        let (t, x, y) = task.await.unwrap();
        match (&x, &y) {
            (LedgerAnswer::Granted { build }, LedgerAnswer::Refused { holder: 0 })
            | (LedgerAnswer::Refused { holder: 1 }, LedgerAnswer::Granted { build }) => numbers.push(*build as i64),
            _ => panic!("trigger {t}: exactly one grant, the other refused with the holder: {x:?} {y:?}"),
        }
    }
    numbers.sort();
    assert_eq!(numbers, one_to(n as i64), "the granted numbers are exactly 1..{n}");
    assert_eq!(builds_of(h, "team/race").await, one_to(n as i64));
    let distinct: BTreeSet<i64> = numbers.into_iter().collect();
    assert_eq!(distinct.len(), n as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_cells_racing_for_each_of_1000_triggers_get_exactly_one_grant_each() {
    let h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    race(&h, 1000, 24).await;
    assert_eq!(r.metrics.claims("granted"), 1000);
    assert_eq!(r.metrics.claims("refused"), 1000);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_ledgers_in_the_queue_group_keep_the_numbers_unique_and_gap_free() {
    let h = Harness::start().await;
    let a = h.recorder(|_| {}).await;
    let b = h.recorder(|_| {}).await;
    race(&h, 1000, 24).await;
    let answered = |r: &RunningRecorder| r.metrics.claims("granted") + r.metrics.claims("refused");
    assert!(answered(&a) > 0 && answered(&b) > 0, "both replicas decided: {} {}", answered(&a), answered(&b));
    assert_eq!(a.metrics.claims("granted") + b.metrics.claims("granted"), 1000);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_during_claims_answers_retry_promptly_then_grants_without_gap_or_double() {
    let mut h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    for i in 1..=10u32 {
        assert_eq!(granted(&h.nc, &claim(i % 2, &format!("q-{i}"), "app", &format!("t:{i}"))).await, i as u64);
    }
    // A claimer that goes on through the outage, as the plugin does, until told to stop.
    let (done_tx, done) = tokio::sync::watch::channel(false);
    let background = {
        let nc = h.nc.clone();
        tokio::spawn(async move {
            let (mut got, mut retries) = (Vec::new(), 0u32);
            for i in 100u32.. {
                if *done.borrow() {
                    break;
                }
                let req = claim(i % 2, &format!("q-{i}"), "app", &format!("t:{i}"));
                loop {
                    match ask(&nc, &req).await {
                        LedgerAnswer::Granted { build } => {
                            got.push(build);
                            break;
                        }
                        LedgerAnswer::Retry { after_ms, .. } => {
                            retries += 1;
                            tokio::time::sleep(Duration::from_millis(after_ms)).await;
                        }
                        a => panic!("{a:?}"),
                    }
                }
            }
            (got, retries)
        })
    };
    eventually("the background claimer is granted", || async { (r.metrics.claims("granted") >= 15).then_some(()) })
        .await;
    tokio::task::block_in_place(|| h.pg.stop());
    let retries_before = r.metrics.claims("retry");
    let mut during = Vec::new();
    for i in 11..=40u32 {
        let mut req = claim(i % 2, &format!("q-{i}"), "app", &format!("t:{i}"));
        req.budget_ms = 1000;
        during.push(req);
    }
    // A claim granted before is not answered from memory either: retry.
    let mut old = claim(1, "q-1", "app", "t:1");
    old.budget_ms = 1000;
    during.push(old);
    let answers = futures::future::join_all(during.iter().map(|req| {
        let nc = h.nc.clone();
        async move {
            let t = Instant::now();
            let a = ask(&nc, req).await;
            (a, t.elapsed())
        }
    }))
    .await;
    for (a, took) in &answers {
        match a {
            LedgerAnswer::Retry { after_ms, .. } => assert!((100..=30_000).contains(after_ms)),
            other => panic!("PostgreSQL is down: {other:?}"),
        }
        assert!(*took < Duration::from_millis(1000), "within the budget: {took:?}");
    }
    assert!(r.metrics.claims("retry") >= retries_before + answers.len() as u64);
    tokio::task::block_in_place(|| h.pg.start_again()).unwrap();
    let mut after = Vec::new();
    for req in &during[..30] {
        after.push(granted(&h.nc, req).await);
    }
    assert_eq!(granted(&h.nc, &during[30]).await, 1, "the old claim: its number");
    done_tx.send(true).unwrap();
    let (mut seen, retries) = background.await.unwrap();
    assert!(retries > 0, "the background claimer met the outage");
    seen.extend(after);
    seen.extend(1..=10);
    seen.sort();
    let n = seen.len() as u64;
    assert_eq!(seen, (1..=n).collect::<Vec<u64>>(), "no gap and no double across the outage");
    assert_eq!(builds_of(&h, "app").await, one_to(n as i64));
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_requests_are_rejected_naming_the_field_counted_and_the_ledger_goes_on() {
    let h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    let good = claim(0, "q-1", "app", "t:1");
    let json = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = serde_json::to_value(&good).unwrap();
        f(&mut v);
        serde_json::to_vec(&v).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (SUBJECT, b"not json".to_vec(), "request"),
        (SUBJECT, b"[]".to_vec(), "request"),
        (SUBJECT, vec![b' '; 9000], "request"),
        ("varroa.claims.prod.team-b.ci", serde_json::to_vec(&good).unwrap(), "subject"),
        (SUBJECT, json(&|v| v["id"] = "q 1".into()), "id"),
        (SUBJECT, json(&|v| v["job"] = "".into()), "job"),
        (SUBJECT, json(&|v| v["trigger"] = "t".repeat(claims::MAX_TRIGGER + 1).into()), "trigger"),
        (SUBJECT, json(&|v| v["budget_ms"] = 0.into()), "budget_ms"),
        (SUBJECT, json(&|v| v["cell"] = "1".into()), "cell"),
        (SUBJECT, json(&|v| drop(v.as_object_mut().unwrap().remove("job"))), "job"),
        ("varroa.claims.prod.Team_A.ci", json(&|v| v["namespace"] = "Team_A".into()), "controller"),
    ];
    for (subject, body, field) in &cases {
        match ask_raw(&h.nc, subject, body.clone()).await {
            LedgerAnswer::Rejected { error } => {
                assert!(error.starts_with(&format!("{field}:")), "{subject}: want {field}, got {error}")
            }
            a => panic!("{field}: {a:?}"),
        }
    }
    assert_eq!(r.metrics.claims("rejected"), cases.len() as u64);
    // No reply subject: counted and dropped.
    h.nc.publish(SUBJECT, serde_json::to_vec(&good).unwrap().into()).await.unwrap();
    h.nc.flush().await.unwrap();
    eventually("the unanswerable claim is counted", || async { (r.metrics.claims("dropped") == 1).then_some(()) })
        .await;
    // The ledger goes on, and nothing malformed took a number.
    assert_eq!(granted(&h.nc, &good).await, 1);
    let text = metrics_text(r.health_addr).await;
    assert_eq!(sample(&text, r#"varroa_recorder_claims_total{decision="rejected"}"#), cases.len() as f64);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_smaller_than_a_slow_decision_gets_retry_and_no_number_is_lost() {
    let h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    assert_eq!(granted(&h.nc, &claim(0, "q-1", "app", "t:1")).await, 1);
    // Another session holds the job's sequence row: the next decision waits on it.
    let mut locker = h.db().await.unwrap();
    let tx = locker.transaction().await.unwrap();
    tx.execute("SELECT * FROM claim_sequences WHERE job = 'app' FOR UPDATE", &[]).await.unwrap();
    let mut slow = claim(1, "q-2", "app", "t:2");
    slow.budget_ms = 800;
    let t = Instant::now();
    let a = ask(&h.nc, &slow).await;
    let took = t.elapsed();
    assert!(matches!(a, LedgerAnswer::Retry { .. }), "{a:?}");
    assert!(took < Duration::from_millis(800), "answered within the budget: {took:?}");
    tx.rollback().await.unwrap();
    slow.budget_ms = 4000;
    assert_eq!(granted(&h.nc, &slow).await, 2, "the timed-out decision took no number");
    assert_eq!(builds_of(&h, "app").await, one_to(2));
    r.shutdown().await;
}
