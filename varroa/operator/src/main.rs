//! varroa-operator: provisions Jenkins controllers from `varroa.dev/v1alpha1` resources.
//!
//! This build carries the configuration side: `render` (a controller's resolved configuration
//! without a cluster) and `crds` (the CRDs to install). Provisioning on a cluster is the next
//! part of the work (see docs/varroa/README.md).

mod render_cmd;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "varroa-operator", version, about = "Provisions Jenkins controllers from Controller resources")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Resolve and render controllers from YAML files, without a cluster: the settings with the
    /// layer each came from, the plugins, the JCasC values with the input that set each, and
    /// the rendered jenkins.yaml, plugins.txt and plugins-sha256.txt. Exit 1 when a controller
    /// is blocked.
    Render(render_cmd::RenderArgs),
    /// Print the CustomResourceDefinitions of varroa.dev/v1alpha1 (as deploy/varroa/crds.yaml).
    Crds,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Render(args) => match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(rt) => rt.block_on(render_cmd::run(args)),
            Err(e) => {
                eprintln!("error: starting the runtime: {e}");
                1
            }
        },
        Command::Crds => {
            print!("{}", varroa_api::crd_yaml());
            0
        }
    };
    std::process::exit(code);
}
