//! The workloads and resources of a real cluster that devcluster runs and serves: Jobs (and the
//! TTL-after-finished controller), CronJobs, DaemonSets, ReplicationControllers, APIServices,
//! CertificateSigningRequests, ComponentStatuses and ephemeral containers; driven with the real
//! `kubectl` and kube's typed client as users drive a real cluster. Every wait is on a watch
//! under a timeout (or `kubectl wait`): no fixed sleeps.

mod support;

use devcluster::faults::{Fault, FaultRule};
use devcluster::{DevCluster, Options};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::time::Duration;
use support::kubectl::Kubectl;
use support::wait::{wait_for, wait_gone, wait_list};

fn from_json<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("test object deserializes")
}

/// A cluster whose Jobs' pods run for 200ms, with these fault rules.
async fn cluster_with(faults: Vec<FaultRule>) -> (DevCluster, Kubectl) {
    let dc =
        DevCluster::start_with(Options { job_pod_duration: Duration::from_millis(200), faults, ..Default::default() })
            .await
            .expect("devcluster starts");
    let k = Kubectl::new(&dc);
    (dc, k)
}

fn job(name: &str, image: &str, spec: Value) -> Job {
    let mut s =
        json!({"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]}}});
    if let (Some(m), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    from_json(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": s}))
}

fn condition(j: &Job, type_: &str) -> Option<(String, String)> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

fn job_pods_cfg(name: &str) -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default().labels(&format!("batch.kubernetes.io/job-name={name}"))
}

// ---- Jobs -----------------------------------------------------------------------------------

#[tokio::test]
async fn kubectl_create_job_completes_and_kubectl_wait_sees_it() {
    let (dc, k) = cluster_with(vec![]).await;
    k.ok(&["create", "job", "pi", "--image=busybox", "--", "echo", "hi"]);
    let out = k.ok(&["wait", "--for=condition=complete", "job/pi", "--timeout=30s"]);
    assert_eq!(out.trim(), "job.batch/pi condition met");

    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let j = jobs.get("pi").await.unwrap();
    let st = j.status.clone().unwrap();
    assert_eq!(st.succeeded, Some(1));
    assert_eq!((st.active, st.failed, st.ready, st.terminating), (None, None, Some(0), Some(0)));
    assert!(st.start_time.is_some() && st.completion_time.is_some());
    assert_eq!(st.uncounted_terminated_pods, Some(Default::default()));
    let types: Vec<&str> = st.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
    assert_eq!(
        condition(&j, "Complete"),
        Some(("CompletionsReached".into(), "Reached expected number of succeeded pods".into()))
    );

    // The pod: labelled and owned as upstream's controller does, finished, finalizer released.
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let list = pods.list(&ListParams::default().labels("job-name=pi")).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let p = &list.items[0];
    let uid = j.metadata.uid.clone().unwrap();
    let labels = p.metadata.labels.clone().unwrap();
    assert_eq!(labels.get("batch.kubernetes.io/controller-uid"), Some(&uid));
    assert_eq!(labels.get("controller-uid"), Some(&uid));
    assert_eq!(labels.get("batch.kubernetes.io/job-name").map(String::as_str), Some("pi"));
    assert!(p.metadata.name.as_deref().unwrap().starts_with("pi-"));
    let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Job", "pi", Some(true)));
    assert!(p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()), "finalizers: {:?}", p.metadata.finalizers);
    let ps = p.status.as_ref().unwrap();
    assert_eq!(ps.phase.as_deref(), Some("Succeeded"));
    let term = ps.container_statuses.as_ref().unwrap()[0].state.as_ref().unwrap().terminated.clone().unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (0, Some("Completed")));

    // What a user reads.
    let table = k.ok(&["get", "job", "pi"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["pi", "Complete", "1/1"], "{table}");
    let pod_table = k.ok(&["get", "pods", "-l", "job-name=pi"]);
    assert!(pod_table.contains("Completed"), "{pod_table}");
    let events =
        k.ok(&["get", "events", "--field-selector", "involvedObject.name=pi", "-o", "jsonpath={.items[*].reason}"]);
    assert!(events.contains("SuccessfulCreate") && events.contains("Completed"), "{events}");
}

#[tokio::test]
async fn parallel_indexed_job_runs_every_index_at_most_parallelism_at_once() {
    let (dc, _k) = cluster_with(vec![]).await;
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let j = job("ix", "busybox", json!({"completions": 5, "parallelism": 2, "completionMode": "Indexed"}));
    jobs.create(&PostParams::default(), &j).await.unwrap();
    // Never more than 2 running at once.
    let max_active = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = max_active.clone();
    wait_list(&pods, job_pods_cfg("ix"), "5 finished pods", move |ps| {
        let running =
            ps.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded")).count();
        seen.fetch_max(running, std::sync::atomic::Ordering::SeqCst);
        ps.len() == 5 && running == 0
    })
    .await;
    assert!(max_active.load(std::sync::atomic::Ordering::SeqCst) <= 2);
    let done = wait_for(&jobs, "ix", "the Job complete", |j| condition(j, "Complete").is_some()).await;
    let st = done.status.unwrap();
    assert_eq!((st.succeeded, st.completed_indexes.as_deref()), (Some(5), Some("0-4")));
    let list = pods.list(&ListParams::default().labels("job-name=ix")).await.unwrap();
    let mut indexes: Vec<String> = list
        .items
        .iter()
        .map(|p| p.metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/job-completion-index"].clone())
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2", "3", "4"]);
    let p = list
        .items
        .iter()
        .find(|p| p.metadata.labels.as_ref().unwrap()["batch.kubernetes.io/job-completion-index"] == "3")
        .unwrap();
    assert!(p.metadata.name.as_deref().unwrap().starts_with("ix-3-"));
    assert_eq!(p.spec.as_ref().unwrap().hostname.as_deref(), Some("ix-3"));
    let env = p.spec.as_ref().unwrap().containers[0].env.clone().unwrap();
    assert!(env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX"));
}

#[tokio::test]
async fn non_indexed_completions_count_succeeded_pods() {
    let (dc, k) = cluster_with(vec![]).await;
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    jobs.create(&PostParams::default(), &job("three", "busybox", json!({"completions": 3, "parallelism": 3})))
        .await
        .unwrap();
    k.ok(&["wait", "--for=condition=complete", "job/three", "--timeout=30s"]);
    let j = jobs.get("three").await.unwrap();
    assert_eq!(j.status.unwrap().succeeded, Some(3));
    let table = k.ok(&["get", "job", "three", "--no-headers"]);
    assert!(table.contains("3/3"), "{table}");
}

#[tokio::test]
async fn failing_pods_beyond_the_backoff_limit_fail_the_job() {
    let (dc, k) = cluster_with(vec![FaultRule::new("example.com/fails:1", Fault::Exit { exit_code: 3 })]).await;
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    jobs.create(&PostParams::default(), &job("bad", "example.com/fails:1", json!({"backoffLimit": 0}))).await.unwrap();
    k.ok(&["wait", "--for=condition=failed", "job/bad", "--timeout=30s"]);
    let j = jobs.get("bad").await.unwrap();
    assert_eq!(
        condition(&j, "Failed"),
        Some(("BackoffLimitExceeded".into(), "Job has reached the specified backoff limit".into()))
    );
    assert!(condition(&j, "FailureTarget").is_some());
    let st = j.status.clone().unwrap();
    assert_eq!((st.failed, st.succeeded, st.active), (Some(1), None, None));
    assert!(st.completion_time.is_none(), "a failed Job has no completionTime");
    let list = pods.list(&ListParams::default().labels("job-name=bad")).await.unwrap();
    assert_eq!(list.items.len(), 1, "backoffLimit 0: no replacement pod");
    let ps = list.items[0].status.clone().unwrap();
    assert_eq!(ps.phase.as_deref(), Some("Failed"));
    let term = ps.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (3, Some("Error")));
    let out = k.ok(&["get", "job", "bad", "--no-headers"]);
    assert!(out.contains("Failed") && out.contains("0/1"), "{out}");
}

#[tokio::test]
async fn a_replacement_pod_follows_a_failure_within_the_backoff_limit() {
    let (dc, _k) = cluster_with(vec![FaultRule::new("example.com/fails:2", Fault::Exit { exit_code: 1 })]).await;
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    jobs.create(&PostParams::default(), &job("retry", "example.com/fails:2", json!({"backoffLimit": 1})))
        .await
        .unwrap();
    // The second pod comes after the 10s job back-off; its failure exceeds the limit.
    let j = wait_for(&jobs, "retry", "the Job failed", |j| condition(j, "Failed").is_some()).await;
    assert_eq!(j.status.unwrap().failed, Some(2));
    let list = pods.list(&ListParams::default().labels("job-name=retry")).await.unwrap();
    assert_eq!(list.items.len(), 2);
}

#[tokio::test]
async fn active_deadline_fails_a_running_job() {
    let dc = DevCluster::start_with(Options { job_pod_duration: Duration::from_secs(3600), ..Default::default() })
        .await
        .unwrap();
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    jobs.create(&PostParams::default(), &job("slow", "busybox", json!({"activeDeadlineSeconds": 1}))).await.unwrap();
    let j = wait_for(&jobs, "slow", "the Job failed", |j| condition(j, "Failed").is_some()).await;
    assert_eq!(
        condition(&j, "Failed"),
        Some(("DeadlineExceeded".into(), "Job was active longer than specified deadline".into()))
    );
    assert_eq!(j.status.unwrap().failed, Some(1), "the deleted running pod counts as failed");
    wait_list(&pods, job_pods_cfg("slow"), "the running pod deleted", |ps| ps.is_empty()).await;
}

#[tokio::test]
async fn suspend_deletes_the_pods_and_resume_runs_them() {
    let dc = DevCluster::start_with(Options { job_pod_duration: Duration::from_secs(3600), ..Default::default() })
        .await
        .unwrap();
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    jobs.create(&PostParams::default(), &job("sus", "busybox", json!({"parallelism": 2, "completions": 2})))
        .await
        .unwrap();
    wait_list(&pods, job_pods_cfg("sus"), "2 pods", |ps| ps.len() == 2).await;
    jobs.patch("sus", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}}))).await.unwrap();
    let j = wait_for(&jobs, "sus", "suspended", |j| condition(j, "Suspended").is_some()).await;
    assert_eq!(condition(&j, "Suspended"), Some(("JobSuspended".into(), "Job suspended".into())));
    wait_list(&pods, job_pods_cfg("sus"), "pods deleted", |ps| ps.is_empty()).await;
    let j = wait_for(&jobs, "sus", "no pods counted active", |j| {
        j.status.as_ref().is_some_and(|s| s.active.is_none() && s.terminating == Some(0))
    })
    .await;
    assert!(j.status.unwrap().start_time.is_none(), "a suspended Job has no startTime");
    jobs.patch("sus", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();
    let j = wait_for(&jobs, "sus", "resumed", |j| j.status.as_ref().and_then(|s| s.active) == Some(2)).await;
    let resumed = j.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Suspended").unwrap();
    assert_eq!((resumed.status.as_str(), resumed.reason.as_deref()), ("False", Some("JobResumed")));
}

#[tokio::test]
async fn ttl_after_finished_deletes_the_job_and_its_pods() {
    let (dc, _k) = cluster_with(vec![]).await;
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let created = jobs
        .create(&PostParams::default(), &job("ttl", "busybox", json!({"ttlSecondsAfterFinished": 0})))
        .await
        .unwrap();
    wait_gone(&jobs, "ttl", created.metadata.uid.as_deref().unwrap(), "the finished Job deleted").await;
    wait_list(&pods, job_pods_cfg("ttl"), "its pods deleted", |ps| ps.is_empty()).await;
}

#[tokio::test]
async fn ttl_waits_for_the_clock() {
    let (dc, _k) = cluster_with(vec![]).await;
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let created = jobs
        .create(&PostParams::default(), &job("later", "busybox", json!({"ttlSecondsAfterFinished": 3600})))
        .await
        .unwrap();
    wait_for(&jobs, "later", "complete", |j| condition(j, "Complete").is_some()).await;
    assert!(jobs.get_opt("later").await.unwrap().is_some(), "kept until the TTL passed");
    dc.advance_clock(Duration::from_secs(3601));
    wait_gone(&jobs, "later", created.metadata.uid.as_deref().unwrap(), "the Job deleted after its TTL").await;
}

#[tokio::test]
async fn kubectl_delete_job_deletes_its_pods() {
    let dc = DevCluster::start_with(Options { job_pod_duration: Duration::from_secs(3600), ..Default::default() })
        .await
        .unwrap();
    let k = Kubectl::new(&dc);
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    k.ok(&["create", "job", "long", "--image=busybox", "--", "sleep", "3600"]);
    let running = wait_list(&pods, job_pods_cfg("long"), "a running pod", |ps| {
        ps.len() == 1 && ps[0].status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await;
    assert_eq!(
        running[0].metadata.finalizers.as_deref(),
        Some(&["batch.kubernetes.io/job-tracking".to_string()][..]),
        "a running pod of a Job carries the tracking finalizer"
    );
    let out = k.ok(&["delete", "job", "long"]);
    assert_eq!(out.trim(), "job.batch \"long\" deleted");
    wait_list(&pods, job_pods_cfg("long"), "the pod deleted with its Job", |ps| ps.is_empty()).await;
}

// ---- CronJobs -------------------------------------------------------------------------------

use k8s_openapi::api::batch::v1::CronJob;

/// A year and a day: `@yearly` comes round exactly once per advance, and never by itself
/// during a test (an hourly schedule could, at the top of a real hour).
const YEAR: Duration = Duration::from_secs(366 * 24 * 3600);

fn cronjob(name: &str, image: &str, spec: Value) -> CronJob {
    let mut s = json!({"schedule": "@yearly", "jobTemplate": {"metadata": {"labels": {"from": name}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]}}}}});
    if let (Some(m), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    from_json(json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name}, "spec": s}))
}

fn jobs_of(name: &str) -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default().labels(&format!("from={name}"))
}

fn finished(j: &Job) -> bool {
    condition(j, "Complete").is_some() || condition(j, "Failed").is_some()
}

#[tokio::test]
async fn cronjob_runs_a_job_when_its_schedule_comes() {
    let (dc, k) = cluster_with(vec![]).await;
    let cjs: Api<CronJob> = Api::default_namespaced(dc.client());
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let cj = cjs.create(&PostParams::default(), &cronjob("nightly", "busybox", json!({}))).await.unwrap();
    assert!(jobs.list(&ListParams::default()).await.unwrap().items.is_empty(), "nothing runs before the schedule");

    dc.advance_clock(YEAR);
    let list = wait_list(&jobs, jobs_of("nightly"), "a Job", |js| js.len() == 1).await;
    let j = &list[0];
    let name = j.metadata.name.clone().unwrap();
    let stamp = j.metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/cronjob-scheduled-timestamp"].clone();
    let scheduled: k8s_openapi::jiff::Timestamp = stamp.parse().expect("an RFC 3339 timestamp");
    assert_eq!(name, format!("nightly-{}", scheduled.as_second() / 60), "named <cronjob>-<scheduled unix minutes>");
    assert!(stamp.ends_with("T00:00:00Z") && stamp.contains("-01-01T"), "@yearly in UTC: {stamp}");
    let owner = &j.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("CronJob", cj.metadata.uid.as_deref().unwrap(), Some(true))
    );

    let done = wait_for(&cjs, "nightly", "the run recorded as successful", |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.last_successful_time.is_some() && s.active.as_ref().is_none_or(Vec::is_empty))
    })
    .await;
    let st = done.status.unwrap();
    assert_eq!(st.last_schedule_time.unwrap().0, scheduled);
    let out = k.ok(&["get", "cronjob", "nightly", "--no-headers"]);
    let cells: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(&cells[..5], ["nightly", "@yearly", "<none>", "False", "0"], "{out}");
    let events = k.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=nightly",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(events.contains("SuccessfulCreate") && events.contains("SawCompletedJob"), "{events}");
}

#[tokio::test]
async fn cronjob_concurrency_forbid_skips_and_replace_replaces() {
    let dc = DevCluster::start_with(Options { job_pod_duration: Duration::from_secs(3600), ..Default::default() })
        .await
        .unwrap();
    let cjs: Api<CronJob> = Api::default_namespaced(dc.client());
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    cjs.create(&PostParams::default(), &cronjob("forbid", "busybox", json!({"concurrencyPolicy": "Forbid"})))
        .await
        .unwrap();
    cjs.create(&PostParams::default(), &cronjob("replace", "busybox", json!({"concurrencyPolicy": "Replace"})))
        .await
        .unwrap();
    cjs.create(&PostParams::default(), &cronjob("allow", "busybox", json!({}))).await.unwrap();
    dc.advance_clock(YEAR);
    let first_forbid = wait_list(&jobs, jobs_of("forbid"), "a first Job", |js| js.len() == 1).await;
    let first_replace = wait_list(&jobs, jobs_of("replace"), "a first Job", |js| js.len() == 1).await;
    wait_list(&jobs, jobs_of("allow"), "a first Job", |js| js.len() == 1).await;
    wait_for(&cjs, "forbid", "the run active", |c| {
        c.status.as_ref().and_then(|s| s.active.as_ref()).is_some_and(|a| a.len() == 1)
    })
    .await;

    dc.advance_clock(YEAR);
    // Allow: a second Job beside the first.
    wait_list(&jobs, jobs_of("allow"), "two Jobs", |js| js.len() == 2).await;
    // Replace: the first goes, a second comes.
    let first = first_replace[0].metadata.name.clone().unwrap();
    let now = wait_list(&jobs, jobs_of("replace"), "the first Job replaced", |js| {
        js.len() == 1 && js[0].metadata.name.as_deref() != Some(first.as_str())
    })
    .await;
    let cj = wait_for(&cjs, "replace", "the new run active", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.active.as_ref())
            .is_some_and(|a| a.len() == 1 && a[0].name == now[0].metadata.name)
    })
    .await;
    assert!(cj.status.unwrap().last_schedule_time.is_some());
    // Forbid: still the first one alone, and the event says why.
    let ev: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(dc.client());
    wait_list(
        &ev,
        kube::runtime::watcher::Config::default().fields("involvedObject.name=forbid"),
        "JobAlreadyActive",
        |es| es.iter().any(|e| e.reason.as_deref() == Some("JobAlreadyActive")),
    )
    .await;
    let list = jobs.list(&ListParams::default().labels("from=forbid")).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name, first_forbid[0].metadata.name);
}

#[tokio::test]
async fn cronjob_keeps_the_history_limits_and_suspend_stops_it() {
    let (dc, _k) = cluster_with(vec![FaultRule::new("example.com/fails:cron", Fault::Exit { exit_code: 2 })]).await;
    let cjs: Api<CronJob> = Api::default_namespaced(dc.client());
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let spec = json!({"successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1});
    cjs.create(&PostParams::default(), &cronjob("ok", "busybox", spec.clone())).await.unwrap();
    let mut bad = cronjob("bad", "example.com/fails:cron", spec);
    bad.spec.as_mut().unwrap().job_template.spec.as_mut().unwrap().backoff_limit = Some(0);
    cjs.create(&PostParams::default(), &bad).await.unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for round in 1..=3 {
        dc.advance_clock(YEAR);
        for name in ["ok", "bad"] {
            let js = wait_list(&jobs, jobs_of(name), "this round's Job finished", |js| {
                js.iter().all(finished) && js.iter().any(|j| !seen.contains(j.metadata.uid.as_deref().unwrap()))
            })
            .await;
            assert!(js.len() <= 2, "round {round}: {} Jobs of {name}", js.len());
            seen.extend(js.iter().map(|j| j.metadata.uid.clone().unwrap()));
        }
    }
    // One finished Job of each is kept, the newest.
    let ok = wait_list(&jobs, jobs_of("ok"), "one successful Job kept", |js| js.len() == 1).await;
    let bad = wait_list(&jobs, jobs_of("bad"), "one failed Job kept", |js| js.len() == 1).await;
    assert!(condition(&ok[0], "Complete").is_some() && condition(&bad[0], "Failed").is_some());
    let cj = cjs.get("ok").await.unwrap();
    let last = cj.status.unwrap().last_schedule_time.unwrap().0;
    let stamp = ok[0].metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/cronjob-scheduled-timestamp"].clone();
    assert_eq!(stamp.parse::<k8s_openapi::jiff::Timestamp>().unwrap(), last, "the newest is kept");

    cjs.patch("ok", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}}))).await.unwrap();
    wait_for(&cjs, "ok", "suspended seen", |c| c.spec.as_ref().and_then(|s| s.suspend) == Some(true)).await;
    dc.advance_clock(YEAR);
    // "bad" runs again (not suspended); by then "ok" would have run too.
    wait_list(&jobs, jobs_of("bad"), "the next failed run", |js| {
        js.iter().any(|j| !seen.contains(j.metadata.uid.as_deref().unwrap()))
    })
    .await;
    let ok_now = jobs.list(&ListParams::default().labels("from=ok")).await.unwrap();
    assert_eq!(ok_now.items.len(), 1, "a suspended CronJob starts nothing");
    assert_eq!(ok_now.items[0].metadata.uid, ok[0].metadata.uid);
}

#[tokio::test]
async fn kubectl_create_job_from_a_cronjob() {
    let (dc, k) = cluster_with(vec![]).await;
    let cjs: Api<CronJob> = Api::default_namespaced(dc.client());
    let cj = cjs.create(&PostParams::default(), &cronjob("backup", "busybox", json!({}))).await.unwrap();
    let out = k.ok(&["create", "job", "backup-now", "--from=cronjob/backup"]);
    assert_eq!(out.trim(), "job.batch/backup-now created");
    k.ok(&["wait", "--for=condition=complete", "job/backup-now", "--timeout=30s"]);
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let j = jobs.get("backup-now").await.unwrap();
    assert_eq!(j.metadata.annotations.as_ref().unwrap()["cronjob.kubernetes.io/instantiate"], "manual");
    assert_eq!(j.metadata.owner_references.as_ref().unwrap()[0].uid, cj.metadata.uid.clone().unwrap());
    wait_for(&cjs, "backup", "the manual run's success recorded", |c| {
        c.status.as_ref().is_some_and(|s| s.last_successful_time.is_some())
    })
    .await;
}

#[tokio::test]
async fn cronjob_schedules_are_validated_as_cron() {
    let (_dc, k) = cluster_with(vec![]).await;
    let err = k.fails(&["create", "cronjob", "x", "--image=busybox", "--schedule=61 * * * *"]);
    assert!(err.contains("spec.schedule: Invalid value: \"61 * * * *\""), "{err}");
    k.ok(&["create", "cronjob", "y", "--image=busybox", "--schedule=0 9 * JAN-MAR mon-fri"]);
}

// ---- CertificateSigningRequests -------------------------------------------------------------

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

/// A PEM PKCS#10 request for CN=user, O=group, and its key (PEM).
fn csr_pem(user: &str, group: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, user);
    params.distinguished_name.push(rcgen::DnType::OrganizationName, group);
    let req = params.serialize_request(&key).unwrap();
    (req.pem().unwrap(), key.serialize_pem())
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn csr_manifest(name: &str, request_pem: &str, usages: &[&str]) -> String {
    serde_json::to_string(&json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": b64(request_pem), "signerName": "kubernetes.io/kube-apiserver-client",
            "expirationSeconds": 86400, "usages": usages}}))
    .unwrap()
}

#[tokio::test]
async fn an_approved_client_csr_is_signed_and_its_certificate_authenticates() {
    let (dc, k) = cluster_with(vec![]).await;
    let (req, key) = csr_pem("jane", "dev");
    let path = k.write("csr.json", &csr_manifest("jane", &req, &["client auth", "digital signature"]));
    k.ok(&["create", "-f", &path]);
    let out = k.ok(&["get", "csr"]);
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[0], "jane");
    assert_eq!(&row[2..], ["kubernetes.io/kube-apiserver-client", "admin", "24h", "Pending"], "{out}");

    let out = k.ok(&["certificate", "approve", "jane"]);
    assert_eq!(out.trim(), "certificatesigningrequest.certificates.k8s.io/jane approved");
    let csrs: Api<CertificateSigningRequest> = Api::all(dc.client());
    let done = wait_for(&csrs, "jane", "the certificate issued", |c| {
        c.status.as_ref().is_some_and(|s| s.certificate.is_some())
    })
    .await;
    let st = done.status.unwrap();
    let cond = &st.conditions.unwrap()[0];
    assert_eq!(
        (cond.type_.as_str(), cond.status.as_str(), cond.reason.as_deref()),
        ("Approved", "True", Some("KubectlApprove"))
    );
    assert_eq!(done.spec.username.as_deref(), Some("admin"), "the requester is recorded");
    let cert = String::from_utf8(st.certificate.unwrap().0).unwrap();
    assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
    let out = k.ok(&["get", "csr", "jane", "--no-headers"]);
    assert!(out.contains("Approved,Issued"), "{out}");

    // The certificate is a client credential of this cluster.
    let ca = dc
        .kubeconfig_yaml()
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .unwrap()
        .to_string();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: jane\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: jane}}\ncurrent-context: c\n",
        dc.url(),
        b64(&cert),
        b64(&key)
    );
    let kc = k.write("jane.kubeconfig", &kubeconfig);
    let who = k.ok(&[
        "--kubeconfig",
        &kc,
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
    ]);
    assert!(who.starts_with("jane ") && who.contains("dev"), "{who}");
}

#[tokio::test]
async fn denied_refused_and_invalid_csrs() {
    let (dc, k) = cluster_with(vec![]).await;
    let (req, _) = csr_pem("bob", "dev");
    k.ok(&["create", "-f", &k.write("a.json", &csr_manifest("denied", &req, &["client auth"]))]);
    let out = k.ok(&["certificate", "deny", "denied"]);
    assert_eq!(out.trim(), "certificatesigningrequest.certificates.k8s.io/denied denied");
    let csrs: Api<CertificateSigningRequest> = Api::all(dc.client());
    let d = wait_for(&csrs, "denied", "denied", |c| {
        c.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Denied"))
    })
    .await;
    assert!(d.status.unwrap().certificate.is_none());
    // Approving a denied request is refused (the conditions exclude each other).
    let err = k.fails(&["certificate", "approve", "denied"]);
    assert!(err.contains("is already Denied"), "{err}");
    let both = json!({"status": {"conditions": [
        {"type": "Denied", "status": "True", "reason": "KubectlDeny"},
        {"type": "Approved", "status": "True", "reason": "Sneaky"}]}});
    let r = csrs.patch_subresource("approval", "denied", &PatchParams::default(), &Patch::Merge(both)).await;
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert!(s.message.contains("Approved and Denied conditions are mutually exclusive"), "{}", s.message);
        }
        other => panic!("approving a denied request: {other:?}"),
    }

    // The signer refuses usages a client certificate may not have.
    k.ok(&["create", "-f", &k.write("b.json", &csr_manifest("server", &req, &["server auth"]))]);
    k.ok(&["certificate", "approve", "server"]);
    let f = wait_for(&csrs, "server", "failed", |c| {
        c.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Failed"))
    })
    .await;
    let failed = f.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("SignerValidationFailure"));
    assert_eq!(k.ok(&["get", "csr", "server", "-o", "jsonpath={.status.certificate}"]), "");

    // Validation as upstream.
    let bad = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": "bad"},
        "spec": {"request": b64("not a request"), "usages": []}});
    let err = k.fails(&["create", "-f", &k.write("bad.json", &bad.to_string())]);
    assert!(
        err.contains("spec.request: Invalid value") && err.contains("PEM block type must be CERTIFICATE REQUEST"),
        "{err}"
    );
    assert!(err.contains("spec.signerName: Required value"), "{err}");
    assert!(err.contains("spec.usages: Required value"), "{err}");
    let short = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": "short"},
        "spec": {"request": b64(&req), "signerName": "example.com/x", "expirationSeconds": 60, "usages": ["client auth", "bogus"]}});
    let err = k.fails(&["create", "-f", &k.write("short.json", &short.to_string())]);
    assert!(
        err.contains(
            "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)"
        ),
        "{err}"
    );
    assert!(err.contains("spec.usages[1]: Unsupported value: \"bogus\""), "{err}");

    // Discovery, RBAC names and short name.
    let res = k.ok(&["api-resources", "--api-group=certificates.k8s.io", "--no-headers"]);
    assert!(res.contains("certificatesigningrequests") && res.contains("csr"), "{res}");
    assert_eq!(k.ok(&["auth", "can-i", "update", "certificatesigningrequests/approval"]).trim(), "yes");
}

// ---- ReplicationControllers -----------------------------------------------------------------

#[tokio::test]
async fn replication_controllers_keep_their_replicas_and_scale() {
    let (dc, k) = cluster_with(vec![]).await;
    let rc = json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}});
    k.ok(&["create", "-f", &k.write("rc.json", &rc.to_string())]);
    let rcs: Api<k8s_openapi::api::core::v1::ReplicationController> = Api::default_namespaced(dc.client());
    let got =
        wait_for(&rcs, "web", "2 ready replicas", |r| r.status.as_ref().and_then(|s| s.ready_replicas) == Some(2))
            .await;
    // Defaulted from the template as upstream: selector and labels.
    let spec = got.spec.clone().unwrap();
    assert_eq!(spec.selector.unwrap().get("app").map(String::as_str), Some("web"));
    assert_eq!(got.metadata.labels.unwrap().get("app").map(String::as_str), Some("web"));
    let st = got.status.unwrap();
    assert_eq!(
        (st.replicas, st.fully_labeled_replicas, st.available_replicas, st.observed_generation),
        (2, Some(2), Some(2), Some(1))
    );
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let list = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
    assert_eq!(list.items.len(), 2);
    let owner = &list.items[0].metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("ReplicationController", "web", Some(true))
    );

    let out = k.ok(&["get", "rc", "-o", "wide"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]);
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (row[0], row[1], row[2], row[3], row[5], row[6], row[7]),
        ("web", "2", "2", "2", "nginx", "nginx:1.27", "app=web")
    );

    // The scale subresource (kubectl scale) and the Scale's selector.
    let out = k.ok(&["scale", "rc", "web", "--replicas=3"]);
    assert_eq!(out.trim(), "replicationcontroller/web scaled");
    wait_for(&rcs, "web", "3 ready replicas", |r| r.status.as_ref().and_then(|s| s.ready_replicas) == Some(3)).await;
    let sel = k.ok(&["get", "--raw", "/api/v1/namespaces/default/replicationcontrollers/web/scale"]);
    let scale: Value = serde_json::from_str(&sel).unwrap();
    assert_eq!((scale["spec"]["replicas"].as_i64(), scale["status"]["selector"].as_str()), (Some(3), Some("app=web")));
    // A deleted pod is replaced; deleting the RC removes its pods.
    let victim = list.items[0].metadata.name.clone().unwrap();
    k.ok(&["delete", "pod", &victim]);
    wait_list(&pods, kube::runtime::watcher::Config::default().labels("app=web"), "3 pods again", |ps| {
        ps.len() == 3 && ps.iter().all(|p| p.metadata.name.as_deref() != Some(victim.as_str()))
    })
    .await;
    k.ok(&["delete", "rc", "web"]);
    wait_list(&pods, kube::runtime::watcher::Config::default().labels("app=web"), "no pods", |ps| ps.is_empty()).await;

    // Validation: the selector must match the template.
    let bad = json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "bad"},
        "spec": {"selector": {"app": "other"}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    let err = k.fails(&["create", "-f", &k.write("bad.json", &bad.to_string())]);
    assert!(
        err.contains("spec.template.metadata.labels: Invalid value")
            && err.contains("`selector` does not match template `labels`"),
        "{err}"
    );
    let res = k.ok(&["api-resources", "--api-group=", "--no-headers"]);
    let line = res.lines().find(|l| l.starts_with("replicationcontrollers")).unwrap_or_default().to_string();
    assert!(line.contains(" rc ") && line.contains("ReplicationController"), "{res}");
}

// ---- DaemonSets -----------------------------------------------------------------------------

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Node;

fn daemonset(name: &str, image: &str, spec: Value) -> DaemonSet {
    let mut s = json!({"selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "agent", "image": image}]}}});
    if let (Some(m), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    from_json(json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name}, "spec": s}))
}

fn ds_pods(name: &str) -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default().labels(&format!("app={name}"))
}

fn node_of(p: &Pod) -> String {
    p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

fn running(ps: &[Pod]) -> bool {
    ps.iter().all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
}

#[tokio::test]
async fn a_daemonset_runs_one_pod_per_node_and_follows_the_nodes() {
    let dc = DevCluster::start_with(Options { nodes: 3, ..Default::default() }).await.unwrap();
    let k = Kubectl::new(&dc);
    let dss: Api<DaemonSet> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let nodes: Api<Node> = Api::all(dc.client());
    dss.create(&PostParams::default(), &daemonset("agent", "example.com/agent:1", json!({}))).await.unwrap();
    let out = k.ok(&["rollout", "status", "ds/agent", "--timeout=30s"]);
    assert!(out.contains("daemon set \"agent\" successfully rolled out"), "{out}");
    let ps = wait_list(&pods, ds_pods("agent"), "3 running pods", |ps| ps.len() == 3 && running(ps)).await;
    let mut on: Vec<String> = ps.iter().map(node_of).collect();
    on.sort();
    assert_eq!(on, ["devcluster-node-1", "devcluster-node-2", "devcluster-node-3"]);
    let p = &ps[0];
    let terms = p.spec.as_ref().unwrap().affinity.as_ref().unwrap().node_affinity.as_ref().unwrap();
    let field = &terms.required_during_scheduling_ignored_during_execution.as_ref().unwrap().node_selector_terms[0]
        .match_fields
        .as_ref()
        .unwrap()[0];
    assert_eq!((field.key.as_str(), field.values.as_ref().unwrap()[0].clone()), ("metadata.name", node_of(p)));
    let tolerations = p.spec.as_ref().unwrap().tolerations.clone().unwrap();
    assert!(tolerations.iter().any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable")));
    let labels = p.metadata.labels.clone().unwrap();
    assert!(labels.contains_key("controller-revision-hash") && labels["pod-template-generation"] == "1");
    let st = dss.get("agent").await.unwrap().status.unwrap();
    assert_eq!(
        (st.desired_number_scheduled, st.current_number_scheduled, st.number_ready, st.number_misscheduled),
        (3, 3, 3, 0)
    );
    assert_eq!((st.updated_number_scheduled, st.number_available, st.number_unavailable), (Some(3), Some(3), None));
    let table = k.ok(&["get", "ds", "agent", "--no-headers"]);
    let cells: Vec<&str> = table.split_whitespace().collect();
    assert_eq!(&cells[..7], ["agent", "3", "3", "3", "3", "3", "<none>"], "{table}");

    // A node added later gets a pod.
    let node: Node = from_json(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "late-node", "labels": {"kubernetes.io/hostname": "late-node"}}}));
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    nodes.patch_status("late-node", &PatchParams::default(), &Patch::Merge(ready)).await.unwrap();
    let ps = wait_list(&pods, ds_pods("agent"), "a pod on the new node", |ps| {
        ps.len() == 4 && ps.iter().any(|p| node_of(p) == "late-node")
    })
    .await;
    assert_eq!(ps.len(), 4);
    // A nodeSelector narrows it to matching nodes; the others' pods go.
    k.ok(&["label", "node", "devcluster-node-2", "role=edge"]);
    dss.patch(
        "agent",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"nodeSelector": {"role": "edge"}}}}})),
    )
    .await
    .unwrap();
    let ps = wait_list(&pods, ds_pods("agent"), "only the edge node", |ps| {
        ps.len() == 1 && node_of(&ps[0]) == "devcluster-node-2" && running(ps)
    })
    .await;
    assert!(ps[0].spec.as_ref().unwrap().node_selector.is_some());
    let st = wait_for(&dss, "agent", "status of one node", |d| {
        d.status.as_ref().is_some_and(|s| s.desired_number_scheduled == 1 && s.number_ready == 1)
    })
    .await
    .status
    .unwrap();
    assert_eq!(st.number_misscheduled, 0);
    // An untolerated NoExecute taint evicts.
    k.ok(&["taint", "node", "devcluster-node-2", "dedicated=db:NoExecute"]);
    wait_list(&pods, ds_pods("agent"), "evicted by the taint", |ps| ps.is_empty()).await;
    let d =
        wait_for(&dss, "agent", "none desired", |d| d.status.as_ref().is_some_and(|s| s.desired_number_scheduled == 0))
            .await;
    assert_eq!(d.status.unwrap().current_number_scheduled, 0);

    // Deleting the DaemonSet deletes its pods.
    k.ok(&["taint", "node", "devcluster-node-2", "dedicated=db:NoExecute-"]);
    wait_list(&pods, ds_pods("agent"), "back on the edge node", |ps| ps.len() == 1).await;
    k.ok(&["delete", "ds", "agent"]);
    wait_list(&pods, ds_pods("agent"), "no pods", |ps| ps.is_empty()).await;
}

#[tokio::test]
async fn daemonset_rolling_update_and_on_delete() {
    let dc = DevCluster::start_with(Options { nodes: 3, ..Default::default() }).await.unwrap();
    let k = Kubectl::new(&dc);
    let dss: Api<DaemonSet> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let image = |ps: &[Pod], want: &str| {
        ps.iter().all(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some(want))
    };
    dss.create(&PostParams::default(), &daemonset("roll", "example.com/agent:1", json!({}))).await.unwrap();
    k.ok(&["rollout", "status", "ds/roll", "--timeout=30s"]);
    k.ok(&["set", "image", "ds/roll", "agent=example.com/agent:2"]);
    let out = k.ok(&["rollout", "status", "ds/roll", "--timeout=30s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    wait_list(&pods, ds_pods("roll"), "3 new pods", |ps| {
        ps.len() == 3 && image(ps, "example.com/agent:2") && running(ps)
    })
    .await;
    let d = dss.get("roll").await.unwrap();
    let st = d.status.unwrap();
    assert_eq!((st.observed_generation, st.updated_number_scheduled), (Some(2), Some(3)));
    let revs: Api<ControllerRevision> = Api::default_namespaced(dc.client());
    let list = revs.list(&ListParams::default().labels("app=roll")).await.unwrap();
    let mut numbers: Vec<i64> = list.items.iter().map(|r| r.revision).collect();
    numbers.sort();
    assert_eq!(numbers, [1, 2]);
    let hist = k.ok(&["rollout", "history", "ds/roll"]);
    assert!(hist.contains('1') && hist.contains('2'), "{hist}");

    // OnDelete: the template changes, pods stay until deleted.
    dss.create(
        &PostParams::default(),
        &daemonset("manual", "example.com/agent:1", json!({"updateStrategy": {"type": "OnDelete"}})),
    )
    .await
    .unwrap();
    let before = wait_list(&pods, ds_pods("manual"), "3 pods", |ps| ps.len() == 3 && running(ps)).await;
    k.ok(&["set", "image", "ds/manual", "agent=example.com/agent:2"]);
    let d = wait_for(&dss, "manual", "the new generation observed", |d| {
        d.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    })
    .await;
    assert_eq!(d.status.unwrap().updated_number_scheduled, None, "no pod is updated by itself");
    let now = pods.list(&ListParams::default().labels("app=manual")).await.unwrap().items;
    assert!(image(&now, "example.com/agent:1") && now.len() == 3);
    let victim = before[0].metadata.name.clone().unwrap();
    k.ok(&["delete", "pod", &victim]);
    let after = wait_list(&pods, ds_pods("manual"), "a replacement with the new image", |ps| {
        ps.len() == 3
            && ps
                .iter()
                .filter(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("example.com/agent:2"))
                .count()
                == 1
    })
    .await;
    assert!(after.iter().all(|p| p.metadata.name.as_deref() != Some(victim.as_str())));
}

// ---- APIServices ----------------------------------------------------------------------------

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;

#[tokio::test]
async fn apiservices_list_the_served_group_versions_and_follow_crds() {
    let (dc, k) = cluster_with(vec![]).await;
    let api: Api<APIService> = Api::all(dc.client());
    let list = api.list(&ListParams::default()).await.unwrap();
    let names: Vec<String> = list.items.iter().filter_map(|a| a.metadata.name.clone()).collect();
    for n in [
        "v1.",
        "v1.apps",
        "v1.batch",
        "v1.apiregistration.k8s.io",
        "v1.certificates.k8s.io",
        "v1.rbac.authorization.k8s.io",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
    }
    let core = api.get("v1.").await.unwrap();
    let spec = core.spec.unwrap();
    assert_eq!(
        (spec.group, spec.version.as_deref(), spec.group_priority_minimum, spec.version_priority),
        (None, Some("v1"), 18000, 1)
    );
    assert!(spec.service.is_none());
    let apps = api.get("v1.apps").await.unwrap();
    assert_eq!(
        (apps.spec.as_ref().unwrap().group_priority_minimum, apps.spec.as_ref().unwrap().version_priority),
        (17800, 15)
    );
    assert_eq!(apps.metadata.labels.unwrap()["kube-aggregator.kubernetes.io/automanaged"], "onstart");
    let cond = &apps.status.unwrap().conditions.unwrap()[0];
    assert_eq!(
        (cond.type_.as_str(), cond.status.as_str(), cond.reason.as_deref()),
        ("Available", "True", Some("Local"))
    );
    let out = k.ok(&["get", "apiservices", "v1.apps"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SERVICE", "AVAILABLE", "AGE"]);
    assert_eq!(&row[..3], ["v1.apps", "Local", "True"]);

    // A CRD's group-version gets its own (crd-autoregister), and loses it with the CRD.
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    k.ok(&["create", "-f", &k.write("crd.json", &crd.to_string())]);
    let a = wait_for(&api, "v1.example.com", "the CRD's APIService", |a| a.status.is_some()).await;
    let spec = a.spec.unwrap();
    assert_eq!(
        (spec.group.as_deref(), spec.group_priority_minimum, spec.version_priority),
        (Some("example.com"), 1000, 100)
    );
    assert_eq!(a.metadata.labels.unwrap()["kube-aggregator.kubernetes.io/automanaged"], "true");
    k.ok(&["delete", "crd", "widgets.example.com"]);
    wait_gone(&api, "v1.example.com", a.metadata.uid.as_deref().unwrap(), "the CRD's APIService removed").await;

    // A deleted built-in registration comes back; a bad name is refused.
    let uid = api.get("v1.batch").await.unwrap().metadata.uid.unwrap();
    k.ok(&["delete", "apiservice", "v1.batch"]);
    wait_for(&api, "v1.batch", "re-registered", |a| a.metadata.uid.as_deref() != Some(uid.as_str())).await;
    let bad = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "wrong"},
        "spec": {"group": "x.io", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10}});
    let err = k.fails(&["create", "-f", &k.write("bad.json", &bad.to_string())]);
    assert!(err.contains("metadata.name: Invalid value: \"wrong\": must be `spec.version+\".\"+spec.group`"), "{err}");
}

// ---- ComponentStatuses and ephemeral containers ---------------------------------------------

#[tokio::test]
async fn component_statuses_are_healthy_and_read_only() {
    let (dc, k) = cluster_with(vec![]).await;
    let (out, _) = k.ok2(&["get", "componentstatuses"]);
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "STATUS", "MESSAGE", "ERROR"]);
    let mut names: Vec<(&str, &str, &str)> = rows[1..].iter().map(|r| (r[0], r[1], r[2])).collect();
    names.sort();
    assert_eq!(
        names,
        [("controller-manager", "Healthy", "ok"), ("etcd-0", "Healthy", "ok"), ("scheduler", "Healthy", "ok")]
    );
    let cs: Api<k8s_openapi::api::core::v1::ComponentStatus> = Api::all(dc.client());
    let etcd = cs.get("etcd-0").await.unwrap();
    let c = &etcd.conditions.unwrap()[0];
    assert_eq!((c.type_.as_str(), c.status.as_str(), c.message.as_deref()), ("Healthy", "True", Some("ok")));
    let err = k.fails(&["delete", "cs", "scheduler"]);
    assert!(err.contains("MethodNotAllowed") || err.contains("does not allow this method"), "{err}");
    let res = k.ok(&["api-resources", "--api-group=", "--no-headers"]);
    let line = res.lines().find(|l| l.starts_with("componentstatuses")).unwrap_or_default().to_string();
    assert!(line.contains(" cs ") && line.contains("ComponentStatus"), "{res}");
    assert_eq!(k.ok(&["auth", "can-i", "list", "componentstatuses"]).trim(), "yes");
}

#[tokio::test]
async fn kubectl_debug_adds_a_running_ephemeral_container() {
    let (dc, k) = cluster_with(vec![]).await;
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    k.ok(&["run", "web", "--image=nginx:1.27"]);
    wait_for(&pods, "web", "running", |p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).await;
    let out = k.ok(&["debug", "web", "--image=busybox", "--container=debugger"]);
    assert!(out.is_empty() || out.contains("debugger"), "{out}");
    let p = wait_for(&pods, "web", "the debugger running", |p| {
        p.status.as_ref().and_then(|s| s.ephemeral_container_statuses.as_ref()).is_some_and(|cs| {
            cs.iter().any(|c| c.name == "debugger" && c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
    })
    .await;
    let ec = &p.spec.as_ref().unwrap().ephemeral_containers.as_ref().unwrap()[0];
    assert_eq!((ec.name.as_str(), ec.image.as_deref()), ("debugger", Some("busybox")));
    assert_eq!(ec.termination_message_policy.as_deref(), Some("File"), "defaulted as a container");

    // GET on the subresource answers the pod; a change to an existing one is refused; a main
    // update cannot touch them.
    let got: Value =
        serde_json::from_str(&k.ok(&["get", "--raw", "/api/v1/namespaces/default/pods/web/ephemeralcontainers"]))
            .unwrap();
    assert_eq!(got["kind"], "Pod");
    let change = json!({"spec": {"ephemeralContainers": [{"name": "debugger", "image": "busybox:2"}]}});
    let r =
        pods.patch_subresource("ephemeralcontainers", "web", &PatchParams::default(), &Patch::Strategic(change)).await;
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message.contains("existing ephemeral containers \"debugger\" may not be changed"),
                "{}",
                s.message
            );
        }
        other => panic!("changing an ephemeral container: {other:?}"),
    }
    let ports = json!({"spec": {"ephemeralContainers": [{"name": "probe", "image": "busybox", "ports": [{"containerPort": 80}]}]}});
    let r =
        pods.patch_subresource("ephemeralcontainers", "web", &PatchParams::default(), &Patch::Strategic(ports)).await;
    assert!(
        matches!(r, Err(kube::Error::Api(ref s)) if s.message.contains("cannot be set for an Ephemeral Container")),
        "{r:?}"
    );
    let res = k.ok(&["api-resources", "--api-group=", "-o", "name"]);
    assert!(res.lines().any(|l| l == "pods"), "{res}");
    let disc: Value = serde_json::from_str(&k.ok(&["get", "--raw", "/api/v1"])).unwrap();
    let names: Vec<&str> = disc["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    assert!(names.contains(&"pods/ephemeralcontainers"), "{names:?}");
}

// ---- The new kinds in OpenAPI and RBAC ------------------------------------------------------

#[tokio::test]
async fn the_new_kinds_are_explained_and_authorized_by_name() {
    let (_dc, k) = cluster_with(vec![]).await;
    for (path, field) in [
        ("replicationcontroller.spec.selector", "FIELD: selector"),
        ("apiservice.spec.groupPriorityMinimum", "FIELD: groupPriorityMinimum"),
        ("csr.spec.signerName", "FIELD: signerName"),
        ("componentstatus.conditions", "FIELD: conditions"),
        ("pod.spec.ephemeralContainers", "FIELD: ephemeralContainers"),
    ] {
        let out = k.ok(&["explain", path]);
        assert!(out.contains(field), "kubectl explain {path}:\n{out}");
    }
    k.ok(&["create", "serviceaccount", "ops"]);
    k.ok(&[
        "create",
        "role",
        "rc-reader",
        "--verb=get,list",
        "--resource=replicationcontrollers,jobs.batch,cronjobs.batch",
    ]);
    k.ok(&["create", "rolebinding", "ops", "--role=rc-reader", "--serviceaccount=default:ops"]);
    let me = "--as=system:serviceaccount:default:ops";
    assert_eq!(k.ok(&["auth", "can-i", "list", "rc", me]).trim(), "yes");
    assert_eq!(k.ok(&["auth", "can-i", "get", "cronjobs", me]).trim(), "yes");
    assert_eq!(k.exit_1(&["auth", "can-i", "list", "daemonsets", me]).trim(), "no");
    assert_eq!(k.exit_1(&["auth", "can-i", "update", "certificatesigningrequests/approval", me]).trim(), "no");
}

#[tokio::test]
async fn approving_needs_approve_on_the_signer() {
    let (_dc, k) = cluster_with(vec![]).await;
    let (req, _) = csr_pem("carol", "dev");
    k.ok(&["create", "-f", &k.write("c.json", &csr_manifest("carol", &req, &["client auth"]))]);
    k.ok(&["create", "serviceaccount", "approver"]);
    k.ok(&[
        "create",
        "clusterrole",
        "csr-approver",
        "--verb=get,list,update",
        "--resource=certificatesigningrequests,certificatesigningrequests/approval",
    ]);
    k.ok(&[
        "create",
        "clusterrolebinding",
        "approver",
        "--clusterrole=csr-approver",
        "--serviceaccount=default:approver",
    ]);
    let me = "--as=system:serviceaccount:default:approver";
    let err = k.fails(&["certificate", "approve", "carol", me]);
    assert!(
        err.contains("certificatesigningrequests.certificates.k8s.io \"carol\" is forbidden: user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\""),
        "{err}"
    );
    // As the Kubernetes docs write it (signers is not a served resource, so not by kubectl create).
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "signer"},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["approve"],
            "resourceNames": ["kubernetes.io/*"]}]});
    k.ok(&["create", "-f", &k.write("signer.json", &role.to_string())]);
    k.ok(&["create", "clusterrolebinding", "signer", "--clusterrole=signer", "--serviceaccount=default:approver"]);
    let out = k.ok(&["certificate", "approve", "carol", me]);
    assert_eq!(out.trim(), "certificatesigningrequest.certificates.k8s.io/carol approved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_max_surge_starts_the_new_pod_before_the_old_goes() {
    let dc = DevCluster::start_with(Options { nodes: 2, ..Default::default() }).await.unwrap();
    let k = Kubectl::new(&dc);
    let dss: Api<DaemonSet> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let strategy =
        json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}});
    dss.create(&PostParams::default(), &daemonset("surge", "example.com/agent:1", strategy)).await.unwrap();
    k.ok(&["rollout", "status", "ds/surge", "--timeout=30s"]);
    // Watch every pod event of the update: a node runs its old and new pod side by side.
    let seen_two = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watching = std::sync::Arc::new(tokio::sync::Notify::new());
    let (flag, ready) = (seen_two.clone(), watching.clone());
    let waiter = tokio::spawn({
        let pods = pods.clone();
        async move {
            wait_list(&pods, ds_pods("surge"), "two new pods and no old", move |ps| {
                ready.notify_one();
                let mut per_node = std::collections::BTreeMap::<String, usize>::new();
                for p in ps {
                    *per_node.entry(node_of(p)).or_default() += 1;
                }
                if per_node.values().any(|n| *n == 2) {
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                ps.len() == 2
                    && ps
                        .iter()
                        .all(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("example.com/agent:2"))
                    && running(ps)
            })
            .await
        }
    });
    watching.notified().await;
    dss.patch(
        "surge",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "example.com/agent:2"}]}}}})),
    )
    .await
    .unwrap();
    waiter.await.unwrap();
    assert!(seen_two.load(std::sync::atomic::Ordering::SeqCst), "a node ran its old and new pod side by side");
    let out = k.ok(&["rollout", "status", "ds/surge", "--timeout=30s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
}

#[tokio::test]
async fn a_job_managed_by_another_controller_is_left_alone() {
    let (dc, _k) = cluster_with(vec![]).await;
    let jobs: Api<Job> = Api::default_namespaced(dc.client());
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    jobs.create(&PostParams::default(), &job("theirs", "busybox", json!({"managedBy": "example.com/queue"})))
        .await
        .unwrap();
    jobs.create(&PostParams::default(), &job("ours", "busybox", json!({}))).await.unwrap();
    // By the time the built-in controller completed "ours", it would have started "theirs" too.
    wait_for(&jobs, "ours", "complete", |j| condition(j, "Complete").is_some()).await;
    assert!(jobs.get("theirs").await.unwrap().status.is_none_or(|s| s.start_time.is_none() && s.active.is_none()));
    assert!(pods.list(&ListParams::default().labels("job-name=theirs")).await.unwrap().items.is_empty());
}
