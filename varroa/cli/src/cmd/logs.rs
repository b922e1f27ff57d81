//! `logs CONTROLLER JOB NUMBER [-f]`: a build's console log, read from the log store the
//! gateway writes (`--log-store`, `VARROA_LOG_STORE`; docs/varroa/data-plane.md), bytes in order
//! to stdout, exactly as Jenkins wrote them.
//!
//! - The cluster: `--cluster`, or the one cluster whose logs hold this build (a store shared by
//!   several clusters may hold the same controller name in more than one: then `--cluster` is
//!   asked for, as `build` does).
//! - Without `-f`: what is stored now (a running build's log so far, with a note on stderr).
//! - With `-f`: what is stored, then what is appended, until the build's completion marker is
//!   there and every byte was printed. With `--nats-url` the gateway's notice of each stored chunk
//!   (`varroa.logs.<cluster>.<ns>.<ctrl>`) wakes the reader at once, and the store is also polled
//!   every 5 s (core NATS is at most once); without it, or when NATS cannot be reached, the store
//!   is polled every second.
//! - A build with no log at all is an error naming the controller, the job and the number.

use std::io::Write;
use std::time::Duration;

use crate::cli::LogsArgs;
use crate::error::{Error, Result};

use clikit::cli::GlobalArgs;
use futures::StreamExt;
use varroa_blobs::logs::{FollowError, Follower, LogKey, Logs, Notice, follow, notice_subject};
use varroa_blobs::store::{BlobStore, StoreSettings};

/// How often the store is polled without NATS.
pub const POLL: Duration = Duration::from_secs(1);
/// How often the store is polled with NATS (a notice may be lost).
pub const POLL_WITH_NATS: Duration = Duration::from_secs(5);
/// How long connecting to NATS may take before `-f` polls instead.
const NATS_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn failed(e: impl std::fmt::Display) -> Error {
    Error::Failed(e.to_string())
}

/// Run `logs`.
pub async fn run(g: &GlobalArgs, args: LogsArgs) -> Result<()> {
    let namespace = super::record_scope(g, &args.controller, Some(("JOB", &args.job)), args.cluster.as_deref())?;
    let Some(url) = args.log_store.clone() else {
        return Err(Error::Failed(
            "no log store to read: set --log-store or VARROA_LOG_STORE to the gateway's --log-store \
             (file:///var/lib/varroa/logs, or s3://bucket/prefix?endpoint=...&region=...)"
                .into(),
        ));
    };
    let settings = StoreSettings { url, credentials_file: args.log_store_credentials_file.clone() };
    let logs = Logs::new(BlobStore::open(&settings).map_err(|e| failed(format!("--log-store: {e}")))?);
    let number = args.number as u64;
    let what = format!("{} #{} of controller {}/{}", args.job, number, namespace, args.controller);
    let not_found = |cluster: Option<&str>| {
        let cluster = cluster.map(|c| format!(" in cluster {c}")).unwrap_or_default();
        Error::Failed(format!(
            "no log of build {what}{cluster} in {} (the build has not sent any yet, or its log is not kept; \
             `varroa builds {} -n {namespace} --job {}` lists its builds)",
            logs.store().url(),
            args.controller,
            crate::cmd::builds::shell_word(&args.job)
        ))
    };
    let cluster = match &args.cluster {
        Some(c) => c.clone(),
        None => {
            let found = logs.clusters_with(&namespace, &args.controller, &args.job, number).await.map_err(failed)?;
            match found.as_slice() {
                [] => return Err(not_found(None)),
                [one] => one.clone(),
                several => {
                    return Err(Error::Failed(format!(
                        "the log of build {what} is in several clusters ({}): pick one with --cluster",
                        several.join(", ")
                    )));
                }
            }
        }
    };
    let key = LogKey::new(&cluster, &namespace, &args.controller, &args.job, number).map_err(failed)?;
    let state = logs.state(&key).await.map_err(failed)?;
    if !state.exists() {
        return Err(not_found(Some(&cluster)));
    }
    let mut stdout = std::io::stdout();
    let mut out = |b: &[u8]| {
        stdout.write_all(b)?;
        stdout.flush()
    };
    let follower = Follower::new(logs, key.clone(), 0);
    let result = if args.follow {
        let wakes = match &args.nats_url {
            Some(url) => wakes(url, args.nats_credentials_file.as_deref(), &key).await,
            None => None,
        };
        let poll = if wakes.is_some() { POLL_WITH_NATS } else { POLL };
        follow(follower, wakes, poll, &mut out).await.map(|_| ())
    } else {
        let mut follower = follower;
        match follower.poll(&mut out).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                eprintln!(
                    "(the log of build {what} is not complete yet: the build runs, or ended without its last chunk; -f follows it)"
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    };
    match result {
        Ok(()) => Ok(()),
        // `varroa logs ... | head`: the reader went away.
        Err(FollowError::Out(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(failed(e)),
    }
}

/// A wake-up for every notice of `key`'s build on NATS; `None` (with a note) when NATS cannot be
/// reached: then the store is polled.
async fn wakes(
    url: &str,
    credentials: Option<&std::path::Path>,
    key: &LogKey,
) -> Option<futures::stream::BoxStream<'static, ()>> {
    let warn = |why: String| {
        eprintln!("(cannot use NATS at {url}: {why}; polling the log store every {}s instead)", POLL.as_secs());
        None
    };
    let mut options = async_nats::ConnectOptions::new()
        .name("varroa-cli")
        .connection_timeout(NATS_CONNECT_TIMEOUT)
        .max_reconnects(Some(3));
    if let Some(path) = credentials {
        match varroa_link::nats::Credentials::read(path) {
            Ok(c) => options = options.user_and_password(c.user, c.password),
            Err(e) => return warn(e.to_string()),
        }
    }
    let client = match tokio::time::timeout(NATS_CONNECT_TIMEOUT, options.connect(url)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return warn(e.to_string()),
        Err(_) => return warn(format!("no answer within {NATS_CONNECT_TIMEOUT:?}")),
    };
    let subject = notice_subject(key.cluster(), key.namespace(), key.controller());
    let subscriber = match client.subscribe(subject).await {
        Ok(s) => s,
        Err(e) => return warn(e.to_string()),
    };
    if let Err(e) = client.flush().await {
        return warn(e.to_string());
    }
    let (job, build) = (key.job().to_owned(), key.build());
    // The client lives as long as the stream (dropping it would end the subscription).
    let stream = subscriber
        .filter_map(move |m| {
            let _keep = &client;
            let mine = serde_json::from_slice::<Notice>(&m.payload).is_ok_and(|n| n.job == job && n.build == build);
            futures::future::ready(mine.then_some(()))
        })
        .boxed();
    Some(stream)
}
