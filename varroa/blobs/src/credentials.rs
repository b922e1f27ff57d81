//! S3 credentials from a file (a mounted Secret), re-read when it changes, so a rotated key
//! needs no restart (as the NATS credential: varroa_link::nats).
//!
//! The file holds `key=value` lines; blank lines and `#` comments are ignored, the value is
//! everything after the first `=`, trimmed:
//!
//! ```text
//! access_key_id=AKIA...
//! secret_access_key=...
//! # optional
//! session_token=...
//! ```
//!
//! Unknown keys are refused (a typo would otherwise sign with half a credential). The file is
//! bounded at [`MAX_FILE_BYTES`]. It is read at start (an unusable file is an error then) and
//! again whenever its modification time or size changed since the last read; a file that became
//! unusable keeps the last good credential and logs a warning.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use object_store::aws::AwsCredential;

/// The largest credentials file read.
pub const MAX_FILE_BYTES: u64 = 16 * 1024;

/// An unusable credentials file.
#[derive(Debug, thiserror::Error)]
#[error("S3 credentials file {path}: {reason}")]
pub struct CredentialsError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong (never the secret).
    pub reason: String,
}

/// Parses the file format (see the module docs).
pub fn parse(text: &str) -> Result<AwsCredential, String> {
    let (mut key_id, mut secret, mut token) = (None, None, None);
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!("line {}: expected key=value (access_key_id=..., secret_access_key=...)", n + 1));
        };
        let v = v.trim().to_owned();
        match k.trim() {
            "access_key_id" => key_id = Some(v),
            "secret_access_key" => secret = Some(v),
            "session_token" => token = Some(v).filter(|t| !t.is_empty()),
            other => {
                return Err(format!(
                    "line {}: unknown key {other:?}; the keys are access_key_id, secret_access_key and session_token",
                    n + 1
                ));
            }
        }
    }
    match (key_id, secret) {
        (Some(key_id), Some(secret_key)) if !key_id.is_empty() && !secret_key.is_empty() => {
            Ok(AwsCredential { key_id, secret_key, token })
        }
        _ => Err("access_key_id= and secret_access_key= are both required (and not empty)".into()),
    }
}

type Stamp = (Option<SystemTime>, u64);

/// A credential provider reading [the file](self).
#[derive(Debug)]
pub struct FileCredentials {
    path: PathBuf,
    current: Mutex<(Stamp, Arc<AwsCredential>)>,
}

impl FileCredentials {
    /// Reads the file now; an unusable one is an error.
    pub fn new(path: PathBuf) -> Result<FileCredentials, CredentialsError> {
        let (stamp, cred) = read(&path)?;
        Ok(FileCredentials { path, current: Mutex::new((stamp, Arc::new(cred))) })
    }
}

fn stamp(path: &std::path::Path) -> std::io::Result<Stamp> {
    let m = std::fs::metadata(path)?;
    Ok((m.modified().ok(), m.len()))
}

fn read(path: &std::path::Path) -> Result<(Stamp, AwsCredential), CredentialsError> {
    use std::io::Read;
    let err = |reason: String| CredentialsError { path: path.to_owned(), reason };
    let s = stamp(path).map_err(|e| err(format!("cannot open: {e}")))?;
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(|e| err(format!("cannot open: {e}")))?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| err(format!("cannot read: {e}")))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(err(format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    parse(&text).map(|c| (s, c)).map_err(err)
}

#[async_trait::async_trait]
impl object_store::CredentialProvider for FileCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let now = stamp(&self.path).ok();
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if now.is_some_and(|s| s != current.0) {
            match read(&self.path) {
                Ok((s, c)) => *current = (s, Arc::new(c)),
                Err(e) => tracing::warn!(error = %e, "keeping the last good S3 credential"),
            }
        }
        Ok(current.1.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::CredentialProvider;

    #[test]
    fn the_file_format() {
        let c = parse("# s3\naccess_key_id = AKIA1\nsecret_access_key=a=b\n\n").unwrap();
        assert_eq!((c.key_id.as_str(), c.secret_key.as_str(), c.token), ("AKIA1", "a=b", None));
        let c = parse("access_key_id=k\nsecret_access_key=s\nsession_token=t\n").unwrap();
        assert_eq!(c.token.as_deref(), Some("t"));
        assert!(parse("access_key_id=k").unwrap_err().contains("both required"));
        assert!(parse("access_key_id=k\nsecret=s").unwrap_err().contains("unknown key \"secret\""));
        assert!(parse("access_key_id k").unwrap_err().contains("line 1"));
    }

    #[tokio::test]
    async fn a_rotated_file_is_read_again_and_a_broken_one_keeps_the_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s3");
        assert!(FileCredentials::new(path.clone()).unwrap_err().to_string().contains("cannot open"));
        std::fs::write(&path, "access_key_id=one\nsecret_access_key=s1\n").unwrap();
        let p = FileCredentials::new(path.clone()).unwrap();
        assert_eq!(p.get_credential().await.unwrap().key_id, "one");
        std::fs::write(&path, "access_key_id=second\nsecret_access_key=s2\n").unwrap();
        assert_eq!(p.get_credential().await.unwrap().key_id, "second", "a new size is seen at once");
        std::fs::write(&path, "garbage that is not a credential file\n").unwrap();
        assert_eq!(p.get_credential().await.unwrap().key_id, "second");
        let e = FileCredentials::new(path).unwrap_err().to_string();
        assert!(e.contains("line 1") && !e.contains("s2"), "{e}");
    }
}
