//! Build claims reach the mite (docs/varroa/operator.md, "Build claims"): the installation's
//! `--build-records` turns them on (`VARROA_CLAIMS`), and each controller's resolved
//! `claims.whenLedgerDown` (defaults < class < Controller) is its mite's
//! `VARROA_CLAIMS_WHEN_LEDGER_DOWN`. Checked on the StatefulSet the operator writes to
//! devcluster, and a change of the setting rolls the pod.

mod support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;
use std::time::Duration;
use support::*;
use varroa_api::ControllerPhase;
use varroa_api::lifecycle::{ANNOTATION_RESTART_DIGEST, CONTAINER_MITE};
use varroa_link::claims::{ENV_CLAIMS, ENV_WHEN_LEDGER_DOWN};
use varroa_operator::Config;

/// The mite's `VARROA_CLAIMS` and `VARROA_CLAIMS_WHEN_LEDGER_DOWN`, and the pod template's
/// restart digest.
fn claims_env(sts: &StatefulSet) -> (Option<String>, Option<String>, Option<String>) {
    let template = &sts.spec.as_ref().expect("a spec").template;
    let pod = template.spec.as_ref().expect("a pod spec");
    let mite = pod.containers.iter().find(|c| c.name == CONTAINER_MITE).expect("the mite container");
    let value = |k: &str| mite.env.iter().flatten().find(|e| e.name == k).and_then(|e| e.value.clone());
    let digest =
        template.metadata.as_ref().and_then(|m| m.annotations.as_ref()).and_then(|a| a.get(ANNOTATION_RESTART_DIGEST));
    (value(ENV_CLAIMS), value(ENV_WHEN_LEDGER_DOWN), digest.cloned())
}

fn pair(on: &str, down: &str) -> (Option<String>, Option<String>) {
    (Some(on.to_string()), Some(down.to_string()))
}

/// Waits until controller `name`'s StatefulSet satisfies `f`.
async fn wait_sts(env: &Env, name: &str, what: &str, f: impl Fn(&StatefulSet) -> bool) -> StatefulSet {
    let api: Api<StatefulSet> = Api::namespaced(env.admin.clone(), TEAM);
    let r = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(s) = api.get_opt(name).await.expect("get the StatefulSet")
                && f(&s)
            {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    match r {
        Ok(s) => s,
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten().map(|s| claims_env(&s));
            panic!("timed out waiting for StatefulSet {TEAM}/{name}: {what}; its claims env is {now:?}")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_build_records_the_mite_gets_claims_off_and_fail_closed() {
    let env = Env::start(config()).await;
    env.create("ci", json!({})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    let sts = env.obj::<StatefulSet>("ci").await;
    let (on, down, _) = claims_env(&sts);
    assert_eq!((on, down), pair("off", "failClosed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_build_records_the_most_specific_failure_mode_reaches_the_mite_and_a_change_rolls_the_pod() {
    let env = Env::start(Config { build_records: true, ..config() }).await;
    env.apply(
        "apiVersion: varroa.dev/v1alpha1\nkind: ControllerClass\nmetadata: {name: open}\nspec: {claims: {whenLedgerDown: failOpen}}\n",
    )
    .await;
    env.create("plain", json!({})).await;
    env.create("classed", json!({"className": "open"})).await;
    env.create("closed", json!({"className": "open", "claims": {"whenLedgerDown": "failClosed"}})).await;
    for n in ["plain", "classed", "closed"] {
        env.wait_phase(n, ControllerPhase::Running).await;
    }
    for (name, want) in
        [("plain", pair("on", "failClosed")), ("classed", pair("on", "failOpen")), ("closed", pair("on", "failClosed"))]
    {
        let (on, down, _) = claims_env(&env.obj::<StatefulSet>(name).await);
        assert_eq!((on, down), want, "controller {name}");
    }

    // The controller's own setting goes: the class's failOpen reaches the mite, the pod
    // template's restart digest changes and the pod rolls.
    let before = env.obj::<StatefulSet>("closed").await;
    let (_, _, digest) = claims_env(&before);
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), TEAM);
    let pod = pods.get("closed-0").await.expect("the pod").uid().expect("a uid");
    env.patch_spec("closed", json!({"claims": null})).await;
    let after =
        wait_sts(&env, "closed", "failOpen from the class", |s| claims_env(s).1.as_deref() == Some("failOpen")).await;
    assert_ne!(claims_env(&after).2, digest, "a restart-class change");
    let r = tokio::time::timeout(WAIT, async {
        loop {
            if pods.get_opt("closed-0").await.expect("get").is_some_and(|p| p.uid().as_deref() != Some(pod.as_str())) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "the pod rolled");
    env.wait_phase("closed", ControllerPhase::Running).await;
    // The others are untouched.
    let (on, down, _) = claims_env(&env.obj::<StatefulSet>("classed").await);
    assert_eq!((on, down), pair("on", "failOpen"));
}
