//! The command line: flags and subcommands (clap).

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use clikit::cli::{CompletionArgs, GlobalArgs, namespace_help};
use clikit::timefmt;
use std::time::Duration;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  failure: the API server refused the request, or the controller does not exist
  2  usage error (unknown flag, missing argument)
  3  timeout: --wait gave up before the controller reached the state asked for";

/// `varroa`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "varroa",
    version,
    about = "Inspect, stop and start Varroa's Jenkins controllers",
    long_about = "Inspect, stop and start the Jenkins controllers Varroa manages (Controller, varroa.dev/v1alpha1). \
varroa talks to the Kubernetes API server only, like kubectl, with the same kubeconfig.",
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
}
