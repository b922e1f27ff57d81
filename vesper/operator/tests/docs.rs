//! The operating guide's table of log targets (docs/vesper/operating.md, "Logs") against the
//! code: every target it lists is one the operator's code logs under, and every line it quotes
//! is one that code writes, so that a reader filtering `RUST_LOG` by target, or searching the
//! logs for a line, finds what the table says.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())).flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source a target's lines come from: `opkit::<module>` is that module of opkit (the line
/// itself may be formatted elsewhere in opkit), `vesper_operator` the operator's crate.
fn source_of(target: &str) -> (String, String) {
    let (module, dir) = match target.strip_prefix("opkit::") {
        Some(m) => (Some(repo().join(format!("crates/opkit/src/{m}.rs"))), repo().join("crates/opkit/src")),
        None if target == "vesper_operator" => (None, repo().join("vesper/operator/src")),
        None => panic!("docs/vesper/operating.md: unknown log target `{target}`"),
    };
    let module = module
        .map(|m| std::fs::read_to_string(&m).unwrap_or_else(|e| panic!("target `{target}`: {}: {e}", m.display())));
    let mut files = vec![];
    rust_files(&dir, &mut files);
    let all = files.iter().map(|f| std::fs::read_to_string(f).expect("read source")).collect::<Vec<_>>().join("\n");
    (module.unwrap_or_else(|| all.clone()), all)
}

/// The spans between backticks of `text`.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

#[test]
fn the_log_target_table_names_the_targets_and_lines_the_code_logs() {
    let guide = std::fs::read_to_string(repo().join("docs/vesper/operating.md")).expect("read the guide");
    let table = guide
        .split("| Target | What it logs at `info` and above |")
        .nth(1)
        .expect("the guide has the table of log targets");
    let rows: Vec<&str> = table.lines().skip(2).take_while(|l| l.starts_with('|')).collect();
    assert!(rows.len() >= 8, "the table lists the targets: {rows:?}");
    for row in rows {
        let cells: Vec<&str> = row.split(" | ").collect();
        let target = quoted(cells[0])[0];
        let (module, crate_source) = source_of(target);
        assert!(module.contains("tracing::"), "target `{target}`: its code logs nothing");
        // A quoted line is a literal the code logs; `...` stands for what is formatted in.
        for line in quoted(cells[1..].join(" | ").as_str()).into_iter().filter(|q| q.contains(' ')) {
            for piece in line.split("...").map(str::trim).filter(|p| !p.is_empty()) {
                assert!(
                    crate_source.contains(piece),
                    "docs/vesper/operating.md: target `{target}` says it logs `{line}`, but its code has no {piece:?}"
                );
            }
        }
    }
}
