//! `extend NAME --by 2h` or `extend NAME --ttl 36h`: a new TTL, counted (like every TTL) from
//! the preview's creation, so that its expiry moves. The 7-day bound is checked here first, with
//! the latest possible expiry in the message; what the API server still refuses (422) is shown
//! as it says it. The TTL is changed with a merge patch conditional on the resourceVersion read,
//! retried when the preview changed in between.
//!
//! `extend` never shortens: a `--ttl` shorter than the current one is refused (it would move the
//! expiry earlier, possibly into the past, and the operator would delete the preview), with the
//! command that does shorten (`vesperctl apply NAME --ttl ...`, which says so). A `--ttl` equal
//! to the current one changes nothing and succeeds.

use crate::cli::ExtendArgs;
use crate::client::{Previews, Target};
use crate::error::{Error, Result};
use crate::preview::{self, MANAGER, resource_name};
use clikit::apierror::code;
use clikit::timefmt;
use jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use std::time::Duration;
use vesper_api::ttl as bounds;
use vesper_api::{PreviewEnvironment, Ttl};

/// How many times a patch that lost a race is tried again.
const ATTEMPTS: usize = 5;

/// The new TTL for a preview, or why not.
pub fn new_ttl(pe: &PreviewEnvironment, by: Option<Duration>, ttl: Option<Duration>, now: Timestamp) -> Result<Ttl> {
    let name = kube::ResourceExt::name_any(pe);
    let created = pe
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .ok_or_else(|| Error::Failed(format!("preview {name:?} has no creation time")))?;
    let plus = |d: Duration| {
        created.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)).unwrap_or(Timestamp::MAX)
    };
    let latest = plus(bounds::MAX);
    let (wanted, what) = match (by, ttl) {
        (Some(by), _) => {
            let current = pe.ttl().map_err(|e| {
                Error::Failed(format!("preview {name:?} has an unreadable ttl: {e}; set one with --ttl"))
            })?;
            if by.is_zero() {
                return Err(Error::Failed("--by must be longer than 0 (e.g. --by 2h)".into()));
            }
            (current.duration() + by, format!("by {}", timefmt::exact(by)))
        }
        (None, Some(t)) => {
            if let Ok(current) = pe.ttl()
                && t < current.duration()
            {
                return Err(Error::Failed(format!(
                    "cannot extend preview {name:?} to a ttl of {}: its ttl is {current} already, and extend never \
                     shortens one; to shorten it (its expiry moves earlier), run `vesperctl apply {name} --ttl {}`",
                    timefmt::exact(t),
                    timefmt::exact(t)
                )));
            }
            (t, format!("to a ttl of {}", timefmt::exact(t)))
        }
        (None, None) => return Err(Error::Failed("say how: --by DURATION or --ttl TTL".into())),
    };
    if wanted.as_secs() % 60 != 0 {
        return Err(Error::Failed(format!(
            "cannot extend preview {name:?} {what}: a ttl is a whole number of minutes (e.g. 90m, 36h, 7d)"
        )));
    }
    if wanted > bounds::MAX {
        let room = timefmt::since(latest, plus(pe.ttl().map(|t| t.duration()).unwrap_or(Duration::ZERO)));
        let hint = if room.is_zero() {
            "it already has the longest ttl: create a new preview to keep one running".to_string()
        } else {
            format!("extend it by at most {} (or --ttl 7d)", timefmt::exact(room))
        };
        return Err(Error::Failed(format!(
            "cannot extend preview {name:?} {what}: its ttl would be {}, counted from its creation at {}, past the 7-day limit; \
             the latest it can expire is {}: {hint}",
            timefmt::exact(wanted),
            timefmt::moment(created),
            timefmt::moment(latest)
        )));
    }
    if wanted < bounds::MIN {
        return Err(Error::Failed(format!(
            "cannot set the ttl of preview {name:?} to {}: the shortest is 1m",
            timefmt::exact(wanted)
        )));
    }
    if plus(wanted) <= now {
        return Err(Error::Failed(format!(
            "a ttl of {} would have made preview {name:?} expire at {}, which has passed (it is {} old): \
             give a longer ttl, or delete it with `vesperctl delete {name}`",
            timefmt::exact(wanted),
            timefmt::moment(plus(wanted)),
            timefmt::age(timefmt::since(now, created))
        )));
    }
    Ttl::from_duration(wanted).map_err(|e| Error::Failed(format!("cannot extend preview {name:?} {what}: {e}")))
}

pub async fn run(t: &Target, args: ExtendArgs) -> Result<()> {
    let name = &args.name;
    let api = t.previews();
    for _ in 0..ATTEMPTS {
        let pe = preview::get(t, name).await?;
        if pe.metadata.deletion_timestamp.is_some() {
            return Err(Error::Failed(format!(
                "preview {name:?} is being deleted ({}): it cannot be extended",
                preview::summary(&pe)
            )));
        }
        let ttl = new_ttl(&pe, args.by, args.ttl, Timestamp::now())?;
        let patch = json!({
            "metadata": {"resourceVersion": pe.metadata.resource_version},
            "spec": {"ttl": ttl.to_string()},
        });
        let pp = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
        match api.patch(name, &pp, &Patch::Merge(&patch)).await {
            Ok(after) => {
                let expiry = preview::expires_at(&after)
                    .map(|at| {
                        format!("{} (in {})", timefmt::moment(at), timefmt::until(timefmt::since(at, Timestamp::now())))
                    })
                    .unwrap_or_default();
                let verb = if pe.ttl().is_ok_and(|old| old == ttl) { "unchanged" } else { "extended" };
                outln!("{} {verb}: ttl {ttl}, expires {expiry}", resource_name(name));
                return Ok(());
            }
            Err(e) if code(&e) == Some(409) => continue,
            Err(e) => return Err(preview::request_error(t, name, "extending", e)),
        }
    }
    Err(Error::Failed(format!("preview {name:?} kept changing while extending it ({ATTEMPTS} tries): try again")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pe(created: &str, ttl: &str) -> PreviewEnvironment {
        serde_json::from_value(json!({
            "apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
            "metadata": {"name": "pr-1", "creationTimestamp": created},
            "spec": {"image": "app:1", "ttl": ttl},
        }))
        .unwrap()
    }

    #[test]
    fn extends_from_creation_within_seven_days() {
        let now: Timestamp = "2026-01-01T10:00:00Z".parse().unwrap();
        let p = pe("2026-01-01T00:00:00Z", "24h");
        let h = |n: u64| Duration::from_secs(n * 3600);
        assert_eq!(new_ttl(&p, Some(h(2)), None, now).unwrap().to_string(), "26h");
        assert_eq!(new_ttl(&p, None, Some(h(36)), now).unwrap().to_string(), "36h");
        assert_eq!(new_ttl(&p, Some(h(144)), None, now).unwrap().to_string(), "7d");
        let e = new_ttl(&p, Some(h(145)), None, now).unwrap_err().to_string();
        assert!(e.contains("past the 7-day limit"), "{e}");
        assert!(e.contains("2026-01-08 00:00:00 UTC"), "{e}");
        assert!(e.contains("extend it by at most 6d"), "{e}");
        let e = new_ttl(&p, None, Some(h(8 * 24)), now).unwrap_err().to_string();
        assert!(e.contains("past the 7-day limit"), "{e}");
        let e = new_ttl(&p, None, Some(h(5)), now).unwrap_err().to_string();
        assert!(e.contains("never shortens") && e.contains("vesperctl apply pr-1 --ttl 5h"), "{e}");
        let e = new_ttl(&p, None, Some(Duration::from_secs(60)), now).unwrap_err().to_string();
        assert!(e.contains("its ttl is 1d already, and extend never shortens"), "{e}");
        assert_eq!(new_ttl(&p, None, Some(h(24)), now).unwrap().to_string(), "1d", "the same ttl: unchanged");
        let unreadable = pe("2026-01-01T00:00:00Z", "soon");
        let e = new_ttl(&unreadable, None, Some(h(5)), now).unwrap_err().to_string();
        assert!(e.contains("which has passed"), "{e}");
        assert!(new_ttl(&p, Some(Duration::from_secs(90)), None, now).is_err());
        let full = pe("2026-01-01T00:00:00Z", "7d");
        let e = new_ttl(&full, Some(h(1)), None, now).unwrap_err().to_string();
        assert!(e.contains("already has the longest ttl"), "{e}");
    }
}
