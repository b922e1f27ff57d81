//! Resolution and rendering, from the examples in docs/varroa/examples (so the docs cannot rot)
//! and from small worlds built in the tests.

use serde_json::json;
use std::path::PathBuf;
use varroa_config::load::Loaded;
use varroa_config::render::{FetchedInput, RenderError};
use varroa_config::{Layer, World, render};

fn examples() -> Loaded {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/varroa/examples");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).expect("examples").map(|e| e.expect("entry").path()).collect();
    files.sort();
    let mut loaded = Loaded::default();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        loaded.add_yaml(&f.display().to_string(), &text).expect("examples load");
    }
    loaded
}

fn controller(loaded: &Loaded, name: &str) -> varroa_api::Controller {
    loaded.controllers.iter().find(|c| c.metadata.name.as_deref() == Some(name)).expect("controller").clone()
}

fn world_from(yaml: &str) -> Loaded {
    let mut l = Loaded::default();
    l.add_yaml("test.yaml", yaml).expect("test world loads");
    l
}

const PROFILE: &str = r#"
apiVersion: varroa.dev/v1alpha1
kind: JenkinsVersionProfile
metadata: {name: p1}
spec:
  jenkinsVersion: "2.479.3"
  image: jenkins/jenkins:2.479.3-lts-jdk17
  plugins:
  - {name: configuration-as-code, version: "1.0", sha256: "1111111111111111111111111111111111111111111111111111111111111111"}
  - {name: git, version: "5.7.0", sha256: "2222222222222222222222222222222222222222222222222222222222222222"}
  - {name: job-dsl, version: "1.90", sha256: "3333333333333333333333333333333333333333333333333333333333333333"}
  - {name: kubernetes, version: "4313", sha256: "4444444444444444444444444444444444444444444444444444444444444444"}
  - {name: workflow-aggregator, version: "600", sha256: "5555555555555555555555555555555555555555555555555555555555555555"}
  - {name: role-strategy, version: "756", sha256: "6666666666666666666666666666666666666666666666666666666666666666"}
"#;

fn with_profile(rest: &str) -> Loaded {
    world_from(&format!("{PROFILE}\n---\n{rest}"))
}

fn render_only(l: &Loaded) -> Result<varroa_config::Rendered, RenderError> {
    render(&l.controllers[0], &l.world)
}

#[test]
fn the_examples_resolve_field_by_field_and_say_where_each_value_came_from() {
    let l = examples();
    let r = render(&controller(&l, "team-a"), &l.world).expect("team-a renders");
    let s = &r.settings;
    // The class chose the profile and sized the disk; the defaults kept what the class left out.
    assert_eq!(s.settings.version_profile.as_deref(), Some("lts-2.492"));
    assert_eq!(s.why("versionProfile"), Some(&Layer::Class("large".into())));
    let storage = s.settings.storage.as_ref().expect("storage");
    assert_eq!(storage.size.as_deref(), Some("50Gi"));
    assert_eq!(s.why("storage.size"), Some(&Layer::Class("large".into())));
    assert_eq!(storage.retention, Some(varroa_api::Retention::Retain));
    assert_eq!(s.why("storage.retention"), Some(&Layer::Defaults));
    let res = s.settings.resources.as_ref().expect("resources");
    assert_eq!(res.requests.as_ref().expect("requests")["cpu"].0, "500m");
    assert_eq!(s.why("resources.requests.cpu"), Some(&Layer::Defaults));
    assert_eq!(res.requests.as_ref().expect("requests")["memory"].0, "4Gi");
    assert_eq!(s.why("resources.requests.memory"), Some(&Layer::Class("large".into())));
    assert_eq!(s.why("ingress.host"), Some(&Layer::Controller));
    assert_eq!(s.why("plugins[timestamper]"), Some(&Layer::Controller));
    assert_eq!(s.why("cells"), Some(&Layer::BuiltIn));
    assert_eq!(Layer::Class("large".into()).to_string(), "ControllerClass large");

    // The bundle: the starter, then the team's pieces; the ingress host sets the Jenkins URL.
    assert_eq!(r.bundle, "team-a");
    assert_eq!(r.inputs.len(), 3);
    assert_eq!(r.casc["jenkins"]["numExecutors"], json!(0), "the starter's baseline is kept");
    assert_eq!(r.casc["unclassified"]["location"]["adminAddress"], json!("ci-team-a@example.com"));
    assert_eq!(r.casc["unclassified"]["location"]["url"], json!("https://jenkins.team-a.example.com/"));
    assert_eq!(
        r.casc_origins["unclassified.location.adminAddress"],
        "ComposedBundle team-a inputs[2] (catalogItem team-a-location)"
    );
    assert_eq!(r.casc_origins["unclassified.location.url"], "Varroa (the ingress host)");
    // Agents: both PodTemplates match the selector, rendered into the one Kubernetes cloud.
    let cloud = &r.casc["jenkins"]["clouds"][0]["kubernetes"];
    assert_eq!(cloud["namespace"], json!("team-a"));
    assert_eq!(cloud["webSocket"], json!(true), "merged into the starter's cloud, not a second cloud");
    let templates: Vec<&str> =
        cloud["templates"].as_array().expect("templates").iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(templates, ["maven", "node"]);
    assert_eq!(cloud["templates"][0]["label"], json!("maven java"));
    assert_eq!(cloud["templates"][0]["containers"][0]["resourceRequestMemory"], json!("2Gi"));
    // Authorization replaces the starter's strategy whole.
    let auth = &r.casc["jenkins"]["authorizationStrategy"];
    assert!(auth.get("loggedInUsersCanDoAnything").is_none(), "{auth}");
    let items = &auth["roleBased"]["roles"]["items"][0];
    assert_eq!(items["pattern"], json!("team-a/.*"));
    assert_eq!(items["entries"], json!([{"user": "alice@example.com"}, {"group": "team-a"}]));
    // Plugins: the lock, the input's github-branch-source, the pin, role-strategy for RBAC.
    let plugins: Vec<String> = r.plugins.iter().map(|p| format!("{}:{}", p.name, p.version)).collect();
    assert!(plugins.contains(&"timestamper:1.28".to_string()), "{plugins:?}");
    assert!(plugins.contains(&"github-branch-source:1810.v913311241fa_9".to_string()), "{plugins:?}");
    assert!(plugins.contains(&"job-dsl:1.91".to_string()), "the class's profile lock: {plugins:?}");
    assert!(r.files["plugins.txt"].lines().any(|l| l == "timestamper:1.28"));
    assert!(r.files["plugins-sha256.txt"].contains("  git.hpi\n"));
    assert!(r.files["jenkins.yaml"].starts_with("# Rendered by Varroa for Controller team-a/team-a"));
}

#[test]
fn a_controller_that_sets_nothing_gets_the_defaults_and_the_secure_starter() {
    let l = examples();
    let r = render(&controller(&l, "sandbox"), &l.world).expect("sandbox renders");
    assert_eq!(r.bundle, "varroa-starter");
    assert_eq!(r.profile, "lts-2.479");
    assert_eq!(r.settings.why("versionProfile"), Some(&Layer::Defaults));
    let j = &r.casc["jenkins"];
    assert_eq!(j["numExecutors"], json!(0));
    assert_eq!(j["crumbIssuer"]["standard"]["excludeClientIPFromCrumb"], json!(false));
    assert_eq!(j["remotingSecurity"]["enabled"], json!(true));
    assert_eq!(j["securityRealm"]["local"]["allowsSignup"], json!(false));
    assert_eq!(j["clouds"][0]["kubernetes"]["jenkinsUrl"], json!("http://sandbox.team-a.svc.cluster.local:8080/"));
    assert_eq!(r.casc["security"]["apiToken"]["creationOfLegacyTokenEnabled"], json!(false));
    for p in ["configuration-as-code", "kubernetes", "workflow-aggregator", "git"] {
        assert!(r.plugins.iter().any(|e| e.name == p), "{p} missing");
    }
    // Without bindings for its namespace the starter's strategy stays.
    let mut world = l.world.clone();
    world.jenkins_role_bindings.clear();
    let r = render(&controller(&l, "sandbox"), &world).expect("renders");
    assert_eq!(
        r.casc["jenkins"]["authorizationStrategy"]["loggedInUsersCanDoAnything"]["allowAnonymousRead"],
        json!(false)
    );
}

#[test]
fn the_spec_wins_over_the_class_which_wins_over_the_defaults() {
    let l = with_profile(
        r#"
apiVersion: varroa.dev/v1alpha1
kind: ProvisioningDefaults
metadata: {name: default}
spec:
  versionProfile: p1
  storage: {size: 5Gi, storageClassName: fast}
  plugins: [{name: timestamper, version: "1.0"}, {name: ansicolor, version: "1.0"}]
  ingress: {annotations: {a: defaults, b: defaults}}
---
apiVersion: varroa.dev/v1alpha1
kind: ControllerClass
metadata: {name: c}
spec:
  storage: {size: 50Gi}
  plugins: [{name: timestamper, version: "2.0"}]
  jvmOptions: ["-Xmx1g", "-Xms1g"]
  ingress: {annotations: {b: class}}
---
apiVersion: varroa.dev/v1alpha1
kind: Controller
metadata: {name: x, namespace: ns}
spec:
  className: c
  storage: {size: 20Gi}
  jvmOptions: ["-Xmx2g"]
"#,
    );
    let r = render_only(&l).expect("renders");
    let s = &r.settings;
    let st = s.settings.storage.as_ref().unwrap();
    assert_eq!((st.size.as_deref(), st.storage_class_name.as_deref()), (Some("20Gi"), Some("fast")));
    assert_eq!(s.why("storage.size"), Some(&Layer::Controller));
    assert_eq!(s.why("storage.storageClassName"), Some(&Layer::Defaults));
    // A list set by a layer replaces the lower one's.
    assert_eq!(s.settings.jvm_options.as_deref(), Some(&["-Xmx2g".to_string()][..]));
    // Pins combine by name, the more specific layer winning per plugin.
    let pins: Vec<(String, String)> = s.settings.plugins.iter().map(|p| (p.name.clone(), p.version.clone())).collect();
    assert!(pins.contains(&("timestamper".into(), "2.0".into())) && pins.contains(&("ansicolor".into(), "1.0".into())));
    assert_eq!(s.why("plugins[timestamper]"), Some(&Layer::Class("c".into())));
    assert_eq!(s.why("plugins[ansicolor]"), Some(&Layer::Defaults));
    // Maps combine per key.
    let ann = &s.settings.ingress.as_ref().unwrap().annotations;
    assert_eq!((ann["a"].as_str(), ann["b"].as_str()), ("defaults", "class"));
    assert_eq!(s.why("ingress.annotations.b"), Some(&Layer::Class("c".into())));
}

#[test]
fn a_pin_against_the_lock_blocks_with_the_pin_the_lock_and_the_fix() {
    let l = with_profile(
        "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: x, namespace: ns}\nspec:\n  versionProfile: p1\n  plugins: [{name: git, version: \"5.6.0\"}]\n",
    );
    let err = render_only(&l).expect_err("blocked").to_string();
    for part in [
        "git:5.6.0",
        "the Controller's spec",
        "JenkinsVersionProfile p1",
        "locks git:5.7.0",
        "remove the pin, set it to 5.7.0",
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
    // A pin that agrees with the lock, or on a plugin the lock does not list, is fine.
    let l = with_profile(
        "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: x, namespace: ns}\nspec:\n  versionProfile: p1\n  plugins: [{name: git, version: \"5.7.0\"}, {name: timestamper, version: \"1.28\"}]\n",
    );
    let r = render_only(&l).expect("renders");
    let ts = r.plugins.iter().find(|p| p.name == "timestamper").expect("timestamper");
    assert_eq!((ts.version.as_str(), ts.sha256.is_none()), ("1.28", true));
    assert_eq!(ts.origin, "pinned by the Controller's spec");
}

#[test]
fn a_cell_ignores_a_job_dsl_pin_and_says_so() {
    let spec = |cells: &str| {
        format!(
            "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {{name: x, namespace: ns}}\nspec:\n  versionProfile: p1\n  {cells}\n  plugins: [{{name: job-dsl, version: \"1.80\"}}]\n"
        )
    };
    let r = render_only(&with_profile(&spec("cells: 3"))).expect("a cell renders");
    let dsl = r.plugins.iter().find(|p| p.name == "job-dsl").expect("job-dsl");
    assert_eq!(dsl.version, "1.90", "the profile's job-dsl");
    let notice = r.notices.iter().find(|n| n.reason == "JobDslPinIgnored").expect("a notice for the event");
    assert!(notice.message.contains("job-dsl:1.80") && notice.message.contains("job-dsl:1.90"), "{}", notice.message);
    // A single controller does not get that exception: the pin conflicts with the lock.
    let err = render_only(&with_profile(&spec("cells: 1"))).expect_err("blocked");
    assert!(matches!(err, RenderError::Plugins(_)), "{err}");
}

#[test]
fn the_same_inputs_give_byte_identical_output_whatever_their_order() {
    let l = examples();
    let c = controller(&l, "team-a");
    let a = render(&c, &l.world).expect("renders");
    let b = render(&c, &l.world).expect("renders");
    assert_eq!(a.files, b.files);
    assert_eq!(a.digest, b.digest);
    assert!(a.digest.starts_with("sha256:") && a.digest.len() == 71);
    // Lists from the API come in any order; key order in a catalog item does not matter.
    let mut world = l.world.clone();
    world.pod_templates.reverse();
    world.jenkins_roles.reverse();
    world.jenkins_role_bindings.reverse();
    world.profiles.reverse();
    for item in &mut world.catalog_items {
        if let Some(serde_json::Value::Object(m)) = &mut item.spec.casc {
            let rev: serde_json::Map<String, serde_json::Value> = m.clone().into_iter().rev().collect();
            *m = rev;
        }
    }
    let c2 = render(&c, &world).expect("renders");
    assert_eq!(a.files, c2.files);
    assert_eq!(a.digest, c2.digest);
}

#[test]
fn a_jcasc_change_moves_only_the_casc_digest_and_a_plugin_change_only_the_plugin_digest() {
    let l = examples();
    let c = controller(&l, "team-a");
    let before = render(&c, &l.world).expect("renders");
    let mut world = l.world.clone();
    let item = world.catalog_items.iter_mut().find(|i| i.metadata.name.as_deref() == Some("team-a-location")).unwrap();
    item.spec.casc.as_mut().unwrap()["unclassified"]["location"]["adminAddress"] = json!("other@example.com");
    let casc_changed = render(&c, &world).expect("renders");
    assert_ne!(before.casc_digest, casc_changed.casc_digest);
    assert_eq!(before.plugins_digest, casc_changed.plugins_digest);
    let mut c2 = c.clone();
    c2.spec.settings.plugins[0].version = "1.29".into();
    let plugin_changed = render(&c2, &l.world).expect("renders");
    assert_eq!(before.casc_digest, plugin_changed.casc_digest);
    assert_ne!(before.plugins_digest, plugin_changed.plugins_digest);
}

const GIT_BUNDLE: &str = r#"
apiVersion: varroa.dev/v1alpha1
kind: ComposedBundle
metadata: {name: b, namespace: ns}
spec:
  inputs:
  - catalogItem: {name: varroa-starter}
  - git: {url: "https://git.example.com/ci.git", ref: v1, path: jenkins}
---
apiVersion: varroa.dev/v1alpha1
kind: Controller
metadata: {name: x, namespace: ns}
spec: {versionProfile: p1, composedBundleRef: {name: b}}
"#;

fn fetched(files: &[(&str, &str)], stale: Option<&str>) -> FetchedInput {
    FetchedInput {
        revision: "0123abcd".into(),
        files: files.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect(),
        stale_error: stale.map(str::to_string),
    }
}

#[test]
fn git_and_oci_inputs_are_read_from_their_files_and_a_stale_one_is_reported() {
    let mut l = with_profile(GIT_BUNDLE);
    let key = "git https://git.example.com/ci.git@v1:jenkins".to_string();
    // Not fetched at all: blocked, naming the input.
    let err = render_only(&l).expect_err("unavailable").to_string();
    assert!(err.contains("ComposedBundle b inputs[1] (git https://git.example.com/ci.git@v1:jenkins)"), "{err}");
    l.world.fetched.insert(key.clone(), Err("reference v1 not found".into()));
    let err = render_only(&l).expect_err("unavailable").to_string();
    assert!(err.contains("reference v1 not found"), "{err}");
    // Files: YAML fragments merged in path order, plugins from plugins.txt.
    l.world.fetched.insert(
        key.clone(),
        Ok(fetched(
            &[
                ("a.yaml", "jenkins:\n  systemMessage: from a\n"),
                (
                    "b.yml",
                    "jenkins:\n  systemMessage: from b\nunclassified: {location: {adminAddress: ops@example.com}}\n",
                ),
                ("plugins.txt", "# needed\ntimestamper:1.28\ngit\n"),
                ("README.md", "ignored"),
            ],
            None,
        )),
    );
    let r = render_only(&l).expect("renders");
    assert_eq!(r.casc["jenkins"]["systemMessage"], json!("from b"));
    assert_eq!(r.casc["jenkins"]["numExecutors"], json!(0));
    assert!(r.plugins.iter().any(|p| p.name == "timestamper" && p.version == "1.28"));
    assert_eq!(r.inputs[1].1.as_deref(), Some("0123abcd"));
    assert!(r.notices.is_empty());
    // The last good files with the latest fetch's error: rendered, and reported.
    l.world.fetched.insert(
        key,
        Ok(fetched(&[("a.yaml", "jenkins: {systemMessage: kept}\n")], Some("tag v1 moved to a missing commit"))),
    );
    let r = render_only(&l).expect("renders from the last good revision");
    assert_eq!(r.casc["jenkins"]["systemMessage"], json!("kept"));
    let n = r.notices.iter().find(|n| n.reason == "InputFetchFailed").expect("reported");
    assert!(n.message.contains("tag v1 moved to a missing commit") && n.message.contains("inputs[1]"), "{}", n.message);
}

#[test]
fn inputs_that_cannot_merge_name_both_inputs() {
    let l = with_profile(
        r#"
apiVersion: varroa.dev/v1alpha1
kind: CatalogItem
metadata: {name: one, namespace: ns}
spec: {casc: {unclassified: {location: {url: "https://a/"}}}}
---
apiVersion: varroa.dev/v1alpha1
kind: CatalogItem
metadata: {name: two, namespace: ns}
spec: {casc: {unclassified: {location: "https://b/"}}}
---
apiVersion: varroa.dev/v1alpha1
kind: ComposedBundle
metadata: {name: b, namespace: ns}
spec:
  inputs: [{catalogItem: {name: one}}, {catalogItem: {name: two}}]
---
apiVersion: varroa.dev/v1alpha1
kind: Controller
metadata: {name: x, namespace: ns}
spec: {versionProfile: p1, composedBundleRef: {name: b}}
"#,
    );
    let err = render_only(&l).expect_err("conflict").to_string();
    for part in
        ["unclassified.location", "inputs[0] (catalogItem one)", "inputs[1] (catalogItem two)", "cannot be merged"]
    {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
}

#[test]
fn missing_references_block_with_the_fix() {
    let cases = [
        ("spec: {className: nope, versionProfile: p1}", "ControllerClass nope, which does not exist"),
        ("spec: {}", "no JenkinsVersionProfile chosen: set spec.versionProfile"),
        ("spec: {versionProfile: p9}", "JenkinsVersionProfile p9 (from the Controller's spec) does not exist"),
        (
            "spec: {versionProfile: p1, composedBundleRef: {name: nb}}",
            "ComposedBundle nb (from the Controller's spec) does not exist in namespace ns",
        ),
    ];
    for (spec, expected) in cases {
        let l = with_profile(&format!(
            "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {{name: x, namespace: ns}}\n{spec}\n"
        ));
        let err = render_only(&l).expect_err(spec).to_string();
        assert!(err.contains(expected), "{spec}: expected {expected:?} in {err}");
    }
    // A plugin an input needs without a version, that the lock does not list.
    let l = with_profile(
        "apiVersion: varroa.dev/v1alpha1\nkind: CatalogItem\nmetadata: {name: i, namespace: ns}\nspec: {plugins: [{name: ansicolor}]}\n---\napiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: b, namespace: ns}\nspec: {inputs: [{catalogItem: {name: i}}]}\n---\napiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: x, namespace: ns}\nspec: {versionProfile: p1, composedBundleRef: {name: b}}\n",
    );
    let err = render_only(&l).expect_err("unversioned").to_string();
    assert!(
        err.contains("needs plugin ansicolor without a version") && err.contains("pin it in the Controller"),
        "{err}"
    );
}

#[test]
fn a_file_with_a_bad_object_is_refused_naming_the_file_and_the_object() {
    let mut l = Loaded::default();
    let err = l
        .add_yaml(
            "team.yaml",
            "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: x}\nspec: {cells: many}\n",
        )
        .expect_err("invalid")
        .to_string();
    assert!(err.contains("team.yaml") && err.contains("Controller x"), "{err}");
    let err = l.add_yaml("broken.yaml", "kind: [").expect_err("not yaml").to_string();
    assert!(err.contains("broken.yaml"), "{err}");
    let _ = World::default();
}

#[test]
fn the_claims_failure_mode_resolves_most_specific_first_with_its_origin() {
    use varroa_api::WhenLedgerDown::{FailClosed, FailOpen};
    let world_with = |defaults: &str, class: &str, controller: &str| {
        with_profile(&format!(
            r#"
apiVersion: varroa.dev/v1alpha1
kind: ProvisioningDefaults
metadata: {{name: default}}
spec: {{versionProfile: p1{defaults}}}
---
apiVersion: varroa.dev/v1alpha1
kind: ControllerClass
metadata: {{name: c}}
spec: {{{class}}}
---
apiVersion: varroa.dev/v1alpha1
kind: Controller
metadata: {{name: x, namespace: ns}}
spec: {{className: c{controller}}}
"#
        ))
    };
    let world = |class: &str, controller: &str| world_with("", class, controller);
    let mode = |l: &Loaded| {
        let r = render_only(l).expect("renders");
        (
            r.settings.settings.claims.as_ref().and_then(|c| c.when_ledger_down),
            r.settings.why("claims.whenLedgerDown").cloned(),
        )
    };
    // Nobody sets it: Varroa's default, failClosed.
    assert_eq!(mode(&world("", "")), (Some(FailClosed), Some(Layer::BuiltIn)));
    // The installation's defaults say failOpen; a class that sets nothing inherits it.
    assert_eq!(
        mode(&world_with(", claims: {whenLedgerDown: failOpen}", "", "")),
        (Some(FailOpen), Some(Layer::Defaults))
    );
    // The class says failOpen.
    assert_eq!(
        mode(&world("claims: {whenLedgerDown: failOpen}", "")),
        (Some(FailOpen), Some(Layer::Class("c".into())))
    );
    // The controller overrides the class back to failClosed.
    assert_eq!(
        mode(&world("claims: {whenLedgerDown: failOpen}", ", claims: {whenLedgerDown: failClosed}")),
        (Some(FailClosed), Some(Layer::Controller))
    );
    // An empty claims section inherits.
    assert_eq!(
        mode(&world("claims: {whenLedgerDown: failOpen}", ", claims: {}")),
        (Some(FailOpen), Some(Layer::Class("c".into())))
    );
}
