//! `varroa-operator gateway-ca`: a freshly generated gateway CA as a `kubernetes.io/tls` Secret
//! manifest, followed by the gateway's serving certificate issued by it (the Secret
//! `varroa-gateway-tls` the gateway mounts), for development installs and the demo:
//!
//! ```sh
//! varroa-operator gateway-ca | kubectl apply -f -
//! ```
//!
//! The operator issues each controller's mite certificate from this CA (see `--gateway-ca-secret`).
//! Production installs bring their own CA; applying a new one rolls every controller's pod.

use crate::config::parse_duration;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::time::Duration;
use varroa_pki::{CertificateAuthority, PkiError};

/// Arguments of `gateway-ca`.
#[derive(clap::Args, Debug, Clone)]
pub struct GatewayCaArgs {
    /// Namespace of the Secret (the operator's `--gateway-ca-secret` is `NAMESPACE/NAME`).
    #[arg(long, default_value = "varroa-system")]
    pub namespace: String,
    /// Name of the Secret.
    #[arg(long, default_value = "varroa-gateway-ca")]
    pub name: String,
    /// Common name of the CA certificate.
    #[arg(long, default_value = "Varroa gateway CA")]
    pub common_name: String,
    /// How long the CA is valid (`90d`, `8760h`, ...). Mite certificates are useless after it.
    #[arg(long, default_value = "3650d", value_parser = parse_duration)]
    pub validity: Duration,
    /// Also print the gateway's serving certificate, issued by the new CA, as the Secret the
    /// gateway mounts (in the same namespace); `none` prints the CA alone.
    #[arg(long, default_value = "varroa-gateway-tls")]
    pub gateway_tls_secret: String,
    /// The gateway's Service, whose in-cluster names the serving certificate carries
    /// (`<service>`, `<service>.<namespace>`, `<service>.<namespace>.svc`,
    /// `<service>.<namespace>.svc.cluster.local`).
    #[arg(long, default_value = "varroa-gateway")]
    pub gateway_service: String,
    /// How long the gateway's serving certificate is valid.
    #[arg(long, default_value = "365d", value_parser = parse_duration)]
    pub gateway_tls_validity: Duration,
    /// More names (DNS names or IP addresses) for the serving certificate, repeatable: the
    /// address of a gateway run outside the cluster (`127.0.0.1`, as `make demo` runs it).
    #[arg(long = "gateway-tls-extra-name", value_name = "NAME")]
    pub gateway_tls_extra_names: Vec<String>,
}

/// Why no manifest could be produced.
#[derive(Debug, thiserror::Error)]
pub enum GatewayCaError {
    /// The CA could not be generated (e.g. a validity of zero or beyond what a certificate holds).
    #[error("generating the gateway CA (--common-name, --validity): {0}")]
    Generate(#[from] PkiError),
    /// The Secret could not be written as YAML.
    #[error("writing the Secret {name} as YAML: {reason}")]
    Serialize {
        /// The Secret's `namespace/name`.
        name: String,
        /// The serializer's complaint.
        reason: String,
    },
}

/// The Secret holding `ca` under `tls.crt` and `tls.key`, in `namespace`/`name`.
pub fn secret(ca: &CertificateAuthority, namespace: &str, name: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([("app.kubernetes.io/part-of".to_string(), "varroa".to_string())])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), ByteString(ca.cert_pem().as_bytes().to_vec())),
            ("tls.key".to_string(), ByteString(ca.key_pem().into_bytes())),
        ])),
        ..Default::default()
    }
}

/// The gateway's serving certificate Secret: `tls.crt`, `tls.key` and the CA's `ca.crt` (what
/// the gateway's `--tls-cert`, `--tls-key` and `--tls-ca` read).
pub fn gateway_tls_secret(
    ca: &CertificateAuthority,
    args: &GatewayCaArgs,
    now: std::time::SystemTime,
) -> Result<Secret, GatewayCaError> {
    let (svc, ns) = (&args.gateway_service, &args.namespace);
    let mut names =
        vec![svc.clone(), format!("{svc}.{ns}"), format!("{svc}.{ns}.svc"), format!("{svc}.{ns}.svc.cluster.local")];
    names.extend(args.gateway_tls_extra_names.iter().cloned());
    let issued = ca.issue_server(&names, args.gateway_tls_validity, now)?;
    let mut s = secret(ca, ns, &args.gateway_tls_secret);
    s.data = Some(BTreeMap::from([
        ("tls.crt".to_string(), ByteString(issued.cert_pem.into_bytes())),
        ("tls.key".to_string(), ByteString(issued.key_pem.into_bytes())),
        ("ca.crt".to_string(), ByteString(ca.cert_pem().as_bytes().to_vec())),
    ]));
    Ok(s)
}

/// Generates a CA and returns the Secret manifests (YAML, with a comment naming the CA's
/// fingerprint and expiry): the CA, then (unless `--gateway-tls-secret none`) the gateway's
/// serving certificate.
pub fn manifest(args: &GatewayCaArgs) -> Result<String, GatewayCaError> {
    let ca = CertificateAuthority::generate(&args.common_name, args.validity)?;
    let to_yaml = |s: &Secret| {
        let name = format!(
            "{}/{}",
            s.metadata.namespace.clone().unwrap_or_default(),
            s.metadata.name.clone().unwrap_or_default()
        );
        serde_saphyr::to_string(s).map_err(|e| GatewayCaError::Serialize { name, reason: e.to_string() })
    };
    let yaml = to_yaml(&secret(&ca, &args.namespace, &args.name))?;
    let until = jiff::Timestamp::try_from(ca.not_after()).map(|t| t.to_string()).unwrap_or_else(|_| "?".into());
    let mut out = format!(
        "# Gateway CA {:?} ({}), valid until {until}. Generated by varroa-operator gateway-ca:\n\
         # for development; it holds the private key, so keep it out of version control.\n{yaml}",
        args.common_name,
        ca.fingerprint()
    );
    if args.gateway_tls_secret != "none" {
        let tls = gateway_tls_secret(&ca, args, std::time::SystemTime::now())?;
        out.push_str(&format!(
            "---\n# The gateway's serving certificate, issued by that CA for the Service {}.{} \
             (valid {} days).\n{}",
            args.gateway_service,
            args.namespace,
            args.gateway_tls_validity.as_secs() / 86400,
            to_yaml(&tls)?
        ));
    }
    Ok(out)
}

/// Prints the manifest; the exit status is 0, or 1 with the reason on stderr.
pub fn run(args: &GatewayCaArgs) -> i32 {
    match manifest(args) {
        Ok(yaml) => {
            print!("{yaml}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}
