//! The checkpoint: what one process verified spares the next one its reads and dry runs, and
//! nothing changed while no process ran is taken for verified.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use opkit::apply::{Guard, Hint, Outcome, WriteCounter};
use opkit::checkpoint::Checkpoint;
use opkit::client::RequestCounter;

use crate::cluster;

const FM: &str = "opkit-test";
const NS: &str = "operator-system";

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        data: Some(BTreeMap::from([("value".to_string(), value.to_string())])),
        ..Default::default()
    }
}

/// Every request the counted client sent.
fn sent(c: &RequestCounter) -> u64 {
    opkit::client::VERBS.iter().map(|v| c.total(v)).sum()
}

#[tokio::test]
async fn a_new_process_reads_the_checkpoint_and_verifies_only_what_changed_meanwhile() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let admin = dc.client();
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &Namespace { metadata: ObjectMeta { name: Some(NS.into()), ..Default::default() }, ..Default::default() },
        )
        .await?;
    let requests = RequestCounter::new();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(dc.kubeconfig_yaml())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = opkit::client::counted(config, &requests)?;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let guard = Guard::ANY;
    let (a, b) = (config_map("a", "1"), config_map("b", "2"));

    // The first process makes both objects and verifies them, then stops and writes its
    // checkpoint, spread over two ConfigMaps here.
    let first = WriteCounter::new();
    for d in [&a, &b] {
        assert_eq!(first.ensure_cached(&api, d, FM, &guard, Hint::Unknown).await?.outcome, Outcome::Created);
    }
    let checkpoint = Checkpoint::new(client.clone(), NS, "test-verified", FM).shard_bytes(100);
    assert_eq!(checkpoint.save(first.verified()).await?, 2);
    let stored = Api::<ConfigMap>::namespaced(admin.clone(), NS);
    assert!(stored.get_opt("test-verified-1").await?.is_some(), "the second ConfigMap of the checkpoint");

    // While no process runs, someone edits b.
    let edit = serde_json::json!({"data": {"value": "edited"}});
    Api::<ConfigMap>::default_namespaced(admin.clone())
        .patch("b", &PatchParams::default(), &Patch::Merge(&edit))
        .await?;

    // The next process takes the checkpoint over.
    let second = WriteCounter::new();
    let loaded = checkpoint.load(second.verified()).await?;
    assert_eq!((loaded.stamps, loaded.shards, loaded.skipped), (2, 2, 0));
    let cached = |name: &'static str| {
        let admin = admin.clone();
        async move { Api::<ConfigMap>::default_namespaced(admin).get(name).await }
    };
    // a is as verified: answered from the cache's metadata, no request at all.
    let meta_a = cached("a").await?.metadata;
    let before = sent(&requests);
    let applied = second.ensure_cached(&api, &a, FM, &guard, Hint::Cached(&meta_a)).await?;
    assert_eq!(applied.outcome, Outcome::Unchanged);
    assert_eq!(sent(&requests) - before, 0, "an object unchanged since the checkpoint costs no request");
    // b changed after it was stamped: read, dry-run and restored, as the operator's own change
    // would have been (the checkpoint says the desired object did not change).
    let meta_b = cached("b").await?.metadata;
    let applied = second.ensure_cached(&api, &b, FM, &guard, Hint::Cached(&meta_b)).await?;
    assert_eq!(applied.outcome, Outcome::Restored, "{:?}", applied.detail);
    assert_eq!(cached("b").await?.data, b.data);

    // A desired object that changed since is not covered by its stamp either.
    let a2 = config_map("a", "changed");
    let third = WriteCounter::new();
    checkpoint.load(third.verified()).await?;
    assert_eq!(third.ensure_cached(&api, &a2, FM, &guard, Hint::Cached(&meta_a)).await?.outcome, Outcome::Updated);

    // Without a checkpoint, the same unchanged object costs a read and a dry run.
    let fresh = WriteCounter::new();
    let meta_a = cached("a").await?.metadata;
    let (gets, updates) = (requests.total("get"), requests.total("update"));
    assert_eq!(fresh.ensure_cached(&api, &a2, FM, &guard, Hint::Cached(&meta_a)).await?.outcome, Outcome::Unchanged);
    assert_eq!((requests.total("get") - gets, requests.total("update") - updates), (1, 1));

    // A smaller checkpoint leaves no part of the larger one behind.
    let one = Checkpoint::new(client.clone(), NS, "test-verified", FM);
    assert_eq!(one.save(third.verified()).await?, 2);
    assert!(stored.get_opt("test-verified-1").await?.is_none(), "the second ConfigMap is gone");
    assert_eq!(one.load(WriteCounter::new().verified()).await?.shards, 1);
    Ok(())
}

#[tokio::test]
async fn a_checkpoint_that_is_missing_damaged_or_of_another_format_costs_only_time() -> anyhow::Result<()> {
    let dc = cluster().await?;
    let client = dc.client();
    let checkpoint = Checkpoint::new(client.clone(), "default", "test-verified", FM);
    // None yet: nothing taken, no error.
    assert_eq!(checkpoint.load(WriteCounter::new().verified()).await?, Default::default());

    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let writes = WriteCounter::new();
    writes.ensure_cached(&api, &config_map("a", "1"), FM, &Guard::ANY, Hint::Unknown).await?;
    checkpoint.save(writes.verified()).await?;
    let stored = api.get("test-verified").await?;
    let line = stored.data.as_ref().and_then(|d| d.get("stamps")).cloned().unwrap_or_default();
    assert_eq!(line.lines().count(), 1, "{line}");

    // Garbage beside the good line is skipped and counted.
    let damaged = serde_json::json!({"data": {"stamps": format!("{line}not a stamp\nConfigMap default a\n")}});
    api.patch("test-verified", &PatchParams::default(), &Patch::Merge(&damaged)).await?;
    let loaded = checkpoint.load(WriteCounter::new().verified()).await?;
    assert_eq!((loaded.stamps, loaded.skipped), (1, 2));

    // Another format: ignored as a whole.
    let other = serde_json::json!({"data": {"format": "2"}});
    api.patch("test-verified", &PatchParams::default(), &Patch::Merge(&other)).await?;
    assert_eq!(checkpoint.load(WriteCounter::new().verified()).await?.stamps, 0);

    // A namespace that does not exist: the write fails with an error naming the ConfigMap.
    let nowhere = Checkpoint::new(client, "no-such-namespace", "test-verified", FM);
    let err = nowhere.save(writes.verified()).await.expect_err("no namespace");
    assert!(format!("{err:#}").contains("no-such-namespace/test-verified"), "{err:#}");
    Ok(())
}
