//! Every vesperctl command against devcluster with the Vesper operator running: outputs, errors
//! and exit codes (0 success, 1 failure, 2 usage, 3 timeout).

mod common;

use common::{DOMAIN, Harness, Setup, run_command};
use devcluster::faults::{Fault, FaultRule};
use kube::api::{Api, PostParams};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

const IMAGE: &str = "registry.example.com/app:pr-1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_wait_get_describe_url_delete() {
    let h = Harness::start().await;

    let r = h
        .vesperctl(&[
            "create",
            "pr-1",
            "--image",
            IMAGE,
            "--env",
            "GREETING=hi",
            "--arg",
            "--verbose",
            "--wait",
            "--timeout",
            "60s",
        ])
        .await
        .expect(0);
    assert!(r.stdout.starts_with("previewenvironment.vesper.eventide.dev/pr-1 created\n"), "{}", r.stdout);
    assert!(r.stdout.contains("pr-1 ready at https://pr-1-default-"), "{}", r.stdout);
    assert!(r.stderr.is_empty(), "not on a terminal, waiting prints nothing: {}", r.stderr);

    // url: just the URL.
    let url = h.vesperctl(&["url", "pr-1"]).await.expect(0).stdout;
    assert!(url.starts_with("https://pr-1-default-") && url.ends_with(&format!(".{DOMAIN}\n")), "{url}");
    assert_eq!(url.lines().count(), 1);

    // get: the table.
    let table = h.vesperctl(&["get", "pr-1"]).await.expect(0).stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    let header: Vec<&str> = lines[0].split("   ").map(str::trim).filter(|s| !s.is_empty()).collect();
    assert_eq!(header, ["NAME", "PHASE", "URL", "EXPIRES IN", "AGE"], "{table}");
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&row[..3], ["pr-1", "Ready", url.trim()], "{table}");
    assert!(row[3] == "23h59m" || row[3] == "23h58m", "expires in: {table}");

    // -o wide, json, yaml, name; list and list -A.
    let wide = h.vesperctl(&["get", "pr-1", "-o", "wide"]).await.expect(0).stdout;
    assert!(
        wide.contains("IMAGE") && wide.contains(IMAGE) && wide.contains("1/1") && wide.contains("vesper-default-pr-1-"),
        "{wide}"
    );
    let json: Value =
        serde_json::from_str(&h.vesperctl(&["get", "pr-1", "-o", "json"]).await.expect(0).stdout).expect("JSON");
    assert_eq!(json["kind"], "PreviewEnvironment");
    assert_eq!(json["spec"]["image"], IMAGE);
    assert_eq!(json["spec"]["env"][0]["name"], "GREETING");
    assert_eq!(json["spec"]["args"][0], "--verbose");
    assert_eq!(json["status"]["phase"], "Ready");
    assert!(json["metadata"].get("managedFields").is_none());
    let list: Value = serde_json::from_str(&h.vesperctl(&["list", "-o", "json"]).await.expect(0).stdout).expect("JSON");
    assert_eq!((list["kind"].as_str(), list["items"].as_array().map(Vec::len)), (Some("List"), Some(1)));
    let yaml = h.vesperctl(&["get", "pr-1", "-o", "yaml"]).await.expect(0).stdout;
    assert!(yaml.contains("kind: PreviewEnvironment") && yaml.contains("phase: Ready"), "{yaml}");
    let name = h.vesperctl(&["get", "-o", "name"]).await.expect(0).stdout;
    assert_eq!(name, "previewenvironment.vesper.eventide.dev/pr-1\n");
    let all = h.vesperctl(&["list", "-A"]).await.expect(0).stdout;
    assert!(all.starts_with("NAMESPACE   NAME"), "{all}");
    assert!(all.lines().nth(1).is_some_and(|l| l.starts_with("default     pr-1")), "{all}");
    let empty = h.vesperctl(&["list", "-n", "kube-system"]).await.expect(0);
    assert_eq!((empty.stdout.as_str(), empty.stderr.as_str()), ("", "No previews found in namespace kube-system.\n"));

    // describe: spec, status, conditions, events, objects.
    let d = h.vesperctl(&["describe", "pr-1"]).await.expect(0).stdout;
    for want in [
        "Name:",
        IMAGE,
        "GREETING=hi",
        "Phase:",
        "Ready",
        "Conditions:",
        "TYPE",
        "Available",
        "Events:",
        "vesper-operator",
        "Objects in namespace vesper-default-pr-1-",
        "Deployment/app",
        "1/1 ready, 1 up-to-date, 1 available",
        "Pod/app-",
        "Running, 1/1 ready, 0 restarts",
        "Service/app",
        "80->http",
        "Ingress/app",
        &format!(".{DOMAIN}"),
        "ResourceQuota/",
        "NetworkPolicy/",
    ] {
        assert!(d.contains(want), "describe lacks {want:?}:\n{d}");
    }

    // delete --wait: gone when it returns.
    let r = h.vesperctl(&["delete", "pr-1", "--wait", "--timeout", "60s"]).await.expect(0);
    assert_eq!(r.stdout, "previewenvironment.vesper.eventide.dev/pr-1 deleted\n");
    assert!(h.previews("default").get_opt("pr-1").await.expect("get").is_none());
    let r = h.vesperctl(&["get", "pr-1"]).await.expect(1);
    assert!(r.stderr.contains("preview \"pr-1\" not found in namespace default"), "{}", r.stderr);
    h.vesperctl(&["delete", "pr-1"]).await.expect(1);
    h.vesperctl(&["describe", "pr-1"]).await.expect(1);
    h.vesperctl(&["url", "pr-1"]).await.expect(1);
    let r = h.vesperctl(&["wait", "pr-1", "--for", "deleted"]).await.expect(0);
    assert_eq!(r.stdout, "previewenvironment.vesper.eventide.dev/pr-1 deleted\n");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_then_changes_only_the_fields_given() {
    let h = Harness::start().await;
    let api = h.previews("default");

    let r = h
        .vesperctl(&[
            "apply",
            "pr-2",
            "--image",
            "registry.example.com/app:v1",
            "--env",
            "A=1",
            "--replicas",
            "2",
            "--wait",
        ])
        .await
        .expect(0);
    assert!(r.stdout.starts_with("previewenvironment.vesper.eventide.dev/pr-2 created\n"), "{}", r.stdout);
    assert!(r.stdout.contains("ready at https://"), "{}", r.stdout);

    // What CI does on the next push: only the image.
    let r = h
        .vesperctl(&["apply", "pr-2", "--image", "registry.example.com/app:v2", "--wait", "--timeout", "60s"])
        .await
        .expect(0);
    assert!(r.stdout.starts_with("previewenvironment.vesper.eventide.dev/pr-2 configured\n"), "{}", r.stdout);
    let pe = api.get("pr-2").await.expect("get");
    assert_eq!(pe.spec.image, "registry.example.com/app:v2");
    assert_eq!(pe.spec.replicas, 2, "fields not given are kept");
    assert_eq!(pe.spec.env.len(), 1, "fields not given are kept");
    assert_eq!(pe.status.as_ref().and_then(|s| s.phase), Some(vesper_api::Phase::Ready));
    assert_eq!(
        pe.status.as_ref().and_then(|s| s.observed_generation),
        pe.metadata.generation,
        "ready for the new spec"
    );
    let managers: Vec<(String, String)> = pe
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.manager.unwrap_or_default(), m.operation.unwrap_or_default()))
        .collect();
    assert!(managers.contains(&("vesperctl".into(), "Apply".into())), "{managers:?}");

    // The same again changes nothing.
    let r = h.vesperctl(&["apply", "pr-2", "--image", "registry.example.com/app:v2"]).await.expect(0);
    assert_eq!(r.stdout, "previewenvironment.vesper.eventide.dev/pr-2 unchanged\n");

    // A field someone else changed is taken back by the next apply of it; others are left alone.
    api.patch(
        "pr-2",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"spec": {"image": "registry.example.com/app:hand", "port": 9090}})),
    )
    .await
    .expect("hand edit");
    h.vesperctl(&["apply", "pr-2", "--image", "registry.example.com/app:v3"]).await.expect(0);
    let pe = api.get("pr-2").await.expect("get");
    assert_eq!((pe.spec.image.as_str(), pe.spec.port, pe.spec.replicas), ("registry.example.com/app:v3", 9090, 2));

    // create refuses an existing preview; apply without an image cannot create one.
    let r = h.vesperctl(&["create", "pr-2", "--image", "registry.example.com/app:v9"]).await.expect(1);
    assert!(r.stderr.contains("already exists") && r.stderr.contains("vesperctl apply"), "{}", r.stderr);
    let r = h.vesperctl(&["apply", "pr-3", "--ttl", "2h"]).await.expect(1);
    assert!(r.stderr.contains("spec.image"), "{}", r.stderr);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_the_field_and_the_rule() {
    let h = Harness::start().await;
    let r = h.vesperctl(&["create", "bad", "--image", "nginx"]).await.expect(1);
    assert!(
        r.stderr.starts_with(
            "error: creating preview \"bad\" in namespace default: the API server refused it (422 Invalid):\n"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!("  spec.image: Invalid value: \"string\": {}", vesper_api::IMAGE_MESSAGE)),
        "{}",
        r.stderr
    );
    let r = h.vesperctl(&["create", "bad", "--image", "app:v1", "--ttl", "8d", "--replicas", "9"]).await.expect(1);
    assert!(r.stderr.contains(vesper_api::TTL_MESSAGE) && r.stderr.contains("spec.replicas"), "{}", r.stderr);
    let r = h.vesperctl(&["create", "bad", "--image", "app:v1", "--env", "1BAD=x"]).await.expect(1);
    assert!(r.stderr.contains("spec.env[0].name"), "{}", r.stderr);
    assert!(h.previews("default").get_opt("bad").await.expect("get").is_none(), "nothing stored");

    // Usage errors are clap's, exit 2.
    h.vesperctl(&["create", "x"]).await.expect(2);
    h.vesperctl(&["create", "x", "--image", "app:v1", "--env", "NOEQUALS"]).await.expect(2);
    h.vesperctl(&["wait", "x", "--for", "sideways"]).await.expect(2);
    h.vesperctl(&["create", "x", "--image", "app:v1", "--timeout", "1m"]).await.expect(2);
    h.vesperctl(&["extend", "x"]).await.expect(2);
    h.vesperctl(&["get", "x", "-o", "xml"]).await.expect(2);
    h.vesperctl(&["frobnicate"]).await.expect(2);

    // A namespace that does not exist.
    let r = h.vesperctl(&["create", "x", "--image", "app:v1", "-n", "nope"]).await.expect(1);
    assert!(r.stderr.contains("namespace \"nope\" does not exist"), "{}", r.stderr);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_moves_the_expiry_within_seven_days() {
    let h = Harness::start().await;
    let api = h.previews("default");
    h.vesperctl(&["create", "pr-4", "--image", IMAGE, "--ttl", "24h"]).await.expect(0);

    let r = h.vesperctl(&["extend", "pr-4", "--by", "2h"]).await.expect(0);
    assert!(
        r.stdout.starts_with("previewenvironment.vesper.eventide.dev/pr-4 extended: ttl 26h, expires "),
        "{}",
        r.stdout
    );
    assert_eq!(api.get("pr-4").await.expect("get").spec.ttl, "26h");
    h.vesperctl(&["extend", "pr-4", "--ttl", "36h"]).await.expect(0);
    assert_eq!(api.get("pr-4").await.expect("get").spec.ttl, "36h");

    // extend never shortens (a shorter ttl could put the expiry in the past): it names the
    // command that does, and changes nothing; the same ttl is no change.
    let r = h.vesperctl(&["extend", "pr-4", "--ttl", "1m"]).await.expect(1);
    assert!(
        r.stderr.contains("its ttl is 36h already, and extend never shortens one")
            && r.stderr.contains("vesperctl apply pr-4 --ttl 1m"),
        "{}",
        r.stderr
    );
    assert_eq!(api.get("pr-4").await.expect("get").spec.ttl, "36h", "not shortened");
    let r = h.vesperctl(&["extend", "pr-4", "--ttl", "36h"]).await.expect(0);
    assert!(r.stdout.contains("pr-4 unchanged: ttl 36h"), "{}", r.stdout);
    // apply shortens, and says so.
    let r = h.vesperctl(&["apply", "pr-4", "--ttl", "30h"]).await.expect(0);
    assert!(r.stdout.contains("pr-4 configured"), "{}", r.stdout);
    assert!(
        r.stderr.contains("note: the ttl of preview \"pr-4\" was shortened from 36h to 30h; it expires at "),
        "{}",
        r.stderr
    );
    h.vesperctl(&["extend", "pr-4", "--ttl", "36h"]).await.expect(0);

    // Past 7 days: refused before asking the API server, with the latest possible expiry.
    let r = h.vesperctl(&["extend", "pr-4", "--by", "7d"]).await.expect(1);
    assert!(
        r.stderr.contains("past the 7-day limit") && r.stderr.contains("extend it by at most 5d12h"),
        "{}",
        r.stderr
    );
    let r = h.vesperctl(&["extend", "pr-4", "--ttl", "8d"]).await.expect(1);
    assert!(r.stderr.contains("past the 7-day limit"), "{}", r.stderr);
    assert_eq!(api.get("pr-4").await.expect("get").spec.ttl, "36h", "nothing changed");
    let r = h.vesperctl(&["extend", "pr-4", "--by", "90s"]).await.expect(1);
    assert!(r.stderr.contains("whole number of minutes"), "{}", r.stderr);

    // The API server's own refusal comes through with the field and the rule.
    let r = h.vesperctl(&["apply", "pr-4", "--ttl", "8d"]).await.expect(1);
    assert!(
        r.stderr.contains(&format!("spec.ttl: Invalid value: \"string\": {}", vesper_api::TTL_MESSAGE)),
        "{}",
        r.stderr
    );

    // Up to the bound, and the operator moves the expiry.
    h.vesperctl(&["extend", "pr-4", "--ttl", "7d"]).await.expect(0);
    let moved = async {
        loop {
            let pe = api.get("pr-4").await.expect("get");
            let created = pe.metadata.creation_timestamp.clone().expect("created").0;
            if pe
                .status
                .and_then(|s| s.expires_at)
                .is_some_and(|at| at.0.duration_since(created).as_secs() == 7 * 86400)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), moved).await.expect("the operator moves status.expiresAt");
    let table = h.vesperctl(&["get", "pr-4"]).await.expect(0).stdout;
    assert!(table.contains("6d23h"), "{table}");
    let r = h.vesperctl(&["extend", "pr-4", "--by", "1m"]).await.expect(1);
    assert!(r.stderr.contains("already has the longest ttl"), "{}", r.stderr);
    let r = h.vesperctl(&["extend", "nope", "--by", "1h"]).await.expect(1);
    assert!(r.stderr.contains("preview \"nope\" not found"), "{}", r.stderr);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_times_out_with_exit_3_and_a_failed_preview_exits_1() {
    let h = Harness::start_with(Setup {
        faults: vec![
            FaultRule::new("registry.example.com/app:missing", Fault::ImagePull),
            FaultRule::new("registry.example.com/app:stuck", Fault::Deadline),
        ],
        ..Default::default()
    })
    .await;

    // An image that cannot be pulled: never ready; the wait gives up with exit code 3.
    let r = h
        .vesperctl(&["create", "pr-5", "--image", "registry.example.com/app:missing", "--wait", "--timeout", "3s"])
        .await
        .expect(3);
    assert!(r.stdout.contains("pr-5 created"), "{}", r.stdout);
    assert!(
        r.stderr.starts_with("error: timed out after 3s waiting for preview \"pr-5\" to be ready; last seen: Pending"),
        "{}",
        r.stderr
    );
    let r = h.vesperctl(&["wait", "pr-5", "--for", "ready", "--timeout", "2s"]).await.expect(3);
    assert!(r.stderr.contains("timed out after 2s"), "{}", r.stderr);
    let d = h.vesperctl(&["describe", "pr-5"]).await.expect(0).stdout;
    assert!(d.contains("ImagePullBackOff") && d.contains("0/1 ready"), "{d}");

    // A rollout that makes no progress: phase Failed, exit 1 with the reason and message.
    let r = h
        .vesperctl(&["create", "pr-6", "--image", "registry.example.com/app:stuck", "--wait", "--timeout", "60s"])
        .await
        .expect(1);
    assert!(r.stderr.starts_with("error: preview \"pr-6\" failed: RolloutStuck: the rollout of registry.example.com/app:stuck made no progress"), "{}", r.stderr);
    h.vesperctl(&["wait", "pr-6", "--for", "ready"]).await.expect(1);
    // Fixing the image makes it ready.
    let r = h
        .vesperctl(&["apply", "pr-6", "--image", "registry.example.com/app:fixed", "--wait", "--timeout", "60s"])
        .await
        .expect(0);
    assert!(r.stdout.contains("pr-6 ready at https://"), "{}", r.stdout);

    // Waiting for a preview that does not exist fails at once; for its deletion succeeds.
    let r = h.vesperctl(&["wait", "nope", "--for", "ready"]).await.expect(1);
    assert!(r.stderr.contains("not found"), "{}", r.stderr);
    h.vesperctl(&["wait", "nope", "--for", "deleted"]).await.expect(0);
    // delete without --wait returns at once; waiting for deletion then works.
    let r = h.vesperctl(&["delete", "pr-5"]).await.expect(0);
    assert!(r.stdout.contains("pr-5 marked for deletion") || r.stdout.contains("pr-5 deleted"), "{}", r.stdout);
    h.vesperctl(&["wait", "pr-5", "--for", "deleted", "--timeout", "60s"]).await.expect(0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_fails_until_there_is_one() {
    let h = Harness::start_with(Setup { preview_domain: None, ..Default::default() }).await;
    let r = h.vesperctl(&["create", "pr-8", "--image", IMAGE, "--wait", "--timeout", "60s"]).await.expect(0);
    assert!(r.stdout.contains("pr-8 ready (no URL"), "{}", r.stdout);
    let r = h.vesperctl(&["url", "pr-8"]).await.expect(1);
    assert_eq!(r.stdout, "");
    assert!(r.stderr.starts_with("error: preview \"pr-8\" has no URL yet (Ready"), "{}", r.stderr);
    assert!(r.stderr.contains("--preview-domain"), "{}", r.stderr);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_vesper_runs_it_as_a_plugin() {
    let h = Harness::start().await;
    h.vesperctl(&["create", "pr-7", "--image", IMAGE, "--wait", "--timeout", "60s"]).await.expect(0);
    let dir = common::plugin_dir();
    let kubectl = |args: &[&str]| {
        let mut cmd = Command::new("/usr/bin/kubectl");
        cmd.args(args).env("KUBECONFIG", h.kubeconfig()).env("PATH", common::path_with(dir.path()));
        run_command(cmd)
    };
    let r = kubectl(&["vesper", "get", "pr-7"]).await.expect(0);
    assert!(r.stdout.starts_with("NAME   PHASE   URL"), "{}", r.stdout);
    assert!(r.stdout.contains("pr-7   Ready   https://pr-7-default-"), "{}", r.stdout);
    let r = kubectl(&["vesper", "list", "-o", "json"]).await.expect(0);
    serde_json::from_str::<Value>(&r.stdout).expect("JSON");
    let r = kubectl(&["vesper", "--help"]).await.expect(0);
    assert!(r.stdout.contains("Usage: kubectl vesper [OPTIONS] <COMMAND>"), "{}", r.stdout);
    let r = kubectl(&["vesper", "frobnicate"]).await.expect(2);
    assert!(r.stderr.contains("Usage: kubectl vesper"), "{}", r.stderr);
    let r = kubectl(&["plugin", "list"]).await;
    assert!(r.stdout.contains("kubectl-vesper"), "{}{}", r.stdout, r.stderr);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_the_kubeconfig_like_kubectl() {
    let h = Harness::start().await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(h.dc.client());
    let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": "team-a"}})).expect("namespace");
    namespaces.create(&PostParams::default(), &ns).await.expect("create team-a");

    // A kubeconfig with two contexts: the current one in team-a, another in default.
    let original = h.dc.kubeconfig_yaml();
    let two = original
        .replace("    namespace: default\n    user: admin\n  name: devcluster\n",
                 "    namespace: team-a\n    user: admin\n  name: devcluster\n- context:\n    cluster: devcluster\n    namespace: default\n    user: admin\n  name: other\n");
    assert_ne!(two, original, "the kubeconfig has the expected shape");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config");
    std::fs::write(&path, two).expect("write kubeconfig");
    let p = path.to_str().expect("utf-8 path");
    let bare = |args: &[&str]| {
        let mut cmd = Command::new(common::bin());
        cmd.args(args).env_remove("KUBECONFIG").env_remove("HOME");
        run_command(cmd)
    };

    bare(&["--kubeconfig", p, "create", "pr-9", "--image", IMAGE]).await.expect(0);
    assert!(h.previews("team-a").get_opt("pr-9").await.expect("get").is_some(), "the context's namespace");
    let r = bare(&["list", "--kubeconfig", p, "--context", "other"]).await.expect(0);
    assert_eq!(r.stderr, "No previews found in namespace default.\n");
    bare(&["get", "pr-9", "--kubeconfig", p, "--context", "other", "-n", "team-a"]).await.expect(0);
    let mut cmd = Command::new(common::bin());
    cmd.args(["get", "pr-9", "-o", "name"]).env("KUBECONFIG", &path).env_remove("HOME");
    assert_eq!(run_command(cmd).await.expect(0).stdout, "previewenvironment.vesper.eventide.dev/pr-9\n");

    let r = bare(&["list", "--kubeconfig", p, "--context", "nope"]).await.expect(1);
    assert!(r.stderr.contains("nope"), "{}", r.stderr);
    let r = bare(&["list", "--kubeconfig", "/nonexistent/config"]).await.expect(1);
    assert!(r.stderr.contains("/nonexistent/config"), "{}", r.stderr);
    let r = bare(&["list"]).await.expect(1);
    assert!(r.stderr.contains("KUBECONFIG"), "{}", r.stderr);

    // A user without RBAC access is told so, readably.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(h.dc.client(), "default");
    let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": "robot"}})).expect("service account");
    sas.create(&PostParams::default(), &sa).await.expect("create robot");
    let tr =
        sas.create_token_request("robot", &PostParams::default(), &Default::default()).await.expect("token request");
    let token = tr.status.expect("token").token;
    let robot: String = original
        .lines()
        .map(|l| if l.trim_start().starts_with("token: ") { format!("    token: {token}\n") } else { format!("{l}\n") })
        .collect();
    let robot_path = dir.path().join("robot");
    std::fs::write(&robot_path, robot).expect("write kubeconfig");
    let r = bare(&["list", "--kubeconfig", robot_path.to_str().expect("utf-8")]).await.expect(1);
    assert!(r.stderr.contains("the API server forbids it (403 Forbidden)"), "{}", r.stderr);
    assert!(r.stderr.contains("system:serviceaccount:default:robot"), "{}", r.stderr);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shows_progress_on_a_terminal() {
    let h = Harness::start_with(Setup { pod_startup: Duration::from_millis(1500), ..Default::default() }).await;
    // `script` gives the command a terminal.
    let line = format!("{} create pr-10 --image {IMAGE} --wait --timeout 60s", common::bin().display());
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c", &line, "/dev/null"]).env("KUBECONFIG", h.kubeconfig());
    let r = run_command(cmd).await.expect(0);
    let progress: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with('[')).collect();
    assert!(progress.iter().any(|l| l.contains("pr-10: Pending: RollingOut: rolling out")), "{}", r.stdout);
    assert!(progress.last().is_some_and(|l| l.contains("pr-10: Ready: Available: 1 of 1 pods ready")), "{}", r.stdout);
    assert!(r.stdout.contains("pr-10 ready at https://"), "{}", r.stdout);

    // Not on a terminal: only the outcome lines.
    let r = h.vesperctl(&["delete", "pr-10", "--wait", "--timeout", "60s"]).await.expect(0);
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("previewenvironment.vesper.eventide.dev/pr-10 deleted\n", ""));
    h.stop().await;
}
