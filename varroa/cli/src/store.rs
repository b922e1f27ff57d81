//! The build record store: the recorder's PostgreSQL database (schema:
//! varroa/recorder/migrations/), read directly and read-only by `builds`, `build` and `activity`
//! until the BFF's API serves the same records.
//!
//! - The connection: `--database-url` (`VARROA_DATABASE_URL`), the password from
//!   `--database-password-file` (`VARROA_DATABASE_PASSWORD_FILE`), without TLS like the recorder
//!   (docs/varroa/cli.md says what that means). The session is read-only
//!   (`default_transaction_read_only`) and every statement has a time limit.
//! - The queries are fixed SQL text with `$n` parameters (no user input is ever part of the SQL),
//!   bounded by `LIMIT`, and follow the schema's indexes: `runs_by_controller` for a controller's
//!   builds, the primary keys for one build's run, stages and tests, `activity_by_controller` and
//!   `activity_by_time` for activity. An optional filter is `($n IS NULL OR col = $n)`, which
//!   PostgreSQL folds away when it plans with the values (tests/records.rs checks the plans).
//! - Errors name the address (`host:port`, never the URL: it may hold a password) and the flag to
//!   fix.

use crate::cli::StoreArgs;
use crate::records::{Activity, JobSchedules, Run, RunStatus, Schedule, Stage, TestSummary};
use jiff::Timestamp;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_postgres::Row;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;

/// The largest password file read.
const MAX_PASSWORD_BYTES: u64 = 4096;
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The session's settings: read-only, and no statement runs longer than 30 s.
const SESSION_OPTIONS: &str = "-c default_transaction_read_only=on -c statement_timeout=30000";
/// The application name PostgreSQL shows in `pg_stat_activity`.
const APPLICATION_NAME: &str = "varroa-cli";

/// Why the store could not be read, phrased for the user.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No `--database-url`.
    #[error(
        "no build record store to read: set --database-url or VARROA_DATABASE_URL to the recorder's PostgreSQL database (postgres://user@host:5432/dbname), with --database-password-file or VARROA_DATABASE_PASSWORD_FILE if it needs a password"
    )]
    NoUrl,
    /// The URL does not parse or names no host.
    #[error("invalid --database-url: {reason}; fix: postgres://user@host:5432/dbname")]
    Url {
        /// What is wrong.
        reason: String,
    },
    /// The password file cannot be read.
    #[error("cannot read --database-password-file {}: {reason}", path.display())]
    Password {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Nothing answered at the address.
    #[error(
        "cannot reach the build record store at {addr}: {reason}; check --database-url (VARROA_DATABASE_URL) and that PostgreSQL runs there"
    )]
    Unreachable {
        /// `host:port`.
        addr: String,
        /// Why (the connection's error chain).
        reason: String,
    },
    /// PostgreSQL answered and refused the session.
    #[error("the build record store at {addr} refused the connection: {message}; {fix}")]
    Refused {
        /// `host:port`.
        addr: String,
        /// PostgreSQL's message.
        message: String,
        /// What to change.
        fix: &'static str,
    },
    /// The database has no build record schema.
    #[error(
        "the database at {addr} holds no build records ({message}): point --database-url at the recorder's database, or apply the schema with `varroa-recorder migrate`"
    )]
    NoSchema {
        /// `host:port`.
        addr: String,
        /// PostgreSQL's message (`relation "runs" does not exist`).
        message: String,
    },
    /// A query failed.
    #[error("{doing} in the build record store at {addr}: {reason}")]
    Query {
        /// What was being read.
        doing: String,
        /// `host:port`.
        addr: String,
        /// Why.
        reason: String,
    },
}

impl StoreError {
    /// A short word for the kind of failure (for tests and logs).
    pub fn label(&self) -> &'static str {
        match self {
            StoreError::NoUrl => "no_url",
            StoreError::Url { .. } => "url",
            StoreError::Password { .. } => "password",
            StoreError::Unreachable { .. } => "unreachable",
            StoreError::Refused { .. } => "refused",
            StoreError::NoSchema { .. } => "no_schema",
            StoreError::Query { .. } => "query",
        }
    }
}

/// An open, read-only session with the store.
pub struct Store {
    client: tokio_postgres::Client,
    addr: String,
}

/// `host:port` of every host of the configuration (no user, password or database).
fn address(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                Host::Tcp(h) if h.contains(':') => format!("[{h}]:{port}"),
                Host::Tcp(h) => format!("{h}:{port}"),
                Host::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn read_password(path: &Path) -> Result<String, StoreError> {
    use std::io::Read;
    let err = |reason: String| StoreError::Password { path: path.to_owned(), reason };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_PASSWORD_BYTES + 1).read_to_string(&mut text).map_err(|e| err(e.to_string()))?;
    if text.len() as u64 > MAX_PASSWORD_BYTES {
        return Err(err(format!("larger than {MAX_PASSWORD_BYTES} bytes: is it the password file?")));
    }
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// An error and its sources, each said once.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// The settings of a connection from the flags (checked before anything connects).
pub fn config(args: &StoreArgs) -> Result<tokio_postgres::Config, StoreError> {
    let url = args.database_url.as_deref().map(str::trim).filter(|u| !u.is_empty()).ok_or(StoreError::NoUrl)?;
    let mut config: tokio_postgres::Config =
        url.parse().map_err(|e: tokio_postgres::Error| StoreError::Url { reason: chain(&e) })?;
    if config.get_hosts().is_empty() {
        return Err(StoreError::Url { reason: "it names no host".into() });
    }
    if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
        return Err(StoreError::Url {
            reason: "sslmode=require: varroa does not speak TLS to PostgreSQL yet (nor does the recorder); reach the database over a trusted path (kubectl port-forward) with sslmode=disable or prefer".into(),
        });
    }
    config.application_name(APPLICATION_NAME);
    config.connect_timeout(CONNECT_TIMEOUT);
    config.options(SESSION_OPTIONS);
    if let Some(path) = &args.database_password_file {
        config.password(read_password(path)?);
    }
    Ok(config)
}

/// What a server's refusal asks the user to change.
fn refusal_fix(code: &SqlState) -> &'static str {
    match code {
        c if *c == SqlState::INVALID_PASSWORD || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            "check the user in --database-url and the password in --database-password-file"
        }
        c if *c == SqlState::INVALID_CATALOG_NAME => "check the database name in --database-url",
        c if *c == SqlState::TOO_MANY_CONNECTIONS => "try again shortly",
        _ => "check --database-url and --database-password-file",
    }
}

impl Store {
    /// Connect with the flags.
    pub async fn connect(args: &StoreArgs) -> Result<Store, StoreError> {
        let config = config(args)?;
        let addr = address(&config);
        let (client, connection) = match config.connect(tokio_postgres::NoTls).await {
            Ok(c) => c,
            Err(e) => {
                return Err(match e.as_db_error() {
                    Some(db) => {
                        StoreError::Refused { addr, message: db.message().to_string(), fix: refusal_fix(db.code()) }
                    }
                    None => StoreError::Unreachable { addr, reason: chain(&e) },
                });
            }
        };
        // The connection ends with the client; an error of its own shows as the query's.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Store { client, addr })
    }

    /// `host:port` of the store.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Run `sql` and read each row with `read`; `doing` names the read in errors.
    async fn query<T>(
        &self,
        doing: impl FnOnce() -> String,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        read: fn(&Row) -> RowResult<T>,
    ) -> Result<Vec<T>, StoreError> {
        let rows = self.client.query(sql, params).await;
        rows.and_then(|rows| rows.iter().map(read).collect()).map_err(|e| self.query_error(doing(), e))
    }

    fn query_error(&self, doing: String, e: tokio_postgres::Error) -> StoreError {
        let addr = self.addr.clone();
        match e.as_db_error() {
            Some(db) if *db.code() == SqlState::UNDEFINED_TABLE || *db.code() == SqlState::UNDEFINED_COLUMN => {
                StoreError::NoSchema { addr, message: db.message().to_string() }
            }
            Some(db) if *db.code() == SqlState::INSUFFICIENT_PRIVILEGE => StoreError::Query {
                doing,
                addr,
                reason: format!(
                    "{}: the database user needs SELECT on runs, stages, test_summaries, job_schedules and activity \
                     (GRANT SELECT ON runs, stages, test_summaries, job_schedules, activity TO <user>)",
                    db.message()
                ),
            },
            Some(db) if *db.code() == SqlState::QUERY_CANCELED => {
                StoreError::Query { doing, addr, reason: format!("{} (the statement time limit is 30s)", db.message()) }
            }
            Some(db) => StoreError::Query { doing, addr, reason: db.message().to_string() },
            None => StoreError::Query { doing, addr, reason: chain(&e) },
        }
    }

    /// A controller's builds, newest first (see [`BUILDS_SQL`]).
    pub async fn builds(&self, q: &BuildsQuery<'_>) -> Result<Vec<Run>, StoreError> {
        let limit = i64::from(q.limit);
        self.query(
            || format!("reading the builds of controller {}/{}", q.namespace, q.controller),
            BUILDS_SQL,
            &[&q.namespace, &q.controller, &q.job, &q.cluster, &limit],
            run_of,
        )
        .await
    }

    /// One build's runs (one per cluster that has it, at most [`MAX_CLUSTERS`]).
    pub async fn runs(&self, q: &BuildQuery<'_>) -> Result<Vec<Run>, StoreError> {
        let limit = MAX_CLUSTERS;
        self.query(
            || format!("reading build {} #{} of controller {}/{}", q.job, q.number, q.namespace, q.controller),
            RUN_SQL,
            &[&q.namespace, &q.controller, &q.job, &q.number, &q.cluster, &limit],
            run_of,
        )
        .await
    }

    /// The stages of a run, in start order (at most `limit`).
    pub async fn stages(&self, run: &Run, limit: i64) -> Result<Vec<Stage>, StoreError> {
        self.query(
            || format!("reading the stages of {} #{}", run.job, run.number),
            STAGES_SQL,
            &[&run.cluster, &run.namespace, &run.controller, &run.job, &run.number, &limit],
            stage_of,
        )
        .await
    }

    /// The test summary of a run, if one arrived.
    pub async fn tests(&self, run: &Run) -> Result<Option<TestSummary>, StoreError> {
        self.query(
            || format!("reading the test summary of {} #{}", run.job, run.number),
            TESTS_SQL,
            &[&run.cluster, &run.namespace, &run.controller, &run.job, &run.number],
            tests_of,
        )
        .await
        .map(|mut rows| rows.pop())
    }

    /// A controller's jobs that have schedules, by job (see [`SCHEDULES_SQL`]).
    pub async fn schedules(&self, q: &SchedulesQuery<'_>) -> Result<Vec<JobSchedules>, StoreError> {
        let limit = i64::from(q.limit);
        self.query(
            || format!("reading the job schedules of controller {}/{}", q.namespace, q.controller),
            SCHEDULES_SQL,
            &[&q.namespace, &q.controller, &q.job, &q.cluster, &limit],
            schedules_of,
        )
        .await?
        .into_iter()
        .map(|(mut job, text)| {
            // The recorder stores only what varroa-link validated; a value this CLI cannot read
            // (a newer recorder's shape, a hand-edited row) is an error naming the job.
            job.schedules = serde_json::from_str::<Vec<Schedule>>(&text).map_err(|e| StoreError::Query {
                doing: format!(
                    "reading the schedules of job {} of controller {}/{}",
                    job.job, q.namespace, q.controller
                ),
                addr: self.addr.clone(),
                reason: format!("job_schedules.schedules is not a list of {{trigger, spec, next}}: {e}"),
            })?;
            Ok(job)
        })
        .collect()
    }

    /// Activity, newest first (see [`ACTIVITY_SQL`]).
    pub async fn activity(&self, q: &ActivityQuery<'_>) -> Result<Vec<Activity>, StoreError> {
        let limit = i64::from(q.limit);
        self.query(
            || "reading activity".to_string(),
            ACTIVITY_SQL,
            &[&q.namespace, &q.controller, &q.since, &q.cluster, &limit],
            activity_of,
        )
        .await
    }
}

/// The most clusters one build is looked up in (a build number is per job and controller; the
/// same controller name in several clusters has several).
pub const MAX_CLUSTERS: i64 = 20;

/// What [`Store::builds`] reads.
#[derive(Debug, Clone)]
pub struct BuildsQuery<'a> {
    /// The controller's namespace.
    pub namespace: &'a str,
    /// The controller.
    pub controller: &'a str,
    /// Only this job.
    pub job: Option<&'a str>,
    /// Only this cluster.
    pub cluster: Option<&'a str>,
    /// At most this many.
    pub limit: u32,
}

/// What [`Store::runs`] reads.
#[derive(Debug, Clone)]
pub struct BuildQuery<'a> {
    /// The controller's namespace.
    pub namespace: &'a str,
    /// The controller.
    pub controller: &'a str,
    /// The job's full name.
    pub job: &'a str,
    /// The build number.
    pub number: i64,
    /// Only this cluster.
    pub cluster: Option<&'a str>,
}

/// What [`Store::activity`] reads.
#[derive(Debug, Clone)]
pub struct ActivityQuery<'a> {
    /// Only this namespace (`None`: every namespace, and cluster-wide activity).
    pub namespace: Option<&'a str>,
    /// Only this controller (with a namespace).
    pub controller: Option<&'a str>,
    /// Only what happened at or after this moment.
    pub since: Option<Timestamp>,
    /// Only this cluster.
    pub cluster: Option<&'a str>,
    /// At most this many.
    pub limit: u32,
}

/// What [`Store::schedules`] reads.
#[derive(Debug, Clone)]
pub struct SchedulesQuery<'a> {
    /// The controller's namespace.
    pub namespace: &'a str,
    /// The controller.
    pub controller: &'a str,
    /// Only this job.
    pub job: Option<&'a str>,
    /// Only this cluster.
    pub cluster: Option<&'a str>,
    /// At most this many jobs.
    pub limit: u32,
}

/// A controller's builds: `$1` namespace, `$2` controller, `$3` job or NULL, `$4` cluster or
/// NULL, `$5` limit. The order is the index `runs_by_controller`'s (`started_at DESC`, so not yet
/// started, i.e. queued, first), ties by queue time and number.
pub const BUILDS_SQL: &str = "SELECT cluster, namespace, controller, job, build, cell, trigger, cause, node, \
     queued_at, started_at, finished_at, result, duration_ms, status \
     FROM runs \
     WHERE namespace = $1 AND controller = $2 \
       AND ($3::text IS NULL OR job = $3) AND ($4::text IS NULL OR cluster = $4) \
     ORDER BY started_at DESC, queued_at DESC NULLS LAST, build DESC \
     LIMIT $5";

/// One build: `$1` namespace, `$2` controller, `$3` job, `$4` number, `$5` cluster or NULL,
/// `$6` limit.
pub const RUN_SQL: &str = "SELECT cluster, namespace, controller, job, build, cell, trigger, cause, node, \
     queued_at, started_at, finished_at, result, duration_ms, status \
     FROM runs \
     WHERE namespace = $1 AND controller = $2 AND job = $3 AND build = $4 \
       AND ($5::text IS NULL OR cluster = $5) \
     ORDER BY cluster \
     LIMIT $6";

/// A run's stages by its primary key (`$1`..`$5`), in start order (flow node ids are numbers
/// as text: shorter first), `$6` limit.
pub const STAGES_SQL: &str = "SELECT stage_id, name, started_at, result, duration_ms \
     FROM stages \
     WHERE cluster = $1 AND namespace = $2 AND controller = $3 AND job = $4 AND build = $5 \
     ORDER BY started_at ASC NULLS LAST, length(stage_id), stage_id \
     LIMIT $6";

/// A run's test summary by its primary key.
pub const TESTS_SQL: &str = "SELECT total, failed, skipped, duration_ms \
     FROM test_summaries \
     WHERE cluster = $1 AND namespace = $2 AND controller = $3 AND job = $4 AND build = $5";

/// Activity: `$1` namespace or NULL, `$2` controller or NULL, `$3` since or NULL, `$4` cluster or
/// NULL, `$5` limit; newest first (the caller shows them oldest first).
pub const ACTIVITY_SQL: &str = "SELECT id, time, cluster, namespace, controller, cell, source, kind, message \
     FROM activity \
     WHERE ($1::text IS NULL OR namespace = $1) AND ($2::text IS NULL OR controller = $2) \
       AND ($3::timestamptz IS NULL OR time >= $3) AND ($4::text IS NULL OR cluster = $4) \
     ORDER BY time DESC, id DESC \
     LIMIT $5";

/// A controller's job schedules: `$1` namespace, `$2` controller, `$3` job or NULL, `$4` cluster
/// or NULL, `$5` limit; only jobs with at least one schedule (a job whose triggers were removed,
/// or that was deleted, keeps a row with `[]`), by job name, by the index
/// `job_schedules_by_controller`. The schedules are read as text and parsed here (a value this
/// CLI cannot read is an error naming the job, not a crash).
pub const SCHEDULES_SQL: &str = "SELECT cluster, namespace, controller, job, schedules::text AS schedules, event_time \
     FROM job_schedules \
     WHERE namespace = $1 AND controller = $2 \
       AND ($3::text IS NULL OR job = $3) AND ($4::text IS NULL OR cluster = $4) \
       AND schedules <> '[]'::jsonb \
     ORDER BY job, cluster \
     LIMIT $5";

type RowResult<T> = Result<T, tokio_postgres::Error>;

fn column<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, name: &str) -> RowResult<T> {
    row.try_get(name)
}

fn run_of(row: &Row) -> RowResult<Run> {
    let status: String = column(row, "status")?;
    let result: Option<String> = column(row, "result")?;
    let started_at: Option<Timestamp> = column(row, "started_at")?;
    Ok(Run {
        cluster: column(row, "cluster")?,
        namespace: column(row, "namespace")?,
        controller: column(row, "controller")?,
        job: column(row, "job")?,
        number: column(row, "build")?,
        status: RunStatus::parse(&status, result.is_some(), started_at.is_some()),
        result,
        cell: column(row, "cell")?,
        trigger: column(row, "trigger")?,
        cause: column(row, "cause")?,
        node: column(row, "node")?,
        queued_at: column(row, "queued_at")?,
        started_at,
        finished_at: column(row, "finished_at")?,
        duration_ms: column(row, "duration_ms")?,
    })
}

fn stage_of(row: &Row) -> RowResult<Stage> {
    Ok(Stage {
        id: column(row, "stage_id")?,
        name: column(row, "name")?,
        started_at: column(row, "started_at")?,
        result: column(row, "result")?,
        duration_ms: column(row, "duration_ms")?,
    })
}

fn tests_of(row: &Row) -> RowResult<TestSummary> {
    Ok(TestSummary {
        total: column(row, "total")?,
        failed: column(row, "failed")?,
        skipped: column(row, "skipped")?,
        duration_ms: column(row, "duration_ms")?,
    })
}

/// A `job_schedules` row, its schedules still JSON text (parsed by [`Store::schedules`]).
fn schedules_of(row: &Row) -> RowResult<(JobSchedules, String)> {
    Ok((
        JobSchedules {
            cluster: column(row, "cluster")?,
            namespace: column(row, "namespace")?,
            controller: column(row, "controller")?,
            job: column(row, "job")?,
            schedules: vec![],
            reported_at: column(row, "event_time")?,
        },
        column(row, "schedules")?,
    ))
}

fn activity_of(row: &Row) -> RowResult<Activity> {
    Ok(Activity {
        id: column(row, "id")?,
        time: column(row, "time")?,
        cluster: column(row, "cluster")?,
        namespace: column(row, "namespace")?,
        controller: column(row, "controller")?,
        cell: column(row, "cell")?,
        source: column(row, "source")?,
        kind: column(row, "kind")?,
        message: column(row, "message")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: Option<&str>) -> StoreArgs {
        StoreArgs { database_url: url.map(String::from), ..Default::default() }
    }

    #[test]
    fn the_url_is_checked_before_connecting_and_never_printed() {
        assert_eq!(config(&args(None)).unwrap_err().label(), "no_url");
        assert_eq!(config(&args(Some("  "))).unwrap_err().label(), "no_url");
        let e = config(&args(Some("postgres://u@h:notaport/db"))).unwrap_err();
        assert!(e.to_string().starts_with("invalid --database-url: ") && e.to_string().ends_with("dbname"), "{e}");
        let e = config(&args(Some("dbname=x"))).unwrap_err().to_string();
        assert!(e.contains("names no host"), "{e}");
        let e = config(&args(Some("postgres://u@h/d?sslmode=require"))).unwrap_err().to_string();
        assert!(e.contains("sslmode=require") && e.contains("port-forward"), "{e}");
        let c = config(&args(Some("postgres://u:secret@db.example:6432/records"))).unwrap();
        assert_eq!(address(&c), "db.example:6432");
        assert_eq!(c.get_options(), Some(SESSION_OPTIONS), "read-only, with a statement timeout");
        assert!(SESSION_OPTIONS.contains("default_transaction_read_only=on"));
        let c = config(&args(Some("host=a,b port=5433 user=u"))).unwrap();
        assert_eq!(address(&c), "a:5433,b:5433");
        assert_eq!(address(&config(&args(Some("postgres://u@[::1]/d"))).unwrap()), "[::1]:5432");
    }

    #[test]
    fn the_password_file_is_read_without_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "s3cret\n").unwrap();
        let mut a = args(Some("postgres://u@h/d"));
        a.database_password_file = Some(path.clone());
        assert_eq!(config(&a).unwrap().get_password(), Some(&b"s3cret"[..]));
        std::fs::write(&path, vec![b'x'; 5000]).unwrap();
        assert!(config(&a).unwrap_err().to_string().contains("larger than 4096 bytes"));
        a.database_password_file = Some(dir.path().join("missing"));
        let e = config(&a).unwrap_err().to_string();
        assert!(e.starts_with("cannot read --database-password-file ") && e.contains("missing"), "{e}");
    }
}
