//! deploy/varroa/gateway.yaml runs this binary with flags it knows: its Deployment's args,
//! given to the real `varroa-gateway` with `--help` last, parse (an unknown or misspelt flag is
//! an error before the help is printed), and they name the files the Deployment mounts.

use std::process::Command;

fn deployment_args() -> (Vec<String>, Vec<String>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/varroa/gateway.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/varroa/gateway.yaml");
    for doc in text.split("\n---\n") {
        let Ok(v) = serde_saphyr::from_str::<serde_json::Value>(doc) else { continue };
        if v["kind"] == "Deployment" {
            let c = &v["spec"]["template"]["spec"]["containers"][0];
            let strings = |x: &serde_json::Value| -> Vec<String> {
                x.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
            };
            let mounts: Vec<String> = c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["mountPath"].as_str().map(str::to_string))
                .collect();
            return (strings(&c["args"]), mounts);
        }
    }
    panic!("no Deployment in {}", path.display());
}

#[test]
fn the_deployments_args_are_flags_the_gateway_knows_and_name_mounted_files() {
    let (args, mounts) = deployment_args();
    assert!(args.iter().any(|a| a.starts_with("--tls-ca=")), "{args:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_varroa-gateway")).args(&args).arg("--help").output().expect("runs");
    assert!(out.status.success(), "varroa-gateway {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    for a in &args {
        let Some((flag, value)) = a.split_once('=') else { continue };
        if flag.starts_with("--tls-") || flag.ends_with("-file") {
            assert!(
                mounts.iter().any(|m| value.starts_with(&format!("{m}/"))),
                "{flag}={value} is not under a mount: {mounts:?}"
            );
        }
    }
}
