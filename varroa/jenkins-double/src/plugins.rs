//! The installed plugins the double reports, read from a plugins directory the way Jenkins' plugin
//! manager reads `$JENKINS_HOME/plugins` (and the Docker image's `/usr/share/jenkins/ref/plugins`):
//! every `<name>.jpi` or `<name>.hpi` is a plugin, its identity and version come from the archive's
//! `META-INF/MANIFEST.MF` (`Short-Name`, `Plugin-Version`, `Long-Name`), and a `<file>.disabled`
//! next to it marks it disabled (core `hudson/PluginManager.java`, `hudson/ClassicPluginStrategy.java`).
//!
//! Reading the manifest needs the one zip entry, so this module carries a minimal zip reader
//! (end of central directory, central directory, local header; stored or deflated entries).
//! Deliberate difference: a file that is not a zip is read as a plain-text manifest, so test
//! update sites can serve small text "plugins"; Jenkins would refuse such a file.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// One installed plugin, as `/pluginManager/api/json?depth=1` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plugin {
    /// `shortName`, the plugin id (`git`).
    pub short_name: String,
    /// `version`.
    pub version: String,
    /// `longName`, the display name.
    #[serde(default)]
    pub long_name: String,
    /// Loaded and running.
    #[serde(default = "yes")]
    pub active: bool,
    /// Not disabled by the admin.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

impl Plugin {
    /// An active, enabled plugin.
    pub fn new(short_name: &str, version: &str) -> Self {
        Plugin {
            short_name: short_name.into(),
            version: version.into(),
            long_name: short_name.into(),
            active: true,
            enabled: true,
        }
    }
}

/// The largest manifest read (real manifests are a few KiB).
const MAX_MANIFEST: u64 = 1 << 20;

/// Manifests already read, by path, kept while the file's modification time and size stay the
/// same: a plugins directory holds hundreds of MiB and the plugin manager is asked every few
/// seconds.
#[derive(Debug, Default)]
pub struct ManifestCache(HashMap<PathBuf, (Option<SystemTime>, u64, Manifest)>);

type Manifest = Vec<(String, String)>;

impl ManifestCache {
    fn manifest(&mut self, path: &Path) -> std::io::Result<Manifest> {
        let meta = std::fs::metadata(path)?;
        let key = (meta.modified().ok(), meta.len());
        if let Some((m, l, manifest)) = self.0.get(path)
            && (*m, *l) == key
        {
            return Ok(manifest.clone());
        }
        let manifest = read_manifest(path)?;
        self.0.insert(path.to_path_buf(), (key.0, key.1, manifest.clone()));
        Ok(manifest)
    }
}

/// Scans a plugins directory. Unreadable files are skipped with a warning, as Jenkins logs a
/// plugin that fails to load and carries on.
pub fn scan_dir(dir: &Path) -> std::io::Result<Vec<Plugin>> {
    scan_dir_cached(dir, &mut ManifestCache::default())
}

/// [`scan_dir`], reading only the archives that changed since the cache saw them.
pub fn scan_dir_cached(dir: &Path, cache: &mut ManifestCache) -> std::io::Result<Vec<Plugin>> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(ext) = path.extension().and_then(|e| e.to_str()) else { continue };
        if ext != "jpi" && ext != "hpi" {
            continue;
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        seen.push(path.clone());
        let manifest = match cache.manifest(&path) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "skipping an unreadable plugin");
                continue;
            }
        };
        let field = |k: &str| manifest.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        let short_name = field("Short-Name").unwrap_or(stem);
        let disabled = path.with_extension(format!("{ext}.disabled")).exists();
        out.push(Plugin {
            long_name: field("Long-Name").unwrap_or_else(|| short_name.clone()),
            version: field("Plugin-Version").unwrap_or_else(|| "unknown".into()),
            short_name,
            active: !disabled,
            enabled: !disabled,
        });
    }
    cache.0.retain(|p, _| seen.contains(p));
    out.sort_by(|a, b| a.short_name.cmp(&b.short_name));
    Ok(out)
}

/// The manifest's main attributes, continuation lines joined.
fn read_manifest(path: &Path) -> std::io::Result<Vec<(String, String)>> {
    let bytes = std::fs::read(path)?;
    let text = match zip_entry(&bytes, "META-INF/MANIFEST.MF")? {
        Some(m) => m,
        None if !bytes.starts_with(b"PK") => bytes,
        None => return Err(std::io::Error::other("the archive has no META-INF/MANIFEST.MF")),
    };
    let text = String::from_utf8_lossy(&text);
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(cont) = line.strip_prefix(' ') {
            if let Some(last) = out.last_mut() {
                last.1.push_str(cont);
            }
        } else if let Some((k, v)) = line.split_once(':') {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    Ok(out)
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]]) as usize)
}

fn u32_at(b: &[u8], at: usize) -> Option<usize> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// One entry of a zip archive, or None when `bytes` is not a zip or lacks the entry.
fn zip_entry(bytes: &[u8], name: &str) -> std::io::Result<Option<Vec<u8>>> {
    let bad = || std::io::Error::other("corrupt zip archive");
    let min = bytes.len().saturating_sub(22 + 65535);
    let Some(eocd) = (min..bytes.len().saturating_sub(21)).rev().find(|&i| bytes[i..].starts_with(b"PK\x05\x06"))
    else {
        return Ok(None);
    };
    let entries = u16_at(bytes, eocd + 10).ok_or_else(bad)?;
    let mut at = u32_at(bytes, eocd + 16).ok_or_else(bad)?;
    for _ in 0..entries {
        if !bytes.get(at..).is_some_and(|b| b.starts_with(b"PK\x01\x02")) {
            return Err(bad());
        }
        let method = u16_at(bytes, at + 10).ok_or_else(bad)?;
        let size = u32_at(bytes, at + 20).ok_or_else(bad)?;
        let (n, e, c) = (
            u16_at(bytes, at + 28).ok_or_else(bad)?,
            u16_at(bytes, at + 30).ok_or_else(bad)?,
            u16_at(bytes, at + 32).ok_or_else(bad)?,
        );
        let local = u32_at(bytes, at + 42).ok_or_else(bad)?;
        let entry_name = bytes.get(at + 46..at + 46 + n).ok_or_else(bad)?;
        at += 46 + n + e + c;
        if entry_name != name.as_bytes() {
            continue;
        }
        let ln = u16_at(bytes, local + 26).ok_or_else(bad)?;
        let le = u16_at(bytes, local + 28).ok_or_else(bad)?;
        let start = local + 30 + ln + le;
        let data = bytes.get(start..start + size).ok_or_else(bad)?;
        let mut out = Vec::new();
        match method {
            0 => out.extend_from_slice(data),
            8 => {
                flate2::read::DeflateDecoder::new(data).take(MAX_MANIFEST).read_to_end(&mut out)?;
            }
            m => return Err(std::io::Error::other(format!("unsupported zip compression method {m}"))),
        }
        return Ok(Some(out));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A one-entry zip written by hand (deflated), as `jar` writes a plugin's manifest.
    fn zip_with_manifest(manifest: &str) -> Vec<u8> {
        let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(manifest.as_bytes()).unwrap();
        let data = enc.finish().unwrap();
        let name = b"META-INF/MANIFEST.MF";
        let mut z = Vec::new();
        z.extend_from_slice(b"PK\x03\x04");
        z.extend_from_slice(&[20, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        z.extend_from_slice(&(data.len() as u32).to_le_bytes());
        z.extend_from_slice(&(manifest.len() as u32).to_le_bytes());
        z.extend_from_slice(&(name.len() as u16).to_le_bytes());
        z.extend_from_slice(&[0, 0]);
        z.extend_from_slice(name);
        z.extend_from_slice(&data);
        let cd = z.len();
        z.extend_from_slice(b"PK\x01\x02");
        z.extend_from_slice(&[20, 0, 20, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        z.extend_from_slice(&(data.len() as u32).to_le_bytes());
        z.extend_from_slice(&(manifest.len() as u32).to_le_bytes());
        z.extend_from_slice(&(name.len() as u16).to_le_bytes());
        z.extend_from_slice(&[0; 12]);
        z.extend_from_slice(&0u32.to_le_bytes());
        z.extend_from_slice(name);
        let cd_len = z.len() - cd;
        z.extend_from_slice(b"PK\x05\x06");
        z.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
        z.extend_from_slice(&(cd_len as u32).to_le_bytes());
        z.extend_from_slice(&(cd as u32).to_le_bytes());
        z.extend_from_slice(&[0, 0]);
        z
    }

    #[test]
    fn reads_plugins_from_zip_and_text_manifests() {
        let dir = tempfile::tempdir().unwrap();
        let m = "Manifest-Version: 1.0\r\nShort-Name: git\r\nLong-Name: Git plu\r\n gin\r\nPlugin-Version: 5.7.0\r\n";
        std::fs::write(dir.path().join("git.jpi"), zip_with_manifest(m)).unwrap();
        std::fs::write(dir.path().join("job-dsl.hpi"), "Plugin-Version: 1.90\n").unwrap();
        std::fs::write(dir.path().join("job-dsl.hpi.disabled"), "").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let got = scan_dir(dir.path()).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].short_name.as_str(), got[0].version.as_str()), ("git", "5.7.0"));
        assert_eq!(got[0].long_name, "Git plugin");
        assert_eq!((got[1].short_name.as_str(), got[1].version.as_str(), got[1].enabled), ("job-dsl", "1.90", false));
    }
}
