//! Fetching a controller's Git and OCI bundle inputs into the [`World`] it is rendered from (the
//! operator keeps the last good revision when a fetch fails; `render` reports the failure).

use varroa_api::{BundleInput, Controller};
use varroa_config::World;
use varroa_config::render::FetchedInput;
use varroa_sources::AddressRange;

use crate::Config;

/// The operator's fetcher: the limits of the `--fetch-*` flags (byte cap, time-out, refused
/// hosts), no on-disk cache.
pub fn fetcher(config: &Config) -> varroa_sources::Fetcher {
    varroa_sources::Fetcher::new(config.fetch_options(), None)
}

/// The addresses of the API server at `host` (the host of the operator's cluster URL, or
/// `KUBERNETES_SERVICE_HOST` in a pod), which bundle inputs may never reach: the address itself,
/// or every address a name resolves to (none when it does not resolve).
pub async fn api_server_addresses(host: &str) -> Vec<AddressRange> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Vec::new();
    }
    if let Ok(ip) = host.parse() {
        return vec![AddressRange::single(ip)];
    }
    match tokio::net::lookup_host((host, 443)).await {
        Ok(addrs) => {
            let mut out: Vec<AddressRange> = addrs.map(|a| AddressRange::single(a.ip())).collect();
            out.dedup();
            out
        }
        Err(e) => {
            tracing::warn!(host, error = %e, "cannot resolve the API server's name; add its addresses to --fetch-denied-addresses");
            Vec::new()
        }
    }
}

/// The source a bundle input names, if it is a remote one.
pub fn source_of(input: &BundleInput) -> Option<varroa_sources::Source> {
    match (&input.git, &input.oci) {
        (Some(g), _) => Some(varroa_sources::Source::Git(varroa_sources::GitSource {
            url: g.url.clone(),
            reference: g.reference.clone(),
            path: g.path.clone().unwrap_or_default(),
        })),
        (None, Some(o)) => {
            Some(varroa_sources::Source::Oci(varroa_sources::OciSource { reference: o.reference.clone() }))
        }
        _ => None,
    }
}

/// Fetches every remote input `c`'s bundle needs that `world` does not hold yet. With
/// `keep_last_good`, a failed fetch falls back to the last good artifact and records the error
/// beside it.
pub async fn fetch_inputs(fetcher: &varroa_sources::Fetcher, c: &Controller, world: &mut World, keep_last_good: bool) {
    for input in varroa_config::remote_inputs(c, world) {
        let key = varroa_config::compose::describe_input(&input);
        let Some(source) = source_of(&input) else { continue };
        if world.fetched.contains_key(&key) {
            continue;
        }
        let (artifact, error) = if keep_last_good {
            let f = fetcher.fetch_or_last_good(&source).await;
            (f.artifact, f.error)
        } else {
            match fetcher.fetch(&source).await {
                Ok(a) => (Some(a), None),
                Err(e) => (None, Some(e)),
            }
        };
        let value = match (artifact, error) {
            (Some(a), err) => Ok(FetchedInput {
                revision: a.revision.clone(),
                files: a.files.clone(),
                stale_error: err.map(|e| e.to_string()),
            }),
            (None, Some(e)) => Err(e.to_string()),
            (None, None) => Err("not fetched".to_string()),
        };
        world.fetched.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn api_server_addresses_from_a_literal_or_a_name() {
        assert_eq!(super::api_server_addresses("10.96.0.1").await, vec!["10.96.0.1".parse().expect("range")]);
        assert_eq!(super::api_server_addresses("[::1]").await, vec!["::1".parse().expect("range")]);
        assert!(
            super::api_server_addresses("localhost").await.iter().any(|r| r.contains("127.0.0.1".parse().expect("ip")))
        );
        assert!(super::api_server_addresses("").await.is_empty());
    }
}
