//! opkit: the plumbing the Vesper and Varroa operators share.
//!
//! Each module mirrors a behaviour Kubernetes users already know, so that our operators act as
//! controllers written with client-go and controller-runtime do:
//!
//! - [`leader`]: Lease-based leader election (client-go `leaderelection` with a `LeaseLock`);
//! - [`health`]: `/healthz`, `/readyz` and Prometheus `/metrics` on one port;
//! - [`conditions`]: `status.conditions` as the API conventions define them
//!   (apimachinery's `meta.SetStatusCondition`);
//! - [`events`]: `events.k8s.io/v1` Events through kube's `Recorder`;
//! - [`client`]: the API client, counting its requests by verb and resource;
//! - [`cache`]: watch caches of owned objects (reflector stores, metadata-only where the content
//!   is not read), the hints of the compare-then-write;
//! - [`apply`]: compare-then-write of owned objects with server-side apply;
//! - [`checkpoint`]: what a process verified, carried over to the next one across a restart;
//! - [`process`]: signals, health, leader election and shutdown of an operator process, and
//!   the API client's timeouts;
//! - [`reconcile`]: the wrapper around every reconcile (span, time limit, metrics, back-off) and
//!   the [`reconcile::Kit`] each reconcile writes with;
//! - [`status`]: the typed status writer;
//! - [`clock`]: the time, which tests can move forward;
//! - [`error`]: the error type of all of them.
//!
//! Everything talks to the cluster through a `kube::Client`, so the tests run against
//! devcluster exactly as production runs against a real API server.

pub mod apply;
pub mod cache;
pub mod checkpoint;
pub mod client;
pub mod clock;
pub mod conditions;
pub mod error;
pub mod events;
pub mod health;
pub mod leader;
pub mod process;
pub mod reconcile;
pub mod status;

pub use error::{Error, Result};

/// The exact crates opkit's signatures use, for callers that want the same versions.
pub use k8s_openapi;
pub use kube;
pub use prometheus_client;
