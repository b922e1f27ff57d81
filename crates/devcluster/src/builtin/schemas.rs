//! OpenAPI v3 schemas of the built-in kinds, generated from k8s-openapi's `schemars` impls and
//! annotated with the Kubernetes extensions (merge keys, list types) the real server publishes.

use crate::schema::Defs;
use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, batch, certificates, coordination, core, discovery,
    events, networking, policy, rbac, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apireg;
use schemars::generate::SchemaSettings;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

macro_rules! kinds {
    ($gen:ident, $names:ident; $( $group:literal $kind:literal => $ty:ty ),* $(,)?) => {
        $(
            {
                let _ = $gen.subschema_for::<$ty>();
                $names.insert(($group.to_string(), $kind.to_string()), <$ty as schemars::JsonSchema>::schema_name().into_owned());
            }
        )*
    };
}

/// Definitions of the built-in kinds, and each kind's component name by (group, kind).
pub type BuiltinSchemas = (Arc<Defs>, HashMap<(String, String), String>);

/// The OpenAPI definitions of every built-in kind (from k8s-openapi's schemars impls), generated
/// once per process and shared by every cluster in it.
pub fn builtin_schemas() -> &'static BuiltinSchemas {
    static SCHEMAS: OnceLock<BuiltinSchemas> = OnceLock::new();
    SCHEMAS.get_or_init(generate)
}

/// Definitions of every built-in kind (and everything they reference), and the component name
/// of each kind, keyed by (group, kind).
pub fn generate() -> (Arc<Defs>, HashMap<(String, String), String>) {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut names: HashMap<(String, String), String> = HashMap::new();
    kinds!(generator, names;
        "" "Namespace" => core::v1::Namespace,
        "" "ConfigMap" => core::v1::ConfigMap,
        "" "Secret" => core::v1::Secret,
        "" "ServiceAccount" => core::v1::ServiceAccount,
        "" "Service" => core::v1::Service,
        "" "Endpoints" => core::v1::Endpoints,
        "" "Pod" => core::v1::Pod,
        "" "Node" => core::v1::Node,
        "" "Event" => core::v1::Event,
        "" "ResourceQuota" => core::v1::ResourceQuota,
        "" "LimitRange" => core::v1::LimitRange,
        "" "PersistentVolumeClaim" => core::v1::PersistentVolumeClaim,
        "" "PersistentVolume" => core::v1::PersistentVolume,
        "" "ReplicationController" => core::v1::ReplicationController,
        "" "ComponentStatus" => core::v1::ComponentStatus,
        "apps" "Deployment" => apps::v1::Deployment,
        "apps" "ReplicaSet" => apps::v1::ReplicaSet,
        "apps" "StatefulSet" => apps::v1::StatefulSet,
        "apps" "DaemonSet" => apps::v1::DaemonSet,
        "apps" "ControllerRevision" => apps::v1::ControllerRevision,
        "batch" "Job" => batch::v1::Job,
        "batch" "CronJob" => batch::v1::CronJob,
        "networking.k8s.io" "Ingress" => networking::v1::Ingress,
        "networking.k8s.io" "IngressClass" => networking::v1::IngressClass,
        "networking.k8s.io" "NetworkPolicy" => networking::v1::NetworkPolicy,
        "discovery.k8s.io" "EndpointSlice" => discovery::v1::EndpointSlice,
        "coordination.k8s.io" "Lease" => coordination::v1::Lease,
        "rbac.authorization.k8s.io" "Role" => rbac::v1::Role,
        "rbac.authorization.k8s.io" "RoleBinding" => rbac::v1::RoleBinding,
        "rbac.authorization.k8s.io" "ClusterRole" => rbac::v1::ClusterRole,
        "rbac.authorization.k8s.io" "ClusterRoleBinding" => rbac::v1::ClusterRoleBinding,
        "apiextensions.k8s.io" "CustomResourceDefinition" => apiext::CustomResourceDefinition,
        "events.k8s.io" "Event" => events::v1::Event,
        "policy" "PodDisruptionBudget" => policy::v1::PodDisruptionBudget,
        "storage.k8s.io" "StorageClass" => storage::v1::StorageClass,
        "admissionregistration.k8s.io" "ValidatingAdmissionPolicy" => admissionregistration::v1::ValidatingAdmissionPolicy,
        "admissionregistration.k8s.io" "ValidatingAdmissionPolicyBinding" => admissionregistration::v1::ValidatingAdmissionPolicyBinding,
        "authorization.k8s.io" "SelfSubjectAccessReview" => authorization::v1::SelfSubjectAccessReview,
        "authorization.k8s.io" "SubjectAccessReview" => authorization::v1::SubjectAccessReview,
        "authorization.k8s.io" "LocalSubjectAccessReview" => authorization::v1::LocalSubjectAccessReview,
        "authorization.k8s.io" "SelfSubjectRulesReview" => authorization::v1::SelfSubjectRulesReview,
        "authentication.k8s.io" "TokenReview" => authentication::v1::TokenReview,
        "authentication.k8s.io" "SelfSubjectReview" => authentication::v1::SelfSubjectReview,
        "certificates.k8s.io" "CertificateSigningRequest" => certificates::v1::CertificateSigningRequest,
        "apiregistration.k8s.io" "APIService" => apireg::APIService,
    );
    let mut defs = generator.take_definitions(true);
    crate::builtin::patchmeta::annotate(&mut defs);
    for ((group, kind), name) in &names {
        let version = "v1";
        if let Some(Value::Object(def)) = defs.get_mut(name) {
            def.insert(
                "x-kubernetes-group-version-kind".into(),
                serde_json::json!([{"group": group, "kind": kind, "version": version}]),
            );
        }
    }
    (Arc::new(defs), names)
}
