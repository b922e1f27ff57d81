//! The file set of an artifact: its digest, path rules and tar unpacking.

use std::collections::BTreeMap;
use std::io::Read;

use sha2::{Digest as _, Sha256};

use crate::SourceError;

/// The canonical digest of a file set, as stored in [`crate::Artifact::digest`].
///
/// `"sha256:<hex>"` of, for each file in path order (byte-wise, as the `BTreeMap` iterates): the
/// path's length in bytes as a big-endian `u64`, the path's UTF-8 bytes, the content's length as a
/// big-endian `u64`, the content. The same files give the same digest whether they came from Git
/// or OCI; the lengths make the encoding unambiguous.
pub fn files_digest(files: &BTreeMap<String, Vec<u8>>) -> String {
    let mut hasher = Sha256::new();
    for (path, content) in files {
        hasher.update((path.len() as u64).to_be_bytes());
        hasher.update(path.as_bytes());
        hasher.update((content.len() as u64).to_be_bytes());
        hasher.update(content);
    }
    format!("sha256:{}", hex(&hasher.finalize()))
}

/// `"sha256:<hex>"` of `bytes`.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// An error and its sources, on one line, without repeating a cause its parent already shows.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.replace('\n', "; ")
}

/// Normalizes a relative, `/`-separated path: drops empty and `.` components; refuses absolute
/// paths and `..`. An empty result is `Ok("")` (the root).
pub(crate) fn normalize_relative(path: &str) -> Result<String, String> {
    if path.starts_with('/') {
        return Err("absolute paths are not allowed".to_string());
    }
    let mut parts = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => return Err("`..` components are not allowed".to_string()),
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

/// Whether a symlink at `link_path` (relative to the input's root, `/`-separated) pointing at
/// `target` resolves outside the root. `relative_to_root` is for tar hard links, whose target
/// is relative to the archive root rather than to the link's directory.
pub(crate) fn link_escapes(link_path: &str, target: &str, relative_to_root: bool) -> bool {
    if target.starts_with('/') {
        return true;
    }
    let mut stack: Vec<&str> = if relative_to_root {
        Vec::new()
    } else {
        let mut parts: Vec<&str> = link_path.split('/').filter(|c| !c.is_empty()).collect();
        parts.pop();
        parts
    };
    for component in target.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                if stack.pop().is_none() {
                    return true;
                }
            }
            c => stack.push(c),
        }
    }
    false
}

/// Collects files for one artifact while enforcing the byte limit and unique paths.
pub(crate) struct FileSet<'a> {
    pub(crate) input: &'a str,
    pub(crate) limit: u64,
    pub(crate) total: u64,
    pub(crate) files: BTreeMap<String, Vec<u8>>,
}

impl<'a> FileSet<'a> {
    pub(crate) fn new(input: &'a str, limit: u64) -> Self {
        FileSet { input, limit, total: 0, files: BTreeMap::new() }
    }

    /// Reserves `size` bytes of the budget before reading content, so nothing over the limit is
    /// loaded.
    pub(crate) fn reserve(&mut self, path: &str, size: u64) -> Result<(), SourceError> {
        let total = self.total.saturating_add(size);
        if total > self.limit {
            return Err(SourceError::TooLarge {
                input: self.input.to_string(),
                limit: self.limit,
                detail: format!("\"{path}\" brings the files to at least {total} bytes"),
            });
        }
        self.total = total;
        Ok(())
    }

    /// Adds a file whose size was already reserved; a path may appear only once.
    pub(crate) fn insert(&mut self, path: String, content: Vec<u8>) -> Result<(), SourceError> {
        if self.files.contains_key(&path) {
            return Err(SourceError::Unsupported {
                input: self.input.to_string(),
                reason: format!(
                    "the file \"{path}\" appears twice (in two layers, or twice in an archive); \
                     push each file once"
                ),
            });
        }
        self.files.insert(path, content);
        Ok(())
    }
}

/// A reader that fails once more than `remaining` bytes were asked of it, and says so in `hit`.
struct Limited<R> {
    inner: R,
    remaining: u64,
    hit: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        match self.remaining.checked_sub(n as u64) {
            Some(rest) => {
                self.remaining = rest;
                Ok(n)
            }
            None => {
                self.hit.set(true);
                Err(std::io::Error::other("archive size limit reached"))
            }
        }
    }
}

/// Unpacks a tar archive (gzip-compressed when `gzip`) into `set`.
///
/// Regular files are kept; directories are implied; symlinks and hard links are checked (one
/// that points outside the archive is refused) and otherwise skipped, like every other entry
/// type. Absolute paths and `..` are refused.
pub(crate) fn unpack_tar(set: &mut FileSet<'_>, layer: &str, data: &[u8], gzip: bool) -> Result<(), SourceError> {
    // Archive headers and padding cost up to ~1 KiB a file: allow for them, but bound the
    // decompressed stream so a gzip bomb of skipped entries cannot run on.
    let stream_limit = set.limit.saturating_mul(2).saturating_add(1 << 20);
    let hit = std::rc::Rc::new(std::cell::Cell::new(false));
    let reader: Box<dyn Read + '_> = if gzip { Box::new(flate2::read::GzDecoder::new(data)) } else { Box::new(data) };
    let mut archive = tar::Archive::new(Limited { inner: reader, remaining: stream_limit, hit: hit.clone() });
    let input = set.input.to_string();
    let limit = set.limit;
    let bad_archive = |e: std::io::Error| {
        if hit.get() {
            SourceError::TooLarge {
                input: input.clone(),
                limit,
                detail: format!("{layer} unpacks to more than {stream_limit} bytes of archive"),
            }
        } else {
            SourceError::Unsupported {
                input: input.clone(),
                reason: format!(
                    "{layer} is not a readable tar{} archive ({e}); push a valid archive",
                    if gzip { "+gzip" } else { "" }
                ),
            }
        }
    };
    for entry in archive.entries().map_err(bad_archive)? {
        let mut entry = entry.map_err(bad_archive)?;
        let raw_path = entry.path_bytes().into_owned();
        let Ok(raw_path) = String::from_utf8(raw_path) else {
            return Err(SourceError::Unsupported {
                input: set.input.to_string(),
                reason: format!("{layer} holds a file name that is not UTF-8; rename it"),
            });
        };
        let path = normalize_relative(&raw_path).map_err(|reason| SourceError::UnsafeContent {
            input: set.input.to_string(),
            path: raw_path.clone(),
            reason: format!("archive entry in {layer}: {reason}"),
        })?;
        let kind = entry.header().entry_type();
        if kind.is_file() || kind == tar::EntryType::Continuous {
            if path.is_empty() {
                continue;
            }
            let size = entry.header().size().map_err(bad_archive)?;
            set.reserve(&path, size)?;
            let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            (&mut entry).take(size).read_to_end(&mut content).map_err(bad_archive)?;
            set.insert(path, content)?;
        } else if kind.is_symlink() || kind.is_hard_link() {
            let target = entry.link_name_bytes().map(|t| String::from_utf8_lossy(&t).into_owned()).unwrap_or_default();
            if link_escapes(&path, &target, kind.is_hard_link()) {
                return Err(SourceError::UnsafeContent {
                    input: set.input.to_string(),
                    path,
                    reason: format!("link in {layer} points outside the artifact, to \"{target}\""),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_unambiguous() {
        let a = BTreeMap::from([("ab".to_string(), b"c".to_vec())]);
        let b = BTreeMap::from([("a".to_string(), b"bc".to_vec())]);
        assert_ne!(files_digest(&a), files_digest(&b));
        assert!(files_digest(&a).starts_with("sha256:"));
        assert_eq!(files_digest(&a).len(), 7 + 64);
    }

    #[test]
    fn paths_are_normalized_and_traversal_refused() {
        assert_eq!(normalize_relative("./a//b/").as_deref(), Ok("a/b"));
        assert_eq!(normalize_relative(".").as_deref(), Ok(""));
        assert!(normalize_relative("/etc/passwd").is_err());
        assert!(normalize_relative("a/../../b").is_err());
    }

    #[test]
    fn links_that_leave_the_root_are_detected() {
        assert!(!link_escapes("a/b", "c", false));
        assert!(!link_escapes("a/b", "../c", false));
        assert!(link_escapes("a/b", "../../c", false));
        assert!(link_escapes("b", "/etc/passwd", false));
        assert!(link_escapes("a/b", "..", true));
        assert!(!link_escapes("a/b", "a/c", true));
    }
}
