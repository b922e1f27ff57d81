//! A pod's volumes as files: one directory per volume under the pod's directory, written and
//! kept current as the kubelet does (pkg/volume/util/atomic_writer.go): the files live in a
//! timestamped `..<time>` directory, `..data` is a symlink to it, and each top-level name is a
//! symlink through `..data`; an update writes a new directory and renames a new `..data` link
//! over the old one, so a reader sees the old or the new content, never a mix.
//!
//! ConfigMap, Secret, downwardAPI and projected (configMap, secret, downwardAPI,
//! serviceAccountToken) volumes are rewritten when their content changes; a projected token is
//! refreshed once 80% of its lifetime passed (as the kubelet's token manager does). emptyDir is
//! a plain directory of the pod; a persistentVolumeClaim a directory per claim under the
//! runtime's directory (shared by the pods using it); hostPath the host's own path.

use super::{join_inside, mode_of, spec};
use crate::cluster::Cluster;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A volume's files: relative path -> (content, mode).
type Files = BTreeMap<String, (Vec<u8>, u32)>;

#[derive(Debug, Default)]
pub struct VolumeState {
    /// Volume name -> its directory on the host.
    pub dirs: BTreeMap<String, PathBuf>,
    /// The digest of what each volume last got.
    written: BTreeMap<String, Vec<u8>>,
    /// Projected tokens: "volume/path" -> (token, issued at, lifetime seconds).
    tokens: BTreeMap<String, (String, i64, i64)>,
    /// The host path of the service-account token (of the `kube-api-access-*` volume).
    pub token_file: Option<PathBuf>,
}

fn digest(files: &Files) -> Vec<u8> {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for (k, (v, m)) in files {
        ctx.update(k.as_bytes());
        ctx.update(&[0]);
        ctx.update(&m.to_le_bytes());
        ctx.update(&(v.len() as u64).to_le_bytes());
        ctx.update(v);
    }
    ctx.finish().as_ref().to_vec()
}

/// Write `files` into `dir` through a new `..data` directory (the AtomicWriter's steps).
pub fn write_atomic(dir: &Path, files: &Files) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let now = jiff::Timestamp::now();
    let ts_name = format!("..{}.{}", now.strftime("%Y_%m_%d_%H_%M_%S"), now.subsec_nanosecond());
    let ts_dir = dir.join(&ts_name);
    std::fs::create_dir_all(&ts_dir)?;
    for (rel, (content, mode)) in files {
        let p = join_inside(&ts_dir, rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, content)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))?;
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&ts_name, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    // Top-level names: links through ..data; names no longer there go.
    let tops: std::collections::BTreeSet<String> =
        files.keys().filter_map(|k| k.split('/').find(|s| !s.is_empty()).map(str::to_string)).collect();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(top), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") {
            if name != "..data" && name != ts_name && entry.path().is_dir() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
            continue;
        }
        if !tops.contains(&name) && entry.file_type().is_ok_and(|t| t.is_symlink()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old
        && old != Path::new(&ts_name)
    {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

/// Items of a ConfigMap or Secret volume source: all keys, or the listed `items` (a missing key
/// is an error unless the source is optional).
fn key_files(
    data: &BTreeMap<String, Vec<u8>>,
    src: &Value,
    default_mode: u32,
    what: &str,
    files: &mut Files,
) -> Result<(), String> {
    let optional = src.get("optional").and_then(Value::as_bool) == Some(true);
    match src.get("items").and_then(Value::as_array).filter(|a| !a.is_empty()) {
        None => {
            for (k, v) in data {
                files.insert(k.clone(), (v.clone(), default_mode));
            }
        }
        Some(items) => {
            for it in items {
                let key = it.get("key").and_then(Value::as_str).unwrap_or("");
                let path = it.get("path").and_then(Value::as_str).unwrap_or(key);
                match data.get(key) {
                    Some(v) => {
                        files.insert(path.to_string(), (v.clone(), mode_of(it.get("mode"), default_mode)));
                    }
                    None if optional => {}
                    None => return Err(format!("{what}: configuration key {key:?} not found")),
                }
            }
        }
    }
    Ok(())
}

fn downward_files(pod: &Value, src: &Value, default_mode: u32, files: &mut Files) -> Result<(), String> {
    for it in src.get("items").and_then(Value::as_array).into_iter().flatten() {
        let path = it.get("path").and_then(Value::as_str).unwrap_or("");
        let value = if let Some(f) = it.get("fieldRef") {
            spec::field_ref(pod, f.get("fieldPath").and_then(Value::as_str).unwrap_or(""))?
        } else if let Some(r) = it.get("resourceFieldRef") {
            spec::resource_field(pod, "", r)?
        } else {
            continue;
        };
        files.insert(path.to_string(), (value.into_bytes(), mode_of(it.get("mode"), default_mode)));
    }
    Ok(())
}

/// Bring every volume of the pod up to date. An error names the first volume that could not be
/// set up (a missing ConfigMap, ...); the others are still written.
pub fn sync(cl: &Cluster, pod: &Value, pod_dir: &Path, pvc_base: &Path, state: &mut VolumeState) -> Result<(), String> {
    let ns = crate::meta::namespace(pod);
    let vols_dir = pod_dir.join("volumes");
    let mut first_err = None;
    for vol in pod.pointer("/spec/volumes").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = vol.get("name").and_then(Value::as_str) else { continue };
        let dir = vols_dir.join(name);
        let r: Result<Option<Files>, String> = (|| {
            if let Some(hp) = vol.get("hostPath") {
                let p = PathBuf::from(hp.get("path").and_then(Value::as_str).unwrap_or("/"));
                if hp.get("type").and_then(Value::as_str).is_some_and(|t| t == "DirectoryOrCreate") {
                    let _ = std::fs::create_dir_all(&p);
                }
                state.dirs.insert(name.to_string(), p);
                return Ok(None);
            }
            if let Some(pvc) = vol.get("persistentVolumeClaim") {
                let claim = pvc.get("claimName").and_then(Value::as_str).unwrap_or(name);
                let p = pvc_base.join(format!("{ns}_{claim}"));
                std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                state.dirs.insert(name.to_string(), p);
                return Ok(None);
            }
            state.dirs.insert(name.to_string(), dir.clone());
            let mut files = Files::new();
            if let Some(src) = vol.get("configMap") {
                let cm = src.get("name").and_then(Value::as_str).unwrap_or("");
                let dm = mode_of(src.get("defaultMode"), 0o644);
                match spec::configmap_data(cl, ns, cm) {
                    Some(d) => key_files(&d, src, dm, &format!("configmap {cm:?}"), &mut files)?,
                    None if src.get("optional").and_then(Value::as_bool) == Some(true) => {}
                    None => return Err(format!("configmap {cm:?} not found")),
                }
            } else if let Some(src) = vol.get("secret") {
                let s = src.get("secretName").and_then(Value::as_str).unwrap_or("");
                let dm = mode_of(src.get("defaultMode"), 0o644);
                match spec::secret_data(cl, ns, s) {
                    Some(d) => key_files(&d, src, dm, &format!("secret {s:?}"), &mut files)?,
                    None if src.get("optional").and_then(Value::as_bool) == Some(true) => {}
                    None => return Err(format!("secret {s:?} not found")),
                }
            } else if let Some(src) = vol.get("downwardAPI") {
                downward_files(pod, src, mode_of(src.get("defaultMode"), 0o644), &mut files)?;
            } else if let Some(src) = vol.get("projected") {
                let dm = mode_of(src.get("defaultMode"), 0o644);
                for s in src.get("sources").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(c) = s.get("configMap") {
                        let cm = c.get("name").and_then(Value::as_str).unwrap_or("");
                        match spec::configmap_data(cl, ns, cm) {
                            Some(d) => key_files(&d, c, dm, &format!("configmap {cm:?}"), &mut files)?,
                            None if c.get("optional").and_then(Value::as_bool) == Some(true) => {}
                            None => return Err(format!("configmap {cm:?} not found")),
                        }
                    } else if let Some(c) = s.get("secret") {
                        let sn = c.get("name").and_then(Value::as_str).unwrap_or("");
                        match spec::secret_data(cl, ns, sn) {
                            Some(d) => key_files(&d, c, dm, &format!("secret {sn:?}"), &mut files)?,
                            None if c.get("optional").and_then(Value::as_bool) == Some(true) => {}
                            None => return Err(format!("secret {sn:?} not found")),
                        }
                    } else if let Some(c) = s.get("downwardAPI") {
                        downward_files(pod, c, dm, &mut files)?;
                    } else if let Some(t) = s.get("serviceAccountToken") {
                        let path = t.get("path").and_then(Value::as_str).unwrap_or("token");
                        let token = token_for(cl, pod, name, path, t, state)?;
                        // A token is private to the pod's user (the kubelet writes 0600 unless a
                        // mode or fsGroup says otherwise).
                        files.insert(path.to_string(), (token.into_bytes(), mode_of(src.get("defaultMode"), 0o600)));
                        if state.token_file.is_none() || path == "token" {
                            state.token_file = Some(join_inside(&dir, path));
                        }
                    }
                }
            } else {
                // emptyDir, and any other kind: a directory of the pod.
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                return Ok(None);
            }
            Ok(Some(files))
        })();
        match r {
            Ok(Some(files)) => {
                let d = digest(&files);
                if state.written.get(name) != Some(&d) {
                    match write_atomic(&dir, &files) {
                        Ok(()) => {
                            state.written.insert(name.to_string(), d);
                        }
                        Err(e) => {
                            first_err.get_or_insert(format!("MountVolume.SetUp failed for volume {name:?} : {e}"));
                        }
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                first_err.get_or_insert(format!("MountVolume.SetUp failed for volume {name:?} : {e}"));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The token of a projected serviceAccountToken source: issued for the pod's ServiceAccount,
/// kept until 80% of its lifetime passed, then replaced.
fn token_for(
    cl: &Cluster,
    pod: &Value,
    volume: &str,
    path: &str,
    src: &Value,
    state: &mut VolumeState,
) -> Result<String, String> {
    let key = format!("{volume}/{path}");
    let now = jiff::Timestamp::now().as_second();
    if let Some((tok, issued, ttl)) = state.tokens.get(&key)
        && now < issued + ttl * 8 / 10
    {
        return Ok(tok.clone());
    }
    let ns = crate::meta::namespace(pod);
    let sa = pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).unwrap_or("default");
    let sa_obj = cl
        .store
        .get(&crate::registry::GroupResource::new("", "serviceaccounts"), ns, sa)
        .ok_or_else(|| format!("failed to fetch token: serviceaccounts \"{sa}\" not found"))?;
    let ttl = src.get("expirationSeconds").and_then(Value::as_i64).unwrap_or(3600).max(600);
    let audiences: Vec<String> = src
        .get("audience")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .map(|a| vec![a.to_string()])
        .unwrap_or_default();
    let (token, _) = crate::auth::issue_token(cl, ns, sa, crate::meta::uid(&sa_obj), &audiences, ttl);
    state.tokens.insert(key, (token.clone(), now, ttl));
    Ok(token)
}

/// A kubeconfig for the pod's ServiceAccount: this devcluster, its CA, the mounted token file.
pub fn kubeconfig(cl: &Cluster, namespace: &str, token_file: &Path) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(cl.creds.ca_cert_pem.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {}\n  name: devcluster\ncontexts:\n- context:\n    cluster: devcluster\n    namespace: {namespace}\n    user: serviceaccount\n  name: in-cluster\ncurrent-context: in-cluster\npreferences: {{}}\nusers:\n- name: serviceaccount\n  user:\n    tokenFile: {}\n",
        cl.server_url(),
        token_file.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projected_tokens_are_kept_then_refreshed_after_80_percent_of_their_lifetime() {
        let cl = Cluster::new(crate::Options::default()).unwrap();
        crate::bootstrap::run(&cl);
        let def = cl.registry.get("", "v1", "serviceaccounts").unwrap();
        let sa = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": "default"}});
        crate::ops::create(&cl, &def, "default", sa, &crate::ops::WriteOpts::system("test")).unwrap();
        let pod = serde_json::json!({"metadata": {"namespace": "default", "name": "p"}, "spec": {"serviceAccountName": "robot"}});
        let src = serde_json::json!({"expirationSeconds": 3600, "path": "token"});
        let mut state = VolumeState::default();
        let first = token_for(&cl, &pod, "v", "token", &src, &mut state).unwrap();
        assert_eq!(token_for(&cl, &pod, "v", "token", &src, &mut state).unwrap(), first);
        // 79% of the lifetime passed: kept; 80%: a new token.
        let now = jiff::Timestamp::now().as_second();
        state.tokens.get_mut("v/token").unwrap().1 = now - 3600 * 79 / 100;
        assert_eq!(token_for(&cl, &pod, "v", "token", &src, &mut state).unwrap(), first);
        state.tokens.get_mut("v/token").unwrap().1 = now - 3600 * 8 / 10;
        let second = token_for(&cl, &pod, "v", "token", &src, &mut state).unwrap();
        assert_ne!(second, first);
    }

    #[test]
    fn atomic_writer_swaps_data_and_links() {
        let d = tempfile::tempdir().unwrap();
        let mut files = Files::new();
        files.insert("a".into(), (b"1".to_vec(), 0o644));
        files.insert("sub/b".into(), (b"2".to_vec(), 0o600));
        write_atomic(d.path(), &files).unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(d.path().join("sub/b")).unwrap(), "2");
        let mode = std::fs::metadata(d.path().join("sub/b")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        files.remove("sub/b");
        files.insert("a".into(), (b"3".to_vec(), 0o644));
        write_atomic(d.path(), &files).unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("a")).unwrap(), "3");
        assert!(std::fs::symlink_metadata(d.path().join("sub")).is_err());
        let dirs: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("..") && e.path().is_dir())
            .collect();
        // ..data (a link to a directory) and the one timestamped directory.
        assert_eq!(dirs.len(), 2);
    }
}
