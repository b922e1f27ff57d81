//! `make demo`, in its short mode: the previews reach Ready, Varroa's two controllers reach
//! Connected through their real mites (devcluster's process runtime runs the Jenkins pods, with
//! NATS and the gateway beside them), and nothing it started is left running afterwards.

use std::process::Command;

/// Whether a process runs (a zombie, reaped by nobody yet, does not count).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

#[test]
fn demo_brings_previews_to_ready_and_controllers_to_connected_and_cleans_up() {
    // The demo runs the workspace's binaries, from the workspace's test build (the one
    // `make test` made: fresh, this builds nothing).
    let bins = optest::bins::workspace_bins(&[
        "devcluster",
        "vesper-operator",
        "vesperctl",
        "varroa-operator",
        "varroa",
        "varroa-gateway",
        "varroa-mite",
        "varroa-jenkins-double",
        "varroa-recorder",
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    // The binaries are found through CARGO_TARGET_DIR (here a link to this build's target
    // directory, so that the path the demo names is this one), and the default port, taken by
    // someone else (a listener of this test stands in for 6443), gives way to a free one.
    let target = bins["vesper-operator"].parent().and_then(|d| d.parent()).expect("the target directory").to_path_buf();
    let linked = dir.path().join("linked-target");
    std::os::unix::fs::symlink(&target, &linked).expect("link the target directory");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port to hold");
    let taken = taken.local_addr().expect("its address").to_string();
    let demo_dir = dir.path().join("demo");
    let out = Command::new(optest::root().join("scripts/demo.sh"))
        .current_dir(optest::root())
        .env("DEMO_EXIT_AFTER_SETUP", "1")
        .env("DEMO_DIR", &demo_dir)
        .env_remove("DEVCLUSTER_LISTEN")
        .env("DEMO_DEFAULT_LISTEN", &taken)
        .env("CARGO_TARGET_DIR", &linked)
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("== {taken} is taken")), "it says the port is taken:\n{stdout}");
    assert!(
        stdout.contains(&format!("binaries from {}/debug", linked.display())),
        "it runs the binaries of CARGO_TARGET_DIR:\n{stdout}"
    );
    for preview in ["shop-pr-42", "docs-pr-7"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(preview) && l.contains("https://"))
            .unwrap_or_else(|| panic!("{preview} not listed:\n{stdout}"));
        assert!(line.contains(" Ready "), "{preview} is not Ready: {line}");
    }
    // Varroa's two example controllers are up, as `varroa get controllers -A` shows them (a
    // table with a PHASE column), and team-a's resolved configuration is shown.
    let varroa = stdout
        .split("== Two Jenkins controllers")
        .nth(1)
        .unwrap_or_else(|| panic!("no Varroa controllers section:\n{stdout}"));
    let header = varroa
        .lines()
        .find(|l| l.split_whitespace().take(2).eq(["NAMESPACE", "NAME"]))
        .unwrap_or_else(|| panic!("no `varroa get controllers -A` table:\n{varroa}"));
    // Cells can be empty (ATTENTION): read the PHASE cell at the header's column.
    let at = header.find("PHASE").unwrap_or_else(|| panic!("no PHASE column: {header}"));
    for name in ["team-a", "sandbox"] {
        let row = varroa
            .lines()
            .find(|l| l.split_whitespace().take(2).eq(["team-a", name]))
            .unwrap_or_else(|| panic!("controller team-a/{name} not listed:\n{varroa}"));
        let phase = row.get(at..).and_then(|r| r.split_whitespace().next());
        assert_eq!(phase, Some("Connected"), "team-a/{name}: {row}");
    }
    assert!(varroa.contains("storage.size"), "the render excerpt is missing:\n{varroa}");
    // The builds it runs on team-a went through claims, the mite, the gateway and the recorder:
    // `varroa builds` lists the five, numbered 1 to 5, finished; the log is read from the store.
    let builds = varroa.split("== Builds on team-a").nth(1).unwrap_or_else(|| panic!("no builds section:\n{varroa}"));
    let mut numbers: Vec<u32> = builds
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("team-a/app") && l.contains("SUCCESS"))
        .filter_map(|l| l.split_whitespace().nth(1).and_then(|n| n.trim_start_matches('#').parse().ok()))
        .collect();
    numbers.sort();
    assert_eq!(numbers, [1, 2, 3, 4, 5], "varroa builds lists the five builds:\n{builds}");
    assert!(builds.contains("Tests run: 48") && builds.contains("Finished: SUCCESS"), "the log of #5:\n{builds}");
    // Everything it started (it records each pid) is gone.
    let pids = std::fs::read_to_string(demo_dir.join("pids")).expect("the demo records the pids it starts");
    let pids: Vec<&str> = pids.split_whitespace().collect();
    assert_eq!(
        pids.len(),
        8,
        "devcluster, vesper-operator, nats-server, varroa-gateway, postgres, varroa-recorder, the update site and varroa-operator: {pids:?}"
    );
    for pid in pids {
        assert!(!running(pid), "process {pid} started by the demo still runs");
    }
}
