//! The inputs both fixture tables read (tests/status_fixtures.rs, tests/build_fixtures.rs): the
//! `world` a Controller's configuration draws on and the `mite`'s state.

#![allow(dead_code)]

use optest::fixtures::{field, parse};
use serde_json::Value;
use varroa_api::ApplyResult;
use varroa_config::World;
use varroa_operator::mite::MiteState;

/// The case's `world`: the objects (profiles, classes, defaults, bundles, catalog items, pod
/// templates) its Controller's configuration is rendered from.
pub fn world(case: &Value, file: &str) -> World {
    let mut w = World::default();
    for (i, o) in case.get("world").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let what = format!("world[{i}]");
        match o.get("kind").and_then(Value::as_str) {
            Some("JenkinsVersionProfile") => w.profiles.push(parse(o, &what, file)),
            Some("ControllerClass") => w.classes.push(parse(o, &what, file)),
            Some("ProvisioningDefaults") => w.defaults = Some(parse(o, &what, file)),
            Some("ComposedBundle") => w.bundles.push(parse(o, &what, file)),
            Some("CatalogItem") => w.catalog_items.push(parse(o, &what, file)),
            Some("PodTemplate") => w.pod_templates.push(parse(o, &what, file)),
            other => panic!("{file}: {what}: kind {other:?} is not one the fixtures read"),
        }
    }
    w
}

/// The case's `mite` state (`connected`, `lost`, `lastApply`, `idleForSeconds`, `wakeRequested`);
/// none connected when absent.
pub fn mite(case: &Value, file: &str) -> MiteState {
    let Some(m) = case.get("mite").filter(|v| !v.is_null()) else { return MiteState::default() };
    MiteState {
        connected: m.get("connected").and_then(Value::as_bool).unwrap_or(false),
        lost: m.get("lost").and_then(Value::as_bool).unwrap_or(false),
        last_apply: field::<ApplyResult>(m, "lastApply", file),
        idle_for: m.get("idleForSeconds").and_then(Value::as_u64).map(std::time::Duration::from_secs),
        wake_requested: m.get("wakeRequested").and_then(Value::as_bool).unwrap_or(false),
    }
}
