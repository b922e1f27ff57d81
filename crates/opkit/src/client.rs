//! The API client of an operator, counting every request it sends: the Prometheus counter
//! `<prefix>_api_requests_total{verb, resource}` (`verb` as the API server's audit log names it:
//! `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; `resource`
//! the plural name with its subresource, `deployments` or `previewenvironments/status`).
//!
//! What it is for: "an unchanged object costs no request" is a claim about the operator's reads,
//! and this counter is how a benchmark (or an operator of the cluster) checks it. Requests are
//! counted when they are sent, whatever their answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The labels of one counted request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub resource: String,
}

/// Requests sent by a client, by verb and resource. Clones share the counts.
#[derive(Clone, Debug, Default)]
pub struct RequestCounter {
    family: Family<RequestLabels, Counter>,
    by_verb: Arc<[AtomicU64; VERBS.len()]>,
}

/// The verbs [`classify`] tells apart.
pub const VERBS: [&str; 9] =
    ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "other"];

impl RequestCounter {
    pub fn new() -> RequestCounter {
        RequestCounter::default()
    }

    /// Register as `api_requests` (exported as `<prefix>_api_requests_total`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "api_requests",
            "Requests sent to the Kubernetes API, by verb (get, list, watch, create, update, patch, delete) and resource",
            self.family.clone(),
        );
    }

    /// Count one request.
    pub fn record<B>(&self, request: &http::Request<B>) {
        let (verb, resource) = classify(request.method(), request.uri().path(), request.uri().query());
        if let Some(i) = VERBS.iter().position(|v| *v == verb) {
            self.by_verb[i].fetch_add(1, Ordering::Relaxed);
        }
        self.family.get_or_create(&RequestLabels { verb: verb.into(), resource }).inc();
    }

    /// How many requests of `verb` were sent, over every resource.
    pub fn total(&self, verb: &str) -> u64 {
        VERBS.iter().position(|v| *v == verb).map_or(0, |i| self.by_verb[i].load(Ordering::Relaxed))
    }

    /// A tower layer that counts the requests going through it.
    pub fn layer(&self) -> CountLayer {
        CountLayer { counter: Arc::new(self.clone()) }
    }
}

/// The verb and the resource of a request to a Kubernetes API path
/// (`/api/v1/namespaces/a/pods/b/log`, `/apis/apps/v1/deployments`).
pub fn classify(method: &http::Method, path: &str, query: Option<&str>) -> (&'static str, String) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    // After /api/<version> or /apis/<group>/<version>.
    let rest: &[&str] = match segments.first() {
        Some(&"api") if segments.len() >= 2 => &segments[2..],
        Some(&"apis") if segments.len() >= 3 => &segments[3..],
        _ => &[],
    };
    // A namespaced path: namespaces/<ns>/<resource>...; `namespaces/<ns>` alone is a Namespace.
    let rest = if rest.first() == Some(&"namespaces") && rest.len() >= 3 { &rest[2..] } else { rest };
    let named = rest.len() >= 2;
    let resource = match rest {
        [] => "other".to_string(),
        [r] | [r, _] => r.to_string(),
        [r, _, sub, ..] => format!("{r}/{sub}"),
    };
    let watch = query.is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

/// The layer of [`RequestCounter::layer`].
#[derive(Clone)]
pub struct CountLayer {
    counter: Arc<RequestCounter>,
}

impl<S> tower_layer::Layer<S> for CountLayer {
    type Service = CountService<S>;

    fn layer(&self, inner: S) -> CountService<S> {
        CountService { inner, counter: self.counter.clone() }
    }
}

/// The service of [`CountLayer`].
#[derive(Clone)]
pub struct CountService<S> {
    inner: S,
    counter: Arc<RequestCounter>,
}

impl<S, B> tower_service::Service<http::Request<B>> for CountService<S>
where
    S: tower_service::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> S::Future {
        self.counter.record(&request);
        self.inner.call(request)
    }
}

/// A client for `config` whose requests `counter` counts.
pub fn counted(config: kube::Config, counter: &RequestCounter) -> kube::Result<kube::Client> {
    Ok(kube::client::ClientBuilder::try_from(config)?.with_layer(&counter.layer()).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_as_the_audit_log_names_them() {
        let get = http::Method::GET;
        let cases = [
            (&get, "/api/v1/namespaces", None, ("list", "namespaces")),
            (&get, "/api/v1/namespaces/team-a", None, ("get", "namespaces")),
            (&get, "/api/v1/namespaces/team-a/pods", Some("labelSelector=a%3Db"), ("list", "pods")),
            (&get, "/api/v1/namespaces/team-a/pods/web-1/log", None, ("get", "pods/log")),
            (&get, "/apis/apps/v1/deployments", Some("watch=true&resourceVersion=5"), ("watch", "deployments")),
            (&get, "/apis/apps/v1/namespaces/a/deployments/app", None, ("get", "deployments")),
            (
                &http::Method::PUT,
                "/apis/apps/v1/namespaces/a/deployments/app",
                Some("dryRun=All"),
                ("update", "deployments"),
            ),
            (
                &http::Method::PATCH,
                "/apis/vesper.eventide.dev/v1alpha1/namespaces/a/previewenvironments/p/status",
                None,
                ("patch", "previewenvironments/status"),
            ),
            (&http::Method::POST, "/apis/events.k8s.io/v1/namespaces/a/events", None, ("create", "events")),
            (&http::Method::DELETE, "/api/v1/namespaces/pv-a-b", None, ("delete", "namespaces")),
            (&http::Method::DELETE, "/api/v1/namespaces/a/pods", None, ("deletecollection", "pods")),
            (&get, "/version", None, ("list", "other")),
        ];
        for (method, path, query, (verb, resource)) in cases {
            assert_eq!(classify(method, path, query), (verb, resource.to_string()), "{method} {path}");
        }
    }

    #[test]
    fn the_counter_sums_a_verb_over_resources() {
        let c = RequestCounter::new();
        for path in ["/api/v1/namespaces/a/pods/x", "/api/v1/namespaces/a/services/y", "/api/v1/namespaces/a/pods"] {
            c.record(&http::Request::get(path).body(()).unwrap());
        }
        assert_eq!(c.total("get"), 2);
        assert_eq!(c.total("list"), 1);
        assert_eq!(c.total("update"), 0);
        let mut r = Registry::default();
        c.register(r.sub_registry_with_prefix("vesper"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(text.contains("vesper_api_requests_total{verb=\"get\",resource=\"pods\"} 1"), "{text}");
    }
}
