//! `get [NAME]` and `list [-A]`: a table (NAME, PHASE, URL, EXPIRES IN, AGE; NAMESPACE first
//! with -A; `-o wide` adds the image, ready pods, TTL and the namespace the preview runs in), or
//! `-o json|yaml|name`. JSON and YAML are the objects as stored, without `managedFields` (as
//! kubectl shows them); several previews are a `v1` `List`.

use crate::cli::{GetArgs, ListArgs, Output};
use crate::client::Target;
use crate::error::{Error, Result};
use crate::preview::{self, resource_name};
use clikit::output::{self, Format};
use clikit::table::Table;
use clikit::timefmt;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use vesper_api::PreviewEnvironment;

pub async fn get(t: &Target, args: GetArgs) -> Result<()> {
    match args.name {
        Some(name) => {
            let pe = preview::get(t, &name).await?;
            out!("{}", render(&[pe], args.output, false, true)?);
            Ok(())
        }
        None => {
            list(t, ListArgs { all_namespaces: args.all_namespaces, selector: args.selector, output: args.output })
                .await
        }
    }
}

pub async fn list(t: &Target, args: ListArgs) -> Result<()> {
    let api: Api<PreviewEnvironment> =
        if args.all_namespaces { Api::all(t.client.clone()) } else { Api::namespaced(t.client.clone(), &t.namespace) };
    let mut lp = ListParams::default();
    if let Some(s) = &args.selector {
        lp = lp.labels(s);
    }
    let where_ = if args.all_namespaces { "any namespace".to_string() } else { format!("namespace {}", t.namespace) };
    let mut items = match api.list(&lp).await {
        Ok(l) => l.items,
        Err(e) if clikit::apierror::code(&e) == Some(404) => return Err(preview::crd_missing(t)),
        Err(e) => return Err(Error::kube(format!("listing previews in {where_}"))(e)),
    };
    items.sort_by_key(|pe| (pe.namespace(), pe.name_any()));
    if items.is_empty() && matches!(args.output, None | Some(Output::Wide)) {
        eprintln!("No previews found in {where_}.");
        return Ok(());
    }
    out!("{}", render(&items, args.output, args.all_namespaces, false)?);
    Ok(())
}

/// The previews in the format asked for. `single`: one object asked for by name (JSON and YAML
/// print the object itself, not a List).
pub fn render(
    items: &[PreviewEnvironment],
    output: Option<Output>,
    all_namespaces: bool,
    single: bool,
) -> Result<String> {
    let now = Timestamp::now();
    match output {
        None => Ok(table(items, false, all_namespaces, now).render("")),
        Some(Output::Wide) => Ok(table(items, true, all_namespaces, now).render("")),
        Some(Output::Name) => Ok(items.iter().map(|pe| format!("{}\n", resource_name(&pe.name_any()))).collect()),
        Some(Output::Json) => print(items, single, Format::Json),
        Some(Output::Yaml) => print(items, single, Format::Yaml),
    }
}

fn print(items: &[PreviewEnvironment], single: bool, format: Format) -> Result<String> {
    output::print(items, single, "preview", format).map_err(|e| Error::Failed(e.to_string()))
}

/// "in 23h12m" as a column: `23h12m`, `expired`, `deleting`, `<unknown>`.
pub fn expires_in(pe: &PreviewEnvironment, now: Timestamp) -> String {
    if pe.metadata.deletion_timestamp.is_some() {
        return "deleting".into();
    }
    match preview::expires_at(pe) {
        Some(at) if at > now => timefmt::until(timefmt::since(at, now)),
        Some(_) => "expired".into(),
        None => "<unknown>".into(),
    }
}

fn table(items: &[PreviewEnvironment], wide: bool, all_namespaces: bool, now: Timestamp) -> Table {
    let mut headers = vec![];
    if all_namespaces {
        headers.push("NAMESPACE");
    }
    headers.extend(["NAME", "PHASE", "URL", "EXPIRES IN", "AGE"]);
    if wide {
        headers.extend(["IMAGE", "READY", "TTL", "RUNS IN"]);
    }
    let mut t = Table::new(headers);
    for pe in items {
        let status = pe.status.clone().unwrap_or_default();
        let mut row = vec![];
        if all_namespaces {
            row.push(pe.namespace().unwrap_or_default());
        }
        row.push(pe.name_any());
        row.push(status.phase.map(|p| p.to_string()).unwrap_or_else(|| "<none>".into()));
        row.push(status.url.clone().unwrap_or_else(|| "<none>".into()));
        row.push(expires_in(pe, now));
        row.push(timefmt::age_of(now, pe.metadata.creation_timestamp.as_ref().map(|t| t.0)));
        if wide {
            row.push(pe.spec.image.clone());
            row.push(format!("{}/{}", status.ready_replicas.unwrap_or(0), pe.spec.replicas));
            row.push(pe.spec.ttl.clone());
            row.push(status.namespace.clone().unwrap_or_else(|| "<none>".into()));
        }
        t.row(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pe(v: Value) -> PreviewEnvironment {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_table_shows_phase_url_expiry_and_age() {
        let now: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let items = vec![
            pe(json!({
                "apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
                "metadata": {"name": "pr-1", "namespace": "team", "creationTimestamp": "2026-01-01T23:12:00Z", "generation": 1},
                "spec": {"image": "app:1", "ttl": "24h"},
                "status": {"phase": "Ready", "url": "https://pr-1.example.com", "expiresAt": "2026-01-02T23:12:00Z",
                           "observedGeneration": 1, "readyReplicas": 1, "namespace": "vesper-team-pr-1-abc"},
            })),
            pe(json!({
                "apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
                "metadata": {"name": "pr-2", "namespace": "team", "creationTimestamp": "2026-01-01T22:00:00Z", "generation": 1},
                "spec": {"image": "app:2", "ttl": "90m"},
            })),
        ];
        let out = table(&items, false, false, now).render("");
        assert_eq!(
            out,
            "NAME   PHASE    URL                        EXPIRES IN   AGE\n\
             pr-1   Ready    https://pr-1.example.com   23h12m       48m\n\
             pr-2   <none>   <none>                     expired      120m\n"
        );
        let wide = table(&items, true, true, now).render("");
        assert!(wide.starts_with("NAMESPACE   NAME"), "{wide}");
        assert!(wide.contains("app:1   1/1     24h   vesper-team-pr-1-abc"), "{wide}");
        assert_eq!(
            render(&items, Some(Output::Name), false, false).unwrap(),
            "previewenvironment.vesper.eventide.dev/pr-1\npreviewenvironment.vesper.eventide.dev/pr-2\n"
        );
    }
}
