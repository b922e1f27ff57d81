//! `artifacts CONTROLLER JOB NUMBER [-o json|yaml]`: a build's archived artifacts (path, size),
//! listed from the blob store the gateway signs uploads into (`--log-store`,
//! `VARROA_LOG_STORE`; docs/varroa/gateway.md, "Archived artifacts").
//!
//! Artifacts are under the prefix of the cell that ran the build
//! (`artifacts/<cluster>/<ns>/<ctrl>/cell-<n>/<job>/<build>/`), so the build's run record
//! (the build record store, `--database-url`) names the cluster and the cell; a build in several
//! clusters needs `--cluster`, as `build` does. A build without a run record is an error naming
//! it; a build with a record and no artifacts prints an empty table (and a note on stderr).

use clap::Args;
use clikit::cli::GlobalArgs;
use clikit::output::{self, Format};
use clikit::table::Table;
use serde::Serialize;
use std::path::PathBuf;
use varroa_blobs::{ArtifactKey, Artifacts, BlobStore, StoreSettings};

use crate::cli::{RecordOutput, StoreArgs, parse_build_number};
use crate::error::{Error, Result};
use crate::store::{BuildQuery, Store};

/// `artifacts CONTROLLER JOB NUMBER [-o json|yaml]`.
#[derive(Args, Debug, Clone)]
pub struct ArtifactsArgs {
    /// The controller's name.
    pub controller: String,
    /// The job's full name with folders (`team/app`).
    pub job: String,
    /// The build number (`7` or `#7`).
    #[arg(value_parser = parse_build_number)]
    pub number: i64,
    /// The blob store the gateway writes (its --log-store); artifacts need an S3 bucket:
    /// `s3://bucket/prefix?endpoint=https://host:port&region=name` (credentials from the AWS
    /// environment or --log-store-credentials-file).
    #[arg(long, env = "VARROA_LOG_STORE", value_name = "URL")]
    pub log_store: Option<String>,
    /// An S3 credentials file (`access_key_id=...`, `secret_access_key=...` lines).
    #[arg(long, env = "VARROA_LOG_STORE_CREDENTIALS_FILE", value_name = "PATH")]
    pub log_store_credentials_file: Option<PathBuf>,
    /// Output format (default: a table of PATH and SIZE).
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<RecordOutput>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// One build's artifacts, as `-o json|yaml` prints them.
#[derive(Debug, Serialize)]
struct BuildArtifacts {
    cluster: String,
    namespace: String,
    controller: String,
    cell: i32,
    job: String,
    number: i64,
    artifacts: Vec<Entry>,
}

#[derive(Debug, Serialize)]
struct Entry {
    path: String,
    size: u64,
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::Failed(e.to_string())
}

/// Run `artifacts`.
pub async fn run(g: &GlobalArgs, args: ArtifactsArgs) -> Result<()> {
    let namespace = super::record_scope(g, &args.controller, Some(("JOB", &args.job)), args.store.cluster.as_deref())?;
    let Some(url) = args.log_store.clone() else {
        return Err(Error::Failed(
            "no store to read: set --log-store or VARROA_LOG_STORE to the gateway's --log-store \
             (s3://bucket/prefix?endpoint=...&region=...)"
                .into(),
        ));
    };
    let settings = StoreSettings { url, credentials_file: args.log_store_credentials_file.clone() };
    let blobs = BlobStore::open(&settings).map_err(|e| failed(format!("--log-store: {e}")))?;
    let store = Store::connect(&args.store).await?;
    let q = BuildQuery {
        namespace: &namespace,
        controller: &args.controller,
        job: &args.job,
        number: args.number,
        cluster: args.store.cluster.as_deref(),
    };
    let runs = store.runs(&q).await?;
    let run = match runs.as_slice() {
        [] => return Err(crate::cmd::builds::not_found(&q)),
        [one] => one,
        several => {
            let clusters: Vec<&str> = several.iter().map(|r| r.cluster.as_str()).collect();
            return Err(Error::Failed(format!(
                "build {} #{} of controller {}/{} is in several clusters ({}): pick one with --cluster",
                q.job,
                q.number,
                q.namespace,
                q.controller,
                clusters.join(", ")
            )));
        }
    };
    let cell = u32::try_from(run.cell).map_err(|_| failed(format!("the run record names cell {}", run.cell)))?;
    let key = ArtifactKey::new(&run.cluster, &namespace, &args.controller, cell, &args.job, args.number as u64)
        .map_err(failed)?;
    let artifacts = Artifacts::new(blobs);
    let listed = artifacts.list(&key).await.map_err(failed)?;
    if listed.is_empty() {
        eprintln!("no artifacts of build {} in {} (under {})", key.describe(), artifacts.store().url(), key.prefix());
    }
    match args.output {
        None => {
            let mut t = Table::new(["PATH", "SIZE"]);
            for a in &listed {
                t.row([a.path.clone(), a.size.to_string()]);
            }
            out!("{}", t.render(""));
        }
        Some(format) => {
            let format = match format {
                RecordOutput::Json => Format::Json,
                RecordOutput::Yaml => Format::Yaml,
            };
            let item = BuildArtifacts {
                cluster: run.cluster.clone(),
                namespace: namespace.clone(),
                controller: args.controller.clone(),
                cell: run.cell,
                job: args.job.clone(),
                number: args.number,
                artifacts: listed.into_iter().map(|a| Entry { path: a.path, size: a.size }).collect(),
            };
            out!("{}", output::print(&[item], true, "artifacts", format).map_err(failed)?);
        }
    }
    Ok(())
}
