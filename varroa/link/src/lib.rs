//! The control link's shared shapes, used by both ends and by whoever reads the state:
//!
//! - [`proto::v1`]: the gRPC protocol between the mite (client) and the gateway (server),
//!   generated from the checked-in `proto/varroa/link/v1/link.proto` (no `protoc` needed: the
//!   build compiles it with `protox`). Both the client (`MiteLinkClient`) and the server
//!   (`MiteLinkServer`, `MiteLink`) are generated.
//! - [`client`]: the mite's gRPC channel to the gateway (mutual TLS, keepalive).
//! - [`kv`]: the JetStream key-value buckets `varroa_mites` (written by the gateway, read by the
//!   operator and the BFF) and `varroa_desired` (written by the operator, watched by the
//!   gateway): bucket names and settings, key encoding, and the JSON entries.
//! - [`builds`]: build events (plugin -> mite -> gateway -> `varroa_builds` -> recorder): their
//!   JSON shapes and validation, the stream's settings and subjects.
//! - [`claims`]: build claims (plugin -> mite -> gateway -> the ledger over NATS request/reply):
//!   the plugin's request and answer, the ledger's request and answer, the budget rule.
//! - [`artifacts`]: archived artifacts (plugin -> mite -> gateway for presigned upload URLs, then
//!   plugin -> the blob store): the plugin's request, the path rules, the answer.
//! - [`activity`]: activity events and their subjects (`activity.<cluster>.<ns>.<ctrl>`).
//! - [`nats`]: connecting to NATS with a credential re-read from a file on every (re)connect,
//!   so a rotated password needs no restart (every Varroa component connects this way).
//! - `testing` (cargo feature `testing`): a real `nats-server` with JetStream for tests.
//!
//! Keeping these in one small crate means the mite, the gateway and the operator cannot disagree
//! on a field name, a key layout or a bucket setting.

pub mod activity;
pub mod artifacts;
pub mod builds;
pub mod claims;
pub mod client;
pub mod kv;
pub mod nats;
#[cfg(feature = "testing")]
pub mod testing;

pub mod proto {
    //! The gRPC protocol, generated from `proto/varroa/link/v1/link.proto`.
    #[allow(clippy::all, missing_docs)]
    pub mod v1 {
        tonic::include_proto!("varroa.link.v1");
    }
}

/// The codes of `GatewayMessage.Error`, sent just before the gateway ends a stream.
pub mod error_codes {
    /// A newer stream for the same controller cell took over (the mite need not reconnect at
    /// once: the newer stream is probably its own).
    pub const REPLACED: &str = "replaced";
    /// The gateway replica is stopping: dial again (the Service sends the mite to another).
    pub const SHUTTING_DOWN: &str = "shutting_down";
    /// The gateway heard nothing for three heartbeat intervals.
    pub const HEARTBEAT_TIMEOUT: &str = "heartbeat_timeout";
}

/// The largest gRPC message either end accepts, in bytes (a Desired configuration with every
/// JCasC file is the largest message; it is also bounded by [`kv::DESIRED_MAX_VALUE_BYTES`]).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
