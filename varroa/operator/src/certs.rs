//! The gateway CA (a Secret the installation provides) and each controller's mite client
//! certificate (a Secret the operator issues from it, again before it expires or when the CA
//! changes; a new CA also rolls the pod, through the restart digest).

use crate::controller::{Context, MANAGER};
use crate::error::{Error, Result};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use std::collections::BTreeMap;
use std::time::SystemTime;
use varroa_api::Controller;
use varroa_pki::{CertificateAuthority, MiteIdentity};

/// Annotation on the mite Secret: the fingerprint of the CA that issued it.
pub const ANNOTATION_CA: &str = "varroa.dev/ca-fingerprint";

/// Reads the gateway CA; the error says what is missing and the fix.
pub async fn gateway_ca(ctx: &Context) -> std::result::Result<CertificateAuthority, String> {
    let (ns, name) = ctx.config.gateway_ca();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let secret = match api.get_opt(&name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(format!(
                "the gateway CA Secret {ns}/{name} does not exist: create it with the CA's tls.crt and tls.key (see docs/varroa/operator.md), or point --gateway-ca-secret at yours"
            ));
        }
        Err(e) => return Err(format!("reading the gateway CA Secret {ns}/{name}: {e}")),
    };
    let data = secret.data.unwrap_or_default();
    let text = |k: &str| data.get(k).map(|b| String::from_utf8_lossy(&b.0).into_owned());
    let (Some(cert), Some(key)) = (text("tls.crt"), text("tls.key")) else {
        return Err(format!(
            "the gateway CA Secret {ns}/{name} lacks tls.crt or tls.key: store the CA certificate and key under those keys"
        ));
    };
    CertificateAuthority::from_pem(&cert, &key).map_err(|e| format!("the gateway CA Secret {ns}/{name}: {e}"))
}

/// Makes sure the controller's mite certificate exists, was issued by `ca` for this controller
/// and is not about to expire; issues a new one otherwise.
pub async fn ensure_mite_secret(ctx: &Context, c: &Controller, ca: &CertificateAuthority) -> Result<()> {
    let ns = c.namespace().unwrap_or_default();
    let name = crate::objects::secret_name(c);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let live = api.get_opt(&name).await.map_err(|e| Error::kube(format!("reading Secret {ns}/{name}"), e))?;
    let id = MiteIdentity::new(ns.clone(), c.name_any());
    let now = SystemTime::now();
    let current = live
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get("tls.crt"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    let owned = live.as_ref().is_none_or(|s| s.owner_references().iter().any(|o| Some(&o.uid) == c.uid().as_ref()));
    let reason = varroa_pki::needs_rotation(current.as_deref(), ca, &id, ctx.config.mite_cert_renew_before, now);
    if reason.is_none() && owned {
        ctx.metrics.writes.record("Secret", opkit::apply::Outcome::Unchanged);
        return Ok(());
    }
    let issued = ca
        .issue_mite(&id, ctx.config.mite_cert_validity, now)
        .map_err(|e| Error::Blocked(format!("issuing the mite certificate of {ns}/{}: {e}", c.name_any())))?;
    let mut meta = crate::objects::meta(c, &name);
    meta.annotations = Some(BTreeMap::from([(ANNOTATION_CA.to_string(), ca.fingerprint())]));
    let secret = Secret {
        metadata: meta,
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), ByteString(issued.cert_pem.into_bytes())),
            ("tls.key".to_string(), ByteString(issued.key_pem.into_bytes())),
            ("ca.crt".to_string(), ByteString(ca.cert_pem().as_bytes().to_vec())),
        ])),
        ..Default::default()
    };
    ctx.metrics.writes.ensure(&api, &secret, MANAGER).await?;
    if let Some(r) = reason {
        tracing::info!(controller = %crate::controller::key_of(c), reason = ?r, "issued the mite certificate");
    }
    Ok(())
}
