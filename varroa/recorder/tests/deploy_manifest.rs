//! deploy/varroa/recorder.yaml runs this binary with flags it knows (its Deployment's args, given
//! to the real `varroa-recorder` with `--help` last, parse: an unknown or misspelt flag is an
//! error before the help is printed), they name files the Deployment mounts, and the recorder
//! and the gateway (deploy/varroa/gateway.yaml) read the same log store: the same Secret's `url`
//! as `VARROA_LOG_STORE`, the same Secret's `credentials` as the credentials file, so the
//! recorder deletes logs from the bucket the gateway writes them to.

use std::process::Command;

use serde_json::Value;

/// The first container of the Deployment in `deploy/varroa/<file>`, and the pod's volumes.
fn container(file: &str) -> (Value, Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/varroa").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for doc in text.split("\n---\n") {
        let Ok(v) = serde_saphyr::from_str::<Value>(doc) else { continue };
        if v["kind"] == "Deployment" {
            let spec = &v["spec"]["template"]["spec"];
            return (spec["containers"][0].clone(), spec["volumes"].clone());
        }
    }
    panic!("no Deployment in {}", path.display());
}

fn strings(x: &Value) -> Vec<String> {
    x.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
}

fn mounts(c: &Value) -> Vec<(String, String)> {
    c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| Some((m["name"].as_str()?.to_owned(), m["mountPath"].as_str()?.to_owned())))
        .collect()
}

/// What the container's log store is: the Secret and key of `VARROA_LOG_STORE`, and the Secret
/// and key mounted where `--log-store-credentials-file` points.
fn log_store(file: &str) -> ((String, String), (String, String)) {
    let (c, volumes) = container(file);
    let env = c["env"].as_array().expect("env").iter().find(|e| e["name"] == "VARROA_LOG_STORE");
    let r = &env.unwrap_or_else(|| panic!("{file}: no VARROA_LOG_STORE"))["valueFrom"]["secretKeyRef"];
    let url = (r["name"].as_str().unwrap().to_owned(), r["key"].as_str().unwrap().to_owned());
    let args = strings(&c["args"]);
    let file_arg = args
        .iter()
        .find_map(|a| a.strip_prefix("--log-store-credentials-file="))
        .unwrap_or_else(|| panic!("{file}: no --log-store-credentials-file: {args:?}"));
    let (volume, dir) = mounts(&c)
        .into_iter()
        .find(|(_, dir)| file_arg.starts_with(&format!("{dir}/")))
        .unwrap_or_else(|| panic!("{file}: {file_arg} is not under a mount"));
    let item = file_arg.strip_prefix(&format!("{dir}/")).unwrap();
    let v = volumes.as_array().unwrap().iter().find(|v| v["name"] == volume.as_str()).expect("the volume");
    let key = v["secret"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["path"] == item)
        .and_then(|i| i["key"].as_str())
        .expect("the credentials file is an item of a Secret volume");
    (url, (v["secret"]["secretName"].as_str().unwrap().to_owned(), key.to_owned()))
}

#[test]
fn the_deployments_args_are_flags_the_recorder_knows_and_name_mounted_files() {
    let (c, _) = container("recorder.yaml");
    let args = strings(&c["args"]);
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_varroa-recorder")).args(&args).arg("--help").output().expect("runs");
    assert!(out.status.success(), "varroa-recorder {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let dirs: Vec<String> = mounts(&c).into_iter().map(|(_, d)| d).collect();
    for a in &args {
        let Some((flag, value)) = a.split_once('=') else { continue };
        if flag.ends_with("-file") {
            assert!(dirs.iter().any(|m| value.starts_with(&format!("{m}/"))), "{flag}={value} is not under a mount");
        }
    }
}

#[test]
fn the_recorder_prunes_logs_in_the_store_the_gateway_writes() {
    let recorder = log_store("recorder.yaml");
    let gateway = log_store("gateway.yaml");
    assert_eq!(recorder, gateway, "the same bucket and the same credentials");
    assert_eq!(recorder.0, ("varroa-log-store".to_owned(), "url".to_owned()));
    assert_eq!(recorder.1, ("varroa-log-store".to_owned(), "credentials".to_owned()));
}
