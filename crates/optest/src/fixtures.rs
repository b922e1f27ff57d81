//! The status fixtures of both operators (`tests/fixtures/status/*.yaml`): one YAML file per case
//! holding the inputs of an operator's pure status step and `expect`, what `kubectl get -o yaml`
//! should then show. This module reads the files and compares; each operator's test runs its own
//! status step on the inputs.
//!
//! `expect.status` is compared as a subset of the computed status: conditions (any list whose
//! entries all have a `type`) matched by `type`, `absent: true` for one that must not be there;
//! `null` means absent; a key `<field>Contains` lists fragments of `<field>`. `expect.events` is
//! the exact list of Events the pass records, in order, each compared the same way (reason,
//! `type` Normal or Warning, message fragments). Every difference is reported with the fixture's
//! file name and the path of the field that differs.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The `*.yaml` files of `dir`, sorted.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// `v` as a `T`; fails naming the file and what it is.
pub fn parse<T: DeserializeOwned>(v: &Value, what: &str, file: &str) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{file}: {what} does not parse: {e}"))
}

/// The case's `key` as a `T`, `None` when absent or null.
pub fn field<T: DeserializeOwned>(case: &Value, key: &str, file: &str) -> Option<T> {
    case.get(key).filter(|v| !v.is_null()).map(|v| parse(v, &format!("`{key}`"), file))
}

/// The string `key` of `v`, which is required.
pub fn text<'a>(v: &'a Value, key: &str, file: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_else(|| panic!("{file}: `{key}` (a string) is required"))
}

/// An Event a pass records, as `expect.events` spells it.
pub fn event(reason: &str, warning: bool, message: &str) -> Value {
    json!({"reason": reason, "type": if warning { "Warning" } else { "Normal" }, "message": message})
}

/// What a wanted list's entries are matched by, as Kubernetes lists are keyed: `type` when every
/// entry has one (conditions), else `name` (containers, ports, volumes, env). `None`: the list is
/// compared whole.
fn list_key(want: &[Value]) -> Option<&'static str> {
    if want.is_empty() {
        return None;
    }
    ["type", "name"].into_iter().find(|k| want.iter().all(|x| x.get(*k).is_some()))
}

/// Compares `want` as a subset of `got`, pushing one line per difference, each naming the path.
/// Lists of entries with a `type` (or else a `name`) are matched by it.
pub fn subset(path: &str, want: &Value, got: &Value, diffs: &mut Vec<String>) {
    match (want, got) {
        (Value::Null, Value::Null) => {}
        (Value::Null, g) => diffs.push(format!("{path}: expected absent, got {g}")),
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                if let Some(base) = k.strip_suffix("Contains") {
                    let actual = g.get(base).and_then(Value::as_str).unwrap_or_default();
                    let frags: Vec<&str> = match wv {
                        Value::String(s) => vec![s.as_str()],
                        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                        _ => vec![],
                    };
                    for f in frags {
                        if !actual.contains(f) {
                            diffs.push(format!("{path}.{base}: expected to contain {f:?}, got {actual:?}"));
                        }
                    }
                    continue;
                }
                subset(&format!("{path}.{k}"), wv, g.get(k).unwrap_or(&Value::Null), diffs);
            }
        }
        (Value::Array(w), Value::Array(g)) if list_key(w).is_some() => {
            let key = list_key(w).unwrap_or("type");
            for wc in w {
                let t = &wc[key];
                let absent = wc.get("absent") == Some(&Value::Bool(true));
                match g.iter().find(|gc| gc.get(key) == Some(t)) {
                    Some(_) if absent => diffs.push(format!("{path}: expected no entry of {key} {t}, found one")),
                    None if absent => {}
                    Some(gc) => subset(&format!("{path}[{key}={}]", t.as_str().unwrap_or("?")), wc, gc, diffs),
                    None => diffs.push(format!("{path}: no entry of {key} {t}")),
                }
            }
        }
        (w, g) if w == g => {}
        (w, g) => diffs.push(format!("{path}: expected {w}, got {g}")),
    }
}

/// The differences between a case's `expect` and what the pass computed: the status (as JSON)
/// and the Events ([`event`]s).
pub fn check(file: &str, case: &Value, status: &Value, events: &[Value]) -> Vec<String> {
    let mut diffs = vec![];
    let expect = case.get("expect").unwrap_or_else(|| panic!("{file}: `expect` is required"));
    let want = expect.get("status").unwrap_or_else(|| panic!("{file}: `expect.status` is required"));
    subset("status", want, status, &mut diffs);
    let want_events = expect
        .get("events")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{file}: `expect.events` (a list, [] for none) is required"));
    let got_reasons: Vec<&str> = events.iter().map(|e| e["reason"].as_str().unwrap_or("?")).collect();
    let want_reasons: Vec<&str> = want_events.iter().map(|e| e["reason"].as_str().unwrap_or("?")).collect();
    if got_reasons != want_reasons {
        diffs.push(format!("events: expected reasons {want_reasons:?}, got {got_reasons:?}"));
    } else {
        for (i, (w, got)) in want_events.iter().zip(events).enumerate() {
            subset(&format!("events[{i}]"), w, got, &mut diffs);
        }
    }
    diffs
}

/// Runs every status fixture of `dir` (at least `at_least` of them) through `run`, which returns
/// the computed status (as JSON) and Events ([`event`]s); fails listing every difference of
/// every fixture, each with its file name.
pub fn every_case_holds(dir: &Path, at_least: usize, run: impl Fn(&Value, &str) -> (Value, Vec<Value>)) {
    every_case(dir, at_least, |case, file| {
        let (status, events) = run(case, file);
        check(file, case, &status, &events)
    })
}

/// Reads every fixture of `dir` (at least `at_least` of them) and hands each, with its file
/// name, to `differences`; fails listing every difference of every fixture, each with its file
/// name. The build fixtures compare with [`subset`] through this.
pub fn every_case(dir: &Path, at_least: usize, differences: impl Fn(&Value, &str) -> Vec<String>) {
    let files = files(dir);
    assert!(
        files.len() >= at_least,
        "expected at least {at_least} fixtures in {}, found {}",
        dir.display(),
        files.len()
    );
    let mut failures = vec![];
    for path in &files {
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("?").to_string();
        let raw = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {file}: {e}"));
        let case: Value = serde_saphyr::from_str(&raw).unwrap_or_else(|e| panic!("{file}: not YAML: {e}"));
        for d in differences(&case, &file) {
            failures.push(format!("{file}: {d}"));
        }
    }
    assert!(failures.is_empty(), "{} difference(s):\n{}", failures.len(), failures.join("\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_field_that_differs() {
        let case = json!({"expect": {
            "status": {"phase": "Ready", "gone": null, "messageContains": ["a", "z"],
                       "conditions": [{"type": "Ready", "status": "True"}, {"type": "Stale", "absent": true}]},
            "events": [{"reason": "Ready", "type": "Normal"}],
        }});
        let got = json!({"phase": "Pending", "gone": 1, "message": "abc",
                         "conditions": [{"type": "Ready", "status": "False"}, {"type": "Stale"}]});
        let diffs = check("f.yaml", &case, &got, &[event("Ready", true, "m")]);
        assert_eq!(
            diffs,
            [
                "status.phase: expected \"Ready\", got \"Pending\"",
                "status.gone: expected absent, got 1",
                "status.message: expected to contain \"z\", got \"abc\"",
                "status.conditions[type=Ready].status: expected \"True\", got \"False\"",
                "status.conditions: expected no entry of type \"Stale\", found one",
                "events[0].type: expected \"Normal\", got \"Warning\"",
            ]
        );
        let diffs = check("f.yaml", &case, &got, &[]);
        assert!(diffs.contains(&"events: expected reasons [\"Ready\"], got []".to_string()), "{diffs:?}");
    }

    #[test]
    fn lists_of_named_entries_are_matched_by_name_and_others_whole() {
        let want = json!({"containers": [{"name": "app", "image": "shop:2"}], "args": ["a"]});
        let got = json!({"containers": [{"name": "side", "image": "x"}, {"name": "app", "image": "shop:1", "ports": []}],
            "args": ["a", "b"]});
        let mut diffs = vec![];
        subset("spec", &want, &got, &mut diffs);
        assert_eq!(
            diffs,
            [
                "spec.containers[name=app].image: expected \"shop:2\", got \"shop:1\"",
                "spec.args: expected [\"a\"], got [\"a\",\"b\"]"
            ]
        );
    }
}
