//! The plugin's console logs against a test mite over real HTTP: chunks in order with their
//! offsets, whose concatenation is `consoleText`; 503, 409, 400 and 401; chunk sizes; the final
//! chunk; the memory bound.

mod support;

use std::time::{Duration, Instant};
use support::mite::{Ledger, Script, SeenChunk, TestMite};
use varroa_jenkins_double::builds::JobConfig;
use varroa_jenkins_double::plugin::PluginConfig;
use varroa_jenkins_double::{JenkinsDouble, LogsOptions, Options};

const TOKEN: &str = "l0g5l0g5l0g5l0g5";

struct Env {
    dir: tempfile::TempDir,
    mite: TestMite,
    double: JenkinsDouble,
}

impl Env {
    async fn start(jobs: Vec<JobConfig>, time_scale: f64, logs: LogsOptions, max_console: usize) -> Env {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), TOKEN).unwrap();
        let mite = TestMite::start(TOKEN, 0, Ledger::shared()).await;
        let double = JenkinsDouble::start(Options {
            build_jobs: jobs,
            plugin: Some(PluginConfig {
                backoff_initial: Duration::from_millis(20),
                backoff_max: Duration::from_millis(100),
                ..PluginConfig::new(mite.url(), dir.path().join("token"))
            }),
            logs: Some(LogsOptions {
                backoff_initial: Duration::from_millis(20),
                backoff_max: Duration::from_millis(100),
                ..logs
            }),
            time_scale,
            max_console_bytes: max_console,
            ..Default::default()
        })
        .await
        .unwrap();
        Env { dir, mite, double }
    }

    async fn console(&self, job_path: &str, n: u64) -> String {
        let url = format!("{}/job/{job_path}/{n}/consoleText", self.double.url());
        support::client().get(url).send().await.unwrap().text().await.unwrap()
    }
}

fn job(name: &str, stages: usize, lines: usize) -> JobConfig {
    let mut j = JobConfig::simple(name, stages, 5);
    j.console = (0..lines).map(|n| format!("checking out {n}")).collect();
    for s in &mut j.stages {
        s.console.extend((0..lines).map(|n| format!("{} line {n}", s.name)));
    }
    j
}

/// The requests of one build, in order.
fn of_build(chunks: &[SeenChunk], job: &str, build: u64) -> Vec<SeenChunk> {
    chunks.iter().filter(|c| c.job == job && c.build == build).cloned().collect()
}

#[tokio::test]
async fn chunks_go_in_order_per_build_and_make_up_the_console_text_through_503_409_and_401() {
    let env = Env::start(vec![job("team/my app", 3, 20)], 0.0, LogsOptions::default(), 1 << 20).await;
    // The mite restarted with a new token: the first requests are 401, then the file is read again.
    env.mite.with(|st| st.token = "rotated".into());
    std::fs::write(env.dir.path().join("token"), "rotated").unwrap();
    env.mite.script_logs([Script::Status(503, Some(0)), Script::HalfThenConflict, Script::Status(503, None)]);
    let numbers = env.double.run_builds("team/my app", 3).await.unwrap();
    assert_eq!(numbers, [1, 2, 3]);
    for n in 1..=3 {
        env.mite.wait_complete("team/my app", n).await;
    }
    let chunks = env.mite.chunks();
    assert!(chunks.iter().all(|c| c.raw_job == "team/my%20app"), "each segment percent-encoded");
    assert_eq!(env.mite.with(|st| st.max_in_flight_per_build), 1, "one chunk at a time per build");
    let (mut saw_503, mut saw_409, mut saw_401) = (false, false, false);
    for n in 1..=3 {
        let mine = of_build(&chunks, "team/my app", n);
        let (stored, complete) = env.mite.log("team/my app", n).unwrap();
        assert!(complete);
        let console = env.console("team/job/my%20app", n).await;
        assert!(console.ends_with("Finished: SUCCESS\n"), "{console}");
        assert_eq!(String::from_utf8(stored).unwrap(), console, "the stored log is consoleText");
        // After a 503 the same chunk again; after a 409 on from its next; otherwise on from the end.
        let mut expect = 0u64;
        for (i, c) in mine.iter().enumerate() {
            assert_eq!(
                c.offset,
                expect,
                "build {n} request {i}: {:?}",
                mine.iter().map(|c| (c.offset, c.body.len(), c.status)).collect::<Vec<_>>()
            );
            match c.status {
                200 => expect = c.offset + c.body.len() as u64,
                409 => {
                    saw_409 = true;
                    expect = c.offset + (c.body.len() / 2) as u64;
                }
                503 | 401 => {
                    saw_503 |= c.status == 503;
                    saw_401 |= c.status == 401;
                    assert_eq!(mine[i + 1].body, c.body, "the same chunk again");
                }
                other => panic!("{other}"),
            }
        }
        let last = mine.last().unwrap();
        assert!(last.last && last.status == 200, "the final chunk ends it");
        assert_eq!(mine.iter().filter(|c| c.last).map(|c| c.status).collect::<Vec<_>>().last(), Some(&200));
        assert!(mine[..mine.len() - 1].iter().all(|c| !c.last || c.status != 200));
    }
    assert!(saw_503 && saw_409 && saw_401);
    let counters = env.double.log_counters().unwrap();
    assert_eq!(
        (counters.opened, counters.complete, counters.conflicts, counters.held_bytes),
        (3, 3, 1, 0),
        "{counters:?}"
    );
    assert!(counters.retries >= 2);
}

#[tokio::test]
async fn a_large_console_goes_in_chunks_of_at_most_1_mib() {
    let mut j = JobConfig::simple("big", 1, 0);
    j.console = (0..2600).map(|n| format!("{n:05} {}", "x".repeat(1000))).collect();
    let env = Env::start(vec![j], 0.0, LogsOptions::default(), 4 << 20).await;
    let n = env.double.run_builds("big", 1).await.unwrap()[0];
    env.mite.wait_complete("big", n).await;
    let chunks = of_build(&env.mite.chunks(), "big", n);
    assert!(chunks.len() >= 3, "{}", chunks.len());
    assert!(chunks.iter().all(|c| c.body.len() <= 1 << 20));
    assert_eq!(chunks.iter().filter(|c| c.body.len() == 1 << 20).count(), 2);
    let (stored, _) = env.mite.log("big", n).unwrap();
    assert_eq!(String::from_utf8(stored).unwrap(), env.console("big", n).await);
}

#[tokio::test]
async fn a_running_build_sends_a_chunk_per_second_of_output_or_at_256_kib() {
    let mut small = JobConfig::simple("small", 1, 3_600_000);
    small.console = vec!["hello".into()];
    let mut large = JobConfig::simple("large", 1, 3_600_000);
    large.console = (0..300).map(|n| format!("{n:04} {}", "y".repeat(1019))).collect();
    // Real time: the stages run an hour, the chunk interval is a second.
    let env = Env::start(vec![small, large], 1.0, LogsOptions::default(), 1 << 20).await;
    let began = Instant::now();
    env.double.run_builds("large", 1).await.unwrap();
    env.mite.wait_for("a 256 KiB chunk of the running build", |st| st.chunks.iter().any(|c| c.job == "large")).await;
    let first = of_build(&env.mite.chunks(), "large", 1).remove(0);
    assert!(first.body.len() >= 256 << 10 && !first.last, "{}", first.body.len());
    assert!(began.elapsed() < Duration::from_millis(900), "not waiting for the interval: {:?}", began.elapsed());

    let began = Instant::now();
    env.double.run_builds("small", 1).await.unwrap();
    env.mite.wait_for("a chunk of the small build", |st| st.chunks.iter().any(|c| c.job == "small")).await;
    assert!(began.elapsed() >= Duration::from_millis(900), "a second of output first: {:?}", began.elapsed());
    let first = of_build(&env.mite.chunks(), "small", 1).remove(0);
    assert!(!first.last && String::from_utf8_lossy(&first.body).contains("hello"));
    assert!(env.double.builds().build("small", 1).unwrap().building);
}

#[tokio::test]
async fn a_400_marks_the_log_final_and_output_beyond_the_bound_cuts_the_log() {
    let env = Env::start(vec![job("app", 2, 5)], 0.0, LogsOptions::default(), 1 << 20).await;
    env.mite.script_logs([Script::Status(400, None)]);
    let n = env.double.run_builds("app", 1).await.unwrap()[0];
    env.mite.wait_complete("app", n).await;
    env.double.builds().wait_finished("app", n).await;
    let chunks = of_build(&env.mite.chunks(), "app", n);
    assert_eq!(chunks[0].status, 400);
    assert_eq!(
        (chunks[1].offset, chunks[1].body.len(), chunks[1].last, chunks[1].status),
        (0, 0, true, 200),
        "the log marked final where it stopped"
    );
    assert_eq!(chunks.len(), 2, "nothing more of it is sent");
    assert_eq!(env.double.log_counters().unwrap().rejected, 1);

    // A build whose unsent output passes the bound: the log is cut there and marked final.
    let mut wordy = job("wordy", 1, 0);
    wordy.stages[0].console = (0..100).map(|n| format!("{n:03} {}", "z".repeat(60))).collect();
    let env =
        Env::start(vec![wordy], 0.0, LogsOptions { max_unsent_per_build: 2048, ..LogsOptions::default() }, 1 << 20)
            .await;
    let n = env.double.run_builds("wordy", 1).await.unwrap()[0];
    env.mite.wait_complete("wordy", n).await;
    let (stored, _) = env.mite.log("wordy", n).unwrap();
    let console = env.console("wordy", n).await;
    assert!(!stored.is_empty() && stored.len() < console.len(), "{} of {}", stored.len(), console.len());
    assert!(console.as_bytes().starts_with(&stored), "a prefix of consoleText");
    let c = env.double.log_counters().unwrap();
    assert_eq!((c.cut, c.complete, c.held_bytes), (1, 1, 0), "{c:?}");
}
