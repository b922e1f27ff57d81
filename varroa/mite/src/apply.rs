//! Applying a desired configuration the way JCasC expects.
//!
//! The desired configuration ({digest, files}) comes from the operator through the gateway. The
//! steps, and why each is there:
//!
//! 1. **Same digest again?** If this digest is the last one applied, export the live
//!    configuration and compare: no drift means nothing to do (no check, no reload, no write), so
//!    a reconnect that resends the current entry does not apply it twice. Drift means Jenkins
//!    moved away from it (someone clicked in the UI), and it is applied again.
//! 2. **Write the files** into the configuration directory that `CASC_JENKINS_CONFIG` names,
//!    each atomically (a hidden temporary file in the same directory, fsync, rename, fsync of the
//!    directory), and remove the YAML files of the directory the desired configuration no longer
//!    has (JCasC reads every `*.yaml` there). The files on disk before this step are the last
//!    good configuration: the one Jenkins runs and boots with.
//! 3. **Check** each file with `POST /configuration-as-code/check`. A refusal (400) puts the last
//!    good files back and reports Jenkins' own message; Jenkins never saw the new files. Warnings
//!    (200 with entries) do not stop the apply; they are appended to the result's message.
//! 4. **Reload** with `POST /configuration-as-code/reload`. A refusal (JCasC's "Error loading
//!    configuration" page) also puts the last good files back; Jenkins stays on its last good
//!    configuration, as JCasC leaves it.
//! 5. **Export** with `POST /configuration-as-code/export` and compare with what was asked,
//!    semantically (YAML parsed, not text): every path of the desired configuration whose value
//!    differs in the export, or is missing from it, is *drift*. Paths the export has and the
//!    desired configuration does not are Jenkins' defaults, not drift. Values containing `${`
//!    are skipped (JCasC resolves variables and exports the result, and exports secrets
//!    encrypted). Scalars compare by their text (`2` equals `"2"`), sequences element by element.
//!
//! The last applied digest lives in memory ([`ApplyState`]); a restarted mite applies the current
//! configuration once more, which is harmless (JCasC is idempotent) and re-establishes the state.

use crate::jenkins::{JenkinsClient, JenkinsError, ReloadOutcome};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the operator wants Jenkins to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredConfig {
    /// Identifies the content (the operator's digest of the rendered files).
    pub digest: String,
    /// File name (in the configuration directory) -> YAML content.
    pub files: BTreeMap<String, String>,
}

/// The outcome of one apply, as the mite reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyResult {
    /// Jenkins runs the desired configuration (possibly with drift, listed below).
    pub succeeded: bool,
    /// Jenkins' own message on failure; a short note on success.
    pub message: String,
    /// The digest this result is about.
    pub digest: String,
    /// Paths whose live value differs from the desired one (`jenkins.systemMessage`,
    /// `jenkins.nodes[0].name`).
    pub drift: Vec<String>,
    /// False when nothing was done because this digest was already live without drift.
    pub applied: bool,
}

/// Why an apply could not be carried out (as opposed to Jenkins refusing the configuration,
/// which is an [`ApplyResult`] with `succeeded: false`).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Jenkins could not be asked.
    #[error("applying {digest}: {source}")]
    Jenkins {
        /// The digest being applied.
        digest: String,
        /// The cause.
        #[source]
        source: JenkinsError,
    },
    /// The configuration directory could not be written.
    #[error("applying {digest}: {path}: {source} (the JCasC directory must be writable by the mite)")]
    Io {
        /// The digest being applied.
        digest: String,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl ApplyError {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ApplyError::Jenkins { source, .. } => source.metric_label(),
            ApplyError::Io { .. } => "io",
        }
    }
}

/// What the applier remembers between applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyState {
    /// The digest last made live by a reload.
    pub last_applied: Option<String>,
    /// Its files.
    pub last_files: BTreeMap<String, String>,
}

/// Applies desired configurations to one Jenkins.
pub struct Applier {
    client: Arc<JenkinsClient>,
    config_dir: PathBuf,
    state: ApplyState,
}

impl Applier {
    /// An applier writing into `config_dir` (the directory `CASC_JENKINS_CONFIG` points at, or
    /// the directory of the file it points at).
    pub fn new(client: Arc<JenkinsClient>, config_dir: impl Into<PathBuf>) -> Self {
        Applier { client, config_dir: config_dir.into(), state: ApplyState::default() }
    }

    /// Starts from a remembered state (e.g. kept by the caller across reconnects).
    pub fn with_state(mut self, state: ApplyState) -> Self {
        self.state = state;
        self
    }

    /// The remembered state.
    pub fn state(&self) -> &ApplyState {
        &self.state
    }

    /// Where Jenkins' live configuration differs from `desired` now (export and compare), without
    /// applying anything.
    pub async fn check_drift(&self, desired: &DesiredConfig) -> Result<Vec<String>, ApplyError> {
        self.drift(desired).await.map_err(|source| ApplyError::Jenkins { digest: desired.digest.clone(), source })
    }

    /// Applies `desired` (see the module docs for the steps).
    pub async fn apply(&mut self, desired: &DesiredConfig) -> Result<ApplyResult, ApplyError> {
        let digest = desired.digest.clone();
        let jenkins = |source| ApplyError::Jenkins { digest: digest.clone(), source };
        let result = |succeeded, message: String, drift, applied| ApplyResult {
            succeeded,
            message,
            digest: digest.clone(),
            drift,
            applied,
        };
        if desired.files.is_empty() {
            let message = "the desired configuration has no files: refusing to remove Jenkins' whole configuration";
            return Ok(result(false, message.into(), Vec::new(), false));
        }
        if let Some(problem) =
            desired.files.keys().find_map(|n| bad_file_name(n).map(|why| format!("file name {n:?}: {why}")))
        {
            return Ok(result(false, problem, Vec::new(), false));
        }

        if self.state.last_applied.as_deref() == Some(digest.as_str()) {
            let drift = self.drift(desired).await.map_err(jenkins)?;
            if drift.is_empty() {
                return Ok(result(true, "already applied; Jenkins has not drifted".into(), Vec::new(), false));
            }
            tracing::info!(%digest, ?drift, "Jenkins drifted from the applied configuration; applying it again");
        }

        let previous = read_yaml_files(&self.config_dir).map_err(|(path, source)| ApplyError::Io {
            digest: digest.clone(),
            path,
            source,
        })?;
        self.write_files(&desired.files, &digest)?;

        let mut problems = Vec::new();
        let mut warnings = Vec::new();
        for (name, content) in &desired.files {
            let report = match self.client.casc_check(content).await {
                Ok(r) => r,
                Err(e) => {
                    self.restore(&previous, &digest);
                    return Err(jenkins(e));
                }
            };
            let into = if report.accepted { &mut warnings } else { &mut problems };
            for p in report.problems {
                into.push(if desired.files.len() > 1 { format!("{name}: {}", p.message) } else { p.message });
            }
        }
        if !problems.is_empty() {
            self.restore(&previous, &digest);
            return Ok(result(false, problems.join("\n"), Vec::new(), false));
        }

        match self.client.casc_reload().await {
            Ok(ReloadOutcome::Applied) => {}
            Ok(ReloadOutcome::Refused(message)) => {
                self.restore(&previous, &digest);
                return Ok(result(false, message, Vec::new(), false));
            }
            Err(e) => {
                self.restore(&previous, &digest);
                return Err(jenkins(e));
            }
        }
        self.state = ApplyState { last_applied: Some(digest.clone()), last_files: desired.files.clone() };

        let drift = self.drift(desired).await.map_err(jenkins)?;
        let mut message = if drift.is_empty() {
            "applied".to_string()
        } else {
            format!("applied, but Jenkins' live configuration differs at {}", drift.join(", "))
        };
        if !warnings.is_empty() {
            message.push_str(&format!("; JCasC warned: {}", warnings.join("; ")));
        }
        Ok(result(true, message, drift, true))
    }

    /// The paths where Jenkins' export differs from `desired`.
    async fn drift(&self, desired: &DesiredConfig) -> Result<Vec<String>, JenkinsError> {
        let exported = self.client.casc_export().await?;
        let live: Value = serde_saphyr::from_str(&exported).map_err(|e| JenkinsError::Decode {
            url: format!("{}/configuration-as-code/export", self.client.config().url),
            detail: format!("the export is not YAML: {e}"),
        })?;
        Ok(drift(&expected(desired), &live))
    }

    fn write_files(&self, files: &BTreeMap<String, String>, digest: &str) -> Result<(), ApplyError> {
        let io = |path: PathBuf| move |source| ApplyError::Io { digest: digest.to_string(), path, source };
        for (name, content) in files {
            write_atomic(&self.config_dir, name, content.as_bytes()).map_err(io(self.config_dir.join(name)))?;
        }
        let present = read_yaml_files(&self.config_dir).map_err(|(path, source)| io(path)(source))?;
        for name in present.keys().filter(|n| !files.contains_key(*n)) {
            let path = self.config_dir.join(name);
            std::fs::remove_file(&path).map_err(io(path.clone()))?;
        }
        sync_dir(&self.config_dir).map_err(io(self.config_dir.clone()))
    }

    /// Puts the last good files back (best effort: a failure is logged, the apply's own outcome
    /// is what gets reported).
    fn restore(&self, previous: &BTreeMap<String, String>, digest: &str) {
        if let Err(e) = self.write_files(previous, digest) {
            tracing::error!(error = %e, "could not put the last good configuration files back");
        }
    }
}

/// Seeds the JCasC directory Jenkins boots from with the configuration it is to boot with (the
/// `casc-init` step: the Controller's ConfigMap, mounted read-only, is copied into the writable
/// directory the mite applies to). Afterwards the directory holds exactly the YAML files of
/// `sources` (by file name; other YAML files there are removed, since JCasC would read them too),
/// each written atomically. Returns the names written.
pub fn seed(sources: &[PathBuf], dir: &Path) -> Result<Vec<String>, String> {
    let mut files = BTreeMap::new();
    for src in sources {
        let name = src
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("--from {}: not a file name", src.display()))?
            .to_string();
        if let Some(why) = bad_file_name(&name) {
            return Err(format!("--from {}: the file name {why}", src.display()));
        }
        let content =
            std::fs::read_to_string(src).map_err(|e| format!("--from {}: cannot read: {e}", src.display()))?;
        files.insert(name, content);
    }
    if files.is_empty() {
        return Err("nothing to seed: give at least one --from FILE (the ConfigMap's jenkins.yaml)".into());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("--to {}: cannot create: {e}", dir.display()))?;
    for (name, content) in &files {
        write_atomic(dir, name, content.as_bytes())
            .map_err(|e| format!("writing {}: {e}", dir.join(name).display()))?;
    }
    let present = read_yaml_files(dir).map_err(|(p, e)| format!("reading {}: {e}", p.display()))?;
    for name in present.keys().filter(|n| !files.contains_key(*n)) {
        let path = dir.join(name);
        std::fs::remove_file(&path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    }
    sync_dir(dir).map_err(|e| format!("syncing {}: {e}", dir.display()))?;
    Ok(files.into_keys().collect())
}

/// Why a file name is refused: it must be a plain YAML file name in the directory.
fn bad_file_name(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
        return Some("must be a file name without directories");
    }
    if name.starts_with('.') {
        return Some("must not be hidden (JCasC skips hidden files)");
    }
    if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
        return Some("must end in .yaml or .yml (JCasC reads only those)");
    }
    None
}

/// The YAML files (non-hidden `*.yaml`/`*.yml`) at the top of `dir`.
fn read_yaml_files(dir: &Path) -> Result<BTreeMap<String, String>, (PathBuf, std::io::Error)> {
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| (dir.to_path_buf(), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| (dir.to_path_buf(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if bad_file_name(&name).is_some() || !entry.path().is_file() {
            continue;
        }
        let content = std::fs::read_to_string(entry.path()).map_err(|e| (entry.path(), e))?;
        out.insert(name, content);
    }
    Ok(out)
}

/// Writes `dir/name` atomically: a hidden temporary file in `dir`, fsync, rename over the target.
pub fn write_atomic(dir: &Path, name: &str, content: &[u8]) -> std::io::Result<()> {
    let mut tmp = tempfile::Builder::new().prefix(".varroa-").suffix(".tmp").tempfile_in(dir)?;
    tmp.write_all(content)?;
    tmp.as_file().sync_all()?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    Ok(())
}

/// fsyncs a directory so renames and removals in it survive a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The desired configuration as one YAML value: the files merged in name order as JCasC merges
/// them (mappings key by key, sequences appended, later scalars winning). A file that does not
/// parse contributes nothing (Jenkins' check has refused it already).
fn expected(desired: &DesiredConfig) -> Value {
    let mut out = Value::Object(Default::default());
    for content in desired.files.values() {
        if let Ok(v) = serde_saphyr::from_str::<Value>(content) {
            merge(&mut out, v);
        }
    }
    out
}

fn merge(base: &mut Value, later: Value) {
    match (base, later) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => a.extend(b),
        (a, b) => *a = b,
    }
}

/// The paths of `expected` whose value in `actual` differs or is missing.
pub fn drift(expected: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(expected, Some(actual), String::new(), &mut out);
    out
}

fn walk(expected: &Value, actual: Option<&Value>, path: String, out: &mut Vec<String>) {
    match expected {
        Value::Object(map) => {
            for (k, v) in map {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                walk(v, actual.and_then(|a| a.get(k)), p, out);
            }
        }
        Value::Array(items) => match actual.and_then(Value::as_array) {
            Some(live) if live.len() == items.len() => {
                for (i, (e, a)) in items.iter().zip(live).enumerate() {
                    walk(e, Some(a), format!("{path}[{i}]"), out);
                }
            }
            _ => out.push(path),
        },
        Value::String(s) if s.contains("${") => {}
        Value::Null => {}
        scalar => {
            if actual.and_then(scalar_text) != scalar_text(scalar) {
                out.push(path);
            }
        }
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drift_is_semantic() {
        let want = json!({"jenkins": {"systemMessage": "hi", "numExecutors": 2, "nodes": [{"name": "a"}], "token": "${SECRET}"}});
        let live = json!({"jenkins": {"systemMessage": "hi", "numExecutors": "2", "nodes": [{"name": "a"}], "token": "{AQAAAB...}", "mode": "NORMAL"}});
        assert!(drift(&want, &live).is_empty());
        let live2 = json!({"jenkins": {"systemMessage": "other", "nodes": [{"name": "b"}]}});
        assert_eq!(
            drift(&want, &live2),
            vec!["jenkins.systemMessage", "jenkins.numExecutors", "jenkins.nodes[0].name"]
        );
        let live3 = json!({"jenkins": {"systemMessage": "hi", "numExecutors": 2, "nodes": []}});
        assert_eq!(drift(&want, &live3), vec!["jenkins.nodes"]);
    }

    #[test]
    fn seeding_leaves_exactly_the_boot_configuration() {
        let src = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let boot = src.path().join("jenkins.yaml");
        std::fs::write(&boot, "jenkins: {systemMessage: boot}\n").unwrap();
        std::fs::write(dir.path().join("jenkins.yaml"), "jenkins: {systemMessage: applied}\n").unwrap();
        std::fs::write(dir.path().join("stale.yaml"), "jenkins: {}\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "kept").unwrap();
        assert_eq!(seed(std::slice::from_ref(&boot), dir.path()).unwrap(), vec!["jenkins.yaml"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("jenkins.yaml")).unwrap(),
            "jenkins: {systemMessage: boot}\n"
        );
        assert!(!dir.path().join("stale.yaml").exists(), "JCasC would read a leftover YAML file");
        assert!(dir.path().join("notes.txt").exists());
        let e = seed(&[src.path().join("missing.yaml")], dir.path()).unwrap_err();
        assert!(e.contains("--from") && e.contains("missing.yaml"), "{e}");
        let e = seed(&[], dir.path()).unwrap_err();
        assert!(e.contains("--from FILE"), "{e}");
    }

    #[test]
    fn file_names_are_plain_yaml_names() {
        assert!(bad_file_name("jenkins.yaml").is_none());
        assert!(bad_file_name("10-security.yml").is_none());
        for bad in ["../x.yaml", "a/b.yaml", ".hidden.yaml", "plugins.txt", ""] {
            assert!(bad_file_name(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn atomic_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "jenkins.yaml", b"jenkins: {}\n").unwrap();
        write_atomic(dir.path(), "jenkins.yaml", b"jenkins: {systemMessage: x}\n").unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec!["jenkins.yaml"]);
        assert_eq!(std::fs::read_to_string(dir.path().join("jenkins.yaml")).unwrap(), "jenkins: {systemMessage: x}\n");
    }
}
