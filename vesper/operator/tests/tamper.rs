//! "Restore, do not trust" restores everything (issue 10): a field anyone adds to an object of a
//! preview is removed by the next reconcile, which records a Warning Event `Restored` naming the
//! field, with one restoring write per tamper. Server-side apply alone keeps such fields (they
//! belong to another field manager), so each of these cases stayed in place before.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

const IMAGE: &str = "registry.example.com/team-a/web:1.0.0";

/// The restore writes the operator counted.
fn restores(env: &Env) -> u64 {
    env.metrics().writes.get(opkit::apply::Outcome::Restored)
}

/// Tamper with one object as `kubectl edit` would (a merge patch by the field manager
/// `kubectl-edit`), then wait until the object is back to what it was and the operator said so.
async fn tamper<K: optest::Namespaced>(env: &Env, preview: &str, name: &str, patch: Value, said: &str) {
    let ns = env.ns_of(preview);
    let api: Api<K> = Api::namespaced(env.admin.clone(), &ns);
    let content = |o: &K| {
        let mut v = serde_json::to_value(o).expect("json");
        let m = v.as_object_mut().expect("object");
        m.remove("status");
        let meta = m.remove("metadata").unwrap_or_default();
        m.insert("labels".into(), meta.get("labels").cloned().unwrap_or_default());
        let mut annotations = meta.get("annotations").cloned().unwrap_or_default();
        // The Deployment controller's own bookkeeping moves with every rollout.
        if let Some(a) = annotations.as_object_mut() {
            a.remove("deployment.kubernetes.io/revision");
        }
        m.insert("annotations".into(), annotations);
        v
    };
    let before = api.get(name).await.expect("the object");
    let before_content = content(&before);
    let restored_before = restores(env);
    let pp = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
    let edited = api.patch(name, &pp, &Patch::Merge(&patch)).await.expect("the hand edit");
    assert_ne!(content(&edited), before_content, "the edit changed {} {name}: {patch}", K::kind(&()));

    let event = env.wait_event_with(preview, "Restored", "Warning", said).await;
    let note = event.note.clone().unwrap_or_default();
    assert!(note.contains(&format!("{ns}/{name}")) && note.contains("kubectl-edit"), "{note}");
    let related = event.related.expect("the restored object is the Event's related object");
    assert_eq!((related.kind.as_deref(), related.name.as_deref()), (Some(K::kind(&()).as_ref()), Some(name)));
    let want = before_content.clone();
    let after =
        wait_for(api.clone(), name, "the object restored", move |o: Option<&K>| o.is_some_and(|o| content(o) == want))
            .await;
    assert_eq!(after.uid(), before.uid(), "restored in place, not recreated");
    assert_eq!(restores(env) - restored_before, 1, "one restoring write for {patch}");
}

/// One tamper case: the kind, the object, the preview-independent edit, and what the Event says.
type Case = (&'static str, &'static str, Value, &'static str);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_added_by_hand_to_a_previews_objects_are_removed_with_an_event() {
    let env = Env::start(config()).await;
    let cases: Vec<Case> = vec![
        // Service: exposed outside the cluster. (type LoadBalancer is refused before it lands: the
        // preview's quota allows no load balancers.)
        ("Service", "app", json!({"spec": {"externalIPs": ["203.0.113.9"]}}), ".spec.externalIPs was added"),
        (
            "Service",
            "app",
            json!({"spec": {"publishNotReadyAddresses": true}}),
            ".spec.publishNotReadyAddresses was added",
        ),
        // Deployment: more privilege for the pull request's code.
        // (filled in below: the real container and a second one)
        ("Deployment", "app", Value::Null, ".spec.template.spec.containers[1] was added"),
        (
            "Deployment",
            "app",
            json!({"spec": {"template": {"spec": {"hostNetwork": true}}}}),
            ".spec.template.spec.hostNetwork was added",
        ),
        (
            "Deployment",
            "app",
            json!({"spec": {"template": {"spec": {"serviceAccountName": "deployer"}}}}),
            ".spec.template.spec.serviceAccountName was added",
        ),
        (
            "Deployment",
            "app",
            json!({"spec": {"template": {"spec": {"automountServiceAccountToken": true}}}}),
            ".spec.template.spec.automountServiceAccountToken was changed",
        ),
        // LimitRange: an extra item that lifts the max (filled in below: it keeps the real items).
        ("LimitRange", "preview", Value::Null, ".spec.limits["),
        // ResourceQuota: a hard limit nobody asked for.
        (
            "ResourceQuota",
            "preview",
            json!({"spec": {"hard": {"requests.storage": "1Ti"}}}),
            ".spec.hard.requests.storage was added",
        ),
        // NetworkPolicy: a rule that lets everything in (filled in below).
        ("NetworkPolicy", "preview-isolation", Value::Null, ".spec.ingress"),
        // Ingress: its annotations are the operator's (a snippet runs in the ingress controller).
        (
            "Ingress",
            "app",
            json!({"metadata": {"annotations": {"nginx.ingress.kubernetes.io/server-snippet": "location /x { return 200; }"}}}),
            ".metadata.annotations.nginx.ingress.kubernetes.io/server-snippet was added",
        ),
    ];
    // One preview per case, so each restore has an Event of its own.
    for i in 0..cases.len() {
        env.create(&format!("pr-t{i}"), json!({"image": IMAGE})).await;
    }
    for i in 0..cases.len() {
        env.wait_ready(&format!("pr-t{i}")).await;
    }
    for (i, (kind, name, patch, said)) in cases.into_iter().enumerate() {
        let preview = format!("pr-t{i}");
        let ns = env.ns_of(&preview);
        match kind {
            "Service" => tamper::<Service>(&env, &preview, name, patch, said).await,
            "Deployment" if patch.is_null() => {
                let d: Deployment = env.obj(&ns, name).await;
                let pod = d.spec.and_then(|s| s.template.spec).expect("pod spec");
                let mut containers = serde_json::to_value(&pod.containers).expect("containers");
                containers
                    .as_array_mut()
                    .expect("list")
                    .push(json!({"name": "miner", "image": "registry.example.com/evil/miner:1"}));
                let patch = json!({"spec": {"template": {"spec": {"containers": containers}}}});
                tamper::<Deployment>(&env, &preview, name, patch, said).await
            }
            "Deployment" => tamper::<Deployment>(&env, &preview, name, patch, said).await,
            "LimitRange" => {
                let lr: LimitRange = env.obj(&ns, name).await;
                let mut limits = serde_json::to_value(&lr.spec.as_ref().expect("spec").limits).expect("limits");
                limits
                    .as_array_mut()
                    .expect("items")
                    .push(json!({"type": "PersistentVolumeClaim", "max": {"storage": "1Ti"}}));
                tamper::<LimitRange>(&env, &preview, name, json!({"spec": {"limits": limits}}), said).await
            }
            "ResourceQuota" => tamper::<ResourceQuota>(&env, &preview, name, patch, said).await,
            "NetworkPolicy" => {
                let np: NetworkPolicy = env.obj(&ns, name).await;
                let mut ingress = serde_json::to_value(&np.spec.as_ref().expect("spec").ingress).expect("ingress");
                if ingress.is_null() {
                    ingress = json!([]);
                }
                ingress.as_array_mut().expect("rules").push(json!({"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}));
                tamper::<NetworkPolicy>(&env, &preview, name, json!({"spec": {"ingress": ingress}}), said).await
            }
            "Ingress" => tamper::<Ingress>(&env, &preview, name, patch, said).await,
            other => panic!("no case for {other}"),
        }
        env.wait_ready(&preview).await;
    }

    // A label another tool adds to a Service is theirs: it stays and nothing is written.
    let ns = env.ns_of("pr-t0");
    let services: Api<Service> = Api::namespaced(env.admin.clone(), &ns);
    let before = services.get("app").await.expect("service");
    let pp = PatchParams { field_manager: Some("mesh-injector".into()), ..Default::default() };
    let labelled = services
        .patch("app", &pp, &Patch::Merge(json!({"metadata": {"labels": {"mesh.example.com/enrolled": "yes"}}})))
        .await
        .expect("label");
    assert_ne!(labelled.resource_version(), before.resource_version());
    let restores_before = restores(&env);
    env.touch("pr-t0").await;
    env.settle("pr-t0").await;
    let svc = services.get("app").await.expect("service");
    assert_eq!(svc.labels().get("mesh.example.com/enrolled").map(String::as_str), Some("yes"));
    assert_eq!(svc.resource_version(), labelled.resource_version(), "nothing written");
    assert_eq!(restores(&env), restores_before);
}
