//! `varroa`: the command line of Varroa for platform operators. It lists, describes, stops and
//! starts Jenkins controllers (`Controller`, varroa.dev/v1alpha1), talking to the Kubernetes API
//! server only, with the kubeconfig kubectl uses.
//!
//! | Command | Module |
//! |---|---|
//! | flags | cli.rs |
//! | kubeconfig, namespace (through [`clikit::client`]) | client.rs |
//! | errors and exit codes | error.rs |
//! | reading a Controller, its attention and cells | controller.rs |
//! | get | cmd/get.rs |
//! | describe | cmd/describe.rs |
//! | stop, start (and --wait) | cmd/power.rs |
//! | completion | cmd/completion.rs |

/// Print to stdout like `print!`, without panicking when the reader went away
/// (`varroa get controllers | head -1`).
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
pub mod controller;
pub mod error;

use cli::{Cli, Command};
pub use error::{Error, Result};

/// Run a parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    if let Command::Completion(args) = &cli.command {
        cmd::completion::run(args.shell);
        return Ok(());
    }
    let t = client::connect(&cli.global).await?;
    match cli.command {
        Command::Get(args) => cmd::get::run(&t, args).await,
        Command::Describe(args) => cmd::describe::run(&t, &args.name).await,
        Command::Stop(args) => cmd::power::run(&t, varroa_api::PowerState::Stopped, args).await,
        Command::Start(args) => cmd::power::run(&t, varroa_api::PowerState::Running, args).await,
        Command::Completion(_) => Ok(()),
    }
}

/// Write to stdout; a closed pipe is not an error worth a panic.
pub fn write_out(args: std::fmt::Arguments) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_fmt(args);
}
