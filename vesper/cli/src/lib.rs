//! vesperctl: the command line of Vesper. It talks to the Kubernetes API server only (never to
//! the operator), with the kubeconfig kubectl uses, and works as the kubectl plugin
//! `kubectl-vesper`.
//!
//! | Command | Module |
//! |---|---|
//! | flags, plugin name | cli.rs |
//! | kubeconfig, namespace (through [`clikit::client`]) | client.rs |
//! | errors and exit codes | error.rs |
//! | create, apply | cmd/create.rs |
//! | get, list | cmd/get.rs |
//! | describe | cmd/describe.rs |
//! | extend | cmd/extend.rs |
//! | delete | cmd/delete.rs |
//! | wait (and every --wait) | cmd/wait.rs |
//! | url | cmd/url.rs |
//! | completion | cmd/completion.rs |

/// Print to stdout like `print!`, without panicking when the reader went away
/// (`vesperctl list | head -1`).
macro_rules! out {
    ($($t:tt)*) => { $crate::write_out(format_args!($($t)*)) };
}

/// [`out!`] with a newline.
macro_rules! outln {
    ($($t:tt)*) => { $crate::write_out(format_args!("{}\n", format_args!($($t)*))) };
}

pub mod cli;
pub mod client;
pub mod cmd;
pub mod error;
pub mod preview;

use cli::{Cli, Command};
pub use error::{Error, Result};

/// Run a parsed command line. `plugin`: started as `kubectl-vesper`.
pub async fn run(cli: Cli, plugin: bool) -> Result<()> {
    if let Command::Completion(args) = &cli.command {
        cmd::completion::run(args.shell, plugin);
        return Ok(());
    }
    let t = client::connect(&cli.global).await?;
    match cli.command {
        Command::Create(args) => cmd::create::create(&t, args).await,
        Command::Apply(args) => cmd::create::apply(&t, args).await,
        Command::Get(args) => cmd::get::get(&t, args).await,
        Command::List(args) => cmd::get::list(&t, args).await,
        Command::Describe(args) => cmd::describe::run(&t, &args.name).await,
        Command::Extend(args) => cmd::extend::run(&t, args).await,
        Command::Delete(args) => cmd::delete::run(&t, args).await,
        Command::Wait(args) => cmd::wait::run(&t, args).await,
        Command::Url(args) => cmd::url::run(&t, &args.name).await,
        Command::Completion(_) => Ok(()),
    }
}

/// Write to stdout; a closed pipe is not an error worth a panic.
pub fn write_out(args: std::fmt::Arguments) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_fmt(args);
}
