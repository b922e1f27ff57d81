//! Archived artifacts in the blob store: the per-cell layout, presigned upload URLs, listing a
//! build's artifacts (docs/varroa/gateway.md, "Archived artifacts").
//!
//! The files go straight from the plugin to the store: the gateway, which holds the store's
//! credentials, signs one `PUT` URL per file ([`Artifacts::sign_puts`], object_store's
//! [`Signer`](object_store::signer::Signer) on the S3 store: SigV4 query signing, valid for
//! [`URL_EXPIRY`]), and the plugin sends each file to its URL. No credential reaches the tenant's
//! pod, and a URL allows one `PUT` of one key until it expires.
//!
//! ```text
//! artifacts/<cluster>/<namespace>/<controller>/cell-<n>/<job>/<build>/<path>
//! ```
//!
//! `cluster` is the gateway's `--cluster`, `namespace` and `controller` the mite's certificate's,
//! `n` the cell of its stream's hello: a cell writes only under its own prefix. `job` is one
//! segment, encoded as console logs encode it ([`crate::logs::encode_job`]); `path` is the
//! plugin's relative path ([`varroa_link::artifacts::path_problem`]: no `..`), its segments as
//! object_store keeps them (the characters S3 advises against, `\ { } ^ % ` [ ] " < > ~ # | * ?`,
//! as `%XX`; [`Artifacts::list`] decodes them again). The whole key, the store's prefix
//! included, is at most [`MAX_KEY_BYTES`].
//!
//! A directory store (`file://`) cannot presign: [`SignError::Unsupported`], and the plugin keeps
//! archiving with Jenkins' own archiving.

use std::time::{Duration, SystemTime};

use object_store::path::{Path, PathPart};
use varroa_link::artifacts::{ArtifactError, MAX_KEY_BYTES, URL_EXPIRY, check_files};

use crate::logs::{KeyError, encode_job, job_problem};
use crate::store::{BlobError, BlobStore};

/// The top-level directory of artifacts.
pub const ARTIFACTS: &str = "artifacts";

/// Whose artifacts: a build of a job of one cell of a controller in a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArtifactKey {
    cluster: String,
    controller: varroa_link::kv::ControllerKey,
    cell: u32,
    job: String,
    build: u64,
}

impl ArtifactKey {
    /// Checks every part: the cluster, namespace and controller are DNS-1123 labels, the job a
    /// plugin job name, the build 1 to 2^53.
    pub fn new(
        cluster: &str,
        namespace: &str,
        controller: &str,
        cell: u32,
        job: &str,
        build: u64,
    ) -> Result<ArtifactKey, KeyError> {
        varroa_link::activity::global_subject(cluster)?;
        let controller = varroa_link::kv::ControllerKey::new(namespace, controller)?;
        if let Some(why) = job_problem(job) {
            return Err(KeyError::Job(why));
        }
        if build == 0 || build > varroa_link::builds::MAX_BUILD {
            return Err(KeyError::Build(build));
        }
        Ok(ArtifactKey { cluster: cluster.to_owned(), controller, cell, job: job.to_owned(), build })
    }

    /// The cell.
    pub fn cell(&self) -> u32 {
        self.cell
    }

    /// `artifacts/<cluster>/<ns>/<ctrl>/cell-<n>/<job>/<build>`, relative to the store's root.
    pub fn prefix(&self) -> String {
        format!(
            "{ARTIFACTS}/{}/{}/{}/cell-{}/{}/{}",
            self.cluster,
            self.controller.namespace(),
            self.controller.controller(),
            self.cell,
            encode_job(&self.job),
            self.build
        )
    }

    /// `<job> #<build> of controller <ns>/<ctrl>, cell <n>`.
    pub fn describe(&self) -> String {
        format!(
            "{} #{} of controller {}/{}, cell {}",
            self.job,
            self.build,
            self.controller.namespace(),
            self.controller.controller(),
            self.cell
        )
    }
}

/// Why no URLs were signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The store cannot presign (a directory).
    #[error(
        "artifacts need an s3:// store: the gateway's store {store} is a directory, which cannot presign upload URLs; \
         archive with Jenkins' own archiving, or point the gateway's --log-store at an S3 bucket"
    )]
    Unsupported {
        /// The store's URL.
        store: String,
    },
    /// A file (or the request) is malformed.
    #[error(transparent)]
    Invalid(#[from] ArtifactError),
    /// Signing failed (the credentials are unavailable).
    #[error(transparent)]
    Store(#[from] BlobError),
}

/// What was signed: one URL per file, in the request's order, and when they expire.
#[derive(Debug, Clone)]
pub struct Signed {
    /// `(path, url)` per file.
    pub uploads: Vec<(String, url::Url)>,
    /// When the URLs stop working.
    pub expires: SystemTime,
}

/// One archived file, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The path relative to the build's artifacts, as the plugin named it.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

/// Artifacts in one store (cheap to clone).
#[derive(Debug, Clone)]
pub struct Artifacts {
    store: BlobStore,
}

/// A part of the layout (a label, digits, an encoded job), as console logs keep theirs.
fn part(s: &str) -> PathPart<'_> {
    PathPart::parse(s).unwrap_or_else(|_| PathPart::from(s))
}

fn decode(part: &str) -> String {
    let b = part.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%').then(|| b.get(i + 1..i + 3)).flatten();
        match hex.and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Artifacts {
    /// Artifacts in `store`.
    pub fn new(store: BlobStore) -> Artifacts {
        Artifacts { store }
    }

    /// The store.
    pub fn store(&self) -> &BlobStore {
        &self.store
    }

    fn build_dir(&self, key: &ArtifactKey) -> Path {
        key.prefix().split('/').fold(self.store.root().clone(), |p, s| p.join(part(s)))
    }

    /// The object of `path` (a path [`varroa_link::artifacts::path_problem`] accepts): its
    /// segments as object_store encodes them.
    pub fn object(&self, key: &ArtifactKey, path: &str) -> Path {
        path.split('/').fold(self.build_dir(key), |p, s| p.join(PathPart::from(s)))
    }

    /// Signs one `PUT` URL per file, valid for [`URL_EXPIRY`]. Every file is checked first
    /// ([`check_files`], and its whole key at most [`MAX_KEY_BYTES`]); nothing is signed when one
    /// is malformed.
    pub async fn sign_puts(&self, key: &ArtifactKey, files: &[(String, u64)]) -> Result<Signed, SignError> {
        self.sign_puts_for(key, files, URL_EXPIRY).await
    }

    /// [`Artifacts::sign_puts`] with another validity (tests of expiry).
    pub async fn sign_puts_for(
        &self,
        key: &ArtifactKey,
        files: &[(String, u64)],
        expires_in: Duration,
    ) -> Result<Signed, SignError> {
        check_files(files.iter().map(|(p, s)| (p.as_str(), *s)))?;
        if !self.store.can_presign() {
            return Err(SignError::Unsupported { store: self.store.url().to_owned() });
        }
        let mut objects = Vec::with_capacity(files.len());
        for (i, (path, _)) in files.iter().enumerate() {
            let object = self.object(key, path);
            let len = object.as_ref().len();
            if len > MAX_KEY_BYTES {
                return Err(SignError::Invalid(ArtifactError {
                    field: format!("files[{i}].path"),
                    reason: format!(
                        "its object key would be {len} bytes, at most {MAX_KEY_BYTES}: use a shorter path (or job name)"
                    ),
                }));
            }
            objects.push(object);
        }
        let expires = SystemTime::now() + expires_in;
        let mut uploads = Vec::with_capacity(files.len());
        for ((path, _), object) in files.iter().zip(&objects) {
            match self.store.presign(object_store::signer::Method::PUT, object, expires_in).await? {
                Some(url) => uploads.push((path.clone(), url)),
                None => return Err(SignError::Unsupported { store: self.store.url().to_owned() }),
            }
        }
        Ok(Signed { uploads, expires })
    }

    /// A build's archived files, sorted by path.
    pub async fn list(&self, key: &ArtifactKey) -> Result<Vec<Artifact>, BlobError> {
        let dir = self.build_dir(key);
        let skip = dir.parts().count();
        let mut out: Vec<Artifact> = self
            .store
            .list(&dir, None)
            .await?
            .into_iter()
            .map(|m| Artifact {
                path: m.location.parts().skip(skip).map(|p| decode(p.as_ref())).collect::<Vec<_>>().join("/"),
                size: m.size,
            })
            .filter(|a| !a.path.is_empty())
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Deletes every archived file of a build (its whole prefix); the number of objects deleted.
    /// Deleting a build that has none is harmless (0).
    pub async fn delete(&self, key: &ArtifactKey) -> Result<u64, BlobError> {
        let dir = self.build_dir(key);
        let listed: Vec<Path> = self.store.list(&dir, None).await?.into_iter().map(|m| m.location).collect();
        let deleted = self.store.delete_all(listed).await?;
        self.store.remove_empty_dirs(&dir, 2);
        Ok(deleted)
    }

    /// The bytes of a build's file `path`, or `None` when there is none.
    pub async fn read(&self, key: &ArtifactKey, path: &str) -> Result<Option<bytes::Bytes>, BlobError> {
        self.store.read(&self.object(key, path), 0).await
    }

    /// The cells that archived anything of a controller (`cell-<n>` under its prefix), sorted.
    pub async fn cells(&self, cluster: &str, namespace: &str, controller: &str) -> Result<Vec<u32>, BlobError> {
        let dir =
            [ARTIFACTS, cluster, namespace, controller].iter().fold(self.store.root().clone(), |p, s| p.join(part(s)));
        let mut cells: Vec<u32> = self
            .store
            .dirs(&dir)
            .await?
            .iter()
            .filter_map(|d| d.strip_prefix("cell-").and_then(|n| n.parse().ok()))
            .collect();
        cells.sort_unstable();
        Ok(cells)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreSettings;

    #[test]
    fn the_layout_is_the_cells_own_prefix() {
        let k = ArtifactKey::new("prod", "team-a", "ci", 2, "team/my app", 42).unwrap();
        assert_eq!(k.prefix(), "artifacts/prod/team-a/ci/cell-2/team%2Fmy%20app/42");
        assert!(ArtifactKey::new("prod", "team-a", "ci", 0, "x", 0).is_err());
        assert!(ArtifactKey::new("prod", "Team", "ci", 0, "x", 1).is_err());
    }

    #[tokio::test]
    async fn a_directory_store_cannot_presign_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(&StoreSettings::new(format!("file://{}", dir.path().display()))).unwrap();
        let a = Artifacts::new(store);
        let k = ArtifactKey::new("local", "team-a", "ci", 0, "app", 1).unwrap();
        let e = a.sign_puts(&k, &[("a.txt".into(), 1)]).await.unwrap_err();
        assert!(matches!(e, SignError::Unsupported { .. }));
        assert!(e.to_string().contains("artifacts need an s3:// store"), "{e}");
        // A malformed file is named before the store's kind.
        let e = a.sign_puts(&k, &[("../x".into(), 1)]).await.unwrap_err();
        assert!(e.to_string().starts_with("files[0].path"), "{e}");
        assert_eq!(decode("a%23b%7E%zz"), "a#b~%zz");
    }
}
