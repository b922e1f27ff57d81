//! What needs no cluster and no database: help, usage errors (exit 2), completions, a missing
//! kubeconfig, a missing database URL.

use std::process::Command;

fn varroa(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_varroa"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("HOME")
        .env_remove("VARROA_DATABASE_URL")
        .env_remove("VARROA_DATABASE_PASSWORD_FILE")
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
        for word in ["get", "describe", "stop", "start", "controllers", "builds", "build", "activity", "since"] {
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
        &["builds"],
        &["builds", "ci", "--limit", "0"],
        &["builds", "ci", "--limit", "10001"],
        &["builds", "ci", "-o", "name"],
        &["build", "ci", "app"],
        &["build", "ci", "app", "0"],
        &["build", "ci", "app", "seven"],
        &["activity", "--since", "soon"],
        &["activity", "--since", "1w"],
        &["activity", "ci", "-A"],
    ] {
        let (code, _, err) = varroa(args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    let (code, _, err) = varroa(&["get", "controllers"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: ") && err.contains("KUBECONFIG"), "{err}");
}

#[test]
fn the_build_record_commands_need_a_database_url_not_a_cluster() {
    for args in [&["builds", "ci"][..], &["build", "ci", "team/app", "7"], &["activity", "-A"]] {
        let (code, out, err) = varroa(args);
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {err}");
        assert_eq!(
            err,
            "error: no build record store to read: set --database-url or VARROA_DATABASE_URL to the recorder's \
             PostgreSQL database (postgres://user@host:5432/dbname), with --database-password-file or \
             VARROA_DATABASE_PASSWORD_FILE if it needs a password\n",
            "{args:?}"
        );
    }
    // A name that cannot exist is refused before anything is read.
    let (code, _, err) = varroa(&["build", "Ci", "team/app", "7"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: invalid controller name \"Ci\""), "{err}");
    let (code, out, _) = varroa(&["builds", "--help"]);
    assert_eq!(code, 0);
    for flag in ["--database-url <URL>", "VARROA_DATABASE_URL", "--database-password-file", "--cluster", "--job"] {
        assert!(out.contains(flag), "{flag}:\n{out}");
    }
    let (_, out, _) = varroa(&["activity", "--help"]);
    assert!(out.contains("30s, 15m, 1h, 2d"), "{out}");
}
