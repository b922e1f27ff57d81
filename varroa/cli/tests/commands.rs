//! The `varroa` binary against devcluster, with statuses written by the tests as the operator
//! would write them: the tables and descriptions a user reads, stop/start and their waits, and
//! the exit codes (0 success, 1 failure, 2 usage, 3 timeout).

mod common;

use common::{Cluster, cond, rows, run_command, squeeze};
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::wait::await_condition;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_shows_phase_attention_ready_cells_and_age() {
    let c = Cluster::start().await;
    c.create("default", "alpha", json!({})).await;
    c.create("default", "bravo", json!({})).await;
    c.create("default", "charlie", json!({"cells": 3})).await;
    c.set_status(
        "default",
        "alpha",
        json!({"phase": "Connected", "readyCells": 1, "lastReconciledAt": now(), "observedGeneration": 1,
               "resolved": {"versionProfile": "lts-2.479"},
               "conditions": [cond("Ready", "True", "Connected", "the mite stream is up"),
                              cond("MiteConnected", "True", "StreamUp", "")]}),
    )
    .await;
    c.set_status(
        "default",
        "bravo",
        json!({"phase": "Running", "readyCells": 0,
               "conditions": [cond("JenkinsBootFailed", "True", "CrashLoopBackOff",
                                   "the jenkins container exited with code 137 (OOMKilled)")]}),
    )
    .await;
    // Failed and Blocked at once: Failed wins.
    c.set_status(
        "default",
        "charlie",
        json!({"phase": "Failed", "readyCells": 1,
               "conditions": [cond("Failed", "True", "ProvisioningFailed", "the StatefulSet was refused"),
                              cond("ReconcileBlocked", "True", "PinConflict", "git 5.6.0 is pinned against the lock")]}),
    )
    .await;
    c.create_namespace("team-b").await;
    c.create("team-b", "delta", json!({})).await;

    let r = c.varroa(&["get", "controllers"]).await.expect(0);
    assert!(r.stdout.starts_with("NAME      PHASE       ATTENTION     READY   AGE\n"), "{}", r.stdout);
    let got: Vec<[String; 4]> = rows(&r.stdout)
        .into_iter()
        .map(|row| [row["NAME"].clone(), row["PHASE"].clone(), row["ATTENTION"].clone(), row["READY"].clone()])
        .collect();
    let want = [
        ["alpha", "Connected", "", "1/1"],
        ["bravo", "Running", "Boot failed", "0/1"],
        ["charlie", "Failed", "Failed", "1/3"],
    ];
    assert_eq!(got, want.map(|r| r.map(String::from)), "{}", r.stdout);
    assert!(rows(&r.stdout).iter().all(|row| row["AGE"].ends_with('s')), "{}", r.stdout);

    // One by name, under either spelling of the kind.
    let one = c.varroa(&["get", "controller", "bravo"]).await.expect(0).stdout;
    assert_eq!(one.lines().count(), 2, "{one}");
    assert_eq!(rows(&one)[0]["ATTENTION"], "Boot failed", "{one}");
    c.varroa(&["get", "ctrl", "bravo"]).await.expect(0);

    // -o wide: class, profile and when the operator last reconciled.
    let wide = c.varroa(&["get", "controllers", "-o", "wide"]).await.expect(0).stdout;
    let wide_rows = rows(&wide);
    assert_eq!(wide_rows[0]["PROFILE"], "lts-2.479", "{wide}");
    assert!(wide_rows[0]["RECONCILED"].ends_with('s'), "{wide}");
    assert_eq!((wide_rows[1]["CLASS"].as_str(), wide_rows[1]["RECONCILED"].as_str()), ("<none>", "<never>"), "{wide}");

    // -A: every namespace, NAMESPACE first.
    let all = c.varroa(&["get", "controllers", "-A"]).await.expect(0).stdout;
    let all_rows = rows(&all);
    assert_eq!(all_rows.len(), 4, "{all}");
    assert_eq!(
        (all_rows[3]["NAMESPACE"].as_str(), all_rows[3]["NAME"].as_str(), all_rows[3]["PHASE"].as_str()),
        ("team-b", "delta", "Pending"),
        "{all}"
    );

    // -o name, json, yaml.
    let names = c.varroa(&["get", "controllers", "-o", "name"]).await.expect(0).stdout;
    assert_eq!(names, "controller.varroa.dev/alpha\ncontroller.varroa.dev/bravo\ncontroller.varroa.dev/charlie\n");
    let list: Value =
        serde_json::from_str(&c.varroa(&["get", "controllers", "-o", "json"]).await.expect(0).stdout).expect("JSON");
    assert_eq!((list["kind"].as_str(), list["items"].as_array().map(Vec::len)), (Some("List"), Some(3)));
    let single: Value =
        serde_json::from_str(&c.varroa(&["get", "controller", "charlie", "-o", "json"]).await.expect(0).stdout)
            .expect("JSON");
    assert_eq!((single["kind"].as_str(), single["spec"]["cells"].as_i64()), (Some("Controller"), Some(3)));
    assert!(single["metadata"].get("managedFields").is_none());
    let yaml = c.varroa(&["get", "controller", "bravo", "-o", "yaml"]).await.expect(0).stdout;
    assert!(yaml.contains("kind: Controller") && yaml.contains("phase: Running"), "{yaml}");

    // Nothing there; a name that is not there.
    let empty = c.varroa(&["get", "controllers", "-n", "kube-system"]).await.expect(0);
    assert_eq!(
        (empty.stdout.as_str(), empty.stderr.as_str()),
        ("", "No controllers found in namespace kube-system.\n")
    );
    let r = c.varroa(&["get", "controller", "nope"]).await.expect(1);
    assert!(r.stderr.starts_with("error: controller \"nope\" not found in namespace default"), "{}", r.stderr);
    c.varroa(&["get", "pods"]).await.expect(2);
    c.varroa(&["get", "controllers", "x", "-A"]).await.expect(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_attention_conditions_provenance_and_events() {
    let c = Cluster::start().await;
    c.apply_examples().await;
    let team_a = c
        .set_status(
            "team-a",
            "team-a",
            json!({"phase": "Running", "readyCells": 0, "lastReconciledAt": now(), "observedGeneration": 1,
            "configDigest": "sha256:0123abcd",
            "lastApplyResult": {"succeeded": true, "digest": "sha256:0123abcd", "time": now()},
            "resolved": {"versionProfile": "lts-2.492", "jenkinsVersion": "2.492.3", "bundle": "team-a",
                         "pluginCount": 42},
            "conditions": [
                cond("Ready", "False", "JenkinsBootFailed", "Jenkins does not start"),
                cond("JenkinsBootFailed", "True", "CrashLoopBackOff",
                     "the jenkins container exited with code 137 (OOMKilled)"),
            ]}),
        )
        .await;
    let recorder = Recorder::new(c.dc.client(), Reporter { controller: "varroa-operator".into(), instance: None });
    let regarding = team_a.object_ref(&());
    for (type_, reason, note) in [
        (EventType::Normal, "Provisioned", "created StatefulSet team-a"),
        (EventType::Warning, "BootFailed", "the jenkins container exited with code 137"),
    ] {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        recorder.publish(&ev, &regarding).await.expect("publish event");
    }

    let d = c.varroa(&["describe", "controller", "team-a", "-n", "team-a"]).await.expect(0).stdout;
    let flat = squeeze(&d);
    for want in [
        "Name: team-a",
        "Namespace: team-a",
        "Class: large",
        "Power state: Running",
        "Phase: Running",
        "Attention: Boot failed (JenkinsBootFailed: CrashLoopBackOff: the jenkins container exited with code 137 (OOMKilled))",
        "Cells: 0/1 ready",
        "Resolved: profile lts-2.492, Jenkins 2.492.3, bundle team-a, 42 plugins",
        "Last apply: succeeded at ",
        "Config digest: sha256:0123abcd",
        "Generation: 1 (status describes 1)",
        // Conditions.
        "TYPE STATUS REASON AGE MESSAGE",
        "JenkinsBootFailed True CrashLoopBackOff",
        // Settings and the layer each came from.
        "SETTING VALUE FROM",
        "storage.size 50Gi ControllerClass large",
        "resources.limits.memory 8Gi ControllerClass large",
        "resources.requests.cpu 500m ProvisioningDefaults default",
        "storage.retention Retain ProvisioningDefaults default",
        "versionProfile lts-2.492 ControllerClass large",
        "hibernation.idleAfter 2h ControllerClass large",
        "plugins[timestamper] 1.28 the Controller's spec",
        "ingress.host jenkins.team-a.example.com the Controller's spec",
        "cells 1 Varroa's built-in default",
    ] {
        assert!(flat.contains(want), "describe lacks {want:?}:\n{d}");
    }
    assert!(flat.contains("Last reconciled: ") && flat.contains(" ago)"), "{d}");
    // The events, newest last.
    let events = d.split("Events:\n").nth(1).expect("an Events section");
    let lines: Vec<String> = events.lines().map(squeeze).collect();
    assert_eq!(lines.len(), 3, "{events}");
    assert!(
        lines[1].starts_with("Normal Provisioned ") && lines[1].ends_with("varroa-operator created StatefulSet team-a"),
        "{events}"
    );
    assert!(lines[2].starts_with("Warning BootFailed "), "{events}");

    // sandbox takes everything from the defaults and the built-in values; no events yet.
    let d = c.varroa(&["describe", "controller", "sandbox", "-n", "team-a"]).await.expect(0).stdout;
    let flat = squeeze(&d);
    for want in [
        "Class: <none>",
        "Phase: Pending (no status yet: is the operator running?)",
        "Attention: <none>",
        "storage.size 10Gi ProvisioningDefaults default",
        "versionProfile lts-2.479 ProvisioningDefaults default",
        "jvmOptions [\"-XX:MaxRAMPercentage=75\"] ProvisioningDefaults default",
        "Events:\n<none>",
    ] {
        assert!(flat.contains(want), "describe lacks {want:?}:\n{d}");
    }

    // Without ProvisioningDefaults, the built-in defaults show through.
    c.kubectl(&["delete", "provisioningdefaults", "default"]).await.expect(0);
    let d = squeeze(&c.varroa(&["describe", "controller", "sandbox", "-n", "team-a"]).await.expect(0).stdout);
    assert!(d.contains("storage.size 10Gi Varroa's built-in default"), "{d}");

    // A class that does not exist: resolve's own message.
    c.create("team-a", "orphan", json!({"className": "huge"})).await;
    let d = c.varroa(&["describe", "controller", "orphan", "-n", "team-a"]).await.expect(0).stdout;
    assert!(
        d.contains("  <cannot resolve: spec.className names ControllerClass huge, which does not exist: create it, or fix or remove spec.className>"),
        "{d}"
    );

    let r = c.varroa(&["describe", "controller", "nope", "-n", "team-a"]).await.expect(1);
    assert!(r.stderr.contains("controller \"nope\" not found in namespace team-a"), "{}", r.stderr);
    c.varroa(&["describe", "controller"]).await.expect(2);
}

/// A `varroa` run in the background.
struct Spawned {
    child: std::process::Child,
    /// Everything after the first line of stdout, once the process closes it.
    rest: std::thread::JoinHandle<String>,
}

/// Spawn `varroa ARGS`; return once its first line of stdout is read.
fn spawn_reading_first_line(c: &Cluster, args: &[&str]) -> (Spawned, String) {
    let mut cmd = c.command(args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn varroa");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("read the first line");
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    (Spawned { child, rest }, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_start_patch_the_power_state_and_wait_for_the_operator() {
    let c = Cluster::start().await;
    let api = c.controllers("default");
    c.create("default", "web", json!({})).await;
    c.set_status("default", "web", json!({"phase": "Connected", "observedGeneration": 1})).await;

    // stop: the spec changes, by field manager varroa-cli.
    let r = c.varroa(&["stop", "web"]).await.expect(0);
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("controller default/web stopping\n", ""));
    let web = api.get("web").await.expect("get");
    assert_eq!(web.spec.power_state, varroa_api::PowerState::Stopped);
    let managers: Vec<String> =
        web.metadata.managed_fields.unwrap_or_default().into_iter().filter_map(|m| m.manager).collect();
    assert!(managers.contains(&"varroa-cli".to_string()), "{managers:?}");

    // start --wait: phase Connected is already there, but for an older generation: not done.
    let r = c.varroa(&["start", "web", "--wait", "--timeout", "1s"]).await.expect(3);
    assert_eq!(r.stdout, "controller default/web starting\n");
    assert!(
        r.stderr.starts_with(
            "error: timed out after 1s waiting for controller default/web to start; last seen: Connected (status describes generation 1, waiting for the operator to see 3)"
        ),
        "{}",
        r.stderr
    );
    assert_eq!(api.get("web").await.expect("get").spec.power_state, varroa_api::PowerState::Running);

    // stop --wait finishes once the operator reports Stopped for the new generation.
    let (mut spawned, first) =
        tokio::task::block_in_place(|| spawn_reading_first_line(&c, &["stop", "web", "--wait", "--timeout", "60s"]));
    assert_eq!(first, "controller default/web stopping\n");
    let generation = api.get("web").await.expect("get").metadata.generation.expect("generation");
    assert!(spawned.child.try_wait().expect("try_wait").is_none(), "still waiting for the operator");
    c.set_status("default", "web", json!({"phase": "Stopped", "observedGeneration": generation})).await;
    let finished = tokio::task::spawn_blocking(move || {
        let status = spawned.child.wait().expect("wait");
        let mut err = String::new();
        let _ = spawned.child.stderr.take().expect("stderr").read_to_string(&mut err);
        (status.code(), spawned.rest.join().expect("join reader"), err)
    });
    let (code, rest, err) = tokio::time::timeout(Duration::from_secs(30), finished)
        .await
        .expect("stop --wait returns once the status says Stopped")
        .expect("join");
    assert_eq!((code, rest.as_str(), err.as_str()), (Some(0), "controller default/web stopped (Stopped)\n", ""));

    // A controller that does not exist; usage errors.
    let r = c.varroa(&["stop", "nope"]).await.expect(1);
    assert!(r.stderr.starts_with("error: controller \"nope\" not found in namespace default"), "{}", r.stderr);
    c.varroa(&["start", "nope", "--wait"]).await.expect(1);
    c.varroa(&["stop"]).await.expect(2);
    c.varroa(&["stop", "web", "--timeout", "1s"]).await.expect(2);
    c.varroa(&["start", "web", "--wait", "--timeout", "soon"]).await.expect(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shows_progress_on_a_terminal() {
    let c = Cluster::start().await;
    c.create("default", "web", json!({})).await;
    c.set_status("default", "web", json!({"phase": "Connected", "observedGeneration": 1})).await;
    // `script` gives the command a terminal.
    let run = |timeout: &str| {
        let line = format!("{} stop web --wait --timeout {timeout}", common::bin().display());
        let mut cmd = Command::new("script");
        cmd.args(["-q", "-e", "-c", &line, "/dev/null"]).env("KUBECONFIG", c.dc.kubeconfig_path());
        tokio::spawn(run_command(cmd))
    };
    let waiting = run("60s");
    // Once the spec changed, the operator (this test) reports the controller stopped.
    let stopped = |c: Option<&varroa_api::Controller>| c.is_some_and(|c| c.metadata.generation == Some(2));
    tokio::time::timeout(Duration::from_secs(30), await_condition(c.controllers("default"), "web", stopped))
        .await
        .expect("varroa patches the spec")
        .expect("watch");
    c.set_status("default", "web", json!({"phase": "Stopped", "observedGeneration": 2})).await;
    let r = waiting.await.expect("join").expect(0);
    // One line per change of state, on stderr (the terminal), as it happens.
    let progress: Vec<&str> = r.stdout.lines().map(str::trim_end).filter(|l| l.starts_with('[')).collect();
    // The state before the change shows when the command's watch starts before the status
    // changes (a loaded machine may start it later, and then only the last state shows).
    assert!(matches!(progress.len(), 1 | 2), "{}", r.stdout);
    if progress.len() == 2 {
        assert!(
            progress[0].ends_with(
                "] default/web: Connected (status describes generation 1, waiting for the operator to see 2)"
            ),
            "{}",
            r.stdout
        );
    }
    assert!(progress.last().is_some_and(|l| l.ends_with("] default/web: Stopped")), "{}", r.stdout);
    assert!(r.stdout.contains("controller default/web stopped (Stopped)"), "{}", r.stdout);

    // A wait that runs out says what it saw last.
    c.varroa(&["start", "web"]).await.expect(0);
    let r = run("1s").await.expect("join").expect(3);
    assert!(r.stdout.contains("timed out after 1s waiting for controller default/web to stop; last seen: Stopped (status describes generation 2, waiting for the operator to see 4)"), "{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_the_kubeconfig_like_kubectl() {
    let c = Cluster::start().await;
    c.create_namespace("team-a").await;
    c.create("team-a", "in-team-a", json!({})).await;
    c.create("default", "in-default", json!({})).await;

    // A kubeconfig with two contexts: the current one in team-a, another in default.
    let original = c.dc.kubeconfig_yaml();
    let two = original.replace(
        "    namespace: default\n    user: admin\n  name: devcluster\n",
        "    namespace: team-a\n    user: admin\n  name: devcluster\n- context:\n    cluster: devcluster\n    namespace: default\n    user: admin\n  name: other\n",
    );
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

    let r = bare(&["--kubeconfig", p, "get", "controllers", "-o", "name"]).await.expect(0);
    assert_eq!(r.stdout, "controller.varroa.dev/in-team-a\n", "the current context's namespace");
    let r = bare(&["get", "controllers", "-o", "name", "--kubeconfig", p, "--context", "other"]).await.expect(0);
    assert_eq!(r.stdout, "controller.varroa.dev/in-default\n");
    bare(&["get", "controller", "in-team-a", "--kubeconfig", p, "--context", "other", "-n", "team-a"]).await.expect(0);
    let mut cmd = Command::new(common::bin());
    cmd.args(["stop", "in-team-a"]).env("KUBECONFIG", &path).env_remove("HOME");
    assert_eq!(run_command(cmd).await.expect(0).stdout, "controller team-a/in-team-a stopping\n");

    let r = bare(&["get", "controllers", "--kubeconfig", p, "--context", "nope"]).await.expect(1);
    assert!(r.stderr.contains("nope"), "{}", r.stderr);
    let r = bare(&["get", "controllers", "--kubeconfig", "/nonexistent/config"]).await.expect(1);
    assert!(r.stderr.contains("/nonexistent/config"), "{}", r.stderr);
    let r = bare(&["get", "controllers"]).await.expect(1);
    assert!(r.stderr.contains("KUBECONFIG"), "{}", r.stderr);
}
