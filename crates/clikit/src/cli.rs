//! Command-line pieces every CLI has: the kubectl-like global flags and `completion SHELL`.

use clap::Args;
use std::path::PathBuf;

/// Where to find the cluster and the namespace: `--kubeconfig`, `--context` and `-n`, read like
/// kubectl reads them (see [`crate::client::connect`]). Flatten it into the top-level parser;
/// the flags are global, so they go before or after the subcommand.
///
/// `-n`'s help says "the namespace to work in"; a CLI names what it holds with
/// `#[command(mut_arg("namespace", |a| a.help(clikit::cli::namespace_help("the previews"))))]`.
#[derive(Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// The kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster
    /// service account).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace to work in (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// `-n`'s help naming what the namespace holds: `namespace_help("the previews")` is "The
/// namespace of the previews (default: the context's namespace, else `default`)".
pub fn namespace_help(what: &str) -> String {
    format!("The namespace of {what} (default: the context's namespace, else `default`)")
}

/// `completion SHELL`.
#[derive(Args, Debug, Clone)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The completion script of `cmd` for `shell`, completing the program named `bin`.
pub fn completion_script(shell: clap_complete::Shell, cmd: &mut clap::Command, bin: &str) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, cmd, bin, &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser, Subcommand};

    #[derive(Parser, Debug)]
    #[command(name = "tool", mut_arg("namespace", |a| a.help(namespace_help("the widgets"))))]
    struct Cli {
        #[command(flatten)]
        global: GlobalArgs,
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Subcommand, Debug)]
    enum Command {
        Get,
        Completion(CompletionArgs),
    }

    #[test]
    fn the_flags_are_global_and_read_like_kubectl() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["tool", "--kubeconfig", "/k", "get", "--context", "c", "-n", "ns"]).unwrap();
        assert_eq!(cli.global.kubeconfig, Some(PathBuf::from("/k")));
        assert_eq!(cli.global.context.as_deref(), Some("c"));
        assert_eq!(cli.global.namespace.as_deref(), Some("ns"));
        assert!(matches!(cli.command, Command::Get));
    }

    #[test]
    fn the_namespace_help_names_what_it_holds() {
        let help = Cli::command().render_help().to_string();
        assert!(
            help.contains("The namespace of the widgets (default: the context's namespace, else `default`)"),
            "{help}"
        );
        let mut cmd = Cli::command();
        cmd.build();
        let get = cmd.find_subcommand_mut("get").unwrap().render_help().to_string();
        assert!(get.contains("The namespace of the widgets"), "a global flag keeps its help in subcommands:\n{get}");
    }

    #[test]
    fn completion_scripts_complete_the_program() {
        let cli = Cli::try_parse_from(["tool", "completion", "zsh"]).unwrap();
        let Command::Completion(args) = cli.command else { panic!("completion") };
        let script = completion_script(args.shell, &mut Cli::command(), "tool");
        assert!(script.starts_with("#compdef tool"), "{script}");
        assert!(Cli::try_parse_from(["tool", "completion", "tcsh"]).is_err());
    }
}
