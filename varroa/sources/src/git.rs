//! Git inputs, with gix.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use gix::ObjectId;
use gix::objs::tree::EntryKind;
use gix::remote::Direction;

use crate::files::{FileSet, link_escapes, normalize_relative};
use crate::{Artifact, CacheKey, GitSource, Inner, Source, SourceError};

/// What the reference asks for.
#[derive(Debug, Clone)]
enum Wanted {
    /// A full commit sha.
    Commit(ObjectId),
    /// A tag or branch name, a full ref name or `HEAD`.
    Name(String),
}

/// A validated Git input.
#[derive(Debug, Clone)]
struct Spec {
    input: String,
    url: String,
    wanted: Wanted,
    /// Normalized: no leading, trailing or doubled `/`; `""` is the root.
    path: String,
}

impl Spec {
    fn parse(source: &GitSource) -> Result<Spec, SourceError> {
        let input = Source::Git(source.clone()).to_string();
        let invalid = |field: &str, reason: String| SourceError::InvalidReference {
            input: input.clone(),
            field: field.to_string(),
            reason,
        };
        let url = source.url.trim();
        if url.is_empty() {
            return Err(invalid("url", "it is empty".to_string()));
        }
        gix::url::parse(url.as_bytes()).map_err(|e| invalid("url", format!("\"{url}\" is not a Git URL ({e})")))?;

        let reference = source.reference.trim();
        let wanted = if reference.is_empty() {
            return Err(invalid("ref", "it is empty; name a branch, a tag or a full commit sha".to_string()));
        } else if reference.len() == 40 && reference.bytes().all(|b| b.is_ascii_hexdigit()) {
            let id = ObjectId::from_hex(reference.to_ascii_lowercase().as_bytes())
                .map_err(|e| invalid("ref", format!("\"{reference}\" is not a commit sha ({e})")))?;
            Wanted::Commit(id)
        } else if reference.len() == 64 && reference.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid(
                "ref",
                format!("\"{reference}\" is a SHA-256 object id; only SHA-1 repositories are supported"),
            ));
        } else {
            for candidate in ref_candidates(reference) {
                gix::refs::FullName::try_from(candidate.as_str())
                    .map_err(|e| invalid("ref", format!("\"{reference}\" is not a valid ref name ({e})")))?;
            }
            Wanted::Name(reference.to_string())
        };

        // Paths are inside the repository: a leading `/` means its root.
        let path = normalize_relative(source.path.trim().trim_start_matches('/'))
            .map_err(|reason| invalid("path", format!("\"{}\": {reason}", source.path)))?;
        Ok(Spec { input, url: url.to_string(), wanted, path })
    }

    fn key(&self, commit: &ObjectId) -> CacheKey {
        CacheKey::Git { url: self.url.clone(), commit: commit.to_string(), path: self.path.clone() }
    }

    fn unreachable(&self, detail: impl std::fmt::Display) -> SourceError {
        SourceError::Unreachable { input: self.input.clone(), detail: one_line(detail) }
    }

    fn cache_error(&self, detail: impl std::fmt::Display) -> SourceError {
        SourceError::Cache { input: self.input.clone(), detail: one_line(detail) }
    }

    fn not_found(&self, detail: impl Into<String>) -> SourceError {
        let reference = match &self.wanted {
            Wanted::Commit(id) => format!("commit {id}"),
            Wanted::Name(name) => format!("ref \"{name}\""),
        };
        SourceError::RefNotFound { input: self.input.clone(), reference, detail: detail.into() }
    }
}

/// The full ref names a short reference may stand for, in the order they are preferred.
fn ref_candidates(reference: &str) -> Vec<String> {
    if reference == "HEAD" || reference.starts_with("refs/") {
        vec![reference.to_string()]
    } else {
        vec![format!("refs/tags/{reference}"), format!("refs/heads/{reference}")]
    }
}

/// Where a remote ref is stored in the local clone.
fn local_name(full: &str) -> String {
    match full.strip_prefix("refs/") {
        Some(rest) => format!("refs/varroa/{rest}"),
        None => format!("refs/varroa/{full}"),
    }
}

/// An error with its causes, on one line.
fn one_line(detail: impl std::fmt::Display) -> String {
    detail.to_string().replace('\n', "; ")
}

/// A gix error with its causes, on one line.
fn chain(error: &gix::Error) -> String {
    crate::files::error_chain(error)
}

pub(crate) async fn fetch(inner: &Arc<Inner>, source: &GitSource) -> Result<Arc<Artifact>, SourceError> {
    let spec = Spec::parse(source)?;
    if let Wanted::Commit(id) = &spec.wanted
        && let Some(artifact) = inner.cached(&spec.key(id))
    {
        return Ok(artifact);
    }
    // One fetch at a time per URL: they share the on-disk clone. The guard moves into the
    // blocking task so that a time-out of the caller does not release it early.
    let guard = inner.git_lock(&spec.url).lock_owned().await;
    let worker = inner.clone();
    let input = spec.input.clone();
    tokio::task::spawn_blocking(move || {
        let _guard = guard;
        fetch_blocking(&worker, &spec)
    })
    .await
    .unwrap_or_else(|e| Err(SourceError::Unreachable { input, detail: format!("the Git worker stopped: {e}") }))
}

/// A bare repository to fetch into, and the temporary directory holding it if it is not kept.
fn work_repo(inner: &Inner, spec: &Spec) -> Result<(gix::Repository, Option<tempfile::TempDir>), SourceError> {
    match &inner.cache_dir {
        Some(dir) => {
            let digest = crate::files::sha256_digest(spec.url.as_bytes());
            let name = digest.trim_start_matches("sha256:");
            let path = dir.join("git").join(&name[..32]);
            if path.join("HEAD").exists() {
                match gix::open(&path) {
                    Ok(repo) => return Ok((repo, None)),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %chain(&e), "recreating a damaged Git cache");
                        std::fs::remove_dir_all(&path)
                            .map_err(|e| spec.cache_error(format!("removing {}: {e}", path.display())))?;
                    }
                }
            }
            Ok((init(spec, &path)?, None))
        }
        None => {
            let tmp = tempfile::TempDir::new()
                .map_err(|e| spec.cache_error(format!("creating a temporary directory: {e}")))?;
            let repo = init(spec, &tmp.path().join("repo"))?;
            Ok((repo, Some(tmp)))
        }
    }
}

fn init(spec: &Spec, path: &Path) -> Result<gix::Repository, SourceError> {
    std::fs::create_dir_all(path).map_err(|e| spec.cache_error(format!("creating {}: {e}", path.display())))?;
    gix::init_bare(path)
        .map_err(|e| spec.cache_error(format!("creating a repository in {}: {}", path.display(), chain(&e))))
}

/// Fetches `refspecs` from the remote into `repo`. Returns the object (peeled) that the remote
/// ref of the earliest matching refspec points to, `None` when no refspec matched. Before
/// downloading, `on_resolved` is asked about that object: when it returns a cached artifact,
/// nothing is downloaded and that artifact is returned instead (`Err`).
fn fetch_refs(
    repo: &gix::Repository,
    spec: &Spec,
    refspecs: &[String],
    on_resolved: &mut dyn FnMut(&ObjectId) -> Option<Arc<Artifact>>,
) -> Result<Result<Option<ObjectId>, Arc<Artifact>>, SourceError> {
    let remote = repo
        .remote_at(spec.url.as_str())
        .map_err(|e| spec.unreachable(chain(&e)))?
        .with_fetch_tags(gix::remote::fetch::Tags::None)
        .with_refspecs(refspecs.iter().map(String::as_str), Direction::Fetch)
        .map_err(|e| SourceError::InvalidReference {
            input: spec.input.clone(),
            field: "ref".to_string(),
            reason: chain(&e),
        })?;
    let connection = remote.connect(Direction::Fetch).map_err(|e| spec.unreachable(chain(&e)))?;
    let prepare =
        connection.prepare_fetch(gix::progress::Discard, Default::default()).map_err(|e| classify(spec, e))?;

    let ref_map = prepare.ref_map();
    // The mapping of the earliest refspec wins: tags before branches.
    let resolved = ref_map
        .mappings
        .iter()
        .filter_map(|m| match m.spec_index {
            gix::remote::fetch::refmap::SpecIndex::ExplicitInRemote(i) => Some((i, m)),
            gix::remote::fetch::refmap::SpecIndex::Implicit(_) => None,
        })
        .min_by_key(|(i, _)| *i)
        .and_then(|(_, m)| match &m.remote {
            gix::remote::fetch::refmap::Source::Ref(r) => {
                let (_, target, peeled) = r.unpack();
                peeled.or(target).map(ToOwned::to_owned)
            }
            gix::remote::fetch::refmap::Source::ObjectId(id) => Some(*id),
        });
    if ref_map.mappings.is_empty() {
        return Ok(Ok(None));
    }
    if let Some(id) = &resolved
        && let Some(artifact) = on_resolved(id)
    {
        return Ok(Err(artifact));
    }
    prepare.receive(gix::progress::Discard, &AtomicBool::new(false)).map_err(|e| classify(spec, e))?;
    Ok(Ok(resolved))
}

/// Maps a gix network error: refused credentials apart from the rest.
fn classify(spec: &Spec, error: gix::Error) -> SourceError {
    match error.dominant_class() {
        Some(gix::error::Class::Unauthenticated | gix::error::Class::PermissionDenied) => {
            SourceError::Unauthorized { input: spec.input.clone(), detail: chain(&error) }
        }
        _ => spec.unreachable(chain(&error)),
    }
}

fn fetch_blocking(inner: &Inner, spec: &Spec) -> Result<Arc<Artifact>, SourceError> {
    let (repo, _tmp) = work_repo(inner, spec)?;
    let mut on_resolved = |id: &ObjectId| inner.cached(&spec.key(id));
    let wanted = match &spec.wanted {
        Wanted::Commit(id) => {
            if !repo.has_object(id) {
                let all =
                    ["+refs/heads/*:refs/varroa/heads/*".to_string(), "+refs/tags/*:refs/varroa/tags/*".to_string()];
                fetch_refs(&repo, spec, &all, &mut |_| None)?
                    .map_err(|_| spec.cache_error("unexpected cache answer"))?;
                if !repo.has_object(id) {
                    return Err(spec.not_found("no branch or tag of the remote reaches this commit"));
                }
            }
            *id
        }
        Wanted::Name(name) => {
            let refspecs: Vec<String> =
                ref_candidates(name).iter().map(|full| format!("+{full}:{}", local_name(full))).collect();
            match fetch_refs(&repo, spec, &refspecs, &mut on_resolved)? {
                Err(artifact) => return Ok(artifact),
                Ok(Some(id)) => id,
                Ok(None) => {
                    return Err(spec.not_found(format!("the remote has no {}", ref_candidates(name).join(" or "))));
                }
            }
        }
    };

    let commit = repo
        .find_object(wanted)
        .ok()
        .and_then(|o| o.peel_to_commit().ok())
        .ok_or_else(|| spec.not_found(format!("{wanted} is not a commit")))?;
    let commit_id = commit.id;
    let key = spec.key(&commit_id);
    if commit_id != wanted
        && let Some(artifact) = inner.cached(&key)
    {
        return Ok(artifact);
    }
    let files = read_files(&repo, &commit, spec, inner.options.max_bytes)?;
    Ok(inner.store(key, Artifact::new(commit_id.to_string(), files)))
}

/// The regular files under `spec.path` at `commit`.
fn read_files(
    repo: &gix::Repository,
    commit: &gix::Commit<'_>,
    spec: &Spec,
    limit: u64,
) -> Result<std::collections::BTreeMap<String, Vec<u8>>, SourceError> {
    let corrupt = |e: gix::Error| spec.cache_error(format!("reading the clone: {}", chain(&e)));
    let root = commit.tree().map_err(corrupt)?;
    let dir = if spec.path.is_empty() {
        root.id
    } else {
        let not_found = || SourceError::PathNotFound {
            input: spec.input.clone(),
            path: spec.path.clone(),
            revision: commit.id.to_string(),
        };
        let entry = root.lookup_entry_by_path(PathBuf::from(&spec.path)).map_err(corrupt)?.ok_or_else(not_found)?;
        if entry.mode().kind() != EntryKind::Tree {
            return Err(not_found());
        }
        entry.object_id()
    };

    let mut set = FileSet::new(&spec.input, limit);
    let mut pending = vec![(String::new(), dir)];
    while let Some((prefix, tree_id)) = pending.pop() {
        let tree = repo.find_tree(tree_id).map_err(corrupt)?;
        let entries: Vec<(EntryKind, Vec<u8>, ObjectId)> = tree
            .decode()
            .map_err(|e| spec.cache_error(format!("decoding tree {tree_id}: {e}")))?
            .entries
            .iter()
            .map(|e| (e.mode.kind(), e.filename.to_vec(), e.oid.to_owned()))
            .collect();
        for (kind, name, id) in entries {
            let Ok(name) = String::from_utf8(name) else {
                return Err(SourceError::Unsupported {
                    input: spec.input.clone(),
                    reason: format!("a file name under \"{prefix}\" is not UTF-8; rename it (git mv)"),
                });
            };
            let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
            match kind {
                EntryKind::Tree => pending.push((path, id)),
                EntryKind::Blob | EntryKind::BlobExecutable => {
                    let size = repo.find_header(id).map_err(corrupt)?.size();
                    set.reserve(&path, size)?;
                    let blob = repo.find_blob(id).map_err(corrupt)?;
                    set.insert(path, blob.detach().data)?;
                }
                EntryKind::Link => {
                    let target = repo.find_blob(id).map_err(corrupt)?.detach().data;
                    let target = String::from_utf8_lossy(&target).into_owned();
                    if link_escapes(&path, &target, false) {
                        return Err(SourceError::UnsafeContent {
                            input: spec.input.clone(),
                            path,
                            reason: format!("symlink points outside the input's path, to \"{target}\""),
                        });
                    }
                }
                EntryKind::Commit => {}
            }
        }
    }
    Ok(set.files)
}
