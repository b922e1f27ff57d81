//! The pages of build jobs, folders and builds under `/job/...`, as Jenkins serves them for a
//! pipeline job (`org.jenkinsci.plugins.workflow.job.WorkflowJob` and `WorkflowRun`, the `@Exported`
//! getters of `hudson/model/Job.java`, `hudson/model/Run.java`, `hudson/model/AbstractItem.java`)
//! and a folder (`com.cloudbees.hudson.plugins.folder.Folder`).

use crate::Shared;
use crate::builds::{self, BuildRecord, PERMALINKS};
use crate::server::{Resp, api_json, html};
use http::{HeaderValue, Method, StatusCode};
use serde_json::{Value, json};

const RUN_CLASS: &str = "org.jenkinsci.plugins.workflow.job.WorkflowRun";
const JOB_CLASS: &str = "org.jenkinsci.plugins.workflow.job.WorkflowJob";
const FOLDER_CLASS: &str = "com.cloudbees.hudson.plugins.folder.Folder";

/// `Util.rawEncode`: a path segment with non-ASCII, unsafe (space, `"#%<>[\]^`{|}~`) and special
/// (`/;:?`) characters escaped.
pub(crate) fn raw_encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_graphic() && !b"\"#%<>[\\]^`{|}~/;:?".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b)))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `<base>/job/a/job/b/`.
pub(crate) fn job_url(base: &str, full_name: &str) -> String {
    let mut url = base.trim_end_matches('/').to_owned();
    for segment in full_name.split('/') {
        url.push_str("/job/");
        url.push_str(&raw_encode(segment));
    }
    url.push('/');
    url
}

fn display_path(full_name: &str) -> String {
    full_name.replace('/', " » ")
}

fn short_name(full_name: &str) -> &str {
    full_name.rsplit('/').next().unwrap_or(full_name)
}

fn not_found() -> Resp {
    html(StatusCode::NOT_FOUND, "Not Found [Jenkins]", "<h2>Not Found</h2>")
}

/// The top-level items of the build jobs, for `/api/json`'s `jobs[]` (folders for nested jobs).
pub(crate) fn top_level_items(shared: &Shared, base: &str) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    for job in shared.builds.jobs() {
        let top = job.name.split('/').next().unwrap_or(&job.name).to_owned();
        if out.iter().any(|(n, _)| *n == top) {
            continue;
        }
        let v = if top == job.name {
            item_summary(shared, base, &top)
        } else {
            json!({"_class": FOLDER_CLASS, "name": top, "url": job_url(base, &top)})
        };
        out.push((top, v));
    }
    out
}

fn item_summary(shared: &Shared, base: &str, full: &str) -> Value {
    if shared.builds.job(full).is_some() {
        let builds = shared.builds.builds_of(full);
        json!({"_class": JOB_CLASS, "name": short_name(full), "url": job_url(base, full), "color": builds::color(&builds)})
    } else {
        json!({"_class": FOLDER_CLASS, "name": short_name(full), "url": job_url(base, full)})
    }
}

/// The answer to `/job/...`, or None when the path is not one.
pub(crate) async fn page(shared: &Shared, method: &Method, path: &str, base: &str) -> Option<Resp> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if segments.first() != Some(&"job") {
        return None;
    }
    let mut names = Vec::new();
    let mut i = 0;
    while i + 1 < segments.len() && segments[i] == "job" {
        names.push(percent_decode(segments[i + 1]));
        i += 2;
    }
    if names.is_empty() {
        return Some(not_found());
    }
    let full = names.join("/");
    let rest = &segments[i..];
    let b = &shared.builds;
    if b.job(&full).is_none() {
        if b.is_folder(&full) && *method == Method::GET {
            return Some(match rest {
                [] => html(StatusCode::OK, &format!("{} [Jenkins]", display_path(&full)), "<h1>Folder</h1>"),
                ["api", "json"] => api_json(folder_json(shared, base, &full)),
                _ => not_found(),
            });
        }
        return Some(not_found());
    }
    if *method == Method::POST {
        return Some(match rest {
            ["build"] => build_now(shared, base, &full).await,
            _ => not_found(),
        });
    }
    if *method != Method::GET {
        return Some(not_found());
    }
    if rest == ["build"] {
        return Some(html(StatusCode::METHOD_NOT_ALLOWED, "This URL requires POST", "<p>This URL requires POST</p>"));
    }
    let builds = b.builds_of(&full);
    Some(match rest {
        [] => html(StatusCode::OK, &format!("{} [Jenkins]", display_path(&full)), "<h1>Pipeline</h1>"),
        ["api", "json"] => api_json(job_json(shared, base, &full, &builds)),
        [number, tail @ ..] => {
            let n = match number.parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) if PERMALINKS.contains(number) => builds::permalink(&builds, number),
                Err(_) => None,
            };
            let Some(run) = n.and_then(|n| builds.iter().find(|r| r.number == n)) else {
                return Some(not_found());
            };
            match tail {
                [] => html(
                    StatusCode::OK,
                    &format!("{} #{} [Jenkins]", display_path(&full), run.number),
                    "<h1>Build</h1>",
                ),
                ["api", "json"] => api_json(run_json(base, run, &builds)),
                ["consoleText"] => console_text(run),
                _ => not_found(),
            }
        }
    })
}

/// `POST /job/<name>/build`: 201 with the queue item's URL in `Location`
/// (`hudson/model/ParameterizedJobMixIn.java` `doBuild`).
async fn build_now(shared: &Shared, base: &str, full: &str) -> Resp {
    match shared.builds.trigger(full, 1).await {
        Ok((numbers, _)) => {
            let mut rsp = http::Response::new(http_body_util::Full::new(bytes::Bytes::new()));
            *rsp.status_mut() = StatusCode::CREATED;
            let id = numbers.first().and_then(|n| shared.builds.queue_id_of(full, *n)).unwrap_or(0);
            if let Ok(v) = HeaderValue::from_str(&format!("{}/queue/item/{id}/", base.trim_end_matches('/'))) {
                rsp.headers_mut().insert(http::header::LOCATION, v);
            }
            rsp
        }
        Err(e) => {
            tracing::warn!(job = full, error = %e, "build not queued");
            html(StatusCode::SERVICE_UNAVAILABLE, "Error [Jenkins]", &format!("<p>{e}</p>"))
        }
    }
}

fn console_text(run: &BuildRecord) -> Resp {
    let mut rsp = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(run.console.clone())));
    rsp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain;charset=UTF-8"));
    rsp
}

fn run_ref(base: &str, run: &BuildRecord) -> Value {
    json!({"_class": RUN_CLASS, "number": run.number, "url": format!("{}{}/", job_url(base, &run.job), run.number)})
}

fn run_json(base: &str, run: &BuildRecord, builds: &[BuildRecord]) -> Value {
    let mut actions = vec![json!({"_class": "hudson.model.CauseAction", "causes": [builds::cause_json(&run.trigger)]})];
    if let Some(t) = run.tests {
        actions.push(json!({
            "_class": "hudson.tasks.junit.TestResultAction",
            "failCount": t.failed,
            "skipCount": t.skipped,
            "totalCount": t.total,
            "urlName": "testReport",
        }));
    }
    let previous = builds.iter().find(|b| b.number < run.number).map(|b| run_ref(base, b));
    let next = builds.iter().rev().find(|b| b.number > run.number).map(|b| run_ref(base, b));
    let estimated = builds
        .iter()
        .find(|b| !b.building && b.number != run.number)
        .map(|b| b.duration_ms as i64)
        .unwrap_or(if run.building { -1 } else { run.duration_ms as i64 });
    json!({
        "_class": RUN_CLASS,
        "actions": actions,
        "artifacts": [],
        "building": run.building,
        "description": null,
        "displayName": format!("#{}", run.number),
        "duration": run.duration_ms,
        "estimatedDuration": estimated,
        "executor": if run.building { json!({"_class": "hudson.model.OneOffExecutor"}) } else { Value::Null },
        "fullDisplayName": format!("{} #{}", display_path(&run.job), run.number),
        "id": run.number.to_string(),
        "keepLog": false,
        "number": run.number,
        "queueId": run.queue_id,
        "result": run.result.map(|r| r.as_str()),
        "timestamp": run.started.as_millisecond(),
        "url": format!("{}{}/", job_url(base, &run.job), run.number),
        "changeSets": [],
        "culprits": [],
        "inProgress": run.building,
        "nextBuild": next,
        "previousBuild": previous,
    })
}

fn job_json(shared: &Shared, base: &str, full: &str, builds: &[BuildRecord]) -> Value {
    let link = |name: &str| {
        builds::permalink(builds, name)
            .and_then(|n| builds.iter().find(|b| b.number == n))
            .map(|b| run_ref(base, b))
            .unwrap_or(Value::Null)
    };
    let runs: Vec<Value> = builds.iter().take(100).map(|b| run_ref(base, b)).collect();
    json!({
        "_class": JOB_CLASS,
        "actions": [],
        "description": "",
        "displayName": short_name(full),
        "displayNameOrNull": null,
        "fullDisplayName": display_path(full),
        "fullName": full,
        "name": short_name(full),
        "url": job_url(base, full),
        "buildable": true,
        "builds": runs,
        "color": builds::color(builds),
        "firstBuild": builds.last().map(|b| run_ref(base, b)).unwrap_or(Value::Null),
        "healthReport": [],
        "inQueue": shared.builds.in_queue(full),
        "keepDependencies": false,
        "lastBuild": link("lastBuild"),
        "lastCompletedBuild": link("lastCompletedBuild"),
        "lastFailedBuild": link("lastFailedBuild"),
        "lastStableBuild": link("lastStableBuild"),
        "lastSuccessfulBuild": link("lastSuccessfulBuild"),
        "lastUnstableBuild": link("lastUnstableBuild"),
        "lastUnsuccessfulBuild": link("lastUnsuccessfulBuild"),
        "nextBuildNumber": shared.builds.next_number(full),
        "property": [],
        "queueItem": null,
        "concurrentBuild": true,
        "resumeBlocked": false,
    })
}

fn folder_json(shared: &Shared, base: &str, full: &str) -> Value {
    let prefix = format!("{full}/");
    let mut children: Vec<String> = Vec::new();
    for job in shared.builds.jobs() {
        if let Some(rest) = job.name.strip_prefix(&prefix) {
            let child = format!("{prefix}{}", rest.split('/').next().unwrap_or(rest));
            if !children.contains(&child) {
                children.push(child);
            }
        }
    }
    let jobs: Vec<Value> = children.iter().map(|c| item_summary(shared, base, c)).collect();
    let url = job_url(base, full);
    json!({
        "_class": FOLDER_CLASS,
        "actions": [],
        "description": null,
        "displayName": short_name(full),
        "displayNameOrNull": null,
        "fullDisplayName": display_path(full),
        "fullName": full,
        "name": short_name(full),
        "url": url,
        "healthReport": [],
        "jobs": jobs,
        "primaryView": {"_class": "hudson.model.AllView", "name": "All", "url": url},
        "views": [{"_class": "hudson.model.AllView", "name": "All", "url": url}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_encoded_as_jenkins_encodes_them() {
        assert_eq!(job_url("http://h:1", "team a/app"), "http://h:1/job/team%20a/job/app/");
        assert_eq!(raw_encode("ü+x"), "%C3%BC+x");
        assert_eq!(percent_decode("team%20a%C3%BC%2"), "team aü%2");
        assert_eq!(percent_decode(&raw_encode("a b/ü?")), "a b/ü?");
    }
}
