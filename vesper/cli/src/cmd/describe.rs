//! `describe NAME`: the spec, the status, the conditions, the events about the preview, and the
//! objects in the namespace it runs in (Deployment ready counts, pods and their state, Service,
//! Ingress host, quota, limits, network policy) with that namespace's recent events.
//!
//! Everything past the preview itself is read as the user: what they may not read is said so,
//! not fatal.

use crate::client::Target;
use crate::error::Result;
use crate::preview;
use clikit::events::{self, Columns};
use clikit::table::Table;
use clikit::timefmt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, LimitRange, Namespace, Pod, ResourceQuota, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;
use std::fmt::Write;
use vesper_api::PreviewEnvironment;

/// How many of the preview namespace's events to show.
const NAMESPACE_EVENTS: usize = 15;

pub async fn run(t: &Target, name: &str) -> Result<()> {
    let pe = preview::get(t, name).await?;
    let now = Timestamp::now();
    let mut out = String::new();
    spec_and_status(&mut out, &pe, now);
    conditions(&mut out, &pe, now);
    let events = preview_events(t, &pe).await;
    out.push_str("Events:\n");
    out.push_str(&events::section(events, now, usize::MAX, Columns::WithObject));
    match pe.status.as_ref().and_then(|s| s.namespace.clone()) {
        Some(ns) => objects(&mut out, t, &pe, &ns, now).await,
        None => out.push_str("Objects: none yet (the operator has not set the preview up)\n"),
    }
    out!("{out}");
    Ok(())
}

fn spec_and_status(out: &mut String, pe: &PreviewEnvironment, now: Timestamp) {
    let status = pe.status.clone().unwrap_or_default();
    let none = || "<none>".to_string();
    let created = pe.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let mut t = Table::new(["Name:", &pe.name_any()]);
    t.row(["Namespace:".to_string(), pe.namespace().unwrap_or_default()]);
    t.row([
        "Created:".to_string(),
        created.map(|c| format!("{} ({} ago)", timefmt::moment(c), timefmt::age_of(now, Some(c)))).unwrap_or_else(none),
    ]);
    t.row(["Image:", &pe.spec.image]);
    t.row(["Replicas:".to_string(), pe.spec.replicas.to_string()]);
    t.row(["Port:".to_string(), pe.spec.port.to_string()]);
    let env: Vec<String> = pe.spec.env.iter().map(|e| format!("{}={}", e.name, e.value)).collect();
    t.row(["Env:".to_string(), if env.is_empty() { none() } else { env.join(", ") }]);
    t.row(["Args:".to_string(), if pe.spec.args.is_empty() { none() } else { pe.spec.args.join(" ") }]);
    t.row([
        "Readiness:".to_string(),
        match &pe.spec.readiness_path {
            Some(p) => format!("HTTP GET {p}"),
            None => "TCP connection to the port".into(),
        },
    ]);
    let expiry = match preview::expires_at(pe) {
        Some(at) if at > now => format!("{} (in {})", timefmt::moment(at), timefmt::until(timefmt::since(at, now))),
        Some(at) => format!("{} (passed)", timefmt::moment(at)),
        None => none(),
    };
    t.row(["TTL:".to_string(), format!("{} after creation, expires {expiry}", pe.spec.ttl)]);
    if let Some(d) = &pe.metadata.deletion_timestamp {
        t.row(["Deleting since:".to_string(), timefmt::moment(d.0)]);
    }
    t.row([
        "Phase:".to_string(),
        status.phase.map(|p| p.to_string()).unwrap_or_else(|| "<none> (is the operator running?)".into()),
    ]);
    t.row(["URL:".to_string(), status.url.clone().unwrap_or_else(none)]);
    t.row(["Runs in:".to_string(), status.namespace.clone().map(|n| format!("namespace {n}")).unwrap_or_else(none)]);
    t.row(["Running image:".to_string(), status.resolved_image.clone().unwrap_or_else(none)]);
    t.row(["Ready pods:".to_string(), format!("{} of {}", status.ready_replicas.unwrap_or(0), pe.spec.replicas)]);
    let observed = status.observed_generation.map(|g| g.to_string()).unwrap_or_else(none);
    t.row([
        "Generation:".to_string(),
        format!("{} (status describes {observed})", pe.metadata.generation.unwrap_or(0)),
    ]);
    out.push_str(&t.render(""));
}

fn conditions(out: &mut String, pe: &PreviewEnvironment, now: Timestamp) {
    let conds = pe.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    out.push_str("Conditions:\n");
    if conds.is_empty() {
        out.push_str("  <none>\n");
        return;
    }
    let mut t = Table::new(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]);
    for c in conds {
        t.row([c.type_, c.status, c.reason, timefmt::age_of(now, Some(c.last_transition_time.0)), c.message]);
    }
    out.push_str(&t.render("  "));
}

/// core/v1 Events about the preview (field selectors on `involvedObject`), oldest first.
async fn preview_events(t: &Target, pe: &PreviewEnvironment) -> Result<Vec<Event>, String> {
    let api: Api<Event> = Api::namespaced(t.client.clone(), &t.namespace);
    let fields = format!(
        "involvedObject.kind=PreviewEnvironment,involvedObject.name={},involvedObject.namespace={}",
        pe.name_any(),
        t.namespace
    );
    let uid = pe.uid();
    let mut items = api
        .list(&ListParams::default().fields(&fields))
        .await
        .map_err(|e| reading(&e, &format!("list events in namespace {}", t.namespace)))?
        .items;
    // Events of an earlier preview of the same name are not this one's.
    items.retain(|e| e.involved_object.uid.is_none() || e.involved_object.uid == uid);
    Ok(items)
}

async fn list<K>(t: &Target, ns: &str, selector: &str) -> Result<Vec<K>, String>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(t.client.clone(), ns);
    let plural = K::plural(&());
    let group = K::group(&());
    let resource = if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") };
    api.list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .map_err(|e| reading(&e, &format!("list {resource} in namespace {ns}")))
}

/// Why a read failed, for a `<cannot read: ...>` line. A refusal names the exact permission the
/// read needs (the preview's objects live in a namespace of their own, which a CI account with
/// rights on previewenvironments only does not reach: deploy/vesper/ci-rbac.yaml).
fn reading(e: &kube::Error, permission: &str) -> String {
    clikit::apierror::readable(e, permission)
}

async fn objects(out: &mut String, t: &Target, pe: &PreviewEnvironment, ns: &str, now: Timestamp) {
    let _ = writeln!(out, "Objects in namespace {ns}:");
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    match namespaces.get_opt(ns).await {
        Ok(None) => {
            let _ = writeln!(out, "  the namespace does not exist (yet, or any more)");
            return;
        }
        Ok(Some(n)) => {
            let phase = n.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            if phase != "Active" && !phase.is_empty() {
                let _ = writeln!(out, "  Namespace/{ns}: {phase}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "  Namespace/{ns}: <cannot read: {}>", reading(&e, &format!("get namespaces/{ns}")));
        }
    }
    let selector = format!("{}={}", vesper_api::LABEL_PREVIEW_UID, pe.uid().unwrap_or_default());
    let mut t_obj = Table::new(["OBJECT", "STATE"]);
    let mut cannot = vec![];
    macro_rules! each {
        ($k:ty, $kind:literal, $state:expr) => {
            match list::<$k>(t, ns, &selector).await {
                Ok(items) => {
                    for o in items {
                        t_obj.row([format!("{}/{}", $kind, o.name_any()), $state(&o)]);
                    }
                }
                Err(e) => cannot.push(format!("  {}: <cannot read: {e}>", $kind)),
            }
        };
    }
    each!(Deployment, "Deployment", deployment_state);
    each!(Pod, "Pod", |p: &Pod| pod_state(p, now));
    each!(Service, "Service", service_state);
    each!(Ingress, "Ingress", ingress_state);
    each!(ResourceQuota, "ResourceQuota", quota_state);
    each!(LimitRange, "LimitRange", |_: &LimitRange| "present".to_string());
    each!(NetworkPolicy, "NetworkPolicy", |_: &NetworkPolicy| "present".to_string());
    out.push_str(&t_obj.render("  "));
    for c in cannot {
        out.push_str(&c);
        out.push('\n');
    }
    let api: Api<Event> = Api::namespaced(t.client.clone(), ns);
    let list = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| reading(&e, &format!("list events in namespace {ns}")));
    let _ = writeln!(out, "Events in namespace {ns}:");
    out.push_str(&events::section(list, now, NAMESPACE_EVENTS, Columns::WithObject));
}

pub fn deployment_state(d: &Deployment) -> String {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    let mut s = format!(
        "{}/{want} ready, {} up-to-date, {} available",
        st.ready_replicas.unwrap_or(0),
        st.updated_replicas.unwrap_or(0),
        st.available_replicas.unwrap_or(0)
    );
    for c in st.conditions.unwrap_or_default() {
        let bad =
            (c.type_ == "ReplicaFailure" && c.status == "True") || (c.type_ != "ReplicaFailure" && c.status != "True");
        if bad {
            let _ = write!(
                s,
                "; {}={} {}: {}",
                c.type_,
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default()
            );
        }
    }
    s
}

/// A pod's state as `kubectl get pods` sums it up: the waiting or terminated reason of a
/// container (`ImagePullBackOff`, `CrashLoopBackOff`), else the phase; ready containers and
/// restarts.
pub fn pod_state(p: &Pod, now: Timestamp) -> String {
    let st = p.status.clone().unwrap_or_default();
    let statuses = st.container_statuses.clone().unwrap_or_default();
    let total = p.spec.as_ref().map(|s| s.containers.len()).unwrap_or(statuses.len());
    let ready = statuses.iter().filter(|c| c.ready).count();
    let restarts: i32 = statuses.iter().map(|c| c.restart_count).sum();
    let mut reason = st.reason.clone().unwrap_or_else(|| st.phase.clone().unwrap_or_else(|| "Unknown".into()));
    let mut detail = None;
    for init in st.init_container_statuses.clone().unwrap_or_default() {
        if let Some(w) = init.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            reason = format!("Init:{}", w.reason.clone().unwrap_or_default());
            detail = w.message.clone();
        }
    }
    for c in &statuses {
        let state = c.state.clone().unwrap_or_default();
        if let Some(w) = state.waiting.as_ref().filter(|w| w.reason.as_deref().is_some_and(|r| !r.is_empty())) {
            reason = w.reason.clone().unwrap_or_default();
            detail = w.message.clone();
        } else if let Some(term) = state.terminated.as_ref() {
            reason = term.reason.clone().unwrap_or_else(|| format!("ExitCode:{}", term.exit_code));
        }
    }
    if p.metadata.deletion_timestamp.is_some() {
        reason = "Terminating".into();
    }
    let mut s = format!("{reason}, {ready}/{total} ready, {restarts} restarts");
    if let Some(start) = st.start_time.as_ref() {
        let _ = write!(s, ", started {} ago", timefmt::age(timefmt::since(now, start.0)));
    }
    if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
        let _ = write!(s, ", node {node}");
    }
    if let Some(d) = detail.filter(|d| !d.is_empty()) {
        let _ = write!(s, " ({d})");
    }
    s
}

fn service_state(s: &Service) -> String {
    let spec = s.spec.clone().unwrap_or_default();
    let ports: Vec<String> = spec
        .ports
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let target = match &p.target_port {
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i)) => i.to_string(),
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s)) => s.clone(),
                None => p.port.to_string(),
            };
            format!("{}->{target}", p.port)
        })
        .collect();
    format!(
        "{} {}, ports {}",
        spec.type_.unwrap_or_else(|| "ClusterIP".into()),
        spec.cluster_ip.unwrap_or_else(|| "<pending>".into()),
        ports.join(",")
    )
}

fn ingress_state(i: &Ingress) -> String {
    let hosts: Vec<String> =
        i.spec.as_ref().and_then(|s| s.rules.clone()).unwrap_or_default().into_iter().filter_map(|r| r.host).collect();
    let lb: Vec<String> = i
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|l| l.ip.or(l.hostname))
        .collect();
    let class = i.spec.as_ref().and_then(|s| s.ingress_class_name.clone()).unwrap_or_else(|| "<default class>".into());
    format!(
        "host {}, class {class}, address {}",
        if hosts.is_empty() { "<none>".into() } else { hosts.join(",") },
        if lb.is_empty() { "<pending>".into() } else { lb.join(",") }
    )
}

fn quota_state(q: &ResourceQuota) -> String {
    let st = q.status.clone().unwrap_or_default();
    let hard = st.hard.unwrap_or_default();
    let used = st.used.unwrap_or_default();
    let parts: Vec<String> =
        hard.iter().map(|(k, v)| format!("{k} {}/{}", used.get(k).map(|u| u.0.as_str()).unwrap_or("0"), v.0)).collect();
    if parts.is_empty() { "present".into() } else { parts.join(", ") }
}
