//! Connecting to NATS the way every Varroa component does: the credential is read from a file on
//! every connection attempt (the first and each reconnect), so rotating the password in NATS and
//! in the mounted Secret needs no restart: the next reconnect (NATS closes connections whose
//! credential it no longer accepts on a config reload) picks up the new one.
//!
//! async-nats asks an auth callback for the credential on each attempt
//! (`ConnectOptions::with_auth_callback`); [`connect`] installs one that reads the file.
//!
//! The credentials file holds `key=value` lines (a Kubernetes Secret with a key `credentials`,
//! mounted as a file):
//!
//! ```text
//! # the NATS user of the gateway
//! user=varroa-gateway
//! password=...
//! ```
//!
//! Blank lines and `#` comments are ignored; the value is everything after the first `=`, with
//! surrounding whitespace trimmed. Unknown keys are refused (a typo would otherwise mean
//! connecting without a password). The file is bounded at [`MAX_CREDENTIALS_BYTES`].

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest credentials file read, in bytes.
pub const MAX_CREDENTIALS_BYTES: u64 = 16 * 1024;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// The credentials file cannot be read or parsed.
    #[error("NATS credentials file {path}: {reason}")]
    Credentials {
        /// The file.
        path: PathBuf,
        /// What is wrong (never the password).
        reason: String,
    },
    /// The connection could not be set up.
    #[error("cannot connect to NATS at {url}: {message}")]
    Connect {
        /// The server URL.
        url: String,
        /// async-nats' error.
        message: String,
    },
}

/// A NATS user and password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The NATS user.
    pub user: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).field("password", &"<redacted>").finish()
    }
}

impl Credentials {
    /// Parses the credentials file format (see the module docs).
    pub fn parse(text: &str) -> Result<Credentials, String> {
        let (mut user, mut password) = (None, None);
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("line {}: expected key=value (user=..., password=...)", n + 1));
            };
            let value = value.trim().to_owned();
            match key.trim() {
                "user" => user = Some(value),
                "password" => password = Some(value),
                other => return Err(format!("line {}: unknown key {other:?}; the keys are user and password", n + 1)),
            }
        }
        match (user, password) {
            (Some(user), Some(password)) if !user.is_empty() => Ok(Credentials { user, password }),
            (Some(user), None) if !user.is_empty() => Err("no password= line".into()),
            _ => Err("no user= line (or an empty user)".into()),
        }
    }

    /// Reads and parses the credentials file at `path`.
    pub fn read(path: &Path) -> Result<Credentials, NatsError> {
        use std::io::Read;
        let err = |reason: String| NatsError::Credentials { path: path.to_owned(), reason };
        let file = std::fs::File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
        let mut text = String::new();
        file.take(MAX_CREDENTIALS_BYTES + 1).read_to_string(&mut text).map_err(|e| err(format!("cannot read: {e}")))?;
        if text.len() as u64 > MAX_CREDENTIALS_BYTES {
            return Err(err(format!("larger than {MAX_CREDENTIALS_BYTES} bytes")));
        }
        Credentials::parse(&text).map_err(err)
    }
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectSettings {
    /// The server URL(s), comma-separated (`nats://host:4222`).
    pub url: String,
    /// The credentials file, re-read on every connection attempt; `None` connects without
    /// authentication.
    pub credentials_file: Option<PathBuf>,
    /// The client name NATS shows in its connection list (`varroa-gateway/<replica>`).
    pub name: String,
    /// The longest wait between reconnect attempts (attempts back off from 100 ms up to this).
    pub max_reconnect_delay: Duration,
}

/// Connects, retrying forever in the background: the first connection and every reconnect
/// read [`ConnectSettings::credentials_file`] anew. Returns at once with a client that buffers
/// what it is asked to send until the server answers (`retry_on_initial_connect`), so a
/// component can start before NATS.
pub async fn connect(settings: &ConnectSettings) -> Result<async_nats::Client, NatsError> {
    connect_watching(settings).await.map(|(client, _)| client)
}

/// [`connect`], also returning a channel that counts the connections made (1 after the first,
/// +1 at each reconnect). A JetStream watch (a KV `watch`, an ordered consumer) may go quiet
/// after the server restarts and only notice after its idle heartbeat (seconds); a reader that
/// re-opens its watch when this changes resumes at once.
pub async fn connect_watching(
    settings: &ConnectSettings,
) -> Result<(async_nats::Client, tokio::sync::watch::Receiver<u64>), NatsError> {
    let (connects_tx, connects_rx) = tokio::sync::watch::channel(0u64);
    let mut options = match &settings.credentials_file {
        Some(path) => {
            let path = path.clone();
            async_nats::ConnectOptions::with_auth_callback(move |_nonce| {
                let path = path.clone();
                async move {
                    let creds = Credentials::read(&path).map_err(|e| {
                        tracing::warn!(error = %e, "NATS credentials unreadable; retrying at the next reconnect");
                        async_nats::AuthError::new(e.to_string())
                    })?;
                    let mut auth = async_nats::Auth::new();
                    auth.username = Some(creds.user);
                    auth.password = Some(creds.password);
                    Ok(auth)
                }
            })
        }
        None => async_nats::ConnectOptions::new(),
    };
    let max = settings.max_reconnect_delay.max(Duration::from_millis(100));
    options = options
        .name(&settings.name)
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(5))
        .request_timeout(Some(Duration::from_secs(5)))
        .reconnect_delay_callback(move |attempts| {
            let exp = 100u64.saturating_mul(1u64 << attempts.min(10) as u32);
            Duration::from_millis(exp).min(max)
        })
        .event_callback(move |event| {
            let connects = connects_tx.clone();
            async move {
                match event {
                    async_nats::Event::Connected => {
                        tracing::info!("NATS connected");
                        connects.send_modify(|n| *n += 1);
                    }
                    async_nats::Event::Disconnected => tracing::warn!("NATS disconnected; reconnecting"),
                    other => tracing::debug!(event = %other, "NATS event"),
                }
            }
        });
    let client = options
        .connect(settings.url.as_str())
        .await
        .map_err(|e| NatsError::Connect { url: settings.url.clone(), message: e.to_string() })?;
    Ok((client, connects_rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_file_format() {
        let c = Credentials::parse("# gw\nuser = varroa-gateway\npassword=a=b c\n\n").unwrap();
        assert_eq!(c.user, "varroa-gateway");
        assert_eq!(c.password, "a=b c");
        assert!(!format!("{c:?}").contains("a=b"), "Debug hides the password");
        assert!(Credentials::parse("user=u").unwrap_err().contains("password"));
        assert!(Credentials::parse("password=p").unwrap_err().contains("user"));
        assert!(Credentials::parse("usr=u\npassword=p").unwrap_err().contains("unknown key \"usr\""));
        assert!(Credentials::parse("user u").unwrap_err().contains("line 1"));
    }

    #[test]
    fn reading_names_the_file_and_never_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("creds");
        let e = Credentials::read(&path).unwrap_err().to_string();
        assert!(e.contains("creds") && e.contains("cannot open"), "{e}");
        std::fs::write(&path, "user=u\npassword=secret\nbogus\n").unwrap();
        let e = Credentials::read(&path).unwrap_err().to_string();
        assert!(!e.contains("secret") && e.contains("line 3"), "{e}");
    }
}
