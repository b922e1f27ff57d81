//! The HTTP side: the accept loop (with the refusing switch) and one handler for every page.

use crate::casc::{self, CascError};
use crate::plugins::{ManifestCache, Plugin};
use crate::{Options, Reload, Shared};
use base64::Engine;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;

/// The largest request body read (a JCasC bundle is a few hundred KiB at most).
const MAX_BODY: usize = 8 << 20;

pub(crate) type Resp = Response<Full<Bytes>>;

/// Serves until aborted; while refusing, the listener is closed and open connections dropped.
pub(crate) async fn serve(shared: Arc<Shared>, first: TcpListener) {
    let mut listener = Some(first);
    let mut accepting = shared.accepting.subscribe();
    loop {
        if !*accepting.borrow_and_update() {
            listener = None;
            if accepting.changed().await.is_err() {
                return;
            }
            continue;
        }
        let l = match listener.take() {
            Some(l) => l,
            None => match TcpListener::bind(shared.addr).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(addr = %shared.addr, error = %e, "cannot listen again; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        tokio::select! {
            accepted = l.accept() => {
                listener = Some(l);
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                let mut stop = shared.accepting.subscribe();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&shared, req).await) }
                    });
                    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = conn => {}
                        _ = stop.wait_for(|on| !*on) => {}
                    }
                });
            }
            _ = accepting.changed() => {
                listener = Some(l);
            }
        }
    }
}

/// Who the request is.
#[derive(Debug, Clone, PartialEq)]
enum Auth {
    Anonymous,
    /// By API token: crumb-exempt.
    Token(String),
    /// By password: needs a crumb.
    Password(String),
}

impl Auth {
    fn name(&self) -> &str {
        match self {
            Auth::Anonymous => "anonymous",
            Auth::Token(u) | Auth::Password(u) => u,
        }
    }
}

async fn handle(shared: &Shared, req: Request<Incoming>) -> Resp {
    let path = req.uri().path().to_string();
    if let Some(admin) = path.strip_prefix("/__double/") {
        return admin_endpoint(shared, admin.to_string(), req).await;
    }
    let (delay, fail) = {
        let st = shared.state();
        (st.faults.delay_ms, st.faults.fail500)
    };
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let method = req.method().clone();
    let mut rsp = if fail { oops() } else { jenkins(shared, req).await };
    tracing::debug!(%method, %path, status = rsp.status().as_u16(), "request");
    let st = shared.state();
    let h = rsp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&st.version) {
        h.insert("X-Jenkins", v);
    }
    h.insert("X-Hudson", HeaderValue::from_static("1.395"));
    if let Ok(v) = HeaderValue::from_str(&st.session) {
        h.insert("X-Jenkins-Session", v);
    }
    rsp
}

async fn jenkins(shared: &Shared, req: Request<Incoming>) -> Resp {
    let method = req.method().clone();
    let path = normalize(req.uri().path());
    let query = query_pairs(req.uri().query());
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| shared.addr.to_string());
    let base = format!("http://{host}");
    let security = security_on(&shared.opts);
    let auth = match authenticate(shared, req.headers()) {
        Ok(a) => a,
        Err(_) => return unauthorized(),
    };
    if path == "/login" && method == Method::GET {
        return html(
            StatusCode::OK,
            "Sign in [Jenkins]",
            "<form method=\"post\" action=\"j_spring_security_check\"></form>",
        );
    }
    if method == Method::POST && !matches!(auth, Auth::Token(_)) {
        let expected = crumb_for(shared, auth.name());
        let sent = req.headers().get("Jenkins-Crumb").and_then(|v| v.to_str().ok());
        if sent != Some(expected.as_str()) {
            return jetty_error(StatusCode::FORBIDDEN, "No valid crumb was included in the request");
        }
    }
    if security && auth == Auth::Anonymous {
        return authentication_required(&path);
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return jetty_error(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large"),
    };
    let post_only = [
        "/quietDown",
        "/cancelQuietDown",
        "/configuration-as-code/check",
        "/configuration-as-code/reload",
        "/configuration-as-code/export",
    ];
    if method != Method::POST && post_only.contains(&path.as_str()) {
        return html(StatusCode::METHOD_NOT_ALLOWED, "This URL requires POST", "<p>This URL requires POST</p>");
    }
    match (method.as_str(), path.as_str()) {
        ("GET", "/api/json") => api_json(root_json(shared, &base)),
        ("GET", "/pluginManager/api/json") => {
            let depth = query.iter().find(|(k, _)| k == "depth").and_then(|(_, v)| v.parse::<u32>().ok()).unwrap_or(0);
            api_json(plugins_json(shared, &base, depth))
        }
        ("GET", "/queue/api/json") => api_json(queue_json(shared, &base)),
        ("GET", "/computer/api/json") => api_json(computer_json(shared)),
        ("GET", "/crumbIssuer/api/json") => api_json(json!({
            "_class": "hudson.security.csrf.DefaultCrumbIssuer",
            "crumb": crumb_for(shared, auth.name()),
            "crumbRequestField": "Jenkins-Crumb",
        })),
        ("POST", "/quietDown") => {
            let mut st = shared.state();
            st.quieting_down = true;
            st.quiet_down_reason = query.iter().find(|(k, _)| k == "message").map(|(_, v)| v.clone());
            redirect(&format!("{base}/"))
        }
        ("POST", "/cancelQuietDown") => {
            let mut st = shared.state();
            st.quieting_down = false;
            st.quiet_down_reason = None;
            redirect(&format!("{base}/"))
        }
        ("POST", "/configuration-as-code/check") => casc_check(shared, &body),
        ("POST", "/configuration-as-code/reload") => casc_reload(shared, &base),
        ("POST", "/configuration-as-code/export") => casc_export(shared),
        ("GET", "/varroa/inventory") if !shared.state().faults.no_inventory => api_json(inventory_json(shared)),
        _ => match crate::job_pages::page(shared, &method, &path, &base).await {
            Some(rsp) => rsp,
            None => html(StatusCode::NOT_FOUND, "Not Found [Jenkins]", "<h2>Not Found</h2>"),
        },
    }
}

fn normalize(path: &str) -> String {
    let p = path.trim_end_matches('/');
    if p.is_empty() { "/".into() } else { p.to_string() }
}

fn query_pairs(q: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(q.unwrap_or_default().as_bytes()).into_owned().collect()
}

fn security_on(opts: &Options) -> bool {
    opts.api_token.is_some() || opts.token_file.is_some() || opts.password.is_some()
}

/// The API tokens accepted now (the token file is re-read on every request).
fn tokens(opts: &Options) -> Vec<String> {
    let mut out: Vec<String> = opts.api_token.iter().cloned().collect();
    if let Some(path) = &opts.token_file {
        match std::fs::read_to_string(path) {
            Ok(t) if !t.trim().is_empty() => out.push(t.trim().to_string()),
            Ok(_) => tracing::warn!(path = %path.display(), "the token file is empty"),
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot read the token file"),
        }
    }
    out
}

/// `BasicHeaderProcessor`: no header is anonymous; a header that does not authenticate is a
/// failure (Err carries the user name for the log).
fn authenticate(shared: &Shared, headers: &http::HeaderMap) -> Result<Auth, String> {
    let Some(value) = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return Ok(Auth::Anonymous);
    };
    if value.len() < 6 || !value[..6].eq_ignore_ascii_case("basic ") {
        return Ok(Auth::Anonymous);
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(value[6..].trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default();
    let Some((user, secret)) = decoded.split_once(':') else {
        return Err(String::new());
    };
    let opts = &shared.opts;
    if user == opts.user {
        if tokens(opts).iter().any(|t| t == secret) {
            return Ok(Auth::Token(user.into()));
        }
        if opts.password.as_deref() == Some(secret) {
            return Ok(Auth::Password(user.into()));
        }
    }
    tracing::info!(user, "invalid password/token");
    Err(user.into())
}

/// A crumb bound to the user and the current salt (hex SHA-256).
fn crumb_for(shared: &Shared, user: &str) -> String {
    let salt = shared.state().crumb_salt;
    let d = ring::digest::digest(&ring::digest::SHA256, format!("{user}:{salt}").as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn known_roots_for(opts: &Options, plugins: Option<&[Plugin]>, cache: &Mutex<ManifestCache>) -> Vec<String> {
    let installed = installed_plugins(opts, plugins, cache);
    casc::known_roots(installed.iter().filter(|p| p.active).map(|p| p.short_name.as_str()))
}

fn installed_plugins(opts: &Options, set: Option<&[Plugin]>, cache: &Mutex<ManifestCache>) -> Vec<Plugin> {
    if let Some(p) = set {
        return p.to_vec();
    }
    if let Some(dir) = &opts.plugins_dir {
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        match crate::plugins::scan_dir_cached(dir, &mut cache) {
            Ok(p) => return p,
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot read the plugins directory"),
        }
    }
    opts.plugins.clone()
}

fn current_plugins(shared: &Shared) -> Vec<Plugin> {
    let set = shared.state().plugins.clone();
    installed_plugins(&shared.opts, set.as_deref(), &shared.manifests)
}

fn current_known_roots(shared: &Shared) -> Vec<String> {
    let set = shared.state().plugins.clone();
    known_roots_for(&shared.opts, set.as_deref(), &shared.manifests)
}

fn millis_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// `jenkins.mode` and `jenkins.numExecutors` of the live configuration, else the defaults.
fn mode_and_executors(shared: &Shared) -> (String, u32) {
    let st = shared.state();
    let j = st.live.get("jenkins");
    let mode = j.and_then(|j| j.get("mode")).and_then(Value::as_str).unwrap_or("NORMAL").to_string();
    let n = j
        .and_then(|j| j.get("numExecutors"))
        .and_then(|v| v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())))
        .map(|n| n as u32)
        .unwrap_or(shared.opts.num_executors);
    (mode, n)
}

fn root_json(shared: &Shared, base: &str) -> Value {
    let (mode, executors) = mode_and_executors(shared);
    let st = shared.state();
    let configured = crate::job_pages::top_level_items(shared, base);
    let mut jobs: Vec<Value> = shared
        .opts
        .jobs
        .iter()
        .filter(|j| !configured.iter().any(|(n, _)| n == *j))
        .map(|j| json!({"_class": "hudson.model.FreeStyleProject", "name": j, "url": format!("{base}/job/{j}/"), "color": "blue"}))
        .collect();
    jobs.extend(configured.into_iter().map(|(_, v)| v));
    let message = st.live.get("jenkins").and_then(|j| j.get("systemMessage")).cloned().unwrap_or(Value::Null);
    json!({
        "_class": "hudson.model.Hudson",
        "assignedLabels": [{"name": "built-in"}],
        "mode": mode,
        "nodeDescription": "the Jenkins controller's built-in node",
        "nodeName": "",
        "numExecutors": executors,
        "description": message,
        "jobs": jobs,
        "overallLoad": {},
        "primaryView": {"_class": "hudson.model.AllView", "name": "all", "url": format!("{base}/")},
        "quietDownReason": st.quiet_down_reason,
        "quietingDown": st.quieting_down,
        "slaveAgentPort": 50000,
        "unlabeledLoad": {"_class": "jenkins.model.UnlabeledLoadStatistics"},
        "url": format!("{base}/"),
        "useCrumbs": true,
        "useSecurity": security_on(&shared.opts),
        "views": [{"_class": "hudson.model.AllView", "name": "all", "url": format!("{base}/")}],
    })
}

fn plugins_json(shared: &Shared, base: &str, depth: u32) -> Value {
    let plugins: Vec<Value> = current_plugins(shared)
        .iter()
        .map(|p| {
            if depth == 0 {
                return json!({});
            }
            json!({
                "active": p.active,
                "backupVersion": null,
                "bundled": false,
                "deleted": false,
                "dependencies": [],
                "detached": false,
                "downgradable": false,
                "enabled": p.enabled,
                "hasUpdate": false,
                "longName": p.long_name,
                "pinned": false,
                "requiredCoreVersion": "2.479",
                "shortName": p.short_name,
                "supportsDynamicLoad": "MAYBE",
                "url": format!("{base}/plugin/{}/", p.short_name),
                "version": p.version,
            })
        })
        .collect();
    json!({"_class": "hudson.LocalPluginManager", "plugins": plugins})
}

fn queue_json(shared: &Shared, base: &str) -> Value {
    let n = shared.state().queue_length;
    let now = millis_now();
    let mut items: Vec<Value> = (1..=n)
        .map(|id| {
            json!({
                "_class": "hudson.model.Queue$WaitingItem",
                "actions": [{"_class": "hudson.model.CauseAction", "causes": [{"_class": "hudson.model.Cause$UserIdCause", "shortDescription": "Started by user admin"}]}],
                "blocked": false,
                "buildable": false,
                "id": id,
                "inQueueSince": now,
                "params": "",
                "stuck": false,
                "task": {"_class": "hudson.model.FreeStyleProject", "name": format!("job-{id}"), "url": format!("{base}/job/job-{id}/"), "color": "notbuilt"},
                "url": format!("queue/item/{id}/"),
                "why": "In the quiet period. Expires in 4.9 sec",
                "timestamp": now + 5000,
            })
        })
        .collect();
    // The build jobs' builds in their quiet period.
    let now_ts = shared.opts.clock.now();
    for item in shared.builds.queue_items() {
        let (job, id, since) = (item.job.clone(), item.queue_id, item.in_queue_since);
        let quiet = shared.builds.job(&job).map_or(0, |j| j.queue_ms);
        let due = since.saturating_add(quiet as i64);
        let left = (due - now_ts.as_millisecond()).max(0) as f64 / 1000.0;
        let short = job.rsplit('/').next().unwrap_or(&job).to_owned();
        let why = if item.state == crate::builds::ItemState::Claiming {
            "Waiting for a build claim".to_owned()
        } else {
            format!("In the quiet period. Expires in {left:.1} sec")
        };
        items.push(json!({
            "_class": "hudson.model.Queue$WaitingItem",
            "actions": [{"_class": "hudson.model.CauseAction", "causes": [crate::builds::cause_json(&shared.builds.job(&job).map_or_else(|| "user:admin".to_owned(), |j| j.trigger().to_owned()))]}],
            "blocked": false,
            "buildable": false,
            "id": id,
            "inQueueSince": since,
            "params": "",
            "stuck": false,
            "task": {"_class": "org.jenkinsci.plugins.workflow.job.WorkflowJob", "name": short, "url": crate::job_pages::job_url(base, &job), "color": crate::builds::color(&shared.builds.builds_of(&job))},
            "url": format!("queue/item/{id}/"),
            "why": why,
            "timestamp": due,
        }));
    }
    json!({"_class": "hudson.model.Queue", "discoverableItems": [], "items": items})
}

fn computer_json(shared: &Shared) -> Value {
    let (_, total) = mode_and_executors(shared);
    // The switch, plus the build jobs' running builds (each holds an executor in its `node`).
    let busy = (shared.state().busy_executors as usize + shared.builds.running()).min(total as usize) as u32;
    let executors: Vec<Value> = (0..total).map(|_| json!({})).collect();
    json!({
        "_class": "hudson.model.ComputerSet",
        "busyExecutors": busy,
        "computer": [{
            "_class": "hudson.model.Hudson$MasterComputer",
            "actions": [],
            "assignedLabels": [{"name": "built-in"}],
            "description": "the Jenkins controller's built-in node",
            "displayName": "Built-In Node",
            "executors": executors,
            "icon": "symbol-computer",
            "idle": busy == 0,
            "jnlpAgent": false,
            "launchSupported": true,
            "manualLaunchAllowed": true,
            "monitorData": {},
            "numExecutors": total,
            "offline": false,
            "offlineCause": null,
            "offlineCauseReason": "",
            "oneOffExecutors": [],
            "temporarilyOffline": false,
        }],
        "displayName": "Nodes",
        "totalExecutors": total,
    })
}

fn casc_check(shared: &Shared, body: &[u8]) -> Resp {
    shared.state().checks += 1;
    let text = String::from_utf8_lossy(body);
    let result = casc::parse(&text).and_then(|cfg| casc::check_roots(&cfg, &current_known_roots(shared)));
    match result {
        Ok(()) => json_response(StatusCode::OK, "application/json;charset=utf-8", &json!([])),
        Err(e) => json_response(
            StatusCode::BAD_REQUEST,
            "application/json;charset=utf-8",
            &json!([{"line": -1, "message": e.message}]),
        ),
    }
}

fn casc_reload(shared: &Shared, base: &str) -> Resp {
    let known = current_known_roots(shared);
    let loaded = match &shared.opts.casc_config {
        Some(path) => casc::load(path, &known).map(Some),
        // No CASC_JENKINS_CONFIG: nothing to read, nothing changes.
        None => Ok(None),
    };
    match loaded {
        Ok(cfg) => {
            let mut st = shared.state();
            if let Some(cfg) = cfg {
                st.live = cfg;
            }
            st.reloads.push(Reload { ok: true, message: None });
            redirect(&format!("{base}/configuration-as-code/"))
        }
        Err(e) => {
            tracing::warn!(error = %e.message, "Failed to reload configuration");
            shared.state().reloads.push(Reload { ok: false, message: Some(e.message.clone()) });
            reload_error_page(&e)
        }
    }
}

fn casc_export(shared: &Shared) -> Resp {
    let (mode, executors) = mode_and_executors(shared);
    let mut out = json!({
        "jenkins": {"mode": mode, "numExecutors": executors, "quietPeriod": 5, "scmCheckoutRetryCount": 0, "disableRememberMe": false},
        "unclassified": {"location": {"adminAddress": "address not configured yet <nobody@nowhere>"}},
    });
    casc::overlay(&mut out, &Value::Object(shared.state().live.clone()));
    let yaml = serde_saphyr::to_string(&out).unwrap_or_default();
    let mut rsp = Response::new(Full::new(Bytes::from(yaml)));
    rsp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/x-yaml; charset=utf-8"));
    rsp.headers_mut()
        .insert(http::header::CONTENT_DISPOSITION, HeaderValue::from_static("attachment; filename=jenkins.yaml"));
    rsp
}

fn reload_error_page(e: &CascError) -> Resp {
    let body = format!(
        "<div id=\"main-panel\"><h1>Error loading configuration</h1><p>{}<pre><code>{}</code></pre></p></div>",
        escape(&e.error_message),
        escape(&e.target)
    );
    html(StatusCode::OK, "Error loading configuration [Jenkins]", &body)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The Varroa plugin's trigger inventory (docs/varroa/plugin-protocol.md, "Trigger inventory"):
/// every build job with a schedule, by name.
pub(crate) fn inventory_json(shared: &Shared) -> Value {
    let jobs: Vec<Value> = shared
        .builds
        .jobs()
        .iter()
        .filter(|j| !j.schedules.is_empty())
        .map(|j| json!({"job": j.name, "schedules": j.schedules}))
        .collect();
    json!({"v": 1, "jobs": jobs})
}

pub(crate) fn api_json(v: Value) -> Resp {
    json_response(StatusCode::OK, "application/json;charset=utf-8", &v)
}

pub(crate) fn json_response(status: StatusCode, content_type: &'static str, v: &Value) -> Resp {
    let mut rsp = Response::new(Full::new(Bytes::from(v.to_string())));
    *rsp.status_mut() = status;
    rsp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    rsp
}

pub(crate) fn html(status: StatusCode, title: &str, body: &str) -> Resp {
    let page = format!("<!DOCTYPE html><html><head><title>{}</title></head><body>{body}</body></html>", escape(title));
    let mut rsp = Response::new(Full::new(Bytes::from(page)));
    *rsp.status_mut() = status;
    rsp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/html;charset=utf-8"));
    rsp
}

fn redirect(location: &str) -> Resp {
    let mut rsp = Response::new(Full::new(Bytes::new()));
    *rsp.status_mut() = StatusCode::FOUND;
    if let Ok(v) = HeaderValue::from_str(location) {
        rsp.headers_mut().insert(http::header::LOCATION, v);
    }
    rsp
}

/// Jetty's error page for `sendError(status, message)`.
fn jetty_error(status: StatusCode, message: &str) -> Resp {
    let m = escape(message);
    let body = format!(
        "<h2>HTTP ERROR {code} {m}</h2><table><tr><th>URI:</th><td></td></tr><tr><th>STATUS:</th><td>{code}</td></tr>\
         <tr><th>MESSAGE:</th><td>{m}</td></tr></table>",
        code = status.as_u16()
    );
    html(status, &format!("Error {} {}", status.as_u16(), message), &body)
}

fn unauthorized() -> Resp {
    let mut rsp = jetty_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    rsp.headers_mut().insert(http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"Jenkins\""));
    rsp
}

fn authentication_required(path: &str) -> Resp {
    let from = form_urlencoded::byte_serialize(path.as_bytes()).collect::<String>();
    let body = format!(
        "<meta http-equiv='refresh' content='1;url=/login?from={from}'/><script>window.location.replace('/login?from={from}');</script>\
         Authentication required\n<!--\n-->"
    );
    let mut rsp = html(StatusCode::FORBIDDEN, "Authentication required", &body);
    let h = rsp.headers_mut();
    h.insert("X-You-Are-Authenticated-As", HeaderValue::from_static("anonymous"));
    h.insert("X-You-Are-In-Group-Disabled", HeaderValue::from_static("JENKINS-39402: use -Dhudson.security.AccessDeniedException2.REPORT_GROUP_HEADERS=true or use /whoAmI to diagnose"));
    h.insert("X-Required-Permission", HeaderValue::from_static("hudson.model.Hudson.Read"));
    h.insert("X-Permission-Implied-By", HeaderValue::from_static("hudson.model.Hudson.Administer"));
    rsp
}

/// Jenkins' "Oops!" page for an unexpected exception.
fn oops() -> Resp {
    html(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Jenkins [Jenkins]",
        "<h1>Oops!</h1><p>A problem occurred while processing the request.</p>",
    )
}

async fn admin_endpoint(shared: &Shared, path: String, req: Request<Incoming>) -> Resp {
    let method = req.method().clone();
    let query = query_pairs(req.uri().query());
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return admin_error(StatusCode::PAYLOAD_TOO_LARGE, "body too large"),
    };
    let parse_json = |b: &[u8]| serde_json::from_slice::<Value>(b).map_err(|e| format!("the body is not JSON: {e}"));
    match (method.as_str(), path.as_str()) {
        ("GET", "state") => {
            let st = shared.state();
            json_response(
                StatusCode::OK,
                "application/json",
                &json!({
                    "version": st.version,
                    "quietingDown": st.quieting_down,
                    "queueLength": st.queue_length,
                    "busyExecutors": st.busy_executors,
                    "faults": st.faults,
                    "live": st.live,
                    "reloads": st.reloads,
                    "checks": st.checks,
                }),
            )
        }
        ("POST", "faults") => {
            let v = match parse_json(&body) {
                Ok(v) => v,
                Err(e) => return admin_error(StatusCode::BAD_REQUEST, &e),
            };
            let mut st = shared.state();
            if let Some(d) = v.get("delayMs").and_then(Value::as_u64) {
                st.faults.delay_ms = d;
            }
            if let Some(f) = v.get("fail500").and_then(Value::as_bool) {
                st.faults.fail500 = f;
            }
            if let Some(f) = v.get("noInventory").and_then(Value::as_bool) {
                st.faults.no_inventory = f;
            }
            json_response(StatusCode::OK, "application/json", &json!(st.faults))
        }
        ("POST", "refuse") => {
            let Some(secs) = query.iter().find(|(k, _)| k == "seconds").and_then(|(_, v)| v.parse::<f64>().ok()) else {
                return admin_error(
                    StatusCode::BAD_REQUEST,
                    "refuse needs ?seconds=N: nothing can switch it back over HTTP while the listener is closed",
                );
            };
            if !(secs > 0.0 && secs <= 3600.0) {
                return admin_error(StatusCode::BAD_REQUEST, "seconds must be in (0, 3600]");
            }
            let accepting = shared.accepting.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                accepting.send_replace(false);
                tokio::time::sleep(Duration::from_secs_f64(secs)).await;
                accepting.send_replace(true);
            });
            json_response(StatusCode::ACCEPTED, "application/json", &json!({"refusingForSeconds": secs}))
        }
        ("POST", "drift") => {
            let patch = match casc::parse(&String::from_utf8_lossy(&body)) {
                Ok(p) => p,
                Err(e) => return admin_error(StatusCode::BAD_REQUEST, &e.message),
            };
            let mut st = shared.state();
            let mut live = Value::Object(std::mem::take(&mut st.live));
            casc::overlay(&mut live, &Value::Object(patch));
            st.live = match live {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            json_response(StatusCode::OK, "application/json", &Value::Object(st.live.clone()))
        }
        ("POST", "jenkins") => {
            let v = match parse_json(&body) {
                Ok(v) => v,
                Err(e) => return admin_error(StatusCode::BAD_REQUEST, &e),
            };
            let plugins = match v.get("plugins") {
                Some(p) => match serde_json::from_value::<Vec<Plugin>>(p.clone()) {
                    Ok(p) => Some(p),
                    Err(e) => return admin_error(StatusCode::BAD_REQUEST, &format!("plugins: {e}")),
                },
                None => None,
            };
            let mut st = shared.state();
            if let Some(s) = v.get("version").and_then(Value::as_str) {
                st.version = s.into();
            }
            if let Some(n) = v.get("queueLength").and_then(Value::as_u64) {
                st.queue_length = n as u32;
            }
            if let Some(n) = v.get("busyExecutors").and_then(Value::as_u64) {
                st.busy_executors = n as u32;
            }
            if let Some(q) = v.get("quietingDown").and_then(Value::as_bool) {
                st.quieting_down = q;
            }
            if plugins.is_some() {
                st.plugins = plugins;
            }
            json_response(StatusCode::OK, "application/json", &json!({"ok": true}))
        }
        ("POST", "builds") => run_builds(shared, &body).await,
        // The jobs file's format (YAML or JSON): adds jobs, or replaces those of the same name.
        ("PUT", "jobs") => {
            let text = String::from_utf8_lossy(&body);
            match crate::builds::parse_jobs(&text).and_then(|jobs| {
                let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
                shared.builds.define(jobs).map(|()| names)
            }) {
                Ok(names) => json_response(StatusCode::OK, "application/json", &json!({"jobs": names})),
                Err(e) => admin_error(StatusCode::BAD_REQUEST, &e.to_string()),
            }
        }
        ("GET", "plugin") => {
            let Some(plugin) = shared.builds.plugin() else {
                return json_response(StatusCode::OK, "application/json", &json!({"enabled": false}));
            };
            let mut v = serde_json::to_value(plugin.counters()).unwrap_or_default();
            v["enabled"] = true.into();
            v["url"] = plugin.config().url.clone().into();
            v["tokenFile"] = plugin.config().token_file.display().to_string().into();
            let (refused, dropped) = shared.builds.refused_and_dropped();
            v["claims"] = match &shared.claims {
                Some(c) => {
                    let mut c = serde_json::to_value(c.counters()).unwrap_or_default();
                    c["enabled"] = true.into();
                    c["itemsRefused"] = refused.into();
                    c["itemsDropped"] = dropped.into();
                    c
                }
                None => json!({"enabled": false}),
            };
            v["artifacts"] = match shared.builds.artifacts() {
                Some(a) => serde_json::to_value(a.counters()).unwrap_or_default(),
                None => json!({"enabled": false}),
            };
            v["logs"] = match shared.builds.logs() {
                Some(l) => {
                    let mut l = serde_json::to_value(l.counters()).unwrap_or_default();
                    l["enabled"] = true.into();
                    l
                }
                None => json!({"enabled": false}),
            };
            json_response(StatusCode::OK, "application/json", &v)
        }
        ("GET", "items") => {
            let job = query.iter().find(|(k, _)| k == "job").map(|(_, v)| v.as_str());
            let items = shared.builds.queue_items_of(job);
            let (refused, dropped) = shared.builds.refused_and_dropped();
            json_response(
                StatusCode::OK,
                "application/json",
                &json!({"items": items, "refused": refused, "dropped": dropped}),
            )
        }
        _ => admin_error(StatusCode::NOT_FOUND, &format!("no admin endpoint {method} /__double/{path}")),
    }
}

/// The most builds one `POST /__double/builds` runs.
const MAX_BUILDS_PER_REQUEST: u64 = 10_000;

/// `POST /__double/builds {"job": "app", "count": 10, "trigger": "timer:batch-7", "triggers":
/// [...], "wait": false}`.
async fn run_builds(shared: &Shared, body: &[u8]) -> Resp {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Ask {
        job: String,
        #[serde(default)]
        count: Option<u64>,
        #[serde(default)]
        trigger: Option<String>,
        #[serde(default)]
        triggers: Option<Vec<String>>,
        #[serde(default)]
        wait: bool,
    }
    const SHAPE: &str = "expected {\"job\": \"<name>\", \"count\": n, \"trigger\": \"<prefix>\" or \"triggers\": [..], \"wait\": false}";
    let ask: Ask = match serde_json::from_slice(body) {
        Ok(a) => a,
        Err(e) => return admin_error(StatusCode::BAD_REQUEST, &format!("{e}; {SHAPE}")),
    };
    let triggers: Vec<Option<String>> = match (&ask.trigger, &ask.triggers) {
        (Some(_), Some(_)) => {
            return admin_error(StatusCode::BAD_REQUEST, "trigger, triggers: give one (a prefix, or the list)");
        }
        (_, Some(list)) => {
            if ask.count.is_some_and(|c| c != list.len() as u64) {
                return admin_error(StatusCode::BAD_REQUEST, "count: must be the length of triggers (or left out)");
            }
            list.iter().cloned().map(Some).collect()
        }
        (prefix, None) => {
            let count = ask.count.unwrap_or(1);
            if count == 0 || count > MAX_BUILDS_PER_REQUEST {
                return admin_error(StatusCode::BAD_REQUEST, &format!("count: must be 1 to {MAX_BUILDS_PER_REQUEST}"));
            }
            (1..=count).map(|n| prefix.as_ref().map(|p| format!("{p}:{n}"))).collect()
        }
    };
    if triggers.is_empty() || triggers.len() as u64 > MAX_BUILDS_PER_REQUEST {
        return admin_error(StatusCode::BAD_REQUEST, &format!("triggers: must be 1 to {MAX_BUILDS_PER_REQUEST}"));
    }
    if let Some(bad) = triggers.iter().flatten().find(|t| {
        t.is_empty() || t.chars().count() > varroa_link::claims::MAX_TRIGGER || t.chars().any(char::is_control)
    }) {
        return admin_error(
            StatusCode::BAD_REQUEST,
            &format!(
                "trigger {bad:?}: must be 1 to {} characters without control characters",
                varroa_link::claims::MAX_TRIGGER
            ),
        );
    }
    let (ids, all) = match shared.builds.queue_builds(&ask.job, triggers).await {
        Ok(x) => x,
        Err(e @ crate::builds::BuildsError::NoSuchJob { .. }) => {
            return admin_error(StatusCode::NOT_FOUND, &e.to_string());
        }
        Err(e @ crate::builds::BuildsError::Trigger { .. }) => {
            return admin_error(StatusCode::BAD_REQUEST, &e.to_string());
        }
        Err(e) => return admin_error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    shared.builds.wait_decided(&ids).await;
    if ask.wait {
        let _ = all.await;
    }
    let items: Vec<crate::builds::QueueItem> = ids.iter().filter_map(|id| shared.builds.queue_item(*id)).collect();
    let numbers: Vec<u64> = items.iter().filter_map(|i| i.build).collect();
    let count = |s: crate::builds::ItemState| items.iter().filter(|i| i.state == s).count();
    let mut v = json!({
        "job": ask.job,
        "builds": numbers,
        "refused": count(crate::builds::ItemState::Refused),
        "dropped": count(crate::builds::ItemState::Dropped),
        "items": items,
    });
    if ask.wait {
        let results: Vec<Value> = numbers
            .iter()
            .map(|n| {
                shared
                    .builds
                    .build(&ask.job, *n)
                    .and_then(|b| b.result)
                    .map(|r| Value::from(r.as_str()))
                    .unwrap_or(Value::Null)
            })
            .collect();
        v["results"] = results.into();
    }
    json_response(StatusCode::OK, "application/json", &v)
}

fn admin_error(status: StatusCode, message: &str) -> Resp {
    json_response(status, "application/json", &json!({"error": message}))
}
