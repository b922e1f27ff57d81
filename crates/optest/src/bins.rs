//! For the end-to-end tests of both operators: the workspace's binaries, as its test build makes
//! them.
//!
//! A test that runs another package's binary (the demo's `devcluster`, the mite a pod runs)
//! cannot name it with `CARGO_BIN_EXE_*`, which covers its own package only. Building it with
//! `cargo build -p <package>` resolves features for that package alone, so in a clean target
//! directory it compiled some eighty crates (kube and k8s-openapi among them) a second time, and
//! a test spent minutes of its time-out on a compiler. [`workspace_bins`] asks for the build
//! `cargo nextest run --workspace` (and `make test`) already made, `cargo test --no-run
//! --workspace`, and reads the binaries' paths from cargo's own messages: when the build is
//! fresh it costs a second and the binaries are exactly the ones the other tests run. (This was
//! opkit's `testing` module.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The executables of the workspace's binary targets named in `names` (`devcluster`,
/// `varroa-mite`, ...), built by `cargo test --no-run --workspace` into the target directory and
/// profile of the calling test binary, from this workspace. Cargo's own lock on the target directory serialises this with
/// any other build. Panics, with cargo's output, when the build fails or a name is not a binary
/// of the workspace: this is for tests.
pub fn workspace_bins(names: &[&str]) -> BTreeMap<String, PathBuf> {
    let exe = std::env::current_exe().expect("the test binary's path");
    // <target>/<profile dir>/deps/<test binary>
    let profile_dir = exe.parent().and_then(Path::parent).expect("the test binary is in <target>/<profile>/deps");
    let target_dir = profile_dir.parent().expect("the target directory");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = Command::new(&cargo);
    // Not the variables cargo and nextest set for this test process: build scripts track some
    // (ring's reruns when CARGO_MANIFEST_DIR changes), so passing them on made the build stale.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let set_for_tests = ["CARGO_PKG_", "CARGO_BIN_EXE_", "NEXTEST"].iter().any(|p| key.starts_with(p))
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
            ]
            .contains(&key.as_str())
            || key == "LD_LIBRARY_PATH"
            || key == "RUST_RECURSION_COUNT";
        if set_for_tests {
            cmd.env_remove(&key);
        }
    }
    cmd.current_dir(crate::root())
        .args(["test", "--no-run", "--workspace", "--message-format=json-render-diagnostics"])
        .arg("--target-dir")
        .arg(target_dir);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some(other) => {
            cmd.args(["--profile", other]);
        }
        None => panic!("no profile directory in {}", exe.display()),
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cargo} test --no-run: {e}"));
    assert!(out.status.success(), "cargo test --no-run --workspace failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let built = bin_executables(&String::from_utf8_lossy(&out.stdout));
    names
        .iter()
        .map(|name| {
            let path = built.get(*name).unwrap_or_else(|| {
                panic!("{name} is not a binary the workspace's test build makes: {:?}", built.keys())
            });
            assert!(path.is_file(), "{} was not built", path.display());
            (name.to_string(), path.clone())
        })
        .collect()
}

/// Binary target name to executable, from cargo's `--message-format=json` lines.
fn bin_executables(messages: &str) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for line in messages.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let is_bin = msg["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "bin"));
        let test_build = msg["profile"]["test"].as_bool().unwrap_or(false);
        if let (true, false, Some(name), Some(exe)) =
            (is_bin, test_build, msg["target"]["name"].as_str(), msg["executable"].as_str())
        {
            out.insert(name.to_string(), PathBuf::from(exe));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_binaries_not_their_unit_tests_or_libraries() {
        let messages = [
            r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"opkit"},"profile":{"test":false},"executable":null}"#,
            r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"varroa-mite"},"profile":{"test":true},"executable":"/t/debug/deps/varroa_mite-1"}"#,
            r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"varroa-mite"},"profile":{"test":false},"executable":"/t/debug/varroa-mite"}"#,
            r#"{"reason":"compiler-message","message":{}}"#,
            "not json",
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        let bins = bin_executables(&messages);
        assert_eq!(bins.len(), 1, "{bins:?}");
        assert_eq!(bins["varroa-mite"], PathBuf::from("/t/debug/varroa-mite"));
    }
}
