//! Events published through events.k8s.io/v1, read back through core/v1 as `kubectl describe` does.

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Resource};
use opkit::events::{EventPublisher, EventType};

use crate::cluster;

#[tokio::test]
async fn events_are_listed_by_involved_object() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let mut made = vec![];
    for name in ["subject", "bystander"] {
        let cm =
            ConfigMap { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() };
        made.push(cms.create(&PostParams::default(), &cm).await?);
    }
    let (subject, bystander) = (made[0].object_ref(&()), made[1].object_ref(&()));

    let events = EventPublisher::new(dc.client(), "vesper.eventide.dev/operator", Some("vesper-operator-0".into()));
    assert_eq!(events.controller(), "vesper.eventide.dev/operator");
    events.normal(&subject, "Provisioned", "Reconcile", "namespace preview-42 is ready").await?;
    events.warning(&subject, "QuotaExceeded", "Reconcile", &"x".repeat(5000)).await?;
    events.publish(&bystander, EventType::Normal, "Ignored", "Reconcile", None).await?;

    let core: Api<Event> = Api::default_namespaced(dc.client());
    let selector = format!(
        "involvedObject.kind=ConfigMap,involvedObject.name=subject,involvedObject.uid={}",
        subject.uid.clone().unwrap_or_default()
    );
    let mut got = core.list(&ListParams::default().fields(&selector)).await?.items;
    got.sort_by(|a, b| a.reason.cmp(&b.reason));
    assert_eq!(got.len(), 2, "{got:#?}");
    let normal = &got[0];
    assert_eq!(normal.reason.as_deref(), Some("Provisioned"));
    assert_eq!(normal.type_.as_deref(), Some("Normal"));
    assert_eq!(normal.message.as_deref(), Some("namespace preview-42 is ready"));
    assert_eq!(normal.reporting_component.as_deref(), Some("vesper.eventide.dev/operator"));
    assert_eq!(normal.reporting_instance.as_deref(), Some("vesper-operator-0"));
    assert_eq!(normal.action.as_deref(), Some("Reconcile"));
    assert_eq!(normal.involved_object.name.as_deref(), Some("subject"));
    let warning = &got[1];
    assert_eq!((warning.reason.as_deref(), warning.type_.as_deref()), (Some("QuotaExceeded"), Some("Warning")));
    assert!(
        warning.message.as_ref().is_some_and(|m| m.len() <= 1024 && m.ends_with("...")),
        "long notes are shortened"
    );

    // Repeats are counted in one Event, not new ones.
    events.normal(&subject, "Provisioned", "Reconcile", "namespace preview-42 is ready").await?;
    let again = core.list(&ListParams::default().fields(&selector)).await?.items;
    assert_eq!(again.len(), 2);

    let err = events.normal(&subject, "", "Reconcile", "x").await.expect_err("empty reason");
    assert!(err.to_string().contains("event reason"), "{err}");
    Ok(())
}

#[tokio::test]
async fn repeats_count_in_one_series_and_what_is_kept_goes_with_the_object() -> anyhow::Result<()> {
    use k8s_openapi::api::events::v1::Event as NewEvent;
    let dc = cluster().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let cm =
        ConfigMap { metadata: ObjectMeta { name: Some("repeat".into()), ..Default::default() }, ..Default::default() };
    let subject = cms.create(&PostParams::default(), &cm).await?.object_ref(&());
    let uid = subject.uid.clone().unwrap_or_default();
    let events = EventPublisher::new(dc.client(), "vesper.eventide.dev/operator", None);
    for _ in 0..3 {
        events.warning(&subject, "Restored", "Reconcile", "spec.replicas was changed by hand").await?;
    }
    let api: Api<NewEvent> = Api::default_namespaced(dc.client());
    let about = |e: &NewEvent| e.regarding.as_ref().and_then(|r| r.uid.clone()).as_deref() == Some(uid.as_str());
    let got: Vec<NewEvent> = api.list(&ListParams::default()).await?.items.into_iter().filter(about).collect();
    assert_eq!(got.len(), 1, "three repeats are one Event: {got:#?}");
    let series = got[0].series.as_ref().expect("a series after the first repeat");
    assert_eq!(series.count, 3);
    assert_eq!(got[0].reporting_instance.as_deref(), Some("vesper.eventide.dev/operator"));
    assert_eq!(events.tracked_series(), 1);

    // The Event expired in the cluster (deleted): the next repeat starts a new Event.
    api.delete(got[0].metadata.name.as_deref().unwrap_or_default(), &Default::default()).await?;
    events.warning(&subject, "Restored", "Reconcile", "again").await?;
    let got: Vec<NewEvent> = api.list(&ListParams::default()).await?.items.into_iter().filter(about).collect();
    assert_eq!(got.len(), 1);
    assert!(got[0].series.is_none(), "a fresh Event: {got:#?}");

    // The object is gone: nothing is kept about it.
    events.forget(&uid);
    assert_eq!(events.tracked_series(), 0);
    Ok(())
}
