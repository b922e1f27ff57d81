//! Compare-then-write against the API server's real defaulting and server-side apply.

use std::collections::BTreeMap;

use anyhow::Context;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, ResourceExt};
use opkit::apply::{Guard, Outcome, WriteCounter, ensure};

use crate::cluster;

const FM: &str = "opkit-test";

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn config_map(data: &[(&str, &str)], labels_: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta { name: Some("owned".into()), labels: Some(labels(labels_)), ..Default::default() },
        data: Some(labels(data)),
        ..Default::default()
    }
}

#[tokio::test]
async fn create_then_nothing_then_restore_a_hand_edit_and_leave_foreign_fields() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let writes = WriteCounter::new();
    let desired = config_map(&[("mode", "preview"), ("ttl", "3600")], &[("app", "vesper")]);

    assert_eq!(writes.ensure(&api, &desired, FM).await?, Outcome::Created);
    let created = api.get("owned").await?;
    assert_eq!(created.data, desired.data);
    let managed = created.managed_fields();
    assert!(
        managed.iter().any(|m| m.manager.as_deref() == Some(FM) && m.operation.as_deref() == Some("Apply")),
        "{managed:?}"
    );

    // Re-ensuring an up-to-date object writes nothing: same resourceVersion, counted unchanged.
    for _ in 0..3 {
        assert_eq!(writes.ensure(&api, &desired, FM).await?, Outcome::Unchanged);
    }
    assert_eq!(api.get("owned").await?.resource_version(), created.resource_version());
    assert_eq!((writes.get(Outcome::Created), writes.get(Outcome::Updated), writes.get(Outcome::Unchanged)), (1, 0, 3));

    // A hand edit of an owned field (kubectl edit) is put back.
    let edit = serde_json::json!({"data": {"ttl": "60"}});
    api.patch(
        "owned",
        &PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() },
        &Patch::Merge(&edit),
    )
    .await?;
    let applied = writes.ensure_detailed(&api, &desired, FM).await?;
    assert_eq!(applied.outcome, Outcome::Restored);
    assert_eq!(applied.detail.as_deref(), Some(".data.ttl was changed"));
    assert_eq!(applied.changed_by.as_deref(), Some("kubectl-edit"));
    let restored = api.get("owned").await?;
    assert_eq!(restored.data.as_ref().and_then(|d| d.get("ttl")).map(String::as_str), Some("3600"));
    assert_eq!(writes.ensure(&api, &desired, FM).await?, Outcome::Unchanged);

    // A label another manager adds is not ours: left alone, nothing written.
    let theirs = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned", "labels": {"team": "platform"}}});
    api.patch("owned", &PatchParams::apply("someone-else"), &Patch::Apply(&theirs)).await?;
    let before = api.get("owned").await?;
    assert_eq!(writes.ensure(&api, &desired, FM).await?, Outcome::Unchanged);
    let after = api.get("owned").await?;
    assert_eq!(after.resource_version(), before.resource_version());
    assert_eq!(after.labels().get("team").map(String::as_str), Some("platform"));

    // A field we stop setting is removed (server-side apply drops what its manager no longer applies),
    // and the foreign label still stays.
    let smaller = config_map(&[("mode", "preview")], &[("app", "vesper")]);
    assert_eq!(writes.ensure(&api, &smaller, FM).await?, Outcome::Updated);
    let got = api.get("owned").await?;
    assert_eq!(got.data, smaller.data);
    assert_eq!(got.labels().get("team").map(String::as_str), Some("platform"));
    assert_eq!(writes.ensure(&api, &smaller, FM).await?, Outcome::Unchanged);
    assert_eq!(writes.writes(), 3);
    assert_eq!((writes.get(Outcome::Updated), writes.get(Outcome::Restored)), (1, 1));
    Ok(())
}

/// Fields someone else adds (that server-side apply alone would keep) are removed within one
/// ensure; labels of others stay, labels under the operator's prefix go; a restart (no memory of
/// earlier checks) tells the same by asking the server for a dry run.
#[tokio::test]
async fn fields_added_by_others_are_removed_and_server_defaults_are_not() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let services: Api<Service> = Api::default_namespaced(dc.client());
    let writes = WriteCounter::new();
    let svc = Service {
        metadata: ObjectMeta {
            name: Some("app".into()),
            labels: Some(labels(&[("example.dev/owner", "op"), ("app", "web")])),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(labels(&[("app", "web")])),
            ports: Some(vec![ServicePort { port: 80, protocol: Some("TCP".into()), ..Default::default() }]),
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(writes.ensure(&services, &svc, FM).await?, Outcome::Created);
    let created = services.get("app").await?;

    // Unchanged, and a fresh process (no verified objects) agrees after one dry run.
    assert_eq!(writes.ensure(&services, &svc, FM).await?, Outcome::Unchanged);
    assert_eq!(ensure(&services, &svc, FM).await?, Outcome::Unchanged, "server defaults are not differences");
    assert_eq!(services.get("app").await?.resource_version(), created.resource_version());

    let tamper = |patch: serde_json::Value, manager: &str| {
        let services = services.clone();
        let manager = manager.to_string();
        async move {
            services
                .patch(
                    "app",
                    &PatchParams { field_manager: Some(manager), ..Default::default() },
                    &Patch::Merge(&patch),
                )
                .await
        }
    };
    for (patch, added) in [
        // The server defaults externalTrafficPolicy for a Service with external IPs.
        (
            serde_json::json!({"spec": {"externalIPs": ["203.0.113.7"]}}),
            ".spec.externalIPs was added, .spec.externalTrafficPolicy was added",
        ),
        // ClientIP comes with a defaulted sessionAffinityConfig.
        (
            serde_json::json!({"spec": {"sessionAffinity": "ClientIP"}}),
            ".spec.sessionAffinity was changed, .spec.sessionAffinityConfig was added",
        ),
        (
            serde_json::json!({"metadata": {"labels": {"example.dev/exposed": "yes"}}}),
            ".metadata.labels.example.dev/exposed was added",
        ),
    ] {
        tamper(patch.clone(), "kubectl-edit").await?;
        let applied = writes.ensure_detailed(&services, &svc, FM).await?;
        assert_eq!(applied.outcome, Outcome::Restored, "{patch}");
        assert_eq!(applied.detail.as_deref(), Some(added));
        assert_eq!(applied.changed_by.as_deref(), Some("kubectl-edit"));
        assert!(applied.restore_note().is_some_and(|n| n.contains(added) && n.contains("default/app")), "{applied:?}");
        let live = services.get("app").await?;
        let spec = live.spec.clone().context("spec")?;
        assert_eq!(spec.external_ips, None);
        assert_eq!(spec.session_affinity.as_deref(), Some("None"));
        assert_eq!(spec.cluster_ip, created.spec.as_ref().and_then(|s| s.cluster_ip.clone()), "cluster IP kept");
        assert!(!live.labels().contains_key("example.dev/exposed"));
        assert_eq!(writes.ensure(&services, &svc, FM).await?, Outcome::Unchanged);
    }

    // After a restart too (nothing verified): one dry run shows the added field.
    tamper(serde_json::json!({"spec": {"externalIPs": ["203.0.113.8"]}}), "kubectl-edit").await?;
    let fresh = WriteCounter::new();
    assert_eq!(fresh.ensure(&services, &svc, FM).await?, Outcome::Restored);
    assert_eq!(services.get("app").await?.spec.and_then(|s| s.external_ips), None);

    // A label of another tool without the operator's prefix is theirs: it stays, nothing written.
    tamper(serde_json::json!({"metadata": {"labels": {"team": "platform"}}}), "someone-else").await?;
    let rv = services.get("app").await?.resource_version();
    assert_eq!(writes.ensure(&services, &svc, FM).await?, Outcome::Unchanged);
    assert_eq!(ensure(&services, &svc, FM).await?, Outcome::Unchanged);
    let live = services.get("app").await?;
    assert_eq!(live.resource_version(), rv);
    assert_eq!(live.labels().get("team").map(String::as_str), Some("platform"));
    Ok(())
}

fn deployment(image: &str) -> Deployment {
    let app = labels(&[("app", "web")]);
    Deployment {
        metadata: ObjectMeta { name: Some("web".into()), labels: Some(app.clone()), ..Default::default() },
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            selector: LabelSelector { match_labels: Some(app.clone()), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(app), ..Default::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "web".into(),
                        image: Some(image.into()),
                        // Server-side apply needs every key field of an associative list: (containerPort, protocol).
                        ports: Some(vec![ContainerPort {
                            container_port: 8080,
                            protocol: Some("TCP".into()),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

#[tokio::test]
async fn server_defaults_and_status_do_not_count_as_differences() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let deployments: Api<Deployment> = Api::default_namespaced(dc.client());
    let services: Api<Service> = Api::default_namespaced(dc.client());
    let writes = WriteCounter::new();

    assert_eq!(writes.ensure(&deployments, &deployment("nginx:1.27"), FM).await?, Outcome::Created);
    let live = deployments.get("web").await?;
    let spec = live.spec.as_ref().context("spec")?;
    assert!(spec.strategy.is_some() && spec.revision_history_limit.is_some(), "the server defaulted fields");
    let pod = spec.template.spec.as_ref().context("pod spec")?;
    assert!(pod.restart_policy.is_some() && pod.containers[0].termination_message_path.is_some(), "pod defaults");

    // The workload controllers write status meanwhile; the spec still matches.
    let generation = live.metadata.generation;
    for _ in 0..3 {
        assert_eq!(writes.ensure(&deployments, &deployment("nginx:1.27"), FM).await?, Outcome::Unchanged);
    }
    assert_eq!(deployments.get("web").await?.metadata.generation, generation);

    // A real change is written once.
    assert_eq!(writes.ensure(&deployments, &deployment("nginx:1.28"), FM).await?, Outcome::Updated);
    let live = deployments.get("web").await?;
    assert_eq!(live.metadata.generation, generation.map(|g| g + 1));
    assert_eq!(writes.ensure(&deployments, &deployment("nginx:1.28"), FM).await?, Outcome::Unchanged);

    // A Service: clusterIP, sessionAffinity and the port's targetPort come from the server.
    let svc = Service {
        metadata: ObjectMeta { name: Some("web".into()), ..Default::default() },
        spec: Some(ServiceSpec {
            selector: Some(labels(&[("app", "web")])),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(writes.ensure(&services, &svc, FM).await?, Outcome::Created);
    let live = services.get("web").await?;
    let live_spec = live.spec.as_ref().context("spec")?;
    assert!(live_spec.cluster_ip.is_some(), "clusterIP allocated");
    assert!(live_spec.ports.as_ref().is_some_and(|p| p[0].target_port.is_some()), "targetPort defaulted");
    let rv = live.resource_version();
    assert_eq!(writes.ensure(&services, &svc, FM).await?, Outcome::Unchanged);
    assert_eq!(services.get("web").await?.resource_version(), rv);
    assert_eq!(writes.writes(), 3);
    assert_eq!(writes.get(Outcome::Unchanged), 5);
    Ok(())
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let nameless = ConfigMap::default();
    let err = ensure(&api, &nameless, FM).await.expect_err("no name");
    assert!(err.to_string().contains("metadata.name"), "{err}");
    let err = ensure(&api, &config_map(&[], &[]), "").await.expect_err("no field manager");
    assert!(err.to_string().contains("field manager"), "{err}");
    Ok(())
}

#[tokio::test]
async fn a_guarded_write_leaves_a_foreign_object_alone_and_recreates_on_an_immutable_change() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let writes = WriteCounter::new();
    // Someone else's ConfigMap of the name we want: not written over, and the error says whose.
    api.create(&Default::default(), &config_map(&[("theirs", "yes")], &[("owner", "someone-else")])).await?;
    let is_ours = |m: &ObjectMeta| m.labels.as_ref().and_then(|l| l.get("owner")).map(String::as_str) == Some("us");
    let never = |_: &kube::api::DynamicObject| false;
    let guard = Guard { is_ours: &is_ours, recreate: &never };
    let desired = config_map(&[("mode", "preview")], &[("owner", "us")]);
    let err = writes.ensure_guarded(&api, &desired, FM, &guard).await.expect_err("a foreign object is refused");
    assert!(matches!(&err, opkit::Error::NotOwned { object } if object == "ConfigMap default/owned"), "{err}");
    assert_eq!(err.metric_label(), "not_owned");
    assert_eq!(api.get("owned").await?.data, Some(labels(&[("theirs", "yes")])), "left untouched");
    assert_eq!(writes.writes(), 0);

    // Ours: compared and written as ensure does.
    api.delete("owned", &Default::default()).await?;
    assert_eq!(writes.ensure_guarded(&api, &desired, FM, &guard).await?.outcome, Outcome::Created);
    assert_eq!(writes.ensure_guarded(&api, &desired, FM, &guard).await?.outcome, Outcome::Unchanged);
    let first_uid = api.get("owned").await?.uid();

    // A field the guard says cannot change: the live object is deleted and created again.
    let desired2 = config_map(&[("mode", "review")], &[("owner", "us")]);
    let immutable =
        |live: &kube::api::DynamicObject| live.data.pointer("/data/mode") != Some(&serde_json::json!("review"));
    let recreating = Guard { is_ours: &is_ours, recreate: &immutable };
    let applied = writes.ensure_guarded(&api, &desired2, FM, &recreating).await?;
    assert_eq!((applied.outcome, applied.recreated), (Outcome::Created, true));
    let now = api.get("owned").await?;
    assert_ne!(now.uid(), first_uid, "a new object");
    assert_eq!(now.data, desired2.data);
    assert_eq!((writes.get(Outcome::Deleted), writes.get(Outcome::Created)), (1, 2));
    // Once it matches, nothing more happens.
    assert_eq!(writes.ensure_guarded(&api, &desired2, FM, &recreating).await?.outcome, Outcome::Unchanged);
    Ok(())
}

#[tokio::test]
async fn a_new_object_is_created_without_a_read_and_never_over_an_object_that_exists() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let writes = WriteCounter::new();
    let is_ours = |m: &ObjectMeta| m.labels.as_ref().and_then(|l| l.get("owner")).map(String::as_str) == Some("us");
    let guard = Guard { is_ours: &is_ours, recreate: &|_| false };
    let desired = config_map(&[("mode", "preview")], &[("owner", "us")]);
    // Absent: created at once, and what is written then holds.
    let applied = writes.ensure_cached(&api, &desired, FM, &guard, opkit::apply::Hint::New).await?;
    assert_eq!(applied.outcome, Outcome::Created);
    assert_eq!(api.get("owned").await?.data, desired.data);
    assert_eq!(writes.ensure_guarded(&api, &desired, FM, &guard).await?.outcome, Outcome::Unchanged);
    // A wrong "new" (someone else's object is there): the create fails, the object is read on
    // the next attempt, and the guard leaves it alone.
    api.delete("owned", &Default::default()).await?;
    api.create(&Default::default(), &config_map(&[("theirs", "yes")], &[("owner", "someone-else")])).await?;
    let err = writes.ensure_cached(&api, &desired, FM, &guard, opkit::apply::Hint::New).await.expect_err("foreign");
    assert!(matches!(&err, opkit::Error::NotOwned { .. }), "{err}");
    assert_eq!(api.get("owned").await?.data, Some(labels(&[("theirs", "yes")])), "left untouched");
    Ok(())
}
