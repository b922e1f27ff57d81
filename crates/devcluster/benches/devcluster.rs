//! devcluster benchmark (`cargo bench -p devcluster`): start-up, CRUD, list and watch throughput,
//! and watch fan-out, each next to its floor (the same work done on the store directly, with no
//! HTTP, TLS, JSON or client in between). Prints a Markdown table for docs/benchmarks.md.

use devcluster::DevCluster;
use devcluster::ops::{self, WriteOpts};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use std::time::{Duration, Instant};

const N: usize = 10_000;
const CONCURRENCY: usize = 32;
const WATCHERS: usize = 100;

fn cm(i: usize) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(format!("cm-{i:05}")), ..Default::default() },
        data: Some([("key".to_string(), format!("value-{i}"))].into()),
        ..Default::default()
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn rate(n: usize, d: Duration) -> String {
    format!("{:.0}/s", n as f64 / d.as_secs_f64())
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn first_request(dc: &DevCluster) {
    let v: k8s_openapi::apimachinery::pkg::version::Info = dc.client().apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut rows: Vec<(String, String, String)> = vec![];

    // Start-up: from DevCluster::start() to the first answered request.
    let mut starts = vec![];
    for i in 0..21 {
        let t = Instant::now();
        let dc = DevCluster::start().await.unwrap();
        first_request(&dc).await;
        let d = t.elapsed();
        if i > 0 {
            starts.push(d);
        } else {
            rows.push(("start to first request (first in process: builds schemas)".into(), ms(d), "-".into()));
        }
        dc.shutdown();
    }
    let p50 = percentile(&mut starts, 0.5);
    let p95 = percentile(&mut starts, 0.95);
    rows.push(("start to first request, median (p95) of 20".into(), format!("{} ({})", ms(p50), ms(p95)), "-".into()));

    let dc = DevCluster::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());

    // A watcher that counts events while the creates run.
    let watch_api = api.clone();
    let rv0 = dc.cluster().store.current_rv().to_string();
    let watcher = tokio::spawn(async move {
        let mut s = watch_api.watch(&WatchParams::default().timeout(290), &rv0).await.unwrap().boxed();
        let mut n = 0;
        let t = Instant::now();
        while let Some(ev) = s.try_next().await.unwrap() {
            if matches!(ev, WatchEvent::Added(_)) {
                n += 1;
                if n == N {
                    break;
                }
            }
        }
        t.elapsed()
    });

    // Create through the API, CONCURRENCY at a time.
    let t = Instant::now();
    futures::stream::iter(0..N)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &cm(i)).await.unwrap() }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let create = t.elapsed();
    let watched = watcher.await.unwrap();

    // Floor: the same creates on the store, through the verb layer, no HTTP.
    let floor_dc = DevCluster::start().await.unwrap();
    let cl = floor_dc.cluster().clone();
    let def = cl.registry.get("", "v1", "configmaps").unwrap();
    let t = Instant::now();
    for i in 0..N {
        let body = serde_json::to_value(cm(i)).unwrap();
        ops::create(&cl, &def, "default", body, &WriteOpts::system("bench")).unwrap();
    }
    let create_floor = t.elapsed();
    rows.push((
        format!("create {N} ConfigMaps ({CONCURRENCY} in flight)"),
        format!("{} ({})", ms(create), rate(N, create)),
        format!("{} ({})", ms(create_floor), rate(N, create_floor)),
    ));
    rows.push((
        format!("watch: {N} ADDED events delivered to one watcher"),
        format!("{} ({})", ms(watched), rate(N, watched)),
        "-".into(),
    ));

    // Get.
    let t = Instant::now();
    futures::stream::iter(0..N)
        .map(|i| {
            let api = api.clone();
            async move { api.get(&format!("cm-{i:05}")).await.unwrap() }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let get = t.elapsed();
    let t = Instant::now();
    for i in 0..N {
        ops::get(&cl, &def, "default", &format!("cm-{i:05}")).unwrap();
    }
    let get_floor = t.elapsed();
    rows.push((
        format!("get {N} ConfigMaps ({CONCURRENCY} in flight)"),
        format!("{} ({})", ms(get), rate(N, get)),
        format!("{} ({})", ms(get_floor), rate(N, get_floor)),
    ));

    // List all.
    let mut lists = vec![];
    for _ in 0..10 {
        let t = Instant::now();
        let l = api.list(&ListParams::default()).await.unwrap();
        assert!(l.items.len() > N);
        lists.push(t.elapsed());
    }
    let mut floors = vec![];
    for _ in 0..10 {
        let t = Instant::now();
        let page = ops::list_stored(&cl, &def, Some("default"), &Default::default()).unwrap();
        let body = ops::list_json(&def, &page).unwrap();
        assert!(body.len() > N * 50);
        floors.push(t.elapsed());
    }
    rows.push((
        format!("list {N} ConfigMaps, median of 10 (client decodes into typed objects)"),
        ms(percentile(&mut lists, 0.5)),
        format!("{} (store + JSON encoding)", ms(percentile(&mut floors, 0.5))),
    ));

    // One write fanned out to 100 watchers.
    let mut handles = vec![];
    let rv = dc.cluster().store.current_rv().to_string();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(WATCHERS);
    for _ in 0..WATCHERS {
        let api = api.clone();
        let rv = rv.clone();
        let ready = ready_tx.clone();
        handles.push(tokio::spawn(async move {
            let mut s = api.watch(&WatchParams::default().timeout(60), &rv).await.unwrap().boxed();
            ready.send(()).await.unwrap();
            loop {
                if let Some(WatchEvent::Modified(_)) = s.try_next().await.unwrap() {
                    return Instant::now();
                }
            }
        }));
    }
    for _ in 0..WATCHERS {
        ready_rx.recv().await.unwrap();
    }
    let t = Instant::now();
    let patch = kube::api::Patch::Merge(json!({"data": {"key": "fanned-out"}}));
    api.patch("cm-00000", &kube::api::PatchParams::default(), &patch).await.unwrap();
    let mut last = t;
    for h in handles {
        last = last.max(h.await.unwrap());
    }
    rows.push((format!("one write seen by all of {WATCHERS} watchers"), ms(last - t), "-".into()));

    drop(dc);
    drop(floor_dc);
    rows.extend(deployments_available().await);
    rows.extend(memory_with_50k_objects().await);

    println!("| measure | through the API (HTTPS, kube client) | floor (store, no HTTP) |");
    println!("|---|---|---|");
    for (a, b, c) in rows {
        println!("| {a} | {b} | {c} |");
    }
}

const DEPLOYMENTS: usize = 1_000;

fn deployment(i: usize) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": format!("web-{i:04}")},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": format!("web-{i:04}")}},
            "template": {
                "metadata": {"labels": {"app": format!("web-{i:04}")}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 8080}]}]}
            }
        }
    }))
    .unwrap()
}

/// 1,000 Deployments created and all Available (each: a ReplicaSet, a pod scheduled, started,
/// ready, and the statuses written back up). Floor: the 3,000 objects that exist at the end
/// (Deployments, ReplicaSets, Pods) created directly through the API, with no controller work.
async fn deployments_available() -> Vec<(String, String, String)> {
    use k8s_openapi::api::apps::v1::Deployment;
    let dc = DevCluster::start_with(devcluster::Options { nodes: 3, ..Default::default() }).await.unwrap();
    let api: Api<Deployment> = Api::default_namespaced(dc.client());
    let rv0 = dc.cluster().store.current_rv();
    let t = Instant::now();
    futures::stream::iter(0..DEPLOYMENTS)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &deployment(i)).await.unwrap() }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let created = t.elapsed();
    // Wait until every Deployment reports Available=True.
    let available = |d: &Deployment| {
        d.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Available" && c.status == "True"))
            && d.status.as_ref().and_then(|s| s.available_replicas) == Some(1)
    };
    loop {
        let l = api.list(&ListParams::default()).await.unwrap();
        if l.items.iter().filter(|d| available(d)).count() == DEPLOYMENTS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(t.elapsed() < Duration::from_secs(600), "deployments did not become available");
    }
    let all_available = t.elapsed();
    let writes = dc.cluster().store.current_rv() - rv0;
    drop(dc);

    // Floor: 3,000 plain creates.
    let floor = DevCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(floor.client());
    let t = Instant::now();
    futures::stream::iter(0..3 * DEPLOYMENTS)
        .map(|i| {
            let api = cms.clone();
            async move { api.create(&PostParams::default(), &cm(i)).await.unwrap() }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let floor_t = t.elapsed();
    vec![
        (format!("{DEPLOYMENTS} Deployments created ({CONCURRENCY} in flight), 3 nodes"), ms(created), "-".into()),
        (
            format!("... and all {DEPLOYMENTS} Available (RS + pod each, started and ready)"),
            format!(
                "{} ({} writes: {:.1} per Deployment)",
                ms(all_available),
                writes,
                writes as f64 / DEPLOYMENTS as f64
            ),
            format!("{} (3,000 plain creates, no controllers)", ms(floor_t)),
        ),
    ]
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resident memory of a `devcluster serve` process holding 50,000 ConfigMaps (about 300 bytes of
/// JSON each), next to the size of the objects themselves (the floor: what any store must hold).
async fn memory_with_50k_objects() -> Vec<(String, String, String)> {
    const OBJECTS: usize = 50_000;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["serve", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kc)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while std::fs::metadata(&kc).map(|m| m.len()).unwrap_or(0) == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = devcluster::client_for(&std::fs::read_to_string(&kc).unwrap()).await.unwrap();
    let before = rss_kib(child.id());
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &cm(i)).await.unwrap() }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let after = rss_kib(child.id());
    let list = api.list(&ListParams::default()).await.unwrap();
    let data_bytes: usize = list.items.iter().map(|c| serde_json::to_vec(c).unwrap().len()).sum();
    let _ = child.kill();
    let _ = child.wait();
    vec![(
        format!("memory (RSS) holding {OBJECTS} ConfigMaps"),
        format!("{:.1} MiB (empty cluster: {:.1} MiB)", after as f64 / 1024.0, before as f64 / 1024.0),
        format!("{:.1} MiB of object JSON", data_bytes as f64 / 1048576.0),
    )]
}
