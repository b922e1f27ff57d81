//! The API machinery through kube's client: CRUD, lists, watches, conflicts, finalizers.

use devcluster::DevCluster;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use std::collections::BTreeMap;

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_new_cluster_has_what_every_cluster_has() {
    let dc = DevCluster::start().await.unwrap();
    let ns: Api<Namespace> = Api::all(dc.client());
    let names: Vec<String> =
        ns.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|n| n.metadata.name).collect();
    for want in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(names.contains(&want.to_string()), "{want} missing from {names:?}");
    }
    let cms: Api<ConfigMap> = Api::namespaced(dc.client(), "kube-system");
    let root = cms.get("kube-root-ca.crt").await.unwrap();
    assert!(root.data.unwrap()["ca.crt"].starts_with("-----BEGIN CERTIFICATE-----"));
    let sas: Api<ServiceAccount> = Api::namespaced(dc.client(), "default");
    sas.get("default").await.unwrap();
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(dc.client());
    for r in ["cluster-admin", "admin", "edit", "view"] {
        roles.get(r).await.unwrap();
    }
}

#[tokio::test]
async fn create_get_update_delete_with_real_metadata() {
    let dc = DevCluster::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let created = api.create(&PostParams::default(), &cm("one", &[("a", "1")])).await.unwrap();
    let md = &created.metadata;
    assert_eq!(md.namespace.as_deref(), Some("default"));
    assert_eq!(md.uid.as_ref().map(|u| u.len()), Some(36));
    assert!(md.creation_timestamp.is_some());
    let rv1: u64 = md.resource_version.as_deref().unwrap().parse().unwrap();

    // Same name again: 409 AlreadyExists.
    let err = api.create(&PostParams::default(), &cm("one", &[])).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "AlreadyExists");
            assert_eq!(s.message, "configmaps \"one\" already exists");
        }
        other => panic!("{other:?}"),
    }

    let mut got = api.get("one").await.unwrap();
    got.data.as_mut().unwrap().insert("b".into(), "2".into());
    let updated = api.replace("one", &PostParams::default(), &got).await.unwrap();
    let rv2: u64 = updated.metadata.resource_version.as_deref().unwrap().parse().unwrap();
    assert!(rv2 > rv1);
    assert_eq!(updated.metadata.uid, created.metadata.uid);

    // A replace from the stale copy conflicts.
    let err = api.replace("one", &PostParams::default(), &got).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "Conflict");
            assert_eq!(
                s.message,
                "Operation cannot be fulfilled on configmaps \"one\": the object has been modified; please apply your changes to the latest version and try again"
            );
        }
        other => panic!("{other:?}"),
    }

    // A no-op update writes nothing: the resourceVersion stays.
    let same = api.replace("one", &PostParams::default(), &updated).await.unwrap();
    assert_eq!(same.metadata.resource_version, updated.metadata.resource_version);

    api.delete("one", &DeleteParams::default()).await.unwrap();
    let err = api.get("one").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404 && s.message == "configmaps \"one\" not found"));
}

#[tokio::test]
async fn generate_name_and_dry_run() {
    let dc = DevCluster::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let mut c = cm("", &[]);
    c.metadata.name = None;
    c.metadata.generate_name = Some("gen-".into());
    let made = api.create(&PostParams::default(), &c).await.unwrap();
    let name = made.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let dry = api.create(&PostParams { dry_run: true, ..Default::default() }, &cm("dry", &[])).await.unwrap();
    assert_eq!(dry.metadata.name.as_deref(), Some("dry"));
    assert!(api.get_opt("dry").await.unwrap().is_none());
}

#[tokio::test]
async fn missing_namespace_is_not_found() {
    let dc = DevCluster::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(dc.client(), "nope");
    let err = api.create(&PostParams::default(), &cm("x", &[])).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404 && s.message == "namespaces \"nope\" not found"));
}

#[tokio::test]
async fn list_paging_and_label_selectors() {
    let dc = DevCluster::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    for i in 0..7 {
        let mut c = cm(&format!("cm-{i}"), &[]);
        c.metadata.labels = Some([("parity".to_string(), if i % 2 == 0 { "even" } else { "odd" }.to_string())].into());
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let mut names = vec![];
    let mut lp = ListParams::default().labels("parity").limit(3);
    loop {
        let page = api.list(&lp).await.unwrap();
        assert!(page.items.len() <= 3);
        names.extend(page.items.into_iter().filter_map(|c| c.metadata.name));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(names, (0..7).map(|i| format!("cm-{i}")).collect::<Vec<_>>());
    let even = api.list(&ListParams::default().labels("parity=even")).await.unwrap();
    assert_eq!(even.items.len(), 4);
    // `!=` also selects objects without the label (here kube-root-ca.crt), as upstream.
    let odd = api.list(&ListParams::default().labels("parity!=even")).await.unwrap();
    assert_eq!(odd.items.len(), 4);
    let by_name = api.list(&ListParams::default().fields("metadata.name=cm-3")).await.unwrap();
    assert_eq!(by_name.items.len(), 1);
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version_and_replays_in_order() {
    let dc = DevCluster::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let first = api.create(&PostParams::default(), &cm("w", &[("v", "0")])).await.unwrap();
    let from = first.metadata.resource_version.clone().unwrap();
    for i in 1..=3 {
        let p = Patch::Merge(json!({"data": {"v": i.to_string()}}));
        api.patch("w", &PatchParams::default(), &p).await.unwrap();
    }
    api.delete("w", &DeleteParams::default()).await.unwrap();
    let mut stream = api.watch(&WatchParams::default().timeout(5), &from).await.unwrap().boxed();
    let mut seen = vec![];
    while let Some(ev) = stream.try_next().await.unwrap() {
        match ev {
            WatchEvent::Modified(c) => seen.push(format!("M{}", c.data.unwrap()["v"])),
            WatchEvent::Deleted(_) => {
                seen.push("D".into());
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, vec!["M1", "M2", "M3", "D"]);
}

#[tokio::test]
async fn watch_from_a_compacted_version_is_gone() {
    let dc = DevCluster::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let c = api.create(&PostParams::default(), &cm("g", &[])).await.unwrap();
    api.patch("g", &PatchParams::default(), &Patch::Merge(json!({"data": {"x": "y"}}))).await.unwrap();
    dc.cluster().store.compact();
    let rv = c.metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default().timeout(5), &rv).await.unwrap().boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
            assert!(e.message.starts_with("too old resource version"), "{}", e.message);
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let dc = DevCluster::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let mut c = cm("fin", &[]);
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &c).await.unwrap();
    let res = api.delete("fin", &DeleteParams::default()).await.unwrap();
    let pending = res.left().expect("the object is returned while it waits");
    assert!(pending.metadata.deletion_timestamp.is_some());
    // Still there; no new finalizer may be added.
    let err = api
        .patch(
            "fin",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}})),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message.contains("no new finalizers can be added if the object is being deleted"),
                "{}",
                s.message
            );
        }
        other => panic!("{other:?}"),
    }
    api.patch("fin", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    assert!(api.get_opt("fin").await.unwrap().is_none());
}

#[tokio::test]
async fn kube_runtime_watcher_with_streaming_lists() {
    use kube::runtime::watcher;
    let dc = DevCluster::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    api.create(&PostParams::default(), &cm("before", &[])).await.unwrap();
    let cfg = watcher::Config::default().streaming_lists();
    let mut s = watcher(api.clone(), cfg).boxed();
    let mut init_done = false;
    let mut seen_before = false;
    while let Some(ev) = s.try_next().await.unwrap() {
        match ev {
            watcher::Event::InitApply(c) if c.metadata.name.as_deref() == Some("before") => seen_before = true,
            watcher::Event::InitDone => {
                init_done = true;
                api.create(&PostParams::default(), &cm("after", &[])).await.unwrap();
            }
            watcher::Event::Apply(c) if c.metadata.name.as_deref() == Some("after") => break,
            _ => {}
        }
    }
    assert!(init_done && seen_before);
}
