//! OCI inputs, with oci-client.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE,
    OciDescriptor, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest as _, Sha256};

use crate::files::{FileSet, error_chain, hex, normalize_relative, sha256_digest, unpack_tar};
use crate::{Artifact, CacheKey, FetchOptions, Inner, OciSource, Source, SourceError};

/// The annotation naming the file a layer holds (ORAS).
const TITLE: &str = "org.opencontainers.image.title";
/// ORAS's annotation marking a layer as a packed directory.
const UNPACK: &str = "io.deis.oras.content.unpack";

/// The OCI client for `options`, or why it cannot be built.
pub(crate) fn client(options: &FetchOptions) -> Result<Client, String> {
    let config = oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::HttpsExcept(options.insecure_registries.clone()),
        // Bundles are single artifacts: an index is refused rather than resolved.
        platform_resolver: None,
        connect_timeout: Some(Duration::from_secs(30)),
        read_timeout: Some(Duration::from_secs(60)),
        user_agent: concat!("varroa-sources/", env!("CARGO_PKG_VERSION")),
        ..Default::default()
    };
    Client::try_from(config).map_err(|e| e.to_string())
}

/// Checks that `digest` is `sha256:` and 64 lower-case hex digits.
fn is_sha256_digest(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

struct Ctx {
    input: String,
}

impl Ctx {
    /// Maps a client error about `what` (`manifest for tag "x"`, `layer "y"`, ...).
    fn error(&self, what: &str, error: OciDistributionError) -> SourceError {
        let input = self.input.clone();
        let not_found =
            |detail: String| SourceError::RefNotFound { input: input.clone(), reference: what.to_string(), detail };
        let denied = |detail: String| SourceError::Unauthorized { input: input.clone(), detail };
        match error {
            OciDistributionError::DigestError(DigestError::VerificationError { expected, actual }) => {
                SourceError::DigestMismatch { input, object: what.to_string(), expected, actual }
            }
            OciDistributionError::RegistryError { envelope, url } => {
                let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
                let detail = format!("{envelope} at {url}");
                if codes.iter().any(|c| {
                    matches!(
                        c,
                        OciErrorCode::ManifestUnknown
                            | OciErrorCode::NameUnknown
                            | OciErrorCode::NotFound
                            | OciErrorCode::BlobUnknown
                            | OciErrorCode::ManifestBlobUnknown
                    )
                }) {
                    not_found(detail)
                } else if codes.iter().any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
                    denied(detail)
                } else {
                    SourceError::Unreachable { input, detail }
                }
            }
            OciDistributionError::ServerError { code, url, message } => match code {
                404 => not_found(format!("HTTP 404 at {url}: {message}")),
                401 | 403 => denied(format!("HTTP {code} at {url}: {message}")),
                _ => SourceError::Unreachable { input, detail: format!("HTTP {code} at {url}: {message}") },
            },
            OciDistributionError::ImageManifestNotFoundError(detail) => not_found(detail),
            OciDistributionError::UnauthorizedError { url } => denied(format!("HTTP 401 at {url}")),
            OciDistributionError::AuthenticationFailure(detail) => denied(detail),
            OciDistributionError::RequestError(e) => SourceError::Unreachable { input, detail: error_chain(&e) },
            other => SourceError::Unreachable { input, detail: error_chain(&other) },
        }
    }

    fn unsupported(&self, reason: String) -> SourceError {
        SourceError::Unsupported { input: self.input.clone(), reason }
    }

    fn mismatch(&self, object: &str, expected: String, actual: String) -> SourceError {
        SourceError::DigestMismatch { input: self.input.clone(), object: object.to_string(), expected, actual }
    }
}

pub(crate) async fn fetch(inner: &Arc<Inner>, source: &OciSource) -> Result<Arc<Artifact>, SourceError> {
    let ctx = Ctx { input: Source::Oci(source.clone()).to_string() };
    let invalid = |reason: String| SourceError::InvalidReference {
        input: ctx.input.clone(),
        field: "reference".to_string(),
        reason,
    };
    let text = source.reference.trim();
    let reference: Reference = text.parse().map_err(|e| {
        invalid(format!("\"{text}\" is not registry/repository:tag or registry/repository@sha256:<hex> ({e})"))
    })?;
    if let Some(digest) = reference.digest()
        && !is_sha256_digest(digest)
    {
        return Err(invalid(format!("the digest \"{digest}\" is not sha256:<64 lower-case hex digits>")));
    }
    check_registry_host(inner, &ctx, reference.resolve_registry()).await?;
    let client = inner.oci.as_ref().map_err(|e| SourceError::Unreachable {
        input: ctx.input.clone(),
        detail: format!("the OCI client could not be set up: {e}"),
    })?;
    let registry = reference.resolve_registry().to_string();
    let auth = inner
        .options
        .oci_credentials
        .get(&registry)
        .or_else(|| inner.options.oci_credentials.get(reference.registry()))
        .map(|c| RegistryAuth::Basic(c.username.clone(), c.password.clone()))
        .unwrap_or(RegistryAuth::Anonymous);

    let digest = match reference.digest() {
        Some(digest) => digest.to_string(),
        None => {
            let what = format!("manifest for tag \"{}\"", reference.tag().unwrap_or("latest"));
            let digest = client.fetch_manifest_digest(&reference, &auth).await.map_err(|e| ctx.error(&what, e))?;
            if !is_sha256_digest(&digest) {
                return Err(ctx.unsupported(format!(
                    "the registry names the manifest {digest}; only sha256 digests are supported"
                )));
            }
            digest
        }
    };
    let key = CacheKey::Oci { repository: format!("{registry}/{}", reference.repository()), digest: digest.clone() };
    if let Some(artifact) = inner.cached(&key) {
        return Ok(artifact);
    }

    let pinned = reference.clone_with_digest(digest.clone());
    let accept =
        [OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE, IMAGE_MANIFEST_LIST_MEDIA_TYPE];
    let what = format!("manifest {digest}");
    let (body, _) = client.pull_manifest_raw(&pinned, &auth, &accept).await.map_err(|e| ctx.error(&what, e))?;
    let actual = sha256_digest(&body);
    if actual != digest {
        return Err(ctx.mismatch("manifest", digest, actual));
    }
    if body.len() as u64 > inner.options.max_bytes {
        return Err(SourceError::TooLarge {
            input: ctx.input.clone(),
            limit: inner.options.max_bytes,
            detail: format!("the manifest alone is {} bytes", body.len()),
        });
    }
    let manifest = parse_manifest(&ctx, &body)?;

    let limit = inner.options.max_bytes;
    let mut stored: u64 = 0;
    for layer in &manifest.layers {
        let size = u64::try_from(layer.size).map_err(|_| {
            ctx.unsupported(format!("layer {} declares a negative size; re-push the artifact", layer.digest))
        })?;
        stored = stored.saturating_add(size);
        if stored > limit {
            return Err(SourceError::TooLarge {
                input: ctx.input.clone(),
                limit,
                detail: format!("the layers add up to at least {stored} bytes"),
            });
        }
        if !is_sha256_digest(&layer.digest) {
            return Err(ctx.unsupported(format!("layer digest \"{}\" is not a sha256 digest", layer.digest)));
        }
    }

    // Every layer is classified before anything is downloaded.
    let mut plan = Vec::with_capacity(manifest.layers.len());
    for layer in &manifest.layers {
        let annotations = layer.annotations.as_ref();
        let title = annotations.and_then(|a| a.get(TITLE));
        let unpack = annotations.and_then(|a| a.get(UNPACK)).is_some_and(|v| v == "true");
        let name = match title {
            Some(t) => format!("layer \"{t}\" ({})", layer.digest),
            None => format!("layer {}", layer.digest),
        };
        let media = layer.media_type.as_str();
        let kind = match title {
            Some(title) if !unpack => {
                let path = normalize_relative(title).map_err(|reason| SourceError::UnsafeContent {
                    input: ctx.input.clone(),
                    path: title.clone(),
                    reason: format!("{TITLE} of {name}: {reason}"),
                })?;
                if path.is_empty() {
                    return Err(ctx.unsupported(format!("{name} has an empty {TITLE}")));
                }
                LayerKind::File(path)
            }
            _ if media.contains("zstd") => {
                return Err(ctx
                    .unsupported(format!("{name} is zstd-compressed ({media}); push it uncompressed or as tar+gzip")));
            }
            _ if unpack || media.contains("tar") || media.contains("gzip") => {
                LayerKind::Tree { gzip: media.ends_with("gzip") }
            }
            _ => {
                return Err(ctx.unsupported(format!(
                    "{name} of media type {media} has no {TITLE} annotation and is not a tar \
                     archive; push files with `oras push` (which names each one) or a tar layer"
                )));
            }
        };
        plan.push((name, kind, layer));
    }

    let mut layers = Vec::with_capacity(plan.len());
    for (name, kind, layer) in plan {
        let data = pull_layer(&ctx, client, &pinned, layer, &name).await?;
        layers.push((name, kind, data));
    }

    // Unpacking and hashing are CPU work: off the async threads.
    let input = ctx.input.clone();
    let artifact =
        tokio::task::spawn_blocking(move || assemble(&input, limit, digest, layers)).await.map_err(|e| {
            SourceError::Unreachable { input: ctx.input.clone(), detail: format!("the unpacking task stopped: {e}") }
        })??;
    Ok(inner.store(key, artifact))
}

/// Refuses a registry whose host is or resolves to a refused address (see net.rs), unless it is
/// allowed. Checked before the first request; see net.rs for what this cannot see.
async fn check_registry_host(inner: &Inner, ctx: &Ctx, registry: &str) -> Result<(), SourceError> {
    let (host, port) = split_host_port(registry);
    let insecure = inner.options.insecure_registries.iter().any(|r| r == registry);
    let port = port.unwrap_or(if insecure { 80 } else { 443 });
    inner.policy.check(&ctx.input, host, port).await
}

/// `host`, `host:port`, `[v6]` or `[v6]:port` as host and port.
fn split_host_port(registry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = registry.strip_prefix('[')
        && let Some((host, after)) = rest.split_once(']')
    {
        return (host, after.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match registry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (registry, None),
        },
        _ => (registry, None),
    }
}

/// How a layer becomes files.
enum LayerKind {
    /// One file at this path (ORAS).
    File(String),
    /// A tar archive, gzip-compressed if the media type says so (or the bytes do).
    Tree { gzip: bool },
}

/// The artifact made of downloaded, verified layers.
fn assemble(
    input: &str,
    limit: u64,
    revision: String,
    layers: Vec<(String, LayerKind, Vec<u8>)>,
) -> Result<Artifact, SourceError> {
    let mut set = FileSet::new(input, limit);
    for (name, kind, data) in layers {
        match kind {
            LayerKind::File(path) => {
                set.reserve(&path, data.len() as u64)?;
                set.insert(path, data)?;
            }
            LayerKind::Tree { gzip } => {
                let gzip = gzip || data.starts_with(&[0x1f, 0x8b]);
                unpack_tar(&mut set, &name, &data, gzip)?;
            }
        }
    }
    Ok(Artifact::new(revision, set.files))
}

/// Parses an image manifest, refusing an index with a useful message.
fn parse_manifest(ctx: &Ctx, body: &[u8]) -> Result<OciImageManifest, SourceError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| ctx.unsupported(format!("the manifest is not JSON ({e})")))?;
    let media_type = value.get("mediaType").and_then(|m| m.as_str());
    if value.get("manifests").is_some()
        || matches!(media_type, Some(OCI_IMAGE_INDEX_MEDIA_TYPE | IMAGE_MANIFEST_LIST_MEDIA_TYPE))
    {
        return Err(ctx.unsupported(
            "the reference names an image index (multi-platform); reference one artifact \
             manifest, as `oras push` produces"
                .to_string(),
        ));
    }
    serde_json::from_value(value)
        .map_err(|e| ctx.unsupported(format!("the manifest is not an OCI image manifest ({e})")))
}

/// Downloads one layer, checking its size and sha256 against its descriptor.
async fn pull_layer(
    ctx: &Ctx,
    client: &Client,
    pinned: &Reference,
    layer: &OciDescriptor,
    name: &str,
) -> Result<Vec<u8>, SourceError> {
    // Foreign-layer URLs would send the request elsewhere: only the registry is asked.
    let descriptor = OciDescriptor { urls: None, ..layer.clone() };
    let size = u64::try_from(layer.size).unwrap_or(0);
    let mut stream = client.pull_blob_stream(pinned, &descriptor).await.map_err(|e| ctx.error(name, e))?;
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    let mut hasher = Sha256::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| match e.get_ref().and_then(|inner| inner.downcast_ref::<DigestError>()) {
            Some(DigestError::VerificationError { expected, actual }) => {
                ctx.mismatch(name, expected.clone(), actual.clone())
            }
            _ => SourceError::Unreachable {
                input: ctx.input.clone(),
                detail: format!("downloading {name}: {}", error_chain(&e)),
            },
        })?;
        if data.len() as u64 + chunk.len() as u64 > size {
            return Err(ctx.mismatch(
                name,
                format!("{} ({size} bytes)", layer.digest),
                format!("more than {size} bytes"),
            ));
        }
        hasher.update(&chunk);
        data.extend_from_slice(&chunk);
    }
    let actual = format!("sha256:{}", hex(&hasher.finalize()));
    if actual != layer.digest {
        return Err(ctx.mismatch(name, layer.digest.clone(), actual));
    }
    if data.len() as u64 != size {
        return Err(ctx.mismatch(name, format!("{size} bytes"), format!("{} bytes", data.len())));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    #[test]
    fn registries_split_into_host_and_port() {
        use super::split_host_port;
        assert_eq!(split_host_port("ghcr.io"), ("ghcr.io", None));
        assert_eq!(split_host_port("127.0.0.1:5000"), ("127.0.0.1", Some(5000)));
        assert_eq!(split_host_port("[::1]:5000"), ("::1", Some(5000)));
        assert_eq!(split_host_port("[::1]"), ("::1", None));
    }
}
