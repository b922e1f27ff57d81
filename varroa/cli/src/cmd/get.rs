//! `get controllers [NAME] [-A] [-o wide|json|yaml|name]`: a table (NAME, PHASE, ATTENTION,
//! READY, AGE; NAMESPACE first with -A; `-o wide` adds CLASS, PROFILE and RECONCILED), or the
//! objects as stored (without `managedFields`, as kubectl shows them; several are a `v1` List).
//!
//! ATTENTION is derived from the status by [`varroa_api::attention`], so it is right even
//! before the operator writes `status.attention`. READY is ready cells of desired ones, desired
//! being the resolved `cells` setting (controller, class, defaults), else 1.

use crate::cli::{GetArgs, Output};
use crate::client::Target;
use crate::controller::{self, resource_name};
use crate::error::{Error, Result};
use clikit::output::{self, Format};
use clikit::table::Table;
use clikit::timefmt;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;
use varroa_api::{Controller, ControllerClass, ProvisioningDefaults};

/// Run `get`.
pub async fn run(t: &Target, args: GetArgs) -> Result<()> {
    let (items, single) = match &args.name {
        Some(name) => (vec![controller::get(t, name).await?], true),
        None => (list(t, args.all_namespaces).await?, false),
    };
    if items.is_empty() && matches!(args.output, None | Some(Output::Wide)) {
        let where_ = if args.all_namespaces { "any namespace".into() } else { format!("namespace {}", t.namespace) };
        eprintln!("No controllers found in {where_}.");
        return Ok(());
    }
    let cells = if matches!(args.output, None | Some(Output::Wide)) { resolved_cells(t, &items).await } else { vec![] };
    out!("{}", render(&items, &cells, args.output, args.all_namespaces, single, Timestamp::now())?);
    Ok(())
}

async fn list(t: &Target, all_namespaces: bool) -> Result<Vec<Controller>> {
    let api: Api<Controller> =
        if all_namespaces { Api::all(t.client.clone()) } else { Api::namespaced(t.client.clone(), &t.namespace) };
    let where_ = if all_namespaces { "every namespace".to_string() } else { format!("namespace {}", t.namespace) };
    let mut items = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) if clikit::apierror::code(&e) == Some(404) => return Err(controller::crd_missing(t)),
        Err(e) => return Err(Error::kube(format!("listing controllers in {where_}"))(e)),
    };
    items.sort_by_key(|c| (c.namespace(), c.name_any()));
    Ok(items)
}

/// Each controller's resolved `cells`, from its spec, class and the installation defaults. What
/// cannot be read (no access to the cluster-scoped layers, a missing class) leaves `None`, and
/// the table falls back to the spec.
async fn resolved_cells(t: &Target, items: &[Controller]) -> Vec<Option<i32>> {
    let defaults =
        Api::<ProvisioningDefaults>::all(t.client.clone()).get_opt(varroa_api::DEFAULTS_NAME).await.ok().flatten();
    let classes: BTreeMap<String, ControllerClass> = if items.iter().any(|c| c.spec.class_name.is_some()) {
        match Api::<ControllerClass>::all(t.client.clone()).list(&ListParams::default()).await {
            Ok(l) => l.items.into_iter().map(|c| (c.name_any(), c)).collect(),
            Err(_) => BTreeMap::new(),
        }
    } else {
        BTreeMap::new()
    };
    items
        .iter()
        .map(|c| {
            let class = c.spec.class_name.as_ref().and_then(|n| classes.get(n));
            varroa_config::settings::resolve(c, class, defaults.as_ref()).ok().and_then(|r| r.settings.cells)
        })
        .collect()
}

/// The controllers in the format asked for. `cells`: each one's resolved `cells` (may be
/// shorter than `items`). `single`: one object asked for by name (JSON and YAML print it
/// alone, not in a List).
pub fn render(
    items: &[Controller],
    cells: &[Option<i32>],
    output: Option<Output>,
    all_namespaces: bool,
    single: bool,
    now: Timestamp,
) -> Result<String> {
    match output {
        None => Ok(table(items, cells, false, all_namespaces, now).render("")),
        Some(Output::Wide) => Ok(table(items, cells, true, all_namespaces, now).render("")),
        Some(Output::Name) => Ok(items.iter().map(|c| format!("{}\n", resource_name(&c.name_any()))).collect()),
        Some(Output::Json) => print(items, single, Format::Json),
        Some(Output::Yaml) => print(items, single, Format::Yaml),
    }
}

fn print(items: &[Controller], single: bool, format: Format) -> Result<String> {
    output::print(items, single, "controller", format).map_err(|e| Error::Failed(e.to_string()))
}

fn table(items: &[Controller], cells: &[Option<i32>], wide: bool, all_namespaces: bool, now: Timestamp) -> Table {
    let mut headers = vec![];
    if all_namespaces {
        headers.push("NAMESPACE");
    }
    headers.extend(["NAME", "PHASE", "ATTENTION", "READY", "AGE"]);
    if wide {
        headers.extend(["CLASS", "PROFILE", "RECONCILED"]);
    }
    let mut t = Table::new(headers);
    for (i, c) in items.iter().enumerate() {
        let status = controller::status_of(c);
        let mut row = vec![];
        if all_namespaces {
            row.push(c.namespace().unwrap_or_default());
        }
        row.push(c.name_any());
        // No status yet: waiting for reconciliation, which the architecture calls Pending.
        row.push(status.phase.map(|p| p.to_string()).unwrap_or_else(|| "Pending".into()));
        row.push(controller::attention_words(&status).to_string());
        row.push(controller::ready_cells(c, cells.get(i).copied().flatten()));
        row.push(timefmt::age_of(now, c.metadata.creation_timestamp.as_ref().map(|t| t.0)));
        if wide {
            row.push(c.spec.class_name.clone().unwrap_or_else(|| "<none>".into()));
            row.push(
                status.resolved.as_ref().and_then(|r| r.version_profile.clone()).unwrap_or_else(|| "<none>".into()),
            );
            row.push(
                status
                    .last_reconciled_at
                    .as_ref()
                    .map(|t| timefmt::age(timefmt::since(now, t.0)))
                    .unwrap_or_else(|| "<never>".into()),
            );
        }
        t.row(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn ctrl(v: Value) -> Controller {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_table_shows_phase_attention_ready_and_age() {
        let now: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let items = vec![
            ctrl(json!({
                "apiVersion": "varroa.dev/v1alpha1", "kind": "Controller",
                "metadata": {"name": "a", "namespace": "team", "creationTimestamp": "2026-01-01T23:12:00Z"},
                "spec": {"className": "large"},
                "status": {"phase": "Connected", "readyCells": 1, "lastReconciledAt": "2026-01-01T23:59:30Z",
                           "resolved": {"versionProfile": "lts-2.492"}},
            })),
            ctrl(json!({
                "apiVersion": "varroa.dev/v1alpha1", "kind": "Controller",
                "metadata": {"name": "b", "namespace": "team", "creationTimestamp": "2026-01-01T22:00:00Z"},
                "spec": {"cells": 2},
                "status": {"phase": "Running", "readyCells": 0, "conditions": [{"type": "JenkinsBootFailed",
                  "status": "True", "reason": "CrashLoopBackOff", "message": "exit code 1",
                  "lastTransitionTime": "2026-01-01T23:00:00Z"}]},
            })),
            ctrl(json!({"apiVersion": "varroa.dev/v1alpha1", "kind": "Controller",
                "metadata": {"name": "c", "namespace": "team"}, "spec": {}})),
        ];
        assert_eq!(
            table(&items, &[Some(3)], false, false, now).render(""),
            "NAME   PHASE       ATTENTION     READY   AGE\n\
             a      Connected                 1/3     48m\n\
             b      Running     Boot failed   0/2     120m\n\
             c      Pending                   0/1     <unknown>\n"
        );
        let wide = table(&items, &[], true, true, now).render("");
        let words: Vec<Vec<&str>> = wide.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            words[0],
            ["NAMESPACE", "NAME", "PHASE", "ATTENTION", "READY", "AGE", "CLASS", "PROFILE", "RECONCILED"]
        );
        assert_eq!(words[1], ["team", "a", "Connected", "1/1", "48m", "large", "lts-2.492", "30s"]);
        assert_eq!(words[3], ["team", "c", "Pending", "0/1", "<unknown>", "<none>", "<none>", "<never>"]);
        assert_eq!(
            render(&items[..1], &[], Some(Output::Name), false, false, now).unwrap(),
            "controller.varroa.dev/a\n"
        );
    }
}
