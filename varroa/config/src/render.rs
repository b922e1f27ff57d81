//! Rendering: a Controller and the objects it uses become the final `jenkins.yaml`, the plugin
//! list and a content digest. Pure: the same inputs always give byte-identical output.
//!
//! The JCasC document is, merged in this order (later wins, rules in [`crate::merge`]):
//! the bundle's inputs (or `varroa-starter`), the version profile's overlay, then what Varroa
//! generates for the controller: the Kubernetes cloud's address and namespace, the agent
//! templates from PodTemplates, the Jenkins URL from the ingress host, and the role-based
//! authorization strategy from JenkinsRoleBindings (which replaces the bundle's strategy).

use crate::compose::{ComposeError, Composed, InputContent, compose, describe_input, read_catalog_item, starter};
use crate::merge::{MergeError, canonical, merge_into};
use crate::plugins::{Notice, PluginEntry, PluginError, resolve_plugins};
use crate::settings::{ResolvedSettings, SettingsError, resolve};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use varroa_api::{
    BundleInput, CatalogItem, ComposedBundle, Controller, ControllerClass, JenkinsRole, JenkinsRoleBinding,
    JenkinsRoleScope, JenkinsVersionProfile, PluginRequirement, PodTemplate, ProvisioningDefaults, STARTER_BUNDLE,
    SubjectKind,
};

/// The fetched content of a remote (Git or OCI) bundle input, keyed by
/// [`describe_input`]; `Err` holds the fetch error when nothing was ever fetched.
pub type Fetched = BTreeMap<String, Result<FetchedInput, String>>;

/// A remote input's files, as fetched.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FetchedInput {
    pub revision: String,
    pub files: BTreeMap<String, Vec<u8>>,
    /// The error of the latest fetch when these files are the last good ones.
    pub stale_error: Option<String>,
}

/// Everything a controller's configuration can draw on: what the operator's caches hold, or
/// what `varroa-operator render -f` read from files.
#[derive(Debug, Clone, Default)]
pub struct World {
    pub defaults: Option<ProvisioningDefaults>,
    pub classes: Vec<ControllerClass>,
    pub profiles: Vec<JenkinsVersionProfile>,
    pub bundles: Vec<ComposedBundle>,
    pub catalog_items: Vec<CatalogItem>,
    pub pod_templates: Vec<PodTemplate>,
    pub jenkins_roles: Vec<JenkinsRole>,
    pub jenkins_role_bindings: Vec<JenkinsRoleBinding>,
    pub fetched: Fetched,
}

fn name_of<K: kube::Resource>(o: &K) -> &str {
    o.meta().name.as_deref().unwrap_or_default()
}

fn ns_of<K: kube::Resource>(o: &K) -> &str {
    o.meta().namespace.as_deref().unwrap_or("default")
}

/// Why a controller cannot be rendered. Every variant blocks the controller
/// (ReconcileBlocked); each message names the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(
        "no JenkinsVersionProfile chosen: set spec.versionProfile on the Controller, its ControllerClass, or ProvisioningDefaults default"
    )]
    NoVersionProfile,
    #[error("JenkinsVersionProfile {name} (from {layer}) does not exist: create it, or name an existing profile")]
    ProfileNotFound { name: String, layer: String },
    #[error(
        "ComposedBundle {name} (from {layer}) does not exist in namespace {namespace}: create it, fix composedBundleRef, or remove it to use varroa-starter"
    )]
    BundleNotFound { name: String, layer: String, namespace: String },
    #[error("bundle {bundle}: {source}")]
    Compose { bundle: String, source: Box<ComposeError> },
    #[error(transparent)]
    Plugins(Box<PluginError>),
    #[error("the generated configuration does not merge: {0}")]
    Generated(MergeError),
}

impl From<PluginError> for RenderError {
    fn from(e: PluginError) -> Self {
        RenderError::Plugins(Box::new(e))
    }
}

/// A controller's resolved and rendered configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The resolved settings with provenance.
    pub settings: ResolvedSettings,
    pub profile: String,
    pub jenkins_version: String,
    pub image: String,
    /// The bundle used (`varroa-starter` when none is named).
    pub bundle: String,
    /// The inputs merged, in order, with the revision read.
    pub inputs: Vec<(String, Option<String>)>,
    /// The final JCasC document (keys sorted).
    pub casc: Value,
    /// Which input or generator set each path of the JCasC document.
    pub casc_origins: BTreeMap<String, String>,
    pub plugins: Vec<PluginEntry>,
    /// `jenkins.yaml`, `plugins.txt`, `plugins-sha256.txt`.
    pub files: BTreeMap<String, String>,
    /// sha256 over `jenkins.yaml` alone: a change here is reloadable.
    pub casc_digest: String,
    /// sha256 over the plugin list: a change here restarts Jenkins.
    pub plugins_digest: String,
    /// sha256 over every file.
    pub digest: String,
    /// Non-blocking notices (events).
    pub notices: Vec<Notice>,
}

/// The remote inputs (Git, OCI) a controller's bundle needs fetched, keyed as in [`Fetched`].
pub fn remote_inputs(controller: &Controller, world: &World) -> Vec<BundleInput> {
    let Ok(settings) = resolve(controller, class_for(controller, world), world.defaults.as_ref()) else {
        return Vec::new();
    };
    let Some(bref) = &settings.settings.composed_bundle_ref else { return Vec::new() };
    world
        .bundles
        .iter()
        .find(|b| name_of(*b) == bref.name && ns_of(*b) == ns_of(controller))
        .map(|b| b.spec.inputs.iter().filter(|i| i.catalog_item.is_none()).cloned().collect())
        .unwrap_or_default()
}

fn class_for<'a>(controller: &Controller, world: &'a World) -> Option<&'a ControllerClass> {
    let name = controller.spec.class_name.as_deref()?;
    world.classes.iter().find(|c| name_of(*c) == name)
}

/// Renders `controller` from `world`.
pub fn render(controller: &Controller, world: &World) -> Result<Rendered, RenderError> {
    let cname = name_of(controller).to_string();
    let namespace = ns_of(controller).to_string();
    let settings = resolve(controller, class_for(controller, world), world.defaults.as_ref())?;
    let layer_of = |path: &str| settings.why(path).map(|l| l.to_string()).unwrap_or_default();

    let profile_name = settings.settings.version_profile.clone().ok_or(RenderError::NoVersionProfile)?;
    let profile = world.profiles.iter().find(|p| name_of(*p) == profile_name).ok_or_else(|| {
        RenderError::ProfileNotFound { name: profile_name.clone(), layer: layer_of("versionProfile") }
    })?;

    // The bundle's inputs, read.
    let (bundle_name, contents) = match &settings.settings.composed_bundle_ref {
        None => (STARTER_BUNDLE.to_string(), vec![starter()]),
        Some(r) => {
            let bundle =
                world.bundles.iter().find(|b| name_of(*b) == r.name && ns_of(*b) == namespace).ok_or_else(|| {
                    RenderError::BundleNotFound {
                        name: r.name.clone(),
                        layer: layer_of("composedBundleRef.name"),
                        namespace: namespace.clone(),
                    }
                })?;
            let contents = read_inputs(bundle, world)
                .map_err(|source| RenderError::Compose { bundle: r.name.clone(), source: Box::new(source) })?;
            (r.name.clone(), contents)
        }
    };
    let mut composed: Composed = compose(&contents)
        .map_err(|source| RenderError::Compose { bundle: bundle_name.clone(), source: Box::new(source) })?;
    let mut notices = Vec::new();
    if let Some(r) = &settings.settings.composed_bundle_ref
        && let Some(bundle) = world.bundles.iter().find(|b| name_of(*b) == r.name && ns_of(*b) == namespace)
    {
        for (i, input) in bundle.spec.inputs.iter().enumerate() {
            let desc = describe_input(input);
            if let Some(Ok(FetchedInput { stale_error: Some(e), .. })) = world.fetched.get(&desc) {
                notices.push(Notice {
                    reason: "InputFetchFailed",
                    message: format!(
                        "ComposedBundle {} inputs[{i}] ({desc}): the last fetch failed ({e}); the last good revision stays in use",
                        r.name
                    ),
                });
            }
        }
    }

    // The version profile's overlay.
    if let Some(overlay) = profile.spec.casc.as_ref().filter(|v| v.is_object()) {
        merge_into(
            &mut composed.casc,
            overlay,
            &format!("JenkinsVersionProfile {profile_name}"),
            &mut composed.origins,
        )
        .map_err(|source| RenderError::Compose { bundle: bundle_name.clone(), source: Box::new(source.into()) })?;
    }

    // What Varroa generates for this controller.
    let generated = generate(controller, &settings, world);
    for (label, doc, plugins) in &generated {
        merge_into(&mut composed.casc, doc, label, &mut composed.origins).map_err(RenderError::Generated)?;
        crate::compose::add_plugins(&mut composed.plugins, plugins, label)
            .map_err(|source| RenderError::Compose { bundle: bundle_name.clone(), source: Box::new(source) })?;
    }

    let (plugins, plugin_notices) = resolve_plugins(profile, &composed.plugins, &settings, &cname)?;
    notices.extend(plugin_notices);

    let casc = canonical(&composed.casc);
    let jenkins_yaml = format!(
        "# Rendered by Varroa for Controller {namespace}/{cname}; do not edit (changes are overwritten).\n{}",
        serde_saphyr::to_string(&casc).unwrap_or_default()
    );
    let mut plugins_txt = String::new();
    let mut sums = String::new();
    for p in &plugins {
        plugins_txt.push_str(&format!("{}:{}\n", p.name, p.version));
        if let Some(s) = &p.sha256 {
            sums.push_str(&format!("{s}  {}.hpi\n", p.name));
        }
    }
    let mut files = BTreeMap::new();
    files.insert("jenkins.yaml".to_string(), jenkins_yaml);
    files.insert("plugins.txt".to_string(), plugins_txt);
    files.insert("plugins-sha256.txt".to_string(), sums);
    let casc_digest = digest(files.iter().filter(|(k, _)| *k == "jenkins.yaml"));
    let plugins_digest = digest(files.iter().filter(|(k, _)| k.starts_with("plugins")));
    let all = digest(files.iter());
    Ok(Rendered {
        settings,
        profile: profile_name,
        jenkins_version: profile.spec.jenkins_version.clone(),
        image: profile.spec.image.clone(),
        bundle: bundle_name,
        inputs: composed.inputs,
        casc,
        casc_origins: composed.origins,
        plugins,
        files,
        casc_digest,
        plugins_digest,
        digest: all,
        notices,
    })
}

fn digest<'a>(files: impl Iterator<Item = (&'a String, &'a String)>) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for (name, content) in files {
        ctx.update(&(name.len() as u64).to_be_bytes());
        ctx.update(name.as_bytes());
        ctx.update(&(content.len() as u64).to_be_bytes());
        ctx.update(content.as_bytes());
    }
    let d = ctx.finish();
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn read_inputs(bundle: &ComposedBundle, world: &World) -> Result<Vec<InputContent>, ComposeError> {
    let bname = name_of(bundle);
    let ns = ns_of(bundle);
    let mut out = Vec::new();
    for (i, input) in bundle.spec.inputs.iter().enumerate() {
        let desc = describe_input(input);
        let label = format!("ComposedBundle {bname} inputs[{i}] ({desc})");
        if let Some(c) = &input.catalog_item {
            let own = world.catalog_items.iter().any(|it| name_of(it) == c.name && ns_of(it) == ns);
            if c.name == STARTER_BUNDLE && !own {
                // The built-in starter, usable as the first input of a team's bundle.
                let mut s = starter();
                s.label = label;
                out.push(s);
                continue;
            }
            let item =
                world.catalog_items.iter().find(|it| name_of(*it) == c.name && ns_of(*it) == ns).ok_or_else(|| {
                    ComposeError::CatalogItemNotFound {
                        input: label.clone(),
                        name: c.name.clone(),
                        namespace: ns.to_string(),
                    }
                })?;
            out.push(read_catalog_item(&label, item));
            continue;
        }
        match world.fetched.get(&desc) {
            Some(Ok(f)) => out.push(crate::compose::read_files(&label, Some(f.revision.clone()), &f.files)?),
            Some(Err(e)) => return Err(ComposeError::InputUnavailable { input: label, message: e.clone() }),
            None => {
                return Err(ComposeError::InputUnavailable { input: label, message: "not fetched yet".to_string() });
            }
        }
    }
    Ok(out)
}

/// Whether `labels` match `selector` (matchLabels and matchExpressions, as Kubernetes).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(ml) = &selector.match_labels
        && ml.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for e in selector.match_expressions.iter().flatten() {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        let ok = match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

type Generated = Vec<(String, Value, Vec<PluginRequirement>)>;

fn need(name: &str) -> PluginRequirement {
    PluginRequirement { name: name.to_string(), version: None }
}

/// The documents Varroa generates for a controller, each with its label and plugins.
fn generate(controller: &Controller, settings: &ResolvedSettings, world: &World) -> Generated {
    let cname = name_of(controller);
    let ns = ns_of(controller);
    let mut out: Generated = Vec::new();

    // The Kubernetes cloud runs agents in the controller's namespace and reaches it by Service.
    let mut cloud = Map::new();
    cloud.insert("name".into(), json!("kubernetes"));
    cloud.insert("namespace".into(), json!(ns));
    cloud.insert("jenkinsUrl".into(), json!(format!("http://{cname}.{ns}.svc.cluster.local:8080/")));
    out.push((
        "Varroa (the controller's Kubernetes cloud)".to_string(),
        json!({"jenkins": {"clouds": [{"kubernetes": Value::Object(cloud)}]}}),
        vec![need("kubernetes")],
    ));

    // Agent templates, by name.
    let mut templates: Vec<&PodTemplate> = world
        .pod_templates
        .iter()
        .filter(|t| ns_of(*t) == ns)
        .filter(|t| match &settings.settings.pod_template_selector {
            Some(sel) => selector_matches(sel, t.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())),
            None => true,
        })
        .collect();
    templates.sort_by(|a, b| name_of(*a).cmp(name_of(*b)));
    for t in templates {
        out.push((
            format!("PodTemplate {}", name_of(t)),
            json!({"jenkins": {"clouds": [{"kubernetes": {"name": "kubernetes", "templates": [agent_template(t)]}}]}}),
            vec![need("kubernetes")],
        ));
    }

    // The Jenkins URL, from the ingress host.
    if let Some(host) = settings.settings.ingress.as_ref().and_then(|i| i.host.as_ref()) {
        let scheme = if settings.settings.ingress.as_ref().is_some_and(|i| i.tls_secret_name.is_some()) {
            "https"
        } else {
            "http"
        };
        out.push((
            "Varroa (the ingress host)".to_string(),
            json!({"unclassified": {"location": {"url": format!("{scheme}://{host}/")}}}),
            Vec::new(),
        ));
    }

    // Authorization from the JenkinsRoleBindings that apply to this controller.
    if let Some(strategy) = authorization(ns, world) {
        out.push((
            "Varroa (JenkinsRoles and JenkinsRoleBindings)".to_string(),
            json!({"jenkins": {"authorizationStrategy": strategy}}),
            vec![need("role-strategy")],
        ));
    }
    out
}

fn agent_template(t: &PodTemplate) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(name_of(t)));
    m.insert("label".into(), json!(t.spec.labels.join(" ")));
    m.insert("instanceCap".into(), json!(t.spec.instance_cap.unwrap_or(10)));
    m.insert("idleMinutes".into(), json!(t.spec.idle_minutes.unwrap_or(0)));
    if let Some(sa) = &t.spec.service_account_name {
        m.insert("serviceAccount".into(), json!(sa));
    }
    if !t.spec.node_selector.is_empty() {
        let sel: Vec<String> = t.spec.node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        m.insert("nodeSelector".into(), json!(sel.join(",")));
    }
    let containers: Vec<Value> = t
        .spec
        .containers
        .iter()
        .map(|c| {
            let mut cm = Map::new();
            cm.insert("name".into(), json!(c.name));
            cm.insert("image".into(), json!(c.image));
            if !c.command.is_empty() {
                cm.insert("command".into(), json!(c.command.join(" ")));
            }
            if !c.args.is_empty() {
                cm.insert("args".into(), json!(c.args.join(" ")));
            }
            cm.insert("ttyEnabled".into(), json!(true));
            if let Some(r) = &c.resources {
                for (field, map) in [("Request", &r.requests), ("Limit", &r.limits)] {
                    for (res, q) in map.iter().flatten() {
                        let key = match res.as_str() {
                            "cpu" => format!("resource{field}Cpu"),
                            "memory" => format!("resource{field}Memory"),
                            "ephemeral-storage" => format!("resource{field}EphemeralStorage"),
                            _ => continue,
                        };
                        cm.insert(key, json!(q.0));
                    }
                }
            }
            let env: Vec<Value> = c
                .env
                .iter()
                .filter_map(|e| e.value.as_ref().map(|v| json!({"envVar": {"key": e.name, "value": v}})))
                .collect();
            if !env.is_empty() {
                cm.insert("envVars".into(), Value::Array(env));
            }
            Value::Object(cm)
        })
        .collect();
    m.insert("containers".into(), Value::Array(containers));
    Value::Object(m)
}

/// The role-strategy plugin's `roleBased` strategy from the bindings that apply in `namespace`;
/// `None` when no binding applies (the bundle's strategy stays).
fn authorization(namespace: &str, world: &World) -> Option<Value> {
    let mut bindings: Vec<&JenkinsRoleBinding> = world
        .jenkins_role_bindings
        .iter()
        .filter(|b| b.spec.namespaces.is_empty() || b.spec.namespaces.iter().any(|n| n == namespace))
        .collect();
    if bindings.is_empty() {
        return None;
    }
    bindings.sort_by(|a, b| name_of(*a).cmp(name_of(*b)));
    // role name -> entries
    let mut entries: BTreeMap<&str, Vec<(SubjectKind, &str)>> = BTreeMap::new();
    for b in &bindings {
        let e = entries.entry(b.spec.role_ref.name.as_str()).or_default();
        for s in &b.spec.subjects {
            if !e.contains(&(s.kind, s.name.as_str())) {
                e.push((s.kind, s.name.as_str()));
            }
        }
    }
    let mut global = Vec::new();
    let mut items = Vec::new();
    let mut roles: Vec<&JenkinsRole> =
        world.jenkins_roles.iter().filter(|r| entries.contains_key(name_of(*r))).collect();
    roles.sort_by(|a, b| name_of(*a).cmp(name_of(*b)));
    for r in roles {
        let mut subjects = entries.get(name_of(r)).cloned().unwrap_or_default();
        subjects.sort();
        let entries: Vec<Value> = subjects
            .iter()
            .map(|(k, n)| match k {
                SubjectKind::User => json!({"user": n}),
                SubjectKind::Group => json!({"group": n}),
            })
            .collect();
        let mut perms = r.spec.permissions.clone();
        perms.sort();
        perms.dedup();
        let mut role = json!({"name": name_of(r), "permissions": perms, "entries": entries});
        match r.spec.scope {
            JenkinsRoleScope::Global => global.push(role),
            JenkinsRoleScope::Item => {
                role["pattern"] = json!(r.spec.pattern.clone().unwrap_or_default());
                items.push(role);
            }
        }
    }
    let mut roles = Map::new();
    roles.insert("global".into(), Value::Array(global));
    if !items.is_empty() {
        roles.insert("items".into(), Value::Array(items));
    }
    Some(json!({"roleBased": {"roles": Value::Object(roles)}}))
}
