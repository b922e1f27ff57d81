//! `varroa-operator render`, the built binary: from the docs' examples, from a real local Git
//! repository, and refusing what it cannot render with the reason and the right exit code.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_varroa-operator"))
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/varroa/examples")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("varroa-operator runs")
}

#[test]
fn render_shows_where_each_setting_came_from_and_the_files() {
    let out = run(&["render", "-f", examples().to_str().unwrap(), "--controller", "team-a/team-a"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    let line =
        |prefix: &str| stdout.lines().find(|l| l.trim_start().starts_with(prefix)).unwrap_or_default().to_string();
    let size = line("storage.size ");
    assert!(size.contains("50Gi") && size.ends_with("ControllerClass large"), "{size}");
    let cpu = line("resources.requests.cpu ");
    assert!(cpu.contains("500m") && cpu.ends_with("ProvisioningDefaults default"), "{cpu}");
    assert!(line("timestamper:1.28").ends_with("pinned by the Controller's spec"));
    assert!(stdout.contains("--- jenkins.yaml\n# Rendered by Varroa for Controller team-a/team-a"));
    assert!(stdout.contains("--- plugins.txt\n"));
    assert!(!stdout.contains("Controller team-a/sandbox"), "only the selected controller");
}

#[test]
fn render_json_and_output_dir_give_the_same_files_every_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(&[
        "render",
        "-f",
        examples().to_str().unwrap(),
        "-o",
        "json",
        "--output-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let all = v.as_array().expect("a list");
    assert_eq!(all.len(), 2);
    let sandbox = all.iter().find(|c| c["controller"] == "team-a/sandbox").expect("sandbox");
    assert_eq!(sandbox["bundle"], "varroa-starter");
    assert_eq!(sandbox["provenance"]["versionProfile"]["from"], "ProvisioningDefaults default");
    // The build claims failure mode, resolved like every setting.
    assert_eq!(
        sandbox["provenance"]["claims.whenLedgerDown"],
        serde_json::json!({"value": "failClosed", "from": "Varroa's built-in default"})
    );
    let on_disk = std::fs::read_to_string(dir.path().join("team-a/sandbox/jenkins.yaml")).expect("written");
    assert_eq!(on_disk, sandbox["files"]["jenkins.yaml"].as_str().unwrap());
    // A second run is byte-identical.
    let again = run(&["render", "-f", examples().to_str().unwrap(), "-o", "json"]);
    assert_eq!(out.stdout, again.stdout);
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
}

#[test]
fn a_git_input_is_fetched_from_the_repository_and_a_missing_ref_blocks() {
    let repo = tempfile::tempdir().expect("tempdir");
    git(repo.path(), &["init", "-q"]);
    std::fs::create_dir_all(repo.path().join("jenkins")).unwrap();
    std::fs::write(repo.path().join("jenkins/system.yaml"), "jenkins:\n  systemMessage: from git\n").unwrap();
    std::fs::write(repo.path().join("jenkins/plugins.txt"), "timestamper:1.28\n").unwrap();
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "config"]);
    git(repo.path(), &["tag", "v1"]);
    let url = format!("file://{}", repo.path().display());
    let world = |reference: &str| {
        format!(
            r#"
apiVersion: varroa.dev/v1alpha1
kind: JenkinsVersionProfile
metadata: {{name: p}}
spec:
  jenkinsVersion: "2.479.3"
  image: jenkins/jenkins:2.479.3-lts-jdk17
  plugins:
  - {{name: configuration-as-code, version: "1", sha256: "1111111111111111111111111111111111111111111111111111111111111111"}}
  - {{name: kubernetes, version: "1", sha256: "2222222222222222222222222222222222222222222222222222222222222222"}}
  - {{name: workflow-aggregator, version: "1", sha256: "3333333333333333333333333333333333333333333333333333333333333333"}}
  - {{name: git, version: "1", sha256: "4444444444444444444444444444444444444444444444444444444444444444"}}
---
apiVersion: varroa.dev/v1alpha1
kind: ComposedBundle
metadata: {{name: b, namespace: ci}}
spec:
  inputs:
  - catalogItem: {{name: varroa-starter}}
  - git: {{url: "{url}", ref: {reference}, path: jenkins}}
---
apiVersion: varroa.dev/v1alpha1
kind: Controller
metadata: {{name: c, namespace: ci}}
spec: {{versionProfile: p, composedBundleRef: {{name: b}}}}
"#
        )
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, world("v1")).unwrap();
    let out = run(&["render", "-f", file.to_str().unwrap(), "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let c = &v[0];
    assert!(c["files"]["jenkins.yaml"].as_str().unwrap().contains("systemMessage: from git"));
    assert!(c["files"]["plugins.txt"].as_str().unwrap().contains("timestamper:1.28\n"));
    let rev = c["inputs"][1]["revision"].as_str().expect("a revision");
    assert_eq!(rev.len(), 40, "the commit the tag resolved to: {rev}");

    std::fs::write(&file, world("v9")).unwrap();
    let out = run(&["render", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "blocked");
    let err = text(&out.stderr);
    assert!(err.contains("Controller ci/c is blocked") && err.contains("v9"), "{err}");
}

#[test]
fn blocked_and_unreadable_inputs_exit_non_zero_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: c}\nspec: {}\n")
        .unwrap();
    let out = run(&["render", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no JenkinsVersionProfile chosen"), "{}", text(&out.stderr));

    std::fs::write(
        &file,
        "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: c}\nspec: {cells: lots}\n",
    )
    .unwrap();
    let out = run(&["render", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("Controller c"), "{}", text(&out.stderr));
    // A value of the wrong type names the field it is in, as the API server would.
    assert!(text(&out.stderr).contains("spec.cells: invalid type: string \"lots\""), "{}", text(&out.stderr));
    std::fs::write(
        &file,
        "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: c}\nspec: {powerState: 7}\n",
    )
    .unwrap();
    let out = run(&["render", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("spec.powerState: invalid type: integer `7`"), "{}", text(&out.stderr));

    let out = run(&["render", "-f", "/nonexistent/x.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["render"]);
    assert_eq!(out.status.code(), Some(2), "usage");
}

#[test]
fn crds_prints_the_checked_in_crds() {
    let out = run(&["crds"]);
    assert!(out.status.success());
    let on_disk =
        std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/varroa/crds.yaml")).unwrap();
    assert_eq!(out.stdout, on_disk);
}
