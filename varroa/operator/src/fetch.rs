//! Fetching a controller's Git and OCI bundle inputs into the [`World`] it is rendered from (the
//! operator keeps the last good revision when a fetch fails; `render` reports the failure).

use varroa_api::{BundleInput, Controller};
use varroa_config::World;
use varroa_config::render::FetchedInput;

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
