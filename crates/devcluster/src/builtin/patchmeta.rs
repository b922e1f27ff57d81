//! The Kubernetes OpenAPI extensions that k8s-openapi's `schemars` schemas lack, inserted where
//! the real kube-apiserver publishes them.
//!
//! The real server's OpenAPI carries, per property, the Go struct tags and markers of
//! k8s.io/api and k8s.io/apimachinery types: `patchStrategy`/`patchMergeKey` become
//! `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key` (strategic merge patch),
//! `+listType`/`+listMapKey` become `x-kubernetes-list-type`/`x-kubernetes-list-map-keys`,
//! `+mapType`/`+structType` become `x-kubernetes-map-type` (server-side apply).
//!
//! Sources of the table below (Kubernetes 1.33):
//! - list and map types: the merge strategies k8s-openapi 0.29 (`v1_33`) generated from the
//!   upstream OpenAPI (its `DeepMerge` impls), for core, apps, batch, networking, rbac,
//!   discovery, coordination, events, policy, storage, autoscaling/v2, admissionregistration,
//!   apiextensions and meta/v1;
//! - patch strategies and merge keys: the `patchStrategy`/`patchMergeKey` struct tags of the
//!   Go types (all 33 distinct tags, assigned to their structs);
//! - map keys with more than one key (`ports`: port + protocol, `topologySpreadConstraints`:
//!   topologyKey + whenUnsatisfiable), which k8s-openapi reduces to the merge key;
//! - `+structType=atomic` structs (selectors, object references, key selectors), marked on
//!   their definitions.
//!
//! Besides, `annotate` corrects the schemas of a few special types so that they accept what
//! the real server accepts: `Quantity` (a string or a number: `cpu: 0.5`), `JSON` (any value),
//! `JSONSchemaPropsOr*`, `RawExtension` and `FieldsV1` (kept whole, never pruned), and it drops
//! the `required: [metadata]` k8s-openapi puts on top-level kinds (the real server reports a
//! missing name instead).
//!
//! Deliberate difference: for the two struct-valued properties with a patch strategy
//! (`DeploymentSpec.strategy`: retainKeys, `PodDisruptionBudgetSpec.selector`: replace) the
//! real OpenAPI puts the extension beside an `allOf: [$ref]`; here the referenced definition is
//! inlined into the property so that `SchemaRef`, which resolves `allOf` wrappers, sees it.

use serde_json::{Map, Value, json};

/// One property's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchMeta {
    /// Definition name, e.g. `io.k8s.api.core.v1.PodSpec`.
    pub def: &'static str,
    /// JSON property name.
    pub prop: &'static str,
    pub patch_strategy: Option<&'static str>,
    pub merge_key: Option<&'static str>,
    /// `atomic`, `set` or `map`.
    pub list_type: Option<&'static str>,
    pub list_map_keys: &'static [&'static str],
    /// `atomic` (or `granular`).
    pub map_type: Option<&'static str>,
}

const fn e(
    def: &'static str,
    prop: &'static str,
    patch_strategy: Option<&'static str>,
    merge_key: Option<&'static str>,
    list_type: Option<&'static str>,
    list_map_keys: &'static [&'static str],
    map_type: Option<&'static str>,
) -> PatchMeta {
    PatchMeta { def, prop, patch_strategy, merge_key, list_type, list_map_keys, map_type }
}

/// Every annotated property, sorted by definition and property.
pub static TABLE: &[PatchMeta] = &[
    e(
        "io.k8s.api.admissionregistration.v1.MatchResources",
        "excludeResourceRules",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e("io.k8s.api.admissionregistration.v1.MatchResources", "resourceRules", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.admissionregistration.v1.MutatingWebhook",
        "admissionReviewVersions",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.MutatingWebhook",
        "matchConditions",
        Some("merge"),
        Some("name"),
        Some("map"),
        &["name"],
        None,
    ),
    e("io.k8s.api.admissionregistration.v1.MutatingWebhook", "rules", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
        "webhooks",
        Some("merge"),
        Some("name"),
        Some("map"),
        &["name"],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.NamedRuleWithOperations",
        "apiGroups",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.NamedRuleWithOperations",
        "apiVersions",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.NamedRuleWithOperations",
        "operations",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.NamedRuleWithOperations",
        "resourceNames",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.NamedRuleWithOperations",
        "resources",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e("io.k8s.api.admissionregistration.v1.RuleWithOperations", "apiGroups", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.admissionregistration.v1.RuleWithOperations", "apiVersions", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.admissionregistration.v1.RuleWithOperations", "operations", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.admissionregistration.v1.RuleWithOperations", "resources", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.admissionregistration.v1.TypeChecking", "expressionWarnings", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBindingSpec",
        "validationActions",
        None,
        None,
        Some("set"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "auditAnnotations",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "matchConditions",
        Some("merge"),
        Some("name"),
        Some("map"),
        &["name"],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "validations",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "variables",
        Some("merge"),
        Some("name"),
        Some("map"),
        &["name"],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyStatus",
        "conditions",
        None,
        None,
        Some("map"),
        &["type"],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingWebhook",
        "admissionReviewVersions",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingWebhook",
        "matchConditions",
        Some("merge"),
        Some("name"),
        Some("map"),
        &["name"],
        None,
    ),
    e("io.k8s.api.admissionregistration.v1.ValidatingWebhook", "rules", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
        "webhooks",
        Some("merge"),
        Some("name"),
        Some("map"),
        &["name"],
        None,
    ),
    e("io.k8s.api.apps.v1.DaemonSetStatus", "conditions", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e("io.k8s.api.apps.v1.DeploymentSpec", "strategy", Some("retainKeys"), None, None, &[], None),
    e("io.k8s.api.apps.v1.DeploymentStatus", "conditions", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e("io.k8s.api.apps.v1.StatefulSetSpec", "volumeClaimTemplates", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.apps.v1.StatefulSetStatus", "conditions", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e("io.k8s.api.autoscaling.v2.HPAScalingRules", "policies", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec", "metrics", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus",
        "conditions",
        Some("merge"),
        Some("type"),
        Some("map"),
        &["type"],
        None,
    ),
    e(
        "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus",
        "currentMetrics",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e("io.k8s.api.batch.v1.CronJobStatus", "active", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.batch.v1.JobStatus", "conditions", Some("merge"), Some("type"), Some("atomic"), &[], None),
    e("io.k8s.api.batch.v1.PodFailurePolicy", "rules", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement", "values", None, None, Some("set"), &[], None),
    e("io.k8s.api.batch.v1.PodFailurePolicyRule", "onPodConditions", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.batch.v1.SuccessPolicy", "rules", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.batch.v1.UncountedTerminatedPods", "failed", None, None, Some("set"), &[], None),
    e("io.k8s.api.batch.v1.UncountedTerminatedPods", "succeeded", None, None, Some("set"), &[], None),
    e("io.k8s.api.certificates.v1.CertificateSigningRequestSpec", "groups", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.certificates.v1.CertificateSigningRequestSpec", "usages", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.certificates.v1.CertificateSigningRequestStatus",
        "conditions",
        None,
        None,
        Some("map"),
        &["type"],
        None,
    ),
    e("io.k8s.api.core.v1.Capabilities", "add", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.Capabilities", "drop", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.CephFSPersistentVolumeSource", "monitors", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.CephFSVolumeSource", "monitors", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ComponentStatus", "conditions", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e("io.k8s.api.core.v1.ConfigMapProjection", "items", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ConfigMapVolumeSource", "items", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.Container", "args", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.Container", "command", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.Container", "env", Some("merge"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.Container", "envFrom", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.Container",
        "ports",
        Some("merge"),
        Some("containerPort"),
        Some("map"),
        &["containerPort", "protocol"],
        None,
    ),
    e("io.k8s.api.core.v1.Container", "resizePolicy", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.Container",
        "volumeDevices",
        Some("merge"),
        Some("devicePath"),
        Some("map"),
        &["devicePath"],
        None,
    ),
    e(
        "io.k8s.api.core.v1.Container",
        "volumeMounts",
        Some("merge"),
        Some("mountPath"),
        Some("map"),
        &["mountPath"],
        None,
    ),
    e("io.k8s.api.core.v1.ContainerImage", "names", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.ContainerStatus",
        "allocatedResourcesStatus",
        Some("merge"),
        Some("name"),
        Some("map"),
        &["name"],
        None,
    ),
    e(
        "io.k8s.api.core.v1.ContainerStatus",
        "volumeMounts",
        Some("merge"),
        Some("mountPath"),
        Some("map"),
        &["mountPath"],
        None,
    ),
    e("io.k8s.api.core.v1.DownwardAPIProjection", "items", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.DownwardAPIVolumeSource", "items", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.EndpointSubset", "addresses", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.EndpointSubset", "notReadyAddresses", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.EndpointSubset", "ports", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.Endpoints", "subsets", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.EphemeralContainer", "args", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.EphemeralContainer", "command", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.EphemeralContainer", "env", Some("merge"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.EphemeralContainer", "envFrom", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.EphemeralContainer",
        "ports",
        Some("merge"),
        Some("containerPort"),
        Some("map"),
        &["containerPort", "protocol"],
        None,
    ),
    e("io.k8s.api.core.v1.EphemeralContainer", "resizePolicy", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeDevices",
        Some("merge"),
        Some("devicePath"),
        Some("map"),
        &["devicePath"],
        None,
    ),
    e(
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeMounts",
        Some("merge"),
        Some("mountPath"),
        Some("map"),
        &["mountPath"],
        None,
    ),
    e("io.k8s.api.core.v1.ExecAction", "command", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.FCVolumeSource", "targetWWNs", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.FCVolumeSource", "wwids", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.HTTPGetAction", "httpHeaders", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.HostAlias", "hostnames", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ISCSIPersistentVolumeSource", "portals", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ISCSIVolumeSource", "portals", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.LimitRangeSpec", "limits", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.LinuxContainerUser", "supplementalGroups", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.LoadBalancerIngress", "ports", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.LoadBalancerStatus", "ingress", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NamespaceSpec", "finalizers", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NamespaceStatus", "conditions", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e(
        "io.k8s.api.core.v1.NodeAffinity",
        "preferredDuringSchedulingIgnoredDuringExecution",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e("io.k8s.api.core.v1.NodeSelector", "nodeSelectorTerms", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NodeSelectorRequirement", "values", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NodeSelectorTerm", "matchExpressions", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NodeSelectorTerm", "matchFields", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NodeSpec", "podCIDRs", Some("merge"), None, Some("set"), &[], None),
    e("io.k8s.api.core.v1.NodeSpec", "taints", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NodeStatus", "addresses", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e("io.k8s.api.core.v1.NodeStatus", "conditions", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e("io.k8s.api.core.v1.NodeStatus", "images", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NodeStatus", "runtimeHandlers", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NodeStatus", "volumesAttached", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.NodeStatus", "volumesInUse", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PersistentVolumeClaimSpec", "accessModes", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "accessModes", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.PersistentVolumeClaimStatus",
        "conditions",
        Some("merge"),
        Some("type"),
        Some("map"),
        &["type"],
        None,
    ),
    e("io.k8s.api.core.v1.PersistentVolumeSpec", "accessModes", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PersistentVolumeSpec", "mountOptions", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.PodAffinity",
        "preferredDuringSchedulingIgnoredDuringExecution",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.core.v1.PodAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e("io.k8s.api.core.v1.PodAffinityTerm", "matchLabelKeys", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodAffinityTerm", "mismatchLabelKeys", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodAffinityTerm", "namespaces", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.PodAntiAffinity",
        "preferredDuringSchedulingIgnoredDuringExecution",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.api.core.v1.PodAntiAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e("io.k8s.api.core.v1.PodDNSConfig", "nameservers", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodDNSConfig", "options", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodDNSConfig", "searches", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodSecurityContext", "supplementalGroups", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodSecurityContext", "sysctls", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodSpec", "containers", Some("merge"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", Some("merge"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.PodSpec", "hostAliases", Some("merge"), Some("ip"), Some("map"), &["ip"], None),
    e("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", Some("merge"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.PodSpec", "initContainers", Some("merge"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.PodSpec", "nodeSelector", None, None, None, &[], Some("atomic")),
    e("io.k8s.api.core.v1.PodSpec", "readinessGates", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "resourceClaims",
        Some("merge,retainKeys"),
        Some("name"),
        Some("map"),
        &["name"],
        None,
    ),
    e("io.k8s.api.core.v1.PodSpec", "schedulingGates", Some("merge"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.PodSpec", "tolerations", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.api.core.v1.PodSpec",
        "topologySpreadConstraints",
        Some("merge"),
        Some("topologyKey"),
        Some("map"),
        &["topologyKey", "whenUnsatisfiable"],
        None,
    ),
    e("io.k8s.api.core.v1.PodSpec", "volumes", Some("merge,retainKeys"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.PodStatus", "conditions", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e("io.k8s.api.core.v1.PodStatus", "containerStatuses", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodStatus", "ephemeralContainerStatuses", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodStatus", "hostIPs", Some("merge"), Some("ip"), Some("map"), &["ip"], None),
    e("io.k8s.api.core.v1.PodStatus", "initContainerStatuses", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.PodStatus", "podIPs", Some("merge"), Some("ip"), Some("map"), &["ip"], None),
    e(
        "io.k8s.api.core.v1.PodStatus",
        "resourceClaimStatuses",
        Some("merge,retainKeys"),
        Some("name"),
        Some("map"),
        &["name"],
        None,
    ),
    e("io.k8s.api.core.v1.ProjectedVolumeSource", "sources", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.RBDPersistentVolumeSource", "monitors", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.RBDVolumeSource", "monitors", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ReplicationControllerSpec", "selector", None, None, None, &[], Some("atomic")),
    e(
        "io.k8s.api.core.v1.ReplicationControllerStatus",
        "conditions",
        Some("merge"),
        Some("type"),
        Some("map"),
        &["type"],
        None,
    ),
    e("io.k8s.api.core.v1.ResourceQuotaSpec", "scopes", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ResourceRequirements", "claims", None, None, Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.ResourceStatus", "resources", None, None, Some("map"), &["resourceId"], None),
    e("io.k8s.api.core.v1.ScopeSelector", "matchExpressions", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ScopedResourceSelectorRequirement", "values", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.SecretProjection", "items", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.SecretVolumeSource", "items", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ServiceAccount", "imagePullSecrets", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ServiceAccount", "secrets", Some("merge"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.core.v1.ServiceSpec", "clusterIPs", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ServiceSpec", "externalIPs", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ServiceSpec", "ipFamilies", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ServiceSpec", "loadBalancerSourceRanges", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.ServiceSpec", "ports", Some("merge"), Some("port"), Some("map"), &["port", "protocol"], None),
    e("io.k8s.api.core.v1.ServiceSpec", "selector", None, None, None, &[], Some("atomic")),
    e("io.k8s.api.core.v1.ServiceStatus", "conditions", Some("merge"), Some("type"), Some("map"), &["type"], None),
    e("io.k8s.api.core.v1.TopologySelectorLabelRequirement", "values", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.TopologySelectorTerm", "matchLabelExpressions", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.core.v1.TopologySpreadConstraint", "matchLabelKeys", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.discovery.v1.Endpoint", "addresses", None, None, Some("set"), &[], None),
    e("io.k8s.api.discovery.v1.EndpointHints", "forNodes", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.discovery.v1.EndpointHints", "forZones", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.discovery.v1.EndpointSlice", "endpoints", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.discovery.v1.EndpointSlice", "ports", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.HTTPIngressRuleValue", "paths", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.IPBlock", "except", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.IngressLoadBalancerIngress", "ports", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.IngressLoadBalancerStatus", "ingress", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.IngressSpec", "rules", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.IngressSpec", "tls", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.IngressTLS", "hosts", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.NetworkPolicyEgressRule", "ports", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.NetworkPolicyEgressRule", "to", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.NetworkPolicyIngressRule", "from", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.NetworkPolicyIngressRule", "ports", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.NetworkPolicySpec", "egress", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.NetworkPolicySpec", "ingress", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.NetworkPolicySpec", "policyTypes", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.ServiceCIDRSpec", "cidrs", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.networking.v1.ServiceCIDRStatus", "conditions", None, None, Some("map"), &["type"], None),
    e("io.k8s.api.policy.v1.PodDisruptionBudgetSpec", "selector", Some("replace"), None, None, &[], None),
    e(
        "io.k8s.api.policy.v1.PodDisruptionBudgetStatus",
        "conditions",
        Some("merge"),
        Some("type"),
        Some("map"),
        &["type"],
        None,
    ),
    e("io.k8s.api.rbac.v1.AggregationRule", "clusterRoleSelectors", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.rbac.v1.ClusterRole", "rules", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.rbac.v1.ClusterRoleBinding", "subjects", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.rbac.v1.PolicyRule", "apiGroups", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.rbac.v1.PolicyRule", "nonResourceURLs", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.rbac.v1.PolicyRule", "resourceNames", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.rbac.v1.PolicyRule", "resources", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.rbac.v1.PolicyRule", "verbs", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.rbac.v1.Role", "rules", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.rbac.v1.RoleBinding", "subjects", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.storage.v1.CSIDriverSpec", "tokenRequests", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.storage.v1.CSIDriverSpec", "volumeLifecycleModes", None, None, Some("set"), &[], None),
    e("io.k8s.api.storage.v1.CSINodeDriver", "topologyKeys", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.storage.v1.CSINodeSpec", "drivers", Some("merge"), Some("name"), Some("map"), &["name"], None),
    e("io.k8s.api.storage.v1.StorageClass", "allowedTopologies", None, None, Some("atomic"), &[], None),
    e("io.k8s.api.storage.v1.StorageClass", "mountOptions", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionNames",
        "categories",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionNames",
        "shortNames",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionSpec",
        "versions",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus",
        "conditions",
        None,
        None,
        Some("map"),
        &["type"],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus",
        "storedVersions",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionVersion",
        "additionalPrinterColumns",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionVersion",
        "selectableFields",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "allOf",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "anyOf",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "enum",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "oneOf",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "required",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "x-kubernetes-list-map-keys",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        "x-kubernetes-validations",
        Some("merge"),
        Some("rule"),
        Some("map"),
        &["rule"],
        None,
    ),
    e(
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.WebhookConversion",
        "conversionReviewVersions",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e(
        "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup",
        "serverAddressByClientCIDRs",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup", "versions", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.APIGroupList", "groups", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.APIResource", "categories", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.APIResource", "shortNames", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.APIResource", "verbs", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList", "resources", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.apimachinery.pkg.apis.meta.v1.APIVersions",
        "serverAddressByClientCIDRs",
        None,
        None,
        Some("atomic"),
        &[],
        None,
    ),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.APIVersions", "versions", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions", "dryRun", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.FieldSelectorRequirement", "values", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", "matchExpressions", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", "values", None, None, Some("atomic"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", Some("merge"), None, Some("set"), &[], None),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "managedFields", None, None, Some("atomic"), &[], None),
    e(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "ownerReferences",
        Some("merge"),
        Some("uid"),
        Some("map"),
        &["uid"],
        None,
    ),
    e("io.k8s.apimachinery.pkg.apis.meta.v1.StatusDetails", "causes", None, None, Some("atomic"), &[], None),
];

/// Definitions marked `+structType=atomic` upstream (published as `x-kubernetes-map-type:
/// atomic`): server-side apply replaces them as a whole.
pub static ATOMIC_STRUCTS: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    "io.k8s.api.core.v1.ObjectReference",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.TypedLocalObjectReference",
    "io.k8s.api.core.v1.SecretReference",
    "io.k8s.api.core.v1.ConfigMapKeySelector",
    "io.k8s.api.core.v1.SecretKeySelector",
    "io.k8s.api.core.v1.ObjectFieldSelector",
    "io.k8s.api.core.v1.ResourceFieldSelector",
    "io.k8s.api.core.v1.NodeSelector",
    "io.k8s.api.core.v1.NodeSelectorTerm",
    "io.k8s.api.core.v1.TopologySelectorTerm",
];

/// The extensions of one property, if the table has them.
#[cfg(test)]
pub fn lookup(def: &str, prop: &str) -> Option<&'static PatchMeta> {
    TABLE.binary_search_by(|m| (m.def, m.prop).cmp(&(def, prop))).ok().and_then(|i| TABLE.get(i))
}

const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const PRESERVE_WHOLE: &[&str] = &[
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
];

fn ref_target(node: &Value) -> Option<String> {
    let r = node
        .get("$ref")
        .or_else(|| node.get("allOf").and_then(Value::as_array).and_then(|a| a.first()).and_then(|f| f.get("$ref")))?
        .as_str()?;
    Some(r.rsplit('/').next().unwrap_or(r).to_string())
}

/// Insert the Kubernetes extensions into schemars-generated definitions (keyed by definition
/// name, `$ref`s of the form `#/components/schemas/<name>`), and fix the special types.
/// Idempotent; definitions or properties that are absent are skipped.
pub fn annotate(defs: &mut Map<String, Value>) {
    for name in ATOMIC_STRUCTS {
        if let Some(Value::Object(d)) = defs.get_mut(*name) {
            d.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
    }
    for m in TABLE {
        // A struct-valued property behind an `allOf` wrapper: inline the target.
        let inline = m.list_type.is_none() && m.map_type.is_none();
        let target = if inline {
            defs.get(m.def)
                .and_then(|d| d.get("properties"))
                .and_then(|p| p.get(m.prop))
                .and_then(ref_target)
                .and_then(|t| defs.get(&t).cloned())
        } else {
            None
        };
        let Some(prop) = defs
            .get_mut(m.def)
            .and_then(|d| d.get_mut("properties"))
            .and_then(|p| p.get_mut(m.prop))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        if let Some(Value::Object(t)) = target {
            let description = prop.get("description").cloned();
            *prop = t;
            if let Some(d) = description {
                prop.insert("description".into(), d);
            }
        }
        if let Some(s) = m.patch_strategy {
            prop.insert("x-kubernetes-patch-strategy".into(), json!(s));
        }
        if let Some(k) = m.merge_key {
            prop.insert("x-kubernetes-patch-merge-key".into(), json!(k));
        }
        if let Some(t) = m.list_type {
            prop.insert("x-kubernetes-list-type".into(), json!(t));
            if t == "map" {
                prop.insert("x-kubernetes-list-map-keys".into(), json!(m.list_map_keys));
            }
        }
        if let Some(t) = m.map_type {
            prop.insert("x-kubernetes-map-type".into(), json!(t));
        }
    }
    // The `default`s of the real OpenAPI (zero values of required scalars, `+default=` markers).
    crate::builtin::zero::annotate_defaults(defs);
    // Quantity: the real v3 schema is `oneOf: [string, number]` (a YAML `cpu: 0.5` is a number);
    // k8s-openapi marks it int-or-string, which would reject 0.5.
    if let Some(Value::Object(q)) = defs.get_mut(QUANTITY) {
        q.remove("x-kubernetes-int-or-string");
        q.remove("type");
        q.insert("oneOf".into(), json!([{"type": "string"}, {"type": "number"}]));
    }
    for name in PRESERVE_WHOLE {
        if let Some(Value::Object(d)) = defs.get_mut(*name) {
            if name.ends_with(".JSON") {
                // Any JSON value, not only an object.
                d.remove("type");
            }
            d.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
        }
    }
    // k8s-openapi requires `metadata` on every kind; the real schema does not.
    for def in defs.values_mut() {
        let is_kind = def.get("properties").and_then(|p| p.get("apiVersion")).is_some()
            && def.get("properties").and_then(|p| p.get("kind")).is_some();
        if !is_kind {
            continue;
        }
        if let Some(Value::Array(req)) = def.get_mut("required") {
            req.retain(|r| r != "metadata");
            if req.is_empty()
                && let Some(o) = def.as_object_mut()
            {
                o.remove("required");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ListType, SchemaRef};
    use k8s_openapi::api::{
        admissionregistration, apps, autoscaling, batch, coordination, core, discovery, events, networking, policy,
        rbac, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    use schemars::generate::SchemaSettings;

    fn generate() -> Map<String, Value> {
        let settings = SchemaSettings::openapi3().with(|s| s.definitions_path = "#/components/schemas/".into());
        let mut g = settings.into_generator();
        macro_rules! gen_all { ($($t:ty),* $(,)?) => { $( let _ = g.subschema_for::<$t>(); )* }; }
        gen_all!(
            core::v1::Pod,
            core::v1::Service,
            core::v1::Node,
            core::v1::Namespace,
            core::v1::ConfigMap,
            core::v1::Secret,
            core::v1::ServiceAccount,
            core::v1::Endpoints,
            core::v1::Event,
            core::v1::ResourceQuota,
            core::v1::LimitRange,
            core::v1::PersistentVolumeClaim,
            core::v1::PersistentVolume,
            core::v1::ReplicationController,
            core::v1::PodTemplate,
            apps::v1::Deployment,
            apps::v1::ReplicaSet,
            apps::v1::StatefulSet,
            apps::v1::DaemonSet,
            apps::v1::ControllerRevision,
            batch::v1::Job,
            batch::v1::CronJob,
            networking::v1::Ingress,
            networking::v1::IngressClass,
            networking::v1::NetworkPolicy,
            discovery::v1::EndpointSlice,
            coordination::v1::Lease,
            events::v1::Event,
            rbac::v1::Role,
            rbac::v1::RoleBinding,
            rbac::v1::ClusterRole,
            rbac::v1::ClusterRoleBinding,
            policy::v1::PodDisruptionBudget,
            storage::v1::StorageClass,
            storage::v1::CSINode,
            autoscaling::v2::HorizontalPodAutoscaler,
            admissionregistration::v1::ValidatingWebhookConfiguration,
            admissionregistration::v1::MutatingWebhookConfiguration,
            apiext::CustomResourceDefinition,
        );
        let mut defs = g.take_definitions(true);
        annotate(&mut defs);
        defs
    }

    fn prop<'a>(defs: &'a Map<String, Value>, def: &str, p: &str) -> SchemaRef<'a> {
        let d = defs.get(def).unwrap_or_else(|| panic!("no definition {def}"));
        SchemaRef::new(d, defs).property(p).unwrap_or_else(|| panic!("no property {def}.{p}"))
    }

    #[test]
    fn table_is_sorted_and_unique() {
        for w in TABLE.windows(2) {
            if let [a, b] = w {
                assert!((a.def, a.prop) < (b.def, b.prop), "{}.{} / {}.{}", a.def, a.prop, b.def, b.prop);
            }
        }
        assert!(lookup("io.k8s.api.core.v1.PodSpec", "containers").is_some());
    }

    #[test]
    fn every_table_entry_exists_in_the_generated_schemas() {
        let defs = generate();
        // A definition may be absent (a kind the test does not generate); a property of a
        // present definition must exist, or the table has a typo.
        let missing: Vec<String> = TABLE
            .iter()
            .filter(|m| defs.get(m.def).is_some_and(|d| d.get("properties").and_then(|p| p.get(m.prop)).is_none()))
            .map(|m| format!("{}.{}", m.def, m.prop))
            .collect();
        assert!(missing.is_empty(), "{missing:?}");
        let present = TABLE.iter().filter(|m| defs.contains_key(m.def)).count();
        assert!(present > 200, "{present}");
        for name in ATOMIC_STRUCTS {
            assert!(defs.contains_key(*name), "{name}");
        }
    }

    #[test]
    fn strategic_merge_keys_where_the_real_server_has_them() {
        let defs = generate();
        let c = prop(&defs, "io.k8s.api.core.v1.PodSpec", "containers");
        assert_eq!(c.patch_strategy(), Some("merge"));
        assert_eq!(c.patch_merge_key(), Some("name"));
        assert_eq!(c.list_type(), ListType::Map(vec!["name".into()]));
        let env = prop(&defs, "io.k8s.api.core.v1.Container", "env");
        assert!(env.strategic_merge());
        assert_eq!(env.patch_merge_key(), Some("name"));
        let ports = prop(&defs, "io.k8s.api.core.v1.ServiceSpec", "ports");
        assert_eq!(ports.patch_merge_key(), Some("port"));
        assert_eq!(ports.list_type(), ListType::Map(vec!["port".into(), "protocol".into()]));
        let cports = prop(&defs, "io.k8s.api.core.v1.Container", "ports");
        assert_eq!(cports.list_type(), ListType::Map(vec!["containerPort".into(), "protocol".into()]));
        let vols = prop(&defs, "io.k8s.api.core.v1.PodSpec", "volumes");
        assert!(vols.strategic_merge() && vols.retain_keys());
        let vm = prop(&defs, "io.k8s.api.core.v1.Container", "volumeMounts");
        assert_eq!(vm.patch_merge_key(), Some("mountPath"));
        let tol = prop(&defs, "io.k8s.api.core.v1.PodSpec", "tolerations");
        assert!(!tol.strategic_merge());
        assert_eq!(tol.list_type(), ListType::Atomic);
        let fin = prop(&defs, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers");
        assert_eq!(fin.list_type(), ListType::Set);
        assert!(fin.strategic_merge());
        let owners = prop(&defs, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences");
        assert_eq!(owners.list_type(), ListType::Map(vec!["uid".into()]));
        let conds = prop(&defs, "io.k8s.api.apps.v1.DeploymentStatus", "conditions");
        assert_eq!(conds.patch_merge_key(), Some("type"));
        let job_conds = prop(&defs, "io.k8s.api.batch.v1.JobStatus", "conditions");
        assert_eq!(job_conds.list_type(), ListType::Atomic);
        assert_eq!(job_conds.patch_merge_key(), Some("type"));
        let crd_conds = prop(
            &defs,
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus",
            "conditions",
        );
        assert_eq!(crd_conds.list_type(), ListType::Map(vec!["type".into()]));
        let rules = prop(&defs, "io.k8s.api.rbac.v1.ClusterRole", "rules");
        assert_eq!(rules.list_type(), ListType::Atomic);
        let ns = prop(&defs, "io.k8s.api.core.v1.PodSpec", "nodeSelector");
        assert!(ns.map_atomic());
        let strategy = prop(&defs, "io.k8s.api.apps.v1.DeploymentSpec", "strategy");
        assert!(strategy.retain_keys());
        assert!(strategy.property("rollingUpdate").is_some());
        let pdb = prop(&defs, "io.k8s.api.policy.v1.PodDisruptionBudgetSpec", "selector");
        assert_eq!(pdb.patch_strategy(), Some("replace"));
        assert!(pdb.map_atomic());
        let sel = prop(&defs, "io.k8s.api.apps.v1.DeploymentSpec", "selector");
        assert!(sel.map_atomic());
        assert_eq!(sel.patch_strategy(), None);
        let cm_ref = prop(&defs, "io.k8s.api.core.v1.EnvVarSource", "configMapKeyRef");
        assert!(cm_ref.map_atomic());
    }

    #[test]
    fn special_types_accept_what_the_server_accepts() {
        let defs = generate();
        let q = defs.get(QUANTITY).cloned().unwrap_or_default();
        assert_eq!(q.get("oneOf"), Some(&json!([{"type": "string"}, {"type": "number"}])));
        assert!(q.get("x-kubernetes-int-or-string").is_none());
        let ios = SchemaRef::new(defs.get("io.k8s.api.apps.v1.RollingUpdateDeployment").unwrap_or(&Value::Null), &defs)
            .property("maxSurge");
        assert!(ios.is_some_and(|s| s.int_or_string()));
        let default =
            prop(&defs, "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "default");
        assert!(default.preserves_unknown_fields());
        assert_eq!(default.ty(), None);
        let items = prop(&defs, "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "items");
        assert!(items.preserves_unknown_fields());
        let data = prop(&defs, "io.k8s.api.apps.v1.ControllerRevision", "data");
        assert!(data.preserves_unknown_fields());
        let created = prop(&defs, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "creationTimestamp");
        assert_eq!((created.ty(), created.format()), (Some("string"), Some("date-time")));
        let pod = defs.get("io.k8s.api.core.v1.Pod").cloned().unwrap_or_default();
        assert!(pod.get("required").is_none());
        // idempotent
        let mut again = defs.clone();
        annotate(&mut again);
        assert_eq!(again, defs);
    }
}
