//! "Restore, do not trust" for the Varroa operator (issue 10): a field anyone adds to a
//! Controller's StatefulSet or Services is removed by the next reconcile, with one restoring write
//! and a Warning Event `Restored` on the Controller naming the field and who wrote it. Labels of
//! other tools stay.

mod support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde_json::{Value, json};
use support::*;
use varroa_api::ControllerPhase;

fn restores(env: &Env) -> u64 {
    env.metrics().writes.get(opkit::apply::Outcome::Restored)
}

/// The content of an object and the labels and annotations that are the operator's.
fn content<K: Serialize>(o: &K) -> Value {
    let mut v = serde_json::to_value(o).expect("json");
    let m = v.as_object_mut().expect("object");
    m.remove("status");
    let meta = m.remove("metadata").unwrap_or_default();
    m.insert("labels".into(), meta.get("labels").cloned().unwrap_or_default());
    m.insert("annotations".into(), meta.get("annotations").cloned().unwrap_or_default());
    v
}

/// Edit one object of controller `name` as `kubectl edit` would, then wait for the restore and its
/// Event.
async fn tamper<K: optest::Namespaced>(env: &Env, controller: &str, object: &str, patch: Value, said: &str) {
    let api: Api<K> = Api::namespaced(env.admin.clone(), TEAM);
    let before = api.get(object).await.expect("the object");
    let restored_before = restores(env);
    let pp = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
    let edited = api.patch(object, &pp, &Patch::Merge(&patch)).await.expect("the hand edit");
    assert_ne!(content(&edited), content(&before), "the edit changed {} {object}", K::kind(&()));

    let event = optest::events::wait_for(
        &env.admin,
        TEAM,
        "Controller",
        controller,
        &format!("Restored saying {said:?}"),
        |e| e.reason.as_deref() == Some("Restored") && e.note.as_deref().unwrap_or_default().contains(said),
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.clone().unwrap_or_default();
    assert!(note.contains(&format!("{TEAM}/{object}")) && note.contains("kubectl-edit"), "{note}");
    let related = event.related.expect("the restored object is the Event's related object");
    assert_eq!(related.name.as_deref(), Some(object));
    let after = api.get(object).await.expect("the object");
    assert_eq!(content(&after), content(&before), "{} {object} restored", K::kind(&()));
    assert_eq!(after.uid(), before.uid(), "restored in place");
    assert_eq!(restores(env) - restored_before, 1, "one restoring write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_added_to_a_controllers_statefulset_and_services_are_removed_with_an_event() {
    let env = Env::start(config()).await;
    // One Controller per case: each restore has an Event of its own.
    let names = ["t-sts-host", "t-sts-sidecar", "t-svc-ips", "t-svc-type"];
    for n in names {
        env.create(n, json!({})).await;
    }
    for n in names {
        env.wait_phase(n, ControllerPhase::Running).await;
    }

    tamper::<StatefulSet>(
        &env,
        "t-sts-host",
        "t-sts-host",
        json!({"spec": {"template": {"spec": {"hostPID": true}}}}),
        ".spec.template.spec.hostPID was added",
    )
    .await;
    let sts: StatefulSet = env.obj("t-sts-sidecar").await;
    let pod = sts.spec.and_then(|s| s.template.spec).expect("pod spec");
    let mut containers = serde_json::to_value(&pod.containers).expect("containers");
    let n = containers.as_array().map_or(0, Vec::len);
    containers
        .as_array_mut()
        .expect("list")
        .push(json!({"name": "exfiltrate", "image": "registry.example.com/evil/tool:1"}));
    tamper::<StatefulSet>(
        &env,
        "t-sts-sidecar",
        "t-sts-sidecar",
        json!({"spec": {"template": {"spec": {"containers": containers}}}}),
        &format!(".spec.template.spec.containers[{n}] was added"),
    )
    .await;
    tamper::<Service>(
        &env,
        "t-svc-ips",
        "t-svc-ips",
        json!({"spec": {"externalIPs": ["203.0.113.10"]}}),
        ".spec.externalIPs was added",
    )
    .await;
    tamper::<Service>(
        &env,
        "t-svc-type",
        "t-svc-type",
        json!({"spec": {"type": "NodePort"}}),
        ".spec.type was changed",
    )
    .await;

    // Another tool's label is theirs: kept, nothing written.
    let services: Api<Service> = Api::namespaced(env.admin.clone(), TEAM);
    let pp = PatchParams { field_manager: Some("mesh-injector".into()), ..Default::default() };
    let labelled = services
        .patch("t-svc-ips", &pp, &Patch::Merge(json!({"metadata": {"labels": {"mesh.example.com/enrolled": "yes"}}})))
        .await
        .expect("label");
    let before = restores(&env);
    env.settle("t-svc-ips").await;
    let svc = services.get("t-svc-ips").await.expect("service");
    assert_eq!(svc.labels().get("mesh.example.com/enrolled").map(String::as_str), Some("yes"));
    assert_eq!(svc.resource_version(), labelled.resource_version(), "nothing written");
    assert_eq!(restores(&env), before);
}
