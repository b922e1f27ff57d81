//! Archived artifacts: a finished build's files go straight from the plugin to the blob store,
//! with one presigned `PUT` URL per file that the gateway (which holds the store's credentials)
//! signs under the writing cell's own prefix (docs/varroa/plugin-protocol.md, "Archived
//! artifacts").
//!
//! - [`ArtifactRequest`]: what the plugin posts to the mite
//!   (`POST /v1/artifacts/{job}/{build}`), JSON: the relative paths and sizes of the files.
//!   [`parse_request`] parses and validates it, naming the field that is wrong; the mite checks
//!   it before it forwards it, and the gateway checks every file again with [`check_files`].
//! - On the gRPC stream: `ArtifactRequest` / `ArtifactAnswer` of
//!   `proto/varroa/link/v1/link.proto`.
//! - [`Answer`]: what the mite answers the plugin: one upload per file, and when the URLs expire.
//!
//! Nothing in a request names where the files go: the gateway places them under
//! `artifacts/<cluster>/<namespace>/<controller>/cell-<n>/<job>/<build>/`, the namespace and
//! controller of the mite's certificate and the cell of its stream's hello. A path is relative
//! and plain ([`path_problem`]): no `..`, `.` or empty segments, no leading `/`, no backslash,
//! no control characters, so that a file cannot leave its build's prefix.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The request version this code reads and writes (`v`).
pub const VERSION: u32 = 1;
/// The most files in one request (a build with more asks again for the rest).
pub const MAX_FILES: usize = 1_000;
/// The largest file: S3's limit for one `PUT` (5 GiB). Larger files stay with Jenkins' own
/// archiving.
pub const MAX_FILE_BYTES: u64 = 5 << 30;
/// The longest path of a file, in bytes (UTF-8).
pub const MAX_PATH_BYTES: usize = 512;
/// The largest request body, as JSON bytes.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// How long a presigned URL is valid: 15 minutes from when the gateway signed it.
pub const URL_EXPIRY: Duration = Duration::from_secs(15 * 60);
/// The longest object key S3 accepts, in bytes (the store's prefix and the cell's prefix
/// included).
pub const MAX_KEY_BYTES: usize = 1024;

/// One file of a build to archive, as the plugin names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactFile {
    /// The path relative to the build's artifacts (`target/app.jar`), `/`-separated.
    pub path: String,
    /// Its size in bytes, 0 to [`MAX_FILE_BYTES`].
    pub size: u64,
}

/// The plugin's request for upload URLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactRequest {
    /// The version, [`VERSION`].
    pub v: u32,
    /// The files, 1 to [`MAX_FILES`], each path once.
    pub files: Vec<ArtifactFile>,
}

/// Why a request is refused as malformed: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ArtifactError {
    /// The field (`v`, `files`, `files[3].path`, `files[3].size`, `job`, `build`, or `request`).
    pub field: String,
    /// What is wrong, and the fix.
    pub reason: String,
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> ArtifactError {
    ArtifactError { field: field.into(), reason: reason.into() }
}

/// What is wrong with an artifact's path, if anything.
pub fn path_problem(path: &str) -> Option<String> {
    if path.is_empty() {
        return Some("must not be empty".into());
    }
    if path.len() > MAX_PATH_BYTES {
        return Some(format!("longer than {MAX_PATH_BYTES} bytes"));
    }
    if path.chars().any(char::is_control) {
        return Some("must not contain control characters".into());
    }
    if path.starts_with('/') {
        return Some("must be relative to the build's artifacts (no leading '/')".into());
    }
    if path.contains('\\') {
        return Some("must separate folders with '/', not '\\'".into());
    }
    for segment in path.split('/') {
        match segment {
            "" => return Some("must not have empty segments ('//' or a trailing '/')".into()),
            "." | ".." => {
                return Some(format!("must not have a {segment:?} segment: a file stays under its build"));
            }
            _ => {}
        }
    }
    None
}

/// Checks a request's files (the rules every hop applies again): 1 to [`MAX_FILES`], each path
/// plain ([`path_problem`]) and named once, each size at most [`MAX_FILE_BYTES`].
pub fn check_files<'a>(files: impl ExactSizeIterator<Item = (&'a str, u64)>) -> Result<(), ArtifactError> {
    let n = files.len();
    if n == 0 {
        return Err(err("files", "must name at least one file"));
    }
    if n > MAX_FILES {
        return Err(err("files", format!("{n} files, at most {MAX_FILES} in one request: ask again for the rest")));
    }
    let mut seen = std::collections::HashSet::with_capacity(n);
    for (i, (path, size)) in files.enumerate() {
        if let Some(why) = path_problem(path) {
            return Err(err(format!("files[{i}].path"), format!("{:?} {why}", crate::kv::bounded(path, 128))));
        }
        if size > MAX_FILE_BYTES {
            return Err(err(
                format!("files[{i}].size"),
                format!(
                    "{size} bytes, at most {MAX_FILE_BYTES} (5 GiB): archive larger files with Jenkins' own archiving"
                ),
            ));
        }
        if !seen.insert(path) {
            return Err(err(format!("files[{i}].path"), format!("{:?} is named twice", crate::kv::bounded(path, 128))));
        }
    }
    Ok(())
}

impl ArtifactRequest {
    /// Checks every field against docs/varroa/plugin-protocol.md.
    pub fn validate(&self) -> Result<(), ArtifactError> {
        if self.v != VERSION {
            return Err(err("v", format!("version {} is not known; this side reads version {VERSION}", self.v)));
        }
        check_files(self.files.iter().map(|f| (f.path.as_str(), f.size)))
    }
}

/// Parses and validates a request from the plugin's JSON body.
pub fn parse_request(bytes: &[u8]) -> Result<ArtifactRequest, ArtifactError> {
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(err("request", format!("larger than {MAX_REQUEST_BYTES} bytes: ask for fewer files at once")));
    }
    let raw: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| err("request", format!("not JSON: {e}")))?;
    let Some(obj) = raw.as_object() else {
        return Err(err("request", "must be a JSON object {\"v\": 1, \"files\": [{\"path\", \"size\"}]}"));
    };
    for field in ["v", "files"] {
        if !obj.contains_key(field) {
            return Err(err(field, "missing"));
        }
    }
    let Some(v) = obj.get("v").and_then(serde_json::Value::as_u64) else {
        return Err(err("v", "must be the number 1"));
    };
    if v != u64::from(VERSION) {
        return Err(err("v", format!("version {v} is not known; this side reads version {VERSION}")));
    }
    let Some(files) = obj.get("files").and_then(serde_json::Value::as_array) else {
        return Err(err("files", "must be an array of {\"path\", \"size\"}"));
    };
    if files.len() > MAX_FILES {
        return Err(err(
            "files",
            format!("{} files, at most {MAX_FILES} in one request: ask again for the rest", files.len()),
        ));
    }
    let mut out = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let Some(o) = f.as_object() else {
            return Err(err(format!("files[{i}]"), "must be an object {\"path\", \"size\"}"));
        };
        let Some(path) = o.get("path").and_then(serde_json::Value::as_str) else {
            return Err(err(format!("files[{i}].path"), "missing, or not a string"));
        };
        let Some(size) = o.get("size").and_then(serde_json::Value::as_u64) else {
            return Err(err(format!("files[{i}].size"), "missing, or not a whole number of bytes"));
        };
        out.push(ArtifactFile { path: path.to_owned(), size });
    }
    let request = ArtifactRequest { v: VERSION, files: out };
    request.validate()?;
    Ok(request)
}

/// One file's upload, as the mite answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upload {
    /// The file's path, as asked.
    pub path: String,
    /// Send the file's bytes with `PUT` to this URL (no other header is needed).
    pub url: String,
}

/// What the mite answers a valid request with (`200`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// One upload per file, in the request's order.
    pub uploads: Vec<Upload>,
    /// When the URLs expire (RFC 3339): a file not sent by then needs a new URL.
    pub expires: String,
}

/// `expires_at_unix_ms` of an `ArtifactAnswer` as [`Answer::expires`] (RFC 3339, UTC).
pub fn expires_text(unix_ms: i64) -> String {
    jiff::Timestamp::from_millisecond(unix_ms).map(|t| t.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_paths_are_refused_naming_the_file() {
        for (bad, why) in [
            ("", "empty"),
            ("/etc/passwd", "relative"),
            ("../cell-1/x", "\"..\" segment"),
            ("a/../../b", "\"..\" segment"),
            ("a/./b", "\".\" segment"),
            ("a//b", "empty segments"),
            ("a/", "empty segments"),
            ("a\\..\\b", "'/'"),
            ("a\nb", "control"),
            ("a\u{7f}", "control"),
        ] {
            assert!(path_problem(bad).is_some_and(|w| w.contains(why)), "{bad:?}: {:?}", path_problem(bad));
        }
        assert!(path_problem(&"a".repeat(513)).unwrap().contains("512 bytes"));
        for good in ["app.jar", "target/app 1.0.jar", "reports/a#b~c.html", "ünï/cödé.txt", "..x/.hidden"] {
            assert_eq!(path_problem(good), None, "{good}");
        }
    }

    #[test]
    fn requests_parse_or_name_the_field() {
        let ok = parse_request(br#"{"v":1,"files":[{"path":"a.txt","size":3},{"path":"b/c","size":0}]}"#).unwrap();
        assert_eq!(ok.files[1], ArtifactFile { path: "b/c".into(), size: 0 });
        for (body, field) in [
            (r#"{"v":2,"files":[]}"#.to_owned(), "v"),
            (r#"{"files":[]}"#.to_owned(), "v"),
            (r#"{"v":1,"files":[]}"#.to_owned(), "files"),
            (r#"{"v":1,"files":[{"path":"../x","size":1}]}"#.to_owned(), "files[0].path"),
            (r#"{"v":1,"files":[{"path":"a","size":1},{"path":"a","size":2}]}"#.to_owned(), "files[1].path"),
            (r#"{"v":1,"files":[{"path":"a","size":-1}]}"#.to_owned(), "files[0].size"),
            (format!(r#"{{"v":1,"files":[{{"path":"a","size":{}}}]}}"#, MAX_FILE_BYTES + 1), "files[0].size"),
            (
                format!(
                    r#"{{"v":1,"files":[{}]}}"#,
                    (0..=MAX_FILES).map(|i| format!(r#"{{"path":"f{i}","size":1}}"#)).collect::<Vec<_>>().join(",")
                ),
                "files",
            ),
            ("[1]".to_owned(), "request"),
        ] {
            let e = parse_request(body.as_bytes()).unwrap_err();
            assert_eq!(e.field, field, "{body:.80}: {e}");
        }
    }
}
