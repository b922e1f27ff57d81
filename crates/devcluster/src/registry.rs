//! The resource registry: one entry per served group/version/resource, for built-in kinds and for
//! every version a CustomResourceDefinition serves. Kinds are data; every request goes through the
//! same generic path and asks its entry for scope, subresources, schema, printer columns, ...

use crate::schema::{Defs, SchemaRef};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Where objects of a resource are stored: group and plural resource name, version-independent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> Self {
        GroupResource { group: group.to_string(), resource: resource.to_string() }
    }
}

pub use crate::names::NameRule;

/// The scale subresource of a kind: where the replica counts and the selector live.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleDef {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

/// A column of `kubectl get` (server-side printing).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// Conversion between the served version and the stored form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// Only `apiVersion` changes (built-in kinds served in one version; CRDs with strategy None).
    None,
    /// events.k8s.io/v1 Event served from core/v1 Event storage.
    EventsV1,
}

/// The schema of a kind: a root node plus the definitions its `$ref`s point to.
#[derive(Debug, Clone)]
pub struct KindSchema {
    pub root: Value,
    pub defs: Arc<Defs>,
    /// Component name in the OpenAPI document (`io.k8s.api.core.v1.Pod`,
    /// `dev.eventide.vesper.v1alpha1.PreviewEnvironment`).
    pub name: String,
}

impl KindSchema {
    pub fn schema(&self) -> SchemaRef<'_> {
        SchemaRef::new(&self.root, &self.defs)
    }
}

/// One served group/version/resource.
#[derive(Debug, Clone)]
pub struct ResourceDef {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub verbs: Vec<&'static str>,
    pub status: bool,
    pub scale: Option<ScaleDef>,
    /// `metadata.generation` is set and bumped when anything but metadata and status changes.
    pub generation: bool,
    pub name_rule: NameRule,
    pub storage: GroupResource,
    pub conversion: Conversion,
    pub schema: Option<KindSchema>,
    pub columns: Vec<PrinterColumn>,
    /// Served from a CustomResourceDefinition (its name).
    pub crd: Option<String>,
    /// The version objects of this resource are stored in.
    pub storage_version: String,
    /// Custom resources only, when reads and writes go through more than this version's schema
    /// (`crd::needs_storage_schema`): the storage version's schema, which prunes what is stored
    /// and defaults what is read.
    pub storage_schema: Option<KindSchema>,
    /// Field selectors supported beyond metadata.name and metadata.namespace: label -> JSON path.
    pub field_labels: Vec<(String, String)>,
    /// DELETE answers the deleted object rather than a `Status` (`returns_deleted_object`).
    pub return_deleted_object: bool,
    /// A PUT of an object that does not exist creates it.
    pub create_on_update: bool,
    /// Not stored: a create is answered with the request, its status filled in (the access
    /// and token reviews).
    pub review: bool,
}

impl ResourceDef {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    pub fn gr(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.plural)
    }

    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }

    /// The JSON path a field selector label refers to, when the kind supports it. Kinds with
    /// their own field label conversion accept exactly their list (Nodes, for one, take no
    /// `metadata.namespace`); the others accept `metadata.name` and `metadata.namespace`.
    pub fn field_label_path(&self, label: &str) -> Option<String> {
        if let Some((_, p)) = self.field_labels.iter().find(|(l, _)| l == label) {
            return Some(p.clone());
        }
        match label {
            "metadata.name" => Some(label.to_string()),
            "metadata.namespace" if !self.own_field_conversion() || self.namespaced => Some(label.to_string()),
            _ => None,
        }
    }

    /// Built-in kinds with their own field label conversion function.
    pub fn own_field_conversion(&self) -> bool {
        !self.is_custom() && !self.field_labels.is_empty()
    }

    /// The 400 message for a field label the kind does not support.
    pub fn unsupported_field_label(&self, label: &str) -> String {
        if self.is_custom() || self.own_field_conversion() {
            format!("field label not supported: {label}")
        } else {
            format!("{label:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")
        }
    }
}

const STD_VERBS: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// All served resources, including those CRDs add at run time.
#[derive(Debug, Default)]
pub struct Registry {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// (group, version, plural) -> def
    by_gvr: BTreeMap<(String, String, String), Arc<ResourceDef>>,
    /// Bumped on every change, so discovery and OpenAPI can be cached per generation.
    generation: u64,
}

/// One API group and the versions it serves, for discovery.
#[derive(Debug, Clone)]
pub struct GroupInfo {
    pub name: String,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        let r = Registry::default();
        {
            let mut inner = r.inner.write().unwrap_or_else(|e| e.into_inner());
            for def in builtin_defs() {
                inner.by_gvr.insert((def.group.clone(), def.version.clone(), def.plural.clone()), Arc::new(def));
            }
            inner.generation = 1;
        }
        r
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn generation(&self) -> u64 {
        self.read().generation
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.read().by_gvr.get(&(group.to_string(), version.to_string(), plural.to_string())).cloned()
    }

    /// Look a resource up by its plural in a group, any version (preferred first).
    pub fn find_resource(&self, group: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        let inner = self.read();
        let mut found: Vec<Arc<ResourceDef>> =
            inner.by_gvr.values().filter(|d| d.group == group && d.plural == plural).cloned().collect();
        found.sort_by_key(|d| std::cmp::Reverse(version_priority(&d.version)));
        found.into_iter().next()
    }

    /// Look a kind up by apiVersion and kind (owner references, embedded objects).
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        let (group, version) = split_api_version(api_version);
        self.read().by_gvr.values().find(|d| d.group == group && d.version == version && d.kind == kind).cloned()
    }

    /// Every def serving a group/version.
    pub fn group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceDef>> {
        self.read().by_gvr.values().filter(|d| d.group == group && d.version == version).cloned().collect()
    }

    pub fn all(&self) -> Vec<Arc<ResourceDef>> {
        self.read().by_gvr.values().cloned().collect()
    }

    /// Every def stored in a storage group-resource (all served versions).
    pub fn by_storage(&self, storage: &GroupResource) -> Vec<Arc<ResourceDef>> {
        self.read().by_gvr.values().filter(|d| &d.storage == storage).cloned().collect()
    }

    /// The API groups (core excluded), each with its versions, preferred version first,
    /// built-in groups in the order the real server lists them, then custom groups by name.
    pub fn groups(&self) -> Vec<GroupInfo> {
        let inner = self.read();
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in inner.by_gvr.values() {
            if d.group.is_empty() {
                continue;
            }
            let vs = groups.entry(d.group.clone()).or_default();
            if !vs.contains(&d.version) {
                vs.push(d.version.clone());
            }
        }
        let mut out: Vec<GroupInfo> = groups
            .into_iter()
            .map(|(name, mut versions)| {
                versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
                GroupInfo { name, versions }
            })
            .collect();
        out.sort_by_key(|g| {
            let idx = BUILTIN_GROUP_ORDER.iter().position(|n| *n == g.name).unwrap_or(usize::MAX);
            (idx, g.name.clone())
        });
        out
    }

    /// Install the defs of a CRD, replacing any it had before.
    pub fn set_crd(&self, crd_name: &str, defs: Vec<ResourceDef>) {
        let mut inner = self.write();
        inner.by_gvr.retain(|_, d| d.crd.as_deref() != Some(crd_name));
        for def in defs {
            inner.by_gvr.insert((def.group.clone(), def.version.clone(), def.plural.clone()), Arc::new(def));
        }
        inner.generation += 1;
    }

    pub fn remove_crd(&self, crd_name: &str) {
        let mut inner = self.write();
        let before = inner.by_gvr.len();
        inner.by_gvr.retain(|_, d| d.crd.as_deref() != Some(crd_name));
        if inner.by_gvr.len() != before {
            inner.generation += 1;
        }
    }

    /// Resolve what a user typed (`deploy`, `deployments.apps`, `PreviewEnvironment`) the way
    /// kubectl's RESTMapper does; used by tests and the CLI.
    pub fn resolve(&self, name: &str) -> Option<Arc<ResourceDef>> {
        let (res, group) = match name.split_once('.') {
            Some((r, g)) => (r, Some(g)),
            None => (name, None),
        };
        let lower = res.to_ascii_lowercase();
        let inner = self.read();
        let mut matches: Vec<&Arc<ResourceDef>> = inner
            .by_gvr
            .values()
            .filter(|d| group.is_none_or(|g| d.group == g))
            .filter(|d| {
                d.plural == lower
                    || d.singular == lower
                    || d.kind.to_ascii_lowercase() == lower
                    || d.short_names.contains(&lower)
            })
            .collect();
        matches.sort_by_key(|d| (!d.group.is_empty(), std::cmp::Reverse(version_priority(&d.version))));
        matches.first().map(|d| (*d).clone())
    }
}

/// `apps/v1` -> ("apps", "v1"); `v1` -> ("", "v1").
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first (v1 > v1beta2 > v1beta1 >
/// v1alpha1); non-Kubernetes-like versions last, by name.
pub fn version_priority(v: &str) -> (u8, u64, u8, u64, std::cmp::Reverse<String>) {
    let parse = || -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let major: u64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 3, 0));
        }
        let (stage, num) = if let Some(n) = tail.strip_prefix("beta") {
            (2, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (1, n)
        } else {
            return None;
        };
        Some((major, stage, num.parse().ok()?))
    };
    match parse() {
        Some((major, stage, minor)) => (1, major, stage, minor, std::cmp::Reverse(String::new())),
        None => (0, 0, 0, 0, std::cmp::Reverse(v.to_string())),
    }
}

const BUILTIN_GROUP_ORDER: [&str; 15] = [
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "coordination.k8s.io",
];

pub use crate::builtin::schemas::{BuiltinSchemas, builtin_schemas};

struct B {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    scale: bool,
    generation: bool,
    name_rule: NameRule,
    all: bool,
    field_labels: &'static [&'static str],
    review: bool,
    readonly: bool,
}

const fn b(group: &'static str, version: &'static str, kind: &'static str, plural: &'static str) -> B {
    B {
        group,
        version,
        kind,
        plural,
        namespaced: true,
        short: &[],
        status: false,
        scale: false,
        generation: false,
        name_rule: NameRule::Dns1123Subdomain,
        all: false,
        field_labels: &[],
        review: false,
        readonly: false,
    }
}

impl B {
    const fn cluster(mut self) -> Self {
        self.namespaced = false;
        self
    }
    const fn short(mut self, s: &'static [&'static str]) -> Self {
        self.short = s;
        self
    }
    const fn status(mut self) -> Self {
        self.status = true;
        self
    }
    const fn gen_(mut self) -> Self {
        self.generation = true;
        self
    }
    const fn scale(mut self) -> Self {
        self.scale = true;
        self
    }
    const fn name(mut self, r: NameRule) -> Self {
        self.name_rule = r;
        self
    }
    const fn all(mut self) -> Self {
        self.all = true;
        self
    }
    const fn fields(mut self, f: &'static [&'static str]) -> Self {
        self.field_labels = f;
        self
    }
    const fn review(mut self) -> Self {
        self.review = true;
        self
    }
    /// Served for reading only (get, list): ComponentStatus.
    const fn readonly(mut self) -> Self {
        self.readonly = true;
        self
    }
}

const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

const BUILTINS: &[B] = &[
    b("", "v1", "Namespace", "namespaces")
        .cluster()
        .short(&["ns"])
        .status()
        .name(NameRule::Dns1123Label)
        .fields(&["status.phase"]),
    b("", "v1", "ConfigMap", "configmaps").short(&["cm"]),
    b("", "v1", "Secret", "secrets").fields(&["type"]),
    b("", "v1", "ServiceAccount", "serviceaccounts").short(&["sa"]),
    b("", "v1", "Service", "services")
        .short(&["svc"])
        .status()
        .name(NameRule::Dns1035Label)
        .all()
        .fields(&["spec.clusterIP", "spec.type"]),
    b("", "v1", "Endpoints", "endpoints").short(&["ep"]),
    b("", "v1", "Pod", "pods").short(&["po"]).status().all().fields(&[
        "spec.nodeName",
        "spec.host",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    ]),
    b("", "v1", "Node", "nodes").cluster().short(&["no"]).status().fields(&["spec.unschedulable"]),
    b("", "v1", "Event", "events").short(&["ev"]).fields(EVENT_FIELDS),
    b("", "v1", "ResourceQuota", "resourcequotas").short(&["quota"]).status(),
    b("", "v1", "LimitRange", "limitranges").short(&["limits"]),
    b("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims").short(&["pvc"]).status(),
    b("", "v1", "ComponentStatus", "componentstatuses").cluster().short(&["cs"]).readonly(),
    b("", "v1", "ReplicationController", "replicationcontrollers")
        .short(&["rc"])
        .status()
        .scale()
        .gen_()
        .all()
        .fields(&["status.replicas"]),
    b("", "v1", "PersistentVolume", "persistentvolumes").cluster().short(&["pv"]).status().fields(&["metadata.name"]),
    b("apps", "v1", "Deployment", "deployments").short(&["deploy"]).status().scale().gen_().all(),
    b("apps", "v1", "ReplicaSet", "replicasets")
        .short(&["rs"])
        .status()
        .scale()
        .gen_()
        .all()
        .fields(&["status.replicas"]),
    b("apps", "v1", "StatefulSet", "statefulsets").short(&["sts"]).status().scale().gen_().all(),
    b("apps", "v1", "DaemonSet", "daemonsets").short(&["ds"]).status().gen_().all(),
    b("apps", "v1", "ControllerRevision", "controllerrevisions"),
    b("batch", "v1", "Job", "jobs").status().gen_().all().fields(&["status.successful"]),
    b("batch", "v1", "CronJob", "cronjobs").short(&["cj"]).status().gen_().all(),
    b("networking.k8s.io", "v1", "Ingress", "ingresses").short(&["ing"]).status().gen_(),
    b("networking.k8s.io", "v1", "IngressClass", "ingressclasses").cluster(),
    b("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies").short(&["netpol"]).gen_(),
    b("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    b("coordination.k8s.io", "v1", "Lease", "leases"),
    b("rbac.authorization.k8s.io", "v1", "Role", "roles").name(NameRule::PathSegment),
    b("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings").name(NameRule::PathSegment),
    b("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles").cluster().name(NameRule::PathSegment),
    b("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings")
        .cluster()
        .name(NameRule::PathSegment),
    b("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions")
        .cluster()
        .short(&["crd", "crds"])
        .status()
        .gen_(),
    b("events.k8s.io", "v1", "Event", "events").short(&["ev"]).fields(&[
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    ]),
    b("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets").short(&["pdb"]).status().gen_(),
    b("storage.k8s.io", "v1", "StorageClass", "storageclasses").cluster().short(&["sc"]),
    b("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies")
        .cluster()
        .status()
        .gen_(),
    b("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings")
        .cluster()
        .gen_(),
    b("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews").cluster().review(),
    b("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews").cluster().review(),
    b("authorization.k8s.io", "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews").review(),
    b("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews").cluster().review(),
    b("authentication.k8s.io", "v1", "TokenReview", "tokenreviews").cluster().review(),
    b("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews").cluster().review(),
    // Named `<version>.<group>` (`v1.` for the core group): path-segment names, as
    // kube-aggregator's ValidateAPIServiceName allows.
    b("apiregistration.k8s.io", "v1", "APIService", "apiservices").cluster().status().name(NameRule::PathSegment),
    b("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests")
        .cluster()
        .short(&["csr"])
        .status()
        .fields(&["spec.signerName"]),
];

/// A subresource some built-in resources serve besides `status` and `scale`: name, the kind it
/// answers and its verbs (what discovery lists and the request path accepts).
pub struct ExtraSubresource {
    pub name: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

/// The subresources of a built-in resource beyond `status`/`scale` whose writes go through
/// the generic update path (`hooks::subresource_update` says what each may change):
/// `certificatesigningrequests/approval` (kubectl certificate approve/deny) and
/// `pods/ephemeralcontainers` (kubectl debug).
pub fn extra_subresources(group: &str, plural: &str) -> &'static [ExtraSubresource] {
    const RW: &[&str] = &["get", "patch", "update"];
    match (group, plural) {
        ("certificates.k8s.io", "certificatesigningrequests") => {
            &[ExtraSubresource { name: "approval", kind: "CertificateSigningRequest", verbs: RW }]
        }
        ("", "pods") => &[ExtraSubresource { name: "ephemeralcontainers", kind: "Pod", verbs: RW }],
        _ => &[],
    }
}

fn builtin_defs() -> Vec<ResourceDef> {
    let (defs, names) = builtin_schemas();
    BUILTINS
        .iter()
        .map(|b| {
            let (storage, conversion, field_labels) = if b.group == "events.k8s.io" {
                // events.k8s.io/v1 is another view of core/v1 events; field selectors are
                // translated to the stored (core) field names.
                let labels = b
                    .field_labels
                    .iter()
                    .map(|l| {
                        let path = l
                            .replace("regarding.", "involvedObject.")
                            .replace("reportingController", "reportingComponent");
                        (l.to_string(), path)
                    })
                    .collect();
                (GroupResource::new("", "events"), Conversion::EventsV1, labels)
            } else {
                (
                    GroupResource::new(b.group, b.plural),
                    Conversion::None,
                    b.field_labels
                        .iter()
                        .map(|l| {
                            (l.to_string(), if *l == "spec.host" { "spec.nodeName".to_string() } else { l.to_string() })
                        })
                        .collect(),
                )
            };
            let schema = names.get(&(b.group.to_string(), b.kind.to_string())).map(|name| KindSchema {
                root: json!({"$ref": format!("#/components/schemas/{name}")}),
                defs: defs.clone(),
                name: name.clone(),
            });
            let mut categories = vec![];
            if b.all {
                categories.push("all".to_string());
            }
            ResourceDef {
                group: b.group.into(),
                version: b.version.into(),
                kind: b.kind.into(),
                list_kind: format!("{}List", b.kind),
                plural: b.plural.into(),
                singular: b.kind.to_ascii_lowercase(),
                namespaced: b.namespaced,
                short_names: b.short.iter().map(|s| s.to_string()).collect(),
                categories,
                verbs: if b.review {
                    vec!["create"]
                } else if b.readonly {
                    vec!["get", "list"]
                } else if b.plural == "namespaces" {
                    STD_VERBS.iter().copied().filter(|v| *v != "deletecollection").collect()
                } else {
                    STD_VERBS.to_vec()
                },
                status: b.status,
                scale: b.scale.then(|| ScaleDef {
                    spec_replicas_path: ".spec.replicas".into(),
                    status_replicas_path: ".status.replicas".into(),
                    label_selector_path: Some(".status.selector".into()),
                }),
                generation: b.generation,
                name_rule: b.name_rule,
                storage,
                conversion,
                schema,
                // Built-in kinds print with the apiserver's own printers (builtin::printers).
                columns: vec![],
                crd: None,
                storage_version: b.version.into(),
                storage_schema: None,
                field_labels,
                return_deleted_object: returns_deleted_object(b.group, b.plural),
                create_on_update: matches!(b.kind, "Endpoints" | "Event" | "Lease"),
                review: b.review,
            }
        })
        .collect()
}

/// Whether DELETE answers the deleted object (`true`) or a `Status` of `Success` naming it, for
/// an object that is gone at once: the registries whose `genericregistry.Store` sets
/// `ReturnDeletedObject: true` (kubernetes/kubernetes pkg/registry/*/*/storage/storage.go).
/// Custom resources (apiextensions-apiserver pkg/registry/customresource/etcd.go) do not. An
/// object that stays because finalizers or a grace period keep it is always answered.
pub fn returns_deleted_object(group: &str, resource: &str) -> bool {
    matches!(
        (group, resource),
        ("", "pods" | "services" | "serviceaccounts" | "namespaces" | "persistentvolumes" | "persistentvolumeclaims")
            | (
                "storage.k8s.io",
                "storageclasses" | "volumeattachments" | "csidrivers" | "csinodes" | "volumeattributesclasses"
            )
            | ("scheduling.k8s.io", "priorityclasses")
            | ("node.k8s.io", "runtimeclasses")
            | ("flowcontrol.apiserver.k8s.io", "flowschemas" | "prioritylevelconfigurations")
            | ("internal.apiserver.k8s.io", "storageversions")
            | ("networking.k8s.io", "ipaddresses" | "servicecidrs")
            | ("resource.k8s.io", _)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v2", "v1", "v1beta2", "v1beta1", "foo", "v10"];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(v, vec!["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }
}
