//! `varroa-operator render`: a controller's resolved configuration, with provenance, and the
//! rendered files, from YAML files and without a cluster (for CI checks of configuration
//! repositories). Git and OCI bundle inputs are fetched as the operator would fetch them.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use varroa_config::load::Loaded;
use varroa_config::{Rendered, render};

/// Arguments of `render`.
#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    /// YAML files (or directories of them) holding the Controller and what it uses:
    /// ProvisioningDefaults, ControllerClasses, JenkinsVersionProfiles, ComposedBundles,
    /// CatalogItems, PodTemplates, JenkinsRoles and JenkinsRoleBindings. Repeatable; `-` reads
    /// standard input.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Render only this Controller (`NAME` or `NAMESPACE/NAME`); default every Controller found.
    #[arg(long)]
    pub controller: Option<String>,
    /// `text` (provenance and files, for people) or `json` (for scripts).
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
    /// Also write each controller's files to DIR/NAMESPACE/NAME/.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Registries (host:port) reached over plain HTTP for OCI inputs, e.g. a local registry.
    #[arg(long = "insecure-registry", env = "VARROA_INSECURE_REGISTRIES", value_delimiter = ',')]
    pub insecure_registries: Vec<String>,
}

/// The exit status: 0 rendered, 1 a controller is blocked (the reason on stderr), 2 unreadable
/// input.
pub async fn run(args: RenderArgs) -> i32 {
    let mut loaded = Loaded::default();
    for path in &args.files {
        if let Err(e) = load_path(&mut loaded, path) {
            eprintln!("error: {e}");
            return 2;
        }
    }
    let mut controllers = loaded.controllers.clone();
    if let Some(sel) = &args.controller {
        controllers.retain(|c| {
            let name = c.metadata.name.as_deref().unwrap_or_default();
            let ns = c.metadata.namespace.as_deref().unwrap_or("default");
            sel == name || *sel == format!("{ns}/{name}")
        });
    }
    if controllers.is_empty() {
        eprintln!(
            "error: no Controller found in the files given{}: add one (kind: Controller, apiVersion: varroa.dev/v1alpha1)",
            args.controller.as_deref().map(|c| format!(" named {c}")).unwrap_or_default()
        );
        return 2;
    }

    // Fetch the Git and OCI inputs the controllers need.
    // `render` runs on the user's machine or CI, on the user's own files: local paths and
    // private hosts (a local registry) are theirs to fetch from. The operator refuses them.
    let fetcher = varroa_sources::Fetcher::new(
        varroa_sources::FetchOptions {
            insecure_registries: args.insecure_registries.clone(),
            allow_private_hosts: true,
            ..Default::default()
        },
        None,
    );
    for c in &controllers {
        crate::fetch::fetch_inputs(&fetcher, c, &mut loaded.world, false).await;
    }

    let mut status = 0;
    let mut json_out = Vec::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for c in &controllers {
        let id = format!(
            "{}/{}",
            c.metadata.namespace.as_deref().unwrap_or("default"),
            c.metadata.name.as_deref().unwrap_or_default()
        );
        match render(c, &loaded.world) {
            Ok(r) => {
                if let Some(dir) = &args.output_dir {
                    let d = dir.join(&id);
                    if let Err(e) = write_files(&d, &r) {
                        eprintln!("error: writing {}: {e}", d.display());
                        return 2;
                    }
                }
                if args.output == "json" {
                    json_out.push(as_json(&id, &r));
                } else {
                    let _ = out.write_all(as_text(&id, &r).as_bytes());
                }
            }
            Err(e) => {
                status = 1;
                eprintln!("Controller {id} is blocked: {e}");
                if args.output == "json" {
                    json_out.push(json!({"controller": id, "blocked": e.to_string()}));
                }
            }
        }
    }
    if args.output == "json" {
        let _ = writeln!(out, "{}", serde_json::to_string_pretty(&Value::Array(json_out)).unwrap_or_default());
    }
    status
}

/// Why an input of `render` cannot be read.
#[derive(Debug, thiserror::Error)]
enum InputError {
    /// A file or directory cannot be read (`-` is stdin).
    #[error("{path}: {source}")]
    Read { path: String, source: std::io::Error },
    /// A file does not parse as Varroa resources.
    #[error(transparent)]
    Parse(#[from] varroa_config::load::LoadError),
}

fn load_path(loaded: &mut Loaded, path: &PathBuf) -> Result<(), InputError> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|source| InputError::Read { path: "stdin".into(), source })?;
        return Ok(loaded.add_yaml("<stdin>", &text)?);
    }
    let meta =
        std::fs::metadata(path).map_err(|source| InputError::Read { path: path.display().to_string(), source })?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| InputError::Read { path: path.display().to_string(), source })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml" || x == "json"))
            .collect();
        entries.sort();
        for p in entries {
            load_path(loaded, &p)?;
        }
        return Ok(());
    }
    let text = std::fs::read_to_string(path)
        .map_err(|source| InputError::Read { path: path.display().to_string(), source })?;
    Ok(loaded.add_yaml(&path.display().to_string(), &text)?)
}

fn write_files(dir: &std::path::Path, r: &Rendered) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, content) in &r.files {
        std::fs::write(dir.join(name), content)?;
    }
    Ok(())
}

/// The value at a provenance path of the resolved settings (`storage.size`, `plugins[git]`).
fn setting_value(settings: &Value, path: &str) -> String {
    if let Some(name) = path.strip_prefix("plugins[").and_then(|p| p.strip_suffix(']')) {
        return settings["plugins"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .map(|p| p["version"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default();
    }
    let mut v = settings;
    for part in path.split('.') {
        v = &v[part];
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn as_text(id: &str, r: &Rendered) -> String {
    let settings = serde_json::to_value(&r.settings.settings).unwrap_or_default();
    let mut s = String::new();
    s.push_str(&format!("Controller {id}\n"));
    s.push_str(&format!(
        "  Jenkins {} ({}), JenkinsVersionProfile {}\n  Bundle {}\n",
        r.jenkins_version, r.image, r.profile, r.bundle
    ));
    for (label, revision) in &r.inputs {
        s.push_str(&format!("    {label}{}\n", revision.as_deref().map(|v| format!(" @ {v}")).unwrap_or_default()));
    }
    s.push_str("  Settings (value, and where it came from):\n");
    let width = r.settings.provenance.keys().map(String::len).max().unwrap_or(0);
    for (path, layer) in &r.settings.provenance {
        s.push_str(&format!("    {path:width$}  {:<20}  {layer}\n", setting_value(&settings, path)));
    }
    s.push_str("  Plugins:\n");
    for p in &r.plugins {
        s.push_str(&format!("    {}:{}  {}\n", p.name, p.version, p.origin));
    }
    if !r.notices.is_empty() {
        s.push_str("  Notices:\n");
        for n in &r.notices {
            s.push_str(&format!("    {}: {}\n", n.reason, n.message));
        }
    }
    s.push_str("  JCasC values and the input that set each:\n");
    let width = r.casc_origins.keys().map(String::len).max().unwrap_or(0).min(90);
    for (path, origin) in &r.casc_origins {
        s.push_str(&format!("    {path:width$}  {origin}\n"));
    }
    s.push_str(&format!(
        "  Digests: config {}, jenkins.yaml {}, plugins {}\n",
        r.digest, r.casc_digest, r.plugins_digest
    ));
    for (name, content) in &r.files {
        s.push_str(&format!("--- {name}\n{content}"));
        if !content.ends_with('\n') {
            s.push('\n');
        }
    }
    s
}

fn as_json(id: &str, r: &Rendered) -> Value {
    let settings = serde_json::to_value(&r.settings.settings).unwrap_or_default();
    let provenance: BTreeMap<&String, Value> = r
        .settings
        .provenance
        .iter()
        .map(|(p, l)| (p, json!({"value": setting_value(&settings, p), "from": l.to_string()})))
        .collect();
    json!({
        "controller": id,
        "jenkinsVersion": r.jenkins_version,
        "image": r.image,
        "versionProfile": r.profile,
        "bundle": r.bundle,
        "inputs": r.inputs.iter().map(|(l, v)| json!({"input": l, "revision": v})).collect::<Vec<_>>(),
        "settings": settings,
        "provenance": provenance,
        "plugins": r.plugins.iter().map(|p| json!({"name": p.name, "version": p.version, "sha256": p.sha256, "origin": p.origin})).collect::<Vec<_>>(),
        "notices": r.notices.iter().map(|n| json!({"reason": n.reason, "message": n.message})).collect::<Vec<_>>(),
        "cascOrigins": r.casc_origins,
        "files": r.files,
        "digest": r.digest,
        "cascDigest": r.casc_digest,
        "pluginsDigest": r.plugins_digest,
    })
}
