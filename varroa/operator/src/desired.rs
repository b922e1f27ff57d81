//! The **build** step: every object a Controller should have, as one [`Desired`] value, from what
//! the pass dereferenced (crate::dereference) alone. Pure: no request, no clock, no randomness
//! (the mite's certificate and token are issued by the apply step, which must read the Secret
//! first), so it is tested from fixtures with no API server (tests/build_fixtures.rs).

use crate::config::Config;
use crate::dereference::Inputs;
use crate::mite::MiteState;
use crate::objects::{self, PodInputs};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;
use serde::Serialize;
use varroa_api::Controller;
use varroa_config::Rendered;
use varroa_link::kv::DesiredEntry;

/// Every object of one Controller, in the order they are written (crate::apply).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Desired {
    pub service_account: ServiceAccount,
    /// To the ClusterRole varroa-jenkins-agents; its roleRef cannot change, so a binding to
    /// another role is replaced.
    pub agents_role_binding: RoleBinding,
    pub config_map: ConfigMap,
    /// The mite's client certificate: issued by the apply step from the gateway CA.
    pub mite_secret: MiteSecret,
    pub service: Service,
    pub headless_service: Service,
    pub stateful_set: StatefulSet,
    /// The Ingress, when the settings ask for one and its host is free; otherwise an Ingress of
    /// the controller's is deleted.
    pub ingress: Option<Ingress>,
    /// The Ingress asked for was not written: another Controller's Ingress serves its host (the
    /// message names it and the fix; the status says it).
    pub ingress_conflict: Option<String>,
    /// Annotations of the settings' Ingress left out because --ingress-annotation-allowlist does
    /// not allow them.
    pub dropped_annotations: Vec<String>,
    /// The desired configuration handed to the mites through the control link.
    pub mite_configuration: DesiredEntry,
}

/// The mite Secret the controller needs: named `<name>-mite-tls`, issued for the controller by
/// the gateway CA with this fingerprint.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MiteSecret {
    pub name: String,
    pub ca_fingerprint: String,
}

/// Whether the controller is to be parked: it already is (its StatefulSet is marked) and nobody
/// asked to wake it, or its inactivity policy's idle period has passed. Never when stopped.
pub fn hibernated(c: &Controller, r: &Rendered, mite: &MiteState, stateful_set: Option<&StatefulSet>) -> bool {
    if c.spec.power_state == varroa_api::PowerState::Stopped || mite.wake_requested {
        return false;
    }
    if stateful_set.is_some_and(|s| s.annotations().contains_key(varroa_api::lifecycle::ANNOTATION_HIBERNATED)) {
        return true;
    }
    let idle_after = r
        .settings
        .settings
        .hibernation
        .as_ref()
        .and_then(|h| h.idle_after.as_deref())
        .and_then(|d| crate::config::parse_duration(d).ok());
    matches!((idle_after, mite.idle_for), (Some(after), Some(idle)) if idle >= after)
}

/// The objects of `c` from the pass's inputs and the operator's flags.
pub fn build(c: &Controller, i: &Inputs, cfg: &Config) -> Desired {
    let r = &i.rendered;
    let ca_fingerprint = i.ca.fingerprint();
    let pod_inputs = PodInputs {
        update_site: i.update_site.clone(),
        ca_fingerprint: &ca_fingerprint,
        hibernated: hibernated(c, r, &i.mite, i.stateful_set.as_ref()),
    };
    let allowlist = &cfg.ingress_annotation_allowlist;
    let wanted = objects::ingress(c, r, allowlist);
    let ingress_conflict = wanted.as_ref().and_then(|w| objects::host_conflict(c, w, &i.ingresses));
    Desired {
        service_account: objects::service_account(c),
        agents_role_binding: objects::agents_role_binding(c),
        config_map: objects::config_map(c, r),
        mite_secret: MiteSecret { name: objects::secret_name(c), ca_fingerprint: ca_fingerprint.clone() },
        service: objects::service(c),
        headless_service: objects::headless_service(c),
        stateful_set: objects::stateful_set(c, r, cfg, &pod_inputs),
        ingress: wanted.filter(|_| ingress_conflict.is_none()),
        ingress_conflict,
        dropped_annotations: objects::dropped_annotations(r, allowlist),
        mite_configuration: mite_configuration(r),
    }
}

/// What the mites apply without a restart: the JCasC file, its digest, and the cell count.
fn mite_configuration(r: &Rendered) -> DesiredEntry {
    DesiredEntry {
        digest: r.casc_digest.clone(),
        files: r
            .files
            .iter()
            .filter(|(k, _)| k.as_str() == "jenkins.yaml")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        cells: Some(u32::try_from(r.settings.settings.cells.unwrap_or(1).max(1)).unwrap_or(1)),
    }
}
