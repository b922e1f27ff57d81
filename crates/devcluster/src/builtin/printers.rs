//! Server-side printing of built-in kinds: the `columnDefinitions` and row `cells` the real
//! kube-apiserver answers for `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` (what
//! `kubectl get` prints).
//!
//! Mirrors kubernetes/kubernetes `pkg/printers/internalversion/printers.go` (v1.33): the column
//! definitions registered in `AddHandlers` and the `print*` functions computing each cell. The
//! apiserver's `TableConvertor` (`pkg/printers/storage`) always generates tables with
//! `GenerateOptions{Wide: true}`, so every row carries a cell for every column, the priority-1
//! ("wide") ones included, and values are never clipped for narrow output (a load balancer's
//! address list is printed whole). `kubectl` hides priority-1 columns unless `-o wide`.
//!
//! Cells are JSON values of the types upstream puts in them: strings, integers (`int64` cells
//! such as a Secret's DATA or a Deployment's UP-TO-DATE) and booleans (a StorageClass's
//! ALLOWVOLUMEEXPANSION). Durations and ages use [`crate::duration`] (`HumanDuration`).
//!
//! Upstream prints the internal (unversioned) type, obtained by decoding the stored object with
//! defaulting. Here the input is the object as served (JSON of the v1 type, already defaulted);
//! a missing field reads as Go's zero value, a field of the wrong JSON type as absent, and a
//! malformed timestamp as absent. Nothing panics on arbitrary JSON. Quantities (ResourceQuota,
//! PV/PVC capacity) are printed as the stored strings, which the server keeps canonical, so they
//! equal upstream's `Quantity.String()`; an absent quantity prints as the zero quantity `0`.
//!
//! Deliberate differences: upstream fails the whole request when a printer errors, which only
//! happens for a ControllerRevision whose controller owner reference has an `apiVersion` with
//! more than one `/`; here that owner is printed by name. A label selector mixing a `matchLabels`
//! entry and a `matchExpressions` entry on the same key is printed `matchLabels` first (upstream
//! sorts requirements by key with an unstable sort, which gives that order for small selectors).
//!
//! Besides the kinds of the devcluster registry, `autoscaling/v1` Scale (the `scale`
//! subresource) has its upstream printer here.
//!
//! Kinds the real server serves through the generic `rest.NewDefaultTableConvertor` (no printer
//! registered: Role, ClusterRole, LimitRange, CustomResourceDefinition, ...) get `None` from
//! [`columns`] and [`cells`]; [`default_columns`] and [`default_cells`] reproduce that generic
//! convertor (NAME, CREATED AT).
//!
//! `events.k8s.io/v1` Event is served by the same storage as core `v1` Event (the registry
//! `pkg/registry/events` reuses `pkg/registry/core/event/storage`), so it is printed by the same
//! `printEvent` after conversion to the internal type: `regarding` → `involvedObject`, `note` →
//! `message`, `deprecatedSource`/`deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/
//! `deprecatedCount` → `source`/`firstTimestamp`/`lastTimestamp`/`count`, `reportingController`
//! → `reportingComponent`. Its first column is LAST SEEN, not NAME (NAME is the last, wide
//! column), exactly as upstream.

use crate::duration::{age_since, human_duration_nanos, parse_rfc3339};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// One column definition of a Table (`metav1.TableColumnDefinition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// The column header, as upstream spells it (`kubectl` upper-cases it).
    pub name: &'static str,
    /// The OpenAPI type of the cells: `string`, `integer`, `boolean`, `date`.
    pub type_: &'static str,
    /// The OpenAPI format: `name` for the column holding the object name, else empty.
    pub format: &'static str,
    /// Human-readable description (upstream's text, sometimes shortened to its first sentence).
    pub description: &'static str,
    /// 0 for columns `kubectl get` shows, 1 for those only `-o wide` shows.
    pub priority: i64,
}

/// The column definitions of a built-in kind, exactly as upstream (names, types, formats,
/// priorities; description text may be shortened). `None` for kinds upstream has no printer for
/// (they are served by the generic convertor, see [`default_columns`]).
pub fn columns(group: &str, kind: &str) -> Option<Vec<Column>> {
    printer(group, kind).map(|p| p.columns.to_vec())
}

/// The cells of one row for an object of that kind (the object as served: JSON of the v1 type).
/// `now_unix` is the current time in unix seconds, for AGE/LAST SEEN cells. Always as many cells
/// as [`columns`] has entries. `None` for kinds without a printer.
pub fn cells(group: &str, kind: &str, obj: &Value, now_unix: i64) -> Option<Vec<Value>> {
    printer(group, kind).map(|p| (p.cells)(obj, now_unix))
}

/// The `conditions` of a row, when upstream sets them: a Pod in phase `Succeeded` or `Failed`
/// carries `[{"type": "Completed", "status": "True", "reason": <phase>, "message": ...}]`
/// (`podSuccessConditions` / `podFailedConditions`). `None` when the row has no conditions.
pub fn row_conditions(group: &str, kind: &str, obj: &Value) -> Option<Value> {
    if !group.is_empty() || kind != "Pod" {
        return None;
    }
    let message = match s(obj, &["status", "phase"]) {
        "Succeeded" => "The pod has completed successfully.",
        "Failed" => "The pod failed.",
        _ => return None,
    };
    Some(json!([{
        "type": "Completed",
        "status": "True",
        "reason": s(obj, &["status", "phase"]),
        "message": message,
    }]))
}

/// The columns of `rest.NewDefaultTableConvertor` (k8s.io/apiserver/pkg/registry/rest/table.go),
/// used by the real server for kinds without a printer (Role, ClusterRole, LimitRange,
/// CustomResourceDefinition).
pub fn default_columns() -> Vec<Column> {
    DEFAULT_COLUMNS.to_vec()
}

/// The cells of `rest.NewDefaultTableConvertor`: the name, and the creation timestamp formatted
/// as RFC 3339 in UTC without fractional seconds (Go's zero time, `0001-01-01T00:00:00Z`, when
/// absent).
pub fn default_cells(obj: &Value) -> Vec<Value> {
    let created = time(obj, &["metadata", "creationTimestamp"]).map_or(GO_ZERO_UNIX, |t| t.0);
    vec![name(obj).into(), format_rfc3339_utc(created).into()]
}

// ---------------------------------------------------------------------------------------------
// Registry of printers.

struct Printer {
    columns: &'static [Column],
    cells: fn(&Value, i64) -> Vec<Value>,
}

fn printer(group: &str, kind: &str) -> Option<Printer> {
    let p = |columns: &'static [Column], cells: fn(&Value, i64) -> Vec<Value>| Some(Printer { columns, cells });
    match (group, kind) {
        ("", "Namespace") => p(NAMESPACE, namespace_cells),
        ("", "ConfigMap") => p(CONFIG_MAP, config_map_cells),
        ("", "Secret") => p(SECRET, secret_cells),
        ("", "ServiceAccount") => p(SERVICE_ACCOUNT, service_account_cells),
        ("", "Service") => p(SERVICE, service_cells),
        ("", "Endpoints") => p(ENDPOINTS, endpoints_cells),
        ("", "Pod") => p(POD, pod_cells),
        ("", "Node") => p(NODE, node_cells),
        ("", "Event") => p(EVENT, core_event_cells),
        ("events.k8s.io", "Event") => p(EVENT, events_event_cells),
        ("", "ResourceQuota") => p(RESOURCE_QUOTA, resource_quota_cells),
        ("", "PersistentVolumeClaim") => p(PVC, pvc_cells),
        ("", "PersistentVolume") => p(PV, pv_cells),
        ("apps", "Deployment") => p(DEPLOYMENT, deployment_cells),
        ("apps", "ReplicaSet") => p(REPLICA_SET, replica_set_cells),
        ("", "ReplicationController") => p(REPLICATION_CONTROLLER, replication_controller_cells),
        ("", "ComponentStatus") => p(COMPONENT_STATUS, component_status_cells),
        ("apps", "StatefulSet") => p(STATEFUL_SET, stateful_set_cells),
        ("apps", "DaemonSet") => p(DAEMON_SET, daemon_set_cells),
        ("apps", "ControllerRevision") => p(CONTROLLER_REVISION, controller_revision_cells),
        ("batch", "Job") => p(JOB, job_cells),
        ("batch", "CronJob") => p(CRON_JOB, cron_job_cells),
        ("networking.k8s.io", "Ingress") => p(INGRESS, ingress_cells),
        ("networking.k8s.io", "IngressClass") => p(INGRESS_CLASS, ingress_class_cells),
        ("networking.k8s.io", "NetworkPolicy") => p(NETWORK_POLICY, network_policy_cells),
        ("discovery.k8s.io", "EndpointSlice") => p(ENDPOINT_SLICE, endpoint_slice_cells),
        ("coordination.k8s.io", "Lease") => p(LEASE, lease_cells),
        ("rbac.authorization.k8s.io", "RoleBinding") => p(ROLE_BINDING, role_binding_cells),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => p(CLUSTER_ROLE_BINDING, role_binding_cells),
        ("policy", "PodDisruptionBudget") => p(PDB, pdb_cells),
        ("storage.k8s.io", "StorageClass") => p(STORAGE_CLASS, storage_class_cells),
        ("autoscaling", "Scale") => p(SCALE, scale_cells),
        ("certificates.k8s.io", "CertificateSigningRequest") => p(CSR, csr_cells),
        ("apiregistration.k8s.io", "APIService") => p(API_SERVICE, api_service_cells),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Column definitions (AddHandlers).

const fn col(name: &'static str, type_: &'static str, description: &'static str) -> Column {
    Column { name, type_, format: "", description, priority: 0 }
}

const fn wide(name: &'static str, type_: &'static str, description: &'static str) -> Column {
    Column { name, type_, format: "", description, priority: 1 }
}

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATED_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CONTAINERS_DOC: &str = "Names of each container in the template.";
const IMAGES_DOC: &str = "Images referenced by each container in the template.";

const NAME: Column = Column { name: "Name", type_: "string", format: "name", description: NAME_DOC, priority: 0 };
const AGE: Column = col("Age", "string", CREATED_DOC);

const DEFAULT_COLUMNS: &[Column] = &[NAME, col("Created At", "date", CREATED_DOC)];

const POD: &[Column] = &[
    NAME,
    col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    col("Status", "string", "The aggregate status of the containers in this pod."),
    col(
        "Restarts",
        "string",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    wide(
        "IP",
        "string",
        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    ),
    wide(
        "Node",
        "string",
        "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName.",
    ),
    wide(
        "Nominated Node",
        "string",
        "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
    ),
    wide(
        "Readiness Gates",
        "string",
        "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\".",
    ),
];

const NAMESPACE: &[Column] = &[NAME, col("Status", "string", "The status of the namespace"), AGE];

const SECRET: &[Column] = &[
    NAME,
    col("Type", "string", "Used to facilitate programmatic handling of secret data."),
    col(
        "Data",
        "string",
        "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
    ),
    AGE,
];

const SERVICE_ACCOUNT: &[Column] = &[
    NAME,
    col(
        "Secrets",
        "string",
        "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
    ),
    AGE,
];

const CONFIG_MAP: &[Column] = &[
    NAME,
    col(
        "Data",
        "string",
        "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
    ),
    AGE,
];

const SERVICE: &[Column] = &[
    NAME,
    col(
        "Type",
        "string",
        "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer.",
    ),
    col("Cluster-IP", "string", "clusterIP is the IP address of the service and is usually assigned randomly."),
    col(
        "External-IP",
        "string",
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
    ),
    col("Port(s)", "string", "The list of ports that are exposed by this service."),
    AGE,
    wide("Selector", "string", "Route service traffic to pods with label keys and values matching this selector."),
];

const ENDPOINTS: &[Column] =
    &[NAME, col("Endpoints", "string", "The set of all endpoints is the union of all subsets."), AGE];

const NODE: &[Column] = &[
    NAME,
    col("Status", "string", "The status of the node"),
    col("Roles", "string", "The roles of the node"),
    AGE,
    col("Version", "string", "Kubelet Version reported by the node."),
    wide("Internal-IP", "string", "List of addresses reachable to the node."),
    wide("External-IP", "string", "List of addresses reachable to the node."),
    wide(
        "OS-Image",
        "string",
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    ),
    wide(
        "Kernel-Version",
        "string",
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    ),
    wide(
        "Container-Runtime",
        "string",
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    ),
];

const EVENT: &[Column] = &[
    col("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded."),
    col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future"),
    col(
        "Reason",
        "string",
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    col("Object", "string", "The object that this event is about."),
    wide(
        "Subobject",
        "string",
        "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2].",
    ),
    wide("Source", "string", "The component reporting this event. Should be a short machine understandable string."),
    col("Message", "string", "A human-readable description of the status of this operation."),
    wide(
        "First Seen",
        "string",
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    ),
    wide("Count", "string", "The number of times this event has occurred."),
    Column { name: "Name", type_: "string", format: "name", description: NAME_DOC, priority: 1 },
];

const RESOURCE_QUOTA: &[Column] = &[
    NAME,
    col("Request", "string", "Request represents a minimum amount of cpu/memory that a container may consume."),
    col(
        "Limit",
        "string",
        "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
    ),
    AGE,
];

const PV: &[Column] = &[
    NAME,
    col("Capacity", "string", "capacity is the description of the persistent volume's resources and capacity."),
    col("Access Modes", "string", "accessModes contains all ways the volume can be mounted."),
    col(
        "Reclaim Policy",
        "string",
        "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.",
    ),
    col("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
    col(
        "Claim",
        "string",
        "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.",
    ),
    col("StorageClass", "string", "StorageClass of the pv"),
    col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv"),
    col(
        "Reason",
        "string",
        "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.",
    ),
    AGE,
    wide(
        "VolumeMode",
        "string",
        "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.",
    ),
];

const PVC: &[Column] = &[
    NAME,
    col("Status", "string", "phase represents the current phase of PersistentVolumeClaim."),
    col("Volume", "string", "volumeName is the binding reference to the PersistentVolume backing this claim."),
    col("Capacity", "string", "capacity represents the actual resources of the underlying volume."),
    col("Access Modes", "string", "accessModes contains the actual access modes the volume backing the PVC has."),
    col("StorageClass", "string", "StorageClass of the pvc"),
    col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pvc"),
    AGE,
    wide("VolumeMode", "string", "volumeMode defines what type of volume is required by the claim."),
];

const DEPLOYMENT: &[Column] = &[
    NAME,
    col("Ready", "string", "Number of the pod with ready state"),
    col(
        "Up-to-date",
        "string",
        "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
    ),
    col(
        "Available",
        "string",
        "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    wide("Containers", "string", CONTAINERS_DOC),
    wide("Images", "string", IMAGES_DOC),
    wide(
        "Selector",
        "string",
        "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
    ),
];

const COMPONENT_STATUS: &[Column] = &[
    NAME,
    col("Status", "string", "Status of the component conditions"),
    col("Message", "string", "Message of the component conditions"),
    col("Error", "string", "Error of the component conditions"),
];

const REPLICATION_CONTROLLER: &[Column] = &[
    NAME,
    col("Desired", "integer", "Replicas is the number of desired replicas."),
    col("Current", "integer", "Replicas is the most recently observed number of replicas."),
    col("Ready", "integer", "The number of ready replicas for this replication controller."),
    AGE,
    wide("Containers", "string", CONTAINERS_DOC),
    wide("Images", "string", IMAGES_DOC),
    wide("Selector", "string", "Selector is a label query over pods that should match the Replicas count."),
];

const REPLICA_SET: &[Column] = &[
    NAME,
    col("Desired", "integer", "Replicas is the number of desired replicas."),
    col("Current", "integer", "Replicas is the most recently observed number of replicas."),
    col("Ready", "integer", "The number of ready replicas for this replica set."),
    AGE,
    wide("Containers", "string", CONTAINERS_DOC),
    wide("Images", "string", IMAGES_DOC),
    wide("Selector", "string", "Selector is a label query over pods that should match the replica count."),
];

const STATEFUL_SET: &[Column] = &[
    NAME,
    col("Ready", "string", "Number of the pod with ready state"),
    AGE,
    wide("Containers", "string", CONTAINERS_DOC),
    wide("Images", "string", IMAGES_DOC),
];

const DAEMON_SET: &[Column] = &[
    NAME,
    col(
        "Desired",
        "integer",
        "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).",
    ),
    col(
        "Current",
        "integer",
        "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
    ),
    col(
        "Ready",
        "integer",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
    ),
    col("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
    col(
        "Available",
        "integer",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
    ),
    col("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node."),
    AGE,
    wide("Containers", "string", CONTAINERS_DOC),
    wide("Images", "string", IMAGES_DOC),
    wide("Selector", "string", "A label query over pods that are managed by the daemon set."),
];

const CONTROLLER_REVISION: &[Column] = &[
    NAME,
    col("Controller", "string", "Controller of the object"),
    col("Revision", "string", "Revision indicates the revision of the state represented by Data."),
    AGE,
];

const JOB: &[Column] = &[
    NAME,
    col("Status", "string", "Status of the job."),
    col("Completions", "string", "The number of pods which reached phase Succeeded."),
    col("Duration", "string", "Time required to complete the job."),
    AGE,
    wide("Containers", "string", CONTAINERS_DOC),
    wide("Images", "string", IMAGES_DOC),
    wide("Selector", "string", "A label query over pods that should match the pod count."),
];

const API_SERVICE: &[Column] = &[
    NAME,
    col("Service", "string", "The reference to the service that hosts this API endpoint."),
    col("Available", "string", "Whether this service is available."),
    AGE,
];

const CSR: &[Column] = &[
    NAME,
    AGE,
    col("SignerName", "string", "signerName indicates the requested signer, and is a qualified name."),
    col(
        "Requestor",
        "string",
        "request contains an x509 certificate signing request encoded in a \"CERTIFICATE REQUEST\" PEM block.",
    ),
    col(
        "RequestedDuration",
        "string",
        "expirationSeconds is the requested duration of validity of the issued certificate.",
    ),
    col(
        "Condition",
        "string",
        "conditions applied to the request. Known conditions are \"Approved\", \"Denied\", and \"Failed\".",
    ),
];

const CRON_JOB: &[Column] = &[
    NAME,
    col("Schedule", "string", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
    col(
        "Timezone",
        "string",
        "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
    ),
    col(
        "Suspend",
        "boolean",
        "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.",
    ),
    col("Active", "integer", "A list of pointers to currently running jobs."),
    col("Last Schedule", "string", "Information when was the last time the job was successfully scheduled."),
    AGE,
    wide("Containers", "string", CONTAINERS_DOC),
    wide("Images", "string", IMAGES_DOC),
    wide("Selector", "string", "A label query over pods that should match the pod count."),
];

const INGRESS: &[Column] = &[
    NAME,
    col("Class", "string", "The name of the IngressClass resource that should be used for additional configuration"),
    col("Hosts", "string", "Hosts that incoming requests are matched against before the ingress rule"),
    col("Address", "string", "Address is a list containing ingress points for the load-balancer"),
    col("Ports", "string", "Ports of TLS configurations that open"),
    AGE,
];

const INGRESS_CLASS: &[Column] = &[
    NAME,
    col("Controller", "string", "Controller that is responsible for handling this class"),
    col("Parameters", "string", "A reference to a resource with additional parameters"),
    AGE,
];

const NETWORK_POLICY: &[Column] =
    &[NAME, col("Pod-Selector", "string", "Selects the pods to which this NetworkPolicy object applies."), AGE];

const ENDPOINT_SLICE: &[Column] = &[
    NAME,
    col("AddressType", "string", "addressType specifies the type of address carried by this EndpointSlice."),
    col("Ports", "string", "ports specifies the list of network ports exposed by each endpoint in this slice."),
    col("Endpoints", "string", "endpoints is a list of unique endpoints in this slice."),
    AGE,
];

const LEASE: &[Column] =
    &[NAME, col("Holder", "string", "holderIdentity contains the identity of the holder of a current lease."), AGE];

const ROLE_BINDING: &[Column] = &[
    NAME,
    col(
        "Role",
        "string",
        "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.",
    ),
    AGE,
    wide("Users", "string", "Users in the roleBinding"),
    wide("Groups", "string", "Groups in the roleBinding"),
    wide("ServiceAccounts", "string", "ServiceAccounts in the roleBinding"),
];

const CLUSTER_ROLE_BINDING: &[Column] = &[
    NAME,
    col("Role", "string", "RoleRef can only reference a ClusterRole in the global namespace."),
    AGE,
    wide("Users", "string", "Users in the clusterRoleBinding"),
    wide("Groups", "string", "Groups in the clusterRoleBinding"),
    wide("ServiceAccounts", "string", "ServiceAccounts in the clusterRoleBinding"),
];

const PDB: &[Column] = &[
    NAME,
    col("Min Available", "string", "The minimum number of pods that must be available."),
    col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
    col("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
    AGE,
];

const STORAGE_CLASS: &[Column] = &[
    NAME,
    col("Provisioner", "string", "provisioner indicates the type of the provisioner."),
    col(
        "ReclaimPolicy",
        "string",
        "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete.",
    ),
    col(
        "VolumeBindingMode",
        "string",
        "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.",
    ),
    col("AllowVolumeExpansion", "string", "allowVolumeExpansion shows whether the storage class allow volume expand."),
    AGE,
];

/// `autoscaling/v1` Scale (the `scale` subresource). Upstream gives its Name column no format.
const SCALE: &[Column] = &[
    col("Name", "string", NAME_DOC),
    col("Desired", "integer", "replicas is the desired number of instances for the scaled object."),
    col("Available", "integer", "replicas is the actual number of observed instances of the scaled object."),
    AGE,
];

// ---------------------------------------------------------------------------------------------
// JSON access with Go zero-value semantics.

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for key in path {
        cur = cur.as_object()?.get(*key)?;
    }
    if cur.is_null() { None } else { Some(cur) }
}

/// A string field; `""` when absent or not a string.
fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    at(v, path).and_then(Value::as_str).unwrap_or("")
}

/// An optional string field (a Go `*string`): `None` when absent, null or not a string.
fn opt_s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

/// An integer field; 0 when absent or not an integer.
fn int(v: &Value, path: &[&str]) -> i64 {
    at(v, path).and_then(Value::as_i64).unwrap_or(0)
}

/// An optional integer field (a Go `*int32`).
fn opt_int(v: &Value, path: &[&str]) -> Option<i64> {
    at(v, path).and_then(Value::as_i64)
}

fn boolean(v: &Value, path: &[&str]) -> bool {
    at(v, path).and_then(Value::as_bool).unwrap_or(false)
}

/// A list field; empty when absent or not an array.
fn arr<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// A map field (Go `map[string]...`); `None` when absent or not an object.
fn map<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Map<String, Value>> {
    at(v, path).and_then(Value::as_object)
}

/// Number of entries of a map field.
fn map_len(v: &Value, path: &[&str]) -> i64 {
    map(v, path).map_or(0, |m| len_i64(m.len()))
}

/// Whether a pointer/struct field is set (present and not null): Go's `!= nil`.
fn present(v: &Value, path: &[&str]) -> bool {
    at(v, path).is_some()
}

/// Whether a pointer-to-struct field is set to an object.
fn obj_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    at(v, path).filter(|x| x.is_object())
}

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn name(obj: &Value) -> &str {
    s(obj, &["metadata", "name"])
}

/// A `resource.Quantity` as printed by `Quantity.String()`: the stored (canonical) string;
/// the zero quantity `"0"` when absent.
fn quantity(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(q)) => q.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Time.

/// Unix seconds of Go's zero `time.Time` (0001-01-01T00:00:00Z).
const GO_ZERO_UNIX: i64 = -62_135_596_800;

/// A parsed timestamp (unix seconds, nanoseconds). `None` stands for Go's zero time.
type Time = Option<(i64, u32)>;

/// A `metav1.Time` / `metav1.MicroTime` field: `None` (zero) when absent, malformed, or the zero
/// time itself.
fn time(v: &Value, path: &[&str]) -> Time {
    let t = parse_rfc3339(at(v, path)?.as_str()?)?;
    if t == (GO_ZERO_UNIX, 0) { None } else { Some(t) }
}

/// `translateTimestampSince`: `<unknown>` for the zero time, else `HumanDuration(now - t)`.
fn since(t: Time, now: i64) -> String {
    match t {
        Some((secs, nanos)) => age_since(secs, nanos, now),
        None => "<unknown>".to_string(),
    }
}

fn age(obj: &Value, now: i64) -> Value {
    since(time(obj, &["metadata", "creationTimestamp"]), now).into()
}

/// Nanoseconds from `a` to `b` (`b.Sub(a)`), saturating like Go's `Time.Sub`.
fn nanos_between(a: (i64, u32), b: (i64, u32)) -> i64 {
    let to_n = |t: (i64, u32)| i128::from(t.0) * 1_000_000_000 + i128::from(t.1);
    let d = to_n(b) - to_n(a);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

/// RFC 3339 in UTC without fractional seconds (Go's `time.RFC3339` layout on a UTC time).
fn format_rfc3339_utc(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let rem = unix.rem_euclid(86_400);
    // civil_from_days (Howard Hinnant), valid over the whole i64 range of days used here.
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe.saturating_add(era.saturating_mul(400)).saturating_add(i64::from(m <= 2));
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", y, m, d, rem / 3600, rem / 60 % 60, rem % 60)
}

// ---------------------------------------------------------------------------------------------
// Shared formatting helpers.

/// `labels.FormatLabels`: `k=v` pairs sorted by key, comma-separated; `<none>` when empty.
fn format_labels(m: Option<&Map<String, Value>>) -> String {
    let mut pairs: Vec<(&str, &str)> =
        m.into_iter().flatten().filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v))).collect();
    if pairs.is_empty() {
        return "<none>".to_string();
    }
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// `layoutContainerCells`: container names and images, comma-separated.
fn layout_containers(containers: &[Value]) -> (String, String) {
    let names: Vec<&str> = containers.iter().map(|c| s(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| s(c, &["image"])).collect();
    (names.join(","), images.join(","))
}

/// `printBoolPtr`: `True`/`False`, `<unset>` for nil.
fn bool_ptr(v: Option<&Value>) -> String {
    match v.and_then(Value::as_bool) {
        Some(true) => "True".to_string(),
        Some(false) => "False".to_string(),
        None => "<unset>".to_string(),
    }
}

/// `intstr.IntOrString.String()`.
fn int_or_string(v: &Value) -> String {
    match v {
        Value::String(x) => x.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// `sets.NewString(...).List()` of load-balancer ingress points joined with `,` (the IP, else
/// the hostname, of each entry; sorted and de-duplicated). Never clipped: the apiserver prints
/// tables with `Wide: true`.
fn load_balancer_ingress(entries: &[Value]) -> String {
    let set: BTreeSet<&str> = entries
        .iter()
        .filter_map(|e| {
            let ip = s(e, &["ip"]);
            let host = s(e, &["hostname"]);
            if !ip.is_empty() {
                Some(ip)
            } else if !host.is_empty() {
                Some(host)
            } else {
                None
            }
        })
        .collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// `listWithMoreString`.
fn list_with_more(list: &[String], more: bool, count: usize, max: usize) -> String {
    let ret = list.join(",");
    if more {
        return format!("{} + {} more...", ret, count.saturating_sub(max));
    }
    if ret.is_empty() { "<unset>".to_string() } else { ret }
}

// ---------------------------------------------------------------------------------------------
// Label selectors (metav1.LabelSelectorAsSelector, labels.Selector.String()).

/// `metav1.FormatLabelSelector` of a `*LabelSelector` field: `<error>` for an invalid selector,
/// `<none>` for an empty (or nil) one.
fn format_label_selector(sel: Option<&Value>) -> String {
    match selector_string(sel) {
        Err(()) => "<error>".to_string(),
        Ok(s) if s.is_empty() => "<none>".to_string(),
        Ok(s) => s,
    }
}

/// `metav1.LabelSelectorAsSelector(sel).String()`. A nil selector is `labels.Nothing()` and an
/// empty one `labels.Everything()`; both print as `""`. Requirements are sorted by key (stably:
/// `matchLabels` first, as Go's insertion sort leaves them for small selectors), and the values of
/// `in`/`notin` are printed sorted.
fn selector_string(sel: Option<&Value>) -> Result<String, ()> {
    let Some(sel) = sel else { return Ok(String::new()) };
    let sel = sel.as_object().ok_or(())?;
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(ml) = sel.get("matchLabels").filter(|v| !v.is_null()) {
        for (k, v) in ml.as_object().ok_or(())? {
            let v = v.as_str().ok_or(())?;
            if !is_qualified_name(k) || !is_label_value(v) {
                return Err(());
            }
            reqs.push((k.clone(), format!("{k}={v}")));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").filter(|v| !v.is_null()) {
        for e in exprs.as_array().ok_or(())? {
            let key = s(e, &["key"]);
            let mut values = Vec::new();
            for v in arr(e, &["values"]) {
                values.push(v.as_str().ok_or(())?);
            }
            if !is_qualified_name(key) || !values.iter().all(|v| is_label_value(v)) {
                return Err(());
            }
            let text = match s(e, &["operator"]) {
                op @ ("In" | "NotIn") => {
                    if values.is_empty() {
                        return Err(());
                    }
                    values.sort_unstable();
                    let word = if op == "In" { "in" } else { "notin" };
                    format!("{key} {word} ({})", values.join(","))
                }
                "Exists" if values.is_empty() => key.to_string(),
                "DoesNotExist" if values.is_empty() => format!("!{key}"),
                _ => return Err(()),
            };
            reqs.push((key.to_string(), text));
        }
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(","))
}

/// `validation.IsQualifiedName`: `[prefix/]name`, prefix a DNS-1123 subdomain, name at most 63
/// characters of `[-A-Za-z0-9_.]` starting and ending alphanumeric.
fn is_qualified_name(s: &str) -> bool {
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if !is_dns1123_subdomain(prefix) {
                return false;
            }
            *name
        }
        _ => return false,
    };
    !name.is_empty() && name.len() <= 63 && is_qname_body(name)
}

fn is_qname_body(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `validation.IsValidLabelValue`: empty, or at most 63 characters shaped like a qualified name.
fn is_label_value(s: &str) -> bool {
    s.is_empty() || (s.len() <= 63 && is_qname_body(s))
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            match (b.first(), b.last()) {
                (Some(f), Some(l)) => alnum(f) && alnum(l) && b.iter().all(|c| alnum(c) || *c == b'-'),
                _ => false,
            }
        })
}

// ---------------------------------------------------------------------------------------------
// core/v1

fn namespace_cells(obj: &Value, now: i64) -> Vec<Value> {
    vec![name(obj).into(), s(obj, &["status", "phase"]).into(), age(obj, now)]
}

fn config_map_cells(obj: &Value, now: i64) -> Vec<Value> {
    let n = map_len(obj, &["data"]).saturating_add(map_len(obj, &["binaryData"]));
    vec![name(obj).into(), n.into(), age(obj, now)]
}

fn secret_cells(obj: &Value, now: i64) -> Vec<Value> {
    vec![name(obj).into(), s(obj, &["type"]).into(), map_len(obj, &["data"]).into(), age(obj, now)]
}

fn service_account_cells(obj: &Value, now: i64) -> Vec<Value> {
    vec![name(obj).into(), len_i64(arr(obj, &["secrets"]).len()).into(), age(obj, now)]
}

/// `getServiceExternalIP` (wide).
fn service_external_ip(svc: &Value) -> String {
    let external: Vec<&str> = arr(svc, &["spec", "externalIPs"]).iter().filter_map(Value::as_str).collect();
    match s(svc, &["spec", "type"]) {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".to_string()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let lb = load_balancer_ingress(arr(svc, &["status", "loadBalancer", "ingress"]));
            if !external.is_empty() {
                let mut results: Vec<&str> = Vec::new();
                if !lb.is_empty() {
                    results.extend(lb.split(','));
                }
                results.extend(external.iter().copied());
                return results.join(",");
            }
            if lb.is_empty() { "<pending>".to_string() } else { lb }
        }
        "ExternalName" => s(svc, &["spec", "externalName"]).to_string(),
        _ => "<unknown>".to_string(),
    }
}

/// `makePortString`: `port/protocol`, or `port:nodePort/protocol`.
fn service_ports(ports: &[Value]) -> String {
    ports
        .iter()
        .map(|p| {
            let port = int(p, &["port"]);
            let proto = s(p, &["protocol"]);
            let node_port = int(p, &["nodePort"]);
            if node_port > 0 { format!("{port}:{node_port}/{proto}") } else { format!("{port}/{proto}") }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn service_cells(obj: &Value, now: i64) -> Vec<Value> {
    let cluster_ip = arr(obj, &["spec", "clusterIPs"]).first().and_then(Value::as_str).unwrap_or("<none>");
    let mut ports = service_ports(arr(obj, &["spec", "ports"]));
    if ports.is_empty() {
        ports = "<none>".to_string();
    }
    vec![
        name(obj).into(),
        s(obj, &["spec", "type"]).into(),
        cluster_ip.into(),
        service_external_ip(obj).into(),
        ports.into(),
        age(obj, now),
        format_labels(map(obj, &["spec", "selector"])).into(),
    ]
}

/// `net.JoinHostPort`.
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// `formatEndpoints(endpoints, nil)`: at most three `ip:port`, then `+ N more...`.
fn format_endpoints(obj: &Value) -> String {
    let subsets = arr(obj, &["subsets"]);
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count: usize = 0;
    for ss in subsets {
        let ports = arr(ss, &["ports"]);
        let addresses = arr(ss, &["addresses"]);
        if ports.is_empty() {
            count = count.saturating_add(addresses.len());
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(s(a, &["ip"]).to_string());
            }
            continue;
        }
        for port in ports {
            count = count.saturating_add(addresses.len());
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(s(a, &["ip"]), int(port, &["port"])));
            }
        }
    }
    let ret = list.join(",");
    if more { format!("{} + {} more...", ret, count.saturating_sub(MAX)) } else { ret }
}

fn endpoints_cells(obj: &Value, now: i64) -> Vec<Value> {
    vec![name(obj).into(), format_endpoints(obj).into(), age(obj, now)]
}

/// `podutil.IsRestartableInitContainer` of the spec init container named `name` (the last one
/// of that name, as upstream builds a map keyed by name).
fn is_restartable_init(init_specs: &[Value], container_name: &str) -> bool {
    init_specs
        .iter()
        .rev()
        .find(|c| s(c, &["name"]) == container_name)
        .is_some_and(|c| s(c, &["restartPolicy"]) == "Always")
}

/// `printPod`: READY, STATUS (with upstream's reason logic), RESTARTS (`N (5m ago)`), ...
fn pod_cells(pod: &Value, now: i64) -> Vec<Value> {
    let init_specs = arr(pod, &["spec", "initContainers"]);
    let init_statuses = arr(pod, &["status", "initContainerStatuses"]);
    let statuses = arr(pod, &["status", "containerStatuses"]);
    let conditions = arr(pod, &["status", "conditions"]);

    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut total = len_i64(arr(pod, &["spec", "containers"]).len());
    let mut ready: i64 = 0;
    let mut last_restart: Time = None;
    let mut last_restartable_restart: Time = None;

    let phase = s(pod, &["status", "phase"]);
    let mut reason = phase.to_string();
    let status_reason = s(pod, &["status", "reason"]);
    if !status_reason.is_empty() {
        reason = status_reason.to_string();
    }
    for c in conditions {
        if s(c, &["type"]) == "PodScheduled" && s(c, &["reason"]) == "SchedulingGated" {
            reason = "SchedulingGated".to_string();
        }
    }

    total = total.saturating_add(len_i64(init_specs.iter().filter(|c| s(c, &["restartPolicy"]) == "Always").count()));

    let last_terminated =
        |c: &Value| -> Option<Time> { obj_at(c, &["lastState", "terminated"]).map(|t| time(t, &["finishedAt"])) };

    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        let count = int(c, &["restartCount"]);
        restarts = restarts.saturating_add(count);
        let finished = last_terminated(c);
        if let Some(t) = finished
            && t > last_restart
        {
            last_restart = t;
        }
        let restartable = is_restartable_init(init_specs, s(c, &["name"]));
        if restartable {
            restartable_restarts = restartable_restarts.saturating_add(count);
            if let Some(t) = finished
                && t > last_restartable_restart
            {
                last_restartable_restart = t;
            }
        }
        let terminated = obj_at(c, &["state", "terminated"]);
        let waiting = obj_at(c, &["state", "waiting"]);
        if let Some(t) = terminated
            && int(t, &["exitCode"]) == 0
        {
            continue;
        }
        if restartable && at(c, &["started"]).and_then(Value::as_bool) == Some(true) {
            if boolean(c, &["ready"]) {
                ready = ready.saturating_add(1);
            }
            continue;
        }
        if let Some(t) = terminated {
            let r = s(t, &["reason"]);
            reason = if r.is_empty() {
                let signal = int(t, &["signal"]);
                if signal != 0 {
                    format!("Init:Signal:{signal}")
                } else {
                    format!("Init:ExitCode:{}", int(t, &["exitCode"]))
                }
            } else {
                format!("Init:{r}")
            };
        } else if let Some(w) = waiting
            && !s(w, &["reason"]).is_empty()
            && s(w, &["reason"]) != "PodInitializing"
        {
            reason = format!("Init:{}", s(w, &["reason"]));
        } else {
            reason = format!("Init:{}/{}", i, init_specs.len());
        }
        initializing = true;
        break;
    }

    let initialized =
        conditions.iter().find(|c| s(c, &["type"]) == "Initialized").is_some_and(|c| s(c, &["status"]) == "True");
    if !initializing || initialized {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        for c in statuses.iter().rev() {
            restarts = restarts.saturating_add(int(c, &["restartCount"]));
            if let Some(t) = last_terminated(c)
                && t > last_restart
            {
                last_restart = t;
            }
            let waiting = obj_at(c, &["state", "waiting"]);
            let terminated = obj_at(c, &["state", "terminated"]);
            if let Some(w) = waiting
                && !s(w, &["reason"]).is_empty()
            {
                reason = s(w, &["reason"]).to_string();
            } else if let Some(t) = terminated {
                let r = s(t, &["reason"]);
                reason = if !r.is_empty() {
                    r.to_string()
                } else {
                    let signal = int(t, &["signal"]);
                    if signal != 0 { format!("Signal:{signal}") } else { format!("ExitCode:{}", int(t, &["exitCode"])) }
                };
            } else if boolean(c, &["ready"]) && obj_at(c, &["state", "running"]).is_some() {
                has_running = true;
                ready = ready.saturating_add(1);
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = conditions.iter().any(|c| s(c, &["type"]) == "Ready" && s(c, &["status"]) == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_string();
        }
    }

    let deleting = present(pod, &["metadata", "deletionTimestamp"]);
    if deleting && status_reason == "NodeLost" {
        reason = "Unknown".to_string();
    } else if deleting && phase != "Failed" && phase != "Succeeded" {
        reason = "Terminating".to_string();
    }

    let restarts_str = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    let or_none = |v: &str| if v.is_empty() { "<none>".to_string() } else { v.to_string() };
    let pod_ip = arr(pod, &["status", "podIPs"]).first().map_or("", |ip| s(ip, &["ip"]));
    let gates = arr(pod, &["spec", "readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_conditions = gates
            .iter()
            .filter(|g| {
                let ty = s(g, &["conditionType"]);
                conditions.iter().find(|c| s(c, &["type"]) == ty).is_some_and(|c| s(c, &["status"]) == "True")
            })
            .count();
        format!("{}/{}", true_conditions, gates.len())
    };

    vec![
        name(pod).into(),
        format!("{ready}/{total}").into(),
        reason.into(),
        restarts_str.into(),
        age(pod, now),
        or_none(pod_ip).into(),
        or_none(s(pod, &["spec", "nodeName"])).into(),
        or_none(s(pod, &["status", "nominatedNodeName"])).into(),
        readiness_gates.into(),
    ]
}

/// `findNodeRoles`: `node-role.kubernetes.io/<role>` label keys and the `kubernetes.io/role`
/// label value, sorted and de-duplicated.
fn node_roles(node: &Value) -> String {
    let mut roles = BTreeSet::new();
    for (k, v) in map(node, &["metadata", "labels"]).into_iter().flatten() {
        if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.insert(role);
            }
        } else if k == "kubernetes.io/role"
            && let Some(v) = v.as_str().filter(|v| !v.is_empty())
        {
            roles.insert(v);
        }
    }
    if roles.is_empty() { "<none>".to_string() } else { roles.into_iter().collect::<Vec<_>>().join(",") }
}

fn node_cells(node: &Value, now: i64) -> Vec<Value> {
    // The last condition of type Ready wins (upstream fills a map keyed by type).
    let ready = arr(node, &["status", "conditions"]).iter().rev().find(|c| s(c, &["type"]) == "Ready");
    let mut status = vec![match ready {
        Some(c) if s(c, &["status"]) == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if boolean(node, &["spec", "unschedulable"]) {
        status.push("SchedulingDisabled");
    }
    let address = |ty: &str| -> String {
        arr(node, &["status", "addresses"])
            .iter()
            .find(|a| s(a, &["type"]) == ty)
            .map_or_else(|| "<none>".to_string(), |a| s(a, &["address"]).to_string())
    };
    let info = |field: &str| -> Value {
        let v = s(node, &["status", "nodeInfo", field]);
        if v.is_empty() { "<unknown>".into() } else { v.into() }
    };
    vec![
        name(node).into(),
        status.join(",").into(),
        node_roles(node).into(),
        age(node, now),
        s(node, &["status", "nodeInfo", "kubeletVersion"]).into(),
        address("InternalIP").into(),
        address("ExternalIP").into(),
        info("osImage"),
        info("kernelVersion"),
        info("containerRuntimeVersion"),
    ]
}

/// The fields `printEvent` reads, after conversion to the internal type.
struct EventView<'a> {
    obj: &'a Value,
    involved: &'a str,
    message: &'a str,
    source: &'a str,
    first: &'a str,
    last: &'a str,
    count: &'a str,
    reporting_controller: &'a str,
}

fn core_event_cells(obj: &Value, now: i64) -> Vec<Value> {
    event_cells(
        &EventView {
            obj,
            involved: "involvedObject",
            message: "message",
            source: "source",
            first: "firstTimestamp",
            last: "lastTimestamp",
            count: "count",
            reporting_controller: "reportingComponent",
        },
        now,
    )
}

fn events_event_cells(obj: &Value, now: i64) -> Vec<Value> {
    event_cells(
        &EventView {
            obj,
            involved: "regarding",
            message: "note",
            source: "deprecatedSource",
            first: "deprecatedFirstTimestamp",
            last: "deprecatedLastTimestamp",
            count: "deprecatedCount",
            reporting_controller: "reportingController",
        },
        now,
    )
}

/// `printEvent` (wide).
fn event_cells(e: &EventView<'_>, now: i64) -> Vec<Value> {
    let obj = e.obj;
    let first_time = time(obj, &[e.first]);
    let first = if first_time.is_none() { since(time(obj, &["eventTime"]), now) } else { since(first_time, now) };
    let last_time = time(obj, &[e.last]);
    let mut last = if last_time.is_none() { first.clone() } else { since(last_time, now) };
    let mut count = int(obj, &[e.count]);
    if let Some(series) = at(obj, &["series"]) {
        last = since(time(series, &["lastObservedTime"]), now);
        count = int(series, &["count"]);
    } else if count == 0 {
        count = 1;
    }
    let kind = s(obj, &[e.involved, "kind"]).to_lowercase();
    let involved_name = s(obj, &[e.involved, "name"]);
    let target = if involved_name.is_empty() { kind } else { format!("{kind}/{involved_name}") };
    let component = first_non_empty(s(obj, &[e.source, "component"]), s(obj, &[e.reporting_controller]));
    let instance = first_non_empty(s(obj, &[e.source, "host"]), s(obj, &["reportingInstance"]));
    let source = if instance.is_empty() { component.to_string() } else { format!("{component}, {instance}") };
    vec![
        last.into(),
        s(obj, &["type"]).into(),
        s(obj, &["reason"]).into(),
        target.into(),
        s(obj, &[e.involved, "fieldPath"]).into(),
        source.into(),
        s(obj, &[e.message]).trim().into(),
        first.into(),
        count.into(),
        name(obj).into(),
    ]
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

/// `printResourceQuota`: `resource: used/hard` for each hard limit, sorted by resource name;
/// `limits.*` resources go to the LIMIT column, everything else to REQUEST.
fn resource_quota_cells(obj: &Value, now: i64) -> Vec<Value> {
    let hard = map(obj, &["status", "hard"]);
    let used = map(obj, &["status", "used"]);
    let mut resources: Vec<&String> = hard.into_iter().flat_map(|m| m.keys()).collect();
    resources.sort();
    let mut request: Vec<String> = Vec::new();
    let mut limit: Vec<String> = Vec::new();
    for r in resources {
        let u = quantity(used.and_then(|m| m.get(r.as_str())).filter(|v| !v.is_null()));
        let h = quantity(hard.and_then(|m| m.get(r.as_str())).filter(|v| !v.is_null()));
        let entry = format!("{r}: {u}/{h}");
        let mut pieces = r.split('.');
        let is_limit = pieces.next() == Some("limits") && pieces.next().is_some();
        if is_limit { limit.push(entry) } else { request.push(entry) }
    }
    vec![name(obj).into(), request.join(", ").into(), limit.join(", ").into(), age(obj, now)]
}

/// `helper.GetAccessModesAsString`: RWO, ROX, RWX, RWOP in that order, each at most once.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP")]
        .iter()
        .filter(|(m, _)| has(m))
        .map(|(_, short)| *short)
        .collect::<Vec<_>>()
        .join(",")
}

const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

fn beta_storage_class(obj: &Value) -> Option<&str> {
    map(obj, &["metadata", "annotations"])
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
        .map(|v| v.as_str().unwrap_or(""))
}

fn pv_cells(obj: &Value, now: i64) -> Vec<Value> {
    let claim = match obj_at(obj, &["spec", "claimRef"]) {
        Some(c) => format!("{}/{}", s(c, &["namespace"]), s(c, &["name"])),
        None => String::new(),
    };
    let phase =
        if present(obj, &["metadata", "deletionTimestamp"]) { "Terminating" } else { s(obj, &["status", "phase"]) };
    let class = beta_storage_class(obj).unwrap_or_else(|| s(obj, &["spec", "storageClassName"]));
    vec![
        name(obj).into(),
        quantity(at(obj, &["spec", "capacity", "storage"])).into(),
        access_modes(arr(obj, &["spec", "accessModes"])).into(),
        s(obj, &["spec", "persistentVolumeReclaimPolicy"]).into(),
        phase.into(),
        claim.into(),
        class.into(),
        opt_s(obj, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>").into(),
        s(obj, &["status", "reason"]).into(),
        age(obj, now),
        opt_s(obj, &["spec", "volumeMode"]).unwrap_or("<unset>").into(),
    ]
}

fn pvc_cells(obj: &Value, now: i64) -> Vec<Value> {
    let phase =
        if present(obj, &["metadata", "deletionTimestamp"]) { "Terminating" } else { s(obj, &["status", "phase"]) };
    let volume = s(obj, &["spec", "volumeName"]);
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (quantity(at(obj, &["status", "capacity", "storage"])), access_modes(arr(obj, &["status", "accessModes"])))
    };
    let class = beta_storage_class(obj).unwrap_or_else(|| s(obj, &["spec", "storageClassName"]));
    vec![
        name(obj).into(),
        phase.into(),
        volume.into(),
        capacity.into(),
        modes.into(),
        class.into(),
        opt_s(obj, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>").into(),
        age(obj, now),
        opt_s(obj, &["spec", "volumeMode"]).unwrap_or("<unset>").into(),
    ]
}

// ---------------------------------------------------------------------------------------------
// apps/v1

fn template_containers(obj: &Value) -> (String, String) {
    layout_containers(arr(obj, &["spec", "template", "spec", "containers"]))
}

fn deployment_cells(obj: &Value, now: i64) -> Vec<Value> {
    let (containers, images) = template_containers(obj);
    let selector = selector_string(at(obj, &["spec", "selector"])).unwrap_or_else(|()| "<invalid>".to_string());
    vec![
        name(obj).into(),
        format!("{}/{}", int(obj, &["status", "readyReplicas"]), int(obj, &["spec", "replicas"])).into(),
        int(obj, &["status", "updatedReplicas"]).into(),
        int(obj, &["status", "availableReplicas"]).into(),
        age(obj, now),
        containers.into(),
        images.into(),
        selector.into(),
    ]
}

fn replica_set_cells(obj: &Value, now: i64) -> Vec<Value> {
    let (containers, images) = template_containers(obj);
    vec![
        name(obj).into(),
        int(obj, &["spec", "replicas"]).into(),
        int(obj, &["status", "replicas"]).into(),
        int(obj, &["status", "readyReplicas"]).into(),
        age(obj, now),
        containers.into(),
        images.into(),
        format_label_selector(at(obj, &["spec", "selector"])).into(),
    ]
}

/// `printComponentStatus`: the Healthy condition's status, message and error.
fn component_status_cells(obj: &Value, _now: i64) -> Vec<Value> {
    let healthy = arr(obj, &["conditions"]).iter().find(|c| s(c, &["type"]) == "Healthy");
    let (status, message, error) = match healthy {
        None => ("Unknown", "", ""),
        Some(c) => {
            (if s(c, &["status"]) == "True" { "Healthy" } else { "Unhealthy" }, s(c, &["message"]), s(c, &["error"]))
        }
    };
    vec![name(obj).into(), status.into(), message.into(), error.into()]
}

/// `printReplicationController`: a ReplicaSet's row, the selector a plain label map.
fn replication_controller_cells(obj: &Value, now: i64) -> Vec<Value> {
    let (containers, images) = template_containers(obj);
    vec![
        name(obj).into(),
        int(obj, &["spec", "replicas"]).into(),
        int(obj, &["status", "replicas"]).into(),
        int(obj, &["status", "readyReplicas"]).into(),
        age(obj, now),
        containers.into(),
        images.into(),
        format_labels(map(obj, &["spec", "selector"])).into(),
    ]
}

fn stateful_set_cells(obj: &Value, now: i64) -> Vec<Value> {
    let (containers, images) = template_containers(obj);
    vec![
        name(obj).into(),
        format!("{}/{}", int(obj, &["status", "readyReplicas"]), int(obj, &["spec", "replicas"])).into(),
        age(obj, now),
        containers.into(),
        images.into(),
    ]
}

fn daemon_set_cells(obj: &Value, now: i64) -> Vec<Value> {
    let (containers, images) = template_containers(obj);
    vec![
        name(obj).into(),
        int(obj, &["status", "desiredNumberScheduled"]).into(),
        int(obj, &["status", "currentNumberScheduled"]).into(),
        int(obj, &["status", "numberReady"]).into(),
        int(obj, &["status", "updatedNumberScheduled"]).into(),
        int(obj, &["status", "numberAvailable"]).into(),
        format_labels(map(obj, &["spec", "template", "spec", "nodeSelector"])).into(),
        age(obj, now),
        containers.into(),
        images.into(),
        format_label_selector(at(obj, &["spec", "selector"])).into(),
    ]
}

/// `printControllerRevision`: CONTROLLER is `kind.group/name` of the controller owner reference.
///
/// Deliberate difference: an owner `apiVersion` with more than one `/` makes upstream fail the
/// whole request (`schema.ParseGroupVersion` error); here the owner is printed without its kind.
fn controller_revision_cells(obj: &Value, now: i64) -> Vec<Value> {
    let owner = arr(obj, &["metadata", "ownerReferences"]).iter().find(|r| boolean(r, &["controller"]));
    let controller = match owner {
        None => "<none>".to_string(),
        Some(r) => {
            let owner_name = s(r, &["name"]);
            let api_version = s(r, &["apiVersion"]);
            let group = if api_version.is_empty() || api_version == "/" {
                Some("")
            } else {
                match api_version.matches('/').count() {
                    0 => Some(""),
                    1 => api_version.split('/').next(),
                    _ => None,
                }
            };
            let kind = s(r, &["kind"]);
            match group {
                Some(g) if !(g.is_empty() && kind.is_empty()) => {
                    let gk = if g.is_empty() { kind.to_string() } else { format!("{kind}.{g}") };
                    format!("{}/{}", gk.to_lowercase(), owner_name)
                }
                _ => owner_name.to_string(),
            }
        }
    };
    vec![name(obj).into(), controller.into(), int(obj, &["revision"]).into(), age(obj, now)]
}

// ---------------------------------------------------------------------------------------------
// batch/v1

/// `hasJobCondition`: the first condition of that type decides.
fn has_job_condition(obj: &Value, ty: &str) -> bool {
    arr(obj, &["status", "conditions"])
        .iter()
        .find(|c| s(c, &["type"]) == ty)
        .is_some_and(|c| s(c, &["status"]) == "True")
}

fn job_cells(obj: &Value, now: i64) -> Vec<Value> {
    let succeeded = int(obj, &["status", "succeeded"]);
    let completions = match opt_int(obj, &["spec", "completions"]) {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let parallelism = opt_int(obj, &["spec", "parallelism"]).unwrap_or(0);
            if parallelism > 1 { format!("{succeeded}/1 of {parallelism}") } else { format!("{succeeded}/1") }
        }
    };
    // A nil startTime prints nothing; Go's zero time (which `time` maps to None) would print an
    // enormous duration upstream and cannot be stored by the real server.
    let start = time(obj, &["status", "startTime"]);
    let completion = time(obj, &["status", "completionTime"]);
    let duration = match (start, completion) {
        (None, _) => String::new(),
        (Some(st), None) => human_duration_nanos(nanos_between(st, (now, 0))),
        (Some(st), Some(ct)) => human_duration_nanos(nanos_between(st, ct)),
    };
    let status = if has_job_condition(obj, "Complete") {
        "Complete"
    } else if has_job_condition(obj, "Failed") {
        "Failed"
    } else if present(obj, &["metadata", "deletionTimestamp"]) {
        "Terminating"
    } else if has_job_condition(obj, "Suspended") {
        "Suspended"
    } else if has_job_condition(obj, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (containers, images) = template_containers(obj);
    vec![
        name(obj).into(),
        status.into(),
        completions.into(),
        duration.into(),
        age(obj, now),
        containers.into(),
        images.into(),
        format_label_selector(at(obj, &["spec", "selector"])).into(),
    ]
}

fn cron_job_cells(obj: &Value, now: i64) -> Vec<Value> {
    let last_schedule = if present(obj, &["status", "lastScheduleTime"]) {
        since(time(obj, &["status", "lastScheduleTime"]), now)
    } else {
        "<none>".to_string()
    };
    let job_spec = at(obj, &["spec", "jobTemplate", "spec"]).unwrap_or(&Value::Null);
    let (containers, images) = layout_containers(arr(job_spec, &["template", "spec", "containers"]));
    vec![
        name(obj).into(),
        s(obj, &["spec", "schedule"]).into(),
        opt_s(obj, &["spec", "timeZone"]).unwrap_or("<none>").into(),
        bool_ptr(at(obj, &["spec", "suspend"])).into(),
        len_i64(arr(obj, &["status", "active"]).len()).into(),
        last_schedule.into(),
        age(obj, now),
        containers.into(),
        images.into(),
        format_label_selector(at(job_spec, &["selector"])).into(),
    ]
}

// ---------------------------------------------------------------------------------------------
// apiregistration.k8s.io/v1

/// kube-aggregator's APIService table convertor (pkg/registry/apiservice/etcd): SERVICE is
/// `Local` or `namespace/name`; AVAILABLE the Available condition's status, with its reason
/// when not True.
fn api_service_cells(obj: &Value, now: i64) -> Vec<Value> {
    let service = match obj_at(obj, &["spec", "service"]) {
        Some(svc) => format!("{}/{}", s(svc, &["namespace"]), s(svc, &["name"])),
        None => "Local".to_string(),
    };
    let available = arr(obj, &["status", "conditions"])
        .iter()
        .find(|c| s(c, &["type"]) == "Available")
        .map(|c| match (s(c, &["status"]), s(c, &["reason"])) {
            ("True", _) => "True".to_string(),
            (st, "") => st.to_string(),
            (st, reason) => format!("{st} ({reason})"),
        })
        .unwrap_or_else(|| "Unknown".to_string());
    vec![name(obj).into(), service.into(), available.into(), age(obj, now)]
}

// ---------------------------------------------------------------------------------------------
// certificates.k8s.io/v1

/// `printCertificateSigningRequest` and `extractCSRStatus`: Denied before Approved before
/// Pending, then `,Failed` and `,Issued`.
fn csr_cells(obj: &Value, now: i64) -> Vec<Value> {
    let conds = arr(obj, &["status", "conditions"]);
    let has = |t: &str| conds.iter().any(|c| s(c, &["type"]) == t);
    let mut status = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_string();
    if has("Failed") {
        status.push_str(",Failed");
    }
    if !s(obj, &["status", "certificate"]).is_empty() {
        status.push_str(",Issued");
    }
    let signer = match s(obj, &["spec", "signerName"]) {
        "" => "<none>",
        n => n,
    };
    let duration = match opt_int(obj, &["spec", "expirationSeconds"]) {
        Some(secs) => human_duration_nanos(secs.saturating_mul(1_000_000_000)),
        None => "<none>".to_string(),
    };
    vec![
        name(obj).into(),
        age(obj, now),
        signer.into(),
        s(obj, &["spec", "username"]).into(),
        duration.into(),
        status.into(),
    ]
}

// ---------------------------------------------------------------------------------------------
// networking.k8s.io/v1, discovery.k8s.io/v1, coordination.k8s.io/v1

/// `formatHosts`: up to three rule hosts, `*` when none.
fn format_hosts(rules: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if list.len() == MAX {
            more = true;
        }
        let host = s(rule, &["host"]);
        if !more && !host.is_empty() {
            list.push(host);
        }
    }
    if list.is_empty() {
        return "*".to_string();
    }
    let ret = list.join(",");
    if more { format!("{} + {} more...", ret, rules.len().saturating_sub(MAX)) } else { ret }
}

fn ingress_cells(obj: &Value, now: i64) -> Vec<Value> {
    let ports = if arr(obj, &["spec", "tls"]).is_empty() { "80" } else { "80, 443" };
    vec![
        name(obj).into(),
        opt_s(obj, &["spec", "ingressClassName"]).unwrap_or("<none>").into(),
        format_hosts(arr(obj, &["spec", "rules"])).into(),
        load_balancer_ingress(arr(obj, &["status", "loadBalancer", "ingress"])).into(),
        ports.into(),
        age(obj, now),
    ]
}

fn ingress_class_cells(obj: &Value, now: i64) -> Vec<Value> {
    let parameters = match obj_at(obj, &["spec", "parameters"]) {
        None => "<none>".to_string(),
        Some(p) => {
            let mut out = s(p, &["kind"]).to_string();
            if let Some(g) = opt_s(p, &["apiGroup"]) {
                out.push('.');
                out.push_str(g);
            }
            format!("{out}/{}", s(p, &["name"]))
        }
    };
    vec![name(obj).into(), s(obj, &["spec", "controller"]).into(), parameters.into(), age(obj, now)]
}

fn network_policy_cells(obj: &Value, now: i64) -> Vec<Value> {
    // `&obj.Spec.PodSelector` is never nil: an absent selector is the empty one.
    let empty = json!({});
    let sel = at(obj, &["spec", "podSelector"]).unwrap_or(&empty);
    vec![name(obj).into(), format_label_selector(Some(sel)).into(), age(obj, now)]
}

fn endpoint_slice_cells(obj: &Value, now: i64) -> Vec<Value> {
    const MAX: usize = 3;
    let ports = arr(obj, &["ports"]);
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    for p in ports {
        if list.len() < MAX {
            let port = match (opt_int(p, &["port"]), opt_s(p, &["name"])) {
                (Some(n), _) => n.to_string(),
                (None, Some(nm)) => nm.to_string(),
                (None, None) => "*".to_string(),
            };
            list.push(port);
        } else if list.len() == MAX {
            more = true;
        }
    }
    let ports_str = list_with_more(&list, more, ports.len(), MAX);

    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count: usize = 0;
    for ep in arr(obj, &["endpoints"]) {
        for a in arr(ep, &["addresses"]) {
            if list.len() < MAX {
                list.push(a.as_str().unwrap_or("").to_string());
            } else if list.len() == MAX {
                more = true;
            }
            count = count.saturating_add(1);
        }
    }
    let endpoints_str = list_with_more(&list, more, count, MAX);
    vec![name(obj).into(), s(obj, &["addressType"]).into(), ports_str.into(), endpoints_str.into(), age(obj, now)]
}

fn lease_cells(obj: &Value, now: i64) -> Vec<Value> {
    vec![name(obj).into(), s(obj, &["spec", "holderIdentity"]).into(), age(obj, now)]
}

// ---------------------------------------------------------------------------------------------
// rbac.authorization.k8s.io/v1, policy/v1, storage.k8s.io/v1, autoscaling/v1

/// `printRoleBinding` / `printClusterRoleBinding` with `rbac.SubjectsStrings`.
fn role_binding_cells(obj: &Value, now: i64) -> Vec<Value> {
    let role = format!("{}/{}", s(obj, &["roleRef", "kind"]), s(obj, &["roleRef", "name"]));
    let mut users = Vec::new();
    let mut groups = Vec::new();
    let mut sas = Vec::new();
    for subject in arr(obj, &["subjects"]) {
        let n = s(subject, &["name"]);
        match s(subject, &["kind"]) {
            "ServiceAccount" => sas.push(format!("{}/{}", s(subject, &["namespace"]), n)),
            "User" => users.push(n.to_string()),
            "Group" => groups.push(n.to_string()),
            _ => {}
        }
    }
    vec![
        name(obj).into(),
        role.into(),
        age(obj, now),
        users.join(", ").into(),
        groups.join(", ").into(),
        sas.join(", ").into(),
    ]
}

fn pdb_cells(obj: &Value, now: i64) -> Vec<Value> {
    let or_na = |v: Option<&Value>| v.map_or_else(|| "N/A".to_string(), int_or_string);
    vec![
        name(obj).into(),
        or_na(at(obj, &["spec", "minAvailable"])).into(),
        or_na(at(obj, &["spec", "maxUnavailable"])).into(),
        int(obj, &["status", "disruptionsAllowed"]).into(),
        age(obj, now),
    ]
}

fn storage_class_cells(obj: &Value, now: i64) -> Vec<Value> {
    let annotation = |k: &str| map(obj, &["metadata", "annotations"]).and_then(|a| a.get(k)).and_then(Value::as_str);
    let is_default = annotation("storageclass.kubernetes.io/is-default-class") == Some("true")
        || annotation("storageclass.beta.kubernetes.io/is-default-class") == Some("true");
    let mut n = name(obj).to_string();
    if is_default {
        n.push_str(" (default)");
    }
    vec![
        n.into(),
        s(obj, &["provisioner"]).into(),
        opt_s(obj, &["reclaimPolicy"]).unwrap_or("Delete").into(),
        opt_s(obj, &["volumeBindingMode"]).unwrap_or("Immediate").into(),
        boolean(obj, &["allowVolumeExpansion"]).into(),
        age(obj, now),
    ]
}

fn scale_cells(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        name(obj).into(),
        int(obj, &["spec", "replicas"]).into(),
        int(obj, &["status", "replicas"]).into(),
        age(obj, now),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 2023-11-14T22:13:20Z.
    const NOW: i64 = 1_700_000_000;

    /// The RFC 3339 timestamp `secs` seconds before [`NOW`].
    fn ago(secs: i64) -> String {
        format_rfc3339_utc(NOW - secs)
    }

    fn row(group: &str, kind: &str, obj: Value) -> Vec<Value> {
        let cols = columns(group, kind).expect("kind has a printer");
        let cells = cells(group, kind, &obj, NOW).expect("kind has a printer");
        assert_eq!(cells.len(), cols.len(), "{group}/{kind}: one cell per column");
        cells
    }

    /// The cells of the columns `kubectl get` shows without `-o wide`.
    fn narrow(group: &str, kind: &str, obj: Value) -> Vec<Value> {
        let cols = columns(group, kind).unwrap_or_default();
        row(group, kind, obj).into_iter().zip(cols).filter(|(_, c)| c.priority == 0).map(|(v, _)| v).collect()
    }

    fn pod(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "p", "creationTimestamp": ago(3600)}, "spec": spec, "status": status})
    }

    fn pod_status(spec: Value, status: Value) -> (String, String, String) {
        let c = row("", "Pod", pod(spec, status));
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        (text(&c[1]), text(&c[2]), text(&c[3]))
    }

    const ALL_KINDS: &[(&str, &str)] = &[
        ("", "Namespace"),
        ("", "ConfigMap"),
        ("", "Secret"),
        ("", "ServiceAccount"),
        ("", "Service"),
        ("", "Endpoints"),
        ("", "Pod"),
        ("", "Node"),
        ("", "Event"),
        ("", "ResourceQuota"),
        ("", "PersistentVolumeClaim"),
        ("", "PersistentVolume"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("apps", "ControllerRevision"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("networking.k8s.io", "Ingress"),
        ("networking.k8s.io", "IngressClass"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("coordination.k8s.io", "Lease"),
        ("rbac.authorization.k8s.io", "RoleBinding"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("events.k8s.io", "Event"),
        ("policy", "PodDisruptionBudget"),
        ("storage.k8s.io", "StorageClass"),
        ("autoscaling", "Scale"),
    ];

    fn headers(group: &str, kind: &str) -> Vec<(&'static str, &'static str, i64)> {
        columns(group, kind).unwrap_or_default().iter().map(|c| (c.name, c.type_, c.priority)).collect()
    }

    #[test]
    fn column_definitions_match_upstream() {
        assert_eq!(
            headers("", "Pod"),
            vec![
                ("Name", "string", 0),
                ("Ready", "string", 0),
                ("Status", "string", 0),
                ("Restarts", "string", 0),
                ("Age", "string", 0),
                ("IP", "string", 1),
                ("Node", "string", 1),
                ("Nominated Node", "string", 1),
                ("Readiness Gates", "string", 1),
            ]
        );
        assert_eq!(
            headers("", "Event"),
            vec![
                ("Last Seen", "string", 0),
                ("Type", "string", 0),
                ("Reason", "string", 0),
                ("Object", "string", 0),
                ("Subobject", "string", 1),
                ("Source", "string", 1),
                ("Message", "string", 0),
                ("First Seen", "string", 1),
                ("Count", "string", 1),
                ("Name", "string", 1),
            ]
        );
        assert_eq!(columns("events.k8s.io", "Event"), columns("", "Event"));
        assert_eq!(
            headers("apps", "Deployment"),
            vec![
                ("Name", "string", 0),
                ("Ready", "string", 0),
                ("Up-to-date", "string", 0),
                ("Available", "string", 0),
                ("Age", "string", 0),
                ("Containers", "string", 1),
                ("Images", "string", 1),
                ("Selector", "string", 1),
            ]
        );
        assert_eq!(
            headers("batch", "CronJob").iter().map(|h| h.0).collect::<Vec<_>>(),
            [
                "Name",
                "Schedule",
                "Timezone",
                "Suspend",
                "Active",
                "Last Schedule",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        assert_eq!(headers("batch", "CronJob")[3], ("Suspend", "boolean", 0));
        assert_eq!(
            headers("", "PersistentVolume").iter().map(|h| h.0).collect::<Vec<_>>(),
            [
                "Name",
                "Capacity",
                "Access Modes",
                "Reclaim Policy",
                "Status",
                "Claim",
                "StorageClass",
                "VolumeAttributesClass",
                "Reason",
                "Age",
                "VolumeMode"
            ]
        );
        assert_eq!(
            headers("networking.k8s.io", "Ingress").iter().map(|h| h.0).collect::<Vec<_>>(),
            ["Name", "Class", "Hosts", "Address", "Ports", "Age"]
        );
        assert_eq!(
            headers("", "Node").iter().map(|h| (h.0, h.2)).collect::<Vec<_>>(),
            [
                ("Name", 0),
                ("Status", 0),
                ("Roles", 0),
                ("Age", 0),
                ("Version", 0),
                ("Internal-IP", 1),
                ("External-IP", 1),
                ("OS-Image", 1),
                ("Kernel-Version", 1),
                ("Container-Runtime", 1)
            ]
        );
        assert_eq!(
            headers("", "ResourceQuota").iter().map(|h| h.0).collect::<Vec<_>>(),
            ["Name", "Request", "Limit", "Age"]
        );
        assert_eq!(
            headers("apps", "DaemonSet").iter().map(|h| (h.0, h.1)).collect::<Vec<_>>(),
            [
                ("Name", "string"),
                ("Desired", "integer"),
                ("Current", "integer"),
                ("Ready", "integer"),
                ("Up-to-date", "integer"),
                ("Available", "integer"),
                ("Node Selector", "string"),
                ("Age", "string"),
                ("Containers", "string"),
                ("Images", "string"),
                ("Selector", "string")
            ]
        );
    }

    #[test]
    fn first_column_is_the_name_except_for_events() {
        for (g, k) in ALL_KINDS {
            let cols = columns(g, k).unwrap_or_default();
            let first = cols.first().copied().expect("at least one column");
            if *k == "Event" {
                assert_eq!(first.name, "Last Seen");
                assert_eq!(cols.last().map(|c| (c.name, c.format, c.priority)), Some(("Name", "name", 1)));
            } else if *k == "Scale" {
                assert_eq!((first.name, first.format), ("Name", ""));
            } else {
                assert_eq!(
                    (first.name, first.type_, first.format, first.priority),
                    ("Name", "string", "name", 0),
                    "{g}/{k}"
                );
            }
            assert_eq!(cols.iter().filter(|c| c.format == "name").count(), usize::from(*k != "Scale"), "{g}/{k}");
        }
    }

    #[test]
    fn csr_apiservice_componentstatus_and_replication_controller_rows() {
        let csr = |conds: Value, cert: &str, exp: Value| {
            json!({"metadata": {"name": "c", "creationTimestamp": ago(60)},
                "spec": {"signerName": "kubernetes.io/kube-apiserver-client", "username": "jane", "expirationSeconds": exp},
                "status": {"conditions": conds, "certificate": cert}})
        };
        let g = "certificates.k8s.io";
        let k = "CertificateSigningRequest";
        assert_eq!(
            row(g, k, csr(json!([]), "", json!(86400))),
            vec![
                json!("c"),
                json!("60s"),
                json!("kubernetes.io/kube-apiserver-client"),
                json!("jane"),
                json!("24h"),
                json!("Pending")
            ]
        );
        let approved = json!([{"type": "Approved", "status": "True"}]);
        assert_eq!(row(g, k, csr(approved.clone(), "Y2VydA==", Value::Null))[5], "Approved,Issued");
        assert_eq!(row(g, k, csr(approved, "", Value::Null))[4], "<none>");
        let both = json!([{"type": "Denied", "status": "True"}, {"type": "Failed", "status": "True"}]);
        assert_eq!(row(g, k, csr(both, "", Value::Null))[5], "Denied,Failed");
        assert_eq!(
            headers(g, k).iter().map(|h| h.0).collect::<Vec<_>>(),
            ["Name", "Age", "SignerName", "Requestor", "RequestedDuration", "Condition"]
        );

        let api = |service: Value, cond: Value| json!({"metadata": {"name": "v1.x.io", "creationTimestamp": ago(5)}, "spec": {"service": service}, "status": {"conditions": cond}});
        let local = row(
            "apiregistration.k8s.io",
            "APIService",
            api(Value::Null, json!([{"type": "Available", "status": "True", "reason": "Local"}])),
        );
        assert_eq!(local, vec![json!("v1.x.io"), json!("Local"), json!("True"), json!("5s")]);
        let remote = row(
            "apiregistration.k8s.io",
            "APIService",
            api(
                json!({"namespace": "kube-system", "name": "metrics"}),
                json!([{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]),
            ),
        );
        assert_eq!((&remote[1], &remote[2]), (&json!("kube-system/metrics"), &json!("False (MissingEndpoints)")));

        let cs = json!({"metadata": {"name": "etcd-0"}, "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]});
        assert_eq!(row("", "ComponentStatus", cs), vec![json!("etcd-0"), json!("Healthy"), json!("ok"), json!("")]);
        assert_eq!(row("", "ComponentStatus", json!({"metadata": {"name": "x"}}))[1], "Unknown");

        let rc = json!({"metadata": {"name": "web", "creationTimestamp": ago(120)},
            "spec": {"replicas": 3, "selector": {"app": "web", "tier": "fe"},
                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}},
            "status": {"replicas": 3, "readyReplicas": 2}});
        assert_eq!(
            row("", "ReplicationController", rc),
            vec![
                json!("web"),
                json!(3),
                json!(3),
                json!(2),
                json!("2m"),
                json!("nginx"),
                json!("nginx:1.27"),
                json!("app=web,tier=fe")
            ]
        );
    }

    #[test]
    fn kinds_without_a_printer_use_the_default_convertor() {
        for (g, k) in [
            ("rbac.authorization.k8s.io", "Role"),
            ("rbac.authorization.k8s.io", "ClusterRole"),
            ("", "LimitRange"),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("example.com", "Widget"),
            ("apps", "Pod"),
        ] {
            assert_eq!(columns(g, k), None);
            assert_eq!(cells(g, k, &json!({}), NOW), None);
        }
        let cols = default_columns();
        assert_eq!(
            cols.iter().map(|c| (c.name, c.type_, c.format)).collect::<Vec<_>>(),
            [("Name", "string", "name"), ("Created At", "date", "")]
        );
        let role = json!({"metadata": {"name": "reader", "creationTimestamp": "2024-03-05T07:08:09Z"}, "rules": []});
        assert_eq!(default_cells(&role), vec![json!("reader"), json!("2024-03-05T07:08:09Z")]);
        let crd =
            json!({"metadata": {"name": "widgets.example.com", "creationTimestamp": "2024-03-05T08:08:09+01:00"}});
        assert_eq!(default_cells(&crd), vec![json!("widgets.example.com"), json!("2024-03-05T07:08:09Z")]);
        assert_eq!(default_cells(&json!({})), vec![json!(""), json!("0001-01-01T00:00:00Z")]);
    }

    #[test]
    fn rfc3339_formatting() {
        assert_eq!(format_rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339_utc(NOW), "2023-11-14T22:13:20Z");
        assert_eq!(format_rfc3339_utc(1_709_164_800), "2024-02-29T00:00:00Z");
        assert_eq!(format_rfc3339_utc(GO_ZERO_UNIX), "0001-01-01T00:00:00Z");
        let _ = format_rfc3339_utc(i64::MAX);
        let _ = format_rfc3339_utc(i64::MIN);
    }

    // -- Pod -------------------------------------------------------------------------------

    #[test]
    fn pod_running_as_served() {
        let p = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-7d4b9c-x2x", "namespace": "default", "creationTimestamp": ago(3 * 3600 + 60)},
            "spec": {"nodeName": "node-1", "containers": [{"name": "nginx", "image": "nginx:1.27"}]},
            "status": {
                "phase": "Running",
                "podIP": "10.244.0.5",
                "podIPs": [{"ip": "10.244.0.5"}],
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "PodScheduled", "status": "True"}
                ],
                "containerStatuses": [{
                    "name": "nginx", "ready": true, "restartCount": 0, "started": true,
                    "state": {"running": {"startedAt": ago(3 * 3600)}}
                }]
            }
        });
        assert_eq!(
            row("", "Pod", p),
            vec![
                json!("web-7d4b9c-x2x"),
                json!("1/1"),
                json!("Running"),
                json!("0"),
                json!("3h1m"),
                json!("10.244.0.5"),
                json!("node-1"),
                json!("<none>"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn pod_status_reasons() {
        let one = json!({"containers": [{"name": "app", "image": "app"}]});
        let waiting = |reason: &str| {
            json!({"phase": "Pending", "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason}}}]})
        };
        // Pending, not yet scheduled: no container statuses.
        assert_eq!(pod_status(one.clone(), json!({"phase": "Pending"})).1, "Pending");
        for reason in ["ContainerCreating", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError"] {
            assert_eq!(pod_status(one.clone(), waiting(reason)), ("0/1".into(), reason.into(), "0".into()));
        }
        // CrashLoopBackOff with restarts, last one finished 5 minutes ago.
        let crash = json!({"phase": "Running", "containerStatuses": [{
            "name": "app", "ready": false, "restartCount": 5,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 2m40s"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(300)}}
        }]});
        assert_eq!(pod_status(one.clone(), crash), ("0/1".into(), "CrashLoopBackOff".into(), "5 (5m ago)".into()));
        // Completed (a Job pod).
        let done = json!({"phase": "Succeeded", "containerStatuses": [{"name": "app", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]});
        assert_eq!(pod_status(one.clone(), done).1, "Completed");
        // Error, OOMKilled, and terminated without reason.
        let term =
            |t: Value| json!({"phase": "Failed", "containerStatuses": [{"name": "app", "state": {"terminated": t}}]});
        assert_eq!(pod_status(one.clone(), term(json!({"exitCode": 1, "reason": "Error"}))).1, "Error");
        assert_eq!(pod_status(one.clone(), term(json!({"exitCode": 137, "reason": "OOMKilled"}))).1, "OOMKilled");
        assert_eq!(pod_status(one.clone(), term(json!({"exitCode": 2}))).1, "ExitCode:2");
        assert_eq!(pod_status(one.clone(), term(json!({"exitCode": 2, "signal": 9}))).1, "Signal:9");
        // Evicted: the pod's own reason.
        let evicted = json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource"});
        assert_eq!(pod_status(one.clone(), evicted).1, "Evicted");
        // Running container not ready.
        let unready = json!({"phase": "Running", "containerStatuses": [{"name": "app", "ready": false,
            "state": {"running": {}}}]});
        assert_eq!(pod_status(one.clone(), unready), ("0/1".into(), "Running".into(), "0".into()));
        // Scheduling gates.
        let gated = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]});
        assert_eq!(pod_status(one, gated).1, "SchedulingGated");
    }

    #[test]
    fn pod_init_containers() {
        let spec = json!({"initContainers": [{"name": "init", "image": "busybox"}], "containers": [{"name": "app"}]});
        let init = |state: Value, restarts: i64| {
            json!({"phase": "Pending",
                "conditions": [{"type": "Initialized", "status": "False"}],
                "initContainerStatuses": [{"name": "init", "ready": false, "restartCount": restarts, "state": state}],
                "containerStatuses": [{"name": "app", "ready": false, "state": {"waiting": {"reason": "PodInitializing"}}}]})
        };
        assert_eq!(
            pod_status(spec.clone(), init(json!({"running": {}}), 0)),
            ("0/1".into(), "Init:0/1".into(), "0".into())
        );
        assert_eq!(pod_status(spec.clone(), init(json!({"waiting": {"reason": "PodInitializing"}}), 0)).1, "Init:0/1");
        assert_eq!(
            pod_status(spec.clone(), init(json!({"waiting": {"reason": "CrashLoopBackOff"}}), 3)).1,
            "Init:CrashLoopBackOff"
        );
        assert_eq!(
            pod_status(spec.clone(), init(json!({"waiting": {"reason": "ImagePullBackOff"}}), 0)).1,
            "Init:ImagePullBackOff"
        );
        assert_eq!(
            pod_status(spec.clone(), init(json!({"terminated": {"exitCode": 1, "reason": "Error"}}), 2)).1,
            "Init:Error"
        );
        assert_eq!(pod_status(spec.clone(), init(json!({"terminated": {"exitCode": 3}}), 0)).1, "Init:ExitCode:3");
        assert_eq!(
            pod_status(spec.clone(), init(json!({"terminated": {"exitCode": 3, "signal": 15}}), 0)).1,
            "Init:Signal:15"
        );
        // Init done: the app container's state decides.
        let done = json!({"phase": "Pending",
            "conditions": [{"type": "Initialized", "status": "True"}],
            "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            "containerStatuses": [{"name": "app", "ready": false, "state": {"waiting": {"reason": "ContainerCreating"}}}]});
        assert_eq!(pod_status(spec, done).1, "ContainerCreating");
    }

    #[test]
    fn pod_completed_with_running_sidecar_and_terminating() {
        let two = json!({"containers": [{"name": "a"}, {"name": "b"}]});
        let status = |ready_condition: bool| {
            json!({"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready_condition { "True" } else { "False" }}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 3, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}},
                {"name": "b", "ready": true, "restartCount": 3, "state": {"running": {}}}
            ]})
        };
        assert_eq!(pod_status(two.clone(), status(false)), ("1/2".into(), "NotReady".into(), "6".into()));
        assert_eq!(pod_status(two, status(true)), ("1/2".into(), "Running".into(), "6".into()));

        let one = json!({"containers": [{"name": "a"}]});
        let deleting = |phase: &str, reason: &str| {
            json!({"metadata": {"name": "p", "deletionTimestamp": ago(10)}, "spec": one,
                "status": {"phase": phase, "reason": reason, "containerStatuses": [{"name": "a", "state": {"running": {}}}]}})
        };
        assert_eq!(row("", "Pod", deleting("Running", ""))[2], json!("Terminating"));
        assert_eq!(row("", "Pod", deleting("Pending", ""))[2], json!("Terminating"));
        assert_eq!(row("", "Pod", deleting("Running", "NodeLost"))[2], json!("Unknown"));
        let succeeded = json!({"metadata": {"name": "p", "deletionTimestamp": ago(10)}, "spec": one,
            "status": {"phase": "Succeeded", "containerStatuses": [{"name": "a", "state": {"terminated": {"reason": "Completed"}}}]}});
        assert_eq!(row("", "Pod", succeeded)[2], json!("Completed"));
    }

    /// TestPrintPod in upstream printers_test.go, in JSON.
    #[test]
    fn pod_upstream_cases() {
        let two = json!({"containers": [{}, {}]});
        let cases: Vec<(Value, Value, [&str; 3])> = vec![
            (
                two.clone(),
                json!({"phase": "podPhase", "containerStatuses": [
                    {"ready": true, "restartCount": 3, "state": {"running": {}}}, {"restartCount": 3}]}),
                ["1/2", "podPhase", "6"],
            ),
            (
                two.clone(),
                json!({"phase": "podPhase", "containerStatuses": [
                    {"ready": true, "restartCount": 3, "state": {"running": {}}},
                    {"state": {"waiting": {"reason": "ContainerWaitingReason"}}, "restartCount": 3}]}),
                ["1/2", "ContainerWaitingReason", "6"],
            ),
            (
                two.clone(),
                json!({"phase": "podPhase", "containerStatuses": [
                    {"state": {"waiting": {"reason": "ContainerWaitingReason"}}, "restartCount": 3},
                    {"state": {"terminated": {"reason": "ContainerTerminatedReason"}}, "restartCount": 3}]}),
                ["0/2", "ContainerWaitingReason", "6"],
            ),
            (
                two.clone(),
                json!({"phase": "podPhase", "containerStatuses": [
                    {"ready": true, "restartCount": 3, "state": {"running": {}}}, {"ready": true, "restartCount": 3}]}),
                ["1/2", "podPhase", "6"],
            ),
            (
                two.clone(),
                json!({"reason": "podReason", "phase": "podPhase", "containerStatuses": [
                    {"ready": true, "restartCount": 3, "state": {"running": {}}}, {"ready": true, "restartCount": 3}]}),
                ["1/2", "podReason", "6"],
            ),
            (
                json!({"initContainers": [{}], "containers": [{}]}),
                json!({"phase": "podPhase",
                    "initContainerStatuses": [{"ready": false, "restartCount": 3, "state": {"running": {}},
                        "lastState": {"terminated": {"finishedAt": ago(10)}}}],
                    "containerStatuses": [{"ready": false, "restartCount": 0, "state": {"waiting": {}}}]}),
                ["0/1", "Init:0/1", "3 (10s ago)"],
            ),
            (
                json!({"initContainers": [{}, {}], "containers": [{}]}),
                json!({"phase": "podPhase",
                    "initContainerStatuses": [
                        {"ready": false, "restartCount": 3, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": ago(10)}}},
                        {"ready": false, "state": {"waiting": {}}}],
                    "containerStatuses": [{"ready": false, "state": {"waiting": {}}}]}),
                ["0/1", "Init:0/2", "3 (10s ago)"],
            ),
            (
                json!({"initContainers": [{}, {}], "containers": [{}]}),
                json!({"phase": "podPhase",
                    "initContainerStatuses": [
                        {"ready": false, "state": {"terminated": {}}},
                        {"ready": false, "restartCount": 3, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": ago(10)}}}],
                    "containerStatuses": [{"ready": false, "state": {"waiting": {}}}]}),
                ["0/1", "Init:1/2", "3 (10s ago)"],
            ),
            (
                json!({"initContainers": [{}, {}], "containers": [{}]}),
                json!({"phase": "podPhase",
                    "initContainerStatuses": [
                        {"ready": false, "restartCount": 2, "state": {"terminated": {}}, "lastState": {"terminated": {"finishedAt": ago(120)}}},
                        {"ready": false, "restartCount": 3, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": ago(10)}}}],
                    "containerStatuses": [{"ready": false, "state": {"waiting": {}}}]}),
                ["0/1", "Init:1/2", "5 (10s ago)"],
            ),
            (
                json!({"initContainers": [{}], "containers": [{}]}),
                json!({"phase": "Running",
                    "initContainerStatuses": [
                        {"ready": false, "restartCount": 2, "state": {"terminated": {}}, "lastState": {"terminated": {"finishedAt": ago(120)}}}],
                    "containerStatuses": [
                        {"ready": false, "restartCount": 4, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": ago(20)}}}]}),
                ["0/1", "Running", "4 (20s ago)"],
            ),
            (
                json!({"containers": [{}]}),
                json!({"phase": "Running", "containerStatuses": [
                    {"ready": true, "restartCount": 3, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": ago(5 * 86400)}}}]}),
                ["1/1", "Running", "3 (5d ago)"],
            ),
            (
                two.clone(),
                json!({"phase": "Running", "containerStatuses": [
                    {"ready": true, "restartCount": 0, "state": {"running": {}}},
                    {"ready": true, "restartCount": 3, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": ago(10 * 86400)}}}]}),
                ["2/2", "Running", "3 (10d ago)"],
            ),
            (
                two.clone(),
                json!({"phase": "Running", "containerStatuses": [
                    {"ready": true, "restartCount": 6, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": ago(5 * 86400)}}},
                    {"ready": true, "restartCount": 3, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": ago(20 * 86400)}}}]}),
                ["2/2", "Running", "9 (5d ago)"],
            ),
            (
                two,
                json!({"phase": "podPhase", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
                ["0/2", "SchedulingGated", "0"],
            ),
            (
                json!({"containers": [{}]}),
                json!({"phase": "Failed", "containerStatuses": [
                    {"ready": false, "restartCount": 0, "state": {"terminated": {"reason": "Error", "exitCode": 1}}}]}),
                ["0/1", "Error", "0"],
            ),
        ];
        for (i, (spec, status, want)) in cases.into_iter().enumerate() {
            let obj = json!({"metadata": {"name": format!("test{i}")}, "spec": spec, "status": status});
            let got = narrow("", "Pod", obj);
            assert_eq!(
                got,
                vec![json!(format!("test{i}")), json!(want[0]), json!(want[1]), json!(want[2]), json!("<unknown>")],
                "case {i}"
            );
        }
    }

    /// TestPrintPodWithRestartableInitContainer in upstream printers_test.go, in JSON.
    #[test]
    fn pod_restartable_init_containers() {
        let spec = json!({"initContainers": [
            {"name": "restartable-init-1", "restartPolicy": "Always"},
            {"name": "restartable-init-2", "restartPolicy": "Always"}], "containers": [{}]});
        let cases: Vec<(Value, [&str; 3])> = vec![
            (
                json!({"phase": "Pending",
                    "initContainerStatuses": [
                        {"name": "restartable-init-1", "ready": false, "restartCount": 3, "state": {"running": {}}, "started": false,
                            "lastState": {"terminated": {"finishedAt": ago(10)}}},
                        {"name": "restartable-init-2", "ready": false, "state": {"waiting": {}}, "started": false}],
                    "containerStatuses": [{"ready": false, "restartCount": 0, "state": {"waiting": {}}}],
                    "conditions": [{"type": "Initialized", "status": "False"}]}),
                ["0/3", "Init:0/2", "3 (10s ago)"],
            ),
            (
                json!({"phase": "Pending",
                    "initContainerStatuses": [
                        {"name": "restartable-init-1", "ready": false, "restartCount": 3, "state": {"running": {}}, "started": true,
                            "lastState": {"terminated": {"finishedAt": ago(10)}}},
                        {"name": "restartable-init-2", "ready": false, "state": {"running": {}}, "started": false}],
                    "containerStatuses": [{"ready": false, "restartCount": 0, "state": {"waiting": {}}}],
                    "conditions": [{"type": "Initialized", "status": "False"}]}),
                ["0/3", "Init:1/2", "3 (10s ago)"],
            ),
            (
                json!({"phase": "Running",
                    "initContainerStatuses": [
                        {"name": "restartable-init-1", "ready": false, "restartCount": 3, "state": {"running": {}}, "started": true,
                            "lastState": {"terminated": {"finishedAt": ago(10)}}},
                        {"name": "restartable-init-2", "ready": false, "state": {"running": {}}, "started": true}],
                    "containerStatuses": [{"ready": true, "restartCount": 4, "state": {"running": {}},
                        "lastState": {"terminated": {"finishedAt": ago(20)}}}],
                    "conditions": [{"type": "Initialized", "status": "True"}]}),
                ["1/3", "Running", "7 (10s ago)"],
            ),
            (
                json!({"phase": "Succeeded",
                    "initContainerStatuses": [
                        {"name": "restartable-init-1", "ready": false, "restartCount": 3,
                            "state": {"terminated": {"reason": "Error", "exitCode": 137}}, "started": false,
                            "lastState": {"terminated": {"finishedAt": ago(10)}}},
                        {"name": "restartable-init-2", "ready": false, "state": {"terminated": {"reason": "Error", "exitCode": 137}}, "started": false}],
                    "containerStatuses": [{"ready": false, "restartCount": 4, "state": {"terminated": {"reason": "Completed", "exitCode": 0}},
                        "lastState": {"terminated": {"finishedAt": ago(20)}}}],
                    "conditions": [{"type": "Initialized", "status": "True"}]}),
                ["0/3", "Completed", "7 (10s ago)"],
            ),
        ];
        for (i, (status, want)) in cases.into_iter().enumerate() {
            let got = narrow("", "Pod", json!({"metadata": {"name": "t"}, "spec": spec, "status": status}));
            assert_eq!(&got[1..4], &[json!(want[0]), json!(want[1]), json!(want[2])], "case {i}");
        }
        // Statuses for containers the spec does not have.
        let spec = json!({"initContainers": [{"name": "init1", "image": "initimage"},
            {"name": "sidecar1", "image": "sidecarimage", "restartPolicy": "Always"}],
            "containers": [{"name": "container1", "image": "containerimage"}]});
        let status = json!({"phase": "Running",
            "initContainerStatuses": [{"name": "initinvalid"}, {"name": "init1"}, {"name": "sidecar1"}],
            "containerStatuses": [{"name": "containerinvalid"}, {"name": "container1"}]});
        assert_eq!(
            &narrow("", "Pod", json!({"spec": spec, "status": status}))[1..4],
            &[json!("0/2"), json!("Init:0/2"), json!("0")]
        );
    }

    #[test]
    fn pod_wide_columns_and_row_conditions() {
        let p = json!({"metadata": {"name": "test1"},
            "spec": {"containers": [{}, {}], "nodeName": "test1",
                "readinessGates": [{"conditionType": "condition1"}, {"conditionType": "condition2"}, {"conditionType": "condition3"}]},
            "status": {"conditions": [{"type": "condition1", "status": "False"}, {"type": "condition2", "status": "True"}],
                "phase": "podPhase", "podIPs": [{"ip": "1.1.1.1"}],
                "containerStatuses": [{"ready": true, "restartCount": 3, "state": {"running": {}}}, {"restartCount": 3}],
                "nominatedNodeName": "node1"}});
        assert_eq!(
            row("", "Pod", p.clone()),
            vec![
                json!("test1"),
                json!("1/2"),
                json!("podPhase"),
                json!("6"),
                json!("<unknown>"),
                json!("1.1.1.1"),
                json!("test1"),
                json!("node1"),
                json!("1/3")
            ]
        );
        assert_eq!(row_conditions("", "Pod", &p), None);
        let done = json!({"status": {"phase": "Succeeded"}});
        assert_eq!(
            row_conditions("", "Pod", &done),
            Some(
                json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}])
            )
        );
        let failed = json!({"status": {"phase": "Failed"}});
        assert_eq!(
            row_conditions("", "Pod", &failed),
            Some(json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]))
        );
        assert_eq!(row_conditions("apps", "Deployment", &done), None);
    }

    // -- Other core kinds ------------------------------------------------------------------

    #[test]
    fn namespace_configmap_secret_serviceaccount() {
        let ns = json!({"metadata": {"name": "kube-system", "creationTimestamp": ago(45 * 86400)}, "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}});
        assert_eq!(row("", "Namespace", ns), vec![json!("kube-system"), json!("Active"), json!("45d")]);
        let terminating = json!({"metadata": {"name": "x"}, "status": {"phase": "Terminating"}});
        assert_eq!(row("", "Namespace", terminating), vec![json!("x"), json!("Terminating"), json!("<unknown>")]);

        let cm = json!({"metadata": {"name": "kube-root-ca.crt", "creationTimestamp": ago(90)},
            "data": {"ca.crt": "..."}, "binaryData": {"a": "AA==", "b": "AA=="}});
        assert_eq!(row("", "ConfigMap", cm), vec![json!("kube-root-ca.crt"), json!(3), json!("90s")]);

        let secret = json!({"metadata": {"name": "tls", "creationTimestamp": ago(125)}, "type": "kubernetes.io/tls",
            "data": {"tls.crt": "", "tls.key": ""}});
        assert_eq!(row("", "Secret", secret), vec![json!("tls"), json!("kubernetes.io/tls"), json!(2), json!("2m5s")]);
        // A creation time up to 2s in the future still prints 0s (clock skew).
        let future = json!({"metadata": {"name": "s", "creationTimestamp": ago(-1)}, "type": "Opaque"});
        assert_eq!(row("", "Secret", future), vec![json!("s"), json!("Opaque"), json!(0), json!("0s")]);

        let sa = json!({"metadata": {"name": "default", "creationTimestamp": ago(600)}});
        assert_eq!(row("", "ServiceAccount", sa), vec![json!("default"), json!(0), json!("10m")]);
        let sa2 = json!({"metadata": {"name": "sa1"}, "secrets": [{"name": "Secret1"}, {"name": "Secret2"}]});
        assert_eq!(row("", "ServiceAccount", sa2), vec![json!("sa1"), json!(2), json!("<unknown>")]);
    }

    #[test]
    fn services() {
        let svc = |spec: Value, status: Value| json!({"metadata": {"name": "s", "creationTimestamp": ago(7200)}, "spec": spec, "status": status});
        assert_eq!(
            row(
                "",
                "Service",
                svc(
                    json!({"type": "ClusterIP", "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}),
                    json!({"loadBalancer": {}})
                )
            ),
            vec![
                json!("s"),
                json!("ClusterIP"),
                json!("10.96.0.1"),
                json!("<none>"),
                json!("443/TCP"),
                json!("120m"),
                json!("<none>")
            ]
        );
        assert_eq!(
            row(
                "",
                "Service",
                svc(
                    json!({"type": "NodePort", "clusterIPs": ["10.9.8.7"], "externalIPs": ["80.11.12.10", "80.11.12.11"],
                    "ports": [{"port": 8888, "nodePort": 9999, "protocol": "TCP"}, {"port": 53, "nodePort": 30053, "protocol": "UDP"}],
                    "selector": {"b": "2", "a": "1"}}),
                    json!({})
                )
            ),
            vec![
                json!("s"),
                json!("NodePort"),
                json!("10.9.8.7"),
                json!("80.11.12.10,80.11.12.11"),
                json!("8888:9999/TCP,53:30053/UDP"),
                json!("120m"),
                json!("a=1,b=2")
            ]
        );
        // Headless service.
        assert_eq!(
            row(
                "",
                "Service",
                svc(json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}), json!({}))
            )[2..5],
            [json!("None"), json!("<none>"), json!("<none>")]
        );
        // Load balancers: pending, several ingress points (sorted, de-duplicated, not clipped), plus externalIPs.
        let lb = |ingress: Value, external: Value| {
            row(
                "",
                "Service",
                svc(
                    json!({"type": "LoadBalancer", "clusterIPs": ["1.2.3.4"], "externalIPs": external,
                "ports": [{"port": 80, "protocol": "TCP", "nodePort": 31000}]}),
                    json!({"loadBalancer": {"ingress": ingress}}),
                ),
            )[3]
            .clone()
        };
        assert_eq!(lb(json!([]), json!(null)), json!("<pending>"));
        assert_eq!(
            lb(
                json!([{"ip": "3.4.5.6"}, {"ip": "2.3.4.5"}, {"ip": "5.6.7.8", "hostname": "host5678"}, {"ip": "2.3.4.5"}]),
                json!(null)
            ),
            json!("2.3.4.5,3.4.5.6,5.6.7.8")
        );
        assert_eq!(lb(json!([{"hostname": "lb.example.com"}]), json!(["9.9.9.9"])), json!("lb.example.com,9.9.9.9"));
        assert_eq!(lb(json!([]), json!(["9.9.9.9"])), json!("9.9.9.9"));
        // ExternalName.
        assert_eq!(
            row("", "Service", svc(json!({"type": "ExternalName", "externalName": "db.example.com"}), json!({})))[2..5],
            [json!("<none>"), json!("db.example.com"), json!("<none>")]
        );
        // Upstream TestPrintService: lowercase protocol printed as given.
        assert_eq!(
            row(
                "",
                "Service",
                svc(
                    json!({"type": "ClusterIP", "ports": [{"protocol": "tcp", "port": 2233}], "clusterIPs": ["10.9.8.7"]}),
                    json!({})
                )
            )[4],
            json!("2233/tcp")
        );
    }

    #[test]
    fn endpoints() {
        let ep =
            |subsets: Value| row("", "Endpoints", json!({"metadata": {"name": "e"}, "subsets": subsets}))[1].clone();
        assert_eq!(ep(json!(null)), json!("<none>"));
        assert_eq!(ep(json!([])), json!("<none>"));
        assert_eq!(
            ep(
                json!([{"addresses": [{"ip": "172.18.0.2"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}])
            ),
            json!("172.18.0.2:6443")
        );
        assert_eq!(
            ep(
                json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}, {"port": 443}]}])
            ),
            json!("10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 1 more...")
        );
        assert_eq!(ep(json!([{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}]}])), json!("[fd00::1]:80"));
        // Headless without ports: bare IPs.
        assert_eq!(
            ep(
                json!([{"addresses": [{"ip": "1.1.1.1"}, {"ip": "2.2.2.2"}, {"ip": "3.3.3.3"}, {"ip": "4.4.4.4"}, {"ip": "5.5.5.5"}]}])
            ),
            json!("1.1.1.1,2.2.2.2,3.3.3.3 + 2 more...")
        );
        // Only not-ready addresses: nothing listed.
        assert_eq!(ep(json!([{"notReadyAddresses": [{"ip": "10.0.0.9"}], "ports": [{"port": 80}]}])), json!(""));
    }

    #[test]
    fn nodes() {
        let node = |meta: Value, spec: Value, status: Value| {
            row("", "Node", json!({"metadata": meta, "spec": spec, "status": status}))
        };
        let kind_node = node(
            json!({"name": "kind-control-plane", "creationTimestamp": ago(26 * 3600),
                "labels": {"kubernetes.io/hostname": "kind-control-plane", "node-role.kubernetes.io/control-plane": ""}}),
            json!({"podCIDR": "10.244.0.0/24"}),
            json!({"conditions": [
                    {"type": "MemoryPressure", "status": "False"}, {"type": "DiskPressure", "status": "False"},
                    {"type": "PIDPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "172.18.0.2"}, {"type": "Hostname", "address": "kind-control-plane"}],
                "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "kernelVersion": "6.8.0-45-generic", "containerRuntimeVersion": "containerd://2.1.1"}}),
        );
        assert_eq!(
            kind_node,
            vec![
                json!("kind-control-plane"),
                json!("Ready"),
                json!("control-plane"),
                json!("26h"),
                json!("v1.33.1"),
                json!("172.18.0.2"),
                json!("<none>"),
                json!("Debian GNU/Linux 12 (bookworm)"),
                json!("6.8.0-45-generic"),
                json!("containerd://2.1.1")
            ]
        );
        let status = |conds: Value, unschedulable: bool| {
            node(json!({"name": "n"}), json!({"unschedulable": unschedulable}), json!({"conditions": conds}))[1].clone()
        };
        assert_eq!(status(json!([{"type": "Ready", "status": "True"}]), true), json!("Ready,SchedulingDisabled"));
        assert_eq!(status(json!([{"type": "Ready", "status": "False"}]), false), json!("NotReady"));
        assert_eq!(status(json!([{"type": "Ready", "status": "Unknown"}]), true), json!("NotReady,SchedulingDisabled"));
        assert_eq!(status(json!([{"type": "InvalidValue", "status": "True"}]), false), json!("Unknown"));
        assert_eq!(status(json!([{}]), true), json!("Unknown,SchedulingDisabled"));
        assert_eq!(
            status(json!([{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]), false),
            json!("NotReady")
        );
        // Roles (upstream TestPrintNodeRole).
        let roles = node(
            json!({"name": "foo10", "labels": {"node-role.kubernetes.io/master": "", "node-role.kubernetes.io/control-plane": "",
                "node-role.kubernetes.io/proxy": "", "kubernetes.io/role": "node", "node-role.kubernetes.io/": "x"}}),
            json!({}),
            json!({}),
        );
        assert_eq!(roles[2], json!("control-plane,master,node,proxy"));
        // Addresses: the first of each type; info fields default to <unknown>.
        let addrs = node(
            json!({"name": "foo3"}),
            json!({}),
            json!({"addresses": [{"type": "ExternalIP", "address": "2.2.2.2"}, {"type": "InternalIP", "address": "3.3.3.3"},
                {"type": "ExternalIP", "address": "4.4.4.4"}]}),
        );
        assert_eq!(
            addrs,
            vec![
                json!("foo3"),
                json!("Unknown"),
                json!("<none>"),
                json!("<unknown>"),
                json!(""),
                json!("3.3.3.3"),
                json!("2.2.2.2"),
                json!("<unknown>"),
                json!("<unknown>"),
                json!("<unknown>")
            ]
        );
    }

    #[test]
    fn core_events() {
        let ev = json!({
            "metadata": {"name": "web.17a8b3c", "namespace": "default", "creationTimestamp": ago(3 * 86400)},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web", "fieldPath": "spec.containers{nginx}"},
            "reason": "Pulled", "message": "  Successfully pulled image \"nginx\"\n",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": ago(3 * 86400), "lastTimestamp": ago(2 * 86400), "count": 6, "type": "Normal",
            "eventTime": null, "reportingComponent": "kubelet", "reportingInstance": "node-1"
        });
        assert_eq!(
            row("", "Event", ev),
            vec![
                json!("2d"),
                json!("Normal"),
                json!("Pulled"),
                json!("pod/web"),
                json!("spec.containers{nginx}"),
                json!("kubelet, node-1"),
                json!("Successfully pulled image \"nginx\""),
                json!("3d"),
                json!(6),
                json!("web.17a8b3c")
            ]
        );
        // New-style event recorded through the core API: eventTime, series, reporting fields.
        let series = json!({
            "metadata": {"name": "event6"},
            "involvedObject": {"kind": "Deployment", "name": "Deployment Name", "fieldPath": "spec.containers{foo}"},
            "series": {"count": 2, "lastObservedTime": format!("{}.123456Z", ago(2 * 86400 + 1).trim_end_matches('Z'))},
            "reason": "Event Reason", "message": "Message Data", "eventTime": format!("{}.000001Z", ago(3 * 86400 + 1).trim_end_matches('Z')),
            "type": "Warning", "reportingComponent": "kubelet", "reportingInstance": "test"
        });
        assert_eq!(
            row("", "Event", series),
            vec![
                json!("2d"),
                json!("Warning"),
                json!("Event Reason"),
                json!("deployment/Deployment Name"),
                json!("spec.containers{foo}"),
                json!("kubelet, test"),
                json!("Message Data"),
                json!("3d"),
                json!(2),
                json!("event6")
            ]
        );
        // Singleton without count or timestamps; involved object without a name.
        let single = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Node"}, "type": "Normal",
            "eventTime": ago(3 * 86400), "source": {"component": "kubelet"}});
        let got = row("", "Event", single);
        assert_eq!(
            (&got[0], &got[3], &got[5], &got[7], &got[8]),
            (&json!("3d"), &json!("node"), &json!("kubelet"), &json!("3d"), &json!(1))
        );
        // Nothing at all.
        assert_eq!(
            row("", "Event", json!({})),
            vec![
                json!("<unknown>"),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!("<unknown>"),
                json!(1),
                json!("")
            ]
        );
    }

    #[test]
    fn events_k8s_io_events_print_like_core_events() {
        let ev = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "web.17a8b3c", "namespace": "default"},
            "eventTime": null,
            "reportingController": "kubelet", "reportingInstance": "node-1", "action": "",
            "reason": "BackOff", "regarding": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{app}"},
            "note": "Back-off restarting failed container", "type": "Warning",
            "deprecatedSource": {"component": "kubelet", "host": "node-1"},
            "deprecatedFirstTimestamp": ago(600), "deprecatedLastTimestamp": ago(30), "deprecatedCount": 12
        });
        assert_eq!(
            row("events.k8s.io", "Event", ev),
            vec![
                json!("30s"),
                json!("Warning"),
                json!("BackOff"),
                json!("pod/web"),
                json!("spec.containers{app}"),
                json!("kubelet, node-1"),
                json!("Back-off restarting failed container"),
                json!("10m"),
                json!(12),
                json!("web.17a8b3c")
            ]
        );
        let new_style = json!({
            "metadata": {"name": "n"}, "eventTime": ago(90), "reportingController": "example.com/ctl",
            "reportingInstance": "ctl-0", "regarding": {"kind": "Widget"}, "note": "hi", "type": "Normal", "reason": "Sync",
            "series": {"count": 4, "lastObservedTime": ago(5)}
        });
        let got = row("events.k8s.io", "Event", new_style);
        assert_eq!(
            got,
            vec![
                json!("5s"),
                json!("Normal"),
                json!("Sync"),
                json!("widget"),
                json!(""),
                json!("example.com/ctl, ctl-0"),
                json!("hi"),
                json!("90s"),
                json!(4),
                json!("n")
            ]
        );
    }

    #[test]
    fn resource_quotas() {
        let rq = json!({
            "metadata": {"name": "compute", "creationTimestamp": ago(3600)},
            "spec": {"hard": {"pods": "10", "requests.cpu": "1", "limits.memory": "2Gi", "limits.cpu": "2", "requests.memory": "1Gi"}},
            "status": {
                "hard": {"pods": "10", "requests.cpu": "1", "limits.memory": "2Gi", "limits.cpu": "2", "requests.memory": "1Gi"},
                "used": {"pods": "3", "requests.cpu": "500m", "limits.cpu": "1", "requests.memory": "256Mi"}
            }
        });
        assert_eq!(
            row("", "ResourceQuota", rq),
            vec![
                json!("compute"),
                json!("pods: 3/10, requests.cpu: 500m/1, requests.memory: 256Mi/1Gi"),
                json!("limits.cpu: 1/2, limits.memory: 0/2Gi"),
                json!("60m")
            ]
        );
        // Before the quota controller filled the status: empty cells.
        let fresh = json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "4"}}});
        assert_eq!(row("", "ResourceQuota", fresh), vec![json!("q"), json!(""), json!(""), json!("<unknown>")]);
        // "limits" alone is not a limits.* resource; object counts go to REQUEST.
        let odd = json!({"metadata": {"name": "q"}, "status": {"hard": {"limits": "1", "count/deployments.apps": "2"}, "used": {}}});
        assert_eq!(row("", "ResourceQuota", odd)[1..3], [json!("count/deployments.apps: 0/2, limits: 0/1"), json!("")]);
    }

    #[test]
    fn persistent_volumes_and_claims() {
        let claim_ref = json!({"name": "test", "namespace": "default"});
        let pv = |spec: Value, status: Value| {
            row("", "PersistentVolume", json!({"metadata": {"name": "test1"}, "spec": spec, "status": status}))
        };
        assert_eq!(
            pv(
                json!({"claimRef": claim_ref, "accessModes": ["ReadOnlyMany"], "capacity": {"storage": "4Gi"}}),
                json!({"phase": "Bound"})
            ),
            vec![
                json!("test1"),
                json!("4Gi"),
                json!("ROX"),
                json!(""),
                json!("Bound"),
                json!("default/test"),
                json!(""),
                json!("<unset>"),
                json!(""),
                json!("<unknown>"),
                json!("<unset>")
            ]
        );
        assert_eq!(
            pv(
                json!({"claimRef": claim_ref, "storageClassName": "my-scn", "volumeAttributesClassName": "my-vacn",
                    "accessModes": ["ReadWriteOncePod", "ReadWriteOnce", "ReadWriteOnce"], "capacity": {"storage": "10Gi"},
                    "persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem"}),
                json!({"phase": "Failed", "reason": "Recycler failed"})
            ),
            vec![
                json!("test1"),
                json!("10Gi"),
                json!("RWO,RWOP"),
                json!("Retain"),
                json!("Failed"),
                json!("default/test"),
                json!("my-scn"),
                json!("my-vacn"),
                json!("Recycler failed"),
                json!("<unknown>"),
                json!("Filesystem")
            ]
        );
        // Terminating, beta class annotation wins, no capacity prints the zero quantity.
        let pv2 = json!({"metadata": {"name": "v", "deletionTimestamp": ago(1), "annotations": {"volume.beta.kubernetes.io/storage-class": "beta"}},
            "spec": {"storageClassName": "ga"}, "status": {"phase": "Released"}});
        let got = row("", "PersistentVolume", pv2);
        assert_eq!(
            (&got[1], &got[4], &got[5], &got[6]),
            (&json!("0"), &json!("Terminating"), &json!(""), &json!("beta"))
        );

        let pvc = |spec: Value, status: Value| {
            row(
                "",
                "PersistentVolumeClaim",
                json!({"metadata": {"name": "data", "creationTimestamp": ago(300)}, "spec": spec, "status": status}),
            )
        };
        assert_eq!(
            pvc(
                json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "standard",
                "volumeMode": "Filesystem"}),
                json!({"phase": "Pending"})
            ),
            vec![
                json!("data"),
                json!("Pending"),
                json!(""),
                json!(""),
                json!(""),
                json!("standard"),
                json!("<unset>"),
                json!("5m"),
                json!("Filesystem")
            ]
        );
        assert_eq!(
            pvc(
                json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "standard",
                    "volumeMode": "Filesystem", "volumeName": "pvc-0b1c"}),
                json!({"phase": "Bound", "accessModes": ["ReadWriteOnce", "ReadOnlyMany"], "capacity": {"storage": "2Gi"}})
            ),
            vec![
                json!("data"),
                json!("Bound"),
                json!("pvc-0b1c"),
                json!("2Gi"),
                json!("RWO,ROX"),
                json!("standard"),
                json!("<unset>"),
                json!("5m"),
                json!("Filesystem")
            ]
        );
        // No class at all, beta annotation, terminating.
        let got = row(
            "",
            "PersistentVolumeClaim",
            json!({"metadata": {"name": "c", "deletionTimestamp": ago(1)}, "spec": {}, "status": {"phase": "Bound"}}),
        );
        assert_eq!((&got[1], &got[5]), (&json!("Terminating"), &json!("")));
        let got = row(
            "",
            "PersistentVolumeClaim",
            json!({"metadata": {"name": "c", "annotations": {"volume.beta.kubernetes.io/storage-class": "old"}},
            "spec": {"storageClassName": "new", "volumeAttributesClassName": "gold"}}),
        );
        assert_eq!((&got[5], &got[6]), (&json!("old"), &json!("gold")));
    }

    // -- apps ------------------------------------------------------------------------------

    fn template(containers: Value) -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}})
    }

    #[test]
    fn deployments() {
        let d = json!({
            "metadata": {"name": "web", "creationTimestamp": ago(5 * 60 + 3)},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": template(json!([{"name": "nginx", "image": "nginx:1.27"}, {"name": "sidecar", "image": "envoy:v1"}]))},
            "status": {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2}
        });
        assert_eq!(
            row("apps", "Deployment", d),
            vec![
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("5m3s"),
                json!("nginx,sidecar"),
                json!("nginx:1.27,envoy:v1"),
                json!("app=web")
            ]
        );
        // Just created: no status yet.
        let d = json!({"metadata": {"name": "d"}, "spec": {"replicas": 5, "selector": {"matchLabels": {"foo": "bar"}},
            "template": template(json!([{"name": "fake-container1", "image": "fake-image1"}, {"name": "fake-container2", "image": "fake-image2"}]))},
            "status": {"replicas": 10, "updatedReplicas": 2, "availableReplicas": 1, "unavailableReplicas": 4}});
        assert_eq!(
            row("apps", "Deployment", d),
            vec![
                json!("d"),
                json!("0/5"),
                json!(2),
                json!(1),
                json!("<unknown>"),
                json!("fake-container1,fake-container2"),
                json!("fake-image1,fake-image2"),
                json!("foo=bar")
            ]
        );
        // Selector rendering: expressions, sorted by key and values; empty; invalid.
        let sel = |s: Value| {
            row("apps", "Deployment", json!({"metadata": {"name": "d"}, "spec": {"selector": s}}))[7].clone()
        };
        assert_eq!(
            sel(json!({"matchLabels": {"tier": "web", "app": "x"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                    {"key": "canary", "operator": "DoesNotExist"}, {"key": "zone", "operator": "Exists"},
                    {"key": "app", "operator": "NotIn", "values": ["y"]}]})),
            json!("app=x,app notin (y),!canary,env in (dev,prod),tier=web,zone")
        );
        assert_eq!(sel(json!({})), json!(""));
        assert_eq!(sel(json!(null)), json!(""));
        assert_eq!(sel(json!({"matchExpressions": [{"key": "a", "operator": "Bogus"}]})), json!("<invalid>"));
        assert_eq!(
            sel(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})),
            json!("<invalid>")
        );
        assert_eq!(
            sel(json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]})),
            json!("<invalid>")
        );
        assert_eq!(sel(json!({"matchLabels": {"bad key": "x"}})), json!("<invalid>"));
        assert_eq!(sel(json!({"matchLabels": {"example.com/app": "-x"}})), json!("<invalid>"));
        assert_eq!(sel(json!({"matchLabels": {"example.com/app": ""}})), json!("example.com/app="));
    }

    #[test]
    fn replica_sets_stateful_sets_daemon_sets() {
        let rs = json!({"metadata": {"name": "web-7d4b9c", "creationTimestamp": ago(60)},
            "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7d4b9c"}},
                "template": template(json!([{"name": "c", "image": "i"}]))},
            "status": {"replicas": 5, "readyReplicas": 2, "availableReplicas": 2}});
        assert_eq!(
            row("apps", "ReplicaSet", rs),
            vec![
                json!("web-7d4b9c"),
                json!(5),
                json!(5),
                json!(2),
                json!("60s"),
                json!("c"),
                json!("i"),
                json!("app=web,pod-template-hash=7d4b9c")
            ]
        );
        // No selector at all: <none>; a malformed one: <error>.
        let rs = json!({"metadata": {"name": "r"}, "spec": {"replicas": 0}});
        assert_eq!(
            row("apps", "ReplicaSet", rs)[1..],
            [json!(0), json!(0), json!(0), json!("<unknown>"), json!(""), json!(""), json!("<none>")]
        );
        let rs = json!({"metadata": {"name": "r"}, "spec": {"selector": {"matchExpressions": [{"key": "", "operator": "Exists"}]}}});
        assert_eq!(row("apps", "ReplicaSet", rs)[7], json!("<error>"));

        let sts = json!({"metadata": {"name": "db", "creationTimestamp": ago(2 * 86400 + 3600)},
            "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                "template": template(json!([{"name": "postgres", "image": "postgres:16"}]))},
            "status": {"replicas": 3, "readyReplicas": 1}});
        assert_eq!(
            row("apps", "StatefulSet", sts),
            vec![json!("db"), json!("1/3"), json!("2d1h"), json!("postgres"), json!("postgres:16")]
        );

        let ds = json!({"metadata": {"name": "kindnet", "creationTimestamp": ago(30)},
            "spec": {"selector": {"matchLabels": {"app": "kindnet"}},
                "template": {"metadata": {"labels": {"app": "kindnet"}},
                    "spec": {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": [{"name": "kindnet-cni", "image": "kindnetd:v2"}]}}},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 2, "numberReady": 1, "updatedNumberScheduled": 2, "numberAvailable": 0}});
        assert_eq!(
            row("apps", "DaemonSet", ds),
            vec![
                json!("kindnet"),
                json!(3),
                json!(2),
                json!(1),
                json!(2),
                json!(0),
                json!("kubernetes.io/os=linux"),
                json!("30s"),
                json!("kindnet-cni"),
                json!("kindnetd:v2"),
                json!("app=kindnet")
            ]
        );
    }

    #[test]
    fn controller_revisions() {
        let cr = |owners: Value| {
            row(
                "apps",
                "ControllerRevision",
                json!({"metadata": {"name": "web-5d8f", "creationTimestamp": ago(10), "ownerReferences": owners},
                "revision": 2, "data": {}}),
            )
        };
        assert_eq!(
            cr(
                json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u", "controller": true, "blockOwnerDeletion": true}])
            ),
            vec![json!("web-5d8f"), json!("statefulset.apps/web"), json!(2), json!("10s")]
        );
        assert_eq!(
            cr(json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "controller": true}]))[1],
            json!("pod/p")
        );
        assert_eq!(cr(json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web"}]))[1], json!("<none>"));
        assert_eq!(cr(json!(null))[1], json!("<none>"));
        assert_eq!(cr(json!([{"apiVersion": "", "kind": "", "name": "n", "controller": true}]))[1], json!("n"));
        assert_eq!(cr(json!([{"apiVersion": "a/b/c", "kind": "K", "name": "n", "controller": true}]))[1], json!("n"));
    }

    // -- batch -----------------------------------------------------------------------------

    #[test]
    fn jobs() {
        let job = |meta: Value, spec: Value, status: Value| {
            row("batch", "Job", json!({"metadata": meta, "spec": spec, "status": status}))
        };
        let spec = json!({"completions": 2, "parallelism": 1, "backoffLimit": 6,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "abc"}},
            "template": template(json!([{"name": "pi", "image": "perl:5.34"}]))});
        assert_eq!(
            job(
                json!({"name": "pi", "creationTimestamp": ago(100)}),
                spec.clone(),
                json!({"startTime": ago(95), "active": 1, "succeeded": 1})
            ),
            vec![
                json!("pi"),
                json!("Running"),
                json!("1/2"),
                json!("95s"),
                json!("100s"),
                json!("pi"),
                json!("perl:5.34"),
                json!("batch.kubernetes.io/controller-uid=abc")
            ]
        );
        let complete = json!({"startTime": ago(3600), "completionTime": ago(1800), "succeeded": 2,
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]});
        assert_eq!(
            job(json!({"name": "pi"}), spec.clone(), complete)[1..4],
            [json!("Complete"), json!("2/2"), json!("30m")]
        );
        let status_of = |meta: Value, conds: Value| job(meta, json!({}), json!({"conditions": conds}))[1].clone();
        assert_eq!(status_of(json!({}), json!([{"type": "Failed", "status": "True"}])), json!("Failed"));
        assert_eq!(status_of(json!({}), json!([{"type": "Suspended", "status": "True"}])), json!("Suspended"));
        assert_eq!(status_of(json!({}), json!([{"type": "FailureTarget", "status": "True"}])), json!("FailureTarget"));
        assert_eq!(status_of(json!({}), json!([{"type": "Suspended", "status": "False"}])), json!("Running"));
        assert_eq!(
            status_of(json!({"deletionTimestamp": ago(1)}), json!([{"type": "Suspended", "status": "True"}])),
            json!("Terminating")
        );
        assert_eq!(
            status_of(json!({"deletionTimestamp": ago(1)}), json!([{"type": "Complete", "status": "True"}])),
            json!("Complete")
        );
        // Completions without spec.completions.
        let completions = |spec: Value| job(json!({}), spec, json!({"succeeded": 3}))[2].clone();
        assert_eq!(completions(json!({})), json!("3/1"));
        assert_eq!(completions(json!({"parallelism": 1})), json!("3/1"));
        assert_eq!(completions(json!({"parallelism": 4})), json!("3/1 of 4"));
        assert_eq!(completions(json!({"parallelism": 4, "completions": 8})), json!("3/8"));
        // Upstream: a start time in the future and a 30 minute run.
        assert_eq!(
            job(json!({}), json!({}), json!({"startTime": ago(-60), "completionTime": ago(-31 * 60)}))[3],
            json!("30m")
        );
        assert_eq!(job(json!({}), json!({}), json!({"startTime": ago(20 * 60)}))[3], json!("20m"));
        assert_eq!(job(json!({"creationTimestamp": ago(10 * 365 * 86400)}), json!({}), json!({}))[4], json!("10y"));
    }

    #[test]
    fn cron_jobs() {
        let cj = json!({"metadata": {"name": "hello", "creationTimestamp": ago(7200)},
            "spec": {"schedule": "*/1 * * * *", "suspend": false, "concurrencyPolicy": "Allow",
                "jobTemplate": {"spec": {"template": template(json!([{"name": "hello", "image": "busybox:1.28"}]))}}},
            "status": {"active": [{"kind": "Job", "name": "hello-1"}], "lastScheduleTime": ago(42)}});
        assert_eq!(
            row("batch", "CronJob", cj),
            vec![
                json!("hello"),
                json!("*/1 * * * *"),
                json!("<none>"),
                json!("False"),
                json!(1),
                json!("42s"),
                json!("120m"),
                json!("hello"),
                json!("busybox:1.28"),
                json!("<none>")
            ]
        );
        let cj = json!({"metadata": {"name": "c"}, "spec": {"schedule": "@daily", "timeZone": "Europe/Paris", "suspend": true,
            "jobTemplate": {"spec": {"selector": {"matchLabels": {"a": "b"}}}}}});
        assert_eq!(
            row("batch", "CronJob", cj),
            vec![
                json!("c"),
                json!("@daily"),
                json!("Europe/Paris"),
                json!("True"),
                json!(0),
                json!("<none>"),
                json!("<unknown>"),
                json!(""),
                json!(""),
                json!("a=b")
            ]
        );
        assert_eq!(row("batch", "CronJob", json!({}))[3], json!("<unset>"));
    }

    // -- networking, discovery, coordination ----------------------------------------------

    #[test]
    fn ingresses() {
        let ing = |spec: Value, status: Value| {
            row(
                "networking.k8s.io",
                "Ingress",
                json!({"metadata": {"name": "i", "creationTimestamp": ago(86400)}, "spec": spec, "status": status}),
            )
        };
        assert_eq!(
            ing(
                json!({"ingressClassName": "nginx", "rules": [{"host": "foo.bar.com", "http": {"paths": []}}],
                    "tls": [{"hosts": ["foo.bar.com"], "secretName": "tls"}]}),
                json!({"loadBalancer": {"ingress": [{"ip": "192.168.49.2"}]}})
            ),
            vec![
                json!("i"),
                json!("nginx"),
                json!("foo.bar.com"),
                json!("192.168.49.2"),
                json!("80, 443"),
                json!("24h")
            ]
        );
        assert_eq!(
            ing(
                json!({"defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}}),
                json!({"loadBalancer": {}})
            ),
            vec![json!("i"), json!("<none>"), json!("*"), json!(""), json!("80"), json!("24h")]
        );
        // More than three rules: the count includes rules without a host.
        let rules = json!([{"host": "a"}, {}, {"host": "b"}, {"host": "c"}, {"host": "d"}, {"host": "e"}]);
        assert_eq!(ing(json!({"rules": rules}), json!({}))[2], json!("a,b,c + 3 more..."));
        let rules = json!([{"host": "a"}, {"host": "b"}, {"host": "c"}]);
        assert_eq!(ing(json!({"rules": rules}), json!({}))[2], json!("a,b,c"));
        // Addresses are sorted, de-duplicated and never clipped.
        assert_eq!(
            ing(
                json!({}),
                json!({"loadBalancer": {"ingress": [{"hostname": "a-very-long-load-balancer.example.com"}, {"ip": "10.0.0.1"}]}})
            )[3],
            json!("10.0.0.1,a-very-long-load-balancer.example.com")
        );

        let class = |params: Value| {
            row(
                "networking.k8s.io",
                "IngressClass",
                json!({"metadata": {"name": "nginx", "creationTimestamp": ago(60)},
                "spec": {"controller": "k8s.io/ingress-nginx", "parameters": params}}),
            )
        };
        assert_eq!(
            class(json!(null)),
            vec![json!("nginx"), json!("k8s.io/ingress-nginx"), json!("<none>"), json!("60s")]
        );
        assert_eq!(
            class(json!({"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external-lb"}))[2],
            json!("IngressParameters.k8s.example.com/external-lb")
        );
        assert_eq!(
            class(json!({"kind": "ConfigMap", "name": "cfg", "scope": "Namespace", "namespace": "x"}))[2],
            json!("ConfigMap/cfg")
        );

        let np = |sel: Value| {
            row(
                "networking.k8s.io",
                "NetworkPolicy",
                json!({"metadata": {"name": "deny"}, "spec": {"podSelector": sel, "policyTypes": ["Ingress"]}}),
            )
        };
        assert_eq!(np(json!({})), vec![json!("deny"), json!("<none>"), json!("<unknown>")]);
        assert_eq!(np(json!(null))[1], json!("<none>"));
        assert_eq!(np(json!({"matchLabels": {"role": "db"}}))[1], json!("role=db"));
    }

    #[test]
    fn endpoint_slices_and_leases() {
        let es = |ports: Value, endpoints: Value| {
            row(
                "discovery.k8s.io",
                "EndpointSlice",
                json!({"metadata": {"name": "kubernetes", "creationTimestamp": ago(5)},
                "addressType": "IPv4", "ports": ports, "endpoints": endpoints}),
            )
        };
        assert_eq!(
            es(
                json!([{"name": "https", "port": 6443, "protocol": "TCP"}]),
                json!([{"addresses": ["172.18.0.2"], "conditions": {"ready": true}}])
            ),
            vec![json!("kubernetes"), json!("IPv4"), json!("6443"), json!("172.18.0.2"), json!("5s")]
        );
        assert_eq!(es(json!(null), json!(null))[2..4], [json!("<unset>"), json!("<unset>")]);
        assert_eq!(
            es(
                json!([{"port": 80}, {"name": "named"}, {}, {"port": 443}, {"port": 8080}]),
                json!([{"addresses": ["10.0.0.1", "10.0.0.2"]}, {"addresses": ["10.0.0.3", "10.0.0.4", "10.0.0.5"]}])
            )[2..4],
            [json!("80,named,* + 2 more..."), json!("10.0.0.1,10.0.0.2,10.0.0.3 + 2 more...")]
        );

        let lease = json!({"metadata": {"name": "kube-scheduler", "creationTimestamp": ago(3 * 3600 + 20 * 60)},
            "spec": {"holderIdentity": "kind-control-plane_1b2c", "leaseDurationSeconds": 15}});
        assert_eq!(
            row("coordination.k8s.io", "Lease", lease),
            vec![json!("kube-scheduler"), json!("kind-control-plane_1b2c"), json!("3h20m")]
        );
        assert_eq!(row("coordination.k8s.io", "Lease", json!({"metadata": {"name": "l"}, "spec": {}}))[1], json!(""));
    }

    // -- rbac, policy, storage, autoscaling ------------------------------------------------

    #[test]
    fn role_bindings() {
        let rb = json!({"metadata": {"name": "read-pods", "namespace": "default", "creationTimestamp": ago(600)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "jane"},
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "joe"},
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"},
            {"kind": "ServiceAccount", "name": "default", "namespace": "kube-system"},
            {"kind": "Other", "name": "x"}
        ]});
        assert_eq!(
            row("rbac.authorization.k8s.io", "RoleBinding", rb),
            vec![
                json!("read-pods"),
                json!("Role/pod-reader"),
                json!("10m"),
                json!("jane, joe"),
                json!("devs"),
                json!("kube-system/default")
            ]
        );
        let crb = json!({"metadata": {"name": "cluster-admin"}, "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "Group", "name": "system:masters"}]});
        assert_eq!(
            row("rbac.authorization.k8s.io", "ClusterRoleBinding", crb),
            vec![
                json!("cluster-admin"),
                json!("ClusterRole/cluster-admin"),
                json!("<unknown>"),
                json!(""),
                json!("system:masters"),
                json!("")
            ]
        );
        assert_eq!(
            columns("rbac.authorization.k8s.io", "ClusterRoleBinding").map(|c| c[3].description),
            Some("Users in the clusterRoleBinding")
        );
    }

    #[test]
    fn pod_disruption_budgets_storage_classes_scales() {
        let pdb = |spec: Value| {
            row(
                "policy",
                "PodDisruptionBudget",
                json!({"metadata": {"name": "zk", "creationTimestamp": ago(60)}, "spec": spec,
                "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}}),
            )
        };
        assert_eq!(
            pdb(json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "zk"}}})),
            vec![json!("zk"), json!("2"), json!("N/A"), json!(1), json!("60s")]
        );
        assert_eq!(pdb(json!({"maxUnavailable": "25%"}))[1..3], [json!("N/A"), json!("25%")]);

        let sc = |annotations: Value, extra: Value| {
            let mut obj = json!({"metadata": {"name": "standard", "creationTimestamp": ago(86400 * 9), "annotations": annotations},
                "provisioner": "rancher.io/local-path"});
            if let (Some(o), Some(e)) = (obj.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            row("storage.k8s.io", "StorageClass", obj)
        };
        assert_eq!(
            sc(
                json!({"storageclass.kubernetes.io/is-default-class": "true"}),
                json!({"reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"})
            ),
            vec![
                json!("standard (default)"),
                json!("rancher.io/local-path"),
                json!("Delete"),
                json!("WaitForFirstConsumer"),
                json!(false),
                json!("9d")
            ]
        );
        assert_eq!(
            sc(
                json!({"storageclass.beta.kubernetes.io/is-default-class": "true"}),
                json!({"allowVolumeExpansion": true, "reclaimPolicy": "Retain"})
            ),
            vec![
                json!("standard (default)"),
                json!("rancher.io/local-path"),
                json!("Retain"),
                json!("Immediate"),
                json!(true),
                json!("9d")
            ]
        );
        assert_eq!(
            sc(json!({"storageclass.kubernetes.io/is-default-class": "false"}), json!({}))[0],
            json!("standard")
        );

        let scale = json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": "web", "creationTimestamp": ago(60)},
            "spec": {"replicas": 3}, "status": {"replicas": 2, "selector": "app=web"}});
        assert_eq!(row("autoscaling", "Scale", scale), vec![json!("web"), json!(3), json!(2), json!("60s")]);
    }

    #[test]
    fn label_name_validation() {
        for ok in ["a", "app", "app.kubernetes.io/name", "A_b-c.d", "x/y", "a1"] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a/b/c", "/a", "a/", "Example.com/a", "a b", &"a".repeat(64)] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
        assert!(is_label_value(""));
        assert!(is_label_value("v1.2_3-x"));
        assert!(!is_label_value("-v"));
        assert!(!is_label_value(&"v".repeat(64)));
    }

    // -- Properties ------------------------------------------------------------------------

    /// Field names the printers read, so that random objects reach deep into them.
    const KEYS: &[&str] = &[
        "metadata",
        "name",
        "creationTimestamp",
        "deletionTimestamp",
        "labels",
        "annotations",
        "ownerReferences",
        "controller",
        "apiVersion",
        "kind",
        "spec",
        "status",
        "containers",
        "initContainers",
        "restartPolicy",
        "containerStatuses",
        "initContainerStatuses",
        "state",
        "lastState",
        "waiting",
        "running",
        "terminated",
        "reason",
        "exitCode",
        "signal",
        "finishedAt",
        "restartCount",
        "ready",
        "started",
        "phase",
        "conditions",
        "type",
        "podIPs",
        "ip",
        "nodeName",
        "readinessGates",
        "conditionType",
        "selector",
        "matchLabels",
        "matchExpressions",
        "key",
        "operator",
        "values",
        "template",
        "replicas",
        "readyReplicas",
        "ports",
        "port",
        "nodePort",
        "protocol",
        "clusterIPs",
        "externalIPs",
        "loadBalancer",
        "ingress",
        "hostname",
        "subsets",
        "addresses",
        "hard",
        "used",
        "capacity",
        "storage",
        "accessModes",
        "claimRef",
        "series",
        "count",
        "lastObservedTime",
        "eventTime",
        "firstTimestamp",
        "lastTimestamp",
        "involvedObject",
        "regarding",
        "source",
        "component",
        "host",
        "rules",
        "tls",
        "parameters",
        "apiGroup",
        "roleRef",
        "subjects",
        "minAvailable",
        "completions",
        "parallelism",
        "startTime",
        "completionTime",
        "jobTemplate",
        "suspend",
        "endpoints",
        "unschedulable",
        "nodeInfo",
        "volumeName",
        "volumeMode",
        "data",
        "binaryData",
    ];

    const STRINGS: &[&str] = &[
        "",
        "True",
        "False",
        "Always",
        "Ready",
        "Initialized",
        "PodScheduled",
        "SchedulingGated",
        "Completed",
        "PodInitializing",
        "Running",
        "Succeeded",
        "Failed",
        "NodeLost",
        "In",
        "NotIn",
        "Exists",
        "DoesNotExist",
        "LoadBalancer",
        "ClusterIP",
        "NodePort",
        "ExternalName",
        "limits.cpu",
        "requests.cpu",
        "Complete",
        "InternalIP",
        "ExternalIP",
        "node-role.kubernetes.io/x",
        "kubernetes.io/role",
        "ServiceAccount",
        "User",
        "apps/v1",
        "a/b/c",
        "2024-01-02T03:04:05Z",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999999999Z",
        "2024-01-02T03:04:05.123456+05:30",
        "not a time",
        "::1",
        "10Gi",
    ];

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-3i64..5).prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            proptest::sample::select(STRINGS).prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            let key = prop_oneof![4 => proptest::sample::select(KEYS).prop_map(str::to_string), 1 => ".{0,6}"];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec((key, inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn cells_never_panic_and_fill_every_column(obj in json_value(), now in any::<i64>()) {
            for (g, k) in ALL_KINDS {
                let cols = columns(g, k).unwrap_or_default();
                let cells = cells(g, k, &obj, now).unwrap_or_default();
                prop_assert_eq!(cells.len(), cols.len(), "{}/{}", g, k);
                let _ = row_conditions(g, k, &obj);
            }
            prop_assert_eq!(default_cells(&obj).len(), default_columns().len());
        }

        #[test]
        fn pods_never_panic(
            spec in json_value(), status in json_value(), meta in json_value(), now in -100_000_000_000i64..100_000_000_000,
        ) {
            let obj = json!({"metadata": meta, "spec": spec, "status": status});
            prop_assert_eq!(cells("", "Pod", &obj, now).map(|c| c.len()), Some(9));
        }
    }
}
