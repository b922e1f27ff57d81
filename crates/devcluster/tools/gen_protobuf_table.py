#!/usr/bin/env python3
"""Generate crates/devcluster/src/protobuf/table.rs, the Kubernetes protobuf schema table.

The table lets devcluster decode request bodies sent as `application/vnd.kubernetes.protobuf`
(kubectl >= 1.32 sends them from its typed clients) into the JSON the apiserver would have
decoded from the equivalent JSON body.

Inputs (standard library only, nothing is downloaded):

* the `k8s-pb` crate sources (prost code generated from the upstream generated.proto files):
  protobuf field numbers, wire types, message references, maps and repeated fields;
* the `k8s-openapi` crate sources (generated from the upstream OpenAPI document): the exact JSON
  field names (`"volumeID" => Field::Key_volume_id`), which fields are required (not
  `Option<..>`, i.e. Go fields without `omitempty`), the resource kinds and their apiVersions;
* GO_POINTER_FIELDS below: which scalar fields are Go pointers (`*int32`, `*bool`, `*string`,
  ...), read from the upstream types.go / zz_generated.deepcopy.go files. Go's protobuf
  marshaller always writes non-pointer scalar fields, even when zero, while its JSON encoder
  omits zero `omitempty` fields; a pointer field that is present must be kept even when zero
  (`replicas: 0`, `automountServiceAccountToken: false`, `storageClassName: ""`).

Every protobuf field of every message reachable from a covered kind must map to a JSON name; the
script fails loudly (exit status 1, with the offending message and field) when one does not.

Regenerate from the repository root with

    make protobuf-table

which runs crates/devcluster/tools/regen-protobuf-table.sh: it fetches exactly K8S_PB_VERSION and
K8S_OPENAPI_VERSION below from crates.io (a scratch Cargo project depending on `=` those
versions, `cargo fetch`, `cargo metadata` for their source directories), runs this script on them
with python3 -B (no .pyc files) and replaces table.rs only when the output differs. The drift
test crates/devcluster/tests/protobuf_table.rs (part of `make test`) runs the same script into a
temporary file and fails when the checked-in table differs. To change the table, edit this script
(or the pinned versions), run `make protobuf-table` and commit both.

Run directly, the script prints the table on stdout; options --k8s-pb DIR and --k8s-openapi DIR
point at the crates' `src` directories, which are otherwise looked for under
~/.cargo/registry/src/*/.
"""

import argparse
import glob
import os
import re
import sys

K8S_PB_VERSION = "0.9.0"
K8S_OPENAPI_VERSION = "0.29.0"
# k8s-openapi version modules, in order of preference: the server devcluster emulates first, later
# ones only fill in definitions or fields the first one lacks.
OPENAPI_VERSIONS = ["v1_33", "v1_34", "v1_35", "v1_36", "v1_37"]

# k8s-pb module directories whose resource kinds devcluster accepts as protobuf bodies.
COVERED_MODULES = [
    "api/core/v1",
    "api/apps/v1",
    "api/batch/v1",
    "api/networking/v1",
    "api/rbac/v1",
    "api/coordination/v1",
    "api/discovery/v1",
    "api/policy/v1",
    "api/storage/v1",
    "api/events/v1",
    "api/authorization/v1",
    "api/authentication/v1",
    "api/autoscaling/v1",
    "api/autoscaling/v2",
    "api/scheduling/v1",
    "api/certificates/v1",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1",
]

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
APIEXT = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1"

# Messages whose JSON form is not an object of their protobuf fields. The decoder implements each
# special kind; the (tag, prost type, repeated) triples are checked here so that a change in the
# upstream protos fails generation instead of silently mis-decoding.
SPECIAL = {
    META + ".Time": ("Time", [(1, "int64", False), (2, "int32", False)]),
    META + ".MicroTime": ("MicroTime", [(1, "int64", False), (2, "int32", False)]),
    META + ".Duration": ("Duration", [(1, "int64", False)]),
    META + ".FieldsV1": ("RawJson", [(1, "bytes", False)]),
    "io.k8s.apimachinery.pkg.api.resource.Quantity": ("Quantity", [(1, "string", False)]),
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": (
        "IntOrString",
        [(1, "int64", False), (2, "int32", False), (3, "string", False)],
    ),
    "io.k8s.apimachinery.pkg.runtime.RawExtension": ("RawExtension", [(1, "bytes", False)]),
    APIEXT + ".JSON": ("RawJson", [(1, "bytes", False)]),
    APIEXT + ".JSONSchemaPropsOrArray": (
        "SchemaOrArray",
        [(1, "message", False), (2, "message", True)],
    ),
    APIEXT + ".JSONSchemaPropsOrBool": ("SchemaOrBool", [(1, "bool", False), (2, "message", False)]),
    APIEXT + ".JSONSchemaPropsOrStringArray": (
        "SchemaOrStringArray",
        [(1, "message", False), (2, "string", True)],
    ),
}
# Messages documented `+protobuf.nullable=true` with a single `repeated string items = 1` are Go
# named slice types (authentication/v1 ExtraValue, ...): their JSON form is the array.
LIST_WRAPPER = "StringList"

# Scalar fields that are Go pointers, per message, by JSON name. Read from the upstream Go types
# (k8s.io/api and k8s.io/apiextensions-apiserver, release 1.35): fields declared `*int32`,
# `*int64`, `*bool`, `*float64`, `*string` or a pointer to a named string type. Non-scalar pointer
# fields (structs, Time, Quantity, IntOrString) need no entry: a present message is always kept.
GO_POINTER_FIELDS = """
io.k8s.api.core.v1.AppArmorProfile: localhostProfile
io.k8s.api.core.v1.AzureDiskVolumeSource: cachingMode fsType readOnly kind
io.k8s.api.core.v1.AzureFilePersistentVolumeSource: secretNamespace
io.k8s.api.core.v1.CSIVolumeSource: readOnly fsType
io.k8s.api.core.v1.ClientIPConfig: timeoutSeconds
io.k8s.api.core.v1.ClusterTrustBundleProjection: name signerName optional
io.k8s.api.core.v1.ConfigMap: immutable
io.k8s.api.core.v1.ConfigMapEnvSource: optional
io.k8s.api.core.v1.ConfigMapKeySelector: optional
io.k8s.api.core.v1.ConfigMapProjection: optional
io.k8s.api.core.v1.ConfigMapVolumeSource: defaultMode optional
io.k8s.api.core.v1.Container: restartPolicy
io.k8s.api.core.v1.ContainerStatus: started stopSignal
io.k8s.api.core.v1.DownwardAPIVolumeFile: mode
io.k8s.api.core.v1.DownwardAPIVolumeSource: defaultMode
io.k8s.api.core.v1.EndpointAddress: nodeName
io.k8s.api.core.v1.EndpointPort: appProtocol
io.k8s.api.core.v1.EphemeralContainerCommon: restartPolicy
io.k8s.api.core.v1.FCVolumeSource: lun
io.k8s.api.core.v1.FileKeySelector: optional
io.k8s.api.core.v1.GRPCAction: service
io.k8s.api.core.v1.GlusterfsPersistentVolumeSource: endpointsNamespace
io.k8s.api.core.v1.HostPathVolumeSource: type
io.k8s.api.core.v1.ISCSIPersistentVolumeSource: initiatorName
io.k8s.api.core.v1.ISCSIVolumeSource: initiatorName
io.k8s.api.core.v1.KeyToPath: mode
io.k8s.api.core.v1.Lifecycle: stopSignal
io.k8s.api.core.v1.LoadBalancerIngress: ipMode
io.k8s.api.core.v1.LocalVolumeSource: fsType
io.k8s.api.core.v1.NodeFeatures: supplementalGroupsPolicy
io.k8s.api.core.v1.NodeRuntimeHandlerFeatures: recursiveReadOnlyMounts userNamespaces
io.k8s.api.core.v1.NodeSwapStatus: capacity
io.k8s.api.core.v1.PersistentVolumeClaimSpec: storageClassName volumeMode volumeAttributesClassName
io.k8s.api.core.v1.PersistentVolumeClaimStatus: currentVolumeAttributesClassName
io.k8s.api.core.v1.PersistentVolumeSpec: volumeMode volumeAttributesClassName
io.k8s.api.core.v1.PodCertificateProjection: maxExpirationSeconds
io.k8s.api.core.v1.PodDNSConfigOption: value
io.k8s.api.core.v1.PodLogOptions: sinceSeconds tailLines limitBytes stream
io.k8s.api.core.v1.PodResourceClaim: resourceClaimName resourceClaimTemplateName
io.k8s.api.core.v1.PodResourceClaimStatus: resourceClaimName
io.k8s.api.core.v1.PodSecurityContext: runAsUser runAsGroup runAsNonRoot supplementalGroupsPolicy fsGroup fsGroupChangePolicy seLinuxChangePolicy
io.k8s.api.core.v1.PodSpec: terminationGracePeriodSeconds activeDeadlineSeconds automountServiceAccountToken shareProcessNamespace priority runtimeClassName enableServiceLinks preemptionPolicy setHostnameAsFQDN hostUsers hostnameOverride
io.k8s.api.core.v1.PortStatus: error
io.k8s.api.core.v1.Preconditions: uid
io.k8s.api.core.v1.Probe: terminationGracePeriodSeconds
io.k8s.api.core.v1.ProjectedVolumeSource: defaultMode
io.k8s.api.core.v1.ReplicationControllerSpec: replicas
io.k8s.api.core.v1.SeccompProfile: localhostProfile
io.k8s.api.core.v1.Secret: immutable
io.k8s.api.core.v1.SecretEnvSource: optional
io.k8s.api.core.v1.SecretKeySelector: optional
io.k8s.api.core.v1.SecretProjection: optional
io.k8s.api.core.v1.SecretVolumeSource: defaultMode optional
io.k8s.api.core.v1.SecurityContext: privileged runAsUser runAsGroup runAsNonRoot readOnlyRootFilesystem allowPrivilegeEscalation procMount
io.k8s.api.core.v1.ServiceAccount: automountServiceAccountToken
io.k8s.api.core.v1.ServiceAccountTokenProjection: expirationSeconds
io.k8s.api.core.v1.ServicePort: appProtocol
io.k8s.api.core.v1.ServiceSpec: ipFamilyPolicy allocateLoadBalancerNodePorts loadBalancerClass internalTrafficPolicy trafficDistribution
io.k8s.api.core.v1.Toleration: tolerationSeconds
io.k8s.api.core.v1.TopologySpreadConstraint: minDomains nodeAffinityPolicy nodeTaintsPolicy
io.k8s.api.core.v1.TypedLocalObjectReference: apiGroup
io.k8s.api.core.v1.TypedObjectReference: apiGroup namespace
io.k8s.api.core.v1.VolumeMount: recursiveReadOnly mountPropagation
io.k8s.api.core.v1.VolumeMountStatus: recursiveReadOnly
io.k8s.api.core.v1.WindowsSecurityContextOptions: gmsaCredentialSpecName gmsaCredentialSpec runAsUserName hostProcess
io.k8s.api.apps.v1.StatefulSetSpec: replicas revisionHistoryLimit
io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy: partition
io.k8s.api.apps.v1.StatefulSetStatus: collisionCount
io.k8s.api.apps.v1.DeploymentSpec: replicas revisionHistoryLimit progressDeadlineSeconds
io.k8s.api.apps.v1.DeploymentStatus: terminatingReplicas collisionCount
io.k8s.api.apps.v1.DaemonSetSpec: revisionHistoryLimit
io.k8s.api.apps.v1.DaemonSetStatus: collisionCount
io.k8s.api.apps.v1.ReplicaSetSpec: replicas
io.k8s.api.apps.v1.ReplicaSetStatus: terminatingReplicas
io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement: containerName
io.k8s.api.batch.v1.JobSpec: parallelism completions activeDeadlineSeconds backoffLimit backoffLimitPerIndex maxFailedIndexes manualSelector ttlSecondsAfterFinished completionMode suspend podReplacementPolicy managedBy
io.k8s.api.batch.v1.JobStatus: ready terminating failedIndexes
io.k8s.api.batch.v1.SuccessPolicyRule: succeededIndexes succeededCount
io.k8s.api.batch.v1.CronJobSpec: timeZone startingDeadlineSeconds suspend successfulJobsHistoryLimit failedJobsHistoryLimit
io.k8s.api.networking.v1.NetworkPolicyPort: protocol endPort
io.k8s.api.networking.v1.IngressSpec: ingressClassName
io.k8s.api.networking.v1.HTTPIngressPath: pathType
io.k8s.api.networking.v1.IngressClassParametersReference: apiGroup scope namespace
io.k8s.api.networking.v1.IngressPortStatus: error
io.k8s.api.coordination.v1.LeaseSpec: holderIdentity leaseDurationSeconds leaseTransitions strategy preferredHolder
io.k8s.api.discovery.v1.Endpoint: hostname nodeName zone
io.k8s.api.discovery.v1.EndpointConditions: ready serving terminating
io.k8s.api.discovery.v1.EndpointPort: name protocol port appProtocol
io.k8s.api.policy.v1.PodDisruptionBudgetSpec: unhealthyPodEvictionPolicy
io.k8s.api.storage.v1.StorageClass: reclaimPolicy allowVolumeExpansion volumeBindingMode
io.k8s.api.storage.v1.CSIDriverSpec: attachRequired podInfoOnMount storageCapacity fsGroupPolicy requiresRepublish seLinuxMount nodeAllocatableUpdatePeriodSeconds serviceAccountTokenInSecrets
io.k8s.api.storage.v1.TokenRequest: expirationSeconds
io.k8s.api.storage.v1.VolumeNodeResources: count
io.k8s.api.storage.v1.VolumeAttachmentSource: persistentVolumeName
io.k8s.api.storage.v1.VolumeError: errorCode
io.k8s.api.authentication.v1.TokenRequestSpec: expirationSeconds
io.k8s.api.autoscaling.v1.HorizontalPodAutoscalerSpec: minReplicas targetCPUUtilizationPercentage
io.k8s.api.autoscaling.v1.HorizontalPodAutoscalerStatus: observedGeneration currentCPUUtilizationPercentage
io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec: minReplicas
io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus: observedGeneration
io.k8s.api.autoscaling.v2.MetricTarget: averageUtilization
io.k8s.api.autoscaling.v2.MetricValueStatus: averageUtilization
io.k8s.api.autoscaling.v2.HPAScalingRules: stabilizationWindowSeconds selectPolicy
io.k8s.api.scheduling.v1.PriorityClass: preemptionPolicy
io.k8s.api.certificates.v1.CertificateSigningRequestSpec: expirationSeconds
io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta: deletionGracePeriodSeconds
io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference: controller blockOwnerDeletion
io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta: remainingItemCount
io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions: gracePeriodSeconds orphanDependents propagationPolicy ignoreStoreReadErrorWithClusterBreakingPotential
io.k8s.apimachinery.pkg.apis.meta.v1.Preconditions: uid resourceVersion
io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionVersion: deprecationWarning
io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.WebhookClientConfig: url
io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.ServiceReference: path port
io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceSubresourceScale: labelSelectorPath
io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps: $ref maximum minimum maxLength minLength maxItems minItems multipleOf maxProperties minProperties x-kubernetes-preserve-unknown-fields x-kubernetes-list-type x-kubernetes-map-type
io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.ValidationRule: reason optionalOldSelf
"""

SCALARS = {
    "string": "Str",
    "bytes": "Bytes",
    "bool": "Bool",
    "int32": "I32",
    "int64": "I64",
    "uint32": "U32",
    "uint64": "U64",
    "double": "F64",
    "float": "F32",
}

FLAG_REPEATED = 1
FLAG_KEEP_ZERO = 2
FLAG_INLINE = 4


class GenError(Exception):
    pass


def norm(name):
    """Compare names ignoring case and punctuation: volume_id ~ volumeID, r#ref ~ $ref."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def find_crate_src(explicit, crate):
    if explicit:
        return explicit
    pattern = os.path.expanduser("~/.cargo/registry/src/*/%s/src" % crate)
    found = sorted(glob.glob(pattern))
    if not found:
        raise GenError("cannot find %s (looked for %s); run `cargo fetch` or pass its path" % (crate, pattern))
    return found[0]


# ---------------------------------------------------------------------------------------------
# k8s-pb (prost) parsing


class PbField:
    def __init__(self, tag, rust_name, ptype, repeated, map_value, ref):
        self.tag = tag
        self.rust_name = rust_name  # prost (snake_case) name, r# stripped
        self.ptype = ptype  # scalar type name, "message" or "map"
        self.repeated = repeated
        self.map_value = map_value  # for maps: scalar type name or "message"
        self.ref = ref  # for messages (and maps of messages): (module path tuple, struct name)


class PbMessage:
    def __init__(self, module, name, fields, doc):
        self.module = module
        self.name = name
        self.fields = fields
        self.doc = doc
        self.fq = None


def module_package(module):
    head = module[0]
    rest = list(module[1:])
    if head == "api":
        return ".".join(["io.k8s.api"] + rest)
    if head == "apimachinery":
        return ".".join(["io.k8s.apimachinery"] + rest)
    if head == "apiextensions_apiserver":
        return ".".join(["io.k8s.apiextensions-apiserver"] + rest)
    if head == "kube_aggregator":
        return ".".join(["io.k8s.kube-aggregator"] + rest)
    if head == "metrics":
        return ".".join(["io.k8s.metrics"] + rest)
    raise GenError("unknown k8s-pb module root %r" % (module,))


def strip_wrappers(ty):
    ty = ty.strip()
    changed = True
    while changed:
        changed = False
        for prefix in (
            "::core::option::Option<",
            "::prost::alloc::boxed::Box<",
            "::prost::alloc::vec::Vec<",
        ):
            if ty.startswith(prefix) and ty.endswith(">"):
                ty = ty[len(prefix) : -1].strip()
                changed = True
    return ty


def split_generic_args(s):
    depth = 0
    parts = []
    cur = ""
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def resolve_path(module, path):
    parts = path.split("::")
    if parts[0] == "crate":
        return tuple(parts[1:-1]), parts[-1]
    cur = list(module)
    i = 0
    while i < len(parts) and parts[i] == "super":
        if not cur:
            raise GenError("path %s escapes the crate from %s" % (path, "/".join(module)))
        cur.pop()
        i += 1
    return tuple(cur + parts[i:-1]), parts[-1]


def parse_prost_attr(attr):
    m = re.search(r'tag\s*=\s*"(\d+)"', attr)
    if not m:
        raise GenError("prost attribute without tag: %s" % attr)
    tag = int(m.group(1))
    repeated = bool(re.search(r"\brepeated\b", attr))
    mm = re.match(r'btree_map\s*=\s*"string,\s*(\w+)"', attr)
    if mm:
        return tag, "map", False, mm.group(1)
    if re.match(r"btree_map|hash_map|map", attr):
        raise GenError("unsupported map attribute: %s" % attr)
    first = re.match(r"(\w+)", attr).group(1)
    if first not in SCALARS and first != "message":
        raise GenError("unsupported prost type %r in %s" % (first, attr))
    if re.search(r"\b(oneof|enumeration|group)\b", attr):
        raise GenError("unsupported prost attribute: %s" % attr)
    return tag, first, repeated, None


def parse_pb_module(path, module):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    messages = []
    doc = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("///"):
            doc.append(line[3:].strip())
            i += 1
            continue
        if line.startswith("#["):
            i += 1
            continue
        m = re.match(r"pub struct (\w+) \{(\})?$", line)
        if m:
            name = m.group(1)
            fields = []
            if not m.group(2):
                i += 1
                while lines[i].strip() != "}":
                    pm = re.match(r"#\[prost\((.*)\)\]$", lines[i].strip())
                    if pm:
                        tag, ptype, repeated, map_value = parse_prost_attr(pm.group(1))
                        i += 1
                        decl = ""
                        while True:
                            decl += " " + lines[i].strip()
                            if decl.rstrip().endswith(",") and decl.count("<") == decl.count(">"):
                                break
                            i += 1
                        dm = re.match(r"\s*pub (?:r#)?(\w+):\s*(.*),\s*$", decl)
                        if not dm:
                            raise GenError("cannot parse field declaration %r in %s" % (decl, path))
                        rust_name = dm.group(1)
                        ty = re.sub(r",\s*>", ">", re.sub(r"\s+", "", dm.group(2)))
                        ref = None
                        if ptype == "message" or (ptype == "map" and map_value == "message"):
                            inner = strip_wrappers(ty)
                            if ptype == "map":
                                gm = re.match(r".*BTreeMap<(.*)>$", inner)
                                if not gm:
                                    raise GenError("cannot parse map type %r" % ty)
                                args = split_generic_args(gm.group(1))
                                inner = strip_wrappers(args[1])
                            ref = resolve_path(module, inner)
                        elif ptype == "map" and map_value not in ("string", "bytes"):
                            raise GenError("unsupported map value %r in %s" % (map_value, path))
                        fields.append(PbField(tag, rust_name, ptype, repeated, map_value, ref))
                    i += 1
            messages.append(PbMessage(module, name, fields, doc))
        doc = []
        i += 1
    return messages


def load_pb(root):
    messages = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "mod.rs"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), root)
        if rel == ".":
            continue
        module = tuple(rel.split(os.sep))
        for msg in parse_pb_module(path, module):
            messages[(module, msg.name)] = msg
    return messages


# ---------------------------------------------------------------------------------------------
# k8s-openapi parsing


class OpenApiDef:
    def __init__(self, name):
        self.name = name
        self.json_by_rust = {}  # rust field name -> JSON key
        self.optional = {}  # rust field name -> bool
        self.api_version = None
        self.kind = None


def parse_openapi_file(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^// Generated from definition (\S+)", text, re.M)
    if not m:
        return None
    d = OpenApiDef(m.group(1))
    sm = re.search(r"^pub struct \w+ \{\n(.*?)^\}", text, re.M | re.S)
    if sm:
        for fm in re.finditer(r"^    pub (?:r#)?(\w+): (.*),$", sm.group(1), re.M):
            d.optional[fm.group(1)] = fm.group(2).startswith("Option<")
    for km in re.finditer(r'^\s*"([^"]+)" => Field::Key_(\w+),$', text, re.M):
        d.json_by_rust[km.group(2)] = km.group(1)
    av = re.search(r'const API_VERSION: &\'static str = "([^"]*)";', text)
    kd = re.search(r'const KIND: &\'static str = "([^"]*)";', text)
    if av and kd:
        d.api_version = av.group(1)
        d.kind = kd.group(1)
    return d


def load_openapi(root):
    """Definition name -> OpenApiDef merged over versions (earlier versions win)."""
    defs = {}
    for version in OPENAPI_VERSIONS:
        vroot = os.path.join(root, version)
        if not os.path.isdir(vroot):
            raise GenError("k8s-openapi has no %s module at %s" % (version, vroot))
        for path in sorted(glob.glob(os.path.join(vroot, "**", "*.rs"), recursive=True)):
            d = parse_openapi_file(path)
            if d is None:
                continue
            have = defs.get(d.name)
            if have is None:
                defs[d.name] = d
                continue
            for rust, key in d.json_by_rust.items():
                have.json_by_rust.setdefault(rust, key)
            for rust, opt in d.optional.items():
                have.optional.setdefault(rust, opt)
    return defs


# ---------------------------------------------------------------------------------------------
# Building the table


def parse_pointer_fields():
    out = {}
    for line in GO_POINTER_FIELDS.strip().split("\n"):
        msg, _, names = line.partition(":")
        out[msg.strip()] = set(names.split())
    return out


class Builder:
    def __init__(self, pb, openapi):
        self.pb = pb
        self.openapi = openapi
        self.by_fq = {}
        self.assign_names()

    def assign_names(self):
        by_package = {}
        for name in self.openapi:
            pkg, _, short = name.rpartition(".")
            by_package.setdefault((pkg, short.lower()), []).append(name)
        for key, msg in self.pb.items():
            pkg = module_package(msg.module)
            cands = by_package.get((pkg, msg.name.lower()), [])
            if len(cands) > 1:
                raise GenError("ambiguous OpenAPI names for %s.%s: %s" % (pkg, msg.name, cands))
            msg.fq = cands[0] if cands else pkg + "." + msg.name
            if msg.fq in self.by_fq:
                raise GenError("two k8s-pb messages named %s" % msg.fq)
            self.by_fq[msg.fq] = msg

    def msg(self, ref):
        m = self.pb.get(ref)
        if m is None:
            raise GenError("k8s-pb references unknown message %s::%s" % ("::".join(ref[0]), ref[1]))
        return m

    def special_of(self, msg):
        if msg.fq in SPECIAL:
            kind, expected = SPECIAL[msg.fq]
            got = [(f.tag, f.ptype, f.repeated) for f in msg.fields]
            if got != expected:
                raise GenError("special message %s has fields %s, expected %s" % (msg.fq, got, expected))
            return kind
        if any("+protobuf.nullable=true" in d for d in msg.doc):
            got = [(f.tag, f.rust_name, f.ptype, f.repeated) for f in msg.fields]
            if got != [(1, "items", "string", True)]:
                raise GenError("nullable wrapper %s has unexpected fields %s" % (msg.fq, got))
            return LIST_WRAPPER
        return None

    def match_field(self, odef, field):
        """JSON name and requiredness of a protobuf field in an OpenAPI definition, or None."""
        if field.rust_name in odef.json_by_rust:
            key = field.rust_name
        else:
            want = norm(field.rust_name)
            keys = [r for r, j in odef.json_by_rust.items() if norm(j) == want or norm(r) == want]
            if len(keys) > 1:
                raise GenError("field %s of %s matches several JSON keys %s" % (field.rust_name, odef.name, keys))
            if not keys:
                return None
            key = keys[0]
        return odef.json_by_rust[key], not odef.optional.get(key, True)

    def map_fields(self, msg, odef):
        """[(field, json_name, required, inline_message_or_None)] for msg against odef."""
        out = []
        for f in msg.fields:
            hit = self.match_field(odef, f)
            if hit is not None:
                out.append((f, hit[0], hit[1], None))
                continue
            if f.ptype == "message" and not f.repeated:
                target = self.msg(f.ref)
                if self.special_of(target) is None:
                    try:
                        self.map_fields(target, odef)
                    except GenError:
                        pass
                    else:
                        out.append((f, None, False, target))
                        continue
            raise GenError(
                "cannot map protobuf field %s (tag %d) of %s to a JSON name of %s"
                % (f.rust_name, f.tag, msg.fq, odef.name)
            )
        return out

    def build(self):
        pointers = parse_pointer_fields()
        for fq in pointers:
            if fq not in self.by_fq:
                raise GenError("GO_POINTER_FIELDS names unknown message %s" % fq)

        kinds = []
        roots = []
        for module_dir in COVERED_MODULES:
            module = tuple(module_dir.split("/"))
            found = False
            for (mod, _name), msg in sorted(self.pb.items()):
                if mod != module:
                    continue
                odef = self.openapi.get(msg.fq)
                if odef is not None and odef.kind and odef.api_version:
                    kinds.append((odef.api_version, odef.kind, msg.fq))
                    roots.append(msg.fq)
                    found = True
            if not found:
                raise GenError("no resource kinds found in k8s-pb module %s" % module_dir)
        delete_options = META + ".DeleteOptions"
        for api_version in sorted({k[0] for k in kinds} | {"meta.k8s.io/v1"}):
            kinds.append((api_version, "DeleteOptions", delete_options))
        roots.append(delete_options)

        # Messages in breadth-first order from the roots; inline targets get their JSON names from
        # the message that embeds them.
        order = []
        index = {}
        inline_defs = {}  # fq of an inlined message -> OpenApiDef of its (first) parent
        queue = list(roots)
        while queue:
            fq = queue.pop(0)
            if fq in index:
                continue
            index[fq] = len(order)
            order.append(fq)
            msg = self.by_fq[fq]
            for f in msg.fields:
                if f.ref is not None:
                    queue.append(self.msg(f.ref).fq)

        entries = []
        for fq in order:
            msg = self.by_fq[fq]
            special = self.special_of(msg)
            rows = []
            if special is not None:
                for f in msg.fields:
                    rows.append((f, f.rust_name, 0))
            else:
                odef = self.openapi.get(fq) or inline_defs.get(fq)
                if odef is None:
                    raise GenError("message %s has no OpenAPI definition and is not embedded inline" % fq)
                mapped = self.map_fields(msg, odef)
                ptrs = pointers.get(fq, set())
                seen = set()
                for f, json_name, required, inline in mapped:
                    if inline is not None:
                        inline_defs.setdefault(inline.fq, odef)
                        if inline.fq not in index:
                            raise GenError("inline message %s not reached" % inline.fq)
                        rows.append((f, f.rust_name, FLAG_INLINE))
                        continue
                    flags = 0
                    if required or json_name in ptrs:
                        flags |= FLAG_KEEP_ZERO
                    seen.add(json_name)
                    rows.append((f, json_name, flags))
                unknown = ptrs - seen
                if unknown:
                    raise GenError("GO_POINTER_FIELDS lists %s for %s, which has no such fields" % (sorted(unknown), fq))
            entries.append((fq, special, rows))
        # GO_POINTER_FIELDS entries of messages no covered kind reaches are only checked to name
        # an existing message.
        return entries, index, sorted(set(kinds))


def rust_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def kind_expr(f, index, builder):
    if f.ptype == "map":
        if f.map_value == "string":
            return "K::MapStr"
        if f.map_value == "bytes":
            return "K::MapBytes"
        return "K::MapMsg(%d)" % index[builder.msg(f.ref).fq]
    if f.ptype == "message":
        return "K::Msg(%d)" % index[builder.msg(f.ref).fq]
    return "K::" + SCALARS[f.ptype]


def emit(builder, entries, index, kinds, out):
    w = out.write
    w("// @generated by crates/devcluster/tools/gen_protobuf_table.py -- DO NOT EDIT.\n")
    w("//\n")
    w("// Kubernetes protobuf schema: field numbers and wire types from k8s-pb %s (prost code\n" % K8S_PB_VERSION)
    w("// generated from the upstream generated.proto files), JSON names and required fields from\n")
    w("// k8s-openapi %s (%s, later versions only for what %s lacks), Go pointer\n" % (K8S_OPENAPI_VERSION, OPENAPI_VERSIONS[0], OPENAPI_VERSIONS[0]))
    w("// fields from the list in the generator. Regenerate from the repository root with\n")
    w("//     make protobuf-table\n")
    w("// (crates/devcluster/tools/regen-protobuf-table.sh; the drift test tests/protobuf_table.rs\n")
    w("// fails while this file differs from the generator's output).\n\n")
    w("use super::{Field, Kind as K, Message, Special as S};\n\n")
    w("/// Shorthand constructor keeping the table compact.\n")
    w("const fn f(tag: u32, name: &'static str, kind: K, flags: u8) -> Field {\n")
    w("    Field { tag, name, kind, flags }\n}\n\n")
    w("/// Every message reachable from a supported kind, referenced by index. Fields are in Go\n")
    w("/// declaration order (the order of generated.proto), which is the order Go writes JSON keys.\n")
    w("pub(super) static MESSAGES: &[Message] = &[\n")
    for i, (fq, special, rows) in enumerate(entries):
        tags = [r[0].tag for r in rows]
        if len(set(tags)) != len(tags):
            raise GenError("duplicate field numbers in %s" % fq)
        sp = "S::" + (special if special else "Object")
        w("    // %d\n" % i)
        w("    Message {\n        name: %s,\n        special: %s,\n        fields: &[\n" % (rust_str(fq), sp))
        for f, name, flags in rows:
            if f.repeated:
                flags |= FLAG_REPEATED
            w("            f(%d, %s, %s, %d),\n" % (f.tag, rust_str(name), kind_expr(f, index, builder), flags))
        w("        ],\n    },\n")
    w("];\n\n")
    w("/// (apiVersion, kind, message index), sorted by apiVersion then kind.\n")
    w("pub(super) static KINDS: &[(&str, &str, u16)] = &[\n")
    for api_version, kind, fq in kinds:
        w("    (%s, %s, %d),\n" % (rust_str(api_version), rust_str(kind), index[fq]))
    w("];\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k8s-pb", help="path to k8s-pb-%s/src" % K8S_PB_VERSION)
    ap.add_argument("--k8s-openapi", help="path to k8s-openapi-%s/src" % K8S_OPENAPI_VERSION)
    args = ap.parse_args()
    try:
        pb_root = find_crate_src(args.k8s_pb, "k8s-pb-" + K8S_PB_VERSION)
        oa_root = find_crate_src(args.k8s_openapi, "k8s-openapi-" + K8S_OPENAPI_VERSION)
        builder = Builder(load_pb(pb_root), load_openapi(oa_root))
        entries, index, kinds = builder.build()
        if len(entries) > 65535:
            raise GenError("too many messages for u16 indices")
        emit(builder, entries, index, kinds, sys.stdout)
    except GenError as e:
        print("gen_protobuf_table.py: error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
