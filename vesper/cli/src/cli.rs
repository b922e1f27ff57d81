//! The command line: flags and subcommands (clap), and how the program names itself (`vesperctl`,
//! or `kubectl vesper` when installed as the kubectl plugin `kubectl-vesper`).

use clap::{ArgGroup, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use clikit::cli::{CompletionArgs, GlobalArgs, namespace_help};
use clikit::timefmt;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;
use vesper_api::EnvVar;

/// The file name that makes this binary a kubectl plugin (`kubectl vesper ...`).
pub const PLUGIN_NAME: &str = "kubectl-vesper";

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  failure: the API server refused the request, the preview failed (its reason and message
     are printed), or it does not exist
  2  usage error (unknown flag, missing argument)
  3  timeout: --wait or `wait` gave up before the preview reached the state asked for";

#[derive(Parser, Debug)]
#[command(
    name = "vesperctl",
    version,
    about = "Create, inspect, extend and delete Vesper preview environments",
    long_about = "Create, inspect, extend and delete Vesper preview environments (PreviewEnvironment, \
vesper.eventide.dev/v1alpha1). vesperctl talks to the Kubernetes API server only, like kubectl, with the \
same kubeconfig; installed as `kubectl-vesper` on PATH it also runs as `kubectl vesper`.",
    after_help = EXIT_CODES,
    propagate_version = true,
    mut_arg("namespace", |a| a.help(namespace_help("the previews")))
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a preview. Fails if it exists: `apply` creates or updates.
    #[command(mut_arg("image", |a| a.required(true)), after_help = EXIT_CODES)]
    Create(SpecArgs),
    /// Create a preview, or change the fields given of an existing one (server-side apply,
    /// field manager `vesperctl`): what CI calls on every push, e.g. with just `--image`.
    #[command(after_help = EXIT_CODES)]
    Apply(SpecArgs),
    /// Show one preview, or all of the namespace: phase, URL, expiry, age.
    Get(GetArgs),
    /// List the previews of the namespace (or of all namespaces with -A).
    #[command(visible_alias = "ls")]
    List(ListArgs),
    /// Show a preview in detail: spec, status, conditions, events, and the objects running it.
    Describe(NameArg),
    /// Move a preview's expiry: a longer TTL, counted from its creation (at most 7 days).
    #[command(group(ArgGroup::new("how").required(true).args(["by", "ttl"])))]
    Extend(ExtendArgs),
    /// Delete a preview (the operator deletes its namespace first).
    #[command(visible_alias = "rm", after_help = EXIT_CODES)]
    Delete(DeleteArgs),
    /// Wait until a preview is ready, or deleted.
    #[command(after_help = EXIT_CODES)]
    Wait(WaitArgs),
    /// Print a preview's URL, and only it (exit 1 if it has none yet).
    Url(NameArg),
    /// Print a shell completion script: `source <(vesperctl completion bash)`.
    Completion(CompletionArgs),
}

#[derive(Args, Debug, Clone)]
pub struct NameArg {
    /// The preview's name.
    pub name: String,
}

/// The fields of a preview, as flags. In `apply`, only the flags given are changed.
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// The preview's name (a DNS label: lower-case letters, digits and `-`).
    pub name: String,
    /// The image to run, pinned by a tag or a digest (`registry.example.com/app:pr-42`).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// How long the preview lives after its creation: 90m, 24h, 7d (default 24h, at most 7d).
    #[arg(long, value_name = "TTL")]
    pub ttl: Option<String>,
    /// Number of pods, 0 to 5 (default 1).
    #[arg(long, value_name = "N")]
    pub replicas: Option<i32>,
    /// The port the container listens on (default 8080).
    #[arg(long, value_name = "PORT")]
    pub port: Option<i32>,
    /// An environment variable of the container; repeat for more. In `apply`, the list given
    /// replaces the preview's whole list.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<EnvVar>,
    /// An argument of the container's entrypoint; repeat for more. In `apply`, the list given
    /// replaces the preview's whole list.
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    pub args: Vec<String>,
    /// The HTTP path probed to decide the preview is ready, e.g. /healthz (default: a TCP
    /// connection to the port).
    #[arg(long, value_name = "PATH")]
    pub readiness_path: Option<String>,
    #[command(flatten)]
    pub wait: WaitFlags,
}

/// `--wait [--timeout D]`.
#[derive(Args, Debug, Clone)]
pub struct WaitFlags {
    /// Wait until the preview is ready (create, apply) or gone (delete).
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits before giving up with exit code 3 (e.g. 90s, 5m, 1h).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration, requires = "wait")]
    pub timeout: Duration,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The table, with the image, ready pods, TTL and the namespace the preview runs in.
    Wide,
    Json,
    Yaml,
    /// `previewenvironment.vesper.eventide.dev/NAME`, one per line.
    Name,
}

#[derive(Args, Debug, Clone)]
pub struct GetArgs {
    /// The preview's name; without it, every preview of the namespace.
    pub name: Option<String>,
    /// Every namespace (not with a name).
    #[arg(short = 'A', long, conflicts_with = "name")]
    pub all_namespaces: bool,
    /// Only previews with these labels (`key=value,...`).
    #[arg(short = 'l', long, value_name = "SELECTOR", conflicts_with = "name")]
    pub selector: Option<String>,
    /// Output format (default: a table).
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
}

#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only previews with these labels (`key=value,...`).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Output format (default: a table).
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
}

#[derive(Args, Debug, Clone)]
pub struct ExtendArgs {
    /// The preview's name.
    pub name: String,
    /// Move the expiry later by this much (whole minutes: 30m, 2h, 1d, 1h30m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub by: Option<Duration>,
    /// The new TTL, counted from the preview's creation (90m, 36h, 7d).
    #[arg(long, value_name = "TTL", value_parser = parse_duration)]
    pub ttl: Option<Duration>,
}

#[derive(Args, Debug, Clone)]
pub struct DeleteArgs {
    /// The preview's name.
    pub name: String,
    #[command(flatten)]
    pub wait: WaitFlags,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// Phase Ready, for the preview's current spec (exit 1 if it fails or expires).
    Ready,
    /// Gone from the API server (its namespace deleted first).
    Deleted,
}

#[derive(Args, Debug, Clone)]
pub struct WaitArgs {
    /// The preview's name.
    pub name: String,
    /// The state to wait for.
    #[arg(long = "for", value_enum, value_name = "STATE")]
    pub for_: WaitFor,
    /// How long to wait before giving up with exit code 3 (e.g. 90s, 5m, 1h).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
}

fn parse_env(s: &str) -> Result<EnvVar, String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok(EnvVar { name: name.to_string(), value: value.to_string() }),
        _ => Err(format!("{s:?} is not KEY=VALUE (e.g. --env LOG_LEVEL=debug)")),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    timefmt::parse_duration(s)
}

/// True when the program was started under the kubectl plugin name.
pub fn is_plugin(argv0: Option<&OsString>) -> bool {
    argv0
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .is_some_and(|f| f.ends_with(PLUGIN_NAME))
}

/// The clap command, named after how it was started (`kubectl vesper` as a plugin).
pub fn command(plugin: bool) -> clap::Command {
    let cmd = Cli::command();
    if plugin { cmd.name(PLUGIN_NAME).bin_name("kubectl vesper").display_name("kubectl vesper") } else { cmd }
}

/// Parse the command line; usage errors print clap's message and exit with code 2.
pub fn parse_from(args: Vec<OsString>) -> (Cli, bool) {
    let plugin = is_plugin(args.first());
    let matches = command(plugin).get_matches_from(args);
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => (cli, plugin),
        Err(e) => e.format(&mut command(plugin)).exit(),
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
    fn knows_the_plugin_name() {
        assert!(is_plugin(Some(&OsString::from("/tmp/x/kubectl-vesper"))));
        assert!(is_plugin(Some(&OsString::from("kubectl-vesper"))));
        assert!(!is_plugin(Some(&OsString::from("/usr/bin/vesperctl"))));
        assert!(!is_plugin(None));
    }

    #[test]
    fn parses_env_pairs() {
        assert_eq!(parse_env("A=b=c").unwrap(), EnvVar { name: "A".into(), value: "b=c".into() });
        assert_eq!(parse_env("A=").unwrap().value, "");
        assert!(parse_env("A").is_err());
        assert!(parse_env("=x").is_err());
    }
}
