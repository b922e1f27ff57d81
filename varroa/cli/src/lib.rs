//! `varroa`: the command line of Varroa for platform operators. It lists, describes, stops and
//! starts Jenkins controllers (`Controller`, varroa.dev/v1alpha1), talking to the Kubernetes API
//! server with the kubeconfig kubectl uses; and it reads their builds and activity from the build
//! record store (the recorder's PostgreSQL database), directly until the BFF's API serves them.
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
//! | the build record store: connection, queries | store.rs |
//! | build records and activity, their JSON and durations | records.rs |
//! | names checked before a lookup | names.rs |
//! | builds, build | cmd/builds.rs |
//! | activity | cmd/activity.rs |
//! | schedules | cmd/schedules.rs |
//! | logs (the log store, through varroa-blobs) | cmd/logs.rs |
//! | artifacts (the blob store, through varroa-blobs) | cmd/artifacts.rs |
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
pub mod names;
pub mod records;
pub mod store;

use cli::{Cli, Command};
pub use error::{Error, Result};

/// Run a parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    // The commands that need no API server: completion, and the build record store's readers.
    match cli.command {
        Command::Completion(args) => {
            cmd::completion::run(args.shell);
            Ok(())
        }
        Command::Builds(args) => cmd::builds::list(&cli.global, args).await,
        Command::Build(args) => cmd::builds::show(&cli.global, args).await,
        Command::Activity(args) => cmd::activity::run(&cli.global, args).await,
        Command::Schedules(args) => cmd::schedules::run(&cli.global, args).await,
        Command::Logs(args) => cmd::logs::run(&cli.global, args).await,
        Command::Artifacts(args) => cmd::artifacts::run(&cli.global, args).await,
        command => {
            let t = client::connect(&cli.global).await?;
            match command {
                Command::Get(args) => cmd::get::run(&t, args).await,
                Command::Describe(args) => cmd::describe::run(&t, &args.name).await,
                Command::Stop(args) => cmd::power::run(&t, varroa_api::PowerState::Stopped, args).await,
                Command::Start(args) => cmd::power::run(&t, varroa_api::PowerState::Running, args).await,
                Command::Completion(_)
                | Command::Builds(_)
                | Command::Build(_)
                | Command::Activity(_)
                | Command::Schedules(_)
                | Command::Logs(_)
                | Command::Artifacts(_) => Ok(()),
            }
        }
    }
}

/// Write to stdout; a closed pipe is not an error worth a panic.
pub fn write_out(args: std::fmt::Arguments) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_fmt(args);
}
