//! The errors of a fetch: each names the input and says what to do about it.

/// Why a Git or OCI input could not be fetched.
///
/// Every message starts with the input (`git <url> ref <ref> path <path>` or `oci <reference>`,
/// see [`crate::Source`]'s `Display`) and ends with the fix. The fields are plain strings so that
/// the error can be cloned into a status condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The input itself is malformed: a URL, ref name, path or OCI reference with bad syntax.
    #[error("{input}: invalid {field}: {reason}; correct the {field} of this input in the bundle")]
    InvalidReference {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// Which field is wrong: `url`, `ref`, `path` or `reference`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The Git branch, tag or commit, or the OCI repository, tag or manifest does not exist.
    #[error(
        "{input}: {reference} not found ({detail}); push it, or point the input at an existing \
         branch, tag, commit or manifest"
    )]
    RefNotFound {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// What was looked for, e.g. `ref "v1"` or `manifest for tag "latest"`.
        reference: String,
        /// What the server said, or how the lookup was done.
        detail: String,
    },

    /// The Git `path` is not a directory at the resolved commit.
    #[error(
        "{input}: path \"{path}\" is not a directory at commit {revision}; fix the input's `path` \
         (\"\" is the repository root) or add the directory to the repository"
    )]
    PathNotFound {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// The normalized path that was looked up.
        path: String,
        /// The commit the ref resolved to.
        revision: String,
    },

    /// Content does not match the digest that names it: an OCI manifest fetched by digest, or a
    /// blob whose bytes do not hash to its descriptor's digest.
    #[error(
        "{input}: digest mismatch for {object}: expected {expected}, got {actual}; the content \
         was altered in storage or in transit: re-push the artifact, or fix the digest in the \
         reference"
    )]
    DigestMismatch {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// What was verified, e.g. `manifest` or `layer "jenkins.yaml"`.
        object: String,
        /// The digest (or size) it should have.
        expected: String,
        /// The digest (or size) it had.
        actual: String,
    },

    /// The content, or the transfer that brings it, is larger than
    /// [`crate::FetchOptions::max_bytes`]. A transfer that passes the limit is stopped there.
    #[error(
        "{input}: content exceeds the limit of {limit} bytes ({detail}); make the input smaller \
         (a directory with only the configuration, a smaller artifact), or raise the limit \
         (max_bytes; varroa-operator --fetch-max-bytes)"
    )]
    TooLarge {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// The limit in force, in bytes.
        limit: u64,
        /// What went over it.
        detail: String,
    },

    /// The content holds a path that would leave the input: a symlink pointing outside `path`,
    /// or an archive entry with an absolute path or `..`.
    #[error("{input}: refusing \"{path}\": {reason}; remove it from the input")]
    UnsafeContent {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// The offending path inside the input.
        path: String,
        /// Why it is refused.
        reason: String,
    },

    /// The content exists but is not in a form this crate reads (an image index, a layer that is
    /// neither a titled file nor a tar archive, a file name that is not UTF-8, ...).
    #[error("{input}: unsupported content: {reason}")]
    Unsupported {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// What is unsupported, and what to push instead.
        reason: String,
    },

    /// The server refused access.
    #[error(
        "{input}: access denied ({detail}); configure credentials for this registry or \
         repository, or check that they are still valid"
    )]
    Unauthorized {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// What the server said.
        detail: String,
    },

    /// The server could not be reached or answered with an error: DNS, TCP, TLS, HTTP 5xx,
    /// protocol errors, time-outs.
    #[error("{input}: cannot fetch ({detail}); check the URL, the network and the server, then retry")]
    Unreachable {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// The transport's error.
        detail: String,
    },

    /// The fetch did not finish within [`crate::FetchOptions::timeout`]; the transfer was stopped
    /// and its connection closed.
    #[error(
        "{input}: no result within the {limit:?} limit ({detail}); the transfer was stopped: \
         check that the server answers and the input is small, then retry, or raise the limit \
         (timeout; varroa-operator --fetch-timeout)"
    )]
    TimedOut {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// The limit in force.
        limit: std::time::Duration,
        /// Where the fetch was when the limit passed.
        detail: String,
    },

    /// The input's host is, or resolves to, an address a fetch may not reach: loopback,
    /// link-local, the cloud metadata service, an unspecified address, an address listed in
    /// [`crate::FetchOptions::denied_addresses`] (the Kubernetes API server), or the operator's own
    /// file system (`file://` URLs and paths).
    #[error(
        "{input}: refusing to fetch from {host}: {reason}; point the input at a public server, \
         or, if it is trusted, allow it: the host in allowed_hosts (varroa-operator \
         --fetch-allowed-hosts), or every private host and local path with allow_private_hosts \
         (varroa-operator --fetch-allow-private-hosts)"
    )]
    HostRefused {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// The host as written in the input; `the local file system` for `file://` URLs and
        /// paths.
        host: String,
        /// Why it is refused, naming the address, e.g. `it resolves to 127.0.0.1, a loopback
        /// address`.
        reason: String,
    },

    /// The local on-disk cache could not be used.
    #[error(
        "{input}: local cache error ({detail}); check that the cache directory exists and is \
         writable"
    )]
    Cache {
        /// The input, as displayed by [`crate::Source`].
        input: String,
        /// The file system or repository error.
        detail: String,
    },
}

impl SourceError {
    /// The input the error is about, as displayed by [`crate::Source`].
    pub fn input(&self) -> &str {
        match self {
            SourceError::InvalidReference { input, .. }
            | SourceError::RefNotFound { input, .. }
            | SourceError::PathNotFound { input, .. }
            | SourceError::DigestMismatch { input, .. }
            | SourceError::TooLarge { input, .. }
            | SourceError::UnsafeContent { input, .. }
            | SourceError::Unsupported { input, .. }
            | SourceError::Unauthorized { input, .. }
            | SourceError::Unreachable { input, .. }
            | SourceError::TimedOut { input, .. }
            | SourceError::HostRefused { input, .. }
            | SourceError::Cache { input, .. } => input,
        }
    }

    /// Whether retrying the same input unchanged may succeed (network, server or cache
    /// trouble), as opposed to errors that need the input or the published content fixed.
    pub fn is_transient(&self) -> bool {
        matches!(self, SourceError::Unreachable { .. } | SourceError::TimedOut { .. } | SourceError::Cache { .. })
    }
}
