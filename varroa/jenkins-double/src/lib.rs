//! A stand-in for Jenkins in tests and the demo: the documented HTTP endpoints the mite uses, with
//! Jenkins' status codes, headers and payloads, and fault switches.
//!
//! Jenkins and its Java plugin cannot run on our machines, so the mite is tested against this
//! double, and in devcluster's process runtime the `jenkins` container runs its binary. It plays
//! exactly what the mite uses and nothing else; where it differs from Jenkins it says so below.
//!
//! # Endpoints, and the Jenkins source each follows
//!
//! Files are in jenkinsci/jenkins (core/src/main/java/) and
//! jenkinsci/configuration-as-code-plugin (plugin/src/main/java/io/jenkins/plugins/casc/), read
//! at the snapshots of August 2026; the remote API is documented at
//! <https://www.jenkins.io/doc/book/using/remote-access-api/>.
//!
//! | endpoint | answer | follows |
//! |---|---|---|
//! | every page | `X-Jenkins: <version>`, `X-Hudson: 1.395`, `X-Jenkins-Session` | `hudson/Functions.java` `advertiseHeaders`, `hudson/model/Api.java` |
//! | `GET /api/json` | `hudson.model.Hudson`: `mode`, `numExecutors`, `quietingDown`, `quietDownReason`, `useSecurity`, `useCrumbs`, `jobs[]`, ... | `@Exported` getters of `jenkins/model/Jenkins.java` |
//! | `GET /login` | 200, HTML; anonymous allowed (the StatefulSet's probes) | `jenkins/model/Jenkins.java` `doLogin`/`login.jelly` |
//! | `GET /pluginManager/api/json?depth=1` | `plugins[]`: `shortName`, `longName`, `version`, `active`, `enabled`, `bundled`, `pinned`, `hasUpdate`, `dependencies`, ...; at depth 0 every plugin is `{}` as in Jenkins | `hudson/PluginManager.java`, `hudson/PluginWrapper.java` |
//! | `GET /queue/api/json` | `items[]` (`hudson.model.Queue$WaitingItem`: `id`, `task`, `why`, `inQueueSince`, ...), `discoverableItems` | `hudson/model/Queue.java` |
//! | `GET /computer/api/json` | `busyExecutors`, `totalExecutors`, `computer[]` (the built-in node: `idle`, `offline`, `numExecutors`, `executors`, ...) | `hudson/model/ComputerSet.java`, `hudson/model/Computer.java` |
//! | `GET /crumbIssuer/api/json` | `{_class, crumb, crumbRequestField: "Jenkins-Crumb"}` | `hudson/security/csrf/CrumbIssuer.java`, `DefaultCrumbIssuer.java` |
//! | `POST /quietDown?message=`, `POST /cancelQuietDown` | 302 to the root (`HttpRedirect(".")`), MANAGE | `jenkins/model/Jenkins.java` `doQuietDown`, `doCancelQuietDown` |
//! | `POST /configuration-as-code/check` | body: YAML; 200 `[]` when valid; 400 `[{"line":-1,"message":...}]` with the plugin's message when not (unknown root elements, YAML syntax); ADMINISTER | `ConfigurationAsCode.doCheck`, `invokeWith`, `UnknownConfiguratorException` |
//! | `POST /configuration-as-code/reload` | re-reads `CASC_JENKINS_CONFIG` (files, or directories searched for `*.yml`/`*.yaml`, merged with `errorOnConflict`); success: 302 to `/configuration-as-code/`; failure: **200** with the HTML page "Error loading configuration" (`error.jelly`) and the live configuration unchanged; MANAGE | `ConfigurationAsCode.doReload`, `handleExceptionOnReloading`, `configs` |
//! | `POST /configuration-as-code/export` | the live configuration as YAML, `application/x-yaml; charset=utf-8`, `Content-Disposition: attachment; filename=jenkins.yaml`; SYSTEM_READ | `ConfigurationAsCode.doExport` |
//! | a POST-only URL by GET | 405 "This URL requires POST" | Stapler `@RequirePOST` |
//! | `GET /job/<a>/job/<b>/api/json` | a build job (`WorkflowJob`: `builds[]`, `color`, `lastBuild` and the other permalinks, `nextBuildNumber`, `inQueue`) or a folder (`Folder`: `jobs[]`) | `hudson/model/Job.java`, `AbstractItem.java`, cloudbees-folder `AbstractFolder` |
//! | `GET /job/<name>/<n>/api/json` (or `<n>` a permalink: `lastBuild`, `lastSuccessfulBuild`, ...) | `WorkflowRun`: `number`, `result` (null while running), `building`, `inProgress`, `duration` (0 while running), `timestamp`, `estimatedDuration`, `queueId`, `actions` (causes, test results), `previousBuild`, `nextBuild` | `hudson/model/Run.java`, `PermalinkProjectAction.java` |
//! | `GET /job/<name>/<n>/consoleText` | the console so far, `text/plain;charset=UTF-8` | `Run.doConsoleText` |
//! | `POST /job/<name>/build` | 201, `Location: <root>/queue/item/<id>/` | `ParameterizedJobMixIn.doBuild` |
//! | `GET /varroa/inventory` | the Varroa plugin's trigger inventory: `{"v": 1, "jobs": [{"job", "schedules": [{"trigger", "spec", "next"}]}]}`, every build job with `schedules`; 404 with the `noInventory` fault | docs/varroa/plugin-protocol.md, "Trigger inventory" |
//!
//! Build jobs come from [`Options::build_jobs`] (the binary's `--jobs-file`); [`builds`] runs
//! them and, with a plugin URL, sends their events through [`plugin`], the Varroa plugin's side of
//! the localhost protocol (docs/varroa/plugin-protocol.md), their console logs through [`logs`],
//! the files of jobs that declare `artifacts` through [`artifacts`] (presigned uploads straight
//! to the store), and with [`Options::claims`] asks a build claim for every queued build through [`claims`]. Their builds in the quiet period are
//! queue items in `/queue/api/json`, and running builds hold executors in `/computer/api/json`.
//!
//! # Security, as Jenkins with security on
//!
//! - HTTP basic `user:apitoken` (or `user:password`). Wrong credentials: **401** with
//!   `WWW-Authenticate: Basic realm="Jenkins"` (`hudson/security/SecurityRealm.java` gives the
//!   `BasicHeaderProcessor` a Spring `BasicAuthenticationEntryPoint`). No credentials on a page
//!   that needs them: **403** "Authentication required" with `X-You-Are-Authenticated-As:
//!   anonymous` and `X-Required-Permission` (`hudson/security/HudsonAuthenticationEntryPoint.java`).
//! - CSRF: every POST needs a valid crumb in the `Jenkins-Crumb` header, else **403** "No valid
//!   crumb was included in the request" (`hudson/security/csrf/CrumbFilter.java`) — except a
//!   request authenticated by an API token, which `jenkins/security/ApiCrumbExclusion.java`
//!   exempts (JENKINS-22474, Jenkins 2.96 and later). The double is faithful: a token needs no
//!   crumb, a password does.
//! - Deliberate difference: real crumbs are bound to the web session (2.176.2 and later); the
//!   double has no sessions and binds a crumb to the user and a salt that
//!   [`JenkinsDouble::rotate_crumbs`] changes (what a restart or an expired session does).
//! - With neither a token nor a password configured, security is off: everything is allowed to
//!   anonymous, and POSTs still need a crumb (Jenkins keeps CSRF protection on by default).
//!
//! # Fault switches
//!
//! Settable through [`JenkinsDouble`] and over HTTP under `/__double/` (a prefix Jenkins does not
//! have; never delayed, failed or authenticated, and only meant for loopback): a delay per
//! request, 500s on every Jenkins page, refusing connections (the listener is closed and
//! re-opened on the same port), drift by hand (the live configuration changed outside JCasC),
//! queue length, busy executors, quieting down, the version and the plugins.
//!
//! | admin endpoint | does |
//! |---|---|
//! | `GET /__double/state` | JSON: version, queue, executors, quieting down, faults, live configuration, reloads |
//! | `POST /__double/faults` | JSON `{"delayMs": n, "fail500": bool, "noInventory": bool}` (each optional) |
//! | `POST /__double/refuse?seconds=n` | closes the listener for n seconds |
//! | `POST /__double/drift` | YAML body, deep-merged into the live configuration |
//! | `POST /__double/jenkins` | JSON `{"version", "queueLength", "busyExecutors", "quietingDown", "plugins": [{"shortName","version"}]}` (each optional) |
//! | `POST /__double/builds` | JSON `{"job", "count" (1), "trigger" (a prefix: `<trigger>:1`..`:<count>`) or "triggers" ([...]), "wait" (false)}`: queues and runs a build per trigger; once every claim is decided, `{"job", "builds": [numbers], "refused", "dropped", "items": [queue items]}`, with `"results"` when waited for |
//! | `GET /__double/items?job=` | every queue item and its fate (`claiming`, `queued`, `running`, `finished`, `refused`, `dropped`) |
//! | `GET /__double/plugin` | the plugin client's counters (`sent`, `pending`, `rejected`, `dropped`, ...), with `claims` and `logs`, or `{"enabled": false}` without a plugin URL |
//!
//! # The load generator
//!
//! [`load`] (`varroa-jenkins-double load`) runs builds at full speed through the same plugin
//! client against a mite and reports events per second.
//!
//! # A stand-in update site
//!
//! [`update_site`] (`varroa-jenkins-double update-site`) serves what `plugins-init` downloads:
//! stand-in plugin files the double reads as plugins, and `plugin-versions.json` with their
//! digests; `varroa-jenkins-double relock` rewrites a version profile's lock to those digests.

pub mod artifacts;
pub mod builds;
mod casc;
pub mod claims;
mod client;
mod job_pages;
pub mod load;
pub mod logs;
pub mod plugin;
mod plugins;
mod server;
pub mod update_site;

pub use casc::{CORE_ROOTS, CascError, PLUGIN_ROOTS};
pub use plugins::{Plugin, scan_dir as scan_plugins_dir};

use serde_json::{Map, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How to start a double.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// The Jenkins version reported in `X-Jenkins`.
    pub version: String,
    /// The one user.
    pub user: String,
    /// The user's API token (crumb-exempt).
    pub api_token: Option<String>,
    /// A file holding the API token, re-read on every request (rotation needs no restart).
    pub token_file: Option<PathBuf>,
    /// The user's password (POSTs need a crumb).
    pub password: Option<String>,
    /// `CASC_JENKINS_CONFIG`: comma-separated files or directories. Loaded at start (an invalid
    /// configuration fails the start, as it fails Jenkins' boot) and by every reload.
    pub casc_config: Option<String>,
    /// Installed plugins reported when no plugins directory is given.
    pub plugins: Vec<Plugin>,
    /// A plugins directory (`*.jpi`/`*.hpi`) scanned on every plugin manager request.
    pub plugins_dir: Option<PathBuf>,
    /// Executors of the built-in node unless the configuration sets `jenkins.numExecutors`.
    pub num_executors: u32,
    /// Job names listed in `/api/json` (not runnable; see `build_jobs`).
    pub jobs: Vec<String>,
    /// Pipeline jobs the double runs (`POST /__double/builds`, [`JenkinsDouble::run_builds`]),
    /// listed in `/api/json` and served under `/job/...`.
    pub build_jobs: Vec<builds::JobConfig>,
    /// The Varroa plugin's client (`VARROA_PLUGIN_URL`, `VARROA_PLUGIN_TOKEN_FILE`); without it
    /// builds run and send nothing, as in a Jenkins without the plugin.
    pub plugin: Option<plugin::PluginConfig>,
    /// Real time per configured build millisecond: 1 runs builds as long as configured, 0 at once.
    pub time_scale: f64,
    /// Jenkins' clock (build and event times).
    pub clock: Arc<dyn builds::Clock>,
    /// Where build numbers come from (Jenkins' own numbering by default); replaced by the claims
    /// client when `claims` is set.
    pub numbers: Arc<dyn builds::BuildNumbers>,
    /// Build claims (`--claims`): every queued build asks the mite, `POST /v1/claims`, through
    /// the plugin's URL and token file. Needs `plugin`.
    pub claims: Option<ClaimsOptions>,
    /// Console logs: with a plugin URL, every build's console text goes to the mite
    /// (`POST /v1/logs/...`) unless this is `None`. Default: the protocol's settings.
    pub logs: Option<LogsOptions>,
    /// The instance in this double's claim ids (`q-<instance>-<queue id>`); default random.
    pub instance: Option<String>,
    /// Builds kept per job (older finished ones are discarded).
    pub keep_builds: usize,
    /// The most console bytes kept per build.
    pub max_console_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            version: "2.479.3".into(),
            user: "admin".into(),
            api_token: None,
            token_file: None,
            password: None,
            casc_config: None,
            plugins: vec![Plugin::new("configuration-as-code", "1932.v75cb_b_f1b_698d")],
            plugins_dir: None,
            num_executors: 2,
            jobs: Vec::new(),
            build_jobs: Vec::new(),
            plugin: None,
            time_scale: 1.0,
            clock: Arc::new(builds::SystemClock),
            numbers: Arc::new(builds::LocalNumbers),
            claims: None,
            logs: Some(LogsOptions::default()),
            instance: None,
            keep_builds: 100,
            max_console_bytes: 1 << 20,
        }
    }
}

/// How build claims are asked (the URL and token file are the plugin's).
#[derive(Debug, Clone)]
pub struct ClaimsOptions {
    /// `budget_ms` and the request's timeout (5 s).
    pub budget: Duration,
    /// How long a queue item waits for a decision before it is dropped (1 hour).
    pub wait_limit: Duration,
    /// The first back-off (1 s); it doubles to `backoff_max` (30 s).
    pub backoff_initial: Duration,
    /// The longest back-off.
    pub backoff_max: Duration,
}

impl Default for ClaimsOptions {
    fn default() -> Self {
        let c = claims::ClaimsConfig::new("", "");
        ClaimsOptions {
            budget: c.budget,
            wait_limit: c.wait_limit,
            backoff_initial: c.backoff_initial,
            backoff_max: c.backoff_max,
        }
    }
}

/// How console logs are sent (the URL and token file are the plugin's).
#[derive(Debug, Clone)]
pub struct LogsOptions {
    /// A chunk per this much output time (1 s, times `time_scale`: 0 sends at once).
    pub chunk_interval: Duration,
    /// ... or per this many bytes (256 KiB).
    pub chunk_bytes: usize,
    /// Chunks in flight over all builds (4).
    pub max_in_flight: usize,
    /// Unsent bytes held per build (4 MiB) and in all (64 MiB); beyond, the log is cut.
    pub max_unsent_per_build: usize,
    /// See `max_unsent_per_build`.
    pub max_unsent_total: usize,
    /// The first back-off (1 s); it doubles to `backoff_max` (30 s).
    pub backoff_initial: Duration,
    /// The longest back-off.
    pub backoff_max: Duration,
    /// One request's timeout (30 s).
    pub request_timeout: Duration,
}

impl Default for LogsOptions {
    fn default() -> Self {
        let c = logs::LogsConfig::new("", "");
        LogsOptions {
            chunk_interval: c.chunk_interval,
            chunk_bytes: c.chunk_bytes,
            max_in_flight: c.max_in_flight,
            max_unsent_per_build: c.max_unsent_per_build,
            max_unsent_total: c.max_unsent_total,
            backoff_initial: c.backoff_initial,
            backoff_max: c.backoff_max,
            request_timeout: c.request_timeout,
        }
    }
}

/// Why a double did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The plugin's client cannot start (its URL is wrong).
    #[error(transparent)]
    Plugin(#[from] plugin::PluginError),
    /// A build job is invalid.
    #[error(transparent)]
    Jobs(#[from] builds::JobsError),
    /// Build claims need the plugin's URL.
    #[error("build claims (--claims) need the plugin's URL (--plugin-url, VARROA_PLUGIN_URL)")]
    ClaimsWithoutPlugin,
    /// The time scale is not a finite number of at least 0.
    #[error("invalid time scale {0}: must be a finite number >= 0 (1: real time, 0: at once)")]
    TimeScale(f64),
    /// The initial JCasC configuration is invalid (Jenkins would not boot).
    #[error("the configuration in CASC_JENKINS_CONFIG={path} is invalid: {source}")]
    Casc {
        /// The configured sources.
        path: String,
        /// The plugin's message.
        source: CascError,
    },
}

/// One `/configuration-as-code/reload`, as the double saw it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Reload {
    /// The configuration became live.
    pub ok: bool,
    /// The plugin's message when it did not.
    pub message: Option<String>,
}

/// The fault switches.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Faults {
    /// Added before every Jenkins answer.
    pub delay_ms: u64,
    /// Every Jenkins page answers 500.
    pub fail500: bool,
    /// `GET /varroa/inventory` answers 404, as a Jenkins without the Varroa plugin (or with one
    /// older than the trigger inventory).
    pub no_inventory: bool,
}

/// What the double holds; all switches change it.
#[derive(Debug)]
pub(crate) struct State {
    pub version: String,
    pub quieting_down: bool,
    pub quiet_down_reason: Option<String>,
    pub queue_length: u32,
    pub busy_executors: u32,
    pub plugins: Option<Vec<Plugin>>,
    pub live: Map<String, Value>,
    pub faults: Faults,
    pub crumb_salt: u64,
    pub reloads: Vec<Reload>,
    pub checks: u32,
    pub session: String,
}

pub(crate) struct Shared {
    pub opts: Options,
    pub addr: SocketAddr,
    pub state: Mutex<State>,
    /// false while refusing connections.
    pub accepting: tokio::sync::watch::Sender<bool>,
    /// Plugin manifests read from the plugins directory.
    pub manifests: Mutex<plugins::ManifestCache>,
    /// The build jobs and their builds.
    pub builds: Arc<builds::Builds>,
    /// The build claims client, with `--claims`.
    pub claims: Option<Arc<claims::ClaimsClient>>,
}

impl Shared {
    pub fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a handler panicked mid-update; the state is still the best we have.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running double. Dropping it stops the server.
pub struct JenkinsDouble {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for JenkinsDouble {
    fn drop(&mut self) {
        self.task.abort();
        // Running builds end and the plugin's client stops sending, even while a connection
        // still holds the shared state.
        self.shared.builds.stop();
    }
}

impl JenkinsDouble {
    /// Binds, loads the initial configuration and serves on the current tokio runtime.
    pub async fn start(opts: Options) -> Result<JenkinsDouble, StartError> {
        let listener = tokio::net::TcpListener::bind(opts.listen)
            .await
            .map_err(|source| StartError::Listen { addr: opts.listen, source })?;
        let addr = listener.local_addr().map_err(|source| StartError::Listen { addr: opts.listen, source })?;
        let manifests = Mutex::new(plugins::ManifestCache::default());
        let live = match &opts.casc_config {
            Some(path) => casc::load(path, &server::known_roots_for(&opts, None, &manifests))
                .map_err(|source| StartError::Casc { path: path.clone(), source })?,
            None => Map::new(),
        };
        if !(opts.time_scale.is_finite() && opts.time_scale >= 0.0) {
            return Err(StartError::TimeScale(opts.time_scale));
        }
        let mut names = std::collections::BTreeSet::new();
        for j in &opts.build_jobs {
            j.validate()?;
            if !names.insert(j.name.as_str()) {
                return Err(builds::JobsError::Duplicate(j.name.clone()).into());
            }
        }
        let plugin = match &opts.plugin {
            Some(c) => Some(Arc::new(plugin::PluginClient::start(c.clone())?)),
            None => None,
        };
        let claims_client = match (&opts.claims, &opts.plugin) {
            (None, _) => None,
            (Some(_), None) => return Err(StartError::ClaimsWithoutPlugin),
            (Some(c), Some(p)) => Some(claims::ClaimsClient::new(claims::ClaimsConfig {
                url: p.url.clone(),
                token_file: p.token_file.clone(),
                budget: c.budget,
                wait_limit: c.wait_limit,
                backoff_initial: c.backoff_initial,
                backoff_max: c.backoff_max,
            })?),
        };
        let numbers: Arc<dyn builds::BuildNumbers> = match &claims_client {
            Some(c) => c.clone(),
            None => opts.numbers.clone(),
        };
        let logs = match (&opts.logs, &opts.plugin) {
            (Some(l), Some(p)) => Some(Arc::new(logs::LogsClient::new(logs::LogsConfig {
                url: p.url.clone(),
                token_file: p.token_file.clone(),
                chunk_interval: l.chunk_interval.mul_f64(opts.time_scale),
                chunk_bytes: l.chunk_bytes,
                max_chunk: 1 << 20,
                max_in_flight: l.max_in_flight,
                max_unsent_per_build: l.max_unsent_per_build,
                max_unsent_total: l.max_unsent_total,
                request_timeout: l.request_timeout,
                backoff_initial: l.backoff_initial,
                backoff_max: l.backoff_max,
            })?)),
            _ => None,
        };
        let artifacts = match &opts.plugin {
            Some(p) => Some(artifacts::ArtifactsClient::new(artifacts::ArtifactsConfig::new(
                p.url.clone(),
                p.token_file.clone(),
            ))?),
            None => None,
        };
        let builds = builds::Builds::new(builds::BuildsOptions {
            jobs: opts.build_jobs.clone(),
            time_scale: opts.time_scale,
            clock: opts.clock.clone(),
            numbers,
            plugin,
            logs,
            artifacts,
            instance: opts.instance.clone().unwrap_or_else(|| format!("{:08x}", rand_u64() as u32)),
            wait_for_room: false,
            keep_builds: opts.keep_builds,
            max_console_bytes: opts.max_console_bytes,
        });
        let session: u32 = rand_u64() as u32;
        let state = State {
            version: opts.version.clone(),
            quieting_down: false,
            quiet_down_reason: None,
            queue_length: 0,
            busy_executors: 0,
            plugins: None,
            live,
            faults: Faults::default(),
            crumb_salt: rand_u64(),
            reloads: Vec::new(),
            checks: 0,
            session: format!("{session:08x}"),
        };
        let shared = Arc::new(Shared {
            opts,
            addr,
            state: Mutex::new(state),
            accepting: tokio::sync::watch::Sender::new(true),
            manifests,
            builds,
            claims: claims_client,
        });
        let task = tokio::spawn(server::serve(shared.clone(), listener));
        Ok(JenkinsDouble { shared, task })
    }

    /// `http://127.0.0.1:<port>` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Waits until the server task ends (never, unless it panics): what the binary runs.
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }

    /// Delays every Jenkins answer by `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.shared.state().faults.delay_ms = delay.as_millis() as u64;
    }

    /// Every Jenkins page answers 500 while on.
    pub fn set_fail_500(&self, on: bool) {
        self.shared.state().faults.fail500 = on;
    }

    /// `GET /varroa/inventory` answers 404 while on (no plugin, or an older one).
    pub fn set_no_inventory(&self, on: bool) {
        self.shared.state().faults.no_inventory = on;
    }

    /// Closes the listener and drops open connections: connections are refused until
    /// [`JenkinsDouble::accept_connections`].
    pub fn refuse_connections(&self) {
        self.shared.accepting.send_replace(false);
    }

    /// Listens again on the same address.
    pub fn accept_connections(&self) {
        self.shared.accepting.send_replace(true);
    }

    /// Changes the live configuration outside JCasC (someone clicked in the UI): `yaml` is
    /// deep-merged into it.
    pub fn drift(&self, yaml: &str) -> Result<(), CascError> {
        let patch = casc::parse(yaml)?;
        let mut st = self.shared.state();
        let mut live = Value::Object(std::mem::take(&mut st.live));
        casc::overlay(&mut live, &Value::Object(patch));
        st.live = match live {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        Ok(())
    }

    /// Sets the number of queued items.
    pub fn set_queue_length(&self, n: u32) {
        self.shared.state().queue_length = n;
    }

    /// Sets the number of busy executors (capped at the executors there are).
    pub fn set_busy_executors(&self, n: u32) {
        self.shared.state().busy_executors = n;
    }

    /// Sets quieting down, as `/quietDown` and `/cancelQuietDown` do.
    pub fn set_quieting_down(&self, on: bool) {
        let mut st = self.shared.state();
        st.quieting_down = on;
        if !on {
            st.quiet_down_reason = None;
        }
    }

    /// Sets the version reported in `X-Jenkins`.
    pub fn set_version(&self, version: &str) {
        self.shared.state().version = version.into();
    }

    /// Replaces the installed plugins (overrides the plugins directory).
    pub fn set_plugins(&self, plugins: Vec<Plugin>) {
        self.shared.state().plugins = Some(plugins);
    }

    /// Invalidates every crumb handed out so far.
    pub fn rotate_crumbs(&self) {
        self.shared.state().crumb_salt = rand_u64();
    }

    /// Whether Jenkins is quieting down.
    pub fn quieting_down(&self) -> bool {
        self.shared.state().quieting_down
    }

    /// The live configuration (what JCasC last applied, plus drift).
    pub fn live_config(&self) -> Value {
        Value::Object(self.shared.state().live.clone())
    }

    /// Every reload so far, oldest first.
    pub fn reloads(&self) -> Vec<Reload> {
        self.shared.state().reloads.clone()
    }

    /// How many reloads made a configuration live.
    pub fn applied_count(&self) -> usize {
        self.shared.state().reloads.iter().filter(|r| r.ok).count()
    }

    /// How many checks were asked.
    pub fn check_count(&self) -> u32 {
        self.shared.state().checks
    }

    /// Queues `count` builds of a configured job and runs them in the background; their numbers.
    pub async fn run_builds(&self, job: &str, count: usize) -> Result<Vec<u64>, builds::BuildsError> {
        Ok(self.shared.builds.trigger(job, count).await?.0)
    }

    /// The build jobs and their builds (records, console text, waiting for a build to finish).
    pub fn builds(&self) -> &Arc<builds::Builds> {
        &self.shared.builds
    }

    /// The plugin's client, when the double has a plugin URL.
    pub fn plugin(&self) -> Option<&Arc<plugin::PluginClient>> {
        self.shared.builds.plugin()
    }

    /// The plugin's counters, when the double has a plugin URL.
    pub fn plugin_counters(&self) -> Option<plugin::Counters> {
        self.plugin().map(|p| p.counters())
    }

    /// Queues a build of `job` per trigger (`None`: the job's trigger and the queue id) and runs
    /// them; their queue items once every claim is decided (see [`builds::QueueItem`]).
    pub async fn run_triggered(
        &self,
        job: &str,
        triggers: Vec<Option<String>>,
    ) -> Result<Vec<builds::QueueItem>, builds::BuildsError> {
        let b = &self.shared.builds;
        let (ids, _) = b.queue_builds(job, triggers).await?;
        b.wait_decided(&ids).await;
        Ok(ids.iter().filter_map(|id| b.queue_item(*id)).collect())
    }

    /// The claims client's counters, when the double asks build claims.
    pub fn claim_counters(&self) -> Option<claims::ClaimCounters> {
        self.shared.claims.as_ref().map(|c| c.counters())
    }

    /// The artifacts client's counters, when the double has a plugin URL.
    pub fn artifact_counters(&self) -> Option<artifacts::ArtifactCounters> {
        self.shared.builds.artifacts().map(|a| a.counters())
    }

    /// The console log sender's counters, when the double sends logs.
    pub fn log_counters(&self) -> Option<logs::LogCounters> {
        self.shared.builds.logs().map(|l| l.counters())
    }
}

/// 64 random bits (crumb salts, session ids).
pub(crate) fn rand_u64() -> u64 {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 8];
    // The system RNG does not fail on the platforms we run on; a zero salt would still work.
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    u64::from_le_bytes(b)
}
