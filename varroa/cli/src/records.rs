//! Build records and activity as the commands read them from the store (the rows of `runs`,
//! `stages`, `test_summaries` and `activity`), their JSON shape for `-o json|yaml` (camelCase
//! keys, times in RFC 3339, durations in milliseconds, absent values left out, as Kubernetes
//! prints objects), and the words and durations the tables show.

use clikit::timefmt;
use jiff::Timestamp;
use serde::Serialize;
use std::time::Duration;

/// Where a build is, from what the store has received (the `runs.status` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// In the queue: neither started nor finished.
    Queued,
    /// Started, not finished.
    Running,
    /// Finished with a result.
    Finished,
}

impl RunStatus {
    /// The generated column's word; a word this CLI does not know is judged from the row.
    pub fn parse(word: &str, has_result: bool, has_started: bool) -> RunStatus {
        match word {
            "queued" => RunStatus::Queued,
            "running" => RunStatus::Running,
            "finished" => RunStatus::Finished,
            _ if has_result => RunStatus::Finished,
            _ if has_started => RunStatus::Running,
            _ => RunStatus::Queued,
        }
    }
}

/// One build (a row of `runs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The cluster the controller runs in.
    pub cluster: String,
    /// The controller's namespace.
    pub namespace: String,
    /// The controller.
    pub controller: String,
    /// The job's full name (`folder/job`).
    pub job: String,
    /// The build number.
    pub number: i64,
    /// Queued, running or finished.
    pub status: RunStatus,
    /// Jenkins' result (`SUCCESS`, `FAILURE`, ...) once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The cell that ran it.
    pub cell: i32,
    /// What triggered it (`timer`, `scm`, `user:alice`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// Jenkins' cause, short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The agent it ran on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// When it was queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<Timestamp>,
    /// When it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When it finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    /// How long it ran, as Jenkins reported it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
}

impl Run {
    /// The RESULT column: Jenkins' result, or `RUNNING`, or `QUEUED`.
    pub fn result_word(&self) -> &str {
        match self.status {
            RunStatus::Finished => self.result.as_deref().unwrap_or("FINISHED"),
            RunStatus::Running => "RUNNING",
            RunStatus::Queued => "QUEUED",
        }
    }

    /// How long it ran (finished), or has run so far (running); `None` while queued or when
    /// nothing says.
    pub fn duration(&self, now: Timestamp) -> Option<Duration> {
        match self.status {
            RunStatus::Finished => {
                self.duration_ms.map(millis).or_else(|| Some(between(self.started_at?, self.finished_at?)))
            }
            RunStatus::Running => Some(timefmt::since(now, self.started_at?)),
            RunStatus::Queued => None,
        }
    }

    /// `job #N`, as messages name a build.
    pub fn name(&self) -> String {
        format!("{} #{}", self.job, self.number)
    }
}

/// A pipeline stage of a build (a row of `stages`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    /// The flow node id.
    pub id: String,
    /// The stage's name.
    pub name: String,
    /// When it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// Its result, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// How long it ran, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
}

impl Stage {
    /// The RESULT column: the result; `RUNNING` while the build runs; `<unknown>` when the build
    /// ended without the stage's end reaching the store.
    pub fn result_word(&self, build: RunStatus) -> &str {
        match (&self.result, build) {
            (Some(r), _) => r,
            (None, RunStatus::Finished) => "<unknown>",
            (None, _) => "RUNNING",
        }
    }

    /// How long it ran, or has run so far while the build runs.
    pub fn duration(&self, build: RunStatus, now: Timestamp) -> Option<Duration> {
        match (self.duration_ms, build) {
            (Some(ms), _) => Some(millis(ms)),
            (None, RunStatus::Running) => Some(timefmt::since(now, self.started_at?)),
            (None, _) => None,
        }
    }
}

/// A build's test results (a row of `test_summaries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TestSummary {
    /// Tests run.
    pub total: i64,
    /// Tests failed.
    pub failed: i64,
    /// Tests skipped.
    pub skipped: i64,
    /// How long the tests took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
}

impl TestSummary {
    /// `120 total, 113 passed, 2 failed, 5 skipped (42s)`.
    pub fn line(&self) -> String {
        let passed = (self.total - self.failed - self.skipped).max(0);
        let mut s = format!("{} total, {passed} passed, {} failed, {} skipped", self.total, self.failed, self.skipped);
        if let Some(ms) = self.duration_ms {
            s.push_str(&format!(" (took {})", duration(millis(ms))));
        }
        s
    }
}

/// One activity entry (a row of `activity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    /// The event's id.
    pub id: String,
    /// When it happened.
    pub time: Timestamp,
    /// The cluster it happened in.
    pub cluster: String,
    /// The controller's namespace (empty: cluster-wide).
    pub namespace: String,
    /// The controller (empty: cluster-wide).
    pub controller: String,
    /// The cell it is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell: Option<i32>,
    /// Who reported it (`operator`, `mite`, `user`, ...).
    pub source: String,
    /// What happened (`MiteConnected`, `ApplyFailed`, ...).
    pub kind: String,
    /// What happened, in words.
    pub message: String,
}

/// One schedule of a job: a timed (`cron`) or polling (`scm`) trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// `cron` or `scm` (others are shown as they come).
    pub trigger: String,
    /// The spec as Jenkins has it (`H/15 * * * *`).
    pub spec: String,
    /// When it fires next, as Jenkins said when it reported the schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Timestamp>,
}

/// A job's current schedules (a row of `job_schedules`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSchedules {
    /// The cluster the controller runs in.
    pub cluster: String,
    /// The controller's namespace.
    pub namespace: String,
    /// The controller.
    pub controller: String,
    /// The job's full name (`folder/job`).
    pub job: String,
    /// Its schedules (none once the job has no trigger left, or is gone).
    pub schedules: Vec<Schedule>,
    /// When Jenkins reported them (the event's time).
    pub reported_at: Timestamp,
}

/// A build record, a stage list and a test summary, as `build -o json` prints them.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildDetail<'a> {
    /// The run.
    #[serde(flatten)]
    pub run: &'a Run,
    /// Its stages in start order.
    pub stages: &'a [Stage],
    /// Its test summary, if one arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests: Option<&'a TestSummary>,
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

fn between(from: Timestamp, to: Timestamp) -> Duration {
    timefmt::since(to, from)
}

/// A build's or stage's duration for people: `850ms`, `42s`, `1m05s`, `2h03m`, `1d04h`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// A moment as `-o wide` shows it: RFC 3339 in UTC, to the second (`2026-05-01T14:03:00Z`).
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn durations_read_like_people_write_them() {
        let cases = [
            (0, "0ms"),
            (850, "850ms"),
            (1_000, "1s"),
            (42_900, "42s"),
            (65_000, "1m05s"),
            (600_000, "10m00s"),
            (3_600_000, "1h00m"),
            (7_390_000, "2h03m"),
            (86_400_000 + 4 * 3_600_000, "1d04h"),
        ];
        for (ms, want) in cases {
            assert_eq!(duration(Duration::from_millis(ms)), want, "{ms}ms");
        }
        assert_eq!(rfc3339(ts("2026-05-01T14:03:00.123456Z")), "2026-05-01T14:03:00Z");
    }

    fn run(status: RunStatus) -> Run {
        Run {
            cluster: "c".into(),
            namespace: "team-a".into(),
            controller: "ci".into(),
            job: "team/app".into(),
            number: 7,
            status,
            result: None,
            cell: 0,
            trigger: None,
            cause: None,
            node: None,
            queued_at: None,
            started_at: None,
            finished_at: None,
            duration_ms: None,
        }
    }

    #[test]
    fn a_run_shows_its_result_or_where_it_is() {
        let now = ts("2026-05-01T12:10:00Z");
        let queued = run(RunStatus::Queued);
        assert_eq!((queued.result_word(), queued.duration(now)), ("QUEUED", None));
        let running = Run { started_at: Some(ts("2026-05-01T12:08:55Z")), ..run(RunStatus::Running) };
        assert_eq!((running.result_word(), running.duration(now)), ("RUNNING", Some(Duration::from_secs(65))));
        let done = Run {
            result: Some("FAILURE".into()),
            started_at: Some(ts("2026-05-01T12:00:00Z")),
            finished_at: Some(ts("2026-05-01T12:01:00Z")),
            ..run(RunStatus::Finished)
        };
        assert_eq!((done.result_word(), done.duration(now)), ("FAILURE", Some(Duration::from_secs(60))));
        let reported = Run { duration_ms: Some(61_500), ..done };
        assert_eq!(reported.duration(now), Some(Duration::from_millis(61_500)), "Jenkins' figure wins");
        assert_eq!(RunStatus::parse("paused", true, false), RunStatus::Finished);
        assert_eq!(RunStatus::parse("paused", false, true), RunStatus::Running);
    }

    #[test]
    fn json_has_camel_case_keys_and_leaves_out_what_is_absent() {
        let r = Run { started_at: Some(ts("2026-05-01T12:00:00Z")), ..run(RunStatus::Running) };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cluster": "c", "namespace": "team-a", "controller": "ci", "job": "team/app",
                "number": 7, "status": "running", "cell": 0, "startedAt": "2026-05-01T12:00:00Z"})
        );
        let t = TestSummary { total: 120, failed: 2, skipped: 5, duration_ms: Some(42_000) };
        assert_eq!(t.line(), "120 total, 113 passed, 2 failed, 5 skipped (took 42s)");
    }
}
