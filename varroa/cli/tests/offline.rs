//! What needs no cluster: help, usage errors (exit 2), completions, a missing kubeconfig.

use std::process::Command;

fn varroa(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_varroa"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("HOME")
        .output()
        .expect("run varroa");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn completions_print_for_each_shell() {
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef varroa"), ("fish", "complete -c varroa")] {
        let (code, out, err) = varroa(&["completion", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains(marker), "{shell}:\n{out}");
        for word in ["get", "describe", "stop", "start", "controllers"] {
            assert!(out.contains(word), "{shell} completes {word}");
        }
    }
    assert_eq!(varroa(&["completion", "tcsh"]).0, 2);
}

#[test]
fn help_documents_the_exit_codes() {
    let (code, out, _) = varroa(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("3  timeout"), "{out}");
    let (code, out, _) = varroa(&["stop", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--wait") && out.contains("--timeout <DURATION>") && out.contains("3  timeout"), "{out}");
}

#[test]
fn usage_errors_exit_2_and_a_missing_kubeconfig_exits_1() {
    for args in [
        &[][..],
        &["get"],
        &["get", "widgets"],
        &["get", "controllers", "-o", "xml"],
        &["get", "controllers", "a", "-A"],
        &["describe", "controller"],
        &["stop"],
        &["start", "a", "--timeout", "1m"],
        &["stop", "a", "--wait", "--timeout", "soon"],
        &["frobnicate"],
    ] {
        let (code, _, err) = varroa(args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    let (code, _, err) = varroa(&["get", "controllers"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: ") && err.contains("KUBECONFIG"), "{err}");
}
