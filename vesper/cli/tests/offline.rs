//! What needs no cluster: help, usage errors (exit 2), completions, a missing kubeconfig.

use std::process::Command;

fn vesperctl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vesperctl"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("HOME")
        .output()
        .expect("run vesperctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn completions_print_for_each_shell() {
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef vesperctl"), ("fish", "complete -c vesperctl")] {
        let (code, out, err) = vesperctl(&["completion", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains(marker), "{shell}:\n{out}");
        for sub in ["create", "apply", "extend", "describe", "wait"] {
            assert!(out.contains(sub), "{shell} completes {sub}");
        }
    }
    assert_eq!(vesperctl(&["completion", "tcsh"]).0, 2);
}

#[test]
fn help_documents_the_exit_codes() {
    let (code, out, _) = vesperctl(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("3  timeout"), "{out}");
    let (code, out, _) = vesperctl(&["wait", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--for <STATE>") && out.contains("3  timeout"), "{out}");
}

#[test]
fn usage_errors_exit_2_and_a_missing_kubeconfig_exits_1() {
    assert_eq!(vesperctl(&[]).0, 2);
    assert_eq!(vesperctl(&["get", "a", "-A"]).0, 2);
    assert_eq!(vesperctl(&["extend", "a", "--by", "1h", "--ttl", "2h"]).0, 2);
    assert_eq!(vesperctl(&["extend", "a", "--by", "soon"]).0, 2);
    let (code, _, err) = vesperctl(&["list"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: ") && err.contains("KUBECONFIG"), "{err}");
}
