//! The CRD reference page: checked in without drift from the types, and naming what the schema
//! enforces.

use std::path::PathBuf;

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(vesper_api::reference::PATH)
}

/// The generated reference and docs/vesper/crd-reference.md agree. `UPDATE_CRDS=1 cargo test`
/// rewrites it (as tests/crd.rs does for deploy/vesper/crd.yaml).
#[test]
fn checked_in_reference_has_not_drifted() {
    let generated = vesper_api::reference_markdown();
    if std::env::var("UPDATE_CRDS").is_ok_and(|v| v == "1") {
        std::fs::write(checked_in(), &generated).expect("write docs/vesper/crd-reference.md");
    }
    let on_disk = std::fs::read_to_string(checked_in()).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/vesper/crd-reference.md differs from the types in vesper/api: run `UPDATE_CRDS=1 cargo nextest run -p vesper-api --test reference` and commit the result"
    );
}

/// Every field, rule message, column and short name of the CRD is on the page; the output is the
/// same every time.
#[test]
fn the_reference_covers_the_schema() {
    let page = vesper_api::reference_markdown();
    assert_eq!(page, vesper_api::reference_markdown(), "deterministic");
    for field in [
        "spec.image",
        "spec.ttl",
        "spec.replicas",
        "spec.port",
        "spec.env",
        "spec.env[].name",
        "spec.env[].value",
        "spec.args",
        "spec.resources",
        "spec.resources.limits",
        "spec.readinessPath",
        "status.phase",
        "status.conditions",
        "status.conditions[].reason",
        "status.url",
        "status.expiresAt",
        "status.namespace",
        "status.observedGeneration",
        "status.resolvedImage",
        "status.readyReplicas",
    ] {
        assert!(page.contains(&format!("### `{field}`\n")), "no section for {field}");
    }
    for text in [
        vesper_api::IMAGE_MESSAGE,
        vesper_api::TTL_MESSAGE,
        vesper_api::IMAGE_RULE,
        vesper_api::TTL_RULE,
        "env names must be unique",
        "| Phase | `string` | `.status.phase` |",
        "| Expires | `string` | `.status.expiresAt` |",
        "`preview`, `pe`",
        "| Scope | Namespaced |",
        "`vesper.eventide.dev/v1alpha1`",
        "Default: `\"24h\"`",
        "Range: 0 to 5",
        "Range: 1 to 65535",
        "One of: `Pending`, `Ready`, `Failed`, `Expired`",
        "List type: `map`, one item per `type`",
    ] {
        assert!(page.contains(text), "the page lacks {text:?}");
    }
    let sections: Vec<&str> = page.lines().filter(|l| l.starts_with("### `")).collect();
    let mut sorted_within_parent = true;
    for pair in sections.windows(2) {
        let (a, b) = (pair[0].trim_start_matches("### "), pair[1].trim_start_matches("### "));
        let parent = |s: &str| s.rsplit_once('.').map(|(p, _)| p.to_string()).unwrap_or_default();
        if parent(a) == parent(b) && a > b {
            sorted_within_parent = false;
        }
    }
    assert!(sorted_within_parent, "fields follow the schema's order:\n{}", sections.join("\n"));
}
