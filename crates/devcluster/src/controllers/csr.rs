//! The `kubernetes.io/kube-apiserver-client` signer of kube-controller-manager
//! (pkg/controller/certificates/signer/signer.go): an approved CertificateSigningRequest for
//! that signer gets `status.certificate`, signed by the cluster CA with the request's subject
//! and public key, valid `spec.expirationSeconds` (at most the controller's
//! `--cluster-signing-duration`, a year). A request the signer refuses (usages other than
//! digital signature, key encipherment and client auth; a request that does not parse or
//! whose signature does not verify) gets a `Failed` condition, reason `SignerValidationFailure`.
//! Denied requests, requests already issued or failed, and other signers are left alone (no
//! other signer runs here, as in a cluster without one).
//!
//! A certificate it issues authenticates to devcluster (x509 client certificates, see `auth`).

use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::{Change, EventType};
use serde_json::{Value, json};
use std::time::Duration;

const MANAGER: &str = "certificatesigningrequest-signing-controller";
/// The signer this controller runs.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// kube-controller-manager's default `--cluster-signing-duration`.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

pub struct CsrSigner;

fn csrs() -> GroupResource {
    GroupResource::new("certificates.k8s.io", "certificatesigningrequests")
}

fn has(csr: &Value, t: &str) -> bool {
    crate::conditions::of(csr.get("status")).iter().any(|c| {
        c.get("type").and_then(Value::as_str) == Some(t) && c.get("status").and_then(Value::as_str) == Some("True")
    })
}

impl Controller for CsrSigner {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr == csrs() && c.kind != EventType::Deleted {
            out.push(Key::of(c));
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&csrs(), None);
        out.extend(all.iter().map(|o| Key::new(&csrs().group, &csrs().resource, "", meta::name(o))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let csr = super::get(cl, key)?;
        let spec = csr.get("spec").cloned().unwrap_or_default();
        if spec.get("signerName").and_then(Value::as_str) != Some(KUBE_APISERVER_CLIENT)
            || !has(&csr, "Approved")
            || has(&csr, "Denied")
            || has(&csr, "Failed")
            || csr.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty())
        {
            return None;
        }
        let cdef = def(cl, "certificates.k8s.io", "certificatesigningrequests")?;
        let usages: Vec<&str> =
            spec.get("usages").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        let allowed = ["digital signature", "key encipherment", "client auth"];
        let mut status = csr.get("status").cloned().unwrap_or_else(|| json!({}));
        let result = match usages.iter().find(|u| !allowed.contains(u)) {
            Some(u) => Err(format!("invalid usage for client certificate: {u}")),
            None if !usages.contains(&"client auth") => Err("missing required usages: client auth".to_string()),
            None => {
                let want = spec
                    .get("expirationSeconds")
                    .and_then(Value::as_i64)
                    .map(|s| Duration::from_secs(s.max(600) as u64))
                    .unwrap_or(MAX_DURATION)
                    .min(MAX_DURATION);
                crate::builtin::validate::csr_request_der(&spec).and_then(|der| {
                    let pem = crate::x509::pem("CERTIFICATE REQUEST", &der);
                    cl.creds.sign_client_csr(&pem, &usages, want).map_err(|e| e.to_string())
                })
            }
        };
        let now = meta::now();
        match result {
            Ok(cert) => {
                use base64::Engine;
                status["certificate"] = base64::engine::general_purpose::STANDARD.encode(cert.as_bytes()).into();
            }
            Err(msg) => {
                let mut conds = crate::conditions::of(Some(&status));
                conds.push(json!({"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                    "message": format!("Validation failed: {msg}"), "lastUpdateTime": now, "lastTransitionTime": now}));
                status["conditions"] = Value::Array(conds);
            }
        }
        super::write_status(cl, &cdef, &csr, status, MANAGER);
        None
    }
}
