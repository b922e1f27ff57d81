#!/usr/bin/env bash
# Regenerates devcluster's protobuf schema table from the repository alone.
#
# Usage: crates/devcluster/tools/regen-protobuf-table.sh [OUTPUT]
#   OUTPUT defaults to crates/devcluster/src/protobuf/table.rs (what `make protobuf-table` runs).
#
# It fetches exactly the crate versions gen_protobuf_table.py pins (K8S_PB_VERSION,
# K8S_OPENAPI_VERSION) from crates.io into the cargo registry, through a scratch Cargo project
# depending on `=` those versions in a fresh temporary directory, asks `cargo metadata` where their
# sources are, and runs the generator on them with python3 without writing .pyc files. Nothing
# else is downloaded. Once the crates are in the registry it works offline. OUTPUT is replaced
# only when the generator succeeds, and left untouched (mtime included) when it is unchanged, so
# running it again changes nothing. The drift test (crates/devcluster/tests/protobuf_table.rs)
# runs this script with a temporary OUTPUT and compares it with the checked-in table.
set -euo pipefail

tools=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
generator="$tools/gen_protobuf_table.py"
out=${1:-"$tools/../src/protobuf/table.rs"}
cargo=${CARGO:-cargo}
export PYTHONDONTWRITEBYTECODE=1

pin() {
    local v
    v=$(sed -n "s/^$1 = \"\([0-9][0-9A-Za-z.+-]*\)\"\$/\1/p" "$generator")
    if [[ -z "$v" ]]; then
        echo "regen-protobuf-table.sh: cannot read $1 from $generator" >&2
        exit 1
    fi
    echo "$v"
}
pb_version=$(pin K8S_PB_VERSION)
openapi_version=$(pin K8S_OPENAPI_VERSION)

scratch=$(mktemp -d "${TMPDIR:-/tmp}/devcluster-protobuf-table.XXXXXX")
tmp=
trap 'rm -rf "$scratch" ${tmp:+"$tmp"}' EXIT
mkdir "$scratch/src"
: >"$scratch/src/lib.rs"
cat >"$scratch/Cargo.toml" <<EOF
# Scratch project of regen-protobuf-table.sh: only there to fetch the generator's inputs.
[package]
name = "devcluster-protobuf-table-inputs"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
k8s-pb = "=$pb_version"
k8s-openapi = "=$openapi_version"

# Not a member of any enclosing workspace.
[workspace]
EOF

metadata() {
    "$cargo" metadata --quiet --offline --format-version 1 --manifest-path "$scratch/Cargo.toml" \
        >"$scratch/metadata.json" 2>"$scratch/metadata.err"
}
# Offline first, so that a warm registry needs no network; otherwise fetch from crates.io.
if ! metadata; then
    "$cargo" fetch --quiet --manifest-path "$scratch/Cargo.toml"
    if ! metadata; then
        cat "$scratch/metadata.err" >&2
        exit 1
    fi
fi

# The src directories of the two pinned packages, k8s-pb's first, one a line.
python3 -B - "$scratch/metadata.json" "$pb_version" "$openapi_version" >"$scratch/srcs" <<'EOF'
import json, os, sys
packages = json.load(open(sys.argv[1]))["packages"]
for name, version in (("k8s-pb", sys.argv[2]), ("k8s-openapi", sys.argv[3])):
    found = [p for p in packages if p["name"] == name and p["version"] == version]
    if not found:
        sys.exit("regen-protobuf-table.sh: cargo metadata lists no %s %s" % (name, version))
    print(os.path.join(os.path.dirname(found[0]["manifest_path"]), "src"))
EOF
{ read -r pb_src; read -r openapi_src; } <"$scratch/srcs"

python3 -B "$generator" --k8s-pb "$pb_src" --k8s-openapi "$openapi_src" >"$scratch/table.rs"
if [[ -f "$out" ]] && cmp -s "$scratch/table.rs" "$out"; then
    exit 0
fi
# Same directory as OUTPUT, then rename: OUTPUT is never seen half written.
tmp=$(mktemp "$(dirname "$out")/.table.rs.XXXXXX")
cp "$scratch/table.rs" "$tmp"
chmod 644 "$tmp"
mv -f "$tmp" "$out"
