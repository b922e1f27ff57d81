//! `devcluster`: run the embedded Kubernetes API server.

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "devcluster",
    version,
    about = "An embedded Kubernetes API server for tests and demos (not a production cluster)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the Kubernetes API over HTTPS until interrupted.
    Serve(ServeArgs),
    /// Print a token for a service account (TokenRequest), to act as it:
    /// `kubectl --token "$(devcluster token team-a/robot)" get pods -n team-a`.
    Token(TokenArgs),
    /// Print a kubeconfig that authenticates USER (CN) in the given groups (O) with a client
    /// certificate, issued through the certificates API as a cluster admin issues one
    /// (a CertificateSigningRequest for the `kubernetes.io/kube-apiserver-client` signer,
    /// approved): `devcluster cert jane --group dev > jane.kubeconfig`.
    Cert(CertArgs),
}

#[derive(clap::Args)]
struct CertArgs {
    /// The user name (the certificate's CN).
    user: String,
    /// Groups of the user (the certificate's O; repeatable).
    #[arg(long = "group")]
    groups: Vec<String>,
    /// The kubeconfig of a running devcluster (an admin's: it approves the request).
    #[arg(long, env = "KUBECONFIG", default_value = "devcluster.kubeconfig")]
    kubeconfig: PathBuf,
    /// How long the certificate is valid, in seconds (at least 600, as the API requires).
    #[arg(long, default_value_t = 86_400)]
    duration: i32,
}

/// How the kubeconfig `serve` writes authenticates its admin.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum KubeconfigAuth {
    /// The admin bearer token.
    Token,
    /// A client certificate (CN admin, O system:masters) signed by the cluster CA.
    Cert,
}

#[derive(clap::Args)]
struct TokenArgs {
    /// The service account, as NAMESPACE/NAME.
    service_account: String,
    /// The kubeconfig of a running devcluster.
    #[arg(long, env = "KUBECONFIG", default_value = "devcluster.kubeconfig")]
    kubeconfig: PathBuf,
    /// How long the token is valid, in seconds (at least 600).
    #[arg(long, default_value_t = 3600)]
    duration: i64,
    /// Audiences of the token (repeatable; the API server's by default).
    #[arg(long = "audience")]
    audiences: Vec<String>,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// How the written kubeconfig authenticates the admin: `token` (a bearer token) or `cert`
    /// (a client certificate, as a kubeadm cluster's admin.conf).
    #[arg(long, env = "DEVCLUSTER_KUBECONFIG_AUTH", value_enum, default_value = "token")]
    kubeconfig_auth: KubeconfigAuth,
    /// Address to listen on (loopback by default; port 0 picks a free port).
    #[arg(long, env = "DEVCLUSTER_LISTEN", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write the admin kubeconfig once the server is ready
    /// [default: DATA_DIR/kubeconfig, or ./devcluster.kubeconfig without a data dir].
    #[arg(long, env = "DEVCLUSTER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Keep objects, the CA and the admin token here; state survives restarts and crashes.
    /// Without it, everything lives in memory and credentials are random per start.
    #[arg(long, env = "DEVCLUSTER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Number of changes kept for watches resuming from an older resourceVersion; older ones get
    /// 410 Gone.
    #[arg(long, env = "DEVCLUSTER_HISTORY", default_value_t = 100_000)]
    history: usize,
    /// Seconds between bookmarks on watches that allow them.
    #[arg(long, env = "DEVCLUSTER_BOOKMARK_INTERVAL", default_value_t = 60)]
    bookmark_interval: u64,
    /// Number of simulated nodes (created at first start).
    #[arg(long, env = "DEVCLUSTER_NODES", default_value_t = 1)]
    nodes: usize,
    /// Milliseconds a pod takes from scheduled to running (0: at once).
    #[arg(long, env = "DEVCLUSTER_POD_STARTUP_MS", default_value_t = 0)]
    pod_startup_ms: u64,
    /// Make pods of an image fail: IMAGE=KIND, KIND one of image-pull, crash-loop[:EXIT_CODE],
    /// unready, deadline, exit[:EXIT_CODE] (a Job's pod exits with the code); IMAGE may end in `*`
    /// to match a prefix. Repeatable.
    #[arg(long = "fault", env = "DEVCLUSTER_FAULTS", value_delimiter = ',')]
    faults: Vec<devcluster::faults::FaultRule>,
    /// Milliseconds a simulated container of a Job's pod runs before it exits (with 0, or the
    /// code of an `exit:CODE` fault).
    #[arg(long, env = "DEVCLUSTER_JOB_POD_DURATION_MS", default_value_t = 1000)]
    job_pod_duration_ms: u64,
    /// Run containers of IMAGE as local processes of EXECUTABLE (the process runtime; see
    /// docs/devcluster.md): IMAGE=EXECUTABLE, IMAGE may end in `*` to match a prefix, the first
    /// matching rule wins. Repeatable. Images without a rule stay simulated.
    #[arg(long = "run", env = "DEVCLUSTER_RUN", value_delimiter = ',')]
    run: Vec<devcluster::runtime::RunRule>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Serve(args) => serve(args),
        Cmd::Token(args) => token(args),
        Cmd::Cert(args) => cert(args),
    }
}

fn token(args: TokenArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some((ns, name)) = args.service_account.split_once('/').filter(|(n, s)| !n.is_empty() && !s.is_empty()) else {
        anyhow::bail!("service account {:?}: expected NAMESPACE/NAME, e.g. default/robot", args.service_account);
    };
    let path = args.kubeconfig.to_string_lossy().split(':').next().unwrap_or_default().to_string();
    let yaml = std::fs::read_to_string(&path).map_err(|e| {
        anyhow::anyhow!("reading the kubeconfig {path}: {e} (start devcluster serve first, or pass --kubeconfig)")
    })?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let client = devcluster::client_for(&yaml).await?;
        let sas: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> = kube::Api::namespaced(client, ns);
        let req = k8s_openapi::api::authentication::v1::TokenRequest {
            spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
                audiences: args.audiences.clone(),
                expiration_seconds: Some(args.duration),
                ..Default::default()
            },
            ..Default::default()
        };
        let resp = sas
            .create_token_request(name, &Default::default(), &req)
            .await
            .map_err(|e| anyhow::anyhow!("requesting a token for {ns}/{name}: {e}"))?;
        let token = resp.status.map(|s| s.token).unwrap_or_default();
        println!("{token}");
        anyhow::Ok(())
    })
}

fn cert(args: CertArgs) -> anyhow::Result<()> {
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
        CertificateSigningRequestStatus,
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    anyhow::ensure!(!args.user.is_empty(), "the user name (the certificate's CN) must not be empty");
    anyhow::ensure!(args.duration >= 600, "--duration {}: must be at least 600 seconds", args.duration);
    let path = args.kubeconfig.to_string_lossy().split(':').next().unwrap_or_default().to_string();
    let yaml = std::fs::read_to_string(&path).map_err(|e| {
        anyhow::anyhow!("reading the kubeconfig {path}: {e} (start devcluster serve first, or pass --kubeconfig)")
    })?;
    let key = rcgen::KeyPair::generate()?;
    let subject = devcluster::x509::name(&args.user, &args.groups);
    let csr_pem = devcluster::x509::pem("CERTIFICATE REQUEST", &devcluster::x509::request(&subject, &key)?);
    let suffix: String = devcluster::tls::random_token().chars().filter(char::is_ascii_lowercase).take(6).collect();
    let slug: String =
        args.user.to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).take(40).collect();
    let name = format!("devcluster-cert-{}-{suffix}", slug.trim_matches('-'));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let crt = rt.block_on(async {
        let client = devcluster::client_for(&yaml).await?;
        let csrs: kube::Api<CertificateSigningRequest> = kube::Api::all(client);
        let csr = CertificateSigningRequest {
            metadata: kube::api::ObjectMeta { name: Some(name.clone()), ..Default::default() },
            spec: CertificateSigningRequestSpec {
                request: k8s_openapi::ByteString(csr_pem.into_bytes()),
                signer_name: "kubernetes.io/kube-apiserver-client".into(),
                usages: Some(vec!["client auth".into()]),
                expiration_seconds: Some(args.duration),
                ..Default::default()
            },
            status: None,
        };
        csrs.create(&Default::default(), &csr)
            .await
            .map_err(|e| anyhow::anyhow!("creating CertificateSigningRequest {name}: {e}"))?;
        let approval = serde_json::json!({"status": {"conditions": [CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some("DevclusterCert".into()),
            message: Some("approved by devcluster cert".into()),
            ..Default::default()
        }]}});
        csrs.patch_approval(&name, &Default::default(), &kube::api::Patch::Merge(&approval))
            .await
            .map_err(|e| anyhow::anyhow!("approving CertificateSigningRequest {name}: {e}"))?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let got =
                csrs.get(&name).await.map_err(|e| anyhow::anyhow!("reading CertificateSigningRequest {name}: {e}"))?;
            let status: Option<CertificateSigningRequestStatus> = got.status;
            if let Some(c) = status.and_then(|s| s.certificate).filter(|c| !c.0.is_empty()) {
                let _ = csrs.delete(&name, &Default::default()).await;
                break anyhow::Ok(String::from_utf8(c.0)?);
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "CertificateSigningRequest {name} was approved but no certificate was issued within 30 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })?;
    let field = |key: &str| {
        yaml.lines().find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string())).filter(|v| !v.is_empty())
    };
    let server = field("server:").ok_or_else(|| anyhow::anyhow!("the kubeconfig {path} names no server"))?;
    let ca = field("certificate-authority-data:")
        .ok_or_else(|| anyhow::anyhow!("the kubeconfig {path} has no certificate-authority-data"))?;
    print!("{}", devcluster::tls::kubeconfig_for_cert(&server, &ca, &args.user, &crt, &key.serialize_pem()));
    Ok(())
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let kubeconfig_path = args.kubeconfig.clone().unwrap_or_else(|| match &args.data_dir {
            Some(d) => d.join("kubeconfig"),
            None => PathBuf::from("devcluster.kubeconfig"),
        });
        let options = devcluster::Options {
            listen: args.listen,
            data_dir: args.data_dir.clone(),
            history: args.history,
            bookmark_interval: std::time::Duration::from_secs(args.bookmark_interval.max(1)),
            nodes: args.nodes,
            pod_startup: std::time::Duration::from_millis(args.pod_startup_ms),
            faults: args.faults.clone(),
            job_pod_duration: std::time::Duration::from_millis(args.job_pod_duration_ms),
            run: args.run.clone(),
            ..Default::default()
        };
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(devcluster::run(options, ready_tx, stop_rx));
        let (cluster, _runtime, addr) = match ready_rx.await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(e.context(format!("devcluster could not start on {}", args.listen))),
            Err(_) => anyhow::bail!("devcluster stopped before it was ready"),
        };
        let url = format!("https://{addr}");
        let kubeconfig = match args.kubeconfig_auth {
            KubeconfigAuth::Token => cluster.creds.kubeconfig(&url),
            KubeconfigAuth::Cert => cluster.creds.kubeconfig_with_cert(&url)?,
        };
        write_private(&kubeconfig_path, &kubeconfig)
            .map_err(|e| anyhow::anyhow!("writing the kubeconfig to {}: {e}", kubeconfig_path.display()))?;
        let abs = std::fs::canonicalize(&kubeconfig_path).unwrap_or(kubeconfig_path.clone());
        tracing::info!(%url, kubeconfig = %abs.display(), "devcluster ready");
        println!("devcluster is serving the Kubernetes API at {url}");
        println!("kubeconfig for user admin written to {}", abs.display());
        println!("  export KUBECONFIG={}", abs.display());
        println!("  kubectl get namespaces");
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
        let _ = server.await;
        Ok(())
    })
}

fn write_private(path: &std::path::Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    // Written beside it and renamed into place, so that whoever waits for the file (the getting
    // started guide: `until [ -s "$KUBECONFIG" ]`) never reads half of it.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
