//! End to end: the operator (its library entry point, as the `vesper-operator` service account
//! bound to exactly deploy/vesper/operator-rbac.yaml) against devcluster, checked the way a user checks a
//! preview: its status, its events, and every object made for it.

mod support;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, LimitRange, Namespace, Pod, ResourceQuota, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use support::*;
use vesper_api::{FINALIZER, Phase, PreviewEnvironment};

const IMAGE: &str = "registry.example.com/app:pr-1";

fn labels(o: &impl Resource) -> BTreeMap<String, String> {
    o.meta().labels.clone().unwrap_or_default()
}

fn to_json(o: &impl serde::Serialize) -> Value {
    serde_json::to_value(o).expect("serializable")
}

fn expires_at(pe: &PreviewEnvironment) -> Timestamp {
    pe.status.as_ref().and_then(|s| s.expires_at.as_ref()).expect("status.expiresAt").0
}

fn created(pe: &PreviewEnvironment) -> Timestamp {
    pe.metadata.creation_timestamp.as_ref().expect("creationTimestamp").0
}

fn hours(h: i64) -> SignedDuration {
    SignedDuration::from_hours(h)
}

/// The `except` list of the NetworkPolicy's egress rule to the world (0.0.0.0/0), as a set.
fn denied_v4(np: &NetworkPolicy) -> BTreeSet<String> {
    let egress = np.spec.as_ref().and_then(|s| s.egress.clone()).unwrap_or_default();
    egress
        .iter()
        .flat_map(|r| r.to.clone().unwrap_or_default())
        .filter_map(|p| p.ip_block)
        .filter(|b| b.cidr == "0.0.0.0/0")
        .flat_map(|b| b.except.unwrap_or_default())
        .collect()
}

/// The `except` list of the egress rule to the world (0.0.0.0/0), as the operator should write
/// it, read as a user would: the built-in private, link-local and metadata ranges, every node
/// address, the API server's endpoint addresses (`default/kubernetes`), the nodes' pod ranges;
/// an entry inside another one left out (docs/vesper/security.md).
async fn cluster_addresses(env: &Env) -> BTreeSet<String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.admin.clone());
    let mut out: BTreeSet<vesper_operator::cidr::Cidr> = vesper_operator::networkpolicy::PRIVATE_RANGES
        .iter()
        .chain(vesper_operator::networkpolicy::METADATA.iter())
        .map(|c| c.parse().expect("a cidr"))
        .collect();
    for n in nodes.list(&ListParams::default()).await.expect("list nodes").items {
        for c in n.spec.and_then(|s| s.pod_cidrs).unwrap_or_default() {
            out.insert(c.parse().expect("a pod range"));
        }
        for a in n.status.and_then(|s| s.addresses).unwrap_or_default() {
            if a.type_ == "InternalIP" || a.type_ == "ExternalIP" {
                out.insert(format!("{}/32", a.address).parse().expect("an address"));
            }
        }
    }
    let eps: Api<Endpoints> = Api::namespaced(env.admin.clone(), "default");
    let ep = eps.get("kubernetes").await.expect("default/kubernetes endpoints");
    for s in ep.subsets.unwrap_or_default() {
        for a in s.addresses.unwrap_or_default() {
            out.insert(format!("{}/32", a.ip).parse().expect("an address"));
        }
    }
    out.iter()
        .filter(|c| !c.is_ipv6() && !out.iter().any(|o| o != *c && o.contains(c)))
        .map(|c| c.to_string())
        .collect()
}

// 1 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_to_ready_with_every_object_checked() {
    let env = Env::start(config()).await;
    let spec = json!({
        "image": IMAGE, "ttl": "2h", "replicas": 2, "port": 9090,
        "env": [{"name": "GREETING", "value": "hello"}, {"name": "MODE", "value": "preview"}],
        "args": ["--serve", "--verbose"],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "250m", "memory": "256Mi"}},
        "readinessPath": "/healthz",
    });
    let made = env.create("pr-1", spec).await;
    let uid = made.uid().expect("uid");
    let pe = env.wait_ready("pr-1").await;
    let st = pe.status.clone().expect("status");

    // The status a user reads.
    let ns = env.ns_of("pr-1");
    assert_eq!(ns, format!("vesper-team-a-pr-1-{}", hash8("team-a", "pr-1")));
    assert!(ns.len() <= 63);
    assert_eq!(st.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(st.phase, Some(Phase::Ready));
    assert_eq!(st.observed_generation, pe.metadata.generation);
    assert_eq!(cond(&pe, "Ready"), ("True".into(), "Available".into()));
    assert_eq!(condition(&pe, "Ready").and_then(|c| c.observed_generation), pe.metadata.generation);
    assert_eq!(condition(&pe, "Ready").map(|c| c.message.as_str()), Some("2 of 2 pods ready"));
    assert_eq!(cond(&pe, "Available"), ("True".into(), "MinimumReplicasAvailable".into()));
    assert_eq!(cond(&pe, "Expired"), ("False".into(), "NotExpired".into()));
    assert_eq!(cond(&pe, "ExpiringSoon"), ("False".into(), "NotExpiringSoon".into()));
    let host = format!("pr-1-team-a-{}.preview.example.com", hash8("team-a", "pr-1"));
    assert_eq!(st.url.as_deref(), Some(format!("https://{host}").as_str()));
    assert_eq!(expires_at(&pe), created(&pe) + hours(2));
    assert_eq!(st.ready_replicas, Some(2));
    let resolved = st.resolved_image.clone().expect("status.resolvedImage once Ready");
    let digest =
        resolved.strip_prefix("registry.example.com/app@sha256:").unwrap_or_else(|| panic!("a digest: {resolved}"));
    assert!(digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()), "{resolved}");
    assert_eq!(pe.finalizers(), [FINALIZER.to_string()]);

    // The namespace: ownership proof and Pod Security restricted.
    let namespaces: Api<Namespace> = Api::all(env.admin.clone());
    let n = namespaces.get(&ns).await.expect("the preview namespace");
    let l = labels(&n);
    assert_eq!(l.get("vesper.eventide.dev/preview-uid"), Some(&uid));
    assert_eq!(l.get("app.kubernetes.io/managed-by").map(String::as_str), Some("vesper"));
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(
            l.get(&format!("pod-security.kubernetes.io/{mode}")).map(String::as_str),
            Some("restricted"),
            "{mode}"
        );
    }

    // Everything in it carries the preview's UID.
    let owned = |o: &dyn Fn() -> BTreeMap<String, String>| {
        let l = o();
        assert_eq!(l.get("vesper.eventide.dev/preview-uid"), Some(&uid));
        assert_eq!(l.get("app.kubernetes.io/managed-by").map(String::as_str), Some("vesper"));
    };

    // The quota, sized from the spec: the per-pod values times the pods a rollout holds at once
    // (2 replicas, 1 surge pod, 2 old pods still terminating: 2 x 2 + 1 = 5; see quota.rs).
    let q: ResourceQuota = env.obj(&ns, "preview").await;
    owned(&|| labels(&q));
    let hard: BTreeMap<String, String> =
        q.spec.and_then(|s| s.hard).unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
    let want: BTreeMap<String, String> = [
        ("pods", "5"),
        ("requests.cpu", "500m"),
        ("limits.cpu", "1250m"),
        ("requests.memory", "320Mi"),
        ("limits.memory", "1280Mi"),
        ("requests.ephemeral-storage", "320Mi"),
        ("limits.ephemeral-storage", "5Gi"),
        ("services", "2"),
        ("services.nodeports", "0"),
        ("services.loadbalancers", "0"),
        ("persistentvolumeclaims", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(hard, want);

    // The LimitRange: the operator's defaults and maximum per container.
    let lr: LimitRange = env.obj(&ns, "preview").await;
    owned(&|| labels(&lr));
    assert_eq!(
        to_json(&lr.spec),
        json!({"limits": [{"type": "Container",
            "default": {"cpu": "500m", "ephemeral-storage": "1Gi", "memory": "512Mi"},
            "defaultRequest": {"cpu": "100m", "ephemeral-storage": "64Mi", "memory": "128Mi"},
            "max": {"cpu": "2", "ephemeral-storage": "2Gi", "memory": "2Gi"}}]})
    );

    // The NetworkPolicy: ingress from the preview and the ingress controller only; egress
    // anywhere but the cluster itself and the metadata address; DNS to kube-dns.
    let np: NetworkPolicy = env.obj(&ns, "preview-isolation").await;
    owned(&|| labels(&np));
    let nps = to_json(&np.spec);
    assert_eq!(nps["podSelector"], json!({}));
    assert_eq!(nps["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(
        nps["ingress"],
        json!([
            {"from": [{"podSelector": {}}]},
            {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": INGRESS_NS}}}]},
        ])
    );
    let egress = nps["egress"].as_array().expect("egress rules").clone();
    assert_eq!(egress.len(), 3, "{egress:#?}");
    assert_eq!(egress[0], json!({"to": [{"podSelector": {}}]}));
    assert_eq!(
        egress[1],
        json!({"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                       "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
               "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]})
    );
    let addrs = cluster_addresses(&env).await;
    for a in ["10.0.0.0/8", "203.0.113.1/32", "203.0.113.2/32", "127.0.0.1/32", "169.254.0.0/16"] {
        assert!(addrs.contains(a), "{a} in {addrs:?}");
    }
    assert_eq!(denied_v4(&np), addrs);
    assert_eq!(egress[2]["to"][0]["ipBlock"]["cidr"], "0.0.0.0/0");
    assert_eq!(egress[2]["to"][1]["ipBlock"], json!({"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}));

    // The Deployment.
    let d: Deployment = env.obj(&ns, "app").await;
    owned(&|| labels(&d));
    let ds = d.spec.clone().expect("deployment spec");
    assert_eq!(ds.replicas, Some(2));
    assert_eq!(ds.progress_deadline_seconds, Some(600));
    assert_eq!(
        to_json(&ds.strategy),
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    let sel = ds.selector.match_labels.clone().unwrap_or_default();
    assert_eq!(sel.get("vesper.eventide.dev/preview-uid"), Some(&uid));
    let pod = ds.template.spec.clone().expect("pod spec");
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(
        to_json(&pod.security_context),
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(pod.containers.len(), 1);
    let c = to_json(&pod.containers[0]);
    assert_eq!(c["image"], IMAGE);
    assert_eq!(c["args"], json!(["--serve", "--verbose"]));
    assert_eq!(c["env"], json!([{"name": "GREETING", "value": "hello"}, {"name": "MODE", "value": "preview"}]));
    assert_eq!(c["ports"], json!([{"name": "http", "containerPort": 9090, "protocol": "TCP"}]));
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "100m", "ephemeral-storage": "64Mi", "memory": "64Mi"},
               "limits": {"cpu": "250m", "ephemeral-storage": "1Gi", "memory": "256Mi"}})
    );
    assert_eq!(
        c["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true,
               "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "http");
    // The pods run, admitted by Pod Security restricted and the LimitRange.
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), &ns);
    let running = pods.list(&ListParams::default()).await.expect("pods").items;
    assert_eq!(running.len(), 2, "two pods");

    // The Service.
    let s: Service = env.obj(&ns, "app").await;
    owned(&|| labels(&s));
    let ss = s.spec.expect("service spec");
    assert_eq!(ss.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(ss.selector.unwrap_or_default().get("vesper.eventide.dev/preview-uid"), Some(&uid));
    assert_eq!(to_json(&ss.ports), json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}]));

    // The Ingress.
    let i: Ingress = env.obj(&ns, "app").await;
    owned(&|| labels(&i));
    let is = to_json(&i.spec);
    assert_eq!(is["ingressClassName"], "nginx");
    assert_eq!(is["tls"], json!([{"hosts": [host]}]));
    assert_eq!(
        is["rules"],
        json!([{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "app", "port": {"name": "http"}}}}]}}])
    );

    // The events a user sees.
    let ev = env.wait_event("pr-1", "Ready", "Normal").await;
    assert!(ev.note.unwrap_or_default().contains("2 of 2 pods ready"));

    // The metrics: one preview Ready, one time-to-Ready observed.
    let text = metrics_text(&env.metrics(), "vesper_");
    for line in [
        "vesper_previews{phase=\"Ready\"} 1",
        "vesper_previews{phase=\"Pending\"} 0",
        "vesper_time_to_ready_seconds_count 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

// 2 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_follows_the_preview_domain() {
    let mut env = Env::start(config()).await;
    env.create("pr-2", json!({"image": IMAGE})).await;
    let long = "a-very-long-preview-name-for-a-branch-that-someone-named-in-detail";
    env.create(long, json!({"image": IMAGE})).await;
    let pe = env.wait_ready("pr-2").await;
    let host = format!("pr-2-team-a-{}.preview.example.com", hash8("team-a", "pr-2"));
    assert_eq!(pe.status.as_ref().and_then(|s| s.url.clone()), Some(format!("https://{host}")));
    let i: Ingress = env.obj(&env.ns_of("pr-2"), "app").await;
    assert_eq!(i.spec.and_then(|s| s.rules).and_then(|r| r[0].host.clone()), Some(host));

    // A long name still gives a valid namespace and a valid host label (at most 63 characters).
    let pe = env.wait_ready(long).await;
    let st = pe.status.expect("status");
    let ns = st.namespace.expect("status.namespace");
    let url = st.url.expect("status.url");
    let label =
        url.strip_prefix("https://").and_then(|h| h.strip_suffix(".preview.example.com")).expect("host").to_string();
    for s in [&ns, &label] {
        assert!(
            s.len() <= 63
                && !s.ends_with('-')
                && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{s}"
        );
        assert!(s.ends_with(&hash8("team-a", long)), "{s}");
    }
    assert!(ns.starts_with("vesper-team-a-a-very-long"), "{ns}");

    // An operator without a preview domain: no Ingress, no URL.
    env.stop_operator().await;
    env.start_operator(vesper_operator::Config::default());
    env.create("pr-3", json!({"image": IMAGE})).await;
    let pe = env.wait_ready("pr-3").await;
    assert_eq!(pe.status.and_then(|s| s.url), None);
    let ingresses: Api<Ingress> = Api::namespaced(env.admin.clone(), &env.ns_of("pr-3"));
    assert!(ingresses.list(&ListParams::default()).await.expect("list ingresses").items.is_empty());
}

// SSA of the status: a real API server removes `status.url` when the operator's next apply of
// the status leaves it out (the field is owned by no other manager: "If the field is not owned
// by any other field managers, it is either deleted from the live object or reset to its default
// value", kubernetes.io/docs/reference/using-api/server-side-apply). (Found a devcluster bug:
// an apply to /status recorded no managedFields entry, so the field stayed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_preview_domain_removes_the_ingress_and_the_url() {
    let mut env = Env::start(config()).await;
    env.create("pr-2", json!({"image": IMAGE})).await;
    let pe = env.wait_ready("pr-2").await;
    assert!(pe.status.and_then(|s| s.url).is_some());
    let ingresses: Api<Ingress> = Api::namespaced(env.admin.clone(), &env.ns_of("pr-2"));
    let i = ingresses.get("app").await.expect("the Ingress");

    env.stop_operator().await;
    env.start_operator(vesper_operator::Config::default());
    wait_deleted(ingresses, "app", &i.uid().expect("uid")).await;
    let pe = env.wait_pe("pr-2", "no url", |pe| pe.status.as_ref().is_some_and(|s| s.url.is_none())).await;
    assert_eq!(phase_of(&pe), Some(Phase::Ready));
}

// 3 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_expiry_deletes_everything() {
    let env = Env::start(config()).await;
    env.create("pr-3", json!({"image": IMAGE, "ttl": "1h"})).await;
    let pe = env.wait_ready("pr-3").await;
    let ns = env.ns_of("pr-3");
    let namespaces: Api<Namespace> = Api::all(env.admin.clone());
    let ns_uid = namespaces.get(&ns).await.expect("namespace").uid().expect("uid");
    let seen = Recorder::start(env.previews(), watcher::Config::default().fields("metadata.name=pr-3")).await;

    env.clock.advance(Duration::from_secs(2 * 3600));
    env.touch("pr-3").await;
    wait_deleted(env.previews(), "pr-3", &pe.uid().expect("uid")).await;
    // The preview went only once its namespace was gone.
    assert!(namespaces.get_opt(&ns).await.expect("get namespace").is_none(), "the namespace outlived its preview");
    wait_deleted(namespaces, &ns, &ns_uid).await;

    let versions = seen.all();
    let expired = versions.iter().find(|pe| phase_of(pe) == Some(Phase::Expired)).unwrap_or_else(|| {
        panic!("the preview never reported Expired: {:#?}", versions.iter().map(|p| &p.status).collect::<Vec<_>>())
    });
    assert_eq!(cond(expired, "Expired"), ("True".into(), "TTLExpired".into()));
    assert_eq!(cond(expired, "Ready").0, "False");
    env.wait_event("pr-3", "Expired", "Normal").await;
    // (How many expirations are counted: each_expiry_is_counted_once.)
    assert!(env.metrics().expirations.get() >= 1);
    let text = metrics_text(&env.metrics(), "vesper_previews");
    assert!(text.lines().all(|l| l.ends_with(" 0")), "a deleted preview is still counted:\n{text}");
}

// One expiry, one count and one Expired event, although the expiry's own status write queues
// another reconcile that may read the cached preview from before the delete landed. (Found: 4
// previews expired were counted 7 in vesper_expirations_total.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_expiry_is_counted_once() {
    let env = Env::start(config()).await;
    let names: Vec<String> = (1..=4).map(|i| format!("pr-x{i}")).collect();
    for n in &names {
        env.create(n, json!({"image": IMAGE, "ttl": "1h"})).await;
    }
    for n in &names {
        env.wait_ready(n).await;
    }
    env.clock.advance(Duration::from_secs(2 * 3600));
    for n in &names {
        env.touch(n).await;
    }
    for n in &names {
        env.wait_pe_gone(n).await;
    }
    let m = env.metrics();
    assert_eq!(
        m.expirations.get(),
        names.len() as u64,
        "vesper_expirations_total after {} previews expired",
        names.len()
    );
    for n in &names {
        let expired = env.events_of(n).await.into_iter().filter(|e| e.reason.as_deref() == Some("Expired")).count();
        assert_eq!(expired, 1, "Expired events about {n}");
    }
}

// 4 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_change_moves_the_expiry_and_the_wakeup() {
    // No expiry warning: the only wake-up the operator asks for is the expiry itself.
    let env = Env::start(vesper_operator::Config { expiry_warning: Duration::ZERO, ..config() }).await;
    env.create("pr-4", json!({"image": IMAGE, "ttl": "1h"})).await;
    let pe = env.wait_ready("pr-4").await;
    let c = created(&pe);
    assert_eq!(expires_at(&pe), c + hours(1));

    env.patch_spec("pr-4", json!({"ttl": "2h"})).await;
    let pe = env
        .wait_pe("pr-4", "expiresAt moved to creation + 2h", |pe| {
            pe.status.as_ref().and_then(|s| s.expires_at.as_ref()).is_some_and(|t| t.0 == c + hours(2))
        })
        .await;
    assert_eq!(pe.status.as_ref().and_then(|s| s.observed_generation), pe.metadata.generation);

    // Ten seconds before the new expiry (long after the old one): still alive after a reconcile...
    let lead = SignedDuration::from_secs(10);
    let offset = (c + hours(2) - lead).duration_since(Timestamp::now());
    env.clock.advance(Duration::try_from(offset).expect("a positive offset"));
    let m = env.metrics();
    let before = reconciles_ok(&m);
    env.touch("pr-4").await;
    eventually("the operator reconciled the touched preview", || reconciles_ok(&m) > before).await;
    let pe = env.get("pr-4").await;
    assert_ne!(phase_of(&pe), Some(Phase::Expired), "expired by the old ttl: {:#?}", pe.status);
    assert!(pe.metadata.deletion_timestamp.is_none());
    // ...then gone when the new TTL passes, with nothing touching it: the operator came back.
    let uid = pe.uid().expect("uid");
    wait_deleted(env.previews(), "pr-4", &uid).await;
    assert!(m.expirations.get() >= 1);
}

// 5 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_waits_for_the_namespace_and_says_why() {
    let env = Env::start(config()).await;
    env.create("pr-5", json!({"image": IMAGE})).await;
    env.wait_ready("pr-5").await;
    let ns = env.ns_of("pr-5");
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), &ns);
    let held: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "held", "finalizers": ["e2e.example.com/hold"]}}))
            .expect("cm");
    cms.create(&PostParams::default(), &held).await.expect("create a held ConfigMap");

    env.previews().delete("pr-5", &DeleteParams::default()).await.expect("delete the preview");
    let pe = env
        .wait_pe("pr-5", "the namespace's deletion conditions copied", |pe| {
            let fin = condition(pe, "NamespaceFinalizersRemaining");
            let content = condition(pe, "NamespaceContentRemaining");
            fin.is_some_and(|c| c.status == "True")
                && content.is_some_and(|c| {
                    c.status == "True" && c.message.contains("configmaps.") && !c.message.contains("pods")
                })
        })
        .await;
    assert!(pe.metadata.deletion_timestamp.is_some());
    assert_eq!(cond(&pe, "Ready"), ("False".into(), "Deleting".into()));
    let namespaces: Api<Namespace> = Api::all(env.admin.clone());
    let n = namespaces.get(&ns).await.expect("the namespace is still there");
    assert!(n.metadata.deletion_timestamp.is_some(), "the namespace is being deleted");
    let nsconds = n.status.and_then(|s| s.conditions).unwrap_or_default();
    for t in ["NamespaceContentRemaining", "NamespaceFinalizersRemaining"] {
        let theirs = nsconds.iter().find(|c| c.type_ == t).expect("the namespace's condition");
        let ours = condition(&pe, t).expect("copied");
        assert_eq!(
            (ours.status.as_str(), Some(ours.reason.as_str()), Some(ours.message.as_str())),
            (theirs.status.as_str(), theirs.reason.as_deref(), theirs.message.as_deref()),
            "{t}"
        );
    }
    assert!(
        condition(&pe, "NamespaceFinalizersRemaining")
            .is_some_and(|c| c.message.contains("e2e.example.com/hold in 1 resource instances")),
        "{:#?}",
        pe.status
    );

    cms.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .expect("release the ConfigMap");
    wait_deleted(env.previews(), "pr-5", &pe.uid().expect("uid")).await;
    assert!(namespaces.get_opt(&ns).await.expect("get namespace").is_none(), "the namespace outlived its preview");
}

// 6 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_vesper_did_not_create_is_a_conflict_and_is_left_alone() {
    let env = Env::start(config()).await;
    let ns = env.ns_of("pr-6");
    let namespaces: Api<Namespace> = Api::all(env.admin.clone());
    // Someone's namespace, even labelled as if Vesper managed it, but without the preview's UID.
    let squatter: Namespace = serde_json::from_value(json!({"metadata": {"name": ns,
        "labels": {"team": "other", "app.kubernetes.io/managed-by": "vesper"}}}))
    .expect("ns");
    let before = namespaces.create(&PostParams::default(), &squatter).await.expect("create the namespace");
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "theirs"}, "data": {"k": "v"}})).expect("cm"),
    )
    .await
    .expect("their ConfigMap");

    env.create("pr-6", json!({"image": IMAGE})).await;
    let pe = env.wait_phase("pr-6", Phase::Failed).await;
    assert_eq!(cond(&pe, "Ready"), ("False".into(), "NamespaceConflict".into()));
    assert!(condition(&pe, "Ready").is_some_and(|c| c.message.contains(&ns)), "{:#?}", pe.status);
    env.wait_event("pr-6", "NamespaceConflict", "Warning").await;

    let after = namespaces.get(&ns).await.expect("the namespace");
    assert_eq!(after.resource_version(), before.resource_version(), "the namespace was written");
    assert_eq!(labels(&after), labels(&before));
    for (what, n) in [
        (
            "ResourceQuota",
            Api::<ResourceQuota>::namespaced(env.admin.clone(), &ns)
                .list(&ListParams::default())
                .await
                .expect("list")
                .items
                .len(),
        ),
        (
            "LimitRange",
            Api::<LimitRange>::namespaced(env.admin.clone(), &ns)
                .list(&ListParams::default())
                .await
                .expect("list")
                .items
                .len(),
        ),
        (
            "NetworkPolicy",
            Api::<NetworkPolicy>::namespaced(env.admin.clone(), &ns)
                .list(&ListParams::default())
                .await
                .expect("list")
                .items
                .len(),
        ),
        (
            "Deployment",
            Api::<Deployment>::namespaced(env.admin.clone(), &ns)
                .list(&ListParams::default())
                .await
                .expect("list")
                .items
                .len(),
        ),
    ] {
        assert_eq!(n, 0, "a {what} was created in a namespace that is not Vesper's");
    }

    // Deleting the preview does not delete their namespace.
    env.previews().delete("pr-6", &DeleteParams::default()).await.expect("delete the preview");
    wait_deleted(env.previews(), "pr-6", &pe.uid().expect("uid")).await;
    let after = namespaces.get(&ns).await.expect("their namespace survives");
    assert_eq!(after.uid(), before.uid());
    assert_eq!(after.resource_version(), before.resource_version());
    assert!(after.metadata.deletion_timestamp.is_none());
    cms.get("theirs").await.expect("their ConfigMap survives");
}

// 7 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_edits_and_deletions_are_restored() {
    let env = Env::start(config()).await;
    env.create("pr-7", json!({"image": IMAGE})).await;
    env.wait_ready("pr-7").await;
    let ns = env.ns_of("pr-7");
    let quotas: Api<ResourceQuota> = Api::namespaced(env.admin.clone(), &ns);
    let nps: Api<NetworkPolicy> = Api::namespaced(env.admin.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(env.admin.clone(), &ns);
    let q0 = quotas.get("preview").await.expect("quota");
    let np0 = nps.get("preview-isolation").await.expect("network policy");
    let hard0 = to_json(&q0.spec.as_ref().expect("spec").hard);
    let np_spec0 = to_json(&np0.spec);

    quotas
        .patch(
            "preview",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"pods": "100", "limits.cpu": "64"}}})),
        )
        .await
        .expect("edit the quota");
    nps.delete("preview-isolation", &DeleteParams::default()).await.expect("delete the NetworkPolicy");
    deps.patch(
        "app",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "registry.example.com/other:evil"}]))
                .expect("json patch"),
        ),
    )
    .await
    .expect("change the image");

    let hard_ok = hard0.clone();
    wait_for(quotas, "preview", "the quota restored", move |q: Option<&ResourceQuota>| {
        q.is_some_and(|q| to_json(&q.spec.as_ref().and_then(|s| s.hard.clone())) == hard_ok)
    })
    .await;
    let np =
        wait_for(nps, "preview-isolation", "the NetworkPolicy back", |n: Option<&NetworkPolicy>| n.is_some()).await;
    assert_eq!(to_json(&np.spec), np_spec0);
    assert_ne!(np.uid(), np0.uid());
    wait_for(deps, "app", "the image restored", |d: Option<&Deployment>| {
        d.and_then(|d| d.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.image.clone()).as_deref()
            == Some(IMAGE)
    })
    .await;
    env.wait_ready("pr-7").await;
}

// 8 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_that_changes_nothing_writes_nothing() {
    let env = Env::start(config()).await;
    env.create("pr-8", json!({"image": IMAGE, "replicas": 2})).await;
    env.wait_pe("pr-8", "Ready with its resolved image", |pe| {
        phase_of(pe) == Some(Phase::Ready) && pe.status.as_ref().is_some_and(|s| s.resolved_image.is_some())
    })
    .await;
    let ns = env.ns_of("pr-8");
    let m = env.metrics();
    // What the cluster holds, by resourceVersion.
    let versions = || async {
        let mut v = BTreeMap::new();
        let a = env.admin.clone();
        let n: Namespace = Api::all(a.clone()).get(&ns).await.expect("ns");
        v.insert("Namespace".to_string(), n.resource_version());
        let q: ResourceQuota = env.obj(&ns, "preview").await;
        v.insert("ResourceQuota".into(), q.resource_version());
        let l: LimitRange = env.obj(&ns, "preview").await;
        v.insert("LimitRange".into(), l.resource_version());
        let p: NetworkPolicy = env.obj(&ns, "preview-isolation").await;
        v.insert("NetworkPolicy".into(), p.resource_version());
        let d: Deployment = env.obj(&ns, "app").await;
        v.insert("Deployment".into(), d.resource_version());
        let s: Service = env.obj(&ns, "app").await;
        v.insert("Service".into(), s.resource_version());
        let i: Ingress = env.obj(&ns, "app").await;
        v.insert("Ingress".into(), i.resource_version());
        v
    };
    let before = versions().await;
    let writes = m.writes.writes();
    let events = env.events_of("pr-8").await.len();

    for _ in 0..2 {
        let r0 = reconciles_ok(&m);
        let touched = env.touch("pr-8").await;
        eventually("the operator reconciled the touched preview", || reconciles_ok(&m) > r0).await;
        let now = env.get("pr-8").await;
        assert_eq!(
            now.resource_version(),
            touched.resource_version(),
            "the preview was written (status?): {:#?}",
            now.status
        );
    }
    assert_eq!(m.writes.writes(), writes, "writes counted by the operator");
    assert_eq!(versions().await, before, "objects were written");
    assert_eq!(env.events_of("pr-8").await.len(), events, "events were recorded");
    assert_eq!(reconciles_failed(&m), 0);
}

// 9 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_pods_and_a_stuck_rollout_fail_with_a_clear_reason() {
    let stuck = "registry.example.com/app:stuck";
    let options = devcluster::Options {
        faults: vec![format!("{stuck}=deadline").parse().expect("fault rule")],
        ..cluster_options()
    };
    let env = Env::start_with(options, config()).await;
    // A container limit above the LimitRange's maximum (2 CPUs by default).
    env.create("pr-9a", json!({"image": IMAGE, "resources": {"limits": {"cpu": "4"}}})).await;
    env.create("pr-9b", json!({"image": stuck})).await;

    let pe = env.wait_phase("pr-9a", Phase::Failed).await;
    assert_eq!(cond(&pe, "Ready"), ("False".into(), "PodsRejected".into()));
    let msg = condition(&pe, "Ready").map(|c| c.message.clone()).unwrap_or_default();
    assert!(msg.contains("maximum cpu usage per Container is 2, but limit is 4"), "{msg}");
    // The phase change is a Warning event with the cause as its reason, naming the refusal.
    let ev = env.wait_event("pr-9a", "PodsRejected", "Warning").await;
    assert!(ev.note.unwrap_or_default().contains("maximum cpu usage per Container is 2, but limit is 4"));
    // The quota is sized from the spec but capped: (2 x 1 + 1) x 4 CPUs > the 6 CPU cap; memory
    // is not capped: 3 x the default 512Mi.
    let q: ResourceQuota = env.obj(&env.ns_of("pr-9a"), "preview").await;
    let hard = q.spec.and_then(|s| s.hard).unwrap_or_default();
    assert_eq!(hard.get("limits.cpu").map(|q| q.0.as_str()), Some("6"));
    assert_eq!(hard.get("requests.cpu").map(|q| q.0.as_str()), Some("6"));
    assert_eq!(hard.get("limits.memory").map(|q| q.0.as_str()), Some("1536Mi"));

    let pe = env.wait_phase("pr-9b", Phase::Failed).await;
    assert_eq!(cond(&pe, "Ready"), ("False".into(), "RolloutStuck".into()));
    let msg = condition(&pe, "Ready").map(|c| c.message.clone()).unwrap_or_default();
    assert!(msg.contains(stuck) && msg.contains("has timed out progressing"), "{msg}");
    let ev = env.wait_event("pr-9b", "RolloutStuck", "Warning").await;
    assert!(ev.note.unwrap_or_default().contains("has timed out progressing"));

    // Failed previews expire too (default ttl 24h), namespace and all.
    let mut uids = vec![];
    for n in ["pr-9a", "pr-9b"] {
        uids.push(env.previews().get(n).await.expect("get").uid().expect("uid"));
    }
    env.clock.advance(Duration::from_secs(25 * 3600));
    let namespaces: Api<Namespace> = Api::all(env.admin.clone());
    for (n, uid) in ["pr-9a", "pr-9b"].into_iter().zip(uids) {
        // Wake it; the operator may have found it expired already (a reconcile of its own, after
        // the clock moved for both), so a preview already gone is fine.
        let wake = json!({"metadata": {"annotations": {"e2e.example.com/touched": "expiry"}}});
        match env.previews().patch(n, &PatchParams::default(), &Patch::Merge(wake)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("touch preview {n}: {e}"),
        }
        wait_deleted(env.previews(), n, &uid).await;
        assert!(namespaces.get_opt(&env.ns_of(n)).await.expect("get").is_none(), "{n}'s namespace outlived it");
    }
}

// 10 -----------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixing_the_spec_of_a_failed_preview_brings_it_back() {
    // Pods take a second to start, so the Pending phase in between is visible.
    let options = devcluster::Options { pod_startup: Duration::from_secs(1), ..cluster_options() };
    let env = Env::start_with(options, config()).await;
    env.create("pr-10", json!({"image": IMAGE, "resources": {"limits": {"cpu": "4"}}})).await;
    env.wait_phase("pr-10", Phase::Failed).await;
    let seen = Recorder::start(env.previews(), watcher::Config::default().fields("metadata.name=pr-10")).await;

    env.patch_spec("pr-10", json!({"resources": {"limits": {"cpu": "1"}}})).await;
    let pe = env.wait_ready("pr-10").await;
    eventually("the watch saw Ready", || seen.all().iter().any(|p| phase_of(p) == Some(Phase::Ready))).await;
    let phases: Vec<Option<Phase>> = seen.all().iter().map(phase_of).collect();
    let mut path: Vec<Phase> = phases.iter().flatten().copied().collect();
    path.dedup();
    assert_eq!(path, [Phase::Failed, Phase::Pending, Phase::Ready], "{phases:?}");
    assert_eq!(cond(&pe, "Ready"), ("True".into(), "Available".into()));
    env.wait_event("pr-10", "Pending", "Normal").await;
}

// 11 -----------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_policy_follows_the_cluster_addresses() {
    let env = Env::start(config()).await;
    env.create("pr-11", json!({"image": IMAGE})).await;
    env.wait_ready("pr-11").await;
    let ns = env.ns_of("pr-11");
    let nps: Api<NetworkPolicy> = Api::namespaced(env.admin.clone(), &ns);
    let np = nps.get("preview-isolation").await.expect("np");
    assert!(denied_v4(&np).is_superset(&["203.0.113.1/32".to_string(), "203.0.113.2/32".to_string()].into()));

    // A node gets new addresses (as a cloud provider would change them).
    env.dc.set_node_addresses("devcluster-node-1", "10.0.0.9", Some("203.0.113.9")).expect("set node addresses");
    let want = cluster_addresses(&env).await;
    assert!(want.contains("203.0.113.9/32") && !want.contains("203.0.113.1/32"));
    let w = want.clone();
    wait_for(nps.clone(), "preview-isolation", "the new node addresses denied", move |n: Option<&NetworkPolicy>| {
        n.is_some_and(|n| denied_v4(n) == w)
    })
    .await;

    // A new API server endpoint.
    let eps: Api<Endpoints> = Api::namespaced(env.admin.clone(), "default");
    let mut ep = eps.get("kubernetes").await.expect("endpoints");
    if let Some(s) = ep.subsets.as_mut().and_then(|s| s.first_mut()) {
        s.addresses.get_or_insert_default().push(serde_json::from_value(json!({"ip": "192.0.2.10"})).expect("address"));
    }
    eps.replace("kubernetes", &PostParams::default(), &ep).await.expect("update the kubernetes endpoints");
    let want = cluster_addresses(&env).await;
    assert!(want.contains("192.0.2.10/32"));
    wait_for(nps, "preview-isolation", "the new API server address denied", move |n: Option<&NetworkPolicy>| {
        n.is_some_and(|n| denied_v4(n) == want)
    })
    .await;
}

// 12 -----------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restart_midway_converges_with_nothing_lost_or_duplicated() {
    let mut env = Env::start(config()).await;
    let first: Vec<String> = (1..=5).map(|i| format!("pr-12-{i}")).collect();
    for n in &first {
        env.create(n, json!({"image": IMAGE, "replicas": 2})).await;
    }
    let m = env.metrics();
    eventually("the operator started writing", || m.writes.writes() >= 4).await;
    env.stop_operator().await;
    let mid = m.writes.writes();
    let later: Vec<String> = (6..=7).map(|i| format!("pr-12-{i}")).collect();
    for n in &later {
        env.create(n, json!({"image": IMAGE, "replicas": 2})).await;
    }
    assert_eq!(m.writes.writes(), mid, "the stopped operator still writes");
    env.start_operator(config());

    let all: Vec<String> = first.iter().chain(&later).cloned().collect();
    let mut uids = BTreeMap::new();
    for n in &all {
        let pe = env.wait_ready(n).await;
        assert_eq!(pe.finalizers(), [FINALIZER.to_string()], "{n}");
        assert_eq!(pe.status.as_ref().and_then(|s| s.namespace.clone()), Some(env.ns_of(n)));
        uids.insert(env.ns_of(n), pe.uid().expect("uid"));
    }
    let namespaces: Api<Namespace> = Api::all(env.admin.clone());
    let ours = namespaces
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=vesper"))
        .await
        .expect("list namespaces")
        .items;
    let got: BTreeMap<String, String> = ours
        .iter()
        .map(|n| (n.name_any(), labels(n).get("vesper.eventide.dev/preview-uid").cloned().unwrap_or_default()))
        .collect();
    assert_eq!(got, uids, "one namespace per preview, each with its preview's UID");
    for ns in uids.keys() {
        let a = env.admin.clone();
        let count = |n: usize, what: &str| assert_eq!(n, 1, "{what} in {ns}");
        count(
            Api::<ResourceQuota>::namespaced(a.clone(), ns)
                .list(&ListParams::default())
                .await
                .expect("list")
                .items
                .len(),
            "quotas",
        );
        count(
            Api::<LimitRange>::namespaced(a.clone(), ns).list(&ListParams::default()).await.expect("list").items.len(),
            "limit ranges",
        );
        count(
            Api::<NetworkPolicy>::namespaced(a.clone(), ns)
                .list(&ListParams::default())
                .await
                .expect("list")
                .items
                .len(),
            "network policies",
        );
        count(
            Api::<Deployment>::namespaced(a.clone(), ns).list(&ListParams::default()).await.expect("list").items.len(),
            "deployments",
        );
        count(
            Api::<Service>::namespaced(a.clone(), ns).list(&ListParams::default()).await.expect("list").items.len(),
            "services",
        );
        count(
            Api::<Ingress>::namespaced(a.clone(), ns).list(&ListParams::default()).await.expect("list").items.len(),
            "ingresses",
        );
        count(
            Api::<ReplicaSet>::namespaced(a.clone(), ns).list(&ListParams::default()).await.expect("list").items.len(),
            "replica sets (one rollout)",
        );
        let pods = Api::<Pod>::namespaced(a.clone(), ns).list(&ListParams::default()).await.expect("list").items;
        assert_eq!(pods.len(), 2, "pods in {ns}");
    }
}

// 13 -----------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_close_to_expiry_warns() {
    let env = Env::start(vesper_operator::Config { expiry_warning: Duration::from_secs(3600), ..config() }).await;
    env.create("pr-13", json!({"image": IMAGE, "ttl": "90m"})).await;
    let pe = env.wait_ready("pr-13").await;
    assert_eq!(cond(&pe, "ExpiringSoon"), ("False".into(), "NotExpiringSoon".into()));

    env.clock.advance(Duration::from_secs(45 * 60));
    env.touch("pr-13").await;
    let pe = env.wait_pe("pr-13", "ExpiringSoon=True", |pe| cond(pe, "ExpiringSoon").0 == "True").await;
    assert_eq!(cond(&pe, "ExpiringSoon").1, "ExpiresSoon");
    assert_eq!(phase_of(&pe), Some(Phase::Ready));
    let ev = env.wait_event("pr-13", "ExpiringSoon", "Warning").await;
    assert!(ev.note.unwrap_or_default().contains("extend its ttl"));
}

// 14 -----------------------------------------------------------------------------------------

async fn can_i(env: &Env, verb: &str, group: &str, resource: &str, namespace: Option<&str>) -> bool {
    let api: Api<SelfSubjectAccessReview> = Api::all(env.sa.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: namespace.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let r = api.create(&PostParams::default(), &review).await.expect("a SelfSubjectAccessReview");
    r.status.expect("review status").allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_rbac_is_exactly_enough() {
    let env = Env::start(config()).await;
    // A whole life: created, Ready, an object deleted by hand and restored, an event, deleted.
    env.create("pr-14", json!({"image": IMAGE})).await;
    let pe = env.wait_ready("pr-14").await;
    let ns = env.ns_of("pr-14");
    let nps: Api<NetworkPolicy> = Api::namespaced(env.admin.clone(), &ns);
    nps.delete("preview-isolation", &DeleteParams::default()).await.expect("delete the NetworkPolicy");
    wait_for(nps, "preview-isolation", "restored", |n: Option<&NetworkPolicy>| n.is_some()).await;
    env.wait_event("pr-14", "Ready", "Normal").await;
    let m = env.metrics();
    assert_eq!(reconciles_failed(&m), 0, "reconciles failed (refused?):\n{}", metrics_text(&m, "vesper_reconcile"));
    assert!(reconciles_ok(&m) > 0);
    // Deleting: the namespace and the finalizer (a refusal would keep the preview).
    env.previews().delete("pr-14", &DeleteParams::default()).await.expect("delete");
    wait_deleted(env.previews(), "pr-14", &pe.uid().expect("uid")).await;
    let namespaces: Api<Namespace> = Api::all(env.admin.clone());
    assert!(namespaces.get_opt(&ns).await.expect("get").is_none());

    // What it needs...
    assert!(can_i(&env, "create", "", "namespaces", None).await);
    assert!(can_i(&env, "patch", "vesper.eventide.dev", "previewenvironments", Some(TEAM)).await);
    // ...and nothing it does not.
    for (verb, group, resource) in [
        ("delete", "", "secrets"),
        ("get", "", "secrets"),
        ("list", "", "secrets"),
        ("create", "", "pods"),
        ("create", "rbac.authorization.k8s.io", "clusterrolebindings"),
        ("create", "vesper.eventide.dev", "previewenvironments"),
        ("delete", "apiextensions.k8s.io", "customresourcedefinitions"),
    ] {
        assert!(!can_i(&env, verb, group, resource, Some(TEAM)).await, "the operator may {verb} {group}/{resource}");
    }
}

// 15 -----------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_image_rolls_out_through_pending_and_the_resolved_image_follows() {
    let options = devcluster::Options { pod_startup: Duration::from_secs(1), ..cluster_options() };
    let env = Env::start_with(options, config()).await;
    env.create("pr-15", json!({"image": IMAGE, "replicas": 2})).await;
    let pe = env.wait_ready("pr-15").await;
    let first = pe.status.and_then(|s| s.resolved_image).expect("resolvedImage");
    let seen = Recorder::start(env.previews(), watcher::Config::default().fields("metadata.name=pr-15")).await;

    let v2 = "registry.example.com/app:pr-15-v2";
    env.patch_spec("pr-15", json!({"image": v2})).await;
    let pe = env.wait_ready("pr-15").await;
    let rolled = |p: &PreviewEnvironment| {
        phase_of(p) == Some(Phase::Ready) && p.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    };
    eventually("the watch saw Ready for the new spec", || seen.all().iter().any(rolled)).await;
    let versions = seen.all();
    let mut path: Vec<Phase> = versions.iter().filter_map(phase_of).collect();
    path.dedup();
    let ready_conds: Vec<(Option<Phase>, Option<String>)> = versions
        .iter()
        .map(|p| (phase_of(p), condition(p, "Ready").map(|c| format!("{}: {}", c.reason, c.message))))
        .collect();
    assert_eq!(path, [Phase::Ready, Phase::Pending, Phase::Ready], "{ready_conds:#?}");
    assert_eq!(pe.status.as_ref().and_then(|s| s.ready_replicas), Some(2));
    let ns = env.ns_of("pr-15");

    // The resolved image is the new build's, as its pods report it.
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), &ns);
    let ids: BTreeSet<String> = pods
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .flat_map(|p| p.status.clone().and_then(|s| s.container_statuses).unwrap_or_default())
        .map(|c| c.image_id)
        .collect();
    assert_eq!(ids.len(), 1, "the running pods run one build: {ids:?}");
    let resolved = pe.status.and_then(|s| s.resolved_image).expect("resolvedImage");
    assert_ne!(resolved, first);
    assert!(ids.contains(&resolved), "resolvedImage {resolved} is not what the pods run: {ids:?}");
}

// 16 -----------------------------------------------------------------------------------------

/// The first failing step ends the run: when the NetworkPolicy cannot be written, the quota
/// and limits exist, no Deployment does, and the status says why; the preview recovers once the
/// cause is gone (retried, with nothing touching the preview).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_stops_the_run_before_the_deployment() {
    let env = Env::start(config()).await;
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(env.admin.clone());
    let original = roles.get("vesper-operator").await.expect("the operator's ClusterRole");
    let mut crippled = original.clone();
    for r in crippled.rules.iter_mut().flatten() {
        r.resources.get_or_insert_default().retain(|x| x != "networkpolicies");
    }
    // A rule left with no resources is invalid: drop it.
    if let Some(rules) = crippled.rules.as_mut() {
        rules.retain(|r| r.resources.as_ref().is_some_and(|x| !x.is_empty()));
    }
    roles.replace("vesper-operator", &PostParams::default(), &crippled).await.expect("take networkpolicies away");

    env.create("pr-16", json!({"image": IMAGE})).await;
    let pe = env.wait_pe("pr-16", "Ready=False ReconcileError", |pe| cond(pe, "Ready").1 == "ReconcileError").await;
    assert_eq!(phase_of(&pe), Some(Phase::Pending));
    let msg = condition(&pe, "Ready").map(|c| c.message.clone()).unwrap_or_default();
    assert!(msg.contains("networkpolicies") && msg.contains("forbidden"), "{msg}");
    let ns = env.ns_of("pr-16");
    let _: ResourceQuota = env.obj(&ns, "preview").await;
    let _: LimitRange = env.obj(&ns, "preview").await;
    let deps: Api<Deployment> = Api::namespaced(env.admin.clone(), &ns);
    assert!(
        deps.list(&ListParams::default()).await.expect("list").items.is_empty(),
        "a Deployment without its NetworkPolicy"
    );
    let ev = env.wait_event("pr-16", "ReconcileError", "Warning").await;
    assert!(ev.note.unwrap_or_default().contains("networkpolicies"));

    let mut restored = original.clone();
    restored.metadata.resource_version = None;
    roles.replace("vesper-operator", &PostParams::default(), &restored).await.expect("give networkpolicies back");
    let pe = env.wait_ready("pr-16").await;
    assert_eq!(cond(&pe, "Ready"), ("True".into(), "Available".into()));
}

// 17 -----------------------------------------------------------------------------------------

/// An object with a name Vesper uses, in the preview's namespace but not Vesper's: the preview
/// fails with NamespaceConflict, the object is left as it is, and no Deployment runs without the
/// preview's own NetworkPolicy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_vesper_did_not_create_blocks_the_deployment() {
    let mut env = Env::start(config()).await;
    env.create("pr-17", json!({"image": IMAGE})).await;
    env.wait_ready("pr-17").await;
    env.stop_operator().await;
    let ns = env.ns_of("pr-17");
    let nps: Api<NetworkPolicy> = Api::namespaced(env.admin.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(env.admin.clone(), &ns);
    let d = deps.get("app").await.expect("deployment");
    deps.delete("app", &DeleteParams::default()).await.expect("delete the Deployment");
    wait_deleted(deps.clone(), "app", &d.uid().expect("uid")).await;
    let np = nps.get("preview-isolation").await.expect("np");
    nps.delete("preview-isolation", &DeleteParams::default()).await.expect("delete the NetworkPolicy");
    wait_deleted(nps.clone(), "preview-isolation", &np.uid().expect("uid")).await;
    let foreign: NetworkPolicy =
        serde_json::from_value(json!({"metadata": {"name": "preview-isolation", "labels": {"team": "other"}},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}}))
        .expect("np");
    let foreign = nps.create(&PostParams::default(), &foreign).await.expect("someone's NetworkPolicy");

    env.start_operator(config());
    let pe = env.wait_pe("pr-17", "NamespaceConflict", |pe| cond(pe, "Ready").1 == "NamespaceConflict").await;
    assert_eq!(phase_of(&pe), Some(Phase::Failed));
    let msg = condition(&pe, "Ready").map(|c| c.message.clone()).unwrap_or_default();
    assert!(msg.contains("NetworkPolicy") && msg.contains("preview-isolation"), "{msg}");
    let now = nps.get("preview-isolation").await.expect("their NetworkPolicy");
    assert_eq!(now.resource_version(), foreign.resource_version(), "their NetworkPolicy was written");
    assert!(deps.get_opt("app").await.expect("get").is_none(), "a Deployment without the preview's NetworkPolicy");
}

// 18 -----------------------------------------------------------------------------------------

/// Every version of every preview NetworkPolicy the operator writes denies every cluster address,
/// including while the operator starts (and reads the addresses) and restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_never_lapses_while_the_operator_starts() {
    let mut env = Env::cluster(cluster_options()).await;
    let seen = Recorder::start(Api::<NetworkPolicy>::all(env.admin.clone()), watcher::Config::default()).await;
    let names: Vec<String> = (1..=3).map(|i| format!("pr-18-{i}")).collect();
    for n in &names {
        env.create(n, json!({"image": IMAGE})).await;
    }
    env.start_operator(config());
    for n in &names {
        env.wait_ready(n).await;
    }
    for _ in 0..6 {
        env.stop_operator().await;
        env.start_operator(config());
        let m = env.metrics();
        eventually("the restarted operator reconciled every preview", || reconciles_ok(&m) >= names.len() as u64).await;
    }
    let want = cluster_addresses(&env).await;
    let all = seen.all();
    assert!(all.len() >= names.len());
    for np in &all {
        let denied = denied_v4(np);
        assert!(
            denied.is_superset(&want),
            "NetworkPolicy {}/{} at resourceVersion {} lets previews reach {:?}",
            np.namespace().unwrap_or_default(),
            np.name_any(),
            np.resource_version().unwrap_or_default(),
            want.difference(&denied).collect::<Vec<_>>()
        );
    }
}

// 19 -----------------------------------------------------------------------------------------

/// A healthy rollout (a new image and one more replica) goes Ready -> Pending -> Ready, never
/// Failed: the quota leaves room for the rollout, including the old pods still terminating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_with_more_replicas_never_fails() {
    let env = Env::start(config()).await;
    env.create("pr-19", json!({"image": IMAGE, "replicas": 2})).await;
    env.wait_ready("pr-19").await;
    let seen = Recorder::start(env.previews(), watcher::Config::default().fields("metadata.name=pr-19")).await;
    env.patch_spec("pr-19", json!({"image": "registry.example.com/app:pr-19-v2", "replicas": 3})).await;
    let pe = env.wait_ready("pr-19").await;
    let rolled = |p: &PreviewEnvironment| {
        phase_of(p) == Some(Phase::Ready) && p.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    };
    eventually("the watch saw Ready for the new spec", || seen.all().iter().any(rolled)).await;
    let failures: Vec<String> = seen
        .all()
        .iter()
        .filter(|p| phase_of(p) == Some(Phase::Failed))
        .filter_map(|p| condition(p, "Ready").map(|c| format!("{}: {}", c.reason, c.message)))
        .collect();
    assert!(failures.is_empty(), "the rollout went Failed: {failures:#?}");
    assert_eq!(pe.status.as_ref().and_then(|s| s.ready_replicas), Some(3));
    let q: ResourceQuota = env.obj(&env.ns_of("pr-19"), "preview").await;
    // 3 replicas, a surge pod, 3 old pods terminating.
    assert_eq!(q.spec.and_then(|s| s.hard).and_then(|h| h.get("pods").cloned()).map(|q| q.0).as_deref(), Some("7"));
}

// 20 -----------------------------------------------------------------------------------------

// A deletion is not a failed reconcile. (Found: every deletion failed 1 reconcile with 409
// Conflict, the finalizer removal carrying the resourceVersion of a cached preview older than
// the operator's own status write.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_preview_fails_no_reconcile() {
    let env = Env::start(config()).await;
    let names: Vec<String> = (1..=4).map(|i| format!("pr-20-{i}")).collect();
    for n in &names {
        env.create(n, json!({"image": IMAGE})).await;
    }
    let mut uids = vec![];
    for n in &names {
        uids.push(env.wait_ready(n).await.uid().expect("uid"));
        env.wait_event(n, "Ready", "Normal").await;
    }
    let m = env.metrics();
    assert_eq!(reconciles_failed(&m), 0, "{}", metrics_text(&m, "vesper_reconcile"));
    for n in &names {
        env.previews().delete(n, &DeleteParams::default()).await.expect("delete");
    }
    for (n, uid) in names.iter().zip(&uids) {
        wait_deleted(env.previews(), n, uid).await;
    }
    assert_eq!(reconciles_failed(&m), 0, "{}", metrics_text(&m, "vesper_reconcile"));
}

// 21 -----------------------------------------------------------------------------------------

// The conflict message tells the user to delete the namespace; doing so lets the preview start,
// although someone else's namespace carries no Vesper label or annotation for a watch to map.
// (Found: the conflict waited for a change that never came; the preview stayed Failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_conflicting_namespace_lets_the_preview_start() {
    let env = Env::start(config()).await;
    let ns = env.ns_of("pr-21");
    let namespaces: Api<Namespace> = Api::all(env.admin.clone());
    let squatter: Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns, "labels": {"team": "other"}}})).expect("ns");
    let theirs = namespaces.create(&PostParams::default(), &squatter).await.expect("create the namespace");
    env.create("pr-21", json!({"image": IMAGE})).await;
    env.wait_pe("pr-21", "NamespaceConflict", |pe| cond(pe, "Ready").1 == "NamespaceConflict").await;
    env.settle("pr-21").await;

    namespaces.delete(&ns, &DeleteParams::default()).await.expect("delete their namespace");
    wait_deleted(namespaces.clone(), &ns, &theirs.uid().expect("uid")).await;
    let pe = env.wait_ready("pr-21").await;
    let n = namespaces.get(&ns).await.expect("the preview's own namespace");
    assert_eq!(labels(&n).get("vesper.eventide.dev/preview-uid"), pe.uid().as_ref());
}

// 22 -----------------------------------------------------------------------------------------

// Same for an object: deleting someone's (unlabelled) NetworkPolicy lets the preview start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_conflicting_object_lets_the_preview_start() {
    let mut env = Env::start(config()).await;
    env.create("pr-22", json!({"image": IMAGE})).await;
    env.wait_ready("pr-22").await;
    env.stop_operator().await;
    let ns = env.ns_of("pr-22");
    let nps: Api<NetworkPolicy> = Api::namespaced(env.admin.clone(), &ns);
    let np = nps.get("preview-isolation").await.expect("np");
    nps.delete("preview-isolation", &DeleteParams::default()).await.expect("delete the NetworkPolicy");
    wait_deleted(nps.clone(), "preview-isolation", &np.uid().expect("uid")).await;
    let foreign: NetworkPolicy =
        serde_json::from_value(json!({"metadata": {"name": "preview-isolation"}, "spec": {"podSelector": {}}}))
            .expect("np");
    let foreign = nps.create(&PostParams::default(), &foreign).await.expect("someone's NetworkPolicy");
    env.start_operator(config());
    env.wait_pe("pr-22", "NamespaceConflict", |pe| cond(pe, "Ready").1 == "NamespaceConflict").await;
    env.settle("pr-22").await;

    nps.delete("preview-isolation", &DeleteParams::default()).await.expect("delete their NetworkPolicy");
    wait_deleted(nps.clone(), "preview-isolation", &foreign.uid().expect("uid")).await;
    env.wait_ready("pr-22").await;
    let np = nps.get("preview-isolation").await.expect("the preview's own NetworkPolicy");
    assert_eq!(labels(&np).get("app.kubernetes.io/managed-by").map(String::as_str), Some("vesper"));
}

// 23 -----------------------------------------------------------------------------------------

// Least privilege: the operator creates with server-side apply, restores the objects of a preview
// with a replacing update (PUT, opkit::apply), writes previews by merge and JSON patches, and
// deletes only previews, preview namespaces and the Ingress it made (grep of vesper/operator/src:
// `.delete(` on PreviewEnvironment, Namespace, Ingress; finalizers set by merge patch, so no
// previewenvironments/finalizers). Everything else inside a preview namespace goes with the
// namespace. Where it may update is narrowed further by its admission policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_rbac_grants_nothing_the_operator_does_not_use() {
    let env = Env::cluster(cluster_options()).await;
    let mut excess = vec![];
    for (verb, group, resource, ns) in [
        ("delete", "apps", "deployments", Some("kube-system")),
        ("delete", "", "services", Some("default")),
        ("delete", "", "resourcequotas", Some(TEAM)),
        ("delete", "", "limitranges", Some(TEAM)),
        ("delete", "networking.k8s.io", "networkpolicies", Some(TEAM)),
        ("update", "vesper.eventide.dev", "previewenvironments", Some(TEAM)),
        ("update", "vesper.eventide.dev", "previewenvironments/finalizers", Some(TEAM)),
    ] {
        let (resource, sub) = resource.split_once('/').map_or((resource, None), |(r, s)| (r, Some(s)));
        let api: Api<SelfSubjectAccessReview> = Api::all(env.sa.clone());
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    subresource: sub.map(str::to_string),
                    namespace: ns.map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = api.create(&PostParams::default(), &review).await.expect("a SelfSubjectAccessReview");
        if r.status.expect("status").allowed {
            excess.push(format!(
                "{verb} {group}/{resource}{} in {ns:?}",
                sub.map(|s| format!("/{s}")).unwrap_or_default()
            ));
        }
    }
    assert!(excess.is_empty(), "the operator's account may do what it never does: {excess:#?}");
}
