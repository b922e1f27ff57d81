//! The checked-in protobuf schema table (src/protobuf/table.rs) is exactly what its generator
//! (tools/gen_protobuf_table.py) makes of the crate versions it pins. The table is regenerated
//! into a temporary file by the script `make protobuf-table` runs (tools/regen-protobuf-table.sh),
//! which fetches those crates from crates.io unless the cargo registry already has them.

use std::path::Path;
use std::process::Command;

const REGENERATE: &str = "make protobuf-table";

#[test]
fn checked_in_protobuf_table_matches_its_generator() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = crate_dir.join("tools/regen-protobuf-table.sh");
    let checked_in_path = crate_dir.join("src/protobuf/table.rs");
    // Everything the script writes (its scratch Cargo project, the table) stays in this test's own
    // directory; only the cargo registry is shared.
    let tmp = tempfile::tempdir().expect("create a temporary directory");
    let generated_path = tmp.path().join("table.rs");
    let output = Command::new("bash")
        .arg(&script)
        .arg(&generated_path)
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "{} failed ({}):\n{}",
        script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );

    let generated = std::fs::read_to_string(&generated_path).expect("the script writes the table");
    let checked_in = std::fs::read_to_string(&checked_in_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", checked_in_path.display()));
    if generated == checked_in {
        return;
    }
    let (line, ours, theirs) = first_difference(&checked_in, &generated);
    panic!(
        "crates/devcluster/src/protobuf/table.rs is not what crates/devcluster/tools/gen_protobuf_table.py \
         generates; first difference at line {line}:\n  checked in: {ours}\n  generated:  {theirs}\n\
         Regenerate it from the repository root with `{REGENERATE}` and commit the result \
         (edit the generator, not the table)."
    );
}

/// The first line (1-based) where `a` and `b` differ, and that line of each, quoted so that
/// whitespace shows (`<end of file>` past the end of one of them).
fn first_difference(a: &str, b: &str) -> (usize, String, String) {
    let mut a_lines = a.split_inclusive('\n');
    let mut b_lines = b.split_inclusive('\n');
    let mut line = 1;
    loop {
        match (a_lines.next(), b_lines.next()) {
            (Some(x), Some(y)) if x == y => line += 1,
            (x, y) => {
                let show = |l: Option<&str>| l.map_or_else(|| "<end of file>".to_string(), |l| format!("{l:?}"));
                return (line, show(x), show(y));
            }
        }
    }
}
