//! `varroa-recorder`: see the library docs and docs/varroa/data-plane.md.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use varroa_recorder::db::DbSettings;

/// The Varroa recorder: build records, activity and the claim ledger in PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "varroa-recorder", version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct Database {
    /// The PostgreSQL database (`postgres://user@host:5432/dbname`; the password from
    /// --database-password-file).
    #[arg(long, env = "VARROA_DATABASE_URL")]
    database_url: String,
    /// A file holding the database password, re-read on every connection.
    #[arg(long, env = "VARROA_DATABASE_PASSWORD_FILE")]
    database_password_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Bring the schema up to date and exit (run also does this at start).
    Migrate {
        #[command(flatten)]
        database: Database,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let args = Args::parse();
    match args.command {
        Command::Migrate { database } => {
            let settings = DbSettings {
                url: database.database_url,
                password_file: database.database_password_file,
                application_name: "varroa-recorder migrate".into(),
            };
            let mut client = settings.connect().await.context("varroa-recorder migrate")?;
            let applied = varroa_recorder::migrate::migrate(&mut client).await.context("varroa-recorder migrate")?;
            if applied.is_empty() {
                println!("schema up to date (version {})", varroa_recorder::migrate::latest());
            } else {
                println!("applied migrations {applied:?}; schema at version {}", varroa_recorder::migrate::latest());
            }
        }
    }
    Ok(())
}
