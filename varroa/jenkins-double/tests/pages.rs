//! Builds as Jenkins serves them: `/job/<name>/<number>/consoleText` and `/api/json`, folders,
//! permalinks, the job and root listings, `POST /job/<name>/build`, and `POST /__double/builds`.

mod support;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use varroa_jenkins_double::builds::{FixedClock, parse_jobs};
use varroa_jenkins_double::{JenkinsDouble, Options};

const TOKEN: &str = "11aa22bb33cc44dd55ee66ff77889900aa";

const JOBS: &str = r#"
jobs:
  - name: app
    console: ["checking out"]
    queue_ms: 5000
    stages:
      - {name: Build, duration_ms: 1300, console: ["compiling", "done"]}
      - {name: Test, duration_ms: 200}
    tests: {total: 12, failed: 1, skipped: 2}
  - name: team-a/web
    trigger: timer
    stages:
      - {name: Build, duration_ms: 100, result: FAILURE, console: ["boom"]}
      - {name: Deploy, duration_ms: 100}
  - name: slow
    stages:
      - {name: Wait, duration_ms: 3600000000}
  - name: quiet
    trigger: scm
    queue_ms: 3600000000
"#;

struct Env {
    double: JenkinsDouble,
    c: Client,
}

impl Env {
    async fn start() -> Env {
        let clock = Arc::new(FixedClock::new("2026-12-03T08:00:00Z".parse().unwrap()));
        let double = JenkinsDouble::start(Options {
            api_token: Some(TOKEN.into()),
            build_jobs: parse_jobs(JOBS).unwrap(),
            // Real time: "slow" stays running; the others' stages are scaled to a few ms.
            time_scale: 0.001,
            clock,
            ..Default::default()
        })
        .await
        .unwrap();
        Env { double, c: support::client() }
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.c.get(format!("{}{path}", self.double.url())).basic_auth("admin", Some(TOKEN)).send().await.unwrap()
    }

    async fn json(&self, path: &str) -> Value {
        let r = self.get(path).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_eq!(r.headers()["content-type"], "application/json;charset=utf-8");
        r.json().await.unwrap()
    }

    async fn run_nowait(&self, job: &str) -> Value {
        let r = self
            .c
            .post(format!("{}/__double/builds", self.double.url()))
            .json(&json!({"job": job}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.json::<Value>().await.unwrap()["builds"].clone()
    }

    async fn run(&self, job: &str, count: u32) -> Value {
        let r = self
            .c
            .post(format!("{}/__double/builds", self.double.url()))
            .json(&json!({"job": job, "count": count, "wait": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.json().await.unwrap()
    }
}

#[tokio::test]
async fn console_text_and_api_json_answer_as_jenkins_does() {
    let env = Env::start().await;
    let v = env.run("app", 2).await;
    assert_eq!(
        (&v["job"], &v["builds"], &v["results"], &v["refused"]),
        (&json!("app"), &json!([1, 2]), &json!(["UNSTABLE", "UNSTABLE"]), &json!(0))
    );
    // Each queue item's fate: without claims, Jenkins' own numbers and a trigger unique per cell.
    assert_eq!(v["items"][1]["state"], "finished");
    assert_eq!(v["items"][1]["build"], 2);
    assert_eq!(v["items"][1]["granted"], false);
    assert_eq!(v["items"][1]["trigger"], "user:admin:2");

    let r = env.get("/job/app/2/consoleText").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/plain;charset=UTF-8");
    assert!(r.headers().contains_key("x-jenkins"));
    let text = r.text().await.unwrap();
    assert!(text.starts_with("Started by user admin\n[Pipeline] Start of Pipeline\n"), "{text}");
    for line in
        ["checking out", "[Pipeline] { (Build)", "compiling", "done", "[Pipeline] { (Test)", "Recording test results"]
    {
        assert!(text.lines().any(|l| l == line), "{line:?} missing from\n{text}");
    }
    assert!(text.ends_with("Finished: UNSTABLE\n"), "{text}");

    let b = env.json("/job/app/2/api/json").await;
    assert_eq!(b["_class"], "org.jenkinsci.plugins.workflow.job.WorkflowRun");
    assert_eq!(b["number"], 2);
    assert_eq!(b["id"], "2");
    assert_eq!(b["result"], "UNSTABLE");
    assert_eq!(b["building"], false);
    assert_eq!(b["inProgress"], false);
    assert_eq!(b["duration"], 1500);
    // Started after the 5 s quiet period, on the double's clock.
    assert_eq!(b["timestamp"], 1_796_284_805_000_i64);
    assert_eq!(b["fullDisplayName"], "app #2");
    assert_eq!(b["url"], format!("{}/job/app/2/", env.double.url()));
    assert_eq!(b["previousBuild"]["number"], 1);
    assert_eq!(b["nextBuild"], Value::Null);
    assert_eq!(b["estimatedDuration"], 1500);
    assert_eq!(b["actions"][0]["causes"][0]["shortDescription"], "Started by user admin");
    assert_eq!(
        b["actions"][1],
        json!({"_class": "hudson.tasks.junit.TestResultAction", "failCount": 1, "skipCount": 2, "totalCount": 12, "urlName": "testReport"})
    );
    assert_eq!(env.json("/job/app/1/api/json/").await["nextBuild"]["number"], 2, "trailing slash");

    // A folder's job, a failure that skips the stage after it.
    assert_eq!(env.run("team-a/web", 1).await["results"], json!(["FAILURE"]));
    let text = env.get("/job/team-a/job/web/1/consoleText").await.text().await.unwrap();
    assert!(text.starts_with("Started by timer\n"), "{text}");
    assert!(text.contains("boom\nERROR: script returned exit code 1\n"), "{text}");
    assert!(text.contains("Stage \"Deploy\" skipped due to earlier failure(s)"), "{text}");
    assert!(text.ends_with("Finished: FAILURE\n"));
    let b = env.json("/job/team-a/job/web/1/api/json").await;
    assert_eq!((b["result"].as_str(), b["duration"].as_u64()), (Some("FAILURE"), Some(100)));
    assert_eq!(b["fullDisplayName"], "team-a » web #1");
    assert_eq!(b["url"], format!("{}/job/team-a/job/web/1/", env.double.url()));

    // Permalinks resolve to the build.
    assert_eq!(env.json("/job/app/lastBuild/api/json").await["number"], 2);
    assert_eq!(env.json("/job/app/lastSuccessfulBuild/api/json").await["number"], 2, "UNSTABLE counts");
    assert_eq!(env.get("/job/app/lastStableBuild/api/json").await.status(), StatusCode::NOT_FOUND);
    assert_eq!(env.json("/job/team-a/job/web/lastFailedBuild/api/json").await["number"], 1);

    // The job, the folder and the root list them.
    let j = env.json("/job/app/api/json").await;
    assert_eq!(j["_class"], "org.jenkinsci.plugins.workflow.job.WorkflowJob");
    assert_eq!(j["fullName"], "app");
    assert_eq!(j["color"], "yellow");
    assert_eq!(j["nextBuildNumber"], 3);
    assert_eq!(j["builds"].as_array().unwrap().iter().map(|b| b["number"].clone()).collect::<Vec<_>>(), [2, 1]);
    assert_eq!(j["lastBuild"]["number"], 2);
    assert_eq!(j["lastFailedBuild"], Value::Null);
    let f = env.json("/job/team-a/api/json").await;
    assert_eq!(f["_class"], "com.cloudbees.hudson.plugins.folder.Folder");
    assert_eq!(f["jobs"][0]["name"], "web");
    assert_eq!(f["jobs"][0]["color"], "red");
    let root = env.json("/api/json").await;
    let names: Vec<(&str, &str)> = root["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["name"].as_str().unwrap(), j["_class"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("app", "org.jenkinsci.plugins.workflow.job.WorkflowJob"),
            ("quiet", "org.jenkinsci.plugins.workflow.job.WorkflowJob"),
            ("slow", "org.jenkinsci.plugins.workflow.job.WorkflowJob"),
            ("team-a", "com.cloudbees.hudson.plugins.folder.Folder"),
        ]
    );

    // What is not there, and who may not see it.
    for path in [
        "/job/app/3/consoleText",
        "/job/app/0/api/json",
        "/job/nope/1/api/json",
        "/job/app/1/nope",
        "/job/team-a/1/api/json",
    ] {
        assert_eq!(env.get(path).await.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let r = env.c.get(format!("{}/job/app/1/consoleText", env.double.url())).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "anonymous, security on");
}

#[tokio::test]
async fn a_running_build_shows_as_building_and_post_build_queues_one() {
    let env = Env::start().await;
    let url = format!("{}/job/slow/build", env.double.url());
    assert_eq!(env.get("/job/slow/build").await.status(), StatusCode::METHOD_NOT_ALLOWED);
    let r = env.c.post(&url).basic_auth("admin", Some(TOKEN)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.headers()["location"], format!("{}/queue/item/1/", env.double.url()));
    let r = env.c.post(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "anonymous POST without a crumb");

    // Numbers are taken when queued; the build shows once it started (no quiet period here).
    let mut changes = env.double.builds().watch();
    let started = tokio::time::timeout(
        Duration::from_secs(20),
        changes.wait_for(|_| env.double.builds().build("slow", 1).is_some()),
    )
    .await
    // The receiver's borrow holds the channel's lock: drop it at once.
    .is_ok_and(|r| r.is_ok());
    assert!(started, "the build started");
    let b = env.json("/job/slow/1/api/json").await;
    assert_eq!(b["building"], true);
    assert_eq!(b["inProgress"], true);
    assert_eq!(b["result"], Value::Null);
    assert_eq!(b["duration"], 0);
    assert_eq!(b["estimatedDuration"], -1);
    assert_eq!(b["executor"]["_class"], "hudson.model.OneOffExecutor");
    assert_eq!(env.json("/job/slow/lastBuild/api/json").await["number"], 1);
    assert_eq!(env.get("/job/slow/lastCompletedBuild/api/json").await.status(), StatusCode::NOT_FOUND);
    assert_eq!(env.json("/job/slow/api/json").await["color"], "notbuilt_anime");
    let text = env.get("/job/slow/1/consoleText").await.text().await.unwrap();
    assert!(text.ends_with("[Pipeline] { (Wait)\n"), "the console so far: {text}");
    // It holds an executor.
    assert_eq!(env.json("/computer/api/json").await["busyExecutors"], 1);

    // A build in its quiet period is a queue item, with a number but no build page yet.
    assert_eq!(env.run_nowait("quiet").await, json!([1]));
    let q = env.json("/queue/api/json").await;
    let item = &q["items"][0];
    assert_eq!(item["_class"], "hudson.model.Queue$WaitingItem");
    assert_eq!(item["id"], 2);
    assert_eq!(item["task"]["name"], "quiet");
    assert_eq!(item["task"]["url"], format!("{}/job/quiet/", env.double.url()));
    assert_eq!(item["actions"][0]["causes"][0]["shortDescription"], "Started by an SCM change");
    assert!(item["why"].as_str().unwrap().starts_with("In the quiet period. Expires in 3600000.0 sec"), "{item}");
    assert_eq!(env.json("/job/quiet/api/json").await["inQueue"], true);
    assert_eq!(env.json("/job/quiet/api/json").await["nextBuildNumber"], 2);
    assert_eq!(env.get("/job/quiet/1/api/json").await.status(), StatusCode::NOT_FOUND);

    // Bad asks name what is wrong.
    let bad = |body: Value| {
        let c = env.c.clone();
        let url = format!("{}/__double/builds", env.double.url());
        async move {
            let r = c.post(url).json(&body).send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        }
    };
    let (s, t) = bad(json!({"job": "slow", "count": 0})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(t.contains("count"), "{t}");
    let (s, t) = bad(json!({"jobs": "slow"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(t.contains("jobs"), "{t}");
}

#[tokio::test]
async fn jobs_defined_at_run_time_run_like_configured_ones_and_a_bad_one_changes_nothing() {
    let env = Env::start().await;
    let put = |body: &'static str| {
        let c = env.c.clone();
        let url = format!("{}/__double/jobs", env.double.url());
        async move {
            let r = c.put(url).body(body).send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        }
    };
    let (s, t) = put("jobs:\n  - name: team-b/svc\n    stages: [{name: Build, duration_ms: 10}]\n").await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert!(t.contains("team-b/svc"), "{t}");
    let done = env.run("team-b/svc", 2).await;
    assert_eq!(done["builds"], json!([1, 2]));
    assert_eq!(env.json("/job/team-b/job/svc/2/api/json").await["result"], "SUCCESS");
    // One bad job: nothing of the request is defined, and the error names the job and field.
    let (s, t) = put("jobs:\n  - name: fine\n  - name: broken\n    stages: [{name: \"\", duration_ms: 1}]\n").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(t.contains("broken") && t.contains("stages[0].name"), "{t}");
    assert_eq!(env.get("/job/fine/api/json").await.status(), StatusCode::NOT_FOUND);
    // Redefining replaces: the next build of the job runs the new stages.
    let (s, _) = put("[{name: team-b/svc, stages: [{name: Deploy, duration_ms: 1, result: FAILURE}]}]").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(env.run("team-b/svc", 1).await["builds"], json!([3]));
    assert_eq!(env.json("/job/team-b/job/svc/3/api/json").await["result"], "FAILURE");
}

#[tokio::test]
async fn the_trigger_inventory_lists_every_job_with_a_schedule_authenticated_and_404_without_the_plugin() {
    let env = Env::start().await;
    let url = format!("{}/varroa/inventory", env.double.url());
    let anonymous = env.c.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::FORBIDDEN, "security is on: anonymous is refused");
    let v: Value = env.get("/varroa/inventory").await.json().await.unwrap();
    assert_eq!(v, json!({"v": 1, "jobs": []}), "no job has a schedule yet");

    let jobs = parse_jobs(
        "- name: team/app\n  schedules:\n  - {trigger: cron, spec: \"H/15 * * * *\", next: \"2026-12-03T08:15:00Z\"}\n  - {trigger: scm, spec: \"H * * * *\"}\n- name: plain\n",
    )
    .unwrap();
    env.double.builds().define(jobs).unwrap();
    let r = env.get("/varroa/inventory").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v,
        json!({"v": 1, "jobs": [{"job": "team/app", "schedules": [
            {"trigger": "cron", "spec": "H/15 * * * *", "next": "2026-12-03T08:15:00Z"},
            {"trigger": "scm", "spec": "H * * * *"},
        ]}]}),
        "only jobs with a schedule; next only when given"
    );

    let bad = parse_jobs("- name: x\n  schedules: [{trigger: cron, spec: \"\"}]\n").unwrap_err();
    assert!(bad.to_string().contains("schedules[0].spec"), "{bad}");

    env.double.set_no_inventory(true);
    assert_eq!(env.get("/varroa/inventory").await.status(), StatusCode::NOT_FOUND);
}
