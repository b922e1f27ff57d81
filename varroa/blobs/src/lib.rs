//! varroa-blobs: the blob store of Varroa's build data plane (docs/varroa/data-plane.md):
//! console logs now, artifacts later, in object storage a platform team already runs.
//!
//! - [`store`]: store URLs (`file:///dir`, `s3://bucket/prefix?endpoint=...&region=...`) and the
//!   [`BlobStore`] they open (object_store: a local directory, or S3 without aws-lc-rs or
//!   openssl: rustls on ring).
//! - [`credentials`]: S3 credentials from a file, re-read when it changes.
//! - [`logs`]: a console log's objects (one per chunk, named by its start offset, and a
//!   completion marker), the gateway's chunk writer with its offset semantics and end cache,
//!   reading, following and deleting a log; the live-tail notice the gateway publishes on core
//!   NATS.
//! - `testing` (cargo feature `testing`): a real moto S3 server, and a TCP proxy that can cut the
//!   way to it.
//!
//! - [`artifacts`]: archived artifacts: each cell's own prefix
//!   `artifacts/<cluster>/<namespace>/<controller>/cell-<n>/<job>/<build>/`, presigned `PUT` URLs
//!   the gateway signs for the plugin (an `s3://` store only: files go straight from the plugin to
//!   the store, not through the mite and the gateway), and listing a build's artifacts.

pub mod artifacts;
pub mod credentials;
pub mod logs;
#[cfg(feature = "testing")]
pub mod presign_check;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use artifacts::{Artifact, ArtifactKey, Artifacts, SignError, Signed};
pub use logs::{ChunkError, ChunkOutcome, Follower, LogKey, LogState, LogWriter, Logs, Notice};
pub use store::{BlobError, BlobStore, StoreError, StoreSettings, StoreUrl};
