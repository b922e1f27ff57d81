//! The build step of a preview, table-driven from YAML fixtures (issue 14): no API server, no
//! cluster, only `vesper_operator::desired::build`, the pure function that makes every object of
//! a preview. Every file under `tests/fixtures/build/` is one case; adding a file adds a case.
//!
//! A fixture holds the inputs: `flags` (the operator's flags, parsed as the binary parses them),
//! `clusterAddresses` (`hosts`, `podCidrs`: what the operator watches), the preview namespace's
//! name and the PreviewEnvironment. Then one of:
//! - `expect.desired`: compared as a subset of the built objects (`namespace`, `quota`,
//!   `limits`, `networkPolicy`, `deployment`, `service`, `ingress`; `null` means absent, lists of
//!   named entries are matched by name) and `expect.url`, when given, the preview's URL (`null`:
//!   none);
//! - `expect.error`: fragments the build's error must contain (a spec Kubernetes would refuse).
//!
//! Coverage:
//!
//! | Case | Fixture |
//! |---|---|
//! | every object, with a preview domain: labels, Pod Security, quota for 2 x replicas + 1 pods, isolation, restricted pod, Service, Ingress and URL | every-object-with-a-domain |
//! | no preview domain: no Ingress, no URL | no-preview-domain |
//! | the spec's resources, replicas, env, args and readiness path; quota capped by the flags | resources-replicas-and-probe |
//! | the flags: ingress class, TLS Secret, ingress namespace, defaults and maxima | flags-reach-the-objects |
//! | a quantity Kubernetes refuses: an error naming the field, nothing built | invalid-quantity |

use clap::Parser;
use optest::fixtures::{every_case, field, subset, text};
use serde_json::{Value, json};
use std::path::Path;
use vesper_api::PreviewEnvironment;
use vesper_operator::hostaddresses::ClusterAddresses;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    config: vesper_operator::Config,
}

fn addresses(case: &Value, file: &str) -> ClusterAddresses {
    let list = |key: &str| -> Vec<String> {
        case.get("clusterAddresses").and_then(|a| a.get(key)).map_or_else(Vec::new, |v| {
            serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{file}: clusterAddresses.{key}: {e}"))
        })
    };
    ClusterAddresses {
        hosts: list("hosts").iter().map(|h| h.parse().unwrap_or_else(|e| panic!("{file}: host {h}: {e}"))).collect(),
        pod_cidrs: list("podCidrs")
            .iter()
            .map(|c| c.parse().unwrap_or_else(|e| panic!("{file}: CIDR {c}: {e:?}")))
            .collect(),
    }
}

fn differences(case: &Value, file: &str) -> Vec<String> {
    let flags: Vec<String> = field(case, "flags", file).unwrap_or_default();
    let config = Flags::try_parse_from(std::iter::once("vesper-operator".to_string()).chain(flags))
        .unwrap_or_else(|e| panic!("{file}: the flags do not parse: {e}"))
        .config;
    let pe: PreviewEnvironment =
        field(case, "previewEnvironment", file).unwrap_or_else(|| panic!("{file}: `previewEnvironment` is required"));
    let namespace = text(case, "namespace", file);
    let expect = case.get("expect").unwrap_or_else(|| panic!("{file}: `expect` is required"));
    let mut diffs = vec![];
    match vesper_operator::desired::build(&pe, &config, namespace, &addresses(case, file)) {
        Ok(desired) => {
            let Some(want) = expect.get("desired") else {
                return vec![format!(
                    "built every object, but the fixture expects an error: {:?}",
                    expect.get("error")
                )];
            };
            let got = serde_json::to_value(&desired).expect("the objects serialize");
            subset("desired", want, &got, &mut diffs);
            if let Some(url) = expect.get("url") {
                subset("url", url, &json!(desired.url()), &mut diffs);
            }
        }
        Err(e) => {
            let message = e.to_string();
            let Some(fragments) = expect.get("error").and_then(Value::as_array) else {
                return vec![format!("the build failed: {message}")];
            };
            for f in fragments.iter().filter_map(Value::as_str) {
                if !message.contains(f) {
                    diffs.push(format!("error: expected to contain {f:?}, got {message:?}"));
                }
            }
        }
    }
    diffs
}

#[test]
fn every_build_fixture_holds() {
    every_case(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/build"), 5, differences);
}
