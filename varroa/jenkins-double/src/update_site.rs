//! A stand-in Jenkins update site, for the demo and the end-to-end tests: what `plugins-init`
//! (`varroa-mite install-plugins`) reads from updates.jenkins.io, served on loopback.
//!
//! - `GET /download/plugins/<name>/<version>/<name>.hpi`: a stand-in plugin file for any name and
//!   version, [`plugin_file`]: a plain-text manifest the double reads as the plugin (see
//!   `plugins.rs`); no real plugin can be downloaded here.
//! - `GET /current/plugin-versions.json`: the layout and shape jenkins-infra/update-center2
//!   publishes (`{"plugins": {"<name>": {"<version>": {"sha256": "<base64>", "url", ...}}}}`) for
//!   the plugins the site was told about, with the stand-in files' digests: what the mite checks a
//!   plugin the version profile does not lock against.
//!
//! A version profile's lock names real digests the stand-in files cannot have, so [`relock`]
//! rewrites every `sha256` of a plugin list in Kubernetes YAML to the stand-in file's: the demo
//! applies the example profile through it.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use ring::digest::{SHA256, digest};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The stand-in plugin file of `name` at `version`.
pub fn plugin_file(name: &str, version: &str) -> String {
    format!(
        "Manifest-Version: 1.0\nShort-Name: {name}\nLong-Name: {name} (stand-in from the Varroa Jenkins double)\nPlugin-Version: {version}\n"
    )
}

/// The SHA-256 of [`plugin_file`], lowercase hex (as a version profile locks it).
pub fn plugin_sha256(name: &str, version: &str) -> String {
    digest(&SHA256, plugin_file(name, version).as_bytes()).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a YAML input could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    /// A file or directory could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not YAML.
    #[error("{path}: not YAML: {reason}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's words.
        reason: String,
    },
}

/// Every `(name, version)` of a plugin list (`plugins: [{name, version, ...}]`, at any depth) in
/// the YAML documents of `paths` (files, or directories whose `*.yaml`/`*.yml` files are read).
pub fn plugins_in(paths: &[PathBuf]) -> Result<BTreeSet<(String, String)>, SiteError> {
    let mut out = BTreeSet::new();
    for path in paths {
        for file in yaml_files(path)? {
            for doc in read_docs(&file)? {
                walk_plugin_lists(&doc, &mut |p| {
                    if let (Some(n), Some(v)) = (p["name"].as_str(), p["version"].as_str()) {
                        out.insert((n.to_string(), v.to_string()));
                    }
                });
            }
        }
    }
    Ok(out)
}

/// The YAML documents of `text` with every `sha256` of a plugin list item that has a name and a
/// version replaced by [`plugin_sha256`], as a YAML stream (`---` between documents).
pub fn relock(text: &str, path: &Path) -> Result<String, SiteError> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| SiteError::Yaml { path: path.into(), reason: e.to_string() })?;
    let mut out = String::new();
    for mut doc in docs.into_iter().filter(|d| !d.is_null()) {
        relock_value(&mut doc);
        let yaml =
            serde_saphyr::to_string(&doc).map_err(|e| SiteError::Yaml { path: path.into(), reason: e.to_string() })?;
        out.push_str("---\n");
        out.push_str(&yaml);
    }
    Ok(out)
}

fn relock_value(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if k == "plugins"
                    && let Value::Array(items) = child
                {
                    for item in items.iter_mut() {
                        let (Some(n), Some(ver)) = (item["name"].as_str(), item["version"].as_str()) else { continue };
                        let sha = plugin_sha256(n, ver);
                        if let Some(o) = item.as_object_mut().filter(|o| o.contains_key("sha256")) {
                            o.insert("sha256".into(), Value::String(sha));
                        }
                    }
                } else {
                    relock_value(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(relock_value),
        _ => {}
    }
}

fn walk_plugin_lists(v: &Value, f: &mut impl FnMut(&Value)) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                match child {
                    Value::Array(items) if k == "plugins" => items.iter().for_each(&mut *f),
                    _ => walk_plugin_lists(child, f),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| walk_plugin_lists(i, f)),
        _ => {}
    }
}

fn yaml_files(path: &Path) -> Result<Vec<PathBuf>, SiteError> {
    let read = |source| SiteError::Read { path: path.into(), source };
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

fn read_docs(file: &Path) -> Result<Vec<Value>, SiteError> {
    let text = std::fs::read_to_string(file).map_err(|source| SiteError::Read { path: file.into(), source })?;
    serde_saphyr::from_multiple(&text).map_err(|e| SiteError::Yaml { path: file.into(), reason: e.to_string() })
}

/// `plugin-versions.json` for `plugins`, with the stand-in files' digests (base64, as
/// update-center2 writes them) and download URLs under `site`.
pub fn plugin_versions_json(site: &str, plugins: &BTreeSet<(String, String)>) -> Value {
    use base64::Engine as _;
    let mut by_name: Map<String, Value> = Map::new();
    for (name, version) in plugins {
        let sha = base64::engine::general_purpose::STANDARD
            .encode(digest(&SHA256, plugin_file(name, version).as_bytes()).as_ref());
        let versions = by_name.entry(name.clone()).or_insert_with(|| json!({}));
        versions[version.as_str()] = json!({
            "name": name,
            "version": version,
            "sha256": sha,
            "url": format!("{site}/download/plugins/{name}/{version}/{name}.hpi"),
            "dependencies": [],
        });
    }
    json!({"plugins": by_name})
}

/// A running stand-in update site. Dropping it stops the server.
pub struct UpdateSite {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for UpdateSite {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl UpdateSite {
    /// Binds `listen` and serves stand-in plugins, with `plugin-versions.json` for `plugins`.
    pub async fn start(listen: SocketAddr, plugins: BTreeSet<(String, String)>) -> std::io::Result<UpdateSite> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let index = Arc::new(serde_json::to_vec(&plugin_versions_json(&format!("http://{addr}"), &plugins))?);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of descriptors, say: try again shortly rather than in a hot loop.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let index = index.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let index = index.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(req.uri().path(), &index)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(UpdateSite { addr, task })
    }

    /// `http://<addr>` (no trailing slash): the `--default-update-site` to give the operator.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits until the server task ends (never, unless it panics).
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }
}

fn answer(path: &str, index: &[u8]) -> Response<Full<Bytes>> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (status, ctype, body) = match parts.as_slice() {
        ["current", "plugin-versions.json"] => (StatusCode::OK, "application/json", Bytes::copy_from_slice(index)),
        ["download", "plugins", name, version, file] if *file == format!("{name}.hpi") => {
            (StatusCode::OK, "application/octet-stream", Bytes::from(plugin_file(name, version)))
        }
        _ => (StatusCode::NOT_FOUND, "text/plain", Bytes::from_static(b"not found")),
    };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(ctype));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = "apiVersion: varroa.dev/v1alpha1\nkind: JenkinsVersionProfile\nmetadata: {name: lts}\nspec:\n  plugins:\n  - {name: git, version: \"5.7.0\", sha256: \"00\"}\n---\n# a comment\n---\nkind: Controller\nspec:\n  plugins:\n  - {name: timestamper, version: \"1.28\"}\n";

    #[test]
    fn relock_rewrites_the_digests_of_plugin_lists_only() {
        let out = relock(PROFILE, Path::new("p.yaml")).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&out).unwrap();
        assert_eq!(docs.len(), 2, "{out}");
        assert_eq!(docs[0]["spec"]["plugins"][0]["sha256"], plugin_sha256("git", "5.7.0"));
        assert_eq!(docs[0]["metadata"]["name"], "lts");
        assert!(docs[1]["spec"]["plugins"][0].get("sha256").is_none(), "a pin gets no digest: {out}");
        assert!(relock("a: [", Path::new("bad.yaml")).unwrap_err().to_string().starts_with("bad.yaml: not YAML"));
    }

    #[test]
    fn plugins_are_collected_from_every_list_and_published_with_their_digests() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), PROFILE).unwrap();
        std::fs::write(dir.path().join("ignored.txt"), "plugins: [{name: x, version: '1'}]").unwrap();
        let found = plugins_in(&[dir.path().to_path_buf()]).unwrap();
        let want: BTreeSet<(String, String)> =
            [("git", "5.7.0"), ("timestamper", "1.28")].iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        assert_eq!(found, want);
        let index = plugin_versions_json("http://site", &found);
        use base64::Engine as _;
        let sha = index["plugins"]["timestamper"]["1.28"]["sha256"].as_str().unwrap();
        let hex: String =
            base64::engine::general_purpose::STANDARD.decode(sha).unwrap().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, plugin_sha256("timestamper", "1.28"));
    }
}
