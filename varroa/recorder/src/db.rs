//! Connecting to PostgreSQL: `--database-url` (`postgres://user@host:port/db`, or libpq's
//! `key=value` form) and an optional password file, re-read on every connection (a rotated
//! password needs no restart).

use std::path::{Path, PathBuf};

/// The largest password file read.
const MAX_PASSWORD_BYTES: u64 = 4096;

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct DbSettings {
    /// The URL or libpq connection string (without the password, which comes from the file).
    pub url: String,
    /// A file holding the password (a mounted Secret), re-read on every connection.
    pub password_file: Option<PathBuf>,
    /// The application name PostgreSQL shows in `pg_stat_activity`.
    pub application_name: String,
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL does not parse.
    #[error("invalid --database-url: {0}; fix: postgres://user@host:5432/dbname")]
    Url(String),
    /// The password file cannot be read.
    #[error("cannot read the database password file {path}: {reason}")]
    Password {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// PostgreSQL did not answer or refused.
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(#[source] tokio_postgres::Error),
}

fn read_password(path: &Path) -> Result<String, DbError> {
    use std::io::Read;
    let err = |reason: String| DbError::Password { path: path.to_owned(), reason };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_PASSWORD_BYTES + 1).read_to_string(&mut text).map_err(|e| err(e.to_string()))?;
    if text.len() as u64 > MAX_PASSWORD_BYTES {
        return Err(err(format!("larger than {MAX_PASSWORD_BYTES} bytes")));
    }
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

impl DbSettings {
    /// Checks the URL (at start-up, so a typo stops the process with a clear message).
    pub fn config(&self) -> Result<tokio_postgres::Config, DbError> {
        let mut config: tokio_postgres::Config =
            self.url.parse().map_err(|e: tokio_postgres::Error| DbError::Url(e.to_string()))?;
        config.application_name(&self.application_name);
        config.connect_timeout(std::time::Duration::from_secs(10));
        // A server that vanished without closing the connection is noticed within a minute.
        config.keepalives_idle(std::time::Duration::from_secs(30));
        if let Some(path) = &self.password_file {
            config.password(read_password(path)?);
        }
        Ok(config)
    }

    /// Connects (without TLS: see docs/varroa/data-plane.md) and drives the connection in a task.
    pub async fn connect(&self) -> Result<tokio_postgres::Client, DbError> {
        let config = self.config()?;
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.map_err(DbError::Connect)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "PostgreSQL connection ended");
            }
        });
        Ok(client)
    }
}
