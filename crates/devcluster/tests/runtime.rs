//! The process runtime: pods of a `--run` image run as local processes (the workspace's
//! `devcluster-testpod` program here), checked as a user checks a cluster: through a Deployment
//! and a Service, `kubectl logs`/`exec`, kube-rs exec and port-forward, the pod's status, and
//! /proc for processes that must be gone.

mod support;

use devcluster::runtime::RunRule;
use devcluster::{DevCluster, Options};
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use support::kubectl::Kubectl;

const IMAGE: &str = "example.com/testpod:v1";

fn testpod() -> &'static str {
    env!("CARGO_BIN_EXE_devcluster-testpod")
}

async fn cluster() -> (DevCluster, Kubectl) {
    let dc = DevCluster::start_with(Options {
        run: vec![RunRule::new("example.com/testpod*", testpod())],
        crash_backoff: Duration::from_millis(300),
        ..Default::default()
    })
    .await
    .expect("devcluster starts");
    let k = Kubectl::new(&dc);
    (dc, k)
}

/// Wait (up to 30 s) until `f` returns Some.
async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn pod_json(pods: &Api<Pod>, name: &str) -> Option<Value> {
    pods.get_opt(name).await.ok().flatten().map(|p| serde_json::to_value(p).unwrap())
}

fn ready(p: &Value) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

async fn wait_ready(pods: &Api<Pod>, name: &str) -> Value {
    until(&format!("pod {name} Ready"), || async { pod_json(pods, name).await.filter(ready) }).await
}

/// `GET http://addr/path` -> (status code, body).
fn http(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((code, body))
}

fn env_of(body: &str) -> std::collections::BTreeMap<String, String> {
    body.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn container(extra: Value) -> Value {
    let mut c = json!({
        "name": "app", "image": IMAGE,
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "PORT", "value": "8080"},
        ],
        "ports": [{"name": "http", "containerPort": 8080}],
    });
    if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            c.insert(k.clone(), v.clone());
        }
    }
    c
}

async fn create_pod(pods: &Api<Pod>, name: &str, spec: Value) -> Value {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    serde_json::to_value(pods.create(&PostParams::default(), &pod).await.expect("pod created")).unwrap()
}

fn pid_alive(pid: i32) -> bool {
    // A zombie is gone for our purpose (its parent has not reaped it yet).
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .filter(|pid| pid_alive(*pid))
        .collect()
}

#[test]
fn command_and_args_apply_as_kubernetes_applies_them_to_the_mapped_entrypoint() {
    use devcluster::runtime::spec::argv;
    let exe = std::path::Path::new("/build/varroa-mite");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(argv(exe, &[], &[]), s(&["/build/varroa-mite"]));
    assert_eq!(argv(exe, &[], &s(&["--v=2"])), s(&["/build/varroa-mite", "--v=2"]));
    assert_eq!(argv(exe, &s(&["/varroa-mite", "run"]), &s(&["--v=2"])), s(&["/build/varroa-mite", "run", "--v=2"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_runs_the_program_with_env_volumes_and_its_own_address_behind_its_service() {
    let (dc, k) = cluster().await;
    let client = dc.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"greeting": "hello", "mode": "fast"}}))
            .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    k.ok(&["create", "secret", "generic", "sec", "--from-literal=token=s3cr3t"]);
    k.ok(&["create", "service", "clusterip", "web", "--tcp=80:8080"]);
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}, "annotations": {"team": "bees"}}, "spec": {
                "containers": [container(json!({
                    "command": ["/testpod"],
                    "args": ["--print-file", "/etc/cfg/greeting", "--watch-file", "/etc/cfg/greeting", "--flag=$(GREETING)"],
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "PORT", "value": "8080"},
                        {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                        {"name": "MISSING", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "x", "optional": true}}},
                        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['team']"}}},
                        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                        {"name": "EXPANDED", "value": "$(GREETING)-$(UNKNOWN)"},
                        {"name": "ESCAPED", "value": "$$(GREETING)"},
                        {"name": "CONFIG", "value": "/etc/cfg/mode"},
                        {"name": "LISTEN", "value": "0.0.0.0:9090"},
                        {"name": "SIDECAR", "value": "http://127.0.0.1:8080/x"},
                        {"name": "HOST_DB", "value": "postgres://u@127.0.0.1:5432/db"},
                    ],
                    "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
                    "resources": {"limits": {"memory": "64Mi"}},
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}, {"name": "info", "mountPath": "/etc/info"}, {"name": "scratch", "mountPath": "/scratch"}],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1},
                }))],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                    {"name": "scratch", "emptyDir": {}},
                ],
            }}}
    });
    let manifest = k.write("deploy.json", &deploy.to_string());
    k.ok(&["apply", "-f", &manifest]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=30s"]);

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let name = until("a pod of web", || async {
        pods.list(&Default::default()).await.ok()?.items.into_iter().find_map(|p| p.metadata.name)
    })
    .await;
    let pod = wait_ready(&pods, &name).await;
    let ip = pod.pointer("/status/podIP").and_then(Value::as_str).unwrap().to_string();
    let parsed: std::net::Ipv4Addr = ip.parse().unwrap();
    assert!(parsed.is_loopback() && ip != "127.0.0.1", "{ip}");
    assert_eq!(pod["status"]["podIPs"], json!([{"ip": ip}]));
    assert_eq!(pod["status"]["phase"], "Running");
    assert!(pod["status"]["containerStatuses"][0]["state"]["running"].is_object());

    // Reached through the Service's endpoints.
    let eps: Api<Endpoints> = Api::default_namespaced(client.clone());
    let addr = until("web's endpoints", || async {
        let e = serde_json::to_value(eps.get_opt("web").await.ok()??).ok()?;
        let ip = e.pointer("/subsets/0/addresses/0/ip")?.as_str()?.to_string();
        let port = e.pointer("/subsets/0/ports/0/port")?.as_i64()?;
        Some(format!("{ip}:{port}"))
    })
    .await;
    assert_eq!(addr, format!("{ip}:8080"));
    let (code, body) = http(&addr, "/env").unwrap();
    assert_eq!(code, 200);
    let env = env_of(&body);
    let svc: Service = Api::default_namespaced(client.clone()).get("web").await.unwrap();
    let cluster_ip = svc.spec.unwrap().cluster_ip.unwrap();
    for (k_, v) in [
        ("GREETING", "hello"),
        ("TOKEN", "s3cr3t"),
        ("POD_NAME", name.as_str()),
        ("POD_IP", ip.as_str()),
        ("TEAM", "bees"),
        ("MEM_MI", "64"),
        ("EXPANDED", "hello-$(UNKNOWN)"),
        ("ESCAPED", "$(GREETING)"),
        ("CFG_greeting", "hello"),
        ("CFG_mode", "fast"),
        ("WEB_SERVICE_HOST", cluster_ip.as_str()),
        ("WEB_SERVICE_PORT", "80"),
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
        ("HOSTNAME", name.as_str()),
    ] {
        assert_eq!(env.get(k_).map(String::as_str), Some(v), "{k_} in {env:?}");
    }
    assert!(!env.contains_key("MISSING"));
    assert!(env["HOME"].contains(&format!("default_{name}_")), "{}", env["HOME"]);
    // A wildcard listen address binds the pod's own address (no network namespace here).
    assert_eq!(env["LISTEN"], format!("{ip}:9090"));
    // The pod's loopback is its address: a port the pod declares is reached there; another
    // loopback port (a service on the host) is left alone.
    assert_eq!(env["SIDECAR"], format!("http://{ip}:8080/x"));
    assert_eq!(env["HOST_DB"], "postgres://u@127.0.0.1:5432/db");
    assert_eq!(env.get("KUBERNETES_SERVICE_PORT"), Some(&dc.addr().port().to_string()));
    // The one path translation: /etc/cfg/... in env and args names the pod's volume directory.
    let config = env["CONFIG"].clone();
    assert!(config.ends_with("/volumes/cfg/mode") && !config.starts_with("/etc/cfg"), "{config}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "fast");
    let (_, labels) =
        http(&addr, &format!("/file?path={}", config.replace("/volumes/cfg/mode", "/volumes/info/labels"))).unwrap();
    assert!(labels.contains("app=\"web\""), "{labels}");
    // The second translation: a kubeconfig for the pod's ServiceAccount.
    let kc = std::fs::read_to_string(&env["KUBECONFIG"]).unwrap();
    assert!(kc.contains(dc.url()) && kc.contains("tokenFile:"), "{kc}");

    // Logs: stdout and stderr, argv after translation and expansion.
    let logs = k.ok(&["logs", &name]);
    assert!(logs.contains("stderr: hello"), "{logs}");
    let argv_line = logs.lines().find(|l| l.starts_with("starting argv=")).unwrap();
    assert!(argv_line.contains("--flag=hello") && argv_line.contains("/volumes/cfg/greeting"), "{argv_line}");
    assert!(!argv_line.contains("/testpod\"") && !argv_line.contains("\"/etc/cfg"), "{argv_line}");
    assert!(logs.contains(": hello"), "{logs}");
    let tail = k.ok(&["logs", &name, "--tail=1", "--timestamps"]);
    assert_eq!(tail.lines().count(), 1, "{tail}");
    assert!(tail.starts_with("20") && tail.split(' ').next().unwrap().ends_with('Z'), "{tail}");
    let limited = k.ok(&["logs", &name, "--limit-bytes=5"]);
    assert_eq!(limited.len(), 5, "{limited}");

    // A ConfigMap change reaches the file the process watches (through the ..data swap).
    let mut follow = k.cmd(&["logs", "-f", &name]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    k.ok(&["patch", "configmap", "cfg", "-p", r#"{"data":{"greeting":"bye"}}"#]);
    until("the process to see the new greeting", || async {
        k.ok(&["logs", &name]).lines().any(|l| l.ends_with("/greeting: bye")).then_some(())
    })
    .await;
    // -f keeps streaming what the process writes.
    let mut out = follow.stdout.take().unwrap();
    let seen = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; 65536];
        let mut all = String::new();
        while !all.contains("greeting: bye") {
            let n = out.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            all.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        all
    });
    let seen = tokio::time::timeout(Duration::from_secs(20), seen).await.unwrap().unwrap();
    assert!(seen.contains("greeting: bye") && seen.contains("starting argv"), "{seen}");
    let _ = follow.kill();
    let _ = follow.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_container_restarts_with_back_off_and_keeps_its_previous_log() {
    let (dc, k) = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    create_pod(
        &pods,
        "crashy",
        json!({"containers": [container(json!({
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1},
        }))]}),
    )
    .await;
    let pod = wait_ready(&pods, "crashy").await;
    let ip = pod["status"]["podIP"].as_str().unwrap().to_string();
    let err = k.fails(&["logs", "crashy", "--previous"]);
    assert!(err.contains(r#"previous terminated container "app" in pod "crashy" not found"#), "{err}");

    // First crash: restarted at once (restartCount 1), lastState says how it ended.
    http(&format!("{ip}:8080"), "/exit?code=3").unwrap();
    let p = until("restart 1", || async {
        pod_json(&pods, "crashy").await.filter(|p| p["status"]["containerStatuses"][0]["restartCount"] == 1)
    })
    .await;
    let last = &p["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3);
    assert_eq!(last["reason"], "Error");
    assert!(last["startedAt"].is_string() && last["finishedAt"].is_string());
    wait_ready(&pods, "crashy").await;
    let prev = k.ok(&["logs", "crashy", "--previous"]);
    assert!(prev.contains("exiting with 3"), "{prev}");
    let cur = k.ok(&["logs", "crashy"]);
    assert!(!cur.contains("exiting with 3") && cur.contains("starting argv"), "{cur}");

    // Second crash: CrashLoopBackOff (300ms here, 10s by default), not ready, then running again.
    http(&format!("{ip}:8080"), "/exit?code=4").unwrap();
    let p = until("CrashLoopBackOff or restart 2", || async {
        pod_json(&pods, "crashy").await.filter(|p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
                || p["status"]["containerStatuses"][0]["restartCount"] == 2
        })
    })
    .await;
    assert_eq!(p["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"], 4);
    let p = wait_ready(&pods, "crashy").await;
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 2);
    let get = k.ok(&["get", "pod", "crashy", "--no-headers"]);
    assert!(get.split_whitespace().nth(3) == Some("2"), "{get}");
    // The kubelet's events, as `kubectl describe` shows them.
    let events = k.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=crashy",
        "-o",
        "custom-columns=REASON:.reason,COUNT:.count,MSG:.message",
        "--no-headers",
    ]);
    for reason in ["Pulled", "Created", "Started", "BackOff"] {
        assert!(events.lines().any(|l| l.starts_with(reason)), "{reason} in {events}");
    }
    assert!(events.contains("Back-off restarting failed container app in pod crashy_default("), "{events}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policies_end_pods_succeeded_or_failed() {
    let (dc, k) = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let exiting = |code: &str| container(json!({"args": ["--exit-after-ms", "100", "--exit-code", code]}));
    create_pod(&pods, "ok", json!({"restartPolicy": "Never", "containers": [exiting("0")]})).await;
    create_pod(&pods, "bad", json!({"restartPolicy": "Never", "containers": [exiting("7")]})).await;
    create_pod(&pods, "retry", json!({"restartPolicy": "OnFailure", "containers": [exiting("1")]})).await;
    create_pod(&pods, "init", json!({"restartPolicy": "Never",
        "initContainers": [{"name": "setup", "image": IMAGE, "args": ["--exit-after-ms", "50", "--exit-code", "0"], "env": [{"name": "PORT", "value": "0"}]}],
        "containers": [exiting("0")]}))
    .await;
    let phase = |n: &'static str, want: &'static str| {
        let pods = pods.clone();
        async move {
            until(&format!("{n} {want}"), || async {
                pod_json(&pods, n).await.filter(|p| p["status"]["phase"] == want)
            })
            .await
        }
    };
    let ok = phase("ok", "Succeeded").await;
    let t = &ok["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!((t["exitCode"].as_i64(), t["reason"].as_str()), (Some(0), Some("Completed")));
    let bad = phase("bad", "Failed").await;
    assert_eq!(bad["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 7);
    assert!(
        bad["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["reason"] == "PodFailed")
    );
    let init = phase("init", "Succeeded").await;
    assert_eq!(init["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"], "Completed");
    until("retry restarted twice", || async {
        pod_json(&pods, "retry")
            .await
            .filter(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64() >= Some(2))
    })
    .await;
    let logs = k.ok(&["logs", "bad"]);
    assert!(logs.contains("exiting with 7"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_drive_readiness_endpoints_and_liveness_restarts() {
    let (dc, _k) = cluster().await;
    let client = dc.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "flags"}, "data": {"ok": "1"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "probed"}, "spec": {"selector": {"app": "probed"}, "ports": [{"port": 80, "targetPort": 8080}]}})).unwrap();
    Api::<Service>::default_namespaced(client.clone()).create(&PostParams::default(), &svc).await.unwrap();
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "probed", "labels": {"app": "probed"}}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [container(json!({
            "volumeMounts": [{"name": "flags", "mountPath": "/flags"}],
            "startupProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1, "failureThreshold": 30},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "httpHeaders": [{"name": "X-Probe", "value": "1"}]}, "periodSeconds": 1, "failureThreshold": 1},
            "livenessProbe": {"exec": {"command": ["/usr/bin/test", "-f", "/flags/ok"]}, "periodSeconds": 1, "failureThreshold": 2},
        }))],
        "volumes": [{"name": "flags", "configMap": {"name": "flags"}}],
    }})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let p = wait_ready(&pods, "probed").await;
    let ip = p["status"]["podIP"].as_str().unwrap().to_string();
    let addr = format!("{ip}:8080");
    let eps: Api<Endpoints> = Api::default_namespaced(client.clone());
    let ep_ready = |want: bool| {
        let eps = eps.clone();
        let ip = ip.clone();
        async move {
            until(&format!("endpoint ready={want}"), || async {
                let e = serde_json::to_value(eps.get_opt("probed").await.ok()??).ok()?;
                let field = if want { "addresses" } else { "notReadyAddresses" };
                (e.pointer(&format!("/subsets/0/{field}/0/ip"))?.as_str()? == ip).then_some(())
            })
            .await
        }
    };
    ep_ready(true).await;

    // Readiness: false, then true again; the endpoint follows.
    http(&addr, "/set-ready?v=0").unwrap();
    until("not ready", || async { pod_json(&pods, "probed").await.filter(|p| !ready(p)) }).await;
    ep_ready(false).await;
    http(&addr, "/set-ready?v=1").unwrap();
    wait_ready(&pods, "probed").await;
    ep_ready(true).await;

    // Liveness (an exec probe on a translated path): the flag file goes, the container restarts.
    cms.patch(
        "flags",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"data": {"ok": null, "other": "x"}})),
    )
    .await
    .unwrap();
    let p = until("a liveness restart", || async {
        pod_json(&pods, "probed")
            .await
            .filter(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64() >= Some(1))
    })
    .await;
    // Killed with SIGTERM (the program exits 0 on it), as the kubelet kills a failed container.
    assert!(p["status"]["containerStatuses"][0]["lastState"]["terminated"].is_object(), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_sends_sigterm_then_sigkill_after_the_grace_period() {
    let (dc, k) = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let marker = format!("--marker=grace-{}", std::process::id());
    let stubborn = container(json!({"args": [marker.clone(), "--stubborn"], "env": [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PORT", "value": "8080"}, {"name": "IGNORE_SIGTERM", "value": "1"}]}));
    create_pod(&pods, "stubborn", json!({"terminationGracePeriodSeconds": 2, "containers": [stubborn]})).await;
    wait_ready(&pods, "stubborn").await;
    let pids = processes_with(&format!("{marker}\0--stubborn"));
    assert_eq!(pids.len(), 1, "{pids:?}");
    let mut follow = k.cmd(&["logs", "-f", "stubborn"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    pods.delete("stubborn", &DeleteParams::default()).await.unwrap();
    until("the pod object to go", || async { pod_json(&pods, "stubborn").await.is_none().then_some(()) }).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1900), "gone after {took:?}, before the 2s grace period");
    assert!(!pid_alive(pids[0]), "the process survived its pod");
    // The follower saw SIGTERM arrive and its stream end with the container.
    let out = tokio::task::spawn_blocking(move || {
        let mut s = String::new();
        let _ = follow.stdout.take().unwrap().read_to_string(&mut s);
        let _ = follow.wait();
        s
    });
    let out = tokio::time::timeout(Duration::from_secs(20), out).await.unwrap().unwrap();
    assert!(out.contains("got SIGTERM"), "{out}");

    // A program that exits on SIGTERM goes at once, long before its grace period.
    let polite = container(json!({"args": [marker.clone(), "--polite"]}));
    create_pod(&pods, "polite", json!({"terminationGracePeriodSeconds": 30, "containers": [polite]})).await;
    wait_ready(&pods, "polite").await;
    let started = Instant::now();
    k.ok(&["delete", "pod", "polite", "--wait=true"]);
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(processes_with(&format!("{marker}\0--polite")).is_empty());

    // A preStop hook runs (with the container's files and translated paths) before SIGTERM.
    let out = tempfile::tempdir().unwrap();
    let hooked = container(json!({
        "volumeMounts": [{"name": "out", "mountPath": "/out"}],
        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 1; echo hooked > /out/prestop"]}}},
    }));
    create_pod(
        &pods,
        "hooked",
        json!({"terminationGracePeriodSeconds": 10, "containers": [hooked],
        "volumes": [{"name": "out", "hostPath": {"path": out.path().to_str().unwrap()}}]}),
    )
    .await;
    wait_ready(&pods, "hooked").await;
    let started = Instant::now();
    k.ok(&["delete", "pod", "hooked", "--wait=true"]);
    assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(std::fs::read_to_string(out.path().join("prestop")).unwrap(), "hooked\n");

    // A pod deleted at once and made again under its name (as a StatefulSet replaces one) runs.
    create_pod(&pods, "again", json!({"containers": [container(json!({}))]})).await;
    let first = wait_ready(&pods, "again").await;
    k.ok(&["delete", "pod", "again", "--grace-period=0", "--force"]);
    create_pod(&pods, "again", json!({"containers": [container(json!({}))]})).await;
    let second = wait_ready(&pods, "again").await;
    assert_ne!(first["metadata"]["uid"], second["metadata"]["uid"]);
    assert_ne!(second["status"]["podIP"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_client_in_the_pod_acts_as_its_service_account() {
    let (dc, k) = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    k.ok(&["create", "serviceaccount", "robot"]);
    let lister = |name: &str| {
        json!({"serviceAccountName": "robot", "restartPolicy": "Never", "containers": [{"name": "app", "image": IMAGE, "args": ["kube-list-pods"]}]})
            .to_string()
            .replace("{name}", name)
    };
    create_pod(&pods, "denied", serde_json::from_str(&lister("denied")).unwrap()).await;
    let p = until("denied to finish", || async {
        pod_json(&pods, "denied").await.filter(|p| p["status"]["phase"] == "Failed")
    })
    .await;
    assert_eq!(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 1);
    let logs = k.ok(&["logs", "denied"]);
    assert!(logs.contains("forbidden") && logs.contains("system:serviceaccount:default:robot"), "{logs}");

    k.ok(&["create", "role", "pod-reader", "--verb=list", "--resource=pods"]);
    k.ok(&["create", "rolebinding", "robot-reads", "--role=pod-reader", "--serviceaccount=default:robot"]);
    create_pod(&pods, "allowed", serde_json::from_str(&lister("allowed")).unwrap()).await;
    until("allowed to succeed", || async {
        pod_json(&pods, "allowed").await.filter(|p| p["status"]["phase"] == "Succeeded")
    })
    .await;
    let logs = k.ok(&["logs", "allowed"]);
    assert!(logs.contains("pod allowed") && logs.contains("pod denied"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_errors_and_simulated_pods_answer_as_documented() {
    let (dc, k) = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    create_pod(&pods, "two", json!({"containers": [container(json!({})), {"name": "side", "image": "nginx:1.27"}]}))
        .await;
    create_pod(&pods, "sim", json!({"containers": [{"name": "web", "image": "nginx:1.27"}]})).await;
    wait_ready(&pods, "two").await;
    wait_ready(&pods, "sim").await;
    // The API without a container names the choices, as upstream's LogLocation does.
    let err = k.fails(&["get", "--raw", "/api/v1/namespaces/default/pods/two/log"]);
    assert!(err.contains("a container name must be specified for pod two, choose one of: [app side]"), "{err}");
    // kubectl picks the first container itself.
    let logs = k.ok(&["logs", "two"]);
    assert!(logs.contains("starting argv"), "{logs}");
    let err = k.fails(&["logs", "two", "-c", "nope"]);
    assert!(err.contains("container nope is not valid for pod two"), "{err}");
    let err = k.fails(&["logs", "two", "-c", "side"]);
    assert!(err.contains("pod two is simulated: it runs no process; map its image with --run"), "{err}");
    let err = k.fails(&["logs", "sim"]);
    assert!(err.contains("pod sim is simulated"), "{err}");
    let err = k.fails(&["exec", "sim", "--", "true"]);
    assert!(err.contains("pod sim is simulated"), "{err}");
    let err = k.fails(&["get", "--raw", "/api/v1/namespaces/default/pods/two/log?container=app&limitBytes=0"]);
    assert!(err.contains("limitBytes: Invalid value: 0: must be greater than 0"), "{err}");
    let logs = k.ok(&["logs", "two", "-c", "app", "--since=1h"]);
    assert!(logs.contains("starting argv"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_port_forward_reach_the_container() {
    let (dc, k) = cluster().await;
    let client = dc.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    k.ok(&["create", "configmap", "cfg", "--from-literal=greeting=hello"]);
    create_pod(&pods, "web", json!({"containers": [container(json!({
        "command": ["/testpod"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}, {"name": "PORT", "value": "8080"}, {"name": "WHO", "value": "bees"}],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
    }))], "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}))
    .await;
    wait_ready(&pods, "web").await;

    // kubectl exec (WebSocket, v5.channel.k8s.io): env, translated paths, stdin, exit codes.
    assert_eq!(k.ok(&["exec", "web", "--", "cat", "/etc/cfg/greeting"]), "hello");
    assert_eq!(k.ok(&["exec", "web", "--", "sh", "-c", "echo $WHO; echo oops >&2"]).trim(), "bees");
    let out = k.run(&["exec", "web", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let mut child = k
        .cmd(&["exec", "-i", "web", "--", "tr", "a-z", "A-Z"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"buzz\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "BUZZ\n");
    // The container's own program (command[0]) runs as the mapped executable.
    let out = k.run(&["exec", "web", "--", "/testpod", "kube-list-pods"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("starting argv"), "{out:?}");

    // Exec needs `create` on pods/exec, also over a WebSocket GET (upstream since 1.31).
    k.ok(&["create", "role", "peek", "--verb=get", "--resource=pods,pods/exec"]);
    k.ok(&["create", "rolebinding", "peek", "--role=peek", "--user=jane"]);
    let err = k.fails(&["exec", "web", "--as=jane", "--", "true"]);
    assert!(err.contains(r#"User "jane" cannot create resource "pods/exec" in API group"#), "{err}");

    // kube-rs exec.
    let mut attached = pods
        .exec("web", ["sh", "-c", "cat /etc/cfg/greeting; exit 5"], &kube::api::AttachParams::default().stderr(false))
        .await
        .unwrap();
    let mut stdout = attached.stdout().unwrap();
    let status = attached.take_status().unwrap();
    let mut out = vec![];
    tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut out).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out), "hello");
    let st = status.await.unwrap();
    assert_eq!(st.status.as_deref(), Some("Failure"));
    assert_eq!(st.reason.as_deref(), Some("NonZeroExitCode"));
    assert_eq!(st.details.unwrap().causes.unwrap()[0].message.as_deref(), Some("5"));

    // kube-rs port-forward to the container's port.
    let mut pf = pods.portforward("web", &[8080]).await.unwrap();
    let mut s = pf.take_stream(8080).unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut s, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut resp = vec![];
    tokio::io::AsyncReadExt::read_to_end(&mut s, &mut resp).await.unwrap();
    let resp = String::from_utf8_lossy(&resp);
    assert!(resp.starts_with("HTTP/1.1 200") && resp.ends_with("ok"), "{resp}");
    drop(s);
    let _ = pf.join().await;

    // kubectl port-forward (SPDY): tests/portforward.rs.

    // Discovery lists the subresources served.
    let res = k.ok(&["get", "--raw", "/api/v1"]);
    let res: Value = serde_json::from_str(&res).unwrap();
    let names: Vec<&str> = res["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    for sub in ["pods/exec", "pods/log", "pods/portforward"] {
        assert!(names.contains(&sub), "{sub} in {names:?}");
    }
}

/// Start `devcluster serve --run ...`, run a pod of two containers, return (serve, pids, dir).
fn serve_with_a_running_pod(marker: &str) -> (std::process::Child, Vec<i32>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let serve = std::process::Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["serve", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--run")
        .arg(format!("example.com/testpod*={}", testpod()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !kubeconfig.exists() {
        assert!(start.elapsed() < Duration::from_secs(30), "devcluster serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let kubectl = |args: &[&str]| {
        std::process::Command::new("kubectl")
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": IMAGE, "args": [marker], "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]},
        {"name": "b", "image": IMAGE, "args": [marker, "--exit-after-ms", "600000"], "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}, {"name": "PORT", "value": "8081"}]},
    ]}});
    let manifest = dir.path().join("pod.json");
    std::fs::write(&manifest, pod.to_string()).unwrap();
    let out = kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let out = kubectl(&["wait", "--for=condition=Ready", "pod/p", "--timeout=30s"]);
    assert!(out.status.success(), "{out:?}");
    let pids = processes_with(marker);
    assert_eq!(pids.len(), 2, "{pids:?}");
    (serve, pids, dir)
}

fn all_gone_soon(pids: &[i32]) {
    let start = Instant::now();
    while pids.iter().any(|p| pid_alive(*p)) {
        assert!(start.elapsed() < Duration::from_secs(10), "processes outlived devcluster: {pids:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_9_of_devcluster_serve_leaves_no_process_behind() {
    let (mut serve, pids, _dir) = serve_with_a_running_pod(&format!("--orphan-check-{}", std::process::id()));
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(serve.id() as i32, libc::SIGKILL);
    }
    let _ = serve.wait();
    all_gone_soon(&pids);
}

#[test]
fn ctrl_c_of_devcluster_serve_ends_every_pod_process() {
    let (mut serve, pids, _dir) = serve_with_a_running_pod(&format!("--ctrl-c-check-{}", std::process::id()));
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(serve.id() as i32, libc::SIGINT);
    }
    let status = serve.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // Gone by the time devcluster exited, not only after the kernel noticed its death.
    assert!(pids.iter().all(|p| !pid_alive(*p)), "{pids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_cluster_handle_ends_every_pod_process() {
    let (dc, _k) = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let marker = format!("--drop-check-{}", std::process::id());
    create_pod(&pods, "p", json!({"containers": [container(json!({"args": [marker.clone()]}))]})).await;
    wait_ready(&pods, "p").await;
    let pids = processes_with(&marker);
    assert_eq!(pids.len(), 1, "{pids:?}");
    tokio::task::spawn_blocking(move || drop(dc)).await.unwrap();
    assert!(!pid_alive(pids[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_projected_and_sub_path_volumes_are_files_with_their_modes() {
    let (dc, k) = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    k.ok(&["create", "configmap", "cfg", "--from-literal=greeting=hello"]);
    create_pod(
        &pods,
        "vols",
        json!({"containers": [container(json!({
            "command": ["/testpod"],
            "args": ["--print-file", "/etc/greeting.txt"],
            "volumeMounts": [
                {"name": "tls", "mountPath": "/etc/tls", "readOnly": true},
                {"name": "all", "mountPath": "/etc/all"},
                {"name": "maybe", "mountPath": "/etc/maybe"},
                {"name": "cfg", "mountPath": "/etc/greeting.txt", "subPath": "greeting"},
            ],
        }))], "volumes": [
            {"name": "tls", "secret": {"secretName": "tls", "defaultMode": 0o440, "items": [
                {"key": "tls.key", "path": "keys/key.pem", "mode": 0o400}, {"key": "tls.crt", "path": "cert.pem"}]}},
            {"name": "all", "projected": {"sources": [
                {"configMap": {"name": "cfg"}},
                {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
            {"name": "maybe", "configMap": {"name": "absent", "optional": true}},
            {"name": "cfg", "configMap": {"name": "cfg"}},
        ]}),
    )
    .await;
    // The Secret does not exist yet: the pod waits in ContainerCreating, as a kubelet's mount does.
    let ev = until("FailedMount", || async {
        let out =
            k.ok(&["get", "events", "--field-selector", "reason=FailedMount", "-o", "jsonpath={.items[*].message}"]);
        (!out.is_empty()).then_some(out)
    })
    .await;
    assert!(ev.contains(r#"MountVolume.SetUp failed for volume "tls" : secret "tls" not found"#), "{ev}");
    let p = pod_json(&pods, "vols").await.unwrap();
    assert_eq!(p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "ContainerCreating");
    k.ok(&["create", "secret", "generic", "tls", "--from-literal=tls.key=KEY", "--from-literal=tls.crt=CRT"]);
    wait_ready(&pods, "vols").await;
    let sh = |cmd: &str| k.ok(&["exec", "vols", "--", "sh", "-c", cmd]);
    assert_eq!(sh("cat /etc/tls/keys/key.pem; stat -c %a /etc/tls/keys/key.pem"), "KEY400\n");
    assert_eq!(sh("cat /etc/tls/cert.pem; stat -c %a -L /etc/tls/cert.pem"), "CRT440\n");
    assert_eq!(sh("cat /etc/all/greeting /etc/all/ns"), "hellodefault");
    assert_eq!(sh("ls -A /etc/maybe | grep -v '^\\.\\.' | wc -l").trim(), "0");
    assert_eq!(sh("cat /etc/greeting.txt"), "hello");
    let logs = k.ok(&["logs", "vols"]);
    assert!(logs.contains("/volumes/cfg/greeting: hello"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_image_restarts_the_container() {
    let (dc, k) = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    create_pod(&pods, "web", json!({"containers": [container(json!({}))]})).await;
    wait_ready(&pods, "web").await;
    k.ok(&["set", "image", "pod/web", "app=example.com/testpod:v2"]);
    let p = until("the restart with the new image", || async {
        pod_json(&pods, "web").await.filter(|p| {
            p["status"]["containerStatuses"][0]["image"] == "example.com/testpod:v2"
                && p["status"]["containerStatuses"][0]["restartCount"] == 1
                && ready(p)
        })
    })
    .await;
    assert!(p["status"]["containerStatuses"][0]["lastState"]["terminated"].is_object(), "{p}");
    let events = k.ok(&["get", "events", "--field-selector", "reason=Killing", "-o", "jsonpath={.items[*].message}"]);
    assert!(events.contains("Container app definition changed, will be restarted"), "{events}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_cluster_runs_its_stored_pods_again() {
    let data = tempfile::tempdir().unwrap();
    let options = || Options {
        data_dir: Some(data.path().to_path_buf()),
        run: vec![RunRule::new("example.com/testpod*", testpod())],
        ..Default::default()
    };
    let marker = format!("--restart-check-{}", std::process::id());
    let dc = DevCluster::start_with(options()).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    create_pod(&pods, "p", json!({"containers": [container(json!({"args": [marker.clone()]}))]})).await;
    let old_ip = wait_ready(&pods, "p").await["status"]["podIP"].clone();
    let before = processes_with(&marker);
    assert_eq!(before.len(), 1);
    tokio::task::spawn_blocking(move || drop(dc)).await.unwrap();
    assert!(!pid_alive(before[0]));

    let dc = DevCluster::start_with(options()).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let p = until("the stored pod running again", || async {
        // Its status is written again (a new address) once it runs again.
        pod_json(&pods, "p").await.filter(|p| ready(p) && p["status"]["podIP"] != old_ip)
    })
    .await;
    let ip = p["status"]["podIP"].as_str().unwrap();
    let (code, _) = http(&format!("{ip}:8080"), "/healthz").unwrap();
    assert_eq!(code, 200);
    // One process of the pod, once the restarted cluster has settled. (A clean-clone CI run saw
    // two for a moment, once; not diagnosed: two that stay still fail here.)
    until("exactly one process of the stored pod", || async {
        let now = processes_with(&marker);
        (now.len() == 1).then_some(now)
    })
    .await;
}
