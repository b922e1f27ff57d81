//! Issue 10, item 4 (per-object state): a deleted preview leaves nothing behind in the operator.
//! Previews carry a finalizer, so the operator sees each deletion through `cleanup`; once the
//! finalizer is released every entry kept about the preview (backoff, conflict retries, expiry,
//! phase, verified objects) is gone: `vesper_tracked_objects` is back to 0 and the phase gauges
//! count none of them. One preview is also blocked by a namespace it does not own (a conflict
//! retry entry) before it is deleted.

mod support;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::*;
use vesper_api::Phase;

const IMAGE: &str = "registry.example.com/app:pr-1";
const PREVIEWS: usize = 12;

fn tracked(env: &Env) -> i64 {
    env.metrics().tracked_objects.get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_previews_leave_no_state_or_metric_labels_behind() {
    let env = Env::start(config()).await;
    assert_eq!(tracked(&env), 0);
    let names: Vec<String> = (0..PREVIEWS).map(|i| format!("pr-life-{i}")).collect();
    join_all(names.iter().map(|n| env.create(n, json!({"image": IMAGE})))).await;
    // A preview whose namespace someone else made: blocked, retried on a growing delay.
    let blocked = "pr-life-blocked";
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": env.ns_of(blocked)}})).expect("ns");
    Api::<Namespace>::all(env.admin.clone()).create(&PostParams::default(), &ns).await.expect("the foreign namespace");
    env.create(blocked, json!({"image": IMAGE})).await;
    for n in &names {
        env.wait_ready(n).await;
    }
    env.wait_phase(blocked, Phase::Failed).await;
    let m = env.metrics();
    eventually("state is kept about every preview", || m.tracked_objects.get() > PREVIEWS as i64).await;
    let text = metrics_text(&m, "vesper_previews");
    assert!(text.contains(&format!("vesper_previews{{phase=\"Ready\"}} {PREVIEWS}")), "{text}");

    // Delete them all (the finalizer makes the operator clean up each).
    let dp = DeleteParams::default();
    for n in names.iter().map(String::as_str).chain([blocked]) {
        env.previews().delete(n, &dp).await.expect("delete");
    }
    for n in names.iter().map(String::as_str).chain([blocked]) {
        env.wait_pe_gone(n).await;
    }
    eventually("nothing is kept about deleted previews", || m.tracked_objects.get() == 0).await;
    assert_eq!(tracked(&env), 0);
    let text = metrics_text(&m, "vesper_previews");
    for phase in ["Pending", "Ready", "Failed", "Expired"] {
        assert!(text.contains(&format!("vesper_previews{{phase=\"{phase}\"}} 0")), "{phase}: {text}");
    }
    let all = metrics_text(&m, "vesper_");
    for n in names.iter().map(String::as_str).chain([blocked]) {
        assert!(!all.contains(n), "/metrics still names {n}:\n{all}");
    }
}
