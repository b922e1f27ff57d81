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
    // It names the address devcluster really listens on (not the :0 it asked for), lists every
    // log file it wrote, and, told to exit after the setup, does not claim to keep running.
    let up = stdout.lines().find(|l| l.starts_with("== devcluster is up at ")).unwrap_or_else(|| panic!("{stdout}"));
    let address = up.trim_start_matches("== devcluster is up at ").split(' ').next().unwrap_or_default();
    assert!(address.starts_with("https://127.0.0.1:") && !address.ends_with(":0"), "{up}");
    let logs: Vec<_> = std::fs::read_dir(&demo_dir)
        .expect("the demo directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    assert!(logs.len() >= 8, "a log per process: {logs:?}");
    for log in logs {
        assert!(stdout.contains(&format!("   {}", log.display())), "{} is not listed:\n{stdout}", log.display());
    }
    assert!(
        stdout.contains("DEMO_EXIT_AFTER_SETUP=1: stopping everything now")
            && !stdout.contains("keep running until Ctrl-C. In"),
        "{stdout}"
    );
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

/// `make demo` installs what the demo runs and nothing the tests alone need (no helm, moto,
/// shellcheck, registry or nextest, so no `sudo apt-get` for them); `make test` installs all.
#[test]
fn make_demo_installs_only_what_the_demo_runs() {
    let plan = |mode: &str| {
        let out = Command::new(optest::root().join("scripts/ensure-deps.sh"))
            .args(["--plan", mode])
            .current_dir(optest::root())
            .output()
            .expect("ensure-deps.sh runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect::<Vec<_>>()
    };
    let (demo, test) = (plan("demo"), plan("test"));
    for tool in ["helm", "moto", "shellcheck", "docker-registry", "cargo-nextest", "curl", "jq"] {
        assert!(
            !demo.contains(&tool.to_string()) && test.contains(&tool.to_string()),
            "{tool}: demo {demo:?}, test {test:?}"
        );
    }
    for tool in ["postgresql", "nats-server", "kubectl", "cargo"] {
        assert!(
            demo.contains(&tool.to_string()) && test.contains(&tool.to_string()),
            "{tool}: demo {demo:?}, test {test:?}"
        );
    }
    let makefile = std::fs::read_to_string(optest::root().join("Makefile")).expect("the Makefile");
    let target = |name: &str| {
        makefile
            .lines()
            .find(|l| l.starts_with(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} target"))
            .to_string()
    };
    assert_eq!(target("demo"), "demo: demo-deps build");
    assert_eq!(target("build"), "build:", "building installs nothing");
    assert!(target("test").split_whitespace().any(|d| d == "deps"), "make test installs the tests' tools");
}
