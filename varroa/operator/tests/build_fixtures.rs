//! The build step of a Controller, table-driven from YAML fixtures (issue 14): no API server, no
//! cluster, only `varroa_operator::desired::build`, the pure function that makes every object of
//! a Controller from what a pass dereferenced. Every file under `tests/fixtures/build/` is one
//! case; adding a file adds a case.
//!
//! A fixture holds the inputs: the `controller`, the `world` its configuration is rendered from
//! (as in the status fixtures), the `mite` state, the controller's `statefulSet` as it is (its
//! hibernation marker), Varroa's `ingresses` in the cluster, the `updateSite` and the
//! `ingressAnnotationAllowlist` (the operator's flag); the gateway CA is generated. `expect` is
//! compared as a subset of the built objects (`serviceAccount`, `agentsRoleBinding`,
//! `configMap`, `miteSecret`, `service`, `headlessService`, `statefulSet`, `ingress`,
//! `ingressConflict`, `droppedAnnotations`, `miteConfiguration`; `null` means absent, lists of
//! named entries are matched by name).
//!
//! Coverage:
//!
//! | Case | Fixture |
//! |---|---|
//! | every object of a controller with the defaults: names, owner, labels, one cell, the mite, no Ingress | every-object |
//! | an Ingress on a free host, annotations outside the allowlist left out | ingress-on-a-free-host |
//! | an Ingress host another Controller's older Ingress serves: none written, the conflict said | ingress-host-taken |
//! | powerState Stopped: no replica, not parked | stopped |
//! | parked by its marker, and woken by a request | hibernated-by-marker, woken |
//! | idle past its inactivity policy: parked | idle-past-the-policy |
//! | cells: one replica per cell, the cell count handed to the mites | cells |

mod fixture_inputs;

use fixture_inputs::{mite, world};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::networking::v1::Ingress;
use optest::fixtures::{every_case, field, subset};
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use varroa_api::Controller;
use varroa_operator::dereference::Inputs;
use varroa_pki::CertificateAuthority;

/// One gateway CA for every case (generating a key is the slow part).
fn ca() -> Arc<CertificateAuthority> {
    static CA: OnceLock<Arc<CertificateAuthority>> = OnceLock::new();
    CA.get_or_init(|| {
        Arc::new(CertificateAuthority::generate("fixtures gateway CA", Duration::from_secs(86400)).expect("a CA"))
    })
    .clone()
}

fn differences(case: &Value, file: &str) -> Vec<String> {
    let controller: Controller =
        field(case, "controller", file).unwrap_or_else(|| panic!("{file}: `controller` is required"));
    let rendered = varroa_config::render(&controller, &world(case, file))
        .unwrap_or_else(|e| panic!("{file}: the configuration does not render: {e}"));
    let inputs = Inputs {
        rendered,
        update_site: field(case, "updateSite", file).unwrap_or_else(|| "https://updates.jenkins.io".into()),
        ca: ca(),
        mite: mite(case, file),
        stateful_set: field::<StatefulSet>(case, "statefulSet", file),
        ingresses: field::<Vec<Ingress>>(case, "ingresses", file).unwrap_or_default(),
    };
    let config = varroa_operator::Config {
        ingress_annotation_allowlist: field(case, "ingressAnnotationAllowlist", file).unwrap_or_default(),
        ..varroa_operator::Config::for_tests()
    };
    let desired = varroa_operator::desired::build(&controller, &inputs, &config);
    let got = serde_json::to_value(&desired).expect("the objects serialize");
    let want = case.get("expect").unwrap_or_else(|| panic!("{file}: `expect` is required"));
    let mut diffs = vec![];
    subset("desired", want, &got, &mut diffs);
    if desired.mite_secret.ca_fingerprint != inputs.ca.fingerprint() {
        diffs.push("desired.miteSecret.caFingerprint is not the gateway CA's".into());
    }
    diffs
}

#[test]
fn every_build_fixture_holds() {
    every_case(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/build"), 7, differences);
}
