//! `varroa-mite install-plugins`: the `plugins-init` step of every Jenkins pod.
//!
//! The operator renders a locked plugin list into the controller's ConfigMap and runs this as an
//! init container:
//!
//! ```text
//! varroa-mite install-plugins --plugins /var/jenkins_config/plugins.txt \
//!   --sha256 /var/jenkins_config/plugins-sha256.txt --update-site URL --dest /plugins
//! ```
//!
//! - `plugins.txt`: one `name:version` a line (blank lines and `#` comments ignored). Every plugin
//!   is pinned: there is no "latest" here.
//! - `plugins-sha256.txt`: `<hex>  <name>.hpi` lines, as `sha256sum` writes them: the version
//!   profile's lock.
//! - A plugin the lock does not list (a Controller's pin, a plugin an input needs) is verified
//!   against the digest its update site publishes: `plugin-versions.json`, which lists every
//!   version of every plugin with its `sha256` (base64, as jenkins-infra/update-center2 writes
//!   it), at `<site>/current/plugin-versions.json` on updates.jenkins.io and its mirrors (the
//!   plugin-installation-manager-tool reads the same file, `JENKINS_PLUGIN_INFO`), or where
//!   `--plugin-info` says. It is fetched once, only when some plugin is unlocked, and only the
//!   wanted entries are kept. A plugin neither lists is refused before anything is downloaded,
//!   as is every unlocked one with `--plugin-info none`: an unverified file is never installed.
//! - Download URL: the Jenkins update site layout, `<site>/download/plugins/<name>/<version>/<name>.hpi`
//!   (what updates.jenkins.io serves and the update center generator, jenkins-infra/update-center2,
//!   lays out; the plugin-installation-manager-tool builds the same URL from `JENKINS_UC`).
//!   Redirects are followed, as the public site redirects to mirrors.
//! - Installed name: `<dest>/<name>.jpi`. Jenkins installs plugins as `.jpi` (an `.hpi` is the
//!   archive as published; core renamed installed plugins to `.jpi` so they are not confused with
//!   bundled ones), the official image's `jenkins-support` copies `/usr/share/jenkins/ref/plugins/*.jpi`
//!   into `$JENKINS_HOME/plugins`, and the plugin-installation-manager-tool writes `.jpi` there.
//!   A stale `<name>.hpi` next to it is removed so Jenkins does not see the plugin twice.
//!
//! Every download is bounded in size and time, and retried on transient failures (connection
//! errors, timeouts, 5xx, 429) with capped exponential back-off (honouring `Retry-After` up to the
//! cap). Each file is downloaded to a hidden temporary name in the destination directory and
//! hashed while it streams; only after *every* plugin has been downloaded and verified are they
//! renamed into place, so a failure leaves the destination as it was (no partial file, no half
//! of a new plugin set). A file already in place with the locked digest is kept, not downloaded
//! again. Plugins in the destination that the list no longer names are left alone.

use crate::jenkins::install_crypto_provider;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How to install.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// `plugins.txt`.
    pub plugins_file: PathBuf,
    /// `plugins-sha256.txt`.
    pub sha256_file: PathBuf,
    /// The update site root (`https://updates.jenkins.io`, Varroa's update center).
    pub update_site: String,
    /// Where the digests of plugins the lock does not list come from (the site's
    /// `plugin-versions.json`); `None` refuses every unlocked plugin.
    pub plugin_info: Option<String>,
    /// Where the plugins go.
    pub dest: PathBuf,
    /// The largest plugin accepted.
    pub max_size: u64,
    /// Tries per plugin.
    pub attempts: u32,
    /// The first back-off.
    pub initial_backoff: Duration,
    /// The longest back-off.
    pub max_backoff: Duration,
    /// The most one download may take.
    pub timeout: Duration,
}

impl InstallOptions {
    /// Defaults: 256 MiB per plugin, 5 tries, back-off from 500 ms up to 10 s, 5 minutes per try.
    pub fn new(plugins_file: PathBuf, sha256_file: PathBuf, update_site: &str, dest: PathBuf) -> Self {
        InstallOptions {
            plugins_file,
            sha256_file,
            update_site: update_site.into(),
            plugin_info: Some(default_plugin_info(update_site)),
            dest,
            max_size: 256 << 20,
            attempts: 5,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(10),
            timeout: Duration::from_secs(300),
        }
    }
}

/// A plugin placed in the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Where it is.
    pub path: PathBuf,
    /// False when the file in place already had the locked digest.
    pub downloaded: bool,
}

/// Why the plugins were not installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A lock file is unreadable.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line of a lock file is malformed.
    #[error("{path} line {line}: {detail}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// What is wrong and how to fix it.
        detail: String,
    },
    /// Plugins without a locked digest.
    #[error("refusing to install unverified plugins: {} ha{} no SHA-256 in {file} (add a `<sha256>  <name>.hpi` line for each)", plugins.join(", "), if plugins.len() == 1 { "s" } else { "ve" })]
    MissingSum {
        /// The plugins.
        plugins: Vec<String>,
        /// The sums file.
        file: PathBuf,
    },
    /// Plugins the lock does not list, for which the update site publishes no digest either.
    #[error("refusing to install unverified plugins: {} {} not locked (no line in {file}) and {url} publishes no SHA-256 for {}: add {} to the JenkinsVersionProfile's plugins with its sha256, or pin a version the update site publishes", plugins.join(", "), if plugins.len() == 1 { "is" } else { "are" }, if plugins.len() == 1 { "it" } else { "them" }, if plugins.len() == 1 { "it" } else { "them" })]
    NotPublished {
        /// `name version` of each.
        plugins: Vec<String>,
        /// The sums file.
        file: PathBuf,
        /// The plugin metadata consulted.
        url: String,
    },
    /// The update site's plugin metadata could not be read.
    #[error("reading the update site's plugin metadata {url} (for the unlocked plugins {}): {detail}", plugins.join(", "))]
    PluginInfo {
        /// The metadata URL.
        url: String,
        /// The unlocked plugins it was needed for.
        plugins: Vec<String>,
        /// What went wrong.
        detail: String,
    },
    /// The downloaded file is not the locked one.
    #[error(
        "plugin {plugin} {version}: SHA-256 mismatch: expected {expected}, got {actual} from {url}; nothing was installed"
    )]
    Mismatch {
        /// The plugin.
        plugin: String,
        /// Its version.
        version: String,
        /// Where it came from.
        url: String,
        /// The expected digest and where it came from: `<hex> (locked)`, or `<hex> (published
        /// in <plugin metadata URL>)`.
        expected: String,
        /// The digest of what was downloaded.
        actual: String,
    },
    /// The download failed for good.
    #[error("plugin {plugin} {version}: downloading {url} failed after {attempts} attempt(s): {detail}")]
    Download {
        /// The plugin.
        plugin: String,
        /// Its version.
        version: String,
        /// The URL.
        url: String,
        /// Tries made.
        attempts: u32,
        /// The last failure.
        detail: String,
    },
    /// The file is larger than allowed.
    #[error("plugin {plugin}: {url} is larger than {limit} bytes")]
    TooLarge {
        /// The plugin.
        plugin: String,
        /// The URL.
        url: String,
        /// The limit.
        limit: u64,
    },
    /// The destination could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl InstallError {
    /// A short stable label for metrics and exit reporting.
    pub fn metric_label(&self) -> &'static str {
        match self {
            InstallError::Read { .. } | InstallError::Parse { .. } => "lock",
            InstallError::MissingSum { .. } | InstallError::NotPublished { .. } => "missing_sum",
            InstallError::PluginInfo { .. } => "plugin_info",
            InstallError::Mismatch { .. } => "mismatch",
            InstallError::Download { .. } => "download",
            InstallError::TooLarge { .. } => "too_large",
            InstallError::Io { .. } => "io",
        }
    }
}

/// Parses `plugins.txt`: `name:version` lines.
pub fn parse_plugins(text: &str, path: &Path) -> Result<Vec<(String, String)>, InstallError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let err = |detail: String| InstallError::Parse { path: path.into(), line: i + 1, detail };
        let Some((name, version)) = line.split_once(':') else {
            return Err(err(format!("{line:?} has no version: pin every plugin as name:version")));
        };
        let (name, version) = (name.trim(), version.trim());
        if !valid_name(name) {
            return Err(err(format!("{name:?} is not a plugin name (letters, digits, '-', '_', '.')")));
        }
        if version.is_empty() || version == "latest" || version.contains('/') || version.contains(char::is_whitespace) {
            return Err(err(format!("plugin {name}: {version:?} is not a pinned version")));
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(err(format!("plugin {name} is listed twice")));
        }
        out.push((name.into(), version.into()));
    }
    Ok(out)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Parses `plugins-sha256.txt` (`sha256sum` output): plugin name -> lowercase hex digest.
pub fn parse_sums(text: &str, path: &Path) -> Result<BTreeMap<String, String>, InstallError> {
    let mut out = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |detail: String| InstallError::Parse { path: path.into(), line: i + 1, detail };
        let mut parts = line.split_whitespace();
        let (Some(hex), Some(file), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(err(format!("{line:?} is not `<sha256>  <name>.hpi`")));
        };
        if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(err(format!("{hex:?} is not a SHA-256 (64 hex digits)")));
        }
        let file = file.trim_start_matches('*');
        let Some(name) = file.strip_suffix(".hpi").or_else(|| file.strip_suffix(".jpi")) else {
            return Err(err(format!("{file:?} is not `<name>.hpi`")));
        };
        out.insert(name.to_string(), hex.to_ascii_lowercase());
    }
    Ok(out)
}

/// `<site>/download/plugins/<name>/<version>/<name>.hpi`.
pub fn download_url(site: &str, name: &str, version: &str) -> String {
    format!("{}/download/plugins/{name}/{version}/{name}.hpi", site.trim_end_matches('/'))
}

/// `<site>/current/plugin-versions.json`, where updates.jenkins.io publishes every plugin
/// version with its digest.
pub fn default_plugin_info(site: &str) -> String {
    format!("{}/current/plugin-versions.json", site.trim_end_matches('/'))
}

/// The SHA-256 (lowercase hex) that `plugin-versions.json` publishes for each wanted
/// `(name, version)` it lists: `{"plugins": {"<name>": {"<version>": {"sha256": "<base64>", ...}}}}`.
/// Everything else in the (large) document is skipped, not kept. A digest written as 64 hex
/// digits is accepted too.
pub fn published_digests(json: &[u8], wanted: &[(String, String)]) -> Result<BTreeMap<String, String>, String> {
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
    type Wanted = BTreeMap<String, String>;
    struct Top<'w>(&'w Wanted);
    struct Plugins<'w>(&'w Wanted);
    struct Versions<'w>(&'w str);
    #[derive(serde::Deserialize)]
    struct Entry {
        sha256: Option<String>,
    }
    impl<'de> DeserializeSeed<'de> for Top<'_> {
        type Value = BTreeMap<String, String>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Top<'_> {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object with \"plugins\"")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if key == "plugins" {
                    out = map.next_value_seed(Plugins(self.0))?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(out)
        }
    }
    impl<'de> DeserializeSeed<'de> for Plugins<'_> {
        type Value = BTreeMap<String, String>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Plugins<'_> {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object of plugins by name")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                match self.0.get(&name) {
                    Some(version) => {
                        if let Some(sha) = map.next_value_seed(Versions(version))? {
                            out.insert(name, sha);
                        }
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(out)
        }
    }
    impl<'de> DeserializeSeed<'de> for Versions<'_> {
        type Value = Option<String>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Versions<'_> {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object of versions")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = None;
            while let Some(version) = map.next_key::<String>()? {
                if version == self.0 {
                    out = map.next_value::<Entry>()?.sha256;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(out)
        }
    }
    let wanted: Wanted = wanted.iter().cloned().collect();
    let mut de = serde_json::Deserializer::from_slice(json);
    let found = Top(&wanted).deserialize(&mut de).map_err(|e| format!("not plugin-versions.json: {e}"))?;
    let mut out = BTreeMap::new();
    for (name, sha) in found {
        let hex = if sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit()) {
            sha.to_ascii_lowercase()
        } else {
            use base64::Engine as _;
            match base64::engine::general_purpose::STANDARD.decode(sha.trim()) {
                Ok(bytes) if bytes.len() == 32 => crate::hex(&bytes),
                _ => return Err(format!("plugin {name}: {sha:?} is not a SHA-256 (base64 or hex)")),
            }
        };
        out.insert(name, hex);
    }
    Ok(out)
}

/// The temporary-file prefix in the destination (hidden: Jenkins ignores it).
const TMP_PREFIX: &str = ".varroa-download-";

/// Downloads, verifies and installs every plugin of the lock, or nothing.
pub async fn install(opts: &InstallOptions) -> Result<Vec<Installed>, InstallError> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|source| InstallError::Read { path: p.into(), source });
    let plugins = parse_plugins(&read(&opts.plugins_file)?, &opts.plugins_file)?;
    let mut sums = parse_sums(&read(&opts.sha256_file)?, &opts.sha256_file)?;
    let unlocked: Vec<(String, String)> = plugins.iter().filter(|(n, _)| !sums.contains_key(n)).cloned().collect();
    let mut published_in: BTreeMap<String, String> = BTreeMap::new();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InstallError::Io { path, source }
    };
    std::fs::create_dir_all(&opts.dest).map_err(io(&opts.dest))?;
    remove_stale_temporaries(&opts.dest);

    install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(opts.timeout)
        .connect_timeout(opts.timeout.min(Duration::from_secs(30)))
        .build()
        .map_err(|e| InstallError::Download {
            plugin: String::new(),
            version: String::new(),
            url: opts.update_site.clone(),
            attempts: 0,
            detail: e.to_string(),
        })?;
    if !unlocked.is_empty() {
        let Some(url) = &opts.plugin_info else {
            let plugins = unlocked.into_iter().map(|(n, _)| n).collect();
            return Err(InstallError::MissingSum { plugins, file: opts.sha256_file.clone() });
        };
        let published = fetch_published_digests(&http, opts, url, &unlocked).await?;
        let not_published: Vec<String> =
            unlocked.iter().filter(|(n, _)| !published.contains_key(n)).map(|(n, v)| format!("{n} {v}")).collect();
        if !not_published.is_empty() {
            return Err(InstallError::NotPublished {
                plugins: not_published,
                file: opts.sha256_file.clone(),
                url: url.clone(),
            });
        }
        for (name, sha) in published {
            tracing::info!(plugin = %name, sha256 = %sha, source = %url, "not locked: verified against the digest the update site publishes");
            sums.insert(name.clone(), sha);
            published_in.insert(name, format!("published in {url}"));
        }
    }

    let mut staged = Vec::new();
    let mut installed = Vec::new();
    for (name, version) in &plugins {
        let expected = &sums[name];
        let target = opts.dest.join(format!("{name}.jpi"));
        if file_sha256(&target).is_some_and(|d| &d == expected) {
            tracing::info!(plugin = %name, %version, "already in place with the expected digest");
            installed.push(Installed { name: name.clone(), version: version.clone(), path: target, downloaded: false });
            continue;
        }
        let url = download_url(&opts.update_site, name, version);
        let (tmp, actual) = download(&http, opts, name, version, &url).await?;
        if &actual != expected {
            return Err(InstallError::Mismatch {
                plugin: name.clone(),
                version: version.clone(),
                url,
                expected: format!("{expected} ({})", published_in.get(name).map_or("locked", String::as_str)),
                actual,
            });
        }
        tracing::info!(plugin = %name, %version, sha256 = %actual, "downloaded and verified");
        staged.push((tmp, target.clone()));
        installed.push(Installed { name: name.clone(), version: version.clone(), path: target, downloaded: true });
    }
    for (tmp, target) in staged {
        tmp.persist(&target).map_err(|e| InstallError::Io { path: target.clone(), source: e.error })?;
        let stale = target.with_extension("hpi");
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(io(&stale))?;
        }
    }
    crate::apply::sync_dir(&opts.dest).map_err(io(&opts.dest))?;
    Ok(installed)
}

/// Downloads `plugin-versions.json` (bounded, retried like a plugin, into a temporary file of
/// the destination that goes when it is read) and picks the unlocked plugins' digests.
async fn fetch_published_digests(
    http: &reqwest::Client,
    opts: &InstallOptions,
    url: &str,
    unlocked: &[(String, String)],
) -> Result<BTreeMap<String, String>, InstallError> {
    let names = || unlocked.iter().map(|(n, v)| format!("{n} {v}")).collect::<Vec<_>>();
    let failed = |detail: String| InstallError::PluginInfo { url: url.into(), plugins: names(), detail };
    let (tmp, _) = download(http, opts, "plugin-versions.json", "", url).await.map_err(|e| failed(e.to_string()))?;
    let json = std::fs::read(tmp.path()).map_err(|e| failed(e.to_string()))?;
    drop(tmp);
    published_digests(&json, unlocked).map_err(failed)
}

/// Temporary files a killed earlier run left behind.
fn remove_stale_temporaries(dest: &Path) {
    let Ok(entries) = std::fs::read_dir(dest) else { return };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn file_sha256(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Some(crate::hex(&h.finalize()))
}

/// One failed try: retry it or not.
enum Failure {
    Transient(String, Option<Duration>),
    Permanent(InstallError),
}

async fn download(
    http: &reqwest::Client,
    opts: &InstallOptions,
    name: &str,
    version: &str,
    url: &str,
) -> Result<(tempfile::NamedTempFile, String), InstallError> {
    let mut backoff = opts.initial_backoff;
    let attempts = opts.attempts.max(1);
    for attempt in 1..=attempts {
        let last = match try_download(http, opts, name, version, url).await {
            Ok(done) => return Ok(done),
            Err(Failure::Permanent(e)) => return Err(e),
            Err(Failure::Transient(detail, retry_after)) => (detail, retry_after),
        };
        if attempt == attempts {
            return Err(InstallError::Download {
                plugin: name.into(),
                version: version.into(),
                url: url.into(),
                attempts,
                detail: last.0,
            });
        }
        let wait = last.1.unwrap_or(backoff).min(opts.max_backoff);
        tracing::warn!(plugin = name, url, attempt, error = %last.0, wait_ms = wait.as_millis() as u64, "transient download failure; retrying");
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(opts.max_backoff);
    }
    unreachable!("the last attempt returns")
}

async fn try_download(
    http: &reqwest::Client,
    opts: &InstallOptions,
    name: &str,
    version: &str,
    url: &str,
) -> Result<(tempfile::NamedTempFile, String), Failure> {
    let transient = |e: reqwest::Error| Failure::Transient(error_text(&e), None);
    let mut rsp = http.get(url).send().await.map_err(transient)?;
    let status = rsp.status();
    if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
        let retry_after = rsp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        return Err(Failure::Transient(format!("HTTP {status}"), retry_after));
    }
    if !status.is_success() {
        return Err(Failure::Permanent(InstallError::Download {
            plugin: name.into(),
            version: version.into(),
            url: url.into(),
            attempts: 1,
            detail: format!("HTTP {status} (not retried: check the update site and the plugin version)"),
        }));
    }
    let too_large =
        || Failure::Permanent(InstallError::TooLarge { plugin: name.into(), url: url.into(), limit: opts.max_size });
    if rsp.content_length().is_some_and(|n| n > opts.max_size) {
        return Err(too_large());
    }
    let io = |source| Failure::Permanent(InstallError::Io { path: opts.dest.clone(), source });
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!("{TMP_PREFIX}{name}-"))
        .suffix(".tmp")
        .tempfile_in(&opts.dest)
        .map_err(io)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(chunk) = rsp.chunk().await.map_err(transient)? {
        size += chunk.len() as u64;
        if size > opts.max_size {
            return Err(too_large());
        }
        hasher.update(&chunk);
        tmp.write_all(&chunk).map_err(io)?;
    }
    tmp.as_file().sync_all().map_err(io)?;
    Ok((tmp, crate::hex(&hasher.finalize())))
}

fn error_text(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_txt_must_pin_every_plugin() {
        let p = Path::new("plugins.txt");
        let got = parse_plugins("# comment\ngit:5.7.0\n\njob-dsl:1.90 # trailing\n", p).unwrap();
        assert_eq!(got, vec![("git".into(), "5.7.0".into()), ("job-dsl".into(), "1.90".into())]);
        let e = parse_plugins("git:5.7.0\nblueocean\n", p).unwrap_err().to_string();
        assert_eq!(e, "plugins.txt line 2: \"blueocean\" has no version: pin every plugin as name:version");
        assert!(parse_plugins("git:latest\n", p).is_err());
        assert!(parse_plugins("git:1\ngit:2\n", p).unwrap_err().to_string().contains("listed twice"));
        assert!(parse_plugins("../x:1\n", p).is_err());
    }

    #[test]
    fn published_digests_keep_the_wanted_versions_only() {
        let hex = "ab".repeat(32);
        // base64 of 32 bytes of 0xab.
        let b64 = "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=";
        let json = format!(
            r#"{{"generationTimestamp":"x","plugins":{{
                "git":{{"5.6.0":{{"sha256":"nope"}},"5.7.0":{{"sha256":"{b64}","dependencies":[{{"name":"a"}}]}}}},
                "job-dsl":{{"1.90":{{"sha256":"{}"}}}},
                "ansicolor":{{"1.0":{{"sha256":"{b64}"}}}},
                "old":{{"1.0":{{"sha1":"only sha1"}}}}
            }}}}"#,
            hex.to_uppercase()
        );
        let wanted = |v: &[(&str, &str)]| v.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect::<Vec<_>>();
        let got = published_digests(
            json.as_bytes(),
            &wanted(&[("git", "5.7.0"), ("job-dsl", "1.90"), ("old", "1.0"), ("absent", "1")]),
        )
        .unwrap();
        assert_eq!(got, BTreeMap::from([("git".into(), hex.clone()), ("job-dsl".into(), hex.clone())]));
        // A wanted version whose digest is malformed is an error naming it; others are not read.
        let e = published_digests(json.as_bytes(), &wanted(&[("git", "5.6.0")])).unwrap_err();
        assert!(e.contains("plugin git: \"nope\" is not a SHA-256"), "{e}");
        assert!(
            published_digests(b"[1,2]", &wanted(&[("git", "5.7.0")]))
                .unwrap_err()
                .starts_with("not plugin-versions.json")
        );
        assert_eq!(
            default_plugin_info("https://updates.jenkins.io/"),
            "https://updates.jenkins.io/current/plugin-versions.json"
        );
    }

    #[test]
    fn sums_are_sha256sum_lines() {
        let p = Path::new("plugins-sha256.txt");
        let hex = "AB".repeat(32);
        let got = parse_sums(&format!("{hex}  git.hpi\n{}  *job-dsl.hpi\n", "cd".repeat(32)), p).unwrap();
        assert_eq!(got["git"], "ab".repeat(32));
        assert_eq!(got["job-dsl"], "cd".repeat(32));
        assert!(parse_sums("abc  git.hpi\n", p).is_err());
        assert!(parse_sums(&format!("{hex}  git.zip\n"), p).is_err());
    }

    #[test]
    fn download_url_follows_the_update_site_layout() {
        assert_eq!(
            download_url("https://updates.jenkins.io/", "git", "5.7.0"),
            "https://updates.jenkins.io/download/plugins/git/5.7.0/git.hpi"
        );
    }
}
