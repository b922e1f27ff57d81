//! The command line: flags and subcommands (clap).

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use clikit::cli::{CompletionArgs, GlobalArgs, namespace_help};
use clikit::timefmt;
use std::path::PathBuf;
use std::time::Duration;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  failure: the API server refused the request, the controller, build or log does not exist, or
     the build record store or the log store cannot be read
  2  usage error (unknown flag, missing argument, bad value)
  3  timeout: --wait gave up before the controller reached the state asked for";

/// The most rows `--limit` asks for.
pub const MAX_LIMIT: u32 = 10_000;

/// `varroa`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "varroa",
    version,
    about = "Inspect, stop and start Varroa's Jenkins controllers; read their builds, logs and activity",
    long_about = "Inspect, stop and start the Jenkins controllers Varroa manages (Controller, varroa.dev/v1alpha1), \
and read their build records and activity. get, describe, stop and start talk to the Kubernetes API server, like \
kubectl, with the same kubeconfig; builds, build and activity read the build record store (the recorder's \
PostgreSQL database, --database-url), logs reads the log store (--log-store), and these use the kubeconfig only \
for the default namespace.",
    after_help = EXIT_CODES,
    propagate_version = true,
    mut_arg("namespace", |a| a.help(namespace_help("the controllers")))
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// List controllers (phase, attention, ready cells, age), or show one.
    Get(GetArgs),
    /// Show a controller in detail: status, conditions, resolved settings and where each came
    /// from, and its events.
    Describe(DescribeArgs),
    /// Stop a controller: `spec.powerState: Stopped` (Jenkins scaled to zero; the volume and
    /// configuration stay).
    #[command(after_help = EXIT_CODES)]
    Stop(PowerArgs),
    /// Start a stopped controller: `spec.powerState: Running`.
    #[command(after_help = EXIT_CODES)]
    Start(PowerArgs),
    /// List a controller's builds, newest first (from the build record store).
    #[command(after_help = EXIT_CODES)]
    Builds(BuildsArgs),
    /// Show one build: the run, its stages in start order, its test summary (from the build
    /// record store).
    #[command(after_help = EXIT_CODES)]
    Build(BuildArgs),
    /// List a controller's job schedules: each timed (cron) or polling (scm) trigger and when it
    /// fires next (from the build record store).
    #[command(after_help = EXIT_CODES)]
    Schedules(SchedulesArgs),
    /// List what happened to controllers (lifecycle changes, user actions, what the mite saw),
    /// newest last (from the build record store).
    #[command(after_help = EXIT_CODES)]
    Activity(ActivityArgs),
    /// Print a build's console log (from the log store); -f follows a running build until it
    /// ends.
    #[command(after_help = EXIT_CODES)]
    Logs(LogsArgs),
    /// List a build's archived artifacts (path, size) from the blob store, under the prefix of
    /// the cell that ran it (found in the build record store).
    #[command(after_help = EXIT_CODES)]
    Artifacts(crate::cmd::artifacts::ArtifactsArgs),
    /// Print a shell completion script: `source <(varroa completion bash)`.
    Completion(CompletionArgs),
}

/// The kinds of object `get` and `describe` show.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Controllers (also `controller`, `ctrl`, `jc`).
    #[value(alias = "controller", alias = "ctrl", alias = "jc")]
    Controllers,
}

/// `-o`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The table, with the class, the version profile and when the operator last reconciled.
    Wide,
    /// The objects as stored (a `v1` List for several).
    Json,
    /// The objects as stored (a `v1` List for several).
    Yaml,
    /// `controller.varroa.dev/NAME`, one per line.
    Name,
}

/// `get controllers [NAME] [-A] [-o FORMAT]`.
#[derive(Args, Debug, Clone)]
pub struct GetArgs {
    /// What to list: `controllers`.
    #[arg(value_enum, value_name = "KIND")]
    pub kind: Kind,
    /// The controller's name; without it, every controller of the namespace.
    pub name: Option<String>,
    /// Every namespace (not with a name).
    #[arg(short = 'A', long, conflicts_with = "name")]
    pub all_namespaces: bool,
    /// Output format (default: a table).
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
}

/// `describe controller NAME`.
#[derive(Args, Debug, Clone)]
pub struct DescribeArgs {
    /// What to describe: `controller`.
    #[arg(value_enum, value_name = "KIND")]
    pub kind: Kind,
    /// The controller's name.
    pub name: String,
}

/// `stop|start NAME [--wait [--timeout D]]`.
#[derive(Args, Debug, Clone)]
pub struct PowerArgs {
    /// The controller's name.
    pub name: String,
    /// Wait until the operator reports the controller stopped (phase Stopped) or started
    /// (phase Running or Connected) for this change.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits before giving up with exit code 3 (e.g. 90s, 5m, 1h).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = timefmt::parse_duration, requires = "wait")]
    pub timeout: Duration,
}

/// Where the build record store is: the recorder's PostgreSQL database. `builds`, `build` and
/// `activity` read it directly (read-only).
#[derive(Args, Debug, Clone, Default)]
pub struct StoreArgs {
    /// The build record store: the recorder's PostgreSQL database,
    /// `postgres://user@host:5432/dbname` (or libpq's `host=... dbname=...`). The password
    /// comes from --database-password-file.
    #[arg(long, env = "VARROA_DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database_url: Option<String>,
    /// A file holding the database password (a mounted Secret, say).
    #[arg(long, env = "VARROA_DATABASE_PASSWORD_FILE", value_name = "PATH")]
    pub database_password_file: Option<PathBuf>,
    /// Only records of this cluster (default: every cluster the store holds records of).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
}

/// `-o` of the lists (`builds`, `activity`).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOutput {
    /// The table with times in RFC 3339 and more columns.
    Wide,
    /// The records as JSON, in a `v1` List.
    Json,
    /// The records as YAML, in a `v1` List.
    Yaml,
}

/// `-o` of `build`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOutput {
    /// The build, its stages and test summary as JSON.
    Json,
    /// The build, its stages and test summary as YAML.
    Yaml,
}

/// `builds CONTROLLER [--job JOB] [--limit N] [-o wide|json|yaml]`.
#[derive(Args, Debug, Clone)]
pub struct BuildsArgs {
    /// The controller's name.
    pub controller: String,
    /// Only this job, by its full name with folders (`team/app`).
    #[arg(long, value_name = "JOB")]
    pub job: Option<String>,
    /// At most this many builds (the newest).
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=MAX_LIMIT as i64))]
    pub limit: u32,
    /// Output format (default: a table).
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<ListOutput>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `build CONTROLLER JOB NUMBER [-o json|yaml]`.
#[derive(Args, Debug, Clone)]
pub struct BuildArgs {
    /// The controller's name.
    pub controller: String,
    /// The job's full name with folders (`team/app`).
    pub job: String,
    /// The build number (`7` or `#7`).
    #[arg(value_parser = parse_build_number)]
    pub number: i64,
    /// Output format (default: a description).
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<RecordOutput>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `schedules CONTROLLER [--job JOB] [--limit N] [-o wide|json|yaml]`.
#[derive(Args, Debug, Clone)]
pub struct SchedulesArgs {
    /// The controller's name.
    pub controller: String,
    /// Only this job, by its full name with folders (`team/app`).
    #[arg(long, value_name = "JOB")]
    pub job: Option<String>,
    /// At most this many jobs (by name).
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=MAX_LIMIT as i64))]
    pub limit: u32,
    /// Output format (default: a table).
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<ListOutput>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `activity [CONTROLLER] [-A] [--since D] [--limit N] [-o wide|json|yaml]`.
#[derive(Args, Debug, Clone)]
pub struct ActivityArgs {
    /// Only this controller's activity; without it, the namespace's.
    pub controller: Option<String>,
    /// Every namespace, and the cluster-wide activity that belongs to none (not with a
    /// controller).
    #[arg(short = 'A', long, conflicts_with = "controller")]
    pub all_namespaces: bool,
    /// Only what happened in this last stretch of time: 30s, 15m, 1h, 2d (or 1h30m).
    #[arg(long, value_name = "DURATION", value_parser = timefmt::parse_duration)]
    pub since: Option<Duration>,
    /// At most this many entries (the newest).
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=MAX_LIMIT as i64))]
    pub limit: u32,
    /// Output format (default: a table).
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<ListOutput>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `logs CONTROLLER JOB NUMBER [-f]`.
#[derive(Args, Debug, Clone)]
pub struct LogsArgs {
    /// The controller's name.
    pub controller: String,
    /// The job's full name with folders (`team/app`).
    pub job: String,
    /// The build number (`7` or `#7`).
    #[arg(value_parser = parse_build_number)]
    pub number: i64,
    /// Follow the log: print what is appended as it arrives, and end when the build's log is
    /// complete.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The log store the gateway writes (its --log-store): `file:///var/lib/varroa/logs` or
    /// `s3://bucket/prefix?endpoint=https://host:port&region=name` (S3 credentials from the AWS
    /// environment or --log-store-credentials-file).
    #[arg(long, env = "VARROA_LOG_STORE", value_name = "URL")]
    pub log_store: Option<String>,
    /// An S3 credentials file (`access_key_id=...`, `secret_access_key=...` lines).
    #[arg(long, env = "VARROA_LOG_STORE_CREDENTIALS_FILE", value_name = "PATH")]
    pub log_store_credentials_file: Option<PathBuf>,
    /// With -f: NATS, where the gateway announces each stored chunk, so that new lines show
    /// within a second (without it, the store is polled every second).
    #[arg(long, env = "VARROA_NATS_URL", value_name = "URL")]
    pub nats_url: Option<String>,
    /// The NATS credentials file (`user=...` and `password=...` lines).
    #[arg(long, env = "VARROA_NATS_CREDENTIALS_FILE", value_name = "PATH")]
    pub nats_credentials_file: Option<PathBuf>,
    /// The cluster the controller runs in (the gateway's --cluster); needed only when the store
    /// holds this build's log for several clusters.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
}

/// The highest build number (Jenkins numbers from 1; JSON numbers are exact up to 2^53).
pub const MAX_BUILD_NUMBER: i64 = 1 << 53;

/// `7` or `#7`: a build number from 1 to 2^53.
pub fn parse_build_number(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix('#').unwrap_or(s);
    match digits.parse::<i64>() {
        Ok(n) if (1..=MAX_BUILD_NUMBER).contains(&n) && digits.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!("{s:?} is not a build number: use the number Jenkins gave the build, e.g. 7 or #7")),
    }
}

/// The clap command.
pub fn command() -> clap::Command {
    Cli::command()
}

/// Parse the process's command line; usage errors print clap's message and exit with code 2.
pub fn parse() -> Cli {
    let matches = command().get_matches();
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.format(&mut command()).exit(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn kinds_have_kubectl_like_aliases() {
        for word in ["controllers", "controller", "ctrl", "jc"] {
            let cli = Cli::try_parse_from(["varroa", "get", word]).expect(word);
            assert!(matches!(cli.command, Command::Get(GetArgs { kind: Kind::Controllers, .. })), "{word}");
        }
        assert!(Cli::try_parse_from(["varroa", "get", "pods"]).is_err());
        assert!(Cli::try_parse_from(["varroa", "stop", "x", "--timeout", "1s"]).is_err(), "--timeout needs --wait");
    }

    #[test]
    fn build_record_commands_parse() {
        let cli = Cli::try_parse_from(["varroa", "builds", "ci", "-n", "team-a", "--job", "team/app", "--limit", "5"])
            .unwrap();
        let Command::Builds(b) = cli.command else { panic!("builds") };
        assert_eq!((b.controller.as_str(), b.job.as_deref(), b.limit), ("ci", Some("team/app"), 5));
        assert_eq!(cli.global.namespace.as_deref(), Some("team-a"));
        let Command::Builds(b) = Cli::try_parse_from(["varroa", "builds", "ci"]).unwrap().command else { panic!() };
        assert_eq!((b.limit, b.output), (50, None));
        let Command::Build(b) = Cli::try_parse_from(["varroa", "build", "ci", "app", "#7"]).unwrap().command else {
            panic!()
        };
        assert_eq!(b.number, 7);
        let Command::Activity(a) =
            Cli::try_parse_from(["varroa", "activity", "--since", "15m", "-o", "json"]).unwrap().command
        else {
            panic!()
        };
        assert_eq!((a.since, a.controller, a.output), (Some(Duration::from_secs(900)), None, Some(ListOutput::Json)));
        let Command::Logs(l) =
            Cli::try_parse_from(["varroa", "logs", "ci", "team/app", "#7", "-f", "-n", "team-a"]).unwrap().command
        else {
            panic!()
        };
        assert_eq!((l.controller.as_str(), l.job.as_str(), l.number, l.follow), ("ci", "team/app", 7, true));
        for bad in [
            &["varroa", "builds"][..],
            &["varroa", "builds", "ci", "--limit", "0"],
            &["varroa", "builds", "ci", "-o", "name"],
            &["varroa", "build", "ci", "app"],
            &["varroa", "build", "ci", "app", "0"],
            &["varroa", "build", "ci", "app", "7x"],
            &["varroa", "build", "ci", "app", "+7"],
            &["varroa", "build", "ci", "app", "7", "-o", "wide"],
            &["varroa", "activity", "--since", "soon"],
            &["varroa", "activity", "ci", "-A"],
            &["varroa", "logs", "ci", "app"],
            &["varroa", "logs", "ci", "app", "0"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
