//! The binary: serving Jenkins with `--jobs-file` and the plugin's variables, and `load`.

mod support;

use std::process::Stdio;
use support::{FakeMite, kinds_per_build};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_varroa-jenkins-double");

fn token_file(dir: &tempfile::TempDir, token: &str) -> std::path::PathBuf {
    let f = dir.path().join("token");
    std::fs::write(&f, token).unwrap();
    f
}

#[tokio::test]
async fn serve_runs_the_jobs_file_and_sends_to_the_plugin_url() {
    let mite = FakeMite::start("t0k").await;
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.json");
    std::fs::write(
        &jobs,
        r#"{"jobs": [{"name": "app", "stages": [{"name": "Build", "duration_ms": 60000}], "tests": {"total": 3}}]}"#,
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--jobs-file"])
        .arg(&jobs)
        .args(["--time-scale", "0"])
        .env("VARROA_PLUGIN_URL", mite.url())
        .env("VARROA_PLUGIN_TOKEN_FILE", token_file(&dir, "t0k"))
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The URL is in the start-up log line; the rest of the output is drained.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next_line().await.unwrap().expect("the double logs its URL");
        if let Some(rest) = line.split("url=").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let c = support::client();
    let v: serde_json::Value = c
        .post(format!("{url}/__double/builds"))
        .json(&serde_json::json!({"job": "app", "count": 3, "wait": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["builds"], serde_json::json!([1, 2, 3]));
    mite.wait_stored(3 * 6).await;
    for kinds in kinds_per_build(&mite.stored()).values() {
        assert_eq!(kinds, &["queued", "started", "stage_started", "stage_finished", "test_summary", "finished"]);
    }
    let fin = mite.stored().into_iter().find(|e| e.id == "app#3:finished").unwrap();
    assert_eq!(serde_json::to_value(&fin).unwrap()["duration_ms"], 60000, "configured, not scaled");
    // The fake stores before it answers, and the double is another process: poll its counters
    // until it has the last answer.
    let deadline = tokio::time::Instant::now() + support::WAIT;
    loop {
        let p: serde_json::Value = c.get(format!("{url}/__double/plugin")).send().await.unwrap().json().await.unwrap();
        if (p["sent"].as_u64(), p["pending"].as_u64()) == (Some(18), Some(0)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the double's counters: {p}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let text = c.get(format!("{url}/job/app/3/consoleText")).send().await.unwrap().text().await.unwrap();
    assert!(text.ends_with("Finished: SUCCESS\n"), "{text}");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_bad_jobs_file_fails_the_start_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.yaml");
    std::fs::write(&jobs, "jobs:\n  - name: app\n    stages:\n      - {name: Build, durationSecs: 5}\n").unwrap();
    let out = Command::new(BIN).args(["--listen", "127.0.0.1:0", "--jobs-file"]).arg(&jobs).output().await.unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--jobs-file") && err.contains("durationSecs"), "{err}");
}

#[tokio::test]
async fn load_runs_builds_at_full_speed_and_reports() {
    let mite = FakeMite::start("t0k").await;
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(&dir, "t0k\n");
    let out = Command::new(BIN)
        .args(["load", "--plugin-url", &mite.url(), "--token-file"])
        .arg(&token)
        .args(["--jobs", "3", "--builds", "4", "--concurrency", "2", "--stages", "2"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // 12 builds of 2 x 2 + 4 events.
    assert!(stdout.contains("builds:    12 (3 jobs, 2 stages each, 2 at a time)"), "{stdout}");
    assert!(stdout.contains("events:    96 produced, 96 sent, 0 rejected, 0 dropped, 0 pending"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("events/s:")), "{stdout}");
    let stored = mite.stored();
    assert_eq!(stored.len(), 96);
    let per_build = kinds_per_build(&stored);
    assert_eq!(per_build.len(), 12);
    assert!(
        per_build.values().all(
            |k| k.first().map(String::as_str) == Some("queued") && k.last().map(String::as_str) == Some("finished")
        )
    );

    // As JSON, and a mite that rejects something makes it fail.
    mite.reject(|e| (e.body.kind() == "test_summary").then(|| "no".to_owned()));
    let out = Command::new(BIN)
        .args(["load", "--plugin-url", &mite.url(), "--jobs", "1", "--builds", "2", "--json"])
        .env("VARROA_PLUGIN_TOKEN_FILE", &token)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["builds"], 2);
    assert_eq!(report["events"], 2 * 10);
    assert_eq!(report["counters"]["rejected"], 2);
    assert_eq!(report["complete"], false);
    assert!(report["eventsPerSecond"].as_f64().unwrap() > 0.0);
}

/// `load --claims --console-lines N`: every build asks its claim before it runs (the numbers are
/// the ledger's, gap-free per job) and sends its console log, which the mite stores complete: the
/// generator for the claims and logs benchmarks.
#[tokio::test]
async fn load_with_claims_and_console_logs_claims_every_build_and_sends_every_log() {
    let mite = support::mite::TestMite::start("t0k", 0, support::mite::Ledger::shared()).await;
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(&dir, "t0k\n");
    let out = Command::new(BIN)
        .args(["load", "--plugin-url", &mite.url(), "--token-file"])
        .arg(&token)
        .args(["--jobs", "2", "--builds", "5", "--concurrency", "3", "--stages", "2"])
        .args(["--claims", "--console-lines", "40"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("claims:    10 granted, 0 refused"), "{stdout}");
    assert!(stdout.contains("logs:      10 of 10 complete"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("log MB/s:")), "{stdout}");
    assert!(stdout.ends_with("complete:  yes\n"), "{stdout}");

    // One claim per build, each with its own trigger; each job numbered 1..5 by the ledger.
    let claims = mite.claims();
    assert_eq!(claims.len(), 10, "{claims:?}");
    let triggers: std::collections::BTreeSet<_> =
        claims.iter().map(|c| (c.body["job"].to_string(), c.body["trigger"].to_string())).collect();
    assert_eq!(triggers.len(), 10, "a trigger of its own per build");
    let events = mite.events();
    for job in ["load-1", "load-2"] {
        let mut numbers: Vec<u64> =
            events.iter().filter(|e| e.job == job && e.body.kind() == "finished").filter_map(|e| e.build).collect();
        numbers.sort();
        assert_eq!(numbers, [1, 2, 3, 4, 5], "{job}");
        // Every log complete, with both stages' 40 lines of 80 bytes, in order.
        for n in 1..=5 {
            let (bytes, complete) = mite.log(job, n).unwrap_or_else(|| panic!("{job} #{n} has a log"));
            assert!(complete, "{job} #{n}");
            let text = String::from_utf8(bytes).unwrap();
            let first = text.find("stage 1 line 0 ").unwrap_or_else(|| panic!("{text}"));
            let last = text.find("stage 2 line 39 ").unwrap_or_else(|| panic!("{text}"));
            assert!(first < last, "{text}");
            assert_eq!(text.matches(" line ").count(), 80, "{text}");
            assert!(text.lines().filter(|l| l.contains(" line ")).all(|l| l.len() == 79), "80 bytes a line");
        }
    }
}
