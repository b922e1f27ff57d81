//! Git inputs, with gix.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use gix::ObjectId;
use gix::objs::tree::EntryKind;
use gix::remote::Direction;

use crate::files::{FileSet, link_escapes, normalize_relative};
use crate::net::{CheckingResolver, HostPolicy};
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
    /// The URL's scheme, host and port, for the host check.
    scheme: gix::url::Scheme,
    host: Option<String>,
    port: Option<u16>,
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
        let parsed =
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
        Ok(Spec {
            input,
            url: url.to_string(),
            scheme: parsed.scheme.clone(),
            host: parsed.host().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string()),
            port: parsed.port_or_default(),
            wanted,
            path,
        })
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

/// How long the caller waits, past the time-out, for the worker to report that it stopped.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub(crate) async fn fetch(inner: &Arc<Inner>, source: &GitSource) -> Result<Arc<Artifact>, SourceError> {
    let spec = Spec::parse(source)?;
    let limit = inner.options.timeout;
    let deadline = Instant::now() + limit;
    check_host(&inner.policy, &spec).await?;
    if let Wanted::Commit(id) = &spec.wanted
        && let Some(artifact) = inner.cached(&spec.key(id))
    {
        return Ok(artifact);
    }
    let timed_out =
        |detail: &str| SourceError::TimedOut { input: spec.input.clone(), limit, detail: detail.to_string() };
    // One fetch at a time per URL: they share the on-disk clone. The guard moves into the
    // blocking task, so that the next fetch of the URL waits until this one really stopped.
    let guard = tokio::time::timeout_at(deadline, inner.git_lock(&spec.url).lock_owned())
        .await
        .map_err(|_| timed_out("waiting for another fetch of the same URL"))?;
    let budget = Arc::new(Budget::new(inner.options.max_bytes, deadline.into_std()));
    // The watchdog raises the interrupt flag at the deadline: the transfer stops at its next
    // read (HTTP requests also carry the deadline as their own time-out).
    let watchdog = {
        let budget = budget.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            budget.timed_out.store(true, Ordering::SeqCst);
            budget.interrupt.store(true, Ordering::SeqCst);
        })
    };
    let worker = inner.clone();
    let input = spec.input.clone();
    let work_spec = spec.clone();
    let work_budget = budget.clone();
    let task = tokio::task::spawn_blocking(move || {
        let _guard = guard;
        fetch_blocking(&worker, &work_spec, &work_budget)
    });
    let result = match tokio::time::timeout_at(deadline + STOP_GRACE, task).await {
        Ok(joined) => joined.unwrap_or_else(|e| {
            Err(SourceError::Unreachable { input, detail: format!("the Git worker stopped: {e}") })
        }),
        Err(_) => {
            // Only a transport that ignores both the interrupt flag and its own time-outs (an
            // `ssh` program stuck in its handshake) gets here; it keeps the URL's lock until it
            // ends.
            tracing::warn!(input = %spec.input, "a Git transfer did not stop at its deadline");
            Err(timed_out("the transfer did not stop at the deadline and was abandoned"))
        }
    };
    watchdog.abort();
    result
}

/// Refuses a URL whose host is a refused address, or a local path, before anything is fetched.
async fn check_host(policy: &HostPolicy, spec: &Spec) -> Result<(), SourceError> {
    match (&spec.scheme, &spec.host) {
        (gix::url::Scheme::File, _) | (_, None) => policy.check_local(&spec.input),
        (scheme, Some(host)) => {
            let port = spec.port.unwrap_or(match scheme {
                gix::url::Scheme::Http => 80,
                gix::url::Scheme::Git => 9418,
                gix::url::Scheme::Ssh => 22,
                _ => 443,
            });
            policy.check(&spec.input, host, port).await
        }
    }
}

/// What one Git fetch may still spend: bytes received and time. The interrupt flag stops gix's
/// pack transfer at its next read.
struct Budget {
    limit: u64,
    deadline: std::time::Instant,
    received: AtomicU64,
    interrupt: AtomicBool,
    over_limit: AtomicBool,
    timed_out: AtomicBool,
    /// Set when the HTTP client's resolver refused an address.
    refusal: Arc<Mutex<Option<SourceError>>>,
}

impl Budget {
    fn new(limit: u64, deadline: std::time::Instant) -> Budget {
        Budget {
            limit,
            deadline,
            received: AtomicU64::new(0),
            interrupt: AtomicBool::new(false),
            over_limit: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            refusal: Arc::new(Mutex::new(None)),
        }
    }

    fn add(&self, bytes: u64) {
        let total = self.received.fetch_add(bytes, Ordering::SeqCst).saturating_add(bytes);
        if total > self.limit {
            self.over_limit.store(true, Ordering::SeqCst);
            self.interrupt.store(true, Ordering::SeqCst);
        }
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(1))
    }

    /// The error a transport failure really stands for when the budget stopped it: too large,
    /// too late, or a refused address; `None` for a failure of its own.
    fn verdict(&self, spec: &Spec, limit: Duration) -> Option<SourceError> {
        if let Some(refusal) = self.refusal.lock().ok().and_then(|mut r| r.take()) {
            return Some(refusal);
        }
        if self.over_limit.load(Ordering::SeqCst) {
            return Some(SourceError::TooLarge {
                input: spec.input.clone(),
                limit: self.limit,
                detail: format!(
                    "the Git transfer passed the limit after {} bytes and was stopped",
                    self.received.load(Ordering::SeqCst)
                ),
            });
        }
        if self.timed_out.load(Ordering::SeqCst) || std::time::Instant::now() >= self.deadline {
            return Some(SourceError::TimedOut {
                input: spec.input.clone(),
                limit,
                detail: format!("{} bytes received", self.received.load(Ordering::SeqCst)),
            });
        }
        None
    }
}

/// gix's progress, reduced to what the budget needs: the bytes of the pack as they are read.
#[derive(Clone)]
struct Meter {
    budget: Arc<Budget>,
    /// Whether this is the pack reader's byte count.
    counts_pack_bytes: bool,
    id: gix::progress::Id,
}

/// The id gix-pack gives the progress of the pack bytes it reads.
const READ_PACK_BYTES: gix::progress::Id = *b"BWRB";

impl gix::progress::Count for Meter {
    fn set(&self, _step: gix::progress::Step) {}

    fn step(&self) -> gix::progress::Step {
        if self.counts_pack_bytes {
            usize::try_from(self.budget.received.load(Ordering::SeqCst)).unwrap_or(0)
        } else {
            0
        }
    }

    fn inc_by(&self, step: gix::progress::Step) {
        if self.counts_pack_bytes {
            self.budget.add(step as u64);
        }
    }

    fn counter(&self) -> gix::progress::StepShared {
        Arc::new(std::sync::atomic::AtomicUsize::new(0))
    }
}

impl gix::progress::Progress for Meter {
    fn init(&mut self, _max: Option<gix::progress::Step>, _unit: Option<gix::progress::Unit>) {}

    fn set_name(&mut self, _name: String) {}

    fn name(&self) -> Option<String> {
        None
    }

    fn id(&self) -> gix::progress::Id {
        self.id
    }

    fn message(&self, _level: gix::progress::MessageLevel, _message: String) {}
}

impl gix::progress::NestedProgress for Meter {
    type SubProgress = Meter;

    fn add_child(&mut self, _name: impl Into<String>) -> Meter {
        Meter { budget: self.budget.clone(), counts_pack_bytes: false, id: gix::progress::UNKNOWN }
    }

    fn add_child_with_id(&mut self, _name: impl Into<String>, id: gix::progress::Id) -> Meter {
        Meter { budget: self.budget.clone(), counts_pack_bytes: id == READ_PACK_BYTES, id }
    }
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

/// Fetches `refspecs` from the remote into `repo`, shallow (the tip commits only). Returns the
/// object (peeled) that the remote ref of the earliest matching refspec points to, `None` when no
/// refspec matched. Before downloading, `on_resolved` is asked about that object: when it returns
/// a cached artifact, nothing is downloaded and that artifact is returned instead (`Err`).
fn fetch_refs(
    inner: &Inner,
    repo: &gix::Repository,
    spec: &Spec,
    budget: &Arc<Budget>,
    refspecs: &[String],
    on_resolved: &mut dyn FnMut(&ObjectId) -> Option<Arc<Artifact>>,
) -> Result<Result<Option<ObjectId>, Arc<Artifact>>, SourceError> {
    let limit = inner.options.timeout;
    let failed = |e: gix::Error| budget.verdict(spec, limit).unwrap_or_else(|| classify(spec, e));
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
    let mut connection = remote.connect(Direction::Fetch).map_err(failed)?;
    if matches!(spec.scheme, gix::url::Scheme::Http | gix::url::Scheme::Https) {
        let options = http_options(inner, repo, spec, budget)?;
        connection = connection.with_transport_options(options);
    }
    let meter = Meter { budget: budget.clone(), counts_pack_bytes: false, id: gix::progress::UNKNOWN };
    let prepare = connection
        .prepare_fetch(meter.clone(), Default::default())
        .map_err(failed)?
        .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(std::num::NonZeroU32::MIN));

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
    prepare.receive(meter, &budget.interrupt).map_err(|e| {
        if let Some(verdict) = budget.verdict(spec, limit) {
            return verdict;
        }
        // A server asked for a commit it does not have (or that no branch or tag reaches)
        // answers "not our ref" and hangs up; `git-upload-pack` over file:// just hangs up.
        if let Wanted::Commit(id) = &spec.wanted
            && e.dominant_class() != Some(gix::error::Class::Retryable)
        {
            return spec.not_found(format!(
                "the remote refused to send commit {id}, so no branch or tag reaches it ({})",
                chain(&e)
            ));
        }
        classify(spec, e)
    })?;
    Ok(Ok(resolved))
}

/// The HTTP transport's options: the repository's (proxy, headers, ...), plus the budget's
/// deadline as the requests' time-out, no redirects, and the checking resolver.
fn http_options(
    inner: &Inner,
    repo: &gix::Repository,
    spec: &Spec,
    budget: &Arc<Budget>,
) -> Result<Box<dyn std::any::Any>, SourceError> {
    use gix::protocol::transport::client::blocking_io::http;
    let configured = repo.transport_options(spec.url.as_str(), None).map_err(|e| spec.unreachable(chain(&e)))?;
    let mut options = configured.and_then(|o| o.downcast::<http::Options>().ok()).map(|o| *o).unwrap_or_default();
    // A redirect to a literal address would not pass through the resolver.
    options.follow_redirects = http::options::FollowRedirects::None;
    let resolver = Arc::new(CheckingResolver {
        policy: inner.policy.clone(),
        input: spec.input.clone(),
        refusal: budget.refusal.clone(),
    });
    let budget = budget.clone();
    let configure_client: Box<http::reqwest::ConfigureClientFn> =
        Box::new(move |builder| Ok(builder.dns_resolver(resolver.clone()).timeout(budget.remaining())));
    options.backend = Some(Arc::new(Mutex::new(http::reqwest::Options {
        configure_client: Some(configure_client),
        configure_request: None,
    })));
    Ok(Box::new(options))
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

fn fetch_blocking(inner: &Inner, spec: &Spec, budget: &Arc<Budget>) -> Result<Arc<Artifact>, SourceError> {
    let (repo, _tmp) = work_repo(inner, spec)?;
    let mut on_resolved = |id: &ObjectId| inner.cached(&spec.key(id));
    let wanted = match &spec.wanted {
        Wanted::Commit(id) => {
            if !repo.has_object(id) {
                // Only this commit, by its id (Git protocol v2 servers answer a want of any
                // reachable commit).
                let one = [format!("+{id}:refs/varroa/commits/{id}")];
                fetch_refs(inner, &repo, spec, budget, &one, &mut |_| None)?
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
            match fetch_refs(inner, &repo, spec, budget, &refspecs, &mut on_resolved)? {
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
