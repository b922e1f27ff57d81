//! Pull requests (issue 5): `scripts/ci/vesper-pr.sh`, with `action.yml` and the GitLab CI
//! template around it, driven against devcluster (CRD installed, operator running in-process,
//! the built `vesperctl`) and a fake of the Git host's REST API: GitHub's issue comments or
//! GitLab's merge request notes, kept in memory, behind the token, paginated as the real APIs
//! paginate, with every request recorded. The fake also serves release assets (vesperctl,
//! vesper-pr.sh, SHA256SUMS) the way GitHub does, through a redirect.
//!
//! The action and the template are run the way their runners run them: the action's steps with
//! their `${{ }}` expressions resolved (an expression the test does not know fails the test), the
//! template's before_script and script as one bash session with the job's variables.

mod common;

use bytes::Bytes;
use common::{Harness, Run, Setup, run_command};
use devcluster::faults::{Fault, FaultRule};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TOKEN: &str = "ghs_not-a-real-token";
const REPO: &str = "acme/shop";
const PR: u64 = 42;
const PROJECT: u64 = 7;
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const IMAGE_A: &str = "registry.example.com/shop:pr-42-aaaa";
const IMAGE_B: &str = "registry.example.com/shop:pr-42-bbbb";
const RELEASE: &str = "/eventide/vesper/releases";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

fn script() -> PathBuf {
    repo_root().join("scripts/ci/vesper-pr.sh")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn yaml(rel: &str) -> Value {
    serde_saphyr::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not valid YAML: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The fake Git host.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    GitHub,
    GitLab,
}

#[derive(Debug, Clone)]
struct Comment {
    id: u64,
    body: String,
    system: bool,
}

#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    query: BTreeMap<String, String>,
    authorized: bool,
    accept: Option<String>,
    api_version: Option<String>,
}

#[derive(Default)]
struct State {
    comments: Vec<Comment>,
    next_id: u64,
    requests: Vec<Recorded>,
    /// Answer every request of this method with this status and body.
    refuse: Option<(String, u16, Value)>,
    /// Release assets by "TAG/FILE" ("latest/FILE" for the latest release).
    assets: HashMap<String, Vec<u8>>,
}

struct Fake {
    host: Host,
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    async fn start(host: Host) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake");
        let addr = listener.local_addr().expect("address");
        let state = Arc::new(Mutex::new(State { next_id: 1, ..Default::default() }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(host, addr, &state, req).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Fake { host, addr, state, task }
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// GITHUB_API_URL or CI_API_V4_URL.
    fn api_url(&self) -> String {
        match self.host {
            Host::GitHub => self.base(),
            Host::GitLab => format!("{}/api/v4", self.base()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("fake state")
    }

    /// Comments someone else wrote, before ours.
    fn seed(&self, n: usize) {
        let mut st = self.state();
        for i in 0..n {
            let id = st.next_id;
            st.next_id += 1;
            st.comments.push(Comment { id, body: format!("LGTM, nit {i}"), system: i % 2 == 0 });
        }
    }

    fn comments(&self) -> Vec<Comment> {
        self.state().comments.clone()
    }

    /// Ours: the comments with a Vesper marker.
    fn ours(&self) -> Vec<Comment> {
        self.comments().into_iter().filter(|c| c.body.contains("<!-- vesper-preview:")).collect()
    }

    fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    fn count(&self, method: &str) -> usize {
        self.requests().iter().filter(|r| r.method == method).count()
    }

    fn clear_requests(&self) {
        self.state().requests.clear();
    }

    fn refuse(&self, method: &str, status: u16, body: Value) {
        self.state().refuse = Some((method.to_string(), status, body));
    }

    fn asset(&self, key: &str, bytes: Vec<u8>) {
        self.state().assets.insert(key.to_string(), bytes);
    }
}

fn respond(status: u16, body: Vec<u8>, headers: &[(&str, String)]) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).expect("status");
    for (k, v) in headers {
        r.headers_mut().insert(
            hyper::header::HeaderName::from_bytes(k.as_bytes()).expect("header name"),
            hyper::header::HeaderValue::from_str(v).expect("header value"),
        );
    }
    r
}

fn json_response(status: u16, v: &Value, headers: &[(&str, String)]) -> Response<Full<Bytes>> {
    let mut headers = headers.to_vec();
    headers.push(("content-type", "application/json; charset=utf-8".into()));
    respond(status, serde_json::to_vec(v).expect("json"), &headers)
}

fn render(host: Host, c: &Comment) -> Value {
    match host {
        Host::GitHub => json!({
            "id": c.id, "body": c.body, "user": {"login": "github-actions[bot]", "type": "Bot"},
            "html_url": format!("https://github.com/{REPO}/pull/{PR}#issuecomment-{}", c.id),
        }),
        Host::GitLab => json!({
            "id": c.id, "body": c.body, "system": c.system, "noteable_type": "MergeRequest",
            "author": {"username": format!("project_{PROJECT}_bot")},
        }),
    }
}

async fn handle(host: Host, addr: SocketAddr, state: &Mutex<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query: BTreeMap<String, String> =
        form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()).into_owned().collect();
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let authorized = match host {
        Host::GitHub => header("authorization") == Some(format!("Bearer {TOKEN}")),
        Host::GitLab => header("private-token").as_deref() == Some(TOKEN),
    };
    let accept = header("accept");
    let api_version = header("x-github-api-version");
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let mut st = state.lock().expect("fake state");

    // Release downloads: GitHub redirects them to its storage; no token needed.
    if let Some(rest) = path.strip_prefix(&format!("{RELEASE}/")) {
        // .../releases/download/TAG/FILE and .../releases/latest/download/FILE
        let key = match (rest.strip_prefix("download/"), rest.strip_prefix("latest/download/")) {
            (Some(tag_and_file), _) => tag_and_file.to_string(),
            (_, Some(file)) => format!("latest/{file}"),
            _ => return respond(404, b"Not Found".to_vec(), &[]),
        };
        return respond(302, vec![], &[("location", format!("/storage/{key}"))]);
    }
    if let Some(key) = path.strip_prefix("/storage/") {
        return match st.assets.get(key) {
            Some(bytes) => respond(200, bytes.clone(), &[("content-type", "application/octet-stream".into())]),
            None => respond(404, b"Not Found".to_vec(), &[]),
        };
    }

    st.requests.push(Recorded {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        authorized,
        accept,
        api_version,
    });
    if !authorized {
        let v = match host {
            Host::GitHub => {
                json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"})
            }
            Host::GitLab => json!({"message": "401 Unauthorized"}),
        };
        return json_response(401, &v, &[]);
    }
    if let Some((m, status, v)) = &st.refuse
        && *m == method
    {
        return json_response(*status, v, &[]);
    }
    let (list_path, item_prefix) = match host {
        Host::GitHub => (format!("/repos/{REPO}/issues/{PR}/comments"), format!("/repos/{REPO}/issues/comments/")),
        Host::GitLab => {
            let notes = format!("/api/v4/projects/{PROJECT}/merge_requests/{PR}/notes");
            (notes.clone(), format!("{notes}/"))
        }
    };
    let not_found = match host {
        Host::GitHub => {
            json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
        }
        Host::GitLab => json!({"message": "404 Not found"}),
    };
    let text_body =
        || -> Option<String> { serde_json::from_slice::<Value>(&body).ok()?.get("body")?.as_str().map(str::to_string) };

    if path == list_path && method == "GET" {
        // GitHub: 30 a page by default, GitLab 20; both at most 100. GitLab lists newest first
        // unless sort=asc.
        let default = if host == Host::GitHub { 30 } else { 20 };
        let per_page = query.get("per_page").and_then(|v| v.parse::<usize>().ok()).unwrap_or(default).clamp(1, 100);
        let page = query.get("page").and_then(|v| v.parse::<usize>().ok()).unwrap_or(1).max(1);
        let mut items = st.comments.clone();
        if host == Host::GitLab && query.get("sort").map(String::as_str) != Some("asc") {
            items.reverse();
        }
        let total = items.len();
        let last = total.div_ceil(per_page).max(1);
        let slice: Vec<Value> =
            items.iter().skip((page - 1) * per_page).take(per_page).map(|c| render(host, c)).collect();
        let link = |p: usize| {
            let mut q = query.clone();
            q.insert("page".into(), p.to_string());
            q.insert("per_page".into(), per_page.to_string());
            let q: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(q.iter()).finish();
            format!("<http://{addr}{path}?{q}>")
        };
        let mut links = vec![];
        if page < last {
            links.push(format!("{}; rel=\"next\"", link(page + 1)));
            links.push(format!("{}; rel=\"last\"", link(last)));
        }
        if page > 1 {
            links.push(format!("{}; rel=\"first\"", link(1)));
            links.push(format!("{}; rel=\"prev\"", link(page - 1)));
        }
        let mut headers = vec![];
        if !links.is_empty() {
            headers.push(("link", links.join(", ")));
        }
        if host == Host::GitLab {
            headers.push(("x-page", page.to_string()));
            headers.push(("x-per-page", per_page.to_string()));
            headers.push(("x-next-page", if page < last { (page + 1).to_string() } else { String::new() }));
            headers.push(("x-prev-page", if page > 1 { (page - 1).to_string() } else { String::new() }));
            headers.push(("x-total", total.to_string()));
            headers.push(("x-total-pages", last.to_string()));
        }
        return json_response(200, &Value::Array(slice), &headers);
    }
    if path == list_path && method == "POST" {
        let Some(text) = text_body() else {
            return json_response(422, &json!({"message": "Validation Failed: body is missing"}), &[]);
        };
        let id = st.next_id;
        st.next_id += 1;
        let c = Comment { id, body: text, system: false };
        st.comments.push(c.clone());
        return json_response(201, &render(host, &c), &[]);
    }
    let update = match host {
        Host::GitHub => "PATCH",
        Host::GitLab => "PUT",
    };
    if let Some(id) = path.strip_prefix(&item_prefix).and_then(|id| id.parse::<u64>().ok())
        && method == update
    {
        let Some(text) = text_body() else {
            return json_response(422, &json!({"message": "Validation Failed: body is missing"}), &[]);
        };
        return match st.comments.iter_mut().find(|c| c.id == id) {
            Some(c) => {
                c.body = text;
                let c = c.clone();
                json_response(200, &render(host, &c), &[])
            }
            None => json_response(404, &not_found, &[]),
        };
    }
    json_response(404, &not_found, &[])
}

// ---------------------------------------------------------------------------------------------
// Running the script, the action and the GitLab job.

/// A CI job's workspace: a temporary directory with `vesperctl` on PATH, the kubeconfig to use,
/// and the files the runner gives a job (outputs, event).
struct Job {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Job {
    fn new(kubeconfig: PathBuf) -> Job {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("bin")).expect("bin dir");
        std::os::unix::fs::symlink(common::bin(), dir.path().join("bin/vesperctl")).expect("symlink vesperctl");
        std::fs::create_dir(dir.path().join("project")).expect("project dir");
        Job { dir, kubeconfig }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// PATH with vesperctl, and the system's tools (bash, curl, jq, coreutils) only.
    fn search_path(&self) -> String {
        format!("{}:/usr/bin:/bin", self.path("bin").display())
    }

    /// The outputs written to a GITHUB_OUTPUT-style file (the last value of a key wins).
    fn outputs(&self, file: &str) -> HashMap<String, String> {
        parse_outputs(&std::fs::read_to_string(self.path(file)).unwrap_or_default())
    }

    /// `vesper-pr.sh MODE` under GitHub Actions, with nothing of the test's environment.
    fn github(&self, fake: &Fake, mode: &str, env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(script()).arg(mode).env_clear().current_dir(self.path("project"));
        cmd.env("PATH", self.search_path())
            .env("HOME", self.dir.path())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_API_URL", fake.api_url())
            .env("GITHUB_REPOSITORY", REPO)
            .env("GITHUB_TOKEN", TOKEN)
            .env("GITHUB_OUTPUT", self.path("output"))
            .env("GITHUB_SERVER_URL", "https://github.com")
            .env("GITHUB_RUN_ID", "1001")
            .env("VESPER_PR_NUMBER", PR.to_string())
            .env("VESPER_COMMIT", SHA)
            .env("VESPER_TIMEOUT", "60s");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// The env a GitLab merge request pipeline gives a job.
    fn gitlab_env(&self, fake: &Fake) -> Vec<(String, String)> {
        [
            ("PATH", self.search_path()),
            ("HOME", self.dir.path().display().to_string()),
            ("KUBECONFIG", self.kubeconfig.display().to_string()),
            ("GITLAB_CI", "true".into()),
            ("CI", "true".into()),
            ("CI_PIPELINE_SOURCE", "merge_request_event".into()),
            ("CI_API_V4_URL", fake.api_url()),
            ("CI_PROJECT_ID", PROJECT.to_string()),
            ("CI_PROJECT_DIR", self.path("project").display().to_string()),
            ("CI_MERGE_REQUEST_IID", PR.to_string()),
            ("CI_COMMIT_SHA", SHA.into()),
            ("CI_COMMIT_REF_SLUG", "feature-x".into()),
            ("CI_JOB_URL", "https://gitlab.example.com/acme/shop/-/jobs/99".into()),
            ("VESPER_GITLAB_TOKEN", TOKEN.into()),
            ("VESPER_RELEASE_URL", format!("{}{RELEASE}/download/v0.1.0", fake.base())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

fn parse_outputs(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((k, delim)) = line.split_once("<<") {
            let value: Vec<&str> = lines.by_ref().take_while(|l| *l != delim).collect();
            out.insert(k.to_string(), value.join("\n"));
        } else if let Some((k, v)) = line.split_once('=') {
            out.insert(k.to_string(), v.to_string());
        }
    }
    out
}

/// The pull request event and what the runner knows about the action.
struct Event<'a> {
    action: &'a str,
    inputs: &'a [(&'a str, &'a str)],
}

/// What the runner would put in place of `${{ expr }}` in action.yml. Only the expressions the
/// action uses are known: a new one fails the test until it is added here.
fn evaluate(
    expr: &str,
    event: &Event,
    inputs: &HashMap<String, String>,
    steps: &HashMap<String, HashMap<String, String>>,
) -> String {
    let expr = expr.trim();
    // `a == 'x' && 'y' || 'z'`: the ternary idiom of GitHub expressions.
    if let Some((cond, rest)) = expr.split_once(" && ")
        && let Some((then, otherwise)) = rest.split_once(" || ")
        && let Some((lhs, rhs)) = cond.split_once(" == ")
    {
        let lit = |s: &str| s.trim().trim_matches('\'').to_string();
        let lhs = evaluate(lhs, event, inputs, steps);
        return if lhs == lit(rhs) { lit(then) } else { lit(otherwise) };
    }
    if let Some(name) = expr.strip_prefix("inputs.") {
        return inputs.get(name).cloned().unwrap_or_else(|| panic!("action.yml uses undeclared input {name}"));
    }
    if let Some(rest) = expr.strip_prefix("steps.") {
        let (id, key) = rest.split_once(".outputs.").unwrap_or_else(|| panic!("unknown expression {expr}"));
        return steps.get(id).and_then(|o| o.get(key)).cloned().unwrap_or_default();
    }
    match expr {
        "github.event.action" => event.action.to_string(),
        "github.event.pull_request.number" => PR.to_string(),
        "github.event.pull_request.head.sha" => SHA.to_string(),
        "github.token" => TOKEN.to_string(),
        // Empty in composite actions (actions/runner#2473): the action must cope.
        "github.action_ref" | "github.action_repository" => String::new(),
        _ => panic!("action.yml uses an expression this test does not know: ${{{{ {expr} }}}}"),
    }
}

fn substitute(text: &str, eval: &dyn Fn(&str) -> String) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("}}").unwrap_or_else(|| panic!("unclosed expression in {text}")) + start;
        out.push_str(&eval(&rest[start + 3..end]));
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Run action.yml's steps as the runner runs a composite action: each `run` with
/// `bash --noprofile --norc -eo pipefail`, its `env`, a GITHUB_OUTPUT of its own; a failing step
/// ends the action. Returns the runs (output of all steps) and the action's outputs.
async fn run_action(job: &Job, fake: &Fake, event: &Event<'_>, env: &[(&str, &str)]) -> (Run, HashMap<String, String>) {
    let action = yaml("action.yml");
    let declared = action["inputs"].as_object().expect("inputs");
    let mut inputs = HashMap::new();
    for (name, spec) in declared {
        let given = event.inputs.iter().find(|(k, _)| k == name).map(|(_, v)| v.to_string());
        let default = spec.get("default").map(|d| match d {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        let value = given.or(default).unwrap_or_default();
        let value = substitute(&value, &|e| evaluate(e, event, &HashMap::new(), &HashMap::new()));
        inputs.insert(name.clone(), value);
    }
    for (name, _) in event.inputs {
        assert!(declared.contains_key(*name), "the test passes input {name} that action.yml does not declare");
    }
    let event_file = job.path("event.json");
    let payload = json!({"action": event.action, "number": PR, "pull_request": {"number": PR, "head": {"sha": SHA}}});
    std::fs::write(&event_file, payload.to_string()).expect("event");
    let mut steps: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut all = Run { code: 0, stdout: String::new(), stderr: String::new() };
    for (i, step) in action["runs"]["steps"].as_array().expect("steps").iter().enumerate() {
        assert_eq!(step["shell"], "bash", "step {i} runs in bash");
        let eval = |e: &str| evaluate(e, event, &inputs, &steps);
        let run = substitute(step["run"].as_str().expect("a run step"), &eval);
        let file = job.path(&format!("step-{i}.sh"));
        std::fs::write(&file, run).expect("write step");
        let output = job.path(&format!("step-{i}.output"));
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-eo", "pipefail"]).arg(&file).env_clear().current_dir(job.path("project"));
        cmd.env("PATH", job.search_path())
            .env("HOME", job.dir.path())
            .env("RUNNER_TEMP", job.dir.path())
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_ACTION_PATH", repo_root())
            .env("GITHUB_API_URL", fake.api_url())
            .env("GITHUB_REPOSITORY", REPO)
            .env("GITHUB_SERVER_URL", "https://github.com")
            .env("GITHUB_RUN_ID", "1001")
            .env("GITHUB_EVENT_NAME", "pull_request")
            .env("GITHUB_EVENT_PATH", &event_file)
            .env("GITHUB_OUTPUT", &output)
            .env("GITHUB_PATH", job.path("github_path"))
            .env("GITHUB_ENV", job.path("github_env"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(vars) = step.get("env").and_then(Value::as_object) {
            for (k, v) in vars {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                cmd.env(k, substitute(&v, &eval));
            }
        }
        let r = run_command(cmd).await;
        all.stdout.push_str(&r.stdout);
        all.stderr.push_str(&r.stderr);
        all.code = r.code;
        if let Some(id) = step.get("id").and_then(Value::as_str) {
            steps.insert(id.to_string(), parse_outputs(&std::fs::read_to_string(&output).unwrap_or_default()));
        }
        if r.code != 0 {
            break;
        }
    }
    let mut outputs = HashMap::new();
    for (name, spec) in action["outputs"].as_object().expect("outputs") {
        let value = spec["value"].as_str().expect("output value");
        outputs.insert(name.clone(), substitute(value, &|e| evaluate(e, event, &inputs, &steps)));
    }
    (all, outputs)
}

/// A job of the GitLab template, run as the runner runs it: the job's variables (merged with
/// those of the job it extends; the test's env wins), then before_script and script, as one bash
/// session with `set -eo pipefail`, in the project directory.
async fn run_gitlab_job(job: &Job, fake: &Fake, name: &str, env: &[(&str, &str)]) -> Run {
    let template = yaml("ci/gitlab/vesper-preview.gitlab-ci.yml");
    let this = &template[name];
    let parent = &template[this["extends"].as_str().expect("extends")];
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    for source in [parent, this] {
        if let Some(v) = source.get("variables").and_then(Value::as_object) {
            for (k, v) in v {
                vars.insert(k.clone(), v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()));
            }
        }
    }
    let mut given = job.gitlab_env(fake);
    given.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let lines = |key: &str| -> Vec<String> {
        this.get(key)
            .or_else(|| parent.get(key))
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|l| l.as_str().expect("a script line").to_string()).collect())
            .unwrap_or_default()
    };
    let mut text = String::new();
    for (k, v) in &vars {
        if !given.iter().any(|(g, _)| g == k) {
            // GitLab expands $VAR and ${VAR} in variables as bash does.
            text.push_str(&format!("export {k}=\"{v}\"\n"));
        }
    }
    for line in lines("before_script").into_iter().chain(lines("script")) {
        text.push_str(&line);
        text.push('\n');
    }
    let file = job.path(&format!("{}.sh", name.trim_start_matches('.')));
    std::fs::write(&file, text).expect("write job");
    let mut cmd = Command::new("bash");
    cmd.args(["-eo", "pipefail"]).arg(&file).env_clear().current_dir(job.path("project"));
    for (k, v) in given {
        cmd.env(k, v);
    }
    run_command(cmd).await
}

fn sha256sums(files: &[(&str, &[u8])]) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new("sha256sum");
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).expect("write asset");
        cmd.arg(name);
    }
    let out = cmd.current_dir(dir.path()).output().expect("sha256sum");
    assert!(out.status.success(), "sha256sum: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The preview as vesperctl shows it (`get -o json`).
async fn preview_json(h: &Harness, namespace: &str, name: &str) -> Value {
    let r = h.vesperctl(&["get", name, "-n", namespace, "-o", "json"]).await.expect(0);
    serde_json::from_str(&r.stdout).expect("JSON")
}

/// The images the preview's Deployment runs.
async fn running_images(h: &Harness, preview: &Value) -> Vec<String> {
    let ns = preview["status"]["namespace"].as_str().expect("status.namespace");
    let deployments: Api<Deployment> = Api::namespaced(h.dc.client(), ns);
    let list = deployments.list(&Default::default()).await.expect("list deployments");
    list.items
        .iter()
        .flat_map(|d| d.spec.iter().flat_map(|s| s.template.spec.iter().flat_map(|p| p.containers.iter())))
        .filter_map(|c| c.image.clone())
        .collect()
}

#[track_caller]
fn assert_contains(haystack: &str, needles: &[&str]) {
    for n in needles {
        assert!(haystack.contains(n), "{n:?} not in:\n{haystack}");
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Opened: the action applies the preview and posts one comment.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opened_applies_the_preview_and_posts_one_comment() {
    let h = Harness::start().await;
    let fake = Fake::start(Host::GitHub).await;
    let job = Job::new(h.kubeconfig());
    // The kubeconfig comes in as an input (from a secret), not as KUBECONFIG.
    let kubeconfig = h.dc.kubeconfig_yaml().to_string();
    let event = Event {
        action: "opened",
        inputs: &[("image", IMAGE_A), ("kubeconfig", kubeconfig.as_str()), ("timeout", "60s")],
    };
    let (r, outputs) = run_action(&job, &fake, &event, &[]).await;
    let r = r.expect(0);
    assert_contains(&r.stderr, &["using ", "bin/vesperctl", "is Ready at https://"]);

    let pe = preview_json(&h, "default", "pr-42").await;
    assert_eq!(pe["status"]["phase"], "Ready");
    assert_eq!(pe["spec"]["image"], IMAGE_A);
    let url = pe["status"]["url"].as_str().expect("a URL");
    let expires = pe["status"]["expiresAt"].as_str().expect("an expiry");

    let ours = fake.ours();
    assert_eq!(fake.comments().len(), 1, "{:?}", fake.comments());
    let body = &ours[0].body;
    assert!(body.starts_with("<!-- vesper-preview: default/pr-42 -->\n"), "{body}");
    assert_contains(body, &["### Preview `pr-42`: Ready", &format!("| URL | {url} |"), "| Phase | Ready |"]);
    assert_contains(body, &[&format!("| Expires | {expires} |"), &format!("`{IMAGE_A}`"), &SHA[..12]]);
    assert_contains(body, &["https://github.com/acme/shop/actions/runs/1001"]);

    assert_eq!(outputs["url"], url);
    assert_eq!(outputs["phase"], "Ready");
    assert_eq!(outputs["expires-at"], expires);

    // GET (no comment yet), POST (deploying), PATCH (ready): all with the token and the headers
    // GitHub asks for.
    let methods: Vec<String> = fake.requests().iter().map(|r| r.method.clone()).collect();
    assert_eq!(methods, ["GET", "POST", "PATCH"]);
    for r in fake.requests() {
        assert!(r.authorized, "{r:?}");
        assert_eq!(r.accept.as_deref(), Some("application/vnd.github+json"), "{r:?}");
        assert_eq!(r.api_version.as_deref(), Some("2022-11-28"), "{r:?}");
    }
    assert_eq!(fake.requests()[0].query.get("per_page").map(String::as_str), Some("100"));
    // The kubeconfig written from the input is gone after the step.
    let left: Vec<_> = std::fs::read_dir(job.dir.path())
        .expect("read dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("vesper-kubeconfig"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 2. A second push: the same comment is updated, found on page 2; the preview runs the new image.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_push_updates_the_same_comment() {
    let h = Harness::start().await;
    let fake = Fake::start(Host::GitHub).await;
    let job = Job::new(h.kubeconfig());
    // 150 comments of reviewers first: ours is the 151st, on the second page of 100.
    fake.seed(150);
    run_command(job.github(&fake, "up", &[("VESPER_IMAGE", IMAGE_A), ("VESPER_TTL", "48h")])).await.expect(0);
    assert_eq!(fake.comments().len(), 151);
    let first = fake.ours();
    assert_eq!(first.len(), 1);
    assert_eq!(preview_json(&h, "default", "pr-42").await["spec"]["ttl"], "48h");

    // Someone extends the preview by hand: the next push must not take the extension back.
    h.previews("default")
        .patch("pr-42", &PatchParams::default(), &Patch::Merge(json!({"spec": {"ttl": "72h"}})))
        .await
        .expect("extend");

    fake.clear_requests();
    let r = run_command(job.github(&fake, "up", &[("VESPER_IMAGE", IMAGE_B), ("VESPER_TTL", "48h")])).await.expect(0);
    assert_contains(&r.stderr, &[&format!("updated comment {}", first[0].id)]);
    assert_eq!(fake.comments().len(), 151, "no new comment");
    assert_eq!(fake.count("POST"), 0);
    assert_eq!(fake.count("PATCH"), 2, "deploying, then ready");
    let pages: Vec<String> =
        fake.requests().iter().filter(|r| r.method == "GET").filter_map(|r| r.query.get("page").cloned()).collect();
    assert_eq!(pages, ["1", "2"]);
    let ours = fake.ours();
    assert_eq!(ours[0].id, first[0].id);
    assert_contains(&ours[0].body, &["Ready", &format!("`{IMAGE_B}`")]);
    assert!(!ours[0].body.contains(IMAGE_A), "{}", ours[0].body);

    let pe = preview_json(&h, "default", "pr-42").await;
    assert_eq!(pe["spec"]["image"], IMAGE_B);
    assert_eq!(pe["status"]["phase"], "Ready");
    assert_eq!(pe["spec"]["ttl"], "72h", "the TTL applies to a new preview only");
    assert_eq!(running_images(&h, &pe).await, [IMAGE_B]);
    assert_contains(
        &ours[0].body,
        &[&format!("| Expires | {} |", pe["status"]["expiresAt"].as_str().expect("expiry"))],
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 3. A failing image: the comment says Failed and why; the check fails with vesperctl's code.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_image_fails_the_check_and_says_why() {
    let h = Harness::start_with(Setup {
        faults: vec![
            FaultRule::new("registry.example.com/shop:stuck", Fault::Deadline),
            FaultRule::new("registry.example.com/shop:missing", Fault::ImagePull),
        ],
        ..Default::default()
    })
    .await;
    let fake = Fake::start(Host::GitHub).await;
    let job = Job::new(h.kubeconfig());

    // A rollout that makes no progress: vesperctl exits 1 with the reason.
    let r =
        run_command(job.github(&fake, "up", &[("VESPER_IMAGE", "registry.example.com/shop:stuck")])).await.expect(1);
    assert_contains(&r.stderr, &["RolloutStuck", "is not Ready"]);
    let ours = fake.ours();
    assert_eq!(ours.len(), 1);
    assert_contains(&ours[0].body, &["<!-- vesper-preview: default/pr-42 -->", "### Preview `pr-42`: Failed"]);
    assert_contains(
        &ours[0].body,
        &["exit code 1", "```\nerror: preview \"pr-42\" failed: RolloutStuck: the rollout of"],
    );
    assert_eq!(job.outputs("output")["phase"], "Failed");

    // A second preview of the same pull request whose image cannot be pulled: not Ready in
    // time, exit 3; it gets a comment of its own.
    let r = run_command(job.github(
        &fake,
        "up",
        &[
            ("VESPER_IMAGE", "registry.example.com/shop:missing"),
            ("VESPER_NAME", "pr-42-api"),
            ("VESPER_TIMEOUT", "3s"),
        ],
    ))
    .await
    .expect(3);
    assert_contains(&r.stderr, &["timed out after 3s"]);
    let ours = fake.ours();
    assert_eq!(ours.len(), 2, "one comment per preview");
    let api =
        ours.iter().find(|c| c.body.starts_with("<!-- vesper-preview: default/pr-42-api -->")).expect("its comment");
    assert_contains(
        &api.body,
        &["### Preview `pr-42-api`: Failed", "Not Ready within 3s", "timed out after 3s", "| Phase | Pending |"],
    );
    // The first comment is untouched.
    assert_contains(&fake.ours()[0].body, &["RolloutStuck"]);
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 4. Closed: the action deletes the preview and the comment says so.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_deletes_the_preview_and_updates_the_comment() {
    let h = Harness::start().await;
    let fake = Fake::start(Host::GitHub).await;
    let job = Job::new(h.kubeconfig());
    let kubeconfig = h.kubeconfig().display().to_string();
    let env = [("KUBECONFIG", kubeconfig.as_str())];
    let opened = Event { action: "opened", inputs: &[("image", IMAGE_A), ("timeout", "60s")] };
    run_action(&job, &fake, &opened, &env).await.0.expect(0);
    let before = fake.ours();
    assert_eq!(before.len(), 1);

    // No image on close: the action does not need one to delete.
    let closed = Event { action: "closed", inputs: &[("timeout", "60s")] };
    let (r, outputs) = run_action(&job, &fake, &closed, &env).await;
    let r = r.expect(0);
    assert_contains(&r.stderr, &["vesperctl delete pr-42 --wait"]);
    assert!(h.previews("default").get_opt("pr-42").await.expect("get").is_none(), "the preview is gone");
    let after = fake.ours();
    assert_eq!(fake.comments().len(), 1);
    assert_eq!(after[0].id, before[0].id);
    assert_contains(
        &after[0].body,
        &["<!-- vesper-preview: default/pr-42 -->", "### Preview `pr-42`: Deleted", "was deleted"],
    );
    assert_eq!((outputs["phase"].as_str(), outputs["url"].as_str()), ("Deleted", ""));

    // Closing again (a re-run) finds nothing to delete and still succeeds.
    let (r, _) = run_action(&job, &fake, &closed, &env).await;
    assert_contains(&r.expect(0).stderr, &["does not exist"]);
    assert_eq!(fake.comments().len(), 1);
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 5. A token that may not comment: the job fails, saying which permission is missing.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_permission_fails_and_names_the_permission() {
    let h = Harness::start().await;
    let fake = Fake::start(Host::GitHub).await;
    let job = Job::new(h.kubeconfig());
    fake.refuse(
        "POST",
        403,
        json!({"message": "Resource not accessible by integration", "documentation_url": "https://docs.github.com/rest/issues/comments#create-an-issue-comment", "status": "403"}),
    );
    let r = run_command(job.github(&fake, "up", &[("VESPER_IMAGE", IMAGE_A)])).await.expect(1);
    assert_contains(
        &r.stderr,
        &["POST ", "answered 403", "Resource not accessible by integration", "pull-requests: write"],
    );
    assert!(fake.comments().is_empty());
    assert_eq!(fake.count("POST"), 1);
    assert_eq!(fake.count("PATCH"), 0);
    // It failed before deploying anything.
    assert!(h.previews("default").get_opt("pr-42").await.expect("get").is_none());

    // A wrong token: 401, said as such.
    let r =
        run_command(job.github(&fake, "up", &[("VESPER_IMAGE", IMAGE_A), ("GITHUB_TOKEN", "wrong")])).await.expect(1);
    assert_contains(&r.stderr, &["answered 401", "Bad credentials", "GITHUB_TOKEN"]);
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 6. GitLab: the template's jobs against a fake of the Notes API.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_merge_requests_get_one_note() {
    let h = Harness::start().await;
    let fake = Fake::start(Host::GitLab).await;
    let job = Job::new(h.kubeconfig());
    // The release the template downloads from (vesperctl is on PATH already, so only the script).
    let script_bytes = std::fs::read(script()).expect("script");
    fake.asset("v0.1.0/vesper-pr.sh", script_bytes.clone());
    fake.asset("v0.1.0/SHA256SUMS", sha256sums(&[("vesper-pr.sh", &script_bytes), ("other", b"x")]));
    // 120 notes first (system notes among them): ours lands on page 2.
    fake.seed(120);

    let r = run_gitlab_job(&job, &fake, ".vesper-preview-up", &[("VESPER_IMAGE", IMAGE_A)]).await.expect(0);
    assert_contains(&r.stdout, &["vesper-pr.sh: OK"]);
    let ours = fake.ours();
    assert_eq!(ours.len(), 1);
    assert_eq!(fake.comments().len(), 121);
    let pe = preview_json(&h, "default", "pr-42").await;
    let url = pe["status"]["url"].as_str().expect("URL");
    assert_contains(&ours[0].body, &["<!-- vesper-preview: default/pr-42 -->", "Ready", url, "jobs/99"]);
    // The environment's URL, through the dotenv report.
    let dotenv = std::fs::read_to_string(job.path("project/vesper.env")).expect("dotenv report");
    assert_contains(&dotenv, &[&format!("VESPER_URL={url}\n"), "VESPER_PHASE=Ready\n"]);

    // A second push: the note is updated in place (PUT), none added.
    fake.clear_requests();
    std::fs::remove_file(job.path("project/vesper.env")).expect("rm dotenv");
    run_gitlab_job(&job, &fake, ".vesper-preview-up", &[("VESPER_IMAGE", IMAGE_B)]).await.expect(0);
    assert_eq!(fake.comments().len(), 121);
    assert_eq!((fake.count("POST"), fake.count("PUT")), (0, 2));
    let gets: Vec<Recorded> = fake.requests().into_iter().filter(|r| r.method == "GET").collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    for g in &gets {
        assert_eq!(g.path, format!("/api/v4/projects/{PROJECT}/merge_requests/{PR}/notes"));
        assert_eq!((g.query["per_page"].as_str(), g.query["sort"].as_str()), ("100", "asc"));
    }
    assert!(fake.requests().iter().all(|r| r.authorized));
    assert_contains(&fake.ours()[0].body, &[IMAGE_B, "Ready"]);
    assert_eq!(preview_json(&h, "default", "pr-42").await["spec"]["image"], IMAGE_B);

    // The merge request is closed: GitLab runs the stop job.
    run_gitlab_job(&job, &fake, ".vesper-preview-down", &[]).await.expect(0);
    assert!(h.previews("default").get_opt("pr-42").await.expect("get").is_none());
    assert_eq!(fake.comments().len(), 121);
    assert_contains(&fake.ours()[0].body, &["Deleted"]);

    // Without a token that can write notes, it says what to use.
    let r =
        run_gitlab_job(&job, &fake, ".vesper-preview-up", &[("VESPER_IMAGE", IMAGE_A), ("VESPER_GITLAB_TOKEN", "")])
            .await
            .expect(2);
    assert_contains(&r.stderr, &["VESPER_GITLAB_TOKEN", "api scope", "CI_JOB_TOKEN"]);
    fake.refuse("POST", 403, json!({"message": "403 Forbidden"}));
    fake.refuse("PUT", 403, json!({"message": "403 Forbidden"}));
    let r = run_gitlab_job(&job, &fake, ".vesper-preview-up", &[("VESPER_IMAGE", IMAGE_A)]).await.expect(1);
    assert_contains(&r.stderr, &["answered 403", "'api' scope", "Reporter"]);

    // A script that does not match the release's checksum is not run.
    fake.asset("v0.1.0/vesper-pr.sh", b"#!/bin/sh\necho tampered\n".to_vec());
    let before = fake.requests().len();
    let r = run_gitlab_job(&job, &fake, ".vesper-preview-up", &[("VESPER_IMAGE", IMAGE_A)]).await;
    assert_ne!(r.code, 0, "{r:?}");
    assert_contains(&r.stdout, &["FAILED"]);
    assert!(!r.stdout.contains("tampered"), "{}", r.stdout);
    assert_eq!(fake.requests().len(), before, "nothing reached the API");
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 7. The CI ServiceAccount of deploy/vesper/ci-rbac.yaml can bring previews up and down.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ci_service_account_can_bring_previews_up_and_down() {
    let h = Harness::start().await;
    let fake = Fake::start(Host::GitHub).await;
    let mut kubectl = Command::new("/usr/bin/kubectl");
    kubectl
        .arg("apply")
        .arg("-f")
        .arg(repo_root().join("deploy/vesper/ci-rbac.yaml"))
        .env("KUBECONFIG", h.kubeconfig());
    run_command(kubectl).await.expect(0);

    // A kubeconfig with the ServiceAccount's token, its context in the previews namespace: what
    // the CI secret holds.
    let sas: Api<ServiceAccount> = Api::namespaced(h.dc.client(), "previews");
    let tr = sas.create_token_request("vesper-ci", &PostParams::default(), &Default::default()).await.expect("token");
    let token = tr.status.expect("token").token;
    let original = h.dc.kubeconfig_yaml();
    assert!(original.contains("    namespace: default\n"), "{original}");
    let ci: String = original
        .replace("    namespace: default\n", "    namespace: previews\n")
        .lines()
        .map(|l| if l.trim_start().starts_with("token: ") { format!("    token: {token}\n") } else { format!("{l}\n") })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, ci).expect("write kubeconfig");
    let job = Job::new(path.clone());

    // No namespace given: the context's, found by the script through vesperctl.
    run_command(job.github(&fake, "up", &[("VESPER_IMAGE", IMAGE_A)])).await.expect(0);
    assert_eq!(preview_json(&h, "previews", "pr-42").await["status"]["phase"], "Ready");
    assert!(fake.ours()[0].body.starts_with("<!-- vesper-preview: previews/pr-42 -->"));
    run_command(job.github(&fake, "up", &[("VESPER_IMAGE", IMAGE_B)])).await.expect(0);
    assert_eq!(preview_json(&h, "previews", "pr-42").await["spec"]["image"], IMAGE_B);
    // describe, as the CI account: the preview and its Events in full; each object of the
    // preview's own namespace (out of the Role's reach) names the permission it would need.
    let mut cmd = Command::new(common::bin());
    cmd.args(["describe", "pr-42", "--kubeconfig"]).arg(&path).env_remove("KUBECONFIG").env_remove("HOME");
    let r = run_command(cmd).await.expect(0);
    let pe = preview_json(&h, "previews", "pr-42").await;
    let ns = pe["status"]["namespace"].as_str().expect("its namespace").to_string();
    let cannot: Vec<&str> = r.stdout.lines().filter(|l| l.contains("<cannot read")).collect();
    assert!(!cannot.is_empty(), "{}", r.stdout);
    for line in &cannot {
        let names_it = line.contains("ask for RBAC access to list ") && line.contains(&format!(" in namespace {ns}"))
            || line.contains(&format!("ask for RBAC access to get namespaces/{ns}"));
        assert!(
            names_it && !line.contains("previewenvironments"),
            "a refused read names its permission: {line}\n{}",
            r.stdout
        );
    }
    assert!(!r.stdout.contains("list events in namespace previews"), "its Events are readable:\n{}", r.stdout);
    run_command(job.github(&fake, "down", &[])).await.expect(0);
    assert!(h.previews("previews").get_opt("pr-42").await.expect("get").is_none());
    assert_eq!(fake.comments().len(), 1);
    assert_contains(&fake.ours()[0].body, &["Deleted"]);

    // And nothing outside its namespace.
    let mut cmd = Command::new(common::bin());
    cmd.args(["list", "-n", "default", "--kubeconfig"]).arg(&path).env_remove("KUBECONFIG").env_remove("HOME");
    let r = run_command(cmd).await.expect(1);
    assert_contains(&r.stderr, &["403 Forbidden", "system:serviceaccount:previews:vesper-ci"]);
    let r = run_command(job.github(&fake, "up", &[("VESPER_IMAGE", IMAGE_A), ("VESPER_NAMESPACE", "default")]))
        .await
        .expect(1);
    assert_contains(&r.stderr, &["forbids it"]);
    h.stop().await;
}

/// Why the Role grants `create`: the real API server authorizes an apply that creates an object
/// as a create too (apiserver handlers/patch.go: `createValidation = withAuthorization(...,
/// createAuthorizerAttributes)`), so a Role with `patch` alone cannot bring a new preview up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_that_creates_a_preview_needs_the_create_verb() {
    let h = Harness::start().await;
    let rbac = read("deploy/vesper/ci-rbac.yaml").replace(
        r#"verbs: ["get", "list", "watch", "create", "patch", "delete"]"#,
        r#"verbs: ["get", "list", "watch", "patch", "delete"]"#,
    );
    assert!(!rbac.contains("\"create\""), "the Role of ci-rbac.yaml has the expected shape");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ci-rbac-variant.yaml"), rbac).expect("write");
    let mut kubectl = Command::new("/usr/bin/kubectl");
    kubectl.arg("apply").arg("-f").arg(dir.path().join("ci-rbac-variant.yaml")).env("KUBECONFIG", h.kubeconfig());
    run_command(kubectl).await.expect(0);
    let sas: Api<ServiceAccount> = Api::namespaced(h.dc.client(), "previews");
    let tr = sas.create_token_request("vesper-ci", &PostParams::default(), &Default::default()).await.expect("token");
    let token = tr.status.expect("token").token;
    let kubeconfig: String = h
        .dc
        .kubeconfig_yaml()
        .lines()
        .map(|l| if l.trim_start().starts_with("token: ") { format!("    token: {token}\n") } else { format!("{l}\n") })
        .collect();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, kubeconfig).expect("write kubeconfig");
    let mut cmd = Command::new(common::bin());
    cmd.args(["apply", "pr-1", "-n", "previews", "--image", IMAGE_A, "--kubeconfig"]).arg(&path).env_remove("HOME");
    let r = run_command(cmd).await.expect(1);
    assert_contains(&r.stderr, &["403 Forbidden"]);
    assert!(h.previews("previews").get_opt("pr-1").await.expect("get").is_none());
    h.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Installing vesperctl from a release, checked against SHA256SUMS.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vesperctl_is_installed_from_the_pinned_release_only_with_the_pinned_checksum() {
    let fake = Fake::start(Host::GitHub).await;
    let binary = b"#!/bin/sh\necho 'vesperctl 0.1.0'\n".to_vec();
    let asset = "vesperctl-x86_64-unknown-linux-musl";
    fake.asset(&format!("v0.1.0/{asset}"), binary.clone());
    fake.asset(&format!("v0.2.0/{asset}"), b"another build".to_vec());
    fake.asset(&format!("latest/{asset}"), binary.clone());
    let right = sha256_hex(&binary);
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(!Path::new("/usr/bin/vesperctl").exists() && !Path::new("/bin/vesperctl").exists());
    let install = |version: &str, sha256: &str, into: &str| {
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("scripts/ci/install-vesperctl.sh"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir.path())
            .env("VESPERCTL_VERSION", version)
            .env("VESPERCTL_SHA256", sha256)
            .env("VESPERCTL_REPOSITORY", "eventide/vesper")
            .env("VESPERCTL_DOWNLOAD_URL", fake.base())
            .env("VESPERCTL_INSTALL_DIR", dir.path().join(into))
            .env("GITHUB_OUTPUT", dir.path().join("output"))
            .env("GITHUB_PATH", dir.path().join("path"));
        run_command(cmd)
    };
    let r = install("v0.1.0", &right, "ok").await.expect(0);
    assert_contains(&r.stderr, &["vesperctl 0.1.0"]);
    let installed = dir.path().join("ok/vesperctl");
    assert_eq!(std::fs::read(&installed).expect("installed"), binary);
    let outputs = parse_outputs(&std::fs::read_to_string(dir.path().join("output")).expect("output"));
    assert_eq!(outputs["path"], installed.display().to_string());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("path")).expect("path"),
        format!("{}\n", dir.path().join("ok").display())
    );
    // Upper-case hex is the same checksum.
    install("0.1.0", &right.to_uppercase(), "upper").await.expect(0);

    // The release's file changed after it was pinned (or another version without its checksum):
    // the download is refused and nothing is installed.
    let r = install("0.2.0", &right, "bad").await.expect(1);
    assert_contains(&r.stderr, &["does not match the pinned VESPERCTL_SHA256", &right, "not installed"]);
    assert!(!dir.path().join("bad/vesperctl").exists());
    assert!(!dir.path().join("bad").exists() || std::fs::read_dir(dir.path().join("bad")).expect("dir").count() == 0);
    let wrong = "0".repeat(64);
    let r = install("0.1.0", &wrong, "bad").await.expect(1);
    assert_contains(&r.stderr, &["does not match", "not installed"]);
    assert!(!dir.path().join("bad/vesperctl").exists());

    // No "latest", no unpinned install, no malformed checksum: refused before anything is
    // downloaded or even the install directory made.
    for (version, sha256, says) in [
        ("latest", right.as_str(), "never latest"),
        ("", right.as_str(), "VESPERCTL_VERSION must be one release"),
        ("0.1", right.as_str(), "VESPERCTL_VERSION must be one release"),
        ("0.1.0", "", "VESPERCTL_SHA256 must be"),
        ("0.1.0", "abc", "VESPERCTL_SHA256 must be"),
    ] {
        let r = install(version, sha256, "refused").await.expect(1);
        assert_contains(&r.stderr, &[says]);
    }
    assert!(!dir.path().join("refused").exists());

    let r = install("9.9.9", &right, "none").await.expect(1);
    assert_contains(&r.stderr, &["could not download", "9.9.9"]);
}

/// The SHA-256 of `bytes`, in hex, as sha256sum prints it.
fn sha256_hex(bytes: &[u8]) -> String {
    let sums = String::from_utf8(sha256sums(&[("f", bytes)])).expect("utf-8");
    sums.split_whitespace().next().expect("a hash").to_string()
}

#[test]
fn the_templates_pin_one_vesperctl_release_and_its_checksum() {
    let action = yaml("action.yml");
    let gitlab = yaml("ci/gitlab/vesper-preview.gitlab-ci.yml");
    // No "latest" anywhere: not as a version, not as a release URL.
    for file in ["action.yml", "ci/gitlab/vesper-preview.gitlab-ci.yml"] {
        assert!(!read(file).to_lowercase().contains("latest"), "{file} mentions latest");
    }
    let install = read("scripts/ci/install-vesperctl.sh");
    assert!(!install.contains("releases/latest") && !install.contains(":-latest"), "install-vesperctl.sh");

    let version = action["inputs"]["vesperctl-version"]["default"].as_str().expect("a pinned version");
    let sha256 = action["inputs"]["vesperctl-sha256"]["default"].as_str().expect("a pinned checksum");
    let is_version = |v: &str| {
        let parts: Vec<&str> = v.split('.').collect();
        parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    let is_sha256 = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    assert!(is_version(version), "action.yml pins vesperctl-version: {version}");
    assert!(is_sha256(sha256), "action.yml pins vesperctl-sha256: {sha256}");
    // The install step passes both on, and nothing else picks the version.
    let install_step = action["runs"]["steps"].as_array().expect("steps").iter().find(|s| s["id"] == "install");
    let install_step = install_step.expect("the install step");
    assert_eq!(install_step["env"]["VESPERCTL_VERSION"], "${{ inputs.vesperctl-version }}");
    assert_eq!(install_step["env"]["VESPERCTL_SHA256"], "${{ inputs.vesperctl-sha256 }}");
    assert!(!install_step["run"].as_str().expect("run").contains("VESPERCTL_VERSION="), "the version is not rewritten");

    // The GitLab template pins the same release, and the checksum of the script it runs.
    let vars = &gitlab[".vesper-preview-base"]["variables"];
    assert_eq!(vars["VESPER_VERSION"], version, "both templates pin one release");
    assert_eq!(vars["VESPERCTL_SHA256"], sha256, "both templates pin one checksum");
    let script_sha = sha256_hex(&std::fs::read(script()).expect("vesper-pr.sh"));
    assert_eq!(vars["VESPER_PR_SHA256"], script_sha.as_str(), "VESPER_PR_SHA256 is the committed vesper-pr.sh's");
    assert!(
        vars["VESPER_RELEASE_URL"].as_str().expect("release URL").ends_with("/releases/download/v${VESPER_VERSION}"),
        "{vars}"
    );
    let before = serde_json::to_string(&gitlab[".vesper-preview-base"]["before_script"]).expect("before_script");
    assert!(!before.contains("SHA256SUMS"), "the template checks its own pins, not the release's list");

    // The docs ask for protected variables only.
    let docs = read("docs/vesper/ci.md");
    assert!(!docs.contains("Not \"protected\"") && !docs.to_lowercase().contains("not protected"), "docs/vesper/ci.md");
    let header = read("ci/gitlab/vesper-preview.gitlab-ci.yml");
    assert!(!header.to_lowercase().contains("not protected"), "the template's header");
}

// ---------------------------------------------------------------------------------------------
// The files themselves.

#[test]
fn the_action_uses_every_input_and_runs_the_script_in_both_modes() {
    let action = yaml("action.yml");
    let steps = serde_json::to_string(&action["runs"]["steps"]).expect("steps");
    assert_eq!(action["runs"]["using"], "composite");
    let inputs = action["inputs"].as_object().expect("inputs");
    for name in [
        "image",
        "name",
        "namespace",
        "ttl",
        "timeout",
        "kubeconfig",
        "vesperctl-version",
        "vesperctl-sha256",
        "github-token",
    ] {
        assert!(inputs.contains_key(name), "input {name} is declared");
    }
    for name in inputs.keys() {
        assert!(steps.contains(&format!("inputs.{name} ")), "input {name} is used by a step");
    }
    assert_eq!(inputs["github-token"]["default"], "${{ github.token }}");
    for name in ["url", "phase", "expires-at"] {
        assert_eq!(action["outputs"][name]["value"], format!("${{{{ steps.preview.outputs.{name} }}}}"));
    }
    // The mode: closed → down, any other pull_request event → up.
    let preview =
        action["runs"]["steps"].as_array().expect("steps").iter().find(|s| s["id"] == "preview").expect("step");
    let run = preview["run"].as_str().expect("run");
    assert!(run.contains("\"$GITHUB_ACTION_PATH/scripts/ci/vesper-pr.sh\" \"$VESPER_MODE\""), "{run}");
    let mode = preview["env"]["VESPER_MODE"].as_str().expect("VESPER_MODE");
    for (event_action, want) in [("opened", "up"), ("synchronize", "up"), ("reopened", "up"), ("closed", "down")] {
        let event = Event { action: event_action, inputs: &[] };
        let got = substitute(mode, &|e| evaluate(e, &event, &HashMap::new(), &HashMap::new()));
        assert_eq!(got, want, "{event_action}");
    }
    // No input is pasted into a script: they reach the shell through env only.
    for step in action["runs"]["steps"].as_array().expect("steps") {
        let run = step["run"].as_str().expect("run");
        assert!(!run.contains("${{"), "expressions in run text can inject shell code:\n{run}");
    }
}

#[test]
fn the_example_workflow_runs_on_pull_requests_with_write_permission() {
    let wf = yaml("ci/github/vesper-preview.yml");
    let types: Vec<&str> =
        wf["on"]["pull_request"]["types"].as_array().expect("types").iter().filter_map(Value::as_str).collect();
    assert_eq!(types, ["opened", "synchronize", "reopened", "closed"]);
    assert_eq!(wf["permissions"]["pull-requests"], "write");
    let text = read("ci/github/vesper-preview.yml");
    assert!(text.contains("uses: eventide/vesper@"), "{text}");
    assert!(text.contains("kubeconfig: ${{ secrets."), "{text}");
}

#[test]
fn the_gitlab_template_has_the_hidden_jobs_and_the_environment() {
    let t = yaml("ci/gitlab/vesper-preview.gitlab-ci.yml");
    let up = &t[".vesper-preview-up"];
    let down = &t[".vesper-preview-down"];
    assert_eq!(up["script"], json!(["vesper-pr.sh up"]));
    assert_eq!(down["script"], json!(["vesper-pr.sh down"]));
    assert_eq!(up["environment"]["name"], "review/$CI_COMMIT_REF_SLUG");
    assert_eq!(down["environment"]["name"], up["environment"]["name"]);
    assert_eq!(up["environment"]["url"], "$VESPER_URL");
    assert_eq!(up["environment"]["on_stop"], "vesper-preview-stop");
    assert_eq!(up["environment"]["auto_stop_in"], "$VESPER_TTL");
    assert_eq!(down["environment"]["action"], "stop");
    assert_eq!(up["artifacts"]["reports"]["dotenv"], up["variables"]["VESPER_DOTENV"]);
    let base = &t[".vesper-preview-base"];
    assert_eq!(base["image"], "debian:bookworm-slim");
    assert_eq!(base["variables"]["VESPER_GIT_HOST"], "gitlab");
    assert!(t.as_object().expect("jobs").keys().all(|k| k.starts_with('.')), "only hidden jobs");
}

#[test]
fn the_scripts_pass_bash_n_and_shellcheck() {
    let scripts = [script(), repo_root().join("scripts/ci/install-vesperctl.sh")];
    for s in &scripts {
        let out = Command::new("bash").arg("-n").arg(s).output().expect("bash -n");
        assert!(out.status.success(), "bash -n {}: {}", s.display(), String::from_utf8_lossy(&out.stderr));
        let head = std::fs::read_to_string(s).expect("read script");
        assert!(head.starts_with("#!/usr/bin/env bash\n"), "{}", s.display());
        assert!(head.contains("\nset -euo pipefail\n"), "{}", s.display());
    }
    // `make test` installs shellcheck (scripts/ensure-deps.sh): without it this test fails
    // rather than pass without linting anything.
    let out = Command::new("shellcheck").args(&scripts).output().unwrap_or_else(|e| {
        panic!(
            "shellcheck cannot run ({e}): run scripts/ensure-deps.sh (make test does), or apt-get install shellcheck"
        )
    });
    assert!(out.status.success(), "shellcheck:\n{}", String::from_utf8_lossy(&out.stdout));
}
