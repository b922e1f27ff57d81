//! The gateway CA (a Secret the installation provides) and each controller's mite client
//! certificate (a Secret the operator issues from it, again before it expires or when the CA
//! changes; a new CA also rolls the pod, through the restart digest).

use crate::context::{Context, MANAGER, key_of};
use crate::error::{Blocker, CaError, Error, Result};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;
use varroa_api::Controller;
use varroa_pki::{CertificateAuthority, MiteIdentity};

/// Annotation on the mite Secret: the fingerprint of the CA that issued it.
pub const ANNOTATION_CA: &str = "varroa.dev/ca-fingerprint";

/// The gateway CA as the operator's watch of its Secret last saw it: parsed once per change,
/// shared by every pass (which read and parsed the Secret each before). Empty until the watch
/// has listed; a pass then reads the Secret itself ([`gateway_ca`]). Clones share the value.
#[derive(Clone, Default)]
pub struct GatewayCa {
    seen: Arc<RwLock<Option<CaResult>>>,
}

/// The gateway CA, or why it cannot be used.
pub type CaResult = std::result::Result<Arc<CertificateAuthority>, CaError>;

impl GatewayCa {
    fn get(&self) -> Option<CaResult> {
        self.seen.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, v: CaResult) {
        *self.seen.write().unwrap_or_else(|e| e.into_inner()) = Some(v);
    }
}

/// A stream that yields once each time the gateway CA Secret changes (created, its data
/// replaced, deleted): every controller then gets its certificate issued again and its pod rolled
/// at once, instead of at the next resync. It also keeps `cell` current. Watched by name (RBAC
/// grants list and watch on that one Secret); a relist of an unchanged Secret yields nothing.
/// Errors are retried with the watcher's default backoff (the cell keeps what it had).
pub fn gateway_ca_changes(
    client: kube::Client,
    config: &crate::Config,
    cell: GatewayCa,
) -> impl futures::Stream<Item = ()> + Send + use<> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let (ns, name) = config.gateway_ca();
    let api: Api<Secret> = Api::namespaced(client, &ns);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let digest = |s: &Secret| {
        let bytes = serde_json::to_vec(&s.data).unwrap_or_default();
        ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref().to_vec()
    };
    let mut last: Option<Option<Vec<u8>>> = None;
    let mut listed: Option<Secret> = None;
    // Backoff: an API server that fails at once (gone, refusing) is retried with growing
    // delays. Without it the watcher retried in the same poll forever, since errors are dropped
    // here, and starved its runtime thread (found when a test's devcluster went first).
    watcher(api, cfg).default_backoff().filter_map(move |event| {
        let missing = || Err(CaError::Missing { namespace: ns.clone(), name: name.clone() });
        let now = match event {
            Ok(watcher::Event::Init) => {
                listed = None;
                None
            }
            Ok(watcher::Event::InitApply(s)) => {
                listed = Some(s);
                None
            }
            Ok(watcher::Event::InitDone) => {
                let s = listed.take();
                cell.set(s.as_ref().map_or_else(missing, |s| parse(s, &ns, &name)));
                Some(s.as_ref().map(digest))
            }
            Ok(watcher::Event::Apply(s)) => {
                cell.set(parse(&s, &ns, &name));
                Some(Some(digest(&s)))
            }
            Ok(watcher::Event::Delete(_)) => {
                cell.set(missing());
                Some(None)
            }
            Err(_) => None,
        };
        let changed = match (&now, &last) {
            (Some(n), Some(l)) => n != l,
            _ => false,
        };
        if now.is_some() && (last.is_none() || changed) {
            let first = last.is_none();
            last = now;
            if !first {
                tracing::info!(secret = %format!("{ns}/{name}"), "the gateway CA changed: reconciling every controller");
                return futures::future::ready(Some(()));
            }
        }
        futures::future::ready(None)
    })
}

/// The gateway CA: as the watch last saw it, or (before the watch has listed) read; the error
/// says what is missing and the fix.
pub async fn gateway_ca(ctx: &Context) -> CaResult {
    if let Some(seen) = ctx.gateway_ca.get() {
        return seen;
    }
    let (namespace, name) = ctx.config.gateway_ca();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    match api.get_opt(&name).await {
        Ok(Some(s)) => parse(&s, &namespace, &name),
        Ok(None) => Err(CaError::Missing { namespace, name }),
        Err(e) => Err(CaError::Unreadable { namespace, name, message: e.to_string() }),
    }
}

/// The CA in the gateway CA Secret `namespace/name`.
fn parse(secret: &Secret, namespace: &str, name: &str) -> CaResult {
    let (namespace, name) = (namespace.to_string(), name.to_string());
    let data = secret.data.clone().unwrap_or_default();
    let text = |k: &str| data.get(k).map(|b| String::from_utf8_lossy(&b.0).into_owned());
    let (Some(cert), Some(key)) = (text("tls.crt"), text("tls.key")) else {
        return Err(CaError::Incomplete { namespace, name });
    };
    CertificateAuthority::from_pem(&cert, &key).map(Arc::new).map_err(|e| CaError::Invalid {
        namespace,
        name,
        message: e.to_string(),
    })
}

/// Reads one of the operator's own Secrets without the `get` verb (which RBAC would have to grant
/// on every Secret of every namespace): a dry-run merge patch that changes nothing answers the
/// stored object. The admission policy (deploy/varroa/admission-policy.yaml) lets such a patch
/// through only for a Secret that is Varroa's, so the operator cannot read others this way
/// either. `None` when it does not exist; an [`Error::OwnershipConflict`] when the API server
/// refuses (403: the Secret exists and is not Varroa's).
async fn read_own_secret(api: &Api<Secret>, ns: &str, name: &str) -> Result<Option<Secret>> {
    let params = PatchParams { dry_run: true, field_manager: Some(MANAGER.to_string()), ..Default::default() };
    match api.patch(name, &params, &Patch::Merge(serde_json::json!({}))).await {
        Ok(s) => Ok(Some(s)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 403 => Err(Error::OwnershipConflict {
            kind: "Secret".into(),
            namespace: ns.into(),
            name: name.into(),
            detail: format!(" (the API server refuses the operator: {})", s.message),
        }),
        Err(e) => Err(Error::kube(format!("reading Secret {ns}/{name}"), e)),
    }
}

/// Makes sure the controller's mite certificate exists, was issued by `ca` for this controller
/// and is not about to expire; issues a new one otherwise (create, or update of the operator's
/// own Secret). A Secret of that name that is not the controller's is left untouched: the
/// controller is Failed with `OwnershipConflict`.
pub async fn ensure_mite_secret(
    ctx: &Context,
    c: &Controller,
    ca: &CertificateAuthority,
    desired: &crate::desired::MiteSecret,
) -> Result<()> {
    let ns = c.namespace().unwrap_or_default();
    let name = desired.name.clone();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let live = read_own_secret(&api, &ns, &name).await?;
    if let Some(l) = &live
        && !crate::objects::is_ours(&l.metadata, c)
    {
        return Err(Error::OwnershipConflict { kind: "Secret".into(), namespace: ns, name, detail: String::new() });
    }
    let id = MiteIdentity::new(ns.clone(), c.name_any());
    let now = SystemTime::now();
    let current = live
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get("tls.crt"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    let reason = varroa_pki::needs_rotation(current.as_deref(), ca, &id, ctx.config.mite_cert_renew_before, now);
    // The API token the mite authenticates to Jenkins with: made once, kept across certificate
    // renewals (Jenkins' side reads it from the same Secret; ADR 0004).
    let live_data = live.as_ref().and_then(|s| s.data.clone()).unwrap_or_default();
    let token = live_data.get(KEY_JENKINS_TOKEN).filter(|t| valid_token(&t.0)).cloned();
    if reason.is_none() && token.is_some() {
        ctx.metrics.writes.record("Secret", opkit::apply::Outcome::Unchanged);
        return Ok(());
    }
    let token = match token {
        Some(t) => t,
        None => ByteString(new_token()?.into_bytes()),
    };
    let (cert, key) = match &reason {
        None => (
            live_data.get("tls.crt").cloned().unwrap_or_default(),
            live_data.get("tls.key").cloned().unwrap_or_default(),
        ),
        Some(_) => {
            let issued = ca.issue_mite(&id, ctx.config.mite_cert_validity, now).map_err(|e| {
                Blocker::MiteCertificate { namespace: ns.clone(), name: c.name_any(), message: e.to_string() }
            })?;
            (ByteString(issued.cert_pem.into_bytes()), ByteString(issued.key_pem.into_bytes()))
        }
    };
    let mut meta = crate::objects::meta(c, &name);
    meta.annotations = Some(BTreeMap::from([(ANNOTATION_CA.to_string(), desired.ca_fingerprint.clone())]));
    let mut secret = Secret {
        metadata: meta,
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), cert),
            ("tls.key".to_string(), key),
            ("ca.crt".to_string(), ByteString(ca.cert_pem().as_bytes().to_vec())),
            (KEY_JENKINS_TOKEN.to_string(), token),
        ])),
        ..Default::default()
    };
    let params = PostParams { dry_run: false, field_manager: Some(MANAGER.to_string()) };
    match live {
        None => {
            api.create(&params, &secret).await.map_err(|e| Error::kube(format!("creating Secret {ns}/{name}"), e))?;
            ctx.metrics.writes.record("Secret", opkit::apply::Outcome::Created);
        }
        Some(l) => {
            // Labels and annotations others added stay; the resourceVersion makes it a
            // compare-and-swap (a conflict retries the pass).
            let mut labels = l.metadata.labels.clone().unwrap_or_default();
            labels.extend(secret.metadata.labels.take().unwrap_or_default());
            let mut annotations = l.metadata.annotations.clone().unwrap_or_default();
            annotations.extend(secret.metadata.annotations.take().unwrap_or_default());
            secret.metadata.labels = Some(labels);
            secret.metadata.annotations = Some(annotations);
            secret.metadata.resource_version = l.metadata.resource_version.clone();
            api.replace(&name, &params, &secret)
                .await
                .map_err(|e| Error::kube(format!("updating Secret {ns}/{name}"), e))?;
            ctx.metrics.writes.record("Secret", opkit::apply::Outcome::Updated);
        }
    }
    match reason {
        Some(reason) => {
            tracing::info!(controller = %key_of(c), reason = ?reason, "issued the mite certificate")
        }
        None => tracing::info!(controller = %key_of(c), "made the mite's Jenkins API token"),
    }
    Ok(())
}

/// The key of the mite's Jenkins API token in the mite Secret.
pub const KEY_JENKINS_TOKEN: &str = "jenkins-token";

/// A token as [`new_token`] makes them: 64 lowercase hex digits.
fn valid_token(t: &[u8]) -> bool {
    t.len() == 64 && t.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// 32 random bytes from the system's generator, in hex.
fn new_token() -> Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut bytes).map_err(|_| Blocker::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// An API server that fails every request at once: the CA watch retries with a backoff
    /// (a few requests in ten seconds), instead of in a loop that never yields.
    #[tokio::test(start_paused = true)]
    async fn a_failing_api_server_is_retried_with_backoff_not_in_a_hot_loop() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let service = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n >= 1_000 {
                    // A hot loop would get here in no time; park it so the test ends.
                    std::future::pending::<()>().await;
                }
                Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("refused"))
            }
        });
        let client = kube::Client::new(service, "default");
        let config = crate::Config::for_tests();
        let changes = gateway_ca_changes(client, &config, GatewayCa::default());
        let watch = tokio::spawn(async move {
            let mut changes = std::pin::pin!(changes);
            while changes.next().await.is_some() {}
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        let n = calls.load(Ordering::SeqCst);
        assert!((1..=12).contains(&n), "{n} requests in 10 s against a failing API server");
        watch.abort();
    }
}
